/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peer_trust.c - what a peer is proven to be: the engine of a remote (by
 * its key, or the connection dialed for it, and the instance its ticket
 * names: ident.h), and the name a notification from it is reported with.
 *
 * Lookups only: they read the peer, the remote and the engine's list of
 * remotes (remote.h: a peer's remote is data it points to) and call no
 * other file, so the files that decide with them -- rma.c (a
 * notification's sender), peer.c (admission), remote.c (which connection
 * serves a remote) -- all call down to them. Engine lock held.
 */
#include <stdio.h>
#include <string.h>

#include "engine.h"
#include "peer.h"
#include "remote.h"

/* Is p proven to be rm's engine? With keys here and in the blob: p signed
 * its handshake with the blob's key. Otherwise: p is a connection this
 * engine dialed (to an address of the blob, remote_dial), the engine there
 * said it is rm's, and -- once rm holds a ticket of the instance it first
 * reached -- it proved it is that instance; an inbound connection proves
 * nothing. */
int tpx__peer_serves(const tpx_peer_t *p, const tpx_remote_t *rm)
{
    if (p->remote_id != rm->md.engine_id)
        return 0;
    if (tpx__ident_keyed(rm->e) && rm->md.has_key)
        return p->verified && memcmp(p->remote_pk, rm->md.key, sizeof(rm->md.key)) == 0;
    return p->dialed && tpx__peer_same_instance(p, rm);
}

int tpx__peer_same_instance(const tpx_peer_t *p, const tpx_remote_t *rm)
{
    return !rm->has_ticket ||
           (p->inst_proven && memcmp(p->inst_proven_id, rm->ticket_id, sizeof(rm->ticket_id)) == 0);
}

int tpx__peer_known(const tpx_peer_t *p)
{
    if (!p->verified)
        return 0;
    for (const tpx_remote_t *rm = p->e->remotes; rm != NULL; rm = rm->next)
        if (rm->md.has_key && memcmp(rm->md.key, p->remote_pk, sizeof(rm->md.key)) == 0)
            return 1;
    return 0;
}

void tpx__peer_proven_name(const tpx_peer_t *p, char *out, size_t len)
{
    const tpx_engine_t *e = p->e;
    int proven = p->verified || (p->remote != NULL && tpx__peer_serves(p, p->remote));
    /* A name that a loaded remote has belongs to that remote's engine. */
    for (const tpx_remote_t *rm = e->remotes; rm != NULL && proven; rm = rm->next)
        if (strcmp(rm->md.name, p->remote_name) == 0 && !tpx__peer_serves(p, rm))
            proven = 0;
    snprintf(out, len, "%s%s", proven ? "" : "?", p->remote_name);
}
