/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda.h - the CUDA driver API, loaded at run time.
 *
 * tpx never links libcuda or libcudart: tpx__cuda_init() dlopen()s
 * "libcuda.so.1" once per process and resolves the functions below into one
 * table, tpx__cu, taking the versioned symbol (cuMemAlloc_v2, ...) that
 * cuda.h would have chosen. Without a driver or a device it returns
 * TPX_ERR_NO_DEVICE and says why in tpx__cuda_error_reason(); nothing else
 * in this module may be called then. The few CUDA types and constants tpx
 * needs are declared here, so that no CUDA header is needed to build tpx.
 *
 * Every driver call goes through TPX_CU(fn, args...), which converts the
 * CUresult to a tpx_status_t and logs a failure once, at the caller's
 * file:line, with the function and the driver's error name.
 *
 * Primary contexts are reference-counted per device by tpx: the first
 * tpx__cuda_ctx_retain(dev) retains the driver's primary context, the last
 * tpx__cuda_ctx_release(dev) releases it. The helpers that take a device
 * make its primary context current for the duration of the call (and
 * restore whatever was current before); they need it retained.
 */
#ifndef TPX_GPU_CUDA_H
#define TPX_GPU_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "tpx/ncclnet.h"

/* ---- the CUDA types and constants tpx uses (values from cuda.h) ---------- */
#ifndef __cuda_cuda_h__
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 */
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef int CUdevice_attribute;
typedef int CUpointer_attribute;

#define CUDA_SUCCESS               0
#define CUDA_ERROR_INVALID_VALUE   1
#define CUDA_ERROR_OUT_OF_MEMORY   2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE       100
#define CUDA_ERROR_INVALID_DEVICE  101
#define CUDA_ERROR_NOT_READY       600

#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT     16
#define CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY      19
#define CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING       41
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

#define CU_POINTER_ATTRIBUTE_CONTEXT        1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE    2
#define CU_POINTER_ATTRIBUTE_HOST_POINTER   4
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_HOST                  0x01
#define CU_MEMORYTYPE_DEVICE                0x02

#define CU_MEMHOSTALLOC_PORTABLE  0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_STREAM_NON_BLOCKING    0x1
#define CU_EVENT_DISABLE_TIMING   0x2

#define CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS 122
#define CU_STREAM_WRITE_VALUE_DEFAULT                     0x0
#endif

/* Devices tpx keeps per-device state for. */
#define TPX_CUDA_MAX_DEVICES 64
/* Alignment of tpx__cuda_mem_alloc() (TCPX's regMr needs 4096). */
#define TPX_CUDA_MEM_ALIGN 4096u

/*
 * The driver functions, one line each:
 *   X(field, return-and-parameters, symbol, fallback symbol or NULL)
 * `symbol` is the versioned name cuda.h maps the call to; `fallback` is
 * tried when an older driver lacks it. The field keeps the plain API name.
 */
