/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx/log.h - where libtpx's log lines go.
 *
 * By default a line is written (one write() per line) to TPX_LOG_FILE or,
 * if that is unset, to stderr, when its level is at or below TPX_LOG_LEVEL
 * (default warn). A host program that owns its stderr routes the lines to
 * its own logger with tpx_log_set_callback(); the library then never
 * writes to stderr or TPX_LOG_FILE.
 */
#ifndef TPX_LOG_H
#define TPX_LOG_H

#include "tpx/status.h" /* TPX_API */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TPX_LOG_NONE = 0,
    TPX_LOG_ERROR = 1,
    TPX_LOG_WARN = 2,
    TPX_LOG_INFO = 3,
    TPX_LOG_DEBUG = 4,
    TPX_LOG_TRACE = 5,
} tpx_log_level_t;

/* Receives one complete line, without a newline: "tpx PID:TID LEVEL
 * file.c:LINE message". Called from any thread of the library, possibly
 * from several at once, with internal locks held: it must return quickly
 * and must not call back into tpx. `line` lives only during the call. */
typedef void (*tpx_log_fn)(void *arg, tpx_log_level_t level, const char *line);

/* Route log lines to fn(arg, ...) instead of TPX_LOG_FILE/stderr; NULL
 * restores the default. Takes effect for lines emitted after it returns. */
TPX_API void tpx_log_set_callback(tpx_log_fn fn, void *arg);
/* The most verbose level emitted, overriding TPX_LOG_LEVEL from now on
 * (TPX_LOG_NONE: nothing). */
TPX_API void tpx_log_set_level(tpx_log_level_t level);

#ifdef __cplusplus
}
#endif
#endif
