// SPDX-License-Identifier: Apache-2.0
/*
 * ring.c — pipelined ring and chain algorithms: allreduce (reduce-scatter + allgather),
 * reduce-scatter, allgather, and the chain broadcast and reduce.
 *
 * Pipelining. The data is cut into rounds so that no message exceeds chunk_bytes; a round is a
 * full pass of the algorithm over its slice. Rounds are independent, so the builder interleaves
 * them (strata_coll_order): round ρ's step t is emitted at "time" ρ + t, which lets the next
 * round's first messages flow while the previous round is still reducing. The allreduce emits
 * its allgather steps STRATA_COLL_RING_AG_LAG rounds later still (coll_internal.h says why).
 * Every rank emits in the same order, so the k-th message on each link matches, and each step
 * depends only on steps emitted earlier, so the schedule cannot deadlock even if every transfer
 * needs both ends posted.
 *
 * Memory per collective (B = count * elem bytes, "seg" = a slice's n-th part):
 *  - allreduce: partial sums accumulate in RECV (in place: RECV is SEND); incoming data lands in
 *    a pool of staging slots. In place the allgather must not overwrite RECV[seg r] before the
 *    first send of seg r (read from SEND = RECV) left: that is an explicit dependency.
 *  - reduce_scatter: SEND is read-only (n blocks), RECV holds one block; partial sums travel
 *    through scratch slots, two per round (one being sent, one being received), for at most
 *    STRATA_COLL_RING_WINDOW rounds in flight, and a round's first send waits for the round
 *    STRATA_COLL_SEND_AHEAD before it to land here (sends are not posted far ahead of what the
 *    receiver takes). In place means RECV == SEND + rank*B (NCCL): SEND
 *    block `rank` is read only by the final reduction, which writes the same bytes; or RECV ==
 *    SEND (the other form strata.h allows, STRATA_IN_PLACE_ALIAS): the final reduction of a
 *    round then waits for the round's reads of SEND block 0.
 *  - allgather: in place means SEND == RECV + rank*B; otherwise the own block is copied first.
 *    A round starts (its first send) when the round STRATA_COLL_SEND_AHEAD before it has landed
 *    here, so a large allgather keeps a bounded number of chunks in flight.
 *  - broadcast (chain root → root+1 → ...): root sends from SEND, others receive into RECV and
 *    forward it; in place at the root means SEND == RECV. The root (and the reduce's tail) hands
 *    the transport a chunk when the one STRATA_COLL_SEND_AHEAD before it has left.
 *  - reduce (chain root+n-1 → ... → root): non-roots have no RECV, partial sums use scratch
 *    slots; in place at the root means SEND == RECV.
 * Builders never write SEND.
 */
#include <stdlib.h>

#include "coll/coll_internal.h"

static int copy_unless_in_place(const strata_sched_params *p, strata_schedule *s, uint64_t src_off,
                                uint64_t dst_off, uint64_t bytes) {
  if (p->in_place) return -1;
  return strata_sched_copy(s, strata_ref(STRATA_BUF_SEND, src_off),
                           strata_ref(STRATA_BUF_RECV, dst_off), bytes, NULL, 0);
}

static uint64_t ceil_div(uint64_t a, uint64_t b) {
  return a / b + (a % b ? 1 : 0);
}

/* ---- allreduce ------------------------------------------------------------------------------ */

typedef struct ring_geometry {
  uint64_t count, rounds, elem;
  int n;
} ring_geometry;

/* Byte offset and length of segment `seg` of round `round`. */
static void ring_segment(const ring_geometry *g, uint64_t round, int seg, uint64_t *off,
                         uint64_t *bytes) {
  uint64_t slice_first, slice_len, seg_first, seg_len;
  strata_split(g->count, g->rounds, round, &slice_first, &slice_len);
  strata_split(slice_len, (uint64_t)g->n, (uint64_t)seg, &seg_first, &seg_len);
  *off = (slice_first + seg_first) * g->elem;
  *bytes = seg_len * g->elem;
}

