/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda.c - the CUDA driver API loaded at run time (see cuda.h).
 *
 * The library is opened once, under pthread_once, and never closed: the
 * driver keeps threads and state of its own that must not outlive its code.
 * Per-device state (tpx's reference count on the primary context) lives in
 * one small table guarded by a mutex; nothing here is on a hot path except
 * tpx__cuda_ctx_enter/leave and the event calls, which take no lock (of
 * tpx's; the driver takes its own in a push or a pop, which is why the
 * transport's I/O workers switch contexts instead: tpx__cuda_thread_own).
 */
#include "gpu/cuda.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

tpx__cuda_api_t tpx__cu;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static tpx_status_t init_status = TPX_ERR_NO_DEVICE;
static char init_reason[256];
static int device_count;
static int driver_version;

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUcontext ctx;
    int refs;
} ctx_table[TPX_CUDA_MAX_DEVICES];

/* ---- errors ----------------------------------------------------------------------- */

const char *tpx__cuda_error_name(CUresult r)
{
    const char *s = NULL;
    if (tpx__cu.cuGetErrorName == NULL || tpx__cu.cuGetErrorName(r, &s) != CUDA_SUCCESS ||
        s == NULL)
        return "CUDA_ERROR_UNKNOWN";
    return s;
}

tpx_status_t tpx__cuda_check(CUresult r, const char *call, const char *file, int line)
{
    if (TPX_LIKELY(r == CUDA_SUCCESS))
        return TPX_OK;
    if (TPX_LOG_ON(TPX_LOG_ERROR)) {
        const char *text = NULL;
        if (tpx__cu.cuGetErrorString == NULL || tpx__cu.cuGetErrorString(r, &text) != CUDA_SUCCESS)
            text = NULL;
        tpx__log_emit(TPX_LOG_ERROR, file, line, "%s failed: %s (%d: %s)", call,
                      tpx__cuda_error_name(r), (int)r, text ? text : "no description");
    }
    switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        return TPX_ERR_NO_MEMORY;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
        return TPX_ERR_NO_DEVICE;
    default:
        return TPX_ERR_CUDA;
    }
}

/* ---- loading ------------------------------------------------------------------------ */

static const struct {
    size_t off;
    const char *sym;
    const char *fallback;
    int optional;
} cuda_syms[] = {
#define TPX__CUDA_SYM(name, params, sym, fallback)                                                 \
    {offsetof(tpx__cuda_api_t, name), sym, fallback, 0},
    TPX__CUDA_FUNCS(TPX__CUDA_SYM)
#undef TPX__CUDA_SYM
#define TPX__CUDA_SYM(name, params, sym, fallback)                                                 \
    {offsetof(tpx__cuda_api_t, name), sym, fallback, 1},
    TPX__CUDA_OPT_FUNCS(TPX__CUDA_SYM)
#undef TPX__CUDA_SYM
};

static void init_fail(tpx_status_t st, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void init_fail(tpx_status_t st, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_reason, sizeof(init_reason), fmt, ap);
    va_end(ap);
    init_status = st;
    TPX_LOG(level, "%s", init_reason);
}

/* The driver ABI tpx is written against: every entry point is asked for as
 * it was in CUDA 12.8 (or in the installed driver, if older), so a later
 * driver's new variant of a function (a _v3 with other parameters) is
 * never picked up by accident. */
#define TPX_CUDA_ABI_VERSION 12080

typedef CUresult (*get_proc_v1_t)(const char *sym, void **fn, int version, uint64_t flags);
typedef CUresult (*get_proc_v2_t)(const char *sym, void **fn, int version, uint64_t flags,
                                  int *status);

/* Entry points as NCCL's cudawrap finds them: through the driver's
 * cuGetProcAddress (_v2 since 12.0, plain since 11.3) by base name and ABI
 * version, which also sees entry points not exported as symbols; dlsym of
 * the versioned symbol name when the driver has no cuGetProcAddress or
 * does not know the name. */
static void *proc_lookup(void *lib, get_proc_v1_t gp1, get_proc_v2_t gp2, int version,
                         const char *sym, const char *fallback)
{
    char base[64];
    snprintf(base, sizeof(base), "%s", sym);
    size_t n = strlen(base);
    if (n > 3 && strcmp(base + n - 3, "_v2") == 0)
        base[n - 3] = '\0';
    void *fn = NULL;
    if (version > 0) {
        CUresult r = CUDA_ERROR_INVALID_VALUE;
        int status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
        if (gp2 != NULL)
            r = gp2(base, &fn, version, 0 /* CU_GET_PROC_ADDRESS_DEFAULT */, &status);
        else if (gp1 != NULL)
            r = gp1(base, &fn, version, 0);
        if (r != CUDA_SUCCESS || status != 0)
            fn = NULL;
    }
    if (fn == NULL)
        fn = dlsym(lib, sym);
    if (fn == NULL && fallback != NULL)
        fn = dlsym(lib, fallback);
    return fn;
}

