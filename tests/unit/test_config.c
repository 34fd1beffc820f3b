/* SPDX-License-Identifier: Apache-2.0 */
/* Size parsing, defaults, and rejection of malformed TPX_* values. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "../common/tpx_test.h"
#include "common/config.h"
#include "tpx/tpx.h"

int main(int argc, char **argv)
{
    int64_t v = 0;
    EXPECT(tpx__parse_size("0", &v) == 0 && v == 0);
    EXPECT(tpx__parse_size("64K", &v) == 0 && v == 65536);
    EXPECT(tpx__parse_size("64KiB", &v) == 0 && v == 65536);
    EXPECT(tpx__parse_size("1M", &v) == 0 && v == 1048576);
    EXPECT(tpx__parse_size("2g", &v) == 0 && v == 2147483648LL);
    EXPECT(tpx__parse_size("", &v) != 0);
    EXPECT(tpx__parse_size("abc", &v) != 0);
    EXPECT(tpx__parse_size("12Q", &v) != 0);
    EXPECT(tpx__parse_size("1K2", &v) != 0);
    EXPECT(tpx__parse_size("99999999999999999999", &v) != 0);
    EXPECT(tpx__parse_size("9000000000G", &v) != 0);

    if (argc > 1 && strcmp(argv[1], "bad") == 0) {
        /* Run by ctest with TPX_NSOCKS=abc: the check must fail cleanly. */
        EXPECT_EQ(tpx_config_check(), TPX_ERR_CONFIG);
        EXPECT(tpx__config_int(TPX_CFG_NSOCKS) >= 2); /* falls back to the default (auto: >= 2) */
        TEST_DONE();
    }
    if (argc > 1 && strcmp(argv[1], "range") == 0) {
        EXPECT_EQ(tpx_config_check(), TPX_ERR_CONFIG); /* TPX_NSOCKS=17 */
        TEST_DONE();
    }
    if (argc > 1 && strcmp(argv[1], "token") == 0) {
        /* Run with a 256-byte TPX_AUTH_TOKEN: refused (as from the file), not cut */
        EXPECT_EQ(tpx_config_check(), TPX_ERR_CONFIG);
        tpx_engine_t *e = NULL;
        tpx_engine_params_t p;
        tpx_engine_params_init(&p);
        p.port = TPX_PORT_NONE;
        EXPECT_EQ(tpx_engine_create(&p, &e), TPX_ERR_CONFIG);
        EXPECT(e == NULL);
        TEST_DONE();
    }
    if (argc > 1 && strcmp(argv[1], "affinity") == 0) {
        /* Confined to one CPU (a container's cpuset), the CPU-dependent
         * defaults follow the mask, not the host's CPU count. */
        cpu_set_t one;
        CPU_ZERO(&one);
        EXPECT_EQ(sched_getaffinity(0, sizeof(one), &one), 0);
        int cpu = 0;
        while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &one))
            cpu++;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        EXPECT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
        EXPECT_EQ(tpx__config_ncpus(), 1);
        unsetenv("TPX_NSOCKS");
        unsetenv("TPX_SOCK_POLL_US");
        unsetenv("TPX_SOCK_DIRECT_BYTES");
        EXPECT_EQ(tpx_config_check(), TPX_OK);
        EXPECT_EQ(tpx__config_int(TPX_CFG_NSOCKS), 2);         /* half, at least 2 */
        EXPECT_EQ(tpx__config_int(TPX_CFG_SOCK_POLL_US), 0);   /* fewer than 8 CPUs */
        EXPECT_EQ(tpx__config_int(TPX_CFG_SOCK_DIRECT_BYTES), 1 << 20);
        TEST_DONE();
    }
    EXPECT(tpx__config_ncpus() >= 1);
    setenv("TPX_NSOCKS", "8", 1);
    setenv("TPX_PIECE_BYTES", "2M", 1);
    unsetenv("TPX_LOG_LEVEL");
    EXPECT_EQ(tpx_config_check(), TPX_OK);
    EXPECT_EQ(tpx__config_int(TPX_CFG_NSOCKS), 8);
    EXPECT_EQ(tpx__config_int(TPX_CFG_PIECE_BYTES), 2 << 20);
    EXPECT_EQ(tpx__config_int(TPX_CFG_MAX_REQUESTS), 32);
    EXPECT(strcmp(tpx__config_str(TPX_CFG_LOG_LEVEL), "warn") == 0);
    /* Read once: later changes are not seen. */
    setenv("TPX_NSOCKS", "2", 1);
    EXPECT_EQ(tpx__config_int(TPX_CFG_NSOCKS), 8);
    TEST_DONE();
}
