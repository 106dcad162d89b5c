/* libFuzzer: the checkpoint reader (ps/checkpoint.c): a safetensors shard, or an index
 * (first byte odd) whose one shard is a fixed small valid file; every tensor a file
 * describes is read to its last byte, as `psgraph inspect` does. */
#include "fuzz_util.h"
#include "psgraph/checkpoint.h"

#include <sys/stat.h>

static void read_all(const psg_checkpoint_t *ck) {
    volatile uint8_t sum = 0;
    for (int i = 0; i < psg_checkpoint_num_tensors(ck); i++) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(ck, i, &e);
        const uint8_t *p = e.data;
        for (size_t k = 0; k < e.nbytes; k++) sum ^= p[k];
    }
    (void)sum;
}

/* A folder of this process holding the shard an index names (written once) and the
 * index itself, a memory file rewritten per input. */
static char dir[128], shard[256], index_path[256];

static void remove_index_dir(void) {
    unlink(index_path);
    unlink(shard);
    rmdir(dir);
}

static int index_file(void) {
    static int fd = -1;
    if (fd >= 0) return fd;
    snprintf(dir, sizeof dir, "%s/psg_fuzz_ckpt_%d", psg_fuzz_dir(), (int)getpid());
    snprintf(shard, sizeof shard, "%s/model.ckpt-1-00000-of-00001.safetensors", dir);
    snprintf(index_path, sizeof index_path, "%s/model.ckpt-1.index.json", dir);
    mkdir(dir, 0700);
    static const char st[] =
        "\x40\0\0\0\0\0\0\0{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}          "
        "\0\0\x80\x3f";
    FILE *f = fopen(shard, "wb");
    if (!f || fwrite(st, 1, sizeof st - 1, f) != sizeof st - 1 || fclose(f) != 0) abort();
    fd = psg_fuzz_memfile_at(index_path);
    atexit(remove_index_dir);
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    psg_checkpoint_t *ck = NULL;
    if (data[0] & 1) {
        /* an index naming model.ckpt-1-00000-of-00001.safetensors beside it */
        psg_fuzz_memfile_write(index_file(), data + 1, size - 1);
        ck = psg_checkpoint_open(index_path, -1);
    } else {
        ck = psg_checkpoint_open(psg_fuzz_file(data + 1, size - 1, ".safetensors"), -1);
    }
    if (ck) read_all(ck);
    psg_checkpoint_destroy(&ck);
    return 0;
}
