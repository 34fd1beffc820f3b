/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_netload.c - the loader (src/net) against stand-in plugins
 * (fake_net.c), one scenario per process:
 *   newer       a plugin exporting ncclNetPlugin_v13 and _v12 is driven
 *               through v12, and the log says why; its v12 properties
 *               (rail, plane, multi-request size) reach the engine's view
 *   only_newer  a plugin exporting only ncclNetPlugin_v13 is refused,
 *               naming the version
 *   contexts    two clients of a v12 plugin get a context each, setNetAttr
 *               hears the flows, each close finalises its own
 *   engine      an engine on a v12 plugin: init at create, setNetAttr with
 *               its channel count, finalize at destroy
 *   ext         a plugin exporting the extension table (net_ext.h): the
 *               loader finds it by name and every wrapper uses it
 *   ext_bad     one whose extension table has a version tpx does not
 *               know: ignored, said in the log, and the plugin is driven as
 *               one without (as in newer)
 *   builtin     the built-in transport's table and extension are found
 *               through its symbol lookup, as a library's would be
 * usage: test_netload FAKE_V13_SO FAKE_V13ONLY_SO SCENARIO FAKE_EXT_SO FAKE_EXTBAD_SO
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "../common/tpx_test.h"
#include "net/net.h"
#include "tpx/log.h"
#include "tpx/tpx.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];

static void log_keep(void *arg, tpx_log_level_t level, const char *line)
{
    (void)arg, (void)level;
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof(log_text) - n, "%s\n", line);
    pthread_mutex_unlock(&log_lock);
    fprintf(stderr, "%s\n", line);
}

static int logged(const char *what)
{
    pthread_mutex_lock(&log_lock);
    int yes = strstr(log_text, what) != NULL;
    pthread_mutex_unlock(&log_lock);
    return yes;
}

typedef void (*counts_fn)(int *, int *, int *, int *, int *);
typedef struct {
    int init, final, live, flows, bad;
} counts_t;

static int counts(const char *so, counts_t *c)
{
    void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL); /* the loader's handle, counted once more */
    CHECK(dl != NULL, "dlopen(%s): %s", so, dlerror());
    counts_fn fn = (counts_fn)dlsym(dl, "fake_net_counts");
    CHECK(fn != NULL, "no fake_net_counts in %s", so);
    fn(&c->init, &c->final, &c->live, &c->flows, &c->bad);
    dlclose(dl);
    return 0;
}

/* A plugin without a usable extension table: ncclNet only (the engine polls,
 * makes ordinary comms, sends messages whole, keeps its handles opaque, and
 * guards every call against SIGPIPE). */
static int no_ext(tpx_net_t *n)
{
    CHECK(n->ext == NULL, "an extension table was found");
    CHECK_EQ(tpx__net_set_wake(n, NULL, NULL), 0);
    CHECK_EQ(tpx__net_has_vec(n), 0);
    CHECK_EQ(tpx__net_max_requests(n), 0);
    CHECK_EQ(tpx__net_keeps_gpu(n), 0);
    CHECK_EQ(tpx__net_reads_handles(n), 0);
    unsigned char handle[TPX_NCCL_NET_HANDLE_MAXSIZE] = {'F'};
    struct sockaddr_storage a[1];
    CHECK_EQ(tpx__net_handle_addrs(n, handle, a, 1), -1);
    CHECK_EQ(n->sigpipe, 1);
    return 0;
}

static int t_newer(const char *so)
{
    tpx_net_t *n = NULL;
    CHECK_OK(tpx__net_open(so, 7, &n));
    CHECK_EQ(n->abi, 12);
    CHECK_EQ(n->newer, 13);
    CHECK(logged("exports ncclNetPlugin_v13, newer than this tpx knows") &&
              logged("driving it through ncclNetPlugin_v12"),
          "the log does not say that v13 was passed over for v12");
    tpx_net_props_t p;
    CHECK_OK(tpx__net_props(n, 0, &p));
    CHECK(strcmp(p.name, "fake0") == 0, "device 0 is %s", p.name);
    CHECK_EQ(p.rail_id, 3);
    CHECK_EQ(p.plane_id, 1);
    CHECK_EQ(p.max_multi_request, 4);
    CHECK_EQ(p.nmembers, 1);
    CHECK_EQ(tpx__net_vdev_max(n), 0); /* the stand-in has no makeVDevice */
    TRY(no_ext(n));
    tpx__net_close(n);
    counts_t c;
    TRY(counts(so, &c));
    CHECK_EQ(c.bad, 0);
    CHECK_EQ(c.live, 0);
    return 0;
}

