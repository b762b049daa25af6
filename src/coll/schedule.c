// SPDX-License-Identifier: Apache-2.0
/*
 * schedule.c — the schedule container, its builder helpers, parameter validation, the AUTO
 * algorithm choice and the dispatch to the builders (ring.c, rhd.c, tree.c, direct.c).
 *
 * Invariants every schedule leaving strata_schedule_build() satisfies:
 *  - each step's dependencies index earlier steps (the list is a DAG in topological order);
 *  - no step writes the SEND buffer (it is the caller's const input; in-place calls write it
 *    only through RECV references that alias it);
 *  - steps touching the same bytes, one of them writing, are ordered by dependencies;
 *  - with nranks > 1 every rank sends or receives at least one (possibly empty) message, along a
 *    connected pattern, so that a peer calling another collective is always noticed.
 * A rooted collective that the engine runs also gets the signature check (at the end of this
 * file), so that ranks calling it with different roots all notice too.
 * This file never allocates anything but the step and dependency arrays and never touches data.
 *
 * AUTO choice (strata_schedule_choose). Costs are the α-β(-γ) formulas of Thakur, Rabenseifner and
 * Gropp (IJHPCA 2005); α ≈ 25 us for TCP and a few us for shm, β ≈ 1/1.25 GB/s on 10 GbE.
 * Thresholds below are where those formulas cross for α/β in that range; each constant says why.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll_internal.h"
#include "coll/hier.h"

/* allreduce: recursive doubling costs lg p (α + nβ), Rabenseifner 2 lg p α + 2(p-1)/p nβ; they
 * cross near n ≈ α/β (25 us × 1.25 GB/s ≈ 32 KB). */
#define STRATA_AUTO_ALLREDUCE_RD_MAX_BYTES ((uint64_t)32 << 10)
/* allreduce, power-of-two p: Rabenseifner beats ring on latency (2 lg p vs 2(p-1) messages) but
 * its reductions do not overlap the transfers and it needs scratch of the message size; the
 * pipelined ring hides reduction behind the wire and sends only to one neighbour. Above 1 MiB
 * the latency term is below a few percent, so the ring wins. */
#define STRATA_AUTO_ALLREDUCE_RING_MIN_BYTES_POW2 ((uint64_t)1 << 20)
/* allreduce, other p: folding the extra ranks in and out adds two full-message transfers
 * (≈ 2nβ), which exceeds the ring's extra latency 2(p - lg p)α once n passes ~64 KB. */
#define STRATA_AUTO_ALLREDUCE_RING_MIN_BYTES_NPOW2 ((uint64_t)64 << 10)
/* broadcast/reduce: binomial lg p (α + nβ) against a pipelined chain ≈ nβ + (p-2)·chunk·β + (p +
 * rounds)α; the chain wins once the message is several chunks-worth; 256 KiB keeps small calls on
 * the lg p-latency tree. */
#define STRATA_AUTO_ROOTED_CHAIN_MIN_BYTES ((uint64_t)256 << 10)
/* reduce_scatter / allgather (total bytes over all ranks): below this, lg p or one round of
 * concurrent messages beats p-1 ring steps; above, the ring's neighbour-only traffic and
 * pipelining win. */
#define STRATA_AUTO_SPREAD_SMALL_MAX_BYTES ((uint64_t)64 << 10)
/* small reduce_scatter: direct sends all n-1 blocks at once (≈ α + (n-1)·o, o ≈ 5 us of
 * per-message CPU cost, an estimate), recursive halving needs lg n sequential rounds (lg n · α);
 * with α ≈ 25 us they cross near n = 8. */
#define STRATA_AUTO_DIRECT_MAX_RANKS 8
/* gather/scatter (total bytes): the binomial tree needs lg p latencies but forwards data through
 * intermediate ranks (extra copies, scratch up to half the total); direct sends go straight to or
 * from the root. */
#define STRATA_AUTO_GATHER_TREE_MAX_BYTES ((uint64_t)1 << 20)
/* hierarchical (sites known): from this many bytes per rank on, the bandwidth terms dominate and
 * crossing sites once per shard (hier.c) beats a flat ring that crosses a slow link on every
 * step; below it the extra phases' latencies (≈ 3 × a flat algorithm's) are not worth it. */
#define STRATA_AUTO_HIER_MIN_BYTES ((uint64_t)1 << 20)

