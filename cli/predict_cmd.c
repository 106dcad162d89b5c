/* `psgraph predict --model-dir DIR FILE...`: a trained model's answers on files, one
 * JSON line an input: the top-k classes with their probabilities, or an output tensor
 * (--output NAME). Images (JPEG, PNG), IDX image files (Fashion-MNIST's), TFRecord
 * shards of ImageNet's tf.Examples and CSV rows in; with labels (--labels IDX, or a
 * TFRecord's), a last line with the accuracy. Not a server (psgraph serve). */
#include "cli/serving_cmds.h"
#include "psgraph/data.h"
#include "psgraph/error.h"
#include "psgraph/imagenet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *usage =
    "usage: psgraph predict --model-dir DIR [options] FILE...\n"
    "  FILE                  an image (.jpg, .jpeg, .png), IDX images (*idx3-ubyte[.gz], *.idx),\n"
    "                        TFRecord shards (*.tfrecord, or a directory of them) or CSV rows\n"
    "                        (*.csv: a row is the inputs' values flattened, in signature order)\n"
    "  --model-dir DIR       a training log directory (its newest checkpoint), or --checkpoint FILE\n"
    "  --top-k K             classes a line (default 5)\n"
    "  --output NAME         print this output tensor (logits, probabilities) instead of classes\n"
    "  --labels FILE         IDX labels of the IDX images: each line gets its label and a last\n"
    "                        line the accuracy\n"
    "  --batch B             inputs run at once (default 250, as training's evaluation)\n" PSG_CLI_SERVABLE_HELP;

typedef struct {
    psg_servable_t *s;
    int top_k, output; /* output: the printed tensor's index, -1 for the top-k classes */
    int batch;
    int64_t examples, correct, labeled;
} predict_t;

/* ---- output ---- */

static void print_row(predict_t *p, const char *name, int64_t index, psg_tensor_t *const *outs,
                      int64_t row, int32_t label) {
    printf("{\"input\":\"%s", name);
    if (index >= 0) printf(":%lld", (long long)index);
    printf("\"");
    const psg_tensor_t *t =
        outs[p->output >= 0 ? p->output : psg_servable_find_output(p->s, "probabilities")];
    int64_t width = t->shape.rank > 1 ? t->shape.dims[1] : 1;
    const float *v = psg_tensor_f32(t) + row * width;
    if (p->output >= 0) {
        printf(",\"%s\":", psg_servable_output(p->s, p->output)->name);
        if (t->shape.rank > 1) printf("[");
        for (int64_t k = 0; k < width; k++) printf("%s%.9g", k ? "," : "", (double)v[k]);
        if (t->shape.rank > 1) printf("]");
    } else {
        int k = p->top_k < width ? p->top_k : (int)width, best[64];
        for (int i = 0; i < k; i++) { /* k small: selection */
            best[i] = -1;
            for (int64_t c = 0; c < width; c++) {
                bool taken = false;
                for (int j = 0; j < i; j++) taken = taken || best[j] == c;
                if (!taken && (best[i] < 0 || v[c] > v[best[i]])) best[i] = (int)c;
            }
        }
        printf(",\"classes\":[");
        for (int i = 0; i < k; i++) printf("%s%d", i ? "," : "", best[i]);
        printf("],\"scores\":[");
        for (int i = 0; i < k; i++) printf("%s%.6g", i ? "," : "", (double)v[best[i]]);
        printf("]");
        if (label >= 0) {
            p->labeled++;
            p->correct += best[0] == label;
        }
    }
    if (label >= 0) printf(",\"label\":%d", label);
    printf("}\n");
    p->examples++;
}

/* Runs rows [0, n) of the inputs and prints a line each, indexed from first. */
static int run_rows(predict_t *p, const char *name, int64_t first, psg_tensor_t *const *in,
                    const int32_t *labels, bool indexed) {
    psg_tensor_t *outs[PSG_SERVABLE_MAX_IO] = {0};
    if (psg_servable_run(p->s, in, outs) < 0) return psg_error_wrap("%s", name);
    for (int64_t r = 0; r < in[0]->shape.dims[0]; r++)
        print_row(p, name, indexed ? first + r : -1, outs, r, labels ? labels[r] : -1);
    for (int j = 0; j < PSG_SERVABLE_MAX_IO; j++) psg_tensor_destroy(&outs[j]);
    return 0;
}

