/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx_doctor.c - tpx-doctor: what a GPUDirect-TCPX setup needs, and what
 * this host has.
 *
 * What it promises: it only looks. It reads getifaddrs(), sysfs
 * (/sys/class/net, /sys/bus/pci/devices), /proc/driver/nvidia when present,
 * the environment, and `ethtool -S` when ethtool is installed; it loads the
 * requested ncclNet plugin and asks it for its devices and their properties.
 * It never links CUDA (tpx_gpu_count() from the public API says whether the
 * driver works) and never starts a plugin whose name says TCPX on a host
 * without a CUDA GPU: Google's plugin exit()s the process there.
 *
 * Everything is gathered first into plain structs, then printed as text
 * (stdout) and, with --json, written to a file, so both say the same. Every
 * finding that needs action is a warning that says what to do; a finding
 * that makes the requested setup unusable (the plugin cannot be loaded or
 * started, a TPX_* setting is malformed) is fatal and makes the exit
 * status 1.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_common.h"
#include "tpx/gpu.h"
#include "tpx/tpx.h"

#define DR_PROG      "tpx-doctor"
#define DR_MAX_IFS   64
#define DR_MAX_GPUS  32
#define DR_MAX_DEVS  64
#define DR_MAX_WARN  128
#define DR_TEXT      512
#define DR_PATH      512

/* One network interface as getifaddrs() and sysfs describe it. */
typedef struct {
    char name[IF_NAMESIZE + 1];
    int up;                /* IFF_UP */
    int loopback;          /* IFF_LOOPBACK */
    char addrs[DR_TEXT];   /* "10.0.0.2, fe80::1" */
    char operstate[32];    /* /sys/class/net/IF/operstate, "" if unreadable */
    long speed_mbps;       /* /sys/class/net/IF/speed; -1 unknown */
    long mtu;              /* -1 unknown */
    long numa;             /* device/numa_node; -1 unknown or none */
    char pci[DR_PATH];     /* resolved device link (the PCI path); "" for virtual interfaces */
    char driver[64];       /* device/driver basename, "" if none */
    int devmem_read;       /* ethtool -S was run for it */
    char devmem[DR_TEXT];  /* "rx_devmem_pkts=123, ..." or "" if none reported */
} dr_if_t;

/* One NVIDIA PCI function (display or 3D controller) from sysfs. */
typedef struct {
    char bdf[32];        /* 0000:04:00.0 */
    char pci[DR_PATH];   /* resolved sysfs path */
    long numa;
    char model[128];     /* from /proc/driver/nvidia, "" if absent */
    int nic;             /* index into the interface list, or -1 */
    int common;          /* PCI path components shared with that NIC */
    const char *how;     /* "TPX_NIC_MAP", "nearest PCI path", ... */
} dr_gpu_t;

/* The NICs an engine of `gpu` (-1: none) uses, and why (tpx_nics_from_t). */
typedef struct {
    int gpu;
    int rc;        /* tpx_engine_create's status */
    int nnics;
    char nic[TPX_INFO_MAX_NICS][64];
    int nics_from;
} dr_bind_t;

/* A plugin device's properties, whatever the ABI version they came from. */
typedef struct {
    char name[64];
    char pci[DR_PATH];
    uint64_t guid;
    int ptr_support;
    int speed;
    int port;
    float latency;
    int max_comms;
    int max_recvs;
    int dev_type;
    int dev_version;
    int reg_is_global; /* -1: not in this version's properties */
    long long max_p2p; /* -1: not in this version's properties */
    int max_multi;     /* v11+ maxMultiRequestSize; -1: not in this version's properties */
    int has_rail;      /* v12: rail and plane are in the properties */
    int rail, plane;   /* v12; TPX_NCCL_NET_ID_UNDEF: the plugin does not know */
} dr_props_t;

typedef struct {
    char requested[DR_PATH]; /* --plugin */
    char file[DR_PATH];      /* the shared object that was loaded, "" for builtin */
    int builtin;
    int loaded;
    int exported[6]; /* ncclNetPlugin_v7 .. _v12 found */
    int newer;       /* the newest ncclNetPlugin_vN beyond v12 found, or 0 */
    int version;     /* the version used (newest known), 0 if none */
    void *ctx;       /* v11+: init()'s context, finalised once the devices are read */
    char name[128];  /* the table's name */
    int is_tcpx;
    int init_skipped; /* TCPX without a GPU */
    int init_rc;      /* -1 not called */
    int devices_rc;
    int ndev;
    dr_props_t props[DR_MAX_DEVS];
} dr_plugin_t;

typedef struct {
    const char *section;
    int fatal;
    char text[DR_TEXT];
} dr_warn_t;

/* The TCPX variables and the values Google documents for A3 machines. */
typedef struct {
    const char *name;
    const char *recommended; /* NULL: site specific */
    const char *if_unset;    /* what to do */
} dr_env_t;

static const dr_env_t dr_env[] = {
    {"NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", NULL,
     "set it to the data NICs, comma separated (A3: eth1,eth2,eth3,eth4)"},
    {"NCCL_GPUDIRECTTCPX_CTRL_DEV", NULL, "set it to the control NIC (A3: eth0)"},
    {"NCCL_GPUDIRECTTCPX_TX_BINDINGS", NULL,
     "set it to NIC:CPUs pairs, the CPUs local to each NIC (A3: "
     "\"eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177\")"},
    {"NCCL_GPUDIRECTTCPX_RX_BINDINGS", NULL,
     "set it to NIC:CPUs pairs, the CPUs local to each NIC (A3: "
     "\"eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191\")"},
    {"NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", "/run/tcpx",
     "the plugin uses /run/tcpx; set it to RxDM's --uds_path if RxDM uses another folder"},
    {"NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS", "1000000",
     "set it to 1000000 (RxDM needs time to install flow-steering rules)"},
    {"NCCL_GPUDIRECTTCPX_FORCE_ACK", "0", "set it to 0"},
    {"NCCL_NSOCKS_PERTHREAD", "4", "set it to 4"},
    {"NCCL_SOCKET_NTHREADS", "1", "set it to 1"},
    {"NCCL_DYNAMIC_CHUNK_SIZE", "524288", "set it to 524288"},
};
#define DR_NENV (sizeof(dr_env) / sizeof(dr_env[0]))

typedef struct {
    int quiet;
    const char *json;
    char version[64];
    /* tpx */
    int config_ok;
    int gpu_rc;
    int gpu_count;
    /* host */
    dr_if_t ifs[DR_MAX_IFS];
    int nifs;
    dr_gpu_t gpus[DR_MAX_GPUS];
    int ngpus;
    int nvidia_proc; /* /proc/driver/nvidia/gpus exists */
    dr_plugin_t plugin;
    /* What an engine of each GPU (and of none) picks: tpx_engine_info() of a
     * throw-away engine, the same code that serves applications. */
    dr_bind_t binds[DR_MAX_GPUS + 1];
    int nbinds;
    /* RxDM */
    char rxdm_prefix[DR_PATH];
    int rxdm_dir;     /* the folder exists */
    int rxdm_sockets; /* unix sockets in it */
    /* ethtool */
    char ethtool[DR_PATH]; /* "" if not found */
    dr_warn_t warns[DR_MAX_WARN];
    int nwarns;
    int nfatal;
} dr_t;

static void dr_warn(dr_t *d, const char *section, int fatal, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void dr_warn(dr_t *d, const char *section, int fatal, const char *fmt, ...)
{
    if (fatal)
        d->nfatal++;
    if (d->nwarns >= DR_MAX_WARN)
        return;
    dr_warn_t *w = &d->warns[d->nwarns++];
    w->section = section;
    w->fatal = fatal;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->text, sizeof(w->text), fmt, ap);
    va_end(ap);
}

/* ---- sysfs ------------------------------------------------------------------ */

/* The first line of a small file, without its newline. 0 or -1. */
static int dr_read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char *s = fgets(buf, (int)len, f);
    fclose(f);
    if (s == NULL)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

static long dr_read_long(const char *path)
{
    char buf[64];
    if (dr_read_line(path, buf, sizeof(buf)) != 0)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 0);
    if (errno != 0 || end == buf)
        return -1;
    return v;
}

/* Number of leading '/'-separated components two paths share. */
static int dr_common_components(const char *a, const char *b)
{
    int n = 0;
    while (*a != '\0' && *b != '\0') {
        size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
        if (la != lb || strncmp(a, b, la) != 0)
            break;
        if (la > 0)
            n++;
        a += la;
        b += lb;
        while (*a == '/')
            a++;
        while (*b == '/')
            b++;
    }
    return n;
}

/* ---- interfaces ----------------------------------------------------------- */

static dr_if_t *dr_if_find(dr_t *d, const char *name)
{
    for (int i = 0; i < d->nifs; i++)
        if (strcmp(d->ifs[i].name, name) == 0)
            return &d->ifs[i];
    return NULL;
}

static void dr_if_sysfs(dr_if_t *it)
{
    char path[DR_PATH], real[PATH_MAX];
    snprintf(path, sizeof(path), "/sys/class/net/%s/operstate", it->name);
    if (dr_read_line(path, it->operstate, sizeof(it->operstate)) != 0)
        it->operstate[0] = '\0';
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", it->name);
    it->speed_mbps = dr_read_long(path);
    snprintf(path, sizeof(path), "/sys/class/net/%s/mtu", it->name);
    it->mtu = dr_read_long(path);
    snprintf(path, sizeof(path), "/sys/class/net/%s/device/numa_node", it->name);
    it->numa = dr_read_long(path);
    snprintf(path, sizeof(path), "/sys/class/net/%s/device", it->name);
    if (realpath(path, real) != NULL)
        snprintf(it->pci, sizeof(it->pci), "%.*s", (int)sizeof(it->pci) - 1, real);
    snprintf(path, sizeof(path), "/sys/class/net/%s/device/driver", it->name);
    if (realpath(path, real) != NULL) {
        const char *base = strrchr(real, '/');
        snprintf(it->driver, sizeof(it->driver), "%.63s", base != NULL ? base + 1 : real);
    }
}

