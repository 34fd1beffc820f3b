/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_symbol.h - the built-in transport's symbols, looked up by name.
 *
 * What dlsym() is for a plugin library, this is for the transport built
 * into libtpx: the loader (net.c) asks for the names any plugin would
 * export and gets the same answers: "ncclNetPlugin_v12" (the newest table;
 * the loader drives the built-in transport through it) and
 * TPX_NET_EXT_SYMBOL (the extension table, net_ext.h). Any other name:
 * NULL. The tables are constant and live as long as the process.
 */
#ifndef TPX_SOCK_SYMBOL_H
#define TPX_SOCK_SYMBOL_H

const void *tpx__sock_symbol(const char *name);

#endif
