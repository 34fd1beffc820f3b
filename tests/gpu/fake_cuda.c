/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_cuda.c - a stand-in libcuda.so.1 for machines without a GPU.
 *
 * It lets CI run tpx's GPU code paths (strict TCPX with its handle and
 * bounce buffer in "GPU" memory, CUDA sends and receives through staging,
 * the d2d and host unpack modes, one-sided transfers on device memory) with
 * one property of real device memory that matters most: the CPU cannot
 * read it. Every allocation is a memfd mapped twice:
 *  - cuMemAlloc: the device address is a PROT_NONE view (a CPU read
 *    faults), the copies below go through a private writable view;
 *  - cuMemHostAlloc: the host address is a writable view, and
 *    cuMemHostGetDevicePointer gives a DIFFERENT, PROT_NONE view (so a
 *    caller that takes the device address of host-mapped memory for its
 *    CPU address, i.e. assumes unified addressing, crashes), translated
 *    back by CU_POINTER_ATTRIBUTE_HOST_POINTER and by the copies.
 * FAKE_CUDA_DEVICES=N devices (default 1, at most 8), each with its own
 * primary context; memory belongs to the device whose context is current
 * when it is allocated (none current: CUDA_ERROR_INVALID_CONTEXT, as the
 * driver), and FAKE_CUDA_ALLOC_LOG=FILE appends one line per allocation,
 * "device|host DEV BYTES", so that tests can see which GPU a library put
 * its buffers on. Device d's PCI address is the d-th of FAKE_CUDA_PCI
 * (a comma list, for a stand-in sysfs tree), else 0000:0d:00.0.
 * Streams and events are synchronous (every copy
 * has completed when its call returns) unless FAKE_CUDA_ASYNC=1: then an
 * asynchronous copy or memset on a stream is only queued, and runs when
 * the work is found complete: cuEventQuery/cuStreamQuery say
 * CUDA_ERROR_NOT_READY until a random 0-300 us after the record (or the
 * copy), cuEventSynchronize/cuStreamSynchronize/cuCtxSynchronize and
 * freeing memory run the queue at once. A caller that reads a staging
 * buffer before the driver said its copy finished reads stale bytes, and
 * polling code meets "not ready". cuStreamWriteValue64 writes its value
 * when its stream's work before it has run; in async mode a completer
 * thread runs each queued op once its random time has come (nobody asks
 * the driver about a written value). There is no kernel: cuModuleLoadData
 * fails (CI builds have no nvcc anyway); use TPX_UNPACK=d2d or host.
 * Only the driver functions tpx resolves (src/gpu/cuda.h) exist.
 * Faults on request: FAKE_CUDA_FAIL_DTOH=N / FAKE_CUDA_FAIL_HTOD=N fail the
 * Nth asynchronous copy of that direction (errno left at EINTR), and
 * FAKE_CUDA_MAX_PUSHES=N aborts the process at its (N+1)th context push.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>
/* The entry points are looked up with dlsym: there is no header to declare them. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define OK 0
#define EINVAL_ 1   /* CUDA_ERROR_INVALID_VALUE */
#define ENOMEM_ 2   /* CUDA_ERROR_OUT_OF_MEMORY */
#define EDEV_ 101   /* CUDA_ERROR_INVALID_DEVICE */
#define ENOIMG_ 200 /* CUDA_ERROR_INVALID_IMAGE */

#define EXPORT __attribute__((visibility("default")))

/* ---- allocations ------------------------------------------------------------------- */

enum { KIND_DEVICE = 2, KIND_HOST = 1 };
typedef struct {
    uintptr_t dev;  /* the device address (PROT_NONE view) */
    uintptr_t host; /* host-mapped: the CPU address (writable view); device: 0 */
    char *rw;       /* writable view (== host for host-mapped memory) */
    size_t len;
    int kind;
    int device; /* whose context was current at the allocation */
} alloc_t;

