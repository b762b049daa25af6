// SPDX-License-Identifier: Apache-2.0
/*
 * engine.h — the communicator and the engine that runs schedules over transports.
 *
 * An operation (one collective call on one rank) owns a schedule built by src/coll, the three
 * buffers its steps name, and per-step bookkeeping. Operations are activated in submission
 * order; all active operations progress together. Transfers to one peer are handed to the
 * transport in a single global order (operation order, then step index), which is what makes
 * the k-th send match the k-th receive on the other side even with several operations in
 * flight.
 *
 * Threads: one mutex (comm->lock) guards everything below the public API. Whoever holds it
 * drives progress: a caller blocked in a wait (lowest latency, no thread hand-off), or the
 * background progress thread when non-blocking operations are pending and nobody waits.
 *
 * Receives from any source (strata_irecv_any). Such a receive has no peer queue until it is
 * bound: while it waits, the engine asks each peer's transport (ops->probe) whether the first
 * message no posted receive takes is there, and binds the receive to the first peer (in turn,
 * from the one after the last bound) whose such message is a point-to-point one and whose
 * receives posted earlier have all been handed to the transport; it then goes to the front of
 * that peer's queue. So, as MPI's non-overtaking rule: a message goes to the earliest posted
 * receive that can take it, and a peer's messages to the receives from it in posting order. Until
 * the oldest waiting one is bound, receives posted after it wait in their queues: point-to-point
 * ones (it may be their message it takes), and a collective's receive from p as long as p's next
 * message is not known to be a collective's (a collective's message is never taken by it).
 * Point-to-point receive tags get their sequence number when handed to the transport, the
 * order in which a peer's messages are taken.
 *
 * Errors are sticky: the first failure (mismatch, lost peer, timeout, abort) is told to every
 * peer, fails every pending operation with that status, and every later call returns it. The
 * transports are never driven again after that, so no transfer can touch a buffer whose
 * operation has already returned.
 */
#ifndef STRATA_ENGINE_ENGINE_H
#define STRATA_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "boot/store.h"
#include "coll/schedule.h"
#include "net/net.h"
#include "strata.h"

typedef struct strata_operation strata_operation;

/* A message tag (api.c, operation_tag): bit 63 set for point to point, the sequence number in
 * bits 24..62 (a collective's index in the lineage, a point-to-point message's number in its
 * pair's direction), the call's signature in bits 0..23. */
#define STRATA_TAG_P2P (1ULL << 63)
#define STRATA_TAG_SEQ_SHIFT 24
#define STRATA_TAG_SEQ_MASK 0x7fffffffffULL

/* Per-peer FIFO of transfer steps waiting to be handed to the transport, in posting order. */
typedef struct strata_post_entry {
  strata_operation *op;
  uint32_t step;
  struct strata_post_entry *next;
} strata_post_entry;

typedef struct strata_post_queue {
  strata_post_entry *head, *tail;
} strata_post_queue;

enum {
  STRATA_STEP_WAITING = 0,
  STRATA_STEP_READY = 1,
  STRATA_STEP_POSTED = 2,
  STRATA_STEP_DONE = 3
};

/* Scratch buffers a communicator keeps for reuse (engine.c, "scratch"). */
enum { STRATA_SCRATCH_CACHE = 2 };

struct strata_operation {
  strata_comm *comm;
  strata_coll_args args;
  uint32_t elem_size;
  uint64_t tag;
  uint64_t coll_seq; /* collective number (same on every rank); UINT64_MAX for send/recv */
  strata_schedule sched;
  uint8_t *bufs[3];      /* send, recv, scratch (indexed by strata_buf_id) */
  uint64_t buf_bytes[3]; /* bounds of each buffer, checked once per operation */
  void *scratch;         /* owned: from strata_scratch_take, back by strata_operation_free */
  uint64_t scratch_cap;  /* its size */
  uint32_t *deps_left;   /* per step */
  uint32_t *dependents; /* CSR: dependents of step i are dependents[dep_index[i]..dep_index[i+1]) */
  uint32_t *dep_index;
  uint8_t *state;             /* per step: STRATA_STEP_* */
  strata_xfer *xfers;         /* per step (transfer steps; a sliced local step's offset) */
  strata_post_entry *entries; /* per step (transfer steps, sliced local steps) */
  uint32_t *ready;            /* per op stack: steps whose dependencies just completed */
  uint32_t *completed;        /* per op stack: transfer steps whose done() ran, not yet processed */
  uint32_t ncompleted;
  strata_reduce_fn reduce;
  uint32_t steps_left;
  int status;
  atomic_int done;
  int avg_finish;        /* divide the result by nranks at the end */
  strata_compress codec; /* NONE, or the wire encoding of every transfer (f32 data) */
  uint8_t *wire;         /* owned, codec only: one encoded slot per transfer step */
  uint64_t *wire_off;    /* owned, codec only: per step, its slot's offset in `wire` */
  strata_operation *next_active;
  /* Built by strata_collective from `key` (api.c): a finished operation is kept as the
   * communicator's spare and taken again, schedule and per-step arrays as they are, by the next
   * call with the same key and the same args.dtype, args.op and args.compress. */
  int reusable;
  uint64_t submit_no;         /* 1 + operations submitted before it on the communicator */
  int source;                 /* a receive from any source: the peer it was bound to, or -1 */
  int *source_out;            /* ... written there when it succeeds (strata_irecv_any) */
  strata_operation *next_any; /* comm->any_head's list: receives from any source not bound */
  /* cfg.elastic, an in-place reduction: a copy of the input taken at submit, put back if the
   * operation fails, else handed to the communicator (last_input) until the next one succeeds */
  void *backup, *backup_dst;
  uint64_t backup_bytes;
  strata_sched_params key;
};

