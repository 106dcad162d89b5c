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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    psg_checkpoint_t *ck = NULL;
    if (data[0] & 1) {
        /* an index naming model.ckpt-1-00000-of-00001.safetensors beside it */
        char dir[128], shard[256], index[256];
        snprintf(dir, sizeof dir, "/tmp/psg_fuzz_ckpt_%d", (int)getpid());
        mkdir(dir, 0700);
        snprintf(shard, sizeof shard, "%s/model.ckpt-1-00000-of-00001.safetensors", dir);
        snprintf(index, sizeof index, "%s/model.ckpt-1.index.json", dir);
        static const char st[] = "\x40\0\0\0\0\0\0\0{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}          "
                                 "\0\0\x80\x3f";
        FILE *f = fopen(shard, "wb");
        fwrite(st, 1, sizeof st - 1, f);
        fclose(f);
        f = fopen(index, "wb");
        fwrite(data + 1, 1, size - 1, f);
        fclose(f);
        ck = psg_checkpoint_open(index, -1);
    } else {
        ck = psg_checkpoint_open(psg_fuzz_file(data + 1, size - 1, ".safetensors"), -1);
    }
    if (ck) read_all(ck);
    psg_checkpoint_destroy(&ck);
    return 0;
}
