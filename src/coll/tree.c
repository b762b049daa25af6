// SPDX-License-Identifier: Apache-2.0
/*
 * tree.c — binomial trees: broadcast, reduce, allreduce (reduce to rank 0, then broadcast),
 * gather and scatter.
 *
 * Ranks are renumbered relative to the root (vr = (rank - root) mod n). In the binomial tree
 * rank vr's parent is vr minus its lowest set bit, and its children are vr + m for every power of
 * two m below that bit (m < n for the root). A subtree rooted at vr covers relative ranks
 * [vr, vr + size) with size = lowest set bit of vr (n for the root), clipped at n.
 *
 * Broadcast, reduce and allreduce are pipelined: the vector is cut into rounds of at most
 * chunk_bytes and each round runs the whole tree; rounds are emitted one after another, so a
 * leaf streams round k+1 while its parent still reduces round k. Gather and scatter move whole
 * subtrees at once (they are chosen for small totals).
 *
 * Memory (B = count * elem bytes):
 *  - broadcast: the root sends from SEND (in place: SEND == RECV) and copies SEND to RECV;
 *    others receive into RECV and forward from it.
 *  - reduce: the root accumulates in RECV (in place: SEND == RECV); other ranks have no RECV and
 *    accumulate in scratch slots; incoming data lands in separate staging slots.
 *  - allreduce: every rank accumulates in RECV; before the broadcast half overwrites RECV, the
 *    send of the partial sum to the parent must have completed (explicit dependency).
 *  - gather: the root receives subtrees straight into RECV (a subtree that wraps past rank n-1
 *    comes as two messages); inner ranks collect their subtree in scratch in relative order.
 *    In place at the root means SEND == RECV + root*B.
 *  - scatter: mirror image; in place at the root means RECV == SEND + root*B.
 * Builders never write SEND.
 */
#include "coll/coll_internal.h"

static int lowest_bit(int v) {
  return v & -v;
}

/* Children in increasing subtree size (the order a reduction receives them). */
static int tree_children(int vr, int n, int *kids) {
  int count = 0;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) break;
    if (vr + mask < n) kids[count++] = vr + mask;
  }
  return count;
}

static int tree_subtree_size(int vr, int n) {
  if (vr == 0) return n;
  int size = lowest_bit(vr);
  return size < n - vr ? size : n - vr;
}

static int real_rank(const strata_sched_params *p, int vr) {
  return strata_mod((int64_t)vr + p->root, p->nranks);
}

static uint64_t tree_rounds(const strata_sched_params *p) {
  return strata_coll_rounds(p, p->count, 1);
}

/* ---- broadcast ------------------------------------------------------------------------------- */

/* One round of a binomial broadcast of bytes at `off`: the root sends from `root_src` after
 * `root_ready`; others receive into RECV after `recv_after`. */
static void bcast_round(const strata_sched_params *p, strata_schedule *s, uint64_t off,
                        uint64_t bytes, strata_buf_id root_src, int root_ready, int recv_after) {
  const int n = p->nranks, vr = strata_mod(p->rank - p->root, n);
  int kids[32], nkids = tree_children(vr, n, kids);
  strata_deps d;
  strata_deps_clear(&d);
  strata_buf_id src = root_src;
  if (vr == 0) {
    strata_deps_add(&d, root_ready);
  } else {
    strata_deps_add(&d, recv_after);
    int got = strata_sched_recv(s, real_rank(p, vr - lowest_bit(vr)),
                                strata_ref(STRATA_BUF_RECV, off), bytes, d.idx, d.n);
    strata_deps_clear(&d);
    strata_deps_add(&d, got);
    src = STRATA_BUF_RECV;
  }
  for (int k = nkids - 1; k >= 0; k--) /* biggest subtree first */
    strata_sched_send(s, real_rank(p, kids[k]), strata_ref(src, off), bytes, d.idx, d.n);
}

int strata_build_broadcast_tree(const strata_sched_params *p, strata_schedule *s) {
  const int vr = strata_mod(p->rank - p->root, p->nranks);
  if (vr == 0 && !p->in_place)
    strata_sched_copy(s, strata_ref(STRATA_BUF_SEND, 0), strata_ref(STRATA_BUF_RECV, 0),
                      p->count * p->elem_size, NULL, 0);
  if (p->nranks == 1) return strata_schedule_status(s);
  const uint64_t rounds = tree_rounds(p);
  for (uint64_t rd = 0; rd < rounds; rd++) {
    uint64_t first, len;
    strata_split(p->count, rounds, rd, &first, &len);
    bcast_round(p, s, first * p->elem_size, len * p->elem_size, STRATA_BUF_SEND, -1, -1);
  }
  return strata_schedule_status(s);
}

/* ---- reduce and allreduce -----------------------------------------------------------------------
 */

typedef struct reduce_state {
  strata_slot_pool staging, acc; /* acc: partial sums of non-roots without RECV */
  int acc_in_recv;               /* accumulate in RECV (root, or allreduce) */
} reduce_state;

