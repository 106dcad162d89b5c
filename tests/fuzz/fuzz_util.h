/* Shared by the libFuzzer harnesses of tests/fuzz/: the input as a file (for readers that
 * take a path) and as a NUL-terminated string. Not a harness itself. */
#ifndef PSG_FUZZ_UTIL_H
#define PSG_FUZZ_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* memfd_create (the build defines _GNU_SOURCE) */
#include <sys/stat.h>
#include <unistd.h>

/* A folder for this process's files: /dev/shm (memory) when writable, else /tmp. */
static inline const char *psg_fuzz_dir(void) {
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

/* The process whose id a name of ours carries (psg_fuzz_PID.suffix, psg_fuzz_ckpt_PID), or 0. */
static inline int psg_fuzz_name_pid(const char *name) {
    int pid = 0, used = 0;
    if (sscanf(name, "psg_fuzz_ckpt_%d%n", &pid, &used) == 1 && pid > 0 && name[used] == 0)
        return pid;
    if (sscanf(name, "psg_fuzz_%d%n", &pid, &used) == 1 && pid > 0 &&
        (name[used] == '.' || name[used] == 0))
        return pid;
    return 0;
}

/* Removes what harnesses that are gone left in dir: a fuzzer ended by a signal, by libFuzzer's
 * _Exit (SIGINT, a crash, a timeout) or killed never runs its atexit. Only a link, or a folder
 * of files (fuzz_safetensors'), named for a process that no longer exists. */
static inline void psg_fuzz_remove_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *de; (de = readdir(d));) {
        int pid = psg_fuzz_name_pid(de->d_name);
        if (pid == 0 || kill(pid, 0) == 0 || errno != ESRCH)
            continue; /* alive, or not ours to ask */
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (lstat(path, &st) < 0) continue;
        if (S_ISLNK(st.st_mode)) {
            unlink(path);
        } else if (S_ISDIR(st.st_mode)) {
            DIR *sub = opendir(path);
            for (struct dirent *f; sub && (f = readdir(sub));) {
                char file[1024];
                snprintf(file, sizeof file, "%s/%s", path, f->d_name);
                if (f->d_name[0] != '.') unlink(file);
            }
            if (sub) closedir(sub);
            rmdir(path);
        }
    }
    closedir(d);
}

/* Makes `link` a symbolic link to a new memory file (memfd) of this process, so that a
 * reader given the path opens the memory file through /proc/self/fd/N (its fstat says a
 * regular file, as a file on disk's does); returns the memory file's descriptor. */
static inline int psg_fuzz_memfile_at(const char *link) {
    static int cleaned;
    if (!cleaned++) psg_fuzz_remove_stale(psg_fuzz_dir());
    int fd = memfd_create("psg_fuzz", 0);
    char target[64];
    snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
    unlink(link);
    if (fd < 0 || symlink(target, link) < 0) abort();
    return fd;
}

/* Replaces the memory file's contents with data: one pwrite and one ftruncate, where
 * creating a file per input made the file readers' harnesses several times slower. */
static inline void psg_fuzz_memfile_write(int fd, const uint8_t *data, size_t size) {
    if (size && pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    if (ftruncate(fd, (off_t)size) < 0) abort();
}

static char psg_fuzz_file_path[256];

static void psg_fuzz_file_remove(void) {
    unlink(psg_fuzz_file_path);
}

/* Returns the path (static storage) of a file holding data, named with `suffix` (one
 * suffix a process); the same memory file for every input. */
static inline const char *psg_fuzz_file(const uint8_t *data, size_t size, const char *suffix) {
    static int fd = -1;
    if (fd < 0) {
        snprintf(psg_fuzz_file_path, sizeof psg_fuzz_file_path, "%s/psg_fuzz_%d%s", psg_fuzz_dir(),
                 (int)getpid(), suffix);
        fd = psg_fuzz_memfile_at(psg_fuzz_file_path);
        atexit(psg_fuzz_file_remove);
    }
    psg_fuzz_memfile_write(fd, data, size);
    return psg_fuzz_file_path;
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
