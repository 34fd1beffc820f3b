/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_common.h - what tpx's benchmark tools (tpx-netbench, tpx-perf) share.
 *
 * What it promises: one definition of everything a reader of both tools'
 * numbers must be able to trust to be the same -- how sizes are parsed and
 * printed, the data pattern and its checksum, the control stream between the
 * two sides, how worker processes are forked and collected, the table, the
 * progress line and the JSON writer. Nothing here touches the engine or the
 * transport, and nothing here includes a private tpx header: the tools use
 * the public API (include/tpx) only.
 *
 * Process model shared by both tools: the parent process never touches the
 * network library. It forks one worker per side (two in loopback mode, one
 * for server/client), reads fixed-size records from a result pipe (a row, or
 * the text of a worker's first error) and prints them. The two sides talk
 * over a control stream (a socketpair in loopback mode, a TCP connection
 * otherwise) of framed messages; every wait on it has a deadline.
 */
#ifndef TPX_TOOLS_BENCH_COMMON_H
#define TPX_TOOLS_BENCH_COMMON_H

#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Exit statuses of both tools. */
#define BENCH_EXIT_OK    0
#define BENCH_EXIT_FAIL  1 /* the library, the data or the peer failed */
#define BENCH_EXIT_USAGE 2 /* bad command line */

/* Program name used in every message ("tpx-netbench: ..."); set by main(). */
extern const char *bench_prog;
/* --quiet: print only the final line and errors. */
extern int bench_quiet;

/* ---- time and CPU -------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);
/* User and system CPU time of this process (all threads), nanoseconds. */
void bench_cpu_ns(uint64_t *user, uint64_t *sys);
/* "2026-01-31T12:00:00Z" (UTC, now) into buf. */
void bench_started(char *buf, size_t len);
/* The CPUs this process may run on (its affinity mask: a container's
 * cpuset, taskset), which is what the library sizes its defaults by; and
 * the host's online CPUs. */
long bench_ncpus(void);
long bench_host_cpus(void);
/* "16 cores" or, under a narrower affinity mask, "16 of 32 cores", into buf. */
const char *bench_cores_text(char *buf, size_t len);

/* ---- wire helpers: structs of uint64_t words as big-endian bytes ---------- */

void bench_put64(unsigned char *p, uint64_t v);
uint64_t bench_get64(const unsigned char *p);
void bench_words_out(unsigned char *dst, const void *src, size_t nwords);
void bench_words_in(void *dst, const unsigned char *src, size_t nwords);

/* ---- command line ----------------------------------------------------------- */

/* "4096", "64K", "256M", "1G" (binary), optional "B"/"iB". -1 on bad input. */
int bench_parse_size(const char *s, uint64_t *out);
/* A decimal integer in [min, max]. -1 on bad input. */
int bench_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* --gpu N (returns 1, out[0] = N) or A,B (returns 2); each in [0, max]; 0: malformed. */
int bench_parse_gpus(const char *arg, int max, int out[2]);
/*
 * "64K:1G" (A to B, doubling) or a comma list of sizes and ranges
 * ("4K,1M:64M") into sizes[0..*n). At most max_n sizes, each <= max_size.
 * 0 or -1.
 */
int bench_parse_sizes(const char *arg, uint64_t *sizes, uint64_t max_n, uint64_t max_size,
                      uint64_t *n);
/* "256 MiB", "64 KiB", "1000 B": the largest unit that divides b exactly. */
const char *bench_human(uint64_t b, char *buf, size_t len);
/* Print "PROG: <message>\nTry 'PROG --help'." on stderr; returns BENCH_EXIT_USAGE. */
int bench_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * The options tpx-perf and tpx-netbench spell and check alike. A tool puts
 * BENCH_OPTIONS_COMMON in its getopt_long() table, points a bench_opts_t
 * at its own fields, and hands each option to bench_opt() before its own
 * switch: BENCH_OPT_DONE (parsed), BENCH_OPT_OTHER (not a shared option:
 * the tool's own), or an exit status (a usage error; BENCH_EXIT_OK after
 * --help, --version or --print-config).
 */
enum {
    BENCH_O_LOOPBACK = 1000,
    BENCH_O_PORT,
    BENCH_O_SIZE,
    BENCH_O_SIZES,
    BENCH_O_ITERS,
    BENCH_O_WARMUP,
    BENCH_O_VERIFY,
    BENCH_O_NOVERIFY,
    BENCH_O_TIMEOUT,
    BENCH_O_JSON,
    BENCH_O_PLOT,
    BENCH_O_PRINTCFG,
};
#define BENCH_OPTIONS_COMMON                                                                       \
    {"loopback", no_argument, NULL, BENCH_O_LOOPBACK},                                             \
        {"port", required_argument, NULL, BENCH_O_PORT},                                           \
        {"size", required_argument, NULL, BENCH_O_SIZE},                                           \
        {"sizes", required_argument, NULL, BENCH_O_SIZES},                                         \
        {"iters", required_argument, NULL, BENCH_O_ITERS},                                         \
        {"warmup", required_argument, NULL, BENCH_O_WARMUP},                                       \
        {"verify", no_argument, NULL, BENCH_O_VERIFY},                                             \
        {"no-verify", no_argument, NULL, BENCH_O_NOVERIFY},                                        \
        {"timeout", required_argument, NULL, BENCH_O_TIMEOUT},                                     \
        {"json", required_argument, NULL, BENCH_O_JSON},                                           \
        {"plot", required_argument, NULL, BENCH_O_PLOT}, {"quiet", no_argument, NULL, 'q'},        \
        {"print-config", no_argument, NULL, BENCH_O_PRINTCFG},                                     \
        {"version", no_argument, NULL, 'V'},                                                       \
    {                                                                                              \
        "help", no_argument, NULL, 'h'                                                             \
    }
#define BENCH_OPT_DONE  (-1)
#define BENCH_OPT_OTHER (-2)

/* Where the shared options land (all required). */
typedef struct {
    int *loopback;         /* --loopback: 1 */
    int *port;             /* --port 1..65535 */
    uint64_t *sizes;       /* --size S (one size) / --sizes LIST ... */
    uint64_t *nsizes;      /* ... their count */
    uint64_t max_sizes;    /* capacity of sizes[] */
    uint64_t max_size;     /* the largest size accepted (16 GiB: the messages say 16G) */
    const char *sizes_eg;  /* the --sizes example in its error ("4K:1G or 16K,1M:64M") */
    uint64_t *iters;       /* --iters >= 1 */
    uint64_t *warmup;      /* --warmup >= 0 */
    uint64_t *timeout_s;   /* --timeout 1..86400 */
    int *verify;           /* --verify 1, --no-verify 0 */
    int *run_opts;         /* 1 once an option that shapes the run was given */
    const char **json;     /* --json FILE */
    const char **plot;     /* --plot FILE */
    void (*usage)(FILE *); /* --help */
} bench_opts_t;
int bench_opt(const bench_opts_t *o, int c, const char *arg);

/* Automatic iteration counts: every row moves at least BENCH_AUTO_BYTES
 * (BENCH_AUTO_MIN_ITERS .. BENCH_AUTO_MAX_ITERS iterations); warm-up is a
 * tenth of that, at least one. BENCH_AUTO marks "automatic" in parameters. */
#define BENCH_AUTO_BYTES     (1ull << 30)
#define BENCH_AUTO_MIN_ITERS 5
#define BENCH_AUTO_MAX_ITERS 100000
#define BENCH_AUTO           ((uint64_t)-1)
uint64_t bench_auto_iters(uint64_t bytes_per_iter);
uint64_t bench_auto_warmup(uint64_t iters);

/* The effective value of an integer TPX_* setting, as tpx_config_print()
 * shows it; -1 if it is not there or not a number. */
int64_t bench_config_int(const char *name);

/* ---- the data pattern and the checksum -------------------------------------- */

/*
 * The bytes of one message are a function of its size and a 64-bit key (an
 * iteration number, or whatever names the message uniquely): word i is
 * word(splitmix(key), i), one multiply per word, so a misplaced piece or a
 * stale buffer from another message is caught. Buffers need no alignment.
 */
void bench_fill(unsigned char *buf, uint64_t size, uint64_t key);

#define BENCH_FNV_BASIS 0xCBF29CE484222325ull
#define BENCH_FNV_PRIME 0x100000001B3ull

/*
 * Check every byte of one received message against the pattern and fold it
 * into *csum (start it at BENCH_FNV_BASIS): FNV-1a over the message's 8-byte
 * native-order words in four interleaved lanes (the tail zero-padded), the
 * lanes folded by FNV-1a, then the message hash folded into *csum.
 * 0, or -1 with *bad = offset of the first wrong byte (*csum untouched).
 */
int bench_check(const unsigned char *buf, uint64_t size, uint64_t key, uint64_t *csum,
                uint64_t *bad);

/* ---- statistics ------------------------------------------------------------ */

/* Sort v[0..n) and return min, p50, p99, max (n > 0). */
void bench_percentiles(uint64_t *v, uint64_t n, uint64_t out[4]);

/* ---- the control stream (socketpair or TCP) ------------------------------------ */

/*
 * Every message: a 16-byte header in network byte order, then `len` bytes.
 *   magic u32 | version u16 | type u16 | len u32 | arg u32
 * `arg` names the phase or row a message belongs to; both sides check it,
 * so a message from a wrong step is an error, not a silent skew. Each tool
 * has its own magic, version and message types; type `error_type` carries
 * the text of a failure (its sender exits after it).
 */
#define BENCH_HDR     16
#define BENCH_MSG_MAX 4096

typedef struct {
    uint32_t magic;
    uint16_t version;
    unsigned error_type;
    const char *const *names; /* message names by type, for errors */
    unsigned nnames;
} bench_proto_t;

int bench_send_all(int fd, const void *buf, size_t len);
/* Read exactly len bytes by `deadline_ns`: 0, or -1 (errno set; ETIMEDOUT,
 * or ENOTCONN for end of stream). */
int bench_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns);
int bench_msg_send(const bench_proto_t *pr, int fd, unsigned type, uint32_t arg,
                   const void *payload, uint32_t len);
