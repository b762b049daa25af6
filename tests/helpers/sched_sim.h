// SPDX-License-Identifier: Apache-2.0
/*
 * sched_sim.h — run n schedules (one per rank) in one process, over in-memory links.
 *
 * Two layers, so a timing simulator can reuse the first:
 *
 *  1. The walker (sched_walk_*) knows only the rules of src/coll/schedule.h: a step may start
 *     once its dependencies completed; the k-th SEND from p to q and the k-th RECV/RECV_REDUCE of
 *     q from p form one transfer; transfers on a link happen one at a time, in order; a transfer
 *     starts only when BOTH steps are ready (rendezvous — the strictest engine, so a schedule
 *     that completes here cannot deadlock an engine with buffering). It offers the set of events
 *     (a local COPY/REDUCE, or a transfer) that may start now; the caller takes one, performs
 *     it whenever it likes (now, or at a simulated finish time) and reports it finished.
 *     sched_walk_init also checks the schedules statically: metadata, peers, backward
 *     dependencies, and that every link has as many sends as receives with equal byte counts.
 *     A timing simulator loops: take every ready event, give it a finish time (link model for a
 *     transfer, memory bandwidth for a local step), pop the earliest finish from a heap, call
 *     sched_walk_finish, repeat; the last finish time is the prediction.
 *
 *  2. The executor (sched_sim_run) moves real bytes: every rank gets caller-provided SEND and
 *     RECV memory (aliased for in-place calls) and scratch it allocates filled with 0xff. A
 *     value algebra supplies the reduction (real arithmetic, or symbolic contribution sets that
 *     fail on double counting). It rejects references outside a buffer, writes to SEND, staging
 *     outside scratch, and reductions that split an element; optionally it checks statically
 *     that any two steps touching the same bytes (one writing) are ordered by dependencies. The
 *     order among ready events is FIFO or pseudo-random from a seed.
 */
#ifndef STRATA_TESTS_SCHED_SIM_H
#define STRATA_TESTS_SCHED_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "coll/schedule.h"

typedef enum sched_event_kind {
  SCHED_EVENT_LOCAL = 0,   /* COPY or REDUCE step `step` of `rank` */
  SCHED_EVENT_TRANSFER = 1 /* SEND `step` of `rank` with RECV(_REDUCE) `peer_step` of `peer` */
} sched_event_kind;

typedef struct sched_event {
  int kind;
  int rank;
  uint32_t step;
  int peer;
  uint32_t peer_step;
} sched_event;

typedef struct sched_walk_link {
  uint32_t *send_steps, nsend; /* on the sender, in index order */
  uint32_t *recv_steps, nrecv; /* on the receiver, in index order */
  uint32_t next;               /* transfers finished on this link */
  int busy;                    /* a transfer is in flight */
} sched_walk_link;

typedef struct sched_walk_rank {
  const strata_schedule *sched;
  uint32_t *pending;     /* dependencies not yet finished */
  uint8_t *state;        /* SCHED_STEP_* */
  uint32_t *child_begin; /* dependents of step i: children[child_begin[i] .. child_begin[i+1]) */
  uint32_t *children;
} sched_walk_rank;

enum { SCHED_STEP_WAITING = 0, SCHED_STEP_READY = 1, SCHED_STEP_DONE = 2 };

typedef struct sched_walk {
  int nranks;
  sched_walk_rank *ranks;
  sched_walk_link *links; /* links[p * nranks + q]: p sends to q */
  sched_event *ready;
  uint32_t nready, ready_cap;
  uint64_t steps_total, steps_done;
  int failed; /* allocation failure while running */
} sched_walk;

/* Check the schedules and prepare the walk. Returns 0, or -1 with a message in err. */
int sched_walk_init(sched_walk *w, const strata_schedule *scheds, int nranks, char *err,
                    size_t errlen);
/* Events that may start now: w->ready[0 .. w->nready). Take one (it leaves the set). */
sched_event sched_walk_take(sched_walk *w, uint32_t index);
/* Report a taken event finished; dependents may become ready. */
void sched_walk_finish(sched_walk *w, const sched_event *e);
/* 1 when every step of every rank finished. */
int sched_walk_complete(const sched_walk *w);
/* Describe why no event is ready although steps remain (a deadlock). */
void sched_walk_describe_stuck(const sched_walk *w, char *err, size_t errlen);
void sched_walk_free(sched_walk *w);

/* ---- executor ------------------------------------------------------------------------------- */

typedef struct sched_sim_buffers {
  uint8_t *send; /* may alias recv (in-place calls); NULL with 0 bytes where a rank has none */
  uint64_t send_bytes;
  uint8_t *recv;
  uint64_t recv_bytes;
} sched_sim_buffers;

typedef struct sched_sim_algebra {
  uint32_t elem_size;
  /* dst[i] = a[i] OP b[i] for `count` elements (dst may equal a or b). Returns 0, or non-zero
   * after writing why into err (e.g. a contribution counted twice). */
  int (*reduce)(void *ctx, void *dst, const void *a, const void *b, uint64_t count, char *err,
                size_t errlen);
  void *ctx;
} sched_sim_algebra;

/* The hazard check keeps a steps x steps bit matrix per rank (steps²/8 bytes). */
#define SCHED_SIM_HAZARD_MAX_STEPS 30000u

typedef struct sched_sim_options {
  uint64_t seed;     /* 0: always start ready event 0; else a pseudo-random ready event */
  int check_hazards; /* static check that conflicting accesses are ordered by dependencies */
} sched_sim_options;

/* Run the schedules to completion. Returns 0, or -1 with a message in err. */
int sched_sim_run(const strata_schedule *scheds, int nranks, const sched_sim_buffers *bufs,
                  const sched_sim_algebra *algebra, const sched_sim_options *options, char *err,
                  size_t errlen);

#endif