#define TPX__CUDA_FUNCS(X)                                                                         \
    X(cuInit, (unsigned int flags), "cuInit", NULL)                                                \
    X(cuDriverGetVersion, (int *version), "cuDriverGetVersion", NULL)                              \
    X(cuGetErrorName, (CUresult err, const char **str), "cuGetErrorName", NULL)                    \
    X(cuGetErrorString, (CUresult err, const char **str), "cuGetErrorString", NULL)                \
    X(cuDeviceGet, (CUdevice * dev, int ordinal), "cuDeviceGet", NULL)                             \
    X(cuDeviceGetCount, (int *count), "cuDeviceGetCount", NULL)                                    \
    X(cuDeviceGetName, (char *name, int len, CUdevice dev), "cuDeviceGetName", NULL)               \
    X(cuDeviceGetAttribute, (int *v, CUdevice_attribute a, CUdevice dev), "cuDeviceGetAttribute",  \
      NULL)                                                                                        \
    X(cuDeviceGetPCIBusId, (char *id, int len, CUdevice dev), "cuDeviceGetPCIBusId", NULL)         \
    X(cuDevicePrimaryCtxRetain, (CUcontext * ctx, CUdevice dev), "cuDevicePrimaryCtxRetain", NULL) \
    X(cuDevicePrimaryCtxRelease, (CUdevice dev), "cuDevicePrimaryCtxRelease_v2",                   \
      "cuDevicePrimaryCtxRelease")                                                                 \
    X(cuCtxGetCurrent, (CUcontext * ctx), "cuCtxGetCurrent", NULL)                                 \
    X(cuCtxGetDevice, (CUdevice * dev), "cuCtxGetDevice", NULL)                                    \
    X(cuCtxPushCurrent, (CUcontext ctx), "cuCtxPushCurrent_v2", NULL)                              \
    X(cuCtxPopCurrent, (CUcontext * ctx), "cuCtxPopCurrent_v2", NULL)                              \
    X(cuCtxSetCurrent, (CUcontext ctx), "cuCtxSetCurrent", NULL)                                   \
    X(cuCtxSynchronize, (void), "cuCtxSynchronize", NULL)                                          \
    X(cuMemGetInfo, (size_t * free_bytes, size_t * total_bytes), "cuMemGetInfo_v2", NULL)          \
    X(cuMemAlloc, (CUdeviceptr * p, size_t size), "cuMemAlloc_v2", NULL)                           \
    X(cuMemFree, (CUdeviceptr p), "cuMemFree_v2", NULL)                                            \
    X(cuMemHostAlloc, (void **p, size_t size, unsigned int flags), "cuMemHostAlloc", NULL)         \
    X(cuMemFreeHost, (void *p), "cuMemFreeHost", NULL)                                             \
    X(cuMemHostGetDevicePointer, (CUdeviceptr * d, void *h, unsigned int flags),                   \
      "cuMemHostGetDevicePointer_v2", NULL)                                                        \
    X(cuMemcpyHtoD, (CUdeviceptr dst, const void *src, size_t n), "cuMemcpyHtoD_v2", NULL)         \
    X(cuMemcpyDtoH, (void *dst, CUdeviceptr src, size_t n), "cuMemcpyDtoH_v2", NULL)               \
    X(cuMemcpyDtoD, (CUdeviceptr dst, CUdeviceptr src, size_t n), "cuMemcpyDtoD_v2", NULL)         \
    X(cuMemcpyHtoDAsync, (CUdeviceptr dst, const void *src, size_t n, CUstream s),                 \
      "cuMemcpyHtoDAsync_v2", NULL)                                                                \
    X(cuMemcpyDtoHAsync, (void *dst, CUdeviceptr src, size_t n, CUstream s),                       \
      "cuMemcpyDtoHAsync_v2", NULL)                                                                \
    X(cuMemcpyDtoDAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),                 \
      "cuMemcpyDtoDAsync_v2", NULL)                                                                \
    X(cuMemsetD8, (CUdeviceptr dst, unsigned char v, size_t n), "cuMemsetD8_v2", NULL)             \
    X(cuMemsetD8Async, (CUdeviceptr dst, unsigned char v, size_t n, CUstream s),                   \
      "cuMemsetD8Async", NULL)                                                                     \
    X(cuStreamCreate, (CUstream * s, unsigned int flags), "cuStreamCreate", NULL)                  \
    X(cuStreamDestroy, (CUstream s), "cuStreamDestroy_v2", NULL)                                   \
    X(cuStreamSynchronize, (CUstream s), "cuStreamSynchronize", NULL)                              \
    X(cuStreamQuery, (CUstream s), "cuStreamQuery", NULL)                                          \
    X(cuEventCreate, (CUevent * e, unsigned int flags), "cuEventCreate", NULL)                     \
    X(cuEventDestroy, (CUevent e), "cuEventDestroy_v2", NULL)                                      \
    X(cuEventRecord, (CUevent e, CUstream s), "cuEventRecord", NULL)                               \
    X(cuEventQuery, (CUevent e), "cuEventQuery", NULL)                                             \
    X(cuEventSynchronize, (CUevent e), "cuEventSynchronize", NULL)                                 \
    X(cuEventElapsedTime, (float *ms, CUevent start, CUevent end), "cuEventElapsedTime_v2",        \
      "cuEventElapsedTime")                                                                        \
    X(cuModuleLoadData, (CUmodule * m, const void *image), "cuModuleLoadData", NULL)               \
    X(cuModuleUnload, (CUmodule m), "cuModuleUnload", NULL)                                        \
    X(cuModuleGetFunction, (CUfunction * f, CUmodule m, const char *name), "cuModuleGetFunction",  \
      NULL)                                                                                        \
    X(cuLaunchKernel,                                                                              \
      (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,           \
       unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,            \
       void **extra),                                                                              \
      "cuLaunchKernel", NULL)                                                                      \
    X(cuPointerGetAttribute, (void *data, CUpointer_attribute a, CUdeviceptr p),                   \
      "cuPointerGetAttribute", NULL)

