// SPDX-License-Identifier: Apache-2.0
/*
 * schedule.h — a collective algorithm is a schedule.
 *
 * A schedule builder is a pure function of (collective, rank, world size, sizes, root, algorithm)
 * that returns, for one rank, a list of steps with dependencies. It never touches a socket or a
 * byte of user data: the engine (src/engine) runs schedules over real transports, the symbolic
 * runner (tests) runs them over sets of contributions, and the model (src/model) runs them over
 * modeled links. What we predict and what we run therefore cannot drift apart.
 *
 * Memory. A step names memory as (buffer, byte offset): the caller's send buffer, the caller's
 * receive buffer, or a scratch area of `scratch_bytes` the engine allocates per operation.
 * In-place calls pass the same pointer for both; builders are told (`in_place`) so they can avoid
 * reading data they have already overwritten.
 *
 * Matching. Messages between a pair of ranks are matched in order: the k-th SEND to peer q in
 * rank p's step list (by index) pairs with the k-th RECV or RECV_REDUCE from p in q's list, and
 * both carry the same byte count. The engine posts transfers to a peer in index order.
 *
 * Dependencies. A step starts once every step it depends on has completed. A step may only depend
 * on steps with a smaller index, so a schedule is a DAG already in topological order.
 *
 * Reductions are elementwise with the call's op; AVG is built as SUM and the engine divides the
 * final result, so builders never see AVG.
 */
#ifndef STRATA_COLL_SCHEDULE_H
#define STRATA_COLL_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

/* Chunks a ring keeps in flight per direction (the allreduce's staging slots, the
 * reduce-scatter's window): what a caller that sizes chunk_bytes from a bandwidth-delay product
 * divides by (src/engine/chunk.c), and what the host model's calibration keeps in flight. */
#define STRATA_SCHED_RING_CHUNKS_IN_FLIGHT 4u

#include "strata.h"

typedef enum strata_buf_id {
  STRATA_BUF_SEND = 0,
  STRATA_BUF_RECV = 1,
  STRATA_BUF_SCRATCH = 2
} strata_buf_id;

typedef struct strata_bufref {
  uint8_t buf;     /* strata_buf_id */
  uint64_t offset; /* bytes */
} strata_bufref;

typedef enum strata_step_kind {
  STRATA_STEP_SEND = 0,    /* send `bytes` from src to peer */
  STRATA_STEP_RECV,        /* receive `bytes` from peer into dst */
  STRATA_STEP_RECV_REDUCE, /* dst = src OP incoming; `staging` is scratch the engine may use to
                              land the incoming bytes before reducing (transports that can reduce
                              straight from the peer's memory skip it) */
  STRATA_STEP_COPY,        /* dst = src (regions may not overlap unless equal) */
  STRATA_STEP_REDUCE,      /* dst = src OP src2 */
  STRATA_STEP_KIND_COUNT
} strata_step_kind;

typedef struct strata_step {
  uint8_t kind;
  int32_t peer; /* SEND, RECV, RECV_REDUCE */
  uint64_t bytes;
  strata_bufref src, src2, dst, staging;
  uint32_t dep_begin; /* deps[dep_begin .. dep_begin+dep_count) index earlier steps */
  uint32_t dep_count;
} strata_step;

typedef struct strata_schedule {
  int rank;
  int nranks;
  strata_coll coll;
  strata_algo algo; /* the algorithm actually built (never AUTO) */
  uint64_t scratch_bytes;
  /* Under a lossy wire encoding the ranks' results went through different numbers of
   * quantizations (a fold's final send re-quantizes the sender's copy and what the folded rank
   * receives, not the other ranks'): every rank then quantizes its whole result once more, the
   * same function of bytes that the re-encoding rule makes equal, so all end with the same. */
  int requantize_result;
  strata_step *steps;
  uint32_t nsteps, steps_cap;
  uint32_t *deps;
  uint32_t ndeps, deps_cap;
  int status; /* first failure of a builder helper (e.g. STRATA_ERR_NO_MEMORY), else STRATA_OK */
} strata_schedule;

/* strata_sched_params.in_place */
enum { STRATA_IN_PLACE = 1, STRATA_IN_PLACE_ALIAS = 2 };

/* What a builder needs to know. Sizes are in bytes; elem_size lets builders cut on element
 * boundaries (a chunk never splits an element). */
