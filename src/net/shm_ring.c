// SPDX-License-Identifier: Apache-2.0
/*
 * shm_ring.c — moving messages through the rings of the shared-memory transport: records, inline
 * payloads streamed through the ring, the send/receive queues, progress() and wait().
 *
 * What it is for. Ranks that share a host exchange messages through memory instead of the
 * loopback TCP stack: a few microseconds for a tiny message, and close to memcpy bandwidth for a
 * large one, with the receive-side reduction fused into the read of the peer's data. The layout
 * of segments and records is in shm_wire.h; large messages are pulled in a single copy by
 * shm_pull.c; shm_setup.c builds the segments and watches peers.
 *
 * Sending. A send writes its record into our channel in the peer's segment. INLINE payloads
 * (below SHM_INLINE_MAX_BYTES, and every message when the peer cannot read our memory) follow in
 * the ring; the producer publishes head every SHM_PUBLISH_BYTES and the consumer frees space as
 * it copies out, so no message has to fit in the ring. A CMA send writes only its record and
 * completes when the receiver's cma_acked reaches the record's number. Each direction moves at
 * most SHM_CMA_SLICE_BYTES per progress() call, so other peers (and the other direction of a
 * simultaneous exchange) keep moving.
 *
 * Matching. Receives from a peer are served strictly in posting order: the head receive takes the
 * next record. A record whose tag or byte count differs completes the receive with
 * STRATA_ERR_MISMATCH, writing nothing; its payload is skipped (INLINE) or acknowledged unread
 * (CMA), so the stream stays in step. With no receive posted, a record stays in the ring:
 * back-pressure, never an unbounded queue.
 *
 * Waiting. wait() spins for SHM_WAIT_SPIN_S (a partner on the other core answers within it), then
 * calls sched_yield() in a loop, then sleeps. Yielding early matters: when two ranks share a core
 * (more ranks than cores, or the scheduler placing both on one), every microsecond spent spinning
 * is taken from the time slice the partner needs to answer, so a long spin makes each round trip
 * cost a whole spin. For the same reason wait(0), the engine's idle poll when TCP peers must be
 * watched too, yields once when there is nothing to do (cheap when the core is otherwise idle).
 *
 * Invariants. Each side keeps a private copy of the counter it owns and a cached copy of the
 * other side's, reloaded (acquire) only when the cache says it is blocked. done() callbacks run
 * only inside progress(), after the transfer left every queue, so a callback may post new
 * transfers.
 *
 * Must never: write past a receive's buffer, block (wait() is the only sleeping call), or trust
 * a record without checking its sequence number.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "net/shm_internal.h"

static inline void shm_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Copy into / out of a ring at byte count `pos`, wrapping as needed. */
static void shm_ring_write(uint8_t *ring, uint64_t mask, uint64_t pos, const void *src, size_t n) {
  size_t at = (size_t)(pos & mask), first = mask + 1 - at;
  if (first >= n) {
    memcpy(ring + at, src, n);
  } else {
    memcpy(ring + at, src, first);
    memcpy(ring, (const uint8_t *)src + first, n - first);
  }
}

static void shm_ring_read(const uint8_t *ring, uint64_t mask, uint64_t pos, void *dst, size_t n) {
  size_t at = (size_t)(pos & mask), first = mask + 1 - at;
  if (first >= n) {
    memcpy(dst, ring + at, n);
  } else {
    memcpy(dst, ring + at, first);
    memcpy((uint8_t *)dst + first, ring, n - first);
  }
}

/* ---- sending ---- */

/* Free bytes in the peer's ring, reloading its tail only when the cached one says < want. */
static uint64_t shm_out_space(shm_peer *p, uint64_t want) {
  uint64_t ring = p->out_mask + 1;
  uint64_t free_bytes = ring - (p->out_head - p->out_tail_cached);
  if (free_bytes < want) {
    p->out_tail_cached = atomic_load_explicit(&p->out->tail, memory_order_acquire);
    free_bytes = ring - (p->out_head - p->out_tail_cached);
  }
  return free_bytes;
}

static void shm_publish_head(shm_peer *p) {
  atomic_store_explicit(&p->out->head, p->out_head, memory_order_release);
}