/* Functions tpx can do without: NULL in the table when the driver lacks
 * them (callers check, and take another way). */
#define TPX__CUDA_OPT_FUNCS(X)                                                                     \
    X(cuStreamWriteValue64, (CUstream s, CUdeviceptr addr, uint64_t v, unsigned int flags),        \
      "cuStreamWriteValue64_v2", "cuStreamWriteValue64")

/* The resolved table; valid once tpx__cuda_init() has returned TPX_OK. */
typedef struct {
#define TPX__CUDA_FIELD(name, params, sym, fallback) CUresult(*name) params;
    TPX__CUDA_FUNCS(TPX__CUDA_FIELD)
    TPX__CUDA_OPT_FUNCS(TPX__CUDA_FIELD)
#undef TPX__CUDA_FIELD
} tpx__cuda_api_t;

extern tpx__cuda_api_t tpx__cu;

/* Call driver function `fn` through the table and convert its result; a
 * failure is logged once here, with the caller's file:line. */
#define TPX_CU(fn, ...) tpx__cuda_check(tpx__cu.fn(__VA_ARGS__), #fn, __FILE__, __LINE__)

/* CUDA_SUCCESS -> TPX_OK; CUDA_ERROR_OUT_OF_MEMORY -> TPX_ERR_NO_MEMORY;
 * no device / invalid device -> TPX_ERR_NO_DEVICE; anything else ->
 * TPX_ERR_CUDA. Logs "<call> failed: <CUDA_ERROR_NAME> (<text>)" on error. */
tpx_status_t tpx__cuda_check(CUresult r, const char *call, const char *file, int line);

/* The driver's name for `r` ("CUDA_ERROR_OUT_OF_MEMORY"); never NULL. */
const char *tpx__cuda_error_name(CUresult r);

/* ---- driver and devices ----------------------------------------------------- */

/* Load libcuda.so.1, resolve the table, cuInit(0), count devices. Runs once
 * per process (later calls return the first result). TPX_ERR_NO_DEVICE when
 * there is no driver or no device (logged at info level: whether that is an
 * error is the caller's decision), TPX_ERR_CUDA when the driver is unusable
 * (a missing symbol, a failing cuInit). */
tpx_status_t tpx__cuda_init(void);

/* Why tpx__cuda_init() failed ("no CUDA driver (libcuda.so.1 not found)",
 * "no CUDA device", ...), or "" when it succeeded or has not run. */
const char *tpx__cuda_error_reason(void);

/* Devices visible to the driver (0 before a successful init). */
int tpx__cuda_device_count(void);

/* The driver's version as 1000 * major + 10 * minor (13000 for 13.0). */
int tpx__cuda_driver_version(void);

/* The device's marketing name ("NVIDIA H100 80GB HBM3"). */
tpx_status_t tpx__cuda_device_name(int dev, char *buf, size_t len);

/* The device's PCI address in sysfs spelling, lower case
 * ("0000:3b:00.0"), so it can be matched against /sys/bus/pci/devices.
 * `len` >= 16. */