/* ---- inputs ---- */

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static int image_input(predict_t *p, psg_shape_t *s) {
    const psg_servable_tensor_t *in = psg_servable_input(p->s, 0);
    if (psg_servable_num_inputs(p->s) != 1 || in->shape.rank != 4)
        return psg_error_set("the %s takes no images (its inputs: %s...): give CSV rows",
                             psg_servable_model(p->s), in->name);
    *s = in->shape;
    return 0;
}

/* IDX images: [N, R, C] scaled to [0, 1] as training reads them, run in batches. */
static int predict_idx(predict_t *p, const char *path, const char *labels_path) {
    psg_shape_t want = {0};
    if (image_input(p, &want) < 0) return -1;
    psg_tensor_t *images = psg_idx_load_images(path), *labels = NULL;
    if (!images) return -1;
    int rc = -1;
    if (labels_path && !(labels = psg_idx_load_labels(labels_path))) goto out;
    int64_t n = images->shape.dims[0];
    if (images->shape.dims[1] != want.dims[1] || images->shape.dims[2] != want.dims[2] ||
        want.dims[3] != 1) {
        psg_error_set("%s: images of %lld x %lld x 1, the model takes %lld x %lld x %lld", path,
                      (long long)images->shape.dims[1], (long long)images->shape.dims[2],
                      (long long)want.dims[1], (long long)want.dims[2], (long long)want.dims[3]);
        goto out;
    }
    if (labels && labels->shape.dims[0] != n) {
        psg_error_set("%s has %lld labels for %lld images", labels_path,
                      (long long)labels->shape.dims[0], (long long)n);
        goto out;
    }
    int64_t per = images->shape.dims[1] * images->shape.dims[2];
    for (int64_t at = 0; at < n; at += p->batch) {
        int64_t k = n - at < p->batch ? n - at : p->batch;
        psg_shape_t bs = psg_shape_4d(k, want.dims[1], want.dims[2], 1);
        psg_tensor_t *b = psg_tensor_from_data(PSG_DT_F32, &bs, psg_tensor_f32(images) + at * per,
                                               (size_t)(k * per) * sizeof(float));
        if (!b) goto out;
        int r = run_rows(p, path, at, &b, labels ? (const int32_t *)labels->data + at : NULL, true);
        psg_tensor_destroy(&b);
        if (r < 0) goto out;
    }
    rc = 0;
out:
    psg_tensor_destroy(&images);
    psg_tensor_destroy(&labels);
    return rc;
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        psg_error_set("%s: cannot open", path);
        return NULL;
    }
    uint8_t *d = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap) {
            uint8_t *nd = cap < ((size_t)1 << 30) ? realloc(d, cap = cap ? 2 * cap : 65536) : NULL;
            if (!nd) {
                free(d);
                fclose(f);
                psg_error_set("%s: too big or out of memory", path);
                return NULL;
            }
            d = nd;
        }
        size_t r = fread(d + *n, 1, cap - *n, f);
        *n += r;
        if (r == 0) break;
    }
    fclose(f);
    return d;
}

/* One encoded image: for 3 channels, the central 87.5% resized and scaled to [-1, 1] as
 * the ImageNet evaluation reads it; for 1, luminance resized (nearest) to [0, 1]. */
static int predict_image(predict_t *p, const char *path) {
    psg_shape_t want = {0};
    if (image_input(p, &want) < 0) return -1;
    size_t n;
    uint8_t *data = read_file(path, &n), *rgb = NULL;
    if (!data) return -1;
    int w, h;
    int rc = psg_image_decode(data, n, &rgb, &w, &h);
    free(data);
    if (rc < 0) return psg_error_wrap("%s", path);
    int H = (int)want.dims[1], W = (int)want.dims[2], C = (int)want.dims[3];
    psg_shape_t bs = psg_shape_4d(1, H, W, C);
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, &bs);
    if (!t || (C != 1 && C != 3)) {
        free(rgb);
        psg_tensor_destroy(&t);
        return psg_error_set("%s: the model takes %d channels (1 or 3 read from images)", path, C);
    }
    float *o = psg_tensor_f32(t);
    if (C == 3) {
        int cw = (int)lround(w * 0.875), ch = (int)lround(h * 0.875);
        psg_image_crop_resize(rgb, w, h, (w - cw) / 2, (h - ch) / 2, cw, ch, false, H, o);
    } else {
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                const uint8_t *px =
                    rgb + ((size_t)(y * h / H) * (size_t)w + (size_t)(x * w / W)) * 3;
                o[y * W + x] = (0.299f * px[0] + 0.587f * px[1] + 0.114f * px[2]) / 255.0f;
            }
    }
    free(rgb);
    rc = run_rows(p, path, 0, &t, NULL, false);
    psg_tensor_destroy(&t);
    return rc;
}

