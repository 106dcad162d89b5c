/* Sync replicas in one process: each worker is a thread that builds its own
 * graph (between-graph replication), places and partitions it, and runs its
 * replica's partitions against shared parameter-server resource managers
 * and one rendezvous, as tests/test_partition.c runs one step; the chief's
 * runner is one more thread. Equivalence with one process of batch N·B,
 * backup workers that drop a delayed worker's gradients, a dead worker, and
 * the end of the data; every strategy of the table (tests/strategy_halved.c,
 * compiled in, adds one as a program would) offered by --help and built. */
#include "ops/state/sync_resources.h"
#include "runtime/executor.h"
#include "runtime/partition.h"
#include "psgraph/ops_math.h"
#include "psgraph/session.h"
#include "sync/strategy.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define NUM_PS 2
#define MAX_WORKERS 4
#define B 4   /* each worker's batch */
#define IN 4  /* features */
#define OUT 2 /* targets */
#define LR 0.1f

/* ---- a fake cluster: one resource manager per task, one rendezvous ---- */

typedef struct {
    psg_resource_mgr_t *ps[NUM_PS];
    psg_resource_mgr_t *workers[MAX_WORKERS];
    psg_rendezvous_t *rv;
} cluster_t;

static _Atomic int64_t next_step_id = 1; /* step ids are unique across workers and the chief */

static void cluster_init(cluster_t *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NUM_PS; i++) c->ps[i] = psg_resource_mgr_new();
    for (int i = 0; i < MAX_WORKERS; i++) c->workers[i] = psg_resource_mgr_new();
    c->rv = psg_rendezvous_new(20000); /* longer than any sync timeout */
}

static void cluster_free(cluster_t *c) {
    psg_rendezvous_destroy(&c->rv);
    for (int i = 0; i < NUM_PS; i++) psg_resource_mgr_destroy(&c->ps[i]);
    for (int i = 0; i < MAX_WORKERS; i++) psg_resource_mgr_destroy(&c->workers[i]);
}

static psg_resource_mgr_t *task_rm(cluster_t *c, const char *task) {
    int k = -1;
    if (sscanf(task, "/job:ps/replica:0/task:%d", &k) == 1 && k >= 0 && k < NUM_PS) return c->ps[k];
    if (sscanf(task, "/job:worker/replica:0/task:%d", &k) == 1 && k >= 0 && k < MAX_WORKERS)
        return c->workers[k];
    PSG_ASSERT(!"unknown task");
    return NULL;
}

/* One step signature of one worker's graph: its partitions, their plans made once. */
typedef struct {
    cluster_t *cl;
    psg_partition_set_t *set;
    psg_plan_t **plans;
} prepared_t;

static prepared_t *prepare(cluster_t *cl, psg_graph_t *g, int n_feeds, const psg_endpoint_t *feeds,
                           int n_fetches, const psg_endpoint_t *fetches, int n_targets,
                           const int *targets) {
    prepared_t *p = calloc(1, sizeof *p);
    p->cl = cl;
    p->set = psg_partition_graph(g, n_feeds, feeds, n_fetches, fetches, n_targets, targets, NULL);
    CHECK(p->set != NULL);
    if (!p->set) return p;
    p->plans = calloc((size_t)p->set->num_partitions, sizeof *p->plans);
    for (int k = 0; k < p->set->num_partitions; k++) {
        psg_partition_t *pt = &p->set->partitions[k];
        p->plans[k] = psg_plan_new(pt->graph, pt->num_feeds, pt->feeds, pt->num_fetches,
                                   pt->fetches, pt->num_targets, pt->targets);
        CHECK(p->plans[k] != NULL);
    }
    return p;
}

static void prepared_free(prepared_t **pp) {
    prepared_t *p = *pp;
    if (!p) return;
    for (int k = 0; p->set && k < p->set->num_partitions; k++) psg_plan_destroy(&p->plans[k]);
    free(p->plans);
    psg_partition_set_destroy(&p->set);
    free(p);
    *pp = NULL;
}

typedef struct {
    psg_plan_t *plan;
    psg_run_env_t env;
    psg_tensor_t *feeds[4], *fetched[8];
    int rc;
    psg_err_code_t code;
    char error[1024];
} part_run_t;

static void *part_main(void *arg) {
    part_run_t *r = arg;
    r->rc = psg_plan_run_with(r->plan, &r->env, r->feeds, r->fetched);
    r->code = psg_error_code();
    if (r->rc < 0) snprintf(r->error, sizeof r->error, "%s", psg_error_message());
    return NULL;
}

