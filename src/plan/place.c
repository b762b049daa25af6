// SPDX-License-Identifier: Apache-2.0
/*
 * place.c — placement solvers over a link matrix: bottleneck ring, site grouping, pipeline
 * stages (see place.h for the objectives, stated exactly).
 *
 * Why the bottleneck: a pipelined ring moves one chunk per step over every hop at once, and a
 * step ends when its slowest hop does; 2(n-1) steps of the slowest hop is the ring's time. So
 * the order to choose is the Hamiltonian cycle whose heaviest edge is lightest (the bottleneck
 * TSP), and among those the one with the least total, which helps when steps are not in lock
 * step.
 *
 * The exact solver: the candidate thresholds are the distinct edge costs; a binary search finds
 * the least threshold T under which a Hamiltonian cycle exists (a bitset DP over subsets that
 * contain slot 0: reach[mask] = the ends of paths 0 -> ... covering mask), then Held-Karp finds
 * the cheapest such cycle using edges <= T. O(2^n n^2) time, O(2^n n) memory: 12 ranks in
 * milliseconds; refused above STRATA_PLACE_EXACT_LIMIT.
 *
 * The local search (2-opt, Or-opt) evaluates the whole ring per candidate after a constant-time
 * filter (a move that adds an edge above the current max can never be better), O(n^3) per pass
 * at worst; fine for the hundreds of ranks a WAN job has. Above
 * STRATA_PLACE_FULL_SEARCH_MAX_RANKS the search narrows instead: 2-opt moves only towards each
 * slot's nearest neighbours, each scored from the four edges it changes (W is symmetric: a hop
 * costs the worse of its two directions), O(n·K) per pass.
 *
 * Invariants: every function takes and returns permutations of 0..n-1; nothing is global; every
 * random choice comes from a splitmix64 stream seeded by the caller, so results are repeatable.
 */
#include "plan/place.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "strata.h"

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int rng_below(uint64_t *state, int bound) {
  return (int)(rng_next(state) % (uint64_t)bound);
}

