// SPDX-License-Identifier: Apache-2.0
/*
 * rhd.c — hypercube algorithms: allreduce by recursive doubling (small messages) or by
 * Rabenseifner's recursive halving + doubling, reduce-scatter by recursive halving, allgather by
 * recursive doubling (power-of-two rank counts) or Bruck (any count), and the dissemination
 * barrier.
 *
 * Non-power-of-two rank counts (allreduce): with p2 the largest power of two <= n and
 * rem = n - p2, ranks 0..2*rem-1 pair up first: each even rank sends its whole input to the odd
 * rank above it and sits out; the odd rank reduces and plays virtual rank r/2. Ranks >= 2*rem
 * play virtual rank r - rem. At the end each odd rank sends the result back down.
 *
 * Memory (B = count * elem bytes):
 *  - allreduce, Rabenseifner: partial sums live in RECV (in place: RECV is SEND); the halves
 *    sent and the halves kept are disjoint, so a step never reads what it overwrites; the
 *    doubling phase receives exactly the ranges sent during halving and depends on those sends.
 *    Scratch: one staging area (B for a folding odd rank, else the largest kept half).
 *  - allreduce, recursive doubling: every step sends the whole vector while receiving the
 *    partner's, so the sum ping-pongs between RECV and two scratch buffers: a step never writes
 *    the buffer its own send is reading. Scratch 3B (staging + two buffers).
 *  - allgather: in place means SEND == RECV + rank*B. Bruck works in a rotated scratch copy
 *    (n*B) and rotates into RECV at the end.
 * Builders never write SEND.
 */
#include "coll/coll_internal.h"

/* Below this message size the allreduce builder uses recursive doubling (lg p messages of the
 * whole vector) rather than halving-doubling (2 lg p messages of shrinking halves): they cost
 * lg p (α + nβ) vs 2 lg p α + 2nβ(p-1)/p, equal near n ≈ α/β ≈ 32 KB on 10 GbE TCP (Thakur,
 * Rabenseifner and Gropp, IJHPCA 2005). */
#define STRATA_RHD_DOUBLING_MAX_BYTES ((uint64_t)32 << 10)

static int largest_pow2_at_most(int n) {
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  return p2;
}

/* The fold of non-power-of-two rank counts. */
typedef struct rhd_fold {
  int p2, rem;
  int vrank;     /* virtual rank in the power-of-two group, -1 if this rank sits out */
  int partner;   /* real rank of the fold partner, -1 if none */
  int fold_rr;   /* odd folding rank: the reduction of the partner's input */
  int fold_sent; /* even folding rank: the send of its input */
} rhd_fold;

static int rhd_real_rank(const rhd_fold *f, int vrank) {
  return vrank < f->rem ? 2 * vrank + 1 : vrank + f->rem;
}

static void rhd_fold_plan(const strata_sched_params *p, rhd_fold *f) {
  f->p2 = largest_pow2_at_most(p->nranks);
  f->rem = p->nranks - f->p2;
  f->partner = -1;
  f->fold_rr = f->fold_sent = -1;
  if (p->rank < 2 * f->rem) {
    f->partner = p->rank ^ 1;
    f->vrank = p->rank % 2 ? p->rank / 2 : -1;
  } else {
    f->vrank = p->rank - f->rem;
  }
}

/* Fold in: even ranks send their input, odd ranks reduce it into RECV using the staging area at
 * scratch offset 0. */
static void rhd_fold_in(const strata_sched_params *p, strata_schedule *s, rhd_fold *f) {
  const uint64_t bytes = p->count * p->elem_size;
  if (f->partner < 0) return;
  if (f->vrank < 0)
    f->fold_sent = strata_sched_send(s, f->partner, strata_ref(STRATA_BUF_SEND, 0), bytes, NULL, 0);
  else
    f->fold_rr = strata_sched_recv_reduce(s, f->partner, strata_ref(STRATA_BUF_SEND, 0),
                                          strata_ref(STRATA_BUF_RECV, 0),
                                          strata_ref(STRATA_BUF_SCRATCH, 0), bytes, NULL, 0);
}