/* Runs every partition (the last on this thread) under a fresh step id. */
static int prepared_run(prepared_t *p, psg_tensor_t *const *feeds, psg_tensor_t **fetched) {
    if (!p->set) return psg_error_set("not prepared");
    int np = p->set->num_partitions, rc = 0;
    int64_t step = atomic_fetch_add(&next_step_id, 1);
    part_run_t runs[8];
    pthread_t th[8];
    PSG_ASSERT(np <= 8);
    memset(runs, 0, sizeof runs);
    for (int k = 0; k < np; k++) {
        psg_partition_t *pt = &p->set->partitions[k];
        runs[k].plan = p->plans[k];
        runs[k].env = (psg_run_env_t){
            .rm = task_rm(p->cl, pt->task), .step_id = step, .rendezvous = p->cl->rv};
        for (int i = 0; i < pt->num_feeds; i++) runs[k].feeds[i] = feeds[pt->feed_index[i]];
    }
    for (int k = 0; k < np - 1; k++)
        PSG_ASSERT(pthread_create(&th[k], NULL, part_main, &runs[k]) == 0);
    part_main(&runs[np - 1]);
    for (int k = 0; k < np - 1; k++) pthread_join(th[k], NULL);
    const part_run_t *failed = NULL;
    for (int k = 0; k < np; k++) {
        psg_partition_t *pt = &p->set->partitions[k];
        if (runs[k].rc < 0) {
            rc = -1;
            /* the node that failed first, not a partition its abort woke */
            if (!failed || psg_error_is_cause_of(failed->code, runs[k].code)) failed = &runs[k];
        }
        for (int i = 0; i < pt->num_fetches; i++) fetched[pt->fetch_index[i]] = runs[k].fetched[i];
    }
    psg_rendezvous_cleanup_step(p->cl->rv, step);
    return rc < 0 ? psg_error_set_code(failed->code, "%s", failed->error) : 0;
}

/* ---- the model: linear regression, mean squared error ---- */

typedef struct {
    psg_graph_t *g;
    psg_replica_setter_t *setter;
    psg_optimizer_t *opt;
    psg_sync_replicas_t *sr;
    psg_sync_graph_t sg;
    psg_endpoint_t x, y, loss;
    int train; /* single process: the optimizer's train op */
} model_t;

static void build_model(model_t *m, int batch, int worker, const psg_sync_config_t *cfg) {
    memset(m, 0, sizeof *m);
    m->g = psg_graph_new();
    char dev[64];
    snprintf(dev, sizeof dev, "/job:worker/task:%d", worker);
    psg_replica_setter_options_t so = {.ps_tasks = cfg ? NUM_PS : 0, .worker_device = dev};
    m->setter = psg_replica_setter_new(&so);
    psg_graph_push_replica_setter(m->g, m->setter);
    psg_graph_t *g = m->g;
    psg_shape_t sx = psg_shape_2d(batch, IN), sy = psg_shape_2d(batch, OUT);
    psg_shape_t sw = psg_shape_2d(IN, OUT), sb = psg_shape_1d(OUT);
    m->x = psg_placeholder(g, "x", PSG_DT_F32, &sx);
    m->y = psg_placeholder(g, "y", PSG_DT_F32, &sy);
    psg_endpoint_t w =
        psg_variable(g, "w", PSG_DT_F32, &sw, (psg_initializer_t){"uniform", 1, 11}, true);
    psg_endpoint_t b =
        psg_variable(g, "b", PSG_DT_F32, &sb, (psg_initializer_t){"uniform", 1, 12}, true);
    psg_endpoint_t pred = psg_bias_add(
        g, "pred", psg_matmul(g, "xw", m->x, psg_read_variable(g, "w/read", w), false, false),
        psg_read_variable(g, "b/read", b));
    m->loss =
        psg_mean(g, "loss", psg_square(g, NULL, psg_sub(g, NULL, pred, m->y)), 0, NULL, false);
    psg_optimizer_config_t oc = psg_optimizer_defaults("sgd");
    oc.learning_rate = LR;
    m->opt = psg_optimizer_new(&oc);
    if (cfg) {
        m->sr = psg_sync_replicas_new(m->opt, cfg);
        CHECK(m->sr && psg_sync_replicas_minimize(m->sr, g, m->loss, &m->sg) == 0);
    } else {
        CHECK(psg_optimizer_minimize(m->opt, g, m->loss, &m->train) == 0);
    }
    psg_graph_pop_device(g);
    CHECK(psg_graph_error(g) == NULL);
    char def[96];
    snprintf(def, sizeof def, "/job:worker/replica:0/task:%d/device:CPU:0", worker);
    psg_placement_options_t po = {.default_device = def};
    CHECK(psg_place(g, &po) == 0);
}

static void model_free(model_t *m) {
    psg_sync_replicas_destroy(&m->sr);
    psg_optimizer_destroy(&m->opt);
    psg_graph_destroy(&m->g);
    psg_replica_setter_destroy(&m->setter);
}

/* Global batch j (2 workers' worth, rows of worker i at [i·B, (i+1)·B)): a
 * fixed data order every run. */
static void global_batch(int j, int rows, float *x, float *y) {
    unsigned seed = 1000u + (unsigned)j;
    for (int i = 0; i < rows * IN; i++) x[i] = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < rows * OUT; i++) y[i] = (float)rand_r(&seed) / (float)RAND_MAX;
}

