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
 * usage: test_netload FAKE_V13_SO FAKE_V13ONLY_SO SCENARIO
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

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

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s FAKE_V13_SO FAKE_V13ONLY_SO newer|only_newer|contexts|engine\n",
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
                                             : 2;
    fprintf(stderr, "%s: %s\n", rc == 0 ? "PASS" : "FAIL", sc);
    return rc;
}