typedef struct ring_allreduce {
  const strata_sched_params *p;
  strata_schedule *s;
  ring_geometry g;
  strata_slot_pool staging;
  int left, right;
  uint32_t steps;      /* per round: n-1 reduce-scatter steps, then n-1 allgather steps */
  int32_t *sent, *got; /* [round][t]: step index of the send / receive */
} ring_allreduce;

/* Reduce-scatter step t of round rd: pass the partial sum of segment r-t on, fold segment r-t-1
 * into RECV. */
static void ring_rs_step(ring_allreduce *ra, uint32_t rd, uint32_t t) {
  const int n = ra->g.n, r = ra->p->rank;
  int32_t *sent = &ra->sent[(uint64_t)rd * ra->steps], *got = &ra->got[(uint64_t)rd * ra->steps];
  uint64_t off, bytes;
  strata_deps d;
  strata_deps_clear(&d);
  if (t > 0) strata_deps_add(&d, got[t - 1]);
  ring_segment(&ra->g, rd, strata_mod((int64_t)r - t, n), &off, &bytes);
  sent[t] = strata_sched_send(
      ra->s, ra->right, strata_ref(t ? STRATA_BUF_RECV : STRATA_BUF_SEND, off), bytes, d.idx, d.n);
  ring_segment(&ra->g, rd, strata_mod((int64_t)r - t - 1, n), &off, &bytes);
  uint32_t slot = strata_pool_take(&ra->staging);
  strata_deps_clear(&d);
  strata_deps_add(&d, ra->staging.last[slot]);
  got[t] = strata_sched_recv_reduce(ra->s, ra->left, strata_ref(STRATA_BUF_SEND, off),
                                    strata_ref(STRATA_BUF_RECV, off),
                                    strata_pool_ref(&ra->staging, slot), bytes, d.idx, d.n);
  ra->staging.last[slot] = got[t];
}

/* Allgather step j (= t - (n-1)) of round rd: pass segment r+1-j on, receive segment r-j. */
static void ring_ag_step(ring_allreduce *ra, uint32_t rd, uint32_t t) {
  const int n = ra->g.n, r = ra->p->rank;
  const uint32_t j = t - (uint32_t)(n - 1);
  int32_t *sent = &ra->sent[(uint64_t)rd * ra->steps], *got = &ra->got[(uint64_t)rd * ra->steps];
  uint64_t off, bytes;
  strata_deps d;
  strata_deps_clear(&d);
  strata_deps_add(&d, got[t - 1]);
  ring_segment(&ra->g, rd, strata_mod((int64_t)r + 1 - j, n), &off, &bytes);
  sent[t] =
      strata_sched_send(ra->s, ra->right, strata_ref(STRATA_BUF_RECV, off), bytes, d.idx, d.n);
  ring_segment(&ra->g, rd, strata_mod((int64_t)r - j, n), &off, &bytes);
  strata_deps_clear(&d);
  /* reduce-scatter step j sent this segment from RECV (j > 0) or from SEND (j == 0: the same
   * bytes only in place) */
  if (j > 0 || ra->p->in_place) strata_deps_add(&d, sent[j]);
  got[t] = strata_sched_recv(ra->s, ra->left, strata_ref(STRATA_BUF_RECV, off), bytes, d.idx, d.n);
}

