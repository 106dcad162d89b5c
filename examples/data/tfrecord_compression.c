/* Compressed TFRecord files (psgraph/tfrecord.h): the compression detected from the first
 * bytes or named, the stream inflated with zlib into an unlinked temporary file, so that
 * the index and the reads work on it as on an uncompressed file. Not the record framing
 * (tfrecord.c). */
#include "psgraph/tfrecord.h"

#include "psgraph/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>

#define CHUNK (256 << 10)

const char *psg_tfrecord_compression_name(psg_tfrecord_compression_t c) {
    switch (c) {
    case PSG_TFRECORD_NONE: return "none";
    case PSG_TFRECORD_GZIP: return "GZIP";
    case PSG_TFRECORD_ZLIB: return "ZLIB";
    default: return "auto";
    }
}

int psg_tfrecord_compression_parse(const char *s, psg_tfrecord_compression_t *c) {
    if (!strcasecmp(s, "auto"))
        *c = PSG_TFRECORD_AUTO;
    else if (!strcasecmp(s, "none") || !*s)
        *c = PSG_TFRECORD_NONE;
    else if (!strcasecmp(s, "gzip"))
        *c = PSG_TFRECORD_GZIP;
    else if (!strcasecmp(s, "zlib"))
        *c = PSG_TFRECORD_ZLIB;
    else
        return psg_error_set("TFRecord compression '%s' is not auto, none, gzip or zlib", s);
    return 0;
}

/* What the first n bytes (n <= 12) of a file say it is. */
static psg_tfrecord_compression_t detect(const uint8_t *b, size_t n) {
    if (n >= 12) {
        /* a record header whose length crc matches: an uncompressed file, whatever its first byte
         */
        uint32_t want =
            (uint32_t)b[8] | (uint32_t)b[9] << 8 | (uint32_t)b[10] << 16 | (uint32_t)b[11] << 24;
        if (psg_crc32c_mask(psg_crc32c(0, b, 8)) == want) return PSG_TFRECORD_NONE;
    }
    if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) return PSG_TFRECORD_GZIP;
    if (n >= 2 && (b[0] & 0x0f) == 8 && (b[0] >> 4) <= 7 && ((unsigned)b[0] << 8 | b[1]) % 31 == 0)
        return PSG_TFRECORD_ZLIB;
    return PSG_TFRECORD_NONE; /* the index reports what is wrong with it */
}

static int temp_file(const char *path) {
    const char *dir = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/psg_tfrecord_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(tmpl);
    if (fd < 0)
        return psg_error_set("%s: a temporary file for the inflated records (%s): %s", path, tmpl,
                             strerror(errno));
    unlink(tmpl); /* gone with the descriptor */
    return fd;
}

static int write_all(int fd, const uint8_t *p, size_t n, const char *path) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return psg_error_set("%s: writing its inflated records: %s", path, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Inflates the file in (gzip members one after another, or one zlib stream) into out. */
static int inflate_file(int in, int out, const char *path, psg_tfrecord_compression_t c) {
    const char *cname = psg_tfrecord_compression_name(c);
    uint8_t *ib = malloc(CHUNK), *ob = malloc(CHUNK);
    z_stream z = {0};
    int rc = ib && ob ? 0 : psg_error_set("out of memory");
    if (rc == 0 && inflateInit2(&z, c == PSG_TFRECORD_GZIP ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK)
        rc = psg_error_set("%s: %s: zlib: %s", path, cname, z.msg ? z.msg : "init failed");
    long long consumed = 0;
    bool ended = false;
    while (rc == 0) {
        ssize_t got = read(in, ib, CHUNK);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            rc = psg_error_set("%s: %s", path, strerror(errno));
            break;
        }
        if (got == 0) break;
        z.next_in = ib;
        z.avail_in = (uInt)got;
        while (rc == 0 && z.avail_in > 0) {
            if (ended) {
                /* bytes after the stream: another gzip member (zlib has one stream) */
                if (c != PSG_TFRECORD_GZIP) {
                    rc = psg_error_set("%s: %s: %u bytes after the end of the compressed stream",
                                       path, cname, z.avail_in);
                    break;
                }
                inflateReset(&z);
                ended = false;
            }
            z.next_out = ob;
            z.avail_out = CHUNK;
            uInt before = z.avail_in;
            int zr = inflate(&z, Z_NO_FLUSH);
            consumed += before - z.avail_in;
            if (zr != Z_OK && zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && z.avail_out == 0)) {
                rc = psg_error_set(
                    "%s: %s: corrupt compressed data near compressed byte %lld (zlib: %s)", path,
                    cname, consumed, z.msg ? z.msg : zError(zr));
                break;
            }
            rc = write_all(out, ob, CHUNK - z.avail_out, path);
            if (zr == Z_STREAM_END) ended = true;
        }
    }
    if (rc == 0 && !ended)
        rc = psg_error_set("%s: %s: the compressed stream ends early, after %lld bytes (truncated)",
                           path, cname, consumed);
    inflateEnd(&z);
    free(ib);
    free(ob);
    return rc;
}

int psg_tfrecord_open(const char *path, psg_tfrecord_compression_t want,
                      psg_tfrecord_compression_t *found, char *name, size_t size) {
    snprintf(name, size, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return psg_error_set("%s: %s", path, strerror(errno));
    uint8_t head[12];
    ssize_t n = pread(fd, head, sizeof head, 0);
    psg_tfrecord_compression_t c = want;
    if (c == PSG_TFRECORD_AUTO) c = detect(head, n > 0 ? (size_t)n : 0);
    *found = c;
    if (c == PSG_TFRECORD_NONE) return fd;
    const char *cname = psg_tfrecord_compression_name(c);
    bool magic_ok = c == PSG_TFRECORD_GZIP ? n >= 2 && head[0] == 0x1f && head[1] == 0x8b
                                           : n >= 2 && detect(head, 2) == PSG_TFRECORD_ZLIB;
    if (!magic_ok) {
        close(fd);
        return psg_error_set(
            "%s: not a %s-compressed TFRecord file (its first bytes are no %s header)", path, cname,
            c == PSG_TFRECORD_GZIP ? "gzip" : "zlib");
    }
    int out = temp_file(path);
    if (out < 0 || inflate_file(fd, out, path, c) < 0) {
        close(fd);
        if (out >= 0) close(out);
        return -1;
    }
    close(fd);
    snprintf(name, size, "%s (%s; byte offsets of the inflated records)", path, cname);
    return out;
}
