// SPDX-License-Identifier: Apache-2.0
/*
 * tcp_govern.h — on a WAN pair, keep the bytes in flight near what the path holds: the rate at
 * which the peer's data arrives and the minimum RTT, measured on the pair's own streams, give the
 * path's bandwidth-delay product, and the streams' receive windows hold the peer to 1.3 × that.
 * tcp_govern.c says why.
 */
#ifndef STRATA_NET_TCP_GOVERN_H
#define STRATA_NET_TCP_GOVERN_H

#include <stddef.h>
#include <stdint.h>

/* One reading of a pair's data streams (sums and extremes over its S sockets). */
typedef struct strata_tcp_reading {
  double now_s;
  uint64_t received; /* bytes received in order so far (tcpi_bytes_received, summed) */
  uint64_t ooo;      /* packets that arrived out of order so far (tcpi_rcv_ooopack, summed) */
  double rtt_min_s;  /* the smallest RTT any stream has seen (<= 0: unknown) */
  int busy;          /* a message was arriving (its first piece came, bytes were missing) */
} strata_tcp_reading;

enum { STRATA_TCP_GOVERN_WINDOW = 25 }; /* samples the rate's max filter remembers */
enum { STRATA_TCP_GOVERN_SPANS = 6 };   /* busy intervals a sample may reach back over */

/* The time between two readings at which a receive was waiting. */
typedef struct strata_tcp_interval {
  double bytes, seconds; /* received in order over it */
  int holes;             /* packets arrived out of order during it */
} strata_tcp_interval;

typedef struct strata_tcp_governor {
  int primed;    /* a reading was taken: the next one makes a sample */
  int last_busy; /* of the last reading */
  double last_s;
  uint64_t last_received;
  strata_tcp_interval spans[STRATA_TCP_GOVERN_SPANS]; /* the last busy intervals, newest first */
  int nspans;                             /* ... since the last reading with no receive waiting */
  double rates[STRATA_TCP_GOVERN_WINDOW]; /* bytes/s of the last samples (a ring) */
  int nrates, rate_next;
  double plateau_rate;  /* the rate the last 25% step reached */
  int plateau_rounds;   /* samples since, none 25% faster */
  int full;             /* the rate stopped growing: the cap applies */
  double rtt_min_s;     /* smallest RTT seen so far */
  double next_s;        /* when the transport takes the next reading */
  uint64_t cap_bytes;   /* bytes in flight the pair is held to; 0 = not governed (yet) */
  uint64_t floor_bytes; /* the cap never goes below this while held (from the given link rate) */
  uint64_t last_ooo;    /* of the last reading */
  int capped_samples;   /* samples taken under the cap */
  unsigned lossy_bits; /* of the last LOSSY_OF capped samples (after the grace), which saw a loss */
  unsigned starved_bits; /* ... which got well below the rate the cap was set for */
  int released;          /* the cap went on costing (a lossy path, or a window too small for the
                            round trip the acks take); hands off */
  int rcvbuf_locked;     /* the streams' receive buffers were fixed (autotuning off) */
  uint64_t samples;      /* samples taken (tests, logs) */
} strata_tcp_governor;

/* Pure: one reading. A sample is the arrival rate between two readings at which a receive was
 * waiting (a gap with nothing posted says nothing of the path). Returns the cap (also
 * g->cap_bytes): 0 until three samples in a row are not 25% above the last step; then TARGET × the
 * largest of the last WINDOW samples × the minimum RTT (those samples reach back to the hole a
 * burst of bytes was released from: strata_tcp_governor_span_rate); 0 again for
 * good once the cap goes on costing: losses under it, or samples well below the rate it was set for
 * (g->released). Sets g->next_s (a reading every RTTS × min RTT, >= 20 ms). */
uint64_t strata_tcp_governor_feed(strata_tcp_governor *g, const strata_tcp_reading *r);

/* Pure: the rate over the newest busy intervals (spans[0] newest, nspans of them): the last two;
 * with back_to_hole, reaching further back while the oldest one counted and the one before it
 * both saw packets out of order, so a repaired hole's burst counts over the time its bytes took
 * to arrive. 0 without intervals. */
double strata_tcp_governor_span_rate(const strata_tcp_interval *spans, int nspans,
                                     int back_to_hole);

/* Pure: a fresh governor for a pair whose link rate the user gave (link_gbps > 0, with the
 * handshake's RTT): held to TARGET × that rate × the RTT from the first byte, until its own samples
 * set the cap, which then never goes below it. Returns that cap; 0 (nothing held until the samples
 * say so) without a rate. */
uint64_t strata_tcp_governor_start(strata_tcp_governor *g, double link_gbps,
                                   unsigned handshake_rtt_us);

/* I/O: strata_tcp_governor_start, then the pair's `nfds` data streams held to its cap at once
 * (before any data flows) by their window clamps; their buffers stay the kernel's until the
 * samples set the cap (strata_tcp_govern then fixes them). */
void strata_tcp_govern_start(strata_tcp_governor *g, const int *fds, int nfds, double link_gbps,
                             unsigned handshake_rtt_us, int rank, int peer);

/* Pure: the TCP_WINDOW_CLAMP that holds one of `streams` sockets' peer to its share of cap_bytes
 * in flight (>= 64 KiB). */
int strata_tcp_governor_clamp(uint64_t cap_bytes, int streams);

/* Pure: the SO_RCVBUF that fixes a held socket's buffer (autotuning off) for a clamp: the most
 * net.core.rmem_max allows, so the buffer never drops what the clamp let in; 0 (leave the buffer
 * to the kernel, re-apply the clamp at every reading) when rmem_max is below twice the clamp, or
 * when the socket's buffer is already larger than the fixed one would be (current_bytes, as
 * SO_RCVBUF reads: the kernel doubles what is set): shrinking a buffer that holds data makes the
 * kernel prune it. */
int strata_tcp_governor_rcvbuf(int clamp, long rmem_max, int current_bytes);

/* I/O: read TCP_INFO of the pair's `nfds` data streams, feed the governor, set every stream's
 * TCP_WINDOW_CLAMP to its share of the cap (an info log line when it moved by more than 1/8; a
 * release lifts the clamps and says so). The transport calls it once the clock passes
 * g->next_s; handshake_rtt_us stands in for a minimum RTT the sockets have not measured (a rank
 * that only receives). A failed reading is skipped. */
void strata_tcp_govern(strata_tcp_governor *g, const int *fds, int nfds, int busy,
                       unsigned handshake_rtt_us, int rank, int peer);

#endif
