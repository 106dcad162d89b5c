/* The common predict body, {"instances": [row, ...]} for one f32 input with each row nested
 * arrays of numbers in the input's shape, read straight into the tensor without a JSON tree;
 * a body of a megabyte or more by two threads (the first reads up to an instance's element
 * near the middle, the second from there on; each checks the grammar of its part, and the
 * body is read again in one when they do not meet). Anything else (another key, a wrong
 * count, a string, a deeper or shallower value...) gives up, and the general reader
 * (serving/rest.c) reads the body and words its error. Not HTTP, not the answers. */
#ifndef PSGRAPH_SERVING_REST_PLAIN_H
#define PSGRAPH_SERVING_REST_PLAIN_H

#include "serving/rest.h"

/* text: the body, NUL-terminated, of len bytes. 1: r holds the body's tensor (r->inputs[0],
 * r->batch); 0: not the plain body (nothing kept); -1: out of memory. */
int psg_rest_parse_plain(const psg_rest_signature_t *sig, const char *text, size_t len,
                         psg_rest_request_t *r);

/* The bodies read by two threads so far in this process (for tests). */
int64_t psg_rest_plain_split_reads(void);

#endif
