// SPDX-License-Identifier: Apache-2.0
/*
 * place.h — rank placement from a measured link matrix (src/topo/linkmatrix.h): which process
 * slot should get which rank so that the slowest link is used as little as possible.
 *
 * Vocabulary. A "slot" is a row of the link matrix: the i-th process of the job that measured
 * it. A ring "sequence" seq[0..n-1] lists slots in ring order (rank k of the placed job runs in
 * slot seq[k], its ring successor is slot seq[k+1 mod n]). `strata launch --order` takes the
 * inverse: order[i] = the rank child i (slot i) gets; strata_place_launch_order() converts.
 *
 * Three solvers, each pure (no I/O, no globals; randomness from an explicit seed):
 *  - bottleneck ring: minimize the slowest hop of the ring, then the sum of hops. A hop's cost
 *    is the time to move one ring chunk (bytes/n of an allreduce) over the worse of its two
 *    directions: max(α_ij + c·β_ij, α_ji + c·β_ji). Exact for n <= STRATA_PLACE_EXACT_MAX_RANKS
 *    (binary search on the threshold + Hamiltonian-cycle DP over subsets, then Held-Karp on
 *    the sum among cycles under the threshold); beyond, nearest neighbour + 2-opt + Or-opt on
 *    the objective (max hop, number of hops at the max, sum of hops).
 *  - site grouping: ranks of one site contiguous (sites from labels, else by clustering the
 *    latencies), each site's block ordered by the ring solver, blocks ordered and oriented to
 *    make the inter-site hops cheap, then 2-opt/Or-opt that keeps the blocks contiguous.
 *  - pipeline placement after Yuan et al. (arXiv 2206.01288; DS3Lab/DT-FM): assign
 *    slots to (stage, replica) positions to minimize  max_s DP_s + max_d PP_d  where DP_s is the
 *    ring allreduce of stage s's parameters among its replicas (in replica order) and PP_d the
 *    activation + gradient transfers between consecutive stages of replica d, per step. Both
 *    share site links like strata_place_ring_allreduce_us(): all stages' rings run at once, and
 *    all replicas cross a stage boundary at once.
 *    Iterated local search over swaps (a deterministic, seeded search).
 */
#ifndef STRATA_PLAN_PLACE_H
#define STRATA_PLAN_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "topo/linkmatrix.h"

#define STRATA_PLACE_EXACT_MAX_RANKS 12 /* strata_place_ring() is exact up to here */
#define STRATA_PLACE_EXACT_LIMIT 16     /* strata_place_ring_exact() refuses more */
/* Latency clustering never separates sites closer than this one-way latency: 50 µs is ~10 km of
 * fiber at 4.9 µs/km (NetApp MetroCluster ISL docs), well above the jitter of ranks sharing
 * a host. */
#define STRATA_PLACE_SITE_MIN_LATENCY_US 50.0

/* w[i*n+j] = max(send_us(i,j,bytes), send_us(j,i,bytes)), 0 on the diagonal. `w` holds n*n. */
void strata_place_hop_costs(const strata_link_matrix *m, double bytes, double *w);

typedef struct strata_ring_score {
  double max_hop_us; /* the slowest hop */
  int hops_at_max;   /* how many hops equal it */
  double sum_hop_us; /* all hops */
} strata_ring_score;

/* Score of the closed ring seq[0] -> ... -> seq[n-1] -> seq[0] under costs w. */
strata_ring_score strata_place_ring_score(int n, const double *w, const int *seq);
/* -1, 0, 1 as a is better than, equal to, worse than b (lexicographic max, count, sum). */
int strata_place_ring_score_compare(strata_ring_score a, strata_ring_score b);

/* Exact bottleneck ring (then least sum) for n <= STRATA_PLACE_EXACT_LIMIT. seq[0] == 0.
 * Returns STRATA_OK, STRATA_ERR_INVALID_ARG (n out of range) or STRATA_ERR_NO_MEMORY. */
int strata_place_ring_exact(int n, const double *w, int *seq);
/* 2-opt and Or-opt (segments of 1..3, both orientations) until no move improves the score.
 * `group` (may be NULL) gives a group per slot, numbered 0..G-1: a move is taken only if every
 * group stays one contiguous block of the ring afterwards. The result is
 * never worse than the input. Returns the number of improving moves made, or a negative status. */
int strata_place_ring_improve(int n, const double *w, const int *group, int *seq);
/* Heuristic ring: nearest-neighbour tours from several starts and the identity, each improved;
 * the best is returned. Above STRATA_PLACE_FULL_SEARCH_MAX_RANKS, a cheaper search of the same
 * objective: one nearest-neighbour tour improved by 2-opt over each slot's
 * STRATA_PLACE_NEIGHBOURS nearest slots, each move scored in constant time (seconds at 4,096). */
