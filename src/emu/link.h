// SPDX-License-Identifier: Apache-2.0
/* link.h — one direction of an emulated WAN link: what happens to a packet between two sites.
 *
 * A link is a bottleneck queue followed by a wire. A packet arriving at time t first meets the
 * queue: if the bytes still waiting to be serialized plus its own exceed the queue limit it is
 * tail-dropped, as a router would. Otherwise it is serialized at the link rate behind the
 * packets before it, then travels the wire: it may be lost there (Bernoulli, or Gilbert-Elliott
 * bursts), and it arrives after the one-way delay plus a jitter sample. Arrivals keep FIFO order
 * (a later packet never arrives before an earlier one) unless the packet is picked for
 * reordering, in which case it is held back by an extra gap and the packets behind it overtake.
 *
 * The queue needs no storage of its own: because the rate is constant, the backlog at time t is
 * (busy_until − t) × rate, so the state is one number. This file is pure arithmetic on
 * nanosecond timestamps the caller supplies; it never reads a clock or touches a packet, which is
 * what lets tests/test_emu_link.c check it exactly.
 */
#ifndef STRATA_EMU_LINK_H
#define STRATA_EMU_LINK_H

#include <stddef.h>
#include <stdint.h>

typedef struct strata_emu_link_params {
  uint64_t rate_bps;       /* bits per second on IP bytes; 0 = unlimited */
  uint64_t delay_ns;       /* one-way propagation delay */
  uint64_t jitter_ns;      /* standard deviation (normal) or half-width (uniform) */
  int jitter_uniform;      /* 1: uniform in [-jitter, +jitter]; 0: normal, cut at ±3σ */
  double loss;             /* Bernoulli loss probability in [0, 1] */
  int ge_enabled;          /* Gilbert-Elliott instead of Bernoulli */
  double ge_p, ge_r;       /* P(good→bad), P(bad→good) per packet */
  double ge_loss_bad;      /* loss probability in the bad state (default 1) */
  double ge_loss_good;     /* loss probability in the good state (default 0) */
  double reorder;          /* probability a packet is held back and overtaken */
  uint64_t reorder_gap_ns; /* how long a reordered packet is held back (default 1 ms) */
  uint64_t queue_bytes;    /* bottleneck queue limit; 0 = default (see _queue_default) */
  uint64_t queue_ns;       /* if set, the queue limit is this long at line rate */
  uint64_t flip_at_bytes;  /* tampering: flip one bit of the TCP payload byte at this offset of
                              all the TCP payload crossing this direction (retransmissions
                              counted), once, fixing the checksum so TCP delivers it; 0 = never.
                              What an on-path attacker does: shows that strata's sealed frames
                              catch it (docs/security.md) */
} strata_emu_link_params;

typedef struct strata_emu_link_stats {
  uint64_t packets_in, bytes_in;
  uint64_t packets_out, bytes_out;
  uint64_t dropped_queue, dropped_loss, dropped_pool;
  uint64_t reordered;
  uint64_t tcp_payload_bytes; /* TCP payload admitted (for flip_at_bytes) */
  uint64_t flipped;           /* bits flipped (0 or 1) */
} strata_emu_link_stats;

typedef struct strata_emu_link {
  strata_emu_link_params params;
  uint64_t queue_limit_bytes; /* resolved limit */
  double busy_until_ns;       /* when the serializer finishes the last admitted packet */
  uint64_t last_due_ns;       /* arrival time of the last in-order packet (FIFO clamp) */
  int ge_bad;                 /* Gilbert-Elliott state */
  uint64_t rng_state;
  strata_emu_link_stats stats;
} strata_emu_link;

typedef enum strata_emu_verdict {
  STRATA_EMU_DELIVER = 0,
  STRATA_EMU_DROP_QUEUE = 1,
  STRATA_EMU_DROP_LOSS = 2,
} strata_emu_verdict;

/* The default queue when none is given: one bandwidth-delay product for a round trip of twice
 * this direction's delay (at least 10 ms), never below 64 KiB. */
uint64_t strata_emu_link_queue_default_bytes(const strata_emu_link_params *params);

/* Resets state and statistics; seed makes the random draws reproducible. */
void strata_emu_link_init(strata_emu_link *link, const strata_emu_link_params *params,
                          uint64_t seed);

/* Decides the fate of one packet of `bytes` arriving at now_ns. On STRATA_EMU_DELIVER, *due_ns is
 * when it leaves the far end of the wire and *reordered tells whether it was held back. */
strata_emu_verdict strata_emu_link_admit(strata_emu_link *link, uint64_t now_ns, uint32_t bytes,
                                         uint64_t *due_ns, int *reordered);

/* Parses "rate=1gbit,delay=25ms,jitter=1ms,loss=0.1%,reorder=1%,reorder_gap=2ms,queue=6mb,
 * ge=1%:30%[:100%[:0%]],jitter_dist=uniform" on top of *params (fields not named keep their
 * value). Returns 0, or -1 with a message naming the bad item in err. */
int strata_emu_link_params_parse(const char *text, strata_emu_link_params *params, char *err,
                                 size_t err_bytes);

/* Writes params in the same syntax the parser reads (for `status`). */
void strata_emu_link_params_format(const strata_emu_link_params *params, char *out,
                                   size_t out_bytes);

/* Uniform random in [0, 1) from the link's generator (splitmix64); exposed for tests. */
double strata_emu_link_random(strata_emu_link *link);

#endif
