// SPDX-License-Identifier: Apache-2.0
/*
 * hier.c — hierarchical (site-aware) allreduce, reduce-scatter, allgather and broadcast.
 *
 * Ranks are grouped into sites (strata_sched_params.site_of_rank, numbers in [0, nranks), gaps
 * allowed; NULL = one site; anything else fails with INVALID_ARG). Links inside
 * a site are fast, links between sites slow, so every byte should cross a site boundary as few
 * times as possible and every rank should carry its share of the crossing in parallel.
 *
 * Composition. A hierarchical schedule is a sequence of phases; each phase is an ordinary
 * schedule built by the flat builders for a sub-group (the ranks of one site, or the ranks that
 * hold the same local index in every site) and appended here with its ranks translated to global
 * ranks and its buffer references translated to regions of the caller's buffers (linearly, or
 * block by block when the sub-group's blocks are scattered over the global layout). A zero-byte
 * COPY "join" step depends on every step of a phase, and every root step of the next phase
 * depends on the join, so phases never overlap: scratch is reused from the same base, and the
 * k-th message on each link still matches because every rank appends the same phases in the same
 * order and a pair of ranks is in the same sub-group of a phase on both sides.
 *
 * Algorithms, with S sites of L ranks each (equal sites), c elements per block:
 *  - allreduce: reduce-scatter inside the site (shard l of count/L elements ends on local rank l),
 *    allreduce of shard l across sites among the S ranks of local index l (all L shards cross
 *    in parallel, each rank sending 2(S-1)/S of its shard), allgather inside the site. The
 *    count % L tail elements are allreduced flat at the end (fewer than L elements).
 *  - reduce_scatter: for each site t, reduce-scatter inside my site the blocks of site t's ranks
 *    (into S scratch partials), then reduce-scatter the S partials across sites.
 *  - allgather: allgather across sites among same-local ranks, then, per site t, allgather
 *    inside my site the blocks of site t.
 *  - broadcast (any layout): the root's block crosses to one leader per site (the root in its
 *    site, local rank 0 elsewhere), then every leader broadcasts inside its site.
 * Unequal sites: allreduce falls back to leaders (reduce to local rank 0 inside the site,
 * allreduce among leaders, broadcast inside the site) — correct, but one rank per site carries
 * the crossing; reduce_scatter and allgather fall back to the flat ring.
 *
 * This file never touches data; it must never emit a reference that crosses the block boundary
 * of a block-mapped buffer (hier_map_ref rejects it, the build then fails with INVALID_ARG).
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll_internal.h"
#include "coll/hier.h"

/* Sites of a communicator, compacted (empty site numbers dropped). */
typedef struct hier_sites {
  int nsites, site, local; /* mine */
  int min_size, max_size;
  int *start;   /* nsites + 1 entries: members of site t are members[start[t] .. start[t+1]) */
  int *members; /* global ranks, ascending within a site */
} hier_sites;

static void hier_sites_free(hier_sites *h) {
  free(h->start);
  free(h->members);
}

static int hier_sites_init(const strata_sched_params *p, hier_sites *h) {
  const int n = p->nranks;
  memset(h, 0, sizeof *h);
  int *dense = calloc((size_t)n, sizeof *dense); /* site number -> compact index + 1 */
  h->start = calloc((size_t)n + 1, sizeof *h->start);
  h->members = malloc((size_t)n * sizeof *h->members);
  if (!dense || !h->start || !h->members) {
    free(dense), hier_sites_free(h);
    return STRATA_ERR_NO_MEMORY;
  }
  for (int r = 0; r < n; r++) {
    int site = p->site_of_rank ? p->site_of_rank[r] : 0;
    if (site < 0 || site >= n) {
      free(dense), hier_sites_free(h);
      return STRATA_ERR_INVALID_ARG;
    }
    dense[site] = 1;
  }
  for (int t = 0; t < n; t++)
    if (dense[t]) dense[t] = ++h->nsites;
  for (int r = 0; r < n; r++) h->start[dense[p->site_of_rank ? p->site_of_rank[r] : 0]]++;
  for (int t = 0; t < h->nsites; t++) h->start[t + 1] += h->start[t];
  h->min_size = n, h->max_size = 0;
  for (int t = 0; t < h->nsites; t++) {
    int size = h->start[t + 1] - h->start[t];
    if (size < h->min_size) h->min_size = size;
    if (size > h->max_size) h->max_size = size;
  }
  int *fill = dense; /* reuse: fill position per compact site, after the counts above */
  int *pos = calloc((size_t)h->nsites, sizeof *pos);
  if (!pos) {
    free(dense), hier_sites_free(h);
    return STRATA_ERR_NO_MEMORY;
  }
  for (int r = 0; r < n; r++) {
    int t = fill[p->site_of_rank ? p->site_of_rank[r] : 0] - 1;
    if (r == p->rank) h->site = t, h->local = pos[t];
    h->members[h->start[t] + pos[t]++] = r;
  }
  free(pos), free(dense);
  return STRATA_OK;
}

