/* Memory reports: Hugging Face's TrainerMemoryTracker (transformers/trainer_utils.py) for ctrainer.
 *
 * With skip_memory_metrics false, the Trainer measures four stages: init (ct_trainer_init), train
 * (ct_trainer_train), eval (ct_trainer_evaluate) and test (ct_trainer_predict). For each it adds to
 * the stage's metrics, with HF's names and in bytes:
 *   <stage>_mem_cpu_alloc_delta   resident set size (RSS) at the end minus at the start (may be < 0)
 *   <stage>_mem_cpu_peaked_delta  max(0, the highest RSS during the stage - the RSS at its end)
 *   <stage>_mem_gpu_alloc_delta, <stage>_mem_gpu_peaked_delta: the same for the device memory the
 *                                 CUDA runtime allocated, when the model is on a GPU (CUDA builds)
 * alloc + peaked is what the stage needed at its highest. As in HF, init has no metrics of its own:
 * its keys, and before_init_mem_cpu (RSS when init began; before_init_mem_gpu on a GPU), join those
 * of the first stage that reports. A stage that starts inside another one (an evaluation during
 * training) is ignored: the outer stage accounts for it, and its own metrics get no memory keys.
 *
 * Numbers are per process (each measures itself, as HF's); the files that hold them
 * (train_results.json, all_results.json) are written by the world's process zero only. */
#ifndef CT_TRAINER_MEMORY_H
#define CT_TRAINER_MEMORY_H

#include <jansson.h>
#include <stdint.h>

#include "core/device.h"
#include "core/status.h"

typedef enum ct_mem_stage {
    CT_MEM_NONE = 0,
    CT_MEM_INIT, /* "init" */
    CT_MEM_TRAIN, /* "train" */
    CT_MEM_EVAL,  /* "eval" */
    CT_MEM_TEST,  /* "test" (predict) */
    CT_MEM_STAGES
} ct_mem_stage;

/* How the CPU peak of a stage is found (see memory.c for why the first is preferred). */
typedef enum ct_mem_peak_method {
    CT_MEM_PEAK_AUTO = 0, /* the kernel's peak when it can be reset, else the sampler */
    CT_MEM_PEAK_HWM,      /* VmHWM of /proc/self/status, reset at the stage's start (clear_refs) */
    CT_MEM_PEAK_SAMPLER   /* a thread reading /proc/self/statm every sample_interval_s */
} ct_mem_peak_method;

typedef struct ct_memory_tracker_opts {
    ct_device device;         /* the model's device: a CUDA one adds the GPU metrics (CUDA builds) */
    ct_mem_peak_method peak;  /* AUTO (0) unless a test wants one */
    double sample_interval_s; /* the sampler's period; 0: 1 ms */
} ct_memory_tracker_opts;

typedef struct ct_memory_tracker ct_memory_tracker;

/* A tracker. Every function below accepts NULL and then does nothing: the Trainer keeps NULL when
 * skip_memory_metrics is true, so the report costs nothing when it is off. */
ct_status ct_memory_tracker_create(const ct_memory_tracker_opts *o, ct_memory_tracker **out);
/* Ends a stage still running (its sampler thread included) and frees. */
void ct_memory_tracker_free(ct_memory_tracker *m);

/* Begins `stage`, unless another stage runs (then the call is ignored, as its stop will be). */
void ct_memory_tracker_start(ct_memory_tracker *m, ct_mem_stage stage);
/* Ends `stage` when it is the one running (else nothing). s is the status of the stage's work:
 * when it failed, the stage is dropped and s returned. Otherwise its numbers are kept and, when
 * metrics is not NULL, written into it (with init's, the first time); returns CT_OK or
 * CT_ERR_NOMEM. */
ct_status ct_memory_tracker_stop(ct_memory_tracker *m, ct_mem_stage stage, ct_status s, json_t *metrics);

/* The method the tracker uses for CPU peaks (HWM or SAMPLER once created). */
ct_mem_peak_method ct_memory_tracker_peak_method(const ct_memory_tracker *m);
/* HF's name of a stage ("init", "train", "eval", "test"). */
const char *ct_mem_stage_name(ct_mem_stage stage);
/* This process's resident set size in bytes (/proc/self/statm); -1 when it cannot be read. */
int64_t ct_mem_rss_bytes(void);

#endif
