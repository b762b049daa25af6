// SPDX-License-Identifier: Apache-2.0
/*
 * test_place_ring.c — the bottleneck ring solvers on synthetic matrices with known optima:
 * exact against brute force (n <= 9), ranks on a circle, a planted ring, and the promise that
 * 2-opt / Or-opt never make a ring worse.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/place.h"
#include "strata.h"

#include "helpers/check.h"

static uint64_t rng_state = 12345;
static double rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

static void random_symmetric(int n, double *w) {
  for (int i = 0; i < n; i++) {
    w[i * n + i] = 0;
    for (int j = i + 1; j < n; j++) w[i * n + j] = w[j * n + i] = 1 + floor(rnd() * 1000);
  }
}

static int is_permutation(int n, const int *seq) {
  char seen[4096] = {0};
  for (int k = 0; k < n; k++) {
    if (seq[k] < 0 || seq[k] >= n || seen[seq[k]]) return 0;
    seen[seq[k]] = 1;
  }
  return 1;
}

/* Brute force over permutations with seq[0] = 0: the least (max, sum). */
static void brute(int n, const double *w, int depth, int *seq, char *used, double *best_max,
                  double *best_sum) {
  if (depth == n) {
    strata_ring_score s = strata_place_ring_score(n, w, seq);
    if (s.max_hop_us < *best_max || (s.max_hop_us == *best_max && s.sum_hop_us < *best_sum)) {
      *best_max = s.max_hop_us;
      *best_sum = s.sum_hop_us;
    }
    return;
  }
  for (int j = 1; j < n; j++) {
    if (used[j]) continue;
    used[j] = 1;
    seq[depth] = j;
    brute(n, w, depth + 1, seq, used, best_max, best_sum);
    used[j] = 0;
  }
}

static void test_exact_against_brute_force(void) {
  double w[81];
  int seq[9], tmp[9];
  for (int n = 4; n <= 9; n++)
    for (int trial = 0; trial < (n < 9 ? 6 : 2); trial++) {
      random_symmetric(n, w);
      char used[9] = {1};
      tmp[0] = 0;
      double best_max = INFINITY, best_sum = INFINITY;
      brute(n, w, 1, tmp, used, &best_max, &best_sum);
      CHECK(strata_place_ring_exact(n, w, seq) == STRATA_OK, "n=%d", n);
      CHECK(is_permutation(n, seq), "n=%d", n);
      strata_ring_score s = strata_place_ring_score(n, w, seq);
      CHECK(s.max_hop_us == best_max, "n=%d trial=%d max %g vs brute %g", n, trial, s.max_hop_us,
            best_max);
      CHECK(fabs(s.sum_hop_us - best_sum) < 1e-9, "n=%d sum %g vs brute %g", n, s.sum_hop_us,
            best_sum);
      /* the heuristic can never beat the optimum, and here it should reach its max */
      CHECK(strata_place_ring_heuristic(n, w, 7, seq) == STRATA_OK, "heuristic n=%d", n);
      CHECK(is_permutation(n, seq), "n=%d", n);
      CHECK(strata_place_ring_score(n, w, seq).max_hop_us >= best_max, "n=%d", n);
    }
}

/* Ranks evenly spaced on a circle under shuffled labels, cost = chord length: the angular
 * order is the only ring whose every hop is the shortest chord, so it is the unique optimum
 * (up to rotation and direction) of both the max and the sum. */
static double circle_case(int n, int exact, double *optimum) {
  double *angle = malloc(sizeof(double) * n), *w = malloc(sizeof(double) * n * n);
  int *seq = malloc(sizeof(int) * n), *sorted = malloc(sizeof(int) * n);
  for (int i = 0; i < n; i++) sorted[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rnd() * (i + 1)), t = sorted[i];
    sorted[i] = sorted[j];
    sorted[j] = t;
  }
  for (int k = 0; k < n; k++) angle[sorted[k]] = 2 * M_PI * k / n;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) w[i * n + j] = 2 * fabs(sin((angle[i] - angle[j]) / 2));
  *optimum = strata_place_ring_score(n, w, sorted).sum_hop_us;
  int rc = exact ? strata_place_ring_exact(n, w, seq) : strata_place_ring_heuristic(n, w, 3, seq);
  double got = rc == STRATA_OK && is_permutation(n, seq)
                   ? strata_place_ring_score(n, w, seq).sum_hop_us
                   : INFINITY;
  free(angle);
  free(w);
  free(seq);
  free(sorted);
  return got;
}

static void test_circle(void) {
  double optimum;
  for (int trial = 0; trial < 5; trial++) {
    double got = circle_case(11, 1, &optimum);
    CHECK(fabs(got - optimum) < 1e-9, "exact circle: sum %g vs angular order %g", got, optimum);
    got = circle_case(40, 0, &optimum);
    CHECK(fabs(got - optimum) < 1e-9, "heuristic circle n=40: sum %g vs angular order %g", got,
          optimum);
  }
}