/* ImageNet TFRecord shards, evaluated as training's validation reads them. */
static int predict_tfrecord(predict_t *p, const char *path) {
    psg_shape_t want = {0};
    if (image_input(p, &want) < 0) return -1;
    psg_imagenet_options_t o = psg_imagenet_defaults(false);
    o.image_size = (int)want.dims[1];
    o.classes = (int)psg_servable_output(p->s, 0)->shape.dims[1];
    psg_imagenet_t *r = psg_imagenet_new(path, &o);
    if (!r) return -1;
    const psg_dataset_t *ds = psg_imagenet_dataset(r);
    int rc = 0;
    for (int64_t at = 0; rc == 0 && at < psg_dataset_size(ds); at += p->batch) {
        int64_t k = psg_dataset_size(ds) - at < p->batch ? psg_dataset_size(ds) - at : p->batch;
        psg_tensor_t *img = NULL, *lab = NULL;
        rc = psg_dataset_slice(ds, at, k, &img, &lab);
        if (rc == 0) rc = run_rows(p, path, at, &img, (const int32_t *)lab->data, true);
        psg_tensor_destroy(&img);
        psg_tensor_destroy(&lab);
    }
    psg_imagenet_destroy(&r);
    return rc;
}

/* CSV: each row the inputs' values, flattened, in signature order. */
static int csv_row(predict_t *p, const char *path, int line, char *text, psg_tensor_t **in,
                   int64_t row) {
    char *s = text;
    for (int i = 0; i < psg_servable_num_inputs(p->s); i++) {
        int64_t per = psg_tensor_numel(in[i]) / in[i]->shape.dims[0];
        for (int64_t k = 0; k < per; k++) {
            while (*s == ' ') s++;
            if (!*s || *s == '\n' || *s == '\r')
                return psg_error_set(
                    "%s:%d: the row ends at value %lld of input '%s' (%lld values a row)", path,
                    line, (long long)k, psg_servable_input(p->s, i)->name, (long long)per);
            char *end;
            double v = strtod(s, &end);
            if (end == s || (*end && *end != ',' && *end != '\n' && *end != '\r'))
                return psg_error_set("%s:%d: value %lld of input '%s' is not a number", path, line,
                                     (long long)k, psg_servable_input(p->s, i)->name);
            if (in[i]->dtype == PSG_DT_F32)
                psg_tensor_f32(in[i])[row * per + k] = (float)v;
            else if (in[i]->dtype == PSG_DT_I64 && v == floor(v) && fabs(v) < 9e15)
                ((int64_t *)in[i]->data)[row * per + k] = (int64_t)v;
            else
                return psg_error_set("%s:%d: input '%s' takes integers, got %g", path, line,
                                     psg_servable_input(p->s, i)->name, v);
            s = *end == ',' ? end + 1 : end;
        }
    }
    while (*s == '\r' || *s == '\n' || *s == ' ') s++;
    if (*s) return psg_error_set("%s:%d: more values than the inputs take", path, line);
    return 0;
}

static int predict_csv(predict_t *p, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return psg_error_set("%s: cannot open", path);
    int n_in = psg_servable_num_inputs(p->s), line = 0, rc = 0;
    psg_tensor_t *in[PSG_SERVABLE_MAX_IO] = {0};
    for (int i = 0; i < n_in && rc == 0; i++) {
        psg_shape_t s = psg_servable_input(p->s, i)->shape;
        s.dims[0] = p->batch;
        if (!(in[i] = psg_tensor_zeros(psg_servable_input(p->s, i)->dtype, &s))) rc = -1;
    }
    char *text = NULL;
    size_t cap = 0;
    int64_t rows = 0, first = 0;
    while (rc == 0 && getline(&text, &cap, f) >= 0) {
        line++;
        if (strspn(text, " \r\n") == strlen(text)) continue;
        rc = csv_row(p, path, line, text, in, rows);
        if (rc == 0 && ++rows == p->batch) {
            rc = run_rows(p, path, first, in, NULL, true);
            first += rows;
            rows = 0;
        }
    }
    if (rc == 0 && rows > 0) { /* the tail: its rows of each input */
        psg_tensor_t *tail[PSG_SERVABLE_MAX_IO] = {0};
        for (int i = 0; i < n_in && rc == 0; i++) {
            psg_shape_t s = in[i]->shape;
            s.dims[0] = rows;
            if (!(tail[i] = psg_tensor_from_data(in[i]->dtype, &s, in[i]->data,
                                                 (size_t)psg_shape_numel(&s) *
                                                     psg_dtype_size(in[i]->dtype))))
                rc = -1;
        }
        if (rc == 0) rc = run_rows(p, path, first, tail, NULL, true);
        for (int i = 0; i < n_in; i++) psg_tensor_destroy(&tail[i]);
    }
    for (int i = 0; i < n_in; i++) psg_tensor_destroy(&in[i]);
    free(text);
    fclose(f);
    return rc;
}