#define MAX_ALLOCS 8192
static alloc_t allocs[MAX_ALLOCS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int map_twice(size_t len, char **rw, char **none)
{
    int fd = memfd_create("fake-cuda", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = -1;
    if (ftruncate(fd, (off_t)len) == 0) {
        void *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        void *b = mmap(NULL, len, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (a != MAP_FAILED && b != MAP_FAILED) {
            *rw = a;
            *none = b;
            rc = 0;
        } else {
            if (a != MAP_FAILED)
                munmap(a, len);
            if (b != MAP_FAILED)
                munmap(b, len);
        }
    }
    close(fd);
    return rc;
}

static int current_device(void);
static void alloc_log(int kind, int device, size_t len);

static CUresult alloc_new(size_t size, int kind, alloc_t *out)
{
    int device = current_device();
    if (device < 0)
        return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    size_t len = (size + 4095) & ~(size_t)4095;
    if (len == 0)
        len = 4096;
    char *rw, *none;
    if (map_twice(len, &rw, &none) != 0)
        return ENOMEM_;
    alloc_t a = {.dev = (uintptr_t)none, .host = kind == KIND_HOST ? (uintptr_t)rw : 0, .rw = rw,
                 .len = len, .kind = kind, .device = device};
    alloc_log(kind, device, len);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].len == 0) {
            allocs[i] = a;
            pthread_mutex_unlock(&lock);
            *out = a;
            return OK;
        }
    }
    pthread_mutex_unlock(&lock);
    munmap(rw, len);
    munmap(none, len);
    return ENOMEM_;
}

/* The allocation holding `p` (either view); 0 if none. */
static int alloc_find(uintptr_t p, alloc_t *out, int *via_host)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_ALLOCS && !found; i++) {
        const alloc_t *a = &allocs[i];
        if (a->len == 0)
            continue;
        if (p >= a->dev && p < a->dev + a->len) {
            *out = *a;
            *via_host = 0;
            found = 1;
        } else if (a->host != 0 && p >= a->host && p < a->host + a->len) {
            *out = *a;
            *via_host = 1;
            found = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

static CUresult alloc_free(uintptr_t p, int kind)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        alloc_t *a = &allocs[i];
        if (a->len != 0 && a->kind == kind && (kind == KIND_DEVICE ? a->dev : a->host) == p) {
            munmap(a->rw, a->len);
            munmap((void *)a->dev, a->len);
            memset(a, 0, sizeof(*a));
            pthread_mutex_unlock(&lock);
            return OK;
        }
    }
    pthread_mutex_unlock(&lock);
    return EINVAL_;
}

/* A device address (device memory, or either view of host-mapped memory)
 * to a writable CPU address; NULL if [p, p + n) is not inside one. */
static char *dev_xlate(CUdeviceptr p, size_t n)
{
    alloc_t a;
    int via_host;
    if (!alloc_find((uintptr_t)p, &a, &via_host))
        return NULL;
    uintptr_t base = via_host ? a.host : a.dev;
    if ((uintptr_t)p + n > base + a.len)
        return NULL;
    return a.rw + ((uintptr_t)p - base);
}

/* A host argument: host-mapped memory may be named by either view. */
static char *host_xlate(const void *p, size_t n)
{
    char *x = dev_xlate((CUdeviceptr)(uintptr_t)p, n);
    return x != NULL ? x : (char *)p;
}

/* ---- driver, devices, contexts ---------------------------------------------------- */

#define MAX_DEVICES 8
static char ctx_objs[MAX_DEVICES]; /* device d's primary context is &ctx_objs[d] */
static __thread void *ctx_stack[16];
static __thread int ctx_depth;

