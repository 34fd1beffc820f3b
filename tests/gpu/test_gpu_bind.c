/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_gpu_bind.c - which GPU and NICs an engine serves, and why.
 *
 * Run by binding.sh inside a network namespace with four NICs (eth1..eth4)
 * and a stand-in sysfs tree where GPU d shares a PCI switch with NIC
 * eth(d+1), over the stand-in CUDA driver with four devices (its
 * allocation log tells binding.sh which GPU every buffer went to). Public
 * API only; the test allocates device memory through the driver itself.
 *
 *   test_gpu_bind memory    two engines with no GPU given and no context
 *                           current register memory of GPU 3: both serve
 *                           GPU 3 on eth4; a READ between them is verified
 *   test_gpu_bind context   GPU 2 current at create: GPU 2 on eth3; memory
 *                           of GPU 1 registered before any peer rebinds to 1
 *   test_gpu_bind params    params.gpu = 1: eth2, and memory of GPU 3 is
 *                           refused under a devmem plugin (TPX_SOCK_TCPX),
 *                           taken by tpx's own transport otherwise and READ
 *                           into GPU 1 memory of another engine, verified
 *   test_gpu_bind claims    tpx_mem_register_gpu: a GPU that does not exist,
 *                           a GPU the memory is not on
 * Exit 77 with fewer than four CUDA devices.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/tpx_test.h"
#include "tpx/tpx.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static struct {
    CUresult (*init)(unsigned);
    CUresult (*count)(int *);
    CUresult (*retain)(void **, int);
    CUresult (*push)(void *);
    CUresult (*pop)(void **);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
} cu;

static int cuda_load(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL)
        return -1;
    static const char *const names[] = {"cuInit", "cuDeviceGetCount", "cuDevicePrimaryCtxRetain",
                                        "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2",
                                        "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2"};
    void **slots = (void **)&cu;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((slots[i] = dlsym(lib, names[i])) == NULL)
            return -1;
    int n = 0;
    return cu.init(0) == 0 && cu.count(&n) == 0 ? n : -1;
}

/* `ctx` of device `dev` current on this thread (push), or none (pop). */
static void ctx_push(int dev)
{
    void *ctx = NULL;
    if (cu.retain(&ctx, dev) != 0 || cu.push(ctx) != 0) {
        fprintf(stderr, "FAIL: cannot make GPU %d current\n", dev);
        exit(1);
    }
}

static void ctx_pop(void)
{
    void *ctx;
    (void)cu.pop(&ctx);
}

/* `len` bytes of device memory on `dev` holding pattern `seed`; no context
 * is left current. */
static void *gpu_alloc(int dev, size_t len, unsigned seed)
{
    CUdeviceptr p = 0;
    ctx_push(dev);
    unsigned char *h = malloc(len);
    for (size_t i = 0; i < len; i++)
        h[i] = (unsigned char)(i * 131u + seed);
    if (cu.alloc(&p, len) != 0 || cu.htod(p, h, len) != 0) {
        fprintf(stderr, "FAIL: cannot allocate %zu bytes on GPU %d\n", len, dev);
        exit(1);
    }
    free(h);
    ctx_pop();
    return (void *)(uintptr_t)p;
}

static int gpu_check(int dev, void *p, size_t len, unsigned seed)
{
    unsigned char *h = malloc(len);
    ctx_push(dev);
    int bad = cu.dtoh(h, (CUdeviceptr)(uintptr_t)p, len) != 0;
    ctx_pop();
    for (size_t i = 0; i < len && !bad; i++)
        bad = h[i] != (unsigned char)(i * 131u + seed);
    free(h);
    return bad;
}

static tpx_engine_t *engine_new(int gpu)
{
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.gpu = gpu;
    p.port = TPX_PORT_EPHEMERAL;
    p.bind_addr = "127.0.0.1";
    tpx_engine_t *e = NULL;
    tpx_status_t st = tpx_engine_create(&p, &e);
    if (st != TPX_OK) {
        fprintf(stderr, "FAIL: tpx_engine_create: %s\n", tpx_status_string(st));
        exit(1);
    }
    return e;
}

