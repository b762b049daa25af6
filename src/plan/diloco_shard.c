// SPDX-License-Identifier: Apache-2.0
/*
 * diloco_shard.c — DiLoCo over FSDP2 shards as strata runs it (python/strata/diloco_sharded.py),
 * predicted byte for byte (plan.h, strata_plan_diloco_sharded).
 *
 * The layout. Inside each site of L ranks, FSDP2 (fully_shard) cuts every parameter along dim 0
 * as torch.chunk does: chunks of c = ceil(rows / L) rows, rank l holding rows [l·c, (l+1)·c)
 * clipped to the tensor, so the last holding rank may have fewer rows and the ranks after it
 * none. The fragments of Streaming DiLoCo are cut over the full model's parameters (whole
 * tensors, each edge closest to an equal share of the elements: split_fragments, the same cut as
 * strata_diloco_create's), and each rank exchanges, per fragment, the elements of its shards of
 * that fragment's parameters as one f32 allreduce (STRATA_AVG) over a communicator of its own:
 * the S ranks of its shard index, one per site.
 *
 * The bytes. Each such allreduce is costed by building the schedule the engine would run
 * (strata_schedule_build, the algorithm src/train/diloco.c picks: hierarchical over S sites of
 * one rank, or the ring for a compressed average over a number of sites that is not a power of
 * two), in place, with the communicator's pipelining chunk, and adding up its sends, each encoded
 * as the engine sizes it (strata_compress_wire_bytes per message: the block headers of int8 and
 * int4 are paid per message). Every peer of such a communicator is in another site, so each of
 * those bytes is one strata_comm_stats.wan_bytes_sent counts. The transport's 48-byte frame
 * header per message piece is not in that counter, nor here.
 *
 * Never linked into a rank: it reads the runtime's schedule builders, it does not run them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll/schedule.h"
#include "core/compress.h"
#include "engine/chunk.h"
#include "model/physics.h"
#include "model/sim.h"
#include "plan/plan.h"

/* the most parameters --param-shapes may name, and the dimensions of one */
enum { SHAPES_MAX = 1 << 20, DIMS_MAX = 8 };
/* the lan chunk the engine proposes when every data peer is a socket to another host */
static const uint64_t LAN_CHUNK_BYTES = 64 << 10;

typedef struct shape {
  uint64_t rows, row_values; /* dim 0, and the elements of one row */
} shape;

/* Parses "24x16,24,5x24,5": parameters separated by commas, dimensions by 'x'. */
static int parse_shapes(const char *spec, shape **out, size_t *n, char *err, size_t len) {
  size_t cap = 1;
  for (const char *c = spec; *c; c++) cap += *c == ',';
  if (cap > SHAPES_MAX) {
    snprintf(err, len, "--param-shapes: more than %d parameters", SHAPES_MAX);
    return STRATA_ERR_INVALID_ARG;
  }
  shape *s = calloc(cap, sizeof *s);
  if (!s) return STRATA_ERR_NO_MEMORY;
  size_t k = 0;
  const char *at = spec;
  double total = 0;
  for (;;) {
    uint64_t dims[DIMS_MAX];
    int nd = 0;
    for (;;) {
      char *end;
      if (*at < '0' || *at > '9') goto bad;
      unsigned long long v = strtoull(at, &end, 10);
      if (v == 0 || v > (1ull << 50) || nd == DIMS_MAX) goto bad;
      dims[nd++] = v;
      at = end;
      if (*at != 'x') break;
      at++;
    }
    double numel = 1;
    for (int d = 0; d < nd; d++) numel *= (double)dims[d];
    total += numel;
    if (numel > 1e15 || total > 1e15) goto bad;
    s[k].rows = dims[0];
    s[k].row_values = (uint64_t)(numel / (double)dims[0]);
    k++;
    if (*at == '\0') break;
    if (*at != ',') goto bad;
    at++;
  }
  *out = s, *n = k;
  return STRATA_OK;
bad:
  snprintf(err, len,
           "--param-shapes: expected shapes such as 24x16,24,5x24,5 (each dimension a positive "
           "integer, at most %d of them, 1e15 elements in all); stopped at '%.20s'",
           DIMS_MAX, at);
  free(s);
  return STRATA_ERR_INVALID_ARG;
}