static int n_devices(void)
{
    const char *e = getenv("FAKE_CUDA_DEVICES");
    int n = e != NULL ? atoi(e) : 1;
    return n < 1 ? 1 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

static int valid_dev(int d) { return d >= 0 && d < n_devices(); }

/* The device of the context current on this thread, -1 if none. */
static int current_device(void)
{
    char *c = ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
    return c == NULL ? -1 : (int)(c - ctx_objs);
}

static void alloc_log(int kind, int device, size_t len)
{
    const char *path = getenv("FAKE_CUDA_ALLOC_LOG");
    if (path == NULL || path[0] == '\0')
        return;
    char line[64];
    int n = snprintf(line, sizeof(line), "%s %d %zu\n", kind == KIND_DEVICE ? "device" : "host",
                     device, len);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
        ssize_t w = write(fd, line, (size_t)n); /* one write: lines of threads never mix */
        (void)w;
        close(fd);
    }
}

EXPORT CUresult cuInit(unsigned flags) { return flags == 0 ? OK : EINVAL_; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 12040; return OK; }
EXPORT CUresult cuGetErrorName(CUresult r, const char **s)
{
    *s = r == OK ? "CUDA_SUCCESS" : r == EINVAL_ ? "CUDA_ERROR_INVALID_VALUE"
         : r == ENOMEM_ ? "CUDA_ERROR_OUT_OF_MEMORY" : r == ENOIMG_ ? "CUDA_ERROR_INVALID_IMAGE"
                                                     : "CUDA_ERROR_UNKNOWN";
    return OK;
}
EXPORT CUresult cuGetErrorString(CUresult r, const char **s)
{
    cuGetErrorName(r, s);
    return OK;
}
EXPORT CUresult cuDeviceGet(int *d, int ordinal)
{
    *d = ordinal;
    return valid_dev(ordinal) ? OK : EDEV_;
}
EXPORT CUresult cuDeviceGetCount(int *n) { *n = n_devices(); return OK; }
EXPORT CUresult cuDeviceGetName(char *name, int len, int dev)
{
    (void)dev;
    strncpy(name, "tpx fake GPU (no device memory access from the CPU)", (size_t)len - 1);
    name[len - 1] = '\0';
    return OK;
}
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int dev)
{
    (void)dev;
    *v = attr == 16 ? 4 : attr == 75 ? 9 : attr == 76 ? 0 : 1;
    return OK;
}
EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, int dev)
{
    if (!valid_dev(dev))
        return EDEV_;
    char buf[32];
    snprintf(buf, sizeof(buf), "0000:%02x:00.0", dev);
    const char *list = getenv("FAKE_CUDA_PCI");
    for (int i = 0; list != NULL && *list; i++) {
        size_t n = strcspn(list, ",");
        if (i == dev && n < sizeof(buf)) {
            memcpy(buf, list, n);
            buf[n] = '\0';
            break;
        }
        list += n + (list[n] == ',');
    }
    strncpy(id, buf, (size_t)len - 1);
    id[len - 1] = '\0';
    return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    if (!valid_dev(dev))
        return EDEV_;
    *ctx = &ctx_objs[dev];
    return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return valid_dev(dev) ? OK : EDEV_; }
EXPORT CUresult cuCtxGetCurrent(void **ctx)
{
    *ctx = ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
    return OK;
}
EXPORT CUresult cuCtxGetDevice(int *dev)
{
    if (current_device() < 0)
        return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    *dev = current_device();
    return OK;
}
/* Pushes, ever, all threads: with FAKE_CUDA_MAX_PUSHES=N the push after
 * the N-th aborts the process (a test's guard that threads tpx owns switch
 * contexts instead of pushing one per call, cuda.c tpx__cuda_thread_own). */
static unsigned long n_pushes;

