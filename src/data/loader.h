/* loader.h — batches from an mp_dataset, prepared by a background thread
 * (triple buffering) while the caller trains on the current one.
 *
 * Order and augmentation are functions of (seed, epoch, sample index) only,
 * so results never depend on thread timing. Nothing is allocated per batch.
 * The dataset must outlive the loader. */
#ifndef MP_DATA_LOADER_H
#define MP_DATA_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "data/dataset.h"

/* mp_loader_opts, mp_loader and its functions are public (mixprec/data.h). */

#endif