static int predict_file(predict_t *p, const char *path, const char *labels) {
    if (ends_with(path, ".csv")) return predict_csv(p, path);
    if (ends_with(path, ".jpg") || ends_with(path, ".jpeg") || ends_with(path, ".png") ||
        ends_with(path, ".JPEG"))
        return predict_image(p, path);
    if (ends_with(path, "-ubyte") || ends_with(path, "-ubyte.gz") || ends_with(path, ".idx") ||
        ends_with(path, ".idx.gz"))
        return predict_idx(p, path, labels);
    return predict_tfrecord(p, path);
}

int psg_cmd_predict(int argc, char **argv) {
    const char *dir = NULL, *labels = NULL, *output = NULL, *files[256];
    int n_files = 0;
    predict_t p = {.top_k = 5, .batch = 250};
    psg_servable_options_t o = {.spin_us = PSG_CLI_SPIN_US_DEFAULT};
    for (int i = 1; i < argc; i++) {
        int r = psg_cli_servable_option(argc, argv, &i, &o);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (a[0] != '-') {
            if (n_files == 256) return fprintf(stderr, "psgraph predict: at most 256 files\n"), 2;
            files[n_files++] = a;
            continue;
        }
        if (i + 1 >= argc)
            return fprintf(stderr, "psgraph predict: no value for %s\n%s", a, usage), 2;
        const char *v = argv[++i];
        if (!strcmp(a, "--model-dir") || !strcmp(a, "--checkpoint"))
            dir = v;
        else if (!strcmp(a, "--labels"))
            labels = v;
        else if (!strcmp(a, "--output"))
            output = v;
        else if (!strcmp(a, "--top-k") && (p.top_k = atoi(v)) >= 1 && p.top_k <= 64)
            continue;
        else if (!strcmp(a, "--batch") && (p.batch = atoi(v)) >= 1 && p.batch <= 65536)
            continue;
        else
            return fprintf(stderr, "psgraph predict: bad option %s %s\n%s", a, v, usage), 2;
    }
    if (!dir || n_files == 0)
        return fprintf(stderr,
                       "psgraph predict: --model-dir and at least one FILE are required\n%s",
                       usage),
               2;
    if (!(p.s = psg_servable_load(dir, &o))) {
        fprintf(stderr, "psgraph predict: %s\n", psg_error_message());
        return 1;
    }
    p.output = output ? psg_servable_find_output(p.s, output) : -1;
    if (output && p.output < 0) {
        fprintf(stderr,
                "psgraph predict: --output %s: the model's outputs are logits, probabilities\n",
                output);
        psg_servable_destroy(&p.s);
        return 2;
    }
    if (!output && psg_servable_output(p.s, 0)->shape.rank < 2)
        p.output = psg_servable_find_output(p.s, "probabilities");
    int rc = 0;
    for (int i = 0; i < n_files && rc == 0; i++) rc = predict_file(&p, files[i], labels);
    if (rc < 0)
        fprintf(stderr, "psgraph predict: %s\n", psg_error_message());
    else if (p.labeled > 0)
        printf(
            "{\"event\":\"accuracy\",\"model\":\"%s\",\"checkpoint\":\"%s\",\"examples\":%lld,\"correct\":%lld,"
            "\"accuracy\":%.6f}\n",
            psg_servable_model(p.s), psg_servable_checkpoint(p.s), (long long)p.labeled,
            (long long)p.correct, (double)p.correct / (double)p.labeled);
    psg_servable_destroy(&p.s);
    return rc < 0 ? 1 : 0;
}
