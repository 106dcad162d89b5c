/* Shared by the libFuzzer harnesses of tests/fuzz/: the input as a file (for readers that
 * take a path) and as a NUL-terminated string. Not a harness itself. */
#ifndef PSG_FUZZ_UTIL_H
#define PSG_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes data to a per-process file named with `suffix` under /dev/shm (or /tmp) and
 * returns its path (static storage). */
static inline const char *psg_fuzz_file(const uint8_t *data, size_t size, const char *suffix) {
    static char path[256];
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, sizeof path, "%s/psg_fuzz_%d%s", dir, (int)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return path;
}

/* A malloc'd NUL-terminated copy. */
static inline char *psg_fuzz_str(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#endif