static int hier_size(const hier_sites *h, int t) {
  return h->start[t + 1] - h->start[t];
}

static int hier_member(const hier_sites *h, int t, int local) {
  return h->members[h->start[t] + local];
}

/* How one buffer of a sub-schedule lands in the main schedule: at `base` (buf, offset), or, with
 * `block_bytes` > 0, sub block i at offset block_at[i] of `base.buf`. */
typedef struct hier_buf_map {
  strata_bufref base;
  uint64_t block_bytes;
  const uint64_t *block_at;
  uint64_t nblocks;
} hier_buf_map;

typedef struct hier_phase {
  strata_sched_params sub; /* rank/nranks/count/in_place/algo of the sub-group */
  const int *peers;        /* sub rank -> global rank */
  hier_buf_map map[3];     /* by strata_buf_id */
} hier_phase;

typedef struct hier_build {
  strata_schedule *s;
  int64_t join; /* the last phase's join step, -1 before the first phase */
  int status;
} hier_build;

static int hier_map_ref(const hier_buf_map *m, strata_bufref ref, uint64_t bytes,
                        strata_bufref *out) {
  if (!m->block_bytes) {
    *out = strata_ref((strata_buf_id)m->base.buf, m->base.offset + ref.offset);
    return 0;
  }
  uint64_t block = ref.offset / m->block_bytes, within = ref.offset % m->block_bytes;
  if (block >= m->nblocks) return bytes == 0 && block == m->nblocks ? (*out = m->base, 0) : -1;
  if (within + bytes > m->block_bytes) return -1;
  *out = strata_ref((strata_buf_id)m->base.buf, m->block_at[block] + within);
  return 0;
}

static int hier_map_step(const void *ctx, const strata_step *in, strata_step *out) {
  const hier_phase *ph = ctx;
  *out = *in;
  if (in->kind <= STRATA_STEP_RECV_REDUCE) out->peer = ph->peers[in->peer];
  strata_bufref *refs[4] = {&out->src, &out->src2, &out->dst, &out->staging};
  const strata_bufref orig[4] = {in->src, in->src2, in->dst, in->staging};
  for (int i = 0; i < 4; i++)
    if (orig[i].buf > STRATA_BUF_SCRATCH ||
        hier_map_ref(&ph->map[orig[i].buf], orig[i], in->bytes, refs[i]))
      return -1;
  return 0;
}

/* Build the phase's sub-schedule, append it, then a join step. */
static void hier_phase_add(hier_build *b, const hier_phase *ph) {
  if (b->status != STRATA_OK) return;
  strata_schedule sub;
  int status = strata_schedule_build(&ph->sub, &sub);
  if (status != STRATA_OK) {
    b->status = status;
    return;
  }
  const uint32_t base = b->s->nsteps;
  uint64_t scratch_end = ph->map[STRATA_BUF_SCRATCH].base.offset + sub.scratch_bytes;
  if (scratch_end > b->s->scratch_bytes) b->s->scratch_bytes = scratch_end;
  /* a step the map refuses crossed a mapped block: our bug (STRATA_ERR_INVALID_ARG) */
  const uint32_t join = b->join >= 0 ? (uint32_t)b->join : 0;
  b->status = strata_sched_append(b->s, &sub, &join, b->join >= 0, hier_map_step, ph);
  uint32_t *deps = malloc(((size_t)sub.nsteps + 1) * sizeof *deps);
  if (!deps && b->status == STRATA_OK) b->status = STRATA_ERR_NO_MEMORY;
  if (b->status == STRATA_OK && b->s->nsteps > base) {
    uint32_t nd = 0;
    for (uint32_t i = base; i < b->s->nsteps; i++) deps[nd++] = i;
    b->join = strata_sched_copy(b->s, strata_ref(STRATA_BUF_SCRATCH, 0),
                                strata_ref(STRATA_BUF_SCRATCH, 0), 0, deps, nd);
    if (b->join < 0) b->status = strata_schedule_status(b->s);
  }
  free(deps);
  strata_schedule_free(&sub);
}