static void shm_write_record(shm_peer *p, strata_xfer *x, uint32_t kind) {
  shm_record r;
  memset(&r, 0, sizeof r);
  r.tag = x->tag;
  r.bytes = x->bytes;
  r.seq = p->send_seq++;
  r.kind = kind;
  if (kind == SHM_KIND_CMA) {
    r.src_addr = (uint64_t)(uintptr_t)x->buf;
    r.cma_number = ++p->cma_sent;
    x->aux = r.cma_number;
    strata_mem_ref ref;
    if (strata_mem_lookup(x->buf, (size_t)x->bytes, &ref)) {
      r.mem_fd = ref.fd;
      r.mem_id = ref.id;
      r.mem_offset = ref.offset;
    }
  }
  memcpy(p->out_ring + (p->out_head & p->out_mask), &r, sizeof r);
  p->out_head += sizeof r;
}

/* Stream the payload of an INLINE send; returns 1 when the message (with padding) is written.
 * At most SHM_CMA_SLICE_BYTES per call (then *more is set), so one stream cannot starve the
 * other peers. */
static int shm_send_stream(shm_peer *p, strata_xfer *x, int *more) {
  uint64_t budget = SHM_CMA_SLICE_BYTES;
  while (x->offset < x->bytes) {
    if (budget == 0) {
      *more = 1;
      return 0;
    }
    uint64_t free_bytes = shm_out_space(p, 1);
    if (free_bytes == 0) return 0;
    uint64_t n = x->bytes - x->offset;
    if (n > free_bytes) n = free_bytes;
    if (n > SHM_PUBLISH_BYTES) n = SHM_PUBLISH_BYTES;
    budget -= n < budget ? n : budget;
    shm_ring_write(p->out_ring, p->out_mask, p->out_head, (const uint8_t *)x->buf + x->offset,
                   (size_t)n);
    p->out_head += n;
    x->offset += n;
    if (x->offset < x->bytes) shm_publish_head(p); /* let the consumer start on it */
  }
  uint64_t pad = shm_align_line(p->out_head) - p->out_head;
  if (pad && shm_out_space(p, pad) < pad) return 0;
  p->out_head += pad;
  return 1;
}

static void shm_send_advance(shm_transport *t, shm_peer *p) {
  uint64_t head_before = p->out_head;
  strata_xfer *x;
  while ((x = p->sends.head)) {
    if (x->state == SEND_FRESH) {
      if (shm_out_space(p, SHM_LINE) < SHM_LINE) break;
      if (p->use_cma && x->bytes >= SHM_INLINE_MAX_BYTES) {
        shm_write_record(p, x, SHM_KIND_CMA);
        shm_queue_pop(&p->sends);
        shm_queue_push(&p->acks, x);
        continue;
      }
      shm_write_record(p, x, SHM_KIND_INLINE);
      x->state = SEND_STREAMING;
      x->offset = 0;
    }
    if (!shm_send_stream(p, x, &t->more_work)) break;
    shm_queue_pop(&p->sends);
    shm_complete(t, x, STRATA_OK);
  }
  if (p->out_head != head_before) shm_publish_head(p);
}

/* CMA sends complete, in order, when the receiver's ack count reaches their number. */
static void shm_ack_advance(shm_transport *t, shm_peer *p) {
  if (!p->acks.head) return;
  uint64_t acked = atomic_load_explicit(&p->out->cma_acked, memory_order_acquire);
  while (p->acks.head && p->acks.head->aux <= acked)
    shm_complete(t, shm_queue_pop(&p->acks), STRATA_OK);
}

/* ---- receiving ---- */

static uint64_t shm_in_available(shm_peer *p, uint64_t want_pos) {
  if (p->in_head_cached < want_pos)
    p->in_head_cached = atomic_load_explicit(&p->in->head, memory_order_acquire);
  return p->in_head_cached > p->in_tail ? p->in_head_cached - p->in_tail : 0;
}

static void shm_publish_tail(shm_peer *p) {
  atomic_store_explicit(&p->in->tail, p->in_tail, memory_order_release);
}

static void shm_cma_ack(shm_peer *p) {
  p->cma_done++;
  atomic_store_explicit(&p->in->cma_acked, p->cma_done, memory_order_release);
}

/* Skip the payload of a mismatched INLINE message. Returns 1 when nothing is left to skip. */
static int shm_discard_advance(shm_peer *p) {
  while (p->discard_bytes) {
    uint64_t avail = shm_in_available(p, p->in_tail + 1);
    if (!avail) return 0;
    uint64_t n = avail < p->discard_bytes ? avail : p->discard_bytes;
    p->in_tail += n;
    p->discard_bytes -= n;
    shm_publish_tail(p);
  }
  return 1;
}

/* Read the next record in place, taking nothing: 1 = *r is the next record, 0 = none yet,
 * -1 = the peer broke the ring's rules (failed here). */
