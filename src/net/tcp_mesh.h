// SPDX-License-Identifier: Apache-2.0
/*
 * tcp_mesh.h — connecting pairs of ranks on demand (tcp_mesh.c): listen, publish our address,
 * and make a pair's `streams` data connections and one control connection, each authenticated,
 * the first time either rank asks for them. tcp.c runs the data path over what it hands back.
 */
#ifndef STRATA_NET_TCP_MESH_H
#define STRATA_NET_TCP_MESH_H

#include <poll.h>
#include <stddef.h>

#include "core/store.h"
#include "net/seal.h"
#include "strata.h"

typedef struct strata_tcp_mesh strata_tcp_mesh;

/* What the mesh tells its owner, from inside strata_tcp_mesh_step (never re-entered). */
typedef struct strata_tcp_mesh_events {
  void *ctx;
  /* The pair with `peer` is connected: fds[0 .. streams-1] are the data streams, fds[streams]
   * the control connection, keys[i] what each handshake agreed; all non-blocking, close-on-exec,
   * tuned (tcp_tune.c). The callee owns the fds from now on. */
  void (*linked)(void *ctx, int peer, const int *fds, const strata_seal_keys *keys);
  /* A pair that was asked for cannot be connected: the peer is gone (STRATA_ERR_PEER_LOST), did
   * not answer within STRATA_TIMEOUT (_TIMEOUT) or refused us on a check (_AUTH, _VERSION, _JOB,
   * _CONFIG); `why` is one sentence naming both ranks. */
  void (*failed)(void *ctx, int peer, int status, const char *why);
} strata_tcp_mesh_events;

/* Listen, publish "<job>/tcp/<k>/addr/<rank>" (k counting this rank's opens in the job, so
 * several communicators of one job never read each other's addresses), then connect the pair
 * with rank ^ 1 (in a job of odd size the last rank pairs with the one before instead, and that
 * one waits for both) and wait for it, up to cfg->timeout_s. That first pair is one every
 * algorithm uses, and waiting for it keeps start-up a meeting point of the two ranks: a
 * misconfigured job (secret, version, job id, world size) fails here with the precise reason, as
 * a full mesh did. Every other pair is connected when asked for.
 * `version` is the protocol version to announce. On failure nothing is left open and err says
 * what failed. */
int strata_tcp_mesh_open(const strata_config *cfg, int rank, int nranks, strata_store *store,
                         unsigned version, const strata_tcp_mesh_events *events,
                         strata_tcp_mesh **out, char *err, size_t err_len);

/* Ask for the pair with `peer` (idempotent; nothing once it is connected or failed). The peer's
 * address is read from the store when first needed; progress happens in strata_tcp_mesh_step. */
void strata_tcp_mesh_want(strata_tcp_mesh *m, int peer);
/* Stop asking for every pair not connected yet (a failed communicator needs no new ones): they
 * are neither dialed further nor reported as failed. Peers that dial us are still answered. */
void strata_tcp_mesh_forget_wants(strata_tcp_mesh *m);

/* Accept, dial, read the store, advance handshakes, expire: whatever is possible without
 * blocking (a store read waits at most a few milliseconds for an address not yet published).
 * Calls events->linked / events->failed. */
void strata_tcp_mesh_step(strata_tcp_mesh *m);
/* 1 while a pair is being connected (the owner then steps on every pass, not now and then). */
int strata_tcp_mesh_busy(const strata_tcp_mesh *m);

/* Appends to out (up to cap) the descriptors the mesh waits on: the listener and every
 * connection in its handshake. Returns how many were appended; with out NULL, how many there
 * may be. */
size_t strata_tcp_mesh_pollfds(const strata_tcp_mesh *m, struct pollfd *out, size_t cap);

/* The "host:port" rank `peer` listens on; "?" until this rank read it (it reads a peer's address
 * only to dial it, or for the log at STRATA_LOG=info when the pair comes up). */
const char *strata_tcp_mesh_address(const strata_tcp_mesh *m, int peer);

/* Close the listener and every connection not handed over. NULL is fine. */
void strata_tcp_mesh_close(strata_tcp_mesh *m);

#define STRATA_TCP_ADDRESS_BYTES 320

#endif
