// SPDX-License-Identifier: Apache-2.0
/*
 * test_place_pipeline.c — pipeline-stage placement (after Yuan et al., arXiv 2206.01288): the
 * search against brute force over every assignment for 6 and 8 ranks, and two-site cases whose
 * optimum is known: big parameters keep each stage's replicas in one site, big activations keep
 * each replica's stages in one site.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/place.h"
#include "strata.h"

#include "helpers/check.h"

static uint64_t rng_state = 777;
static double rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

static void random_matrix(strata_link_matrix *m, int n) {
  strata_link_matrix_alloc(m, n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j) {
        m->latency_us[i * n + j] = 10 + 5000 * rnd();
        m->bandwidth_gbps[i * n + j] = 0.05 + 2 * rnd();
      }
}

static double brute_best;
static void brute(const strata_link_matrix *m, const strata_pipeline_spec *spec, int *a, int k) {
  int n = m->nranks;
  if (k == n) {
    double c = strata_place_pipeline_cost(m, spec, a).total_us;
    if (c < brute_best) brute_best = c;
    return;
  }
  for (int i = k; i < n; i++) {
    int t = a[k];
    a[k] = a[i];
    a[i] = t;
    brute(m, spec, a, k + 1);
    a[i] = a[k];
    a[k] = t;
  }
}

static void check_against_brute_force(int stages, int replicas, int trials) {
  int n = stages * replicas, a[8], got[8];
  for (int trial = 0; trial < trials; trial++) {
    strata_link_matrix m;
    random_matrix(&m, n);
    strata_pipeline_spec spec = {.stages = stages,
                                 .replicas = replicas,
                                 .layers = 0,
                                 .param_bytes = 2e8 * rnd(),
                                 .activation_bytes = 4e6 * rnd(),
                                 .microbatches = 4};
    for (int i = 0; i < n; i++) a[i] = i;
    brute_best = INFINITY;
    brute(&m, &spec, a, 0);
    CHECK(strata_place_pipeline(&m, &spec, 0, 5 + trial, got) == STRATA_OK, "search");
    double c = strata_place_pipeline_cost(&m, &spec, got).total_us;
    CHECK(c <= brute_best * (1 + 1e-9), "%dx%d trial %d: search %g, brute force %g", stages,
          replicas, trial, c, brute_best);
    char seen[8] = {0};
    for (int i = 0; i < n; i++) seen[got[i]]++;
    for (int i = 0; i < n; i++) CHECK(seen[i] == 1, "not a permutation");
    strata_link_matrix_free(&m);
  }
}

/* Slots 0,2,4,6 in site A and 1,3,5,7 in site B (interleaved so identity is bad). */
static void two_sites(strata_link_matrix *m) {
  int n = 8;
  strata_link_matrix_alloc(m, n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j) {
        int same = i % 2 == j % 2;
        m->latency_us[i * n + j] = same ? 5 : 10000;
        m->bandwidth_gbps[i * n + j] = same ? 10 : 0.125;
      }
}

static void test_known_optima(void) {
  strata_link_matrix m;
  two_sites(&m);
  int got[8];
  /* 2 stages x 4 replicas, a 1 GB model, tiny activations: each stage in one site */
  strata_pipeline_spec dp_heavy = {.stages = 2,
                                   .replicas = 4,
                                   .layers = 24,
                                   .param_bytes = 1e9,
                                   .activation_bytes = 1e3,
                                   .microbatches = 1};
  CHECK(strata_place_pipeline(&m, &dp_heavy, 0, 1, got) == STRATA_OK, "dp heavy");
  for (int s = 0; s < 2; s++)
    for (int d = 1; d < 4; d++)
      CHECK(got[s * 4 + d] % 2 == got[s * 4] % 2, "stage %d split across sites", s);
  int ident[8];
  for (int i = 0; i < 8; i++) ident[i] = i;
  strata_pipeline_cost placed = strata_place_pipeline_cost(&m, &dp_heavy, got);
  strata_pipeline_cost identity = strata_place_pipeline_cost(&m, &dp_heavy, ident);
  CHECK(placed.total_us * 10 < identity.total_us, "placed %g vs identity %g", placed.total_us,
        identity.total_us);
  printf("dp-heavy 2x4 on two sites: placed %.1f ms (dp %.1f + pp %.1f), identity %.1f ms\n",
         placed.total_us / 1e3, placed.dp_us / 1e3, placed.pp_us / 1e3, identity.total_us / 1e3);
  /* no parameters to sync, big activations: each replica's two stages in one site */
  strata_pipeline_spec pp_heavy = dp_heavy;
  pp_heavy.param_bytes = 0;
  pp_heavy.activation_bytes = 1e8;
  pp_heavy.microbatches = 8;
  CHECK(strata_place_pipeline(&m, &pp_heavy, 0, 1, got) == STRATA_OK, "pp heavy");
  for (int d = 0; d < 4; d++)
    CHECK(got[d] % 2 == got[4 + d] % 2, "replica %d's stages in different sites", d);
  /* bad specs */
  strata_pipeline_spec bad = dp_heavy;
  bad.stages = 3;
  CHECK(strata_place_pipeline(&m, &bad, 0, 1, got) == STRATA_ERR_INVALID_ARG, "3x4 != 8");
  bad = dp_heavy;
  bad.layers = 1;
  CHECK(strata_place_pipeline(&m, &bad, 0, 1, got) == STRATA_ERR_INVALID_ARG, "1 layer");
  strata_link_matrix_free(&m);
}

/* A matrix built in memory skips the loader's bounds: when every placement costs infinity (a
 * latency of 1e308 sums past the largest double) the solver still returns a permutation, never
 * an uninitialised slot_of. */
static void test_infinite_costs(void) {
  strata_link_matrix m;
  int n = 4, got[4] = {-7, -7, -7, -7};
  strata_link_matrix_alloc(&m, n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j) {
        m.latency_us[i * n + j] = 1e308;
        m.bandwidth_gbps[i * n + j] = 1;
      }
  strata_pipeline_spec spec = {
      .stages = 2, .replicas = 2, .microbatches = 4, .param_bytes = 1e9, .activation_bytes = 1e6};
  CHECK(strata_place_pipeline(&m, &spec, 5, 1, got) == STRATA_OK, "infinite costs refused");
  int seen[4] = {0};
  for (int k = 0; k < n; k++) {
    CHECK(got[k] >= 0 && got[k] < n && !seen[got[k]], "slot_of[%d] = %d: not a permutation", k,
          got[k]);
    if (got[k] >= 0 && got[k] < n) seen[got[k]] = 1;
  }
  strata_link_matrix_free(&m);
}

int main(void) {
  test_infinite_costs();
  check_against_brute_force(3, 2, 4);
  check_against_brute_force(2, 4, 2);
  check_against_brute_force(4, 2, 2);
  test_known_optima();
  if (failures) {
    fprintf(stderr, "test_place_pipeline: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_place_pipeline: ok\n");
  return 0;
}
