/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_engine.c - the public entry points of the engine's life (tpx.h:
 * tpx_engine_params_init, _create, _destroy, _port, _fd, tpx_progress).
 * The work is engine.c's; this file only checks what the caller handed in.
 */
#include "engine.h"

TPX_API void tpx_engine_params_init(tpx_engine_params_t *p)
{
    if (p != NULL)
        tpx__engine_params_init(p);
}

TPX_API tpx_status_t tpx_engine_create(const tpx_engine_params_t *params, tpx_engine_t **out)
{
    return tpx__engine_create(params, out); /* it checks and logs every argument */
}

TPX_API void tpx_engine_destroy(tpx_engine_t *e)
{
    if (e != NULL)
        tpx__engine_destroy(e);
}

TPX_API int tpx_progress(tpx_engine_t *e) { return e != NULL ? tpx__engine_completions(e) : 0; }

TPX_API int tpx_engine_port(const tpx_engine_t *e) { return e != NULL ? e->bs_port : -1; }

TPX_API int tpx_engine_fd(tpx_engine_t *e) { return e != NULL ? e->efd : -1; }
