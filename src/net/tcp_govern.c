// SPDX-License-Identifier: Apache-2.0
/*
 * tcp_govern.c — hold a WAN pair's bytes in flight near the path's bandwidth-delay product, from
 * the receiving end.
 *
 * Why. S streams per pair, each with its own congestion controller, each free to grow its window
 * to the socket buffers' limits (4 MiB sent, 16 MiB advertised on a stock Debian kernel), put far
 * more in flight than a long path holds. The excess waits in the bottleneck's queue and, once the
 * queue is full, is dropped and sent again. On a link with a one-BDP queue (the emulated
 * 1 Gbit/s, 50 ms link of docs/wan.md, which has the figures) bbr streams left as they are resend
 * several percent of their segments; holding each stream's receive window to its share of ~1.3
 * BDP resends nothing and a large allreduce finishes sooner. Holding the *sender* instead
 * (SO_SNDBUF to the same share) gains less: a send buffer full of bytes in flight has no room for
 * the next bytes, so every ack waits for the application to wake up and write; a closed receive
 * window leaves them queued in the sender's kernel, sent the moment the window opens. A fixed
 * buffer needs the link's rate, which strata does not know; so the receiving end measures it.
 *
 * How. Every RTTS × the minimum RTT (at least 20 ms) the transport reads TCP_INFO of the pair's
 * data streams: the bytes received in order (tcpi_bytes_received), the packets that arrived out
 * of order (tcpi_rcv_ooopack) and the smallest RTT seen (tcpi_min_rtt; the handshake's RTT for a
 * socket that has sent nothing to measure it). Between readings at which a message was arriving
 * (the transport's "busy": its first piece had come and bytes were missing; a receive waiting for
 * a message not sent yet measures the sender, not the path), the bytes received over the time (at
 * least one stream's smallest clamp: less is messages, not a transfer) are one sample of the rate
 * the path delivers to us; a sample spans two such intervals, because a repaired hole releases at
 * once what queued behind it (one interval alone can read well above the link's rate). Even two
 * read high when the hole opened before them (a stall of a round trip or a retransmission timeout,
 * released in the sample), and a cap set from such a rate holds nothing and makes every honest
 * sample after it look starved (below); so the sample the cap's max filter keeps reaches back over
 * the run of intervals in which packets arrived out of order, to the one where the hole opened (at
 * most SPANS intervals): the burst then counts over the time its bytes took to arrive. Arrivals are
 * paced by the bottleneck, so the receiver's count is clean where the sender's is not: acks queue
 * behind the other direction's data and arrive in bursts (short samples at the sender can read
 * several times the link's rate). While the samples keep growing (slow start, BBR's startup)
 * nothing is held back; once three samples in a row are not 25% above the last step (BBR's test for
 * leaving startup) the peer is held to TARGET × the largest of the last WINDOW samples × min RTT.
 * The max filter, not a mean: under a cap a mean measures the cap and spirals down; its memory
 * (WINDOW samples, 5 s at 50 ms) forgets a path that got slower, and since the cap lets 30% more
 * through than was measured, a faster path is found sample by sample. TARGET = 1.3 leaves the queue
 * mostly empty and the link full; 2 BDP in flight overflows a one-BDP queue, and 1.8 sometimes
 * does. A pair whose link rate the user gave (STRATA_TCP_LINK_GBPS) is held from its first byte to
 * TARGET × that rate × the handshake's RTT: otherwise a fresh connection's startup (several
 * streams, each doubling its window every round trip) overfills the queue before the samples stop
 * growing, and its first large transfer pays for the losses. Until the samples set the cap that
 * first hold is the clamp alone, set again at every reading: a buffer fixed on a fresh connection
 * sometimes held its window's growth back for seconds (the kernel grows a fixed buffer's window
 * only as far as its per-packet overhead allows), so the buffers are fixed when the samples set the
 * cap, as without a rate. The samples take over once they stop growing, as above, but never hold
 * the pair below that first cap: on a link whose rate is known, a slow sample says the sender or
 * the host was slow (samples stop growing when the ranks wait for the CPU), not the path, and a cap
 * set from it would hold the pair to it.
 *
 * The hold is each stream's TCP_WINDOW_CLAMP: the window it advertises, whatever its buffer. The
 * kernel's receive autotuning raises the clamp when it grows the buffer, so the buffer is fixed
 * too, as large as net.core.rmem_max allows (when that is at least twice the clamp: room for the
 * window and what arrives out of order behind a loss, at the kernel's per-packet overhead);
 * otherwise the clamp alone, set again at every reading. Never smaller than the buffer already
 * is: on a fresh connection the startup before the hold can grow a buffer to
 * net.ipv4.tcp_rmem[2] (tens of megabytes behind its losses), and a buffer set below what it
 * holds makes the kernel collapse and prune it, dropping segments it had acknowledged
 * selectively; the sender waits a retransmission timeout for each. Such a buffer stays the
 * kernel's (it has nowhere left to grow the clamp to), held by the clamp alone. The kernel
 * never takes back a window it advertised: a lower cap takes effect as the bytes already allowed
 * arrive.
 *
 * A lossy path. A window near the BDP stalls a stream for a round trip at every loss (what
 * arrives behind the hole fills the window), so on a path that loses packets at random the cap
 * costs more than it saves: with random loss of a fraction of a percent the samples, and so the
 * cap, spiral down to a tiny fraction of the link's rate. Under the cap the pair's own overshoot is
 * gone, so losses that go on are the path's.
 *
 * A window too small for the round trip. The cap covers the minimum RTT, but a window must cover
 * the round trip its acks actually take, and an allreduce sends both ways at once: the acks queue
 * behind the other direction's data. When that direction is not held (its end let go, or the
 * peer runs without the governor) its queue fills, the round trip grows by up to the queue's
 * delay (one RTT for a one-BDP queue), and the held direction, with no loss at all, delivers only
 * cap / RTT: a fraction of the rate the cap was set for. Holding a pair below the rate it reached
 * costs more than the overshoot it prevents.
 *
 * So a capped sample (after GRACE for the overshoot before the cap) is costly when packets arrived
 * out of order during it or its rate is below STARVED × the rate the cap was set for; when LOSSY
 * of the last LOSSY_OF are costly, the governor lets go for good (clamps opened, the buffers at
 * net.core.rmem_max) and the pair runs as it would without it.
 *
 * Must never: block, fail a transfer (a failed reading is skipped), act on a LAN pair (the
 * transport calls it only for WAN pairs).
 */
