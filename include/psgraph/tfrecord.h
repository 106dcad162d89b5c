/* TFRecord files and tf.Example records, byte-compatible with TensorFlow:
 * framing (u64 length, masked CRC-32C of the length, data, masked CRC-32C of
 * the data), an index of a file's records that survives corrupt headers, and
 * a hand-written protobuf reader (and writer) of tf.Example's features.
 * Not a general protobuf library and not an input pipeline (imagenet.h). */
#ifndef PSGRAPH_TFRECORD_H
#define PSGRAPH_TFRECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli) of n bytes, continuing from crc (0 to start). */
uint32_t psg_crc32c(uint32_t crc, const void *data, size_t n);
/* TensorFlow's masking: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t psg_crc32c_mask(uint32_t crc);

/* Where a reader reports what it skipped ("file: byte N: why"); NULL: only counted. */
typedef void (*psg_report_fn)(void *ctx, const char *message);

/* ---- writing ---- */

typedef struct psg_tfrecord_writer psg_tfrecord_writer_t;

/* Creates (truncates) `path`. NULL with the error set. */
psg_tfrecord_writer_t *psg_tfrecord_writer_new(const char *path);
/* Appends one record. Returns 0, or -1 with the error naming the file. */
int psg_tfrecord_write(psg_tfrecord_writer_t *w, const void *data, size_t n);
/* Flushes the records written so far to the file (for readers that follow a
 * growing file, as TensorBoard does). Returns 0, or -1 with the error naming the file. */
int psg_tfrecord_writer_flush(psg_tfrecord_writer_t *w);
/* Flushes and closes; sets *w NULL. Returns 0, or -1 if a write failed. NULL-safe. */
int psg_tfrecord_writer_close(psg_tfrecord_writer_t **w);

/* ---- reading ---- */

/* One record of a file: its data starts at offset + 12. */
typedef struct {
    int64_t offset; /* of the record's header */
    int64_t length; /* of its data */
} psg_tfrecord_entry_t;

/* Scans the headers of `path` (GZIP and ZLIB files inflated first, detected from their
 * first bytes: psg_tfrecord_open) (reading the lengths, skipping the data) and
 * returns its records in *entries (malloc'ed, the caller frees) and their
 * count in *n. A header whose length CRC does not match, or a record cut
 * short by the end of the file, is reported as "path: byte OFFSET: why" and
 * skipped: the scan looks for the next byte offset holding a valid header.
 * Data CRCs are checked later, by psg_tfrecord_read. Returns the number of
 * problems reported (>= 0), or -1 with the error set when the file cannot be
 * read at all. */
int psg_tfrecord_index(const char *path, psg_tfrecord_entry_t **entries, int64_t *n,
                       psg_report_fn report, void *report_ctx);

/* ---- compressed files (examples/data/tfrecord_compression.c) ----
 * TensorFlow's TFRecordOptions(compression_type='GZIP' | 'ZLIB'): the whole record stream
 * deflated, in gzip or zlib framing. psgraph inflates a compressed file once into an
 * unlinked temporary file (in $TMPDIR, else /tmp), whose records are then indexed and read
 * as an uncompressed file's: the disk holds the inflated bytes while the file is open. */
typedef enum {
    PSG_TFRECORD_AUTO, /* from the first bytes: a valid record header, else gzip's or zlib's */
    PSG_TFRECORD_NONE,
    PSG_TFRECORD_GZIP,
    PSG_TFRECORD_ZLIB,
} psg_tfrecord_compression_t;

/* "auto", "none", "GZIP", "ZLIB". */
const char *psg_tfrecord_compression_name(psg_tfrecord_compression_t c);
/* Parses "auto", "none" (or ""), "gzip", "zlib" (any case). -1 with the error quoting s. */
int psg_tfrecord_compression_parse(const char *s, psg_tfrecord_compression_t *c);

/* How a file is named in every error about its records: "PATH", or for a compressed one
 * "PATH (GZIP; byte offsets of the inflated records)". */
#define PSG_TFRECORD_NAME_MAX 4200

/* Opens `path` for its records with compression `want` (AUTO: detected): returns a read
 * descriptor of the uncompressed record stream (the file itself, or its inflated copy),
 * *found the compression, name (size bytes) the name to give psg_tfrecord_index_fd and
 * psg_tfrecord_read. -1 with the error naming the file and the compression (a corrupt or
 * truncated compressed stream, a file that is not of the compression named). */
int psg_tfrecord_open(const char *path, psg_tfrecord_compression_t want,
                      psg_tfrecord_compression_t *found, char *name, size_t size);

/* psg_tfrecord_index over an open record stream (psg_tfrecord_open's), reporting as
 * `name`. The descriptor stays open. */
int psg_tfrecord_index_fd(int fd, const char *name, psg_tfrecord_entry_t **entries, int64_t *n,
                          psg_report_fn report, void *report_ctx);

/* Reads the data of record e from the open descriptor fd of file `path`
 * into buf (at least e->length bytes) and checks its CRC. Thread-safe
 * (pread). Returns 0, or -1 with the error "path: byte OFFSET: why". */
int psg_tfrecord_read(int fd, const char *path, const psg_tfrecord_entry_t *e, uint8_t *buf);

/* ---- tf.Example ---- */

/* The two features of an ImageNet record as build_imagenet_data.py writes
 * them. Pointers point into the parsed buffer. */
#define PSG_EXAMPLE_MAX_BOXES 16

typedef struct {
    const uint8_t *encoded; /* image/encoded: the JPEG bytes */
    size_t encoded_len;
    int64_t label; /* image/class/label */
    bool has_encoded, has_label;
    /* image/object/bbox/{ymin,xmin,ymax,xmax}: the first PSG_EXAMPLE_MAX_BOXES boxes, in
     * [0, 1] of the image; n_boxes the fewest of the four lists */
    float box[4][PSG_EXAMPLE_MAX_BOXES];
    int n_box[4], n_boxes;
} psg_example_image_t;

/* Parses a serialized tf.Example and picks the bytes feature `bytes_key`,
 * the first value of the int64 feature `int64_key` (packed or not) and the
 * float features image/object/bbox/{ymin,xmin,ymax,xmax} (packed or not, as
 * build_imagenet_data.py writes them); other features are skipped. Returns 0 (absent features leave
 * has_* false), or -1 with the error "malformed tf.Example: why" on bad wire data. */
int psg_example_parse(const uint8_t *buf, size_t n, const char *bytes_key, const char *int64_key,
                      psg_example_image_t *out);

/* Serializes a tf.Example with a bytes feature and an int64 feature (packed,
 * as TensorFlow writes): for tests and tools. *out is malloc'ed. Returns 0 or
 * -1 with the error set. */
int psg_example_encode(const char *bytes_key, const uint8_t *bytes, size_t bytes_len,
                       const char *int64_key, int64_t value, uint8_t **out, size_t *out_len);
/* The same with ex's boxes as the four float features image/object/bbox/{ymin,...} (packed), as
 * build_imagenet_data.py writes them (ex->encoded under bytes_key, ex->label under
 * int64_key). */
int psg_example_encode_boxes(const char *bytes_key, const char *int64_key,
                             const psg_example_image_t *ex, uint8_t **out, size_t *out_len);

#endif