static void shard_batch(int j, int shard, int num_shards, psg_tensor_t **x, psg_tensor_t **y) {
    float gx[MAX_WORKERS * B * IN], gy[MAX_WORKERS * B * OUT];
    /* a third worker (a backup) draws its rows from a batch that has them: it read
     * uninitialized stack before, and its gradient could be Inf */
    if (shard >= num_shards) num_shards = shard + 1;
    global_batch(j, num_shards * B, gx, gy);
    psg_shape_t sx = psg_shape_2d(B, IN), sy = psg_shape_2d(B, OUT);
    *x = psg_test_tensor(&sx, gx + shard * B * IN);
    *y = psg_test_tensor(&sy, gy + shard * B * OUT);
}

/* ---- one worker ---- */

typedef struct {
    cluster_t *cl;
    psg_sync_config_t cfg;
    int batches;  /* of data, then it runs the close op; 0: no end */
    int delay_ms; /* before each step: a straggler */
    model_t m;
    prepared_t *step, *gs, *chief, *close;
    /* results */
    int rc;
    char error[1024];
    psg_sync_stats_t stats;
    int iterations;
    int64_t last_next_step;
    double seconds;
} worker_t;

static void worker_prepare(worker_t *w) {
    build_model(&w->m, B, w->cfg.worker_index, &w->cfg);
    psg_sync_graph_t *sg = &w->m.sg;
    psg_endpoint_t feeds[3] = {w->m.x, w->m.y, sg->local_step}, fetches[4] = {w->m.loss};
    int nf = 1 + psg_sync_graph_fetches(sg, fetches + 1);
    CHECK(nf == 4);
    w->step = prepare(w->cl, w->m.g, 3, feeds, nf, fetches, 1, &sg->train_op);
    w->gs = prepare(w->cl, w->m.g, 0, NULL, 1, &sg->global_step, 0, NULL);
    w->close = prepare(w->cl, w->m.g, 0, NULL, 0, NULL, 1, &sg->close_op);
    if (w->cfg.worker_index == 0)
        w->chief = prepare(w->cl, w->m.g, 0, NULL, 1, &sg->chief_global_step, 1, &sg->chief_op);
}

static void worker_free(worker_t *w) {
    prepared_free(&w->step);
    prepared_free(&w->gs);
    prepared_free(&w->chief);
    prepared_free(&w->close);
    model_free(&w->m);
}

