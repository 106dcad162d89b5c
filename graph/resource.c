/* The resource manager: variables by name, shared by every graph run in one
 * process. Accumulators and queues of sync replicas join it later. */
#include "psgraph/error.h"
#include "psgraph/resource.h"

#include <stdlib.h>
#include <string.h>

struct psg_resource_mgr {
    pthread_mutex_t lock;
    psg_variable_t **vars;
    int num_vars, cap_vars;
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
    for (int i = 0; i < rm->num_vars; i++) {
        psg_variable_t *v = rm->vars[i];
        free(v->name);
        psg_tensor_destroy(&v->value);
        pthread_mutex_destroy(&v->lock);
        free(v);
    }
    free(rm->vars);
    pthread_mutex_destroy(&rm->lock);
    free(rm);
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

psg_variable_t *psg_resource_variable_at(psg_resource_mgr_t *rm, int i) {
    pthread_mutex_lock(&rm->lock);
    psg_variable_t *v = (i >= 0 && i < rm->num_vars) ? rm->vars[i] : NULL;
    pthread_mutex_unlock(&rm->lock);
    return v;
}