static void dr_collect_ifs(dr_t *d)
{
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0) {
        dr_warn(d, "interfaces", 0, "getifaddrs() failed: %s; interfaces come from sysfs only",
                strerror(errno));
        list = NULL;
    }
    for (struct ifaddrs *a = list; a != NULL; a = a->ifa_next) {
        if (a->ifa_name == NULL)
            continue;
        dr_if_t *it = dr_if_find(d, a->ifa_name);
        if (it == NULL) {
            if (d->nifs >= DR_MAX_IFS)
                continue;
            it = &d->ifs[d->nifs++];
            memset(it, 0, sizeof(*it));
            snprintf(it->name, sizeof(it->name), "%s", a->ifa_name);
        }
        it->up |= (a->ifa_flags & IFF_UP) != 0;
        it->loopback |= (a->ifa_flags & IFF_LOOPBACK) != 0;
        char ip[INET6_ADDRSTRLEN] = "";
        if (a->ifa_addr != NULL && a->ifa_addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)a->ifa_addr)->sin_addr, ip,
                      sizeof(ip));
        else if (a->ifa_addr != NULL && a->ifa_addr->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)a->ifa_addr)->sin6_addr, ip,
                      sizeof(ip));
        if (ip[0] != '\0') {
            size_t l = strlen(it->addrs);
            snprintf(it->addrs + l, sizeof(it->addrs) - l, "%s%s", l ? ", " : "", ip);
        }
    }
    if (list != NULL)
        freeifaddrs(list);
    /* Interfaces without addresses (a data NIC not yet configured) are
     * only in sysfs. */
    DIR *dir = opendir("/sys/class/net");
    struct dirent *e;
    while (dir != NULL && (e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.' || dr_if_find(d, e->d_name) != NULL || d->nifs >= DR_MAX_IFS ||
            strlen(e->d_name) > IF_NAMESIZE)
            continue;
        dr_if_t *it = &d->ifs[d->nifs++];
        memset(it, 0, sizeof(*it));
        snprintf(it->name, sizeof(it->name), "%.*s", (int)sizeof(it->name) - 1, e->d_name);
    }
    if (dir != NULL)
        closedir(dir);
    for (int i = 0; i < d->nifs; i++) {
        dr_if_t *it = &d->ifs[i];
        dr_if_sysfs(it);
        if (it->loopback)
            continue;
        if (it->pci[0] != '\0' && strcmp(it->operstate, "up") != 0)
            dr_warn(d, "interfaces", 0,
                    "%s is a PCI NIC but its operstate is '%s': bring it up (ip link set %s up) "
                    "if it is a data NIC",
                    it->name, it->operstate[0] ? it->operstate : "unknown", it->name);
    }
}

/* ---- GPUs -------------------------------------------------------------------- */

static void dr_gpu_models(dr_t *d)
{
    DIR *dir = opendir("/proc/driver/nvidia/gpus");
    if (dir == NULL)
        return;
    d->nvidia_proc = 1;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[DR_PATH], line[256];
        snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%.200s/information", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        char model[128] = "", bus[64] = "";
        while (fgets(line, sizeof(line), f) != NULL) {
            char *v = strchr(line, ':');
            if (v == NULL)
                continue;
            *v++ = '\0';
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            if (strcmp(line, "Model") == 0)
                snprintf(model, sizeof(model), "%.127s", v);
            else if (strcmp(line, "Bus Location") == 0)
                snprintf(bus, sizeof(bus), "%.63s", v);
        }
        fclose(f);
        const char *key = bus[0] ? bus : e->d_name;
        for (int i = 0; i < d->ngpus; i++)
            if (strcasecmp(d->gpus[i].bdf, key) == 0)
                snprintf(d->gpus[i].model, sizeof(d->gpus[i].model), "%s", model);
    }
    closedir(dir);
}

static int dr_gpu_cmp(const void *a, const void *b)
{
    return strcmp(((const dr_gpu_t *)a)->bdf, ((const dr_gpu_t *)b)->bdf);
}