static void shuffle(int *a, int n, uint64_t *state) {
  for (int i = n - 1; i > 0; i--) {
    int j = rng_below(state, i + 1);
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

static double hop_us(const strata_link_matrix *m, int i, int j, double bytes) {
  double a = strata_link_matrix_send_us(m, i, j, bytes);
  double b = strata_link_matrix_send_us(m, j, i, bytes);
  return a > b ? a : b;
}

void strata_place_hop_costs(const strata_link_matrix *m, double bytes, double *w) {
  int n = m->nranks;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) w[(size_t)i * (size_t)n + (size_t)j] = hop_us(m, i, j, bytes);
}

#define W(i, j) w[(size_t)(i) * (size_t)n + (size_t)(j)]

strata_ring_score strata_place_ring_score(int n, const double *w, const int *seq) {
  strata_ring_score s = {0, 0, 0};
  if (n < 2) return s;
  for (int k = 0; k < n; k++) {
    double c = W(seq[k], seq[(k + 1) % n]);
    s.sum_hop_us += c;
    if (c > s.max_hop_us) {
      s.max_hop_us = c;
      s.hops_at_max = 1;
    } else if (c == s.max_hop_us) {
      s.hops_at_max++;
    }
  }
  return s;
}

/* Sums compare with a relative tolerance so rounding never makes a cycle of moves. */
int strata_place_ring_score_compare(strata_ring_score a, strata_ring_score b) {
  if (a.max_hop_us != b.max_hop_us) return a.max_hop_us < b.max_hop_us ? -1 : 1;
  if (a.hops_at_max != b.hops_at_max) return a.hops_at_max < b.hops_at_max ? -1 : 1;
  double tol = 1e-12 * (fabs(a.sum_hop_us) + fabs(b.sum_hop_us));
  if (a.sum_hop_us < b.sum_hop_us - tol) return -1;
  if (a.sum_hop_us > b.sum_hop_us + tol) return 1;
  return 0;
}

void strata_place_launch_order(int n, const int *seq, int *order) {
  for (int k = 0; k < n; k++) order[seq[k]] = k;
}

/* ---- exact ---- */

/* Is there a Hamiltonian cycle using only edges with cost <= t? reach has 2^n entries. */
static int has_cycle(int n, const double *w, double t, uint32_t *reach) {
  uint32_t adj[STRATA_PLACE_EXACT_LIMIT];
  for (int i = 0; i < n; i++) {
    adj[i] = 0;
    for (int j = 0; j < n; j++)
      if (i != j && W(i, j) <= t) adj[i] |= 1u << j;
  }
  uint32_t full = (1u << n) - 1;
  memset(reach, 0, sizeof *reach << n);
  reach[1] = 1; /* the path "0" ends at 0 */
  for (uint32_t mask = 1; mask <= full; mask += 2) {
    uint32_t ends = reach[mask];
    while (ends) {
      int j = __builtin_ctz(ends);
      ends &= ends - 1;
      uint32_t next = adj[j] & ~mask;
      while (next) {
        int k = __builtin_ctz(next);
        next &= next - 1;
        reach[mask | (1u << k)] |= 1u << k;
      }
    }
  }
  return (reach[full] & adj[0]) != 0;
}

/* Held-Karp: the least-sum cycle through 0 using edges <= t (one exists). */
static int least_sum_cycle(int n, const double *w, double t, int *seq) {
  size_t states = (size_t)1 << n;
  double *dp = malloc(states * (size_t)n * sizeof *dp);
  signed char *parent = malloc(states * (size_t)n);
  if (!dp || !parent) {
    free(dp);
    free(parent);
    return STRATA_ERR_NO_MEMORY;
  }
  for (size_t i = 0; i < states * (size_t)n; i++) dp[i] = INFINITY;
  dp[1 * (size_t)n + 0] = 0;
  parent[1 * (size_t)n + 0] = -1;
  for (size_t mask = 1; mask < states; mask += 2)
    for (int j = 0; j < n; j++) {
      double here = dp[mask * (size_t)n + (size_t)j];
      if (!isfinite(here)) continue;
      for (int k = 1; k < n; k++) {
        if ((mask >> k) & 1 || W(j, k) > t) continue;
        size_t to = (mask | ((size_t)1 << k)) * (size_t)n + (size_t)k;
        if (here + W(j, k) < dp[to]) {
          dp[to] = here + W(j, k);
          parent[to] = (signed char)j;
        }
      }
    }
  size_t full = states - 1;
  int best = -1;
  double best_sum = INFINITY;
  for (int j = 1; j < n; j++) {
    double c = dp[full * (size_t)n + (size_t)j];
    if (W(j, 0) <= t && c + W(j, 0) < best_sum) {
      best_sum = c + W(j, 0);
      best = j;
    }
  }
  size_t mask = full;
  for (int k = n - 1; k >= 0 && best >= 0; k--) {
    seq[k] = best;
    int prev = parent[mask * (size_t)n + (size_t)best];
    mask &= ~((size_t)1 << best);
    best = prev;
  }
  free(dp);
  free(parent);
  return STRATA_OK;
}

int strata_place_ring_exact(int n, const double *w, int *seq) {
  if (n < 1 || n > STRATA_PLACE_EXACT_LIMIT) return STRATA_ERR_INVALID_ARG;
  for (int k = 0; k < n; k++) seq[k] = k;
  if (n <= 3) return STRATA_OK; /* every ring of 3 or fewer is the same cycle */
  size_t nedges = (size_t)n * (size_t)(n - 1);
  double *edges = malloc(nedges * sizeof *edges);
  uint32_t *reach = malloc(sizeof *reach << n);
  if (!edges || !reach) {
    free(edges);
    free(reach);
    return STRATA_ERR_NO_MEMORY;
  }
  size_t e = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j) edges[e++] = W(i, j);
  qsort(edges, nedges, sizeof *edges, strata_cmp_double);
  size_t lo = 0, hi = nedges - 1; /* the complete graph always has a cycle at edges[hi] */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (has_cycle(n, w, edges[mid], reach))
      hi = mid;
    else
      lo = mid + 1;
  }
  int rc = least_sum_cycle(n, w, edges[lo], seq);
  free(edges);
  free(reach);
  return rc;
}

/* ---- local search ---- */

/* Are the groups contiguous blocks of the ring (or all one group)? */
static int groups_contiguous(int n, const int *group, const int *seq, int ngroups) {
  if (!group || ngroups <= 1) return 1;
  int changes = 0;
  for (int k = 0; k < n; k++) changes += group[seq[k]] != group[seq[(k + 1) % n]];
  return changes == ngroups;
}

static int count_groups(int n, const int *group) {
  if (!group) return 1;
  int most = 0;
  for (int i = 0; i < n; i++)
    if (group[i] + 1 > most) most = group[i] + 1;
  return most;
}

static void reverse(int *seq, int i, int j) {
  for (; i < j; i++, j--) {
    int t = seq[i];
    seq[i] = seq[j];
    seq[j] = t;
  }
}

/* Applies the candidate in `trial` if it beats *best; returns 1 when it did. */
static int accept_if_better(int n, const double *w, const int *group, int ngroups, int *seq,
                            const int *trial, strata_ring_score *best) {
  strata_ring_score s = strata_place_ring_score(n, w, trial);
  if (strata_place_ring_score_compare(s, *best) >= 0) return 0;
  if (!groups_contiguous(n, group, trial, ngroups)) return 0;
  memcpy(seq, trial, (size_t)n * sizeof *seq);
  *best = s;
  return 1;
}

