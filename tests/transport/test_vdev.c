/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_vdev.c - virtual devices (makeVDevice, ncclNet v9+) of the
 * built-in transport, through the exported tables only.
 *
 *   vdev          both roles fuse the first min(devices, 4) devices into one
 *                 virtual device, check its properties, connect a comm on
 *                 it, move verified messages (one by one and 16 in flight)
 *                 and check how the comm's connections sit on the members:
 *                 each member carries some, evenly, and every connection
 *                 joins the same NIC on both ends (member j <-> member j).
 *                 Then a physical device talks to the virtual one, both
 *                 ways (a handle naming one NIC, a connector with one NIC).
 *   vdev_badargs  every malformed request is refused with rc 4 and one WARN
 *                 line, and adds no device: no devices, too many, out of
 *                 range, a virtual member, a duplicate, NULL pointers. And
 *                 the handle codec: four IPv6 listeners fit in 128 bytes
 *                 beside the connector's private bytes; bad entries are
 *                 refused.
 *   tcpx_vdev     strict TCPX mode (TPX_SOCK_TCPX=1) offers no virtual
 *                 devices (Google's plugin is v7, which has none).
 *
 * The vdev scenario runs with TPX_SOCKET_IFNAME=^docker,virbr and
 * TPX_SOCKET_FAMILY=4 (CMake): loopback plus every IPv4 interface that is
 * up, all reachable from this host. With loopback alone the virtual device
 * has one member and the test still checks everything but the spreading.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "plugin/sock/sock_wire.h"
#include "transport_test.h"

#define VD_MAX TPX_NCCL_NET_MAX_DEVS_PER_NIC

/* The virtual device a role made, and its members. */
typedef struct {
    int ndev; /* physical devices */
    int vd;
    int n;
    int members[VD_MAX];
    struct in_addr ip[VD_MAX]; /* the members' IPv4 addresses */
} vdev_t;

static int member_ip(const char *ifname, struct in_addr *out)
{
    struct ifaddrs *list;
    CHECK(getifaddrs(&list) == 0, "getifaddrs failed");
    int found = 0;
    for (struct ifaddrs *i = list; i != NULL && !found; i = i->ifa_next) {
        if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
            strcmp(i->ifa_name, ifname) == 0) {
            *out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
            found = 1;
        }
    }
    freeifaddrs(list);
    CHECK(found, "interface %s has no IPv4 address (TPX_SOCKET_FAMILY=4 should ensure one)",
          ifname);
    return 0;
}

/* Fuse the first min(devices, 4) devices and check what the plugin says. */
static int vdev_make(role_t *r, vdev_t *v)
{
    nt_props_t p;
    int speed = 0, ndev2 = 0;
    char name[256] = "";
    TRY(tt_role_init(r));
    CHECK_RC(nt_devices(&r->nt, &v->ndev));
    v->n = v->ndev < VD_MAX ? v->ndev : VD_MAX;
    for (int i = 0; i < v->n; i++) {
        v->members[i] = i;
        CHECK_RC(nt_props(&r->nt, i, &p));
        CHECK(p.vprops_ndevs == 1 && p.vprops_dev0 == i,
              "physical device %d: vProps {%d, %d}, expected {1, %d}", i, p.vprops_ndevs,
              p.vprops_dev0, i);
        speed += p.speed;
        snprintf(name + strlen(name), sizeof(name) - strlen(name), "%s%s", i ? "+" : "", p.name);
        TRY(member_ip(p.name, &v->ip[i]));
    }
    v->vd = -1;
    CHECK_RC(nt_make_vdevice(&r->nt, &v->vd, v->members, v->n));
    test_say("%d device(s); virtual device %d = %s", v->ndev, v->vd, name);
    CHECK(v->vd == v->ndev, "the first virtual device is %d; expected it after the %d physical "
                            "ones", v->vd, v->ndev);
    CHECK_RC(nt_devices(&r->nt, &ndev2));
    CHECK(ndev2 == v->ndev + 1, "devices() = %d after makeVDevice, expected %d", ndev2,
          v->ndev + 1);
    CHECK_RC(nt_props(&r->nt, v->vd, &p));
    CHECK(p.vprops_ndevs == v->n, "vProps.ndevs %d, expected %d", p.vprops_ndevs, v->n);
    for (int i = 0; i < v->n; i++)
        CHECK(p.vprops_devs[i] == v->members[i], "vProps.devs[%d] = %d, expected %d", i,
              p.vprops_devs[i], v->members[i]);
    CHECK(p.speed == speed, "virtual device speed %d Mb/s, expected the members' sum %d", p.speed,
          speed);
    CHECK(p.name != NULL && strncmp(p.name, name, 63) == 0, "virtual device name \"%s\", "
          "expected \"%s\"", p.name ? p.name : "(null)", name);
    CHECK(p.ptr_support & TPX_NCCL_PTR_HOST, "ptrSupport %#x", p.ptr_support);
    CHECK(p.max_recvs == 1 && p.max_p2p_bytes > 0, "maxRecvs %d maxP2pBytes %zu", p.max_recvs,
          p.max_p2p_bytes);
    /* The same members again: the same device, no new one. */
    int again = -1;
    CHECK_RC(nt_make_vdevice(&r->nt, &again, v->members, v->n));
    CHECK(again == v->vd, "the same members gave virtual device %d, then %d", v->vd, again);
    CHECK_RC(nt_devices(&r->nt, &ndev2));
    CHECK(ndev2 == v->ndev + 1, "devices() = %d after asking twice", ndev2);
    return 0;
}

