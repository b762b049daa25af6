// SPDX-License-Identifier: Apache-2.0
/*
 * engine.c — runs operations (schedules) over the transports. See engine.h for the model.
 *
 * Invariants:
 *  - every function here runs with comm->lock held, except the thread entry point;
 *  - a transfer step reaches the transport only when its dependencies are done AND it is the
 *    head of its peer's posting queue, so the order of transfers per peer is the order of
 *    operations, then of step indices — identical on both sides of every pair;
 *  - transport callbacks only record completions; they are processed by the progress loop, so
 *    no callback re-enters the engine;
 *  - after the first error the transports are never driven again (engine.h explains why).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/compress.h"
#include "core/core.h"
#include "engine/engine.h"

/* How long a failing rank keeps flushing its abort notices to the peers. */
static const double STRATA_ABORT_FLUSH_S = 0.2;

static uint8_t *ref_ptr(const strata_operation *op, strata_bufref ref) {
  return op->bufs[ref.buf] + ref.offset;
}

/* The communicator's transports, the one that watches every peer first. Returns how many. */
static int transports(strata_comm *comm, strata_transport *out[STRATA_NET_MAX_TRANSPORTS]) {
  int count = comm->have_net ? comm->net.ntransports : 0;
  for (int i = 0; i < count; i++) out[i] = comm->net.all[i];
  return count;
}

/* May the engine write where `ref` points? The receive buffer and scratch are ours for the
 * operation; the send buffer only when it is the receive buffer (in place). */
static int ref_writable(const strata_operation *op, strata_bufref ref, uint64_t bytes) {
  if (ref.buf == STRATA_BUF_SCRATCH) return 1;
  const uint8_t *p = op->bufs[ref.buf] + ref.offset, *recv = op->bufs[STRATA_BUF_RECV];
  return p >= recv && p + bytes <= recv + op->buf_bytes[STRATA_BUF_RECV];
}

/* Encode a send's source into its wire slot. The sender keeps what the peers get (decoded back
 * into the source where the engine may write), so every rank ends with the same values. */
static void encode_send(strata_operation *op, const strata_step *step, uint8_t *wire) {
  size_t n = step->bytes / sizeof(float);
  float *src = (float *)(void *)ref_ptr(op, step->src);
  strata_compress_encode(op->codec, src, n, wire);
  if (ref_writable(op, step->src, step->bytes)) strata_compress_decode(op->codec, wire, n, src);
}

static void on_xfer_done(strata_xfer *x) {
  strata_operation *op = x->user;
  op->completed[op->ncompleted++] = (uint32_t)(x - op->xfers);
}

static void post_transfer(strata_comm *comm, strata_operation *op, uint32_t index) {
  const strata_step *step = &op->sched.steps[index];
  strata_transport *t = comm->net.peer[step->peer];
  strata_xfer *x = &op->xfers[index];
  memset(x, 0, sizeof *x);
  x->peer = step->peer;
  if (op->args.coll == STRATA_COLL_RECV) /* its number among the peer's messages taken */
    op->tag |= (comm->p2p_recv_seq[step->peer]++ & STRATA_TAG_SEQ_MASK) << STRATA_TAG_SEQ_SHIFT;
  x->tag = op->tag;
  x->bytes = step->bytes;
  x->elem_size = op->elem_size;
  x->done = on_xfer_done;
  x->user = op;
  int status;
  op->state[index] = STRATA_STEP_POSTED;
  if (op->codec != STRATA_COMPRESS_NONE) {
    /* the transfer moves the step's encoded slot; the peer decodes on arrival */
    x->buf = op->wire + op->wire_off[index];
    x->bytes = strata_compress_wire_bytes(op->codec, step->bytes / sizeof(float));
    x->elem_size = 1;
  }
  if (step->kind == STRATA_STEP_SEND) {
    if (op->codec != STRATA_COMPRESS_NONE)
      encode_send(op, step, x->buf);
    else
      x->buf = ref_ptr(op, step->src);
    comm->stats.messages_sent++;
    comm->stats.data_bytes_sent += step->bytes;
    comm->stats.wire_bytes_sent += x->bytes;
    if (comm->site_of_rank && comm->site_of_rank[step->peer] != comm->site_of_rank[comm->rank])
      comm->stats.wan_bytes_sent += x->bytes;
    status = t->ops->post_send(t, x);
  } else {
    if (op->codec == STRATA_COMPRESS_NONE) { /* (compressed: x->buf is the encoded slot) */
      if (step->kind == STRATA_STEP_RECV_REDUCE && t->fuses_reduce) {
        x->reduce = op->reduce;
        x->reduce_src = ref_ptr(op, step->src);
        x->reduce_dst = ref_ptr(op, step->dst);
      } else {
        x->buf = ref_ptr(op, step->kind == STRATA_STEP_RECV ? step->dst : step->staging);
      }
    }
    status = t->ops->post_recv(t, x);
  }
  if (status != STRATA_OK) strata_engine_fail(comm, status, 1);
}

