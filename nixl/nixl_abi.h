/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nixl/nixl_abi.h - the part of NIXL's backend-plugin ABI that libplugin_TPX.so
 * needs, written for tpx from the facts (NIXL ships no headers in its wheels).
 *
 * NIXL (github.com/ai-dynamo/nixl) loads a backend as libplugin_<NAME>.so
 * (dlopen RTLD_NOW|RTLD_LOCAL from its plugin folder, or NIXL_PLUGIN_DIR,
 * which replaces it), calls the C symbol nixl_plugin_init() and checks that
 * the descriptor it returns has api_version 1. It then creates engines
 * through the descriptor: C++ objects whose base class, virtual methods and
 * argument types NIXL's core uses directly. That is a C++ ABI (the Itanium
 * ABI of GCC/libstdc++, C++20): this file pins it to what the 1.x wheels on
 * PyPI (nixl-cu12 / nixl-cu13 1.5.x, built with GCC 14) expect:
 *
 *  - the order of the engine's virtual methods (checked against the vtable
 *    of the wheel's own libplugin_POSIX.so: 2 destructor slots, then the
 *    27 entries below in this order);
 *  - the layout of the engine base class, whose data members NIXL's core
 *    reads through inline accessors (initErr at 160, localAgent at 168,
 *    208 bytes; checked against the wheel's POSIX engine constructor);
 *  - the argument types: descriptors {addr, len, devId}, descriptor lists
 *    {vptr, memory type, std::vector}, the optional-argument struct.
 *
 * Names are tpx's own (namespace tpx_nixl): only layouts and the order of
 * virtual functions matter across the boundary. The static_asserts below
 * and the CI test that loads this plugin into the real wheel (nixl/test)
 * prove them.
 */
#ifndef TPX_NIXL_ABI_H
#define TPX_NIXL_ABI_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tpx_nixl {

/* ---- enums and aliases (values as NIXL numbers them) ---- */

enum mem_t : int { DRAM_SEG = 0, VRAM_SEG = 1, BLK_SEG = 2, OBJ_SEG = 3, FILE_SEG = 4 };
enum xfer_op_t : int { OP_READ = 0, OP_WRITE = 1 };
enum status_t : int {
    IN_PROG = 1,
    SUCCESS = 0,
    ERR_NOT_POSTED = -1,
    ERR_INVALID_PARAM = -2,
    ERR_BACKEND = -3,
    ERR_NOT_FOUND = -4,
    ERR_MISMATCH = -5,
    ERR_NOT_ALLOWED = -6,
    ERR_REPOST_ACTIVE = -7,
    ERR_UNKNOWN = -8,
    ERR_NOT_SUPPORTED = -9,
    ERR_REMOTE_DISCONNECT = -10,
    ERR_CANCELED = -11,
    ERR_NO_TELEMETRY = -12,
};
enum class thread_sync_t : int { NONE = 0, STRICT = 1, RW = 2 };
enum class cost_t : int { ANALYTICAL_BACKEND = 0 };

using params_t = std::unordered_map<std::string, std::string>; /* backend options */
using mem_list_t = std::vector<mem_t>;
using blob_t = std::string;                                       /* bytes, '\0' allowed */
using notif_list_t = std::vector<std::pair<std::string, std::string>>; /* (agent, message) */
using query_resp_t = std::optional<params_t>;
using mem_view_t = void *;

/* ---- descriptors ---- */

struct BasicDesc {
    uintptr_t addr;
    size_t len;
    uint64_t devId; /* GPU index for VRAM_SEG, 0 for DRAM_SEG */
};

struct BlobDesc : BasicDesc {
    blob_t metaInfo; /* registerMem: empty; loadRemoteMD: what getPublicData gave the peer */
};

class BackendMD; /* a backend's per-registration object */

struct MetaDesc : BasicDesc {
    BackendMD *metadataP; /* what registerMem / loadRemoteMD returned for the range */
};

struct RemoteMetaDesc : MetaDesc {
    std::string remoteAgent;
};

/* nixlDescList<T>: a polymorphic class (virtual destructor and methods the
 * core defines); only read here. */
template <class T> class DescList {
public:
    DescList() = delete;
    mem_t getType() const { return type_; }
    int descCount() const { return (int)descs_.size(); }
    const T &operator[](size_t i) const { return descs_[i]; }

private:
    virtual ~DescList() = 0;
    mem_t type_;
    std::vector<T> descs_;
};
using MetaDList = DescList<MetaDesc>;
using RemoteMetaDList = DescList<RemoteMetaDesc>;
using BlobDList = DescList<BlobDesc>;

/* ---- auxiliary classes ---- */

struct OptArgs { /* nixlBackendOptionalArgs: postXfer's notification */
    blob_t notifMsg;
    bool hasNotif = false;
    blob_t customParam;
};

struct InitParams { /* nixlBackendInitParams */
    std::string localAgent;
    std::string type;
    params_t *customParams = nullptr;
    bool enableProgTh = false;
    uint64_t pthrDelay = 0;
    thread_sync_t syncMode;
    bool enableTelemetry = false;
};

class ReqH { /* nixlBackendReqH: the backend's transfer handle, owned by the backend */
public:
    virtual ~ReqH() {}
};

class BackendMD { /* nixlBackendMD */
protected:
    bool isPrivateMD;

public:
    explicit BackendMD(bool is_private) : isPrivateMD(is_private) {}
    virtual ~BackendMD() {}
};

struct TelemetryEvent; /* only held in an (always empty) vector */

/* ---- the engine base class (nixlBackendEngine) ----
 * The core reads the members through inline accessors: keep the layout. */
class BackendEngine {
private:
    std::string backendType_;
    params_t customParams_;
    std::vector<TelemetryEvent *> telemetryEvents_; /* same layout as the real vector */
    std::mutex telemetryMutex_;

protected:
    bool initErr = false;
    const std::string localAgent;
    const bool enableTelemetry_;

public:
    explicit BackendEngine(const InitParams *p)
        : backendType_(p->type), customParams_(p->customParams ? *p->customParams : params_t{}),
          localAgent(p->localAgent),
          enableTelemetry_(p->enableTelemetry)
    {
    }
    BackendEngine(const BackendEngine &) = delete;
    void operator=(const BackendEngine &) = delete;
    const params_t &customParams() const { return customParams_; }

    virtual ~BackendEngine() = default;
    virtual bool supportsRemote() const = 0;
    virtual bool supportsLocal() const = 0;
    virtual bool supportsNotif() const = 0;
    virtual mem_list_t getSupportedMems() const = 0;
    virtual status_t registerMem(const BlobDesc &mem, const mem_t &type, BackendMD *&out) = 0;
    virtual status_t deregisterMem(BackendMD *meta) = 0;
    virtual status_t connect(const std::string &remote_agent) = 0;
    virtual status_t disconnect(const std::string &remote_agent) = 0;
    virtual status_t unloadMD(BackendMD *input) = 0;
    virtual status_t prepXfer(const xfer_op_t &op, const MetaDList &local, const MetaDList &remote,
                              const std::string &remote_agent, ReqH *&handle,
                              const OptArgs *opt_args = nullptr) const = 0;
    virtual status_t postXfer(const xfer_op_t &op, const MetaDList &local, const MetaDList &remote,
                              const std::string &remote_agent, ReqH *&handle,
                              const OptArgs *opt_args = nullptr) const = 0;
    virtual status_t checkXfer(ReqH *handle) const = 0;
    virtual status_t releaseReqH(ReqH *handle) const = 0;
    virtual status_t prepMemView(const RemoteMetaDList &, mem_view_t &, const OptArgs *) const
    {
        return ERR_NOT_SUPPORTED;
    }
    virtual status_t prepMemView(const MetaDList &, mem_view_t &, const OptArgs *) const
    {
        return ERR_NOT_SUPPORTED;
    }
    virtual void releaseMemView(mem_view_t) const {}
    virtual status_t getPublicData(const BackendMD *meta, std::string &str) const = 0;
    virtual status_t getConnInfo(std::string &str) const = 0;
    virtual status_t loadRemoteConnInfo(const std::string &remote_agent,
                                        const std::string &conn_info) = 0;
    virtual status_t loadRemoteMD(const BlobDesc &input, const mem_t &type,
                                  const std::string &remote_agent, BackendMD *&output) = 0;
    virtual status_t loadLocalMD(BackendMD *, BackendMD *&) { return ERR_BACKEND; }
    virtual status_t getNotifs(notif_list_t &notif_list) = 0;
    virtual status_t genNotif(const std::string &remote_agent, const std::string &msg) const = 0;
    virtual status_t queryMem(const BlobDList &, std::vector<query_resp_t> &) const
    {
        return ERR_NOT_SUPPORTED;
    }
    virtual status_t estimateXferCost(const xfer_op_t &, const MetaDList &, const MetaDList &,
                                      const std::string &, ReqH *const &,
                                      std::chrono::microseconds &, std::chrono::microseconds &,
                                      cost_t &, const void *) const
    {
        return ERR_NOT_SUPPORTED;
    }
};

/* ---- the plugin descriptor nixl_plugin_init() returns (nixlBackendPlugin) ---- */

constexpr int PLUGIN_API_VERSION = 1;

struct PluginDesc {
    int api_version;
    BackendEngine *(*create_engine)(const InitParams *init_params);
    void (*destroy_engine)(BackendEngine *engine);
    const char *(*get_plugin_name)();
    const char *(*get_plugin_version)();
    params_t (*get_backend_options)();
    mem_list_t (*get_backend_mems)();
};

/* Layouts the 1.5.x wheels were checked to have (x86-64 and aarch64, LP64;
 * offsetof on these non-standard-layout classes is what GCC computes). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(sizeof(BasicDesc) == 24);
static_assert(sizeof(MetaDesc) == 32 && offsetof(MetaDesc, metadataP) == 24);
static_assert(offsetof(BlobDesc, metaInfo) == 24);
static_assert(sizeof(OptArgs) == 72 && offsetof(OptArgs, hasNotif) == 32);
static_assert(offsetof(InitParams, customParams) == 64 && offsetof(InitParams, enableProgTh) == 72 &&
              offsetof(InitParams, pthrDelay) == 80 && offsetof(InitParams, syncMode) == 88 &&
              offsetof(InitParams, enableTelemetry) == 92);
static_assert(sizeof(std::mutex) == 40 && sizeof(params_t) == 56);
static_assert(sizeof(BackendEngine) == 208);
static_assert(offsetof(PluginDesc, create_engine) == 8 && sizeof(PluginDesc) == 56);
#pragma GCC diagnostic pop

} // namespace tpx_nixl

#endif