/* The NIC named for GPU `g` in TPX_NIC_MAP ("0,1:eth1;2,3:eth2"), or 0. */
static int dr_nic_map(const char *map, int g, char *out, size_t len)
{
    const char *p = map;
    while (p != NULL && *p != '\0') {
        const char *end = strchr(p, ';');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char ent[256];
        snprintf(ent, sizeof(ent), "%.*s", (int)(n < sizeof(ent) ? n : sizeof(ent) - 1), p);
        char *colon = strchr(ent, ':');
        if (colon != NULL) {
            *colon = '\0';
            for (char *tok = strtok(ent, ","); tok != NULL; tok = strtok(NULL, ","))
                if (atoi(tok) == g && tok[0] >= '0' && tok[0] <= '9') {
                    char *nic = colon + 1;
                    nic[strcspn(nic, ",")] = '\0'; /* the first NIC of a list */
                    snprintf(out, len, "%s", nic);
                    return 1;
                }
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

static void dr_collect_gpus(dr_t *d)
{
    d->gpu_count = 0;
    d->gpu_rc = tpx_gpu_count(&d->gpu_count);
    if (d->gpu_rc != TPX_OK)
        d->gpu_count = 0;
    DIR *dir = opendir("/sys/bus/pci/devices");
    struct dirent *e;
    while (dir != NULL && (e = readdir(dir)) != NULL && d->ngpus < DR_MAX_GPUS) {
        if (e->d_name[0] == '.')
            continue;
        char path[DR_PATH], vendor[32], cls[32], real[PATH_MAX];
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%.200s/vendor", e->d_name);
        if (dr_read_line(path, vendor, sizeof(vendor)) != 0 || strcmp(vendor, "0x10de") != 0)
            continue;
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%.200s/class", e->d_name);
        if (dr_read_line(path, cls, sizeof(cls)) != 0 ||
            (strncmp(cls, "0x0300", 6) != 0 && strncmp(cls, "0x0302", 6) != 0))
            continue;
        dr_gpu_t *g = &d->gpus[d->ngpus++];
        memset(g, 0, sizeof(*g));
        snprintf(g->bdf, sizeof(g->bdf), "%.31s", e->d_name);
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%.200s", e->d_name);
        if (realpath(path, real) != NULL)
            snprintf(g->pci, sizeof(g->pci), "%.*s", (int)sizeof(g->pci) - 1, real);
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%.200s/numa_node", e->d_name);
        g->numa = dr_read_long(path);
    }
    if (dir != NULL)
        closedir(dir);
    /* PCI bus order: CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID. */
    qsort(d->gpus, (size_t)d->ngpus, sizeof(d->gpus[0]), dr_gpu_cmp);
    dr_gpu_models(d);

    const char *map = getenv("TPX_NIC_MAP");
    for (int i = 0; i < d->ngpus; i++) {
        dr_gpu_t *g = &d->gpus[i];
        g->nic = -1;
        char nic[64];
        if (map != NULL && map[0] != '\0' && dr_nic_map(map, i, nic, sizeof(nic))) {
            dr_if_t *it = dr_if_find(d, nic);
            g->how = "TPX_NIC_MAP";
            if (it == NULL)
                dr_warn(d, "gpus", 0, "TPX_NIC_MAP names %s for GPU %d, but there is no such "
                                      "interface: fix TPX_NIC_MAP", nic, i);
            else
                g->nic = (int)(it - d->ifs);
            continue;
        }
        g->how = "nearest PCI path";
        for (int j = 0; j < d->nifs; j++) {
            const dr_if_t *it = &d->ifs[j];
            if (it->loopback || it->pci[0] == '\0' || strstr(it->pci, "/virtual/") != NULL)
                continue;
            int c = dr_common_components(g->pci, it->pci);
            if (g->nic < 0 || c > g->common) {
                g->nic = j;
                g->common = c;
            }
        }
        if (g->nic < 0)
            dr_warn(d, "gpus", 0, "GPU %d (%s) has no PCI NIC to use: set TPX_NIC_MAP", i,
                    g->bdf);
    }
    if (d->ngpus > 0 && d->gpu_count == 0)
        dr_warn(d, "gpus", 0,
                "%d NVIDIA GPU(s) on the PCI bus but the CUDA driver reports none (%s): install "
                "the NVIDIA driver (libcuda.so.1) or check that the container sees /dev/nvidia*",
                d->ngpus, tpx_status_string((tpx_status_t)d->gpu_rc));
    if (d->gpu_count == 0)
        dr_warn(d, "gpus", 0,
                "no CUDA GPU: GPUDirect-TCPX cannot run here; tpx works with host memory "
                "(--mem host) and the built-in transport");
}

/* ---- the plugin ----------------------------------------------------------------- */

static void dr_plugin_log(tpx_nccl_log_level_t level, unsigned long flags, const char *file,
                          int line, const char *fmt, ...)
{
    (void)flags;
    if (level != TPX_NCCL_LOG_WARN && level != TPX_NCCL_LOG_ABORT)
        return;
    char msg[DR_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: plugin: %s (%s:%d)\n", DR_PROG, msg, file ? file : "?", line);
}

static void dr_props_v9(dr_props_t *o, const tpx_ncclnet_props_v9_t *p)
{
    snprintf(o->name, sizeof(o->name), "%s", p->name ? p->name : "");
    snprintf(o->pci, sizeof(o->pci), "%s", p->pciPath ? p->pciPath : "");
    o->guid = p->guid;
    o->ptr_support = p->ptrSupport;
    o->speed = p->speed;
    o->port = p->port;
    o->latency = p->latency;
    o->max_comms = p->maxComms;
    o->max_recvs = p->maxRecvs;
    o->dev_type = (int)p->netDeviceType;
    o->dev_version = p->netDeviceVersion;
    o->reg_is_global = p->regIsGlobal;
    o->max_p2p = (long long)p->maxP2pBytes;
    o->max_multi = -1;
}

static void dr_props_v11(dr_props_t *o, const tpx_ncclnet_props_v11_t *p)
{
    dr_props_v9(o, (const tpx_ncclnet_props_v9_t *)(const void *)p); /* its prefix */
    o->max_multi = p->maxMultiRequestSize;
}

static void dr_props_v12(dr_props_t *o, const tpx_ncclnet_props_v12_t *p)
{
    tpx_ncclnet_props_v11_t q = {p->name,    p->pciPath,  p->guid,          p->ptrSupport,
                                 p->regIsGlobal, p->forceFlush, p->speed,     p->port,
                                 p->latency, p->maxComms, p->maxRecvs,      p->netDeviceType,
                                 p->netDeviceVersion, {0, {0}}, p->maxP2pBytes,
                                 p->maxCollBytes, p->maxMultiRequestSize};
    dr_props_v11(o, &q);
    o->has_rail = 1;
    o->rail = p->railId;
    o->plane = p->planeId;
}

static void dr_props_v8(dr_props_t *o, const tpx_ncclnet_props_v8_t *p)
{
    snprintf(o->name, sizeof(o->name), "%s", p->name ? p->name : "");
    snprintf(o->pci, sizeof(o->pci), "%s", p->pciPath ? p->pciPath : "");
    o->guid = p->guid;
    o->ptr_support = p->ptrSupport;
    o->speed = p->speed;
    o->port = p->port;
    o->latency = p->latency;
    o->max_comms = p->maxComms;
    o->max_recvs = p->maxRecvs;
    o->dev_type = (int)p->netDeviceType;
    o->dev_version = p->netDeviceVersion;
    o->reg_is_global = p->regIsGlobal;
    o->max_p2p = -1;
    o->max_multi = -1;
}

static void dr_props_v7(dr_props_t *o, const tpx_ncclnet_props_v7_t *p)
{
    snprintf(o->name, sizeof(o->name), "%s", p->name ? p->name : "");
    snprintf(o->pci, sizeof(o->pci), "%s", p->pciPath ? p->pciPath : "");
    o->guid = p->guid;
    o->ptr_support = p->ptrSupport;
    o->speed = p->speed;
    o->port = p->port;
    o->latency = p->latency;
    o->max_comms = p->maxComms;
    o->max_recvs = p->maxRecvs;
    o->dev_type = (int)p->netDeviceType;
    o->dev_version = p->netDeviceVersion;
    o->reg_is_global = -1;
    o->max_p2p = -1;
    o->max_multi = -1;
}

/* Ask an initialised table for its devices; the tables differ only in the
 * properties struct, so each version gets its own small branch. */
static void dr_plugin_devices(dr_t *d, const void *table)
{
    dr_plugin_t *pl = &d->plugin;
    int n = 0;
    tpx_nccl_result_t rc;
    /* devices() has the same slot and type in every version. */
    rc = ((const tpx_ncclnet_v7_t *)table)->devices(&n);
    pl->devices_rc = (int)rc;
    if (rc != TPX_NCCL_SUCCESS) {
        dr_warn(d, "plugin", 1, "%s: devices() failed (ncclResult %d): see the plugin's log "
                                "lines above", pl->name, (int)rc);
        return;
    }
    pl->ndev = n;
    if (n == 0)
        dr_warn(d, "plugin", 1,
                "%s reports no devices: name usable interfaces (TPX_SOCKET_IFNAME for the "
                "built-in transport, NCCL_GPUDIRECTTCPX_SOCKET_IFNAME for TCPX)",
                pl->name);
    for (int i = 0; i < n && i < DR_MAX_DEVS; i++) {
        dr_props_t *o = &pl->props[i];
        switch (pl->version) {
        case 12: {
            tpx_ncclnet_props_v12_t p;
            memset(&p, 0, sizeof(p));
            rc = ((const tpx_ncclnet_v12_t *)table)->getProperties(i, &p);
            if (rc == TPX_NCCL_SUCCESS)
                dr_props_v12(o, &p);
            break;
        }
        case 11: {
            tpx_ncclnet_props_v11_t p;
            memset(&p, 0, sizeof(p));
            rc = ((const tpx_ncclnet_v11_t *)table)->getProperties(i, &p);
            if (rc == TPX_NCCL_SUCCESS)
                dr_props_v11(o, &p);
            break;
        }
        case 10: {
            tpx_ncclnet_props_v10_t p;
            memset(&p, 0, sizeof(p));
            rc = ((const tpx_ncclnet_v10_t *)table)->getProperties(i, &p);
            if (rc == TPX_NCCL_SUCCESS)
                dr_props_v9(o, &p);
            break;
        }
        case 9: {
            tpx_ncclnet_props_v9_t p;
            memset(&p, 0, sizeof(p));
            rc = ((const tpx_ncclnet_v9_t *)table)->getProperties(i, &p);
            if (rc == TPX_NCCL_SUCCESS)
                dr_props_v9(o, &p);
            break;
        }
        case 8: {
            tpx_ncclnet_props_v8_t p;
            memset(&p, 0, sizeof(p));
            rc = ((const tpx_ncclnet_v8_t *)table)->getProperties(i, &p);
            if (rc == TPX_NCCL_SUCCESS)
                dr_props_v8(o, &p);
            break;
        }
        default: {
            tpx_ncclnet_props_v7_t p;
            memset(&p, 0, sizeof(p));
            rc = ((const tpx_ncclnet_v7_t *)table)->getProperties(i, &p);
            if (rc == TPX_NCCL_SUCCESS)
                dr_props_v7(o, &p);
            break;
        }
        }
        if (rc != TPX_NCCL_SUCCESS) {
            snprintf(o->name, sizeof(o->name), "(getProperties failed: %d)", (int)rc);
            dr_warn(d, "plugin", 0, "%s: getProperties(%d) failed (ncclResult %d)", pl->name, i,
                    (int)rc);
        }
    }
}

static void dr_collect_plugin(dr_t *d, const char *req)
{
    dr_plugin_t *pl = &d->plugin;
    snprintf(pl->requested, sizeof(pl->requested), "%s", req);
    pl->init_rc = -1;
    pl->devices_rc = -1;
    const void *table = NULL;
    if (strcmp(req, "builtin") == 0) {
        pl->builtin = 1;
        pl->loaded = 1;
        pl->exported[5] = 1;
        pl->version = 12;
        table = tpx_net_builtin_table(12);
    } else {
        /* NCCL's convention: a name NAME is libnccl-net-NAME.so on the
         * library path; anything with a slash is a path. */
        if (strchr(req, '/') != NULL)
            snprintf(pl->file, sizeof(pl->file), "%s", req);
        else
            snprintf(pl->file, sizeof(pl->file), "libnccl-net-%.400s.so", req);
        void *h = dlopen(pl->file, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            const char *why = dlerror();
            dr_warn(d, "plugin", 1,
                    "cannot load %s (%s): put its folder on LD_LIBRARY_PATH or give a path "
                    "with --plugin",
                    pl->file, why ? why : "?");
            return;
        }
        pl->loaded = 1;
        char sym[32];
        for (int v = TPX_NCCLNET_ABI_MIN; v <= TPX_NCCLNET_ABI_MAX; v++) {
            snprintf(sym, sizeof(sym), TPX_NCCLNET_SYMBOL_PREFIX "%d", v);
            void *s = dlsym(h, sym);
            pl->exported[v - TPX_NCCLNET_ABI_MIN] = s != NULL;
            if (s != NULL) {
                table = s;
                pl->version = v;
            }
        }
        /* A newer table than tpx knows: tpx (and this check) use the newest
         * known one, as the engine's loader does. */
        for (int v = 32; v > TPX_NCCLNET_ABI_MAX && pl->newer == 0; v--) {
            snprintf(sym, sizeof(sym), TPX_NCCLNET_SYMBOL_PREFIX "%d", v);
            if (dlsym(h, sym) != NULL)
                pl->newer = v;
        }
        if (pl->newer != 0)
            dr_warn(d, "plugin", table == NULL,
                    "%s exports ncclNetPlugin_v%d, newer than this tpx knows (v%d..v%d): %s",
                    pl->file, pl->newer, TPX_NCCLNET_ABI_MIN, TPX_NCCLNET_ABI_MAX,
                    table != NULL ? "tpx drives its newest known table" : "tpx cannot drive it");
        if (table != NULL) {
            Dl_info info;
            if (dladdr(table, &info) != 0 && info.dli_fname != NULL) {
                char real[PATH_MAX];
                const char *f = realpath(info.dli_fname, real) ? real : info.dli_fname;
                snprintf(pl->file, sizeof(pl->file), "%.*s", (int)sizeof(pl->file) - 1, f);
            }
        }
        if (table == NULL) {
            dr_warn(d, "plugin", 1,
                    "%s exports none of ncclNetPlugin_v7..v12: it is not an ncclNet plugin "
                    "this tpx can drive (tpx needs v7 or newer)",
                    pl->file);
            return;
        }
    }
    /* `name` is the first field of every version's table. */
    const char *name = *(const char *const *)table;
    snprintf(pl->name, sizeof(pl->name), "%s", name ? name : "(unnamed)");
    /* Google's plugin by its name or its file's (not its folder's) name; tpx's
     * own builds ("tpx", "tpx-strict" in libnccl-net-tpx-tcpx.so) run anywhere. */
    const char *base = strrchr(pl->file, '/');
    base = base != NULL ? base + 1 : pl->file;
    pl->is_tcpx = strncmp(pl->name, "tpx", 3) != 0 &&
                  (strcasestr(pl->name, "TCPX") != NULL || strcasestr(base, "tcpx") != NULL);
    if (pl->is_tcpx && d->gpu_count == 0) {
        pl->init_skipped = 1;
        dr_warn(d, "plugin", 1,
                "%s is Google's GPUDirect-TCPX plugin and this host has no CUDA GPU: not "
                "started (it would exit() the process); run tpx-doctor on the GPU host, or use "
                "--plugin builtin here",
                pl->name);
        return;
    }
    tpx_nccl_result_t rc;
    tpx_ncclnet_comm_config_t cc = {TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF};
    switch (pl->version) {
    case 12:
    case 11: /* one context, as one NCCL communicator has */
        rc = ((const tpx_ncclnet_v11_t *)table)->init(&pl->ctx, 1, &cc, dr_plugin_log, NULL);
        break;
    case 10: rc = ((const tpx_ncclnet_v10_t *)table)->init(dr_plugin_log, NULL); break;
    case 9: rc = ((const tpx_ncclnet_v9_t *)table)->init(dr_plugin_log); break;
    case 8: rc = ((const tpx_ncclnet_v8_t *)table)->init(dr_plugin_log); break;
    default: rc = ((const tpx_ncclnet_v7_t *)table)->init(dr_plugin_log); break;
    }
    pl->init_rc = (int)rc;
    if (rc != TPX_NCCL_SUCCESS) {
        dr_warn(d, "plugin", 1, "%s: init() failed (ncclResult %d): see the plugin's log lines "
                                "above (TPX_LOG_LEVEL=info for tpx's own)",
                pl->name, (int)rc);
        return;
    }
    dr_plugin_devices(d, table);
    if (pl->ctx != NULL) {
        rc = ((const tpx_ncclnet_v11_t *)table)->finalize(pl->ctx);
        pl->ctx = NULL;
        if (rc != TPX_NCCL_SUCCESS)
            dr_warn(d, "plugin", 0, "%s: finalize() failed (ncclResult %d)", pl->name, (int)rc);
    }
    if (pl->is_tcpx)
        for (int i = 0; i < pl->ndev && i < DR_MAX_DEVS; i++)
            if (pl->props[i].dev_type != TPX_NCCL_NET_DEVICE_UNPACK)
                dr_warn(d, "plugin", 0,
                        "%s device %d (%s) is not a devmem (UNPACK) device: receives will not "
                        "use GPUDirect; check RxDM and NCCL_GPUDIRECTTCPX_SOCKET_IFNAME",
                        pl->name, i, pl->props[i].name);
}

/* ---- environment, RxDM, ethtool --------------------------------------------------- */

/* Each interface named in a comma list ("eth1,eth2") or a bindings string
 * ("eth1:8-21,112-125;eth2:...") must exist. */
static void dr_check_ifnames(dr_t *d, const char *var, const char *val, int bindings)
{
    char buf[DR_TEXT];
    snprintf(buf, sizeof(buf), "%s", val);
    char *save = NULL;
    for (char *tok = strtok_r(buf, bindings ? ";" : ",", &save); tok != NULL;
         tok = strtok_r(NULL, bindings ? ";" : ",", &save)) {
        if (bindings)
            tok[strcspn(tok, ":")] = '\0';
        tok += strspn(tok, " ^=");
        const dr_if_t *it = tok[0] != '\0' ? dr_if_find(d, tok) : NULL;
        if (tok[0] != '\0' && it == NULL)
            dr_warn(d, "environment", 0, "%s names %s, which is not an interface of this host: "
                                         "fix %s",
                    var, tok, var);
        /* Only data NICs need jumbo frames; the control NIC does not. */
        if (it != NULL && !bindings && strcmp(var, "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME") == 0 &&
            it->mtu > 0 && it->mtu < 8244)
            dr_warn(d, "interfaces", 0,
                    "data NIC %s has MTU %ld: GPUDirect-TCPX data NICs on A3 use MTU 8244 "
                    "(set the VPC network's MTU, then `ip link set %s mtu 8244`)",
                    it->name, it->mtu, it->name);
    }
}

static void dr_check_env(dr_t *d)
{
    for (size_t i = 0; i < DR_NENV; i++) {
        const dr_env_t *e = &dr_env[i];
        const char *v = getenv(e->name);
        if (v == NULL) {
            /* The prefix has a default: only a note when RxDM's folder is there. */
            if (strcmp(e->name, "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX") != 0)
                dr_warn(d, "environment", 0, "%s is not set: %s", e->name, e->if_unset);
            continue;
        }
        if (e->recommended != NULL && strcmp(v, e->recommended) != 0 &&
            strcmp(e->name, "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX") != 0)
            dr_warn(d, "environment", 0, "%s is %s: %s unless you measured better", e->name, v,
                    e->if_unset);
        if (strcmp(e->name, "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME") == 0 ||
            strcmp(e->name, "NCCL_GPUDIRECTTCPX_CTRL_DEV") == 0)
            dr_check_ifnames(d, e->name, v, 0);
        else if (strstr(e->name, "_BINDINGS") != NULL)
            dr_check_ifnames(d, e->name, v, 1);
    }
    const char *pre = getenv("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX");
    snprintf(d->rxdm_prefix, sizeof(d->rxdm_prefix), "%s", pre ? pre : "/run/tcpx");
    struct stat st;
    if (stat(d->rxdm_prefix, &st) == 0 && S_ISDIR(st.st_mode)) {
        d->rxdm_dir = 1;
        DIR *dir = opendir(d->rxdm_prefix);
        struct dirent *e;
        while (dir != NULL && (e = readdir(dir)) != NULL) {
            char p[DR_PATH + 256];
            snprintf(p, sizeof(p), "%s/%s", d->rxdm_prefix, e->d_name);
            if (lstat(p, &st) == 0 && S_ISSOCK(st.st_mode))
                d->rxdm_sockets++;
        }
        if (dir != NULL)
            closedir(dir);
        if (d->rxdm_sockets == 0)
            dr_warn(d, "rxdm", 0,
                    "%s exists but holds no unix socket: RxDM (tcpgpudmarxd) is not running; "
                    "start its container with --uds_path %s",
                    d->rxdm_prefix, d->rxdm_prefix);
    } else {
        dr_warn(d, "rxdm", 0,
                "RxDM socket folder %s does not exist: start the RxDM container (tcpgpudmarxd "
                "--uds_path %s, with /run/tcpx mounted) or set "
                "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX to its folder",
                d->rxdm_prefix, d->rxdm_prefix);
    }
}

/* Google's plugin imports a GPU's receive memory (the rx dmabuf behind
 * its bounce buffer) from RxDM through /tmp/nvdma-<GPU PCI address>. When
 * that file is missing, or TCPX_RXMEM_IMPORT_SKIP_ODDS skips odd GPUs, the
 * plugin runs in its "rxmem skip" state: no bounce buffer, receives into
 * host memory only (a GPU receive fails; tpx refuses it with this advice). */
static void dr_check_rxmem(dr_t *d)
{
    const char *odds = getenv("TCPX_RXMEM_IMPORT_SKIP_ODDS");
    if (odds != NULL && atoi(odds) != 0)
        dr_warn(d, "rxdm", 0,
                "TCPX_RXMEM_IMPORT_SKIP_ODDS=%s: the plugin gives odd-numbered GPUs no receive "
                "memory (\"rxmem skip\"): receives into their memory fail; unset it", odds);
    for (int i = 0; i < d->ngpus; i++) {
        char path[64];
        struct stat st;
        snprintf(path, sizeof(path), "/tmp/nvdma-%.32s", d->gpus[i].bdf);
        if (stat(path, &st) != 0)
            dr_warn(d, "rxdm", 0,
                    "gpu %d: %s does not exist: RxDM has not exported this GPU's receive "
                    "memory, so the TCPX plugin runs in its \"rxmem skip\" state (no bounce "
                    "buffer: receives into GPU memory fail, host memory works); start RxDM "
                    "(tcpgpudmarxd) with /tmp shared with this container", i, path);
    }
}

static void dr_find_ethtool(dr_t *d)
{
    char path[4096];
    const char *env = getenv("PATH");
    snprintf(path, sizeof(path), "%s:/usr/sbin:/sbin", env ? env : "/usr/bin:/bin");
    char *save = NULL;
    for (char *dirn = strtok_r(path, ":", &save); dirn != NULL;
         dirn = strtok_r(NULL, ":", &save)) {
        char cand[DR_PATH];
        snprintf(cand, sizeof(cand), "%.400s/ethtool", dirn);
        if (dirn[0] == '/' && access(cand, X_OK) == 0) {
            snprintf(d->ethtool, sizeof(d->ethtool), "%s", cand);
            return;
        }
    }
}

static void dr_collect_devmem(dr_t *d)
{
    dr_find_ethtool(d);
    if (d->ethtool[0] == '\0') {
        dr_warn(d, "devmem", 0, "ethtool is not installed: install it (Debian: apt-get install "
                                "ethtool) to read the NICs' rx_devmem_pkts counters");
        return;
    }
    for (int i = 0; i < d->nifs; i++) {
        dr_if_t *it = &d->ifs[i];
        if (it->loopback || it->pci[0] == '\0' || strstr(it->pci, "/virtual/") != NULL ||
            strchr(it->name, '\'') != NULL)
            continue;
        char cmd[DR_PATH + 64], line[256];
        snprintf(cmd, sizeof(cmd), "'%s' -S '%s' 2>/dev/null", d->ethtool, it->name);
        FILE *p = popen(cmd, "r");
        if (p == NULL)
            continue;
        it->devmem_read = 1;
        while (fgets(line, sizeof(line), p) != NULL) {
            if (strstr(line, "devmem") == NULL)
                continue;
            char key[128];
            unsigned long long v;
            if (sscanf(line, " %127[^:]: %llu", key, &v) != 2)
                continue;
            size_t l = strlen(it->devmem);
            snprintf(it->devmem + l, sizeof(it->devmem) - l, "%s%s=%llu", l ? ", " : "", key, v);
        }
        pclose(p);
    }
}

/* ---- devmem counters before and after a run (--counters-save, --counters-diff) ----
 *
 * A snapshot is, for every interface but lo, the `ethtool -S` counters whose
 * name says devmem or TCP data split (rx_devmem_pkts, ...), the "TCP data
 * split" ring setting of `ethtool -g` (1 on, 0 off) and the bytes received
 * (ethtool's rx_bytes, else /sys/class/net/IF/statistics/rx_bytes). The file
 * is text: a header line, then "IF KEY VALUE" lines.
 */
#define DR_SNAP_MAGIC "# tpx-doctor counters v1"
#define DR_SNAP_MAX   2048
#define DR_RX_KEY     "rx_bytes"
#define DR_MIN_BYTES  (64ull << 20) /* --counters-min-bytes default */

typedef struct {
    char ifname[IF_NAMESIZE + 1];
    char key[96];
    unsigned long long val;
} dr_ctr_t;

typedef struct {
    dr_ctr_t c[DR_SNAP_MAX];
    int n;
} dr_snap_t;

static void dr_snap_put(dr_snap_t *s, const char *ifname, const char *key, unsigned long long v)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->c[i].ifname, ifname) == 0 && strcmp(s->c[i].key, key) == 0) {
            s->c[i].val = v;
            return;
        }
    if (s->n >= DR_SNAP_MAX)
        return;
    dr_ctr_t *c = &s->c[s->n++];
    snprintf(c->ifname, sizeof(c->ifname), "%s", ifname);
    snprintf(c->key, sizeof(c->key), "%.95s", key); /* counter names are short */
    c->val = v;
}

static const dr_ctr_t *dr_snap_get(const dr_snap_t *s, const char *ifname, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->c[i].ifname, ifname) == 0 && strcmp(s->c[i].key, key) == 0)
            return &s->c[i];
    return NULL;
}