/* May `e`, the head of `peer`'s receive queue, go to the transport? Not while a receive from
 * any source posted before it waits for its message (engine.h), unless `e` is a collective's and
 * the peer's next message is there and is a collective's too, which that receive never takes. */
static int recv_may_post(strata_comm *comm, int peer, const strata_post_entry *e) {
  const strata_operation *any = comm->any_head;
  if (!any || any->submit_no >= e->op->submit_no) return 1;
  if (e->op->coll_seq == UINT64_MAX) return 0;
  strata_transport *t = comm->net.peer[peer];
  uint64_t tag, bytes;
  return t->ops->probe && t->ops->probe(t, peer, &tag, &bytes) && !(tag & STRATA_TAG_P2P);
}

static void drain_queue(strata_comm *comm, strata_post_queue *queue, int peer, int receives) {
  while (queue->head && !atomic_load(&comm->error)) {
    strata_post_entry *e = queue->head;
    if (e->op->state[e->step] != STRATA_STEP_READY) return;
    if (receives && !recv_may_post(comm, peer, e)) return;
    queue->head = e->next;
    if (!queue->head) queue->tail = NULL;
    post_transfer(comm, e->op, e->step);
  }
}

static int is_transfer(uint8_t kind) {
  return kind == STRATA_STEP_SEND || kind == STRATA_STEP_RECV || kind == STRATA_STEP_RECV_REDUCE;
}

/* A local step (COPY, REDUCE) longer than this runs a slice per progress pass, between the
 * transports' turns, instead of all at once: it holds the thread that also feeds the sockets and
 * answers the peers (a broadcast root's 256 MiB copy takes tens of milliseconds at memory-copy
 * speed, its TCP streams unfed meanwhile). A multiple of every element size. */
enum { STRATA_LOCAL_SLICE_BYTES = 1 << 20 };

/* Bytes [off, off + n) of a local step. Copies never overlap unless equal (schedule.h). */
static void local_run(strata_operation *op, const strata_step *step, uint64_t off, uint64_t n) {
  if (n == 0) return;
  if (step->kind == STRATA_STEP_COPY) {
    uint8_t *src = ref_ptr(op, step->src), *dst = ref_ptr(op, step->dst);
    if (src != dst) memmove(dst + off, src + off, n);
  } else {
    op->reduce(ref_ptr(op, step->dst) + off, ref_ptr(op, step->src) + off,
               ref_ptr(op, step->src2) + off, n / op->elem_size);
  }
}

static void queue_push(strata_post_queue *q, strata_post_entry *e) {
  e->next = NULL;
  if (q->tail)
    q->tail->next = e;
  else
    q->head = e;
  q->tail = e;
}

/* Run a local step now (or queue a long one for local_progress), or mark a transfer ready and
 * post what its peer queue allows. Returns 1 if the step completed on the spot. */
static int step_start(strata_comm *comm, strata_operation *op, uint32_t index) {
  const strata_step *step = &op->sched.steps[index];
  if (step->kind == STRATA_STEP_COPY || step->kind == STRATA_STEP_REDUCE) {
    if (step->bytes <= STRATA_LOCAL_SLICE_BYTES || !comm->have_net) {
      local_run(op, step, 0, step->bytes);
      return 1;
    }
    op->state[index] = STRATA_STEP_POSTED;
    op->xfers[index].offset = 0;
    op->entries[index].op = op;
    op->entries[index].step = index;
    queue_push(&comm->local_queue, &op->entries[index]);
    return 0;
  }
  op->state[index] = STRATA_STEP_READY;
  if (step->peer == STRATA_ANY_SOURCE) return 0; /* queued once bound (bind_any_source) */
  if (step->kind == STRATA_STEP_SEND)
    drain_queue(comm, &comm->send_queues[step->peer], step->peer, 0);
  else
    drain_queue(comm, &comm->recv_queues[step->peer], step->peer, 1);
  return 0;
}

