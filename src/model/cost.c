/*
 * cost.c — closed-form costs of collective algorithms on a hierarchical fabric (see cost.h).
 *
 * Every algorithm is costed as the sequence of steps its schedule performs. A step between
 * partners `distance` ranks apart crosses the outermost level at which they differ; it pays that
 * level's α and moves its bytes at the bandwidth a rank gets there, which is the link's own rate
 * capped by the group's aggregate boundary shared by the ranks crossing at the same time. A ring
 * crosses each boundary with one flow; recursive halving and all-to-all cross with every rank
 * of the group at once; binomial trees with one rank per group.
 *
 * Invariant: for a one-level fabric the sums below reduce exactly to the textbook formulas of
 * FACTS.md, which is what tests/test_model_cost.c checks and what the simulator must agree with.
 */
#include "model/cost.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/physics.h"

static const char *const algo_names[STRATA_MODEL_ALGO_COUNT] = {
    "ring", "tree", "rhd", "direct", "hierarchical", "in-network"};

const char *strata_model_algo_name(strata_model_algo algo) {
  if ((int)algo < 0 || algo >= STRATA_MODEL_ALGO_COUNT) return "?";
  return algo_names[algo];
}

strata_algo strata_model_algo_engine(strata_model_algo algo) {
  switch (algo) {
    case STRATA_MODEL_RING:
      return STRATA_ALGO_RING;
    case STRATA_MODEL_TREE:
      return STRATA_ALGO_TREE;
    case STRATA_MODEL_RHD:
      return STRATA_ALGO_RHD;
    case STRATA_MODEL_DIRECT:
      return STRATA_ALGO_DIRECT;
    default:
      return STRATA_ALGO_AUTO;
  }
}

long strata_fabric_nranks(const strata_fabric *f) {
  long n = 1;
  for (int l = 0; l < f->nlevels; l++) {
    int g = f->level[l].fanout > 0 ? f->level[l].fanout : 1;
    if (n > INT32_MAX / g) return INT32_MAX;
    n *= g;
  }
  return n;
}

void strata_fabric_flat(strata_fabric *f, int nranks, double alpha_us, double gbps,
                        double reduce_gbps) {
  memset(f, 0, sizeof *f);
  f->nlevels = 1;
  f->level[0].name = "link";
  f->level[0].fanout = nranks;
  f->level[0].alpha_us = alpha_us;
  f->level[0].per_rank_gbps = gbps;
  f->reduce_gbps = reduce_gbps;
}

/* ---- per-level helpers ---- */

/* Ranks inside one group of level l (span(-1) = 1). */
static double span_below(const strata_fabric *f, int l) {
  double s = 1;
  for (int k = 0; k < l; k++) s *= f->level[k].fanout > 0 ? f->level[k].fanout : 1;
  return s;
}

/* Bandwidth of a crossing of level l by `flows` ranks of one group at once. */
static double level_gbps(const strata_fabric *f, int l, double flows) {
  const strata_level *lv = &f->level[l];
  double bw = lv->per_rank_gbps;
  if (lv->aggregate_gbps > 0 && flows > 0) {
    double share = lv->aggregate_gbps / flows;
    if (share < bw) bw = share;
  }
  return bw > 0 ? bw : 1e-9;
}

static double xfer_us(double bytes, double gbps) {
  return bytes / (gbps * 1e3);
}
static double reduce_us(const strata_fabric *f, double bytes) {
  return f->reduce_gbps > 0 ? bytes / (f->reduce_gbps * 1e3) : 0.0;
}

/* The level a pair `distance` apart crosses: the smallest l whose groups span the distance. */
static int level_of_distance(const strata_fabric *f, double distance) {
  double span = 1;
  for (int l = 0; l < f->nlevels; l++) {
    span *= f->level[l].fanout > 0 ? f->level[l].fanout : 1;
    if (distance < span) return l;
  }
  return f->nlevels - 1;
}

/* One step at distance d, message `bytes`, with every rank of a group crossing (all = 1) or one
 * flow per group (all = 0). */
