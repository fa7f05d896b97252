/** @file mixprec.h
 * The public C API of libmixprec: mixed-precision training of CNNs and GANs
 * (fp32, tf32, fp16, bf16 with fp32 master weights, loss scaling, per-op
 * precision policies) on CPUs and NVIDIA GPUs.
 *
 * Objects are opaque handles with create/destroy pairs; options are structs
 * passed with designated initializers (a zero field takes the default named
 * beside it); every fallible call returns an mp_status and leaves one readable
 * line in mp_last_error(). A program includes this header alone:
 *
 *   graph (mixprec/graph.h) -> precision policy (mixprec/precision.h)
 *   -> optimizer (mixprec/optim.h) -> trainer: mp_trainer_step(batch)
 *   (mixprec/train.h) over data (mixprec/data.h); checkpoints and
 *   evaluation in mixprec/train.h; the model zoo in mixprec/models.h; ONNX
 *   import and export in mixprec/onnx.h; per-tensor fp16/bf16 range
 *   statistics in mixprec/numerics.h. */
#ifndef MIXPREC_H
#define MIXPREC_H

/** Version of the library this header belongs to. */
#define MP_VERSION_STRING "0.2.0"

#include "mixprec/core.h"
#include "mixprec/graph.h"
#include "mixprec/plan.h"
#include "mixprec/precision.h"
#include "mixprec/optim.h"
#include "mixprec/data.h"
#include "mixprec/penalty.h"
#include "mixprec/train.h"
#include "mixprec/numerics.h"
#include "mixprec/models.h"
#include "mixprec/dist.h"
#include "mixprec/onnx.h"

#endif /* MIXPREC_H */