/* The counters worth keeping: devmem ones and TCP data split (header split). */
static int dr_ctr_wanted(const char *key)
{
    static const char *const pats[] = {"devmem", "tcp_data_split", "tcp-data-split",
                                       "header_split", "hds"};
    for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++)
        if (strstr(key, pats[i]) != NULL)
            return 1;
    return strcmp(key, DR_RX_KEY) == 0;
}

/* Snapshot every interface but lo. -1 if ethtool is missing. */
static int dr_snap_take(dr_t *d, dr_snap_t *s)
{
    dr_find_ethtool(d);
    if (d->ethtool[0] == '\0') {
        fprintf(stderr, "%s: ethtool is not installed (Debian: apt-get install ethtool): no "
                        "NIC counters to read\n", DR_PROG);
        return -1;
    }
    s->n = 0;
    DIR *dir = opendir("/sys/class/net");
    struct dirent *e;
    while (dir != NULL && (e = readdir(dir)) != NULL) {
        const char *ifn = e->d_name;
        if (ifn[0] == '.' || strcmp(ifn, "lo") == 0 || strlen(ifn) > IF_NAMESIZE ||
            strchr(ifn, '\'') != NULL)
            continue;
        char cmd[DR_PATH + 64 + 256], line[256], key[128], path[DR_PATH + 64];
        int have_rx = 0;
        snprintf(cmd, sizeof(cmd), "'%s' -S '%.16s' 2>/dev/null", d->ethtool, ifn);
        FILE *p = popen(cmd, "r");
        while (p != NULL && fgets(line, sizeof(line), p) != NULL) {
            unsigned long long v;
            if (sscanf(line, " %127[^:]: %llu", key, &v) != 2 || !dr_ctr_wanted(key))
                continue;
            dr_snap_put(s, ifn, key, v);
            have_rx |= strcmp(key, DR_RX_KEY) == 0;
        }
        if (p != NULL)
            pclose(p);
        snprintf(cmd, sizeof(cmd), "'%s' -g '%.16s' 2>/dev/null", d->ethtool, ifn);
        p = popen(cmd, "r");
        while (p != NULL && fgets(line, sizeof(line), p) != NULL) {
            char state[16];
            if (sscanf(line, " TCP data split: %15s", state) == 1)
                dr_snap_put(s, ifn, "tcp-data-split", strcmp(state, "on") == 0);
        }
        if (p != NULL)
            pclose(p);
        if (!have_rx) {
            snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/rx_bytes", ifn);
            long v = dr_read_long(path);
            if (v >= 0)
                dr_snap_put(s, ifn, DR_RX_KEY, (unsigned long long)v);
        }
    }
    if (dir != NULL)
        closedir(dir);
    return 0;
}