/* ---- the container ---------------------------------------------------------------------- */

static int sched_fail(strata_schedule *s, int status) {
  if (s->status == STRATA_OK) s->status = status;
  return -1;
}

static int sched_grow(void **array, uint32_t *cap, uint32_t need, size_t elem_bytes) {
  if (need <= *cap) return 0;
  uint64_t next = *cap ? (uint64_t)*cap * 2 : 64;
  while (next < need) next *= 2;
  if (next > UINT32_MAX) next = UINT32_MAX;
  void *grown = realloc(*array, (size_t)next * elem_bytes);
  if (!grown) return -1;
  *array = grown;
  *cap = (uint32_t)next;
  return 0;
}

int strata_sched_add(strata_schedule *s, const strata_step *step, const uint32_t *deps,
                     uint32_t ndeps) {
  if (s->status != STRATA_OK) return -1;
  if (s->nsteps >= (uint32_t)INT32_MAX || (uint64_t)s->ndeps + ndeps >= UINT32_MAX)
    return sched_fail(s, STRATA_ERR_NO_MEMORY);
  for (uint32_t i = 0; i < ndeps; i++)
    if (deps[i] >= s->nsteps) return sched_fail(s, STRATA_ERR_INVALID_ARG); /* builder bug */
  if (sched_grow((void **)&s->steps, &s->steps_cap, s->nsteps + 1, sizeof(strata_step)) ||
      sched_grow((void **)&s->deps, &s->deps_cap, s->ndeps + ndeps, sizeof(uint32_t)))
    return sched_fail(s, STRATA_ERR_NO_MEMORY);
  strata_step *dst = &s->steps[s->nsteps];
  *dst = *step;
  dst->dep_begin = s->ndeps;
  dst->dep_count = ndeps;
  if (ndeps) memcpy(&s->deps[s->ndeps], deps, ndeps * sizeof(uint32_t));
  s->ndeps += ndeps;
  return (int)s->nsteps++;
}

static strata_step step_init(strata_step_kind kind, int peer, uint64_t bytes) {
  strata_step st;
  memset(&st, 0, sizeof st);
  st.kind = (uint8_t)kind;
  st.peer = peer;
  st.bytes = bytes;
  return st;
}

int strata_sched_send(strata_schedule *s, int peer, strata_bufref src, uint64_t bytes,
                      const uint32_t *deps, uint32_t ndeps) {
  strata_step st = step_init(STRATA_STEP_SEND, peer, bytes);
  st.src = src;
  return strata_sched_add(s, &st, deps, ndeps);
}

int strata_sched_recv(strata_schedule *s, int peer, strata_bufref dst, uint64_t bytes,
                      const uint32_t *deps, uint32_t ndeps) {
  strata_step st = step_init(STRATA_STEP_RECV, peer, bytes);
  st.dst = dst;
  return strata_sched_add(s, &st, deps, ndeps);
}

int strata_sched_recv_reduce(strata_schedule *s, int peer, strata_bufref src, strata_bufref dst,
                             strata_bufref staging, uint64_t bytes, const uint32_t *deps,
                             uint32_t ndeps) {
  strata_step st = step_init(STRATA_STEP_RECV_REDUCE, peer, bytes);
  st.src = src;
  st.dst = dst;
  st.staging = staging;
  return strata_sched_add(s, &st, deps, ndeps);
}

int strata_sched_copy(strata_schedule *s, strata_bufref src, strata_bufref dst, uint64_t bytes,
                      const uint32_t *deps, uint32_t ndeps) {
  strata_step st = step_init(STRATA_STEP_COPY, -1, bytes);
  st.src = src;
  st.dst = dst;
  return strata_sched_add(s, &st, deps, ndeps);
}

int strata_sched_reduce(strata_schedule *s, strata_bufref src, strata_bufref src2,
                        strata_bufref dst, uint64_t bytes, const uint32_t *deps, uint32_t ndeps) {
  strata_step st = step_init(STRATA_STEP_REDUCE, -1, bytes);
  st.src = src;
  st.src2 = src2;
  st.dst = dst;
  return strata_sched_add(s, &st, deps, ndeps);
}

int strata_schedule_status(const strata_schedule *s) {
  return s->status;
}

