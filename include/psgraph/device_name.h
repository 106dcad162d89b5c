/* TensorFlow's device names: "/job:ps/task:0/cpu:0",
 * "/job:worker/replica:0/task:1/device:GPU:0" and partial specs ("/job:ps",
 * "/gpu:1"): parse, merge as nested tf.device does, print canonically.
 * Not placement (placement.h) and not the cluster's addresses. */
#ifndef PSGRAPH_DEVICE_NAME_H
#define PSGRAPH_DEVICE_NAME_H

#include <stdbool.h>
#include <stddef.h>

/* Longest job name accepted, and room for any printed device name. */
#define PSG_DEVICE_JOB_MAX 64
#define PSG_DEVICE_TYPE_MAX 16
#define PSG_DEVICE_NAME_MAX 128

/* A parsed, possibly partial, device name: each field is set or open. The
 * type is upper case ("CPU", "GPU"); "cpu" and "gpu" are read as those. */
typedef struct {
    bool has_job, has_replica, has_task, has_type, has_id;
    char job[PSG_DEVICE_JOB_MAX];
    int replica, task;
    char type[PSG_DEVICE_TYPE_MAX];
    int id;
} psg_device_name_t;

/* Parses s into *out. Accepted: "" (all open), then any of "/job:NAME",
 * "/replica:N", "/task:N" in that order, then "/device:TYPE:N" or the legacy
 * "/cpu:N" / "/gpu:N" (N may be "*": open). Returns 0, or -1 with the error
 * "invalid device name 'S': why" (why names the bad part). */
int psg_device_name_parse(const char *s, psg_device_name_t *out);

/* Nested tf.device: the inner spec's fields win, the outer fills what the
 * inner left open. out may alias either. Never fails. */
void psg_device_name_merge(const psg_device_name_t *outer, const psg_device_name_t *inner,
                           psg_device_name_t *out);

/* True when no field set in both a and b differs (they can name one device). */
bool psg_device_name_compatible(const psg_device_name_t *a, const psg_device_name_t *b);

/* True when every field is set. */
bool psg_device_name_is_complete(const psg_device_name_t *d);

/* True when a and b are set and equal in job, replica and task (one process). */
bool psg_device_name_same_task(const psg_device_name_t *a, const psg_device_name_t *b);

/* The canonical form: "/job:ps/replica:0/task:1/device:CPU:0", open fields
 * left out ("" when all are open). Writes into buf (PSG_DEVICE_NAME_MAX is
 * enough for any parsed name) and returns buf. */
char *psg_device_name_str(const psg_device_name_t *d, char *buf, size_t size);

/* The task part only: "/job:ps/replica:0/task:1" (open fields left out). */
char *psg_device_name_task_str(const psg_device_name_t *d, char *buf, size_t size);

/* Parses outer and inner, merges them and writes the canonical result into
 * buf. Returns 0, or -1 with the error naming the bad string. */
int psg_device_name_merge_str(const char *outer, const char *inner, char *buf, size_t size);

/* Canonical form of s into buf. Returns 0, or -1 with the error naming s. */
int psg_device_name_canonical(const char *s, char *buf, size_t size);

#endif