static int dr_snap_save(dr_t *d, const char *file)
{
    static dr_snap_t s;
    if (dr_snap_take(d, &s) != 0)
        return BENCH_EXIT_FAIL;
    FILE *f = fopen(file, "w");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot write %s: %s\n", DR_PROG, file, strerror(errno));
        return BENCH_EXIT_FAIL;
    }
    char when[64];
    bench_started(when, sizeof(when));
    fprintf(f, "%s\n# taken %s with %s; lines: INTERFACE COUNTER VALUE\n", DR_SNAP_MAGIC, when,
            d->ethtool);
    for (int i = 0; i < s.n; i++)
        fprintf(f, "%s %s %llu\n", s.c[i].ifname, s.c[i].key, s.c[i].val);
    if (fclose(f) != 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", DR_PROG, file, strerror(errno));
        return BENCH_EXIT_FAIL;
    }
    if (!d->quiet)
        printf("# %s: %d counter(s) of %s saved to %s\n", DR_PROG, s.n,
               "every interface but lo", file);
    return BENCH_EXIT_OK;
}

static int dr_snap_load(const char *file, dr_snap_t *s)
{
    FILE *f = fopen(file, "r");
    char line[512];
    if (f == NULL) {
        fprintf(stderr, "%s: cannot read %s: %s\n", DR_PROG, file, strerror(errno));
        return -1;
    }
    s->n = 0;
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        if (lineno == 1 && strncmp(line, DR_SNAP_MAGIC, strlen(DR_SNAP_MAGIC)) != 0) {
            fprintf(stderr, "%s: %s is not a snapshot of %s --counters-save\n", DR_PROG, file,
                    DR_PROG);
            rc = -1;
            break;
        }
        if (line[0] == '#' || line[0] == '\n')
            continue;
        char ifn[IF_NAMESIZE + 2], key[96];
        unsigned long long v;
        if (sscanf(line, "%16s %95s %llu", ifn, key, &v) != 3 || strlen(ifn) > IF_NAMESIZE) {
            fprintf(stderr, "%s: %s line %d: not INTERFACE COUNTER VALUE\n", DR_PROG, file,
                    lineno);
            rc = -1;
            break;
        }
        dr_snap_put(s, ifn, key, v);
    }
    if (rc == 0 && lineno == 0) {
        fprintf(stderr, "%s: %s is empty\n", DR_PROG, file);
        rc = -1;
    }
    fclose(f);
    return rc;
}

static int dr_snap_diff(dr_t *d, const char *file, unsigned long long min_bytes)
{
    static dr_snap_t before, after;
    if (dr_snap_load(file, &before) != 0 || dr_snap_take(d, &after) != 0)
        return BENCH_EXIT_FAIL;
    int nwarn = 0, nif = 0;
    char hb[32];
    /* Interfaces in the order of the new snapshot, then any that vanished. */
    static char names[DR_SNAP_MAX][IF_NAMESIZE + 1];
    int nnames = 0;
    for (int i = 0; i < after.n + before.n; i++) {
        const char *n = i < after.n ? after.c[i].ifname : before.c[i - after.n].ifname;
        int k = 0;
        while (k < nnames && strcmp(names[k], n) != 0)
            k++;
        if (k == nnames)
            snprintf(names[nnames++], sizeof(names[0]), "%s", n);
    }
    for (int k = 0; k < nnames; k++) {
        const char *ifn = names[k];
        int now = 0;
        for (int j = 0; j < after.n && !now; j++)
            now = strcmp(after.c[j].ifname, ifn) == 0;
        if (!now) {
            printf("%s: in the snapshot, not on this host now\n", ifn);
            continue;
        }
        nif++;
        printf("%s:", ifn);
        int has_devmem = 0, devmem_grew = 0, split_off = 0;
        unsigned long long rx = 0;
        for (int j = 0; j < after.n; j++) {
            const dr_ctr_t *a = &after.c[j];
            if (strcmp(a->ifname, ifn) != 0)
                continue;
            const dr_ctr_t *b = dr_snap_get(&before, ifn, a->key);
            if (strcmp(a->key, "tcp-data-split") == 0) {
                printf(" tcp-data-split %s", a->val ? "on" : "off");
                split_off = !a->val;
                continue;
            }
            if (b == NULL) {
                printf(" %s (new) %llu", a->key, a->val);
                continue;
            }
            if (a->val < b->val) {
                printf(" %s went back from %llu to %llu (reset?)", a->key, b->val, a->val);
                continue;
            }
            unsigned long long dv = a->val - b->val;
            if (strcmp(a->key, DR_RX_KEY) == 0) {
                rx = dv;
                printf(" %s +%llu (%s)", a->key, dv, bench_human(dv, hb, sizeof(hb)));
            } else {
                printf(" %s +%llu", a->key, dv);
            }
            if (strstr(a->key, "rx_devmem_pkts") != NULL) {
                has_devmem = 1;
                devmem_grew |= dv > 0;
            }
        }
        printf("%s\n", has_devmem ? "" : "  (no rx_devmem_pkts counter: no devmem TCP here)");
        if (has_devmem && !devmem_grew && rx >= min_bytes) {
            printf("  WARN:  %s received %llu bytes during the run but rx_devmem_pkts did not "
                   "grow: devmem (GPUDirect-TCPX receive into GPU memory) was not in use on it. "
                   "Check the RxDM container, flow steering, TCP data split and the "
                   "NCCL_GPUDIRECTTCPX_* settings (run %s)\n",
                   ifn, rx, DR_PROG);
            nwarn++;
        }
        if (has_devmem && split_off) {
            printf("  WARN:  %s has TCP data split off: devmem receive needs it (ethtool -G %s "
                   "tcp-data-split on)\n",
                   ifn, ifn);
            nwarn++;
        }
    }
    printf("# %d interface(s), %d warning(s); baseline %s\n", nif, nwarn, file);
    return BENCH_EXIT_OK;
}

/* ---- output -------------------------------------------------------------------- */