/* Fold out: odd ranks send the result (after `ready`), even ranks receive it. */
static void rhd_fold_out(const strata_sched_params *p, strata_schedule *s, const rhd_fold *f,
                         const strata_deps *ready) {
  const uint64_t bytes = p->count * p->elem_size;
  if (f->partner < 0) return;
  if (f->vrank >= 0) {
    strata_sched_send(s, f->partner, strata_ref(STRATA_BUF_RECV, 0), bytes, ready->idx, ready->n);
  } else {
    strata_deps d;
    strata_deps_clear(&d);
    if (p->in_place) strata_deps_add(&d, f->fold_sent); /* the send read RECV */
    strata_sched_recv(s, f->partner, strata_ref(STRATA_BUF_RECV, 0), bytes, d.idx, d.n);
  }
}

/* ---- allreduce: Rabenseifner ------------------------------------------------------------------
 */

static uint64_t block_first_bytes(const strata_sched_params *p, int p2, int block) {
  uint64_t first, len;
  if (block >= p2) return p->count * p->elem_size;
  strata_split(p->count, (uint64_t)p2, (uint64_t)block, &first, &len);
  return first * p->elem_size;
}

static void allreduce_halving_doubling(const strata_sched_params *p, strata_schedule *s,
                                       rhd_fold *f) {
  const int p2 = f->p2, v = f->vrank;
  int lo = 0, hi = p2, levels = 0;
  int sent_at[32];
  strata_buf_id cur = (f->fold_rr >= 0 || p->in_place) ? STRATA_BUF_RECV : STRATA_BUF_SEND;
  int last = f->fold_rr;
  uint64_t staging = block_first_bytes(p, p2, p2 / 2);
  uint64_t fold_bytes = f->partner >= 0 ? p->count * p->elem_size : 0;
  s->scratch_bytes = staging > fold_bytes ? staging : fold_bytes;
  for (int mask = p2 / 2; mask >= 1; mask /= 2, levels++) {
    const int peer = rhd_real_rank(f, v ^ mask), mid = lo + (hi - lo) / 2;
    int keep_lo = lo, keep_hi = mid, send_lo = mid, send_hi = hi;
    if (v & mask) keep_lo = mid, keep_hi = hi, send_lo = lo, send_hi = mid;
    uint64_t send_off = block_first_bytes(p, p2, send_lo);
    uint64_t keep_off = block_first_bytes(p, p2, keep_lo);
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, last);
    sent_at[levels] = strata_sched_send(s, peer, strata_ref(cur, send_off),
                                        block_first_bytes(p, p2, send_hi) - send_off, d.idx, d.n);
    last = strata_sched_recv_reduce(s, peer, strata_ref(cur, keep_off),
                                    strata_ref(STRATA_BUF_RECV, keep_off),
                                    strata_ref(STRATA_BUF_SCRATCH, 0),
                                    block_first_bytes(p, p2, keep_hi) - keep_off, d.idx, d.n);
    cur = STRATA_BUF_RECV;
    lo = keep_lo, hi = keep_hi;
  }
  strata_deps have; /* everything RECV[lo, hi) depends on */
  strata_deps_clear(&have);
  strata_deps_add(&have, last);
  for (int mask = 1; mask < p2; mask *= 2) {
    const int peer = rhd_real_rank(f, v ^ mask);
    int other_lo = (v & mask) ? lo - mask : hi, other_hi = other_lo + mask;
    uint64_t my_off = block_first_bytes(p, p2, lo), other_off = block_first_bytes(p, p2, other_lo);
    strata_sched_send(s, peer, strata_ref(STRATA_BUF_RECV, my_off),
                      block_first_bytes(p, p2, hi) - my_off, have.idx, have.n);
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, sent_at[--levels]); /* halving sent exactly this range */
    strata_deps_add(&have,
                    strata_sched_recv(s, peer, strata_ref(STRATA_BUF_RECV, other_off),
                                      block_first_bytes(p, p2, other_hi) - other_off, d.idx, d.n));
    if (v & mask)
      lo = other_lo;
    else
      hi = other_hi;
  }
  rhd_fold_out(p, s, f, &have);
}

/* ---- allreduce: recursive doubling ------------------------------------------------------------
 */

