/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_table.h - every TPX_* environment variable, in one place.
 *
 * X(name, type, default, min, max, doc): `type` is INT (a decimal integer,
 * K/M/G suffixes allowed, checked against [min, max]) or STR. This table is
 * the source of `--print-config` and of docs/config.md's configuration table
 * (a test keeps the two in sync).
 */
TPX_CONFIG_X(LOG_LEVEL, STR, "warn", 0, 0,
             "Log verbosity: none, error, warn, info, debug or trace.")
TPX_CONFIG_X(LOG_FILE, STR, "", 0, 0,
             "Write log lines to this file instead of stderr (`%p` expands to the pid).")
TPX_CONFIG_X(TRACE_FILE, STR, "", 0, 0,
             "Record a timeline of the hot path (posts, direct writes, I/O worker and engine "
             "wake-ups, parked connections, full and dry sockets, control messages, completions; "
             "microseconds, per thread) and write it to this file at exit and whenever an engine "
             "is destroyed (`%p` expands to the pid). For finding where latency and throughput "
             "go (bench/trace_outliers.py, bench/trace_stats.py); off costs one load per trace "
             "point.")
TPX_CONFIG_X(SOCKET_IFNAME, STR, "", 0, 0,
             "Interfaces the built-in transport uses: comma list of prefixes, `^` excludes, "
             "`=` matches exactly (e.g. `eth1,eth2`, `^docker`, `=lo`). Default: every interface "
             "with an address except loopback and docker/virtual bridges; `lo` only when named. "
             "One administratively down is kept where comms fail over (`TPX_SOCK_FAILOVER`, "
             "not strict TCPX): its connections join once it is up; name the NICs to leave "
             "one out (both sides, which pair NICs by their order).")
TPX_CONFIG_X(SOCKET_FAMILY, STR, "", 0, 0,
             "Address family of the built-in transport: `4`, `6`, or empty for IPv4 first.")
TPX_CONFIG_X(SOCKET_SPEED_MBPS, INT, "100000", 1, 100000000,
             "Link speed (Mb/s) reported for interfaces whose driver reports none (lo, veth).")
TPX_CONFIG_X(NSOCKS, INT, "0", 0, 16,
             "Data connections per comm of the built-in transport (NCCL's comms; an engine's "
             "channels have `TPX_CHANNEL_SOCKS`). 0: half the CPUs, at least 2 "
             "and at most 8 (one loopback comm on a 16-core H100 host: 5.3, 9.9, 16.3, 25.7, "
             "27.2 GB/s with 1, 2, 4, 8, 16). On a virtual device (`TPX_NIC_FUSE`) rounded up to "
             "a multiple of its NICs.")
TPX_CONFIG_X(SOCK_WORKERS, INT, "0", 0, 64,
             "I/O threads of the built-in transport, shared by every comm of the process (each "
             "multiplexes many connections with epoll; pinned to the NICs' NUMA nodes when "
             "known). 0: one per CPU, at least 2 and at most 16 (a worker moves about one connection's "
             "worth of loopback TCP; both ends of a loopback pair share one process's pool).")
TPX_CONFIG_X(MAX_REQUESTS, INT, "32", 1, 256,
             "Requests a comm of the built-in transport accepts in flight; one more is an error.")
TPX_CONFIG_X(PIECE_BYTES, INT, "1M", 65536, 67108864,
             "Largest piece a data connection takes at once; pieces shrink toward 64 KiB as a "
             "message nears its end, so a slow connection never holds the tail.")
TPX_CONFIG_X(SOCK_CUDA_BLOCK, INT, "512K", 65536, 4194304,
             "Built-in transport, CUDA buffers: the largest copy between a CUDA buffer and a "
             "data connection's pinned staging ring (at most half of `TPX_SOCK_CUDA_RING`); a "
             "piece is copied in blocks of half a piece, 64 KiB to this. 512 KiB instead of "
             "256 KiB: 256 MiB GPU transfers 1.3x faster (16-core H200, loopback, same run): "
             "the GPU's copy engines move 512 KiB copies faster than 256 KiB ones when both "
             "directions run.")
TPX_CONFIG_X(SOCK_CUDA_RING, INT, "4M", 131072, 67108864,
             "Built-in transport, CUDA buffers: the staging ring of a data connection, bytes of "
             "copies in flight (at most 32 blocks), cut into segments of `TPX_SOCK_CUDA_BLOCK` "
             "(rounded down to whole segments, at least two) that no block straddles: eight "
             "aligned 512 KiB blocks of large pieces, or many small ones packed. Pinned host "
             "memory per connection that has moved CUDA memory, allocated on its first CUDA "
             "piece, freed with its comm. 4M instead of 2M: GPU0 -> GPU1 256 MiB transfers "
             "0.96-1.02x host memory instead of 0.77-0.83x (2 x H200, loopback), 1 MiB on one "
             "GPU 0.76x instead of 0.78x (same run).")
