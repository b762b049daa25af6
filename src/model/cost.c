// SPDX-License-Identifier: Apache-2.0
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
 * On GPUs inside a site (strata_fabric.gpu) the collectives NCCL carries are costed by
 * model/nccl.c instead: NCCL, not strata's engine, runs there, with channels over every NIC of a
 * node where the ring below would cross each node boundary with one flow.
 *
 * Invariant: for a one-level fabric the sums below reduce exactly to the textbook formulas of
 * Thakur, Rabenseifner and Gropp ("Optimization of Collective Communication Operations in
 * MPICH", IJHPCA 2005), which is what tests/test_model_cost.c checks and what the simulator must
 * agree with.
 */
#include "model/cost.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "coll/schedule.h"
#include "model/physics.h"

static const char *const algo_names[STRATA_MODEL_ALGO_COUNT] = {
    "ring", "tree", "rhd", "direct", "hierarchical", "in-network", "nvls-tree", "collnet", "pat"};

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

/* ---- the algorithms, as src/coll builds them ---- */

/* Pipeline rounds exactly as the builders cut them (strata_coll_rounds, 1-byte elements). */
static double rounds_for(const strata_fabric *f, double p, double count_bytes, double parts) {
  strata_sched_params sp;
  memset(&sp, 0, sizeof sp);
  sp.nranks = p > INT32_MAX ? INT32_MAX : (int)p;
  sp.elem_size = 1;
  sp.chunk_bytes = f->chunk_bytes > 0 ? (uint64_t)f->chunk_bytes : 0;
  uint64_t count = count_bytes > 0 ? (uint64_t)count_bytes : 0;
  return (double)strata_coll_rounds(&sp, count, parts > 0 ? (uint64_t)parts : 1);
}

/* A ring over the hierarchy has p hops: p − p/g0 inside nodes, then one per node boundary, one
 * per site boundary... A chain of m consecutive hops (a chunk's journey) crosses each level in
 * proportion, the slow levels rounded up. Inside a node every rank sends at once (aggregate
 * shared by the node's ranks); outer boundaries carry one flow per group. */
typedef struct ring_shape {
  double path_us; /* latency + bytes of one chunk along m hops */
  double worst_us_per_byte;
  double worst_alpha_us;
} ring_shape;

static ring_shape ring_chain(const strata_fabric *f, double m, double c, int wraps) {
  ring_shape r = {0, 0, 0};
  double p = (double)strata_fabric_nranks(f), remaining = m;
  for (int l = f->nlevels - 1; l >= 0 && remaining > 0; l--) {
    if (f->level[l].fanout <= 1) continue;
    double groups_inside = p / span_below(f, l + 1);
    double hops = l == f->nlevels - 1 ? p / span_below(f, l) : p / span_below(f, l) - groups_inside;
    /* a wrapping ring spreads the slow hops evenly; a chain from rank 0 to p−1 crosses each
     * boundary once */
    double count = wraps ? fmin(remaining, ceil(m * hops / p - 1e-9))
                         : fmin(remaining, l == f->nlevels - 1 ? hops - 1 : hops);
    double flows = l == 0 ? f->level[0].fanout : 1;
    double per_byte = 1.0 / (level_gbps(f, l, flows) * 1e3);
    r.path_us += count * (f->level[l].alpha_us + c * per_byte);
    if (per_byte > r.worst_us_per_byte) r.worst_us_per_byte = per_byte;
    if (count > 0 && f->level[l].alpha_us > r.worst_alpha_us)
      r.worst_alpha_us = f->level[l].alpha_us;
    remaining -= count;
  }
  return r;
}

static double gamma_us(const strata_fabric *f) {
  return f->reduce_gbps > 0 ? 1.0 / (f->reduce_gbps * 1e3) : 0.0;
}

/* A pipeline of k rounds whose one-round critical path is `path_us` and whose busiest resource
 * (a port or the reducing core) spends `busy_us` per round: (k−1)·busy + path. */
static double pipeline_us(double k, double busy_us, double path_us) {
  return (k - 1) * busy_us + path_us;
}

/* Ring reduce-scatter / allgather (steps = p−1) and allreduce (steps = 2(p−1), half reducing). */
static double ring_us(const strata_fabric *f, double p, double bytes, int steps_x, int reduce,
                      double k) {
  double g = reduce ? gamma_us(f) : 0;
  double c = bytes / (p * k);
  double steps = steps_x * (p - 1), reduces = reduce ? (p - 1) : 0;
  ring_shape r = ring_chain(f, steps, c, 1);
  double busy = fmax(steps * c * r.worst_us_per_byte, reduces * c * g);
  /* either one chunk's journey or the slowest port, whichever binds */
  return fmax(pipeline_us(k, busy, r.path_us + reduces * c * g),
              k * busy + r.worst_alpha_us + (reduce ? c * g : 0));
}

/* Chain broadcast / reduce: p−1 hops, k rounds. */
static double chain_us(const strata_fabric *f, double p, double bytes, int reduce) {
  double g = reduce ? gamma_us(f) : 0;
  double k = rounds_for(f, p, bytes, 1), c = bytes / k;
  ring_shape r = ring_chain(f, p - 1, c, 0);
  return pipeline_us(k, c * fmax(r.worst_us_per_byte, g), r.path_us + (p - 1) * c * g);
}

static double pow2_floor(double p) {
  double q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

/* The level a pair of real ranks crosses. */
static int level_of_pair(const strata_fabric *f, double r, double q) {
  double span = 1;
  for (int l = 0; l < f->nlevels; l++) {
    span *= f->level[l].fanout > 0 ? f->level[l].fanout : 1;
    if (floor(r / span) == floor(q / span)) return l;
  }
  return f->nlevels - 1;
}

/* The real rank playing virtual rank v after the fold of non-powers of two (rhd.c). */
static double rhd_real(double v, double rem) {
  return v < rem ? 2 * v + 1 : v + rem;
}

/* One hypercube exchange of `bytes` between virtual ranks v and v^mask, all at once: the slowest
 * level crossed, with as many flows per group as cross there (sampled beyond 4096 ranks). */
static double hyper_step_us(const strata_fabric *f, double p, double mask, double bytes) {
  double q = pow2_floor(p), rem = p - q;
  double stride = q > 4096 ? floor(q / 4096) : 1;
  double crossing[STRATA_FABRIC_MAX_LEVELS] = {0}, samples = 0;
  for (double v = 0; v < q; v += stride) {
    double partner = (double)((uint64_t)v ^ (uint64_t)mask);
    crossing[level_of_pair(f, rhd_real(v, rem), rhd_real(partner, rem))]++;
    samples++;
  }
  double worst = 0;
  for (int l = 0; l < f->nlevels; l++) {
    if (crossing[l] == 0) continue;
    double groups = p / span_below(f, l); /* level-l boundaries: one per child group */
    double flows = crossing[l] / samples * q / (groups > 1 ? groups : 1);
    if (l == 0) flows = 1; /* inside a node each rank has its own link */
    double t = f->level[l].alpha_us + xfer_us(bytes, level_gbps(f, l, flows));
    if (t > worst) worst = t;
  }
  return worst;
}

static double rhd_fold_us(const strata_fabric *f, double p, double bytes, int reduce) {
  if (pow2_floor(p) == p) return 0;
  return step_us(f, 1, bytes, 1) + (reduce ? reduce_us(f, bytes) : 0);
}

/* Recursive halving (largest distance first, as rhd.c): reduce-scatter phase. */
static double rhd_halving_us(const strata_fabric *f, double p, double bytes, int reduce) {
  double q = pow2_floor(p), t = 0, msg = bytes;
  for (double mask = q / 2; mask >= 1; mask /= 2) {
    msg /= 2;
    t += hyper_step_us(f, p, mask, msg) + (reduce ? reduce_us(f, msg) : 0);
  }
  return t;
}

/* Recursive doubling of the allreduce's second half (mask 1 first, growing messages). */
static double rhd_doubling_us(const strata_fabric *f, double p, double bytes) {
  double q = pow2_floor(p), t = 0, msg = bytes / q;
  for (double mask = 1; mask < q; mask *= 2) {
    t += hyper_step_us(f, p, mask, msg);
    msg *= 2;
  }
  return t;
}

/* Small allreduce: lg p exchanges of the whole vector (rhd.c below 32 KiB). */
#define RHD_DOUBLING_MAX_BYTES (32.0 * 1024)
static double recursive_doubling_us(const strata_fabric *f, double p, double bytes) {
  double q = pow2_floor(p), t = 0;
  for (double mask = 1; mask < q; mask *= 2)
    t += hyper_step_us(f, p, mask, bytes) + reduce_us(f, bytes);
  return t;
}

/* Allgather by recursive doubling (powers of two) or Bruck (any count): step k moves
 * min(2^k, p − 2^k) blocks over distance 2^k. */
static double allgather_rhd_us(const strata_fabric *f, double p, double bytes) {
  double t = 0, block = bytes / p;
  if (pow2_floor(p) == p) return rhd_doubling_us(f, p, bytes);
  for (double d = 1; d < p; d *= 2) t += step_us(f, d, block * fmin(d, p - d), 1);
  return t;
}

/* Critical path of one round on a binomial subtree of n ranks (tree.c: the children of relative
 * rank 0 sit at distances 1, 2, 4, ... with subtrees of min(d, n − d) ranks). Broadcast: the
 * parent sends back to back, largest subtree first; reduce: it receives in increasing subtree
 * size and reduces each on arrival (its port took the bytes while its core was busy).
 *
 * Below the top distance d_top = pow2_floor(n − 1) every subtree is a full one of d = 2^j ranks
 * (n − d > d), and the top one holds the n − d_top ranks left. So the path of n ranks needs the
 * paths of full subtrees, each built from smaller full ones (tree_full_paths), and of one
 * leftover, itself a smaller tree: O(log² n) work however many ranks, where expanding every
 * subtree would cost O(n) (two sites of 10^7 nodes took seconds). The sums are the expansion's,
 * term for term. */
#define TREE_MAX_LOG2 1100 /* 2^1100 > DBL_MAX: every double n has its log2 below this */

static double tree_step_path_us(const strata_fabric *f, double n, double c, int reduce,
                                const double *full, double leftover_us) {
  double d_top = pow2_floor(n - 1), t = 0, sent = 0;
  if (reduce) {
    int j = 0;
    for (double d = 1; d <= d_top; d *= 2, j++) {
      int l = level_of_distance(f, d);
      double xfer = xfer_us(c, level_gbps(f, l, 1));
      double below = d < d_top ? full[j] : leftover_us;
      t = fmax(t, below + f->level[l].alpha_us + xfer) + reduce_us(f, c);
    }
    return t;
  }
  int j = 0;
  while (ldexp(1, j) < d_top) j++;
  for (double d = d_top; d >= 1; d /= 2, j--) {
    int l = level_of_distance(f, d);
    sent += xfer_us(c, level_gbps(f, l, 1));
    double below = d < d_top ? full[j] : leftover_us;
    t = fmax(t, sent + f->level[l].alpha_us + below);
  }
  return t;
}

/* full[j] = path of a full subtree of 2^j ranks, for 2^j <= top: its own leftover is full[j-1]. */
static void tree_full_paths(const strata_fabric *f, double top, double c, int reduce,
                            double *full) {
  full[0] = 0;
  for (int j = 1; ldexp(1, j) <= top; j++)
    full[j] = tree_step_path_us(f, ldexp(1, j), c, reduce, full, full[j - 1]);
}

static double tree_leftover_path_us(const strata_fabric *f, double n, double c, int reduce,
                                    const double *full) {
  if (n <= 1) return 0;
  double d_top = pow2_floor(n - 1);
  double leftover = tree_leftover_path_us(f, n - d_top, c, reduce, full);
  return tree_step_path_us(f, n, c, reduce, full, leftover);
}

static double tree_path_us(const strata_fabric *f, double n, double c, int reduce) {
  if (n <= 1) return 0;
  double full[TREE_MAX_LOG2];
  tree_full_paths(f, pow2_floor(n - 1), c, reduce, full);
  return tree_leftover_path_us(f, n, c, reduce, full);
}

/* Binomial tree pipelined in k rounds: the root's port (or core) is the busy resource. */
static double tree_us(const strata_fabric *f, double p, double bytes, int reduce) {
  double k = rounds_for(f, p, bytes, 1), c = bytes / k, busy = 0;
  for (double d = 1; d < p; d *= 2) {
    double xfer = xfer_us(c, level_gbps(f, level_of_distance(f, d), 1));
    busy += fmax(xfer, reduce ? reduce_us(f, c) : 0);
  }
  return pipeline_us(k, busy, tree_path_us(f, p, c, reduce));
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

/* Every rank posts p−1 messages of bytes/p at once (direct.c): one latency, then the bytes
 * serialize on each rank's port; outer levels share their aggregate among the group's ranks. */
static double direct_us(const strata_fabric *f, double p, double bytes, int all, int reduce) {
  double t = 0, alpha = 0, chunk = bytes / p;
  for (int l = 0; l < f->nlevels; l++) {
    double g = f->level[l].fanout;
    if (g <= 1) continue;
    double peers = (g - 1) * span_below(f, l);
    t += peers * xfer_us(chunk, level_gbps(f, l, all ? span_below(f, l) : 1));
    if (f->level[l].alpha_us > alpha) alpha = f->level[l].alpha_us;
  }
  return alpha + t + (reduce ? (p - 1) * reduce_us(f, chunk) : 0);
}

/* Binomial scatter/gather, one round: the root's port moves every block but its own, a subtree
 * of min(d, p − d) blocks per child, the largest (farthest) first. */
static double tree_rooted_us(const strata_fabric *f, double p, double bytes) {
  double block = bytes / p, sent = 0, t = 0;
  for (double d = pow2_floor(p - 1); d >= 1; d /= 2) {
    int l = level_of_distance(f, d);
    double sub = fmin(d, p - d);
    sent += xfer_us(sub * block, level_gbps(f, l, 1));
    t = fmax(t, sent + f->level[l].alpha_us + (sub > 1 ? tree_rooted_us(f, sub, sub * block) : 0));
  }
  return t;
}

static double allreduce_us(const strata_fabric *f, strata_model_algo a, double p, double n) {
  switch (a) {
    case STRATA_MODEL_RING:
      return ring_us(f, p, n, 2, 1, rounds_for(f, p, n, p));
    case STRATA_MODEL_RHD:
      if (n <= RHD_DOUBLING_MAX_BYTES)
        return rhd_fold_us(f, p, n, 1) + recursive_doubling_us(f, p, n) + rhd_fold_us(f, p, n, 0);
      return rhd_fold_us(f, p, n, 1) + rhd_halving_us(f, p, n, 1) + rhd_doubling_us(f, p, n) +
             rhd_fold_us(f, p, n, 0);
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
      return ring_us(f, p, n, 1, reduce, rounds_for(f, p, n / p, 1));
    case STRATA_MODEL_RHD:
      if (!reduce) return allgather_rhd_us(f, p, n);
      return rhd_fold_us(f, p, n, reduce) + rhd_halving_us(f, p, n, reduce);
    case STRATA_MODEL_DIRECT:
      return direct_us(f, p, n, 1, reduce);
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

/* NCCL carries the call: GPUs, and nothing beyond the site (levels 0 and 1). */
static int nccl_scope(const strata_fabric *f, strata_coll coll) {
  if (!f->gpu.present) return 0;
  for (int l = 2; l < f->nlevels; l++)
    if (f->level[l].fanout > 1) return 0;
  return coll == STRATA_COLL_ALLREDUCE || coll == STRATA_COLL_REDUCE_SCATTER ||
         coll == STRATA_COLL_ALLGATHER || coll == STRATA_COLL_BROADCAST ||
         coll == STRATA_COLL_REDUCE;
}

/* NCCL's time for one model algorithm with the protocol NCCL would pick (*proto), or -1. */
static double nccl_us(const strata_fabric *f, strata_coll coll, strata_model_algo a, double bytes,
                      int *proto) {
  int ppn = f->level[0].fanout > 0 ? f->level[0].fanout : 1;
  int nodes = f->nlevels > 1 && f->level[1].fanout > 0 ? f->level[1].fanout : 1;
  strata_nccl_algo cand[2];
  int ncand = 0;
  switch (a) {
    case STRATA_MODEL_RING:
      cand[ncand++] = STRATA_NCCL_RING;
      break;
    case STRATA_MODEL_TREE:
      cand[ncand++] = STRATA_NCCL_TREE;
      break;
    case STRATA_MODEL_INNET:
      cand[ncand++] = STRATA_NCCL_NVLS;
      break;
    case STRATA_MODEL_NVLS_TREE:
      cand[ncand++] = STRATA_NCCL_NVLS_TREE;
      break;
    case STRATA_MODEL_COLLNET:
      cand[ncand++] = STRATA_NCCL_COLLNET_DIRECT;
      cand[ncand++] = STRATA_NCCL_COLLNET_CHAIN;
      break;
    case STRATA_MODEL_PAT:
      cand[ncand++] = STRATA_NCCL_PAT;
      break;
    default:
      return -1; /* strata's own schedules do not run where NCCL does */
  }
  double best = -1;
  for (int i = 0; i < ncand; i++) {
    strata_nccl_cost c;
    if (strata_nccl_best_proto(&f->gpu, ppn, nodes, coll, cand[i], bytes, &c) != 0) continue;
    if (best < 0 || c.time_us < best) {
      best = c.time_us;
      if (proto) *proto = (int)c.proto;
    }
  }
  return best;
}

static double cost_us(const strata_fabric *f, strata_coll coll, strata_model_algo a, double bytes,
                      int *proto);

double strata_cost_time_us(const strata_fabric *f, strata_coll coll, strata_model_algo a,
                           double bytes) {
  return cost_us(f, coll, a, bytes, NULL);
}

static double cost_us(const strata_fabric *f, strata_coll coll, strata_model_algo a, double bytes,
                      int *proto) {
  if (proto) *proto = -1;
  if (!f || f->nlevels < 1 || bytes < 0) return -1;
  double p = (double)strata_fabric_nranks(f);
  if (p <= 1) return a == STRATA_MODEL_RING ? 0 : -1;
  if (nccl_scope(f, coll)) return nccl_us(f, coll, a, bytes, proto);
  if (a == STRATA_MODEL_NVLS_TREE || a == STRATA_MODEL_COLLNET || a == STRATA_MODEL_PAT) return -1;
  switch (coll) {
    case STRATA_COLL_ALLREDUCE:
      return allreduce_us(f, a, p, bytes);
    case STRATA_COLL_REDUCE_SCATTER:
      return reduce_scatter_us(f, a, p, bytes, 1);
    case STRATA_COLL_ALLGATHER:
      return reduce_scatter_us(f, a, p, bytes, 0);
    case STRATA_COLL_BROADCAST:
      if (a == STRATA_MODEL_TREE) return tree_us(f, p, bytes, 0);
      if (a == STRATA_MODEL_RING) return chain_us(f, p, bytes, 0);
      return -1;
    case STRATA_COLL_REDUCE:
      if (a == STRATA_MODEL_TREE) return tree_us(f, p, bytes, 1);
      if (a == STRATA_MODEL_RING) return chain_us(f, p, bytes, 1);
      return -1;
    case STRATA_COLL_GATHER:
    case STRATA_COLL_SCATTER:
      if (a == STRATA_MODEL_TREE) return tree_rooted_us(f, p, bytes);
      if (a == STRATA_MODEL_DIRECT) return direct_us(f, p, bytes, 0, 0);
      return -1;
    case STRATA_COLL_ALLTOALL:
      return a == STRATA_MODEL_DIRECT ? direct_us(f, p, bytes, 1, 0) : -1;
    case STRATA_COLL_BARRIER:
      if (a == STRATA_MODEL_RHD) return allgather_rhd_us(f, p, 0);
      if (a == STRATA_MODEL_DIRECT) return direct_us(f, p, 0, 1, 0);
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
  int proto = -1;
  double t = cost_us(f, coll, algo, bytes, &proto);
  if (t < 0) return -1;
  memset(out, 0, sizeof *out);
  out->proto = proto;
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
