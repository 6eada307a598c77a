/* Batches and outputs between the host and the model's device: Hugging Face's _prepare_inputs.
 *
 * Loaders make batches in host memory. Before the hooks see a batch (compute_loss, training_step,
 * prediction_step), its features and labels are copied into buffers on the model's device that the
 * trainer keeps for its largest batch, so a step allocates nothing; the mask and the sample indices
 * stay on the host, where the loop that reads them runs. Outputs come back to the host only where
 * host code reads them (metrics, kept predictions). On the CPU both are the identity: no copy. */
#include <string.h>

#include "trainer/trainer_impl.h"

static bool on_host(const ct_trainer *t) { return t->model->params.device.kind == CT_DEVICE_CPU; }

/* dst as a device tensor shaped like src, in the buffer *keep (grown when src is larger). */
static ct_status place(ct_tensor *keep, ct_device dev, const ct_tensor *src, ct_tensor *dst) {
    size_t need = ct_tensor_nbytes(src);
    if (!keep->data || ct_tensor_nbytes(keep) < need) {
        ct_tensor_free(keep);
        int64_t n = (int64_t)need;
        CT_TRY(ct_tensor_alloc(keep, CT_U8, dev, 1, &n));
    }
    *dst = ct_tensor_view(keep->data, src->dtype, dev, src->ndim, src->shape);
    return ct_tensor_copy_to(dst, src);
}

ct_status ct_trainer_prepare_inputs(ct_trainer *t, const ct_batch *host, const ct_batch **out) {
    if (on_host(t) || !host->features.data) {
        *out = host;
        return CT_OK;
    }
    struct ct_trainer_private *p = t->priv;
    ct_device dev = t->model->params.device;
    p->device_batch = *host;
    CT_TRY(place(&p->device_features, dev, &host->features, &p->device_batch.features));
    if (host->labels.data && host->labels.ndim > 0)
        CT_TRY(place(&p->device_labels, dev, &host->labels, &p->device_batch.labels));
    *out = &p->device_batch;
    return CT_OK;
}

ct_status ct_trainer_outputs_to_host(ct_trainer *t, const ct_tensor *outputs, ct_tensor *host) {
    if (outputs->device.kind == CT_DEVICE_CPU) {
        *host = *outputs;
        return CT_OK;
    }
    struct ct_trainer_private *p = t->priv;
    size_t need = ct_tensor_nbytes(outputs);
    if (!p->host_outputs.data || ct_tensor_nbytes(&p->host_outputs) < need) {
        ct_tensor_free(&p->host_outputs);
        int64_t n = (int64_t)need;
        CT_TRY(ct_tensor_alloc(&p->host_outputs, CT_U8, CT_CPU, 1, &n));
    }
    *host = ct_tensor_view(p->host_outputs.data, outputs->dtype, CT_CPU, outputs->ndim, outputs->shape);
    return ct_tensor_copy_to(host, outputs);
}

void ct_trainer_free_device_batch(ct_trainer *t) {
    ct_tensor_free(&t->priv->device_features);
    ct_tensor_free(&t->priv->device_labels);
    ct_tensor_free(&t->priv->host_outputs);
}
