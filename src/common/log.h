/*
 * log.h - tpx's logger. The level is checked before any argument is
 * evaluated, so a disabled log line costs one load and one branch.
 * Output goes to TPX_LOG_FILE (if set) or stderr, one write() per line.
 */
#ifndef TPX_COMMON_LOG_H
#define TPX_COMMON_LOG_H

#include <stdarg.h>

#include "util.h"

typedef enum {
    TPX_LOG_NONE = 0,
    TPX_LOG_ERROR = 1,
    TPX_LOG_WARN = 2,
    TPX_LOG_INFO = 3,
    TPX_LOG_DEBUG = 4,
    TPX_LOG_TRACE = 5,
} tpx_log_level_t;

/* Current level; written once by tpx__log_configure(), read everywhere. */
extern int tpx__log_level;

#define TPX_LOG(lvl, ...)                                                                          \
    do {                                                                                           \
        if (TPX_UNLIKELY((int)(lvl) <= tpx__log_level))                                            \
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