TPX_CONFIG_X(SOCK_CUDA_PINNED, INT, "1G", 0, 1099511627776LL,
             "Built-in transport, CUDA buffers: pinned staging memory of the whole process. A "
             "data connection's ring is `TPX_SOCK_CUDA_RING` while the rings made so far fit in "
             "this; past it, new rings are two segments of `TPX_SOCK_CUDA_BLOCK` (1 MiB by "
             "default), the least that overlaps copies with the socket. So 32 peers x 16 data "
             "connections x both directions pin 1.75 GiB, not 4. 0: every ring two segments.")
TPX_CONFIG_X(SOCK_CUDA_PIECE, INT, "1M", 65536, 16777216,
             "Built-in transport, CUDA buffers: the smallest piece a data connection takes of a "
             "message while more messages queue behind it (host memory: 512 KiB; this wins over "
             "`TPX_PIECE_BYTES`). Fewer, larger "
             "pieces: 256 MiB GPU transfers 1.05-1.08x faster than with 512 KiB (H100 host, same "
             "runs); copied in blocks of half a piece, at most `TPX_SOCK_CUDA_BLOCK`.")
TPX_CONFIG_X(SOCK_CUDA_SPIN_US, INT, "-1", -1, 1000,
             "Built-in transport, CUDA buffers: an I/O worker whose queued connections all wait "
             "for staging copies polls them this long (microseconds) before it naps (25 us, "
             "growing to 1 ms while the wait lasts); -1: 10 while a lone message waits, no "
             "polling while every waiting connection's comm has more messages in flight. "
             "16-core H200, same run, 1 MiB GPU transfers: -1 28.4 / 29.1 GB/s at 0.49 / 0.48 "
             "s of CPU per GB, 10 27.4 / 26.7 at 0.51 / 0.52, 0 (nap at once) 27.8 / 25.3; "
             "a lone one-sided GPU READ p50 of 4 KiB / 64 KiB / 1 MiB: -1 71 / 98 / 266 us, "
             "10 69 / 102 / 266, 0 67 / 100 / 303.")
TPX_CONFIG_X(SOCK_CUDA_WORD, INT, "0", 0, 1,
             "Built-in transport, CUDA buffers: how an I/O worker learns that a staging copy "
             "finished. 0: an event per block, queried (cuEventQuery). 1: the copy's stream "
             "writes its block number into a word of host memory (cuStreamWriteValue64), which "
             "the worker reads without a driver call, where the driver and GPU have 64-bit "
             "stream memory operations (else events). 16-core H200, same run: 1 MiB GPU "
             "transfers 18.1 vs 17.3 GB/s, 256 MiB 25.0 vs 26.8 (another run: both "
             "slower), so not the default.")
TPX_CONFIG_X(SOCK_POLL_US, INT, "-1", -1, 100000,
             "Built-in transport: an I/O worker that just moved a small message (64 KiB at most) "
             "polls its connections this long (microseconds, yielding the core) before it sleeps "
             "in epoll_wait, so the next message of a request/response exchange is read without "
             "a wake-up. 0: sleep at once. -1: 200 with 8 CPUs or more, else 0 (on 2 cores the "
             "poller takes the core the answer needs). 16-core host: one-sided READ 4 KiB p50 "
             "29 instead of 41 us, 64 KiB 67 instead of 82; large transfers as fast; a stream of "
             "64 KiB transfers 3x the CPU per GB (its workers poll between messages).")
TPX_CONFIG_X(SOCK_EAGER_BYTES, INT, "64K", 0, 1048576,
             "Built-in transport: a message of at most this many bytes that arrives before its "
             "receive is posted is read into a buffer of its connection at once, and irecv "
             "completes it from there (no hand-off to an I/O worker: a one-sided READ's list and "
             "answer take one wake-up fewer each). Up to this much memory per data connection "
             "that ever received such a message. 0: such a message waits in the socket for its "
             "receive. Not in strict TCPX mode.")
TPX_CONFIG_X(SOCK_DIRECT_BYTES, INT, "-1", -1, 16777216,
             "Built-in transport: the largest message the thread that posts or tests it moves "
             "itself instead of an I/O worker: isend writes it with one non-blocking sendmsg "
             "when a data connection is idle and nothing is queued before it; irecv and test() "
             "of a lone receive (nothing else in flight on its comm) of at most this size read "
             "what the comm's connections hold, on each "
             "connection no worker is moving at that moment. Host memory only; a worker goes on "
             "from wherever the socket would block. The thread that waits for a message moves "
             "it, so no worker wake-up lies on a request/response exchange. -1: 64K with 8 CPUs "
             "or more, else 1M (on a 2-core host the workers' wake-ups queued behind three "
             "spinning threads). 0: workers move everything. Not in strict TCPX mode.")
