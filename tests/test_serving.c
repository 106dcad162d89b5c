/* The serving layer without HTTP: the ONNX writer's refusals (an op with no ONNX form,
 * named with its node; training-only ops; a placeholder not among the inputs), a
 * servable from a checkpoint with its weight in column shards, TensorFlow Serving's
 * REST routes and bodies (every error naming the field, the expected dtype and shape),
 * and the model server: concurrent requests batched, a new checkpoint swapped in while a
 * request holds the old version; an answer's numbers written as printf's "%.9g" writes
 * them. ONNX Runtime's check of the files is
 * tests/test_serving.sh's. */
#include "psgraph/psgraph.h"
#include "serving/float_text.h"
#include "serving/model_server.h"
#include "serving/rest.h"
#include "serving/rest_plain.h"
#include "serving/servable_internal.h"
#include "tests/testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

static void test_onnx_refusals(void) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){2, {-1, 4}});
    psg_endpoint_t y = psg_placeholder(g, "y", PSG_DT_F32, &(psg_shape_t){2, {-1, 4}});
    psg_endpoint_t l2 = psg_l2_loss(g, "l2", x);
    psg_endpoint_t sum = psg_add(g, "sum", x, y);
    psg_endpoint_t drop = psg_dropout(g, "drop", x, 0.5, 1);
    CHECK(psg_graph_status(g) == 0);
    char path[128];
    snprintf(path, sizeof path, "%s/x.onnx", tmpdir);
    psg_onnx_io_t in = {"x", x}, out = {"out", l2};
    psg_onnx_spec_t spec = {.num_inputs = 1, .inputs = &in, .num_outputs = 1, .outputs = &out};
    CHECK(psg_onnx_export(g, &spec, path) < 0);
    CHECK_ERROR_HAS("node 'l2' (L2Loss): no ONNX form");
    CHECK(access(path, F_OK) != 0); /* nothing written */
    out.endpoint = sum;
    CHECK(psg_onnx_export(g, &spec, path) < 0);
    CHECK_ERROR_HAS("node 'y' (Placeholder)");
    out.endpoint = drop;
    CHECK(psg_onnx_export(g, &spec, path) < 0);
    CHECK_ERROR_HAS("node 'drop' (Dropout): runs only in training");
    CHECK(!psg_onnx_supports("L2Loss") && psg_onnx_supports("Conv2D") &&
          !psg_onnx_supports("Dropout"));
    psg_graph_destroy(&g);
}

/* A checkpoint of `model` (mlp, cnn) at `step` in dir, all values from `seed`; the mlp's
 * fc1 weight in column shards (as a cluster with --shard-bytes writes it). */