static strata_bufref rd_buffer(int which, uint64_t bytes) {
  /* 0 = RECV, 1 = scratch A, 2 = scratch B; scratch offset 0 is the staging area */
  if (which == 0) return strata_ref(STRATA_BUF_RECV, 0);
  return strata_ref(STRATA_BUF_SCRATCH, (uint64_t)which * bytes);
}

static void allreduce_doubling(const strata_sched_params *p, strata_schedule *s, rhd_fold *f) {
  const uint64_t bytes = p->count * p->elem_size;
  int levels = 0, dst[32] = {0};
  while ((1 << levels) < f->p2) levels++;
  s->scratch_bytes = 3 * bytes;
  /* Choose destinations backwards so the last lands in RECV and no step writes its own source. */
  for (int k = levels - 1; k >= 0; k--) dst[k] = (k == levels - 1 || dst[k + 1] != 0) ? 0 : 1;
  const int cur_is_recv = p->in_place || f->fold_rr >= 0;
  int final_copy = 0;
  if (levels > 0 && cur_is_recv && dst[0] == 0) {
    dst[0] = 2;
    final_copy = levels == 1;
  }
  strata_bufref cur = cur_is_recv ? strata_ref(STRATA_BUF_RECV, 0) : strata_ref(STRATA_BUF_SEND, 0);
  int last_rr = f->fold_rr, last_send = -1;
  for (int k = 0; k < levels; k++) {
    const int peer = rhd_real_rank(f, f->vrank ^ (1 << k));
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, last_rr);
    int sent = strata_sched_send(s, peer, cur, bytes, d.idx, d.n);
    strata_deps_add(&d, last_send); /* the previous send read what this step overwrites */
    strata_bufref out = rd_buffer(dst[k], bytes);
    last_rr = strata_sched_recv_reduce(s, peer, cur, out, strata_ref(STRATA_BUF_SCRATCH, 0), bytes,
                                       d.idx, d.n);
    last_send = sent;
    cur = out;
  }
  strata_deps ready;
  strata_deps_clear(&ready);
  strata_deps_add(&ready, last_rr);
  if (final_copy) {
    strata_deps_add(&ready, last_send);
    int copied =
        strata_sched_copy(s, cur, strata_ref(STRATA_BUF_RECV, 0), bytes, ready.idx, ready.n);
    strata_deps_clear(&ready);
    strata_deps_add(&ready, copied);
  }
  rhd_fold_out(p, s, f, &ready);
}

int strata_build_allreduce_rhd(const strata_sched_params *p, strata_schedule *s) {
  const uint64_t bytes = p->count * p->elem_size;
  if (p->nranks == 1) {
    if (!p->in_place)
      strata_sched_copy(s, strata_ref(STRATA_BUF_SEND, 0), strata_ref(STRATA_BUF_RECV, 0), bytes,
                        NULL, 0);
    return strata_schedule_status(s);
  }
  rhd_fold f;
  rhd_fold_plan(p, &f);
  rhd_fold_in(p, s, &f);
  s->requantize_result = f.p2 != p->nranks;
  if (f.vrank < 0) { /* sat out: wait for the result */
    s->scratch_bytes = 0;
    strata_deps none;
    strata_deps_clear(&none);
    rhd_fold_out(p, s, &f, &none);
    return strata_schedule_status(s);
  }
  if (bytes <= STRATA_RHD_DOUBLING_MAX_BYTES || p->count < (uint64_t)f.p2)
    allreduce_doubling(p, s, &f);
  else
    allreduce_halving_doubling(p, s, &f);
  return strata_schedule_status(s);
}

/* ---- reduce-scatter: recursive halving ---------------------------------------------------------
 *
 * Virtual rank v owns the output blocks of the real ranks it stands for: blocks 2v and 2v+1 for
 * a folding pair (v < rem), block v + rem otherwise; those ranges are contiguous and ordered by
 * v, so halving over virtual blocks works as for a power of two. Partial sums live in scratch
 * laid out like SEND (n*B) with a staging area behind it; only the very last reduction (or, for
 * a folding pair, a copy) writes RECV, after every read of SEND — so both in-place forms (RECV
 * == SEND + rank*B, and RECV == SEND) are safe. */