TPX_CONFIG_X(SOCK_FAILOVER, INT, "-1", -1, 1,
             "Built-in transport: comms that outlive a failed data connection. The receiver "
             "acknowledges the pieces each connection brought, a send completes once the "
             "receiver holds all of it (not once the kernel took it), and when a connection "
             "fails (reset, or its peer's TCP silent: `TPX_SOCK_STALL_MS`) its unacknowledged "
             "pieces are sent again on the comm's other connections; the comm fails only when "
             "every one did; a failed connection is replaced once its NIC works again. Such a "
             "comm also connects while some of its NICs are down (a connection that cannot be "
             "made, or is unanswered 1 s after another got through, counts as failed from the "
             "start). -1: comms whose data connections span several NICs (a virtual "
             "device, `TPX_NIC_FUSE`), so that a comm fused over a GPU's NICs loses a NIC's "
             "bandwidth, not its transfers; 1: every comm of more than one data connection; 0: "
             "none. The sender decides and tells the receiver. Never in strict TCPX mode. Cost "
             "on the healthy path: an 8-byte acknowledgement per receiving turn, and a send's "
             "completion one acknowledgement later (docs/performance.md); a receiver that reads "
             "late only delays its sends, it is never taken for a dead path.")
TPX_CONFIG_X(SOCK_STALL_MS, INT, "2000", 0, 3600000,
             "Built-in transport, comms that fail over (`TPX_SOCK_FAILOVER`): a data connection "
             "whose peer's TCP answers nothing this long although it owes an answer (data in "
             "flight in an open window never acknowledged, or two window probes in a row "
             "unanswered: a NIC down, a black hole) is aborted, and its pieces go to the other "
             "connections; found within 1.25x this. Sooner on the word of the comm's other "
             "connections (a comm that rejoins, whose wrong verdict costs a reconnect): data in "
             "flight unacknowledged through a retransmission timeout and a quarter of this, "
             "while the receiver acknowledged another connection's pieces since, is a dead "
             "path to a live peer, and so are bytes queued that this host does not send (found "
             "0.3-0.5 s after a NIC's loss with 1000). A receiver "
             "that only reads slowly is never "
             "one: its zero window's probes are answered, however long it lags (no "
             "TCP_USER_TIMEOUT, which Linux trips on such a window). Each I/O worker looks 4 "
             "times per period, and asks the kernel (tcp_info) only about a connection that "
             "owes something and moved nothing since its last look. A NIC that loses its link "
             "(set down, no carrier) is seen sooner: while connections owe something, every "
             "20 ms each that moved nothing is asked whether its NIC still has its link (one "
             "ioctl), and one whose NIC has not is failed over at once; a receiver tells its "
             "sender so on another connection. 0: no detector and no link looks (the kernel's "
             "retransmission limits, many minutes); resets still fail over at once.")
TPX_CONFIG_X(SOCK_BUF_BYTES, INT, "-1", -1, 1073741824,
             "Socket buffers of the built-in transport's data connections. -1: a 512 KiB send "
             "buffer (SO_SNDBUF) on connections whose two ends are on this host (loopback, or "
             "one address on both ends), kernel autotuning elsewhere. 0: kernel autotuning on "
             "every connection. N: SO_SNDBUF and SO_RCVBUF of N bytes on every connection (a "
             "long path needs buffers of at least its bandwidth x round trip per connection). "
             "16-core H200 host, loopback, 16 connections, 256 MiB: autotuned send buffers "
             "grow to megabytes and the kernel's copies run from memory, not cache: 27 GB/s at "
             "0.60 s of CPU per GB, with 512 KiB 36 GB/s at 0.45 (raw TCP 38; the engine 27.5 "
             "-> 35.6).")
TPX_CONFIG_X(CONNECT_TIMEOUT_MS, INT, "30000", 1, 86400000,
             "Deadline for establishing a connection (TCP connect, handshake, accept).")
TPX_CONFIG_X(SOCK_HELLO_TIMEOUT_MS, INT, "3000", 1, 86400000,
             "Listener of the built-in transport: a connection that has not sent its complete "
             "hello within this time is closed, and a comm whose connections stop arriving for "
             "this long is dropped (at most `TPX_CONNECT_TIMEOUT_MS`; see SECURITY.md). On lossy "
             "links raise it: a lost SYN is resent after 1 s, then 2 s, so a comm's connections "
             "can arrive seconds apart.")
TPX_CONFIG_X(SOCK_LISTEN_PER_SOURCE, INT, "16", 1, 256,
             "Listener of the built-in transport: connections without a complete hello that one "
             "source address may hold (of 256); a newer one from that source replaces its oldest "
             "once that one is 0.5 s old.")
TPX_CONFIG_X(NET_PLUGIN, STR, "builtin", 0, 0,
             "ncclNet plugin the engine drives: `builtin` (tpx's TCP transport), a name NAME "
             "(loads libnccl-net-NAME.so) or a path.")
TPX_CONFIG_X(CHANNELS, INT, "4", 1, 32,
             "Channels per peer connection; each is one plugin comm per direction.")
TPX_CONFIG_X(CHANNEL_SOCKS, INT, "0", 0, 16,
             "Data connections of each of an engine's channels on tpx's own transport (NCCL's comms "
             "get `TPX_NSOCKS`). A channel's requests complete in order, so one slow connection "
             "among many holds up the rest of its window; fewer cut a lone large message into "
             "fewer parallel pieces. 0: a quarter of the CPUs, at least 1 and at most 4 (16-core "
             "H100 host, 4 channels: 4 each moved 256 MiB 12% faster than 8, at the same 512 KiB "
             "READ latency; 2-core host: 1 each moved 256 MiB 13% and 1 MiB transfers 70% "
             "faster than 4, and READ 32 x 16K took 111 instead of 142 us).")