static void write_checkpoint(const char *dir, const char *model, int64_t step, uint64_t seed) {
    psg_graph_t *g = psg_graph_new();
    psg_model_t m;
    bool mlp = !strcmp(model, "mlp");
    psg_model_options_t o = {.dense_shard_bytes = mlp ? 410000 : 0};
    CHECK(psg_model_build_with(g, model, 28, 28, 1, 10, seed, &o, &m) == 0);
    CHECK(!mlp || psg_graph_find(g, "model/fc1/weights/part_0") >= 0);
    psg_session_t *s = psg_session_new(g, &(psg_session_options_t){1}, NULL);
    CHECK(s && psg_session_run_init(s) == 0);
    psg_resource_mgr_t *rm = psg_session_resources(s);
    CHECK(psg_checkpoint_save(dir, step, 1, &rm, 0, NULL) == 0);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

static void write_mlp_checkpoint(const char *dir, int64_t step, uint64_t seed) {
    write_checkpoint(dir, "mlp", step, seed);
}

/* s's outputs of x's rows cut in `parts` consecutive parts (rows * k / parts), each part run
 * alone, joined: what lanes must answer. */
static void run_in_parts(psg_servable_t *s, psg_tensor_t *x, int parts, psg_tensor_t **joined) {
    int64_t rows = x->shape.dims[0];
    size_t row_bytes = psg_tensor_nbytes(x) / (size_t)rows;
    for (int k = 0; k < parts; k++) {
        int64_t r0 = rows * k / parts, r1 = rows * (k + 1) / parts;
        psg_shape_t sh = x->shape;
        sh.dims[0] = r1 - r0;
        psg_tensor_t *part = psg_tensor_from_data(x->dtype, &sh, (char *)x->data + r0 * row_bytes,
                                                  (size_t)(r1 - r0) * row_bytes),
                     *out[4] = {0};
        CHECK(part && psg_servable_run(s, &part, out) == 0);
        for (int j = 0; j < psg_servable_num_outputs(s) && out[j]; j++) {
            if (k == 0) {
                psg_shape_t all = out[j]->shape;
                all.dims[0] = rows;
                joined[j] = psg_tensor_new(out[j]->dtype, &all);
            }
            memcpy((char *)joined[j]->data +
                       (size_t)r0 * (psg_tensor_nbytes(out[j]) / (size_t)(r1 - r0)),
                   out[j]->data, psg_tensor_nbytes(out[j]));
            psg_tensor_destroy(&out[j]);
        }
        psg_tensor_destroy(&part);
    }
}

/* A batch's rows cut over lanes (single-threaded plans side by side) answer what one plan
 * answers for the same parts, bit for bit, and the whole batch's answer within 1e-6 of the
 * logits (a batch's size picks the kernels' blocking: one plan alone differs as much
 * between a batch and its parts); one plan over 2 threads answers as over 1, bit for bit. */
static void test_servable_lanes(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/lanes_cnn", tmpdir);
    write_checkpoint(dir, "cnn", 3, 5);
    psg_servable_options_t how[4] = {
        {.threads = 1}, {.threads = 3, .lanes = 3}, {.threads = 2}, {.threads = 1, .lanes = 2}};
    int lanes[4] = {1, 3, 1, 2};
    psg_servable_t *s[4];
    for (int k = 0; k < 4; k++) CHECK((s[k] = psg_servable_load(dir, &how[k])) != NULL);
    if (!s[0] || !s[1] || !s[2] || !s[3]) goto out;
    unsigned seed = 7;
    int64_t rows[] = {1, 2, 5, 7};
    for (int b = 0; b < 4; b++) {
        psg_tensor_t *x = psg_tensor_new(PSG_DT_F32, &(psg_shape_t){4, {rows[b], 28, 28, 1}});
        for (int64_t i = 0; i < psg_tensor_numel(x); i++)
            psg_tensor_f32(x)[i] = (float)rand_r(&seed) / (float)RAND_MAX;
        psg_tensor_t *whole[4] = {0};
        CHECK(psg_servable_run(s[0], &x, whole) == 0);
        for (int k = 1; k < 4; k++) {
            psg_tensor_t *got[4] = {0}, *want[4] = {0};
            CHECK(psg_servable_run(s[k], &x, got) == 0);
            run_in_parts(s[0], x, rows[b] < lanes[k] ? (int)rows[b] : lanes[k], want);
            for (int j = 0; j < psg_servable_num_outputs(s[0]); j++) {
                bool ok = want[j] && got[j] && whole[j] &&
                          psg_tensor_nbytes(got[j]) == psg_tensor_nbytes(want[j]) &&
                          psg_tensor_nbytes(got[j]) == psg_tensor_nbytes(whole[j]);
                CHECK(ok);
                if (!ok) continue;
                CHECK(!memcmp(got[j]->data, want[j]->data, psg_tensor_nbytes(want[j])));
                double diff = 0, top = 0;
                for (int64_t q = 0; q < psg_tensor_numel(whole[j]); q++) {
                    diff =
                        fmax(diff, fabs(psg_tensor_f32(got[j])[q] - psg_tensor_f32(whole[j])[q]));
                    top = fmax(top, fabs(psg_tensor_f32(whole[j])[q]));
                }
                CHECK(diff <= 1e-6 * top);
            }
            for (int j = 0; j < 4; j++) {
                psg_tensor_destroy(&got[j]);
                psg_tensor_destroy(&want[j]);
            }
        }
        for (int j = 0; j < 4; j++) psg_tensor_destroy(&whole[j]);
        psg_tensor_destroy(&x);
    }
    /* a wrong batch is refused before any lane runs */
    psg_tensor_t *bad = psg_tensor_zeros(PSG_DT_F32, &(psg_shape_t){4, {3, 28, 27, 1}}),
                 *outs[4] = {0};
    CHECK(psg_servable_run(s[1], &bad, outs) < 0);
    CHECK_ERROR_HAS("input 'images' must be f32[?, 28, 28, 1], got f32[3, 28, 27, 1]");
    psg_tensor_destroy(&bad);
out:
    for (int k = 0; k < 4; k++) psg_servable_destroy(&s[k]);
}

static void test_servable_merges_column_shards(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/mlp", tmpdir);
    write_mlp_checkpoint(dir, 7, 3);
    psg_servable_t *s = psg_servable_load(dir, NULL);
    CHECK(s != NULL);
    if (!s) return;
    CHECK(!strcmp(psg_servable_model(s), "mlp") && psg_servable_step(s) == 7);
    psg_variable_t *w = psg_resource_find_variable(psg_servable_values(s), "model/fc1/weights");
    CHECK(w && w->shape.rank == 2 && w->shape.dims[0] == 784 && w->shape.dims[1] == 256);
    /* the whole weight's row 5 = part_0's row 5, then part_1's */
    psg_checkpoint_t *ck = NULL;
    CHECK(psg_checkpoint_open_latest(dir, -1, NULL, NULL, &ck) == 1);
    psg_tensor_t *p0 = psg_checkpoint_read(ck, "model/fc1/weights/part_0");
    psg_tensor_t *p1 = psg_checkpoint_read(ck, "model/fc1/weights/part_1");
    CHECK(p0 && p1 && p0->shape.dims[1] + p1->shape.dims[1] == 256);
    if (w && p0 && p1) {
        int64_t c0 = p0->shape.dims[1], c1 = p1->shape.dims[1];
        CHECK(psg_tensor_f32(w->value)[5 * 256 + 3] == psg_tensor_f32(p0)[5 * c0 + 3]);
        CHECK(psg_tensor_f32(w->value)[5 * 256 + c0 + 2] == psg_tensor_f32(p1)[5 * c1 + 2]);
    }
    psg_tensor_destroy(&p0);
    psg_tensor_destroy(&p1);
    psg_checkpoint_destroy(&ck);
    /* a wrong input is refused naming it */
    psg_tensor_t *bad = psg_tensor_zeros(PSG_DT_F32, &(psg_shape_t){4, {2, 28, 27, 1}}),
                 *outs[4] = {0};
    CHECK(psg_servable_run(s, &bad, outs) < 0);
    CHECK_ERROR_HAS("input 'images' must be f32[?, 28, 28, 1], got f32[2, 28, 27, 1]");
    psg_tensor_destroy(&bad);
    psg_servable_destroy(&s);
    psg_servable_options_t o = {.model = "cnn"};
    CHECK(psg_servable_load(dir, &o) == NULL);
    CHECK_ERROR_HAS("model/conv1/weights");
}

/* A table of 5 rows in 2 row shards: merged by mod (id i is row i / 2 of shard i % 2) or
 * div (shard 0 holds ids 0..2), into the one variable "t/part_0" of a one-shard build. */
static void test_row_shards_merged(void) {
    for (int div = 0; div < 2; div++) {
        psg_resource_mgr_t *rm = psg_resource_mgr_new();
        int64_t rows[2] = {3, 2};
        for (int k = 0; k < 2; k++) {
            char name[32];
            snprintf(name, sizeof name, "t/part_%d", k);
            psg_variable_t *v =
                psg_resource_variable(rm, name, PSG_DT_F32, &(psg_shape_t){2, {rows[k], 3}});
            for (int64_t r = 0; r < rows[k]; r++) {
                int64_t id = div ? r + 3 * k : 2 * r + k;
                for (int c = 0; c < 3; c++)
                    psg_tensor_f32(v->value)[r * 3 + c] = (float)(10 * id + c);
            }
            v->initialized = true;
        }
        char dir[128];
        snprintf(dir, sizeof dir, "%s/table%d", tmpdir, div);
        CHECK(psg_checkpoint_save(dir, 1, 1, &rm, 0, NULL) == 0);
        psg_resource_mgr_destroy(&rm);
        psg_graph_t *g = psg_graph_new();
        psg_endpoint_t h = psg_var_handle(g, "t/part_0", PSG_DT_F32, &(psg_shape_t){2, {5, 3}});
        CHECK(psg_endpoint_valid(h));
        psg_checkpoint_t *ck = NULL;
        CHECK(psg_checkpoint_open_latest(dir, -1, NULL, NULL, &ck) == 1);
        rm = psg_resource_mgr_new();
        CHECK(psg_serving_fill_values(g, ck, rm, div ? "div" : "mod") == 0);
        psg_variable_t *v = psg_resource_find_variable(rm, "t/part_0");
        bool same = v && v->initialized;
        for (int i = 0; same && i < 15; i++)
            same = psg_tensor_f32(v->value)[i] == (float)(10 * (i / 3) + i % 3);
        CHECK(same);
        psg_resource_mgr_destroy(&rm);
        psg_checkpoint_destroy(&ck);
        psg_graph_destroy(&g);
    }
}

static void test_rest_routes(void) {
    psg_rest_route_t r;
    CHECK(psg_rest_route("GET", "/v1/models/cnn", &r) == 0 && r.kind == PSG_REST_STATUS &&
          !strcmp(r.model, "cnn") && r.version == -1);
    CHECK(psg_rest_route("GET", "/v1/models/cnn/versions/12", &r) == 0 && r.version == 12);
    CHECK(psg_rest_route("GET", "/v1/models/cnn/metadata", &r) == 0 && r.kind == PSG_REST_METADATA);
    CHECK(psg_rest_route("POST", "/v1/models/cnn/versions/3:predict", &r) == 0 &&
          r.kind == PSG_REST_PREDICT && r.version == 3);
    CHECK(psg_rest_route("GET", "/v1/models/cnn:predict", &r) == 405);
    CHECK(psg_rest_route("POST", "/v1/models/cnn/metadata", &r) == 405);
    CHECK(psg_rest_route("GET", "/v2/models/cnn", &r) == 404);
    CHECK(psg_rest_route("GET", "/v1/models/cnn/versions/x", &r) == 404);
    CHECK(psg_rest_route("POST", "/v1/models/cnn:classify", &r) == 404);
    CHECK(psg_rest_route("GET", "/v1/models/", &r) == 404);
}

static const psg_servable_tensor_t image_in[] = {
    {"images", PSG_DT_F32, {4, {-1, 2, 2, 1}}, {0, 0}}};
static const psg_servable_tensor_t wd_in[] = {{"dense", PSG_DT_F32, {2, {-1, 2}}, {0, 0}},
                                              {"ids", PSG_DT_I64, {2, {-1, 3}}, {0, 0}}};
static const psg_servable_tensor_t two_out[] = {
    {"logits", PSG_DT_F32, {2, {-1, 2}}, {0, 0}},
    {"probabilities", PSG_DT_F32, {2, {-1, 2}}, {0, 0}}};

static int parse(const psg_rest_signature_t *sig, const char *body, psg_rest_request_t *r) {
    return psg_rest_parse_predict(sig, body, strlen(body), r);
}

static void test_rest_bodies(void) {
    psg_rest_signature_t sig = {1, 2, image_in, two_out};
    psg_rest_request_t r;
    CHECK(parse(&sig, "{\"instances\":[[[[1],[2]],[[3],[4]]],[[[5],[6]],[[7],[8.5]]]]}", &r) == 0);
    CHECK(!r.columnar && r.batch == 2 && psg_tensor_f32(r.inputs[0])[7] == 8.5f);
    psg_rest_request_clear(&r);
    CHECK(
        parse(
            &sig,
            "{\"signature_name\":\"serving_default\",\"inputs\":{\"images\":[[[[1],[2]],[[3],[4]]]]}}",
            &r) == 0);
    CHECK(r.columnar && r.batch == 1 && psg_tensor_f32(r.inputs[0])[3] == 4.0f);
    psg_rest_request_clear(&r);
    CHECK(parse(&sig, "{\"instances\":[{\"images\":[[[1],[2]],[[3],[4]]]}]}", &r) == 0 &&
          r.batch == 1);
    psg_rest_request_clear(&r);
    CHECK(parse(&sig, "{\"instances\":[[[[1],[2]],[[3],[4]]],[[[5],[6]],[[7]]]]}", &r) < 0);
    CHECK_ERROR_HAS(
        "'images' must be f32[?, 2, 2, 1]: an array of 1 where 2 belong at instances[1][1]");
    CHECK(parse(&sig, "{\"instances\":[[[[1],[2]],[[3],[\"x\"]]]]}", &r) < 0);
    CHECK_ERROR_HAS("a string where a number belongs at instances[0][1][1][0]");
    CHECK(parse(&sig, "{\"instances\":[]}", &r) < 0);
    CHECK_ERROR_HAS("non-empty array");
    CHECK(parse(&sig, "{\"instances\":[1],\"inputs\":[1]}", &r) < 0);
    CHECK_ERROR_HAS("both 'instances' and 'inputs'");
    CHECK(parse(&sig, "{\"instance\":[1]}", &r) < 0);
    CHECK_ERROR_HAS("unknown field 'instance'");
    CHECK(parse(&sig, "{\"instances\":[1]", &r) < 0);
    CHECK_ERROR_HAS("the body is not JSON");
    CHECK(parse(&sig, "{\"signature_name\":\"other\",\"instances\":[1]}", &r) < 0);
    CHECK_ERROR_HAS("serving_default");

    psg_rest_signature_t wd = {2, 2, wd_in, two_out};
    CHECK(
        parse(
            &wd,
            "{\"instances\":[{\"dense\":[0.5,1],\"ids\":[1,2,3]},{\"dense\":[2,3],\"ids\":[4,5,6]}]}",
            &r) == 0);
    CHECK(r.batch == 2 && ((int64_t *)r.inputs[1]->data)[5] == 6 &&
          psg_tensor_f32(r.inputs[0])[0] == 0.5f);
    psg_rest_request_clear(&r);
    CHECK(parse(&wd, "{\"inputs\":{\"dense\":[[1,2]],\"ids\":[[1,2,3],[4,5,6]]}}", &r) < 0);
    CHECK_ERROR_HAS("'ids' must be i64[?, 3]: 2 rows where the other inputs have 1");
    CHECK(parse(&wd, "{\"instances\":[{\"dense\":[1,2],\"ids\":[1,2.5,3]}]}", &r) < 0);
    CHECK_ERROR_HAS(
        "'ids' must be i64[?, 3]: 2.5 is not an integer it can hold at instances[0][1]");
    CHECK(parse(&wd, "{\"instances\":[{\"dense\":[1,2]}]}", &r) < 0);
    CHECK_ERROR_HAS("instances[0] has no input 'ids'");
    CHECK(parse(&wd, "{\"inputs\":{\"dense\":[[1,2]],\"ids\":[[1,2,3]],\"x\":1}}", &r) < 0);
    CHECK_ERROR_HAS("'x', which is no input");

    /* answers: rows 1..2 of a batch, both formats */
    psg_tensor_t *outs[2] = {
        psg_test_tensor(&(psg_shape_t){2, {3, 2}}, (float[]){0, 1, 2, 3, 0.1f, 5}),
        psg_test_tensor(&(psg_shape_t){2, {3, 2}}, (float[]){9, 9, 8, 8, 7, 7})};
    psg_strbuf_t t = {0};
    psg_rest_format_predict(&sig, false, outs, 1, 2, &t);
    CHECK(t.s && !strcmp(t.s, "{\"predictions\":[{\"logits\":[2,3],\"probabilities\":[8,8]},"
                              "{\"logits\":[0.100000001,5],\"probabilities\":[7,7]}]}"));
    free(t.s);
    t = (psg_strbuf_t){0};
    psg_rest_format_predict(&sig, true, outs, 0, 1, &t);
    CHECK(t.s && !strcmp(t.s, "{\"outputs\":{\"logits\":[[0,1]],\"probabilities\":[[9,9]]}}"));
    free(t.s);
    psg_tensor_destroy(&outs[0]);
    psg_tensor_destroy(&outs[1]);
}

/* The row-format body of one f32 input is read straight into the tensor; every other body
 * goes through the JSON tree. The same rows both ways (the second body's "signature_name"
 * sends it the general way) must give the same floats bit for bit: numbers strtod rounds
 * (more than 19 digits, exponents past 22), negative zero, exponents, whitespace; and a
 * body the direct reader gives up on midway must still be read, or refused with the
 * general reader's words. */
static void test_rest_direct_reader(void) {
    psg_rest_signature_t sig = {1, 2, image_in, two_out};
    const char *rows = "[ [[[0.1],[-0]] ,[[1e-7],[1.5E+3]]],\n\t[[[123456789012345678901234],"
                       "[0.30000000000000004441]],[[-2.5e-30],[3.4028235e38]]] ]";
    char direct[512], tree[512];
    snprintf(direct, sizeof direct, " {\r\n \"instances\" : %s }\n", rows);
    snprintf(tree, sizeof tree, "{\"signature_name\":\"serving_default\",\"instances\":%s}", rows);
    psg_rest_request_t a, b;
    CHECK(parse(&sig, direct, &a) == 0);
    CHECK(parse(&sig, tree, &b) == 0);
    CHECK(a.batch == 2 && b.batch == 2 && !a.columnar);
    CHECK(a.inputs[0] && b.inputs[0] &&
          !memcmp(a.inputs[0]->data, b.inputs[0]->data, 8 * sizeof(float)));
    CHECK(a.inputs[0] && signbit(psg_tensor_f32(a.inputs[0])[1]) &&
          psg_tensor_f32(a.inputs[0])[3] == 1500.0f);
    psg_rest_request_clear(&a);
    psg_rest_request_clear(&b);
    /* given up on after a whole row: a third row in the wrong shape, a string, a null */
    CHECK(parse(&sig, "{\"instances\":[[[[1],[2]],[[3],[4]]],[[[5],[6]],[[7],[8]],[[9],[0]]]]}",
                &a) < 0);
    CHECK_ERROR_HAS(
        "'images' must be f32[?, 2, 2, 1]: an array of 3 where 2 belong at instances[1]");
    CHECK(parse(&sig, "{\"instances\":[[[[1],[2]],[[3],[4]]],[[[5],[null]],[[7],[8]]]]}", &a) < 0);
    CHECK_ERROR_HAS("null where a number belongs at instances[1][0][1][0]");
    CHECK(parse(&sig, "{\"instances\":[[[[1],[2]],[[3],[4]]]],\"x\":1}", &a) < 0);
    CHECK_ERROR_HAS("unknown field 'x'");
    CHECK(parse(&sig, "{\"instances\":[[[[1],[2]],[[3],[4]]]]} x", &a) < 0);
    CHECK_ERROR_HAS("the body is not JSON");
    CHECK(parse(&sig, "{\"instances\":[[[[01],[2]],[[3],[4]]]]}", &a) < 0);
    CHECK_ERROR_HAS("the body is not JSON");
    /* the same object with an object a row: the general reader's */
    CHECK(parse(&sig, "{\"instances\":[{\"images\":[[[1],[2]],[[3],[4e0]]]}]}", &a) == 0 &&
          a.batch == 1 && psg_tensor_f32(a.inputs[0])[3] == 4.0f);
    psg_rest_request_clear(&a);
}

/* n instances of h x w x c numbers as JSON text (many forms: signs, exponents, spaces and
 * newlines between elements), in a buffer the caller frees. */
static char *instances_text(int n, int h, int w, int c) {
    size_t cap = (size_t)n * h * w * c * 24 + 1024, at = 0;
    char *t = malloc(cap);
    unsigned seed = 11;
    at += (size_t)snprintf(t + at, cap - at, "[");
    for (int i = 0; i < n; i++) {
        at += (size_t)snprintf(t + at, cap - at, "%s[", i ? ",\n" : "");
        for (int y = 0; y < h; y++) {
            at += (size_t)snprintf(t + at, cap - at, "%s[", y ? (y % 3 ? "," : " ,\n ") : "");
            for (int x = 0; x < w; x++) {
                at += (size_t)snprintf(t + at, cap - at, "%s[", x ? "," : "");
                for (int k = 0; k < c; k++) {
                    seed = seed * 1103515245u + 12345u;
                    double v = (double)(seed >> 8) / (1 << 24) - 0.5;
                    const char *form = seed % 5 == 0 ? "%.3e" : seed % 5 == 1 ? "%.9g" : "%.4f";
                    at += (size_t)snprintf(t + at, cap - at, k ? "," : "");
                    at += (size_t)snprintf(t + at, cap - at, form, seed % 7 == 0 ? v * 1e6 : v);
                }
                at += (size_t)snprintf(t + at, cap - at, "]");
            }
            at += (size_t)snprintf(t + at, cap - at, "]");
        }
        at += (size_t)snprintf(t + at, cap - at, "]");
    }
    snprintf(t + at, cap - at, "]");
    return t;
}

/* A body of a megabyte or more is read by two threads, each from one side of an instance's
 * row near the middle: the floats bit for bit the general reader's, one instance (the
 * split inside it) or several; an error on either side still refused in the general
 * reader's words. */
static void test_rest_split_reader(void) {
    static const psg_servable_tensor_t big_in[2][1] = {
        {{"images", PSG_DT_F32, {4, {-1, 190, 190, 3}}, {0, 0}}}, /* one image: split in it */
        {{"images", PSG_DT_F32, {4, {-1, 61, 57, 3}}, {0, 0}}}};  /* 13: split among them */
    for (int v = 0; v < 2; v++) {
        const psg_shape_t *sh = &big_in[v][0].shape;
        int n = v ? 13 : 1, h = (int)sh->dims[1], w = (int)sh->dims[2];
        psg_rest_signature_t sig = {1, 2, big_in[v], two_out};
        char *rows = instances_text(n, h, w, 3);
        size_t len = strlen(rows) + 128;
        char *direct = malloc(len), *tree = malloc(len);
        snprintf(direct, len, "{\"instances\": %s}", rows);
        snprintf(tree, len, "{\"signature_name\":\"serving_default\",\"instances\":%s}", rows);
        psg_rest_request_t a, b;
        int64_t splits = psg_rest_plain_split_reads();
        CHECK(parse(&sig, direct, &a) == 0);
        CHECK(psg_rest_plain_split_reads() == splits + 1); /* read in two */
        CHECK(parse(&sig, tree, &b) == 0);
        CHECK(a.batch == n && b.batch == n);
        CHECK(a.inputs[0] && b.inputs[0] &&
              !memcmp(a.inputs[0]->data, b.inputs[0]->data, sizeof(float) * (size_t)n * h * w * 3));
        psg_rest_request_clear(&a);
        psg_rest_request_clear(&b);
        for (int q = 1; q <= 3; q += 2) { /* a comma gone at a quarter, three quarters */
            char *bad = strdup(direct), *comma = strchr(bad + strlen(bad) * q / 4, ',');
            *comma = ' ';
            CHECK(parse(&sig, bad, &a) < 0);
            CHECK_ERROR_HAS("the body is not JSON");
            free(bad);
        }
        /* the last instance a row or two short: the general reader's words for it */
        char *bad = strdup(direct), *last = strrchr(bad, ']');
        char *row = last - 1;
        while (row > bad && strncmp(row, ",[[", 3)) row--;
        memmove(row, last - 1, strlen(last - 1) + 1);
        char want[64];
        snprintf(want, sizeof want, "where %d belong at instances[%d]", h, n - 1);
        CHECK(parse(&sig, bad, &a) < 0);
        CHECK_ERROR_HAS(want);
        free(bad);
        free(rows);
        free(direct);
        free(tree);
    }
}

typedef struct {
    psg_model_server_t *ms;
    psg_servable_t *s;
    int failures;
} client_t;

static void *client(void *arg) {
    client_t *c = arg;
    psg_tensor_t *x = psg_tensor_zeros(PSG_DT_F32, &(psg_shape_t){4, {1, 28, 28, 1}});
    for (int i = 0; i < 10; i++) {
        psg_tensor_t *outs[4] = {0};
        int64_t row0 = -1;
        if (psg_model_server_predict(c->ms, c->s, &x, 1, outs, &row0) < 0 || !outs[0] || row0 < 0 ||
            row0 >= outs[0]->shape.dims[0])
            c->failures++;
        psg_tensor_destroy(&outs[0]);
        psg_tensor_destroy(&outs[1]);
    }
    psg_tensor_destroy(&x);
    return NULL;
}

static void test_model_server(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/served", tmpdir);
    write_mlp_checkpoint(dir, 10, 1);
    psg_model_server_config_t c = {
        .dir = dir, .max_batch = 8, .batch_timeout_us = 50000, .poll_secs = 0.05};
    psg_model_server_t *ms = psg_model_server_new(&c);
    CHECK(ms != NULL);
    if (!ms) return;
    psg_servable_t *old = psg_model_server_acquire(ms, -1);
    CHECK(old && psg_servable_step(old) == 10);
    CHECK(psg_model_server_acquire(ms, 11) == NULL);
    CHECK_ERROR_HAS("no version 11 of the model: it serves version 10");
    /* 8 clients at once: their requests share batches */
    pthread_t th[8];
    client_t cl[8];
    for (int i = 0; i < 8; i++) {
        cl[i] = (client_t){ms, old, 0};
        pthread_create(&th[i], NULL, client, &cl[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK(cl[i].failures == 0);
    }
    psg_model_server_stats_t st;
    psg_model_server_stats(ms, &st);
    CHECK(st.requests == 80 && st.rows == 80 && st.batches < st.requests);
    printf("    80 requests of 8 clients ran in %lld batches\n", (long long)st.batches);
    /* a new checkpoint: served within the polls, while `old` stays usable */
    write_mlp_checkpoint(dir, 20, 2);
    int64_t v[4];
    for (int i = 0; i < 200 && !(psg_model_server_versions(ms, v, 4) == 1 && v[0] == 20); i++)
        usleep(20000);
    CHECK(psg_model_server_versions(ms, v, 4) == 1 && v[0] == 20);
    client_t late = {ms, old, 0};
    client(&late);
    CHECK(late.failures == 0);
    psg_model_server_release(ms, old);
    CHECK(psg_model_server_acquire(ms, 10) == NULL);
    psg_servable_t *now = psg_model_server_acquire(ms, 20);
    CHECK(now != NULL);
    psg_model_server_release(ms, now);
    psg_model_server_destroy(&ms);
    CHECK(ms == NULL);
}

/* psg_float_text_g9 writes what snprintf's "%.9g" writes, for every float it takes (all
 * of 1e-20 to 1e37: any answer's logits and probabilities), checked on a million random bit
 * patterns, a million values of answers' ranges and the edges of rounding and notation. */
static void test_float_text(void) {
    uint64_t s = 88172645463325252ull;
    int bad = 0, declined_in_range = 0;
    for (int i = 0; i < 2000000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float x;
        if (i % 2 == 0) {
            uint32_t b = (uint32_t)s;
            memcpy(&x, &b, sizeof x);
        } else { /* a logit, or a probability down to 1e-13 */
            double u = (double)(s >> 11) / 9007199254740992.0;
            x = i % 4 == 1 ? (float)(u * 60 - 30) : (float)exp(-u * 30);
        }
        char ours[PSG_FLOAT_TEXT_MAX], printf_[64];
        int n = psg_float_text_g9(x, ours);
        if (n == 0) {
            declined_in_range += isfinite(x) && fabsf(x) >= 1e-20f && fabsf(x) <= 1e37f;
            continue;
        }
        snprintf(printf_, sizeof printf_, "%.9g", (double)x);
        if (strcmp(ours, printf_) || n != (int)strlen(printf_)) {
            if (bad++ < 5) fprintf(stderr, "%a: printf %s, ours %s\n", (double)x, printf_, ours);
        }
    }
    CHECK(bad == 0);
    CHECK(declined_in_range == 0);
    const float edges[] = {0.0f,        -0.0f,  1.0f,         -1.0f,        10.0f,
                           1e8f,        1e9f,   999999999.0f, 123456789.0f, 1e-4f,
                           9.9999e-5f,  0.1f,   0.5f,         16777216.0f,  1e-5f,
                           99999.9961f, 1e-20f, 1e37f,        3.0e-8f,      0.00012345679f};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
        char ours[PSG_FLOAT_TEXT_MAX], printf_[64];
        snprintf(printf_, sizeof printf_, "%.9g", (double)edges[i]);
        CHECK(psg_float_text_g9(edges[i], ours) > 0 && !strcmp(ours, printf_));
    }
    char out[PSG_FLOAT_TEXT_MAX];
    CHECK(psg_float_text_g9(NAN, out) == 0 && psg_float_text_g9(-INFINITY, out) == 0);
    /* an answer: NaN as null, beyond the fast range through printf */
    psg_tensor_t *t = psg_tensor_zeros(PSG_DT_F32, &(psg_shape_t){2, {1, 4}});
    float *v = psg_tensor_f32(t);
    v[0] = 0.1f, v[1] = NAN, v[2] = 3.4e38f, v[3] = -2.5e-30f;
    psg_servable_tensor_t out_sig = {.name = "logits", .dtype = PSG_DT_F32};
    psg_rest_signature_t sig = {1, 1, image_in, &out_sig};
    psg_strbuf_t b = {0};
    psg_rest_format_predict(&sig, false, &t, 0, 1, &b);
    char want[160];
    snprintf(want, sizeof want, "{\"predictions\":[[%.9g,null,%.9g,%.9g]]}", (double)v[0],
             (double)v[2], (double)v[3]);
    CHECK(b.s && !strcmp(b.s, want));
    free(b.s);
    psg_tensor_destroy(&t);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/psg_test_serving.XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN_TEST(test_onnx_refusals);
    RUN_TEST(test_servable_merges_column_shards);
    RUN_TEST(test_servable_lanes);
    RUN_TEST(test_row_shards_merged);
    RUN_TEST(test_rest_routes);
    RUN_TEST(test_rest_bodies);
    RUN_TEST(test_rest_direct_reader);
    RUN_TEST(test_rest_split_reader);
    RUN_TEST(test_float_text);
    RUN_TEST(test_model_server);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return psg_test_summary();
}
