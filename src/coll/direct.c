// SPDX-License-Identifier: Apache-2.0
/*
 * direct.c — algorithms where every rank talks straight to the ranks that need its data:
 * allreduce (direct reduce-scatter then direct allgather), reduce-scatter, allgather, gather,
 * scatter, all-to-all (pairwise exchange in n-1 shifted rounds: in round k rank r sends to r+k and
 * receives from r-k, so every rank sends and receives exactly one message per round), the
 * all-to-all barrier, and point-to-point send/recv.
 *
 * Memory (B = count * elem bytes):
 *  - reduce_scatter: blocks from the n-1 peers land in scratch ((n-1)*B) so they can all arrive
 *    at once; a chain of local reductions folds them into RECV, starting from SEND block rank.
 *    In place means RECV == SEND + rank*B (NCCL), which only that chain reads and writes, or
 *    RECV == SEND (the other form strata.h allows): the chain starts after block 0 was sent.
 *  - allgather: in place means SEND == RECV + rank*B; otherwise the own block is copied.
 *  - gather / scatter: in place at the root means SEND == RECV + root*B (gather) and
 *    RECV == SEND + root*B (scatter).
 *  - alltoall: in place means SEND == RECV; incoming blocks then land in scratch and are copied
 *    home once the block that used to be there has been sent.
 *  - send/recv: one message of count*elem bytes from SEND to `root`, or into RECV from `root`.
 * Builders never write SEND.
 */
#include <stdlib.h>

#include "coll/coll_internal.h"

static int own_copy(const strata_sched_params *p, strata_schedule *s, uint64_t src_off,
                    uint64_t dst_off, uint64_t bytes) {
  if (p->in_place) return -1;
  return strata_sched_copy(s, strata_ref(STRATA_BUF_SEND, src_off),
                           strata_ref(STRATA_BUF_RECV, dst_off), bytes, NULL, 0);
}

/* allreduce = direct reduce-scatter of n segments + direct allgather of the sums. In place the
 * allgather's receive into segment j waits for the first phase's send of segment j to j. */
int strata_build_allreduce_direct(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  const uint64_t elem = p->elem_size;
  if (n == 1) {
    own_copy(p, s, 0, 0, p->count * elem);
    return strata_schedule_status(s);
  }
  uint64_t first, len, seg_max = p->count / (uint64_t)n + (p->count % (uint64_t)n ? 1 : 0);
  s->scratch_bytes = (uint64_t)(n - 1) * seg_max * elem;
  int *sent = malloc(2 * (size_t)n * sizeof *sent), *got = sent + n;
  if (!sent) return STRATA_ERR_NO_MEMORY;
  for (int k = 1; k < n; k++) {
    const int to = strata_mod(r + k, n), from = strata_mod(r - k, n);
    strata_split(p->count, (uint64_t)n, (uint64_t)to, &first, &len);
    sent[to] =
        strata_sched_send(s, to, strata_ref(STRATA_BUF_SEND, first * elem), len * elem, NULL, 0);
    strata_split(p->count, (uint64_t)n, (uint64_t)r, &first, &len);
    got[k] = strata_sched_recv(s, from,
                               strata_ref(STRATA_BUF_SCRATCH, (uint64_t)(k - 1) * seg_max * elem),
                               len * elem, NULL, 0);
  }
  strata_split(p->count, (uint64_t)n, (uint64_t)r, &first, &len);
  const strata_bufref mine = strata_ref(STRATA_BUF_RECV, first * elem);
  strata_bufref acc = strata_ref(STRATA_BUF_SEND, first * elem);
  int last = -1;
  for (int k = 1; k < n; k++) {
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, last);
    strata_deps_add(&d, got[k]);
    last = strata_sched_reduce(s, acc,
                               strata_ref(STRATA_BUF_SCRATCH, (uint64_t)(k - 1) * seg_max * elem),
                               mine, len * elem, d.idx, d.n);
    acc = mine;
  }
  const uint64_t mine_bytes = len * elem;
  for (int k = 1; k < n; k++) {
    const int to = strata_mod(r + k, n), from = strata_mod(r - k, n);
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, last);
    strata_sched_send(s, to, mine, mine_bytes, d.idx, d.n);
    strata_split(p->count, (uint64_t)n, (uint64_t)from, &first, &len);
    strata_deps_clear(&d);
    strata_deps_add(&d, sent[from]);
    strata_sched_recv(s, from, strata_ref(STRATA_BUF_RECV, first * elem), len * elem, d.idx, d.n);
  }
  free(sent);
  return strata_schedule_status(s);
}