static double step_us(const strata_fabric *f, double distance, double bytes, int all) {
  int l = level_of_distance(f, distance);
  double flows = all ? span_below(f, l) : 1;
  return f->level[l].alpha_us + xfer_us(bytes, level_gbps(f, l, flows));
}

/* A ring step: inside a node every rank sends at once; every outer boundary is crossed by one
 * flow per group. The slowest hop sets the pace. */
static double ring_step_us(const strata_fabric *f, double bytes) {
  double worst = 0;
  for (int l = 0; l < f->nlevels; l++) {
    if (f->level[l].fanout <= 1) continue;
    double flows = l == 0 ? f->level[0].fanout : 1;
    double t = f->level[l].alpha_us + xfer_us(bytes, level_gbps(f, l, flows));
    if (t > worst) worst = t;
  }
  return worst;
}

static double pow2_floor(double p) {
  double q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

/* ---- the algorithms ---- */

static double ring_rs_us(const strata_fabric *f, double p, double bytes, int reduce) {
  double chunk = bytes / p;
  return (p - 1) * ring_step_us(f, chunk) + (reduce ? (p - 1) * reduce_us(f, chunk) : 0);
}

/* Recursive halving reduce-scatter, distance 1 first (large messages on the fastest links);
 * non-powers of two fold the extra ranks in first (one exchange of the whole buffer). */
static double rhd_rs_us(const strata_fabric *f, double p, double bytes, int reduce) {
  double q = pow2_floor(p), t = 0, msg = bytes;
  for (double d = 1; d < q; d *= 2) {
    msg /= 2;
    t += step_us(f, d, msg, 1) + (reduce ? reduce_us(f, msg) : 0);
  }
  return t;
}

static double rhd_fold_us(const strata_fabric *f, double p, double bytes, int reduce) {
  if (pow2_floor(p) == p) return 0;
  return step_us(f, 1, bytes, 1) + (reduce ? reduce_us(f, bytes) : 0);
}

/* Binomial tree over p ranks, whole buffer per step, one flow per group. */
static double tree_us(const strata_fabric *f, double p, double bytes, int reduce) {
  double t = 0;
  for (double d = 1; d < p; d *= 2)
    t += step_us(f, d, bytes, 0) + (reduce ? reduce_us(f, bytes) : 0);
  return t;
}

/* Ring per level (or the switch where it reduces): reduce-scatter up (phase 0) or allgather down
 * (phase 1). `innet` lets levels with in-network reduction use it. */
static double hier_phase_us(const strata_fabric *f, double bytes, int reduce, int innet) {
  double t = 0, data = bytes;
  for (int l = 0; l < f->nlevels; l++) {
    const strata_level *lv = &f->level[l];
    double g = lv->fanout;
    if (g <= 1) continue;
    double bw = level_gbps(f, l, span_below(f, l));
    if (innet && lv->innet) {
      double eff = lv->innet_efficiency > 0 ? lv->innet_efficiency : 1.0;
      t += lv->innet_alpha_us / 2 + xfer_us(data, bw * eff) / 2;
    } else {
      t += (g - 1) * (lv->alpha_us + xfer_us(data / g, bw));
      if (reduce) t += (g - 1) * reduce_us(f, data / g);
    }
    data /= g;
  }
  return t;
}

static int has_innet(const strata_fabric *f) {
  for (int l = 0; l < f->nlevels; l++)
    if (f->level[l].innet && f->level[l].fanout > 1) return 1;
  return 0;
}

static int is_multilevel(const strata_fabric *f) {
  int n = 0;
  for (int l = 0; l < f->nlevels; l++) n += f->level[l].fanout > 1;
  return n > 1;
}

/* Pairwise exchange: p−1 rounds of bytes/p, every rank crossing at once. */
static double direct_alltoall_us(const strata_fabric *f, double p, double bytes) {
  double t = 0, chunk = bytes / p;
  for (int l = 0; l < f->nlevels; l++) {
    double g = f->level[l].fanout;
    if (g <= 1) continue;
    double peers = (g - 1) * span_below(f, l);
    t += peers * (f->level[l].alpha_us + xfer_us(chunk, level_gbps(f, l, span_below(f, l))));
  }
  return t;
}

/* Root-serialized gather/scatter: p−1 messages of bytes/p through the root's port. */
static double direct_rooted_us(const strata_fabric *f, double p, double bytes) {
  double t = 0, chunk = bytes / p;
  for (int l = 0; l < f->nlevels; l++) {
    double g = f->level[l].fanout;
    if (g <= 1) continue;
    double peers = (g - 1) * span_below(f, l);
    t += peers * (f->level[l].alpha_us + xfer_us(chunk, level_gbps(f, l, 1)));
  }
  return t;
}

/* Binomial scatter/gather: lg p steps, halving the data each step (largest distance first). */
static double tree_rooted_us(const strata_fabric *f, double p, double bytes) {
  double t = 0, msg = bytes;
  double top = pow2_floor(p) < p ? pow2_floor(p) * 2 : p;
  for (double d = top / 2; d >= 1; d /= 2) {
    msg /= 2;
    t += step_us(f, d, msg, 0);
  }
  return t;
}

static double allreduce_us(const strata_fabric *f, strata_model_algo a, double p, double n) {
  switch (a) {
    case STRATA_MODEL_RING:
      return ring_rs_us(f, p, n, 1) + ring_rs_us(f, p, n, 0);
    case STRATA_MODEL_RHD:
      return rhd_fold_us(f, p, n, 1) + rhd_fold_us(f, p, n, 0) + rhd_rs_us(f, p, n, 1) +
             rhd_rs_us(f, p, n, 0);
    case STRATA_MODEL_TREE:
      return tree_us(f, p, n, 1) + tree_us(f, p, n, 0);
    case STRATA_MODEL_HIER:
      if (!is_multilevel(f)) return -1;
      return hier_phase_us(f, n, 1, 0) + hier_phase_us(f, n, 0, 0);
    case STRATA_MODEL_INNET:
      if (!has_innet(f)) return -1;
      return hier_phase_us(f, n, 1, 1) + hier_phase_us(f, n, 0, 1);
    default:
      return -1;
  }
}

static double reduce_scatter_us(const strata_fabric *f, strata_model_algo a, double p, double n,
                                int reduce) {
  switch (a) {
    case STRATA_MODEL_RING:
      return ring_rs_us(f, p, n, reduce);
    case STRATA_MODEL_RHD:
      return rhd_fold_us(f, p, n, reduce) + rhd_rs_us(f, p, n, reduce);
    case STRATA_MODEL_HIER:
      if (!is_multilevel(f)) return -1;
      return hier_phase_us(f, n, reduce, 0);
    case STRATA_MODEL_INNET:
      if (!has_innet(f)) return -1;
      return hier_phase_us(f, n, reduce, 1);
    default:
      return -1;
  }
}

double strata_cost_time_us(const strata_fabric *f, strata_coll coll, strata_model_algo a,
                           double bytes) {
  if (!f || f->nlevels < 1 || bytes < 0) return -1;
  double p = (double)strata_fabric_nranks(f);
  if (p <= 1) return a == STRATA_MODEL_RING ? 0 : -1;
  switch (coll) {
    case STRATA_COLL_ALLREDUCE:
      return allreduce_us(f, a, p, bytes);
    case STRATA_COLL_REDUCE_SCATTER:
      return reduce_scatter_us(f, a, p, bytes, 1);
    case STRATA_COLL_ALLGATHER:
      return reduce_scatter_us(f, a, p, bytes, 0);
    case STRATA_COLL_BROADCAST:
      if (a == STRATA_MODEL_TREE) return tree_us(f, p, bytes, 0);
      /* van de Geijn: binomial scatter, then ring allgather */
      if (a == STRATA_MODEL_RING) return tree_rooted_us(f, p, bytes) + ring_rs_us(f, p, bytes, 0);
      return -1;
    case STRATA_COLL_REDUCE:
      if (a == STRATA_MODEL_TREE) return tree_us(f, p, bytes, 1);
      /* reduce-scatter, then binomial gather to the root */
      if (a == STRATA_MODEL_RING) return ring_rs_us(f, p, bytes, 1) + tree_rooted_us(f, p, bytes);
      return -1;
    case STRATA_COLL_GATHER:
    case STRATA_COLL_SCATTER:
      if (a == STRATA_MODEL_TREE) return tree_rooted_us(f, p, bytes);
      if (a == STRATA_MODEL_DIRECT) return direct_rooted_us(f, p, bytes);
      return -1;
    case STRATA_COLL_ALLTOALL:
      return a == STRATA_MODEL_DIRECT ? direct_alltoall_us(f, p, bytes) : -1;
    case STRATA_COLL_BARRIER:
      if (a == STRATA_MODEL_RHD) return rhd_rs_us(f, p, 0, 0) + 2 * rhd_fold_us(f, p, 0, 0);
      if (a == STRATA_MODEL_TREE) return 2 * tree_us(f, p, 0, 0);
      return -1;
    case STRATA_COLL_SEND:
    case STRATA_COLL_RECV:
      return a == STRATA_MODEL_DIRECT ? step_us(f, 1, bytes, 0) : -1;
    default:
      return -1;
  }
}

double strata_busbw_factor(strata_coll coll, long nranks) {
  double n = (double)nranks;
  if (n < 1) return 0;
  switch (coll) {
    case STRATA_COLL_ALLREDUCE:
      return 2 * (n - 1) / n;
    case STRATA_COLL_REDUCE_SCATTER:
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_ALLTOALL:
      return (n - 1) / n;
    default:
      return 1;
  }
}

int strata_cost_predict(const strata_fabric *f, strata_coll coll, strata_model_algo algo,
                        double bytes, strata_prediction *out) {
  double t = strata_cost_time_us(f, coll, algo, bytes);
  if (t < 0) return -1;
  memset(out, 0, sizeof *out);
  out->coll = coll;
  out->bytes = bytes;
  out->algo = algo;
  out->time_us = t;
  out->algbw_gbps = t > 0 ? bytes / 1e3 / t : 0;
  out->busbw_gbps = out->algbw_gbps * strata_busbw_factor(coll, strata_fabric_nranks(f));
  return 0;
}

int strata_cost_best(const strata_fabric *f, strata_coll coll, double bytes,
                     strata_prediction *out) {
  int found = -1;
  for (int a = 0; a < STRATA_MODEL_ALGO_COUNT; a++) {
    strata_prediction p;
    if (strata_cost_predict(f, coll, (strata_model_algo)a, bytes, &p) != 0) continue;
    if (found != 0 || p.time_us < out->time_us) *out = p;
    found = 0;
  }
  return found;
}

/* Reduction throughput of one CPU core on f32 sums: assumed 8 GB/s (memory-bound, reading two
 * operands and writing one); bench passes measured memcpy bandwidth and this scales with it. */
double strata_model_predict_host_busbw(strata_coll coll, strata_algo algo, int nranks, double bytes,
                                       int use_tcp, double memcpy_gbps) {
  if (nranks < 1 || bytes < 0 || memcpy_gbps <= 0) return -1;
  strata_fabric f;
  double gbps =
      use_tcp ? strata_host_loopback_tcp_gbps(memcpy_gbps) : strata_host_shm_gbps(memcpy_gbps);
  double alpha = use_tcp ? STRATA_HOST_LOOPBACK_TCP_LATENCY_US : STRATA_HOST_SHM_LATENCY_US;
  strata_fabric_flat(&f, nranks, alpha, gbps, memcpy_gbps / 3);
  /* one host: every rank shares the memory bus, so the aggregate is the memcpy bandwidth */
  f.level[0].aggregate_gbps = use_tcp ? gbps : memcpy_gbps / 2;
  strata_prediction p;
  int rc;
  if (algo == STRATA_ALGO_AUTO) {
    rc = strata_cost_best(&f, coll, bytes, &p);
  } else {
    strata_model_algo m = STRATA_MODEL_RING;
    if (algo == STRATA_ALGO_TREE) m = STRATA_MODEL_TREE;
    if (algo == STRATA_ALGO_RHD) m = STRATA_MODEL_RHD;
    if (algo == STRATA_ALGO_DIRECT) m = STRATA_MODEL_DIRECT;
    rc = strata_cost_predict(&f, coll, m, bytes, &p);
  }
  return rc == 0 ? p.busbw_gbps : -1;
}
