/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_ifname.c - NCCL-style interface lists (NCCL_SOCKET_IFNAME syntax).
 *
 * "eth,ib"   interfaces whose name starts with eth or ib
 * "^docker"  every interface except those starting with docker
 * "=eth0"    exactly eth0 (also "^=eth0")
 * An optional ":port" after a name is accepted and ignored.
 */
#include <string.h>

#include "sock.h"

int tpx__sock_ifname_match(const char *list, const char *ifname)
{
    if (list == NULL || ifname == NULL)
        return 0;
    int exclude = 0, exact = 0;
    if (*list == '^') {
        exclude = 1;
        list++;
    }
    if (*list == '=') {
        exact = 1;
        list++;
    }
    int matched = 0;
    size_t nlen = strlen(ifname);
    while (*list) {
        size_t len = strcspn(list, ",");
        size_t name_len = strcspn(list, ",:");
        if (name_len > len)
            name_len = len;
        if (name_len > 0) {
            if (exact ? (name_len == nlen && strncmp(list, ifname, name_len) == 0)
                      : (name_len <= nlen && strncmp(list, ifname, name_len) == 0))
                matched = 1;
        }
        list += len;
        if (*list == ',')
            list++;
    }
    return exclude ? !matched : matched;
}
