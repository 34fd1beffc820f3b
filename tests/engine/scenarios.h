/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scenarios.h - the scenarios of test_engine. Each one runs in the
 * supervisor: it creates its links, spawns its roles and returns the exit
 * status of the test (0: passed).
 */
#ifndef TPX_TEST_ENGINE_SCENARIOS_H
#define TPX_TEST_ENGINE_SCENARIOS_H

/* test_engine.c: transfers that must work */
int scen_sizes(int argc, char **argv);
int scen_many(int argc, char **argv);
int scen_peers(int argc, char **argv);
int scen_idlecpu(int argc, char **argv);
int scen_idlefds(int argc, char **argv);
int scen_window(int argc, char **argv);
int scen_bw(int argc, char **argv);

/* faults.c: failures that must be reported, and survived */
int scen_kill(int argc, char **argv);
int scen_auth(int argc, char **argv);
int scen_garbage(int argc, char **argv);
int scen_truncated(int argc, char **argv);
int scen_postfail(int argc, char **argv);
int scen_badargs(int argc, char **argv);

#endif
