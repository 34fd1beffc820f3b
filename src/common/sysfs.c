/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sysfs.c - one-line sysfs files (see sysfs.h).
 */
#include "common/sysfs.h"
#include "common/config.h"
#include "common/tsan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int tpx__sysfs_line(const char *path, char *buf, size_t len)
{
    if (len < 2)
        return -1;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char *s = fgets(buf, (int)(len > 65536 ? 65536 : len), f);
    fclose(f);
    return s == NULL ? -1 : 0;
}

int tpx__sysfs_int(const char *path, long *out)
{
    char buf[32], *end;
    if (tpx__sysfs_line(path, buf, sizeof(buf)) != 0)
        return -1;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno != 0 || end == buf)
        return -1;
    *out = v;
    return 0;
}

#ifdef TPX_TSAN_BUILD
char tpx__tsan_sync[4096]; /* common/tsan.h */
#endif

const char *tpx__sysfs_root(void)
{
    return tpx__config_str(TPX_CFG_SYSFS_ROOT);
}
