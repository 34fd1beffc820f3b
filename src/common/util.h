/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.h - small helpers shared by every tpx module: time, arithmetic,
 * branch hints and the error-checking macros. No state, no allocation.
 */
#ifndef TPX_COMMON_UTIL_H
#define TPX_COMMON_UTIL_H

#include <stdint.h>
#include <time.h>

#include "tpx/status.h"

#define TPX_LIKELY(x) __builtin_expect(!!(x), 1)
#define TPX_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TPX_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TPX_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TPX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TPX_UNUSED(x) ((void)(x))

/* A spin-wait hint to the CPU (one iteration of a busy-wait loop). */
#if defined(__x86_64__) || defined(__i386__)
#define TPX_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define TPX_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define TPX_CPU_RELAX() ((void)0)
#endif

/* Evaluate `call` (a tpx_status_t expression); on error store it in
 * `status` and jump to `label`. The callee has already logged the cause. */
#define TPX_CHECK_GOTO(call, status, label)                                                        \
    do {                                                                                           \
        (status) = (call);                                                                         \
        if (TPX_UNLIKELY((status) < 0))                                                            \
            goto label;                                                                            \
    } while (0)

static inline uint64_t tpx__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t tpx__now_ms(void) { return tpx__now_ns() / 1000000ull; }

/* Milliseconds left until `deadline_ns` (0 if passed), capped at INT32_MAX. */
static inline int tpx__ms_left(uint64_t deadline_ns)
{
    uint64_t now = tpx__now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999ull) / 1000000ull;
    return ms > 0x7fffffffull ? 0x7fffffff : (int)ms;
}

/* Map an errno value to a status. The only place errno is interpreted. */
tpx_status_t tpx__status_from_errno(int err);

/* Fill `buf` with `len` bytes from the kernel's CSPRNG. */
tpx_status_t tpx__random_bytes(void *buf, size_t len);

#endif
