/* The write log of chain replication (ps/repl_log.c) without processes: a primary session
 * trains with Adam while its updates are logged; each forward is replayed on a backup's copies
 * (a resource manager of backup copies), which stay bitwise the primary's (variable, m, v, the
 * beta powers, the global step); a forward of updates is smaller than the values it replaces;
 * a variable assigned, or whose updates were not all logged, goes by value, with the slots its
 * update wrote; a peer's bad replay lines are refused naming the line. The forward between
 * processes and the failover: tests/test_replication.sh. */
#include "ps/repl_log.h"
#include "ps/replicate.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

#define N 1000

typedef struct {
    psg_graph_t *g;
    psg_session_t *sess;
    psg_endpoint_t grad, lr;
    int set, train;
    const char **names; /* the variables the graph writes */
    int n_names;
    psg_resource_mgr_t *backup;
    psg_repl_log_t *log, *replayer;
    psg_applied_t *applied;  /* the backup's records */
    psg_applied_t *papplied; /* the primary's */
} rig_t;

static void rig_open(rig_t *r) {
    memset(r, 0, sizeof *r);
    r->g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(N), sc = psg_shape_scalar();
    psg_endpoint_t w =
        psg_variable(r->g, "w", PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    float w0[N];
    for (int i = 0; i < N; i++) w0[i] = 0.001f * (float)(i % 97) - 0.03f;
    psg_tensor_t *t = psg_test_tensor(&s, w0);
    r->set = psg_assign(r->g, "set_w", w, psg_const(r->g, "w0", &t));
    r->grad = psg_placeholder(r->g, "grad", PSG_DT_F32, &s);
    r->lr = psg_placeholder(r->g, "lr", PSG_DT_F32, &sc);
    psg_optimizer_config_t cfg = psg_optimizer_defaults("adam");
    psg_optimizer_t *opt = psg_optimizer_new(&cfg);
    psg_optimizer_set_learning_rate_tensor(opt, r->lr);
    CHECK(psg_optimizer_apply_gradients(opt, r->g, 1, &r->grad, &w, &r->train) == 0);
    psg_optimizer_destroy(&opt);
    CHECK(psg_ts_repl_written(r->g, &r->names, &r->n_names) == 0 && r->n_names >= 5);
    psg_session_options_t so = {.num_threads = 2};
    r->sess = psg_session_new(r->g, &so, NULL);
    CHECK(r->sess != NULL);
    r->papplied = psg_applied_new();
    r->log = psg_repl_log_new(psg_session_resources(r->sess), r->papplied);
    r->backup = psg_resource_mgr_new();
    r->applied = psg_applied_new();
    r->replayer = psg_repl_log_new(r->backup, r->applied);
    CHECK(r->log && r->backup && r->replayer && r->applied && r->papplied);
    CHECK(psg_session_run_init(r->sess) == 0);
    CHECK(psg_session_run(r->sess, 0, NULL, NULL, 0, NULL, NULL, 1, &r->set) == 0);
}

static void rig_close(rig_t *r) {
    psg_repl_log_destroy(&r->log);
    psg_repl_log_destroy(&r->replayer);
    CHECK(r->log == NULL);
    psg_repl_log_destroy(&r->log); /* NULL-safe */
    psg_applied_destroy(&r->applied);
    psg_applied_destroy(&r->papplied);
    psg_session_destroy(&r->sess);
    psg_resource_mgr_destroy(&r->backup);
    free(r->names);
    psg_graph_destroy(&r->g);
}

/* The backup's side of a forward: values into backup copies (as a Replicate's handler does),
 * then the replay. */
static int backup_take(rig_t *r, psg_msg_t *m, int *replayed) {
    for (int i = 0; i < m->ntensors; i++) {
        if (!strcmp(m->names[i], "@")) continue;
        const psg_tensor_t *t = m->tensors[i];
        psg_variable_t *v = psg_resource_variable(r->backup, m->names[i], t->dtype, &t->shape);
        CHECK(v != NULL);
        if (!v) return -1;
        memcpy(v->value->data, t->data, psg_tensor_nbytes(t));
        v->initialized = v->backup = true;
    }
    return psg_repl_replay(r->replayer, r->backup, r->applied, m, replayed);
}

/* Every variable of the primary against its backup copy, byte for byte. */
static bool same_bytes(rig_t *r) {
    psg_resource_mgr_t *rm = psg_session_resources(r->sess);
    int n = psg_resource_num_variables(rm), same = 0;
    for (int i = 0; i < n; i++) {
        psg_variable_t *v = psg_resource_variable_at(rm, i);
        psg_variable_t *b = psg_resource_find_variable(r->backup, v->name);
        if (b && psg_tensor_nbytes(b->value) == psg_tensor_nbytes(v->value) &&
            !memcmp(b->value->data, v->value->data, psg_tensor_nbytes(v->value)))
            same++;
        else
            fprintf(stderr, "  variable %s differs on the backup\n", v->name);
    }
    return n > 0 && same == n;
}

/* A whole copy (a backup's first), as the full forward. */
static void full_copy(rig_t *r) {
    psg_repl_log_set_on(r->log, true);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Replicate");
    psg_resource_mgr_t *rm = psg_session_resources(r->sess);
    size_t bytes = 0;
    for (int i = 0; i < psg_resource_num_variables(rm); i++)
        CHECK(psg_repl_add_value(m, psg_resource_variable_at(rm, i), NULL, NULL, &bytes, NULL,
                                 NULL) == 0);
    int replayed = -1;
    CHECK(backup_take(r, m, &replayed) == 0 && replayed == 0);
    psg_msg_destroy(&m);
}

static void train_steps(rig_t *r, int steps, unsigned seed) {
    psg_shape_t s = psg_shape_1d(N);
    float g[N];
    for (int k = 0; k < steps; k++) {
        for (int i = 0; i < N; i++)
            g[i] = (float)((seed * 31u + (unsigned)(k * 7 + i)) % 13) - 6.0f;
        psg_tensor_t *vals[2] = {psg_test_tensor(&s, g), psg_tensor_scalar_f32(0.01f)};
        psg_endpoint_t feeds[2] = {r->grad, r->lr};
        CHECK(psg_session_run(r->sess, 2, feeds, vals, 0, NULL, NULL, 1, &r->train) == 0);
        psg_tensor_destroy(&vals[0]);
        psg_tensor_destroy(&vals[1]);
    }
}

/* One forward of the primary, taken by the backup. */
static void forward(rig_t *r, int *values, int *replays, size_t *bytes) {
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Replicate");
    psg_strbuf_t body = {0};
    psg_repl_plan_t *plan = NULL;
    int count = 0;
    *bytes = 0;
    *replays = 0;
    CHECK(psg_repl_log_forward(r->log, psg_session_resources(r->sess), r->names, NULL, r->n_names,
                               m, &body, &count, replays, bytes, &plan) == 0);
    if (body.len) CHECK(psg_msg_set_body(m, body.s, body.len) == 0);
    free(body.s);
    int replayed = -1;
    int rc = backup_take(r, m, &replayed);
    if (rc < 0) fprintf(stderr, "  replay: %s\n", psg_error_message());
    if (rc != 0 || replayed != *replays)
        fprintf(stderr, "  rc %d replayed %d replays %d count %d\n", rc, replayed, *replays, count);
    CHECK(rc == 0 && replayed == *replays);
    psg_repl_commit(&plan, rc == 0);
    *values = count - *replays;
    psg_msg_destroy(&m);
}

static void test_replayed_bitwise(void) {
    rig_t r;
    rig_open(&r);
    full_copy(&r);
    CHECK(same_bytes(&r));
    int values = 0, replays = 0;
    size_t bytes = 0;
    for (int step = 0; step < 6; step++) {
        train_steps(&r, 1 + step % 2, (unsigned)step); /* two steps in one forward too */
        forward(&r, &values, &replays, &bytes);
        CHECK(values == 0 && replays >= 4);
        /* the gradient and scalars, not the variable and its two slots */
        CHECK(bytes < (size_t)(1 + step % 2) * (N * 4 + 64));
        CHECK(same_bytes(&r));
    }
    /* nothing written since: nothing to send */
    forward(&r, &values, &replays, &bytes);
    CHECK(values == 0 && replays == 0 && bytes == 0);
    rig_close(&r);
}

/* The log copies an update's input that shares a variable's buffer (a ReadVariable of it:
 * a write in place changes it later) and takes a reference to any other (the gradient fed
 * to the step, 1x its bytes a step not copied): the variable assigned after the update and
 * before the forward, the backup still replays the gradient the update read. */
static void test_gradient_of_a_variable(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(N);
    psg_initializer_t zeros = {"zeros", 0, 0};
    psg_endpoint_t w = psg_variable(g, "w", PSG_DT_F32, &s, zeros, true);
    psg_endpoint_t gv = psg_variable(g, "gv", PSG_DT_F32, &s, zeros, true);
    float a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = 0.01f * (float)(i % 13), b[i] = -0.5f;
    psg_tensor_t *ta = psg_test_tensor(&s, a), *tb = psg_test_tensor(&s, b);
    int sets[2] = {psg_assign(g, "set_a", gv, psg_const(g, "a", &ta)),
                   psg_assign(g, "set_b", gv, psg_const(g, "b", &tb))};
    psg_endpoint_t grad = psg_read_variable(g, "read_gv", gv);
    psg_optimizer_config_t cfg = psg_optimizer_defaults("sgd");
    psg_optimizer_t *opt = psg_optimizer_new(&cfg);
    rig_t r = {.g = g};
    CHECK(opt && psg_optimizer_apply_gradients(opt, g, 1, &grad, &w, &r.train) == 0);
    psg_optimizer_destroy(&opt);
    CHECK(psg_ts_repl_written(g, &r.names, &r.n_names) == 0);
    r.sess = psg_session_new(g, NULL, NULL);
    r.papplied = psg_applied_new();
    r.log = psg_repl_log_new(psg_session_resources(r.sess), r.papplied);
    r.backup = psg_resource_mgr_new();
    r.applied = psg_applied_new();
    r.replayer = psg_repl_log_new(r.backup, r.applied);
    CHECK(psg_session_run_init(r.sess) == 0);
    CHECK(psg_session_run(r.sess, 0, NULL, NULL, 0, NULL, NULL, 1, &sets[0]) == 0);
    full_copy(&r);
    CHECK(psg_session_run(r.sess, 0, NULL, NULL, 0, NULL, NULL, 1, &r.train) == 0);
    CHECK(psg_session_run(r.sess, 0, NULL, NULL, 0, NULL, NULL, 1, &sets[1]) == 0);
    int values = 0, replays = 0;
    size_t bytes = 0;
    forward(&r, &values, &replays, &bytes);
    CHECK(replays >= 1 && values >= 1); /* w's update replayed, gv by value */
    CHECK(same_bytes(&r));
    rig_close(&r);
}

static void test_by_value(void) {
    rig_t r;
    rig_open(&r);
    full_copy(&r);
    int values = 0, replays = 0;
    size_t bytes = 0;
    train_steps(&r, 1, 1);
    forward(&r, &values, &replays, &bytes);
    /* an assign (not logged), then an update: w goes by value, and m and v, which Adam's
     * update of w wrote; the beta powers and the global step are replayed */
    CHECK(psg_session_run(r.sess, 0, NULL, NULL, 0, NULL, NULL, 1, &r.set) == 0);
    train_steps(&r, 1, 2);
    forward(&r, &values, &replays, &bytes);
    CHECK(values == 3 && replays >= 3);
    CHECK(same_bytes(&r));
    /* updates not logged (the log off: no backup), then logged again: their counts do not
     * follow the backup's, so every variable they wrote goes by value */
    psg_repl_log_set_on(r.log, false);
    train_steps(&r, 1, 3);
    psg_repl_log_set_on(r.log, true);
    train_steps(&r, 1, 4);
    forward(&r, &values, &replays, &bytes);
    CHECK(values == r.n_names && replays == 0);
    CHECK(same_bytes(&r));
    train_steps(&r, 2, 5);
    forward(&r, &values, &replays, &bytes);
    CHECK(values == 0 && replays >= 8);
    CHECK(same_bytes(&r));
    rig_close(&r);
}

/* A peer's replay line: refused, naming the line and why. */
static void expect_refused(rig_t *r, const char *body, const char *why) {
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Replicate");
    CHECK(psg_msg_set_body(m, body, strlen(body)) == 0);
    psg_shape_t sc = psg_shape_scalar();
    psg_tensor_t *t = psg_tensor_scalar_f32(0.5f);
    CHECK(psg_msg_add_tensor(m, "@", t) == 0);
    psg_tensor_destroy(&t);
    int replayed = 0;
    CHECK(psg_repl_replay(r->replayer, r->backup, r->applied, m, &replayed) == -1);
    const char *msg = psg_error_message();
    CHECK(strstr(msg, why) != NULL);
    if (!strstr(msg, why)) fprintf(stderr, "  got: %s\n  want: %s\n", msg, why);
    (void)sc;
    psg_msg_destroy(&m);
}

static void test_bad_lines(void) {
    rig_t r;
    rig_open(&r);
    full_copy(&r);
    psg_shape_t sc = psg_shape_scalar();
    psg_variable_t *own = psg_resource_variable(r.backup, "own", PSG_DT_F32, &sc);
    own->initialized = true; /* this task's own: not a backup copy */
    expect_refused(&r, "#wk 1\n!Send\t\tt\n", "replay, line 2: op 'Send' is not an update");
    expect_refused(&r, "!ScaleVariable\t\tvown\x1ft\n", "variable 'own' is not a backup copy");
    expect_refused(&r, "!ScaleVariable\t\tvnone\x1ft\n", "variable 'none' is not a backup copy");
    expect_refused(&r, "!ScaleVariable\t\tvbeta1_power\x1ft\x1ft\n", "fewer \"@\" tensors");
    expect_refused(&r, "!ScaleVariable\t\tvbeta1_power\x1fq\n", "input 'q' is not");
    expect_refused(&r, "!ScaleVariable\tvbeta1_power\n", "not \"!OP\\tATTRS\\tINPUTS\"");
    expect_refused(&r, "!ScaleVariable\tk=z1\tvbeta1_power\x1ft\n", "a malformed attribute");
    expect_refused(&r, "!ScaleVariable\t\tvbeta1_power\n", "replay, line 1");
    expect_refused(&r, "!ScaleVariable\t\tvbeta1_power\x1ft\twk\n", "update id 'wk' is not");
    /* a gradient of the wrong shape: the kernel's own check, no crash */
    expect_refused(&r, "!ApplyGradientDescent\t\tvw\x1ft\x1ft\n", "replay, line 1");
    CHECK(same_bytes(&r)); /* nothing written by what was refused */
    rig_close(&r);
}

/* The step id the primary session's last update of "w" ran as. */
static int64_t last_step(rig_t *r) {
    psg_variable_t *w = psg_resource_find_variable(psg_session_resources(r->sess), "w");
    return w && w->writes ? w->recent[(w->writes - 1) % PSG_VARIABLE_RECENT] : 0;
}

/* One training step of the primary as update (writer, 1), as a ps runs a worker's step. */
static void train_as(rig_t *r, const char *writer, unsigned seed) {
    int64_t step = last_step(r) + 1; /* the session's next run */
    CHECK(psg_repl_log_step_begin(r->log, step, writer, 1) == 0);
    train_steps(r, 1, seed);
    CHECK(last_step(r) == step);
    psg_repl_log_step_end(r->log, step);
}

/* Two workers' steps (ids wA 1 and wB 1), both applied before one forward carries them (the
 * forward of wA's step took wB's update too, before wB's step recorded itself): after the
 * backup replays it, a retry of either id there (the primary killed before that step's reply,
 * the backup promoted) must give each update exactly once. The retry's rule (ps/replicate.c
 * undo_take): a variable whose last update is the id is rolled back to its value before it
 * (psg_applied_pre_of) and updated again; else one that holds the id is left alone. Main's
 * code before the fix failed it: wA's way back was the value before both updates (wB's lost
 * on a retry of wA), and wB's update was not recorded (applied twice on a retry of wB). */
static void test_batched_ids(void) {
    rig_t r;
    rig_open(&r);
    full_copy(&r);
    psg_resource_mgr_t *rm = psg_session_resources(r.sess);
    int values = 0, replays = 0;
    size_t bytes = 0;
    train_steps(&r, 1, 6); /* a step without an id, forwarded alone */
    forward(&r, &values, &replays, &bytes);
    train_as(&r, "wA", 7);
    psg_tensor_t *after_a[16] = {0};
    CHECK(r.n_names <= 16);
    for (int i = 0; i < r.n_names && i < 16; i++)
        after_a[i] = psg_tensor_copy(psg_resource_find_variable(rm, r.names[i])->value);
    train_as(&r, "wB", 8);
    /* the primary recorded each update as it was applied */
    CHECK(psg_applied_get(r.papplied, "w", "wA") == 1 &&
          psg_applied_get(r.papplied, "w", "wB") == 1);
    /* wA's forward, as ps/replicate.c builds it: its id, the records of its own step */
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Replicate");
    psg_strbuf_t body = {0};
    psg_strbuf_printf(&body, "#wA 1\n");
    for (int i = 0; i < r.n_names; i++) psg_strbuf_printf(&body, "%s\twA\t1\n", r.names[i]);
    psg_repl_plan_t *plan = NULL;
    int count = 0;
    CHECK(psg_repl_log_forward(r.log, rm, r.names, NULL, r.n_names, m, &body, &count, &replays,
                               &bytes, &plan) == 0);
    CHECK(replays >= 8); /* both steps' updates in one forward */
    CHECK(psg_msg_set_body(m, body.s, body.len) == 0);
    free(body.s);
    CHECK(psg_applied_merge(r.applied, (const char *)m->body->data, m->body->size) == 0);
    int replayed = 0;
    CHECK(psg_repl_replay(r.replayer, r.backup, r.applied, m, &replayed) == 0);
    psg_repl_commit(&plan, true);
    CHECK(same_bytes(&r));
    for (int i = 0; i < r.n_names; i++) {
        const char *name = r.names[i];
        /* wA's update is not the last of any variable: its retry leaves them alone */
        psg_tensor_t *pre = psg_applied_pre_of(r.applied, name, "wA", 1);
        if (pre) fprintf(stderr, "  a retry of wA 1 rolls %s back to before wB 1 too\n", name);
        CHECK(pre == NULL && psg_applied_get(r.applied, name, "wA") >= 1);
        psg_tensor_destroy(&pre);
        /* wB's: rolled back to just after wA's (then updated again: each once), or left
         * alone as held */
        pre = psg_applied_pre_of(r.applied, name, "wB", 1);
        bool back = pre && psg_tensor_nbytes(pre) == psg_tensor_nbytes(after_a[i]) &&
                    !memcmp(pre->data, after_a[i]->data, psg_tensor_nbytes(pre));
        bool held = !pre && psg_applied_get(r.applied, name, "wB") >= 1;
        if (!back && !held) fprintf(stderr, "  a retry of wB 1 updates %s twice\n", name);
        CHECK(back || held);
        psg_tensor_destroy(&pre);
        psg_tensor_destroy(&after_a[i]);
    }
    psg_msg_destroy(&m);
    rig_close(&r);
}

/* Gradients of 1e-37 make Adam's first moment 1e-38, a denormal: flushed to zero by the
 * primary's kernel (the process's choice, core/fp_mode.c), and by the backup's replay too,
 * which runs here on this test's thread, whose own mode keeps denormals. */
static void test_denormals_replayed_bitwise(void) {
    psg_fp_set_flush_denormals(false);
    unsigned outer = psg_fp_enter();
    psg_fp_set_flush_denormals(true);
    rig_t r;
    rig_open(&r);
    full_copy(&r);
    psg_shape_t s = psg_shape_1d(N);
    float g[N];
    for (int i = 0; i < N; i++) g[i] = 1e-37f;
    psg_tensor_t *vals[2] = {psg_test_tensor(&s, g), psg_tensor_scalar_f32(0.01f)};
    psg_endpoint_t feeds[2] = {r.grad, r.lr};
    CHECK(psg_session_run(r.sess, 2, feeds, vals, 0, NULL, NULL, 1, &r.train) == 0);
    psg_tensor_destroy(&vals[0]);
    psg_tensor_destroy(&vals[1]);
    int values = 0, replays = 0;
    size_t bytes = 0;
    forward(&r, &values, &replays, &bytes);
    CHECK(values == 0 && replays >= 4);
    CHECK(same_bytes(&r));
    psg_resource_mgr_t *rm = psg_session_resources(r.sess);
    int flushed = 0;
    for (int i = 0; i < psg_resource_num_variables(rm); i++) {
        psg_variable_t *v = psg_resource_variable_at(rm, i);
        if (strcmp(v->name, "w/Adam")) continue;
        const float *m = v->value->data;
        for (int k = 0; k < N; k++) flushed += m[k] == 0.0f;
    }
    CHECK(flushed == N); /* the case is a denormal's: 0.1 * 1e-37 */
    rig_close(&r);
    psg_fp_leave(outer);
}

int main(void) {
    RUN_TEST(test_replayed_bitwise);
    RUN_TEST(test_denormals_replayed_bitwise);
    RUN_TEST(test_by_value);
    RUN_TEST(test_gradient_of_a_variable);
    RUN_TEST(test_bad_lines);
    RUN_TEST(test_batched_ids);
    return psg_test_summary();
}
