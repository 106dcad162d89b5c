/* The resource manager: variables by name, shared by every graph run in one
 * process, and a registry of other named objects (accumulators, queues) with
 * a type tag and a destroy function. Not the objects themselves (ps/). */
#include "psgraph/error.h"
#include "psgraph/resource.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    const char *type;
    void *obj;
    psg_resource_destroy_fn destroy;
} named_resource_t;

struct psg_resource_mgr {
    pthread_mutex_t lock;
    psg_variable_t **vars;
    int num_vars, cap_vars;
    named_resource_t *named;
    int num_named, cap_named;
    psg_write_log_fn write_log;
    void *write_log_ctx;
};

psg_resource_mgr_t *psg_resource_mgr_new(void) {
    psg_resource_mgr_t *rm = calloc(1, sizeof *rm);
    if (!rm) {
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&rm->lock, NULL);
    return rm;
}

void psg_resource_mgr_destroy(psg_resource_mgr_t **rmp) {
    if (!rmp || !*rmp) return;
    psg_resource_mgr_t *rm = *rmp;
    *rmp = NULL;
    for (int i = rm->num_named - 1; i >= 0; i--) {
        if (rm->named[i].destroy) rm->named[i].destroy(rm->named[i].obj);
        free(rm->named[i].name);
    }
    free(rm->named);
    for (int i = 0; i < rm->num_vars; i++) {
        psg_variable_t *v = rm->vars[i];
        free(v->name);
        psg_tensor_destroy(&v->value);
        psg_tensor_destroy(&v->before);
        pthread_mutex_destroy(&v->lock);
        pthread_mutex_destroy(&v->value_lock);
        free(v);
    }
    free(rm->vars);
    pthread_mutex_destroy(&rm->lock);
    free(rm);
}

static named_resource_t *find_named_locked(psg_resource_mgr_t *rm, const char *name) {
    for (int i = 0; i < rm->num_named; i++)
        if (strcmp(rm->named[i].name, name) == 0) return &rm->named[i];
    return NULL;
}

static psg_variable_t *find_locked(psg_resource_mgr_t *rm, const char *name) {
    for (int i = 0; i < rm->num_vars; i++)
        if (strcmp(rm->vars[i]->name, name) == 0) return rm->vars[i];
    return NULL;
}

psg_variable_t *psg_resource_find_variable(psg_resource_mgr_t *rm, const char *name) {
    pthread_mutex_lock(&rm->lock);
    psg_variable_t *v = find_locked(rm, name);
    pthread_mutex_unlock(&rm->lock);
    return v;
}

psg_variable_t *psg_resource_variable(psg_resource_mgr_t *rm, const char *name, psg_dtype_t dt,
                                      const psg_shape_t *shape) {
    pthread_mutex_lock(&rm->lock);
    psg_variable_t *v = find_locked(rm, name);
    if (v) {
        pthread_mutex_unlock(&rm->lock);
        if (v->dtype != dt || !psg_shape_equal(&v->shape, shape)) {
            char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
            psg_error_set("variable '%s' exists as %s%s, asked for as %s%s", name,
                          psg_dtype_name(v->dtype), psg_shape_str(&v->shape, a, sizeof a),
                          psg_dtype_name(dt), psg_shape_str(shape, b, sizeof b));
            return NULL;
        }
        return v;
    }
    if (find_named_locked(rm, name)) {
        pthread_mutex_unlock(&rm->lock);
        psg_error_set("variable '%s': the name belongs to a resource of type '%s'", name,
                      find_named_locked(rm, name)->type);
        return NULL;
    }
    v = calloc(1, sizeof *v);
    psg_tensor_t *value = v ? psg_tensor_zeros(dt, shape) : NULL;
    if (!value) {
        pthread_mutex_unlock(&rm->lock);
        free(v);
        psg_error_wrap("variable '%s'", name);
        return NULL;
    }
    v->name = strdup(name);
    v->dtype = dt;
    v->shape = *shape;
    v->value = value;
    pthread_mutex_init(&v->lock, NULL);
    pthread_mutex_init(&v->value_lock, NULL);
    if (rm->num_vars == rm->cap_vars) {
        rm->cap_vars = rm->cap_vars ? rm->cap_vars * 2 : 16;
        psg_variable_t **nv = realloc(rm->vars, sizeof *nv * (size_t)rm->cap_vars);
        PSG_ASSERT(nv);
        rm->vars = nv;
    }
    rm->vars[rm->num_vars++] = v;
    pthread_mutex_unlock(&rm->lock);
    return v;
}