/*
 * Receive one message of type `want` with argument `arg` into buf (exactly
 * `len` bytes expected) within timeout_ns. A peer's error message is turned
 * into "the PEER failed: TEXT". 0, or -1 with what went wrong in `err`.
 */
int bench_msg_recv(const bench_proto_t *pr, int fd, unsigned want, uint32_t arg, void *buf,
                   uint32_t len, uint64_t timeout_ns, const char *peer, char *err, size_t errlen);
/* 1 if the peer closed its end (or the stream broke), 0 otherwise. Never blocks. */
int bench_ctl_hangup(int fd);

/* A TCP listener on `port` (IPv6 dual stack, else IPv4); -1 with `err`. */
int bench_tcp_listen(int port, char *err, size_t errlen);
/* Connect to host:port, retrying refusals for 10 s (the server may be
 * starting). `hint` is appended to a "connection refused" error. */
int bench_tcp_connect(const char *host, int port, const char *hint, char *err, size_t errlen);
/* TCP_NODELAY: control messages are small and latency matters. */
void bench_tcp_nodelay(int fd);
/* Accept one peer on `lfd`, whose first message must be `hello`; a
 * connection that is not one of ours is dropped (with a note on stderr) and
 * the listener keeps serving. The accepted fd, or -1 with `err`. */