static void cuda_init_once(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        init_fail(TPX_ERR_NO_DEVICE, TPX_LOG_INFO, "no CUDA driver (libcuda.so.1 not found)");
        return;
    }
    get_proc_v1_t gp1 = NULL;
    get_proc_v2_t gp2 = NULL;
    void *p = dlsym(lib, "cuGetProcAddress_v2");
    if (p != NULL) {
        memcpy(&gp2, &p, sizeof(p));
    } else if ((p = dlsym(lib, "cuGetProcAddress")) != NULL) {
        memcpy(&gp1, &p, sizeof(p));
    }
    int version = 0;
    void *dv = dlsym(lib, "cuDriverGetVersion");
    if (dv != NULL) {
        CUresult (*get_version)(int *);
        memcpy(&get_version, &dv, sizeof(dv));
        if (get_version(&version) != CUDA_SUCCESS)
            version = 0;
    }
    version = TPX_MIN(version, TPX_CUDA_ABI_VERSION);
    tpx__cuda_api_t api;
    memset(&api, 0, sizeof(api));
    for (size_t i = 0; i < TPX_ARRAY_SIZE(cuda_syms); i++) {
        void *fn = proc_lookup(lib, gp1, gp2, version, cuda_syms[i].sym, cuda_syms[i].fallback);
        if (fn == NULL && cuda_syms[i].optional) {
            TPX_DEBUG("CUDA driver lacks %s (optional)", cuda_syms[i].sym);
            continue;
        }
        if (fn == NULL) {
            /* The library stays open: unloading a driver half set up is worse. */
            init_fail(TPX_ERR_CUDA, TPX_LOG_ERROR,
                      "CUDA driver too old or broken: libcuda.so.1 lacks %s", cuda_syms[i].sym);
            return;
        }
        /* POSIX guarantees that a data pointer from dlsym converts to a
         * function pointer; memcpy keeps ISO C quiet about it. */
        memcpy((char *)&api + cuda_syms[i].off, &fn, sizeof(fn));
    }
    TPX_DEBUG("CUDA entry points through %s (ABI %d)",
              gp2 ? "cuGetProcAddress_v2" : gp1 ? "cuGetProcAddress" : "dlsym", version);
    tpx__cu = api;

    CUresult r = tpx__cu.cuInit(0);
    if (r == CUDA_ERROR_NO_DEVICE) {
        init_fail(TPX_ERR_NO_DEVICE, TPX_LOG_INFO, "no CUDA device");
        return;
    }
    if (r != CUDA_SUCCESS) {
        /* No usable GPU either, but worth a louder line: the driver is there. */
        init_fail(TPX_ERR_NO_DEVICE, TPX_LOG_WARN, "no CUDA device: cuInit failed with %s (%d)",
                  tpx__cuda_error_name(r), (int)r);
        return;
    }
    int n = 0;
    if (tpx__cu.cuDeviceGetCount(&n) != CUDA_SUCCESS || n <= 0) {
        init_fail(TPX_ERR_NO_DEVICE, TPX_LOG_INFO, "no CUDA device");
        return;
    }
    if (tpx__cu.cuDriverGetVersion(&driver_version) != CUDA_SUCCESS)
        driver_version = 0;
    device_count = TPX_MIN(n, TPX_CUDA_MAX_DEVICES);
    init_status = TPX_OK;
    TPX_DEBUG("CUDA driver %d.%d, %d device(s)", driver_version / 1000,
              (driver_version % 1000) / 10, device_count);
}

tpx_status_t tpx__cuda_init(void)
{
    pthread_once(&init_once, cuda_init_once);
    return init_status;
}

const char *tpx__cuda_error_reason(void)
{
    return init_reason;
}

int tpx__cuda_device_count(void)
{
    return init_status == TPX_OK ? device_count : 0;
}

int tpx__cuda_driver_version(void)
{
    return init_status == TPX_OK ? driver_version : 0;
}

/* ---- devices -------------------------------------------------------------------------- */

