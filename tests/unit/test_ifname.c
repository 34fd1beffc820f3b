/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL-style interface lists. */
#include "../common/tpx_test.h"
#include "plugin/sock/sock.h"

int main(void)
{
    EXPECT(tpx__sock_ifname_match("eth", "eth0"));
    EXPECT(tpx__sock_ifname_match("eth", "eth12"));
    EXPECT(!tpx__sock_ifname_match("eth", "lo"));
    EXPECT(tpx__sock_ifname_match("ib,eth", "eth1"));
    EXPECT(tpx__sock_ifname_match("ib,eth", "ib0"));
    EXPECT(!tpx__sock_ifname_match("ib,eth", "enp0s3"));
    EXPECT(!tpx__sock_ifname_match("^docker,lo", "lo"));
    EXPECT(!tpx__sock_ifname_match("^docker,lo", "docker0"));
    EXPECT(tpx__sock_ifname_match("^docker,lo", "eth0"));
    EXPECT(tpx__sock_ifname_match("=eth0", "eth0"));
    EXPECT(!tpx__sock_ifname_match("=eth0", "eth01"));
    EXPECT(!tpx__sock_ifname_match("=eth0", "eth"));
    EXPECT(!tpx__sock_ifname_match("^=eth0", "eth0"));
    EXPECT(tpx__sock_ifname_match("^=eth0", "eth01"));
    EXPECT(tpx__sock_ifname_match("=lo", "lo"));
    EXPECT(tpx__sock_ifname_match("eth1:5000,eth2", "eth1"));
    EXPECT(!tpx__sock_ifname_match("", "eth0"));
    EXPECT(tpx__sock_ifname_match("^", "eth0"));
    EXPECT(!tpx__sock_ifname_match(NULL, "eth0"));
    EXPECT(tpx__sock_ifname_match(",,eth,", "eth3"));
    TEST_DONE();
}