int strata_plan_shapes_values(const char *spec, double *values, char *err, size_t err_len) {
  shape *s;
  size_t n;
  int status = parse_shapes(spec, &s, &n, err, err_len);
  if (status != STRATA_OK) return status;
  *values = 0;
  for (size_t i = 0; i < n; i++) *values += (double)s[i].rows * (double)s[i].row_values;
  free(s);
  return STRATA_OK;
}

/* The cut of strata_diloco_create (src/train/diloco.c) and split_fragments (diloco_sharded.py):
 * first[p] .. first[p+1] are fragment p's parameters. */
static void cut_fragments(const shape *s, size_t n, int P, size_t *first) {
  double total = 0;
  double *begin = malloc((n + 1) * sizeof *begin);
  if (!begin) { /* fall back to one parameter apiece past the first fragments */
    for (int p = 0; p <= P; p++) first[p] = p < P ? (size_t)p : n;
    return;
  }
  begin[0] = 0;
  for (size_t i = 0; i < n; i++) begin[i + 1] = begin[i] + (double)s[i].rows * s[i].row_values;
  total = begin[n];
  size_t edge = 0;
  for (int p = 0; p < P; p++) {
    first[p] = edge;
    size_t end = n;
    if (p + 1 < P) {
      long double target = (long double)total * (p + 1) / P;
      end = edge + 1;
      while (end < n - (size_t)(P - p - 1)) {
        if (fabsl((long double)begin[end + 1] - target) >= fabsl((long double)begin[end] - target))
          break;
        end++;
      }
    }
    edge = end;
  }
  first[P] = n;
  free(begin);
}

/* Rows of a `rows`-row tensor that FSDP2 gives rank l of L (torch.chunk's cut). */
static uint64_t shard_rows(uint64_t rows, int L, int l) {
  uint64_t c = rows / (uint64_t)L + (rows % (uint64_t)L ? 1 : 0);
  uint64_t start = c * (uint64_t)l;
  if (start >= rows) return 0;
  return rows - start < c ? rows - start : c;
}

typedef struct exchange_cost {
  double wan_bytes, messages, payload_bytes; /* payload: the f32 values' encoded codes */
} exchange_cost;

/* Site r of S sites of one rank each (a shard index's communicator). NULL: out of memory. */
static int *sites_of_one_rank(int S) {
  int *site_of_rank = malloc((size_t)S * sizeof *site_of_rank);
  for (int r = 0; site_of_rank && r < S; r++) site_of_rank[r] = r;
  return site_of_rank;
}

/* The outer exchange of `count` f32 values as rank `rank` of S sites runs it: in place,
 * hierarchical, or the ring for a compressed average over a number of sites that is not a power
 * of two (src/train/diloco.c, exchange_algo: the same choice). */
static strata_sched_params exchange_params(int S, int rank, uint64_t count, strata_compress c,
                                           uint64_t chunk, const int *site_of_rank) {
  int compressed = c != STRATA_COMPRESS_NONE, regular = (S & (S - 1)) == 0;
  return (strata_sched_params){.coll = STRATA_COLL_ALLREDUCE,
                               .algo = !compressed || regular ? STRATA_ALGO_HIER : STRATA_ALGO_RING,
                               .rank = rank,
                               .nranks = S,
                               .count = count,
                               .elem_size = 4,
                               .in_place = 1,
                               .chunk_bytes = chunk,
                               .site_of_rank = site_of_rank};
}