/* One round of a binomial reduction toward the root of the bytes at `off`. Returns the step
 * after which the round's sum is complete at the root (or the send to the parent elsewhere). */
static int reduce_round(const strata_sched_params *p, strata_schedule *s, reduce_state *st,
                        uint64_t off, uint64_t bytes) {
  const int n = p->nranks, vr = strata_mod(p->rank - p->root, n);
  int kids[32], nkids = tree_children(vr, n, kids);
  strata_bufref acc = strata_ref(STRATA_BUF_RECV, off), src = strata_ref(STRATA_BUF_SEND, off);
  int acc_slot = -1, last = -1;
  if (nkids > 0 && !st->acc_in_recv) {
    acc_slot = (int)strata_pool_take(&st->acc);
    acc = strata_pool_ref(&st->acc, (uint32_t)acc_slot);
  }
  for (int k = 0; k < nkids; k++) {
    uint32_t slot = strata_pool_take(&st->staging);
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, last);
    strata_deps_add(&d, st->staging.last[slot]);
    if (k == 0 && acc_slot >= 0) strata_deps_add(&d, st->acc.last[acc_slot]);
    last = strata_sched_recv_reduce(s, real_rank(p, kids[k]), src, acc,
                                    strata_pool_ref(&st->staging, slot), bytes, d.idx, d.n);
    st->staging.last[slot] = last;
    src = acc;
  }
  if (vr == 0) {
    if (nkids == 0 && !p->in_place) /* n == 1 */
      last = strata_sched_copy(s, src, acc, bytes, NULL, 0);
    return last;
  }
  strata_deps d;
  strata_deps_clear(&d);
  strata_deps_add(&d, last);
  int sent = strata_sched_send(s, real_rank(p, vr - lowest_bit(vr)), src, bytes, d.idx, d.n);
  if (acc_slot >= 0) st->acc.last[acc_slot] = sent;
  return sent;
}

static uint64_t reduce_state_init(const strata_sched_params *p, reduce_state *st, uint64_t rounds,
                                  int acc_in_recv) {
  uint64_t first, slot_bytes;
  strata_split(p->count, rounds, 0, &first, &slot_bytes); /* round 0 is the longest */
  slot_bytes *= p->elem_size;
  st->acc_in_recv = acc_in_recv;
  uint64_t end = strata_pool_init(&st->staging, 0, slot_bytes, STRATA_COLL_SLOTS);
  return strata_pool_init(&st->acc, end, slot_bytes, acc_in_recv ? 0 : STRATA_COLL_SLOTS);
}

int strata_build_reduce_tree(const strata_sched_params *p, strata_schedule *s) {
  const int vr = strata_mod(p->rank - p->root, p->nranks);
  const uint64_t rounds = tree_rounds(p);
  reduce_state st;
  int kids[32];
  s->scratch_bytes = reduce_state_init(p, &st, rounds, vr == 0);
  if (tree_children(vr, p->nranks, kids) == 0) s->scratch_bytes = 0;
  for (uint64_t rd = 0; rd < rounds; rd++) {
    uint64_t first, len;
    strata_split(p->count, rounds, rd, &first, &len);
    reduce_round(p, s, &st, first * p->elem_size, len * p->elem_size);
  }
  return strata_schedule_status(s);
}

int strata_build_allreduce_tree(const strata_sched_params *p, strata_schedule *s) {
  strata_sched_params tree = *p;
  tree.root = 0; /* reduce to rank 0, broadcast from it */
  const int vr = tree.rank;
  int kids[32];
  const uint64_t rounds = tree_rounds(&tree);
  reduce_state st;
  s->scratch_bytes = reduce_state_init(&tree, &st, rounds, 1);
  for (uint64_t rd = 0; rd < rounds; rd++) {
    uint64_t first, len;
    strata_split(tree.count, rounds, rd, &first, &len);
    const uint64_t off = first * tree.elem_size, bytes = len * tree.elem_size;
    int done = reduce_round(&tree, s, &st, off, bytes);
    if (tree.nranks == 1) continue;
    /* The root's sum is in RECV; elsewhere `done` is the send of the partial sum, which read RECV
     * (inner ranks; leaves in place) or SEND (leaves out of place). Only the former must finish
     * before the broadcast overwrites RECV; a leaf out of place posts its receive at once, so a
     * peer running another collective is noticed rather than waited for. */
    int reads_recv = tree.in_place || tree_children(vr, tree.nranks, kids) > 0;
    bcast_round(&tree, s, off, bytes, STRATA_BUF_RECV, done, reads_recv ? done : -1);
  }
  return strata_schedule_status(s);
}

/* ---- gather and scatter ---------------------------------------------------------------------- */

/* The pieces of relative blocks [vfirst, vfirst + blocks) in absolute block order: one range, or
 * two when it wraps past rank n-1. Returns the number of pieces. */
static int wrap_pieces(const strata_sched_params *p, int vfirst, int blocks, int abs_first[2],
                       int len[2]) {
  int start = real_rank(p, vfirst);
  if (start + blocks <= p->nranks) {
    abs_first[0] = start, len[0] = blocks;
    return 1;
  }
  abs_first[0] = start, len[0] = p->nranks - start;
  abs_first[1] = 0, len[1] = blocks - len[0];
  return 2;
}

