/* `psgraph bench inception3`: Inception-v3 training (or inference) steps on
 * synthetic images or ImageNet shards, images/sec per interval and one final
 * JSON line, as tf_cnn_benchmarks; also what `psgraph train --model
 * inception3` runs. Not the distributed or GPU benchmark (issues 3/4, 6). */
#include "cli/commands.h"
#include "psgraph/psgraph.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int batch, steps, warmup, image_size, classes, threads, log_every, decode_threads;
    int workers, ps, backups, towers;
    bool aux, print_model, forward_only;
    const char *device, *data, *data_dir, *step_times;
    double lr;
    uint64_t seed;
} bench_opts_t;

static void usage(FILE *f, const char *cmd) {
    fprintf(f,
            "usage: psgraph %s [options]\n"
            "  --batch B             images per step (default 32)\n"
            "  --steps N             timed steps (default 10)\n"
            "  --warmup W            untimed steps first (default 2)\n"
            "  --image-size S        input height and width, >= 75 (default 299)\n"
            "  --classes C           (default 1000)\n"
            "  --aux                 with the auxiliary head\n"
            "  --forward-only        inference steps (no gradients)\n"
            "  --data synthetic|imagenet   (default synthetic: one random batch, made once)\n"
            "  --data-dir DIR        ImageNet TFRecord shards (train-*)\n"
            "  --decode-threads T    JPEG decode threads (default 2)\n"
            "  --threads T           compute threads (default: the cores)\n"
            "  --lr X                initial learning rate (default 0.045)\n"
            "  --seed S              (default 1)\n"
            "  --log-every N         a progress line every N steps (default 1)\n"
            "  --step-times FILE     write each timed step's milliseconds, one a line\n"
            "                        (input to psgraph simulate --samples)\n"
            "  --print-model         print parameters and multiply-adds, then exit\n"
            "  --device cpu          (gpu: issue 6)   --towers K (GPU towers: issue 6)\n"
            "  --ps P --workers W --backup-workers b  (the distributed runtime: issues 3/4)\n",
            cmd);
}