/* A planted ring of cheap edges (cost 1..2) among expensive ones (10..20). */
static void planted_case(int n) {
  double *w = malloc(sizeof(double) * n * n);
  int *planted = malloc(sizeof(int) * n), *seq = malloc(sizeof(int) * n);
  for (int i = 0; i < n; i++) planted[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rnd() * (i + 1)), t = planted[i];
    planted[i] = planted[j];
    planted[j] = t;
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) w[i * n + j] = i == j ? 0 : 10 + 10 * rnd();
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++) w[i * n + j] = w[j * n + i];
  double planted_max = 0;
  for (int k = 0; k < n; k++) {
    int a = planted[k], b = planted[(k + 1) % n];
    w[a * n + b] = w[b * n + a] = 1 + rnd();
    if (w[a * n + b] > planted_max) planted_max = w[a * n + b];
  }
  CHECK(strata_place_ring(n, w, 1, seq) == STRATA_OK, "planted");
  CHECK(is_permutation(n, seq), "planted");
  double got = strata_place_ring_score(n, w, seq).max_hop_us;
  CHECK(got <= planted_max, "planted ring n=%d: found max %g, planted %g", n, got, planted_max);
  free(w);
  free(planted);
  free(seq);
}

static void test_planted(void) {
  planted_case(60);
  planted_case(STRATA_PLACE_FULL_SEARCH_MAX_RANKS + 300); /* the cheaper search */
}

/* Above the full search's size: points on a circle, where the best ring is the angular order. */
static void test_circle_large(void) {
  double optimum;
  double got = circle_case(STRATA_PLACE_FULL_SEARCH_MAX_RANKS * 3, 0, &optimum);
  printf("circle n=%d: the cheaper search's sum is %.4f of the angular order's\n",
         STRATA_PLACE_FULL_SEARCH_MAX_RANKS * 3, got / optimum);
  CHECK(got <= optimum * 1.05, "circle n=%d: sum %g vs angular order %g",
        STRATA_PLACE_FULL_SEARCH_MAX_RANKS * 3, got, optimum);
}

static void test_improve_never_worse(void) {
  int n = 30;
  double *w = malloc(sizeof(double) * n * n);
  int seq[30];
  int group[30];
  for (int trial = 0; trial < 10; trial++) {
    random_symmetric(n, w);
    for (int k = 0; k < n; k++) seq[k] = k;
    for (int k = n - 1; k > 0; k--) {
      int j = (int)(rnd() * (k + 1)), t = seq[k];
      seq[k] = seq[j];
      seq[j] = t;
    }
    strata_ring_score before = strata_place_ring_score(n, w, seq);
    CHECK(strata_place_ring_improve(n, w, NULL, seq) >= 0, "improve");
    CHECK(is_permutation(n, seq), "improve");
    strata_ring_score after = strata_place_ring_score(n, w, seq);
    CHECK(strata_place_ring_score_compare(after, before) <= 0, "2-opt made it worse: %g > %g",
          after.max_hop_us, before.max_hop_us);
    /* with groups: contiguous blocks of 3 groups stay contiguous */
    for (int k = 0; k < n; k++) {
      seq[k] = k;
      group[k] = k / 10;
    }
    before = strata_place_ring_score(n, w, seq);
    CHECK(strata_place_ring_improve(n, w, group, seq) >= 0, "improve grouped");
    int changes = 0;
    for (int k = 0; k < n; k++) changes += group[seq[k]] != group[seq[(k + 1) % n]];
    CHECK(changes == 3, "groups split: %d boundaries", changes);
    CHECK(strata_place_ring_score_compare(strata_place_ring_score(n, w, seq), before) <= 0,
          "grouped improve made it worse");
  }
  free(w);
}

static void test_small_and_order(void) {
  double w[9] = {0, 1, 2, 1, 0, 3, 2, 3, 0};
  int seq[3] = {9, 9, 9};
  CHECK(strata_place_ring(1, w, 0, seq) == STRATA_OK && seq[0] == 0, "n=1");
  CHECK(strata_place_ring(3, w, 0, seq) == STRATA_OK && is_permutation(3, seq), "n=3");
  CHECK(strata_place_ring_exact(0, w, seq) == STRATA_ERR_INVALID_ARG, "n=0");
  CHECK(strata_place_ring_exact(STRATA_PLACE_EXACT_LIMIT + 1, w, seq) == STRATA_ERR_INVALID_ARG,
        "n too big");
  int ring[4] = {2, 0, 3, 1}, order[4];
  strata_place_launch_order(4, ring, order);
  /* slot 2 is rank 0, slot 0 rank 1, slot 3 rank 2, slot 1 rank 3 */
  CHECK(order[2] == 0 && order[0] == 1 && order[3] == 2 && order[1] == 3, "launch order");
}

int main(void) {
  test_exact_against_brute_force();
  test_circle();
  test_planted();
  test_circle_large();
  test_improve_never_worse();
  test_small_and_order();
  if (failures) {
    fprintf(stderr, "test_place_ring: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_place_ring: ok\n");
  return 0;
}
