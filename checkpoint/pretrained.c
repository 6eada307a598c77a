/* ct_model_from_pretrained (pretrained.h): the architecture model.h5 records, the layers' registry,
 * then the verified weights. */
#include "checkpoint/pretrained.h"

#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint_io.h"
#include "model/layers.h"
#include "model/model_io.h"

ct_status ct_model_from_pretrained(const char *dir, const ct_pretrained_options *o, ct_model *out) {
    memset(out, 0, sizeof *out);
    ct_pretrained_options d = o ? *o : (ct_pretrained_options){0};
    char file[4096];
    if ((size_t)snprintf(file, sizeof file, "%s/model.h5", dir) >= sizeof file)
        return ct_error(CT_ERR_INVALID_ARG, "from_pretrained: the path '%s' is too long", dir);
    json_t *spec;
    ct_shape in;
    ct_dtype in_dtype;
    CT_TRY(ct_model_read_h5_architecture(file, &spec, &in, &in_dtype));
    ct_module *root;
    ct_status s = ct_module_from_json(spec, "model.h5 config", &root);
    json_decref(spec);
    if (s != CT_OK) return ct_error_prefix(s, "%s: ", file);
    ct_model_options mo = {.dtype = CT_F32, .device = d.device, .max_batch = d.max_batch > 0 ? d.max_batch : 64,
                           .seed = d.seed};
    if ((s = ct_model_build(out, root, &in, &mo)) != CT_OK) return ct_error_prefix(s, "%s: ", file);
    if (out->in_dtype != in_dtype)
        s = ct_error(CT_ERR_FORMAT, "%s: the model rebuilt takes %s inputs, the saved one took %s", file,
                     ct_dtype_name(out->in_dtype), ct_dtype_name(in_dtype));
    if (s == CT_OK) s = ct_checkpoint_load_model(out, dir);
    if (s != CT_OK) {
        ct_model_free(out);
        memset(out, 0, sizeof *out);
        return s;
    }
    ct_model_train(out, false); /* in evaluation mode, as Hugging Face's from_pretrained returns it */
    return CT_OK;
}
