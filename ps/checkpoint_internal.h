/* Internal to psgraph's checkpoints: helpers shared by ps/checkpoint.c (the
 * files) and ps/checkpoint_dir.c (the directory policy). Not public API. */
#ifndef PSGRAPH_PS_CHECKPOINT_INTERNAL_H
#define PSGRAPH_PS_CHECKPOINT_INTERNAL_H

#include "psgraph/checkpoint.h"

#include <stddef.h>
#include <stdint.h>

/* "model.ckpt-S-0000k-of-0000N.safetensors" and "model.ckpt-S.index.json". */
void psg_ckpt_shard_name(char *buf, size_t size, int64_t step, int shard, int num_shards);
void psg_ckpt_index_name(char *buf, size_t size, int64_t step);
/* The safetensors name of a dtype ("F32"), NULL if it has none. */
const char *psg_ckpt_dtype_name(psg_dtype_t dt);
/* zlib's crc32 over n bytes, continuing crc (start with psg_ckpt_crc32(0, NULL, 0)). */
uint32_t psg_ckpt_crc32(uint32_t crc, const void *data, size_t n);
/* Writes dir/name atomically: temp file, fsync, rename, fsync of dir. */
int psg_ckpt_write_atomic(const char *dir, const char *name, const void *data, size_t n);
/* Reads a whole file into a malloc'd block (caller frees). */
int psg_ckpt_read_file(const char *path, uint8_t **bytes, size_t *size);

#endif