int strata_build_allreduce_ring(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  if (n == 1) {
    copy_unless_in_place(p, s, 0, 0, p->count * p->elem_size);
    return strata_schedule_status(s);
  }
  ring_allreduce ra = {.p = p, .s = s, .left = strata_mod(r - 1, n), .right = strata_mod(r + 1, n)};
  ra.g = (ring_geometry){p->count, strata_coll_rounds(p, p->count, (uint64_t)n), p->elem_size, n};
  ra.steps = 2u * (uint32_t)(n - 1);
  uint64_t seg_max_bytes = ceil_div(ceil_div(ra.g.count, ra.g.rounds), (uint64_t)n) * ra.g.elem;
  s->scratch_bytes = strata_pool_init(&ra.staging, 0, seg_max_bytes, STRATA_COLL_SLOTS);
  const uint64_t total = ra.g.rounds * ra.steps;
  strata_round_step *order = strata_coll_order_lag((uint32_t)ra.g.rounds, ra.steps, 0, 0,
                                                   (uint32_t)(n - 1), STRATA_COLL_RING_AG_LAG);
  ra.sent = malloc(total * sizeof *ra.sent);
  ra.got = malloc(total * sizeof *ra.got);
  if (order && ra.sent && ra.got) {
    for (uint64_t i = 0; i < total; i++) {
      if (order[i].step < (uint32_t)(n - 1))
        ring_rs_step(&ra, order[i].round, order[i].step);
      else
        ring_ag_step(&ra, order[i].round, order[i].step);
    }
  }
  int status = order && ra.sent && ra.got ? strata_schedule_status(s) : STRATA_ERR_NO_MEMORY;
  free(order), free(ra.sent), free(ra.got);
  return status;
}

/* ---- reduce-scatter ------------------------------------------------------------------------ */

int strata_build_reduce_scatter_ring(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  const uint64_t block_bytes = p->count * p->elem_size;
  if (n == 1) {
    copy_unless_in_place(p, s, 0, 0, block_bytes);
    return strata_schedule_status(s);
  }
  const uint64_t rounds = strata_coll_rounds(p, p->count, 1);
  const uint32_t window =
      rounds < STRATA_COLL_RING_WINDOW ? (uint32_t)rounds : STRATA_COLL_RING_WINDOW;
  const uint32_t steps = (uint32_t)(n - 1);
  strata_slot_pool slots; /* slot 2*(round % window) + (step % 2) */
  s->scratch_bytes =
      strata_pool_init(&slots, 0, ceil_div(p->count, rounds) * p->elem_size, 2 * window);
  strata_round_step *order = strata_coll_order((uint32_t)rounds, steps, window, steps);
  int32_t *got = malloc(rounds * steps * sizeof *got);
  int32_t *rreads0 =
      malloc(rounds * sizeof *rreads0); /* per round: the step reading SEND block 0 */
  if (!order || !got || !rreads0) {
    free(order), free(got), free(rreads0);
    return STRATA_ERR_NO_MEMORY;
  }
  for (uint64_t rd = 0; rd < rounds; rd++) rreads0[rd] = -1;
  const int left = strata_mod(r - 1, n), right = strata_mod(r + 1, n);
  for (uint64_t i = 0; i < rounds * steps; i++) {
    const uint32_t rd = order[i].round, t = order[i].step;
    int32_t *rgot = &got[(uint64_t)rd * steps];
    uint64_t first, len;
    strata_split(p->count, rounds, rd, &first, &len);
    const uint64_t off = first * p->elem_size, bytes = len * p->elem_size;
    const uint64_t block_send = (uint64_t)strata_mod((int64_t)r - t - 1, n);
    const uint64_t block_recv = (uint64_t)strata_mod((int64_t)r - t - 2, n);
    const uint32_t slot_prev = 2 * (rd % window) + ((t + 1) % 2), slot = 2 * (rd % window) + t % 2;
    strata_deps d;
    strata_deps_clear(&d);
    strata_bufref src = strata_ref(STRATA_BUF_SEND, block_send * block_bytes + off);
    if (t > 0) {
      strata_deps_add(&d, rgot[t - 1]);
      src = strata_pool_ref(&slots, slot_prev);
    } else if (rd >= STRATA_COLL_SEND_AHEAD) { /* emitted: the order holds `window` <= AHEAD */
      strata_deps_add(&d, got[(uint64_t)(rd - STRATA_COLL_SEND_AHEAD) * steps + steps - 1]);
    }
    int sent = strata_sched_send(s, right, src, bytes, d.idx, d.n);
    if (t > 0) slots.last[slot_prev] = sent;
    if (t == 0 && block_send == 0) rreads0[rd] = sent;
    strata_deps_clear(&d);
    strata_deps_add(&d, slots.last[slot]);
    const int final = t == steps - 1;
    /* Only the alias form puts RECV on SEND block 0. Otherwise (out of place, or RECV == SEND
     * block `rank`) waiting would hold the final pull until the peer had taken this round's send,
     * leaving the rank idle for a large share of the call. */
    if (final && p->in_place == STRATA_IN_PLACE_ALIAS) strata_deps_add(&d, rreads0[rd]);
    strata_bufref dst = final ? strata_ref(STRATA_BUF_RECV, off) : strata_pool_ref(&slots, slot);
    rgot[t] = strata_sched_recv_reduce(s, left,
                                       strata_ref(STRATA_BUF_SEND, block_recv * block_bytes + off),
                                       dst, strata_pool_ref(&slots, slot), bytes, d.idx, d.n);
    slots.last[slot] = rgot[t];
    if (!final && block_recv == 0) rreads0[rd] = rgot[t];
  }
  free(order), free(got), free(rreads0);
  return strata_schedule_status(s);
}