TPX_CONFIG_X(CHUNK_BYTES, INT, "0", 0, 4194304,
             "Transfers are cut into chunks of this size (4 KiB..4 MiB), dealt round-robin over "
             "the channels. A large two-sided transfer or READ (every channel gets at least 8 "
             "chunks) deals runs of up to 4 MiB of consecutive chunks instead, one message each "
             "(not on TCPX). 0: 1 MiB on tpx's own transport, 512 KiB on other plugins and in "
             "strict TCPX mode (NCCL's chunk for TCPX). The engines of a peer use the smaller of "
             "their two.")
TPX_CONFIG_X(WINDOW, INT, "0", 0, 32,
             "Requests in flight per plugin comm, lowered to what the plugin accepts where tpx "
             "knows it (TCPX: 16; the built-in transport: TPX_MAX_REQUESTS). 0: 32 on tpx's own "
             "built-in transport, 16 on other plugins and in strict TCPX mode. A chunk of a CUDA "
             "buffer spends part of its time in staging copies at both ends, so more in flight "
             "keeps the sockets busy: 1 MiB GPU transfers 1.06-1.43x faster with 32 than with 16 "
             "on H200 hosts, at less CPU per GB (host memory transfers unchanged). A comm's "
             "staging buffer for packed blocks, made on first use, is window x chunk bytes.")
TPX_CONFIG_X(TIMEOUT_MS, INT, "60000", 1, 86400000,
             "Deadline of a transfer: it fails with `timed out` if not complete by then.")
TPX_CONFIG_X(CHANNEL_STALL_MS, INT, "5000", 0, 86400000,
             "A receive data channel of a peer that has receives in flight and completes none "
             "for this long, while another channel of that peer completed receives meanwhile "
             "(or, none of them waiting for any, the peer sent a control message), is "
             "taken as lost (its connection died or stalled; Google's TCPX plugin reports "
             "neither, its `test()` just never ends), with a line naming the channel, long "
             "before `TPX_TIMEOUT_MS`: its missing chunks are dealt again over the peer's other "
             "channels (`TPX_CHANNEL_FAILOVER`), or the peer fails with `TPX_ERR_CONN_RESET`. "
             "A receive is posted only once its sender has committed to it, so a "
             "slow peer application draws no verdict; with one channel, or when every channel "
             "stops at once, the transfer deadline applies. A channel that alone holds the "
             "transfers back (every other live one moved since it stopped and has nothing in "
             "flight) is lost at a quarter of this (at least 250 ms), unless a loss is being "
             "repaired; one still for 20 ms whose NIC (its device's interface) lost its link "
             "while another channel's NIC has its own, at once. Over the built-in transport's "
             "fused "
             "NICs keep it above 1.25 x `TPX_SOCK_STALL_MS` and a resend (the default 5000 is, "
             "against 2000): a NIC's loss stalls every fused channel at once, the transport's "
             "own failover saves them all, and a verdict before it takes two channels for lost, "
             "which fails the peer (the quarter takes one at a time, repaired). 0: off.")
TPX_CONFIG_X(CHANNEL_FAILOVER, INT, "1", 0, 1,
             "1: a data channel of a live peer that fails or stalls (`TPX_CHANNEL_STALL_MS`) "
             "costs bandwidth, not transfers: the receiver says which chunks it lacks, the "
             "sender deals them again over the peer's other channels, and both sides deal later "
             "chunks without the lost channel (counters `chan_lost`, `chunks_resent`); the "
             "lost channel is connected again in the background (retried every 10 ms to 250 ms) "
             "and dealt to again once it works (counter `chan_rejoined`). A "
             "two-sided send and a served READ end when their receiver confirms them (one "
             "control message back each, sent in either setting; with 0 they end when their "
             "sends complete, a control message's latency sooner). Losses may overlap: a "
             "second channel lost while the first one's chunks are still moving, some of them "
             "on it, is repaired too, as long as one channel lives; a control comm that fails, "
             "or whose messages are not confirmed for `TPX_CHANNEL_STALL_MS`, moves the control "
             "stream to the bootstrap connection. Not repaired, and the peer fails as with 0: "
             "the last channel, the bootstrap connection. 0: any data or control channel "
             "failure fails the peer with `TPX_ERR_CONN_RESET`.")
TPX_CONFIG_X(CTRL_BOOTSTRAP, INT, "1", 0, 1,
             "1: each engine sends its control messages (requests, answers, send headers, "
             "confirmations) to a peer over the bootstrap connection from the start, a TCP "
             "socket the engine reads itself, instead of over the plugin's control comms: a "
             "lone request and its answer wake no transport thread. Each side says which in its "
             "set-up's READY; a direction over the bootstrap connection has no control comms "
             "(an idle peer holds one socket), and the peer needs no setting (it takes either "
             "path). 0: the plugin's control comms, moved to the bootstrap connection only "
             "when they fail (`TPX_CHANNEL_FAILOVER`).")