EXPORT CUresult cuCtxPushCurrent_v2(void *ctx)
{
    if (ctx_depth == 16)
        return EINVAL_;
    const char *max = getenv("FAKE_CUDA_MAX_PUSHES");
    if (__atomic_add_fetch(&n_pushes, 1, __ATOMIC_RELAXED) > (max ? strtoul(max, NULL, 10) : ~0ul)) {
        static const char msg[] = "fake_cuda: more context pushes than FAKE_CUDA_MAX_PUSHES\n";
        ssize_t w = write(2, msg, sizeof(msg) - 1);
        (void)w;
        abort();
    }
    ctx_stack[ctx_depth++] = ctx;
    return OK;
}
/* Binds ctx in place of the stack's top (pushes onto an empty stack); NULL unbinds. */
EXPORT CUresult cuCtxSetCurrent(void *ctx)
{
    if (ctx == NULL) {
        if (ctx_depth > 0)
            ctx_depth--;
    } else if (ctx_depth == 0) {
        ctx_stack[ctx_depth++] = ctx;
    } else {
        ctx_stack[ctx_depth - 1] = ctx;
    }
    return OK;
}
EXPORT CUresult cuCtxPopCurrent_v2(void **ctx)
{
    if (ctx_depth == 0)
        return EINVAL_;
    void *c = ctx_stack[--ctx_depth];
    if (ctx != NULL)
        *ctx = c;
    return OK;
}

/* ---- memory ------------------------------------------------------------------------- */

EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
    *free_b = (size_t)64 << 30;
    *total = (size_t)80 << 30;
    return OK;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
    alloc_t a;
    CUresult r = alloc_new(size, KIND_DEVICE, &a);
    if (r == OK)
        *p = (CUdeviceptr)a.dev;
    return r;
}
/* Freeing waits for queued work first (as the driver's frees synchronize). */
static void streams_run_all(void);
EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    streams_run_all();
    return alloc_free((uintptr_t)p, KIND_DEVICE);
}
EXPORT CUresult cuMemHostAlloc(void **p, size_t size, unsigned flags)
{
    (void)flags;
    alloc_t a;
    CUresult r = alloc_new(size, KIND_HOST, &a);
    if (r == OK)
        *p = (void *)a.host;
    return r;
}
EXPORT CUresult cuMemFreeHost(void *p)
{
    streams_run_all();
    return alloc_free((uintptr_t)p, KIND_HOST);
}
EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *h, unsigned flags)
{
    alloc_t a;
    int via_host;
    if (flags != 0 || !alloc_find((uintptr_t)h, &a, &via_host) || a.kind != KIND_HOST ||
        !via_host)
        return EINVAL_;
    *d = (CUdeviceptr)(a.dev + ((uintptr_t)h - a.host));
    return OK;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    char *d = dev_xlate(dst, n);
    if (d == NULL)
        return EINVAL_;
    memcpy(d, host_xlate(src, n), n);
    return OK;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    char *s = dev_xlate(src, n);
    if (s == NULL)
        return EINVAL_;
    memcpy(host_xlate(dst, n), s, n);
    return OK;
}
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    char *d = dev_xlate(dst, n), *s = dev_xlate(src, n);
    if (d == NULL || s == NULL)
        return EINVAL_;
    memmove(d, s, n);
    return OK;
}
EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n)
{
    char *d = dev_xlate(dst, n);
    if (d == NULL)
        return EINVAL_;
    memset(d, v, n);
    return OK;
}

/* ---- streams and events (FAKE_CUDA_ASYNC=1: queued work) ------------------------------ */

#define NOT_READY_ 600 /* CUDA_ERROR_NOT_READY */

enum { OP_HTOD, OP_DTOH, OP_DTOD, OP_MEMSET, OP_WRITE64 };
typedef struct op {
    struct op *next;
    int kind;
    CUdeviceptr dst, src; /* host addresses as integers for OP_DTOH (dst) / OP_HTOD (src) */
    size_t n;
    unsigned char v;
    uint64_t v64;      /* OP_WRITE64 */
    uint64_t ready_ns; /* async: the completer thread runs it from then on */
} op_t;

typedef struct stream {
    pthread_mutex_t mu;
    op_t *head, *tail;
    uint64_t queued, ran;   /* ops queued / run, ever */
    uint64_t ready_ns;      /* cuStreamQuery: not ready before this */
    struct stream *next_all; /* every live stream (cuCtxSynchronize, frees) */
} stream_t;

