/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h - read access to the TPX_* settings of config_table.h.
 *
 * tpx__config_load() parses every variable once per process (thread-safe,
 * idempotent) and reports the first malformed one; the getters then return
 * cached values and never fail.
 */
#ifndef TPX_COMMON_CONFIG_H
#define TPX_COMMON_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "tpx/status.h"

typedef enum {
#define TPX_CONFIG_X(name, type, def, min, max, doc) TPX_CFG_##name,
#include "config_table.h"
#undef TPX_CONFIG_X
    TPX_CFG__COUNT
} tpx_cfg_id_t;

/* Parse the environment (first call only). TPX_ERR_CONFIG if a value is
 * malformed; the message names the variable and the accepted range. */
tpx_status_t tpx__config_load(void);

int64_t tpx__config_int(tpx_cfg_id_t id);
const char *tpx__config_str(tpx_cfg_id_t id);

/* Parse "64K", "1M", "2G" or plain decimal into *out; -1 on bad input. */
int tpx__parse_size(const char *s, int64_t *out);

/* The CPUs this process may run on: its affinity mask (a container's
 * cpuset, taskset), else the online CPUs. What the CPU-dependent defaults
 * (TPX_NSOCKS, TPX_SOCK_WORKERS, ...) are computed from. At least 1. */
long tpx__config_ncpus(void);

/* Print every setting: format 0 = "NAME=value  # doc" lines, 1 = Markdown
 * table of name, default and doc (docs/config.md's). */
void tpx__config_print(FILE *f, int format);

#endif