TPX_CONFIG_X(CLOSE_GRACE_MS, INT, "2000", 0, 600000,
             "How long a plugin may report `peer closed` (rc 2) without completing before the "
             "transfer fails.")
TPX_CONFIG_X(PORT_BASE, INT, "20000", 1, 65535,
             "Bootstrap port of an engine is this plus its GPU index (unless a port is given).")
TPX_CONFIG_X(BIND_ADDR, STR, "", 0, 0,
             "Bootstrap listen address of engines created without one (`params.bind_addr` NULL: "
             "the NIXL backend, the Python package): an IP address or an interface name (its "
             "first IPv4 address). Empty: all addresses.")
TPX_CONFIG_X(AUTH_TOKEN, STR, "", 0, 0,
             "Shared secret: peers prove knowledge of it with an HMAC-SHA256 challenge; it is "
             "never sent; at most 255 bytes (a longer one, here or in the file, is a "
             "configuration error). Empty: no authentication.")
TPX_CONFIG_X(TRUST_HANDLES, INT, "0", 0, 1,
             "1: a peer that no token authenticated may name any data address in its plugin "
             "handles (a trusted network). 0: such a peer's data connections go only to the "
             "address its bootstrap connection came from (multi-NIC hosts, whose data NICs differ "
             "from the bootstrap address, set `TPX_AUTH_TOKEN`).")
TPX_CONFIG_X(AUTH_TOKEN_FILE, STR, "", 0, 0,
             "Read `TPX_AUTH_TOKEN` from this file instead (its first line; keep it mode 0600: "
             "a file readable by group or others is used with a warning). Setting both is an "
             "error. Tools never print the token (`--print-config` shows `(set, hidden)`).")
TPX_CONFIG_X(NIC_MAP, STR, "", 0, 0,
             "GPU to NIC map overriding sysfs topology, e.g. `0,1:eth1;2,3:eth2;4,5:eth3;6,7:eth4`.")
TPX_CONFIG_X(SYSFS_ROOT, STR, "/sys", 0, 0,
             "Where tpx reads the machine's topology (NICs' and GPUs' PCI paths, NUMA nodes): "
             "a copy of sysfs for containers that hide the host's, and for tests.")
TPX_CONFIG_X(NIC_FUSE, STR, "auto", 0, 0,
             "Fuse the engine's NICs into one virtual device (ncclNet v9+ `makeVDevice`; at most "
             "4 NICs per device) that every channel uses, so links of unequal speed do not pace "
             "each other: `auto` (when the plugin offers it, is not TCPX and the GPU or host "
             "engine has more than one NIC), `1` (always; an error if the plugin cannot), `0` "
             "(off: each channel uses one NIC, round-robin).")
TPX_CONFIG_X(SOCK_TCPX, INT, "0", 0, 2,
             "1: the built-in transport behaves like Google's GPUDirect-TCPX plugin 3.1.9 (16 "
             "requests, FIFO test and consume, tags ignored, NULL comms from connect/accept at "
             "first, receives into GPU memory delivered devmem-style into a bounce buffer that "
             "the caller must unpack, receives into host memory straight into the buffer; the "
             "device handle and bounce buffer are GPU memory, or without a GPU memory the CPU "
             "cannot read). 2: the same, but receives into host memory go through the bounce "
             "buffer too (exercises a caller's unpack path without a GPU). For testing engines "
             "without TCPX hardware; see docs/tcpx.md.")
TPX_CONFIG_X(SOCK_TCPX_RXMEM_SKIP, INT, "0", 0, 1,
             "Strict TCPX mode: 1 models Google's plugin in its \"rxmem skip\" state (RxDM "
             "exported no receive memory for the GPU: no `/tmp/nvdma-<GPU PCI address>`, or "
             "`TCPX_RXMEM_IMPORT_SKIP_ODDS`): receive comms hand out an unpack handle whose "
             "bounce buffer is NULL, receives into host memory work (`TPX_SOCK_TCPX=2` "
             "included: they land in the buffer), a receive into GPU memory is refused (rc 3). "
             "For testing engines against that state.")
TPX_CONFIG_X(SOCK_TCPX_CHUNK, INT, "512K", 1, 1073741824,
             "Strict TCPX mode: the chunk of Google's plugin (its `NCCL_DYNAMIC_CHUNK_SIZE`) as "
             "far as a peer's close shows: after the peer has gone, `test()` of a request whose "
             "message is longer than one chunk, or of a receive whose message has not started, "
             "says rc 2 (the plugin still has control messages for it); a request of at most one "
             "chunk that started never ends (rc 0, done 0). See docs/tcpx.md.")
TPX_CONFIG_X(SOCK_TCPX_SIGPIPE, INT, "0", 0, 1,
             "Strict TCPX mode: 1 models Google's plugin writing its control connection without "
             "`MSG_NOSIGNAL`: when `test()` reports a peer that has gone (rc 2), it writes there "
             "first, so a thread that lets SIGPIPE through dies of it, as with the plugin "
             "(libtpx blocks it where it calls a plugin that may raise it, and never changes "
             "the process's disposition). For testing that callers survive it.")
