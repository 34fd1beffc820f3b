/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx_nixl_log.h - debug lines of the NIXL backend, at TPX_LOG_LEVEL=debug,
 * where libtpx's own lines go. The level is checked before the arguments
 * are evaluated.
 */
#ifndef TPX_NIXL_LOG_H
#define TPX_NIXL_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

int tpx_nixl_debug_on(void);
void tpx_nixl_debug(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#define TPX_NIXL_DEBUG(...)                                                                        \
    do {                                                                                           \
        if (tpx_nixl_debug_on())                                                                   \
            tpx_nixl_debug(__FILE__, __LINE__, __VA_ARGS__);                                       \
    } while (0)

#endif