/* 2-opt: reverse seq[i+1..j]; edges (i,i+1),(j,j+1) become (i,j),(i+1,j+1). */
static int two_opt_pass(int n, const double *w, const int *group, int ngroups, int *seq, int *trial,
                        strata_ring_score *best) {
  int moves = 0;
  for (int i = 0; i < n - 1; i++)
    for (int j = i + 2; j < n; j++) {
      int a = seq[i], b = seq[i + 1], c = seq[j], d = seq[(j + 1) % n];
      if (d == a) continue;
      if (W(a, c) > best->max_hop_us || W(b, d) > best->max_hop_us) continue;
      memcpy(trial, seq, (size_t)n * sizeof *seq);
      reverse(trial, i + 1, j);
      moves += accept_if_better(n, w, group, ngroups, seq, trial, best);
    }
  return moves;
}

/* Or-opt: move the segment seq[i..i+len-1] (maybe reversed) to after position p. */
static int or_opt_pass(int n, const double *w, const int *group, int ngroups, int *seq, int *trial,
                       strata_ring_score *best) {
  int moves = 0;
  for (int len = 1; len <= 3 && len < n - 1; len++)
    for (int i = 0; i + len <= n; i++)
      for (int p = 0; p < n; p++) {
        if (p >= i - 1 && p < i + len) continue; /* inside or just before: no move */
        for (int flip = 0; flip < 2; flip++) {
          int seg[3], t = 0;
          for (int k = 0; k < len; k++) seg[k] = seq[flip ? i + len - 1 - k : i + k];
          int after = seq[p], before = seq[(p + 1) % n];
          if (W(after, seg[0]) > best->max_hop_us || W(seg[len - 1], before) > best->max_hop_us)
            continue;
          for (int k = 0; k < n; k++) {
            if (k >= i && k < i + len) continue;
            trial[t++] = seq[k];
            if (k == p)
              for (int q = 0; q < len; q++) trial[t++] = seg[q];
          }
          moves += accept_if_better(n, w, group, ngroups, seq, trial, best);
        }
      }
  return moves;
}

int strata_place_ring_improve(int n, const double *w, const int *group, int *seq) {
  if (n < 4) return 0;
  int *trial = malloc((size_t)n * sizeof *trial);
  if (!trial) return STRATA_ERR_NO_MEMORY;
  int ngroups = count_groups(n, group);
  strata_ring_score best = strata_place_ring_score(n, w, seq);
  int total = 0;
  for (int pass = 0; pass < 1000; pass++) {
    int moves = two_opt_pass(n, w, group, ngroups, seq, trial, &best);
    moves += or_opt_pass(n, w, group, ngroups, seq, trial, &best);
    total += moves;
    if (moves == 0) break;
  }
  free(trial);
  return total;
}

static void nearest_neighbour(int n, const double *w, int start, int *seq, char *used) {
  memset(used, 0, (size_t)n);
  seq[0] = start;
  used[start] = 1;
  for (int k = 1; k < n; k++) {
    int from = seq[k - 1], pick = -1;
    for (int j = 0; j < n; j++)
      if (!used[j] && (pick < 0 || W(from, j) < W(from, pick))) pick = j;
    seq[k] = pick;
    used[pick] = 1;
  }
}

/* nbr[i*K ..]: slot i's K nearest other slots, nearest first. */
static void nearest_slots(int n, const double *w, int k, int *nbr) {
  for (int i = 0; i < n; i++) {
    int *list = nbr + (size_t)i * (size_t)k, count = 0;
    for (int j = 0; j < n; j++) {
      if (j == i || (count == k && W(i, j) >= W(i, list[k - 1]))) continue;
      int at = count < k ? count++ : k - 1;
      while (at > 0 && W(i, list[at - 1]) > W(i, j)) {
        list[at] = list[at - 1];
        at--;
      }
      list[at] = j;
    }
    for (int j = count; j < k; j++) list[j] = list[count - 1];
  }
}

static void reverse_tracked(int *seq, int *pos, int i, int j) {
  for (; i < j; i++, j--) {
    int t = seq[i];
    seq[i] = seq[j];
    seq[j] = t;
    pos[seq[i]] = i;
    pos[seq[j]] = j;
  }
}

/* The score after edges (a,b),(c,d) become (a,c),(b,d), from the four edges alone; its max is
 * left at the old one when the count there drops to 0 (the caller recomputes). */