/* The engine serves `gpu` for reason `from` on the one NIC `nic`. */
static int expect_bound(tpx_engine_t *e, int gpu, int from, const char *nic)
{
    tpx_engine_info_t info;
    info.size = sizeof(info);
    CHECK_OK(tpx_engine_info(e, &info));
    test_say("engine: GPU %d (from %d), %d NIC(s), first %s (from %d)", info.gpu, info.gpu_from,
             info.nnics, info.nnics > 0 ? info.nic[0] : "-", info.nics_from);
    CHECK(info.gpu == gpu);
    CHECK(info.gpu_from == from);
    CHECK(info.nnics == 1 && strcmp(info.nic[0], nic) == 0);
    CHECK(info.nics_from == TPX_NICS_FROM_PCI);
    return 0;
}

static int devmem_plugin(void)
{
    const char *v = getenv("TPX_SOCK_TCPX");
    return v != NULL && v[0] != '\0' && v[0] != '0';
}

#define LEN (4u << 20)

static int test_memory(void)
{
    tpx_engine_t *owner = engine_new(-1), *req = engine_new(-1);
    tpx_engine_info_t info;
    info.size = sizeof(info);
    CHECK_OK(tpx_engine_info(owner, &info));
    CHECK(info.gpu == -1 && info.gpu_from == TPX_GPU_FROM_NONE);
    CHECK(info.nics_from == TPX_NICS_FROM_ALL && info.nnics == 4);

    void *src = gpu_alloc(3, LEN, 7), *dst = gpu_alloc(3, LEN, 0);
    tpx_region_t *rs, *rd;
    CHECK_OK(tpx_mem_register(owner, src, LEN, TPX_MEM_CUDA, &rs));
    CHECK_OK(tpx_mem_register_gpu(req, dst, LEN, 3, &rd));
    CHECK(expect_bound(owner, 3, TPX_GPU_FROM_MEMORY, "eth4") == 0);
    CHECK(expect_bound(req, 3, TPX_GPU_FROM_MEMORY, "eth4") == 0);

    tpx_rdesc_t desc;
    CHECK_OK(tpx_region_export(rs, 0, LEN, &desc));
    unsigned char md[TPX_METADATA_MAX];
    size_t mdlen = sizeof(md);
    CHECK_OK(tpx_engine_get_metadata(owner, md, &mdlen));
    tpx_remote_t *r;
    CHECK_OK(tpx_remote_load(req, md, mdlen, &r));
    tpx_iov_t iov = {rd, 0, &desc, 0, LEN};
    for (int round = 0; round < 3; round++) {
        tpx_xfer_t *x;
        CHECK_OK(tpx_rma(r, TPX_OP_READ, &iov, 1, NULL, 0, &x));
        CHECK_OK(tpx_xfer_wait(x, 30000, NULL));
        tpx_xfer_release(x);
    }
    CHECK(gpu_check(3, dst, LEN, 7) == 0);
    /* Bound for good now that a peer exists: other memory does not rebind. */
    CHECK(expect_bound(req, 3, TPX_GPU_FROM_MEMORY, "eth4") == 0);
    tpx_remote_release(r);
    tpx_mem_deregister(rd);
    tpx_mem_deregister(rs);
    tpx_engine_destroy(req);
    tpx_engine_destroy(owner);
    return test_failed();
}

static int test_context(void)
{
    ctx_push(2);
    tpx_engine_t *e = engine_new(-1);
    ctx_pop();
    CHECK(expect_bound(e, 2, TPX_GPU_FROM_CONTEXT, "eth3") == 0);
    void *m = gpu_alloc(1, LEN, 1);
    tpx_region_t *r;
    CHECK_OK(tpx_mem_register(e, m, LEN, TPX_MEM_CUDA, &r));
    CHECK(expect_bound(e, 1, TPX_GPU_FROM_MEMORY, "eth2") == 0);
    tpx_mem_deregister(r);
    tpx_engine_destroy(e);
    return test_failed();
}