static hier_phase hier_phase_init(const strata_sched_params *p, strata_coll coll, strata_algo algo,
                                  int rank, int nranks, const int *peers, uint64_t count,
                                  int in_place) {
  hier_phase ph;
  memset(&ph, 0, sizeof ph);
  ph.sub = *p;
  ph.sub.coll = coll, ph.sub.algo = algo, ph.sub.rank = rank, ph.sub.nranks = nranks;
  ph.sub.count = count, ph.sub.in_place = in_place, ph.sub.site_of_rank = NULL;
  ph.sub.root = 0;
  ph.peers = peers;
  for (int i = 0; i < 3; i++) ph.map[i].base = strata_ref((strata_buf_id)i, 0);
  return ph;
}

static void hier_linear(hier_phase *ph, strata_buf_id sub_buf, strata_buf_id buf, uint64_t off) {
  ph->map[sub_buf].base = strata_ref(buf, off);
}

static void hier_blocks(hier_phase *ph, strata_buf_id sub_buf, strata_buf_id buf,
                        uint64_t block_bytes, const uint64_t *block_at, uint64_t nblocks) {
  ph->map[sub_buf] = (hier_buf_map){strata_ref(buf, 0), block_bytes, block_at, nblocks};
}

/* Global ranks of site t, and of local index l in every site (equal sites). */
static int *hier_site_peers(const hier_sites *h, int t) {
  return &h->members[h->start[t]];
}

static void hier_column(const hier_sites *h, int local, int *out) {
  for (int t = 0; t < h->nsites; t++) out[t] = hier_member(h, t, local);
}

/* Offsets of the blocks of `ranks` (count n) in a buffer of per-rank blocks. */
static void hier_block_offsets(const int *ranks, int n, uint64_t block_bytes, uint64_t *out) {
  for (int i = 0; i < n; i++) out[i] = (uint64_t)ranks[i] * block_bytes;
}

/* ---- allreduce ---------------------------------------------------------------------------- */

static void allreduce_equal(const strata_sched_params *p, const hier_sites *h, hier_build *b,
                            int *column, int *everyone) {
  const int L = hier_size(h, h->site), S = h->nsites;
  const uint64_t c = p->count / (uint64_t)L, tail = p->count % (uint64_t)L;
  const uint64_t shard_bytes = c * p->elem_size;
  const uint64_t shard_at = (uint64_t)h->local * shard_bytes;
  hier_column(h, h->local, column);
  if (c > 0) {
    hier_phase ph = hier_phase_init(p, STRATA_COLL_REDUCE_SCATTER, STRATA_ALGO_AUTO, h->local, L,
                                    hier_site_peers(h, h->site), c, p->in_place);
    hier_linear(&ph, STRATA_BUF_RECV, STRATA_BUF_RECV, shard_at);
    hier_phase_add(b, &ph);
    ph = hier_phase_init(p, STRATA_COLL_ALLREDUCE, STRATA_ALGO_AUTO, h->site, S, column, c, 1);
    hier_linear(&ph, STRATA_BUF_SEND, STRATA_BUF_RECV, shard_at);
    hier_linear(&ph, STRATA_BUF_RECV, STRATA_BUF_RECV, shard_at);
    hier_phase_add(b, &ph);
    ph = hier_phase_init(p, STRATA_COLL_ALLGATHER, STRATA_ALGO_AUTO, h->local, L,
                         hier_site_peers(h, h->site), c, 1);
    hier_linear(&ph, STRATA_BUF_SEND, STRATA_BUF_RECV, shard_at);
    hier_phase_add(b, &ph);
  }
  if (tail > 0 || c == 0) {
    for (int r = 0; r < p->nranks; r++) everyone[r] = r;
    hier_phase ph = hier_phase_init(p, STRATA_COLL_ALLREDUCE, STRATA_ALGO_AUTO, p->rank, p->nranks,
                                    everyone, tail, p->in_place);
    hier_linear(&ph, STRATA_BUF_SEND, STRATA_BUF_SEND, (uint64_t)L * shard_bytes);
    hier_linear(&ph, STRATA_BUF_RECV, STRATA_BUF_RECV, (uint64_t)L * shard_bytes);
    hier_phase_add(b, &ph);
  }
}

