/* Every status has a distinct, non-empty string; errno maps as documented. */
#include <errno.h>
#include <string.h>

#include "../common/tpx_test.h"
#include "common/util.h"
#include "tpx/tpx.h"

int main(void)
{
    static const tpx_status_t all[] = {
        TPX_OK, TPX_INPROGRESS, TPX_ERR_INVALID_ARG, TPX_ERR_INVALID_STATE, TPX_ERR_NO_RESOURCE,
        TPX_ERR_NO_MEMORY, TPX_ERR_UNSUPPORTED, TPX_ERR_CONFIG, TPX_ERR_TIMED_OUT,
        TPX_ERR_CONN_REFUSED, TPX_ERR_CONN_RESET, TPX_ERR_PROTOCOL, TPX_ERR_TRUNCATED,
        TPX_ERR_UNREACHABLE, TPX_ERR_ADDR_IN_USE, TPX_ERR_NO_DEVICE, TPX_ERR_ACCESS,
        TPX_ERR_OVERFLOW, TPX_ERR_NOT_FOUND, TPX_ERR_IO, TPX_ERR_PLUGIN,
        TPX_ERR_CUDA, TPX_ERR_INTERNAL, TPX_ERR_CANCELED};
    size_t n = sizeof(all) / sizeof(all[0]);
    for (size_t i = 0; i < n; i++) {
        const char *s = tpx_strerror(all[i]);
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
