/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unpack.h - gathering devmem fragments into their destination.
 *
 * A devmem plugin (TCPX, or the built-in transport's strict mode) leaves a
 * receive's payload in its bounce buffer as fragments {src_off, len,
 * dst_off}; the consumer copies bounce + src_off -> dst + dst_off for each
 * before irecvConsumed. This module knows nothing of sockets or engines.
 */
#ifndef TPX_UNPACK_H
#define TPX_UNPACK_H

#include <stdint.h>

#include "tpx/ncclnet.h"

/* The CPU reference: host bounce buffer to host destination. Fragments may
 * come in any order, at any alignment. Returns the bytes copied. */
uint64_t tpx__unpack_cpu(void *dst, const void *bounce, const tpx_nccl_load_meta_t *frags,
                         uint64_t nfrags);

#endif