#include "net/tcp_govern.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/core.h"
#include "net/tcp_tune.h"

static const double GOVERN_MIN_INTERVAL_S = 0.02;
static const double GOVERN_RTTS = 4;     /* a sample spans this many minimum round trips */
static const double GOVERN_STEP = 1.25;  /* growth that still counts as "not full" */
static const int GOVERN_FULL_ROUNDS = 3; /* samples without such growth: full */
static const double GOVERN_TARGET = 1.3; /* the cap, × the measured bandwidth-delay product */
static const int GOVERN_MIN_CLAMP = 64 << 10;
static const int GOVERN_GRACE = 5;    /* capped samples whose losses the overshoot before may own */
static const int GOVERN_LOSSY_OF = 6; /* of the last this many capped samples ... */
static const int GOVERN_LOSSY = 4;    /* ... this many costly (a loss, or starved): release */
static const double GOVERN_STARVED = 0.8; /* a sample below this × the rate the cap was set for */
static const int GOVERN_OPEN = 1 << 30;   /* the clamp of a released pair: none */

double strata_tcp_governor_span_rate(const strata_tcp_interval *spans, int nspans,
                                     int back_to_hole) {
  if (nspans <= 0) return 0;
  int n = nspans < 2 ? nspans : 2;
  /* the oldest interval saw packets out of order: the hole they queued behind opened in it, or
   * in the interval before if that one saw some too; reach back to the first of such a run, so
   * the bytes a repair releases count over the time they took to arrive */
  while (back_to_hole && n < nspans && spans[n - 1].holes && spans[n].holes) n++;
  double bytes = 0, seconds = 0;
  for (int i = 0; i < n; i++) {
    bytes += spans[i].bytes;
    seconds += spans[i].seconds;
  }
  return seconds > 0 ? bytes / seconds : 0;
}