static tpx_status_t check_dev(int dev, const char *what)
{
    if (init_status != TPX_OK) {
        TPX_ERROR("%s: CUDA is not initialised (%s)", what,
                  init_reason[0] ? init_reason : "tpx__cuda_init not called");
        return TPX_ERR_NO_DEVICE;
    }
    if (dev < 0 || dev >= device_count) {
        TPX_ERROR("%s: no CUDA device %d (%d present)", what, dev, device_count);
        return TPX_ERR_INVALID_ARG;
    }
    return TPX_OK;
}

tpx_status_t tpx__cuda_device_name(int dev, char *buf, size_t len)
{
    tpx_status_t st = check_dev(dev, "cuda device name");
    if (st < 0)
        return st;
    CUdevice d;
    TPX_CHECK_GOTO(TPX_CU(cuDeviceGet, &d, dev), st, out);
    TPX_CHECK_GOTO(TPX_CU(cuDeviceGetName, buf, (int)TPX_MIN(len, 1024), d), st, out);
out:
    return st;
}

tpx_status_t tpx__cuda_device_pci_bus_id(int dev, char *buf, size_t len)
{
    tpx_status_t st = check_dev(dev, "cuda pci bus id");
    if (st < 0)
        return st;
    if (len < 16) {
        TPX_ERROR("cuda pci bus id: buffer of %zu bytes is too small", len);
        return TPX_ERR_INVALID_ARG;
    }
    CUdevice d;
    char id[64];
    TPX_CHECK_GOTO(TPX_CU(cuDeviceGet, &d, dev), st, out);
    TPX_CHECK_GOTO(TPX_CU(cuDeviceGetPCIBusId, id, (int)sizeof(id), d), st, out);
    /* The driver spells "0000:3B:00.0"; sysfs spells "0000:3b:00.0". */
    size_t i = 0;
    for (; id[i] && i < len - 1; i++)
        buf[i] = (char)tolower((unsigned char)id[i]);
    buf[i] = '\0';
out:
    return st;
}

tpx_status_t tpx__cuda_device_attr(int dev, int attr, int *out)
{
    tpx_status_t st = check_dev(dev, "cuda device attribute");
    if (st < 0)
        return st;
    CUdevice d;
    int v = 0;
    TPX_CHECK_GOTO(TPX_CU(cuDeviceGet, &d, dev), st, done);
    TPX_CHECK_GOTO(TPX_CU(cuDeviceGetAttribute, &v, attr, d), st, done);
    *out = v;
done:
    return st;
}

/* ---- primary contexts ----------------------------------------------------------------- */

tpx_status_t tpx__cuda_ctx_retain(int dev, CUcontext *out)
{
    tpx_status_t st = check_dev(dev, "cuda context retain");
    if (st < 0)
        return st;
    pthread_mutex_lock(&ctx_lock);
    if (ctx_table[dev].refs == 0) {
        CUdevice d;
        CUcontext ctx = NULL;
        TPX_CHECK_GOTO(TPX_CU(cuDeviceGet, &d, dev), st, out_unlock);
        TPX_CHECK_GOTO(TPX_CU(cuDevicePrimaryCtxRetain, &ctx, d), st, out_unlock);
        ctx_table[dev].ctx = ctx;
        TPX_DEBUG("cuda device %d: primary context %p retained", dev, (void *)ctx);
    }
    ctx_table[dev].refs++;
    if (out)
        *out = ctx_table[dev].ctx;
out_unlock:
    pthread_mutex_unlock(&ctx_lock);
    return st;
}

void tpx__cuda_ctx_release(int dev)
{
    if (init_status != TPX_OK || dev < 0 || dev >= device_count) {
        TPX_WARN("cuda context release: no CUDA device %d", dev);
        return;
    }
    pthread_mutex_lock(&ctx_lock);
    if (ctx_table[dev].refs <= 0) {
        TPX_WARN("cuda device %d: primary context released more often than retained", dev);
    } else if (--ctx_table[dev].refs == 0) {
        CUdevice d;
        if (TPX_CU(cuDeviceGet, &d, dev) == TPX_OK &&
            TPX_CU(cuDevicePrimaryCtxRelease, d) == TPX_OK)
            TPX_DEBUG("cuda device %d: primary context released", dev);
        ctx_table[dev].ctx = NULL;
    }
    pthread_mutex_unlock(&ctx_lock);
}

/* Set by tpx__cuda_thread_own(): contexts are switched on this thread, not pushed. */
static _Thread_local int tl_owned;

void tpx__cuda_thread_own(void)
{
    tl_owned = 1;
}

