/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unpack_cpu.c - the CPU reference unpack.
 */
#include <string.h>

#include "unpack.h"

uint64_t tpx__unpack_cpu(void *dst, const void *bounce, const tpx_nccl_load_meta_t *frags,
                         uint64_t nfrags)
{
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < nfrags; i++) {
        memcpy((char *)dst + frags[i].f.dst_off, (const char *)bounce + frags[i].f.src_off,
               frags[i].f.len);
        bytes += frags[i].f.len;
    }
    return bytes;
}
