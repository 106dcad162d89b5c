/* The finite-difference gradient checker behind every op's gradient test. */
#include "tests/gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static double weighted_sum(const psg_tensor_t *y, const float *w) {
    double s = 0;
    const float *d = psg_tensor_f32(y);
    for (int64_t i = 0; i < psg_tensor_numel(y); i++) s += (double)d[i] * w[i];
    return s;
}

int psg_gradcheck(const char *label, int n, const psg_gradcheck_input_t *inputs,
                  psg_gradcheck_build_fn build, void *ctx, double tol) {
    int rc = -1;
    psg_graph_t *g = psg_graph_new();
    psg_session_t *s = NULL;
    psg_callable_t *fwd = NULL, *bwd = NULL;
    psg_tensor_t *wt = NULL, *y = NULL;
    psg_endpoint_t ph[n], grads[n], xs[n];
    psg_tensor_t *feeds[n], *fetched[n + 1];
    int nx = 0;
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        ph[i] = psg_placeholder(g, name, inputs[i].value->dtype, &inputs[i].value->shape);
        feeds[i] = inputs[i].value;
        if (inputs[i].differentiable) xs[nx++] = ph[i];
    }
    psg_endpoint_t out = build(g, ph, ctx);
    if (!psg_endpoint_valid(out) || psg_graph_error(g)) {
        fprintf(stderr, "%s: build failed: %s\n", label,
                psg_graph_error(g) ? psg_graph_error(g) : psg_error_message());
        goto done;
    }
    s = psg_session_new(g, NULL, NULL);
    fwd = s ? psg_session_make_callable(s, n, ph, 1, &out, 0, NULL) : NULL;
    if (!fwd || psg_callable_run(fwd, feeds, &y) < 0) {
        fprintf(stderr, "%s: forward failed: %s\n", label, psg_error_message());
        goto done;
    }
    /* W: fixed pseudo-random weights in [0.5, 1.5) with random signs */
    wt = psg_tensor_new(PSG_DT_F32, &y->shape);
    unsigned seed = 12345;
    float *w = psg_tensor_f32(wt);
    for (int64_t i = 0; i < psg_tensor_numel(wt); i++) {
        seed = seed * 1103515245u + 12345u;
        float u = (float)((seed >> 8) & 0xffff) / 65536.0f;
        w[i] = (seed & 0x80000000u ? -1.0f : 1.0f) * (0.5f + u);
    }
    psg_tensor_t *wcopy = psg_tensor_ref(wt);
    psg_endpoint_t wep = psg_const(g, "W", &wcopy);
    if (psg_gradients(g, 1, &out, &wep, nx, xs, grads) < 0) {
        fprintf(stderr, "%s: gradients failed: %s\n", label, psg_error_message());
        goto done;
    }
    for (int i = 0; i < nx; i++) {
        if (!psg_endpoint_valid(grads[i])) {
            fprintf(stderr, "%s: no gradient reaches differentiable input %d\n", label, i);
            goto done;
        }
    }
    bwd = psg_session_make_callable(s, n, ph, nx, grads, 0, NULL);
    if (!bwd || psg_callable_run(bwd, feeds, fetched) < 0) {
        fprintf(stderr, "%s: backward failed: %s\n", label, psg_error_message());
        goto done;
    }
    int bad = 0;
    for (int i = 0, k = 0; i < n; i++) {
        if (!inputs[i].differentiable) continue;
        psg_tensor_t *x = inputs[i].value, *ga = fetched[k++];
        float *xd = psg_tensor_f32(x);
        int bad_here = 0;
        for (int64_t j = 0; j < psg_tensor_numel(x); j++) {
            float orig = xd[j];
            double eps = 1e-3 * fmax(1.0, fabs(orig));
            double f[2];
            for (int side = 0; side < 2; side++) {
                psg_tensor_t *yy = NULL;
                xd[j] = (float)(orig + (side ? -eps : eps));
                if (psg_callable_run(fwd, feeds, &yy) < 0) {
                    fprintf(stderr, "%s: forward failed: %s\n", label, psg_error_message());
                    xd[j] = orig;
                    goto done_fetched;
                }
                f[side] = weighted_sum(yy, w);
                psg_tensor_destroy(&yy);
            }
            xd[j] = orig;
            double numeric = (f[0] - f[1]) / (2 * eps);
            double analytic = psg_tensor_f32(ga)[j];
            if (!(fabs(analytic - numeric) <= tol * (1 + fabs(numeric)))) {
                if (bad_here++ < 5)
                    fprintf(stderr, "%s: d/dx%d[%lld]: analytic %.6g, numeric %.6g\n", label, i,
                            (long long)j, analytic, numeric);
            }
        }
        bad += bad_here;
    }
    rc = bad ? -1 : 0;
done_fetched:
    for (int i = 0; i < nx; i++) psg_tensor_destroy(&fetched[i]);
done:
    psg_tensor_destroy(&y);
    psg_tensor_destroy(&wt);
    psg_callable_destroy(&fwd);
    psg_callable_destroy(&bwd);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
    return rc;
}