static void dr_print_warns(const dr_t *d, const char *section)
{
    for (int i = 0; i < d->nwarns; i++)
        if (strcmp(d->warns[i].section, section) == 0)
            printf("  %s %s\n", d->warns[i].fatal ? "FATAL:" : "WARN: ", d->warns[i].text);
}

static const char *dr_dash(const char *s)
{
    return s != NULL && s[0] != '\0' ? s : "-";
}

static const char *dr_ptr_str(int bits, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s%s", bits & TPX_NCCL_PTR_HOST ? "host " : "",
             bits & TPX_NCCL_PTR_CUDA ? "cuda " : "", bits & TPX_NCCL_PTR_DMABUF ? "dmabuf " : "",
             bits == 0 ? "none " : "");
    buf[strlen(buf) - 1] = '\0';
    return buf;
}

static const char *dr_nics_from(int from)
{
    return from == TPX_NICS_FROM_MAP   ? "TPX_NIC_MAP"
           : from == TPX_NICS_FROM_PCI ? "nearest the GPU by PCI path"
                                       : "every NIC of the plugin";
}

/* One throw-away engine per GPU (no port, no progress thread): what it
 * binds to through the library itself. */
static void dr_collect_binds(dr_t *d)
{
    if (!d->plugin.loaded)
        return;
    int n = d->gpu_count < DR_MAX_GPUS ? d->gpu_count : DR_MAX_GPUS;
    for (int g = -1; g < n; g++) {
        dr_bind_t *b = &d->binds[d->nbinds++];
        memset(b, 0, sizeof(*b));
        b->gpu = g;
        tpx_engine_params_t p;
        tpx_engine_params_init(&p);
        p.gpu = g;
        p.port = TPX_PORT_NONE;
        p.progress_thread = 0;
        p.plugin = d->plugin.requested[0] ? d->plugin.requested : NULL;
        tpx_engine_t *e = NULL;
        b->rc = tpx_engine_create(&p, &e);
        if (b->rc != TPX_OK) {
            dr_warn(d, "binding", 0, "an engine of %s%d could not be made: %s",
                    g < 0 ? "no GPU" : "GPU ", g < 0 ? 0 : g, tpx_status_string((tpx_status_t)b->rc));
            continue;
        }
        tpx_engine_info_t in;
        in.size = sizeof(in);
        if (tpx_engine_info(e, &in) == TPX_OK) {
            b->nnics = in.nnics;
            b->nics_from = in.nics_from;
            memcpy(b->nic, in.nic, sizeof(b->nic));
        }
        tpx_engine_destroy(e);
    }
}

static void dr_print(const dr_t *d)
{
    printf("# %s: libtpx %s\n", DR_PROG, d->version);

    printf("\n== tpx settings\n");
    printf("  TPX_* settings: %s\n", d->config_ok ? "all well-formed" : "MALFORMED (see above)");
    const char *tvars[] = {"TPX_NET_PLUGIN", "TPX_SOCKET_IFNAME", "TPX_NIC_MAP", "TPX_SOCK_TCPX"};
    for (size_t i = 0; i < sizeof(tvars) / sizeof(tvars[0]); i++)
        printf("  %-20s %s\n", tvars[i], getenv(tvars[i]) ? getenv(tvars[i]) : "(unset)");
    dr_print_warns(d, "tpx");

    printf("\n== network interfaces\n");
    printf("  %-10s %-8s %9s %6s %4s %-10s %-36s %s\n", "name", "state", "Mb/s", "mtu", "numa",
           "driver", "addresses", "pci path");
    for (int i = 0; i < d->nifs; i++) {
        const dr_if_t *it = &d->ifs[i];
        char speed[32] = "-", numa[32] = "-", mtu[32] = "-";
        if (it->speed_mbps > 0)
            snprintf(speed, sizeof(speed), "%ld", it->speed_mbps);
        if (it->numa >= 0)
            snprintf(numa, sizeof(numa), "%ld", it->numa);
        if (it->mtu > 0)
            snprintf(mtu, sizeof(mtu), "%ld", it->mtu);
        printf("  %-10s %-8s %9s %6s %4s %-10s %-36s %s\n", it->name, dr_dash(it->operstate),
               speed, mtu, numa, dr_dash(it->driver), dr_dash(it->addrs),
               it->pci[0] && strstr(it->pci, "/virtual/") == NULL ? it->pci
                                                                   : "(virtual)");
    }
    dr_print_warns(d, "interfaces");

    printf("\n== GPUs\n");
    printf("  CUDA driver: %d GPU(s)%s%s\n", d->gpu_count, d->gpu_rc == TPX_OK ? "" : ": ",
           d->gpu_rc == TPX_OK ? "" : tpx_status_string((tpx_status_t)d->gpu_rc));
    printf("  NVIDIA PCI functions: %d (PCI bus order; CUDA uses it with "
           "CUDA_DEVICE_ORDER=PCI_BUS_ID)%s\n",
           d->ngpus, d->nvidia_proc ? "" : "; no /proc/driver/nvidia");
    for (int i = 0; i < d->ngpus; i++) {
        const dr_gpu_t *g = &d->gpus[i];
        printf("  gpu %d  %s  %s  numa %ld\n         pci %s\n         nic %s (%s", i, g->bdf,
               dr_dash(g->model), g->numa, g->pci,
               g->nic >= 0 ? d->ifs[g->nic].name : "none", g->how);
        if (strcmp(g->how, "nearest PCI path") == 0 && g->nic >= 0)
            printf(", %d common path components", g->common);
        printf(")\n");
    }
    dr_print_warns(d, "gpus");

    const dr_plugin_t *pl = &d->plugin;
    printf("\n== net plugin\n");
    printf("  requested: %s\n", pl->requested);
    if (pl->builtin)
        printf("  file: (built into libtpx; libnccl-net-tpx.so exports the same code)\n");
    else
        printf("  file: %s%s\n", pl->file, pl->loaded ? "" : " (not loaded)");
    if (pl->loaded) {
        printf("  name: %s\n  exports:", pl->name);
        for (int v = 0; v < 6; v++)
            if (pl->exported[v])
                printf(" ncclNetPlugin_v%d", 7 + v);
        if (pl->newer)
            printf(" ncclNetPlugin_v%d (newer than tpx knows)", pl->newer);
        printf("%s; using v%d\n", pl->builtin ? " (tpx_net_builtin_table(12))" : "",
               pl->version);
        if (pl->init_skipped)
            printf("  init: not called (TCPX plugin, no GPU)\n");
        else if (pl->init_rc != -1)
            printf("  init: %s\n", pl->init_rc == 0 ? "ok" : "FAILED");
        if (pl->init_rc == 0 && pl->devices_rc == 0) {
            printf("  devices: %d\n", pl->ndev);
            for (int i = 0; i < pl->ndev && i < DR_MAX_DEVS; i++) {
                const dr_props_t *o = &pl->props[i];
                char ptr[64];
                printf("  dev %d  %-10s %6d Mb/s  port %d  ptr %s  maxComms %d  maxRecvs %d  "
                       "%s v%d",
                       i, o->name, o->speed, o->port, dr_ptr_str(o->ptr_support, ptr, sizeof(ptr)),
                       o->max_comms, o->max_recvs,
                       o->dev_type == TPX_NCCL_NET_DEVICE_UNPACK ? "UNPACK (devmem)" : "HOST",
                       o->dev_version);
                if (o->max_p2p >= 0)
                    printf("  maxP2pBytes %lld", o->max_p2p);
                if (o->max_multi >= 0)
                    printf("  maxMultiRequest %d", o->max_multi);
                if (o->has_rail) {
                    char rail[16] = "-", plane[16] = "-"; /* "-": the plugin does not know */
                    if (o->rail != TPX_NCCL_NET_ID_UNDEF)
                        snprintf(rail, sizeof(rail), "%d", o->rail);
                    if (o->plane != TPX_NCCL_NET_ID_UNDEF)
                        snprintf(plane, sizeof(plane), "%d", o->plane);
                    printf("  rail %s  plane %s", rail, plane);
                }
                printf("\n         guid 0x%" PRIx64 "  latency %.1f us  pci %s\n", o->guid,
                       (double)o->latency, dr_dash(o->pci));
            }
        }
    }
    dr_print_warns(d, "plugin");

    printf("\n== engine binding\n");
    printf("  an engine serves params.gpu; else the GPU of the first GPU memory it registers\n"
           "  (before its first peer: what NIXL and vLLM workers get); else the GPU whose CUDA\n"
           "  context is current where it is created; else none (host memory only). Its\n"
           "  channels use that GPU's NICs:\n");
    for (int i = 0; i < d->nbinds; i++) {
        const dr_bind_t *b = &d->binds[i];
        char who[16];
        snprintf(who, sizeof(who), b->gpu < 0 ? "no GPU" : "GPU %d", b->gpu);
        if (b->rc != TPX_OK) {
            printf("  %-8s (no engine: %s)\n", who, tpx_status_string((tpx_status_t)b->rc));
            continue;
        }
        printf("  %-8s NICs", who);
        for (int k = 0; k < b->nnics; k++)
            printf("%s%s", k ? ", " : " ", b->nic[k]);
        printf(" (%s)\n", dr_nics_from(b->nics_from));
    }
    dr_print_warns(d, "binding");

    printf("\n== TCPX environment (needed by Google's GPUDirect-TCPX plugin)\n");
    for (size_t i = 0; i < DR_NENV; i++) {
        const char *v = getenv(dr_env[i].name);
        printf("  %-52s %s\n", dr_env[i].name, v ? v : "(unset)");
    }
    dr_print_warns(d, "environment");

    printf("\n== RxDM (receive data-path manager)\n");
    printf("  socket folder %s: %s", d->rxdm_prefix, d->rxdm_dir ? "present" : "missing");
    if (d->rxdm_dir)
        printf(", %d unix socket(s)", d->rxdm_sockets);
    printf("\n");
    dr_print_warns(d, "rxdm");

    printf("\n== devmem counters (ethtool -S)\n");
    if (d->ethtool[0] != '\0') {
        printf("  ethtool: %s\n", d->ethtool);
        for (int i = 0; i < d->nifs; i++)
            if (d->ifs[i].devmem_read)
                printf("  %-10s %s\n", d->ifs[i].name,
                       d->ifs[i].devmem[0] ? d->ifs[i].devmem
                                           : "no devmem counters (driver without devmem TCP)");
    }
    dr_print_warns(d, "devmem");

    printf("\n# %d warning(s), %d fatal: %s\n", d->nwarns - d->nfatal, d->nfatal,
           d->nfatal ? "this host cannot run the requested setup (see FATAL above)"
                     : "nothing fatal");
}

