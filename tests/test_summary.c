/* TensorBoard event files written by psg_summary_writer_t, parsed back here
 * with a reader of our own (TFRecord framing, both masked CRCs with a bitwise
 * CRC-32C, the protobuf fields), then by TensorBoard's own reader when it is
 * installed. Not a test of TensorBoard's UI, nor of CRC-32C (test_tfrecord). */
#include "psgraph/summary.h"
#include "tests/testutil.h"

#include <ftw.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* The bitwise definition, independent of the writer's sliced tables. */
static uint32_t crc32c_ref(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

static uint32_t mask(uint32_t c) {
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- a protobuf reader of our own ---- */

typedef struct {
    const uint8_t *p, *end;
    bool bad;
} rd_t;

static uint64_t rd_varint(rd_t *r) {
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        if (r->p >= r->end) {
            r->bad = true;
            return 0;
        }
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return v;
    }
    r->bad = true;
    return 0;
}

static uint64_t rd_fixed(rd_t *r, int n) {
    uint64_t v = 0;
    if (r->end - r->p < n) {
        r->bad = true;
        return 0;
    }
    for (int i = 0; i < n; i++) v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    return v;
}

typedef struct {
    double wall_time;
    int64_t step;
    char file_version[64];
    int num_values;
    char tags[8][64];
    float values[8];
} event_t;

static bool parse_value(const uint8_t *p, size_t n, event_t *e) {
    rd_t r = {p, p + n, false};
    int i = e->num_values;
    if (i >= 8) return false;
    while (r.p < r.end && !r.bad) {
        uint64_t key = rd_varint(&r);
        if (key == (1 << 3 | 2)) {
            uint64_t len = rd_varint(&r);
            if (len >= 64 || (uint64_t)(r.end - r.p) < len) return false;
            memcpy(e->tags[i], r.p, len);
            e->tags[i][len] = 0;
            r.p += len;
        } else if (key == (2 << 3 | 5)) {
            uint32_t bits = (uint32_t)rd_fixed(&r, 4);
            memcpy(&e->values[i], &bits, 4);
        } else {
            return false;
        }
    }
    e->num_values++;
    return !r.bad;
}

static bool parse_event(const uint8_t *p, size_t n, event_t *e) {
    memset(e, 0, sizeof *e);
    rd_t r = {p, p + n, false};
    while (r.p < r.end && !r.bad) {
        uint64_t key = rd_varint(&r);
        if (key == (1 << 3 | 1)) {
            uint64_t bits = rd_fixed(&r, 8);
            memcpy(&e->wall_time, &bits, 8);
        } else if (key == (2 << 3 | 0)) {
            e->step = (int64_t)rd_varint(&r);
        } else if (key == (3 << 3 | 2) || key == (5 << 3 | 2)) {
            uint64_t len = rd_varint(&r);
            if ((uint64_t)(r.end - r.p) < len) return false;
            if (key == (3 << 3 | 2)) {
                if (len >= sizeof e->file_version) return false;
                memcpy(e->file_version, r.p, len);
            } else {
                /* Summary{repeated Value value = 1} */
                rd_t s = {r.p, r.p + len, false};
                while (s.p < s.end && !s.bad) {
                    if (rd_varint(&s) != (1 << 3 | 2)) return false;
                    uint64_t vl = rd_varint(&s);
                    if ((uint64_t)(s.end - s.p) < vl || !parse_value(s.p, vl, e)) return false;
                    s.p += vl;
                }
                if (s.bad) return false;
            }
            r.p += len;
        } else {
            return false;
        }
    }
    return !r.bad;
}

/* Reads every TFRecord of path, checking framing and both CRCs. */
static int read_events(const char *path, event_t *events, int max) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int n = 0;
    uint8_t head[12];
    while (fread(head, 1, 12, f) == 12) {
        uint64_t len = 0;
        uint32_t lcrc = 0, dcrc = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)head[i] << (8 * i);
        for (int i = 0; i < 4; i++) lcrc |= (uint32_t)head[8 + i] << (8 * i);
        if (lcrc != mask(crc32c_ref(head, 8)) || len > 1 << 20 || n >= max) break;
        uint8_t *data = malloc(len + 4);
        if (!data || fread(data, 1, len + 4, f) != len + 4) {
            free(data);
            break;
        }
        for (int i = 0; i < 4; i++) dcrc |= (uint32_t)data[len + i] << (8 * i);
        bool ok = dcrc == mask(crc32c_ref(data, len)) && parse_event(data, len, &events[n]);
        free(data);
        if (!ok) break;
        n++;
    }
    bool at_end = fgetc(f) == EOF;
    fclose(f);
    return at_end ? n : -1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void test_event_file(void) {
    char dir[] = "/tmp/psg_summary_XXXXXX";
    CHECK(mkdtemp(dir));
    psg_summary_writer_t *w = psg_summary_writer_new(dir);
    CHECK(w);
    if (!w) return;
    char path[512];
    snprintf(path, sizeof path, "%s", psg_summary_writer_path(w));
    CHECK(strstr(path, "/events.out.tfevents.") != NULL);
    const char *tags[] = {"loss", "learning_rate", "examples_per_sec"};
    for (int s = 1; s <= 3; s++) {
        float v[] = {2.5f / (float)s, 0.05f, 1000.0f * (float)s};
        CHECK(psg_summary_scalars(w, s * 100, 3, tags, v) == 0);
    }
    CHECK(psg_summary_scalar(w, 300, "accuracy", 0.875f) == 0);
    CHECK(psg_summary_scalar(w, 1LL << 40, "big_step", -1.0f) == 0);
    psg_summary_writer_destroy(&w);
    CHECK(!w);
    event_t ev[16];
    int n = read_events(path, ev, 16);
    CHECK(n == 6);
    if (n == 6) {
        CHECK(!strcmp(ev[0].file_version, "brain.Event:2") && ev[0].num_values == 0);
        CHECK(ev[0].wall_time > 1.6e9 && ev[0].wall_time < 4e9);
        CHECK(ev[1].step == 100 && ev[1].num_values == 3 && !strcmp(ev[1].tags[0], "loss"));
        CHECK(ev[1].values[0] == 2.5f && !strcmp(ev[1].tags[1], "learning_rate") &&
              ev[1].values[1] == 0.05f);
        CHECK(ev[3].step == 300 && ev[3].values[2] == 3000.0f &&
              !strcmp(ev[3].tags[2], "examples_per_sec"));
        CHECK(ev[4].step == 300 && ev[4].num_values == 1 && !strcmp(ev[4].tags[0], "accuracy") &&
              ev[4].values[0] == 0.875f);
        CHECK(ev[5].step == 1LL << 40 && ev[5].values[0] == -1.0f);
        CHECK(ev[2].wall_time >= ev[1].wall_time);
    }
    /* TensorBoard's own reader, where it is installed */
    if (system("python3 -c 'import tensorboard' 2>/dev/null") == 0) {
        char cmd[1500];
        snprintf(
            cmd, sizeof cmd,
            "python3 -c 'from tensorboard.backend.event_processing.event_accumulator import EventAccumulator as E\n"
            "a = E(\"%s\"); a.Reload(); s = a.Scalars(\"loss\")\n"
            "assert [x.step for x in s] == [100, 200, 300], s\n"
            "assert abs(s[1].value - 1.25) < 1e-6 and a.Scalars(\"accuracy\")[0].value == 0.875\n"
            "print(\"tensorboard reads\", sorted(a.Tags()[\"scalars\"]))'",
            dir);
        fflush(stdout);
        CHECK(system(cmd) == 0);
    } else {
        printf("tensorboard is not installed: skipped reading the file with it\n");
    }
    CHECK(!psg_summary_writer_new("/dev/null/dir/x"));
    CHECK_ERROR_HAS("/dev/null/dir"); /* a folder that cannot be made */
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void) {
    RUN_TEST(test_event_file);
    return psg_test_summary();
}
