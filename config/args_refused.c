/* Hugging Face's arguments that do not apply here: every other field of TrainingArguments (and
 * Seq2SeqTrainingArguments) 4.51.3, with Hugging Face's default and why ctrainer has no use for it.
 * A config written for Hugging Face may name one at a value that asks for nothing (its default,
 * null, false, "", [] or {}): it is ignored. Any other value is refused with the reason
 * (config/args.c), never silently dropped. docs/config.md lists them from here (args_doc.c); a name
 * here is never also one of the schema's (unit.test_args). */
#include <stddef.h>
#include <string.h>

#include "config/args_impl.h"
#include "core/util.h"

static const ct_refused_arg refused[] = {
    {"per_gpu_train_batch_size", "null", "deprecated by Hugging Face itself: use per_device_train_batch_size"},
    {"per_gpu_eval_batch_size", "null", "deprecated by Hugging Face itself: use per_device_eval_batch_size"},
    {"torch_empty_cache_steps", "null",
     "ctrainer has no caching allocator to empty: its buffers are sized once and reused"},
    {"no_cuda", "false", "deprecated by Hugging Face itself: use use_cpu (or device \"cpu\")"},
    {"use_mps_device", "false", "ctrainer has no Apple MPS backend"},
    {"jit_mode_eval", "false", "there is no TorchScript in ctrainer"},
    {"use_ipex", "false", "Intel Extension for PyTorch does not apply to ctrainer's own CPU kernels"},
    {"fp16_opt_level", "\"O1\"",
     "apex AMP does not exist in ctrainer: fp16 is its own tensor-core GEMMs with dynamic loss scaling"},
    {"half_precision_backend", "\"auto\"",
     "ctrainer has one mixed-precision backend, the device's own tensor cores (no apex, no cpu_amp)"},
    {"bf16_full_eval", "false",
     "evaluation keeps float32 weights; with bf16 its matrix multiplies use bf16 as training's do"},
    {"fp16_full_eval", "false",
     "evaluation keeps float32 weights; with fp16 its matrix multiplies use fp16 as training's do"},
    {"local_rank", "-1", "the rank comes from mpirun or srun, not from the config"},
    {"ddp_backend", "null", "ctrainer chooses its communicator itself: MPI between processes, NCCL for CUDA tensors"},
    {"tpu_num_cores", "null", "there are no TPUs in ctrainer"},
    {"tpu_metrics_debug", "false", "there are no TPUs in ctrainer"},
    {"debug", "\"\"", "the PyTorch/XLA debug options do not apply"},
    {"dataloader_prefetch_factor", "null", "the loader's ring of batch slots is sized by dataloader_num_workers"},
    {"past_index", "-1", "models here return no past states (mems)"},
    {"run_name", "null", "ctrainer has no experiment-tracker integration to name a run for"},
    {"remove_unused_columns", "true", "datasets here are tensors, not columns a forward signature could leave unused"},
    {"label_names", "null", "a dataset here has one label tensor, found by its format"},
    {"fsdp", "\"\"",
     "fully sharded data parallelism is not implemented (optimizer_sharding zero1 shards the optimizer state)"},
    {"fsdp_min_num_params", "0", "fully sharded data parallelism is not implemented"},
    {"fsdp_config", "null", "fully sharded data parallelism is not implemented"},
    {"tp_size", "0", "tensor parallelism is not implemented"},
    {"fsdp_transformer_layer_cls_to_wrap", "null", "fully sharded data parallelism is not implemented"},
    {"accelerator_config", "null", "there is no Accelerate in ctrainer: its settings are training arguments here"},
    {"deepspeed", "null", "DeepSpeed does not exist for C (optimizer_sharding zero1 is ZeRO stage 1)"},
    {"optim_args", "null",
     "the optimizers' settings are the arguments adam_beta1, adam_beta2, adam_epsilon, weight_decay"},
    {"adafactor", "false", "deprecated by Hugging Face itself (optim adafactor), and Adafactor is not implemented"},
    {"group_by_length", "false", "samples of one dataset have one shape here: there are no lengths to group by"},
    {"length_column_name", "\"length\"",
     "samples of one dataset have one shape here: there are no lengths to group by"},
    {"ddp_find_unused_parameters", "null",
     "every parameter gets a gradient (an unused one gets zeros): there is nothing to find"},
    {"ddp_broadcast_buffers", "null",
     "buffers are broadcast from rank 0 at the start; batch-norm statistics stay per process"},
    {"dataloader_pin_memory", "true",
     "the loader's batch slots are allocated once; GPU copies use the backend's own staging"},
    {"dataloader_persistent_workers", "false", "the loader's workers live as long as the loader already"},
    {"use_legacy_prediction_loop", "false", "there is one evaluation loop"},
    {"push_to_hub", "false", "nothing is uploaded: ctrainer runs without network access"},
    {"resume_from_checkpoint", "null",
     "give it on the command line: ctrainer train CONFIG --resume_from_checkpoint [latest or DIR]"},
    {"hub_model_id", "null", "nothing is uploaded: ctrainer runs without network access"},
    {"hub_strategy", "\"every_save\"", "nothing is uploaded: ctrainer runs without network access"},
    {"hub_token", "null", "nothing is uploaded: ctrainer runs without network access"},
    {"hub_private_repo", "null", "nothing is uploaded: ctrainer runs without network access"},
    {"hub_always_push", "false", "nothing is uploaded: ctrainer runs without network access"},
    {"gradient_checkpointing_kwargs", "null",
     "the keyword arguments of torch.utils.checkpoint: {\"use_reentrant\": true or false} asks for nothing here "
     "(both of PyTorch's variants give the gradients that ctrainer's one way of recomputing gives)"},
    {"include_inputs_for_metrics", "false", "deprecated by Hugging Face itself: use include_for_metrics [\"inputs\"]"},
    {"eval_do_concat_batches", "true",
     "outputs are written into one array in dataset order as they come: there are no batches to concatenate"},
    {"fp16_backend", "\"auto\"",
     "deprecated by Hugging Face itself (half_precision_backend), and ctrainer has one mixed-precision backend"},
    {"push_to_hub_model_id", "null", "nothing is uploaded: ctrainer runs without network access"},
    {"push_to_hub_organization", "null", "nothing is uploaded: ctrainer runs without network access"},
    {"push_to_hub_token", "null", "nothing is uploaded: ctrainer runs without network access"},
    {"mp_parameters", "\"\"", "SageMaker model parallelism does not apply"},
    {"auto_find_batch_size", "false",
     "memory is reserved for the largest batch before training: a batch that does not fit fails at the start"},
    {"torchdynamo", "null", "there is no torch.compile in C"},
    {"ray_scope", "\"last\"", "Ray Tune is not used: ctrainer search runs trials itself"},
    {"torch_compile", "false", "there is no torch.compile in C"},
    {"torch_compile_backend", "null", "there is no torch.compile in C"},
    {"torch_compile_mode", "null", "there is no torch.compile in C"},
    {"neftune_noise_alpha", "null", "NEFTune's embedding noise is not implemented"},
    {"optim_target_modules", "null", "GaLore and APOLLO optimizers are not implemented"},
    {"use_liger_kernel", "false", "Liger's Triton kernels do not apply to ctrainer's kernels"},
    {"eval_use_gather_object", "false", "outputs are gathered as tensors; there are no Python objects"},
    {"average_tokens_across_devices", "false",
     "the loss is always divided by the global count of the step (all micro-batches, all processes)"},
    {"sortish_sampler", "false", "samples of one dataset have one shape here: there are no lengths to sort by"},
    {"generation_num_beams", "null", "generation samples (temperature, top-k, top-p); beam search is not implemented"},
    {"generation_config", "null", "generation settings are the run config's generation section"},
};

