/* TensorBoard event files: Event protocol buffers written by hand, holding
 * scalar and histogram summaries, in TFRecord framing (psgraph/tfrecord.h). Not a
 * protobuf library, not images, and not a reader (the tests parse the files back on
 * their own, or with TensorBoard's reader). */
#ifndef PSGRAPH_SUMMARY_H
#define PSGRAPH_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

typedef struct psg_summary_writer psg_summary_writer_t;

/* Creates logdir (one level) if absent and a new event file in it named
 * "events.out.tfevents.<unix seconds>.<hostname>.<pid>", whose first record is
 * the Event with file_version "brain.Event:2". NULL with the error naming the
 * file on failure. */
psg_summary_writer_t *psg_summary_writer_new(const char *logdir);
/* Flushes, closes, frees; NULL-safe. */
void psg_summary_writer_destroy(psg_summary_writer_t **w);
/* The event file's path (owned by w). */
const char *psg_summary_writer_path(const psg_summary_writer_t *w);

/* Appends one Event at `step` whose Summary holds n scalar values
 * (tags[i], values[i]), stamped with the current wall time, and flushes it to
 * the file so that TensorBoard sees it. -1 with the error naming the file. */
int psg_summary_scalars(psg_summary_writer_t *w, int64_t step, int n, const char *const *tags,
                        const float *values);
/* As psg_summary_scalars with one value. */
int psg_summary_scalar(psg_summary_writer_t *w, int64_t step, const char *tag, float value);

/* Appends one Event at `step` holding the histogram of values[0..n) under `tag`, with
 * TensorFlow's default buckets (1e-12 * 1.1^k, both signs; runs of empty buckets folded),
 * min, max, count, sum and sum of squares; NaNs are left out. -1 with the error naming
 * the file. */
int psg_summary_histogram(psg_summary_writer_t *w, int64_t step, const char *tag,
                          const float *values, int64_t n);

#endif