static int num(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "psgraph: %s: '%s' is not a number in [%g, %g]\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* Parses argv[first..]; returns 0, 1 for --help (printed), 2 on a bad option. */
static int parse(int argc, char **argv, int first, const char *cmd, bench_opts_t *o) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (bench_opts_t){.batch = 32, .steps = 10, .warmup = 2, .image_size = 299, .classes = 1000,
                        .threads = cores > 0 ? (int)cores : 1, .log_every = 1, .decode_threads = 2,
                        .workers = 1, .ps = 0, .backups = 0, .towers = 1, .device = "cpu",
                        .data = "synthetic", .lr = 0.045, .seed = 1};
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, cmd);
            return 1;
        }
        if (!strcmp(a, "--aux")) { o->aux = true; continue; }
        if (!strcmp(a, "--print-model")) { o->print_model = true; continue; }
        if (!strcmp(a, "--forward-only")) { o->forward_only = true; continue; }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "psgraph %s: %s '%s'\n", cmd, i + 1 >= argc ? "missing value for" : "unexpected argument", a);
            return 2;
        }
        const char *v = argv[++i];
        double x = 0;
        int rc = 0;
        if (!strcmp(a, "--model")) {
            if (strcmp(v, "inception3")) {
                fprintf(stderr, "psgraph %s: only --model inception3 here\n", cmd);
                return 2;
            }
        } else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--data-dir")) o->data_dir = v;
        else if (!strcmp(a, "--step-times")) o->step_times = v;
        else if (!strcmp(a, "--batch")) { rc = num(a, v, 1, 1 << 16, &x); o->batch = (int)x; }
        else if (!strcmp(a, "--steps")) { rc = num(a, v, 1, 1e9, &x); o->steps = (int)x; }
        else if (!strcmp(a, "--warmup")) { rc = num(a, v, 0, 1e6, &x); o->warmup = (int)x; }
        else if (!strcmp(a, "--image-size")) { rc = num(a, v, 75, 4096, &x); o->image_size = (int)x; }
        else if (!strcmp(a, "--classes")) { rc = num(a, v, 2, 1e6, &x); o->classes = (int)x; }
        else if (!strcmp(a, "--threads")) { rc = num(a, v, 1, 1024, &x); o->threads = (int)x; }
        else if (!strcmp(a, "--decode-threads")) { rc = num(a, v, 1, 1024, &x); o->decode_threads = (int)x; }
        else if (!strcmp(a, "--log-every")) { rc = num(a, v, 1, 1e9, &x); o->log_every = (int)x; }
        else if (!strcmp(a, "--lr")) { rc = num(a, v, 1e-9, 100, &x); o->lr = x; }
        else if (!strcmp(a, "--seed")) { rc = num(a, v, 0, 1e18, &x); o->seed = (uint64_t)x; }
        else if (!strcmp(a, "--workers")) { rc = num(a, v, 1, 1e5, &x); o->workers = (int)x; }
        else if (!strcmp(a, "--ps")) { rc = num(a, v, 0, 1e5, &x); o->ps = (int)x; }
        else if (!strcmp(a, "--backup-workers")) { rc = num(a, v, 0, 1e5, &x); o->backups = (int)x; }
        else if (!strcmp(a, "--towers")) { rc = num(a, v, 1, 64, &x); o->towers = (int)x; }
        else {
            fprintf(stderr, "psgraph %s: unknown option '%s'\n", cmd, a);
            usage(stderr, cmd);
            return 2;
        }
        if (rc < 0) return 2;
    }
    if (strcmp(o->device, "cpu") || o->towers > 1) {
        fprintf(stderr, "psgraph %s: --device %s --towers %d needs the CUDA path (issue 6); only --device cpu runs now\n",
                cmd, o->device, o->towers);
        return 2;
    }
    if (o->workers > 1 || o->ps > 0 || o->backups > 0) {
        fprintf(stderr, "psgraph %s: --workers/--ps/--backup-workers need the distributed runtime (issues 3/4); "
                        "`psgraph simulate` predicts the scaling meanwhile\n", cmd);
        return 2;
    }
    if (strcmp(o->data, "synthetic") && strcmp(o->data, "imagenet")) {
        fprintf(stderr, "psgraph %s: --data: unknown '%s' (synthetic, imagenet)\n", cmd, o->data);
        return 2;
    }
    if (!strcmp(o->data, "imagenet") && !o->data_dir) {
        fprintf(stderr, "psgraph %s: --data imagenet needs --data-dir\n", cmd);
        return 2;
    }
    return 0;
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_model(const bench_opts_t *o, const psg_model_stats_t *s) {
    printf("inception3: %dx%dx3 input, %d classes, auxiliary head %s\n", o->image_size, o->image_size,
           o->classes, o->aux ? "on" : "off");
    printf("parameters: %lld (trainable %lld; batch-norm moving mean and variance %lld; "
           "batch norm has beta only, no gamma, as Keras's conv2d_bn)\n",
           (long long)s->params, (long long)s->trainable, (long long)(s->params - s->trainable));
    printf("forward multiply-adds per image: %lld (%.3f G; conv and fully connected layers)\n",
           (long long)s->macs_per_example, (double)s->macs_per_example / 1e9);
    printf("{\"model\":\"inception3\",\"image_size\":%d,\"classes\":%d,\"aux_logits\":%s,\"params\":%lld,"
           "\"trainable_params\":%lld,\"macs_per_image\":%lld}\n",
           o->image_size, o->classes, o->aux ? "true" : "false", (long long)s->params,
           (long long)s->trainable, (long long)s->macs_per_example);
}