/* ---- allgather ----------------------------------------------------------------------------- */

int strata_build_allgather_ring(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  const uint64_t block_bytes = p->count * p->elem_size;
  copy_unless_in_place(p, s, 0, (uint64_t)r * block_bytes, block_bytes);
  if (n == 1) return strata_schedule_status(s);
  const uint64_t rounds = strata_coll_rounds(p, p->count, 1);
  const uint32_t steps = (uint32_t)(n - 1);
  const uint32_t window = STRATA_COLL_SEND_AHEAD;
  /* a round is emitted after every step of the round `window` before it (its first send
   * depends on that round's last receive, so the dependency points backwards) */
  strata_round_step *order = strata_coll_order((uint32_t)rounds, steps, window, steps);
  int32_t *got = malloc(rounds * steps * sizeof *got);
  if (!order || !got) {
    free(order), free(got);
    return STRATA_ERR_NO_MEMORY;
  }
  const int left = strata_mod(r - 1, n), right = strata_mod(r + 1, n);
  for (uint64_t i = 0; i < rounds * steps; i++) {
    const uint32_t rd = order[i].round, t = order[i].step;
    int32_t *rgot = &got[(uint64_t)rd * steps];
    uint64_t first, len;
    strata_split(p->count, rounds, rd, &first, &len);
    const uint64_t off = first * p->elem_size, bytes = len * p->elem_size;
    const uint64_t block_send = (uint64_t)strata_mod((int64_t)r - t, n);
    const uint64_t block_recv = (uint64_t)strata_mod((int64_t)r - t - 1, n);
    strata_deps d;
    strata_deps_clear(&d);
    strata_bufref src = strata_ref(STRATA_BUF_SEND, off); /* in place: the same bytes */
    if (t > 0) {
      strata_deps_add(&d, rgot[t - 1]);
      src = strata_ref(STRATA_BUF_RECV, block_send * block_bytes + off);
    } else if (rd >= window) { /* at most `window` rounds in flight */
      strata_deps_add(&d, got[(uint64_t)(rd - window) * steps + steps - 1]);
    }
    strata_sched_send(s, right, src, bytes, d.idx, d.n);
    rgot[t] = strata_sched_recv(
        s, left, strata_ref(STRATA_BUF_RECV, block_recv * block_bytes + off), bytes, NULL, 0);
  }
  free(order), free(got);
  return strata_schedule_status(s);
}

/* ---- chain broadcast and reduce -------------------------------------------------------------- */

/* The first rank of a chain (broadcast root, reduce tail) sends round rd's chunk from SEND once
 * the chunk STRATA_COLL_SEND_AHEAD rounds before it has left: at most that many chunks handed to
 * the transport at once. sent[] holds the earlier rounds' send steps. */