int bench_accept_peer(const bench_proto_t *pr, int lfd, unsigned hello, int port,
                      const char *refusal, char *err, size_t errlen);

/* The roles both tools have. */
typedef enum { BENCH_MODE_LOOPBACK, BENCH_MODE_SERVER, BENCH_MODE_CLIENT } bench_mode_t;
const char *bench_mode_name(bench_mode_t mode);
/* The words after the options: nothing or "loopback" (loopback mode),
 * "server", or "client HOST". BENCH_EXIT_OK, or BENCH_EXIT_USAGE after
 * saying why. `loopback_flag`: --loopback was given. */
int bench_parse_role(int argc, char **argv, int first, int loopback_flag, bench_mode_t *mode,
                     const char **host);

/*
 * Server: listen on `port`, take one client whose first message is `hello`
 * (others are dropped, see bench_accept_peer()) and send it the run
 * parameters as a `params_type` message. The connected fd, or -1 with `err`.
 */
int bench_server_start(const bench_proto_t *pr, int port, unsigned hello, unsigned params_type,
                       const void *params, uint32_t len, const char *refusal, char *err,
                       size_t errlen);
/* Client: connect to host:port, say `hello`, receive the parameters (exactly
 * `len` bytes). The connected fd, or -1 with `err`. */
int bench_client_start(const bench_proto_t *pr, const char *host, int port, unsigned hello,
                       unsigned params_type, void *params, uint32_t len, const char *hint,
                       char *err, size_t errlen);

