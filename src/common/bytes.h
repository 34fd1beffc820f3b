/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bytes.h - big-endian field access for wire formats. Every tpx wire
 * format is big-endian and read with these, never by casting structs.
 */
#ifndef TPX_COMMON_BYTES_H
#define TPX_COMMON_BYTES_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* clang-format off */
static inline void tpx__put16(unsigned char *p, uint16_t v) { v = htobe16(v); memcpy(p, &v, 2); }
static inline void tpx__put32(unsigned char *p, uint32_t v) { v = htobe32(v); memcpy(p, &v, 4); }
static inline void tpx__put64(unsigned char *p, uint64_t v) { v = htobe64(v); memcpy(p, &v, 8); }
static inline uint16_t tpx__get16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return be16toh(v); }
static inline uint32_t tpx__get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return be32toh(v); }
static inline uint64_t tpx__get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return be64toh(v); }
/* clang-format on */

/* FNV-1a, 32 bits: an integrity check against garbled bytes (not against
 * an attacker: keys and the bootstrap's HMAC are for that). */
static inline uint32_t tpx__fnv1a32(const unsigned char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static inline int tpx__all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

#endif
