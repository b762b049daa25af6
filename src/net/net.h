/*
 * net.h — connecting a communicator's ranks: the TCP mesh (always, it carries the handshake and
 * tells us when a peer dies), shared memory between ranks of one host, and the choice per peer.
 */
#ifndef STRATA_NET_NET_H
#define STRATA_NET_NET_H

#include "boot/store.h"
#include "net/transport.h"
#include "strata.h"

typedef struct strata_net {
  int rank, nranks;
  strata_transport *tcp;   /* NULL when nranks == 1 */
  strata_transport *shm;   /* NULL when disabled or no peer shares the host */
  strata_transport **peer; /* [nranks]: the transport for each peer; NULL for ourselves */
  int *is_local;           /* [nranks]: 1 if rank q shares our host (same boot, same network,
                              mount and pid namespaces), whatever transport carries its data */
} strata_net;

/* Publish this rank's listening address in the store, connect to every peer with
 * cfg->tcp_streams streams, run the handshake (magic, version, job id, rank, authenticator of a
 * fresh nonce keyed by cfg->secret), then set up shared memory with peers on the same host when
 * cfg->shm_enabled. On failure returns the status (STRATA_ERR_AUTH / _VERSION / _JOB name which
 * check failed) with a readable message in err. */
int strata_net_open(const strata_config *cfg, int rank, int nranks, strata_store *store,
                    strata_net *out, char *err, size_t err_len);
void strata_net_close(strata_net *net);

/* This process's host identity as published under "<job_id>/host/<rank>": hostname, boot id
 * and the inodes of the network, mount and pid namespaces. Equal strings = shared memory and
 * loopback reach each other. Returns STRATA_OK (never fails; unknown parts print as "?"). */
int strata_net_host_identity(char *out, size_t len);

#endif