static double now_sec(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *worker_main(void *arg) {
    worker_t *w = arg;
    double t0 = now_sec();
    psg_tensor_t *gs = NULL;
    w->rc = prepared_run(w->gs, NULL, &gs);
    int64_t local_step = w->rc == 0 ? psg_tensor_i64(gs)[0] : 0;
    psg_tensor_destroy(&gs);
    for (int it = 0; w->rc == 0; it++) {
        if (w->batches > 0 && it == w->batches) {
            w->rc = prepared_run(w->close, NULL, NULL); /* out of data: end training cleanly */
            break;
        }
        if (w->delay_ms) {
            struct timespec ts = {0, (long)w->delay_ms * 1000000L};
            nanosleep(&ts, NULL);
        }
        psg_tensor_t *x, *y, *ls = psg_tensor_scalar_i64(local_step), *out[4] = {0};
        shard_batch((int)local_step, w->cfg.worker_index, 2, &x, &y);
        psg_tensor_t *feeds[3] = {x, y, ls};
        double s0 = now_sec();
        w->rc = prepared_run(w->step, feeds, out);
        psg_sync_step_t st;
        if (w->rc == 0)
            w->rc = psg_sync_step_read(&w->m.sg, out + 1, local_step, now_sec() - s0, &st);
        if (w->rc == 0) {
            psg_sync_stats_add(&w->stats, &st);
            w->iterations++;
            w->last_next_step = st.next_step;
            local_step = st.next_step;
        }
        for (int i = 0; i < 4; i++) psg_tensor_destroy(&out[i]);
        psg_tensor_destroy(&x);
        psg_tensor_destroy(&y);
        psg_tensor_destroy(&ls);
        if (local_step < 0) break; /* training is over */
    }
    if (w->rc < 0) snprintf(w->error, sizeof w->error, "%s", psg_error_message());
    w->seconds = now_sec() - t0;
    return NULL;
}

static int chief_run(void *ctx, int64_t *global_step) {
    worker_t *w = ctx;
    psg_tensor_t *gs = NULL;
    if (prepared_run(w->chief, NULL, &gs) < 0) return -1;
    *global_step = psg_tensor_i64(gs)[0];
    psg_tensor_destroy(&gs);
    return 0;
}

/* A job: n workers (only those with run[i]) and the chief's runner. */
typedef struct {
    int n;
    worker_t w[MAX_WORKERS];
    int chief_rc;
    char chief_error[1024];
    int64_t chief_steps;
} job_t;

static void job_run(job_t *job, cluster_t *cl, const psg_sync_config_t *cfg, const bool *run) {
    for (int i = 0; i < job->n; i++) {
        job->w[i].cl = cl;
        job->w[i].cfg = *cfg;
        job->w[i].cfg.worker_index = i;
        worker_prepare(&job->w[i]);
    }
    /* the chief initializes the variables and its accumulators */
    worker_t *chief = &job->w[0];
    int n_init;
    const int *init = psg_graph_collection(chief->m.g, "init", &n_init);
    prepared_t *ip = prepare(cl, chief->m.g, 0, NULL, 0, NULL, n_init, init);
    CHECK(prepared_run(ip, NULL, NULL) == 0);
    prepared_free(&ip);
    ip = prepare(cl, chief->m.g, 0, NULL, 0, NULL, 1, &chief->m.sg.chief_init_op);
    CHECK(prepared_run(ip, NULL, NULL) == 0);
    prepared_free(&ip);
    psg_sync_chief_t *runner = psg_sync_chief_start(chief_run, chief, cfg->total_steps);
    pthread_t th[MAX_WORKERS];
    for (int i = 0; i < job->n; i++)
        if (!run || run[i]) pthread_create(&th[i], NULL, worker_main, &job->w[i]);
    for (int i = 0; i < job->n; i++)
        if (!run || run[i]) pthread_join(th[i], NULL);
    job->chief_rc = psg_sync_chief_join(&runner, &job->chief_steps);
    if (job->chief_rc < 0)
        snprintf(job->chief_error, sizeof job->chief_error, "%s", psg_error_message());
}

static void job_free(job_t *job) {
    for (int i = 0; i < job->n; i++) worker_free(&job->w[i]);
}

static int64_t global_step_of(cluster_t *cl) {
    for (int k = 0; k < NUM_PS; k++) {
        psg_variable_t *v = psg_resource_find_variable(cl->ps[k], "global_step");
        if (v) return psg_tensor_i64(v->value)[0];
    }
    return -1;
}

/* ---- the tests ---- */

static psg_sync_config_t sync_config(int workers, int backups, int64_t total, int64_t timeout_ms) {
    psg_sync_config_t cfg;
    psg_sync_config_defaults(&cfg);
    cfg.num_workers = workers;
    cfg.backup_workers = backups;
    cfg.total_steps = total;
    cfg.timeout_ms = timeout_ms;
    return cfg;
}

/* N = 2, b = 0, SGD, fixed data order: the variables after k steps are
 * those of one process with batch 2·B. */
static void test_equivalence_with_one_process(void) {
    const int k = 6;
    cluster_t cl;
    cluster_init(&cl);
    psg_sync_config_t cfg = sync_config(2, 0, k, 10000);
    job_t job = {.n = 2};
    job_run(&job, &cl, &cfg, NULL);
    CHECK(job.chief_rc == 0 && job.chief_steps == k);
    CHECK(global_step_of(&cl) == k);
    for (int i = 0; i < 2; i++) {
        worker_t *w = &job.w[i];
        CHECK(w->rc == 0);
        if (w->rc < 0) fprintf(stderr, "worker %d: %s\n", i, w->error);
        CHECK(w->iterations == k && w->stats.used == k && w->stats.dropped == 0);
        CHECK(w->last_next_step == -1); /* the token queue closed at step k */
    }
    /* the single process */
    model_t ref;
    build_model(&ref, 2 * B, 0, NULL);
    psg_session_t *s = psg_session_new(ref.g, NULL, NULL);
    CHECK(psg_session_run_init(s) == 0);
    psg_endpoint_t feeds[2] = {ref.x, ref.y};
    for (int j = 0; j < k; j++) {
        float gx[2 * B * IN], gy[2 * B * OUT];
        global_batch(j, 2 * B, gx, gy);
        psg_shape_t sx = psg_shape_2d(2 * B, IN), sy = psg_shape_2d(2 * B, OUT);
        psg_tensor_t *fv[2] = {psg_test_tensor(&sx, gx), psg_test_tensor(&sy, gy)};
        CHECK(psg_session_run(s, 2, feeds, fv, 0, NULL, NULL, 1, &ref.train) == 0);
        psg_tensor_destroy(&fv[0]);
        psg_tensor_destroy(&fv[1]);
    }
    const char *names[2] = {"w", "b"};
    double worst = 0;
    for (int v = 0; v < 2; v++) {
        psg_variable_t *want = psg_resource_find_variable(psg_session_resources(s), names[v]);
        psg_variable_t *got = NULL;
        for (int p = 0; p < NUM_PS && !got; p++)
            got = psg_resource_find_variable(cl.ps[p], names[v]);
        CHECK(want && got);
        if (!want || !got) continue;
        const float *a = psg_tensor_f32(want->value), *g = psg_tensor_f32(got->value);
        for (int64_t i = 0; i < psg_tensor_numel(want->value); i++) {
            double rel = fabs((double)a[i] - (double)g[i]) / fmax(fabs((double)a[i]), 1e-6);
            worst = fmax(worst, rel);
        }
    }
    printf("  equivalence: worst relative difference %.3g over %d steps\n", worst, k);
    CHECK(worst <= 1e-5);
    psg_session_destroy(&s);
    model_free(&ref);
    job_free(&job);
    cluster_free(&cl);
}

/* N = 2, b = 1, every worker computes 20 ms a step, worker 2 250 ms more:
 * every step completes at the pace of the other two, and its gradients are
 * counted as dropped. */
static void test_backup_worker_drops_the_straggler(void) {
    const int k = 20, delay = 250, compute = 20;
    cluster_t cl;
    cluster_init(&cl);
    psg_sync_config_t cfg = sync_config(3, 1, k, 10000);
    job_t job = {.n = 3};
    job.w[0].delay_ms = job.w[1].delay_ms = compute;
    job.w[2].delay_ms = compute + delay;
    job_run(&job, &cl, &cfg, NULL);
    CHECK(job.chief_rc == 0 && job.chief_steps == k && global_step_of(&cl) == k);
    for (int i = 0; i < 3; i++) {
        CHECK(job.w[i].rc == 0);
        if (job.w[i].rc < 0) fprintf(stderr, "worker %d: %s\n", i, job.w[i].error);
    }
    CHECK(job.w[0].stats.used + job.w[1].stats.used == 2 * k);
    CHECK(job.w[2].stats.steps >= 1 && job.w[2].stats.used == 0 &&
          job.w[2].stats.dropped == job.w[2].stats.steps);
    /* the fast two never waited for the straggler: it ran fewer steps than they did (no
     * timing asserted: a step count) */
    CHECK(job.w[2].stats.steps < k);
    /* the ps counted the dropped gradients too */
    int64_t dropped = 0;
    for (int p = 0; p < NUM_PS; p++) {
        psg_accumulator_t *a = psg_resource_find(cl.ps[p], "w/grad_accum", "accumulator");
        if (!a) continue;
        psg_accumulator_counts_t c;
        psg_accumulator_counts(a, &c);
        dropped = c.stale + c.late + c.closed;
        CHECK(c.accepted == 2 * k && c.takes == k);
    }
    CHECK(dropped == job.w[2].stats.dropped);
    printf("  backup: worker 2 ran %lld steps, all dropped; the others ran %d steps in %.2f s\n",
           (long long)job.w[2].stats.steps, k, job.w[0].seconds);
    job_free(&job);
    cluster_free(&cl);
}

/* b = 0 and worker 1 never comes: worker 0 and the chief fail with errors
 * that say what they waited for, within the timeout. */
static void test_dead_worker_fails_within_the_timeout(void) {
    cluster_t cl;
    cluster_init(&cl);
    psg_sync_config_t cfg = sync_config(2, 0, 5, 300);
    job_t job = {.n = 2};
    bool run[2] = {true, false};
    double t0 = now_sec();
    job_run(&job, &cl, &cfg, run);
    double took = now_sec() - t0;
    CHECK(took < 5.0);
    CHECK(job.w[0].rc < 0);
    CHECK(strstr(
        job.w[0].error,
        "token queue 'sync_token_q': worker 0 got no token for a step after 0 within 300 ms"));
    CHECK(job.chief_rc < 0 && strstr(job.chief_error, "of 2 gradients for step 0 after 300 ms"));
    printf("  dead worker: worker 0: %s\n  chief: %s\n", job.w[0].error, job.chief_error);
    job_free(&job);
    cluster_free(&cl);
}

/* No step budget: the workers run out of data (one of them early) and the
 * job ends cleanly, nobody stuck waiting for a token or gradients. */
static void test_end_of_data_ends_cleanly(void) {
    for (int uneven = 0; uneven < 2; uneven++) {
        cluster_t cl;
        cluster_init(&cl);
        psg_sync_config_t cfg = sync_config(2, 0, 0, 10000);
        job_t job = {.n = 2};
        job.w[0].batches = 4;
        job.w[1].batches = uneven ? 2 : 4;
        double t0 = now_sec();
        job_run(&job, &cl, &cfg, NULL);
        CHECK(now_sec() - t0 < 5.0);
        CHECK(job.chief_rc == 0);
        CHECK(job.w[0].rc == 0 && job.w[1].rc == 0);
        CHECK(global_step_of(&cl) == (uneven ? 2 : 4));
        CHECK(job.w[1].iterations == job.w[1].batches);
        job_free(&job);
        cluster_free(&cl);
    }
}

/* The async strategy in the same harness: no tokens, every gradient applied. */
static void test_async_strategy(void) {
    psg_sync_config_t cfg;
    psg_sync_config_defaults(&cfg);
    cfg.strategy = "async";
    cfg.num_workers = 2;
    model_t m;
    build_model(&m, B, 1, &cfg);
    CHECK(m.sg.chief_op < 0 && !psg_endpoint_valid(m.sg.local_step) && m.sg.train_op >= 0);
    /* its fetches: the global step its reads saw and the one its update made */
    psg_endpoint_t f[8];
    CHECK(psg_sync_graph_fetches(&m.sg, f) == 2);
    psg_tensor_t *seen[2] = {psg_tensor_scalar_i64(7), psg_tensor_scalar_i64(10)};
    psg_sync_step_t st;
    CHECK(psg_sync_step_read(&m.sg, seen, 4, 0.5, &st) == 0 && st.used && st.next_step == 5);
    CHECK(st.staleness == 2); /* two other updates between its read (7) and its own (-> 10) */
    psg_tensor_destroy(&seen[0]);
    psg_tensor_destroy(&seen[1]);
    model_free(&m);
    cfg.strategy = "bounded";
    psg_optimizer_config_t oc = psg_optimizer_defaults("sgd");
    psg_optimizer_t *opt = psg_optimizer_new(&oc);
    CHECK(psg_sync_replicas_new(opt, &cfg) == NULL);
    char known[1024] = "unknown strategy 'bounded' (known: "; /* the table's names, in order */
    for (int i = 0; i < psg_sync_num_strategies(); i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                 psg_sync_strategy_at(i)->name);
    CHECK(psg_sync_num_strategies() >= 5 && strstr(known, "sync, async"));
    CHECK_ERROR_HAS(known);
    cfg.strategy = "sync";
    cfg.backup_workers = 2;
    CHECK(psg_sync_replicas_new(opt, &cfg) == NULL);
    CHECK_ERROR_HAS("replicas_to_aggregate 0 + backup_workers 2");
    psg_optimizer_destroy(&opt);
}

/* ---- a strategy written as docs/sync.md ("Adding a strategy") says: "halved", the
 * file tests/strategy_halved.c, in this binary's table ---- */

typedef struct {
    psg_callable_t *step;
    psg_tensor_t *x;
} halved_run_t;

static int halved_run(void *ctx, int k, psg_tensor_t *const *feeds, psg_tensor_t **fetched) {
    halved_run_t *r = ctx;
    (void)feeds;
    return k == 0 ? psg_callable_run(r->step, &r->x, fetched) : psg_error_set("no call %d", k);
}

/* loss = sum(w * x) over 4 entries, w a variable from 0, x a placeholder: a graph whose
 * gradient is x, so every rate and step count has a known w. */
static psg_graph_t *sum_wx_graph(psg_endpoint_t *x, psg_endpoint_t *w, psg_endpoint_t *loss) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s4 = psg_shape_1d(4);
    *x = psg_placeholder(g, "x", PSG_DT_F32, &s4);
    *w = psg_variable(g, "w", PSG_DT_F32, &s4, (psg_initializer_t){"zeros", 0, 0}, true);
    *loss = psg_sum(g, "loss", psg_mul(g, "wx", psg_read_variable(g, "w/read", *w), *x), 0, NULL,
                    false);
    return g;
}