static void allreduce_leaders(const strata_sched_params *p, const hier_sites *h, hier_build *b,
                              int *column) {
  const int L = hier_size(h, h->site);
  hier_phase ph = hier_phase_init(p, STRATA_COLL_REDUCE, STRATA_ALGO_AUTO, h->local, L,
                                  hier_site_peers(h, h->site), p->count, p->in_place);
  hier_phase_add(b, &ph);
  if (h->local == 0) {
    hier_column(h, 0, column);
    ph = hier_phase_init(p, STRATA_COLL_ALLREDUCE, STRATA_ALGO_AUTO, h->site, h->nsites, column,
                         p->count, 1);
    hier_linear(&ph, STRATA_BUF_SEND, STRATA_BUF_RECV, 0);
    hier_phase_add(b, &ph);
  }
  ph = hier_phase_init(p, STRATA_COLL_BROADCAST, STRATA_ALGO_AUTO, h->local, L,
                       hier_site_peers(h, h->site), p->count, 1);
  hier_linear(&ph, STRATA_BUF_SEND, STRATA_BUF_RECV, 0);
  hier_phase_add(b, &ph);
}

/* ---- reduce-scatter and allgather (equal sites) -------------------------------------------- */

static void reduce_scatter_equal(const strata_sched_params *p, const hier_sites *h, hier_build *b,
                                 int *column, uint64_t *offsets) {
  const int L = hier_size(h, h->site), S = h->nsites;
  const uint64_t block_bytes = p->count * p->elem_size;
  const uint64_t partials_bytes = (uint64_t)S * block_bytes;
  for (int t = 0; t < S; t++) { /* partial sums of site t's blocks over my site */
    hier_phase ph = hier_phase_init(p, STRATA_COLL_REDUCE_SCATTER, STRATA_ALGO_RING, h->local, L,
                                    hier_site_peers(h, h->site), p->count, 0);
    hier_block_offsets(hier_site_peers(h, t), L, block_bytes, offsets);
    hier_blocks(&ph, STRATA_BUF_SEND, STRATA_BUF_SEND, block_bytes, offsets, (uint64_t)L);
    hier_linear(&ph, STRATA_BUF_RECV, STRATA_BUF_SCRATCH, (uint64_t)t * block_bytes);
    hier_linear(&ph, STRATA_BUF_SCRATCH, STRATA_BUF_SCRATCH, partials_bytes);
    hier_phase_add(b, &ph);
  }
  hier_column(h, h->local, column);
  hier_phase ph = hier_phase_init(p, STRATA_COLL_REDUCE_SCATTER, STRATA_ALGO_AUTO, h->site, S,
                                  column, p->count, 0);
  hier_linear(&ph, STRATA_BUF_SEND, STRATA_BUF_SCRATCH, 0);
  hier_linear(&ph, STRATA_BUF_SCRATCH, STRATA_BUF_SCRATCH, partials_bytes);
  hier_phase_add(b, &ph);
}

static void allgather_equal(const strata_sched_params *p, const hier_sites *h, hier_build *b,
                            int *column, uint64_t *offsets) {
  const int L = hier_size(h, h->site), S = h->nsites;
  const uint64_t block_bytes = p->count * p->elem_size;
  hier_column(h, h->local, column);
  hier_phase ph = hier_phase_init(p, STRATA_COLL_ALLGATHER, STRATA_ALGO_RING, h->site, S, column,
                                  p->count, p->in_place);
  hier_block_offsets(column, S, block_bytes, offsets);
  hier_blocks(&ph, STRATA_BUF_RECV, STRATA_BUF_RECV, block_bytes, offsets, (uint64_t)S);
  hier_phase_add(b, &ph);
  for (int t = 0; t < S; t++) {
    const int *site = hier_site_peers(h, t), *mine = hier_site_peers(h, h->site);
    ph =
        hier_phase_init(p, STRATA_COLL_ALLGATHER, STRATA_ALGO_RING, h->local, L, mine, p->count, 1);
    hier_block_offsets(site, L, block_bytes, offsets);
    hier_blocks(&ph, STRATA_BUF_RECV, STRATA_BUF_RECV, block_bytes, offsets, (uint64_t)L);
    hier_linear(&ph, STRATA_BUF_SEND, STRATA_BUF_RECV, offsets[h->local]);
    hier_phase_add(b, &ph);
  }
}

/* ---- broadcast (any layout) ------------------------------------------------------------------ */