static int t_only_newer(const char *so)
{
    tpx_net_t *n = NULL;
    tpx_status_t st = tpx__net_open(so, 7, &n);
    CHECK(st == TPX_ERR_PLUGIN, "a plugin with only ncclNetPlugin_v13: %s", tpx_status_string(st));
    CHECK(n == NULL, "a refused plugin was returned");
    CHECK(logged("exports ncclNetPlugin_v13, newer than this tpx knows, and none of "
                 "ncclNetPlugin_v7..v12"),
          "the refusal does not name the version");
    counts_t c;
    TRY(counts(so, &c));
    CHECK_EQ(c.init, 0);
    CHECK_EQ(c.bad, 0);
    return 0;
}

static int t_contexts(const char *so)
{
    tpx_net_t *a = NULL, *b = NULL;
    CHECK_OK(tpx__net_open(so, 1, &a));
    CHECK_OK(tpx__net_open(so, 2, &b));
    CHECK(a != b && a->ctx != NULL && b->ctx != NULL && a->ctx != b->ctx,
          "two clients share %p/%p (contexts %p/%p)", (void *)a, (void *)b, a->ctx, b->ctx);
    CHECK_EQ(a->ndev, 1);
    CHECK_EQ(b->ndev, 1);
    CHECK_EQ(tpx__net_set_flows(a, 6), 0);
    counts_t c;
    TRY(counts(so, &c));
    CHECK_EQ(c.init, 2);
    CHECK_EQ(c.live, 2);
    CHECK_EQ(c.flows, 6);
    tpx__net_close(a);
    TRY(counts(so, &c));
    CHECK_EQ(c.final, 1);
    CHECK_EQ(c.live, 1);
    /* b still works after a's end. */
    tpx_net_props_t p;
    CHECK_OK(tpx__net_props(b, 0, &p));
    CHECK_EQ(tpx__net_set_flows(b, 3), 0);
    tpx__net_close(b);
    TRY(counts(so, &c));
    CHECK_EQ(c.final, 2);
    CHECK_EQ(c.live, 0);
    CHECK_EQ(c.flows, 3);
    CHECK_EQ(c.bad, 0);
    return 0;
}

static int t_engine(const char *so)
{
    tpx_engine_params_t prm;
    tpx_engine_params_init(&prm);
    prm.plugin = so;
    prm.port = TPX_PORT_NONE;
    prm.channels = 5;
    prm.bind_addr = "127.0.0.1";
    tpx_engine_t *e = NULL;
    CHECK_OK(tpx_engine_create(&prm, &e));
    counts_t c;
    TRY(counts(so, &c));
    CHECK_EQ(c.init, 1);
    CHECK_EQ(c.live, 1);
    CHECK_EQ(c.flows, 5);
    tpx_engine_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    CHECK_OK(tpx_engine_info(e, &info));
    CHECK_EQ(info.abi, 12);
    tpx_engine_destroy(e);
    TRY(counts(so, &c));
    CHECK_EQ(c.final, 1);
    CHECK_EQ(c.live, 0);
    CHECK_EQ(c.bad, 0);
    return 0;
}

typedef int (*wakes_fn)(void);