static int two_opt_better(strata_ring_score s, double ab, double cd, double ac, double bd,
                          strata_ring_score *next) {
  if (ac > s.max_hop_us || bd > s.max_hop_us) return 0;
  int count = s.hops_at_max - (ab == s.max_hop_us) - (cd == s.max_hop_us) + (ac == s.max_hop_us) +
              (bd == s.max_hop_us);
  *next = (strata_ring_score){s.max_hop_us, count, s.sum_hop_us - ab - cd + ac + bd};
  if (count < s.hops_at_max) return 1;
  return count == s.hops_at_max &&
         next->sum_hop_us < s.sum_hop_us - 1e-12 * (fabs(s.sum_hop_us) + fabs(next->sum_hop_us));
}

/* The large-n search (see the top): returns STRATA_OK or STRATA_ERR_NO_MEMORY. */
static int ring_heuristic_large(int n, const double *w, int *seq) {
  const int k = STRATA_PLACE_NEIGHBOURS;
  int *nbr = malloc((size_t)n * (size_t)k * sizeof *nbr);
  int *pos = malloc((size_t)n * sizeof *pos);
  char *used = malloc((size_t)n);
  if (!nbr || !pos || !used) {
    free(nbr);
    free(pos);
    free(used);
    return STRATA_ERR_NO_MEMORY;
  }
  nearest_neighbour(n, w, 0, seq, used);
  nearest_slots(n, w, k, nbr);
  for (int i = 0; i < n; i++) pos[seq[i]] = i;
  strata_ring_score s = strata_place_ring_score(n, w, seq);
  for (int pass = 0, moved = 1; moved && pass < 1000; pass++) {
    moved = 0;
    for (int i = 0; i < n; i++) {
      int a = seq[i], b = seq[(i + 1) % n];
      for (int q = 0; q < k; q++) {
        int c = nbr[(size_t)a * (size_t)k + (size_t)q], j = pos[c];
        if (W(a, c) > s.max_hop_us) break; /* nearest first: the rest are worse still */
        int d = seq[(j + 1) % n];
        if (c == b || d == a) continue;
        strata_ring_score next;
        if (!two_opt_better(s, W(a, b), W(c, d), W(a, c), W(b, d), &next)) continue;
        int lo = i < j ? i : j, hi = i < j ? j : i; /* reverse seq[lo+1 .. hi] */
        reverse_tracked(seq, pos, lo + 1, hi);
        s = next.hops_at_max > 0 ? next : strata_place_ring_score(n, w, seq);
        moved = 1;
        a = seq[i];
        b = seq[(i + 1) % n];
      }
    }
  }
  free(nbr);
  free(pos);
  free(used);
  return STRATA_OK;
}

int strata_place_ring_heuristic(int n, const double *w, uint64_t seed, int *seq) {
  if (n < 1) return STRATA_ERR_INVALID_ARG;
  if (n > STRATA_PLACE_FULL_SEARCH_MAX_RANKS) return ring_heuristic_large(n, w, seq);
  int *trial = malloc((size_t)n * sizeof *trial);
  char *used = malloc((size_t)n);
  if (!trial || !used) {
    free(trial);
    free(used);
    return STRATA_ERR_NO_MEMORY;
  }
  for (int k = 0; k < n; k++) seq[k] = k;
  int rc = strata_place_ring_improve(n, w, NULL, seq);
  strata_ring_score best = strata_place_ring_score(n, w, seq);
  uint64_t state = seed;
  int starts = n < 8 ? n : 8;
  for (int s = 0; s < starts && rc >= 0; s++) {
    nearest_neighbour(n, w, s == 0 ? 0 : rng_below(&state, n), trial, used);
    rc = strata_place_ring_improve(n, w, NULL, trial);
    strata_ring_score score = strata_place_ring_score(n, w, trial);
    if (rc >= 0 && strata_place_ring_score_compare(score, best) < 0) {
      memcpy(seq, trial, (size_t)n * sizeof *seq);
      best = score;
    }
  }
  free(trial);
  free(used);
  return rc < 0 ? rc : STRATA_OK;
}

int strata_place_ring(int n, const double *w, uint64_t seed, int *seq) {
  if (n <= STRATA_PLACE_EXACT_MAX_RANKS) return strata_place_ring_exact(n, w, seq);
  return strata_place_ring_heuristic(n, w, seed, seq);
}

/* ---- predicted times ---- */

/* Site links are shared: the matrix measured each pair alone, but every hop of a ring (every
 * transfer of a pipeline boundary) that crosses from site A to site B at the same time goes
 * through the same WAN link. A crossing's bandwidth is divided by the number of concurrent
 * crossings between its two sites (the larger of the two directions); hops inside a site share
 * nothing. This is what makes an interleaved order slow even when its slowest single hop is no
 * slower than the grouped order's. */
