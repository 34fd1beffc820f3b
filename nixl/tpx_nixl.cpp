/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx_nixl.cpp - libplugin_TPX.so, the NIXL backend "TPX": a thin adapter
 * from NIXL's backend-engine interface (nixl_abi.h) to tpx's public C API.
 *
 * Every NIXL call maps onto one or two tpx calls (see docs/nixl.md's table);
 * all transport logic stays in libtpx, which is linked in statically so the
 * plugin is one self-contained file that can sit in any NIXL plugin folder.
 *
 *   NIXL                      tpx
 *   getConnInfo               tpx_engine_get_metadata (engine named after the agent)
 *   loadRemoteConnInfo        tpx_remote_load; a connect is queued to a
 *                             helper thread (NIXL must not block here, and the
 *                             first transfer must not pay for the connection)
 *   connect                   tpx_remote_connect (waits)
 *   disconnect                drops the agent's remote; prepared requests and
 *                             loaded descriptors keep it alive (reference counts)
 *   registerMem               tpx_mem_register + tpx_region_export
 *   deregisterMem             tpx_region_unexport + tpx_mem_deregister
 *   getPublicData             the region descriptor's 48 bytes
 *   loadRemoteMD / unloadMD   a descriptor of the remote agent's memory
 *   prepXfer                  tpx_xfer_prepare (once); a list with regular
 *                             runs: tpx_xfer_prepare_strided of the same
 *                             blocks in the same order (compact(), below)
 *   postXfer                  tpx_xfer_post (again after each completion)
 *   checkXfer                 tpx_xfer_poll
 *   releaseReqH               tpx_xfer_release + tpx_prep_release (never waits)
 *   getNotifs / genNotif      tpx_engine_get_notifs / tpx_notif_send
 *
 * Settings come from TPX_* variables (vLLM passes no parameters to non-UCX
 * backends; SGLang passes SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS) and,
 * where given, from the backend parameters "gpu", "port" and "strided".
 * Without "gpu" the engine serves the GPU of the first VRAM registered (its
 * devId), as one worker process per GPU needs.
 *
 * NIXL's descriptor lists have no strides, so a stack that moves a head
 * slice of every token (SGLang across tensor-parallel sizes) makes one
 * descriptor per token per layer: tens of thousands of tiny blocks, which
 * would cost as many list entries on the wire and as many checks at the
 * owner. The regular patterns in such a list -- runs of equal lengths whose
 * local and remote offsets step by constant strides, and runs of such runs
 * -- are found here and sent as strided entries of up to three dimensions,
 * which expand into exactly the same blocks in the same order: the bytes,
 * their order in the packed chunks and the result do not change. A list with
 * no such run goes as before (a list of version 2, which every tpx reads);
 * "strided" = "0" sends every list that way, for peers of tpx without
 * strided entries.
 */
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "nixl_abi.h"
#include "tpx/tpx.h"
#include "tpx_nixl_log.h"

namespace tpx_nixl {
namespace {

#define TPX_NIXL_LOG(...)                                                                          \
    do {                                                                                           \
        std::fprintf(stderr, "tpx-nixl: " __VA_ARGS__);                                            \
        std::fputc('\n', stderr);                                                                  \
    } while (0)

/* A lost peer is REMOTE_DISCONNECT: NIXL then drops the agent's metadata,
 * and loading it again (a restarted peer) connects afresh. */
status_t from_tpx(tpx_status_t s)
{
    switch (s) {
    case TPX_OK: return SUCCESS;
    case TPX_INPROGRESS: return IN_PROG;
    case TPX_ERR_INVALID_ARG: return ERR_INVALID_PARAM;
    case TPX_ERR_ACCESS: return ERR_NOT_ALLOWED;
    case TPX_ERR_UNSUPPORTED: return ERR_NOT_SUPPORTED;
    case TPX_ERR_CANCELED: return ERR_CANCELED;
    case TPX_ERR_PROTOCOL: return ERR_MISMATCH;
    case TPX_ERR_CONN_RESET:
    case TPX_ERR_CONN_REFUSED:
    case TPX_ERR_UNREACHABLE: return ERR_REMOTE_DISCONNECT;
    default: return ERR_BACKEND;
    }
}

/* One loaded remote agent; the last reference releases the tpx remote. */
struct Remote {
    std::string agent;
    tpx_remote_t *r;
    Remote(std::string a, tpx_remote_t *rr) : agent(std::move(a)), r(rr) {}
    ~Remote() { tpx_remote_release(r); }
    Remote(const Remote &) = delete;
    void operator=(const Remote &) = delete;
};
using RemoteRef = std::shared_ptr<Remote>;

class LocalMD : public BackendMD {
public:
    tpx_region_t *region = nullptr;
    uintptr_t base = 0; /* offset 0 of the region */
    tpx_rdesc_t desc{}; /* the exported range, for peers */
    LocalMD() : BackendMD(true) {}
};

class RemoteMD : public BackendMD {
public:
    RemoteRef remote;
    tpx_rdesc_t desc{};
    uint64_t addr = 0; /* the owner's address of the descriptor's first byte */
    RemoteMD() : BackendMD(false) {}
};

class Req : public ReqH {
public:
    RemoteRef remote; /* released last (members are destroyed after the body) */
    tpx_prep_t *prep = nullptr;
    tpx_xfer_t *xfer = nullptr;
    ~Req() override
    {
        if (xfer != nullptr)
            tpx_xfer_release(xfer); /* cancels a running one; never waits */
        if (prep != nullptr)
            tpx_prep_release(prep);
    }
};

/* Nonzero when no two elements of e on the destination side share a byte:
 * the test tpx_xfer_prepare_strided() applies (dimensions sorted by
 * stride, each stride at least the extent of those inside it), so that a
 * list compact() makes is never refused where its plain blocks were not. */
bool disjoint(const tpx_strided_t &e, bool local)
{
    size_t st[TPX_STRIDED_MAX_DIMS], ct[TPX_STRIDED_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < e.ndims; d++) {
        if (e.dim[d].count < 2)
            continue;
        size_t s = local ? e.dim[d].local_stride : e.dim[d].remote_stride;
        int k = n++;
        for (; k > 0 && st[k - 1] > s; k--) { /* by stride, smallest first */
            st[k] = st[k - 1];
            ct[k] = ct[k - 1];
        }
        st[k] = s;
        ct[k] = e.dim[d].count;
    }
    size_t ext = e.elem_len;
    for (int k = 0; k < n; k++) {
        if (st[k] < ext || st[k] == 0 || (ct[k] - 1) > (SIZE_MAX - ext) / st[k])
            return false;
        ext += (ct[k] - 1) * st[k];
    }
    return true;
}

/* b has a's shape: the same memory, element and dimensions. */
bool same_shape(const tpx_strided_t &a, const tpx_strided_t &b)
{
    if (a.local != b.local || a.remote != b.remote || a.elem_len != b.elem_len ||
        a.ndims != b.ndims)
        return false;
    for (int d = 0; d < a.ndims; d++)
        if (a.dim[d].count != b.dim[d].count || a.dim[d].local_stride != b.dim[d].local_stride ||
            a.dim[d].remote_stride != b.dim[d].remote_stride)
            return false;
    return true;
}

/* Plain blocks make a run from this many on: two or three blocks that
 * happen to step evenly (a random block list has many such pairs) are
 * no pattern, and stay plain blocks that any tpx reads. */
constexpr size_t RUN_MIN = 4;

/* One pass: each maximal run of same-shaped entries of fewer than
 * TPX_STRIDED_MAX_DIMS dimensions whose starts step by constant strides
 * (>= 0 on both sides) becomes one entry with a new outermost dimension,
 * while the destination stays disjoint. Greedy from the front: the
 * expansion of the result is the input, block for block. */
std::vector<tpx_strided_t> compact_pass(const std::vector<tpx_strided_t> &in, bool read)
{
    std::vector<tpx_strided_t> out;
    out.reserve(in.size());
    for (size_t i = 0; i < in.size();) {
        const tpx_strided_t &a = in[i];
        size_t j = i + 1;
        if (a.ndims < TPX_STRIDED_MAX_DIMS && a.elem_len > 0 && j < in.size() &&
            same_shape(a, in[j]) &&
            in[j].local_offset >= a.local_offset && in[j].remote_offset >= a.remote_offset) {
            tpx_strided_t e = a;
            for (int d = e.ndims; d > 0; d--)
                e.dim[d] = e.dim[d - 1];
            e.ndims++;
            e.dim[0] = tpx_dim_t{1, in[j].local_offset - a.local_offset,
                                 in[j].remote_offset - a.remote_offset};
            for (; j < in.size() && same_shape(a, in[j]) &&
                   in[j].local_offset == in[j - 1].local_offset + e.dim[0].local_stride &&
                   in[j].remote_offset == in[j - 1].remote_offset + e.dim[0].remote_stride &&
                   in[j].local_offset >= in[j - 1].local_offset &&
                   in[j].remote_offset >= in[j - 1].remote_offset; /* no wrap */
                 j++) {
                e.dim[0].count++;
                if (!disjoint(e, read)) {
                    e.dim[0].count--;
                    break;
                }
            }
            if (e.dim[0].count >= (a.ndims == 0 ? RUN_MIN : 2)) {
                out.push_back(e);
                i += e.dim[0].count;
                continue;
            }
        }
        out.push_back(a);
        i++;
    }
    return out;
}

/* The list as strided entries: plain blocks grouped into runs, runs of
 * equal runs into two dimensions, those into three. */
std::vector<tpx_strided_t> compact(const std::vector<tpx_iov_t> &iov, bool read)
{
    std::vector<tpx_strided_t> v(iov.size());
    for (size_t i = 0; i < iov.size(); i++)
        v[i] = tpx_strided_t{iov[i].local, iov[i].local_offset, iov[i].remote,
                             iov[i].remote_offset, iov[i].len, 0, {}};
    for (int pass = 0; pass < TPX_STRIDED_MAX_DIMS && v.size() > 1; pass++) {
        size_t before = v.size();
        v = compact_pass(v, read);
        if (v.size() == before)
            break;
    }
    return v;
}

constexpr size_t NOTIF_BATCH = 32;
constexpr size_t LONG_NAME_MAX = 255;    /* agent names of 64..255 bytes travel in notifications */
constexpr char LONG_MARK[] = "~nixl~"; /* engine names of such agents begin with this */
constexpr int CONNECT_STEP_MS = 500;
constexpr int CONNECT_TOTAL_MS = 30000;
constexpr int POST_CONNECT_MS = 3000; /* the most a post waits for a (re)connection */

class Engine : public BackendEngine {
public:
    explicit Engine(const InitParams *ip) : BackendEngine(ip)
    {
        tpx_engine_params_t p;
        tpx_engine_params_init(&p);
        p.port = TPX_PORT_EPHEMERAL; /* several agents per host */
        const params_t &cp = customParams();
        for (const auto &kv : cp)
            if (kv.first != "gpu" && kv.first != "port" && kv.first != "strided")
                TPX_NIXL_LOG("backend parameter '%s' is not one of TPX's (gpu, port, strided): "
                             "ignored; settings come from TPX_* variables", kv.first.c_str());
        if (auto it = cp.find("strided"); it != cp.end() && it->second == "0")
            strided_ = false;
        if (auto it = cp.find("gpu"); it != cp.end() && !it->second.empty())
            p.gpu = std::atoi(it->second.c_str());
        if (auto it = cp.find("port"); it != cp.end() && std::atoi(it->second.c_str()) > 0)
            p.port = std::atoi(it->second.c_str());
        /* Peers see the engine's name as the sender of notifications. An
         * agent name that does not fit (62 bytes) travels in front of each
         * notification instead, under an engine name that says so. */
        if (localAgent.empty() || localAgent.size() > LONG_NAME_MAX ||
            localAgent.compare(0, sizeof(LONG_MARK) - 1, LONG_MARK) == 0) {
            TPX_NIXL_LOG("agent name '%s' must have 1..%zu bytes and not begin with %s",
                         localAgent.c_str(), LONG_NAME_MAX, LONG_MARK);
            initErr = true;
            return;
        }
        if (localAgent.size() < TPX_NAME_MAX - 1) { /* room for tpx's "?" of unproven names */
            engine_name_ = localAgent;
        } else {
            uint64_t h = 1469598103934665603ull; /* FNV-1a: tells long names apart in logs */
            for (unsigned char c : localAgent)
                h = (h ^ c) * 1099511628211ull;
            char buf[TPX_NAME_MAX];
            std::snprintf(buf, sizeof(buf), "%s%016llx.%.36s", LONG_MARK, (unsigned long long)h,
                          localAgent.c_str());
            engine_name_ = buf;
            notif_prefix_.assign(1, static_cast<char>(localAgent.size()));
            notif_prefix_ += localAgent;
        }
        p.name = engine_name_.c_str();
        if (tpx_engine_create(&p, &eng_) != TPX_OK) {
            initErr = true;
            return;
        }
        notifs_.resize(NOTIF_BATCH);
        worker_ = std::thread([this] { connect_loop(); });
    }

    ~Engine() override
    {
        {
            std::lock_guard<std::mutex> g(mu_);
            stop_ = true;
            queue_.clear();
        }
        cv_.notify_all();
        if (worker_.joinable())
            worker_.join();
        remotes_.clear();
        tpx_engine_destroy(eng_);
    }

    bool supportsRemote() const override { return true; }
    bool supportsLocal() const override { return false; }
    bool supportsNotif() const override { return true; }
    mem_list_t getSupportedMems() const override { return {DRAM_SEG, VRAM_SEG}; }

    status_t registerMem(const BlobDesc &mem, const mem_t &type, BackendMD *&out) override
    {
        if (type != DRAM_SEG && type != VRAM_SEG)
            return ERR_NOT_SUPPORTED;
        auto md = std::make_unique<LocalMD>();
        void *addr = reinterpret_cast<void *>(mem.addr);
        tpx_status_t s;
        if (type == VRAM_SEG) {
            /* devId is the GPU: the first VRAM registration binds the
             * engine to it (its NICs, the GPU current in plugin calls). */
            if (mem.devId > static_cast<uint64_t>(INT32_MAX)) {
                TPX_NIXL_LOG("registerMem: VRAM devId %llu is not a GPU index",
                             static_cast<unsigned long long>(mem.devId));
                return ERR_INVALID_PARAM;
            }
            s = tpx_mem_register_gpu(eng_, addr, mem.len, static_cast<int>(mem.devId),
                                     &md->region);
        } else {
            s = tpx_mem_register(eng_, addr, mem.len, TPX_MEM_HOST, &md->region);
        }
        if (s != TPX_OK) {
            TPX_NIXL_LOG("registerMem: %s memory at 0x%llx (%zu bytes, devId %llu): %s",
                         type == VRAM_SEG ? "VRAM" : "DRAM",
                         static_cast<unsigned long long>(mem.addr), static_cast<size_t>(mem.len),
                         static_cast<unsigned long long>(mem.devId), tpx_status_string(s));
            return from_tpx(s);
        }
        md->base = reinterpret_cast<uintptr_t>(tpx_region_base(md->region));
        s = tpx_region_export(md->region, mem.addr - md->base, mem.len, &md->desc);
        if (s != TPX_OK) {
            tpx_mem_deregister(md->region);
            return from_tpx(s);
        }
        out = md.release();
        return SUCCESS;
    }

    status_t deregisterMem(BackendMD *meta) override
    {
        auto *md = static_cast<LocalMD *>(meta);
        if (md == nullptr)
            return ERR_INVALID_PARAM;
        /* The region may outlive this registration (another one inside it
         * shares it): its export must not (tpx_region_unexport). */
        (void)tpx_region_unexport(md->region, &md->desc);
        tpx_mem_deregister(md->region);
        delete md;
        return SUCCESS;
    }

    status_t getPublicData(const BackendMD *meta, std::string &str) const override
    {
        const auto *md = static_cast<const LocalMD *>(meta);
        if (md == nullptr)
            return ERR_INVALID_PARAM;
        str.assign(reinterpret_cast<const char *>(md->desc.bytes), sizeof(md->desc.bytes));
        return SUCCESS;
    }

    status_t getConnInfo(std::string &str) const override
    {
        unsigned char buf[TPX_METADATA_MAX];
        size_t len = sizeof(buf);
        tpx_status_t s = tpx_engine_get_metadata(eng_, buf, &len);
        if (s != TPX_OK)
            return from_tpx(s);
        str.assign(reinterpret_cast<const char *>(buf), len);
        return SUCCESS;
    }

    status_t loadRemoteConnInfo(const std::string &agent, const std::string &info) override
    {
        tpx_remote_t *r = nullptr;
        tpx_status_t s = tpx_remote_load(eng_, info.data(), info.size(), &r);
        if (s != TPX_OK)
            return from_tpx(s);
        auto rem = std::make_shared<Remote>(agent, r);
        {
            std::lock_guard<std::mutex> g(mu_);
            remotes_[agent] = rem; /* a reloaded (restarted) agent replaces the old one */
            queue_.push_back(rem);
        }
        cv_.notify_one();
        return SUCCESS;
    }

    status_t connect(const std::string &agent) override
    {
        if (agent == localAgent)
            return SUCCESS;
        RemoteRef rem = find(agent);
        if (!rem)
            return ERR_NOT_FOUND;
        return from_tpx(tpx_remote_connect(rem->r, 0));
    }

    status_t disconnect(const std::string &agent) override
    {
        RemoteRef old;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = remotes_.find(agent);
            if (it == remotes_.end())
                return SUCCESS;
            old = std::move(it->second);
            remotes_.erase(it);
        }
        return SUCCESS; /* `old` releases the remote unless requests still hold it */
    }

    status_t loadRemoteMD(const BlobDesc &input, const mem_t &type, const std::string &agent,
                          BackendMD *&output) override
    {
        if (type != DRAM_SEG && type != VRAM_SEG)
            return ERR_NOT_SUPPORTED;
        RemoteRef rem = find(agent);
        if (!rem)
            return ERR_NOT_FOUND;
        auto md = std::make_unique<RemoteMD>();
        if (input.metaInfo.size() != sizeof(md->desc.bytes))
            return ERR_MISMATCH;
        std::memcpy(md->desc.bytes, input.metaInfo.data(), sizeof(md->desc.bytes));
        if (tpx_rdesc_info(&md->desc, &md->addr, nullptr) != TPX_OK)
            return ERR_MISMATCH;
        md->remote = std::move(rem);
        output = md.release();
        return SUCCESS;
    }

    status_t unloadMD(BackendMD *input) override
    {
        delete input;
        return SUCCESS;
    }

    status_t prepXfer(const xfer_op_t &op, const MetaDList &local, const MetaDList &remote,
                      const std::string &agent, ReqH *&handle,
                      const OptArgs * /*opt_args*/) const override
    {
        const int n = local.descCount();
        if (n <= 0 || n != remote.descCount() || (op != OP_READ && op != OP_WRITE))
            return ERR_INVALID_PARAM;
        std::vector<tpx_iov_t> iov(static_cast<size_t>(n));
        Remote *target = nullptr;
        for (int i = 0; i < n; i++) {
            const MetaDesc &l = local[i];
            const MetaDesc &r = remote[i];
            const auto *lm = static_cast<const LocalMD *>(l.metadataP);
            const auto *rm = static_cast<const RemoteMD *>(r.metadataP);
            if (lm == nullptr || rm == nullptr || l.len != r.len || l.addr < lm->base ||
                r.addr < rm->addr)
                return ERR_INVALID_PARAM;
            if (target == nullptr)
                target = rm->remote.get();
            if (rm->remote.get() != target || target->agent != agent)
                return ERR_INVALID_PARAM; /* one remote agent per request */
            iov[i] = tpx_iov_t{lm->region, l.addr - lm->base, &rm->desc, r.addr - rm->addr, l.len};
        }
        auto q = std::make_unique<Req>();
        q->remote = static_cast<const RemoteMD *>(remote[0].metadataP)->remote;
        const tpx_op_t top = op == OP_READ ? TPX_OP_READ : TPX_OP_WRITE;
        std::vector<tpx_strided_t> sv;
        if (strided_ && n > 1)
            sv = compact(iov, op == OP_READ);
        size_t nstrided = 0;
        for (const tpx_strided_t &e : sv)
            nstrided += e.ndims > 0;
        tpx_status_t s;
        if (nstrided > 0) {
            TPX_NIXL_DEBUG("prepXfer %s of %d descriptors: as %zu entries, %zu strided",
                           op == OP_READ ? "READ" : "WRITE", n, sv.size(), nstrided);
            s = tpx_xfer_prepare_strided(q->remote->r, top, sv.data(), sv.size(), &q->prep);
        } else {
            TPX_NIXL_DEBUG("prepXfer %s of %d descriptors: %d plain blocks (%s)",
                           op == OP_READ ? "READ" : "WRITE", n, n,
                           strided_ ? "no regular run" : "strided entries off");
            s = tpx_xfer_prepare(q->remote->r, top, iov.data(), iov.size(), &q->prep);
        }
        if (s != TPX_OK)
            return from_tpx(s);
        handle = q.release();
        return SUCCESS;
    }

    status_t postXfer(const xfer_op_t &, const MetaDList &, const MetaDList &, const std::string &,
                      ReqH *&handle, const OptArgs *opt_args) const override
    {
        auto *q = static_cast<Req *>(handle);
        if (q == nullptr || q->prep == nullptr)
            return ERR_INVALID_PARAM;
        const void *msg = nullptr;
        size_t len = 0;
        std::string wire;
        if (opt_args != nullptr && opt_args->hasNotif) {
            wire = notif_prefix_ + opt_args->notifMsg;
            msg = wire.data();
            len = wire.size();
            if (len > TPX_NOTIF_MAX)
                return ERR_INVALID_PARAM;
        }
        if (q->xfer != nullptr) { /* a re-post: NIXL saw the previous one end */
            tpx_xfer_release(q->xfer);
            q->xfer = nullptr;
        }
        /* Connected already (the background connect), at once; else a post
         * would wait up to TPX_CONNECT_TIMEOUT_MS (30 s) for a dead peer. */
        tpx_status_t s = tpx_remote_connect(q->remote->r, POST_CONNECT_MS);
        if (s != TPX_OK)
            return from_tpx(s);
        s = tpx_xfer_post(q->prep, msg, len, 0, &q->xfer);
        if (s != TPX_OK)
            return from_tpx(s);
        return IN_PROG;
    }

    status_t checkXfer(ReqH *handle) const override
    {
        auto *q = static_cast<Req *>(handle);
        if (q == nullptr || q->xfer == nullptr)
            return ERR_NOT_POSTED;
        /* Callers poll in a loop: tpx_xfer_poll() yields the core itself
         * while the transfer runs. */
        return from_tpx(tpx_xfer_poll(q->xfer, nullptr));
    }

    status_t releaseReqH(ReqH *handle) const override
    {
        delete static_cast<Req *>(handle);
        return SUCCESS;
    }

    status_t getNotifs(notif_list_t &list) override
    {
        std::lock_guard<std::mutex> g(notif_mu_);
        for (;;) {
            size_t n = 0;
            tpx_status_t s = tpx_engine_get_notifs(eng_, notifs_.data(), notifs_.size(), &n);
            if (s == TPX_ERR_OVERFLOW)
                TPX_NIXL_LOG("notifications were dropped: the queue was full (TPX_NOTIF_QUEUE)");
            else if (s != TPX_OK)
                return from_tpx(s);
            /* tpx marks a sender whose identity it could not prove "?name"
             * (no libsodium); NIXL matches notifications by agent name and
             * its own backends do not prove names either: the plain name. */
            for (size_t i = 0; i < n; i++) {
                std::string from(notifs_[i].from + (notifs_[i].from[0] == '?'));
                std::string msg(reinterpret_cast<const char *>(notifs_[i].msg), notifs_[i].len);
                size_t k;
                if (from.compare(0, sizeof(LONG_MARK) - 1, LONG_MARK) == 0 && !msg.empty() &&
                    (k = static_cast<unsigned char>(msg[0])) < msg.size()) {
                    from = msg.substr(1, k); /* a long agent name, sent in front */
                    msg.erase(0, 1 + k);
                }
                list.emplace_back(std::move(from), std::move(msg));
            }
            if (n < notifs_.size())
                return SUCCESS;
        }
    }

    status_t genNotif(const std::string &agent, const std::string &msg) const override
    {
        const std::string wire = notif_prefix_ + msg;
        if (wire.size() > TPX_NOTIF_MAX)
            return ERR_INVALID_PARAM;
        RemoteRef rem = find(agent);
        if (!rem)
            return ERR_NOT_FOUND;
        return from_tpx(tpx_notif_send(rem->r, wire.data(), wire.size()));
    }

private:
    RemoteRef find(const std::string &agent) const
    {
        std::lock_guard<std::mutex> g(mu_);
        auto it = remotes_.find(agent);
        return it == remotes_.end() ? RemoteRef() : it->second;
    }

    /* Connects remotes as their metadata arrives, so that neither
     * loadRemoteConnInfo nor the first transfer waits for it. A failure is
     * left for the first transfer to meet (it connects again). */
    void connect_loop()
    {
        std::unique_lock<std::mutex> lk(mu_);
        for (;;) {
            /* A timed wait, never cv_.wait(): libstdc++ 12 versions that one
             * GLIBCXX_3.4.30, which would lift the wheel's manylinux floor
             * from glibc 2.34 to 2.35; wait_until on the steady clock is
             * inline (pthread_cond_clockwait, glibc 2.30). */
            while (!cv_.wait_until(lk, std::chrono::steady_clock::now() + std::chrono::hours(1),
                                   [this] { return stop_ || !queue_.empty(); })) {
            }
            if (stop_)
                return;
            RemoteRef rem = std::move(queue_.front());
            queue_.pop_front();
            lk.unlock();
            for (int waited = 0; waited < CONNECT_TOTAL_MS; waited += CONNECT_STEP_MS) {
                tpx_status_t s = tpx_remote_connect(rem->r, CONNECT_STEP_MS);
                if (s != TPX_ERR_TIMED_OUT && s != TPX_ERR_CONN_REFUSED)
                    break;
                std::lock_guard<std::mutex> g(mu_);
                if (stop_)
                    break;
            }
            rem.reset(); /* outside the lock: may release the remote */
            lk.lock();
        }
    }

    tpx_engine_t *eng_ = nullptr;
    std::string engine_name_;  /* the agent's name, or LONG_MARK + hash + its start */
    std::string notif_prefix_; /* "" or [length byte][agent name] before every notification */
    bool strided_ = true;      /* backend parameter "strided": regular runs as strided entries */
    mutable std::mutex mu_; /* remotes_, queue_, stop_ */
    std::unordered_map<std::string, RemoteRef> remotes_;
    std::deque<RemoteRef> queue_;
    bool stop_ = false;
    std::condition_variable cv_;
    std::thread worker_;
    std::mutex notif_mu_;
    std::vector<tpx_notif_t> notifs_;
};

BackendEngine *create_engine(const InitParams *ip)
{
    try {
        return new Engine(ip);
    } catch (const std::exception &e) {
        TPX_NIXL_LOG("cannot create the engine: %s", e.what());
        return nullptr;
    }
}

void destroy_engine(BackendEngine *e) { delete e; }
const char *plugin_name() { return "TPX"; }
const char *plugin_version() { return tpx_version_string(); }
params_t backend_options() { return {{"gpu", "-1"}, {"port", "0"}, {"strided", "1"}}; }
mem_list_t backend_mems() { return {DRAM_SEG, VRAM_SEG}; }

PluginDesc plugin = {PLUGIN_API_VERSION, create_engine,   destroy_engine, plugin_name,
                     plugin_version,     backend_options, backend_mems};

} // namespace
} // namespace tpx_nixl

extern "C" {
__attribute__((visibility("default"))) tpx_nixl::PluginDesc *nixl_plugin_init(void)
{
    return &tpx_nixl::plugin;
}
__attribute__((visibility("default"))) void nixl_plugin_fini(void) {}
}