/* One rank's sends in the allreduce of `count` f32 values over S sites of one rank each. */
static int exchange_bytes(int S, int site, uint64_t count, strata_compress c, uint64_t chunk,
                          exchange_cost *out) {
  memset(out, 0, sizeof *out);
  if (count == 0 || S < 2) return STRATA_OK;
  int *site_of_rank = sites_of_one_rank(S);
  if (!site_of_rank) return STRATA_ERR_NO_MEMORY;
  int compressed = c != STRATA_COMPRESS_NONE;
  strata_sched_params sp = exchange_params(S, site, count, c, chunk, site_of_rank);
  strata_schedule sched;
  memset(&sched, 0, sizeof sched);
  int status = strata_schedule_build(&sp, &sched);
  free(site_of_rank);
  if (status != STRATA_OK) return status;
  for (uint32_t i = 0; i < sched.nsteps; i++) {
    const strata_step *st = &sched.steps[i];
    if (st->kind != STRATA_STEP_SEND || st->bytes == 0) continue;
    uint64_t values = st->bytes / 4;
    out->wan_bytes += compressed ? (double)strata_compress_wire_bytes(c, values) : st->bytes;
    out->payload_bytes += c == STRATA_COMPRESS_INT8   ? (double)values
                          : c == STRATA_COMPRESS_INT4 ? (double)((values + 1) / 2)
                          : c == STRATA_COMPRESS_FP8  ? (double)values
                          : compressed ? (double)strata_compress_wire_bytes(c, values)
                                       : (double)st->bytes;
    out->messages += 1;
  }
  strata_schedule_free(&sched);
  return STRATA_OK;
}

/* The WAN as the simulator sees it: every pair alike. */
typedef struct wan_link {
  double alpha_us, gbps;
} wan_link;

static void wan_link_of(void *ctx, int src, int dst, strata_sim_link *out) {
  (void)src, (void)dst;
  const wan_link *l = ctx;
  out->alpha_us = l->alpha_us;
  out->gbps = l->gbps;
  out->shared = -1;
  out->pull = 0;
}

/* What the engine's codec costs a rank's progress thread: f32 GB/s it encodes and decodes. */
typedef struct codec_cost {
  double encode_gbps, decode_gbps;
} codec_cost;

/* How long the allreduce of `count` f32 values over S sites of one rank takes when each rank has
 * `gbps` (GB/s) of the WAN to itself: every rank's schedule run by the simulator (src/model/sim.c)
 * over links of one-way time alpha_us, its f32 messages carried at the rate their encoding
 * shrinks them by. The hops are the schedule's own (one for the exchange of two sites, 2(S-1)
 * for a ring). */
static int simulate_exchange_us(int S, uint64_t count, strata_compress c, uint64_t chunk,
                                double alpha_us, double gbps, const codec_cost *codec, double *us) {
  *us = 0;
  if (count == 0 || S < 2) return STRATA_OK;
  int *site_of_rank = sites_of_one_rank(S);
  strata_schedule *scheds = calloc((size_t)S, sizeof *scheds);
  int status = site_of_rank && scheds ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  int compressed = c != STRATA_COMPRESS_NONE;
  for (int r = 0; r < S && status == STRATA_OK; r++) {
    strata_sched_params sp = exchange_params(S, r, count, c, chunk, site_of_rank);
    status = strata_schedule_build(&sp, &scheds[r]);
  }
  if (status == STRATA_OK) {
    double shrink = 4.0 * (double)count / (double)strata_compress_wire_bytes(c, count);
    wan_link link = {alpha_us, gbps * (compressed ? shrink : 1)};
    strata_sim_model model = {.nranks = S, .link = wan_link_of, .ctx = &link};
    if (compressed && codec) { /* the engine's codec on each rank's progress thread */
      model.encode_gbps = codec->encode_gbps;
      model.decode_gbps = codec->decode_gbps;
      model.decode_sent = 1; /* the exchange is in place: senders keep what they sent */
    }
    strata_sim_result result;
    status = strata_sim_run(&model, scheds, &result);
    if (status == STRATA_OK) *us = result.time_us;
  }
  for (int r = 0; scheds && r < S; r++) strata_schedule_free(&scheds[r]);
  free(scheds), free(site_of_rank);
  return status;
}