tpx_status_t tpx__cuda_ctx_enter(int dev, int *pushed)
{
    *pushed = 0;
    if (TPX_UNLIKELY(dev < 0 || dev >= TPX_CUDA_MAX_DEVICES || ctx_table[dev].ctx == NULL)) {
        TPX_ERROR("cuda device %d: primary context not retained", dev);
        return TPX_ERR_INVALID_STATE;
    }
    CUcontext cur = NULL;
    tpx_status_t st = TPX_CU(cuCtxGetCurrent, &cur);
    if (st < 0 || cur == ctx_table[dev].ctx)
        return st;
    if (tl_owned) /* switched and left current: no caller's context to restore here */
        return TPX_CU(cuCtxSetCurrent, ctx_table[dev].ctx);
    st = TPX_CU(cuCtxPushCurrent, ctx_table[dev].ctx);
    if (st == TPX_OK)
        *pushed = 1;
    return st;
}

void tpx__cuda_ctx_leave(int pushed)
{
    if (pushed) {
        CUcontext popped;
        (void)TPX_CU(cuCtxPopCurrent, &popped);
    }
}

int tpx__cuda_app_current_device(void)
{
    /* A context can be current only where the driver is loaded already:
     * RTLD_NOLOAD keeps a host-memory engine on a GPU machine from paying
     * for dlopen and cuInit. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL)
        return -1;
    dlclose(lib); /* only the reference NOLOAD added */
    if (tpx__cuda_init() != TPX_OK)
        return -1;
    return tpx__cuda_ctx_current_device();
}

