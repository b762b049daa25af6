// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_place.c — coverage-guided fuzzing of what `strata place MATRIX` and `strata plan --links
 * MATRIX` do with a link matrix that loaded: the placement solvers (src/plan/place.c) and the
 * bridge from a matrix to the planner's sites and links (src/plan/measured.c), then the plan.
 *
 * The loader has already refused what is not a valid matrix (fuzz_linkmatrix covers that), so
 * here every loaded matrix must place: each order is a permutation of the ranks, each predicted
 * time finite and >= 0, each site index within the count, and the topology made from the matrix
 * must give a plan (or a clean refusal of a label the topology format cannot take). Anything else
 * aborts, so libFuzzer keeps the input. Seeds: tests/fuzz/corpus/place; run: tests/fuzz/README.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/place.h"
#include "plan/plan.h"
#include "strata.h"
#include "topo/linkmatrix.h"
#include "topo/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_BYTES (256.0 * 1024 * 1024)
#define FUZZ_SEED 1

static void check(int ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "fuzz_place: %s\n", what);
  abort();
}

static void check_permutation(int n, const int *seq, const char *what) {
  char *seen = calloc((size_t)n, 1);
  check(seen != NULL, "out of memory");
  for (int i = 0; i < n; i++) {
    check(seq[i] >= 0 && seq[i] < n && !seen[seq[i]], what);
    seen[seq[i]] = 1;
  }
  free(seen);
}

static void check_time(double us, const char *what) {
  check(isfinite(us) && us >= 0, what);
}

static void place_rings(const strata_link_matrix *m, int *seq, int *order) {
  int n = m->nranks;
  check(strata_place_ring_for_allreduce(m, FUZZ_BYTES, FUZZ_SEED, seq) == STRATA_OK,
        "the allreduce ring failed");
  check_permutation(n, seq, "the allreduce ring is not a permutation");
  strata_place_launch_order(n, seq, order);
  check_permutation(n, order, "the launch order is not a permutation");
  check_time(strata_place_ring_allreduce_us(m, seq, FUZZ_BYTES), "ring time");
  check_time(strata_place_random_allreduce_us(m, FUZZ_BYTES, 4, FUZZ_SEED), "random ring time");

  int *site_of = calloc((size_t)n, sizeof *site_of);
  check(site_of != NULL, "out of memory");
  int nsites = 0, from_labels = 0;
  check(strata_place_sites(m, site_of, &nsites, &from_labels) == STRATA_OK, "sites failed");
  check(nsites >= 1 && nsites <= n, "site count out of range");
  for (int i = 0; i < n; i++) {
    check(site_of[i] >= 0 && site_of[i] < nsites, "site index out of range");
    char name[STRATA_LINKMATRIX_LABEL_BYTES + 16];
    strata_place_site_name(m, site_of, from_labels, i, name, sizeof name);
    check(name[0] != '\0', "a site without a name");
  }
  free(site_of);
  check(strata_place_sites_ring(m, FUZZ_BYTES, FUZZ_SEED, seq) == STRATA_OK,
        "the site-grouped ring failed");
  check_permutation(n, seq, "the site-grouped ring is not a permutation");
}

/* Pipelines of 2 stages when the ranks split evenly, and of one stage per rank. */
static void place_pipelines(const strata_link_matrix *m, int *slot_of) {
  int n = m->nranks;
  for (int stages = 2; stages <= n; stages = stages == n ? n + 1 : n) {
    if (n % stages) continue;
    strata_pipeline_spec spec = {.stages = stages,
                                 .replicas = n / stages,
                                 .layers = 2 * stages + 1,
                                 .param_bytes = 1e9,
                                 .activation_bytes = 1 << 20,
                                 .microbatches = 4};
    check(strata_place_pipeline(m, &spec, 10, FUZZ_SEED, slot_of) == STRATA_OK,
          "the pipeline failed");
    check_permutation(n, slot_of, "the pipeline is not a permutation");
    strata_pipeline_cost cost = strata_place_pipeline_cost(m, &spec, slot_of);
    check_time(cost.total_us, "pipeline time");
  }
}

/* `strata plan --links MATRIX` with no topology: a topology from the matrix, then the plan. */
static void plan_from_matrix(const strata_link_matrix *m) {
  char err[1024] = "";
  strata_topo *topo = NULL;
  int rc = strata_plan_topo_from_matrix(m, "fuzz", &topo, err, sizeof err);
  if (rc == STRATA_ERR_PARSE) {
    check(topo == NULL && err[0] != '\0', "a refused label without a message");
    return;
  }
  check(rc == STRATA_OK && topo != NULL, "no topology from a valid matrix");
  check(strata_topo_validate(topo, err, sizeof err) == STRATA_OK,
        "the topology made from a matrix does not validate");
  strata_plan_measured measured;
  rc = strata_plan_measured_from_matrix(topo, m, "fuzz", &measured, err, sizeof err);
  check(rc == STRATA_OK, "the matrix does not map onto its own topology");
  measured.inside_sites = 1;
  strata_workload w;
  strata_workload_defaults(&w, strata_workload_auto(topo));
  strata_plan plan;
  rc = strata_plan_build_measured(topo, &w, &measured, &plan, err, sizeof err);
  check(rc == STRATA_OK, "no plan for the topology made from a matrix");
  FILE *sink = fopen("/dev/null", "w");
  if (sink) {
    strata_plan_write_text(sink, &plan);
    strata_plan_write_json(sink, &plan);
    fclose(sink);
  }
  strata_plan_free(&plan);
  strata_plan_measured_free(&measured);
  strata_topo_free(topo);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  strata_link_matrix m;
  char err[512];
  if (strata_link_matrix_parse(&m, "fuzz", (const char *)data, size, err, sizeof err) != STRATA_OK)
    return 0;
  size_t n = (size_t)m.nranks;
  int *seq = calloc(n, sizeof *seq), *other = calloc(n, sizeof *other);
  check(seq && other, "out of memory");
  place_rings(&m, seq, other);
  place_pipelines(&m, seq);
  plan_from_matrix(&m);
  free(seq);
  free(other);
  strata_link_matrix_free(&m);
  return 0;
}
