/* Mode "layer": build a module from spec["module"] for spec["input_shape"], load its parameters
 * and buffers from params/<name>, run forward on x and backward with dy, and write y, dx,
 * grads/<name> and buffers/<name>. spec["steps"] > 1 repeats forward+backward on x_<k>/dy_<k>,
 * which exercises running statistics and gradient accumulation. With spec["loss"] (a loss spec, e.g.
 * {"type": "cross_entropy"}) and integer targets "target" (or target_<k>) in place of dy, backward
 * starts from the gradient of the MEAN loss (sum / count, as the Trainer scales it), and the loss's
 * sum and count are written as "loss" ([2] float64). spec["gradient_checkpointing"] true recomputes
 * the model's blocks in backward (ct_model_set_gradient_checkpointing). */
#include <stdio.h>
#include <string.h>

#include "model/layers.h"
#include "model/loss.h"
#include "model/model.h"
#include "oracle.h"

ct_status oracle_layer(const oracle_io *io) {
    const json_t *spec = io->spec;
    ct_module *root;
    CT_TRY(ct_module_from_json(json_object_get(spec, "module"), "module", &root));
    json_t *shape_json = json_object_get(spec, "input_shape");
    ct_shape in = {.ndim = (int)json_array_size(shape_json)};
    for (int i = 0; i < in.ndim; i++) in.dims[i] = json_integer_value(json_array_get(shape_json, (size_t)i));
    ct_model model;
    ct_model_options mo = {.dtype = oracle_dtype(spec), .max_batch = json_integer_value(json_object_get(spec, "batch")),
                           .seed = (uint64_t)json_integer_value(json_object_get(spec, "seed"))};
    CT_TRY(ct_model_build(&model, root, &in, &mo));
    ct_status s = CT_OK;
    if (json_is_true(json_object_get(spec, "gradient_checkpointing")))
        s = ct_model_set_gradient_checkpointing(&model, true);
    bool float_input = ct_dtype_is_float(model.in_dtype);
    if (s == CT_OK && float_input) s = ct_model_enable_input_grad(&model);
    ct_model_train(&model, !json_is_false(json_object_get(spec, "training")));
    for (int i = 0; s == CT_OK && i < model.params.count; i++) {
        char name[300];
        snprintf(name, sizeof name, "params/%s", model.params.items[i].name);
        if (ct_h5_exists(io->in, name)) s = ct_h5_read_into(io->in, name, model.params.items[i].value);
    }
    int steps = json_is_integer(json_object_get(spec, "steps")) ? (int)json_integer_value(json_object_get(spec, "steps")) : 1;
    ct_loss *loss = NULL;
    if (s == CT_OK && json_object_get(spec, "loss")) s = ct_loss_from_json(json_object_get(spec, "loss"), "loss", &loss);
    ct_model_zero_grad(&model);
    for (int k = 0; s == CT_OK && k < steps; k++) {
        char xname[32], dyname[32], yname[32], dxname[32], tname[32], lname[32];
        snprintf(xname, sizeof xname, steps > 1 ? "x_%d" : "x", k);
        snprintf(tname, sizeof tname, steps > 1 ? "target_%d" : "target", k);
        snprintf(lname, sizeof lname, steps > 1 ? "loss_%d" : "loss", k);
        snprintf(dyname, sizeof dyname, steps > 1 ? "dy_%d" : "dy", k);
        snprintf(yname, sizeof yname, steps > 1 ? "y_%d" : "y", k);
        snprintf(dxname, sizeof dxname, steps > 1 ? "dx_%d" : "dx", k);
        ct_tensor x = {0}, dy = {0}, y;
        s = ct_h5_read_tensor_alloc(io->in, xname, float_input ? model.opts.dtype : CT_I64, &x);
        ct_model_set_step(&model, (uint64_t)k, 0);
        if (s == CT_OK) s = ct_model_forward(&model, &x, &y);
        if (s == CT_OK) s = ct_h5_write_tensor(io->out, yname, &y);
        if (s == CT_OK && loss) {
            ct_tensor target = {0};
            ct_loss_value v = {0};
            s = ct_h5_read_tensor_alloc(io->in, tname, CT_I64, &target);
            if (s == CT_OK) s = ct_loss_forward(loss, &y, &target, &v);
            double pair[2] = {v.sum, v.count};
            int64_t two = 2;
            ct_tensor lt = ct_tensor_view(pair, CT_F64, CT_CPU, 1, &two);
            if (s == CT_OK) s = ct_h5_write_tensor(io->out, lname, &lt);
            if (s == CT_OK) s = ct_tensor_alloc(&dy, model.opts.dtype, CT_CPU, y.ndim, y.shape);
            if (s == CT_OK) s = ct_loss_backward(loss, &y, &target, 1.0 / v.count, &dy);
            if (s == CT_OK) s = ct_model_backward(&model, &dy);
            ct_tensor_free(&target);
        } else if (s == CT_OK && ct_h5_exists(io->in, dyname)) {
            s = ct_h5_read_tensor_alloc(io->in, dyname, model.opts.dtype, &dy);
            if (s == CT_OK) s = ct_model_backward(&model, &dy);
            if (s == CT_OK && float_input) s = ct_h5_write_tensor(io->out, dxname, ct_model_input_grad(&model));
        }
        ct_tensor_free(&x);
        ct_tensor_free(&dy);
    }
    for (int i = 0; s == CT_OK && i < model.params.count; i++) {
        ct_param *p = &model.params.items[i];
        char name[300];
        bool buffer = (p->flags & CT_PARAM_BUFFER) != 0;
        snprintf(name, sizeof name, "%s/%s", buffer ? "buffers" : "grads", p->name);
        s = ct_h5_write_tensor(io->out, name, buffer ? p->value : p->grad);
        snprintf(name, sizeof name, "values/%s", p->name);
        if (s == CT_OK) s = ct_h5_write_tensor(io->out, name, p->value);
    }
    ct_loss_free(loss);
    ct_model_free(&model);
    return s;
}