/* Step `index` finished: release its dependents, running local steps as they become ready. */
static void step_complete(strata_comm *comm, strata_operation *op, uint32_t index) {
  uint32_t top = 0;
  op->ready[top++] = index;
  while (top > 0 && !atomic_load(&comm->error)) {
    uint32_t done = op->ready[--top];
    op->state[done] = STRATA_STEP_DONE;
    op->steps_left--;
    for (uint32_t k = op->dep_index[done]; k < op->dep_index[done + 1]; k++) {
      uint32_t next = op->dependents[k];
      if (--op->deps_left[next] == 0 && step_start(comm, op, next)) op->ready[top++] = next;
    }
  }
}

/* The schedule's requantize_result: RECV through one more encode and decode, in one piece, as the
 * fold's final send encodes it. */
static int requantize_result(strata_operation *op) {
  size_t n = op->args.count;
  if (n == 0 || !op->args.recvbuf) return STRATA_OK;
  uint8_t *wire = malloc(strata_compress_wire_bytes(op->codec, n));
  if (!wire) return STRATA_ERR_NO_MEMORY;
  strata_compress_encode(op->codec, op->args.recvbuf, n, wire);
  strata_compress_decode(op->codec, wire, n, op->args.recvbuf);
  free(wire);
  return STRATA_OK;
}

/* cfg.elastic: a failed in-place reduction leaves its input as it was; a successful one's input is
 * kept by the communicator, for a shrink that finds the others failed it. Called once the
 * transports write no more into the buffer (engine_fail finishes operations after its flush). */
static void elastic_settle(strata_comm *comm, strata_operation *op, int status) {
  if (!op->backup) return;
  if (status != STRATA_OK) {
    memcpy(op->backup_dst, op->backup, op->backup_bytes);
    free(op->backup);
  } else {
    free(comm->last_input);
    comm->undo_ready = 0;
    comm->last_input = op->backup;
    comm->last_input_dst = op->backup_dst;
    comm->last_input_bytes = op->backup_bytes;
  }
  op->backup = NULL;
}

static void operation_finish(strata_comm *comm, strata_operation *op, int status) {
  if (status == STRATA_OK && op->sched.requantize_result &&
      op->args.coll == STRATA_COLL_ALLREDUCE && strata_compress_is_lossy(op->codec))
    status = requantize_result(op);
  if (status == STRATA_OK && op->avg_finish) {
    void *out = op->args.recvbuf;
    size_t count = op->args.count;
    if (op->args.coll == STRATA_COLL_REDUCE && comm->rank != op->args.root) out = NULL;
    if (out && count) strata_reduce_avg_finish(out, count, op->args.dtype, comm->nranks);
  }
  if (status == STRATA_OK && op->coll_seq != UINT64_MAX && comm->test_fail_next) {
    status = comm->test_fail_next;
    comm->test_fail_next = 0;
  }
  op->status = status;
  if (status == STRATA_OK && op->source_out) *op->source_out = op->source;
  if (op->coll_seq != UINT64_MAX && status == STRATA_OK) comm->colls_ok++;
  elastic_settle(comm, op, status);
  /* unlink from the active list */
  strata_operation **link = &comm->active_head, *prev = NULL;
  while (*link && *link != op) {
    prev = *link;
    link = &(*link)->next_active;
  }
  if (*link) {
    *link = op->next_active;
    if (comm->active_tail == op) comm->active_tail = prev;
    comm->active_count--;
  }
  op->next_active = NULL;
  atomic_store(&op->done, 1);
}

void strata_engine_test_fail_next(strata_comm *comm, int status) {
  comm->test_fail_next = status;
}

/* A collective's tag holds its index in the communicator's lineage (api.c, operation_tag): a
 * mismatch between two collectives of different indices is two ranks at different steps. */