int strata_sched_append(strata_schedule *s, const strata_schedule *sub, const uint32_t *after,
                        uint32_t nafter,
                        int (*map)(const void *ctx, const strata_step *in, strata_step *out),
                        const void *ctx) {
  if (s->status != STRATA_OK) return s->status;
  const uint32_t base = s->nsteps;
  uint32_t most = 0;
  for (uint32_t i = 0; i < sub->nsteps; i++)
    if (sub->steps[i].dep_count > most) most = sub->steps[i].dep_count;
  uint32_t *deps = malloc(((size_t)(most > nafter ? most : nafter) + 1) * sizeof *deps);
  if (!deps) return STRATA_ERR_NO_MEMORY;
  int status = STRATA_OK;
  for (uint32_t i = 0; i < sub->nsteps && status == STRATA_OK; i++) {
    const strata_step *in = &sub->steps[i];
    strata_step st = *in;
    if (map && map(ctx, in, &st)) {
      status = STRATA_ERR_INVALID_ARG;
      break;
    }
    uint32_t nd = in->dep_count;
    for (uint32_t k = 0; k < nd; k++) deps[k] = base + sub->deps[in->dep_begin + k];
    if (nd == 0)
      for (uint32_t k = 0; k < nafter; k++) deps[nd++] = after[k];
    if (strata_sched_add(s, &st, deps, nd) < 0) status = s->status;
  }
  free(deps);
  return status;
}

void strata_schedule_free(strata_schedule *sched) {
  if (!sched) return;
  free(sched->steps);
  free(sched->deps);
  memset(sched, 0, sizeof *sched);
}

/* ---- shared builder helpers ------------------------------------------------------------ */

uint64_t strata_coll_rounds(const strata_sched_params *p, uint64_t count, uint64_t parts) {
  uint64_t chunk_bytes = p->chunk_bytes ? p->chunk_bytes : STRATA_COLL_DEFAULT_CHUNK_BYTES;
  uint64_t chunk_elems = chunk_bytes / p->elem_size;
  if (chunk_elems == 0) chunk_elems = 1;
  uint64_t per_round = chunk_elems * parts;
  if (per_round / parts != chunk_elems) return 1; /* overflow: one round carries everything */
  uint64_t rounds = count / per_round + (count % per_round ? 1 : 0);
  if (rounds < 1) rounds = 1;
  uint64_t cap = STRATA_COLL_MAX_ROUNDS_X_RANKS / (uint64_t)p->nranks;
  if (cap > STRATA_COLL_MAX_ROUNDS) cap = STRATA_COLL_MAX_ROUNDS;
  if (cap < 1) cap = 1;
  if (rounds > cap) rounds = cap;
  return rounds;
}

uint64_t strata_pool_init(strata_slot_pool *pool, uint64_t base_bytes, uint64_t slot_bytes,
                          uint32_t nslots) {
  memset(pool, 0, sizeof *pool);
  pool->base_bytes = base_bytes;
  pool->slot_bytes = slot_bytes;
  pool->nslots = nslots;
  for (uint32_t i = 0; i < sizeof pool->last / sizeof pool->last[0]; i++) pool->last[i] = -1;
  return base_bytes + slot_bytes * nslots;
}

uint32_t strata_pool_take(strata_slot_pool *pool) {
  uint32_t slot = pool->next;
  pool->next = (pool->next + 1) % pool->nslots;
  return slot;
}

typedef struct order_entry {
  uint64_t time;
  uint32_t round, step;
} order_entry;

static int order_cmp(const void *a, const void *b) {
  const order_entry *x = a, *y = b;
  if (x->time != y->time) return x->time < y->time ? -1 : 1;
  if (x->round != y->round) return x->round < y->round ? -1 : 1;
  return x->step < y->step ? -1 : (x->step > y->step);
}

strata_round_step *strata_coll_order(uint32_t rounds, uint32_t steps, uint32_t window,
                                     uint32_t hold) {
  return strata_coll_order_lag(rounds, steps, window, hold, steps, 0);
}