static uint64_t rs_vblock_first(const rhd_fold *f, int n, int v) {
  if (v >= f->p2) return (uint64_t)n;
  return (uint64_t)(v < f->rem ? 2 * v : v + f->rem);
}

int strata_build_reduce_scatter_rhd(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks;
  const uint64_t block = p->count * p->elem_size, all = (uint64_t)n * block;
  if (n == 1) {
    if (!p->in_place)
      strata_sched_copy(s, strata_ref(STRATA_BUF_SEND, 0), strata_ref(STRATA_BUF_RECV, 0), block,
                        NULL, 0);
    return strata_schedule_status(s);
  }
  rhd_fold f;
  rhd_fold_plan(p, &f);
  if (f.partner >= 0 && f.vrank < 0) { /* hand everything to the partner, get our block back */
    int sent = strata_sched_send(s, f.partner, strata_ref(STRATA_BUF_SEND, 0), all, NULL, 0);
    strata_deps d;
    strata_deps_clear(&d);
    if (p->in_place) strata_deps_add(&d, sent); /* RECV lies inside what the send reads */
    strata_sched_recv(s, f.partner, strata_ref(STRATA_BUF_RECV, 0), block, d.idx, d.n);
    return strata_schedule_status(s);
  }
  const int p2 = f.p2, v = f.vrank, folding = f.partner >= 0;
  const uint64_t mid_bytes = rs_vblock_first(&f, n, p2 / 2) * block;
  const uint64_t staging_at = all, half = mid_bytes > all - mid_bytes ? mid_bytes : all - mid_bytes;
  s->scratch_bytes = all + half;
  strata_buf_id cur = STRATA_BUF_SEND;
  int last = -1, first_send = -1;
  if (folding) {
    last = strata_sched_recv_reduce(s, f.partner, strata_ref(STRATA_BUF_SEND, 0),
                                    strata_ref(STRATA_BUF_SCRATCH, 0),
                                    strata_ref(STRATA_BUF_SCRATCH, 0), all, NULL, 0);
    cur = STRATA_BUF_SCRATCH;
  }
  int lo = 0, hi = p2;
  for (int mask = p2 / 2; mask >= 1; mask /= 2) {
    const int peer = rhd_real_rank(&f, v ^ mask), mid = lo + (hi - lo) / 2;
    int keep_lo = lo, keep_hi = mid, send_lo = mid, send_hi = hi;
    if (v & mask) keep_lo = mid, keep_hi = hi, send_lo = lo, send_hi = mid;
    const uint64_t send_off = rs_vblock_first(&f, n, send_lo) * block;
    const uint64_t keep_off = rs_vblock_first(&f, n, keep_lo) * block;
    const uint64_t keep_bytes = rs_vblock_first(&f, n, keep_hi) * block - keep_off;
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, last);
    int sent = strata_sched_send(s, peer, strata_ref(cur, send_off),
                                 rs_vblock_first(&f, n, send_hi) * block - send_off, d.idx, d.n);
    if (first_send < 0) first_send = sent;
    /* The last reduction writes RECV, which may alias what the first send read; when that send
     * belongs to this very step (two ranks), waiting for it here could deadlock, so land in
     * scratch and copy afterwards. */
    const int final = mask == 1 && !folding && first_send != sent;
    if (final) strata_deps_add(&d, first_send);
    strata_bufref dst =
        final ? strata_ref(STRATA_BUF_RECV, 0) : strata_ref(STRATA_BUF_SCRATCH, keep_off);
    last = strata_sched_recv_reduce(s, peer, strata_ref(cur, keep_off), dst,
                                    strata_ref(STRATA_BUF_SCRATCH, staging_at), keep_bytes, d.idx,
                                    d.n);
    cur = STRATA_BUF_SCRATCH;
    lo = keep_lo, hi = keep_hi;
  }
  if (!folding && p2 == 2) {
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, last);
    strata_deps_add(&d, first_send);
    strata_sched_copy(s, strata_ref(STRATA_BUF_SCRATCH, rs_vblock_first(&f, n, v) * block),
                      strata_ref(STRATA_BUF_RECV, 0), block, d.idx, d.n);
  }
  if (folding) { /* our block is 2v+1, the partner's 2v */
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, last);
    strata_sched_copy(s, strata_ref(STRATA_BUF_SCRATCH, (uint64_t)(2 * v + 1) * block),
                      strata_ref(STRATA_BUF_RECV, 0), block, d.idx, d.n);
    strata_sched_send(s, f.partner, strata_ref(STRATA_BUF_SCRATCH, (uint64_t)(2 * v) * block),
                      block, d.idx, d.n);
  }
  return strata_schedule_status(s);
}