static void lineage_mismatch(const strata_comm *comm, const strata_operation *op, int peer,
                             const strata_xfer *x) {
  uint64_t mine = (x->tag >> STRATA_TAG_SEQ_SHIFT) & STRATA_TAG_SEQ_MASK,
           theirs = (x->got_tag >> STRATA_TAG_SEQ_SHIFT) & STRATA_TAG_SEQ_MASK;
  if ((x->tag & STRATA_TAG_P2P) || (x->got_tag & STRATA_TAG_P2P)) return;
  if (mine == theirs) {
    /* the same collective in the lineage, called differently: a root is the usual culprit */
    if (!strata_engine_is_rooted(op->args.coll)) return;
    for (int root = 0; root < comm->nranks; root++) {
      if (root == op->args.root ||
          strata_engine_signature_hash(op, root) != (x->got_tag & 0xffffff))
        continue;
      STRATA_LOG(STRATA_LOG_ERROR, comm->rank,
                 "STRATA_ERR_MISMATCH: rank %d called this %s with root %d, this rank with root "
                 "%d",
                 peer, strata_coll_name(op->args.coll), root, op->args.root);
      return;
    }
    return;
  }
  STRATA_LOG(STRATA_LOG_ERROR, comm->rank,
             "STRATA_ERR_MISMATCH: this rank's collective is #%llu of the communicator's lineage, "
             "rank %d's is #%llu: after a shrink, survivors that had finished different numbers "
             "of collectives are retrying different steps (agree after each step, "
             "strata_comm_agree; docs/elastic.md)",
             (unsigned long long)mine, peer, (unsigned long long)theirs);
}

/* Process recorded transfer completions. Returns 1 if anything happened. */
static int process_completions(strata_comm *comm) {
  int activity = 0;
  strata_operation *op = comm->active_head;
  while (op && !atomic_load(&comm->error)) {
    strata_operation *next = op->next_active;
    /* in completion order: an earlier, more precise error (a mismatch) wins over a later one */
    for (uint32_t c = 0; c < op->ncompleted && !atomic_load(&comm->error); c++) {
      uint32_t index = op->completed[c];
      const strata_step *step = &op->sched.steps[index];
      strata_xfer *x = &op->xfers[index];
      activity = 1;
      if (x->status != STRATA_OK) {
        STRATA_LOG(STRATA_LOG_WARN, comm->rank, "%s with rank %d failed: %s",
                   step->kind == STRATA_STEP_SEND ? "send" : "receive", step->peer,
                   strata_strerror(x->status));
        if (x->status == STRATA_ERR_MISMATCH) lineage_mismatch(comm, op, step->peer, x);
        strata_engine_fail(comm, x->status, 1);
        return 1;
      }
      if (op->codec != STRATA_COMPRESS_NONE && step->kind != STRATA_STEP_SEND) {
        const uint8_t *wire = op->wire + op->wire_off[index];
        size_t n = step->bytes / sizeof(float);
        if (step->kind == STRATA_STEP_RECV)
          strata_compress_decode(op->codec, wire, n, (float *)(void *)ref_ptr(op, step->dst));
        else if (n)
          strata_compress_decode_reduce(op->codec, wire, n,
                                        (const float *)(void *)ref_ptr(op, step->src),
                                        (float *)(void *)ref_ptr(op, step->dst), op->reduce);
      } else if (step->kind == STRATA_STEP_RECV_REDUCE && !x->reduce && step->bytes)
        op->reduce(ref_ptr(op, step->dst), ref_ptr(op, step->src), ref_ptr(op, step->staging),
                   step->bytes / op->elem_size);
      step_complete(comm, op, index);
    }
    op->ncompleted = 0;
    if (op->steps_left == 0 && !atomic_load(&op->done) && !atomic_load(&comm->error)) {
      operation_finish(comm, op, STRATA_OK);
      activity = 1;
    }
    op = next;
  }
  return activity;
}

/* One slice of the oldest queued local step; completes it (and its operation) at its end.
 * Returns 1 if it ran anything. */
static int local_progress(strata_comm *comm) {
  strata_post_entry *e = comm->local_queue.head;
  if (!e || atomic_load(&comm->error)) return 0;
  strata_operation *op = e->op;
  const strata_step *step = &op->sched.steps[e->step];
  strata_xfer *x = &op->xfers[e->step];
  uint64_t n = step->bytes - x->offset;
  if (n > STRATA_LOCAL_SLICE_BYTES) n = STRATA_LOCAL_SLICE_BYTES;
  local_run(op, step, x->offset, n);
  x->offset += n;
  if (x->offset < step->bytes) return 1;
  comm->local_queue.head = e->next;
  if (!comm->local_queue.head) comm->local_queue.tail = NULL;
  step_complete(comm, op, e->step);
  if (op->steps_left == 0 && !atomic_load(&op->done) && !atomic_load(&comm->error))
    operation_finish(comm, op, STRATA_OK);
  return 1;
}

/* Is some collective numbered below `op_seq` still running here? */
static int earlier_collective_active(const strata_comm *comm, uint64_t op_seq) {
  for (const strata_operation *op = comm->active_head; op; op = op->next_active)
    if (op->coll_seq < op_seq) return 1;
  return 0;
}