strata_round_step *strata_coll_order_lag(uint32_t rounds, uint32_t steps, uint32_t window,
                                         uint32_t hold, uint32_t lag_from_step, uint32_t lag) {
  uint64_t total = (uint64_t)rounds * steps;
  order_entry *entries = malloc((total ? total : 1) * sizeof *entries);
  uint64_t *start = malloc((rounds ? rounds : 1) * sizeof *start);
  strata_round_step *out = malloc((total ? total : 1) * sizeof *out);
  if (!entries || !start || !out) {
    free(entries);
    free(start);
    free(out);
    return NULL;
  }
  for (uint32_t r = 0; r < rounds; r++) {
    start[r] = r ? start[r - 1] + 1 : 0;
    if (window && r >= window && start[r - window] + hold > start[r])
      start[r] = start[r - window] + hold;
    for (uint32_t t = 0; t < steps; t++) {
      order_entry *e = &entries[(uint64_t)r * steps + t];
      e->time = start[r] + t + (t >= lag_from_step ? lag : 0);
      e->round = r;
      e->step = t;
    }
  }
  qsort(entries, total, sizeof *entries, order_cmp);
  for (uint64_t i = 0; i < total; i++) {
    out[i].round = entries[i].round;
    out[i].step = entries[i].step;
  }
  free(entries);
  free(start);
  return out;
}

/* ---- validation, choice, dispatch --------------------------------------------------------- */

static int coll_is_rooted(strata_coll coll) {
  return coll == STRATA_COLL_BROADCAST || coll == STRATA_COLL_REDUCE ||
         coll == STRATA_COLL_GATHER || coll == STRATA_COLL_SCATTER || coll == STRATA_COLL_SEND ||
         coll == STRATA_COLL_RECV;
}

static int params_validate(const strata_sched_params *p) {
  if ((unsigned)p->coll >= STRATA_COLL_COUNT || (unsigned)p->algo >= STRATA_ALGO_COUNT)
    return STRATA_ERR_INVALID_ARG;
  if (p->nranks < 1 || p->rank < 0 || p->rank >= p->nranks || p->elem_size == 0)
    return STRATA_ERR_INVALID_ARG;
  int any_source = p->coll == STRATA_COLL_RECV && p->root == STRATA_ANY_SOURCE && p->nranks > 1;
  if (coll_is_rooted(p->coll) && !any_source && (p->root < 0 || p->root >= p->nranks))
    return STRATA_ERR_INVALID_ARG;
  if ((p->coll == STRATA_COLL_SEND || p->coll == STRATA_COLL_RECV) && p->root == p->rank)
    return STRATA_ERR_INVALID_ARG;
  /* The largest buffer any collective names is count * elem_size * nranks bytes; it must fit
   * in 63 bits so offsets and sums of offsets never wrap. */
  uint64_t limit = (uint64_t)INT64_MAX;
  if (p->count &&
      (p->count > limit / p->elem_size || p->count * p->elem_size > limit / (uint64_t)p->nranks))
    return STRATA_ERR_INVALID_ARG;
  return STRATA_OK;
}

static int is_pow2(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}

strata_algo strata_schedule_choose(const strata_sched_params *p) {
  if (p->algo != STRATA_ALGO_AUTO) return p->algo;
  uint64_t bytes = p->count * p->elem_size;
  uint64_t total = bytes * (uint64_t)(p->nranks > 0 ? p->nranks : 1);
  const int per_rank = p->coll == STRATA_COLL_ALLREDUCE || p->coll == STRATA_COLL_BROADCAST;
  if (p->coll <= STRATA_COLL_BROADCAST &&
      (per_rank ? bytes : total) >= STRATA_AUTO_HIER_MIN_BYTES && strata_hier_applies(p))
    return STRATA_ALGO_HIER;
  switch (p->coll) {
    case STRATA_COLL_ALLREDUCE:
      if (p->nranks <= 1 || bytes <= STRATA_AUTO_ALLREDUCE_RD_MAX_BYTES) return STRATA_ALGO_RHD;
      if (bytes < (is_pow2(p->nranks) ? STRATA_AUTO_ALLREDUCE_RING_MIN_BYTES_POW2
                                      : STRATA_AUTO_ALLREDUCE_RING_MIN_BYTES_NPOW2))
        return STRATA_ALGO_RHD;
      return STRATA_ALGO_RING;
    case STRATA_COLL_REDUCE_SCATTER:
      if (total > STRATA_AUTO_SPREAD_SMALL_MAX_BYTES) return STRATA_ALGO_RING;
      return p->nranks <= STRATA_AUTO_DIRECT_MAX_RANKS ? STRATA_ALGO_DIRECT : STRATA_ALGO_RHD;
    case STRATA_COLL_ALLGATHER:
      return total <= STRATA_AUTO_SPREAD_SMALL_MAX_BYTES ? STRATA_ALGO_RHD : STRATA_ALGO_RING;
    case STRATA_COLL_BROADCAST:
    case STRATA_COLL_REDUCE:
      return (bytes < STRATA_AUTO_ROOTED_CHAIN_MIN_BYTES || p->nranks <= 2) ? STRATA_ALGO_TREE
                                                                            : STRATA_ALGO_RING;
    case STRATA_COLL_GATHER:
    case STRATA_COLL_SCATTER:
      return total <= STRATA_AUTO_GATHER_TREE_MAX_BYTES ? STRATA_ALGO_TREE : STRATA_ALGO_DIRECT;
    case STRATA_COLL_BARRIER:
      return STRATA_ALGO_RHD;
    default: /* alltoall, send, recv */
      return STRATA_ALGO_DIRECT;
  }
}