static int t_ext(const char *so)
{
    tpx_net_t *n = NULL;
    CHECK_OK(tpx__net_open(so, 7, &n));
    CHECK(n->ext != NULL, "the extension table of %s was not found", so);
    CHECK_EQ(n->abi, 12);
    CHECK_EQ(tpx__net_max_requests(n), 7);
    CHECK_EQ(n->sigpipe, 0);
    CHECK_EQ(tpx__net_keeps_gpu(n), 1);
    CHECK_EQ(tpx__net_has_vec(n), 0);
    struct iovec iov = {.iov_base = &iov, .iov_len = 1};
    void *req = NULL;
    CHECK(tpx__net_isendv(n, &iov, &iov, 1, &req) == TPX_ERR_UNSUPPORTED,
          "a vectored post went to a plugin that takes none");
    CHECK_EQ(tpx__net_vdev_max(n), 0); /* still no makeVDevice */
    tpx_net_wake_t w = {.fd = -1};
    int comm;
    CHECK_EQ(tpx__net_set_wake(n, NULL, NULL), 1);
    CHECK_EQ(tpx__net_set_wake(n, &comm, &w), 1);
    void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    CHECK(dl != NULL, "dlopen(%s): %s", so, dlerror());
    wakes_fn wakes = (wakes_fn)dlsym(dl, "fake_net_wakes");
    CHECK(wakes != NULL && wakes() == 1, "comm_set_wake was not called once");
    dlclose(dl);
    CHECK_EQ(tpx__net_reads_handles(n), 1);
    unsigned char handle[TPX_NCCL_NET_HANDLE_MAXSIZE] = {'F'};
    struct sockaddr_storage a[TPX_NET_EXT_HANDLE_ADDRS_MAX];
    CHECK_EQ(tpx__net_handle_addrs(n, handle, a, TPX_NET_EXT_HANDLE_ADDRS_MAX), 1);
    const struct sockaddr_in *in = (const struct sockaddr_in *)&a[0];
    CHECK(in->sin_family == AF_INET && ntohl(in->sin_addr.s_addr) == 0xc0000201u &&
              ntohs(in->sin_port) == 9,
          "the handle's address did not travel");
    handle[0] = 'X';
    CHECK_EQ(tpx__net_handle_addrs(n, handle, a, TPX_NET_EXT_HANDLE_ADDRS_MAX), -1);
    tpx__net_close(n);
    counts_t c;
    TRY(counts(so, &c));
    CHECK_EQ(c.bad, 0);
    CHECK_EQ(c.live, 0);
    return 0;
}

static int t_ext_bad(const char *so)
{
    tpx_net_t *n = NULL;
    CHECK_OK(tpx__net_open(so, 7, &n));
    CHECK(logged("tpxNetExt_v1 (version 0,") && logged("driven through ncclNet only"),
          "the log does not say that the extension table was ignored");
    TRY(no_ext(n));
    tpx__net_close(n);
    counts_t c;
    TRY(counts(so, &c));
    CHECK_EQ(c.bad, 0);
    return 0;
}

static int t_builtin(void)
{
    tpx_net_t *n = NULL;
    CHECK_OK(tpx__net_open("builtin", 7, &n));
    CHECK(n->dl == NULL && n->ext != NULL, "the built-in transport's extension was not found");
    CHECK_EQ(n->abi, 12);
    CHECK(strcmp(n->name, "tpx") == 0, "the built-in transport is named %s", n->name);
    CHECK(tpx__net_max_requests(n) > 0, "the built-in transport gives no request limit");
    CHECK_EQ(tpx__net_set_wake(n, NULL, NULL), 1);
    CHECK_EQ(tpx__net_has_vec(n), 1);
    CHECK_EQ(tpx__net_keeps_gpu(n), 1);
    CHECK_EQ(tpx__net_reads_handles(n), 1);
    CHECK_EQ(tpx__net_vdev_max(n), 4);
    CHECK_EQ(n->sigpipe, 0);
    unsigned char handle[TPX_NCCL_NET_HANDLE_MAXSIZE] = {0};
    struct sockaddr_storage a[TPX_NET_EXT_HANDLE_ADDRS_MAX];
    CHECK_EQ(tpx__net_handle_addrs(n, handle, a, TPX_NET_EXT_HANDLE_ADDRS_MAX), -1);
    tpx__net_close(n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr,
                "usage: %s FAKE_V13_SO FAKE_V13ONLY_SO "
                "newer|only_newer|contexts|engine|ext|ext_bad|builtin FAKE_EXT_SO "
                "FAKE_EXTBAD_SO\n",
                argv[0]);
        return 2;
    }
    tpx_log_set_callback(log_keep, NULL);
    tpx_log_set_level(TPX_LOG_INFO);
    const char *sc = argv[3];
    int rc = strcmp(sc, "newer") == 0        ? t_newer(argv[1])
             : strcmp(sc, "only_newer") == 0 ? t_only_newer(argv[2])
             : strcmp(sc, "contexts") == 0   ? t_contexts(argv[1])
             : strcmp(sc, "engine") == 0     ? t_engine(argv[1])
             : strcmp(sc, "ext") == 0        ? t_ext(argv[4])
             : strcmp(sc, "ext_bad") == 0    ? t_ext_bad(argv[5])
             : strcmp(sc, "builtin") == 0    ? t_builtin()
                                             : 2;
    fprintf(stderr, "%s: %s\n", rc == 0 ? "PASS" : "FAIL", sc);
    return rc;
}