static psg_optimizer_t *optimizer_at(const char *kind, float lr, float momentum) {
    psg_optimizer_config_t oc = psg_optimizer_defaults(kind);
    oc.learning_rate = lr;
    oc.momentum = momentum;
    return psg_optimizer_new(&oc);
}

/* w is c * x for x = (1, 2, 3, 4). */
static void check_w_is(psg_session_t *sess, psg_graph_t *g, psg_endpoint_t w, float c) {
    psg_tensor_t *wv = NULL;
    psg_endpoint_t wr = psg_read_variable(g, "w/read_after", w);
    CHECK(psg_session_run(sess, 0, NULL, NULL, 1, &wr, &wv, 0, NULL) == 0);
    for (int i = 0; wv && i < 4; i++)
        CHECK(fabsf(psg_tensor_f32(wv)[i] - c * (float)(i + 1)) < 1e-5f);
    psg_tensor_destroy(&wv);
}

/* One process: loss = sum(w * x), SGD lr 0.1, w starting at 0: after 3 steps of "halved",
 * found by its name in the table, w = -3 * 0.1 * x / 2. */
static void test_a_strategy_from_the_docs(void) {
    psg_shape_t s4 = psg_shape_1d(4);
    psg_endpoint_t x, w, loss;
    psg_graph_t *g = sum_wx_graph(&x, &w, &loss);
    psg_optimizer_t *opt = optimizer_at("sgd", 0.1f, 0);
    psg_sync_config_t cfg;
    psg_sync_config_defaults(&cfg);
    cfg.strategy = "halved";
    psg_sync_replicas_t *sr = psg_sync_replicas_new(opt, &cfg);
    CHECK(sr && !strcmp(psg_sync_replicas_strategy_name(sr), "halved"));
    psg_sync_graph_t sg;
    CHECK(psg_sync_replicas_minimize(sr, g, loss, &sg) == 0);
    psg_session_t *sess = psg_session_new(g, &(psg_session_options_t){.num_threads = 1}, NULL);
    CHECK(sess && psg_session_run_init(sess) == 0);
    halved_run_t r = {psg_session_make_callable(sess, 1, &x, 1, &loss, 1, &sg.train_op),
                      psg_tensor_new(PSG_DT_F32, &s4)};
    for (int i = 0; i < 4; i++) psg_tensor_f32(r.x)[i] = (float)(i + 1);
    psg_sync_worker_t wk = {&cfg, &sg, halved_run, &r, 0, 0, NULL};
    for (int k = 0; k < 3; k++) {
        psg_tensor_t *l = NULL;
        psg_sync_step_t st;
        CHECK(psg_sync_replicas_strategy(sr)->step(&wk, &l, &st) == 0 && st.used);
        psg_tensor_destroy(&l);
    }
    CHECK(wk.state && *(int64_t *)wk.state == 3 && wk.local_step == 3);
    check_w_is(sess, g, w, -0.15f);
    psg_tensor_destroy(&r.x);
    psg_callable_destroy(&r.step);
    free(wk.state);
    psg_callable_destroy(&r.step);
    psg_session_destroy(&sess);
    psg_sync_replicas_destroy(&sr);
    psg_optimizer_destroy(&opt);
    psg_graph_destroy(&g);
}

