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
  int busy;          /* a posted receive was waiting for bytes */
} strata_tcp_reading;

enum { STRATA_TCP_GOVERN_WINDOW = 25 }; /* samples the rate's max filter remembers */

typedef struct strata_tcp_governor {
  int primed;    /* a reading was taken: the next one makes a sample */
  int last_busy; /* of the last reading */
  double last_s;
  uint64_t last_received;
  double last_interval_bytes;             /* the previous interval, when it was busy: bytes ... */
  double last_interval_s;                 /* ... over this long (0 = it was not) */
  double rates[STRATA_TCP_GOVERN_WINDOW]; /* bytes/s of the last samples (a ring) */
  int nrates, rate_next;
  double plateau_rate; /* the rate the last 25% step reached */
  int plateau_rounds;  /* samples since, none 25% faster */
  int full;            /* the rate stopped growing: the cap applies */
  double rtt_min_s;    /* smallest RTT seen so far */
  double next_s;       /* when the transport takes the next reading */
  uint64_t cap_bytes;  /* bytes in flight the pair is held to; 0 = not governed (yet) */
  uint64_t last_ooo;   /* of the last reading */
  int capped_samples;  /* samples taken under the cap */
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
 * largest of the last WINDOW samples × the minimum RTT; 0 again for good once the cap goes on
 * costing: losses under it, or samples well below the rate it was set for (g->released). Sets
 * g->next_s (a reading every RTTS × min RTT, >= 20 ms). */
uint64_t strata_tcp_governor_feed(strata_tcp_governor *g, const strata_tcp_reading *r);

/* Pure: the TCP_WINDOW_CLAMP that holds one of `streams` sockets' peer to its share of cap_bytes
 * in flight (>= 64 KiB). */
int strata_tcp_governor_clamp(uint64_t cap_bytes, int streams);

/* Pure: the SO_RCVBUF that fixes a held socket's buffer (autotuning off) for a clamp: the most
 * net.core.rmem_max allows, so the buffer never drops what the clamp let in; 0 (leave the buffer
 * to the kernel, re-apply the clamp at every reading) when rmem_max is below twice the clamp. */
int strata_tcp_governor_rcvbuf(int clamp, long rmem_max);

/* I/O: read TCP_INFO of the pair's `nfds` data streams, feed the governor, set every stream's
 * TCP_WINDOW_CLAMP to its share of the cap (an info log line when it moved by more than 1/8; a
 * release lifts the clamps and says so). The transport calls it once the clock passes
 * g->next_s; handshake_rtt_us stands in for a minimum RTT the sockets have not measured (a rank
 * that only receives). A failed reading is skipped. */
void strata_tcp_govern(strata_tcp_governor *g, const int *fds, int nfds, int busy,
                       unsigned handshake_rtt_us, int rank, int peer);

#endif
