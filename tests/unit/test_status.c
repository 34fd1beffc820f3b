/* SPDX-License-Identifier: Apache-2.0 */
/* Every status has a distinct, non-empty string; errno maps as documented. */
#include <errno.h>
#include <string.h>

#include "../common/tpx_test.h"
#include "all_status.h"
#include "common/util.h"
#include "tpx/tpx.h"

int main(void)
{
    const tpx_status_t *all = test_all_status;
    size_t n = TEST_NSTATUS;
    for (size_t i = 0; i < n; i++) {
        const char *s = tpx_status_string(all[i]);
        EXPECT(s != NULL && s[0] != '\0' && strcmp(s, "unknown status") != 0);
        for (size_t j = 0; j < i; j++)
            EXPECT(strcmp(s, tpx_status_string(all[j])) != 0);
        EXPECT(all[i] <= TPX_INPROGRESS);
    }
    EXPECT(strcmp(tpx_status_string((tpx_status_t)12345), "unknown status") == 0);
    EXPECT_EQ(tpx__status_from_errno(0), TPX_OK);
    EXPECT_EQ(tpx__status_from_errno(EAGAIN), TPX_INPROGRESS);
    EXPECT_EQ(tpx__status_from_errno(ECONNRESET), TPX_ERR_CONN_RESET);
    EXPECT_EQ(tpx__status_from_errno(EPIPE), TPX_ERR_CONN_RESET);
    EXPECT_EQ(tpx__status_from_errno(ECONNREFUSED), TPX_ERR_CONN_REFUSED);
    EXPECT_EQ(tpx__status_from_errno(ETIMEDOUT), TPX_ERR_TIMED_OUT);
    EXPECT_EQ(tpx__status_from_errno(EADDRINUSE), TPX_ERR_ADDR_IN_USE);
    EXPECT_EQ(tpx__status_from_errno(EIO), TPX_ERR_IO);
    EXPECT(strlen(tpx_version_string()) >= 5);
    TEST_DONE();
}
