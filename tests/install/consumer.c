/* SPDX-License-Identifier: Apache-2.0 */
/* A program that uses an installed tpx (tests/install/install.sh). */
#include <stdio.h>
#include <string.h>

#include <tpx/tpx.h>

int main(void)
{
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    if (strcmp(tpx_status_name(TPX_ERR_TIMED_OUT), "TPX_ERR_TIMED_OUT") != 0 || p.gpu != -1)
        return 1;
    printf("tpx %s\n", tpx_version_string());
    return 0;
}