TPX_CONFIG_X(UNPACK, STR, "kernel", 0, 0,
             "How devmem receives into GPU memory are gathered: `kernel` (one batched CUDA "
             "kernel launch per receive), `d2d` (a cuMemcpy per fragment, for debugging), `host` "
             "(gathered by the CPU, then copied), `none` (no copy: ablation only, data is lost).")
TPX_CONFIG_X(RMA_INLINE_BYTES, INT, "4K", 0, 5120,
             "One-sided transfers of at most this many bytes between host memory on both sides "
             "travel inside the control messages: a WRITE's data with its request, a READ's in "
             "the owner's answer, so a small transfer is one "
             "message each way; the request list rides with the request whenever it is small "
             "(at most 5 KiB with the data). 0: lists and data always go on the data channels.")
TPX_CONFIG_X(RMA_PACK_BYTES, INT, "-1", -1, 4194304,
             "One-sided transfers: blocks of at most this many bytes (and at most a chunk) are "
             "packed back to back into shared chunks, one plugin request for many blocks "
             "(vectored messages, or gathered and scattered with memcpy, GPU blocks by one CUDA "
             "kernel launch per chunk); 0 sends every block in chunks of its own. -1: a whole "
             "chunk (`TPX_RMA_PACK_CHUNK` when set) where a shared chunk is one vectored message "
             "(host memory on both sides, tpx's own transport, `TPX_RMA_IOV=1`: no copy of "
             "ours); 256K where every block is GPU memory on both sides and the plugin is no "
             "devmem one (the GPU's copies through staging cost a block less than a message of "
             "its own); else 64K (a copy through staging pays only for small blocks). A message "
             "costs the same whatever its size, so with a 64K bound 1000 x 128 KiB READs moved "
             "slower than 1000 x 64 KiB. The requester's value governs a transfer (it travels "
             "with the request).")
TPX_CONFIG_X(RMA_PACK_CHUNK, INT, "0", 0, 4194304,
             "One-sided transfers: the size of a shared chunk of packed small blocks (at least "
             "`TPX_RMA_PACK_BYTES`); smaller ones let the gathering of one overlap the sending of "
             "the last, and the receiver scatter each as it lands. 0: `TPX_CHUNK_BYTES`. The "
             "requester's value governs a transfer (it travels with the request).")
TPX_CONFIG_X(RMA_PACK_ASYNC, INT, "1", 0, 1,
             "One-sided transfers with GPU blocks: the GPU copies of shared chunks (the gather "
             "before a send, the scatter after a receive) run on the engine's pack streams while "
             "the engine goes on, up to 8 chunks at once, each with a device scratch chunk of its "
             "own (strided KV slices on an H100 host: 1.27x). 0: the engine waits for each "
             "chunk's copy before it goes on. Each side's own setting decides whether it waits.")
TPX_CONFIG_X(RMA_PACK_STREAMS, INT, "8", 1, 8,
             "One-sided transfers with GPU blocks: CUDA streams the GPU copies of shared chunks "
             "are spread over (each chunk's gather or scatter kernel and its DMA copy; up to 8 "
             "chunks at once). On one stream each chunk's kernel waited for the last chunk's "
             "copy and the copies ran one at a time.")
TPX_CONFIG_X(RMA_IOV, INT, "1", 0, 1,
             "One-sided transfers over the built-in transport: a shared chunk of packed small "
             "host blocks is sent from and received into the blocks themselves (one vectored "
             "message: the kernel gathers and scatters as it copies) instead of through a staging "
             "copy on each side. 0: always stage. Not in strict TCPX mode; GPU blocks always stage.")
TPX_CONFIG_X(SPIN_US, INT, "200", 0, 1000000,
             "An engine's progress thread keeps polling its plugin without sleeping for this "
             "long after its last activity (a request or completion arrives within microseconds, "
             "not at the next 200 us nap); then it naps, and sleeps once idle. 0: never spin "
             "(with tpx's own transport the I/O workers still wake the engine when a request "
             "completes: READ 4 KiB p50 +45% on the H100 host).")
TPX_CONFIG_X(BULK_WAIT, INT, "1", 0, 1,
             "With tpx's own transport (outside strict TCPX mode), an engine with many data "
             "requests in flight sleeps between their completions, woken by the I/O worker that "
             "completes one, instead of polling: the cores go to the workers that move the bytes. "
             "0: poll, as with other plugins.")
TPX_CONFIG_X(WAIT_SPIN_US, INT, "200", 0, 1000000,
             "A thread in `tpx_xfer_wait()` watches its transfer for this long (yielding the core) "
             "before it sleeps on the engine's condition variable: a small transfer often ends "
             "within microseconds, and waking from a sleep costs as much as a round trip on "
             "loopback. Meanwhile it runs the engine's progress passes itself and the progress "
             "thread stands aside (one spinning thread, not two). Likewise a loop of "
             "`tpx_xfer_poll()` calls (NIXL's checkXfer) runs the passes while few data requests "
             "are in flight, the progress thread standing aside until 100 us after the last "
             "poll. 0: sleep at once; a poll never runs a pass.")