int psg_resource_num_variables(psg_resource_mgr_t *rm) {
    pthread_mutex_lock(&rm->lock);
    int n = rm->num_vars;
    pthread_mutex_unlock(&rm->lock);
    return n;
}

bool psg_resource_holds_buffer(psg_resource_mgr_t *rm, const psg_buffer_t *b) {
    pthread_mutex_lock(&rm->lock);
    bool held = false;
    for (int i = 0; i < rm->num_vars && !held; i++) {
        psg_variable_t *v = rm->vars[i];
        pthread_mutex_lock(&v->value_lock);
        held = v->value && v->value->buf == b;
        pthread_mutex_unlock(&v->value_lock);
    }
    pthread_mutex_unlock(&rm->lock);
    return held;
}

psg_variable_t *psg_resource_variable_at(psg_resource_mgr_t *rm, int i) {
    pthread_mutex_lock(&rm->lock);
    psg_variable_t *v = (i >= 0 && i < rm->num_vars) ? rm->vars[i] : NULL;
    pthread_mutex_unlock(&rm->lock);
    return v;
}

/* ---- other named resources ---- */

void *psg_resource_find(psg_resource_mgr_t *rm, const char *name, const char *type) {
    pthread_mutex_lock(&rm->lock);
    named_resource_t *r = find_named_locked(rm, name);
    void *obj = r && !strcmp(r->type, type) ? r->obj : NULL;
    pthread_mutex_unlock(&rm->lock);
    return obj;
}

/* Returns the registered object of `name` (-1 when of another kind, error
 * set), or 0 with *obj NULL when the name is free. Called with the lock. */
static int lookup_locked(psg_resource_mgr_t *rm, const char *name, const char *type, void **obj) {
    *obj = NULL;
    if (find_locked(rm, name))
        return psg_error_set("resource '%s' is a variable, not a %s", name, type);
    named_resource_t *r = find_named_locked(rm, name);
    if (r && strcmp(r->type, type))
        return psg_error_set("resource '%s' is a %s, not a %s", name, r->type, type);
    if (r) *obj = r->obj;
    return 0;
}

void *psg_resource_lookup_or_create(psg_resource_mgr_t *rm, const char *name, const char *type,
                                    psg_resource_create_fn create, void *ctx,
                                    psg_resource_destroy_fn destroy) {
    void *obj;
    pthread_mutex_lock(&rm->lock);
    int rc = lookup_locked(rm, name, type, &obj);
    pthread_mutex_unlock(&rm->lock);
    if (rc < 0 || obj) return obj;
    void *made = create(ctx);
    if (!made) {
        psg_error_wrap("%s '%s'", type, name);
        return NULL;
    }
    char *copy = strdup(name);
    pthread_mutex_lock(&rm->lock);
    rc = lookup_locked(rm, name, type, &obj);
    if (rc == 0 && !obj && copy) {
        if (rm->num_named == rm->cap_named) {
            int cap = rm->cap_named ? rm->cap_named * 2 : 16;
            named_resource_t *nr = realloc(rm->named, sizeof *nr * (size_t)cap);
            PSG_ASSERT(nr);
            rm->named = nr;
            rm->cap_named = cap;
        }
        rm->named[rm->num_named++] = (named_resource_t){copy, type, made, destroy};
        obj = made;
        made = NULL;
        copy = NULL;
    }
    pthread_mutex_unlock(&rm->lock);
    /* lost a race (or out of memory): the registered one wins */
    if (made && destroy) destroy(made);
    free(copy);
    if (!obj && rc == 0) psg_error_set("%s '%s': out of memory", type, name);
    return obj;
}

int psg_resource_count(psg_resource_mgr_t *rm, const char *type) {
    pthread_mutex_lock(&rm->lock);
    int n = 0;
    for (int i = 0; i < rm->num_named; i++)
        if (!type || !strcmp(rm->named[i].type, type)) n++;
    pthread_mutex_unlock(&rm->lock);
    return n;
}

void *psg_resource_at(psg_resource_mgr_t *rm, const char *type, int i, const char **name) {
    void *obj = NULL;
    pthread_mutex_lock(&rm->lock);
    for (int k = 0; k < rm->num_named && !obj; k++) {
        if (type && strcmp(rm->named[k].type, type)) continue;
        if (i-- == 0) {
            obj = rm->named[k].obj;
            if (name) *name = rm->named[k].name;
        }
    }
    pthread_mutex_unlock(&rm->lock);
    return obj;
}