uint64_t strata_tcp_governor_feed(strata_tcp_governor *g, const strata_tcp_reading *r) {
  if (r->rtt_min_s > 0 && (g->rtt_min_s <= 0 || r->rtt_min_s < g->rtt_min_s))
    g->rtt_min_s = r->rtt_min_s;
  double dt = r->now_s - g->last_s;
  /* an interval that moved less than one stream's smallest clamp carried messages (heartbeats, a
   * small reply), not a transfer: it says nothing of the path, and counted it would set a plateau
   * near zero and hold the pair to the smallest clamp until a later transfer climbed out of it */
  int busy_interval = g->primed && g->last_busy && r->busy && dt > 0 &&
                      r->received >= g->last_received + (uint64_t)GOVERN_MIN_CLAMP;
  if (busy_interval) {
    /* the busy intervals since the last idle reading, newest first */
    memmove(&g->spans[1], &g->spans[0], sizeof g->spans - sizeof g->spans[0]);
    g->spans[0] = (strata_tcp_interval){.bytes = (double)(r->received - g->last_received),
                                        .seconds = dt,
                                        .holes = r->ooo > g->last_ooo};
    if (g->nspans < STRATA_TCP_GOVERN_SPANS) g->nspans++;
    double rate = strata_tcp_governor_span_rate(g->spans, g->nspans, 0);
    g->rates[g->rate_next] = strata_tcp_governor_span_rate(g->spans, g->nspans, 1);
    g->rate_next = (g->rate_next + 1) % STRATA_TCP_GOVERN_WINDOW;
    if (g->nrates < STRATA_TCP_GOVERN_WINDOW) g->nrates++;
    g->samples++;
    if (g->full && !g->released && g->cap_bytes && ++g->capped_samples > GOVERN_GRACE) {
      /* the cap in force over this sample was set for this rate */
      double cap_rate = (double)g->cap_bytes / GOVERN_TARGET / g->rtt_min_s;
      unsigned mask = (1u << GOVERN_LOSSY_OF) - 1;
      g->lossy_bits = (g->lossy_bits << 1 | (r->ooo > g->last_ooo)) & mask;
      /* a cap at the floor the given link rate set is not what keeps a slow sender slow (the
       * host is, or the rate given was high): only a cap the samples set can starve the pair */
      int starved = g->cap_bytes > g->floor_bytes && rate < GOVERN_STARVED * cap_rate;
      g->starved_bits = (g->starved_bits << 1 | starved) & mask;
      if (__builtin_popcount(g->lossy_bits | g->starved_bits) >= GOVERN_LOSSY) g->released = 1;
    }
    if (rate >= g->plateau_rate * GOVERN_STEP) {
      g->plateau_rate = rate;
      g->plateau_rounds = 0;
    } else if (++g->plateau_rounds >= GOVERN_FULL_ROUNDS) {
      g->full = 1;
    }
  } else {
    g->nspans = 0;
  }
  g->primed = 1;
  g->last_busy = r->busy;
  g->last_s = r->now_s;
  g->last_received = r->received;
  g->last_ooo = r->ooo;
  double interval = GOVERN_RTTS * g->rtt_min_s;
  g->next_s = r->now_s + (interval > GOVERN_MIN_INTERVAL_S ? interval : GOVERN_MIN_INTERVAL_S);
  if (g->released) {
    g->cap_bytes = 0;
  } else if (g->full && g->rtt_min_s > 0) {
    double best = 0;
    for (int i = 0; i < g->nrates; i++)
      if (g->rates[i] > best) best = g->rates[i];
    g->cap_bytes = (uint64_t)(GOVERN_TARGET * best * g->rtt_min_s);
    if (g->cap_bytes < g->floor_bytes) g->cap_bytes = g->floor_bytes;
  }
  return g->cap_bytes;
}

uint64_t strata_tcp_governor_start(strata_tcp_governor *g, double link_gbps,
                                   unsigned handshake_rtt_us) {
  memset(g, 0, sizeof *g);
  if (!(link_gbps > 0) || !handshake_rtt_us) return 0;
  g->rtt_min_s = handshake_rtt_us * 1e-6;
  g->cap_bytes = g->floor_bytes = (uint64_t)(GOVERN_TARGET * link_gbps * 1e9 / 8 * g->rtt_min_s);
  return g->cap_bytes;
}

int strata_tcp_governor_clamp(uint64_t cap_bytes, int streams) {
  double want = (double)cap_bytes / (streams > 0 ? streams : 1);
  if (want < GOVERN_MIN_CLAMP) want = GOVERN_MIN_CLAMP;
  if (want > 0x3fffffff) want = 0x3fffffff;
  return (int)want;
}

static long rmem_max(void) {
  return strata_tcp_sysctl_long("/proc/sys/net/core/rmem_max", 0);
}

int strata_tcp_governor_rcvbuf(int clamp, long rmem_max, int current_bytes) {
  if (clamp <= 0 || rmem_max <= 0 || (long)clamp * 2 > rmem_max) return 0;
  int value = rmem_max > 0x3fffffff ? 0x3fffffff : (int)rmem_max;
  if (current_bytes > 0 && (long)current_bytes > 2L * value) return 0;
  return value;
}

/* The kernel's receive autotuning raises a socket's window clamp whenever it grows the buffer, so a
 * clamp alone lets bursts through between readings: the buffer is fixed (autotuning off), as large
 * as net.core.rmem_max allows, unless autotuning has already made it larger (see the top). The
 * clamp, not the buffer, is the hold: a buffer near the clamp cannot also hold what arrives out of
 * order behind a loss, nor the kernel's per-packet overhead (it charges each segment's whole
 * allocation, not its payload): the kernel collapses and then prunes the queue, dropping segments
 * the sender must send again, and a held stream stalls at losses the path never made. A roomy
 * buffer costs nothing: it holds only what the clamp let in and the application has not read yet.
 */