/* The first collective this rank has not finished: what an abort from here concerns. */
static uint64_t first_unfinished_collective(const strata_comm *comm) {
  uint64_t first = comm->coll_seq;
  for (const strata_operation *op = comm->active_head; op; op = op->next_active)
    if (op->coll_seq < first) first = op->coll_seq;
  return first;
}

/* A peer aborted from operation S on. Operations before S were finished by that peer, so their
 * data is on its way: let them finish here too, refuse new calls, and fail once they are done
 * (the timeout still bounds the wait). */
static void check_remote_abort(strata_comm *comm) {
  strata_transport *ts[STRATA_NET_MAX_TRANSPORTS];
  int count = transports(comm, ts);
  for (int i = 0; i < count; i++) {
    strata_transport *t = ts[i];
    if (t && t->remote_abort_status) {
      if (earlier_collective_active(comm, t->remote_abort_op_seq)) {
        int expected = 0;
        atomic_compare_exchange_strong(&comm->doomed, &expected, t->remote_abort_status);
        continue;
      }
      STRATA_LOG(STRATA_LOG_WARN, comm->rank, "rank %d aborted the communicator: %s",
                 t->remote_abort_peer, strata_strerror(t->remote_abort_status));
      /* pass it on: a peer that hears of the failure only through our exit would take it for a
       * loss */
      strata_engine_fail(comm, t->remote_abort_status, 1);
      return;
    }
  }
}

/* The peer the oldest unfinished operation waits on: its first receive handed to a transport and
 * not complete, else its first transfer queued or posted; -1 when none (a local step). */
static int awaited_peer(const strata_comm *comm) {
  const strata_operation *op = comm->active_head;
  if (!op) return -1;
  int fallback = -1;
  for (uint32_t i = 0; i < op->sched.nsteps; i++) {
    const strata_step *step = &op->sched.steps[i];
    if (!is_transfer(step->kind)) continue;
    if (op->state[i] == STRATA_STEP_POSTED && step->kind != STRATA_STEP_SEND) return step->peer;
    if (fallback < 0 && (op->state[i] == STRATA_STEP_POSTED || op->state[i] == STRATA_STEP_READY))
      fallback = step->peer;
  }
  return fallback;
}

/* The peer a receive from any source can be bound to now, or -1: the first, in turn, whose
 * receives posted before `op` have all gone to the transport and whose next message no receive
 * takes is there and is a point-to-point one (engine.h). */
static int any_source_peer(strata_comm *comm, const strata_operation *op) {
  int n = comm->nranks;
  for (int i = 0; i < n; i++) {
    int peer = (comm->any_next_peer + i) % n;
    const strata_post_queue *q = &comm->recv_queues[peer];
    strata_transport *t = comm->net.peer[peer];
    uint64_t tag, bytes;
    if (peer == comm->rank || !t || !t->ops->probe) continue;
    if (q->head && q->head->op->submit_no < op->submit_no) continue;
    if (!t->ops->probe(t, peer, &tag, &bytes) || !(tag & STRATA_TAG_P2P)) continue;
    comm->any_next_peer = (peer + 1) % n;
    return peer;
  }
  return -1;
}

/* Bind the waiting receives from any source that can be, oldest first, each to the front of its
 * peer's receive queue, then post what the receive queues allow now. Returns 1 if one was bound.
 */
static int bind_any_source(strata_comm *comm) {
  int bound = 0;
  strata_operation *op;
  while ((op = comm->any_head) && !atomic_load(&comm->error)) {
    int peer = any_source_peer(comm, op);
    if (peer < 0) break;
    comm->any_head = op->next_any;
    if (!comm->any_head) comm->any_tail = NULL;
    op->next_any = NULL;
    op->source = peer;
    strata_post_queue *q = &comm->recv_queues[peer];
    for (uint32_t i = 0; i < op->sched.nsteps; i++) {
      strata_step *step = &op->sched.steps[i];
      if (step->peer != STRATA_ANY_SOURCE) continue;
      step->peer = peer;
      strata_post_entry *e = &op->entries[i];
      e->op = op;
      e->step = i;
      e->next = q->head;
      q->head = e;
      if (!q->tail) q->tail = e;
    }
    drain_queue(comm, q, peer, 1); /* now, so the next one may take this peer's next message */
    bound = 1;
  }
  for (int peer = 0; peer < comm->nranks && !atomic_load(&comm->error); peer++)
    if (peer != comm->rank) drain_queue(comm, &comm->recv_queues[peer], peer, 1);
  return bound;
}

