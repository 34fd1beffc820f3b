/* SPDX-License-Identifier: Apache-2.0 */
/* all_status.h - every tpx_status_t value, for the unit tests that check
 * each one has a distinct name and message (test_status.c, test_api.c). */
#ifndef TPX_TESTS_ALL_STATUS_H
#define TPX_TESTS_ALL_STATUS_H

#include "tpx/status.h"

static const tpx_status_t test_all_status[] = {TPX_OK,
                                               TPX_INPROGRESS,
                                               TPX_ERR_INVALID_ARG,
                                               TPX_ERR_INVALID_STATE,
                                               TPX_ERR_NO_RESOURCE,
                                               TPX_ERR_NO_MEMORY,
                                               TPX_ERR_UNSUPPORTED,
                                               TPX_ERR_CONFIG,
                                               TPX_ERR_TIMED_OUT,
                                               TPX_ERR_CONN_REFUSED,
                                               TPX_ERR_CONN_RESET,
                                               TPX_ERR_PROTOCOL,
                                               TPX_ERR_TRUNCATED,
                                               TPX_ERR_UNREACHABLE,
                                               TPX_ERR_ADDR_IN_USE,
                                               TPX_ERR_NO_DEVICE,
                                               TPX_ERR_ACCESS,
                                               TPX_ERR_OVERFLOW,
                                               TPX_ERR_NOT_FOUND,
                                               TPX_ERR_IO,
                                               TPX_ERR_PLUGIN,
                                               TPX_ERR_CUDA,
                                               TPX_ERR_INTERNAL,
                                               TPX_ERR_CANCELED};
#define TEST_NSTATUS (sizeof(test_all_status) / sizeof(test_all_status[0]))

#endif