typedef struct share_map {
  int n, nsites;
  int *site_of;    /* n */
  int *crossings;  /* nsites*nsites, transfers from site A to site B in the current set */
  double *scratch; /* n, for the pipeline's per-replica sums */
} share_map;

static int share_map_init(share_map *s, const strata_link_matrix *m) {
  s->n = m->nranks;
  s->site_of = malloc((size_t)s->n * sizeof *s->site_of);
  s->crossings = NULL;
  s->scratch = malloc((size_t)s->n * sizeof *s->scratch);
  if (!s->site_of || !s->scratch || strata_place_sites(m, s->site_of, &s->nsites, NULL))
    return STRATA_ERR_NO_MEMORY;
  s->crossings = calloc((size_t)s->nsites * (size_t)s->nsites, sizeof *s->crossings);
  return s->crossings ? STRATA_OK : STRATA_ERR_NO_MEMORY;
}

static void share_map_free(share_map *s) {
  free(s->site_of);
  free(s->crossings);
  free(s->scratch);
}

static void share_reset(share_map *s) {
  memset(s->crossings, 0, (size_t)s->nsites * (size_t)s->nsites * sizeof *s->crossings);
}

static void share_add(share_map *s, int a, int b) {
  s->crossings[s->site_of[a] * s->nsites + s->site_of[b]]++;
}

static double shared_send_us(const strata_link_matrix *m, const share_map *s, int a, int b,
                             double bytes) {
  if (a == b) return 0;
  int sa = s->site_of[a], sb = s->site_of[b], share = 1;
  if (sa != sb) {
    int ab = s->crossings[sa * s->nsites + sb], ba = s->crossings[sb * s->nsites + sa];
    share = ab > ba ? ab : ba;
    if (share < 1) share = 1;
  }
  return strata_link_matrix_latency_us(m, a, b) +
         bytes * share / (strata_link_matrix_bandwidth_gbps(m, a, b) * 1e3);
}

static double shared_hop_us(const strata_link_matrix *m, const share_map *s, int a, int b,
                            double bytes) {
  return fmax(shared_send_us(m, s, a, b, bytes), shared_send_us(m, s, b, a, bytes));
}

static double ring_time_us(const strata_link_matrix *m, share_map *s, const int *seq, int n,
                           double bytes) {
  if (n < 2) return 0;
  share_reset(s);
  for (int k = 0; k < n; k++) share_add(s, seq[k], seq[(k + 1) % n]);
  double chunk = bytes / n, worst = 0;
  for (int k = 0; k < n; k++)
    worst = fmax(worst, shared_hop_us(m, s, seq[k], seq[(k + 1) % n], chunk));
  return 2.0 * (n - 1) * worst;
}

double strata_place_ring_allreduce_us(const strata_link_matrix *m, const int *seq, double bytes) {
  share_map s;
  double t = -1;
  if (share_map_init(&s, m) == STRATA_OK) t = ring_time_us(m, &s, seq, m->nranks, bytes);
  share_map_free(&s);
  return t;
}

double strata_place_random_allreduce_us(const strata_link_matrix *m, double bytes, int samples,
                                        uint64_t seed) {
  int n = m->nranks;
  int *seq = malloc((size_t)n * sizeof *seq);
  share_map s;
  int rc = share_map_init(&s, m);
  double total = 0;
  uint64_t state = seed;
  for (int r = 0; rc == STRATA_OK && seq && r < samples; r++) {
    for (int k = 0; k < n; k++) seq[k] = k;
    shuffle(seq, n, &state);
    total += ring_time_us(m, &s, seq, n, bytes);
  }
  share_map_free(&s);
  int ok = rc == STRATA_OK && seq && samples >= 1;
  free(seq);
  return ok ? total / samples : -1;
}

/* ---- sites ---- */

static int find_root(int *parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

static int number_groups(int n, const int *root, int *site_of, int *nsites) {
  int *id = malloc((size_t)n * sizeof *id);
  *nsites = 0;
  if (!id) return STRATA_ERR_NO_MEMORY;
  for (int i = 0; i < n; i++) id[i] = -1;
  for (int i = 0; i < n; i++) {
    if (id[root[i]] < 0) id[root[i]] = (*nsites)++;
    site_of[i] = id[root[i]];
  }
  free(id);
  return STRATA_OK;
}

static double sym_latency(const strata_link_matrix *m, int i, int j) {
  double a = strata_link_matrix_latency_us(m, i, j), b = strata_link_matrix_latency_us(m, j, i);
  return a > b ? a : b;
}

/* The latency below which two ranks share a site, or -1 for "one site". */
static double cluster_threshold(const strata_link_matrix *m) {
  int n = m->nranks;
  size_t count = 0;
  double *v = malloc((size_t)n * (size_t)n * sizeof *v);
  if (!v) return -1;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) v[count++] = fmax(sym_latency(m, i, j), 1e-3);
  qsort(v, count, sizeof *v, strata_cmp_double);
  double best_ratio = 4.0, threshold = -1;
  for (size_t k = 0; k + 1 < count; k++)
    if (v[k + 1] / v[k] >= best_ratio && v[k + 1] >= STRATA_PLACE_SITE_MIN_LATENCY_US) {
      best_ratio = v[k + 1] / v[k];
      threshold = sqrt(v[k] * v[k + 1]);
    }
  free(v);
  return threshold;
}