typedef struct {
    stream_t *s;  /* NULL: nothing recorded (complete) */
    uint64_t upto; /* complete once s->ran >= upto */
    uint64_t ready_ns;
} event_t;

static int async_mode;
static pthread_once_t async_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t event_lock = PTHREAD_MUTEX_INITIALIZER; /* event fields; before s->mu */
static stream_t *all_streams;
static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER; /* a leaf lock */

static void async_read(void)
{
    const char *e = getenv("FAKE_CUDA_ASYNC");
    async_mode = e != NULL && e[0] == '1';
}

static int is_async(void)
{
    pthread_once(&async_once, async_read);
    return async_mode;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* When work queued now is "done": 0-300 us from now, at random. */
static uint64_t ready_at(void)
{
    pthread_mutex_lock(&rng_lock);
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    pthread_mutex_unlock(&rng_lock);
    return now_ns() + (x >> 11) % 300000;
}

static CUresult op_exec(const op_t *o)
{
    switch (o->kind) {
    case OP_HTOD: return cuMemcpyHtoD_v2(o->dst, (const void *)(uintptr_t)o->src, o->n);
    case OP_DTOH: return cuMemcpyDtoH_v2((void *)(uintptr_t)o->dst, o->src, o->n);
    case OP_DTOD: return cuMemcpyDtoD_v2(o->dst, o->src, o->n);
    case OP_WRITE64: {
        char *p = dev_xlate(o->dst, 8);
        if (p == NULL || (uintptr_t)p % 8 != 0)
            return EINVAL_;
        __atomic_store_n((uint64_t *)(void *)p, o->v64, __ATOMIC_RELEASE);
        return OK;
    }
    default: return cuMemsetD8_v2(o->dst, o->v, o->n);
    }
}

/* Run the stream's queued work up to op number `upto` (mu held). A failing
 * op is dropped: its error was checked when it was queued. */
static void stream_run(stream_t *s, uint64_t upto)
{
    while (s->ran < upto && s->head != NULL) {
        op_t *o = s->head;
        s->head = o->next;
        if (s->head == NULL)
            s->tail = NULL;
        (void)op_exec(o);
        free(o);
        s->ran++;
    }
}

static void streams_run_all(void)
{
    pthread_mutex_lock(&streams_lock);
    for (stream_t *s = all_streams; s != NULL; s = s->next_all) {
        pthread_mutex_lock(&s->mu);
        stream_run(s, UINT64_MAX);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&streams_lock);
}

/* Queue an async op on `sv`, or run it now (no stream, or not async).
 * The addresses are checked now, as the driver would. */
static CUresult enqueue(void *sv, int kind, CUdeviceptr dst, CUdeviceptr src, size_t n,
                        unsigned char v, uint64_t v64)
{
    op_t o = {.kind = kind, .dst = dst, .src = src, .n = n, .v = v, .v64 = v64};
    stream_t *s = sv;
    if (!is_async() || s == NULL)
        return op_exec(&o);
    int ok = (kind == OP_DTOH ? dev_xlate(src, n) != NULL
              : kind == OP_DTOD ? dev_xlate(src, n) != NULL && dev_xlate(dst, n) != NULL
                                : dev_xlate(dst, n) != NULL);
    if (!ok)
        return EINVAL_;
    op_t *q = malloc(sizeof(*q));
    if (q == NULL)
        return ENOMEM_;
    *q = o;
    q->next = NULL;
    uint64_t ready = ready_at();
    pthread_mutex_lock(&s->mu);
    q->ready_ns = s->tail != NULL && s->tail->ready_ns > ready ? s->tail->ready_ns : ready;
    if (s->tail != NULL)
        s->tail->next = q;
    else
        s->head = q;
    s->tail = q;
    s->queued++;
    if (ready > s->ready_ns)
        s->ready_ns = ready;
    pthread_mutex_unlock(&s->mu);
    return OK;
}

/* FAKE_CUDA_FAIL_DTOH=N / FAKE_CUDA_FAIL_HTOD=N: the Nth asynchronous copy
 * of that direction fails, and leaves errno at EINTR as a driver's own
 * system calls may. *calls counts the direction's copies; *fail_at caches
 * the variable (-1: not read yet). */
static int copy_fails(const char *var, long *fail_at, long *calls)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    if (*fail_at < 0) {
        const char *e = getenv(var);
        *fail_at = e != NULL ? atol(e) : 0;
    }
    int fail = ++*calls == *fail_at;
    pthread_mutex_unlock(&mu);
    if (fail)
        errno = EINTR;
    return fail;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s)
{
    static long fail_at = -1, calls;
    if (copy_fails("FAKE_CUDA_FAIL_HTOD", &fail_at, &calls))
        return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
    return enqueue(s, OP_HTOD, dst, (CUdeviceptr)(uintptr_t)src, n, 0, 0);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s)
{
    static long fail_at = -1, calls;
    if (copy_fails("FAKE_CUDA_FAIL_DTOH", &fail_at, &calls))
        return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
    return enqueue(s, OP_DTOH, (CUdeviceptr)(uintptr_t)dst, src, n, 0, 0);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s)
{
    return enqueue(s, OP_DTOD, dst, src, n, 0, 0);
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *s)
{
    return enqueue(s, OP_MEMSET, dst, 0, n, v, 0);
}

