/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx/status.h - the one status type every tpx call returns.
 *
 * TPX_OK is zero, TPX_INPROGRESS is positive (not an error), every error is
 * negative. tpx_status_string() and tpx_status_name() never return NULL.
 */
#ifndef TPX_STATUS_H
#define TPX_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#ifndef TPX_API
#if defined(__GNUC__)
#define TPX_API __attribute__((visibility("default")))
#else
#define TPX_API
#endif
#endif

typedef enum {
    TPX_OK = 0,
    TPX_INPROGRESS = 1, /* not finished yet: call again / keep polling */

    /* caller errors */
    TPX_ERR_INVALID_ARG = -1,   /* a bad argument (NULL, size, alignment, handle) */
    TPX_ERR_INVALID_STATE = -2, /* the call is not allowed now */
    TPX_ERR_NO_RESOURCE = -3,   /* a window/queue is full: drain and retry */
    TPX_ERR_NO_MEMORY = -4,
    TPX_ERR_UNSUPPORTED = -5,
    TPX_ERR_CONFIG = -6,        /* a TPX_* setting is malformed */

    /* peer and network errors */
    TPX_ERR_TIMED_OUT = -20,
    TPX_ERR_CONN_REFUSED = -21,
    TPX_ERR_CONN_RESET = -22, /* the peer closed or the connection broke */
    TPX_ERR_PROTOCOL = -23,   /* malformed, unexpected or unauthenticated wire data */
    TPX_ERR_TRUNCATED = -24,  /* a message is larger than the posted receive */
    TPX_ERR_UNREACHABLE = -25,
    TPX_ERR_ADDR_IN_USE = -26,
    TPX_ERR_NO_DEVICE = -27, /* no usable interface / GPU */
    TPX_ERR_ACCESS = -28,    /* the peer refused: outside its exported memory, wrong key */
    TPX_ERR_OVERFLOW = -29,  /* a bounded queue overflowed: something was dropped */
    TPX_ERR_NOT_FOUND = -30, /* no such name (registry: never published, or its lease expired) */

    /* system and internal errors */
    TPX_ERR_IO = -40,       /* an unexpected system-call failure */
    TPX_ERR_PLUGIN = -41,   /* a net plugin failed to load or returned an error */
    TPX_ERR_CUDA = -42,
    TPX_ERR_INTERNAL = -43, /* a bug in tpx */
    TPX_ERR_CANCELED = -44,
} tpx_status_t;

/* A short, static, human-readable description of `status`. */
TPX_API const char *tpx_status_string(tpx_status_t status);
/* The enumerator's name as a static string ("TPX_ERR_TIMED_OUT"), for
 * logs and bindings; "TPX_ERR_UNKNOWN" for a value not listed above. */
TPX_API const char *tpx_status_name(tpx_status_t status);

#ifdef __cplusplus
}
#endif
#endif
