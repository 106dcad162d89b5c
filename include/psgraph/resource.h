/* The resource manager: state that outlives a step and is shared by name
 * across the graphs that run in one process: variables, and a generic
 * registry of named resources of other types (gradient accumulators, token
 * queues). Not thread-safe for one variable's contents: update ops on a
 * variable are ordered by the graph; registry objects lock themselves. */
#ifndef PSGRAPH_RESOURCE_H
#define PSGRAPH_RESOURCE_H

#include "psgraph/tensor.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct psg_resource_mgr psg_resource_mgr_t;

/* The step ids of its last writes a variable keeps (psg_variable_wrote). */
#define PSG_VARIABLE_RECENT 4

/* A variable: a named tensor updated in place. */
typedef struct psg_variable {
    char *name;
    psg_dtype_t dtype;
    psg_shape_t shape;
    /* allocated at creation, contents valid once initialized; replaced (a write aside, a
     * move to a GPU, a restore) under the lock that guards v and value_lock both, so that a
     * reader holding either sees a whole value; read it by psg_variable_value_ref without
     * that lock */
    psg_tensor_t *value;
    bool initialized;
    pthread_mutex_t lock; /* held by update ops that must not interleave */
    /* guards the pointer `value` alone, held only to replace it or take a reference (never
     * while computing, sending or waiting): a reader that must not wait for an update */
    pthread_mutex_t value_lock;
    /* an optimizer slot's variable (the one whose update writes this slot), recorded by
     * psg_variable_lock_update under this slot's lock; NULL: none seen yet */
    struct psg_variable *owner;
    /* a copy of another ps task's variable, kept by chain replication (docs/replication.md):
     * not this task's shard (a checkpoint of the shard leaves it out) until it is promoted */
    bool backup;
    /* its writes (docs/replication.md), under the lock that guards it: how many, the step
     * ids of the last PSG_VARIABLE_RECENT, and a step whose writes of it are not applied (a
     * retry of an update it holds already; 0: none) */
    uint64_t writes;
    int64_t recent[PSG_VARIABLE_RECENT];
    int64_t skip_step;
    /* chain replication's (ps/replicate.c), under the lock that guards it: written since its
     * last forward by other than a logged update (an assign, a sparse update, a value put
     * back, a restore), so that its next forward sends its value; and the count of its
     * writes (above) that its backup holds */
    bool unlogged;
    uint64_t repl_writes;
    /* chain replication's way back (ps/replicate.c), under the lock that guards it: while
     * `keepers` steps want its value before their write, each write keeps the value before
     * it as `before` (an update kernel writes a new buffer and keeps the old one: no copy;
     * another writer copies), made by step `before_step`; taken by that step */
    int keepers;
    psg_tensor_t *before;
    int64_t before_step;
} psg_variable_t;

/* Under the lock that guards v, before step `step` writes it: false when that step's writes
 * of v are skipped (v->skip_step); else counts the write and true. */
bool psg_variable_note_write(psg_variable_t *v, int64_t step);
/* psg_variable_note_write for a writer that can write aside: when step `step` may write v
 * and v keeps its value before each write (keepers), *aside is a new tensor for the writer
 * to write whole (its contents undefined) while it reads v->value, the value before; else
 * NULL: it writes v->value in place (also on out of memory: v then has no way back). Under
 * the lock that guards v; a new tensor is published by psg_variable_end_write_aside. */
bool psg_variable_note_write_aside(psg_variable_t *v, int64_t step, psg_tensor_t **aside);
/* After the writer of psg_variable_note_write_aside wrote every element of *aside (if any):
 * it becomes v's value, and the value before is kept as v->before (step's). A reader never
 * gets a tensor being written. Under the lock that guards v; takes *aside. */
void psg_variable_end_write_aside(psg_variable_t *v, int64_t step, psg_tensor_t **aside);
/* A new reference to v's value, whole, taken under v->value_lock only: it does not wait for
 * an update in progress (ReadVariable; the value before that update). */
psg_tensor_t *psg_variable_value_ref(psg_variable_t *v);
/* Whether v's value is on the host, read under v->value_lock (without the lock that guards v). */
bool psg_variable_on_host(psg_variable_t *v);
/* Replaces v's value by t (taken; a move to another device or a restore): the old one,
 * which the caller destroys. Under the lock that guards v. */
psg_tensor_t *psg_variable_swap_value(psg_variable_t *v, psg_tensor_t *t);
/* Under the lock that guards v: whether step `step` is among the last PSG_VARIABLE_RECENT
 * writes of v. */