typedef int (*builder_fn)(const strata_sched_params *p, strata_schedule *s);

/* builders[coll][algo]; NULL = that algorithm does not exist for that collective. */
static const builder_fn builders[STRATA_COLL_COUNT][STRATA_ALGO_COUNT] = {
    [STRATA_COLL_ALLREDUCE] = {[STRATA_ALGO_RING] = strata_build_allreduce_ring,
                               [STRATA_ALGO_RHD] = strata_build_allreduce_rhd,
                               [STRATA_ALGO_TREE] = strata_build_allreduce_tree,
                               [STRATA_ALGO_DIRECT] = strata_build_allreduce_direct,
                               [STRATA_ALGO_HIER] = strata_build_allreduce_hier},
    [STRATA_COLL_REDUCE_SCATTER] = {[STRATA_ALGO_RING] = strata_build_reduce_scatter_ring,
                                    [STRATA_ALGO_RHD] = strata_build_reduce_scatter_rhd,
                                    [STRATA_ALGO_DIRECT] = strata_build_reduce_scatter_direct,
                                    [STRATA_ALGO_HIER] = strata_build_reduce_scatter_hier},
    [STRATA_COLL_ALLGATHER] = {[STRATA_ALGO_RING] = strata_build_allgather_ring,
                               [STRATA_ALGO_RHD] = strata_build_allgather_rhd,
                               [STRATA_ALGO_DIRECT] = strata_build_allgather_direct,
                               [STRATA_ALGO_HIER] = strata_build_allgather_hier},
    [STRATA_COLL_BROADCAST] = {[STRATA_ALGO_RING] = strata_build_broadcast_ring,
                               [STRATA_ALGO_TREE] = strata_build_broadcast_tree,
                               [STRATA_ALGO_HIER] = strata_build_broadcast_hier},
    [STRATA_COLL_REDUCE] = {[STRATA_ALGO_RING] = strata_build_reduce_ring,
                            [STRATA_ALGO_TREE] = strata_build_reduce_tree},
    [STRATA_COLL_GATHER] = {[STRATA_ALGO_TREE] = strata_build_gather_tree,
                            [STRATA_ALGO_DIRECT] = strata_build_gather_direct},
    [STRATA_COLL_SCATTER] = {[STRATA_ALGO_TREE] = strata_build_scatter_tree,
                             [STRATA_ALGO_DIRECT] = strata_build_scatter_direct},
    [STRATA_COLL_ALLTOALL] = {[STRATA_ALGO_DIRECT] = strata_build_alltoall_direct},
    [STRATA_COLL_BARRIER] = {[STRATA_ALGO_RHD] = strata_build_barrier_rhd,
                             [STRATA_ALGO_DIRECT] = strata_build_barrier_direct},
    [STRATA_COLL_SEND] = {[STRATA_ALGO_DIRECT] = strata_build_sendrecv_direct},
    [STRATA_COLL_RECV] = {[STRATA_ALGO_DIRECT] = strata_build_sendrecv_direct},
};

int strata_schedule_algo_applies(strata_coll coll, strata_algo algo) {
  if ((unsigned)coll >= STRATA_COLL_COUNT || (unsigned)algo >= STRATA_ALGO_COUNT) return 0;
  return algo == STRATA_ALGO_AUTO || builders[coll][algo] != NULL;
}

