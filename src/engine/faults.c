/* SPDX-License-Identifier: Apache-2.0 */
/*
 * faults.c - the test-only fault hooks (faults.h). They live here and not
 * in struct tpx_engine so that the engine object holds only what the
 * engine does; the places that inject read one table, and cost one load
 * and one branch while off.
 */
#include <pthread.h>

#include "common/config.h"
#include "faults.h"

tpx_faults_t tpx__faults;

static pthread_once_t faults_once = PTHREAD_ONCE_INIT;

static void faults_load_once(void)
{
    tpx__faults.recv_pass = tpx__config_int(TPX_CFG_FAULT_RECV_PASS);
    tpx__faults.stall_chan = (int)tpx__config_int(TPX_CFG_FAULT_CHANNEL_STALL);
    tpx__faults.die_chan = (int)tpx__config_int(TPX_CFG_FAULT_CHANNEL_DIE);
    tpx__faults.die_also = (int)tpx__config_int(TPX_CFG_FAULT_CHANNEL_DIE_ALSO);
    tpx__faults.die_next = (int)tpx__config_int(TPX_CFG_FAULT_CHANNEL_DIE_NEXT);
    tpx__faults.ctrl_fail = tpx__config_int(TPX_CFG_FAULT_CTRL_FAIL);
    tpx__faults.ctrl_stall = tpx__config_int(TPX_CFG_FAULT_CTRL_STALL);
    tpx__faults.ctrl_slow_ms = tpx__config_int(TPX_CFG_FAULT_CTRL_SLOW_MS);
    tpx__faults.ready_old = (int)tpx__config_int(TPX_CFG_FAULT_READY_OLD);
}

void tpx__faults_load(void) { pthread_once(&faults_once, faults_load_once); }

/* tpx_recv() calls counted per engine (a test has few engines: past
 * RECV_ENGINES, an engine's calls are not counted and it never fails). */
#define RECV_ENGINES 16
static pthread_mutex_t recv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const tpx_engine_t *e;
    int64_t calls;
} recv_count[RECV_ENGINES];
/* Set by the call that fired, taken by the pass that same call runs. */
static _Thread_local int fail_pass;

void tpx__fault_recv(const tpx_engine_t *e)
{
    if (tpx__faults.recv_pass <= 0)
        return;
    pthread_mutex_lock(&recv_lock);
    int free_at = -1;
    for (int i = 0; i < RECV_ENGINES; i++) {
        if (recv_count[i].e == e) {
            fail_pass = ++recv_count[i].calls == tpx__faults.recv_pass;
            pthread_mutex_unlock(&recv_lock);
            return;
        }
        if (recv_count[i].e == NULL && free_at < 0)
            free_at = i;
    }
    if (free_at >= 0) {
        recv_count[free_at].e = e;
        recv_count[free_at].calls = 1;
        fail_pass = tpx__faults.recv_pass == 1;
    }
    pthread_mutex_unlock(&recv_lock);
}

int tpx__fault_pass_take(void)
{
    int f = fail_pass;
    fail_pass = 0;
    return f;
}

void tpx__faults_forget(const tpx_engine_t *e)
{
    if (tpx__faults.recv_pass <= 0)
        return;
    pthread_mutex_lock(&recv_lock);
    for (int i = 0; i < RECV_ENGINES; i++)
        if (recv_count[i].e == e)
            recv_count[i].e = NULL;
    pthread_mutex_unlock(&recv_lock);
}