/* One pass: drive every transport, process completions, check the timeout.
 * Returns 1 if anything completed. */
static int engine_progress(strata_comm *comm) {
  if (atomic_load(&comm->error)) return 0;
  if (atomic_load(&comm->revoke_requested)) {
    strata_engine_fail(comm, STRATA_ERR_REVOKED, 1);
    return 1;
  }
  strata_transport *ts[STRATA_NET_MAX_TRANSPORTS];
  int count = transports(comm, ts);
  for (int i = 0; i < count; i++) {
    strata_transport *t = ts[i];
    if (!t) continue;
    int failed_peer = -1;
    int status = t->ops->progress(t, &failed_peer);
    if (status != STRATA_OK) {
      STRATA_LOG(STRATA_LOG_WARN, comm->rank, "transport %s: rank %d: %s", t->ops->name,
                 failed_peer, strata_strerror(status));
      /* a recorded completion (a mismatch) or an abort the peer sent before leaving says more
       * than the loss itself */
      process_completions(comm);
      check_remote_abort(comm);
      strata_engine_fail(comm, status, 1);
      return 1;
    }
  }
  check_remote_abort(comm);
  if (atomic_load(&comm->error)) return 1;
  int activity = process_completions(comm);
  if (comm->any_head) activity |= bind_any_source(comm);
  activity |= local_progress(comm);
  double now = strata_now_s();
  if (activity || !comm->active_head) {
    comm->last_progress_s = now;
  } else if (comm->cfg.op_timeout_s > 0 && now - comm->last_progress_s > comm->cfg.op_timeout_s) {
    /* every peer still beats (the transports would have failed it otherwise): one is late */
    int peer = awaited_peer(comm);
    if (comm->any_head && comm->any_head == comm->active_head)
      STRATA_LOG(STRATA_LOG_ERROR, comm->rank,
                 "no progress for %.1f s waiting for a message from any rank (STRATA_OP_TIMEOUT)",
                 comm->cfg.op_timeout_s);
    else if (peer >= 0)
      STRATA_LOG(STRATA_LOG_ERROR, comm->rank,
                 "operation %llu: no progress for %.1f s waiting for rank %d, which is alive "
                 "but has not joined it (STRATA_OP_TIMEOUT)",
                 (unsigned long long)comm->active_head->coll_seq, comm->cfg.op_timeout_s, peer);
    else
      STRATA_LOG(STRATA_LOG_ERROR, comm->rank, "no progress for %.1f s (STRATA_OP_TIMEOUT)",
                 comm->cfg.op_timeout_s);
    strata_engine_fail(comm, STRATA_ERR_TIMEOUT, 1);
    return 1;
  }
  return activity;
}

/* Waiting without wasting the cores other ranks need. Tiers, by time without any completion:
 * spin on progress (lowest latency when every rank has a core; after the first microsecond each
 * poll also yields, so a peer that the scheduler put on our core runs at once instead of waiting
 * for our time slice to end; a rank alone on its core loses nothing), then give the core away
 * between polls (ranks sharing cores), then block in the transports for up to a millisecond. */
enum { STRATA_IDLE_SPIN_NS = 30000, STRATA_IDLE_YIELD_NS = 2000000 };

typedef struct idle_state {
  double since_s;
} idle_state;

static void engine_idle(strata_comm *comm, idle_state *idle) {
  if (!comm->have_net) return;
  double now = strata_now_s();
  if (idle->since_s == 0) idle->since_s = now;
  double idle_ns = (now - idle->since_s) * 1e9;
  /* a spinning rank would hold the core a peer needs to answer us */
  if (idle_ns < STRATA_IDLE_SPIN_NS && !comm->oversubscribed) {
    if (idle_ns > 1000) sched_yield();
    return;
  }
  strata_net_wait(&comm->net, idle_ns < STRATA_IDLE_YIELD_NS ? 0 : 1);
}