static int shm_record_peek(shm_transport *t, shm_peer *p, shm_record *r) {
  uint64_t pos = shm_align_line(p->in_tail);
  if (p->in_head_cached < pos + SHM_LINE)
    p->in_head_cached = atomic_load_explicit(&p->in->head, memory_order_acquire);
  if (p->in_head_cached < pos + SHM_LINE) return 0;
  if (p->in_head_cached - p->in_tail > p->in_mask + 1) {
    STRATA_LOG(STRATA_LOG_ERROR, t->rank, "shm: peer %d moved its ring head out of bounds",
               p->rank);
    shm_peer_fail(t, p, STRATA_ERR_PROTOCOL);
    return -1;
  }
  memcpy(r, p->in_ring + (pos & p->in_mask), sizeof *r);
  if (r->seq != p->recv_seq || (r->kind != SHM_KIND_INLINE && r->kind != SHM_KIND_CMA) ||
      (r->kind == SHM_KIND_CMA && r->cma_number != p->cma_done + 1)) {
    STRATA_LOG(STRATA_LOG_ERROR, t->rank,
               "shm: corrupt record from peer %d (seq %llu, expected %llu, kind %u)", p->rank,
               (unsigned long long)r->seq, (unsigned long long)p->recv_seq, r->kind);
    shm_peer_fail(t, p, STRATA_ERR_PROTOCOL);
    return -1;
  }
  return 1;
}

/* ops->probe: the next record, when no receive from the peer is posted (with receives posted,
 * the next record is theirs and the one after them is not looked for: the answer is "not yet"). */
int shm_probe(strata_transport *base, int peer, uint64_t *tag, uint64_t *bytes) {
  shm_transport *t = (shm_transport *)base;
  shm_peer *p = shm_peer_of(t, peer);
  shm_record r;
  if (!p || p->lost || p->recvs.head || !shm_discard_advance(p) || shm_record_peek(t, p, &r) != 1)
    return 0;
  *tag = r.tag;
  *bytes = r.bytes;
  return 1;
}

/* Take the next record for the head receive x. Returns 1 if x moved on (or completed). */
static int shm_recv_take_record(shm_transport *t, shm_peer *p, strata_xfer *x) {
  shm_record r;
  int peeked = shm_record_peek(t, p, &r);
  if (peeked <= 0) return peeked < 0;
  uint64_t pos = shm_align_line(p->in_tail);
  p->recv_seq++;
  p->in_tail = pos + SHM_LINE;
  if (r.tag != x->tag || r.bytes != x->bytes) {
    STRATA_LOG(STRATA_LOG_DEBUG, t->rank,
               "shm: mismatch from peer %d: tag %llx bytes %llu, expected tag %llx bytes %llu",
               p->rank, (unsigned long long)r.tag, (unsigned long long)r.bytes,
               (unsigned long long)x->tag, (unsigned long long)x->bytes);
    if (r.kind == SHM_KIND_INLINE)
      p->discard_bytes = r.bytes;
    else
      shm_cma_ack(p);
    shm_queue_pop(&p->recvs);
    x->got_tag = r.tag;
    shm_complete(t, x, STRATA_ERR_MISMATCH);
    return 1;
  }
  x->offset = 0;
  const uint8_t *mapped;
  if (r.kind == SHM_KIND_CMA && (mapped = shm_region_payload(t, p, &r))) {
    x->state = RECV_MAPPED;
    x->aux = (uint64_t)(uintptr_t)mapped;
  } else if (r.kind == SHM_KIND_CMA) {
    x->state = RECV_CMA;
    x->aux = r.src_addr;
  } else {
    x->state = RECV_INLINE;
  }
  return 1;
}

/* Consume up to `n` ring bytes at in_tail into x (copy or fused reduce). n is whole elements
 * for reduces, except when one element straddles the ring's end (gathered through tmp). */
static void shm_recv_consume(shm_peer *p, strata_xfer *x, uint64_t n) {
  uint64_t mask = p->in_mask;
  if (!x->reduce) {
    shm_ring_read(p->in_ring, mask, p->in_tail, (uint8_t *)x->buf + x->offset, (size_t)n);
  } else {
    uint64_t elem = x->elem_size, at = p->in_tail & mask;
    const uint8_t *src = (const uint8_t *)x->reduce_src + x->offset;
    uint8_t *dst = (uint8_t *)x->reduce_dst + x->offset;
    if (at + n <= mask + 1) {
      x->reduce(dst, src, p->in_ring + at, (size_t)(n / elem));
    } else {
      uint8_t tmp[SHM_MAX_ELEM_BYTES];
      shm_ring_read(p->in_ring, mask, p->in_tail, tmp, (size_t)elem);
      x->reduce(dst, src, tmp, 1);
      n = elem;
    }
  }
  p->in_tail += n;
  x->offset += n;
}

