/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf_rma.h - the one-sided mode of tpx-perf (--op read|write), perf_rma.c.
 */
#ifndef TPX_TOOLS_PERF_RMA_H
#define TPX_TOOLS_PERF_RMA_H

/* Its options, for tpx-perf --help. */
extern const char perf_rma_usage[];
/* Run it: the whole command line of tpx-perf (which holds --op). Exit status. */
int perf_rma_main(int argc, char **argv);

#endif