typedef struct strata_sched_params {
  strata_coll coll;
  strata_algo algo; /* AUTO lets strata_schedule_build choose */
  int rank;
  int nranks;
  int root;             /* rooted collectives; the peer for SEND/RECV, or STRATA_ANY_SOURCE for
                           a RECV whose peer the engine picks when a message comes (its RECV
                           step's peer is STRATA_ANY_SOURCE until then) */
  uint64_t count;       /* elements, with the meaning of the public API for `coll` */
  uint32_t elem_size;   /* bytes per element */
  int in_place;         /* 0, or the in-place layout the public API documents for `coll`;
                           reduce-scatter has two: STRATA_IN_PLACE (RECV == SEND + rank*B, as
                           NCCL) and STRATA_IN_PLACE_ALIAS (RECV == SEND) */
  uint64_t chunk_bytes; /* pipelining granularity; 0 = builder default */
  /* Site (a number in [0, nranks)) of every rank, nranks entries, or NULL = no sites. The
   * hierarchical builder (hier.c) works inside sites, then across them; AUTO picks it for large
   * messages when there are >= 2 sites and a site has >= 2 ranks. Borrowed, not copied. */
  const int *site_of_rank;
} strata_sched_params;

/* Build the schedule for one rank. `out` must be zero-initialised or previously freed; on error
 * nothing is allocated. Returns STRATA_OK, STRATA_ERR_INVALID_ARG or STRATA_ERR_UNSUPPORTED
 * (e.g. an algorithm that does not exist for that collective) or STRATA_ERR_NO_MEMORY. */
int strata_schedule_build(const strata_sched_params *params, strata_schedule *out);
/* Add the signature check to `sched`, one rank's schedule of a rooted collective (broadcast,
 * reduce, gather, scatter) built for `params`: empty messages in ceil(lg nranks) rounds, the first
 * round ahead of every other step on its links, the others behind them (schedule.c explains
 * why). The engine tags them with the call's signature, so ranks that were called with different
 * roots all fail with STRATA_ERR_MISMATCH, and none completes before every rank has joined.
 * Nothing is added for other collectives or a single rank. Returns STRATA_OK, or the schedule's
 * failure or STRATA_ERR_NO_MEMORY with `sched` freed. */
int strata_schedule_add_signature_check(const strata_sched_params *params, strata_schedule *sched);
/* The algorithm AUTO resolves to for these parameters (size and rank count). */
strata_algo strata_schedule_choose(const strata_sched_params *params);
/* 1 if `algo` exists for `coll` (AUTO always does), else 0 — e.g. to fall back to AUTO when an
 * algorithm forced for every collective (STRATA_ALGO) does not apply to this one. */
int strata_schedule_algo_applies(strata_coll coll, strata_algo algo);
void strata_schedule_free(strata_schedule *sched);
/* Pipeline rounds for `count` elements when one message carries at most `chunk_bytes` and a
 * round is cut into `parts` messages: ceil(count / (parts * chunk_elems)), in [1, 4096] (and
 * rounds * nranks <= 65536): how the builders cut a collective, and how the cost model
 * (src/model/cost.c) counts its messages. */
uint64_t strata_coll_rounds(const strata_sched_params *p, uint64_t count, uint64_t parts);

/* Builder helpers (schedule.c). Each returns the new step's index, or -1 on allocation failure
 * (the schedule remembers the failure; strata_schedule_status() reports it). */
int strata_sched_add(strata_schedule *s, const strata_step *step, const uint32_t *deps,
                     uint32_t ndeps);
int strata_sched_send(strata_schedule *s, int peer, strata_bufref src, uint64_t bytes,
                      const uint32_t *deps, uint32_t ndeps);
int strata_sched_recv(strata_schedule *s, int peer, strata_bufref dst, uint64_t bytes,
                      const uint32_t *deps, uint32_t ndeps);
int strata_sched_recv_reduce(strata_schedule *s, int peer, strata_bufref src, strata_bufref dst,
                             strata_bufref staging, uint64_t bytes, const uint32_t *deps,
                             uint32_t ndeps);
int strata_sched_copy(strata_schedule *s, strata_bufref src, strata_bufref dst, uint64_t bytes,
                      const uint32_t *deps, uint32_t ndeps);
int strata_sched_reduce(strata_schedule *s, strata_bufref src, strata_bufref src2,
                        strata_bufref dst, uint64_t bytes, const uint32_t *deps, uint32_t ndeps);
int strata_schedule_status(const strata_schedule *s);
/* Append every step of `sub` to `s` in order, its dependencies moved to where they land; the steps
 * of `sub` that depend on nothing also wait for the `nafter` steps `after` of `s` (a phase after
 * the last one, a call after the last call). `map`, if given, rewrites each step first (peers,
 * buffer offsets) and returns non-zero where it cannot. Returns STRATA_OK, the schedule's failure,
 * STRATA_ERR_NO_MEMORY, or STRATA_ERR_INVALID_ARG for a step `map` refused. */
int strata_sched_append(strata_schedule *s, const strata_schedule *sub, const uint32_t *after,
                        uint32_t nafter,
                        int (*map)(const void *ctx, const strata_step *in, strata_step *out),
                        const void *ctx);

static inline strata_bufref strata_ref(strata_buf_id buf, uint64_t offset) {
  strata_bufref r = {(uint8_t)buf, offset};
  return r;
}

#endif