TPX_CONFIG_X(NOTIF_QUEUE, INT, "4096", 1, 16777216,
             "Received notifications an engine holds until tpx_engine_get_notifs() takes them; beyond "
             "that they are dropped and counted (`params.notif_queue` overrides).")
TPX_CONFIG_X(IDENTITY, STR, "auto", 0, 0,
             "How engines prove who they are: `auto` (Ed25519 keys from libsodium, loaded at run "
             "time, when it is installed: the metadata carries the public key and every "
             "connection is signed) or `dial` (no keys: a remote is served only by a "
             "connection this engine dialed to its metadata's address, and after the first only "
             "by one whose engine proves it is the instance that first connection reached; "
             "notifications from unproven peers have `from` prefixed with `?`; without "
             "`TPX_AUTH_TOKEN` a warning says what this trusts).")
TPX_CONFIG_X(METADATA, STR, "", 0, 0,
             "Registry of engines (tpx/registry.h): `etcd://host:port[,host:port]` (etcd v3, its "
             "JSON gateway; `http://` is the same), or `https://host:port[,...]` for TLS "
             "(`TPX_METADATA_TLS_*`). Empty: none; engines exchange metadata blobs themselves. "
             "SECURITY.md says what each registry setting protects.")
TPX_CONFIG_X(METADATA_PREFIX, STR, "/tpx/engines", 0, 0,
             "Key prefix in the registry: an engine is published under `<prefix>/<engine name>`.")
TPX_CONFIG_X(METADATA_TTL, INT, "10", 2, 3600,
             "Lease of a published engine, seconds: one that stops renewing it (dead, or cut off "
             "from etcd) disappears from the registry after this long. Renewed every TTL/3.")
TPX_CONFIG_X(METADATA_TIMEOUT_MS, INT, "3000", 100, 600000,
             "Deadline of one registry call (lookup, list, publish, lease renewal), all endpoints "
             "tried.")
TPX_CONFIG_X(METADATA_TLS_CA, STR, "", 0, 0,
             "CA certificates (PEM file) that an `https://` etcd's certificate must chain to; "
             "empty: the system's. The certificate must also name the endpoint (its DNS name, "
             "or its IP address for an address). TLS comes from OpenSSL's libssl.so.3, loaded "
             "at run time.")
TPX_CONFIG_X(METADATA_TLS_CERT, STR, "", 0, 0,
             "Client certificate chain (PEM file) for an `https://` etcd that asks for one "
             "(`--client-cert-auth`); with `TPX_METADATA_TLS_KEY`.")
TPX_CONFIG_X(METADATA_TLS_KEY, STR, "", 0, 0,
             "The private key (PEM file) of `TPX_METADATA_TLS_CERT`.")
TPX_CONFIG_X(METADATA_USER, STR, "", 0, 0,
             "etcd user for etcd's authentication (`etcdctl auth enable`): the registry gets a "
             "token from `/v3/auth/authenticate` and sends it with every call, again when it "
             "expires. Empty: no authentication.")
TPX_CONFIG_X(METADATA_PASSWORD_FILE, STR, "", 0, 0,
             "File whose first line is the password of `TPX_METADATA_USER` (a file, not a "
             "variable, so that it stays out of process listings and environments); mode 0600.")
TPX_CONFIG_X(METADATA_TRUST, STR, "", 0, 0,
             "Keys a registry reader trusts to sign a name's value: `NAME=KEY` (pinned for that "
             "name) and `*=KEY` (a cluster key, any name), separated by commas or white space, "
             "KEY an Ed25519 public key in 64 hex digits; a setting without `=` is the path of a "
             "file of such entries (`#` comments). Set: a value not signed by a trusted key is "
             "refused (`TPX_ERR_ACCESS`), and so is one whose metadata has no identity key. "
             "Empty: any value is taken, and a warning says once that names are not "
             "authenticated. Needs libsodium.")
TPX_CONFIG_X(METADATA_SIGN_KEY, STR, "", 0, 0,
             "File of the Ed25519 secret key a publisher signs its registry values with, besides "
             "its engine's identity key: 64 hex digits (the seed) or the PEM of `openssl genpkey "
             "-algorithm ed25519`, mode 0600. Its public key (logged at publish) goes into the "
             "readers' `TPX_METADATA_TRUST`. Needs libsodium.")
TPX_CONFIG_X(MAX_PEERS, INT, "0", 0, 1000000,
             "Peers an engine keeps at once; an incoming connection beyond it is refused (the "
             "other side is told why). A quarter is kept for peers authenticated by "
             "`TPX_AUTH_TOKEN` or by the key of a loaded remote. 0: from the open-file limit, "
             "(RLIMIT_NOFILE - 64) / (8 x (1 + TPX_CHANNELS)), at least 8, at most 4096. When "
             "the table is full, a new peer takes the slot of an idle one (no control message for "
             "1 s, nothing in flight, not handed out) of the address that holds the most.")
