// SPDX-License-Identifier: Apache-2.0
/*
 * tcp.h — the TCP transport: `streams` data connections and one control connection per pair of
 * ranks, made the first time the pair is used (tcp_mesh.c), each opened with the authenticated
 * handshake (handshake.c), large messages striped across the streams.
 */
#ifndef STRATA_NET_TCP_H
#define STRATA_NET_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "core/store.h"
#include "net/seal.h"
#include "net/transport.h"
#include "strata.h"

/* Messages of at least this many bytes are cut into one stripe per stream; smaller ones travel
 * whole on stream (msg_seq % streams). */
#define STRATA_TCP_STRIPE_MIN_BYTES (256u * 1024u)

/* Listen, publish "<job_id>/tcp/<k>/addr/<rank>" in the store and connect the pair with rank ^ 1
 * (tcp_mesh.h); every other pair is connected when a transfer with it is first posted, and its
 * transfers wait for it meanwhile. On success *out is the transport. */
int strata_tcp_open(const strata_config *cfg, int rank, int nranks, strata_store *store,
                    strata_transport **out, char *err, size_t err_len);

/* A transport between two ranks over connections made and authenticated elsewhere (the NCCL
 * network plugin, src/ncclnet/): fds[0 .. streams-1] are the data streams to rank 1 - rank and
 * fds[streams] the control connection, each already past strata_handshake_advance() == STRATA_OK
 * with keys[i] what it agreed, and tuned (strata_tcp_tune_established). Silence is not judged:
 * such an owner drives progress() only while it has transfers, so heartbeats would stop with it;
 * the sockets get kernel keepalive and TCP_USER_TIMEOUT from cfg->timeout_s instead, and EOF or a
 * reset still fails the pair at once. The transport takes the fds (set to -1) and *out is it; on
 * a failure after the arguments were checked the fds are closed. STRATA_ERR_INVALID_ARG, _CONFIG
 * (streams out of range), _NO_MEMORY or _SYSTEM (the cipher). */
int strata_tcp_adopt(const strata_config *cfg, int rank, int streams, int *fds,
                     const strata_seal_keys *keys, strata_transport **out);

/* Tell the transport that `peer`'s data goes by another transport (shared memory): tcp then
 * only authenticates, watches for the peer's death and carries its abort as a backup to the
 * data transport's own, in-order abort. Called by net.c after choosing transports. */
void strata_tcp_set_control_only(strata_transport *t, int peer);

/* The largest handshake RTT (TCP_INFO) over the peers whose data goes over this transport, in
 * microseconds; 0 when none or unknown. The engine sizes its pipelining chunk from it
 * (src/engine/chunk.c). */
unsigned strata_tcp_data_rtt_us(const strata_transport *t);

/* The "host:port" rank `peer` listens on, for log lines ("?" when unknown or t is not tcp). */
const char *strata_tcp_peer_address(const strata_transport *t, int peer);

/* After the communicator failed: forget every transfer (the engine has finished the operations
 * they belonged to) and close the data streams, which may hold half a frame. The control
 * connections stay: strata_tcp_keepalive keeps beating on them and watching the peers, which is
 * what the survivors of a failure agree on (elastic.c). */
void strata_tcp_abandon(strata_transport *t);
/* After strata_tcp_abandon: read the control connections (ABORT, CLOSE, heartbeats, EOF), send
 * our heartbeats, and take a peer silent for STRATA_TIMEOUT for dead. Never blocks. */
void strata_tcp_keepalive(strata_transport *t);
/* 1 if `peer` (or this rank) has not been found gone: connected, beating and not leaving, or not
 * connected (pairs are made on demand) and not refused. */
int strata_tcp_peer_alive(const strata_transport *t, int peer);
/* Judge `peer` from now on: connect its pair if it is not connected (strata_tcp_keepalive drives
 * it), so that a peer this rank never talked to is found alive (it answers and beats), gone (its
 * listener refuses: it exited or closed the communicator) or frozen (no answer within
 * STRATA_TIMEOUT). What survivors of a failure ask about the ranks they agree with (elastic.c). */
void strata_tcp_watch(strata_transport *t, int peer);

/* How the frames to and from `peer` travel: -1 in clear, else the strata_seal_cipher sealing
 * them (every connection of a pair agrees the same way). */
int strata_tcp_peer_cipher(const strata_transport *t, int peer);

/* Fuzzing (tests/fuzz/fuzz_wire.c): feed `data` as a peer's bytes to a one-stream transport with
 * three receives posted, sealed or in clear; see tcp.c. 0, or -1 when no socketpair. */
int strata_tcp_fuzz_frames_for_test(const uint8_t *data, size_t len, size_t control_bytes,
                                    int sealed);

/* Test hook: the protocol version this process announces (default STRATA_WIRE_VERSION). */
void strata_tcp_set_announced_version_for_test(unsigned version);

#endif