/* The comm's TCP connections in this process: each joins a member's address
 * to the same address (member j <-> member j: both ends are this host), and
 * the members carry them evenly (the control connection is one more on
 * member 0). */
static int vdev_check_spread(const vdev_t *v, const char *side)
{
    int count[VD_MAX] = {0}, total = 0;
    for (int fd = 0; fd < 4096; fd++) {
        struct sockaddr_storage la, pa;
        socklen_t ll = sizeof(la), pl = sizeof(pa);
        int type = 0;
        socklen_t tl = sizeof(type);
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM)
            continue;
        if (getsockname(fd, (struct sockaddr *)&la, &ll) != 0 || la.ss_family != AF_INET ||
            getpeername(fd, (struct sockaddr *)&pa, &pl) != 0)
            continue; /* not TCP/IPv4, or a listener */
        struct in_addr l = ((struct sockaddr_in *)&la)->sin_addr;
        struct in_addr p = ((struct sockaddr_in *)&pa)->sin_addr;
        char ls[INET_ADDRSTRLEN], ps[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &l, ls, sizeof(ls));
        inet_ntop(AF_INET, &p, ps, sizeof(ps));
        int m = -1;
        for (int i = 0; i < v->n; i++)
            if (v->ip[i].s_addr == l.s_addr)
                m = i;
        CHECK(m >= 0, "%s: a connection from %s, which is no member's address", side, ls);
        CHECK(l.s_addr == p.s_addr, "%s: a connection joins %s to %s: not the same NIC on both "
              "ends", side, ls, ps);
        count[m]++;
        total++;
    }
    char line[256] = "";
    int lo = total, hi = 0;
    for (int i = 0; i < v->n; i++) {
        int data = count[i] - (i == 0); /* member 0 also carries the control connection */
        snprintf(line + strlen(line), sizeof(line) - strlen(line), " %d", count[i]);
        lo = data < lo ? data : lo;
        hi = data > hi ? data : hi;
    }
    test_say("%s: %d connection(s), per member:%s", side, total, line);
    CHECK(total >= 1 + v->n, "%s: %d connections for %d members", side, total, v->n);
    CHECK(lo >= 1 && hi == lo, "%s: data connections per member from %d to %d: not even", side,
          lo, hi);
    return 0;
}

static const size_t vd_sizes[] = {0, 1, 65537, MiB, 3 * MiB + 5, 32 * MiB};
#define VD_NSIZES (sizeof(vd_sizes) / sizeof(vd_sizes[0]))
#define VD_FLIGHT 16
#define VD_SLOT   (MiB + 4096)
#define VD_MIXED  (4 * MiB + 3)
#define VD_BUF    (32 * MiB + 4096 > VD_FLIGHT * VD_SLOT ? 32 * MiB + 4096 : VD_FLIGHT * VD_SLOT)

static size_t flight_size(int j)
{
    return (size_t)(j * 77777) % VD_SLOT;
}