int psg_variable_check_value(const psg_variable_t *v, const psg_tensor_t *x) {
    if (x->dtype == v->dtype && psg_shape_equal(&x->shape, &v->shape)) return 0;
    char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
    return psg_error_set("value %s%s does not match variable '%s' %s%s", psg_dtype_name(x->dtype),
                         psg_shape_str(&x->shape, a, sizeof a), v->name, psg_dtype_name(v->dtype),
                         psg_shape_str(&v->shape, b, sizeof b));
}

void psg_variable_lock_update(psg_variable_t *v, psg_variable_t *const *slots, int n) {
    pthread_mutex_lock(&v->lock);
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&slots[i]->lock);
        slots[i]->owner = v;
    }
}

void psg_variable_unlock_update(psg_variable_t *v, psg_variable_t *const *slots, int n) {
    for (int i = n - 1; i >= 0; i--) pthread_mutex_unlock(&slots[i]->lock);
    pthread_mutex_unlock(&v->lock);
}

psg_variable_t *psg_variable_guard(psg_variable_t *v) {
    pthread_mutex_lock(&v->lock);
    psg_variable_t *o = v->owner;
    pthread_mutex_unlock(&v->lock);
    return o ? o : v;
}

/* Counts a write of step `step`, unless that step's writes of v are skipped. */
static bool count_write(psg_variable_t *v, int64_t step) {
    if (step && v->skip_step == step) return false;
    v->recent[v->writes % PSG_VARIABLE_RECENT] = step;
    v->writes++;
    return true;
}

/* The value before the write of step `step` kept as v->before: t (its owner from now on). */
static void keep_before(psg_variable_t *v, int64_t step, psg_tensor_t *t) {
    psg_tensor_destroy(&v->before);
    v->before = t;
    v->before_step = step;
}

bool psg_variable_note_write(psg_variable_t *v, int64_t step) {
    if (!count_write(v, step)) return false;
    /* a writer in place: the value before copied (NULL on out of memory: no way back);
     * keepers: of a variable on the host only (ps/replicate.c) */
    if (v->keepers > 0) {
        keep_before(v, step, psg_tensor_copy(v->value));
        if (!v->before) psg_error_clear();
    }
    return true;
}

bool psg_variable_note_write_aside(psg_variable_t *v, int64_t step, psg_tensor_t **aside) {
    *aside = NULL;
    if (!count_write(v, step)) return false;
    if (v->keepers <= 0) return true;
    *aside = psg_tensor_new(v->value->dtype, &v->value->shape);
    if (!*aside) { /* out of memory: in place, with no way back */
        psg_error_clear();
        keep_before(v, step, NULL);
    }
    return true;
}

void psg_variable_end_write_aside(psg_variable_t *v, int64_t step, psg_tensor_t **aside) {
    if (!*aside) return;
    /* published after its last element was written (the writers joined): the mutex orders
     * those writes before any reader's reference */
    keep_before(v, step, psg_variable_swap_value(v, *aside));
    *aside = NULL;
}

psg_tensor_t *psg_variable_value_ref(psg_variable_t *v) {
    pthread_mutex_lock(&v->value_lock);
    psg_tensor_t *t = psg_tensor_ref(v->value);
    pthread_mutex_unlock(&v->value_lock);
    return t;
}

bool psg_variable_on_host(psg_variable_t *v) {
    pthread_mutex_lock(&v->value_lock);
    bool host = v->value->buf->device == 0; /* host memory: psg_buffer_t.device */
    pthread_mutex_unlock(&v->value_lock);
    return host;
}

psg_tensor_t *psg_variable_swap_value(psg_variable_t *v, psg_tensor_t *t) {
    pthread_mutex_lock(&v->value_lock);
    psg_tensor_t *old = v->value;
    v->value = t;
    pthread_mutex_unlock(&v->value_lock);
    return old;
}

void psg_variable_note_unlogged(psg_variable_t *v) {
    v->unlogged = true;
}

void psg_resource_set_write_log(psg_resource_mgr_t *rm, psg_write_log_fn fn, void *ctx) {
    rm->write_log = fn;
    rm->write_log_ctx = ctx;
}

bool psg_resource_logs(const psg_resource_mgr_t *rm) {
    return rm && rm->write_log;
}

void psg_resource_log_write(psg_resource_mgr_t *rm, const struct psg_node *node,
                            psg_tensor_t *const *inputs, int n) {
    if (rm && rm->write_log) rm->write_log(rm->write_log_ctx, node, inputs, n);
}

bool psg_variable_wrote(const psg_variable_t *v, int64_t step) {
    for (uint64_t i = 0; i < PSG_VARIABLE_RECENT && i < v->writes; i++)
        if (v->recent[i] == step) return true;
    return false;
}