struct strata_comm {
  strata_config cfg;
  int rank, nranks;
  strata_store_server *store_server;
  strata_store *store;
  strata_store *addr_store; /* a PMIx world's transports rendezvous through it (boot/pmix.h) */
  int pmix_world;           /* this world communicator's rendezvous went through PMIx */
  unsigned pmix_round;      /* which of the process's PMIx rendezvous */
  int has_store_ops;        /* the caller's store (strata_comm_init_store): splits use it too */
  strata_store_ops store_ops;
  size_t chunk_bytes_asked; /* cfg.chunk_bytes before the ranks agreed on one: splits start here */
  uint64_t splits;          /* strata_comm_split calls so far: names each split's job */
  strata_net net;
  int have_net;
  int oversubscribed; /* more ranks on this host than cores: never spin, yield at once */
  int *site_of_rank;  /* site index per rank (sites.c), NULL = fewer than 2 sites */

  pthread_mutex_t lock;
  pthread_cond_t cond; /* an operation finished, or one was submitted */
  pthread_t progress_thread;
  int thread_started;
  int thread_stop;
  atomic_int waiters;

  strata_operation *active_head, *active_tail;
  uint32_t active_count;
  uint64_t coll_seq;
  uint64_t *p2p_send_seq, *p2p_recv_seq;        /* per peer */
  strata_post_queue *send_queues, *recv_queues; /* per peer */
  strata_post_queue local_queue;         /* long COPY/REDUCE steps, run a slice per progress pass */
  uint64_t submitted;                    /* operations submitted so far (their submit_no) */
  strata_operation *any_head, *any_tail; /* receives from any source not bound yet, in order */
  int any_next_peer;                     /* where the next binding starts looking */
  double last_progress_s;
  atomic_int error;        /* sticky first error */
  strata_comm_stats stats; /* under lock */
  atomic_int doomed;       /* a peer aborted from a later operation on: earlier ones still finish
                              here, new calls fail with this status */
  /* scratch buffers given back by finished operations (engine.c, strata_scratch_take) */
  pthread_mutex_t scratch_lock;
  void *scratch_cache[STRATA_SCRATCH_CACHE];
  uint64_t scratch_cache_bytes[STRATA_SCRATCH_CACHE];
  /* the last finished operation strata_collective built, kept for the next call with its key
   * (api.c, operation_retire): repeated calls skip building the schedule and allocating */
  _Atomic(strata_operation *) spare_op;
  /* Request handles given out (api.c) and not yet completed by strata_request_wait/test. Such a
   * handle may outlive strata_comm_destroy, which fails its operation: destroy's own hold is
   * counted as the one below zero, and whoever drops the last hold frees what the handles still
   * touch (strata_comm_release). */
  atomic_int requests_held;
  /* elastic.c */
  uint64_t epoch;      /* 0 at init, +1 per shrink or grow */
  char base_job[64];   /* the job id of epoch 0: joiners and later epochs derive from it */
  uint64_t agreements; /* agreements read so far (agree, shrink): name their store keys */
  int agreement_open;  /* this rank contributed to agreement `agreements` and has not read
                          its decision: the next agree or shrink resumes it */
  int excluded;        /* an agreement of this communicator was decided without this rank */
  /* agreement_open, and this rank's contribution moved that agreement's progress counter */
  int agreement_counted;
  int shrink_rank, shrink_size; /* this rank's place in the group its last shrink decided */
  uint64_t shrink_agreement;    /* the agreement that decided it: names the group's job id */
  atomic_int revoke_requested;  /* strata_comm_revoke, from any thread, without the lock */
  uint64_t colls_ok;     /* collectives finished with STRATA_OK: what shrink compares (elastic.c) */
  uint64_t lineage_base; /* collectives the lineage finished before this communicator (shrink) */
  int agreed_last;       /* an agree came after the last collective started (elastic.c) */
  uint64_t shrink_fewest; /* the fewest collectives a survivor of the last shrink finished */
  int test_fail_next;     /* strata_engine_test_fail_next */
  void *last_input, *last_input_dst; /* the input of the last in-place reduction that succeeded */
  uint64_t last_input_bytes;         /* (cfg.elastic), for strata_comm_undo */
  int undo_ready;                    /* shrink found that collective failed on another survivor */
  int *failed_ranks;                 /* the ranks the last agreement found failed (malloc) */
  int nfailed;
};

