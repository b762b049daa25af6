// SPDX-License-Identifier: Apache-2.0
/*
 * coll_internal.h — what the schedule builders of src/coll share and nobody else needs.
 *
 * Every builder has the signature `int strata_build_<coll>_<algo>(params, schedule)`: params
 * were validated by strata_schedule_build (rank, root, sizes, overflow), the schedule is empty
 * with rank/nranks/coll/algo set. A builder appends steps through the helpers of schedule.c,
 * sets `scratch_bytes`, and returns strata_schedule_status().
 *
 * Shared vocabulary:
 *  - strata_split(): cut `count` elements into `parts` near-equal runs (the first count%parts
 *    runs are one longer). Cutting in elements means no message ever splits an element.
 *  - strata_deps: a small list of step indices (negative = "no step", ignored; duplicates
 *    dropped) to pass as a step's dependencies.
 *  - strata_slot_pool: K scratch slots used round robin. A slot remembers the last step that
 *    touched it; whoever writes the slot next must depend on that step. That one rule keeps
 *    staging areas and partial sums from being overwritten while still in use.
 */
#ifndef STRATA_COLL_INTERNAL_H
#define STRATA_COLL_INTERNAL_H

#include <stdint.h>

#include "coll/schedule.h"

/* Default pipelining unit: the largest message a pipelined (ring/chain/tree) algorithm sends.
 * 1 MiB amortizes a TCP round trip (~50 us on 10 GbE moves ~60 KB, so per-message overhead is a
 * few percent) while keeping scratch at a few MiB; NCCL's Simple protocol uses a similar step
 * size (4 MiB buffer / 8 steps = 512 KiB, NVIDIA/nccl src/include/device.h). */
#define STRATA_COLL_DEFAULT_CHUNK_BYTES ((uint64_t)1 << 20)
/* Upper bounds on pipeline rounds, so a tiny chunk_bytes or a huge rank count cannot explode the
 * step list: at most 4096 rounds, and rounds * nranks <= 2^16 (a ring round has 4(n-1) steps, so
 * a schedule stays below ~2^18 steps, ~25 MB). Past the bound, messages grow beyond chunk_bytes. */
#define STRATA_COLL_MAX_ROUNDS 4096u
#define STRATA_COLL_MAX_ROUNDS_X_RANKS 65536u
/* Staging slots per pool: how many receives may be landing/reducing at once. */
#define STRATA_COLL_SLOTS STRATA_SCHED_RING_CHUNKS_IN_FLIGHT
/* Ring allreduce: the allgather half of round r is emitted after the reduce-scatter half of round
 * r + LAG. Transfers to a peer leave in emission order, and an allgather send waits for our own
 * reduction of its round; without a lag the next round's reduce-scatter send queues behind it,
 * so each rank can start a round only when its neighbour has finished reducing the previous
 * one (lock step: every hiccup of either rank is paid by both, every round). A lag of 1 already
 * breaks the lock step; with 2 the neighbour always has two rounds of reduce-scatter work it can
 * pull. Costs no memory (allgather lands in RECV). */
#define STRATA_COLL_RING_AG_LAG 2u
/* In-flight rounds of the ring reduce-scatter (each holds two partial-sum slots). */
#define STRATA_COLL_RING_WINDOW STRATA_SCHED_RING_CHUNKS_IN_FLIGHT
/* How many rounds a ring allgather's or reduce-scatter's first send may run ahead of the rounds
 * that have landed here. With no bound every round's first send is posted at once; over TCP the
 * sockets then fill with messages far ahead of the receives the peer has posted, and bandwidth
 * falls by about half. A few rounds ahead keep the link busy; too many bring the flood back on
 * large messages, and 8 sits between. Must be >= the order window of a builder that uses it (the
 * dependency must point to a step emitted earlier). */
#define STRATA_COLL_SEND_AHEAD 8u

#define STRATA_DEPS_MAX 32u

typedef struct strata_deps {
  uint32_t idx[STRATA_DEPS_MAX];
  uint32_t n;
} strata_deps;

static inline void strata_deps_clear(strata_deps *d) {
  d->n = 0;
}

static inline void strata_deps_add(strata_deps *d, int64_t step) {
  if (step < 0) return;
  for (uint32_t i = 0; i < d->n; i++)
    if (d->idx[i] == (uint32_t)step) return;
  if (d->n < STRATA_DEPS_MAX) d->idx[d->n++] = (uint32_t)step;
}