void strata_place_site_name(const strata_link_matrix *m, const int *site_of, int from_labels,
                            int slot, char *out, size_t len) {
  if (from_labels)
    snprintf(out, len, "%s", m->site[slot]);
  else
    snprintf(out, len, "site%d", site_of[slot]);
}

int strata_place_sites(const strata_link_matrix *m, int *site_of, int *nsites, int *from_labels) {
  int n = m->nranks, labelled = 1;
  int *root = malloc((size_t)n * sizeof *root);
  if (!root) return STRATA_ERR_NO_MEMORY;
  for (int i = 0; i < n; i++) labelled &= m->site[i][0] != '\0';
  for (int i = 0; i < n; i++) root[i] = i;
  if (labelled) {
    for (int i = 0; i < n; i++)
      for (int j = 0; j < i; j++)
        if (!strcmp(m->site[i], m->site[j]) && root[i] == i) root[i] = root[j];
  } else {
    double t = cluster_threshold(m);
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++)
        if (t < 0 || sym_latency(m, i, j) < t) root[find_root(root, i)] = find_root(root, j);
    for (int i = 0; i < n; i++) root[i] = find_root(root, i);
  }
  int rc = number_groups(n, root, site_of, nsites);
  if (from_labels) *from_labels = labelled;
  free(root);
  return rc;
}

/* Rotates a site's own ring so that its heaviest hop is the one cut open. */
static void cut_at_heaviest(int k, const double *w, int n, int *block) {
  int cut = 0;
  for (int q = 0; q < k; q++)
    if (W(block[q], block[(q + 1) % k]) > W(block[cut], block[(cut + 1) % k])) cut = q;
  int *tmp = malloc((size_t)k * sizeof *tmp);
  for (int q = 0; q < k; q++) tmp[q] = block[(cut + 1 + q) % k];
  memcpy(block, tmp, (size_t)k * sizeof *tmp);
  free(tmp);
}

/* Orders one site's members as a path: the ring solver on the sub-matrix, cut open. */
static int order_site(const double *w, int n, int *members, int k, uint64_t seed) {
  if (k < 3) return STRATA_OK;
  double *sub = malloc((size_t)k * (size_t)k * sizeof *sub);
  int *seq = malloc((size_t)k * sizeof *seq), *tmp = malloc((size_t)k * sizeof *tmp);
  int rc = sub && seq && tmp ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (rc == STRATA_OK) {
    for (int a = 0; a < k; a++)
      for (int b = 0; b < k; b++) sub[a * k + b] = W(members[a], members[b]);
    rc = strata_place_ring(k, sub, seed, seq);
  }
  if (rc == STRATA_OK) {
    for (int q = 0; q < k; q++) tmp[q] = members[seq[q]];
    cut_at_heaviest(k, w, n, tmp);
    memcpy(members, tmp, (size_t)k * sizeof *tmp);
  }
  free(sub);
  free(seq);
  free(tmp);
  return rc;
}

/* Reverses whole blocks (seq[start[s] .. start[s+1]-1]) while one reversal improves the score. */
static void orient_blocks(int n, const double *w, int *seq, const int *start, int nsites) {
  strata_ring_score best = strata_place_ring_score(n, w, seq);
  for (int pass = 0, moved = 1; moved && pass < 16; pass++) {
    moved = 0;
    for (int s = 0; s < nsites; s++) {
      if (start[s + 1] - start[s] < 2) continue;
      reverse(seq, start[s], start[s + 1] - 1);
      strata_ring_score score = strata_place_ring_score(n, w, seq);
      if (strata_place_ring_score_compare(score, best) < 0) {
        best = score;
        moved = 1;
      } else {
        reverse(seq, start[s], start[s + 1] - 1);
      }
    }
  }
}

