/* Weights read from any file must be finite: a NaN or infinity in model.h5 (--model, resume, the
 * best model), in a safetensors file (init_from) or in the model.h5 that `ctrainer export` reads is
 * refused with the file, the tensor and the element, since such a model would otherwise train and
 * evaluate "fine" without nan_inf_policy ever seeing a bad step. The same files without the poison
 * load, so every refusal is the poison's. Saved predictions take a NaN logit as the argmax, as
 * torch.argmax does. (The optimizer state's refusal is in test_checkpoint_io.) */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/format/h5io.h"
#include "model/export.h"
#include "model/model_io.h"
#include "model/model_safetensors.h"
#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

static ct_rng rng;

static const char *bad_name(double v) { return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

/* A random parameter of m, one of its elements and a NaN, inf or -inf to put there. */
typedef struct poison {
    const ct_param *param;
    int64_t at;
    double value;
} poison;

static poison draw_poison(const ct_model *m) {
    static const double values[] = {NAN, INFINITY, -INFINITY};
    poison p = {.param = &m->params.items[ct_rng_below(&rng, (uint64_t)m->params.count)]};
    p.at = (int64_t)ct_rng_below(&rng, (uint64_t)p.param->numel);
    p.value = values[ct_rng_below(&rng, 3)];
    return p;
}

/* The message must name the file, the tensor and the element. */
static void check_message(const char *label, ct_status s, const char *file, const poison *p) {
    char tensor[300], element[96];
    snprintf(tensor, sizeof tensor, "tensor '%s': holds 1 non-finite value", p->param->name);
    snprintf(element, sizeof element, "the first %s at element %lld of %lld", bad_name(p->value), (long long)p->at,
             (long long)p->param->numel);
    CHECK(s == CT_ERR_FORMAT, "%s: %s, wanted CT_ERR_FORMAT: %s", label, ct_status_str(s), ct_last_error());
    const char *subs[] = {file, tensor, element};
    for (int i = 0; i < 3; i++)
        CHECK(strstr(ct_last_error(), subs[i]), "%s: the message lacks '%s': %s", label, subs[i], ct_last_error());
}

static ct_status build(ct_model *m) {
    ct_fixture_mlp o = {.dim = 6, .classes = 3, .hidden = {5}, .max_batch = 4, .seed = ct_rng_u32(&rng)};
    return ct_fixture_mlp_build(&o, m);
}

/* model.h5 (what --model, resume and load_best_model_at_end read) and export's reader of it. */
static void model_h5(const char *dir) {
    ct_model src, dst;
    CHECK_OK(build(&src));
    CHECK_OK(build(&dst));
    char file[512];
    snprintf(file, sizeof file, "%s/model.h5", dir);
    json_t *spec = json_pack("{s:s, s:[i], s:i}", "type", "mlp", "hidden", 5, "num_classes", 3);
    CHECK_OK(ct_model_save_h5(&src, spec, file));
    CHECK_OK(ct_model_load_h5(&dst, file)); /* the clean file loads */
    ct_export_options eo = {.model_dir = dir, .output_dir = dir};
    int n = 0;
    CHECK_OK(ct_export_safetensors(&eo, &n));

    poison p = draw_poison(&src);
    ct_tensor_set(p.param->value, p.at, p.value);
    CHECK_OK(ct_model_save_h5(&src, spec, file));
    check_message("model.h5", ct_model_load_h5(&dst, file), file, &p);
    check_message("export", ct_export_safetensors(&eo, &n), file, &p);
    json_decref(spec);
    ct_model_free(&src);
    ct_model_free(&dst);
}

/* A safetensors file, as init_from reads it (in f32, and in f16 where inf is representable). */
static void safetensors(const char *dir) {
    static const ct_st_dtype dtypes[] = {CT_ST_F32, CT_ST_F16, CT_ST_BF16, CT_ST_F64};
    ct_model src, dst;
    CHECK_OK(build(&src));
    CHECK_OK(build(&dst));
    char file[512];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    ct_st_dtype dt = dtypes[ct_rng_below(&rng, 4)];
    CHECK_OK(ct_model_save_safetensors(&src, dt, file));
    CHECK_OK(ct_model_load_safetensors(&dst, file));
    poison p = draw_poison(&src);
    ct_tensor_set(p.param->value, p.at, p.value);
    CHECK_OK(ct_model_save_safetensors(&src, dt, file));
    char label[64];
    snprintf(label, sizeof label, "safetensors %s", ct_st_dtype_name(dt));
    check_message(label, ct_model_load_safetensors(&dst, file), file, &p);
    ct_model_free(&src);
    ct_model_free(&dst);
}

/* /predictions of a row with a NaN logit is that logit's class (the first NaN), as torch.argmax. */
static void predictions(const char *dir) {
    const int64_t rows = 5, classes = 4, shape[2] = {rows, classes};
    ct_prediction_output po = {0};
    CHECK_OK(ct_tensor_alloc(&po.predictions, CT_F32, CT_CPU, 2, shape));
    int64_t want[5];
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < classes; c++) ct_tensor_set(&po.predictions, r * classes + c, ct_rng_normal(&rng));
        /* the largest finite logit first, then a NaN after it in rows 1..: the NaN wins */
        ct_tensor_set(&po.predictions, r * classes, 10.0);
        want[r] = 0;
        if (r > 0) {
            want[r] = 1 + (int64_t)ct_rng_below(&rng, (uint64_t)(classes - 1));
            ct_tensor_set(&po.predictions, r * classes + want[r], NAN);
            if (want[r] + 1 < classes) ct_tensor_set(&po.predictions, r * classes + want[r] + 1, NAN);
        }
    }
    char file[512];
    snprintf(file, sizeof file, "%s/predictions.h5", dir);
    CHECK_OK(ct_prediction_output_save_h5(&po, file));
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ct_tensor got = {0};
    CHECK_OK(ct_h5_read_tensor_alloc(f, "predictions", CT_I64, &got));
    if (f >= 0) H5Fclose(f);
    for (int64_t r = 0; got.data && r < rows; r++)
        CHECK(((int64_t *)got.data)[r] == want[r], "row %lld: prediction %lld, torch.argmax gives %lld", (long long)r,
              (long long)((int64_t *)got.data)[r], (long long)want[r]);
    ct_tensor_free(&got);
    ct_prediction_output_free(&po);
}

int main(void) {
    ct_test_begin("test_nonfinite_load");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER + 1);
    const char *dir = ct_fixture_tmp_root("ct_nonfinite");
    CHECK(dir != NULL, "no temporary directory");
    if (dir) {
        model_h5(dir);
        safetensors(dir);
        predictions(dir);
    }
    ct_fixture_cleanup();
    return ct_test_finish();
}
