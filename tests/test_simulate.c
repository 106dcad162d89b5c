/* The overlap model of `psgraph simulate` (examples/simulate_overlap.c) on small cases
 * whose answers are worked out by hand in the comments, its calibration, and the trace
 * reader (examples/simulate_trace.c) on a trace written here with known numbers. A real
 * cluster's trace is read by tests/test_simulate_trace.sh. */
#include "psgraph/error.h"
#include "psgraph/simulate.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Links of 1 byte/ms (8e-6 Gbit/s), chunks of 1 byte, a wire 1e9 times faster under the
 * cap, no latency, no overhead, no tail: each case's answer is a sum of whole ms. */
static psg_sim_config_t unit_config(void) {
    psg_sim_config_t c = psg_sim_defaults();
    c.tail = PSG_SIM_TAIL_NONE;
    c.link_gbps = 8e-6;
    c.line_gbps = 8e3;
    c.chunk_bytes = 1;
    c.latency_ms = 0;
    c.overhead_ms = 0;
    c.ps = 1;
    c.steps = 20;
    c.batch = 1;
    return c;
}

/* The serial model's inputs (compute step_ms, bytes_per_step each way) in the overlap
 * model: r of n + b workers; 0, or -1 with the error set. */
static int run_serial(const psg_sim_config_t *c, int n, int b, psg_sim_result_t *r) {
    psg_sim_msg_t m[2];
    psg_sim_profile_t p;
    psg_sim_profile_serial(c, m, &p);
    return psg_sim_overlap_run(c, &p, n, b, r);
}

/* One worker: pull 10 bytes (10 ms), compute 30, push 10 (10 ms): 50 ms a step, the
 * serial model's sum, since nothing overlaps with one pull needed at once and one push
 * at the end. */
