/* SPDX-License-Identifier: Apache-2.0 */
/*
 * harness.h - the process harness of the engine integration tests.
 *
 * A scenario is a set of roles (server, clients, a fuzzer), each run in its
 * own forked process. The main process is the supervisor: it creates every
 * pipe ("link") a scenario needs, forks all roles before any engine exists,
 * waits for them with a deadline, kills stragglers and reports. Roles arm
 * alarm() as a last-resort hang guard and exit 0 when their half passed.
 *
 * Everything here uses the public API (tpx/tpx.h) only. Data is a
 * deterministic xorshift64* stream (one 64-bit word per 8 bytes, seeded per
 * transfer), so a receiver can verify every byte without the sender's
 * buffer; receive buffers are surrounded by guard bytes that must come back
 * untouched.
 *
 * Each role's tpx log goes to its own file (TPX_LOG_FILE with %p) which the
 * supervisor echoes at the end; in a "clean" scenario a WARN or ERROR line
 * fails the test.
 */
#ifndef TPX_TEST_ENGINE_HARNESS_H
#define TPX_TEST_ENGINE_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/tpx_test.h"
#include "tpx/tpx.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
#define GiB (1024 * MiB)

#define HT_ROLE_ALARM_S 170    /* a role running longer than this dies of SIGALRM */
#define HT_SUPERVISE_S  174    /* the supervisor kills every role after this */
#define HT_GRACE_S      20     /* after one role failed, how long the others may go on */
#define HT_PIPE_MS      120000 /* default wait for a message from another role */
#define HT_CONN_MS      30000  /* connect/accept deadline of the tests */
#define HT_GUARD        4096   /* guard bytes on each side of a receive buffer */
#define HT_HOST         "127.0.0.1"

/* Party 0 is the supervisor; roles are 1..HT_MAXPARTY-1. */
enum { HT_SUP = 0, HT_SRV = 1, HT_C1 = 2, HT_C2 = 3, HT_C3 = 4, HT_C4 = 5, HT_MAXPARTY = 8 };

extern int ht_me; /* this process's party */
extern const char *ht_scenario;
extern int ht_clean; /* 1: a WARN/ERROR log line fails the scenario */

/* ---- reporting: test_say() and the checks of ../common/tpx_test.h; each
 * role's tag is "scenario/role". ------------------------------------------- */

/* ---- time and CPU ---------------------------------------------------------- */
double ht_cpu_s(void); /* user + system CPU time of this process */
void ht_sleep_ms(int ms);

/* ---- data ------------------------------------------------------------------ */
uint64_t ht_seed(unsigned a, unsigned b, unsigned c);
/* The stream of `seed`, starting `skip` words in. */
void ht_fill(void *buf, size_t len, uint64_t seed, size_t skip);
int ht_verify(const void *buf, size_t len, uint64_t seed, size_t skip, const char *what);
void ht_guard_fill(void *buf, size_t len, uint64_t tag);
int ht_guard_check(const void *buf, size_t len, uint64_t tag, const char *what);
uint64_t ht_rand(uint64_t *state); /* a plain PRNG for choices */

/* ---- links (pipes between two parties) --------------------------------------
 * Create every link before ht_start(). Messages are 64-bit words. */
int ht_link(int party_a, int party_b);
int ht_put(int link, uint64_t v);
/* 0 on success; -1 (and a message) on timeout or when the other side is gone.
 * timeout_ms 0: do not wait (returns 1, silently, if nothing is there). */
int ht_get(int link, uint64_t *v, int timeout_ms);
/* Same, calling tpx_progress(engine) while waiting (caller-driven engines). */
int ht_get_progress(int link, uint64_t *v, int timeout_ms, tpx_engine_t *engine);
/* Both sides call it; returns when both arrived. engine: see ht_get_progress. */
int ht_barrier(int link, tpx_engine_t *engine);

/* ---- processes -------------------------------------------------------------- */
typedef int (*ht_role_fn)(int arg);
/* Declare a role: fn(arg) runs in its own process, as party `party`. */
void ht_spawn(int party, const char *name, ht_role_fn fn, int arg);
/* Fork every declared role (each knows every role's name), then drop the
 * roles' pipe ends in the supervisor. */
void ht_start(void);
pid_t ht_pid(int party);
/* The role with this pid is expected to die of `sig` (the test kills it). */
void ht_expect_signal(pid_t pid, int sig);
/* Wait for every role; 0 if all passed. Echoes the roles' logs. */
int ht_supervise(void);
/* ht_start(), then ht_supervise(): a scenario's last line. */
int ht_run(void);
void ht_init(const char *scenario, int clean);

/* ---- resources (leak checks) ------------------------------------------------ */
typedef struct {
    int fds;
    int threads;
} ht_res_t;
ht_res_t ht_res_now(void);
/* After every engine is destroyed: no more fds or threads than `before`. */
int ht_res_check(ht_res_t before, const char *when);
int ht_fd_count(void);
void ht_dump_fds(void); /* each fd and what it is */

/* ---- engine helpers ----------------------------------------------------------- */
/* channels/window 0: the environment's; token NULL: the environment's. */
tpx_engine_t *ht_engine(int port, int channels, int window, int progress_thread, const char *token);
int ht_connect(tpx_engine_t *e, int port, tpx_peer_t **peer);
/* The port the listening side put on `link` (ht_put), then ht_connect to it. */
int ht_dial(tpx_engine_t *e, int link, tpx_peer_t **peer);
int ht_accept(tpx_engine_t *e, tpx_peer_t **peer);

typedef struct {
    uint8_t *p;
    size_t len;
    tpx_region_t *reg;
} ht_buf_t;
/* mmap'd (page aligned, zero) and registered as one region of exactly len. */
int ht_buf_new(tpx_engine_t *e, size_t len, ht_buf_t *b);
void ht_buf_free(ht_buf_t *b);
/* A role's end: close peer (NULL: none), free buf (NULL: none), destroy the
 * engine, then ht_res_check(before, "after tpx_engine_destroy"). */
int ht_finish(tpx_engine_t *e, tpx_peer_t *peer, ht_buf_t *buf, ht_res_t before);
/* Wait (until the transfer's deadline) and release; 0 if it ended TPX_OK
 * with exactly `len` bytes. */
int ht_wait(tpx_xfer_t *x, size_t len, const char *what);
/* Two-way: send `len` bytes of `seed_out`, receive `len` bytes of `seed_in`
 * (into a guarded buffer) on the same peer, verify. Progress-thread engines. */
int ht_exchange(tpx_engine_t *e, tpx_peer_t *peer, size_t len, uint64_t seed_out, uint64_t seed_in,
                const char *what);

#endif