static int shm_recv_inline(shm_peer *p, strata_xfer *x, int *more) {
  uint64_t budget = SHM_CMA_SLICE_BYTES; /* as in shm_send_stream */
  while (x->offset < x->bytes) {
    if (budget == 0) {
      *more = 1;
      break;
    }
    uint64_t want = x->bytes - x->offset;
    uint64_t avail = shm_in_available(p, p->in_tail + want);
    uint64_t n = avail < want ? avail : want;
    if (n > SHM_PUBLISH_BYTES) n = SHM_PUBLISH_BYTES;
    if (x->reduce) { /* whole elements, contiguous, or one element straddling the end */
      uint64_t elem = x->elem_size, to_end = p->in_mask + 1 - (p->in_tail & p->in_mask);
      if (to_end < elem) {
        n = n >= elem ? elem : 0;
      } else {
        if (n > to_end) n = to_end;
        n -= n % elem;
      }
    }
    if (n == 0) break;
    budget -= n < budget ? n : budget;
    shm_recv_consume(p, x, n);
    shm_publish_tail(p);
  }
  return x->offset == x->bytes;
}

static void shm_recv_advance(shm_transport *t, shm_peer *p) {
  uint64_t tail_before = p->in_tail;
  strata_xfer *x;
  while (!p->lost && (x = p->recvs.head)) {
    if (x->state == RECV_WAITING) {
      if (!shm_discard_advance(p) || !shm_recv_take_record(t, p, x)) break;
      if (x != p->recvs.head || p->lost) continue; /* completed with a mismatch */
    }
    if (x->state == RECV_INLINE) {
      if (!shm_recv_inline(p, x, &t->more_work)) break;
    } else {
      /* never pull from an aborted peer: its buffers may be gone already */
      if (atomic_load_explicit(&p->in->abort_status, memory_order_relaxed)) break;
      int rc = shm_recv_cma_slice(t, p, x);
      if (rc != STRATA_OK) {
        shm_peer_fail(t, p, rc);
        break;
      }
      if (x->offset < x->bytes) break; /* bounded work per call: next peer's turn */
      shm_cma_ack(p);
    }
    shm_queue_pop(&p->recvs);
    shm_complete(t, x, STRATA_OK);
    /* A large receive ends this peer's turn: its completion reaches the engine only when
     * progress() returns, and what depends on it (typically the send the peer waits for next)
     * must not wait behind the pull of the following message. */
    if (x->bytes >= SHM_INLINE_MAX_BYTES) break;
  }
  if (p->in_tail != tail_before) shm_publish_tail(p);
}

/* ---- the transport ops ---- */

static int shm_check_xfer(shm_transport *t, const strata_xfer *x, int is_recv, shm_peer **out) {
  if (!x) return STRATA_ERR_INVALID_ARG;
  shm_peer *p = shm_peer_of(t, x->peer);
  if (!p) return STRATA_ERR_INVALID_ARG;
  if (is_recv && x->reduce) {
    if (x->elem_size == 0 || x->elem_size > SHM_MAX_ELEM_BYTES || x->bytes % x->elem_size)
      return STRATA_ERR_INVALID_ARG;
    if (x->bytes && (!x->reduce_src || !x->reduce_dst)) return STRATA_ERR_INVALID_ARG;
  } else if (x->bytes && !x->buf) {
    return STRATA_ERR_INVALID_ARG;
  }
  if (p->lost) return p->lost;
  *out = p;
  return STRATA_OK;
}

static void shm_xfer_reset(strata_xfer *x) {
  x->status = STRATA_OK;
  x->next = NULL;
  x->offset = 0;
  x->aux = 0;
  x->state = 0;
}

int shm_post_send(strata_transport *base, strata_xfer *x) {
  shm_transport *t = (shm_transport *)base;
  shm_peer *p = NULL;
  int rc = shm_check_xfer(t, x, 0, &p);
  if (rc != STRATA_OK) return rc;
  shm_xfer_reset(x);
  shm_queue_push(&p->sends, x);
  if (p->sends.head == x) shm_send_advance(t, p); /* eager: a small send leaves at once */
  return STRATA_OK;
}