static void test_serial_profile(void) {
    psg_sim_config_t c = unit_config();
    c.step_ms = 30;
    c.bytes_per_step = 10;
    psg_sim_result_t r;
    CHECK(run_serial(&c, 1, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 50, 1e-6);
    CHECK_NEAR(r.compute_ms, 30, 1e-9);
    CHECK_NEAR(r.speedup, 1, 1e-9);
}

/* One worker, compute 30: pull a (10 B) needed at 0, pull b (20 B) needed at 10; push x
 * (20 B) made at 20, push y (10 B) at 30. a is in at 10, b at 30 (behind a on the ps's
 * link); compute 0-10 runs 10-20, waits for b, 10-20 runs 30-40: x leaves at 40 (in at
 * 60), compute 20-30 runs 40-50, y queues behind x on the worker's link: in at 70. The
 * next step starts at 70: 70 ms, against 30 + 30 + 30 = 90 without overlap. */
static void test_overlap_one_worker(void) {
    psg_sim_config_t c = unit_config();
    psg_sim_msg_t pulls[2] = {{10, 0, 0, 0}, {20, 10, 0, 0}};
    psg_sim_msg_t pushes[2] = {{20, 20, 0, 0}, {10, 30, 0, 0}};
    psg_sim_profile_t p = {
        .pulls = pulls, .pushes = pushes, .n_pulls = 2, .n_pushes = 2, .compute_ms = 30};
    psg_sim_result_t r;
    CHECK(psg_sim_overlap_run(&c, &p, 1, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 70, 1e-6);
    /* applies on the ps: x's (2 ms) runs at 60-62 while y is on the wire, y's (3 ms) at
     * 70-73, then the chief's overhead (1 ms): 74 */
    pushes[0].apply_ms = 2;
    pushes[1].apply_ms = 3;
    c.overhead_ms = 1;
    CHECK(psg_sim_overlap_run(&c, &p, 1, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 74, 1e-6);
}

/* Two workers, one ps: each pulls 10 B, computes 5, pushes 10 B. The ps's uplink serves
 * them in turn a chunk each: worker 0's pull is in at 19, worker 1's at 20; worker 0
 * pushes from 24, worker 1 from 25; the ps's downlink, busy from 24 with 20 bytes, is
 * done at 44. A step: 44 ms (not 20 + 5 + 20 = 45: worker 0's push starts early). */
static void test_shared_link(void) {
    psg_sim_config_t c = unit_config();
    c.step_ms = 5;
    c.bytes_per_step = 10;
    psg_sim_result_t r;
    CHECK(run_serial(&c, 2, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 44, 1e-6);
    CHECK(r.speedup > 1 && r.speedup < 2); /* one worker: 25 ms a step */
    /* two ps: the serial inputs are spread, 5 B a worker on each ps's link each way, and
     * each worker's own link carries its 10 B: about 10 + 5 + 10, far from 44 */
    c.ps = 2;
    CHECK(run_serial(&c, 2, 0, &r) == 0);
    CHECK(r.ps == 2 && r.step_ms >= 25 - 1e-6 && r.step_ms < 30);
}

/* Three workers as above, the last on a link of 0.1 byte/ms. b = 0: its pull's chunks
 * leave the ps at 2, 5, ..., 29 and take 10 ms each on its link: in at 102; its compute
 * ends at 107 and its push takes 100 ms: every step waits for it, 207 ms. b = 1 (N = 2):
 * the two others step every 44 ms as above, and the slow worker's traffic (a late push
 * dropped, a pull now and then) adds a little on the ps's links. */
static void test_slow_link_and_backup(void) {
    psg_sim_config_t c = unit_config();
    c.step_ms = 5;
    c.bytes_per_step = 10;
    c.slow_link_gbps = 8e-7;
    c.steps = 40;
    psg_sim_result_t r0, r1;
    CHECK(run_serial(&c, 3, 0, &r0) == 0);
    CHECK_NEAR(r0.step_ms, 207, 1e-6);
    CHECK(run_serial(&c, 2, 1, &r1) == 0);
    CHECK(r1.step_ms >= 44 - 1e-6 && r1.step_ms < 55); /* 10 of its chunks per ~207 ms */
    /* every worker starts every step without a backup; with one, the slow worker starts
     * one step in about 4 (its pull takes ~100 ms of each ~207): the CPU bounds count that */
    CHECK_NEAR(r0.workers_per_step, 3, 1e-9);
    CHECK(r1.workers_per_step > 2 && r1.workers_per_step < 2.5);
    c.worker_cpu_ms = 10;
    c.ps_cpu_ms = 4;
    CHECK(run_serial(&c, 2, 1, &r1) == 0);
    CHECK_NEAR(r1.path_step_ms, 10 + 4 * r1.workers_per_step, 1e-9);
}

/* A token bucket of 4 bytes on every link: each transfer of 10 B takes the 4 at the
 * wire's speed (the bucket refills while the worker computes) and 6 ms for the rest. */
static void test_burst(void) {
    psg_sim_config_t c = unit_config();
    c.step_ms = 30;
    c.bytes_per_step = 10;
    c.burst_min_bytes = 4;
    psg_sim_result_t r;
    CHECK(run_serial(&c, 1, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 6 + 30 + 6, 1e-3);
}

/* Calibration: a traced run of 1 worker measured 100 ms a step on uncapped links; the
 * model without overhead gives about 30 (the wire is fast): the overhead is what is left,
 * and the model of that run then gives 100. */
static void test_calibrate(void) {
    psg_sim_config_t c = unit_config();
    psg_sim_msg_t pulls[2] = {{10, 0, 0, 0}, {20, 10, 0, 0}};
    psg_sim_msg_t pushes[2] = {{20, 20, 0, 0}, {10, 30, 0, 0}};
    psg_sim_profile_t p = {.pulls = pulls,
                           .pushes = pushes,
                           .n_pulls = 2,
                           .n_pushes = 2,
                           .compute_ms = 30,
                           .trace_workers = 1,
                           .trace_step_ms = 100};
    CHECK(psg_sim_calibrate(&c, &p, NULL) == 0);
    CHECK_NEAR(p.overhead_ms, 70, 1e-3);
    c.link_gbps = c.line_gbps;
    psg_sim_result_t r;
    CHECK(psg_sim_overlap_run(&c, &p, 1, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 100, 1e-6);
    /* on the capped links of the other cases: 70 + 70 (overlap, above) */
    c.link_gbps = 8e-6;
    CHECK(psg_sim_overlap_run(&c, &p, 1, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 70 + p.overhead_ms, 1e-6);
    p.trace_workers = 0;
    CHECK(psg_sim_calibrate(&c, &p, NULL) < 0);
    CHECK_ERROR_HAS("trace");
}

/* The CPU bounds' case: compute 5 ms and no bytes, one pull needed at once and one push at
 * the end whose apply takes 1 ms, a trace of one worker. */
static psg_sim_profile_t cpu_case(psg_sim_config_t *c, psg_sim_msg_t *pull, psg_sim_msg_t *push) {
    *c = unit_config();
    c->step_ms = 5;
    c->bytes_per_step = 0;
    *pull = (psg_sim_msg_t){0, 0, 0, 0};
    *push = (psg_sim_msg_t){0, 5, 1, 0};
    return (psg_sim_profile_t){.pulls = pull,
                               .pushes = push,
                               .n_pulls = 1,
                               .n_pushes = 1,
                               .compute_ms = 5,
                               .trace_workers = 1};
}

/* The CPU bounds: workers of 10 ms CPU a step, the ps 4 ms with one worker (1 of it its
 * apply, 3 per worker served), compute 5 and no bytes, so the model alone says 5 + the
 * apply = 6 for any count of workers.
 * - The ps's critical path (psg_sim_path_step_ms), one worker: 10 + 1 + 3 = 14; three + a
 *   backup: 10 + 1 + 4 x 3 = 23; on 2 ps the ps's part is split: 10 + 13 / 2 = 16.5.
 * - The shared cores (2): one worker (10 + 1 + 3) / 2 = 7, below its path; three + a
 *   backup 4 x 10 + 1 + 4 x 3 = 53 ms of CPU, 26.5 on 2 cores. The path on 2 shared cores:
 *   the 3 gradients the step waits for take 3 x 10 / 2 = 15 of the cores, then the ps's
 *   1 + 4 x 3: 28, above the cores' bound. On 2 ps tasks the ps's part is split: 15 + 6.5
 *   = 21.5, and the cores bind (26.5); on 3 cores 10 + 6.5 against 53 / 3 = 17.67; on 1
 *   core 30 + 6.5 against 53.
 * Without CPU times the model's step stands; with workers of 1 ms and a ps of 2 it is the
 * larger (path 1 + 1 + 1 = 3). */
static void test_cpu_bounds(void) {
    psg_sim_config_t c;
    psg_sim_msg_t pull, push;
    psg_sim_profile_t p = cpu_case(&c, &pull, &push);
    psg_sim_result_t r;
    CHECK(psg_sim_overlap_run(&c, &p, 3, 1, &r) == 0);
    CHECK(r.cpu_step_ms == 0 && r.path_step_ms == 0);
    CHECK_NEAR(r.workers_per_step, 4, 1e-9);
    double alone = r.step_ms;
    CHECK_NEAR(alone, 5 + 1, 1e-6); /* compute, then the apply */
    c.worker_cpu_ms = 10;
    c.ps_cpu_ms = 4;
    CHECK(psg_sim_overlap_run(&c, &p, 1, 0, &r) == 0);
    CHECK(r.cpu_step_ms == 0); /* no --cores: each host its own */
    CHECK_NEAR(r.path_step_ms, 14, 1e-9);
    CHECK_NEAR(r.step_ms, 14, 1e-9);
    CHECK(psg_sim_overlap_run(&c, &p, 3, 1, &r) == 0);
    CHECK_NEAR(r.step_ms, 23, 1e-9);
    CHECK_NEAR(r.link_step_ms, alone, 1e-6);
    c.ps = 2;
    CHECK(psg_sim_overlap_run(&c, &p, 3, 1, &r) == 0);
    CHECK_NEAR(r.path_step_ms, 16.5, 1e-9);
    c.ps = 1;
    c.cores = 2;
    CHECK(psg_sim_overlap_run(&c, &p, 1, 0, &r) == 0);
    CHECK_NEAR(r.cpu_step_ms, 7, 1e-9);
    CHECK_NEAR(r.step_ms, 14, 1e-9);
    CHECK_NEAR(r.link_step_ms, 6, 1e-6);
    CHECK(psg_sim_overlap_run(&c, &p, 3, 1, &r) == 0);
    CHECK_NEAR(r.cpu_step_ms, 26.5, 1e-9);
    CHECK_NEAR(r.path_step_ms, 28, 1e-9);
    CHECK_NEAR(r.step_ms, 28, 1e-9);
    CHECK_NEAR(r.speedup, 3 * 14 / 28.0, 1e-9); /* against one worker's 14 */
    c.ps = 2;
    CHECK(psg_sim_overlap_run(&c, &p, 3, 1, &r) == 0);
    CHECK_NEAR(r.path_step_ms, 21.5, 1e-9);
    CHECK_NEAR(r.step_ms, 26.5, 1e-9);
    c.cores = 3;
    CHECK(psg_sim_overlap_run(&c, &p, 3, 1, &r) == 0);
    CHECK_NEAR(r.path_step_ms, 16.5, 1e-9);
    CHECK_NEAR(r.step_ms, 53 / 3.0, 1e-9);
    c.cores = 1;
    CHECK(psg_sim_overlap_run(&c, &p, 3, 1, &r) == 0);
    CHECK_NEAR(r.path_step_ms, 36.5, 1e-9);
    CHECK_NEAR(r.step_ms, 53, 1e-9);
    c.ps = 1;
    c.cores = 2;
    /* a traced run of 2 workers: 3 ms served for 2, 1.5 each: (40 + 1 + 6) / 2 on the
     * cores, above the path's 15 + 1 + 6 */
    p.trace_workers = 2;
    CHECK(psg_sim_overlap_run(&c, &p, 3, 1, &r) == 0);
    CHECK_NEAR(r.path_step_ms, 15 + 1 + 4 * 1.5, 1e-9);
    CHECK_NEAR(r.step_ms, 23.5, 1e-9);
    /* the serial model: no applies known, the ps's CPU all per worker: (4 x 10 + 4 x 4) / 2
     * on the cores, 3 x 10 / 2 + 4 x 4 on the path */
    CHECK(psg_sim_run(&c, 3, 1, &r) == 0);
    CHECK_NEAR(r.cpu_step_ms, 28, 1e-9);
    CHECK_NEAR(r.path_step_ms, 31, 1e-9);
    CHECK_NEAR(r.step_ms, 31, 1e-9);
    /* small CPU times: the model's step is the largest */
    c.worker_cpu_ms = 1;
    c.ps_cpu_ms = 2;
    p.trace_workers = 1;
    CHECK(psg_sim_overlap_run(&c, &p, 1, 0, &r) == 0);
    CHECK_NEAR(r.path_step_ms, 3, 1e-9);
    CHECK_NEAR(r.step_ms, 6, 1e-6);
    c.worker_cpu_ms = -1;
    CHECK(psg_sim_overlap_run(&c, &p, 1, 0, &r) < 0);
    CHECK_ERROR_HAS("worker CPU");
}

/* The machine twice as fast (psg_sim_scale_cpu): test_cpu_bounds' three workers and a
 * backup on 2 cores and 1 ps (path 28 ms) take 14, every CPU time halved; where links bind
 * they do not move: test_serial_profile's pull 10 + compute 30 + push 10 becomes 10 + 15 +
 * 10. A speed of 0 is refused. */
static void test_scale_cpu(void) {
    psg_sim_config_t c;
    psg_sim_msg_t pull, push;
    psg_sim_profile_t p = cpu_case(&c, &pull, &push);
    c.worker_cpu_ms = 10;
    c.ps_cpu_ms = 4;
    c.cores = 2;
    psg_sim_result_t r;
    CHECK(psg_sim_overlap_run(&c, &p, 3, 1, &r) == 0);
    CHECK_NEAR(r.step_ms, 28, 1e-9);
    CHECK(psg_sim_scale_cpu(&c, &p, 2) == 0);
    CHECK_NEAR(c.worker_cpu_ms, 5, 1e-12);
    CHECK_NEAR(c.ps_cpu_ms, 2, 1e-12);
    CHECK_NEAR(push.at_ms, 2.5, 1e-12);
    CHECK_NEAR(push.apply_ms, 0.5, 1e-12);
    CHECK(psg_sim_overlap_run(&c, &p, 3, 1, &r) == 0);
    CHECK_NEAR(r.path_step_ms, 14, 1e-9);
    CHECK_NEAR(r.step_ms, 14, 1e-9);
    CHECK_NEAR(r.link_step_ms, 3, 1e-6); /* compute 2.5, then the apply 0.5 */
    /* links only: a pull of 10 B and a push of 10 B on 1 B/ms links, compute 30: 50 ms;
     * at twice the speed the compute is 15: 35 ms, the bytes' 20 ms unchanged */
    psg_sim_config_t u = unit_config();
    u.step_ms = 30;
    u.bytes_per_step = 10;
    psg_sim_msg_t m[2];
    psg_sim_profile_serial(&u, m, &p);
    CHECK(psg_sim_scale_cpu(&u, &p, 2) == 0);
    CHECK(psg_sim_overlap_run(&u, &p, 1, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 35, 1e-6);
    CHECK(psg_sim_run(&u, 1, 0, &r) == 0); /* the serial model: its step_ms halved too */
    CHECK_NEAR(r.compute_ms, 15, 1e-9);
    CHECK(psg_sim_scale_cpu(&u, NULL, 0) < 0);
    CHECK_ERROR_HAS("speed");
}

/* The ps's link in turn or first come, first served: 2 workers pull 10 B each (1 B/ms),
 * compute 30, push 10 B. Round-robin chunks: both pulls end at about 20, both pushes
 * share the ps's downlink after 50: the step ends at about 70. First come: worker 0's pull
 * ends at 10, worker 1's at 20; worker 0 pushes 40-50 while worker 1 computes 20-50, then
 * worker 1 pushes 50-60: the step is 60. */
static void test_link_fifo(void) {
    psg_sim_config_t c = unit_config();
    c.step_ms = 30;
    c.bytes_per_step = 10;
    psg_sim_result_t r;
    CHECK(run_serial(&c, 2, 0, &r) == 0);
    CHECK(r.step_ms > 68 && r.step_ms <= 70 + 1e-6);
    c.link_fifo = true;
    CHECK(run_serial(&c, 2, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 60, 1e-6);
}

/* The ps's uplink sending each worker's TCP window at once (window_bytes, each turn's
 * window drawn in [w / 2, 3 w / 2)): 2 workers pull 10 B each (1 B/ms), compute 30, push
 * 10 B. Window 20 (10-30 B a turn, a whole pull): worker 0's pull ends at 10, worker 1's
 * at 20; worker 0 pushes 40-50 while worker 1 computes 20-50, then pushes 50-60: the step
 * is 60, first come, first served. Window 0.5 (under one 1-byte chunk a turn): the two
 * pulls alternate chunk by chunk as without a window. Window 4 (2-6 B a turn): worker 0's
 * pull ends a turn or more before worker 1's, so the step lies strictly between the
 * first-come 60 and the round-robin 70. One worker: nothing shared, 10 + 30 + 10. */
static void test_link_window(void) {
    psg_sim_config_t c = unit_config();
    c.step_ms = 30;
    c.bytes_per_step = 10;
    psg_sim_result_t r, rr;
    CHECK(run_serial(&c, 2, 0, &rr) == 0);
    c.window_bytes = 20;
    CHECK(run_serial(&c, 2, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 60, 1e-6);
    CHECK(run_serial(&c, 1, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, 50, 1e-6);
    c.window_bytes = 0.5;
    CHECK(run_serial(&c, 2, 0, &r) == 0);
    CHECK_NEAR(r.step_ms, rr.step_ms, 1e-9);
    c.window_bytes = 4;
    CHECK(run_serial(&c, 2, 0, &r) == 0);
    CHECK(r.step_ms > 60 && r.step_ms < rr.step_ms);
}

static void test_bad_profile(void) {
    psg_sim_config_t c = unit_config();
    psg_sim_msg_t pushes[1] = {{-5, 0, 0, 0}};
    psg_sim_profile_t p = {.pushes = pushes, .n_pushes = 1, .compute_ms = 1};
    psg_sim_result_t r;
    CHECK(psg_sim_overlap_run(&c, &p, 1, 0, &r) < 0);
    CHECK_ERROR_HAS("push 0");
    p.n_pushes = 0;
    CHECK(psg_sim_overlap_run(&c, &p, 1, 0, &r) < 0);
    CHECK_ERROR_HAS("no pushes");
}

/* A merged trace of 1 ps (pid 0) and 1 worker (pid 1), steps 1..4 at 1000 µs apart, each:
 * the worker's Recv of a variable (400 B, in at +100), compute 200 + 300 µs, a Send of a
 * gradient (400 B, at +600, 50 µs), compute 100 µs; the ps's Send and Recv of those edges
 * and an apply of 40 µs. */
static const char *write_trace(const char *path, bool with_bytes) {
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fprintf(f, "{\"traceEvents\":[\n"
               "{\"ph\":\"M\",\"pid\":0,\"tid\":1,\"name\":\"process_name\",\"args\":{\"name\":"
               "\"/job:ps/replica:0/task:0\"}},\n"
               "{\"ph\":\"M\",\"pid\":1,\"tid\":1,\"name\":\"process_name\",\"args\":{\"name\":"
               "\"/job:worker/replica:0/task:0\"}}");
    const char *b = with_bytes ? ",\"bytes\":400" : "";
    for (int s = 1; s <= 4; s++) {
        double t = 1e6 + 1000.0 * s;
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.1f,\"dur\":900,\"name\":\"step %d\","
                "\"cat\":\"step\",\"args\":{\"step\":%d}}",
                t, s, s);
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":%.1f,\"dur\":100,\"name\":"
                "\"fc/w/_recv_0\",\"cat\":\"Recv\",\"args\":{\"step\":%d%s}}",
                t, s, b);
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.1f,\"dur\":200,\"name\":\"mm\","
                "\"cat\":\"MatMul\",\"args\":{\"step\":%d}}",
                t + 100, s);
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.1f,\"dur\":300,\"name\":\"mmg\","
                "\"cat\":\"MatMul\",\"args\":{\"step\":%d}}",
                t + 300, s);
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.1f,\"dur\":50,\"name\":"
                "\"grad/fc/w/_send_0\",\"cat\":\"Send\",\"args\":{\"step\":%d%s}}",
                t + 600, s, b);
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.1f,\"dur\":100,\"name\":\"loss\","
                "\"cat\":\"Mean\",\"args\":{\"step\":%d}}",
                t + 650, s);
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":%.1f,\"dur\":20,\"name\":"
                "\"fc/w/_send_1\",\"cat\":\"Send\",\"args\":{\"step\":%d%s}}",
                t + 10, s, b);
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":%.1f,\"dur\":10,\"name\":"
                "\"grad/fc/w/_recv_0\",\"cat\":\"Recv\",\"args\":{\"step\":%d%s}}",
                t + 620, s, b);
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":%.1f,\"dur\":40,\"name\":\"apply\","
                "\"cat\":\"ApplyGradientDescent\",\"args\":{\"step\":%d}}",
                t + 700, s);
    }
    fprintf(f, "\n]}\n");
    fclose(f);
    return path;
}

static void test_trace_reader(void) {
    char dir[] = "/tmp/test_simulate.XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/t.json", dir);
    CHECK(write_trace(path, true) != NULL);
    psg_sim_profile_t p;
    CHECK(psg_sim_profile_from_trace(path, &p) == 0);
    CHECK(p.n_pulls == 1 && p.n_pushes == 1);
    CHECK(p.trace_workers == 1 && p.trace_steps == 2); /* steps 2 and 3: 1 warms, 4 has no next */
    CHECK_NEAR(p.compute_ms, 0.65, 1e-9);              /* 200 + 300 + 50 (the Send) + 100 µs */
    CHECK_NEAR(p.trace_step_ms, 1.0, 1e-9);
    if (p.n_pulls == 1 && p.n_pushes == 1) {
        CHECK_NEAR(p.pulls[0].bytes, 400, 0);
        CHECK_NEAR(p.pulls[0].at_ms, 0, 1e-9);    /* in before any compute */
        CHECK_NEAR(p.pushes[0].at_ms, 0.5, 1e-9); /* after 500 µs of compute */
        CHECK_NEAR(p.pushes[0].bytes, 400, 0);
        CHECK_NEAR(p.pushes[0].apply_ms, 0.04, 1e-9);
        CHECK(p.pulls[0].ps == 0 && p.pushes[0].ps == 0);
    }
    psg_sim_profile_free(&p);
    CHECK(write_trace(path, false) != NULL);
    CHECK(psg_sim_profile_from_trace(path, &p) < 0);
    CHECK_ERROR_HAS("args.bytes");
    unlink(path);
    CHECK(psg_sim_profile_from_trace(path, &p) < 0);
    CHECK_ERROR_HAS(path);
    rmdir(dir);
}

int main(void) {
    RUN_TEST(test_serial_profile);
    RUN_TEST(test_overlap_one_worker);
    RUN_TEST(test_shared_link);
    RUN_TEST(test_slow_link_and_backup);
    RUN_TEST(test_burst);
    RUN_TEST(test_calibrate);
    RUN_TEST(test_cpu_bounds);
    RUN_TEST(test_scale_cpu);
    RUN_TEST(test_link_fifo);
    RUN_TEST(test_link_window);
    RUN_TEST(test_bad_profile);
    RUN_TEST(test_trace_reader);
    return psg_test_summary();
}
