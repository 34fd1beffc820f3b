/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf_failover.h - tpx-perf's line on lost data channels (lost, connected again, chunks
 * dealt again) (tpx_engine_counters_t):
 * printed by each side at its end when its engine lost one, so a run that
 * survived a NIC failure says so and what it cost.
 */
#ifndef TPX_PERF_FAILOVER_H
#define TPX_PERF_FAILOVER_H

#include <stdio.h>

#include "tpx/tpx.h"

static inline void pf_print_failover(tpx_engine_t *e, const char *who)
{
    tpx_engine_counters_t c = {.size = sizeof(c)};
    if (e == NULL || tpx_engine_counters(e, &c) != TPX_OK || (c.chan_lost == 0 && c.chunks_resent == 0))
        return;
    printf("# data channels (%s): %llu lost and repaired, %llu connected again, %llu chunk(s) "
           "dealt again over the others\n",
           who, (unsigned long long)c.chan_lost, (unsigned long long)c.chan_rejoined,
           (unsigned long long)c.chunks_resent);
    fflush(stdout);
}

#endif
