/* ct_oracle MODE IN.h5 OUT.h5 (see oracle.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "oracle.h"

ct_dtype oracle_dtype(const json_t *spec) {
    const char *dt = json_string_value(json_object_get(spec, "dtype"));
    return dt && strcmp(dt, "f64") == 0 ? CT_F64 : CT_F32;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: ct_oracle layer|loss|optim|sched|scaler IN.h5 OUT.h5\n");
        return 2;
    }
    static const struct {
        const char *name;
        ct_status (*run)(const oracle_io *);
    } modes[] = {{"layer", oracle_layer}, {"loss", oracle_loss}, {"optim", oracle_optim}, {"sched", oracle_sched},
                   {"scaler", oracle_scaler}};
    ct_h5_quiet();
    /* a CT_CPU_ISA or CT_CPU_GEMM that cannot be honoured would test another path than asked for */
    if (ct_cpu_isa_check() != CT_OK) {
        fprintf(stderr, "ct_oracle: %s\n", ct_last_error());
        return 1;
    }
    oracle_io io = {.in = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT)};
    if (io.in < 0) {
        fprintf(stderr, "ct_oracle: cannot open %s\n", argv[2]);
        return 1;
    }
    char *spec_text = NULL;
    ct_status s = ct_h5_read_string_attr(io.in, "spec", &spec_text);
    if (s == CT_OK) {
        json_error_t err;
        io.spec = json_loads(spec_text, 0, &err);
        if (!io.spec) s = ct_error(CT_ERR_CONFIG, "spec: %s at %d:%d", err.text, err.line, err.column);
    }
    io.out = H5Fcreate(argv[3], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (s == CT_OK && io.out < 0) s = ct_error(CT_ERR_IO, "cannot create %s", argv[3]);
    if (s == CT_OK) {
        s = CT_ERR_INVALID_ARG;
        ct_error(s, "unknown mode '%s'", argv[1]);
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
            if (strcmp(modes[i].name, argv[1]) == 0) s = modes[i].run(&io);
    }
    if (io.out >= 0) H5Fclose(io.out);
    H5Fclose(io.in);
    json_decref(io.spec);
    free(spec_text);
    if (s != CT_OK) {
        /* Tests that probe bad input read this line. */
        fprintf(stderr, "ct_oracle: %s: %s\n", ct_status_str(s), ct_last_error());
        return 1;
    }
    return 0;
}