#define STRATA_PLACE_FULL_SEARCH_MAX_RANKS 256
#define STRATA_PLACE_NEIGHBOURS 10
int strata_place_ring_heuristic(int n, const double *w, uint64_t seed, int *seq);
/* Exact when n <= STRATA_PLACE_EXACT_MAX_RANKS, heuristic beyond. */
int strata_place_ring(int n, const double *w, uint64_t seed, int *seq);

/* order[seq[k]] = k: the argument of `strata launch --order` (child i gets rank order[i]). */
void strata_place_launch_order(int n, const int *seq, int *order);

/* Predicted ring allreduce time (µs) of `bytes` in ring order seq: 2(n-1) steps, each as slow
 * as the slowest hop moving one chunk of bytes/n (the α-β ring allreduce of Thakur, Rabenseifner
 * & Gropp, IJHPCA 2005, with β of the worst link since every step waits for it). Site links are
 * shared: a hop from site A to site B gets the pair's measured bandwidth divided by the number of
 * ring hops crossing between A and B (the larger direction); sites as strata_place_sites() finds
 * them. 0 for n == 1, negative when out of memory. */
double strata_place_ring_allreduce_us(const strata_link_matrix *m, const int *seq, double bytes);
/* Mean of the above over `samples` uniformly random orders (seeded). */
double strata_place_random_allreduce_us(const strata_link_matrix *m, double bytes, int samples,
                                        uint64_t seed);

/* Sites: site_of[i] in 0..*nsites-1, numbered in order of first appearance. From the matrix's
 * site labels when every rank has one; otherwise single-linkage clustering of the symmetric
 * latency max(l_ij, l_ji) cut at the largest ratio gap between consecutive distinct latencies
 * when that gap is at least 4x and its upper side at least STRATA_PLACE_SITE_MIN_LATENCY_US
 * (one site otherwise). *from_labels tells which (may be NULL). */
int strata_place_sites(const strata_link_matrix *m, int *site_of, int *nsites, int *from_labels);
/* The name of slot i's site, as `strata launch --sites` and `strata place --env` give it to the
 * rank in that slot (STRATA_SITE): the matrix's label when strata_place_sites() grouped by labels
 * (*from_labels), else "site<k>" with k = site_of[slot]. out gets at most len bytes. */
void strata_place_site_name(const strata_link_matrix *m, const int *site_of, int from_labels,
                            int slot, char *out, size_t len);
/* A ring with each site's ranks contiguous, for an allreduce of `bytes`. */
int strata_place_sites_ring(const strata_link_matrix *m, double bytes, uint64_t seed, int *seq);

/* The ring `strata place --ring` prints: the bottleneck ring on hop costs for chunks of
 * bytes/n, or the site-grouped ring when the shared-link model predicts it faster (the pairwise
 * objective cannot see that hops crossing between the same two sites share one link). */
int strata_place_ring_for_allreduce(const strata_link_matrix *m, double bytes, uint64_t seed,
                                    int *seq);

/* Pipeline placement. */
typedef struct strata_pipeline_spec {
  int stages;              /* pipeline stages S (>= 1) */
  int replicas;            /* data-parallel replicas D; S*D must equal the matrix's ranks */
  int layers;              /* layers split over the stages as evenly as possible (0: even) */
  double param_bytes;      /* bytes of all parameters (params x bytes per parameter) */
  double activation_bytes; /* activations crossing one stage boundary per micro-batch */
  int microbatches;        /* micro-batches per step (>= 1) */
} strata_pipeline_spec;

typedef struct strata_pipeline_cost {
  double dp_us;    /* max over stages of the stage's DP ring allreduce */
  double pp_us;    /* max over replicas of its activation/gradient transfers */
  double total_us; /* dp_us + pp_us: the objective */
} strata_pipeline_cost;

/* slot_of[s*D + d] = the slot running stage s of replica d. */
strata_pipeline_cost strata_place_pipeline_cost(const strata_link_matrix *m,
                                                const strata_pipeline_spec *spec,
                                                const int *slot_of);
/* Searches slot_of (S*D entries) minimizing total_us; starts from identity, the site-grouped
 * ring and random assignments, `iterations` rounds of perturbation + swap descent (0: 200
 * up to 16 ranks, 3200/n beyond, at least 10).
 * STRATA_ERR_INVALID_ARG when the spec does not fit the matrix. */
int strata_place_pipeline(const strata_link_matrix *m, const strata_pipeline_spec *spec,
                          int iterations, uint64_t seed, int *slot_of);

#endif