int shm_post_recv(strata_transport *base, strata_xfer *x) {
  shm_transport *t = (shm_transport *)base;
  shm_peer *p = NULL;
  int rc = shm_check_xfer(t, x, 1, &p);
  if (rc != STRATA_OK) return rc;
  shm_xfer_reset(x);
  shm_queue_push(&p->recvs, x);
  return STRATA_OK;
}

/* One pass over a peer's queues; 1 if anything moved. */
static int shm_peer_advance(shm_transport *t, shm_peer *p) {
  uint64_t events_before = t->events;
  uint64_t out_head = p->out_head, in_tail = p->in_tail;
  shm_send_advance(t, p);
  shm_ack_advance(t, p);
  shm_recv_advance(t, p);
  return t->events != events_before || p->out_head != out_head || p->in_tail != in_tail;
}

int shm_progress(strata_transport *base, int *failed_peer) {
  shm_transport *t = (shm_transport *)base;
  int result = STRATA_OK;
  double now = 0;
  t->more_work = 0;
  for (int i = 0; i < t->npeers; i++) {
    shm_peer *p = &t->peers[i];
    if (p->lost || !shm_peer_busy(p)) {
      shm_check_abort(t, p);
      continue;
    }
    int moved = shm_peer_advance(t, p);
    /* a peer that finished with us and left is no failure: only ask while we still wait on it.
     * A peer may write its last messages and exit between our look at the ring and our look at
     * its process, so once it is dead the ring is read again: it fails only when what it left
     * gives nothing more (its writes happened before its exit, so they are visible now). */
    if (!p->lost && !moved && shm_peer_busy(p) && shm_peer_found_dead(p, &now)) {
      if (shm_peer_advance(t, p))
        p->next_liveness_s = 0; /* still draining: ask again when it stops */
      else if (!p->lost && shm_peer_busy(p))
        shm_peer_fail(t, p, STRATA_ERR_PEER_LOST);
    }
    shm_check_abort(t, p);
    if (p->lost && result == STRATA_OK) {
      result = p->lost;
      if (failed_peer) *failed_peer = p->rank;
    }
  }
  strata_xfer *x;
  while ((x = shm_queue_pop(&t->completed))) {
    if (x->done) x->done(x);
  }
  return result;
}

/* Is there anything progress() could do now? (cheap loads, no side effects) */
static int shm_has_activity(shm_transport *t) {
  if (t->completed.head || t->more_work) return 1;
  for (int i = 0; i < t->npeers; i++) {
    shm_peer *p = &t->peers[i];
    if (!p->abort_seen && atomic_load_explicit(&p->in->abort_status, memory_order_relaxed))
      return 1;
    if (p->lost) continue;
    strata_xfer *r = p->recvs.head;
    if (r) {
      uint64_t head = atomic_load_explicit(&p->in->head, memory_order_relaxed);
      uint64_t want = r->state == RECV_WAITING && !p->discard_bytes
                          ? shm_align_line(p->in_tail) + SHM_LINE
                          : p->in_tail + 1;
      if (r->state == RECV_CMA || head >= want) return 1;
    }
    if (p->sends.head &&
        atomic_load_explicit(&p->out->tail, memory_order_relaxed) != p->out_tail_cached)
      return 1;
    if (p->acks.head &&
        atomic_load_explicit(&p->out->cma_acked, memory_order_relaxed) >= p->acks.head->aux)
      return 1;
  }
  return 0;
}

/* Spin briefly (a message usually arrives within microseconds), then yield, then sleep: several
 * ranks per core must not starve the one they wait for. */
void shm_wait(strata_transport *base, int timeout_ms) {
  shm_transport *t = (shm_transport *)base;
  if (shm_has_activity(t)) return;
  if (timeout_ms <= 0) { /* a poll: still let a rank that shares our core run */
    sched_yield();
    return;
  }
  double start = strata_now_s();
  double limit = timeout_ms * 1e-3 < SHM_WAIT_MAX_S ? timeout_ms * 1e-3 : SHM_WAIT_MAX_S;
  for (;;) {
    for (int i = 0; i < 64; i++) shm_cpu_relax();
    if (shm_has_activity(t)) return;
    double waited = strata_now_s() - start;
    if (waited >= limit) return;
    if (waited < SHM_WAIT_SPIN_S) continue;
    if (waited < SHM_WAIT_YIELD_S) {
      sched_yield();
    } else {
      struct timespec ts = {0, SHM_WAIT_SLEEP_NS};
      nanosleep(&ts, NULL);
    }
  }
}
