// SPDX-License-Identifier: Apache-2.0
/*
 * shm_internal.h — what the files of the shared-memory transport share: its tuning constants, the
 * private state of the transport and of each local peer, and the functions one file calls in
 * another. The layout both processes see is in shm_wire.h; the interface is shm.h.
 *
 *   shm_ring.c   records, inline send/receive streaming, queues, progress() and wait()
 *   shm_pull.c   single-copy pulls: process_vm_readv, mapped registered memory, fused reduction
 *   shm_setup.c  segments, rendezvous through the store, liveness, aborts, destroy
 *
 * Threading: one thread drives a transport at a time (transport.h); nothing here is locked.
 */
#ifndef STRATA_NET_SHM_INTERNAL_H
#define STRATA_NET_SHM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "net/shm.h"
#include "net/shm_wire.h"
#include "net/transport.h"

#define SHM_RING_BYTES (1u << 20) /* per peer, while the segment stays within the budget: */
#define SHM_SEGMENT_BUDGET_BYTES (16u << 20) /* many local peers get smaller rings, */
#define SHM_RING_MIN_BYTES (128u << 10)      /* down to this */
/* From this size on, messages go by CMA when the peer allows it. One way, inline streaming keeps
 * two cores copying in parallel (the sender into the ring, the receiver out of it) and never
 * waits for an ack, so it is the faster of the two for one-way traffic; but in ring collectives
 * every rank sends and receives at once, and there CMA's single copy (half the memory traffic of
 * two) wins from a few tens of KiB on. STRATA_SHM_BENCH=1 test_net_shm measures both sides of
 * the choice on a host. */
#define SHM_INLINE_MAX_BYTES (32u << 10)
#define SHM_PUBLISH_BYTES (64u << 10)       /* streaming granularity of INLINE payloads */
#define SHM_CMA_SLICE_BYTES (1u << 20)      /* most bytes one xfer moves per progress() call */
#define SHM_REDUCE_BLOCK_BYTES (256u << 10) /* bounce block of a fused reduce: fits in L2 */
#define SHM_MAX_ELEM_BYTES 64u
#define SHM_MAP_CACHE 8 /* regions of one peer's strata_mem_alloc memory we keep mapped */
#define SHM_LIVENESS_PERIOD_S 0.010
#define SHM_WAIT_SPIN_S 2e-6    /* wait(): spin this long (a partner on another core answers), */
#define SHM_WAIT_YIELD_S 2e-3   /* then sched_yield() until this, */
#define SHM_WAIT_SLEEP_NS 50000 /* then sleep in steps of this */
#define SHM_WAIT_MAX_S 0.010    /* and return at least this often (liveness checks) */
#define SHM_ABORT_ORDER_S 1.0   /* longest an abort waits for the data sent before it */

enum { SEND_FRESH = 0, SEND_STREAMING };
enum { RECV_WAITING = 0, RECV_INLINE, RECV_CMA, RECV_MAPPED };

typedef struct shm_queue {
  strata_xfer *head, *tail;
} shm_queue;

/* A region of a peer's strata_mem_alloc memory, mapped read-only here. */
typedef struct shm_region_map {
  uint64_t id; /* the peer's region id, 0 = empty slot */
  const uint8_t *base;
  size_t bytes;
  uint64_t last_use;
} shm_region_map;

typedef struct shm_peer {
  int rank;
  int pid;
  int pidfd;
  int lost; /* 0 or the status that broke this peer */
  int abort_seen;
  double abort_noticed_s; /* when we first saw the abort word (0 = not yet) */
  int use_cma;            /* the peer can read our memory: large sends go CMA */
  int pid_visible;        /* its pid means something here (same pid namespace) */
  double next_liveness_s;
  void *map; /* the peer's segment */
  size_t map_bytes;
  /* sending: our channel in the peer's segment */
  shm_channel *out;
  uint8_t *out_ring;
  uint64_t out_mask; /* ring bytes - 1 */
  uint64_t out_head, out_tail_cached, send_seq, cma_sent;
  shm_queue sends, acks; /* being written; CMA records waiting for their ack */
  /* receiving: the peer's channel in our segment */
  shm_channel *in;
  uint8_t *in_ring;
  uint64_t in_mask;
  uint64_t in_tail, in_head_cached, recv_seq, cma_done, discard_bytes;
  shm_queue recvs;
  shm_region_map regions[SHM_MAP_CACHE];
  uint64_t region_uses;
  int regions_refused; /* mapping its memory failed once: pull by CMA from then on */
} shm_peer;