static void dr_json_long(FILE *f, const char *key, long v, int comma)
{
    fprintf(f, "\"%s\": ", key);
    if (v < 0)
        fprintf(f, "null");
    else
        fprintf(f, "%ld", v);
    fprintf(f, "%s", comma ? ", " : "");
}

static void dr_json_kstr(FILE *f, const char *key, const char *v, int comma)
{
    fprintf(f, "\"%s\": ", key);
    bench_json_str(f, v != NULL && v[0] != '\0' ? v : NULL);
    fprintf(f, "%s", comma ? ", " : "");
}

static int dr_write_json(const dr_t *d)
{
    FILE *f = fopen(d->json, "w");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot write %s: %s\n", DR_PROG, d->json, strerror(errno));
        return -1;
    }
    fprintf(f, "{\"tool\": \"%s\", ", DR_PROG);
    dr_json_kstr(f, "libtpx", d->version, 1);
    bench_json_sysinfo(f);
    fprintf(f, ",\n \"tpx\": {\"config_ok\": %s, \"env\": ", d->config_ok ? "true" : "false");
    bench_json_env(f, NULL);
    fprintf(f, "},\n \"interfaces\": [");
    for (int i = 0; i < d->nifs; i++) {
        const dr_if_t *it = &d->ifs[i];
        fprintf(f, "%s\n  {", i ? "," : "");
        dr_json_kstr(f, "name", it->name, 1);
        dr_json_kstr(f, "operstate", it->operstate, 1);
        fprintf(f, "\"loopback\": %s, ", it->loopback ? "true" : "false");
        dr_json_long(f, "speed_mbps", it->speed_mbps, 1);
        dr_json_long(f, "mtu", it->mtu, 1);
        dr_json_long(f, "numa_node", it->numa, 1);
        dr_json_kstr(f, "driver", it->driver, 1);
        dr_json_kstr(f, "pci_path", strstr(it->pci, "/virtual/") ? "" : it->pci, 1);
        fprintf(f, "\"addresses\": [");
        const char *a = it->addrs;
        int first = 1;
        while (*a != '\0') {
            size_t n = strcspn(a, ",");
            char one[INET6_ADDRSTRLEN + 1];
            snprintf(one, sizeof(one), "%.*s", (int)(n < sizeof(one) ? n : sizeof(one) - 1), a);
            fprintf(f, "%s", first ? "" : ", ");
            bench_json_str(f, one);
            first = 0;
            a += n;
            a += strspn(a, ", ");
        }
        fprintf(f, "], \"devmem_counters\": ");
        if (!it->devmem_read) {
            fprintf(f, "null}");
            continue;
        }
        fprintf(f, "{");
        const char *c = it->devmem;
        first = 1;
        while (*c != '\0') {
            size_t n = strcspn(c, ",");
            char kv[256];
            snprintf(kv, sizeof(kv), "%.*s", (int)(n < sizeof(kv) ? n : sizeof(kv) - 1), c);
            char *eq = strchr(kv, '=');
            if (eq != NULL) {
                *eq = '\0';
                fprintf(f, "%s", first ? "" : ", ");
                bench_json_str(f, kv);
                fprintf(f, ": %s", eq + 1);
                first = 0;
            }
            c += n;
            c += strspn(c, ", ");
        }
        fprintf(f, "}}");
    }
    fprintf(f, "],\n \"gpus\": {\"cuda_count\": %d, ", d->gpu_count);
    dr_json_kstr(f, "cuda_status", d->gpu_rc == TPX_OK ? "" : tpx_status_string((tpx_status_t)d->gpu_rc),
                 1);
    fprintf(f, "\"pci\": [");
    for (int i = 0; i < d->ngpus; i++) {
        const dr_gpu_t *g = &d->gpus[i];
        fprintf(f, "%s\n  {\"index\": %d, ", i ? "," : "", i);
        dr_json_kstr(f, "bdf", g->bdf, 1);
        dr_json_kstr(f, "model", g->model, 1);
        dr_json_kstr(f, "pci_path", g->pci, 1);
        dr_json_long(f, "numa_node", g->numa, 1);
        dr_json_kstr(f, "nic", g->nic >= 0 ? d->ifs[g->nic].name : "", 1);
        dr_json_kstr(f, "nic_from", g->how, 0);
        fprintf(f, "}");
    }
    fprintf(f, "]},\n \"binding\": [");
    for (int i = 0; i < d->nbinds; i++) {
        const dr_bind_t *b = &d->binds[i];
        fprintf(f, "%s\n  {\"gpu\": ", i ? "," : "");
        if (b->gpu >= 0)
            fprintf(f, "%d", b->gpu);
        else
            fputs("null", f);
        fprintf(f, ", \"ok\": %s, \"nics\": [", b->rc == TPX_OK ? "true" : "false");
        for (int k = 0; k < b->nnics; k++) {
            fputs(k ? ", " : "", f);
            bench_json_str(f, b->nic[k]);
        }
        fprintf(f, "], ");
        dr_json_kstr(f, "nics_from", b->rc == TPX_OK ? dr_nics_from(b->nics_from) : "", 0);
        fputc('}', f);
    }
    const dr_plugin_t *pl = &d->plugin;
    fprintf(f, "],\n \"plugin\": {");
    dr_json_kstr(f, "requested", pl->requested, 1);
    dr_json_kstr(f, "file", pl->file, 1);
    fprintf(f, "\"builtin\": %s, \"loaded\": %s, ", pl->builtin ? "true" : "false",
            pl->loaded ? "true" : "false");
    dr_json_kstr(f, "name", pl->name, 1);
    fprintf(f, "\"exports\": [");
    int first = 1;
    for (int v = 0; v < 6; v++)
        if (pl->exported[v]) {
            fprintf(f, "%s%d", first ? "" : ", ", 7 + v);
            first = 0;
        }
    if (pl->newer)
        fprintf(f, "%s%d", first ? "" : ", ", pl->newer);
    fprintf(f, "], \"version_used\": %d, \"tcpx\": %s, \"init\": ", pl->version,
            pl->is_tcpx ? "true" : "false");
    bench_json_str(f, pl->init_skipped ? "skipped: no GPU"
                      : pl->init_rc == -1 ? NULL
                      : pl->init_rc == 0  ? "ok"
                                          : "failed");
    fprintf(f, ", \"devices\": [");
    for (int i = 0; i < pl->ndev && i < DR_MAX_DEVS && pl->devices_rc == 0; i++) {
        const dr_props_t *o = &pl->props[i];
        fprintf(f, "%s\n  {", i ? "," : "");
        dr_json_kstr(f, "name", o->name, 1);
        dr_json_kstr(f, "pci_path", o->pci, 1);
        fprintf(f, "\"guid\": %" PRIu64 ", \"ptr_support\": %d, \"host\": %s, \"cuda\": %s, "
                   "\"dmabuf\": %s, \"speed_mbps\": %d, \"port\": %d, \"latency_us\": %g, "
                   "\"max_comms\": %d, \"max_recvs\": %d, \"device_type\": \"%s\", "
                   "\"device_version\": %d",
                o->guid, o->ptr_support, o->ptr_support & TPX_NCCL_PTR_HOST ? "true" : "false",
                o->ptr_support & TPX_NCCL_PTR_CUDA ? "true" : "false",
                o->ptr_support & TPX_NCCL_PTR_DMABUF ? "true" : "false", o->speed, o->port,
                (double)o->latency, o->max_comms, o->max_recvs,
                o->dev_type == TPX_NCCL_NET_DEVICE_UNPACK ? "unpack" : "host", o->dev_version);
        if (o->reg_is_global >= 0)
            fprintf(f, ", \"reg_is_global\": %d", o->reg_is_global);
        if (o->max_p2p >= 0)
            fprintf(f, ", \"max_p2p_bytes\": %lld", o->max_p2p);
        if (o->max_multi >= 0)
            fprintf(f, ", \"max_multi_request\": %d", o->max_multi);
        if (o->has_rail) { /* null: the plugin does not know */
            if (o->rail != TPX_NCCL_NET_ID_UNDEF)
                fprintf(f, ", \"rail\": %d", o->rail);
            else
                fprintf(f, ", \"rail\": null");
            if (o->plane != TPX_NCCL_NET_ID_UNDEF)
                fprintf(f, ", \"plane\": %d", o->plane);
            else
                fprintf(f, ", \"plane\": null");
        }
        fprintf(f, "}");
    }
    fprintf(f, "]},\n \"tcpx_env\": {");
    for (size_t i = 0; i < DR_NENV; i++) {
        fprintf(f, "%s", i ? ", " : "");
        bench_json_str(f, dr_env[i].name);
        fprintf(f, ": ");
        bench_json_str(f, getenv(dr_env[i].name));
    }
    fprintf(f, "},\n \"rxdm\": {");
    dr_json_kstr(f, "prefix", d->rxdm_prefix, 1);
    fprintf(f, "\"present\": %s, \"sockets\": %d},\n ", d->rxdm_dir ? "true" : "false",
            d->rxdm_sockets);
    dr_json_kstr(f, "ethtool", d->ethtool, 1);
    fprintf(f, "\n \"warnings\": [");
    for (int i = 0; i < d->nwarns; i++) {
        fprintf(f, "%s\n  {", i ? "," : "");
        dr_json_kstr(f, "section", d->warns[i].section, 1);
        fprintf(f, "\"fatal\": %s, ", d->warns[i].fatal ? "true" : "false");
        dr_json_kstr(f, "text", d->warns[i].text, 0);
        fprintf(f, "}");
    }
    fprintf(f, "],\n \"fatal\": %d, \"ok\": %s}\n", d->nfatal, d->nfatal ? "false" : "true");
    if (fclose(f) != 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", DR_PROG, d->json, strerror(errno));
        return -1;
    }
    return 0;
}