/* Every strategy of the table, whatever it holds: --help offers it with its summary and
 * its options, --sync takes its name, and it builds a worker's graph of loss = sum(w * x)
 * for 2 workers with a step to run. */
static void test_every_strategy_of_the_table(void) {
    char *help = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&help, &len);
    PSG_ASSERT(f);
    psg_sync_print_help(f);
    fclose(f);
    CHECK(psg_sync_strategy_find("halved") != NULL); /* tests/strategy_halved.c's row */
    for (int i = 0; i < psg_sync_num_strategies(); i++) {
        const psg_sync_strategy_t *s = psg_sync_strategy_at(i);
        char line[128];
        snprintf(line, sizeof line, "    %-8s %s\n", s->name, s->summary);
        CHECK(strstr(help, line) != NULL);
        for (int k = 0; s->options && s->options[k]; k++) CHECK(strstr(help, s->options[k]));
        CHECK(psg_sync_strategy_check_name(s->name) == 0);
        CHECK(psg_sync_strategy_local_model(s->name) == (s->local_model ? 1 : 0));
        psg_endpoint_t x, w, loss;
        psg_graph_t *g = sum_wx_graph(&x, &w, &loss);
        psg_optimizer_t *opt = optimizer_at("sgd", 0.1f, 0);
        psg_sync_config_t cfg;
        psg_sync_config_defaults(&cfg);
        cfg.strategy = s->name;
        cfg.num_workers = 2;
        psg_sync_replicas_t *sr = psg_sync_replicas_new(opt, &cfg);
        psg_sync_graph_t sg;
        CHECK(sr && psg_sync_replicas_strategy(sr) == s);
        CHECK(sr && psg_sync_replicas_minimize(sr, g, loss, &sg) == 0 && sg.train_op >= 0);
        if (psg_error_message()[0]) fprintf(stderr, "  %s: %s\n", s->name, psg_error_message());
        psg_error_clear();
        psg_sync_replicas_destroy(&sr);
        psg_optimizer_destroy(&opt);
        psg_graph_destroy(&g);
    }
    free(help);
    /* the model is each worker's own for local SGD, not for sync; an unknown name is named */
    CHECK(psg_sync_strategy_local_model("local") == 1 && psg_sync_strategy_local_model(NULL) == 0);
    CHECK(psg_sync_strategy_local_model("lcoal") == -1 && strstr(psg_error_message(), "lcoal"));
    psg_error_clear();
}