int vdev_recv(role_t *r)
{
    vdev_t v;
    void *lc = NULL, *rc = NULL, *mh = NULL;
    unsigned char handle[HANDLE_SIZE];
    slot_t s[VD_FLIGHT];
    TRY(vdev_make(r, &v));
    memset(handle, 0, sizeof(handle));
    CHECK_RC(nt_listen(&r->nt, v.vd, handle, &lc));
    TRY(tt_link_put(r, handle, sizeof(handle)));
    CHECK_RC(nt_accept_wait(&r->nt, lc, &rc, test_deadline_ms(CONN_MS)));
    CHECK(rc != NULL, "accept on the virtual device gave no comm");
    unsigned char *buf = nt_alloc(VD_BUF);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, rc, buf, VD_BUF, TPX_NCCL_PTR_HOST, &mh));
    for (unsigned i = 0; i < VD_NSIZES; i++)
        TRY(tt_recv_one(r, rc, buf, vd_sizes[i] + 4096, vd_sizes[i], 3, mh, tt_seed(60, i, 0)));
    memset(buf, 0xA5, VD_BUF);
    for (int j = 0; j < VD_FLIGHT; j++) {
        s[j].req = NULL;
        CHECK_RC(nt_irecv1(&r->nt, rc, buf + (size_t)j * VD_SLOT, VD_SLOT, j, mh, &s[j].req));
    }
    TRY(tt_wait_all(r, s, VD_FLIGHT, test_deadline_ms(IO_MS), "vdev recv"));
    for (int j = 0; j < VD_FLIGHT; j++) {
        CHECK(s[j].size == (int)flight_size(j), "message %d: size %d, expected %zu", j, s[j].size,
              flight_size(j));
        size_t bad = nt_verify(buf + (size_t)j * VD_SLOT, flight_size(j), tt_seed(60, 99, j));
        CHECK(bad == NT_VERIFY_OK, "message %d: first wrong byte at %zu", j, bad);
    }
    test_say("%zu sizes one by one and %d messages in flight verified", VD_NSIZES, VD_FLIGHT);
    TRY(vdev_check_spread(&v, "receiver"));
    TRY(tt_sync_put(r, 'v'));
    CHECK_RC(nt_deregmr(&r->nt, rc, mh));
    TRY(tt_recv_close(r, 1, &lc, &rc));
    /* Mixed: the sender connects from device 0 to our virtual device, then
     * from its virtual device to our device 0. */
    int devs[2] = {v.vd, 0};
    for (int k = 0; k < 2; k++) {
        memset(handle, 0, sizeof(handle));
        CHECK_RC(nt_listen(&r->nt, devs[k], handle, &lc));
        TRY(tt_link_put(r, handle, sizeof(handle)));
        CHECK_RC(nt_accept_wait(&r->nt, lc, &rc, test_deadline_ms(CONN_MS)));
        CHECK_RC(nt_regmr(&r->nt, rc, buf, VD_MIXED, TPX_NCCL_PTR_HOST, &mh));
        TRY(tt_recv_one(r, rc, buf, VD_MIXED, VD_MIXED, 5, mh, tt_seed(61, k, 0)));
        CHECK_RC(nt_deregmr(&r->nt, rc, mh));
        TRY(tt_recv_close(r, 1, &lc, &rc));
    }
    test_say("device 0 -> virtual device and virtual device -> device 0: verified");
    nt_free(buf, VD_BUF);
    return tt_expect_no_warnings();
}

