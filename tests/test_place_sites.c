// SPDX-License-Identifier: Apache-2.0
/*
 * test_place_sites.c — site grouping and the shared-link model on synthetic matrices: two
 * interleaved sites joined by a slow link, three labelled sites, one site with jitter. The
 * known optimum is a ring with each site contiguous; the model's margin over the interleaved
 * (identity) order is checked against its closed form.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/place.h"
#include "strata.h"

#include "helpers/check.h"

#define INTRA_US 5.0
#define INTRA_GBPS 10.0
#define WAN_US 5000.0  /* 10 ms RTT */
#define WAN_GBPS 0.125 /* 1 Gb/s */

/* site_of_slot(i) decides the site of each slot. */
static void two_level(strata_link_matrix *m, int n, int (*site_of_slot)(int)) {
  strata_link_matrix_alloc(m, n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      if (i == j) continue;
      int same = site_of_slot(i) == site_of_slot(j);
      /* a little asymmetry and jitter, as a probe would see */
      m->latency_us[i * n + j] = (same ? INTRA_US : WAN_US) * (1 + 0.01 * ((i + j) % 3));
      m->bandwidth_gbps[i * n + j] = (same ? INTRA_GBPS : WAN_GBPS) * (1 - 0.01 * (i % 2));
    }
}

static int interleaved(int i) {
  return i % 2;
}
static int thirds(int i) {
  return i % 3;
}

static int crossings(const strata_link_matrix *m, const int *site_of, const int *seq) {
  int c = 0;
  for (int k = 0; k < m->nranks; k++) c += site_of[seq[k]] != site_of[seq[(k + 1) % m->nranks]];
  return c;
}

static void test_two_interleaved_sites(void) {
  strata_link_matrix m;
  int n = 8, site_of[8], nsites = 0, labelled = 1, seq[8], ident[8];
  two_level(&m, n, interleaved);
  CHECK(strata_place_sites(&m, site_of, &nsites, &labelled) == STRATA_OK, "sites");
  CHECK(nsites == 2 && !labelled, "clustering found %d sites", nsites);
  for (int i = 0; i < n; i++) CHECK(site_of[i] == i % 2, "slot %d in site %d", i, site_of[i]);
  double bytes = 64.0 * 1024 * 1024;
  CHECK(strata_place_sites_ring(&m, bytes, 1, seq) == STRATA_OK, "sites ring");
  CHECK(crossings(&m, site_of, seq) == 2, "sites ring crosses %d times",
        crossings(&m, site_of, seq));
  /* the plain bottleneck ring also finds the grouping: fewest hops at the WAN max */
  double *w = malloc(sizeof(double) * n * n);
  strata_place_hop_costs(&m, bytes / n, w);
  CHECK(strata_place_ring(n, w, 1, seq) == STRATA_OK, "ring");
  CHECK(crossings(&m, site_of, seq) == 2, "exact ring crosses %d times",
        crossings(&m, site_of, seq));
  /* model margin: identity crosses 8 times (4 per direction share one WAN link) */
  for (int i = 0; i < n; i++) ident[i] = i;
  double placed = strata_place_ring_allreduce_us(&m, seq, bytes);
  double identity = strata_place_ring_allreduce_us(&m, ident, bytes);
  double chunk = bytes / n, lat = WAN_US * 1.02, bw = WAN_GBPS * 0.99 * 1e3;
  double want_placed = 2 * (n - 1) * (lat + chunk / bw);
  double want_identity = 2 * (n - 1) * (lat + 4 * chunk / bw);
  CHECK(placed <= want_placed * 1.0001 && placed >= want_placed * 0.98, "placed %g want ~%g",
        placed, want_placed);
  CHECK(fabs(identity - want_identity) < want_identity * 0.02, "identity %g want ~%g", identity,
        want_identity);
  double random = strata_place_random_allreduce_us(&m, bytes, 200, 9);
  CHECK(random > placed * 1.5, "random %g not slower than placed %g", random, placed);
  printf("two sites x4, 64 MiB: placed %.1f ms, identity %.1f ms, random %.1f ms\n", placed / 1e3,
         identity / 1e3, random / 1e3);
  free(w);
  /* labels win over clustering, even when they disagree with the latencies */
  for (int i = 0; i < n; i++) snprintf(m.site[i], sizeof m.site[i], "%s", i < 4 ? "a" : "b");
  CHECK(strata_place_sites(&m, site_of, &nsites, &labelled) == STRATA_OK, "labels");
  CHECK(nsites == 2 && labelled && site_of[3] == 0 && site_of[4] == 1, "labels not used");
  strata_link_matrix_free(&m);
}

static void test_three_labelled_sites_heuristic(void) {
  strata_link_matrix m;
  int n = 18, site_of[18], nsites = 0, seq[18];
  two_level(&m, n, thirds);
  const char *names[3] = {"paris", "tokyo", "oregon"};
  for (int i = 0; i < n; i++) snprintf(m.site[i], sizeof m.site[i], "%s", names[i % 3]);
  CHECK(strata_place_sites(&m, site_of, &nsites, NULL) == STRATA_OK && nsites == 3, "3 sites");
  CHECK(strata_place_sites_ring(&m, 1e8, 3, seq) == STRATA_OK, "sites ring");
  CHECK(crossings(&m, site_of, seq) == 3, "18 ranks: %d crossings", crossings(&m, site_of, seq));
  double *w = malloc(sizeof(double) * n * n);
  strata_place_hop_costs(&m, 1e8 / n, w);
  CHECK(strata_place_ring(n, w, 3, seq) == STRATA_OK, "heuristic ring");
  double pairwise = strata_place_ring_allreduce_us(&m, seq, 1e8);
  int grouped[18];
  CHECK(strata_place_sites_ring(&m, 1e8, 3, grouped) == STRATA_OK, "grouped");
  double grouped_us = strata_place_ring_allreduce_us(&m, grouped, 1e8);
  /* the allreduce ring is the better of the two under the shared-link model (a ring such as
   * A B C B crosses 4 times but shares no link, so it may legitimately win) */
  CHECK(strata_place_ring_for_allreduce(&m, 1e8, 3, seq) == STRATA_OK, "allreduce ring");
  CHECK(strata_place_ring_allreduce_us(&m, seq, 1e8) <= grouped_us, "worse than grouped ring");
  CHECK(strata_place_ring_allreduce_us(&m, seq, 1e8) <= pairwise, "worse than pairwise ring");
  free(w);
  strata_link_matrix_free(&m);
}

static void test_one_site_with_jitter(void) {
  strata_link_matrix m;
  int n = 6, site_of[6], nsites = 0;
  strata_link_matrix_alloc(&m, n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j) {
        /* shared-memory jitter: 0.4 to 40 µs, a 100x spread but all on one host */
        m.latency_us[i * n + j] = (i + j) % 4 == 0 ? 40 : 0.4;
        m.bandwidth_gbps[i * n + j] = 5;
      }
  CHECK(strata_place_sites(&m, site_of, &nsites, NULL) == STRATA_OK, "sites");
  CHECK(nsites == 1, "jitter made %d sites", nsites);
  strata_link_matrix_free(&m);
}

int main(void) {
  test_two_interleaved_sites();
  test_three_labelled_sites_heuristic();
  test_one_site_with_jitter();
  if (failures) {
    fprintf(stderr, "test_place_sites: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_place_sites: ok\n");
  return 0;
}