int strata_place_sites_ring(const strata_link_matrix *m, double bytes, uint64_t seed, int *seq) {
  int n = m->nranks, nsites = 0;
  double *w = malloc((size_t)n * (size_t)n * sizeof *w);
  int *site_of = malloc((size_t)n * sizeof *site_of);
  int *start = calloc((size_t)n + 1, sizeof *start);
  if (!w || !site_of || !start) {
    free(w);
    free(site_of);
    free(start);
    return STRATA_ERR_NO_MEMORY;
  }
  strata_place_hop_costs(m, n > 0 ? bytes / n : bytes, w);
  int rc = strata_place_sites(m, site_of, &nsites, NULL);
  /* Blocks: the members of site s are seq[start[s] .. start[s+1]-1], in slot order. */
  for (int i = 0; rc == STRATA_OK && i < n; i++) start[site_of[i] + 1]++;
  for (int s = 0; s < nsites; s++) start[s + 1] += start[s];
  int *fill = malloc((size_t)(nsites > 0 ? nsites : 1) * sizeof *fill);
  if (!fill) rc = STRATA_ERR_NO_MEMORY;
  for (int s = 0; rc == STRATA_OK && s < nsites; s++) fill[s] = start[s];
  for (int i = 0; rc == STRATA_OK && i < n; i++) seq[fill[site_of[i]]++] = i;
  for (int s = 0; rc == STRATA_OK && s < nsites; s++)
    rc = order_site(w, n, seq + start[s], start[s + 1] - start[s], seed + (uint64_t)s);
  /* Block order and orientation are left to the constrained local search, which may reverse
   * or move whole blocks' ends but never split a site; above the full search's size, to
   * reversing whole blocks while that helps. */
  if (rc == STRATA_OK && n > STRATA_PLACE_FULL_SEARCH_MAX_RANKS)
    orient_blocks(n, w, seq, start, nsites);
  else if (rc == STRATA_OK && strata_place_ring_improve(n, w, site_of, seq) < 0)
    rc = STRATA_ERR_NO_MEMORY;
  free(fill);
  free(w);
  free(site_of);
  free(start);
  return rc;
}

/* ---- pipeline ---- */

static double stage_param_bytes(const strata_pipeline_spec *spec, int s) {
  if (spec->layers <= 0) return spec->param_bytes / spec->stages;
  int base = spec->layers / spec->stages, extra = spec->layers % spec->stages;
  int mine = base + (s < extra ? 1 : 0);
  return spec->param_bytes * mine / spec->layers;
}

static strata_pipeline_cost pipeline_cost(const strata_link_matrix *m, share_map *sh,
                                          const strata_pipeline_spec *spec, const int *slot_of) {
  int S = spec->stages, D = spec->replicas;
  strata_pipeline_cost c = {0, 0, 0};
  /* Every stage's replica ring runs its allreduce at the same time: one set of crossings. */
  share_reset(sh);
  for (int s = 0; s < S && D > 1; s++)
    for (int d = 0; d < D; d++) share_add(sh, slot_of[s * D + d], slot_of[s * D + (d + 1) % D]);
  for (int s = 0; s < S && D > 1; s++) {
    double chunk = stage_param_bytes(spec, s) / D, worst = 0;
    for (int d = 0; d < D; d++)
      worst = fmax(worst,
                   shared_hop_us(m, sh, slot_of[s * D + d], slot_of[s * D + (d + 1) % D], chunk));
    c.dp_us = fmax(c.dp_us, 2.0 * (D - 1) * worst);
  }
  /* Boundary s -> s+1 is crossed by every replica at once (forward, and backward back). */
  double *pp = sh->scratch;
  for (int d = 0; d < D; d++) pp[d] = 0;
  for (int s = 0; s + 1 < S; s++) {
    share_reset(sh);
    for (int d = 0; d < D; d++) share_add(sh, slot_of[s * D + d], slot_of[(s + 1) * D + d]);
    for (int d = 0; d < D; d++) {
      int a = slot_of[s * D + d], b = slot_of[(s + 1) * D + d];
      pp[d] += shared_send_us(m, sh, a, b, spec->activation_bytes) +
               shared_send_us(m, sh, b, a, spec->activation_bytes);
    }
  }
  for (int d = 0; d < D; d++) c.pp_us = fmax(c.pp_us, pp[d] * spec->microbatches);
  c.total_us = c.dp_us + c.pp_us;
  return c;
}

strata_pipeline_cost strata_place_pipeline_cost(const strata_link_matrix *m,
                                                const strata_pipeline_spec *spec,
                                                const int *slot_of) {
  share_map sh;
  strata_pipeline_cost c = {INFINITY, INFINITY, INFINITY};
  if (share_map_init(&sh, m) == STRATA_OK) c = pipeline_cost(m, &sh, spec, slot_of);
  share_map_free(&sh);
  return c;
}