void strata_engine_fail(strata_comm *comm, int status, int tell_peers) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&comm->error, &expected, status)) return;
  STRATA_LOG(STRATA_LOG_ERROR, comm->rank, "communicator failed: %s (%s)", strata_err_name(status),
             strata_strerror(status));
  if (tell_peers && comm->have_net) {
    strata_transport *ts[STRATA_NET_MAX_TRANSPORTS];
    int count = transports(comm, ts);
    uint64_t op_seq = first_unfinished_collective(comm);
    for (int peer = 0; peer < comm->nranks; peer++) {
      if (peer == comm->rank) continue;
      for (int i = 0; i < count; i++)
        if (ts[i] && ts[i]->ops->send_abort) ts[i]->ops->send_abort(ts[i], peer, status, op_seq);
    }
    /* Give the notices a moment to leave; operations are still alive, so transfers the
     * transports finish meanwhile write only into valid memory. */
    strata_net_flush(&comm->net, STRATA_ABORT_FLUSH_S);
  }
  while (comm->active_head) operation_finish(comm, comm->active_head, status);
  for (int peer = 0; comm->send_queues && peer < comm->nranks; peer++) {
    comm->send_queues[peer].head = comm->send_queues[peer].tail = NULL;
    comm->recv_queues[peer].head = comm->recv_queues[peer].tail = NULL;
  }
  comm->local_queue.head = comm->local_queue.tail = NULL;
  comm->any_head = comm->any_tail = NULL;
  /* the transports forget the finished operations' transfers; liveness goes on (keepalive) */
  if (comm->have_net) strata_net_abandon(&comm->net);
  pthread_cond_broadcast(&comm->cond);
}

/* Activate `op`: queue its transfers behind earlier operations', start its ready steps. */
int strata_engine_submit(strata_comm *comm, strata_operation *op) {
  if (atomic_load(&comm->revoke_requested) && !atomic_load(&comm->error))
    strata_engine_fail(comm, STRATA_ERR_REVOKED, 1);
  int error = atomic_load(&comm->error);
  if (error) {
    op->status = error;
    atomic_store(&op->done, 1);
    return error;
  }
  const strata_schedule *s = &op->sched;
  op->steps_left = s->nsteps;
  if (comm->active_tail)
    comm->active_tail->next_active = op;
  else
    comm->active_head = op;
  comm->active_tail = op;
  comm->active_count++;
  if (comm->active_count == 1) comm->last_progress_s = strata_now_s();
  op->submit_no = ++comm->submitted;
  if (op->args.coll == STRATA_COLL_RECV && op->args.root == STRATA_ANY_SOURCE) {
    op->next_any = NULL;
    if (comm->any_tail)
      comm->any_tail->next_any = op;
    else
      comm->any_head = op;
    comm->any_tail = op;
  }
  for (uint32_t i = 0; i < s->nsteps; i++) {
    const strata_step *step = &s->steps[i];
    if (!is_transfer(step->kind) || step->peer == STRATA_ANY_SOURCE) continue;
    strata_post_queue *q = step->kind == STRATA_STEP_SEND ? &comm->send_queues[step->peer]
                                                          : &comm->recv_queues[step->peer];
    strata_post_entry *e = &op->entries[i];
    e->op = op;
    e->step = i;
    queue_push(q, e);
  }
  /* Transfers first, then local steps: a root's copy of its own buffer (broadcast, allgather,
   * ...) runs on this thread while the peers already pull what was posted, instead of before it
   * (run first, the copy and the peers' pulls would take turns). Transfers still reach
   * their peer queues in step order, whatever order the local steps run in. */
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t i = 0; i < s->nsteps && !atomic_load(&comm->error); i++)
      if (op->deps_left[i] == 0 && op->state[i] == STRATA_STEP_WAITING &&
          is_transfer(s->steps[i].kind) == (pass == 0) && step_start(comm, op, i))
        step_complete(comm, op, i);
  if (op->steps_left == 0 && !atomic_load(&op->done) && !atomic_load(&comm->error))
    operation_finish(comm, op, STRATA_OK);
  return STRATA_OK;
}

int strata_engine_poll(strata_comm *comm) {
  return engine_progress(comm);
}

/* Drive progress until `op` is done. Called with the lock held and comm->waiters counted. */
int strata_engine_wait(strata_comm *comm, strata_operation *op) {
  idle_state idle = {0};
  while (!atomic_load(&op->done)) {
    if (engine_progress(comm))
      idle.since_s = 0;
    else
      engine_idle(comm, &idle);
  }
  return op->status;
}

