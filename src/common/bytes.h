/*
 * bytes.h - big-endian field access for wire formats. Every tpx wire
 * format is big-endian and read with these, never by casting structs.
 */
#ifndef TPX_COMMON_BYTES_H
#define TPX_COMMON_BYTES_H

#include <stddef.h>
#include <stdint.h>

static inline void tpx__put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}
static inline void tpx__put32(unsigned char *p, uint32_t v)
{
    tpx__put16(p, (uint16_t)(v >> 16));
    tpx__put16(p + 2, (uint16_t)v);
}
static inline void tpx__put64(unsigned char *p, uint64_t v)
{
    tpx__put32(p, (uint32_t)(v >> 32));
    tpx__put32(p + 4, (uint32_t)v);
}
static inline uint16_t tpx__get16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t tpx__get32(const unsigned char *p)
{
    return (uint32_t)tpx__get16(p) << 16 | tpx__get16(p + 2);
}
static inline uint64_t tpx__get64(const unsigned char *p)
{
    return (uint64_t)tpx__get32(p) << 32 | tpx__get32(p + 4);
}

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