/* A model's shard runs to billions of values: its schedules would be millions of chunks. Past
 * EXCHANGE_SIMULATED_CHUNKS chunks the time is affine in the count (the pipeline is full and
 * every further chunk costs the same), so it is simulated at two sizes within that and carried
 * along the line through them. */
enum { EXCHANGE_SIMULATED_CHUNKS = 64 };

static int exchange_time_us(int S, uint64_t count, strata_compress c, uint64_t chunk,
                            double alpha_us, double gbps, const codec_cost *codec, double *us) {
  uint64_t per_chunk = chunk >= 4 ? chunk / 4 : 1;
  uint64_t far = per_chunk * EXCHANGE_SIMULATED_CHUNKS, near = far / 2;
  if (count <= far) return simulate_exchange_us(S, count, c, chunk, alpha_us, gbps, codec, us);
  double t_near = 0, t_far = 0;
  int status = simulate_exchange_us(S, near, c, chunk, alpha_us, gbps, codec, &t_near);
  if (status == STRATA_OK)
    status = simulate_exchange_us(S, far, c, chunk, alpha_us, gbps, codec, &t_far);
  if (status == STRATA_OK)
    *us = t_far + (t_far - t_near) * ((double)(count - far) / (double)(far - near));
  return status;
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Group consecutive ranks of equal figures (site 0's ranks). */
static void add_ranks(strata_plan_diloco_sharded *d, int first, int last, double values,
                      const exchange_cost *c) {
  if (d->group_count > 0) {
    strata_plan_diloco_rank_group *g = &d->group[d->group_count - 1];
    if (g->values == values && g->wan_bytes == c->wan_bytes && g->messages == c->messages) {
      g->last = last;
      return;
    }
  }
  if (d->group_count >= STRATA_PLAN_MAX_RANK_GROUPS) {
    d->groups_truncated = 1;
    return;
  }
  strata_plan_diloco_rank_group *g = &d->group[d->group_count++];
  g->first = first, g->last = last;
  g->values = values;
  g->wan_bytes = c->wan_bytes;
  g->messages = c->messages;
  g->header_bytes = c->wan_bytes - c->payload_bytes;
}

int strata_plan_diloco_shard(const strata_workload *w, const char *shapes_spec, int sites,
                             int ranks_per_site, double rtt_ms, double gbps, double alpha_ms,
                             strata_plan_diloco_sharded *d, char *err, size_t err_len) {
  memset(d, 0, sizeof *d);
  const int S = sites, L = ranks_per_site > 0 ? ranks_per_site : 1, P = w->fragments;
  strata_compress c = STRATA_COMPRESS_NONE;
  strata_plan_wire_encoding(w->wire_bits, &c);
  const int compressed = c != STRATA_COMPRESS_NONE;
  /* a rank's codec runs on its one progress thread, at the share of a core it gets */
  double share = w->rank_cores > 0 && w->rank_cores < 1 ? w->rank_cores : 1;
  codec_cost codec = {0, 0};
  if (compressed) {
    strata_codec_core_gbps(c, &codec.encode_gbps, &codec.decode_gbps);
    codec.encode_gbps *= share;
    codec.decode_gbps *= share;
  }
  d->codec_encode_gbps = codec.encode_gbps;
  d->codec_decode_gbps = codec.decode_gbps;
  shape *s = NULL;
  size_t n = 0;
  if (shapes_spec && *shapes_spec) {
    int status = parse_shapes(shapes_spec, &s, &n, err, err_len);
    if (status != STRATA_OK) return status;
    d->from_shapes = 1;
  } else { /* P one-dimensional buffers of N/P values, the remainder one apiece */
    double N = floor(w->params + 0.5), lo = floor(N / P), rem = N - lo * P;
    s = calloc((size_t)P, sizeof *s);
    if (!s) return STRATA_ERR_NO_MEMORY;
    for (int p = 0; p < P; p++) s[p].rows = (uint64_t)(lo + (p < rem)), s[p].row_values = 1;
    n = (size_t)P;
    for (int p = 0; p < P; p++)
      if (s[p].rows == 0) n = (size_t)p < n ? (size_t)p : n;
  }
  if ((size_t)P > n) {
    snprintf(err, err_len,
             "DiLoCo's fragments are runs of whole parameters: --fragments %d needs at least %d "
             "parameters, the shapes name %zu",
             P, P, n);
    free(s);
    return STRATA_ERR_INVALID_ARG;
  }
  /* Ranks come in runs of equal shards: for each parameter the ranks before k = rows / c hold c
   * rows, rank k the rest, the ranks after none. Runs start at 0, L and every such k and k + 1,
   * so the work grows with the parameters, not the ranks. */
  size_t nbreaks = 0;
  size_t *first = malloc(((size_t)P + 1) * sizeof *first);
  uint64_t *breaks = malloc((2 * n + 2) * sizeof *breaks);
  if (!first || !breaks) {
    free(first), free(breaks), free(s);
    return STRATA_ERR_NO_MEMORY;
  }
  breaks[nbreaks++] = 0, breaks[nbreaks++] = (uint64_t)L;
  for (size_t i = 0; i < n; i++) {
    uint64_t c_rows = s[i].rows / (uint64_t)L + (s[i].rows % (uint64_t)L ? 1 : 0);
    uint64_t k = s[i].rows / c_rows;
    if (k < (uint64_t)L) breaks[nbreaks++] = k;
    if (k + 1 < (uint64_t)L) breaks[nbreaks++] = k + 1;
  }
  qsort(breaks, nbreaks, sizeof *breaks, compare_u64);
  size_t runs = 0;
  for (size_t i = 0; i < nbreaks; i++)
    if (i == 0 || breaks[i] != breaks[i - 1]) breaks[runs++] = breaks[i];
  runs--; /* run j: ranks breaks[j] .. breaks[j + 1] - 1 */
  double *values = calloc(runs * (size_t)P, sizeof *values); /* [run][fragment] */
  if (!values) {
    free(first), free(breaks), free(s);
    return STRATA_ERR_NO_MEMORY;
  }
  cut_fragments(s, n, P, first);
  d->modeled = 1;
  d->sites = S;
  d->ranks_per_site = L;
  d->parameters = (double)n;
  d->chunk_bytes = w->chunk_bytes > 0 ? w->chunk_bytes
                                      : strata_chunk_for_path((unsigned)llround(rtt_ms * 1000), 0,
                                                              LAN_CHUNK_BYTES);
  double model = 0;
  for (int p = 0; p < P; p++)
    for (size_t i = first[p]; i < first[p + 1]; i++) {
      const shape *t = &s[i];
      model += (double)t->rows * (double)t->row_values;
      if (shard_rows(t->rows, L, 0) != shard_rows(t->rows, L, L - 1)) {
        if ((double)t->rows * t->row_values > (double)d->uneven_rows * d->uneven_row_values)
          d->uneven_rows = t->rows, d->uneven_row_values = t->row_values;
        d->uneven++;
      }
      for (size_t j = 0; j < runs; j++) {
        uint64_t r = shard_rows(t->rows, L, (int)breaks[j]);
        if (r == 0) break;
        values[j * P + p] += (double)r * (double)t->row_values;
      }
    }
  d->model_values = model;
  d->site_bytes_min = INFINITY;
  int status = STRATA_OK;
  double *frag_max = calloc((size_t)P, sizeof *frag_max); /* the largest shard of each fragment */
  if (!frag_max) status = STRATA_ERR_NO_MEMORY;
  double largest = 0;
  for (size_t j = 0; frag_max && j < runs; j++)
    for (int p = 0; p < P; p++) {
      frag_max[p] = fmax(frag_max[p], values[j * P + p]);
      largest = fmax(largest, frag_max[p]);
    }
  /* the latency part: the largest exchange's hops (its schedule's, which depend on its size:
   * two sites swap a small shard in one message each, a large one in two halves) */
  double latency_us = 0;
  if (status == STRATA_OK)
    status = exchange_time_us(S, (uint64_t)largest, c, d->chunk_bytes, alpha_ms * 1000, 1e9, NULL,
                              &latency_us);
  double latency_ms = latency_us / 1000;
  exchange_cost *cost = calloc((size_t)P, sizeof *cost); /* the previous run's, per fragment */
  if (!cost) status = STRATA_ERR_NO_MEMORY;
  for (int site = 0; site < S && status == STRATA_OK; site++) {
    double site_bytes = 0;
    for (size_t j = 0; j < runs && status == STRATA_OK; j++) {
      const double *mine = values + j * P;
      double ranks = (double)(breaks[j + 1] - breaks[j]);
      /* a run with the shards of the run before it sends what that one sent */
      int same = j > 0 && !memcmp(mine, mine - P, (size_t)P * sizeof *mine);
      exchange_cost rank = {0};
      double rank_values = 0;
      for (int p = 0; p < P && status == STRATA_OK; p++) {
        if (!same) status = exchange_bytes(S, site, (uint64_t)mine[p], c, d->chunk_bytes, &cost[p]);
        rank_values += mine[p];
        rank.wan_bytes += cost[p].wan_bytes, rank.messages += cost[p].messages;
        rank.payload_bytes += cost[p].payload_bytes;
      }
      site_bytes += ranks * rank.wan_bytes;
      if (site == 0) {
        add_ranks(d, (int)breaks[j], (int)breaks[j + 1] - 1, rank_values, &rank);
        d->messages_per_outer += ranks * rank.messages;
      }
    }
    if (site == 0) {
      d->site_bytes_per_outer = site_bytes;
      /* a fragment's exchange: every rank of the site at once, each with its share of the
       * link (the ranks that hold some of the fragment), timed for the largest shard */
      for (int p = 0; p < P && status == STRATA_OK; p++) {
        double holders = 0, us = 0, wire_us = 0;
        for (size_t j = 0; j < runs; j++)
          holders += values[j * P + p] > 0 ? (double)(breaks[j + 1] - breaks[j]) : 0;
        status = exchange_time_us(S, (uint64_t)frag_max[p], c, d->chunk_bytes, alpha_ms * 1000,
                                  gbps / fmax(1, holders), &codec, &us);
        if (status == STRATA_OK && compressed) /* the same without the codec, to show its share */
          status = exchange_time_us(S, (uint64_t)frag_max[p], c, d->chunk_bytes, alpha_ms * 1000,
                                    gbps / fmax(1, holders), NULL, &wire_us);
        d->exchange_ms_per_outer += us / 1000;
        d->codec_ms_per_outer += compressed ? (us - wire_us) / 1000 : 0;
        d->exposed_ms_per_outer += fmax(0, us / 1000 - w->delay * w->step_ms);
      }
    }
    d->site_bytes_min = fmin(d->site_bytes_min, site_bytes);
    d->site_bytes_max = fmax(d->site_bytes_max, site_bytes);
  }
  free(cost), free(frag_max), free(breaks);
  d->latency_ms = latency_ms;
  free(first), free(values), free(s);
  if (status != STRATA_OK) {
    snprintf(err, err_len, "the sharded exchange's schedule did not build: %s",
             strata_strerror(status));
    d->modeled = 0;
  }
  return status;
}
