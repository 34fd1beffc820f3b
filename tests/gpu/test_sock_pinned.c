/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sock_pinned.c - the books of the built-in transport's pinned staging
 * rings (TPX_SOCK_CUDA_PINNED, sock_cuda.c), on the fake GPU: a ring is
 * booked when a connection makes it and unbooked when the connection frees
 * it, also when the GPU's context cannot be entered at that moment (the
 * ring's memory then stays until the primary context goes, but a ring that
 * is gone must not shrink the rings made after it, and the connection's
 * reference on the context must still be given back). The fake's context
 * stack holds 16 entries: filling it makes the free's push fail.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "gpu/cuda.h"
#include "plugin/sock/sock.h"
#include "plugin/sock/sock_cuda.h"

#define MiB (1024u * 1024u)

static int fails;
#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "test_sock_pinned: FAIL: " __VA_ARGS__);                               \
            fputc('\n', stderr);                                                                   \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

/* A connection makes its ring on its first CUDA use: a small copy into GPU memory. */
static tpx_status_t chan_make(tpx_sock_chan_t *ch, void *dptr)
{
    static const char src[64];
    memset(ch, 0, sizeof(*ch));
    return tpx__sock_cuda_eager_copy(ch, 0, dptr, src, sizeof(src));
}

int main(void)
{
    if (tpx__config_load() != TPX_OK || !tpx__sock_cuda_available()) {
        fprintf(stderr, "test_sock_pinned: no CUDA driver (run with the fake's LD_LIBRARY_PATH)\n");
        return 77;
    }
    tpx__sock_params.cuda_ring = 4 * MiB;
    tpx__sock_params.cuda_block = MiB / 2;
    tpx__sock_params.cuda_pinned = 4 * MiB; /* room for one full ring */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int (*push)(void *) = lib ? (int (*)(void *))dlsym(lib, "cuCtxPushCurrent_v2") : NULL;
    int (*pop)(void **) = lib ? (int (*)(void **))dlsym(lib, "cuCtxPopCurrent_v2") : NULL;
    tpx__cuda_mem_t m;
    if (push == NULL || pop == NULL || tpx__cuda_ctx_retain(0, NULL) != TPX_OK ||
        tpx__cuda_mem_alloc(0, 4096, &m) != TPX_OK) {
        fprintf(stderr, "test_sock_pinned: FAIL: set-up\n");
        return 1;
    }
    void *dptr = (void *)(uintptr_t)m.ptr;
    tpx_sock_chan_t ch;

    CHECK(chan_make(&ch, dptr) == TPX_OK, "first copy");
    CHECK(tpx__sock_cuda_pinned_booked() == 4 * MiB, "one ring: %llu bytes booked",
          (unsigned long long)tpx__sock_cuda_pinned_booked());
    tpx__sock_cuda_chan_free(&ch);
    CHECK(tpx__sock_cuda_pinned_booked() == 0, "ring freed: %llu bytes still booked",
          (unsigned long long)tpx__sock_cuda_pinned_booked());

    /* The free cannot enter the context: this thread's context stack is full. */
    CHECK(chan_make(&ch, dptr) == TPX_OK, "second copy");
    static int other_ctx;
    int pushed = 0;
    while (push(&other_ctx) == 0)
        pushed++;
    tpx__sock_cuda_chan_free(&ch);
    for (void *c; pushed > 0; pushed--)
        (void)pop(&c);
    CHECK(ch.cu == NULL, "the connection still has its staging");
    CHECK(tpx__sock_cuda_pinned_booked() == 0,
          "a ring freed without its context: %llu bytes still booked",
          (unsigned long long)tpx__sock_cuda_pinned_booked());
    CHECK(chan_make(&ch, dptr) == TPX_OK && tpx__sock_cuda_pinned_booked() == 4 * MiB,
          "the next ring: %llu bytes booked, not a full 4 MiB ring",
          (unsigned long long)tpx__sock_cuda_pinned_booked());
    tpx__sock_cuda_chan_free(&ch);

    /* Every reference the connections took is given back, the one whose
     * free could not enter the context too: after the test's own, the
     * primary context is released (an enter is refused). */
    tpx__cuda_mem_free(&m);
    tpx__cuda_ctx_release(0);
    int p = 0;
    tpx_status_t st = tpx__cuda_ctx_enter(0, &p);
    if (st == TPX_OK)
        tpx__cuda_ctx_leave(p);
    CHECK(st != TPX_OK, "the primary context is still retained: a reference was not given back");
    if (fails)
        return 1;
    printf("test_sock_pinned: ok\n");
    return 0;
}