/* --compress-momentum folded with a rate tensor (a schedule's place): one process, async,
 * top-k of every entry, loss = sum(w * x), momentum 0.5 at a rate tensor of 0.1, w from 0:
 * the ps runs SGD of rate 0.1 / (1 - 0.5) = 0.2, so w = -3 * 0.2 * x after 3 steps
 * (momentum itself would give -0.425 x; the rate tensor unscaled -0.3 x; the constant rate
 * folded instead of the tensor -6 x). */
static void test_folded_momentum_scales_the_rate_tensor(void) {
    psg_shape_t s4 = psg_shape_1d(4);
    psg_endpoint_t x, w, loss;
    psg_graph_t *g = sum_wx_graph(&x, &w, &loss);
    psg_optimizer_t *opt = optimizer_at("momentum", 1, 0.5f); /* the tensor's rate, not 1 */
    psg_optimizer_set_learning_rate_tensor(opt, psg_const_scalar(g, "rate", 0.1f));
    psg_sync_config_t cfg;
    psg_sync_config_defaults(&cfg);
    cfg.strategy = "async";
    cfg.opt.compress = PSG_SYNC_COMPRESS_TOPK;
    cfg.opt.compress_ratio = 1;
    cfg.opt.compress_momentum = PSG_SYNC_COMPRESS_MOMENTUM_FOLDED;
    psg_sync_replicas_t *sr = psg_sync_replicas_new(opt, &cfg);
    psg_sync_graph_t sg;
    CHECK(sr && psg_sync_replicas_minimize(sr, g, loss, &sg) == 0);
    psg_session_t *sess = psg_session_new(g, &(psg_session_options_t){.num_threads = 1}, NULL);
    CHECK(sess && psg_session_run_init(sess) == 0);
    psg_tensor_t *xt = psg_tensor_new(PSG_DT_F32, &s4);
    for (int i = 0; i < 4; i++) psg_tensor_f32(xt)[i] = (float)(i + 1);
    for (int k = 0; sess && k < 3; k++)
        CHECK(psg_session_run(sess, 1, &x, &xt, 0, NULL, NULL, 1, &sg.train_op) == 0);
    if (sess) check_w_is(sess, g, w, -0.6f);
    psg_tensor_destroy(&xt);
    psg_session_destroy(&sess);
    psg_sync_replicas_destroy(&sr);
    psg_optimizer_destroy(&opt);
    psg_graph_destroy(&g);
}