/* ---- allgather --------------------------------------------------------------------------------
 */

static void allgather_doubling(const strata_sched_params *p, strata_schedule *s, int own) {
  const int r = p->rank;
  const uint64_t block = p->count * p->elem_size;
  strata_deps have;
  strata_deps_clear(&have);
  strata_deps_add(&have, own);
  for (int mask = 1; mask < p->nranks; mask *= 2) {
    const int peer = r ^ mask;
    const uint64_t mine = (uint64_t)(r & ~(mask - 1)), theirs = (uint64_t)(peer & ~(mask - 1));
    strata_sched_send(s, peer, strata_ref(STRATA_BUF_RECV, mine * block), (uint64_t)mask * block,
                      have.idx, have.n);
    strata_deps_add(&have, strata_sched_recv(s, peer, strata_ref(STRATA_BUF_RECV, theirs * block),
                                             (uint64_t)mask * block, NULL, 0));
  }
}

static void allgather_bruck(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  const uint64_t block = p->count * p->elem_size;
  s->scratch_bytes = (uint64_t)n * block; /* block i = data of rank (r + i) % n */
  strata_deps have;
  strata_deps_clear(&have);
  /* in place SEND is RECV block r: the same bytes either way */
  strata_deps_add(&have, strata_sched_copy(s, strata_ref(STRATA_BUF_SEND, 0),
                                           strata_ref(STRATA_BUF_SCRATCH, 0), block, NULL, 0));
  for (int dist = 1; dist < n; dist *= 2) {
    const uint64_t blocks = (uint64_t)(dist < n - dist ? dist : n - dist);
    strata_sched_send(s, strata_mod(r - dist, n), strata_ref(STRATA_BUF_SCRATCH, 0), blocks * block,
                      have.idx, have.n);
    strata_deps_add(&have, strata_sched_recv(s, strata_mod(r + dist, n),
                                             strata_ref(STRATA_BUF_SCRATCH, (uint64_t)dist * block),
                                             blocks * block, NULL, 0));
  }
  const uint64_t head = (uint64_t)(n - r); /* scratch blocks [0, n-r) are RECV blocks [r, n) */
  strata_sched_copy(s, strata_ref(STRATA_BUF_SCRATCH, 0),
                    strata_ref(STRATA_BUF_RECV, (uint64_t)r * block), head * block, have.idx,
                    have.n);
  if (r > 0)
    strata_sched_copy(s, strata_ref(STRATA_BUF_SCRATCH, head * block),
                      strata_ref(STRATA_BUF_RECV, 0), (uint64_t)r * block, have.idx, have.n);
}

int strata_build_allgather_rhd(const strata_sched_params *p, strata_schedule *s) {
  const uint64_t block = p->count * p->elem_size;
  if (p->nranks & (p->nranks - 1)) {
    allgather_bruck(p, s);
    return strata_schedule_status(s);
  }
  int own = -1;
  if (!p->in_place)
    own = strata_sched_copy(s, strata_ref(STRATA_BUF_SEND, 0),
                            strata_ref(STRATA_BUF_RECV, (uint64_t)p->rank * block), block, NULL, 0);
  allgather_doubling(p, s, own);
  return strata_schedule_status(s);
}

/* ---- barrier: dissemination (lg n rounds of empty messages) -----------------------------------
 */

int strata_build_barrier_rhd(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  int last = -1;
  for (int dist = 1; dist < n; dist *= 2) {
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, last);
    strata_sched_send(s, strata_mod(r + dist, n), strata_ref(STRATA_BUF_SEND, 0), 0, d.idx, d.n);
    last = strata_sched_recv(s, strata_mod(r - dist, n), strata_ref(STRATA_BUF_RECV, 0), 0, d.idx,
                             d.n);
  }
  return strata_schedule_status(s);
}
