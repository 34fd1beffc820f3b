/* NCCL-style interface lists. */
#include "check.h"
#include "plugin/sock/sock.h"

int main(void)
{
    CHECK(tpx__sock_ifname_match("eth", "eth0"));
    CHECK(tpx__sock_ifname_match("eth", "eth12"));
    CHECK(!tpx__sock_ifname_match("eth", "lo"));
    CHECK(tpx__sock_ifname_match("ib,eth", "eth1"));
    CHECK(tpx__sock_ifname_match("ib,eth", "ib0"));
    CHECK(!tpx__sock_ifname_match("ib,eth", "enp0s3"));
    CHECK(!tpx__sock_ifname_match("^docker,lo", "lo"));
    CHECK(!tpx__sock_ifname_match("^docker,lo", "docker0"));
    CHECK(tpx__sock_ifname_match("^docker,lo", "eth0"));
    CHECK(tpx__sock_ifname_match("=eth0", "eth0"));
    CHECK(!tpx__sock_ifname_match("=eth0", "eth01"));
    CHECK(!tpx__sock_ifname_match("=eth0", "eth"));
    CHECK(!tpx__sock_ifname_match("^=eth0", "eth0"));
    CHECK(tpx__sock_ifname_match("^=eth0", "eth01"));
    CHECK(tpx__sock_ifname_match("=lo", "lo"));
    CHECK(tpx__sock_ifname_match("eth1:5000,eth2", "eth1"));
    CHECK(!tpx__sock_ifname_match("", "eth0"));
    CHECK(tpx__sock_ifname_match("^", "eth0"));
    CHECK(!tpx__sock_ifname_match(NULL, "eth0"));
    CHECK(tpx__sock_ifname_match(",,eth,", "eth3"));
    CHECK_DONE();
}
