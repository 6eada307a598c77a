/* docs/models.md against the layer registry (model/layer_docs.c): every built-in type documented,
 * every example spec builds, every reader takes exactly the keys its entry lists (the readers' key
 * lists are caught on their way into ct_json_check_keys: this test links with
 * -Wl,--wrap=ct_json_check_keys), and the page in docs/ equals the generated one.
 *
 *   test_layer_docs              the checks
 *   test_layer_docs --markdown   prints docs/models.md's text (regenerate the file with it) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "model/layers.h"
#include "testlib.h"

/* The key list of the first reader that checks the spec at path "model" (the layer itself, not the
 * layers it builds from its keys). */
static const char *const *caught;

ct_status __real_ct_json_check_keys(const json_t *obj, const char *path, const char *const *allowed);
ct_status __wrap_ct_json_check_keys(const json_t *obj, const char *path, const char *const *allowed) {
    if (!caught && strcmp(path, "model") == 0) caught = allowed;
    return __real_ct_json_check_keys(obj, path, allowed);
}

static bool listed(const ct_layer_key_doc *keys, const char *key) {
    for (const ct_layer_key_doc *k = keys; k->key; k++)
        if (strcmp(k->key, key) == 0) return true;
    return false;
}

static bool allowed_has(const char *const *allowed, const char *key) {
    for (const char *const *a = allowed; *a; a++)
        if (strcmp(*a, key) == 0) return true;
    return false;
}

static void test_every_type(void) {
    const char *types[64];
    int n = ct_module_builtin_types(types, 64);
    CHECK(n >= 18 && n < 64, "%d built-in layer types", n);
    for (int i = 0; i < n; i++) {
        const ct_layer_doc *d = ct_layer_doc_of(types[i]);
        CHECK(d != NULL, "layer type '%s' is not documented", types[i]);
        if (!d) continue;
        json_error_t err;
        json_t *spec = json_loads(d->example, 0, &err);
        CHECK(spec != NULL, "%s: the example does not parse: %s", types[i], err.text);
        if (!spec) continue;
        CHECK(strcmp(json_string_value(json_object_get(spec, "type")), types[i]) == 0, "%s: the example's type",
              types[i]);
        caught = NULL;
        ct_module *m = NULL;
        ct_status s = ct_module_from_json(spec, "model", &m);
        CHECK(s == CT_OK, "%s: the example does not build: %s", types[i], ct_last_error());
        if (m) ct_module_destroy(m);
        CHECK(caught != NULL, "%s: the reader checks no keys", types[i]);
        if (caught) {
            for (const char *const *a = caught; *a; a++)
                CHECK(strcmp(*a, "type") == 0 || listed(d->keys, *a), "%s: the reader takes '%s', which is not documented",
                      types[i], *a);
            for (const ct_layer_key_doc *k = d->keys; k->key; k++)
                CHECK(allowed_has(caught, k->key), "%s: '%s' is documented but the reader does not take it", types[i],
                      k->key);
        }
        for (const ct_layer_key_doc *k = d->keys; k->key; k++)
            CHECK(k->type && k->default_value && k->meaning && k->meaning[0], "%s.%s: incomplete entry", types[i], k->key);
        json_decref(spec);
    }
    CHECK(ct_layer_doc_of("no_such_layer") == NULL, "an unknown type has no entry");
}

static void test_page_is_current(void) {
    char *md = NULL;
    CHECK_OK(ct_layer_docs_markdown(&md));
    const char *src = getenv("CT_SOURCE_DIR");
    if (!md || !src) {
        if (!src) printf("note: CT_SOURCE_DIR is not set, docs/models.md not compared\n");
        free(md);
        return;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/models.md", src);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "%s is missing; generate it with `test_layer_docs --markdown > docs/models.md`", path);
    if (f) {
        char *text = calloc(1, strlen(md) + 2);
        size_t got = fread(text, 1, strlen(md) + 1, f);
        fclose(f);
        CHECK(got == strlen(md) && memcmp(text, md, got) == 0,
              "%s differs from the layer registry (model/layer_docs.c); regenerate it with "
              "`test_layer_docs --markdown > docs/models.md`", path);
        free(text);
    }
    free(md);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--markdown") == 0) {
        char *md = NULL;
        if (ct_layer_docs_markdown(&md) != CT_OK) {
            fprintf(stderr, "%s\n", ct_last_error());
            return 1;
        }
        fputs(md, stdout);
        free(md);
        return 0;
    }
    ct_test_begin("layer_docs");
    test_every_type();
    test_page_is_current();
    return ct_test_finish();
}
