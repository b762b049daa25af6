// SPDX-License-Identifier: Apache-2.0
/*
 * cost.h — closed-form α-β(-γ) costs of collective algorithms over a hierarchical fabric.
 *
 * A fabric is a stack of levels, innermost first: GPUs (ranks) inside a node, nodes inside a
 * site, sites. Level l groups `fanout` children; its links have a per-message latency α, a
 * bandwidth one rank gets when crossing it (`per_rank_gbps`, its NVLink or NIC), and the
 * capacity of the group's whole boundary (`aggregate_gbps`, e.g. a site's WAN link, shared by
 * every rank crossing at once). Ranks are numbered innermost-first: rank = site·(nodes·g) +
 * node·g + local. γ is the cost of reducing one byte (`reduce_gbps`).
 *
 * Costs are the textbook forms (Thakur, Rabenseifner and Gropp, IJHPCA 2005), evaluated step by
 * step so that a step between partners in different nodes pays that level's α and bandwidth: ring
 * allreduce   2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ Rabenseifner     2·lg p·α + 2(p−1)/p·nβ +
 * (p−1)/p·nγ binomial tree    reduce then broadcast, lg p·(α + nβ) each (+ nγ per reduce step)
 *   hierarchical     ring reduce-scatter up the levels, ring allgather down
 *   in-network       NVLS / SHARP: each rank sends n and receives n once; the switch reduces
 * On GPUs inside a site the costs are NCCL's instead (strata_fabric.gpu, model/nccl.h).
 * Sizes follow nccl-tests: `bytes` is the allreduce/broadcast buffer, the total output of
 * allgather, the total input of reduce-scatter, the per-rank buffer of all-to-all.
 *
 * These functions are pure and O(levels + lg p): planning 100,000 ranks costs nothing.
 */
#ifndef STRATA_MODEL_COST_H
#define STRATA_MODEL_COST_H

#include "model/nccl.h"
#include "strata.h"

#define STRATA_FABRIC_MAX_LEVELS 4

typedef enum strata_model_algo {
  STRATA_MODEL_RING = 0,
  STRATA_MODEL_TREE,      /* binomial trees */
  STRATA_MODEL_RHD,       /* recursive halving-doubling / recursive doubling */
  STRATA_MODEL_DIRECT,    /* pairwise exchange */
  STRATA_MODEL_HIER,      /* ring per level: reduce-scatter up, allgather down */
  STRATA_MODEL_INNET,     /* in-network reduction (NVLS inside a node, SHARP across) + hier */
  STRATA_MODEL_NVLS_TREE, /* NCCL: NVLS inside NVLink domains, a tree across them */
  STRATA_MODEL_COLLNET,   /* NCCL: CollNet (IB SHARP in the fabric), direct or chain */
  STRATA_MODEL_PAT,       /* NCCL: PAT allgather / reduce-scatter, one GPU per node */
  STRATA_MODEL_ALGO_COUNT
} strata_model_algo;

const char *strata_model_algo_name(strata_model_algo algo);
/* The engine algorithm a model algorithm corresponds to, or STRATA_ALGO_AUTO if none (hier,
 * in-network are not schedules of src/coll yet). */
strata_algo strata_model_algo_engine(strata_model_algo algo);

typedef struct strata_level {
  const char *name;      /* "nvlink", "ib", "wan", ... for explanations */
  int fanout;            /* children per group at this level (1 = level absent) */
  double alpha_us;       /* per message */
  double per_rank_gbps;  /* GB/s one rank gets across this level, one direction */
  double aggregate_gbps; /* GB/s of the group's whole boundary; 0 = per_rank × ranks */
  int innet;             /* in-network reduction available (NVLS on NVSwitch, SHARP on IB) */
  double innet_efficiency;
  double innet_alpha_us;
} strata_level;

typedef struct strata_fabric {
  int nlevels;
  strata_level level[STRATA_FABRIC_MAX_LEVELS];
  double reduce_gbps; /* γ = 1 / reduce_gbps; 0 = free */
  double chunk_bytes; /* pipelining unit of the schedules; 0 = the builders' default (1 MiB) */
  /* GPUs NCCL runs on (gpu.present): inside a site (levels 0 and 1, no outer level with more
   * than one member) the allreduce, reduce-scatter, allgather, broadcast and reduce are NCCL's
   * (model/nccl.h: ring, double binary tree, NVLS, NVLS tree, CollNet, with their protocols),
   * and strata's own schedules (rhd, direct, hierarchical) are not what runs there. Level 0 is
   * then NCCL's node (an NVLink domain), level 1 the nodes on the site fabric. */
  strata_nccl_system gpu;
} strata_fabric;

/* Product of fanouts (ranks), saturating at INT32_MAX. */
long strata_fabric_nranks(const strata_fabric *f);
/* A one-level fabric of `nranks` ranks over one link kind. */
void strata_fabric_flat(strata_fabric *f, int nranks, double alpha_us, double gbps,
                        double reduce_gbps);

/* Predicted time in µs, or a negative value when the algorithm does not apply to the collective
 * or the fabric (e.g. in-network without an NVSwitch or SHARP level, RHD for all-to-all). */
double strata_cost_time_us(const strata_fabric *f, strata_coll coll, strata_model_algo algo,
                           double bytes);

/* nccl-tests bus-bandwidth factor: allreduce 2(n−1)/n; reduce-scatter, allgather, all-to-all
 * (n−1)/n; others 1. */
double strata_busbw_factor(strata_coll coll, long nranks);

typedef struct strata_prediction {
  strata_coll coll;
  double bytes;
  strata_model_algo algo;
  double time_us;
  double algbw_gbps;
  double busbw_gbps;
  int proto; /* NCCL's protocol (strata_nccl_proto) where NCCL carries it, else -1 */
} strata_prediction;

/* Fill `out` for one algorithm; returns 0, or -1 if it does not apply. */
int strata_cost_predict(const strata_fabric *f, strata_coll coll, strata_model_algo algo,
                        double bytes, strata_prediction *out);
/* The fastest applicable algorithm. Returns 0, or -1 if none applies (bad collective). */
int strata_cost_best(const strata_fabric *f, strata_coll coll, double bytes,
                     strata_prediction *out);

#endif