typedef struct shm_transport {
  strata_transport base;
  int rank, nranks;
  int npeers;
  shm_peer *peers;
  int *peer_index; /* [nranks] -> index into peers, or -1 */
  void *own_map;
  size_t own_map_bytes;
  uint64_t ring_bytes; /* of the rings in our segment */
  uint8_t *bounce;     /* fused-reduce block, allocated on first use */
  shm_queue completed;
  uint64_t events; /* bumped whenever anything moves: progress() tells "blocked" from it */
  int more_work;   /* the last progress() stopped a stream on its budget, not on a full ring */
  int own_fd;      /* our segment's memfd, open only during strata_shm_open */
  uint64_t mapped_bytes; /* received by reading a peer's strata_mem_alloc memory directly */
  volatile uint64_t canary;
} shm_transport;

/* ---- small helpers ---- */

static inline void shm_queue_push(shm_queue *q, strata_xfer *x) {
  x->next = NULL;
  if (q->tail)
    q->tail->next = x;
  else
    q->head = x;
  q->tail = x;
}

static inline strata_xfer *shm_queue_pop(shm_queue *q) {
  strata_xfer *x = q->head;
  if (x) {
    q->head = x->next;
    if (!q->head) q->tail = NULL;
    x->next = NULL;
  }
  return x;
}

/* Queue x for its done() callback, which progress() runs after every queue is settled. */
static inline void shm_complete(shm_transport *t, strata_xfer *x, int status) {
  x->status = status;
  t->events++;
  shm_queue_push(&t->completed, x);
}

static inline shm_peer *shm_peer_of(shm_transport *t, int rank) {
  if (rank < 0 || rank >= t->nranks || t->peer_index[rank] < 0) return NULL;
  return &t->peers[t->peer_index[rank]];
}

static inline int shm_peer_busy(const shm_peer *p) {
  return p->sends.head || p->acks.head || p->recvs.head;
}

/* ---- shm_ring.c: the transport ops that move messages ---- */
int shm_post_send(strata_transport *base, strata_xfer *x);
int shm_post_recv(strata_transport *base, strata_xfer *x);
int shm_progress(strata_transport *base, int *failed_peer);
void shm_wait(strata_transport *base, int timeout_ms);
int shm_probe(strata_transport *base, int peer, uint64_t *tag, uint64_t *bytes);

/* ---- shm_pull.c: single-copy receives of CMA records ---- */
/* The payload of CMA record r read through our mapping of the peer's strata_mem_alloc region, or
 * NULL: then the caller pulls it by process_vm_readv. */
const uint8_t *shm_region_payload(shm_transport *t, shm_peer *p, const shm_record *r);
/* Pull (copy or fused reduce) at most SHM_CMA_SLICE_BYTES more of x, whose state is RECV_CMA or
 * RECV_MAPPED. Returns STRATA_OK or the status that breaks the peer. */
int shm_recv_cma_slice(shm_transport *t, shm_peer *p, strata_xfer *x);

/* ---- shm_setup.c: segments, liveness, aborts ---- */
/* Map the whole memfd a local peer holds as `fd` through /proc/<pid>/fd/<fd> (the path goes to
 * name[]): read-write with MAP_POPULATE (a segment) or read-only (registered memory). Returns
 * MAP_FAILED with errno set, *opened = 0 when even the open failed; a file smaller than
 * min_bytes is refused (EINVAL). */
void *shm_map_proc_fd(int pid, int fd, int writable, size_t min_bytes, size_t *bytes, int *opened,
                      char *name, size_t name_len);
/* Break the peer: every queued transfer completes with `status`; later posts are refused. */
void shm_peer_fail(shm_transport *t, shm_peer *p, int status);
/* Record p's abort in the transport once the data it sent before aborting has arrived. */
void shm_check_abort(shm_transport *t, shm_peer *p);
/* 1 if p has died (asked at most every SHM_LIVENESS_PERIOD_S; *now: 0 or the current time).
 * The caller takes what p wrote before dying before it fails p. */
int shm_peer_found_dead(shm_peer *p, double *now);

#endif