static void dr_usage(FILE *f)
{
    fprintf(f,
            "NAME\n"
            "    %1$s - check what a GPUDirect-TCPX setup needs against what this host has\n"
            "\n"
            "SYNOPSIS\n"
            "    %1$s [--plugin builtin|NAME|PATH] [--json FILE] [--quiet]\n"
            "    %1$s --counters-save FILE\n"
            "    %1$s --counters-diff FILE [--counters-min-bytes N]\n"
            "    %1$s --help | --version\n"
            "\n"
            "DESCRIPTION\n"
            "    Looks, changes nothing, and prints one section per topic:\n"
            "      tpx settings   whether every TPX_* variable is well-formed, and the ones\n"
            "                     that pick the plugin, interfaces and GPU-to-NIC map;\n"
            "      interfaces     every network interface (getifaddrs, /sys/class/net):\n"
            "                     operstate, speed, MTU, NUMA node, driver, addresses and\n"
            "                     PCI path;\n"
            "      GPUs           how many GPUs the CUDA driver reports (loaded at run time;\n"
            "                     tpx never links CUDA), every NVIDIA PCI function with its\n"
            "                     PCI path, model (/proc/driver/nvidia) and the NIC it would\n"
            "                     use: TPX_NIC_MAP if set, else the NIC sharing the longest\n"
            "                     PCI path prefix (the same PCIe switch);\n"
            "      net plugin     the plugin's file, the ncclNetPlugin_v7..v12 tables it\n"
            "                     exports, and after init() its devices and properties. A\n"
            "                     plugin whose name says TCPX is never started on a host\n"
            "                     without a CUDA GPU (Google's plugin exit()s there);\n"
            "      engine binding the NICs an engine of each GPU (and of none) uses and why,\n"
            "                     from a throw-away engine per GPU (tpx_engine_info);\n"
            "      TCPX env       NCCL_GPUDIRECTTCPX_* and the NCCL socket settings Google's\n"
            "                     plugin reads, with the A3 values to use when missing;\n"
            "      RxDM           whether the receive data-path manager's unix socket folder\n"
            "                     (NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX, default /run/tcpx)\n"
            "                     exists and holds sockets;\n"
            "      devmem         the current devmem counters (rx_devmem_pkts, ...) of every\n"
            "                     PCI NIC, from `ethtool -S` when ethtool is installed. Run\n"
            "                     it before and after a benchmark: counters that do not grow\n"
            "                     mean the receive path is not GPUDirect.\n"
            "    Every warning says what to do. Plugin log lines at warning level go to\n"
            "    stderr.\n"
            "\n"
            "DEVMEM COUNTERS BEFORE AND AFTER A RUN\n"
            "    --counters-save FILE snapshots, for every interface but lo, the `ethtool\n"
            "    -S IF` counters whose name says devmem or TCP data split (rx_devmem_pkts,\n"
            "    ..., *tcp_data_split*, *header_split*, *hds*), the \"TCP data split\"\n"
            "    setting of `ethtool -g IF` and the bytes received (ethtool's rx_bytes,\n"
            "    else /sys/class/net/IF/statistics/rx_bytes) into FILE (text: a header,\n"
            "    then INTERFACE COUNTER VALUE lines). --counters-diff FILE takes a new\n"
            "    snapshot and prints, per interface, how much each counter grew since FILE,\n"
            "    and warns when an interface that has an rx_devmem_pkts counter received\n"
            "    at least --counters-min-bytes (default 64M) but rx_devmem_pkts did not\n"
            "    grow -- the run's receive path was not devmem (GPUDirect-TCPX into GPU\n"
            "    memory) -- or has TCP data split off. Interfaces without devmem counters\n"
            "    are listed with their bytes only. Both print no report and need ethtool.\n"
            "    scripts/tpx-launch does this around every run when ethtool exists\n"
            "    (counters.before / counters.diff in its log folder).\n"
            "\n"
            "OPTIONS\n"
            "    --plugin P   the ncclNet plugin to check: `builtin` (tpx's TCP transport,\n"
            "                 tpx_net_builtin()), a name NAME (libnccl-net-NAME.so on the\n"
            "                 library path, as NCCL_NET_PLUGIN=NAME) or a path. Default:\n"
            "                 TPX_NET_PLUGIN if set, else builtin\n"
            "    --json FILE  also write everything, warnings included, to FILE as JSON\n"
            "    -q, --quiet  print only the warnings and the summary line\n"
            "    --counters-save FILE\n"
            "                 snapshot the NIC counters into FILE and exit (see DEVMEM\n"
            "                 COUNTERS BEFORE AND AFTER A RUN)\n"
            "    --counters-diff FILE\n"
            "                 print the counters' growth since FILE, with warnings, and exit\n"
            "    --counters-min-bytes N\n"
            "                 --counters-diff: bytes an interface must have received for a\n"
            "                 silent rx_devmem_pkts to be a warning (default 64M; K, M, G)\n"
            "    -h, --help   print this text\n"
            "    -V, --version\n"
            "\n"
            "EXIT STATUS\n"
            "    0  nothing fatal (warnings may have been printed)\n"
            "    1  something fatal: the plugin cannot be loaded, exports no usable table,\n"
            "       fails init() or devices(), reports no device, is TCPX on a host without\n"
            "       a GPU, or a TPX_* setting is malformed; --counters-*: ethtool missing,\n"
            "       FILE unreadable or not a snapshot (warnings alone exit 0)\n"
            "    2  bad command line\n"
            "\n"
            "EXAMPLES\n"
            "    %1$s\n"
            "    %1$s --plugin gpudirecttcpx --json doctor.json\n"
            "    LD_LIBRARY_PATH=/usr/local/tcpx/lib64 %1$s --plugin gpudirecttcpx\n"
            "    %1$s -q && tpx-perf server --mem cuda\n"
            "    %1$s --counters-save before.txt; tpx-perf client B --mem cuda;\n"
            "    %1$s --counters-diff before.txt\n",
            DR_PROG);
}

int main(int argc, char **argv)
{
    static dr_t d; /* large: keep it off the stack */
    bench_prog = DR_PROG;
    const char *plugin = getenv("TPX_NET_PLUGIN");
    if (plugin == NULL || plugin[0] == '\0')
        plugin = "builtin";
    enum { O_PLUGIN = 256, O_JSON, O_CSAVE, O_CDIFF, O_CMIN };
    static const struct option opts[] = {
        {"plugin", required_argument, NULL, O_PLUGIN},
        {"json", required_argument, NULL, O_JSON},
        {"counters-save", required_argument, NULL, O_CSAVE},
        {"counters-diff", required_argument, NULL, O_CDIFF},
        {"counters-min-bytes", required_argument, NULL, O_CMIN},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *csave = NULL, *cdiff = NULL;
    uint64_t cmin = DR_MIN_BYTES;
    int c, plugin_set = 0;
    while ((c = getopt_long(argc, argv, "hqV", opts, NULL)) != -1) {
        switch (c) {
        case O_PLUGIN:
            plugin_set = 1;
            if (optarg[0] == '\0')
                return bench_usage_error("--plugin: give builtin, a name or a path");
            plugin = optarg;
            break;
        case O_JSON: d.json = optarg; break;
        case O_CSAVE: csave = optarg; break;
        case O_CDIFF: cdiff = optarg; break;
        case O_CMIN:
            if (bench_parse_size(optarg, &cmin) != 0)
                return bench_usage_error("--counters-min-bytes: bad size '%s' (e.g. 64M)", optarg);
            break;
        case 'q': d.quiet = 1; break;
        case 'h': dr_usage(stdout); return BENCH_EXIT_OK;
        case 'V': printf("%s (libtpx %s)\n", DR_PROG, tpx_version_string()); return BENCH_EXIT_OK;
        default: fprintf(stderr, "Try '%s --help'.\n", DR_PROG); return BENCH_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return bench_usage_error("unexpected argument '%s'", argv[optind]);
    if (csave != NULL || cdiff != NULL) {
        /* Counters only: no report. */
        if (csave != NULL && cdiff != NULL)
            return bench_usage_error("--counters-save and --counters-diff exclude each other "
                                     "(save before the run, diff after it)");
        if (plugin_set || d.json != NULL)
            return bench_usage_error("--plugin and --json are for the report, not for "
                                     "--counters-save/--counters-diff");
        return csave != NULL ? dr_snap_save(&d, csave) : dr_snap_diff(&d, cdiff, cmin);
    }

    snprintf(d.version, sizeof(d.version), "%s", tpx_version_string());
    d.config_ok = tpx_config_check() == TPX_OK;
    if (!d.config_ok)
        dr_warn(&d, "tpx", 1, "a TPX_* setting is malformed (the log line above names it): fix "
                              "it; `tpx-perf --print-config` shows every setting");
    dr_collect_ifs(&d);
    dr_collect_gpus(&d);
    dr_collect_plugin(&d, plugin);
    dr_collect_binds(&d);
    dr_check_env(&d);
    dr_check_rxmem(&d);
    dr_collect_devmem(&d);

    if (d.quiet) {
        for (int i = 0; i < d.nwarns; i++)
            printf("%s: %s %s\n", d.warns[i].section, d.warns[i].fatal ? "FATAL:" : "WARN:",
                   d.warns[i].text);
        printf("# %d warning(s), %d fatal\n", d.nwarns - d.nfatal, d.nfatal);
    } else {
        dr_print(&d);
    }
    fflush(stdout);
    int rc = d.nfatal ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;
    if (d.json != NULL && dr_write_json(&d) != 0)
        rc = BENCH_EXIT_FAIL;
    return rc;
}