/* Async mode with stream memory operations: nobody asks the driver when a
 * written value lands, so a completer thread runs each stream's queued work
 * once its time has come, as a GPU would on its own. */
static pthread_once_t completer_once = PTHREAD_ONCE_INIT;

static void *completer_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
        uint64_t now = now_ns();
        pthread_mutex_lock(&streams_lock);
        for (stream_t *s = all_streams; s != NULL; s = s->next_all) {
            pthread_mutex_lock(&s->mu);
            uint64_t upto = s->ran;
            for (op_t *o = s->head; o != NULL && o->ready_ns <= now; o = o->next)
                upto++;
            stream_run(s, upto);
            pthread_mutex_unlock(&s->mu);
        }
        pthread_mutex_unlock(&streams_lock);
    }
    return NULL;
}

static void completer_start(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, completer_main, NULL) == 0)
        pthread_detach(t);
}

EXPORT CUresult cuStreamWriteValue64_v2(void *sv, CUdeviceptr addr, uint64_t v, unsigned flags)
{
    if (flags != 0 || (addr & 7u) != 0 || dev_xlate(addr, 8) == NULL)
        return EINVAL_;
    if (is_async() && sv != NULL)
        pthread_once(&completer_once, completer_start);
    return enqueue(sv, OP_WRITE64, addr, 0, 8, 0, v);
}