static int test_params(void)
{
    tpx_engine_t *e = engine_new(1);
    CHECK(expect_bound(e, 1, TPX_GPU_FROM_PARAMS, "eth2") == 0);
    void *m = gpu_alloc(3, LEN, 1);
    tpx_region_t *r = NULL;
    tpx_status_t st = tpx_mem_register(e, m, LEN, TPX_MEM_CUDA, &r);
    test_say("memory of GPU 3 on an engine of GPU 1: %s", tpx_status_string(st));
    if (devmem_plugin()) {
        CHECK(st == TPX_ERR_UNSUPPORTED && r == NULL);
        CHECK(expect_bound(e, 1, TPX_GPU_FROM_PARAMS, "eth2") == 0);
        tpx_engine_destroy(e);
        return test_failed();
    }
    /* tpx's own transport moves memory of any GPU: a READ from GPU 3
     * memory of the engine of GPU 1 into GPU 1 memory of another. */
    CHECK_OK(st);
    CHECK(expect_bound(e, 1, TPX_GPU_FROM_PARAMS, "eth2") == 0);
    tpx_engine_t *req = engine_new(1);
    void *dst = gpu_alloc(1, LEN, 0);
    tpx_region_t *rd;
    CHECK_OK(tpx_mem_register(req, dst, LEN, TPX_MEM_CUDA, &rd));
    tpx_rdesc_t desc;
    CHECK_OK(tpx_region_export(r, 0, LEN, &desc));
    unsigned char md[TPX_METADATA_MAX];
    size_t mdlen = sizeof(md);
    CHECK_OK(tpx_engine_get_metadata(e, md, &mdlen));
    tpx_remote_t *rem;
    CHECK_OK(tpx_remote_load(req, md, mdlen, &rem));
    tpx_iov_t iov = {rd, 0, &desc, 0, LEN};
    tpx_xfer_t *x;
    CHECK_OK(tpx_rma(rem, TPX_OP_READ, &iov, 1, NULL, 0, &x));
    CHECK_OK(tpx_xfer_wait(x, 30000, NULL));
    tpx_xfer_release(x);
    CHECK(gpu_check(1, dst, LEN, 1) == 0);
    tpx_remote_release(rem);
    tpx_mem_deregister(rd);
    tpx_mem_deregister(r);
    tpx_engine_destroy(req);
    tpx_engine_destroy(e);
    return test_failed();
}

static int test_claims(void)
{
    tpx_engine_t *e = engine_new(-1);
    void *m = gpu_alloc(3, LEN, 1);
    tpx_region_t *r = NULL;
    CHECK(tpx_mem_register_gpu(e, m, LEN, 9, &r) == TPX_ERR_NO_DEVICE && r == NULL);
    CHECK(tpx_mem_register_gpu(e, m, LEN, -1, &r) == TPX_ERR_NO_DEVICE && r == NULL);
    CHECK(tpx_mem_register_gpu(e, m, LEN, 1, &r) == TPX_ERR_INVALID_ARG && r == NULL);
    void *host = aligned_alloc(4096, 4096);
    CHECK(tpx_mem_register_gpu(e, host, 4096, 0, &r) == TPX_ERR_INVALID_ARG); /* not GPU memory */
    free(host);
    /* none of the refused ones bound the engine */
    tpx_engine_info_t info;
    info.size = sizeof(info);
    CHECK_OK(tpx_engine_info(e, &info));
    CHECK(info.gpu == -1 && info.gpu_from == TPX_GPU_FROM_NONE);
    CHECK_OK(tpx_mem_register_gpu(e, m, LEN, 3, &r));
    CHECK(expect_bound(e, 3, TPX_GPU_FROM_MEMORY, "eth4") == 0);
    tpx_mem_deregister(r);
    tpx_engine_destroy(e);
    return test_failed();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s memory|context|params|claims\n", argv[0]);
        return 2;
    }
    int n = cuda_load();
    if (n < 4) {
        printf("SKIPPED: needs a CUDA driver with 4 devices (%d)\n", n);
        return 77;
    }
    test_set_tag("%s", argv[1]);
    if (strcmp(argv[1], "memory") == 0)
        return test_memory();
    if (strcmp(argv[1], "context") == 0)
        return test_context();
    if (strcmp(argv[1], "params") == 0)
        return test_params();
    if (strcmp(argv[1], "claims") == 0)
        return test_claims();
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
