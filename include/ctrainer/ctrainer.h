/* ctrainer's public API in one include: `#include <ctrainer/ctrainer.h>`.
 *
 * Installed, every public header lives under <prefix>/include/ctrainer/ with the source tree's layout
 * (core/tensor.h, trainer/trainer.h, ...) and the headers include each other as "core/tensor.h". So a
 * program compiles with both -I<prefix>/include (for <ctrainer/ctrainer.h>) and
 * -I<prefix>/include/ctrainer (for what it includes); `pkg-config --cflags ctrainer` and the CMake
 * targets ctrainer::ctrainer / ctrainer::ctrainer_static give both. The includes below resolve
 * against the second directory, or next to this file, so this header also compiles alone with only
 * -I<prefix>/include/ctrainer. In the build tree the source root plays that role.
 *
 * Left out here (include them yourself when needed): core/format/h5io.h (tensors in HDF5 files; it needs
 * HDF5's headers), core/rng_philox.h (the generator's kernel, for CUDA code), core/format/crc32c.h, and
 * the Trainer's machinery that its tests reach into (checkpoint/checkpoint_io.h, checkpoint_async.h,
 * checkpoint_zero.h, async_eval.h). Never installed: *_impl.h, *_tmpl.h, backends/
 * (kernels), callbacks/pyrepr.h, data/hdf5_util.h and core/format/h5_image.h (internal helpers).
 * callbacks/tensorboard.h and report/plot.h are here in every build; in one without TensorBoard or
 * training curves (ctrainer_TENSORBOARD / ctrainer_PLOT in the CMake package, the tensorboard / plot
 * variables of ctrainer.pc) their functions answer CT_ERR_UNSUPPORTED. */
#ifndef CTRAINER_CTRAINER_H
#define CTRAINER_CTRAINER_H

#include "ctrainer_version.h"

/* core: status codes and errors, tensors, devices, randomness, JSON helpers, logging, ops */
#include "core/arena.h"
#include "core/device.h"
#include "core/format/safetensors.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/log.h"
#include "core/ops/ops.h"
#include "core/ops/ops_attn.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/util.h"
#include "core/vtable.h"

/* models: modules, parameters, built-in layers and losses */
#include "model/layers.h"
#include "model/loss.h"
#include "model/model.h"
#include "model/module.h"
#include "model/params.h"

/* optimizers, schedules, clipping, ZeRO-1 */
#include "dist/zero.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"

/* data: datasets, loaders, samplers, transforms, tokenizer, converters */
#include "data/convert.h"
#include "data/dataset.h"
#include "data/dataset_cache.h"
#include "data/dataset_json.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/tokenizer.h"
#include "data/transform.h"
#include "data/transform_random.h"

/* processes of a data-parallel job */
#include "dist/comm.h"

/* metrics and their uncertainty */
#include "eval/metric.h"
#include "eval/uncertainty.h"

/* the Trainer, its callbacks, run configs, saved models and checkpoints */
#include "callbacks/callback.h"
#include "callbacks/state.h"
#include "callbacks/tensorboard.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/pretrained.h"
#include "config/args.h"
#include "config/run_config.h"
#include "model/model_io.h"
#include "trainer/memory.h"
#include "trainer/run.h"
#include "trainer/trainer.h"

/* around a run: generation, export to PyTorch, curves, model cards, hyperparameter search */
#include "generate/generate.h"
#include "model/export.h"
#include "model/model_safetensors.h"
#include "report/log_history.h"
#include "report/model_card.h"
#include "report/plot.h"
#include "search/hp_search.h"
#include "search/hp_space.h"

#endif
