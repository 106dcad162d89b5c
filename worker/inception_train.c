/* Inception-v3 in the one training loop (inception_train.h): the config and TF's
 * recipe from the options, the towers' builder, the optimizer, the step's batch-norm
 * updates and moving average, and the evaluation models. */
#include "worker/inception_train.h"

#include "psgraph/error.h"
#include "psgraph/ops_array.h"

#include <stdlib.h>
#include <string.h>

int psg_inception_train_init(psg_inception_train_t *it, const psg_train_config_t *c, int image_size,
                             int classes, int64_t examples_per_epoch, int batch, int replicas) {
    memset(it, 0, sizeof *it);
    it->cfg = psg_inception3_defaults();
    it->cfg.image_size = image_size;
    it->cfg.classes = classes;
    it->cfg.aux_logits = c->aux;
    it->cfg.is_training = !c->forward_only;
    it->cfg.seed = c->seed;
    if (c->label_smoothing >= 0) it->cfg.label_smoothing = (float)c->label_smoothing;
    if (c->batchnorm_decay > 0) it->cfg.bn_decay = (float)c->batchnorm_decay;
    int towers = c->towers > 1 ? c->towers : 1, per_tower = batch / towers;
    if (c->virtual_batch_size > 0 &&
        (batch % towers || !psg_inception3_virtual_batch_ok(per_tower, c->virtual_batch_size)))
        return psg_error_set("--virtual-batch-size %d: it must divide each tower's batch (--batch "
                             "%d over %d tower%s) into at most %d groups",
                             c->virtual_batch_size, batch, towers, towers > 1 ? "s" : "",
                             PSG_INCEPTION3_MAX_GHOSTS);
    it->cfg.virtual_batch_size = c->virtual_batch_size;
    it->cfg.batch = per_tower;
    it->recipe = c->recipe;
    it->recipe.batch = batch;
    it->recipe.replicas = replicas > 0 ? replicas : 1;
    it->recipe.examples_per_epoch = examples_per_epoch;
    if (c->lr > 0) it->recipe.learning_rate = c->lr;    /* --lr: --initial-learning-rate's alias */
    if (c->optimizer && !strcmp(c->optimizer, "sgd")) { /* the PyTorch peer's plain step */
        it->recipe.plain_sgd = true;
        it->recipe.ema_decay = 0;
        it->cfg.weight_decay = 0;
    } else if (c->optimizer && strcmp(c->optimizer, "rmsprop")) {
        return psg_error_set("--optimizer %s: inception3 trains with rmsprop (TF's recipe) or "
                             "sgd (plain, no moving average nor weight decay)",
                             c->optimizer);
    }
    if (c->warmup_epochs > 0) {
        double per_epoch = (double)examples_per_epoch / batch / it->recipe.replicas;
        it->recipe.warmup_steps = (int64_t)(c->warmup_epochs * per_epoch);
        if (it->recipe.warmup_steps < 1) it->recipe.warmup_steps = 1;
    }
    return 0;
}

void psg_inception_train_free(psg_inception_train_t *it) {
    free(it->ema_vars);
    it->ema_vars = NULL;
}

psg_optimizer_t *psg_inception_train_optimizer(psg_inception_train_t *it, psg_graph_t *g) {
    return psg_inception3_optimizer(g, &it->recipe, NULL);
}

int psg_inception_train_build_tower(void *ctx, psg_graph_t *g, int k, psg_model_t *m) {
    psg_inception_train_t *it = ctx;
    psg_inception3_t *t = &it->towers[k];
    if (psg_inception3_build(g, &it->cfg, t) < 0) return -1;
    /* tower 0's size and the variables the moving average covers, before any slot */
    if (k == 0 && psg_model_stats(g, "InceptionV3/", &it->stats) < 0) return -1;
    if (k == 0 && (it->n_ema_vars = psg_inception3_variables(g, &it->ema_vars)) < 0) return -1;
    *m = (psg_model_t){t->images, t->labels, t->logits, t->loss, t->correct};
    return 0;
}

int psg_inception_train_build_one(void *ctx, psg_graph_t *g, psg_model_t *m) {
    return psg_inception_train_build_tower(ctx, g, 0, m);
}

