/*
 * tcp_tune.h — per-socket tuning of the TCP transport's connections: congestion control
 * (STRATA_TCP_CC) and socket buffers sized from the bandwidth-delay product (STRATA_TCP_BUFFER,
 * STRATA_TCP_LINK_GBPS). tcp_tune.c says how.
 */
#ifndef STRATA_NET_TCP_TUNE_H
#define STRATA_NET_TCP_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "strata.h"

/* STRATA_OK when cfg->tcp_congestion is "" or the kernel accepts it on a fresh socket; otherwise
 * STRATA_ERR_CONFIG with a sentence naming the value, the kernel's reason and the available
 * algorithms in `err`. */
int strata_tcp_tune_check(const strata_config *cfg, char *err, size_t err_len);

/* Before connect/listen: cfg->tcp_buffer_bytes when set explicitly, and the congestion control. */
void strata_tcp_tune_before_connect(const strata_config *cfg, int fd);

/* After the handshake of a connection to `peer`: the congestion control again (an accepted socket
 * inherits the listener's, re-applying costs nothing) and, in auto mode, buffers from the RTT the
 * kernel measured. Logs one line at info level: "tcp tune: peer P stream S cc=... rtt_us=...
 * sndbuf=... rcvbuf=...". Failures only log: the connection works either way. */
void strata_tcp_tune_established(const strata_config *cfg, int fd, int rank, int peer, int stream);

/* Auto-mode buffer per socket: R·T/S × 2 for a link of link_gbps (<= 0: the 10 Gbit/s default
 * guess), round trip rtt_us, `streams` streams per pair. Pure arithmetic (tests). */
size_t strata_tcp_tune_want_bytes(double link_gbps, unsigned rtt_us, int streams);

/* TCP_NOTSENT_LOWAT for a connection of this RTT: 256 KiB on a WAN (rtt_us >= 1000), 0 = not
 * set on a LAN or loopback. */
int strata_tcp_tune_notsent_lowat_bytes(unsigned rtt_us);

/* Pipelining chunk for a path of round trip rtt_us. rtt_us < 1000 (LAN, loopback, or unknown =
 * 0): lan_chunk_bytes, or, when link_gbps > 0 is given, enough for R × 1.5 RTT over
 * STRATA_TCP_RING_CHUNKS_AHEAD chunks in whole 64 KiB, within [lan_chunk_bytes, 4 MiB]. A WAN
 * path:  the chunk that lets the ring allreduce, which keeps about
 * STRATA_TCP_RING_CHUNKS_AHEAD chunks in flight per direction, cover R × 1.5 RTT (one way of
 * propagation plus one round trip to repair a loss, so a lost packet does not stall the
 * pipeline), R = link_gbps or, unknown (<= 0), 1 Gbit/s; rounded up to whole MiB, within
 * [lan_chunk_bytes, 16 MiB]. Pure arithmetic (tests). */
#define STRATA_TCP_RING_CHUNKS_AHEAD 4
uint64_t strata_tcp_tune_chunk_bytes(unsigned rtt_us, double link_gbps, uint64_t lan_chunk_bytes);

/* Test hook: the congestion control of `fd` into out (""), STRATA_OK or STRATA_ERR_SYSTEM. */
int strata_tcp_congestion_get(int fd, char *out, size_t cap);

#endif