int vdev_send(role_t *r)
{
    vdev_t v;
    void *sc = NULL, *mh = NULL;
    unsigned char handle[HANDLE_SIZE];
    slot_t s[VD_FLIGHT];
    TRY(tt_link_get(r, handle, sizeof(handle), CONN_MS));
    TRY(vdev_make(r, &v));
    CHECK_RC(nt_connect_wait(&r->nt, v.vd, handle, &sc, test_deadline_ms(CONN_MS)));
    CHECK(sc != NULL, "connect on the virtual device gave no comm");
    unsigned char *buf = nt_alloc(VD_BUF);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, sc, buf, VD_BUF, TPX_NCCL_PTR_HOST, &mh));
    for (unsigned i = 0; i < VD_NSIZES; i++)
        TRY(tt_send_one(r, sc, buf, vd_sizes[i], 3, mh, tt_seed(60, i, 0)));
    for (int j = 0; j < VD_FLIGHT; j++) {
        nt_fill(buf + (size_t)j * VD_SLOT, flight_size(j), tt_seed(60, 99, j));
        s[j].req = NULL;
        CHECK_RC(nt_isend(&r->nt, sc, buf + (size_t)j * VD_SLOT, flight_size(j), j, mh,
                          &s[j].req));
    }
    TRY(tt_wait_all(r, s, VD_FLIGHT, test_deadline_ms(IO_MS), "vdev send"));
    TRY(vdev_check_spread(&v, "sender"));
    TRY(tt_sync_get(r, 'v', IO_MS)); /* the receiver has counted its connections */
    CHECK_RC(nt_deregmr(&r->nt, sc, mh));
    CHECK_RC(nt_close_send(&r->nt, sc));
    int devs[2] = {0, v.vd};
    for (int k = 0; k < 2; k++) {
        TRY(tt_link_get(r, handle, sizeof(handle), CONN_MS));
        CHECK_RC(nt_connect_wait(&r->nt, devs[k], handle, &sc, test_deadline_ms(CONN_MS)));
        CHECK_RC(nt_regmr(&r->nt, sc, buf, VD_MIXED, TPX_NCCL_PTR_HOST, &mh));
        TRY(tt_send_one(r, sc, buf, VD_MIXED, 5, mh, tt_seed(61, k, 0)));
        CHECK_RC(nt_deregmr(&r->nt, sc, mh));
        CHECK_RC(nt_close_send(&r->nt, sc));
    }
    nt_free(buf, VD_BUF);
    return tt_expect_no_warnings();
}

/* ---- vdev_badargs ------------------------------------------------------------- */

/* Four IPv6 listeners in one handle: round trip, the connector's bytes
 * untouched, bad entries refused. */
static int handle_codec(void)
{
    unsigned char buf[HANDLE_SIZE], bad[HANDLE_SIZE];
    tpx_sock_handle_t h, o;
    memset(&h, 0, sizeof(h));
    h.naddrs = TPX_SOCK_HANDLE_MAX_ADDRS;
    h.nonce = 0x1122334455667788ull;
    for (int i = 0; i < h.naddrs; i++) {
        tpx_sock_addr_t *a = i == 0 ? &h.addr : &h.more[i - 1];
        a->sin6.sin6_family = AF_INET6;
        a->sin6.sin6_port = htons((uint16_t)(40000 + i));
        a->sin6.sin6_scope_id = (uint32_t)(7 + i);
        memset(&a->sin6.sin6_addr, 0xf0 + i, 16);
    }
    tpx__sock_handle_encode(&h, buf);
    for (int i = TPX_SOCK_HANDLE_STAGE_OFF; i < HANDLE_SIZE; i++)
        CHECK(buf[i] == 0, "handle byte %d (the connector's) is %#x after encode", i, buf[i]);
    CHECK(tpx__sock_handle_decode(buf, &o) == TPX_OK, "a 4-NIC IPv6 handle does not decode");
    CHECK(o.naddrs == 4 && o.nonce == h.nonce, "naddrs %d nonce %#llx", o.naddrs,
          (unsigned long long)o.nonce);
    for (int i = 0; i < 4; i++) {
        const tpx_sock_addr_t *a = tpx__sock_handle_addr(&h, i), *b = tpx__sock_handle_addr(&o, i);
        CHECK(b->sa.sa_family == AF_INET6 && b->sin6.sin6_port == a->sin6.sin6_port &&
                  b->sin6.sin6_scope_id == a->sin6.sin6_scope_id &&
                  memcmp(&b->sin6.sin6_addr, &a->sin6.sin6_addr, 16) == 0,
              "address %d of a 4-NIC handle did not survive the round trip", i);
    }
    memcpy(bad, buf, sizeof(bad));
    bad[11] = 5; /* naddrs 5 */
    CHECK(tpx__sock_handle_decode(bad, &o) != TPX_OK, "a handle naming 5 NICs decoded");
    memcpy(bad, buf, sizeof(bad));
    bad[TPX_SOCK_HANDLE_MORE_OFF + 24] = bad[TPX_SOCK_HANDLE_MORE_OFF + 25] = 0; /* NIC 3 port 0 */
    CHECK(tpx__sock_handle_decode(bad, &o) != TPX_OK, "a handle with port 0 for NIC 3 decoded");
    memcpy(bad, buf, sizeof(bad));
    bad[TPX_SOCK_HANDLE_MORE_OFF + 2] = 1; /* reserved field of NIC 2 */
    CHECK(tpx__sock_handle_decode(bad, &o) != TPX_OK, "a handle with a reserved field set "
          "decoded");
    test_say("handle codec: 4 IPv6 NICs round-trip in %d bytes; bad entries refused",
             TPX_SOCK_HANDLE_STAGE_OFF);
    return 0;
}

