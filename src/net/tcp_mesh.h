// SPDX-License-Identifier: Apache-2.0
/*
 * tcp_mesh.h — building the TCP full mesh (tcp_mesh.c): listen, publish our address, dial every
 * lower rank and accept every higher one, authenticate every connection. tcp.c then runs the
 * data path over the resulting sockets.
 */
#ifndef STRATA_NET_TCP_MESH_H
#define STRATA_NET_TCP_MESH_H

#include <stddef.h>

#include "core/store.h"
#include "net/seal.h"
#include "strata.h"

/* Store keys live under "<job>/tcp/<k>/", k counting this rank's opens in the job
 * ("<job>/tcp/opens/<rank>"), so several communicators of one job never read each other's
 * addresses. Connection (peer, stream) lives at fds[peer * (streams + 1) + stream]; stream ==
 * streams is the control connection. Entries for ourselves are -1. All sockets are non-blocking,
 * close-on- exec, TCP_NODELAY, with buffers and congestion control from tcp_tune.c.
 * keys[same index] (may be NULL) receives what the connection's handshake agreed: whether its
 * frames are sealed, and the keys. `version` is the protocol version to announce. On failure
 * every socket is closed and err says what failed (which rank refused which, and why; or who
 * never connected). */
int strata_tcp_mesh_connect(const strata_config *cfg, int rank, int nranks, strata_store *store,
                            unsigned version, int *fds, strata_seal_keys *keys, char *addresses,
                            char *err, size_t err_len);

/* Bytes of one entry of `addresses` ([nranks] "host:port" strings, "?" when unknown; the higher
 * ranks' are only looked up when STRATA_LOG is info or more, since only the log needs them). */
#define STRATA_TCP_ADDRESS_BYTES 320

#endif