const ct_refused_arg *ct_refused_args(int *n) {
    *n = (int)CT_ARRAY_LEN(refused);
    return refused;
}

const ct_refused_arg *ct_refused_arg_find(const char *name) {
    for (size_t i = 0; i < CT_ARRAY_LEN(refused); i++)
        if (strcmp(refused[i].name, name) == 0) return &refused[i];
    return NULL;
}

/* Keys of a refused argument's object value that ask for nothing at true or false: PyTorch's two ways
 * of recomputing give the same gradients, so a config may name either. */
static const struct {
    const char *arg, *key;
} harmless[] = {{"gradient_checkpointing_kwargs", "use_reentrant"}};

/* Whether v is a non-empty object of only harmless boolean keys of r. */
static bool only_harmless_keys(const ct_refused_arg *r, const json_t *v) {
    if (!json_is_object(v)) return false;
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)v, key, value) {
        bool ok = false;
        for (size_t i = 0; i < CT_ARRAY_LEN(harmless) && !ok; i++)
            ok = strcmp(harmless[i].arg, r->name) == 0 && strcmp(harmless[i].key, key) == 0 && json_is_boolean(value);
        if (!ok) return false;
    }
    return true;
}

bool ct_refused_arg_asks_nothing(const ct_refused_arg *r, const json_t *v) {
    if (json_is_null(v) || json_is_false(v) || only_harmless_keys(r, v)) return true;
    if (json_is_string(v) && json_string_length(v) == 0) return true;
    if ((json_is_array(v) && json_array_size(v) == 0) || (json_is_object(v) && json_object_size(v) == 0)) return true;
    json_t *d = json_loads(r->hf_default, JSON_DECODE_ANY, NULL);
    bool same = d && json_equal(d, (json_t *)v);
    json_decref(d);
    return same;
}