bool psg_variable_wrote(const psg_variable_t *v, int64_t step);
/* Under the lock that guards v: v was written by other than an update the write log got
 * (psg_resource_log_write): an assign, a sparse update, a value put back or restored. */
void psg_variable_note_unlogged(psg_variable_t *v);

/* The write log (chain replication, ps/replicate.c): told of each dense update an update
 * kernel applies, with its node and inputs (a variable's input is its resource handle),
 * under the locks of the variables it writes, after psg_variable_note_write let it write,
 * so that the order it sees them in is the order they were applied in per variable. */
struct psg_node;
typedef void (*psg_write_log_fn)(void *ctx, const struct psg_node *node,
                                 psg_tensor_t *const *inputs, int n);
/* Sets rm's write log (NULL: none), before anything runs on rm. */
void psg_resource_set_write_log(psg_resource_mgr_t *rm, psg_write_log_fn fn, void *ctx);
/* Whether rm has a write log (a kernel prepares what it tells it only then). */
bool psg_resource_logs(const psg_resource_mgr_t *rm);
/* Tells rm's write log (if any) of an update (see psg_write_log_fn). */
void psg_resource_log_write(psg_resource_mgr_t *rm, const struct psg_node *node,
                            psg_tensor_t *const *inputs, int n);

/* The locks of one optimizer update: v's, then each of its n slots' (always in that
 * order), recording v as each slot's owner. A reader that takes the owner's lock then sees
 * the variable and its slots at one update (a checkpoint, ps/checkpoint.c). */
void psg_variable_lock_update(psg_variable_t *v, psg_variable_t *const *slots, int n);
void psg_variable_unlock_update(psg_variable_t *v, psg_variable_t *const *slots, int n);
/* The variable whose lock guards v's contents: its owner when it is a slot, else v. */
psg_variable_t *psg_variable_guard(psg_variable_t *v);

psg_resource_mgr_t *psg_resource_mgr_new(void);
void psg_resource_mgr_destroy(psg_resource_mgr_t **rm);

/* The variable `name`, created (uninitialized) with dtype and shape when
 * absent. Fails if it exists with another dtype or shape. The manager owns it. */
psg_variable_t *psg_resource_variable(psg_resource_mgr_t *rm, const char *name, psg_dtype_t dt,
                                      const psg_shape_t *shape);
/* Checks that x has v's dtype and shape: the value an Assign or AssignAdd
 * writes. Returns 0, or -1 with the error naming the variable. */
int psg_variable_check_value(const psg_variable_t *v, const psg_tensor_t *x);

/* The variable `name`, or NULL (no error set). */
psg_variable_t *psg_resource_find_variable(psg_resource_mgr_t *rm, const char *name);
/* Whether buffer b is a variable's value now (a tensor sharing it may change in place:
 * chain replication's log copies it, ps/repl_log.c). */
bool psg_resource_holds_buffer(psg_resource_mgr_t *rm, const psg_buffer_t *b);
/* Number of variables and the i-th one, in creation order (for inspect and checkpoints). */
int psg_resource_num_variables(psg_resource_mgr_t *rm);
psg_variable_t *psg_resource_variable_at(psg_resource_mgr_t *rm, int i);

/* ---- other named resources ----
 * Any object by name, with a type tag (a static string such as
 * "accumulator") and the function that frees it. The manager owns each
 * registered object and destroys them, in reverse order of registration,
 * when it is destroyed (after nothing runs on it any more). */

typedef void (*psg_resource_destroy_fn)(void *obj);
/* Makes the object for psg_resource_lookup_or_create: NULL with the error set. */
typedef void *(*psg_resource_create_fn)(void *ctx);

/* The object registered as `name`: created with create(ctx) and registered
 * when absent (create runs without the manager's lock, so it may register
 * other resources; if another thread registers the name first, the new
 * object is destroyed and the other one returned). Fails, with the error
 * naming the resource, when `name` exists with another type (or is a
 * variable) or create fails. */
void *psg_resource_lookup_or_create(psg_resource_mgr_t *rm, const char *name, const char *type,
                                    psg_resource_create_fn create, void *ctx,
                                    psg_resource_destroy_fn destroy);
/* The object registered as `name` with type `type`, or NULL (no error set). */
void *psg_resource_find(psg_resource_mgr_t *rm, const char *name, const char *type);
/* Number of registered objects of `type` (NULL: all types) and the i-th of
 * them in registration order, with its name in *name (may be NULL). */
int psg_resource_count(psg_resource_mgr_t *rm, const char *type);
void *psg_resource_at(psg_resource_mgr_t *rm, const char *type, int i, const char **name);

#endif