int strata_schedule_build(const strata_sched_params *params, strata_schedule *out) {
  if (!params || !out) return STRATA_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  int status = params_validate(params);
  if (status != STRATA_OK) return status;
  strata_algo algo = strata_schedule_choose(params);
  builder_fn build = builders[params->coll][algo];
  if (!build) return STRATA_ERR_UNSUPPORTED;
  out->rank = params->rank;
  out->nranks = params->nranks;
  out->coll = params->coll;
  out->algo = algo;
  status = build(params, out);
  if (status == STRATA_OK) status = strata_schedule_status(out);
  if (status != STRATA_OK) strata_schedule_free(out);
  return status;
}

/* ---- the signature check ---------------------------------------------------------------------
 * Ranks that disagree on a rooted collective's root build schedules that may never exchange a
 * message whose tag could tell them: with two ranks each taking itself for the root, a broadcast
 * only sends on both and returns different data, a reduce only waits on both. And a rank whose
 * part only sends (a broadcast's root, a gather's leaf), or only hears from ranks that agree with
 * it, completes before any failure elsewhere reaches it. So every rooted collective carries a
 * dissemination check of empty messages: in round k a rank sends to rank + 2^k and receives from
 * rank - 2^k, rounds 0 .. ceil(lg n) - 1, a round's send waiting for every earlier round's
 * receive. The engine tags them, like every message of the call, with the call's signature, root
 * included (api.c).
 *
 * Detection. Round 0's send and receive come first on their links and depend on nothing, so no
 * data step that never becomes ready (a send waiting for a receive the mismatch will never
 * match) holds them back: if the ranks disagree, some rank's predecessor disagrees with it, that
 * rank receives a tag it did not post and fails with STRATA_ERR_MISMATCH at once, and the
 * engine's abort passes it to every rank.
 * Completion. A rank that received round k from rank - 2^k, all tags its own, knows that the
 * 2^(k+1) ranks ending with itself were called alike (rank - 2^k had received its own rounds before
 * sending); after the last round that is every rank. So no rank completes a call the others
 * disagree on: each is still waiting when the abort arrives, and returns the mismatch too.
 *
 * Cost. No data step depends on the check, and rounds after the first come last on their links,
 * behind the data: the common path pays one empty message per round per rank, and a rank returns
 * only once every rank has entered the call (a broadcast's root no longer runs ahead). The check
 * is added by the engine (api.c) rather than by strata_schedule_build, so the builders, the
 * phases hier.c composes and the cost model see the algorithms alone. */
static int coll_needs_signature_check(const strata_sched_params *p) {
  return p->nranks > 1 && p->coll != STRATA_COLL_SEND && p->coll != STRATA_COLL_RECV &&
         coll_is_rooted(p->coll);
}

/* The check's receives, one per round; at most 31 rounds for an int rank count. */
enum { STRATA_SIGNATURE_ROUNDS_MAX = 31 };

int strata_schedule_add_signature_check(const strata_sched_params *params, strata_schedule *sched) {
  if (!params || !sched || !coll_needs_signature_check(params)) return STRATA_OK;
  if (sched->status != STRATA_OK) return sched->status;
  strata_schedule data = *sched, *out = sched; /* everything but the steps stays: scratch, ... */
  out->steps = NULL, out->deps = NULL;
  out->nsteps = out->steps_cap = out->ndeps = out->deps_cap = 0;
  const int64_t n = params->nranks, rank = params->rank;
  const strata_bufref nothing = strata_ref(STRATA_BUF_SCRATCH, 0);
  uint32_t received[STRATA_SIGNATURE_ROUNDS_MAX];
  uint32_t rounds = 0;
  strata_sched_send(out, (int)((rank + 1) % n), nothing, 0, NULL, 0);
  int64_t step = strata_sched_recv(out, (int)((rank + n - 1) % n), nothing, 0, NULL, 0);
  if (step >= 0) received[rounds++] = (uint32_t)step;
  int status = strata_sched_append(out, &data, NULL, 0, NULL, NULL);
  for (int64_t distance = 2; status == STRATA_OK && distance < n; distance *= 2) {
    strata_sched_send(out, (int)((rank + distance) % n), nothing, 0, received, rounds);
    step = strata_sched_recv(out, (int)((rank + n - distance) % n), nothing, 0, NULL, 0);
    if (step >= 0) received[rounds++] = (uint32_t)step;
    status = strata_schedule_status(out);
  }
  strata_schedule_free(&data);
  if (status != STRATA_OK) strata_schedule_free(out);
  return status;
}