static void lock_buffers(strata_tcp_governor *g, const int *fds, int nfds, int clamp) {
  long limit = rmem_max();
  for (int i = 0; i < nfds; i++) {
    int current = 0;
    socklen_t len = sizeof current;
    if (getsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &current, &len) != 0) continue;
    int value = strata_tcp_governor_rcvbuf(clamp, limit, current);
    if (!value) continue;
    setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &value, sizeof value);
    g->rcvbuf_locked = 1;
  }
}

void strata_tcp_govern(strata_tcp_governor *g, const int *fds, int nfds, int busy,
                       unsigned handshake_rtt_us, int rank, int peer) {
  strata_tcp_reading r = {.busy = busy, .rtt_min_s = handshake_rtt_us * 1e-6};
  for (int i = 0; i < nfds; i++) {
    struct tcp_info info;
    socklen_t len = sizeof info;
    memset(&info, 0, sizeof info);
    if (getsockopt(fds[i], IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_rcv_ooopack) + sizeof info.tcpi_rcv_ooopack) {
      g->next_s = strata_now_s() + GOVERN_MIN_INTERVAL_S; /* skip this reading */
      g->primed = 0;
      return;
    }
    r.received += info.tcpi_bytes_received;
    r.ooo += info.tcpi_rcv_ooopack;
    double rtt_min = info.tcpi_min_rtt * 1e-6;
    if (info.tcpi_min_rtt && (r.rtt_min_s <= 0 || rtt_min < r.rtt_min_s)) r.rtt_min_s = rtt_min;
  }
  r.now_s = strata_now_s(); /* the time of the readings, not of the progress pass */
  uint64_t before = g->cap_bytes;
  int was_released = g->released;
  uint64_t cap = strata_tcp_governor_feed(g, &r);
  if (g->released) {
    if (was_released) return;
    int open = GOVERN_OPEN;
    for (int i = 0; i < nfds; i++)
      setsockopt(fds[i], IPPROTO_TCP, TCP_WINDOW_CLAMP, &open, sizeof open);
    STRATA_LOG(STRATA_LOG_INFO, rank,
               "tcp govern: peer %d released: of the last %d samples under the cap, %d saw "
               "packets out of order (a lossy path, not a full one) and %d got below %.0f%% of "
               "the rate it was set for (a window too small for the round trip the acks take); "
               "the windows are the kernel's again",
               peer, GOVERN_LOSSY_OF, __builtin_popcount(g->lossy_bits),
               __builtin_popcount(g->starved_bits), GOVERN_STARVED * 100);
    return;
  }
  if (!cap) return;
  uint64_t diff = cap > before ? cap - before : before - cap;
  int moved = !before || diff * 8 > before;
  if (!moved) cap = g->cap_bytes = before; /* a small move: the clamps stay where they are */
  /* applied at every reading: the kernel's receive autotuning moves the clamp when it grows the
   * buffer */
  int value = strata_tcp_governor_clamp(cap, nfds);
  if (g->full && (moved || !g->rcvbuf_locked)) lock_buffers(g, fds, nfds, value);
  for (int i = 0; i < nfds; i++)
    setsockopt(fds[i], IPPROTO_TCP, TCP_WINDOW_CLAMP, &value, sizeof value);
  if (moved)
    STRATA_LOG(STRATA_LOG_INFO, rank,
               "tcp govern: peer %d rate_mbps=%.1f min_rtt_ms=%.2f cap_bytes=%llu clamp=%d "
               "streams=%d samples=%llu",
               peer, (double)cap / GOVERN_TARGET / g->rtt_min_s * 8e-6, g->rtt_min_s * 1e3,
               (unsigned long long)cap, value, nfds, (unsigned long long)g->samples);
}

void strata_tcp_govern_start(strata_tcp_governor *g, const int *fds, int nfds, double link_gbps,
                             unsigned handshake_rtt_us, int rank, int peer) {
  uint64_t cap = strata_tcp_governor_start(g, link_gbps, handshake_rtt_us);
  if (!cap) return;
  int value = strata_tcp_governor_clamp(cap, nfds);
  for (int i = 0; i < nfds; i++)
    setsockopt(fds[i], IPPROTO_TCP, TCP_WINDOW_CLAMP, &value, sizeof value);
  STRATA_LOG(STRATA_LOG_INFO, rank,
             "tcp govern: peer %d held from the first byte to the given link rate: "
             "rate_mbps=%.1f rtt_ms=%.2f cap_bytes=%llu clamp=%d streams=%d",
             peer, link_gbps * 1e3, handshake_rtt_us * 1e-3, (unsigned long long)cap, value, nfds);
}