void *strata_engine_thread_main(void *arg) {
  strata_comm *comm = arg;
  pthread_mutex_lock(&comm->lock);
  idle_state idle = {0};
  while (!comm->thread_stop) {
    if (comm->active_count == 0 || atomic_load(&comm->waiters) > 0 || atomic_load(&comm->error)) {
      /* Idle, the transports still beat to the peers and listen for theirs (tcp.c: liveness),
       * so a peer that dies between operations is noticed, and ours is not taken for dead while
       * the application computes. A waiter drives progress itself. */
      if (comm->active_count == 0 && atomic_load(&comm->waiters) == 0 && comm->have_net) {
        if (atomic_load(&comm->error))
          strata_net_keepalive(&comm->net); /* what survivors agree on (elastic.c) */
        else
          engine_progress(comm);
      }
      struct timespec deadline;
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_nsec += 10 * 1000 * 1000;
      if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&comm->cond, &comm->lock, &deadline);
      idle.since_s = 0;
      /* Whoever woke us (a nonblocking post) is likely to post again or wait at once: let it run
       * first. Woken onto its core, this thread would preempt it and pull a whole receive
       * before the caller could post the matching send, so the peer waiting on that send
       * would start late. */
      pthread_mutex_unlock(&comm->lock);
      sched_yield();
      pthread_mutex_lock(&comm->lock);
      continue;
    }
    if (engine_progress(comm))
      idle.since_s = 0;
    else
      engine_idle(comm, &idle);
    /* let a caller that wants to wait take over */
    pthread_mutex_unlock(&comm->lock);
    pthread_mutex_lock(&comm->lock);
  }
  pthread_mutex_unlock(&comm->lock);
  return NULL;
}

/* ---- scratch ---------------------------------------------------------------------------------
 * A schedule's scratch (staging slots, partial sums in flight) comes from a small cache per
 * communicator and goes back to it when the operation is freed, so repeated calls reuse pages
 * that are already mapped. Allocated per call, the first calls of every size would map fresh
 * pages: glibc's heap grows by the scratch size on each of them before its thresholds adapt, and
 * every page of it faults on first touch, so those calls run several times slower than the rest.
 * The cache keeps the STRATA_SCRATCH_CACHE largest buffers given back (memory held: at most that
 * many of the largest scratch the communicator's calls needed, until destroy), and a take picks the
 * smallest that fits. */
void *strata_scratch_take(strata_comm *comm, uint64_t bytes, uint64_t *cap) {
  int best = -1;
  pthread_mutex_lock(&comm->scratch_lock);
  for (int i = 0; i < STRATA_SCRATCH_CACHE; i++)
    if (comm->scratch_cache[i] && comm->scratch_cache_bytes[i] >= bytes &&
        (best < 0 || comm->scratch_cache_bytes[i] < comm->scratch_cache_bytes[best]))
      best = i;
  void *buf = NULL;
  if (best >= 0) {
    buf = comm->scratch_cache[best];
    *cap = comm->scratch_cache_bytes[best];
    comm->scratch_cache[best] = NULL;
    comm->scratch_cache_bytes[best] = 0;
  }
  pthread_mutex_unlock(&comm->scratch_lock);
  if (buf) return buf;
  *cap = (bytes + 63) & ~(uint64_t)63;
  return aligned_alloc(64, *cap);
}

void strata_scratch_give(strata_comm *comm, void *buf, uint64_t cap) {
  if (!buf) return;
  int slot = -1; /* an empty slot, else the smallest cached buffer if smaller than this one */
  pthread_mutex_lock(&comm->scratch_lock);
  for (int i = 0; i < STRATA_SCRATCH_CACHE && slot < 0; i++)
    if (!comm->scratch_cache[i]) slot = i;
  for (int i = 0; i < STRATA_SCRATCH_CACHE && slot < 0; i++)
    if (comm->scratch_cache_bytes[i] < cap) slot = i;
  void *drop = buf;
  if (slot >= 0) {
    drop = comm->scratch_cache[slot];
    comm->scratch_cache[slot] = buf;
    comm->scratch_cache_bytes[slot] = cap;
  }
  pthread_mutex_unlock(&comm->scratch_lock);
  free(drop);
}

void strata_scratch_release(strata_comm *comm) {
  for (int i = 0; i < STRATA_SCRATCH_CACHE; i++) {
    free(comm->scratch_cache[i]);
    comm->scratch_cache[i] = NULL;
    comm->scratch_cache_bytes[i] = 0;
  }
}

void strata_operation_free(strata_operation *op) {
  if (!op) return;
  strata_schedule_free(&op->sched);
  if (op->scratch) strata_scratch_give(op->comm, op->scratch, op->scratch_cap);
  free(op->wire);
  free(op->wire_off);
  free(op->backup);
  free(op->deps_left); /* one block holds every per-step array (operation_alloc in api.c) */
  free(op);
}