/* One refused request: rc 4, exactly one WARN line, no new device. */
static int refuse(role_t *r, const char *what, int *d, const int *devs, int ndevs, int ndev_now)
{
    int w0 = nt_warn_count(), n = 0, out = -7;
    int rc = nt_make_vdevice(&r->nt, d == NULL ? NULL : &out, devs, ndevs);
    CHECK(rc == TPX_NCCL_INVALID_ARGUMENT, "makeVDevice with %s returned rc %d, expected %d",
          what, rc, TPX_NCCL_INVALID_ARGUMENT);
    CHECK(out == -7, "makeVDevice with %s wrote device %d although it failed", what, out);
    CHECK(nt_warn_count() == w0 + 1, "makeVDevice with %s logged %d WARN line(s), expected one "
          "saying why", what, nt_warn_count() - w0);
    CHECK_RC(nt_devices(&r->nt, &n));
    CHECK(n == ndev_now, "makeVDevice with %s changed devices() from %d to %d", what, ndev_now,
          n);
    test_say("makeVDevice with %s: rc %d, as expected", what, rc);
    return 0;
}

int vdev_badargs_role(role_t *r)
{
    int ndev = 0, vd = -1, dummy = 0;
    nt_props_t p;
    TRY(handle_codec());
    if (r->nt.abi < 9) {
        test_say("ncclNet v%d has no makeVDevice: nothing more to test", r->nt.abi);
        return 0;
    }
    TRY(tt_role_init(r));
    CHECK_RC(nt_devices(&r->nt, &ndev));
    int zero[1] = {0}, dup[2] = {0, 0}, neg[1] = {-1}, past[1] = {ndev};
    int five[TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12 + 1] = {0, 1, 2, 3}; /* and 0s */
    TRY(refuse(r, "0 devices", &dummy, zero, 0, ndev));
    TRY(refuse(r, "-1 devices", &dummy, zero, -1, ndev));
    /* v12 allows 8 members; this transport fuses at most 4 (its handle). */
    TRY(refuse(r, "5 devices (more than 4)", &dummy, five, VD_MAX + 1, ndev));
    if (r->nt.abi >= 12)
        TRY(refuse(r, "9 devices (more than v12's 8)", &dummy, five,
                   TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12 + 1, ndev));
    TRY(refuse(r, "device -1", &dummy, neg, 1, ndev));
    TRY(refuse(r, "a device past the last", &dummy, past, 1, ndev));
    TRY(refuse(r, "device 0 twice", &dummy, dup, 2, ndev));
    TRY(refuse(r, "a NULL device pointer", NULL, zero, 1, ndev));
    /* A virtual device cannot be a member of another. */
    CHECK_RC(nt_make_vdevice(&r->nt, &vd, zero, 1));
    CHECK(vd == ndev, "virtual device %d, expected %d", vd, ndev);
    int virt[2] = {vd, 0};
    TRY(refuse(r, "a virtual device as a member", &dummy, virt, 2, ndev + 1));
    CHECK(nt_props(&r->nt, ndev + 1, &p) != 0, "getProperties of device %d (none) succeeded",
          ndev + 1);
    return 0;
}

/* ---- tcpx_vdev ---------------------------------------------------------------- */

int tcpx_vdev_role(role_t *r)
{
    int ndev = 0, n = 0, vd = -7;
    int zero[1] = {0};
    TRY(tt_role_init(r));
    CHECK_RC(nt_devices(&r->nt, &ndev));
    int w0 = nt_warn_count();
    int rc = nt_make_vdevice(&r->nt, &vd, zero, 1);
    CHECK(rc != 0, "strict TCPX mode: makeVDevice succeeded (device %d); TCPX has no virtual "
          "devices", vd);
    CHECK(vd == -7, "strict TCPX mode: a failed makeVDevice wrote device %d", vd);
    CHECK(nt_warn_count() == w0 + 1, "strict TCPX mode: makeVDevice logged %d WARN lines, "
          "expected one", nt_warn_count() - w0);
    CHECK_RC(nt_devices(&r->nt, &n));
    CHECK(n == ndev, "devices() changed from %d to %d", ndev, n);
    test_say("strict TCPX mode: makeVDevice refused with rc %d", rc);
    return 0;
}