static inline void strata_split(uint64_t count, uint64_t parts, uint64_t i, uint64_t *first,
                                uint64_t *len) {
  uint64_t q = count / parts, rem = count % parts;
  *first = i * q + (i < rem ? i : rem);
  *len = q + (i < rem ? 1 : 0);
}

static inline int strata_mod(int64_t a, int n) {
  int64_t m = a % n;
  return (int)(m < 0 ? m + n : m);
}

typedef struct strata_slot_pool {
  uint64_t base_bytes; /* scratch offset of slot 0 */
  uint64_t slot_bytes;
  uint32_t nslots, next;
  int64_t last[STRATA_COLL_SLOTS * 2 * STRATA_COLL_RING_WINDOW];
} strata_slot_pool;

/* Lay out `nslots` slots of `slot_bytes` at scratch offset `base_bytes`; returns the end offset. */
uint64_t strata_pool_init(strata_slot_pool *pool, uint64_t base_bytes, uint64_t slot_bytes,
                          uint32_t nslots);
/* Next slot, round robin. */
uint32_t strata_pool_take(strata_slot_pool *pool);
static inline strata_bufref strata_pool_ref(const strata_slot_pool *pool, uint32_t slot) {
  return strata_ref(STRATA_BUF_SCRATCH, pool->base_bytes + (uint64_t)slot * pool->slot_bytes);
}

/* One pipelined round/step pair, in the order steps are emitted (see strata_coll_order). */
typedef struct strata_round_step {
  uint32_t round, step;
} strata_round_step;

/* Emission order of `rounds` rounds of `steps` steps each: round r's step t is due at time
 * start(r) + t with start(r) = max(start(r-1) + 1, start(r - window) + hold); entries are sorted
 * by (time, round). Every rank uses the same order, so the k-th message on each link matches.
 * A step depends only on steps due earlier, so the order is deadlock free even when every
 * transfer needs both sides posted. Returns a malloc'd array of rounds*steps entries or NULL. */
strata_round_step *strata_coll_order(uint32_t rounds, uint32_t steps, uint32_t window,
                                     uint32_t hold);
/* The same, with steps >= lag_from_step of every round due `lag` time units later (still sorted
 * by (time, round), still deadlock free: a step's own round's earlier steps stay earlier). */
strata_round_step *strata_coll_order_lag(uint32_t rounds, uint32_t steps, uint32_t window,
                                         uint32_t hold, uint32_t lag_from_step, uint32_t lag);

/* Builders (one file per family). */
int strata_build_allreduce_ring(const strata_sched_params *p, strata_schedule *s);
int strata_build_allreduce_rhd(const strata_sched_params *p, strata_schedule *s);
int strata_build_allreduce_tree(const strata_sched_params *p, strata_schedule *s);
int strata_build_allreduce_direct(const strata_sched_params *p, strata_schedule *s);
int strata_build_reduce_scatter_ring(const strata_sched_params *p, strata_schedule *s);
int strata_build_reduce_scatter_rhd(const strata_sched_params *p, strata_schedule *s);
int strata_build_reduce_scatter_direct(const strata_sched_params *p, strata_schedule *s);
int strata_build_allgather_ring(const strata_sched_params *p, strata_schedule *s);
int strata_build_allgather_rhd(const strata_sched_params *p, strata_schedule *s);
int strata_build_allgather_direct(const strata_sched_params *p, strata_schedule *s);
int strata_build_broadcast_tree(const strata_sched_params *p, strata_schedule *s);
int strata_build_broadcast_ring(const strata_sched_params *p, strata_schedule *s);
int strata_build_reduce_tree(const strata_sched_params *p, strata_schedule *s);
int strata_build_reduce_ring(const strata_sched_params *p, strata_schedule *s);
int strata_build_gather_tree(const strata_sched_params *p, strata_schedule *s);
int strata_build_gather_direct(const strata_sched_params *p, strata_schedule *s);
int strata_build_scatter_tree(const strata_sched_params *p, strata_schedule *s);
int strata_build_scatter_direct(const strata_sched_params *p, strata_schedule *s);
int strata_build_alltoall_direct(const strata_sched_params *p, strata_schedule *s);
int strata_build_barrier_rhd(const strata_sched_params *p, strata_schedule *s);
int strata_build_barrier_direct(const strata_sched_params *p, strata_schedule *s);
int strata_build_sendrecv_direct(const strata_sched_params *p, strata_schedule *s);

#endif
