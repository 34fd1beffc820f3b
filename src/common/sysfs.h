/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sysfs.h - reading the one-line files of sysfs (/sys/class/net/..., PCI
 * numa_node, node cpulists), shared by the transport and the engine.
 */
#ifndef TPX_COMMON_SYSFS_H
#define TPX_COMMON_SYSFS_H

#include <stddef.h>

/* The first line of `path` into buf[len] (newline kept, NUL-terminated).
 * 0 on success; -1 if the file cannot be opened or is empty. */
int tpx__sysfs_line(const char *path, char *buf, size_t len);
/* The decimal integer at the start of `path`'s first line into *out (only
 * on success). 0 on success, -1 otherwise. */
int tpx__sysfs_int(const char *path, long *out);

/* The sysfs tree topology is read from (TPX_SYSFS_ROOT, "/sys"). */
const char *tpx__sysfs_root(void);

#endif