/* Swap descent: best-improvement sweeps over all pairs until none helps. */
static double descend(const strata_link_matrix *m, share_map *sh, const strata_pipeline_spec *spec,
                      int *a, int n) {
  double best = pipeline_cost(m, sh, spec, a).total_us;
  for (int improved = 1; improved;) {
    improved = 0;
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++) {
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
        double c = pipeline_cost(m, sh, spec, a).total_us;
        if (c < best * (1 - 1e-12)) {
          best = c;
          improved = 1;
        } else {
          a[j] = a[i];
          a[i] = t;
        }
      }
  }
  return best;
}

static int pipeline_spec_ok(const strata_link_matrix *m, const strata_pipeline_spec *spec) {
  return spec->stages >= 1 && spec->replicas >= 1 && spec->microbatches >= 1 &&
         (long)spec->stages * spec->replicas == m->nranks && spec->param_bytes >= 0 &&
         spec->activation_bytes >= 0 && spec->layers >= 0 &&
         (spec->layers == 0 || spec->layers >= spec->stages);
}

/* Consider candidate `a`: descend, keep in `best` if better. */
static void try_start(const strata_link_matrix *m, share_map *sh, const strata_pipeline_spec *spec,
                      int *a, int *best, double *best_cost) {
  int n = m->nranks;
  double c = descend(m, sh, spec, a, n);
  if (c < *best_cost) {
    *best_cost = c;
    memcpy(best, a, (size_t)n * sizeof *a);
  }
}

int strata_place_pipeline(const strata_link_matrix *m, const strata_pipeline_spec *spec,
                          int iterations, uint64_t seed, int *slot_of) {
  if (!pipeline_spec_ok(m, spec)) return STRATA_ERR_INVALID_ARG;
  int n = m->nranks;
  int *a = malloc((size_t)n * sizeof *a), *ring = malloc((size_t)n * sizeof *ring);
  share_map sh;
  if (share_map_init(&sh, m) != STRATA_OK || !a || !ring) {
    share_map_free(&sh);
    free(a);
    free(ring);
    return STRATA_ERR_NO_MEMORY;
  }
  uint64_t state = seed;
  double best_cost = INFINITY;
  /* identity first, taken whatever it costs: slot_of is a placement even if no cost is finite */
  for (int k = 0; k < n; k++) a[k] = slot_of[k] = k;
  try_start(m, &sh, spec, a, slot_of, &best_cost);
  /* Site-grouped ring, read stage-major (a stage's replicas side by side) and replica-major. */
  int rc = strata_place_sites_ring(m, spec->activation_bytes, seed, ring);
  if (rc == STRATA_OK) {
    memcpy(a, ring, (size_t)n * sizeof *a);
    try_start(m, &sh, spec, a, slot_of, &best_cost);
    for (int s = 0; s < spec->stages; s++)
      for (int d = 0; d < spec->replicas; d++)
        a[s * spec->replicas + d] = ring[d * spec->stages + s];
    try_start(m, &sh, spec, a, slot_of, &best_cost);
  }
  /* each round is a full swap descent, O(n^3) evaluations at worst: fewer rounds for more ranks */
  if (iterations <= 0) iterations = n <= 16 ? 200 : (3200 / n > 10 ? 3200 / n : 10);
  for (int it = 0; rc == STRATA_OK && it < iterations; it++) {
    memcpy(a, slot_of, (size_t)n * sizeof *a);
    if (it % 10 == 0)
      shuffle(a, n, &state); /* a fresh random start now and then */
    else
      for (int k = 0; k < 2 + it % 3 && n > 1; k++) { /* a kick from the best */
        int i = rng_below(&state, n), j = rng_below(&state, n), t = a[i];
        a[i] = a[j];
        a[j] = t;
      }
    try_start(m, &sh, spec, a, slot_of, &best_cost);
  }
  share_map_free(&sh);
  free(a);
  free(ring);
  return rc;
}

int strata_place_ring_for_allreduce(const strata_link_matrix *m, double bytes, uint64_t seed,
                                    int *seq) {
  int n = m->nranks;
  double *w = malloc((size_t)n * (size_t)n * sizeof *w);
  int *grouped = malloc((size_t)n * sizeof *grouped);
  int rc = w && grouped ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (rc == STRATA_OK) {
    strata_place_hop_costs(m, bytes / n, w);
    rc = strata_place_ring(n, w, seed, seq);
  }
  if (rc == STRATA_OK) rc = strata_place_sites_ring(m, bytes, seed, grouped);
  if (rc == STRATA_OK && strata_place_ring_allreduce_us(m, grouped, bytes) <
                             strata_place_ring_allreduce_us(m, seq, bytes))
    memcpy(seq, grouped, (size_t)n * sizeof *seq);
  free(w);
  free(grouped);
  return rc;
}
