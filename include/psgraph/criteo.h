/* Click logs in the Criteo format (tab-separated: a 0/1 label, 13 integer features, 26
 * hexadecimal categorical features; any feature may be empty; plain or gzip), read whole
 * into memory with the categoricals hashed into buckets, and a synthetic set in that
 * format drawn from a planted wide-and-deep model (so the best reachable AUC is known).
 * Not the model (wide_deep.h) and not a streaming pipeline. */
#ifndef PSGRAPH_CRITEO_H
#define PSGRAPH_CRITEO_H

#include <stdint.h>
#include <stdio.h>

#define PSG_CTR_DENSE 13
#define PSG_CTR_FIELDS 26

typedef struct {
    int64_t rows;
    int64_t buckets; /* per field */
    float *labels;   /* (rows): 0 or 1 */
    float *dense;    /* (rows, 13): log(1 + max(x, 0)), an empty field 0 */
    /* (rows, 26): field f's value as int(hex, 16) % buckets (empty: 0) plus f * buckets,
     * so the 26 fields index one table of 26 * buckets rows */
    int64_t *ids;
} psg_ctr_data_t;

/* Reads `path`: a file, or a folder whose regular files (sorted by name) are read in
 * turn; each plain or gzip (zlib tells). Fails, naming the file and line, on a line
 * without 40 fields, a label not 0 or 1, a number or hexadecimal value that does not
 * parse; NULL with the error set. buckets in [1, 2^40]. The caller owns the result. */
psg_ctr_data_t *psg_ctr_load(const char *path, int64_t buckets);
void psg_ctr_destroy(psg_ctr_data_t **d);

/* The hash of one categorical value: the hexadecimal digits of s[0..len) read as an
 * integer, modulo buckets (any length); an empty value is 0. -1 for a non-hex digit. */
int64_t psg_ctr_hash(const char *s, size_t len, int64_t buckets);

/* The area under the ROC curve of scores against 0/1 labels (ties get their average
 * rank, as the peer computes it); NaN when one class is missing. */
double psg_auc(const float *scores, const float *labels, int64_t n);

/* Writes `rows` rows drawn from a planted model (seed fixed by `seed`) to `path` (gzip when
 * it ends in .gz): per field a Zipf-distributed id over its own vocabulary, written as a
 * 32-bit hexadecimal value; integer features log-normal; the click probability
 * sigmoid(bias + wide weights of the ids + a linear term of log(1 + x) + pairwise
 * interactions of small planted embeddings of the ids). Reports to `out` the click rate
 * and the planted model's AUC and log-loss on the last 10% of the rows (the held-out part
 * of `psgraph train`); *planted_auc gets that AUC (may be NULL). Returns 0, or -1 with
 * the error naming the file. */
int psg_ctr_synthesize(const char *path, int64_t rows, uint64_t seed, FILE *out,
                       double *planted_auc);

#endif