tpx_status_t tpx__cuda_device_pci_bus_id(int dev, char *buf, size_t len);

/* One integer attribute of a device (CU_DEVICE_ATTRIBUTE_*). */
tpx_status_t tpx__cuda_device_attr(int dev, int attr, int *out);

/* ---- primary contexts ----------------------------------------------------------- */

/* Retain `dev`'s primary context (the driver's retain happens on tpx's
 * first reference only). `*out` may be NULL. */
tpx_status_t tpx__cuda_ctx_retain(int dev, CUcontext *out);

/* Drop one tpx reference; the last one releases the driver's primary
 * context (which frees everything allocated in it if nobody else holds
 * it). Warns on an unbalanced release. */
void tpx__cuda_ctx_release(int dev);

/* Make `dev`'s (retained) primary context current on this thread unless it
 * already is. `*pushed` tells tpx__cuda_ctx_leave() whether to pop. Cheap:
 * one thread-local read when the context is already current. On a thread
 * marked by tpx__cuda_thread_own() the context is made current and left
 * there (*pushed = 0): the next enter for the same device costs only that
 * read, not a push and a pop. */
tpx_status_t tpx__cuda_ctx_enter(int dev, int *pushed);
void tpx__cuda_ctx_leave(int pushed);

/* Mark the calling thread as one that tpx created and that runs only tpx
 * code (the transport's I/O workers), so that no caller's current context
 * is there to keep: tpx__cuda_ctx_enter then switches contexts on it
 * instead of pushing and popping one per call (two driver calls, under
 * the driver's locks, on every turn of a busy connection). There
 * tpx__cuda_ctx_leave restores nothing: code on such a thread must enter
 * the context it needs before each driver call, never rely on an outer
 * enter surviving an inner one for another device. */
void tpx__cuda_thread_own(void);

/* The device of the context current on this thread, or -1 if none is (or
 * CUDA is not initialised). */
int tpx__cuda_ctx_current_device(void);

/* The same for a thread of an application that uses CUDA: -1 at once,
 * without loading the driver, when the process has not loaded libcuda.so.1
 * (then no context can be current); else initialises tpx's table and asks. */
int tpx__cuda_app_current_device(void);

/* ---- memory --------------------------------------------------------------------- */

/* A device allocation whose address is TPX_CUDA_MEM_ALIGN-aligned. */
typedef struct {
    CUdeviceptr ptr;  /* aligned address handed out */
    CUdeviceptr base; /* what cuMemAlloc returned (freed) */
    size_t size;      /* usable bytes at ptr */
    int dev;
} tpx__cuda_mem_t;

/* Allocate `size` bytes of device memory on `dev`, 4 KiB aligned. */
tpx_status_t tpx__cuda_mem_alloc(int dev, size_t size, tpx__cuda_mem_t *out);
/* Free it (a zeroed tpx__cuda_mem_t is ignored); zeroes `*m`. */
void tpx__cuda_mem_free(tpx__cuda_mem_t *m);

/* Page-locked host memory mapped into every context's device address space
 * (CU_MEMHOSTALLOC_DEVICEMAP | PORTABLE). `*host` is the CPU address,
 * `*dev_ptr` (may be NULL) the address kernels on `dev` use. */
tpx_status_t tpx__cuda_host_alloc(int dev, size_t size, void **host, CUdeviceptr *dev_ptr);
void tpx__cuda_host_free(int dev, void *host);

/* Where `p` lives: `*dev_out` = the device ordinal for device memory, -1
 * for host memory (pageable or pinned) and for addresses CUDA does not
 * know. Fails only when the driver is not initialised. */
tpx_status_t tpx__cuda_ptr_device(const void *p, int *dev_out);