/* engine.c */
int strata_engine_submit(strata_comm *comm, strata_operation *op);
int strata_engine_wait(strata_comm *comm, strata_operation *op);
/* One progress pass (lock held). Returns 1 if anything completed. */
int strata_engine_poll(strata_comm *comm);
void strata_engine_fail(strata_comm *comm, int status, int tell_peers);
void *strata_engine_thread_main(void *arg);
/* Publish cfg.site and cfg.chunk_bytes, read every rank's: set comm->site_of_rank, and
 * cfg.chunk_bytes to the largest proposed, the same on every rank (sites.c). */
int strata_comm_agree_sites(strata_comm *comm);
/* comm_init, for elastic.c: a communicator from a configuration and optional store callbacks. */
int strata_comm_create(const strata_config *cfg, const strata_store_ops *store_ops,
                       strata_comm **out);
/* elastic.c: a process joining a running job (cfg->join): waits for the members' next grow. */
int strata_comm_join(const strata_config *cfg, const strata_store_ops *ops, strata_comm **out);
/* elastic.c: the job id of a communicator of epoch `epoch` formed from the one whose job id is
 * `parent` (job `base`, its epoch-0 id) by `how` ("shrink" with the deciding agreement's index,
 * "grow" with the tickets granted). */
void strata_epoch_job_id(const char *base, const char *parent, uint64_t epoch, const char *how,
                         uint64_t count, char *out, size_t len);
void strata_operation_free(strata_operation *op);
/* A 64-byte aligned buffer of at least `bytes` (its size in *cap), from the cache or new; NULL
 * when out of memory. strata_scratch_give returns it (thread safe, no other lock needed);
 * strata_scratch_release frees the cache (strata_comm_destroy). */
void *strata_scratch_take(strata_comm *comm, uint64_t bytes, uint64_t *cap);
void strata_scratch_give(strata_comm *comm, void *buf, uint64_t cap);
void strata_scratch_release(strata_comm *comm);
/* Free the spare operation (strata_comm_destroy). */
void strata_spare_release(strata_comm *comm);
/* comm.c. Drop one hold on the communicator's memory, a completed request's or destroy's
 * (requests_held); the last one frees the communicator. */
void strata_comm_release(strata_comm *comm);

/* api.c. Run `sched`, one rank's schedule built by the caller rather than by src/coll, as one
 * blocking collective operation over `send` and `recv` (their sizes bound every step; 0 = not
 * used): every rank calls it at the same point of its sequence of collectives with the same
 * `name` (a collective's arguments, whose coll, count, dtype, op, root and algo tag the
 * messages; its buffers are ignored). The operation takes the schedule over, whatever the
 * outcome. It runs what no builder emits (tests/test_engine_run_schedule.c drives hand-made
 * schedules through it), driven by the waiting caller as a collective is, whereas point-to-point
 * posts wake the progress thread one by one. */
int strata_engine_run_schedule(strata_comm *comm, const strata_coll_args *name,
                               strata_schedule *sched, void *send, uint64_t send_bytes, void *recv,
                               uint64_t recv_bytes);

/* The 24 bits of a message tag that name the call (api.c: collective, count, type, codec, op,
 * algorithm), with `root` in place of the call's own; and whether a collective has a root. For
 * naming what differed when a tag did not match (engine.c). */
uint64_t strata_engine_signature_hash(const strata_operation *op, int root);
int strata_engine_is_rooted(strata_coll coll);

/* Test hook (tests/test_comm_lineage.c): the next collective that finishes on `comm` finishes
 * on the wire as usual but reports `status` to this rank, as a call does whose last bytes were
 * lost with a peer that died just then. */
void strata_engine_test_fail_next(strata_comm *comm, int status);

#endif