static void broadcast_leaders(const strata_sched_params *p, const hier_sites *h, hier_build *b,
                              int *column) {
  int root_site = 0, root_local = 0;
  for (int t = 0; t < h->nsites; t++)
    for (int i = 0; i < hier_size(h, t); i++)
      if (hier_member(h, t, i) == p->root) root_site = t, root_local = i;
  const int my_leader_local = h->site == root_site ? root_local : 0;
  for (int t = 0; t < h->nsites; t++)
    column[t] = hier_member(h, t, t == root_site ? root_local : 0);
  if (h->local == my_leader_local) {
    hier_phase ph = hier_phase_init(p, STRATA_COLL_BROADCAST, STRATA_ALGO_AUTO, h->site, h->nsites,
                                    column, p->count, p->in_place);
    ph.sub.root = root_site;
    hier_phase_add(b, &ph);
  }
  hier_phase ph = hier_phase_init(p, STRATA_COLL_BROADCAST, STRATA_ALGO_AUTO, h->local,
                                  hier_size(h, h->site), hier_site_peers(h, h->site), p->count, 1);
  ph.sub.root = my_leader_local;
  hier_linear(&ph, STRATA_BUF_SEND, STRATA_BUF_RECV, 0);
  hier_phase_add(b, &ph);
}

/* ---- entry points ---------------------------------------------------------------------------- */

static int hier_run(const strata_sched_params *p, strata_schedule *s,
                    void (*equal)(const strata_sched_params *, const hier_sites *, hier_build *,
                                  int *, uint64_t *),
                    int (*fallback)(const strata_sched_params *, strata_schedule *)) {
  hier_sites h;
  int status = hier_sites_init(p, &h);
  if (status != STRATA_OK) return status;
  int *column = malloc(((size_t)p->nranks + 1) * sizeof *column);
  uint64_t *offsets = malloc(((size_t)p->nranks + 1) * sizeof *offsets);
  hier_build b = {s, -1, column && offsets ? STRATA_OK : STRATA_ERR_NO_MEMORY};
  if (b.status == STRATA_OK) {
    if (h.min_size == h.max_size || !fallback)
      equal(p, &h, &b, column, offsets);
    else
      b.status = fallback(p, s);
  }
  free(column), free(offsets);
  hier_sites_free(&h);
  return b.status != STRATA_OK ? b.status : strata_schedule_status(s);
}

static void allreduce_any(const strata_sched_params *p, const hier_sites *h, hier_build *b,
                          int *column, uint64_t *offsets) {
  (void)offsets;
  if (h->min_size != h->max_size) {
    allreduce_leaders(p, h, b, column);
    return;
  }
  int *everyone = malloc((size_t)p->nranks * sizeof *everyone);
  if (!everyone) {
    b->status = STRATA_ERR_NO_MEMORY;
    return;
  }
  allreduce_equal(p, h, b, column, everyone);
  free(everyone);
}

static void broadcast_any(const strata_sched_params *p, const hier_sites *h, hier_build *b,
                          int *column, uint64_t *offsets) {
  (void)offsets;
  broadcast_leaders(p, h, b, column);
}

int strata_build_allreduce_hier(const strata_sched_params *p, strata_schedule *s) {
  return hier_run(p, s, allreduce_any, NULL);
}

int strata_build_reduce_scatter_hier(const strata_sched_params *p, strata_schedule *s) {
  return hier_run(p, s, reduce_scatter_equal, strata_build_reduce_scatter_ring);
}

int strata_build_allgather_hier(const strata_sched_params *p, strata_schedule *s) {
  return hier_run(p, s, allgather_equal, strata_build_allgather_ring);
}

int strata_build_broadcast_hier(const strata_sched_params *p, strata_schedule *s) {
  return hier_run(p, s, broadcast_any, NULL);
}

int strata_hier_applies(const strata_sched_params *p) {
  if (!p->site_of_rank || p->nranks < 3) return 0;
  int nsites = 0, biggest = 0;
  int *size = calloc((size_t)p->nranks, sizeof *size);
  if (!size) return 0;
  for (int r = 0; r < p->nranks; r++) {
    int t = p->site_of_rank[r];
    if (t < 0 || t >= p->nranks) {
      free(size);
      return 0;
    }
    if (size[t]++ == 0) nsites++;
    if (size[t] > biggest) biggest = size[t];
  }
  free(size);
  return nsites >= 2 && biggest >= 2;
}