static int32_t chain_head_send(strata_schedule *s, int peer, uint64_t off, uint64_t bytes,
                               const int32_t *sent, uint64_t rd) {
  strata_deps d;
  strata_deps_clear(&d);
  if (rd >= STRATA_COLL_SEND_AHEAD) strata_deps_add(&d, sent[rd - STRATA_COLL_SEND_AHEAD]);
  return strata_sched_send(s, peer, strata_ref(STRATA_BUF_SEND, off), bytes, d.idx, d.n);
}

int strata_build_broadcast_ring(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank, vr = strata_mod(r - p->root, n);
  const uint64_t bytes_total = p->count * p->elem_size;
  if (vr == 0) copy_unless_in_place(p, s, 0, 0, bytes_total);
  if (n == 1) return strata_schedule_status(s);
  const uint64_t rounds = strata_coll_rounds(p, p->count, 1);
  const int next = strata_mod(r + 1, n), prev = strata_mod(r - 1, n);
  int32_t *root_sent = vr == 0 ? malloc(rounds * sizeof *root_sent) : NULL;
  if (vr == 0 && !root_sent) return STRATA_ERR_NO_MEMORY;
  for (uint64_t rd = 0; rd < rounds; rd++) {
    uint64_t first, len;
    strata_split(p->count, rounds, rd, &first, &len);
    const uint64_t off = first * p->elem_size, bytes = len * p->elem_size;
    if (vr == 0) {
      root_sent[rd] = chain_head_send(s, next, off, bytes, root_sent, rd);
      continue;
    }
    uint32_t got =
        (uint32_t)strata_sched_recv(s, prev, strata_ref(STRATA_BUF_RECV, off), bytes, NULL, 0);
    if (vr < n - 1 && strata_schedule_status(s) == STRATA_OK)
      strata_sched_send(s, next, strata_ref(STRATA_BUF_RECV, off), bytes, &got, 1);
  }
  free(root_sent);
  return strata_schedule_status(s);
}

int strata_build_reduce_ring(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank, vr = strata_mod(r - p->root, n);
  if (n == 1) {
    copy_unless_in_place(p, s, 0, 0, p->count * p->elem_size);
    return strata_schedule_status(s);
  }
  const uint64_t rounds = strata_coll_rounds(p, p->count, 1);
  const int toward_root = strata_mod(r - 1, n), from_tail = strata_mod(r + 1, n);
  strata_slot_pool slots; /* root: staging; middle ranks: staging that also holds the sum */
  s->scratch_bytes = strata_pool_init(&slots, 0, ceil_div(p->count, rounds) * p->elem_size,
                                      vr == n - 1 ? 0 : STRATA_COLL_SLOTS);
  int32_t *tail_sent = vr == n - 1 ? malloc(rounds * sizeof *tail_sent) : NULL;
  if (vr == n - 1 && !tail_sent) return STRATA_ERR_NO_MEMORY;
  for (uint64_t rd = 0; rd < rounds; rd++) {
    uint64_t first, len;
    strata_split(p->count, rounds, rd, &first, &len);
    const uint64_t off = first * p->elem_size, bytes = len * p->elem_size;
    if (vr == n - 1) {
      tail_sent[rd] = chain_head_send(s, toward_root, off, bytes, tail_sent, rd);
      continue;
    }
    uint32_t slot = strata_pool_take(&slots);
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, slots.last[slot]);
    strata_bufref dst = vr == 0 ? strata_ref(STRATA_BUF_RECV, off) : strata_pool_ref(&slots, slot);
    int got = strata_sched_recv_reduce(s, from_tail, strata_ref(STRATA_BUF_SEND, off), dst,
                                       strata_pool_ref(&slots, slot), bytes, d.idx, d.n);
    slots.last[slot] = got;
    if (vr == 0 || got < 0) continue;
    uint32_t dep = (uint32_t)got;
    slots.last[slot] = strata_sched_send(s, toward_root, dst, bytes, &dep, 1);
  }
  free(tail_sent);
  return strata_schedule_status(s);
}
