/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ident.h - engine identity (ident.c): who a peer engine is, proven.
 *
 * Two modes, chosen at engine creation (TPX_IDENTITY) and logged:
 *
 *  KEY   libsodium (loaded with dlopen at run time) gives the engine an
 *        Ed25519 key pair; the engine id is derived from the public key,
 *        which the metadata blob carries. After the bootstrap handshake each
 *        side sends IDENT: its public key and a signature over the
 *        handshake transcript (both nonces, the token macs) and both INFO
 *        messages (both ids, both sets of handles). A peer whose IDENT
 *        verifies is "verified" as the engine that key names; one that
 *        sends a key that does not verify (or whose id is not the key's)
 *        is dropped.
 *  DIAL  no libsodium (or TPX_IDENTITY=dial): ids are random, IDENT carries
 *        no key, no peer is verified. A remote is then served only by the
 *        connection this engine itself dialed to the metadata's addresses.
 *
 * Either way a remote (tpx_remote_load) is served only by a
 * connection proven to be that engine (tpx__peer_serves), and a
 * notification's `from` is the sender's name only when it is proven.
 *
 * INSTANCE  an id without a key is a claim anyone can make: once an owner
 *        dies, another process can bind its port and claim its id. So every
 *        engine draws a secret of its own instance at creation (never sent),
 *        and on each connection it accepts it offers the client a ticket:
 *        a random ticket id and HMAC(instance secret, ticket id). A remote
 *        keeps the ticket of the first connection it made (trust on first
 *        use) and presents the ticket id on every reconnect; the engine
 *        there must answer with HMAC(ticket, this connection's transcript
 *        and INFOs), which only the instance that issued the ticket can
 *        compute. An engine that restarted is a new instance: it cannot
 *        answer, and the remote stays refused until the application loads
 *        the new metadata (a new remote). With a token the ticket travels
 *        encrypted under HMAC(token, transcript), so only the two ends of an
 *        authenticated handshake learn it; without one it is in the clear
 *        on the first connection (SECURITY.md).
 */
#ifndef TPX_ENGINE_IDENT_H
#define TPX_ENGINE_IDENT_H

#include <stddef.h>
#include <stdint.h>

#include "tpx/status.h"

#define TPX_IDENT_PK   32
#define TPX_IDENT_SK   64
#define TPX_IDENT_SIG  64
#define TPX_IDENT_HASH 32
#define TPX_IDENT_SEED 32

/* The engine id a public key names: its first 8 bytes of SHA-256 over
 * "tpx-engine-id" || pk, big-endian; never 0. */
uint64_t tpx__ident_id(const unsigned char pk[TPX_IDENT_PK]);

/* Create a key pair: TPX_OK (pk, sk written), or TPX_ERR_UNSUPPORTED when
 * libsodium is not there or TPX_IDENTITY=dial. Thread-safe. */
tpx_status_t tpx__ident_keypair(unsigned char pk[TPX_IDENT_PK], unsigned char sk[TPX_IDENT_SK]);
/* The key pair of a 32-byte seed (a long-lived key kept in a file):
 * TPX_OK, or TPX_ERR_UNSUPPORTED as above. */
tpx_status_t tpx__ident_seed_keypair(const unsigned char seed[TPX_IDENT_SEED],
                                     unsigned char pk[TPX_IDENT_PK],
                                     unsigned char sk[TPX_IDENT_SK]);
/* 1 when keys can be made and checked here (libsodium loaded, not disabled). */
int tpx__ident_available(void);

/* What IDENT signs:
 *   "tpx-ident-v1" || u8 role (1: signer is the bootstrap client) ||
 *   transcript[32] || sha256(client INFO)[32] || sha256(server INFO)[32] || pk[32] */
#define TPX_IDENT_MSG_SIZE (12 + 1 + 4 * 32)
void tpx__ident_message(int signer_is_client, const unsigned char transcript[TPX_IDENT_HASH],
                        const unsigned char client_info_hash[TPX_IDENT_HASH],
                        const unsigned char server_info_hash[TPX_IDENT_HASH],
                        const unsigned char pk[TPX_IDENT_PK],
                        unsigned char out[TPX_IDENT_MSG_SIZE]);
tpx_status_t tpx__ident_sign(const unsigned char sk[TPX_IDENT_SK], const unsigned char *msg,
                             size_t len, unsigned char sig[TPX_IDENT_SIG]);
/* 1 when sig is pk's signature of msg. */
int tpx__ident_verify(const unsigned char pk[TPX_IDENT_PK], const unsigned char *msg, size_t len,
                      const unsigned char sig[TPX_IDENT_SIG]);

/* ---- instances (INSTANCE above) ---- */
#define TPX_IDENT_SECRET 32
/* A ticket of an instance: HMAC(secret, "tpx-instance-ticket-v1" || id). */
void tpx__ident_ticket(const unsigned char secret[TPX_IDENT_SECRET], const unsigned char id[16],
                       unsigned char ticket[32]);
/* The proof that the server of one connection holds `ticket`:
 * HMAC(ticket, "tpx-instance-proof-v1" || transcript || sha256(client INFO) ||
 * sha256(server INFO)). */
void tpx__ident_proof(const unsigned char ticket[32], const unsigned char transcript[TPX_IDENT_HASH],
                      const unsigned char client_info_hash[TPX_IDENT_HASH],
                      const unsigned char server_info_hash[TPX_IDENT_HASH],
                      unsigned char proof[32]);
/* XOR a ticket with HMAC(token, "tpx-instance-wrap-v1" || transcript) (wrap
 * and unwrap alike); no change without a token (NULL or ""). */
void tpx__ident_wrap(const char *token, const unsigned char transcript[TPX_IDENT_HASH],
                     unsigned char ticket[32]);

#endif
