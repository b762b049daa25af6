// SPDX-License-Identifier: Apache-2.0
/*
 * net.h — connecting a communicator's ranks: TCP (always; each pair connected when first used,
 * authenticated by the handshake, its control connection telling us when the peer dies), shared
 * memory between ranks of one host, and the choice per peer.
 */
#ifndef STRATA_NET_NET_H
#define STRATA_NET_NET_H

#include "core/store.h"
#include "net/transport.h"
#include "strata.h"

enum { STRATA_NET_MAX_TRANSPORTS = 2 };

typedef struct strata_net {
  int rank, nranks;
  strata_transport *tcp;   /* NULL when nranks == 1 */
  strata_transport *shm;   /* NULL when disabled or no peer shares the host */
  strata_transport **peer; /* [nranks]: the transport for each peer; NULL for ourselves */
  int *is_local;           /* [nranks]: 1 if rank q shares our host (same boot, same network,
                              mount and pid namespaces), whatever transport carries its data */
  /* every open transport, the one that watches all peers (tcp) first: what the engine drives */
  strata_transport *all[STRATA_NET_MAX_TRANSPORTS];
  int ntransports;
  int socket_data_peers;   /* peers whose data crosses a socket (tcp), not shared memory */
  int socket_remote_peers; /* of those, peers on another host (or network namespace) */
} strata_net;

/* Publish this rank's listening address in the store, connect to every peer with
 * cfg->tcp_streams streams, run the handshake (magic, version, job id, rank, authenticator of a
 * fresh nonce keyed by cfg->secret), then set up shared memory with peers on the same host when
 * cfg->shm_enabled. On failure returns the status (STRATA_ERR_AUTH / _VERSION / _JOB name which
 * check failed) with a readable message in err. */
int strata_net_open(const strata_config *cfg, int rank, int nranks, strata_store *store,
                    strata_net *out, char *err, size_t err_len);
void strata_net_close(strata_net *net);

/* The largest round-trip time, in microseconds, to the peers whose data crosses a socket (from
 * the transports' STRATA_TRANSPORT_DATA_RTT_US); 0 when none or unknown. */
unsigned strata_net_data_rtt_us(const strata_net *net);

/* Wait up to timeout_ms for activity on the transports that carry data. When every peer's data
 * goes through shared memory, only that transport blocks (the socket mesh only watches for
 * hang-ups, which its progress() polls); otherwise each transport is polled without blocking
 * where shared memory is open too, or the sockets block up to a millisecond alone. */
void strata_net_wait(strata_net *net, int timeout_ms);

/* Drive the transport that reaches every peer (the socket mesh) for `seconds`, so abort notices
 * queued by send_abort leave before the caller tears down. */
void strata_net_flush(strata_net *net, double seconds);

/* Once the communicator failed (tcp.h: strata_tcp_abandon, strata_tcp_keepalive): drop every
 * transfer, then keep only liveness going over the TCP pairs. strata_net_peer_alive: 0 once
 * `peer` is found gone; a peer this rank has no TCP pair with (it never talked to it, or their
 * data goes over shm) is connected by the call (strata_tcp_watch) and judged once that succeeds or
 * fails, alive meanwhile. */
void strata_net_abandon(strata_net *net);
void strata_net_keepalive(strata_net *net);
int strata_net_peer_alive(const strata_net *net, int peer);
/* The same judgement without connecting: a peer this rank has no TCP pair with is alive. */
int strata_net_peer_alive_seen(const strata_net *net, int peer);

/* This process's host identity as published under "<job_id>/host/<rank>": hostname, boot id
 * and the inodes of the network, mount and pid namespaces. Equal strings = shared memory and
 * loopback reach each other. Returns STRATA_OK (never fails; unknown parts print as "?"). */
int strata_net_host_identity(char *out, size_t len);

#endif