/* ---- worker processes ---------------------------------------------------- */

/* The head of every record a worker writes to its parent's result pipe. A
 * tool's record is this header followed by its row; one write() each, below
 * PIPE_BUF, so records stay whole. */
typedef struct {
    uint32_t kind; /* BENCH_REC_ROW or BENCH_REC_ERROR */
    char who[12];
    char msg[512];
} bench_rec_hdr_t;
enum { BENCH_REC_ROW = 1, BENCH_REC_ERROR = 2 };

/* One side of a run as seen by the failure reporter. */
typedef struct {
    const char *who;  /* "receiver", "server", ... */
    const char *peer; /* the other side */
    int ctl;          /* control stream to the peer, or -1 */
    int out;          /* result pipe to the parent, or -1 */
    size_t rec_size;  /* size of this tool's records */
    const bench_proto_t *proto;
    int progress; /* a progress line may be on stderr: clear it first */
    int failed;
} bench_side_t;

/* Report this side's first failure (only the first): on stderr, as an error
 * record to the parent, and as an error message to the peer. */
void bench_fail(bench_side_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Write one row record (hdr.kind = BENCH_REC_ROW) to the parent; 0 or -1. */
int bench_put_row(bench_side_t *s, void *rec);

/*
 * The watchdog of a side's wait loop, cheap enough to call on every idle
 * turn: every 100 ms (or now, if `force`), fail the side if nothing moved
 * for timeout_s since `last_progress`, or if the peer hung up the control
 * stream (quoting the error it sent before it left, if any). 0 or -1.
 */
int bench_check_alive(bench_side_t *s, uint64_t timeout_s, uint64_t now, uint64_t *next_check,
                      uint64_t last_progress, int force, const char *what);

/* fork() a worker. In the child (0 returned) the parent's death sends it
 * SIGTERM and close_fds are closed; stdout/stderr are flushed first. */
pid_t bench_fork(const int *close_fds, int nclose);

/* Called for each row record; returns nothing, counts what it wants. */
typedef void (*bench_row_fn)(void *ctx, const void *rec);

/*
 * Read records from `res` until it closes and every child has exited (at
 * most two children). Error records go into `err` (first one wins); rows to
 * `on_row`. A child that fails gets its sibling terminated (it would only
 * wait for its deadline); a child still alive `grace_s` after its sibling
 * exited is killed. 0 if every child exited 0.
 */
int bench_collect(int res, size_t rec_size, bench_row_fn on_row, void *ctx, pid_t *pids,
                  const char *const *names, int n, uint64_t grace_s, char *err, size_t errlen);

/* Fork one side (0: the server/receiving side, 1: the client/sending side)
 * with control stream `ctl` and result pipe `out`; close close_fds in the
 * child (bench_fork()). The child never returns. */
typedef pid_t (*bench_spawn_fn)(void *ctx, int side, int ctl, int out, int out_rows,
                                const int *close_fds, int nclose);
/*
 * One run of a tool's workers: in loopback mode both sides, joined by a
 * socketpair (side 0 reports the rows, side 1 only its errors); otherwise
 * this host's side (server: 0, client: 1) on the control socket `ctl`.
 * Rows go to on_row; 0 if every worker exited 0 (bench_collect()).
 */
int bench_run_sides(bench_mode_t mode, int ctl, bench_spawn_fn spawn, void *ctx,
                    const char *const names[2], size_t rec_size, bench_row_fn on_row,
                    uint64_t grace_s, char *err, size_t errlen);

/* Set `err` unless it already holds a message (the first error wins). */
void bench_set_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The path of tool `name` in the folder of this program's binary, or just
 * `name` (found on PATH) if there is none there. */
void bench_sibling_path(const char *argv0, const char *name, char *out, size_t len);
/* Run argv[0] with argv, its stdout to /dev/null, and wait for it: its exit
 * status, or -1 if it could not be run or died of a signal. */
int bench_run_tool(const char *const argv[]);

/* ---- output: table, progress line, JSON ------------------------------------- */

/* A table column: right-aligned in `width` characters; width 0: the last
 * column, left-aligned after two spaces. */
typedef struct {
    const char *name;
    int width;
} bench_col_t;
#define BENCH_CELL 32

/* "# name name ..." and "  cell cell ..." lines, aligned like nccl-tests. */
void bench_table_header(FILE *f, const bench_col_t *cols, int n);
void bench_table_row(FILE *f, const bench_col_t *cols, int n, char cells[][BENCH_CELL]);

/* A live progress line on stderr (a terminal only): the first drawn one
 * second into a phase, then every 250 ms; cleared before anything else is
 * printed. */
typedef struct {
    int on;
    int drawn;
    uint64_t next_ns;
} bench_progress_t;
void bench_progress_start(bench_progress_t *p, uint64_t t0_ns);
/* 1 if a line is due now (and schedules the next one). */
int bench_progress_due(bench_progress_t *p, uint64_t now_ns);
void bench_progress_draw(bench_progress_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void bench_progress_clear(bench_progress_t *p);

/* A JSON string with every special character escaped; NULL prints null. */
void bench_json_str(FILE *f, const char *s);
/* "key": value, then ", " when comma is set. */
void bench_json_u64(FILE *f, const char *key, uint64_t v, int comma);
void bench_json_dbl(FILE *f, const char *key, double v, int comma);
/* "host": "...", "kernel": "...", "nproc": N (no trailing separator). */
void bench_json_sysinfo(FILE *f);
/* {"TPX_...": "...", ...}: every TPX_* environment variable but `skip`. */
void bench_json_env(FILE *f, const char *skip);

/* ---- --plot: GB/s against size, through gnuplot ------------------------------ */

/* One measured point of a sweep; points with the same `label` are one line. */
typedef struct {
    char label[64];
    uint64_t size;
    double gbps;
} bench_point_t;

/* The path of gnuplot on PATH into `out`: 0, or -1 (not installed). */
int bench_gnuplot_find(char *out, size_t len);
/*
 * Write FILE.png.gp (the data inline, one block per label in the order
 * labels first appear) and run gnuplot on it: a PNG of GB/s (1e9 bytes/s)
 * against the message size on a log2 axis, one line per label. 0, or -1
 * after saying why on stderr.
 */
int bench_plot(const char *png, const char *title, const bench_point_t *pts, size_t n);

#endif