int strata_build_reduce_scatter_direct(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  const uint64_t block = p->count * p->elem_size;
  if (n == 1) {
    own_copy(p, s, 0, 0, block);
    return strata_schedule_status(s);
  }
  s->scratch_bytes = (uint64_t)(n - 1) * block;
  int *got = malloc((size_t)n * sizeof *got), sent_block0 = -1;
  if (!got) return STRATA_ERR_NO_MEMORY;
  for (int k = 1; k < n; k++) {
    const int to = strata_mod(r + k, n), from = strata_mod(r - k, n);
    int sent =
        strata_sched_send(s, to, strata_ref(STRATA_BUF_SEND, (uint64_t)to * block), block, NULL, 0);
    if (to == 0) sent_block0 = sent;
    got[k] = strata_sched_recv(s, from, strata_ref(STRATA_BUF_SCRATCH, (uint64_t)(k - 1) * block),
                               block, NULL, 0);
  }
  strata_bufref acc = strata_ref(STRATA_BUF_SEND, (uint64_t)r * block);
  int last = -1;
  for (int k = 1; k < n; k++) {
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, last);
    strata_deps_add(&d, got[k]);
    strata_deps_add(&d, sent_block0); /* in place with RECV == SEND: block 0 must have left */
    last = strata_sched_reduce(s, acc, strata_ref(STRATA_BUF_SCRATCH, (uint64_t)(k - 1) * block),
                               strata_ref(STRATA_BUF_RECV, 0), block, d.idx, d.n);
    acc = strata_ref(STRATA_BUF_RECV, 0);
  }
  free(got);
  return strata_schedule_status(s);
}

int strata_build_allgather_direct(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  const uint64_t block = p->count * p->elem_size;
  own_copy(p, s, 0, (uint64_t)r * block, block);
  for (int k = 1; k < n; k++) {
    const int to = strata_mod(r + k, n), from = strata_mod(r - k, n);
    strata_sched_send(s, to, strata_ref(STRATA_BUF_SEND, 0), block, NULL, 0);
    strata_sched_recv(s, from, strata_ref(STRATA_BUF_RECV, (uint64_t)from * block), block, NULL, 0);
  }
  return strata_schedule_status(s);
}

int strata_build_gather_direct(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  const uint64_t block = p->count * p->elem_size;
  if (r != p->root) {
    strata_sched_send(s, p->root, strata_ref(STRATA_BUF_SEND, 0), block, NULL, 0);
    return strata_schedule_status(s);
  }
  own_copy(p, s, 0, (uint64_t)r * block, block);
  for (int k = 1; k < n; k++) {
    const int from = strata_mod(r + k, n);
    strata_sched_recv(s, from, strata_ref(STRATA_BUF_RECV, (uint64_t)from * block), block, NULL, 0);
  }
  return strata_schedule_status(s);
}

int strata_build_scatter_direct(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  const uint64_t block = p->count * p->elem_size;
  if (r != p->root) {
    strata_sched_recv(s, p->root, strata_ref(STRATA_BUF_RECV, 0), block, NULL, 0);
    return strata_schedule_status(s);
  }
  own_copy(p, s, (uint64_t)r * block, 0, block);
  for (int k = 1; k < n; k++) {
    const int to = strata_mod(r + k, n);
    strata_sched_send(s, to, strata_ref(STRATA_BUF_SEND, (uint64_t)to * block), block, NULL, 0);
  }
  return strata_schedule_status(s);
}

int strata_build_alltoall_direct(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  const uint64_t block = p->count * p->elem_size;
  own_copy(p, s, (uint64_t)r * block, (uint64_t)r * block, block);
  if (n == 1) return strata_schedule_status(s);
  int *sent = malloc(2 * (size_t)n * sizeof *sent), *got = sent + n;
  if (!sent) return STRATA_ERR_NO_MEMORY;
  if (p->in_place) s->scratch_bytes = (uint64_t)(n - 1) * block;
  for (int k = 1; k < n; k++) {
    const int to = strata_mod(r + k, n), from = strata_mod(r - k, n);
    sent[to] =
        strata_sched_send(s, to, strata_ref(STRATA_BUF_SEND, (uint64_t)to * block), block, NULL, 0);
    strata_bufref dst = p->in_place ? strata_ref(STRATA_BUF_SCRATCH, (uint64_t)(k - 1) * block)
                                    : strata_ref(STRATA_BUF_RECV, (uint64_t)from * block);
    got[from] = strata_sched_recv(s, from, dst, block, NULL, 0);
  }
  for (int k = 1; p->in_place && k < n; k++) {
    const int from = strata_mod(r - k, n);
    strata_deps d;
    strata_deps_clear(&d);
    strata_deps_add(&d, got[from]);
    strata_deps_add(&d, sent[from]); /* the block that lived there has left */
    strata_sched_copy(s, strata_ref(STRATA_BUF_SCRATCH, (uint64_t)(k - 1) * block),
                      strata_ref(STRATA_BUF_RECV, (uint64_t)from * block), block, d.idx, d.n);
  }
  free(sent);
  return strata_schedule_status(s);
}

int strata_build_barrier_direct(const strata_sched_params *p, strata_schedule *s) {
  const int n = p->nranks, r = p->rank;
  for (int k = 1; k < n; k++) {
    strata_sched_send(s, strata_mod(r + k, n), strata_ref(STRATA_BUF_SEND, 0), 0, NULL, 0);
    strata_sched_recv(s, strata_mod(r - k, n), strata_ref(STRATA_BUF_RECV, 0), 0, NULL, 0);
  }
  return strata_schedule_status(s);
}

int strata_build_sendrecv_direct(const strata_sched_params *p, strata_schedule *s) {
  const uint64_t bytes = p->count * p->elem_size;
  if (p->coll == STRATA_COLL_SEND)
    strata_sched_send(s, p->root, strata_ref(STRATA_BUF_SEND, 0), bytes, NULL, 0);
  else
    strata_sched_recv(s, p->root, strata_ref(STRATA_BUF_RECV, 0), bytes, NULL, 0);
  return strata_schedule_status(s);
}
