/* SPDX-License-Identifier: Apache-2.0 */
/*
 * faults.h - the test-only fault hooks of the engine, in one table
 * (faults.c), apart from the engine object: read from the environment
 * (TPX_FAULT_*, config_table.h) once per process, before the first engine;
 * read-only after, except the per-engine count of tpx_recv() calls, which
 * faults.c keeps under its own lock. Every hook is off (0) unless a test
 * sets its variable.
 */
#ifndef TPX_ENGINE_FAULTS_H
#define TPX_ENGINE_FAULTS_H

#include <stdint.h>

#include "engine.h"

typedef struct {
    int64_t recv_pass; /* TPX_FAULT_RECV_PASS: the Nth tpx_recv() of an engine fails its peer
                          in the call's own pass (0: none) */
    int stall_chan;    /* TPX_FAULT_CHANNEL_STALL: receive data channel N-1 stops
                          completing after its first message (window.c; 0: none) */
    int die_chan;      /* TPX_FAULT_CHANNEL_DIE: data channel N-1 stops completing, send
                          and receive, after its first message; once connected again
                          it works (window.c; 0: none) */
    int die_also;      /* TPX_FAULT_CHANNEL_DIE_ALSO: data channel N-1 dies as die_chan does
                          (window.c; 0: none) */
    int die_next;      /* TPX_FAULT_CHANNEL_DIE_NEXT: data channel N-1 stops completing, send
                          and receive, once its peer repaired another channel; once
                          connected again it works (window.c; 0: none) */
    int64_t ctrl_fail; /* TPX_FAULT_CTRL_FAIL: control send comms report an error once
                          they completed N messages, receive comms 2N (window.c; 0: none) */
    int64_t ctrl_stall; /* TPX_FAULT_CTRL_STALL: control comms stop completing once they
                           completed N messages (window.c; 0: none) */
    int64_t ctrl_slow_ms; /* TPX_FAULT_CTRL_SLOW_MS: control receive comms complete at most
                             one message per N ms (window.c; 0: none) */
    int ready_old;      /* TPX_FAULT_READY_OLD: READY goes out without flags, as from an
                           engine that predates them (peer.c; 0: off) */
} tpx_faults_t;

extern tpx_faults_t tpx__faults;

/* Fill tpx__faults from the configuration: once per process; idempotent. */
void tpx__faults_load(void);
/* A tpx_recv() of engine e (lock held): counts it; when it is the Nth of
 * TPX_FAULT_RECV_PASS, the next tpx__fault_pass_take() of this thread says 1. */
void tpx__fault_recv(const tpx_engine_t *e);
/* 1 once after this thread's tpx__fault_recv() fired: fail the peer in
 * this pass (engine.c, tpx__engine_post_pass). */
int tpx__fault_pass_take(void);
/* Engine e is destroyed: its count goes. */
void tpx__faults_forget(const tpx_engine_t *e);

#endif