static void on_skip(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "psgraph: skipped: %s\n", msg);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(const bench_opts_t *o, const char *cmd) {
    psg_inception3_config_t c = psg_inception3_defaults();
    c.image_size = o->image_size;
    c.classes = o->classes;
    c.aux_logits = o->aux;
    c.is_training = !o->forward_only;
    c.seed = o->seed;
    psg_graph_t *g = psg_graph_new();
    psg_session_t *sess = NULL;
    psg_callable_t *step = NULL;
    psg_imagenet_t *inet = NULL;
    psg_batch_iter_t *it = NULL;
    psg_tensor_t *img = NULL, *lab = NULL;
    double *times = NULL;
    int rc = 1;
    psg_inception3_t m;
    psg_model_stats_t st;
    if (psg_inception3_build(g, &c, &m) < 0 || psg_model_stats(g, NULL, &st) < 0) goto fail;
    if (o->print_model) {
        print_model(o, &st);
        rc = 0;
        goto out;
    }
    psg_inception3_recipe_t r = psg_inception3_recipe_defaults();
    r.learning_rate = o->lr;
    r.batch = o->batch;
    if (!strcmp(o->data, "imagenet")) {
        psg_imagenet_options_t io = psg_imagenet_defaults(true);
        io.image_size = o->image_size;
        io.classes = o->classes;
        io.threads = o->decode_threads;
        io.seed = o->seed;
        io.report = on_skip;
        inet = psg_imagenet_new(o->data_dir, &io);
        if (!inet) goto fail;
        r.examples_per_epoch = psg_imagenet_num_records(inet);
        psg_batch_iter_options_t bo = psg_batch_iter_train_options(o->batch, o->seed);
        if (!(it = psg_batch_iter_new(psg_imagenet_dataset(inet), &bo))) goto fail;
    } else {
        /* one random batch, made once, fed every step (tf_cnn_benchmarks' synthetic input) */
        unsigned seed = (unsigned)o->seed;
        img = psg_tensor_new(PSG_DT_F32, &(psg_shape_t){4, {o->batch, o->image_size, o->image_size, 3}});
        lab = psg_tensor_new(PSG_DT_I32, &(psg_shape_t){1, {o->batch}});
        if (!img || !lab) goto fail;
        for (int64_t i = 0; i < psg_tensor_numel(img); i++)
            psg_tensor_f32(img)[i] = (float)rand_r(&seed) / (float)RAND_MAX * 2.0f - 1.0f;
        for (int i = 0; i < o->batch; i++) psg_tensor_i32(lab)[i] = rand_r(&seed) % o->classes;
    }
    int train_op = -1;
    psg_endpoint_t lr = PSG_NO_ENDPOINT;
    if (!o->forward_only && psg_inception3_train_op(g, &r, &m, &train_op, &lr) < 0) goto fail;
    psg_session_options_t so = {.num_threads = o->threads};
    if (!(sess = psg_session_new(g, &so, NULL)) || psg_session_run_init(sess) < 0) goto fail;
    psg_endpoint_t feeds[2] = {m.images, m.labels};
    psg_endpoint_t fetch[1] = {o->forward_only ? m.xent : m.loss};
    step = psg_session_make_callable(sess, 2, feeds, 1, fetch, o->forward_only ? 0 : 1, &train_op);
    if (!step) goto fail;
    printf("psgraph %s: inception3 %s, %s, batch %d, %dx%d, %d classes, %d threads, %s, "
           "%lld params, %.2f GMACs/image\n",
           cmd, o->forward_only ? "forward" : "training", o->data, o->batch, o->image_size,
           o->image_size, o->classes, o->threads,
           o->forward_only ? "no optimizer"
                           : "RMSProp(0.9, momentum 0.9, eps 1.0), lr 0.045 x0.94/2 epochs, EMA 0.9999",
           (long long)st.params, (double)st.macs_per_example / 1e9);
    if (!o->forward_only)
        printf("learning rate %g, decay every %lld steps\n", o->lr, (long long)psg_inception3_decay_steps(&r));
    printf("Step\tImg/sec\ttotal_loss\n");
    fflush(stdout);
    times = calloc((size_t)o->steps, sizeof *times);
    if (!times) goto fail;
    double loss = NAN, interval_start = 0, timed = 0;
    int interval_steps = 0;
    for (int s = 0; s < o->warmup + o->steps; s++) {
        psg_tensor_t *bi = img, *bl = lab, *out = NULL;
        double t0 = now_sec();
        if (it) {
            bi = bl = NULL;
            if (psg_batch_iter_next(it, &bi, &bl) != 1) goto fail;
        }
        psg_tensor_t *fv[2] = {bi, bl};
        int src = psg_callable_run(step, fv, &out);
        if (it) {
            psg_tensor_destroy(&bi);
            psg_tensor_destroy(&bl);
        }
        if (src < 0) {
            psg_error_wrap("step %d", s);
            goto fail;
        }
        loss = psg_tensor_f32(out)[0];
        psg_tensor_destroy(&out);
        double dt = now_sec() - t0;
        if (!isfinite(loss)) {
            psg_error_set("step %d: the loss is %g", s, loss);
            goto fail;
        }
        if (s < o->warmup) {
            printf("warmup %d\t%.2f s\t%.3f\n", s + 1, dt, loss);
            fflush(stdout);
            continue;
        }
        int k = s - o->warmup;
        times[k] = dt * 1000.0;
        timed += dt;
        if (interval_steps == 0) interval_start = t0;
        interval_steps++;
        if ((k + 1) % o->log_every == 0 || k + 1 == o->steps) {
            double ips = interval_steps * o->batch / (now_sec() - interval_start);
            printf("%d\timages/sec: %.2f\t%.3f\n", k + 1, ips, loss);
            fflush(stdout);
            interval_steps = 0;
        }
    }
    double *sorted = malloc((size_t)o->steps * sizeof *sorted);
    if (!sorted) goto fail;
    memcpy(sorted, times, (size_t)o->steps * sizeof *sorted);
    qsort(sorted, (size_t)o->steps, sizeof *sorted, cmp_double);
    double median = sorted[o->steps / 2], p90 = sorted[(int)(0.9 * (o->steps - 1))];
    free(sorted);
    double ips = o->steps * o->batch / timed;
    printf("total images/sec: %.2f\n", ips);
    printf("{\"bench\":\"inception3\",\"device\":\"cpu\",\"mode\":\"%s\",\"data\":\"%s\",\"batch\":%d,"
           "\"image_size\":%d,\"classes\":%d,\"threads\":%d,\"warmup_steps\":%d,\"steps\":%d,"
           "\"images_per_sec\":%.3f,\"step_ms_median\":%.1f,\"step_ms_p90\":%.1f,\"final_loss\":%.4f,"
           "\"params\":%lld,\"macs_per_image\":%lld,\"gmacs_per_sec\":%.2f,\"skipped_records\":%lld}\n",
           o->forward_only ? "forward" : "train", o->data, o->batch, o->image_size, o->classes,
           o->threads, o->warmup, o->steps, ips, median, p90, loss, (long long)st.params,
           (long long)st.macs_per_example,
           ips * (double)st.macs_per_example * (o->forward_only ? 1 : 3) / 1e9,
           inet ? (long long)psg_imagenet_num_skipped(inet) : 0LL);
    if (o->step_times) {
        FILE *f = fopen(o->step_times, "w");
        if (!f) {
            psg_error_set("--step-times %s: %s", o->step_times, strerror(errno));
            goto fail;
        }
        for (int k = 0; k < o->steps; k++) fprintf(f, "%.3f\n", times[k]);
        fclose(f);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "psgraph %s: %s\n", cmd, psg_error_message());
    rc = 1;
out:
    free(times);
    psg_tensor_destroy(&img);
    psg_tensor_destroy(&lab);
    psg_batch_iter_destroy(&it);
    psg_imagenet_destroy(&inet);
    psg_callable_destroy(&step);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
    return rc;
}

int psg_cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: psgraph bench inception3 [options] (psgraph bench inception3 --help)\n");
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "inception3")) {
        fprintf(stderr, "psgraph bench: unknown benchmark '%s' (known: inception3)\n", argv[1]);
        return 2;
    }
    bench_opts_t o;
    int rc = parse(argc, argv, 2, "bench inception3", &o);
    if (rc) return rc == 1 ? 0 : 2;
    return run(&o, "bench inception3");
}

int psg_cmd_train_inception3(int argc, char **argv) {
    bench_opts_t o;
    int rc = parse(argc, argv, 1, "train", &o);
    if (rc) return rc == 1 ? 0 : 2;
    return run(&o, "train");
}