/* Why a dropped gradient was dropped, and the counts by reason. */
static void test_drop_reasons(void) {
    psg_sync_stats_t s = {0};
    psg_sync_step_t used = {.used = true, .next_step = 3, .num_accepted = 4, .num_vars = 4};
    psg_sync_step_t stale = {.next_step = 3, .num_accepted = 0, .num_vars = 4};
    psg_sync_step_t partial = {.next_step = 3, .num_accepted = 2, .num_vars = 4};
    psg_sync_step_t closed = {.next_step = -1, .num_accepted = 0, .num_vars = 4};
    CHECK(psg_sync_step_drop_reason(&used) == NULL);
    CHECK(!strcmp(psg_sync_step_drop_reason(&stale), "stale"));
    CHECK(!strcmp(psg_sync_step_drop_reason(&partial), "partial"));
    CHECK(!strcmp(psg_sync_step_drop_reason(&closed), "closed"));
    const psg_sync_step_t *all[] = {&used, &stale, &stale, &partial, &closed};
    for (int i = 0; i < 5; i++) psg_sync_stats_add(&s, all[i]);
    CHECK(s.used == 1 && s.dropped == 4 && s.dropped_stale == 2 && s.dropped_partial == 1 &&
          s.dropped_closed == 1);
    char line[640];
    psg_sync_step_json(&partial, 1, line, sizeof line);
    CHECK(strstr(line, "\"gradient\":\"dropped\",\"why\":\"partial\"") != NULL);
    psg_sync_step_json(&used, 1, line, sizeof line);
    CHECK(strstr(line, "\"why\"") == NULL);
    CHECK(strstr(line, "\"loss\":null") != NULL); /* no loss known: null, not 0 */
    used.has_loss = true, used.loss = 0.5, used.push_bytes = 1234, used.wall_sec = 2;
    psg_sync_step_json(&used, 1, line, sizeof line);
    CHECK(strstr(line, "\"loss\":0.5,\"wall_sec\":2.0000,\"push_bytes\":1234,") != NULL);
}

/* The staleness of the used gradients, a histogram: 0, 0, 2, 40 (the last bin holds all from
 * PSG_SYNC_STALE_BINS - 1 on); a dropped one is not counted. */
static void test_staleness_histogram(void) {
    psg_sync_stats_t s = {0};
    int64_t seen[] = {0, 0, 2, 40};
    for (int i = 0; i < 4; i++) {
        psg_sync_step_t st = {.used = true, .next_step = 1, .staleness = seen[i]};
        psg_sync_stats_add(&s, &st);
    }
    psg_sync_step_t dropped = {.next_step = 1, .num_vars = 1, .staleness = 3};
    psg_sync_stats_add(&s, &dropped);
    char buf[1024], want[1024] = "\"staleness\":{\"min\":0,\"mean\":10.5000,\"max\":40,\"n\":4,"
                                 "\"hist\":[2,0,1";
    for (int k = 3; k < PSG_SYNC_STALE_BINS; k++)
        strcat(want, k == PSG_SYNC_STALE_BINS - 1 ? ",1]}" : ",0");
    psg_sync_stats_staleness_json(&s, buf, sizeof buf);
    if (strcmp(buf, want)) fprintf(stderr, "  got  %s\n  want %s\n", buf, want);
    CHECK(!strcmp(buf, want));
    s.stale_hist[0] = 0; /* a sum of workers' means has no histogram: none is made up */
    psg_sync_stats_staleness_json(&s, buf, sizeof buf);
    CHECK(strstr(buf, "hist") == NULL && strstr(buf, "\"n\":4}") != NULL);
}

int main(void) {
    RUN_TEST(test_equivalence_with_one_process);
    RUN_TEST(test_backup_worker_drops_the_straggler);
    RUN_TEST(test_dead_worker_fails_within_the_timeout);
    RUN_TEST(test_end_of_data_ends_cleanly);
    RUN_TEST(test_async_strategy);
    RUN_TEST(test_a_strategy_from_the_docs);
    RUN_TEST(test_every_strategy_of_the_table);
    RUN_TEST(test_folded_momentum_scales_the_rate_tensor);
    RUN_TEST(test_drop_reasons);
    RUN_TEST(test_staleness_histogram);
    return psg_test_summary();
}