int tpx__cuda_ctx_current_device(void)
{
    CUcontext cur = NULL;
    CUdevice dev = -1;
    if (init_status != TPX_OK || tpx__cu.cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur == NULL ||
        tpx__cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

/* ---- memory ----------------------------------------------------------------------------- */

tpx_status_t tpx__cuda_mem_alloc(int dev, size_t size, tpx__cuda_mem_t *out)
{
    int pushed;
    CUdeviceptr p = 0;
    tpx_status_t st = tpx__cuda_ctx_enter(dev, &pushed);
    if (st < 0)
        return st;
    if (size == 0) {
        TPX_ERROR("cuda alloc: size 0");
        st = TPX_ERR_INVALID_ARG;
        goto out_leave;
    }
    /* cuMemAlloc aligns large allocations to 2 MiB in practice but promises
     * only 256 bytes; over-allocate only when the first try falls short. */
    TPX_CHECK_GOTO(TPX_CU(cuMemAlloc, &p, size), st, out_leave);
    if (p % TPX_CUDA_MEM_ALIGN != 0) {
        (void)TPX_CU(cuMemFree, p);
        p = 0;
        TPX_CHECK_GOTO(TPX_CU(cuMemAlloc, &p, size + TPX_CUDA_MEM_ALIGN), st, out_leave);
    }
    out->base = p;
    out->ptr = (p + TPX_CUDA_MEM_ALIGN - 1) & ~(CUdeviceptr)(TPX_CUDA_MEM_ALIGN - 1);
    out->size = size;
    out->dev = dev;
out_leave:
    tpx__cuda_ctx_leave(pushed);
    return st;
}

void tpx__cuda_mem_free(tpx__cuda_mem_t *m)
{
    if (m->base == 0)
        return;
    int pushed;
    if (tpx__cuda_ctx_enter(m->dev, &pushed) == TPX_OK) {
        (void)TPX_CU(cuMemFree, m->base);
        tpx__cuda_ctx_leave(pushed);
    }
    memset(m, 0, sizeof(*m));
}

tpx_status_t tpx__cuda_host_alloc(int dev, size_t size, void **host, CUdeviceptr *dev_ptr)
{
    int pushed;
    void *h = NULL;
    CUdeviceptr d = 0;
    tpx_status_t st = tpx__cuda_ctx_enter(dev, &pushed);
    if (st < 0)
        return st;
    TPX_CHECK_GOTO(
        TPX_CU(cuMemHostAlloc, &h, size, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE), st,
        out_leave);
    TPX_CHECK_GOTO(TPX_CU(cuMemHostGetDevicePointer, &d, h, 0), st, err_free);
    *host = h;
    if (dev_ptr)
        *dev_ptr = d;
    goto out_leave;
err_free:
    (void)TPX_CU(cuMemFreeHost, h);
out_leave:
    tpx__cuda_ctx_leave(pushed);
    return st;
}

void tpx__cuda_host_free(int dev, void *host)
{
    if (host == NULL)
        return;
    int pushed;
    if (tpx__cuda_ctx_enter(dev, &pushed) == TPX_OK) {
        (void)TPX_CU(cuMemFreeHost, host);
        tpx__cuda_ctx_leave(pushed);
    }
}

tpx_status_t tpx__cuda_ptr_device(const void *p, int *dev_out)
{
    if (init_status != TPX_OK) {
        TPX_ERROR("cuda pointer query: CUDA is not initialised");
        return TPX_ERR_NO_DEVICE;
    }
    unsigned int type = 0;
    int ordinal = -1;
    /* Memory CUDA does not know (malloc, stack) answers INVALID_VALUE: that
     * is an answer, not an error, so these calls bypass TPX_CU. */
    CUresult r = tpx__cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                               (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE) {
        *dev_out = -1;
        return TPX_OK;
    }
    r = tpx__cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                      (CUdeviceptr)(uintptr_t)p);
    *dev_out = r == CUDA_SUCCESS ? ordinal : -1;
    return TPX_OK;
}

/* ---- streams, events, modules -------------------------------------------------------- */

tpx_status_t tpx__cuda_stream_create(int dev, CUstream *out)
{
    int pushed;
    tpx_status_t st = tpx__cuda_ctx_enter(dev, &pushed);
    if (st < 0)
        return st;
    st = TPX_CU(cuStreamCreate, out, CU_STREAM_NON_BLOCKING);
    tpx__cuda_ctx_leave(pushed);
    return st;
}

void tpx__cuda_stream_destroy(int dev, CUstream s)
{
    int pushed;
    if (s == NULL || tpx__cuda_ctx_enter(dev, &pushed) < 0)
        return;
    (void)TPX_CU(cuStreamDestroy, s);
    tpx__cuda_ctx_leave(pushed);
}

tpx_status_t tpx__cuda_event_create(int dev, int timing, CUevent *out)
{
    int pushed;
    tpx_status_t st = tpx__cuda_ctx_enter(dev, &pushed);
    if (st < 0)
        return st;
    st = TPX_CU(cuEventCreate, out, timing ? 0u : (unsigned)CU_EVENT_DISABLE_TIMING);
    tpx__cuda_ctx_leave(pushed);
    return st;
}

void tpx__cuda_event_destroy(int dev, CUevent e)
{
    int pushed;
    if (e == NULL || tpx__cuda_ctx_enter(dev, &pushed) < 0)
        return;
    (void)TPX_CU(cuEventDestroy, e);
    tpx__cuda_ctx_leave(pushed);
}

tpx_status_t tpx__cuda_event_record(CUevent e, CUstream s)
{
    return TPX_CU(cuEventRecord, e, s);
}

tpx_status_t tpx__cuda_event_query(CUevent e)
{
    CUresult r = tpx__cu.cuEventQuery(e);
    if (r == CUDA_ERROR_NOT_READY)
        return TPX_INPROGRESS;
    return tpx__cuda_check(r, "cuEventQuery", __FILE__, __LINE__);
}

int tpx__cuda_can_write_value(int dev)
{
    int v = 0;
    CUdevice d;
    return init_status == TPX_OK && tpx__cu.cuStreamWriteValue64 != NULL && dev >= 0 &&
           dev < device_count && tpx__cu.cuDeviceGet(&d, dev) == CUDA_SUCCESS &&
           tpx__cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, d) ==
               CUDA_SUCCESS &&
           v == 1;
}

tpx_status_t tpx__cuda_stream_write_value(CUstream s, CUdeviceptr addr, uint64_t v)
{
    return TPX_CU(cuStreamWriteValue64, s, addr, v, CU_STREAM_WRITE_VALUE_DEFAULT);
}

tpx_status_t tpx__cuda_event_sync(CUevent e)
{
    return TPX_CU(cuEventSynchronize, e);
}

tpx_status_t tpx__cuda_module_load(int dev, const void *image, CUmodule *out)
{
    int pushed;
    tpx_status_t st = tpx__cuda_ctx_enter(dev, &pushed);
    if (st < 0)
        return st;
    st = TPX_CU(cuModuleLoadData, out, image);
    tpx__cuda_ctx_leave(pushed);
    return st;
}

void tpx__cuda_module_unload(int dev, CUmodule m)
{
    int pushed;
    if (m == NULL || tpx__cuda_ctx_enter(dev, &pushed) < 0)
        return;
    (void)TPX_CU(cuModuleUnload, m);
    tpx__cuda_ctx_leave(pushed);
}

tpx_status_t tpx__cuda_module_function(CUmodule m, const char *name, CUfunction *out)
{
    return TPX_CU(cuModuleGetFunction, out, m, name);
}