int strata_build_gather_tree(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, vr = strata_mod(p->rank - p->root, n);
  const uint64_t block = p->count * p->elem_size;
  int kids[32], nkids = tree_children(vr, n, kids);
  if (vr == 0) {
    if (!p->in_place)
      strata_sched_copy(s, strata_ref(STRATA_BUF_SEND, 0),
                        strata_ref(STRATA_BUF_RECV, (uint64_t)p->rank * block), block, NULL, 0);
    for (int k = 0; k < nkids; k++) {
      int abs_first[2], len[2];
      int pieces = wrap_pieces(p, kids[k], tree_subtree_size(kids[k], n), abs_first, len);
      for (int i = 0; i < pieces; i++)
        strata_sched_recv(s, real_rank(p, kids[k]),
                          strata_ref(STRATA_BUF_RECV, (uint64_t)abs_first[i] * block),
                          (uint64_t)len[i] * block, NULL, 0);
    }
    return strata_schedule_status(s);
  }
  const int size = tree_subtree_size(vr, n), vparent = vr - lowest_bit(vr);
  strata_deps have;
  strata_deps_clear(&have);
  strata_bufref data = strata_ref(STRATA_BUF_SEND, 0);
  if (nkids > 0) { /* collect the subtree in scratch, relative order */
    s->scratch_bytes = (uint64_t)size * block;
    data = strata_ref(STRATA_BUF_SCRATCH, 0);
    strata_deps_add(&have,
                    strata_sched_copy(s, strata_ref(STRATA_BUF_SEND, 0), data, block, NULL, 0));
    for (int k = 0; k < nkids; k++)
      strata_deps_add(
          &have, strata_sched_recv(s, real_rank(p, kids[k]),
                                   strata_ref(STRATA_BUF_SCRATCH, (uint64_t)(kids[k] - vr) * block),
                                   (uint64_t)tree_subtree_size(kids[k], n) * block, NULL, 0));
  }
  int abs_first[2], len[2], pieces = 1;
  len[0] = size;
  if (vparent == 0) pieces = wrap_pieces(p, vr, size, abs_first, len);
  uint64_t off = 0;
  for (int i = 0; i < pieces; i++) {
    strata_bufref src = data;
    src.offset += off;
    strata_sched_send(s, real_rank(p, vparent), src, (uint64_t)len[i] * block, have.idx, have.n);
    off += (uint64_t)len[i] * block;
  }
  return strata_schedule_status(s);
}

int strata_build_scatter_tree(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, vr = strata_mod(p->rank - p->root, n);
  const uint64_t block = p->count * p->elem_size;
  int kids[32], nkids = tree_children(vr, n, kids);
  if (vr == 0) {
    if (!p->in_place)
      strata_sched_copy(s, strata_ref(STRATA_BUF_SEND, (uint64_t)p->rank * block),
                        strata_ref(STRATA_BUF_RECV, 0), block, NULL, 0);
    for (int k = nkids - 1; k >= 0; k--) {
      int abs_first[2], len[2];
      int pieces = wrap_pieces(p, kids[k], tree_subtree_size(kids[k], n), abs_first, len);
      for (int i = 0; i < pieces; i++)
        strata_sched_send(s, real_rank(p, kids[k]),
                          strata_ref(STRATA_BUF_SEND, (uint64_t)abs_first[i] * block),
                          (uint64_t)len[i] * block, NULL, 0);
    }
    return strata_schedule_status(s);
  }
  const int size = tree_subtree_size(vr, n), vparent = vr - lowest_bit(vr);
  strata_bufref data = strata_ref(nkids > 0 ? STRATA_BUF_SCRATCH : STRATA_BUF_RECV, 0);
  if (nkids > 0) s->scratch_bytes = (uint64_t)size * block;
  int abs_first[2], len[2], pieces = 1;
  len[0] = size;
  if (vparent == 0) pieces = wrap_pieces(p, vr, size, abs_first, len);
  strata_deps have;
  strata_deps_clear(&have);
  uint64_t off = 0;
  for (int i = 0; i < pieces; i++) {
    strata_bufref dst = data;
    dst.offset += off;
    strata_deps_add(
        &have, strata_sched_recv(s, real_rank(p, vparent), dst, (uint64_t)len[i] * block, NULL, 0));
    off += (uint64_t)len[i] * block;
  }
  if (nkids == 0) return strata_schedule_status(s);
  strata_sched_copy(s, data, strata_ref(STRATA_BUF_RECV, 0), block, have.idx, have.n);
  for (int k = nkids - 1; k >= 0; k--)
    strata_sched_send(s, real_rank(p, kids[k]),
                      strata_ref(STRATA_BUF_SCRATCH, (uint64_t)(kids[k] - vr) * block),
                      (uint64_t)tree_subtree_size(kids[k], n) * block, have.idx, have.n);
  return strata_schedule_status(s);
}