int psg_inception_train_finish(psg_inception_train_t *it, psg_graph_t *g, int *train_op,
                               psg_sync_train_t *sync, psg_replica_setter_t *setter) {
    if (!it->cfg.is_training) return 0;
    if (!sync)
        return psg_inception3_finish_train_op(g, &it->recipe, *train_op, it->towers[0].bn_updates,
                                              it->n_ema_vars, it->ema_vars, train_op);
    int ema = -1;
    psg_graph_push_replica_setter(g, setter);
    int rc = it->recipe.ema_decay > 0
                 ? psg_ema_apply(g, it->recipe.ema_decay, it->n_ema_vars, it->ema_vars,
                                 psg_sync_train_after_update(sync), &ema)
                 : 0;
    psg_graph_pop_device(g);
    if (rc < 0) return -1;
    psg_sync_train_add_ops(sync, it->towers[0].bn_updates, ema);
    return 0;
}

/* One evaluation model under `scope` (NULL: the root). */
static int eval_model(const psg_inception_train_t *it, psg_graph_t *g, const char *scope, bool ema,
                      psg_endpoint_t *images, psg_endpoint_t *logits) {
    psg_inception3_config_t ec = it->cfg;
    ec.is_training = false;
    ec.read_ema = ema;
    ec.aux_logits = false;
    psg_inception3_t m;
    if (scope && psg_graph_push_scope(g, scope) < 0) return -1;
    int rc = psg_inception3_build(g, &ec, &m);
    if (scope) psg_graph_pop_scope(g);
    if (rc < 0) return psg_error_wrap("the evaluation model%s", ema ? " (moving average)" : "");
    *images = m.images;
    *logits = m.logits;
    return 0;
}

int psg_inception_train_eval_models(const psg_inception_train_t *it, psg_graph_t *g,
                                    psg_eval_models_t *e) {
    memset(e, 0, sizeof *e);
    /* a graph with the training model shares its variables (and the shadows) from a scope;
     * the evaluator's builds both at the root, where the handles get the checkpoint's names */
    bool trained = psg_graph_find(g, "InceptionV3/Conv2d_1a_3x3/weights") >= 0;
    if (eval_model(it, g, trained ? "eval" : NULL, false, &e->images[0], &e->logits[0]) < 0)
        return -1;
    e->n = 1;
    if (it->recipe.ema_decay <= 0) return 0;
    if (eval_model(it, g, trained ? "eval_ema" : NULL, true, &e->images[1], &e->logits[1]) < 0)
        return -1;
    e->n = 2;
    return 0;
}

void psg_inception_train_describe(const psg_inception_train_t *it, FILE *out) {
    const psg_inception3_recipe_t *r = &it->recipe;
    if (r->plain_sgd)
        fprintf(out, "recipe: plain SGD, lr %g x%g every %g epochs (%lld steps)", r->learning_rate,
                r->lr_decay, r->epochs_per_decay, (long long)psg_inception3_decay_steps(r));
    else
        fprintf(out,
                "recipe: RMSProp(decay %g, momentum %g, epsilon %g), lr %g x%g every %g epochs "
                "(%lld steps: %lld examples / batch %d x %g / %d replicas, as TF's trainer)",
                r->rmsprop_decay, r->momentum, r->epsilon, r->learning_rate, r->lr_decay,
                r->epochs_per_decay, (long long)psg_inception3_decay_steps(r),
                (long long)r->examples_per_epoch, r->batch, r->epochs_per_decay, r->replicas);
    if (r->warmup_steps > 0)
        fprintf(out, ", linear warm-up over %lld steps", (long long)r->warmup_steps);
    if (r->ema_decay > 0) fprintf(out, ", moving average %g", r->ema_decay);
    fprintf(out, ", label smoothing %g, weight decay %g, batch-norm decay %g, %d classes, %dx%d%s",
            (double)it->cfg.label_smoothing, (double)it->cfg.weight_decay, (double)it->cfg.bn_decay,
            it->cfg.classes, it->cfg.image_size, it->cfg.image_size,
            it->cfg.aux_logits ? ", aux head" : "");
    if (it->cfg.virtual_batch_size > 0)
        fprintf(out, ", batch norm over virtual batches of %d", it->cfg.virtual_batch_size);
    fputc('\n', out);
}