/* ---- a net plugin's device memory, seen from the host (devmem.c) ---------------- */
/*
 * A devmem plugin (GPUDirect-TCPX, the built-in transport's strict mode)
 * hands out addresses that are DEVICE memory: its device handle (the
 * 24-byte {meta, bounce_buf, head}, cuMemAlloc memory in Google's plugin)
 * and its bounce buffer (the rx dmabuf). The CPU must never dereference
 * them. These functions are the only way tpx reads them on the host; they
 * work with and without a GPU:
 *  - CUDA device memory: cuMemcpyDtoH in the owning device's primary
 *    context (retained for the call);
 *  - anything else (host memory, or the strict mode's emulated device
 *    memory on a machine without a GPU, which is mapped PROT_NONE so that
 *    a CPU read faults): a pread() of /proc/self/mem, which the kernel
 *    serves through the page tables without the mapping's protection.
 * They are synchronous and meant for set-up and for rare paths (a receive
 * into host memory that a plugin left in its bounce buffer).
 */

/* Copy `len` bytes at device address `src` to host memory `dst`. */
tpx_status_t tpx__cuda_devmem_read(void *dst, const void *src, size_t len);

/* Copy the fragments {src_off, len, dst_off} of a bounce buffer (a device
 * address) into host memory `dst`, one copy per fragment (the d2h "host"
 * unpack). Every fragment is taken as checked by the caller. */
tpx_status_t tpx__cuda_devmem_gather(void *dst, const void *bounce,
                                     const tpx_nccl_load_meta_t *frags, uint64_t nfrags);

/* The CPU address of `dptr`, a device address of host memory mapped for
 * the GPU (what cuMemHostGetDevicePointer gives; TCPX's netUnpackMeta).
 * With a GPU the driver is asked (CU_POINTER_ATTRIBUTE_HOST_POINTER): under
 * unified addressing the two are equal, but tpx does not assume it. An
 * address CUDA does not know (no GPU, or plain host memory) is its own CPU
 * address. TPX_ERR_INVALID_ARG if `dptr` is GPU memory (not host-mapped). */
tpx_status_t tpx__cuda_host_view(const void *dptr, const void **host);

/* ---- streams, events, modules ---------------------------------------------------- */

/* A non-blocking stream in `dev`'s primary context. */
tpx_status_t tpx__cuda_stream_create(int dev, CUstream *out);
void tpx__cuda_stream_destroy(int dev, CUstream s);

/* An event in `dev`'s primary context; `timing` = 0 creates it with
 * CU_EVENT_DISABLE_TIMING (cheaper, what completion tracking wants). */
tpx_status_t tpx__cuda_event_create(int dev, int timing, CUevent *out);
void tpx__cuda_event_destroy(int dev, CUevent e);
tpx_status_t tpx__cuda_event_record(CUevent e, CUstream s);
/* TPX_OK once the work before the event is done, TPX_INPROGRESS before
 * (never logged), an error otherwise. Never blocks. */
tpx_status_t tpx__cuda_event_query(CUevent e);

/* Whether work on device `dev`'s streams can write a value to host-mapped
 * memory when it gets there (cuStreamWriteValue64: the driver has it and
 * the device supports 64-bit stream memory operations). */
int tpx__cuda_can_write_value(int dev);
/* Queue on `s`: once the work queued before it has finished, write `v` to
 * the 8 bytes at device address `addr` (host-mapped memory, from
 * tpx__cuda_host_alloc's dev_ptr), writes of that work visible first. A
 * CPU that loads `v` there (acquire) knows that work is done without a
 * driver call. Only where tpx__cuda_can_write_value(). */
tpx_status_t tpx__cuda_stream_write_value(CUstream s, CUdeviceptr addr, uint64_t v);
tpx_status_t tpx__cuda_event_sync(CUevent e);

/* Load a cubin/PTX/fatbin image held in memory into `dev`'s primary
 * context (the driver copies it; `image` may go away afterwards). */
tpx_status_t tpx__cuda_module_load(int dev, const void *image, CUmodule *out);
void tpx__cuda_module_unload(int dev, CUmodule m);
tpx_status_t tpx__cuda_module_function(CUmodule m, const char *name, CUfunction *out);

#endif