TPX_CONFIG_X(RAISE_NOFILE, INT, "1", 0, 1,
             "1: the first engine of a process raises its soft open-file limit (RLIMIT_NOFILE) to "
             "the hard limit, as servers do, and logs it once (a busy peer costs ~20 descriptors, an idle one its bootstrap and control connections). "
             "0: the limit is left as it is.")
TPX_CONFIG_X(RMA_PEER_REQUESTS, INT, "1024", 1, 1048576,
             "READ/WRITE requests of one peer that an owner serves at once; more are refused "
             "(`TPX_ERR_NO_RESOURCE` at the requester, counted in `rma_refused`). With twice as "
             "many served or refused at once, the owner stops reading the peer's requests until "
             "some end.")
TPX_CONFIG_X(RMA_PEER_LIST_BYTES, INT, "128M", 1048576, 4294967296,
             "Memory the request lists of one peer's requests may hold at an owner at once (a "
             "list's buffer until it is checked, 48 bytes per block while the request lasts); a "
             "request beyond it is refused like one over `TPX_RMA_PEER_REQUESTS`, unless it is "
             "the peer's only one.")
TPX_CONFIG_X(FAULT_DIRECT_DRY_US, INT, "0", 0, 1000000,
             "Testing only: a direct read (`TPX_SOCK_DIRECT_BYTES`) that found its connection dry "
             "waits this long before it looks whether the connection's I/O worker tried to take "
             "the connection meanwhile, so that bytes arriving in that window meet the hand-off "
             "(transport.vec.directrace); 0: off.")
TPX_CONFIG_X(FAULT_SOCK_CONNECT_DOWN, INT, "0", 0, 16,
             "Testing only: the built-in transport's connect finds data connection N-1 of every "
             "comm unreachable (`ENETUNREACH`), as one whose NIC is down; the connections that "
             "replace it later are not touched (a NIC that came back); 0: off.")
TPX_CONFIG_X(FAULT_CHANNEL_STALL, INT, "0", 0, 32,
             "Testing only: receive data channel N-1 of every peer never completes again once "
             "it has completed a message, as a plugin comm whose connection died without a "
             "word (the engine stops looking at its plugin requests), for the tests of "
             "`TPX_CHANNEL_STALL_MS`; 0: off.")
TPX_CONFIG_X(FAULT_CHANNEL_DIE, INT, "0", 0, 32,
             "Testing only: data channel N-1 of every peer never completes again, in either "
             "direction, once its comm has completed a message, as a connection whose link "
             "went down (its sends stay in flight too); the channel connected again after "
             "its loss works, as a link that came back; 0: off.")
TPX_CONFIG_X(FAULT_CHANNEL_DIE_ALSO, INT, "0", 0, 32,
             "Testing only: data channel N-1 of every peer dies as `TPX_FAULT_CHANNEL_DIE`'s "
             "does, at the same time: two links down at once; 0: off.")
TPX_CONFIG_X(FAULT_CHANNEL_DIE_NEXT, INT, "0", 0, 32,
             "Testing only: data channel N-1 of every peer never completes again, in either "
             "direction, from the moment its peer repairs another data channel (the receiver "
             "asks, or the sender is asked): a second link that goes down while the first "
             "one's chunks are dealt again, some of them onto it; the channel connected again "
             "after its loss works; 0: off.")
TPX_CONFIG_X(FAULT_CTRL_FAIL, INT, "0", 0, 1000000,
             "Testing only: the control send comms of every peer fail (their `test()` reports "
             "an error) once they have completed N messages, the receive comms once they have "
             "completed 2N, as connections whose NIC went down with the bootstrap connection "
             "still up: the control stream moves to the bootstrap connection, some messages "
             "arriving both ways (`TPX_CHANNEL_FAILOVER`); 0: off.")
TPX_CONFIG_X(FAULT_CTRL_STALL, INT, "0", 0, 1000000,
             "Testing only: the control comms of every peer never complete again once they "
             "have completed N messages, as connections that black-holed without a word (TCPX "
             "reports none): the sender finds it (`TPX_CHANNEL_STALL_MS`) and the control "
             "stream moves to the bootstrap connection; 0: off.")
TPX_CONFIG_X(FAULT_CTRL_SLOW_MS, INT, "0", 0, 10000,
             "Testing only: the control receive comms of every peer complete at most one "
             "message per N ms, as a receiver that holds its reads back: the control stream "
             "keeps moving, slowly, and its confirmations (`TPX_MSG_CTRL_SEEN`) lag behind "
             "what was sent; 0: off.")
TPX_CONFIG_X(FAULT_READY_OLD, INT, "0", 0, 1,
             "Testing only: 1: every engine of the process ends its peers' set-up with a READY "
             "that carries no flags, as an engine that predates them (whose control stream may "
             "come over the bootstrap connection unannounced); 0: off.")
TPX_CONFIG_X(FAULT_RECV_PASS, INT, "0", 0, 1000000,
             "Testing only: the Nth tpx_recv() of an engine fails its peer inside the call, as a "
             "broken connection found in that call's own pass would (`TPX_ERR_IO`); 0: off. For "
             "tests of what such a failure leaves behind.")
