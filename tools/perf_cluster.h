/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf_cluster.h - tpx-perf with a registry (--metadata etcd://...):
 * servers published by name, clients reading from them, N x M on one host
 * (perf_cluster.c).
 */
#ifndef TPX_TOOLS_PERF_CLUSTER_H
#define TPX_TOOLS_PERF_CLUSTER_H

/* Its options, for tpx-perf --help. */
extern const char perf_cluster_usage[];
/* Run it: the whole command line of tpx-perf (which holds --metadata). Exit status. */
int perf_cluster_main(int argc, char **argv);

#endif