EXPORT CUresult cuStreamCreate(void **sp, unsigned flags)
{
    (void)flags;
    stream_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return ENOMEM_;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_lock(&streams_lock);
    s->next_all = all_streams;
    all_streams = s;
    pthread_mutex_unlock(&streams_lock);
    *sp = s;
    return OK;
}
EXPORT CUresult cuStreamDestroy_v2(void *sv)
{
    stream_t *s = sv;
    if (s == NULL)
        return EINVAL_;
    pthread_mutex_lock(&streams_lock);
    for (stream_t **p = &all_streams; *p != NULL; p = &(*p)->next_all) {
        if (*p == s) {
            *p = s->next_all;
            break;
        }
    }
    pthread_mutex_unlock(&streams_lock);
    pthread_mutex_lock(&s->mu);
    stream_run(s, UINT64_MAX); /* the driver finishes a destroyed stream's work */
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return OK;
}
EXPORT CUresult cuStreamSynchronize(void *sv)
{
    stream_t *s = sv;
    if (s == NULL) {
        streams_run_all();
        return OK;
    }
    pthread_mutex_lock(&s->mu);
    stream_run(s, UINT64_MAX);
    pthread_mutex_unlock(&s->mu);
    return OK;
}
EXPORT CUresult cuStreamQuery(void *sv)
{
    stream_t *s = sv;
    if (s == NULL)
        return OK;
    CUresult r = OK;
    pthread_mutex_lock(&s->mu);
    if (s->ran < s->queued && now_ns() < s->ready_ns)
        r = NOT_READY_;
    else
        stream_run(s, UINT64_MAX);
    pthread_mutex_unlock(&s->mu);
    return r;
}
EXPORT CUresult cuCtxSynchronize(void)
{
    streams_run_all();
    return OK;
}
EXPORT CUresult cuEventCreate(void **e, unsigned flags)
{
    (void)flags;
    *e = calloc(1, sizeof(event_t));
    return *e != NULL ? OK : ENOMEM_;
}
EXPORT CUresult cuEventDestroy_v2(void *e) { free(e); return OK; }
EXPORT CUresult cuEventRecord(void *ev, void *sv)
{
    event_t *e = ev;
    stream_t *s = sv;
    if (e == NULL)
        return EINVAL_;
    pthread_mutex_lock(&event_lock);
    if (!is_async() || s == NULL) {
        e->s = NULL;
    } else {
        pthread_mutex_lock(&s->mu);
        e->s = s;
        e->upto = s->queued;
        e->ready_ns = s->ran < s->queued ? ready_at() : 0;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&event_lock);
    return OK;
}
/* Not ready until its time has come; then the work before it runs. */
EXPORT CUresult cuEventQuery(void *ev)
{
    event_t *e = ev;
    if (e == NULL)
        return EINVAL_;
    CUresult r = OK;
    pthread_mutex_lock(&event_lock);
    stream_t *s = e->s;
    if (s != NULL) {
        pthread_mutex_lock(&s->mu);
        if (s->ran < e->upto) {
            if (now_ns() < e->ready_ns)
                r = NOT_READY_;
            else
                stream_run(s, e->upto);
        }
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&event_lock);
    return r;
}
EXPORT CUresult cuEventSynchronize(void *ev)
{
    event_t *e = ev;
    if (e == NULL)
        return EINVAL_;
    pthread_mutex_lock(&event_lock);
    stream_t *s = e->s;
    if (s != NULL) {
        pthread_mutex_lock(&s->mu);
        stream_run(s, e->upto);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&event_lock);
    return OK;
}
EXPORT CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b)
{
    (void)a, (void)b;
    *ms = 0;
    return OK;
}
EXPORT CUresult cuModuleLoadData(void **m, const void *image) { (void)m, (void)image; return ENOIMG_; }
EXPORT CUresult cuModuleUnload(void *m) { (void)m; return OK; }
EXPORT CUresult cuModuleGetFunction(void **f, void *m, const char *name)
{
    (void)f, (void)m, (void)name;
    return EINVAL_;
}
EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, void *s, void **params,
                               void **extra)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s;
    (void)params, (void)extra;
    return EINVAL_;
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
    alloc_t a;
    int via_host;
    if (!alloc_find((uintptr_t)p, &a, &via_host))
        return EINVAL_;
    switch (attr) {
    case 1: /* CONTEXT */
        *(void **)data = &ctx_objs[a.device];
        return OK;
    case 2: /* MEMORY_TYPE */
        *(unsigned *)data = (unsigned)a.kind;
        return OK;
    case 3: /* DEVICE_POINTER */
        *(CUdeviceptr *)data = via_host ? (CUdeviceptr)(a.dev + ((uintptr_t)p - a.host)) : p;
        return OK;
    case 4: /* HOST_POINTER */
        if (a.kind != KIND_HOST)
            return EINVAL_;
        *(void **)data = (void *)(via_host ? (uintptr_t)p : a.host + ((uintptr_t)p - a.dev));
        return OK;
    case 9: /* DEVICE_ORDINAL */
        *(int *)data = a.device;
        return OK;
    default:
        return EINVAL_;
    }
}
