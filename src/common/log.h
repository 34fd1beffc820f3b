/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h - tpx's logger. The level is checked before any argument is
 * evaluated, so a disabled log line costs one load and one branch.
 * Output goes to the host's callback (tpx_log_set_callback), else to
 * TPX_LOG_FILE (if set) or stderr, one write() per line.
 */
#ifndef TPX_COMMON_LOG_H
#define TPX_COMMON_LOG_H

#include <stdarg.h>
#include <stdatomic.h>

#include "tpx/log.h" /* the levels, and the host's callback */
#include "util.h"


/* Current level; written by tpx__log_configure() and tpx_log_set_level(),
 * read everywhere (relaxed: a line more or less around a change is fine). */
extern atomic_int tpx__log_level;
#define TPX_LOG_ON(lvl) ((int)(lvl) <= atomic_load_explicit(&tpx__log_level, memory_order_relaxed))

#define TPX_LOG(lvl, ...)                                                                          \
    do {                                                                                           \
        if (TPX_UNLIKELY(TPX_LOG_ON(lvl)))                                            \
            tpx__log_emit((lvl), __FILE__, __LINE__, __VA_ARGS__);                                 \
    } while (0)
#define TPX_ERROR(...) TPX_LOG(TPX_LOG_ERROR, __VA_ARGS__)
#define TPX_WARN(...) TPX_LOG(TPX_LOG_WARN, __VA_ARGS__)
#define TPX_INFO(...) TPX_LOG(TPX_LOG_INFO, __VA_ARGS__)
#define TPX_DEBUG(...) TPX_LOG(TPX_LOG_DEBUG, __VA_ARGS__)
#define TPX_TRACE(...) TPX_LOG(TPX_LOG_TRACE, __VA_ARGS__)

void tpx__log_emit(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void tpx__log_vemit(int level, const char *file, int line, const char *fmt, va_list ap);

/* Apply TPX_LOG_LEVEL / TPX_LOG_FILE (called by tpx__config_load()). */
void tpx__log_configure(int level, const char *path);

/* Parse "error|warn|info|debug|trace|none" or a digit; -1 if unknown. */
int tpx__log_level_parse(const char *s);
const char *tpx__log_level_name(int level);

#endif
