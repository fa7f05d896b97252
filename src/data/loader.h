/* loader.h — batches from an mp_dataset, prepared by a background thread
 * (triple buffering) and its pool of sample workers while the caller trains
 * on the current one.
 *
 * Order and augmentation are functions of (seed, epoch, sample index) only,
 * so results never depend on thread timing or the number of workers. Batch
 * buffers are allocated once; decoding a file (datasets decoded per batch)
 * and random-resized crops allocate per sample. The dataset must outlive
 * the loader. */
#ifndef MP_DATA_LOADER_H
#define MP_DATA_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "data/dataset.h"

/* mp_loader_opts, mp_loader and its functions are public (mixprec/data.h). */

#endif
