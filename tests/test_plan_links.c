// SPDX-License-Identifier: Apache-2.0
/* test_plan_links.c — `strata plan --links`: a measured link matrix replaces the modeled figures
 * of the topology's inter-site links (src/plan/measured.c). Hand-written matrices: 2 sites, RTT
 * 30 ms (15 ms one-way) and 1 Gbit/s (0.125 GB/s) between them, against the metro-2-sites
 * preset. Checks that the plan's inter-site latency and bandwidth are the matrix's, that the
 * predictions follow the matrix (twice the latency, a slower small allreduce), the mapping of
 * sites (by name, by order, refused), the matrix-only topology, and malformed matrices. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/check.h"
#include "model/physics.h"
#include "plan/plan.h"
#include "topo/linkmatrix.h"
#include "topo/topo.h"

static int near(double a, double b) {
  return fabs(a - b) <= 1e-9 * fmax(1, fabs(b));
}

/* A 4-rank matrix: ranks 0,1 at site `a`, 2,3 at site `b` ("" = no labels), one-way latency
 * `cross_us` and bandwidth `cross_gbps` between the sites, 20 us and 1.25 GB/s inside. */
static void matrix_text(char *buf, size_t len, const char *a, const char *b, double cross_us,
                        double cross_gbps) {
  char sites[160] = "";
  if (a[0])
    snprintf(sites, sizeof sites, "\"sites\": [\"%s\", \"%s\", \"%s\", \"%s\"],", a, a, b, b);
  snprintf(buf, len,
           "{\"ranks\": 4, \"streams\": 4, %s\n"
           "\"latency_us\": [[0, 20, %g, %g], [20, 0, %g, %g], [%g, %g, 0, 20], [%g, %g, 20, 0]],\n"
           "\"bandwidth_gbps\": [[0, 1.25, %g, %g], [1.25, 0, %g, %g], [%g, %g, 0, 1.25],"
           " [%g, %g, 1.25, 0]]}\n",
           sites, cross_us, cross_us, cross_us, cross_us, cross_us, cross_us, cross_us, cross_us,
           cross_gbps, cross_gbps, cross_gbps, cross_gbps, cross_gbps, cross_gbps, cross_gbps,
           cross_gbps);
}

static int parse(strata_link_matrix *m, const char *text) {
  char err[512];
  int rc = strata_link_matrix_parse(m, "test.json", text, strlen(text), err, sizeof err);
  if (rc != STRATA_OK) printf("parse: %s\n", err);
  return rc;
}

#include "helpers/preset.h"

/* The chosen global allreduce prediction, or NULL. */
static const strata_prediction *global_allreduce(const strata_plan *p) {
  for (int i = 0; i < p->prediction_count; i++)
    if (!strcmp(p->prediction_scope[i], "global") && p->prediction_chosen[i] &&
        p->predictions[i].coll == STRATA_COLL_ALLREDUCE)
      return &p->predictions[i];
  return NULL;
}

static int has_finding(const strata_plan *p, const char *id) {
  for (int i = 0; i < p->finding_count; i++)
    if (!strcmp(p->findings[i].id, id)) return 1;
  return 0;
}

/* Plans metro-2-sites with the matrix (small messages: 1000 bf16 parameters); returns the chosen
 * global allreduce time, or -1. */
static double plan_metro(const char *text, strata_plan_measured *ms, strata_plan *plan,
                         strata_topo **topo) {
  char err[1024];
  strata_link_matrix m;
  *topo = preset("metro-2-sites");
  if (!*topo || parse(&m, text) != STRATA_OK) return -1;
  int rc = strata_plan_measured_from_matrix(*topo, &m, "test.json", ms, err, sizeof err);
  strata_link_matrix_free(&m);
  if (rc != STRATA_OK) {
    printf("measured: %s\n", err);
    return -1;
  }
  strata_workload w;
  strata_workload_defaults(&w, STRATA_WORKLOAD_TRAIN_SYNC);
  w.params = 1000;
  if (strata_plan_build_measured(*topo, &w, ms, plan, err, sizeof err) != STRATA_OK) {
    printf("build: %s\n", err);
    return -1;
  }
  const strata_prediction *pr = global_allreduce(plan);
  return pr ? pr->time_us : -1;
}

static void test_by_name(void) {
  char text[2048];
  matrix_text(text, sizeof text, "metro-a", "metro-b", 15000, 0.125);
  strata_plan_measured ms;
  strata_plan plan;
  strata_topo *topo = NULL;
  double t30 = plan_metro(text, &ms, &plan, &topo);
  CHECK(t30 > 0, "by name: planned");
  if (t30 <= 0) return;
  CHECK(ms.from_labels && !ms.by_order && ms.matrix_sites == 2, "by name: labels, by name");
  CHECK(ms.streams == 4, "by name: streams recorded");
  CHECK(ms.link_count == 1 && ms.links[0].link == 0, "by name: one link measured");
  CHECK(ms.links[0].pairs == 8, "by name: 8 crossing pairs");
  CHECK(near(ms.links[0].latency_us, 15000), "by name: latency median");
  CHECK(near(ms.links[0].gbps, 0.125), "by name: bandwidth median");
  CHECK(plan.site_fabric.level[1].alpha_us != 20, "by name: inside not applied");
  /* the plan's inter-site figures are the matrix's */
  CHECK(plan.wan.measured && plan.wan.link == 0, "wan measured");
  CHECK(near(plan.wan.rtt_ms, 30), "wan rtt = 2 x one-way");
  CHECK(near(plan.wan.gbps, 0.125), "wan bandwidth");
  const strata_level *top = &plan.global_fabric.level[plan.global_fabric.nlevels - 1];
  CHECK(near(top->alpha_us, 15000), "WAN level alpha = measured one-way");
  CHECK(near(top->per_rank_gbps, 0.125), "WAN level bandwidth = measured");
  strata_wan_model lm;
  strata_plan_link_model(&plan, 0, &lm);
  CHECK(lm.measured && near(lm.rtt_ms, 30) && near(lm.gbps, 0.125), "link model measured");
  /* a global allreduce crosses the link at least once: at least one one-way latency */
  CHECK(t30 >= 15000, "small allreduce pays the measured latency");
  /* a 1000-parameter model syncs fine over it; 7e9 bf16 per step over 1 Gbit/s does not */
  CHECK(!strcmp(plan.decision, "fabric-extension"), "small model: extension kept");
  strata_plan_free(&plan);
  strata_workload big;
  strata_workload_defaults(&big, STRATA_WORKLOAD_TRAIN_SYNC);
  char err[512];
  if (strata_plan_build_measured(topo, &big, &ms, &plan, err, sizeof err) == STRATA_OK) {
    CHECK(strcmp(plan.decision, "fabric-extension"), "7B: decision leaves per-step extension");
    CHECK(has_finding(&plan, "L4-SYNC-NEEDS-DILOCO"), "7B: L4-SYNC-NEEDS-DILOCO");
    strata_plan_free(&plan);
  } else {
    CHECK(0, "7B plan");
  }
  strata_plan_measured_free(&ms);
  strata_topo_free(topo);

  /* twice the latency: the small-message allreduce gets slower by at least one more latency */
  matrix_text(text, sizeof text, "metro-a", "metro-b", 30000, 0.125);
  double t60 = plan_metro(text, &ms, &plan, &topo);
  CHECK(t60 > 0, "doubled latency planned");
  CHECK(near(plan.wan.rtt_ms, 60), "doubled latency: rtt 60 ms");
  CHECK(t60 >= t30 + 15000, "doubled latency: slower allreduce");
  printf("small allreduce across the sites: %.0f us at 15 ms one-way, %.0f us at 30 ms\n", t30,
         t60);
  strata_plan_free(&plan);
  strata_plan_measured_free(&ms);
  strata_topo_free(topo);

  /* without a matrix the same plan is modeled: MetroX over 30 km, far faster */
  topo = preset("metro-2-sites");
  strata_workload w;
  strata_workload_defaults(&w, STRATA_WORKLOAD_TRAIN_SYNC);
  w.params = 1000;
  if (topo && strata_plan_build(topo, &w, &plan, err, sizeof err) == STRATA_OK) {
    CHECK(!plan.wan.measured && plan.measured == NULL, "modeled: not measured");
    CHECK(global_allreduce(&plan)->time_us < t30, "modeled: faster than measured");
    CHECK(plan.wan.gbps > 100, "modeled: bandwidth is MetroX's");
    strata_plan_free(&plan);
  } else {
    CHECK(0, "modeled plan");
  }
  strata_topo_free(topo);
}

static void test_by_order_and_clusters(void) {
  char text[2048], err[1024];
  strata_link_matrix m;
  strata_topo *topo = preset("metro-2-sites");
  strata_plan_measured ms;
  /* labels that name no topology site, as many sites: by order */
  matrix_text(text, sizeof text, "paris", "tokyo", 15000, 0.125);
  if (topo && parse(&m, text) == STRATA_OK) {
    int rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
    CHECK(rc == STRATA_OK, "by order: accepted");
    if (rc == STRATA_OK) {
      CHECK(ms.by_order == 1, "by order: flagged");
      CHECK(!strcmp(ms.site_name[0], "paris") && ms.topo_site[0] == 0,
            "by order: paris -> metro-a");
      CHECK(ms.link_count == 1 && near(ms.links[0].gbps, 0.125), "by order: link measured");
    }
    strata_plan_measured_free(&ms);
    strata_link_matrix_free(&m);
  }
  /* no labels: the latency clusters (2) map by order */
  matrix_text(text, sizeof text, "", "", 15000, 0.125);
  if (topo && parse(&m, text) == STRATA_OK) {
    int rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
    CHECK(rc == STRATA_OK, "clusters: accepted");
    if (rc == STRATA_OK) {
      CHECK(!ms.from_labels && ms.by_order, "clusters: from latency, by order");
      CHECK(ms.link_count == 1 && near(ms.links[0].latency_us, 15000), "clusters: latency");
    }
    strata_plan_measured_free(&ms);
    strata_link_matrix_free(&m);
  }
  /* one label matches, one does not: refused, naming the stranger */
  matrix_text(text, sizeof text, "metro-a", "tokyo", 15000, 0.125);
  if (topo && parse(&m, text) == STRATA_OK) {
    int rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
    CHECK(rc == STRATA_ERR_INVALID_ARG, "partial match: refused");
    CHECK(strstr(err, "tokyo") != NULL, "partial match: names tokyo");
    CHECK(strstr(err, "metro-b") != NULL, "partial match: names the topology's sites");
    CHECK(ms.links == NULL && ms.link_count == 0, "partial match: zeroed");
    strata_link_matrix_free(&m);
  }
  /* one site in the matrix (no latency gap), two in the topology: refused */
  matrix_text(text, sizeof text, "", "", 20, 1.25);
  if (topo && parse(&m, text) == STRATA_OK) {
    int rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
    CHECK(rc == STRATA_ERR_INVALID_ARG, "count mismatch: refused");
    CHECK(strstr(err, "matrix: 1 site, topology: 2") != NULL, "count mismatch: says the counts");
    strata_link_matrix_free(&m);
  }
  strata_topo_free(topo);
}

/* A topology of three sites, the matrix covering two: the third site's links stay modeled. */
static void test_partial_cover(void) {
  static const char yaml[] =
      "name: three\n"
      "sites:\n"
      "  - {name: metro-a, fabric: ethernet, nodes: {count: 2, gpu: none}}\n"
      "  - {name: metro-b, fabric: ethernet, nodes: {count: 2, gpu: none}}\n"
      "  - {name: far, fabric: ethernet, nodes: {count: 2, gpu: none}}\n"
      "links:\n"
      "  - {between: [metro-a, metro-b], physical: {kind: dark_fiber, km: 30}}\n"
      "  - {between: [metro-b, far], physical: {kind: internet, km: 900}, overlay: wireguard}\n";
  char err[1024], text[2048];
  strata_topo *topo = NULL;
  strata_link_matrix m;
  int rc = strata_topo_load_string("three.yaml", yaml, sizeof yaml - 1, &topo, err, sizeof err);
  CHECK(rc == STRATA_OK, "three-site topology loads");
  if (rc != STRATA_OK) {
    printf("%s\n", err);
    return;
  }
  matrix_text(text, sizeof text, "metro-a", "metro-b", 15000, 0.125);
  if (parse(&m, text) == STRATA_OK) {
    strata_plan_measured ms;
    rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
    CHECK(rc == STRATA_OK, "subset by name: accepted");
    if (rc == STRATA_OK) {
      CHECK(strata_plan_measured_find(&ms, 0) != NULL, "subset: link 0 measured");
      CHECK(strata_plan_measured_find(&ms, 1) == NULL, "subset: link 1 modeled");
      strata_workload w;
      strata_workload_defaults(&w, STRATA_WORKLOAD_DILOCO);
      strata_plan plan;
      if (strata_plan_build_measured(topo, &w, &ms, &plan, err, sizeof err) == STRATA_OK) {
        strata_wan_model a, b;
        strata_plan_link_model(&plan, 0, &a);
        strata_plan_link_model(&plan, 1, &b);
        CHECK(a.measured && near(a.rtt_ms, 30), "subset: measured link");
        CHECK(!b.measured && b.rtt_ms > 0, "subset: modeled link");
        strata_plan_free(&plan);
      } else {
        CHECK(0, "subset: builds");
      }
    }
    strata_plan_measured_free(&ms);
    strata_link_matrix_free(&m);
  }
  strata_topo_free(topo);
}

/* Sealing: strata seals routed cross-site TCP (STRATA_ENCRYPT=auto), which one core per rank
 * caps at half its AES-GCM speed: a fat routed link is capped and the 3c role says so with the
 * cost; a thin one is not; a WireGuard overlay (which seals already) is neither. */
static void test_sealing_cost(void) {
  static const char yaml[] =
      "name: sealed\n"
      "sites:\n"
      "  - {name: a, fabric: ethernet, nodes: {count: 2, gpu: none}}\n"
      "  - {name: b, fabric: ethernet, nodes: {count: 2, gpu: none}}\n"
      "  - {name: c, fabric: ethernet, nodes: {count: 2, gpu: none}}\n"
      "links:\n"
      "  - {between: [a, b], physical: {kind: dark_fiber, km: 30, capacity_gbps: 400}}\n"
      "  - {between: [b, c], physical: {kind: internet, km: 900}, overlay: wireguard}\n";
  char err[1024];
  strata_topo *topo = NULL;
  int rc = strata_topo_load_string("sealed.yaml", yaml, sizeof yaml - 1, &topo, err, sizeof err);
  CHECK(rc == STRATA_OK, "sealing topology loads");
  if (rc != STRATA_OK) {
    printf("%s\n", err);
    return;
  }
  strata_workload w;
  strata_workload_defaults(&w, STRATA_WORKLOAD_DILOCO);
  w.wan_streams = 64; /* PCCL's curve: 45 Gb/s over a path that allows it */
  strata_wan_model fat, overlay;
  strata_plan_wan_model(topo, 0, &w, &fat);
  strata_plan_wan_model(topo, 1, &w, &overlay);
  double cap = strata_seal_cap_gbps();
  printf("  400 Gb/s fiber: %.3g GB/s unsealed, %.3g sealed; overlay %.3g\n", fat.unsealed_gbps,
         fat.gbps, overlay.gbps);
  CHECK(fat.sealed && fat.unsealed_gbps > cap && near(fat.gbps, cap),
        "a fat routed link is capped by sealing");
  CHECK(!overlay.sealed && near(overlay.gbps, overlay.unsealed_gbps),
        "a WireGuard overlay is not sealed again");
  strata_topo_free(topo);
}

/* No topology: one site per matrix site, one CPU node per rank, inside figures from the matrix. */
static void test_matrix_only(void) {
  char text[2048], err[1024];
  strata_link_matrix m;
  matrix_text(text, sizeof text, "paris", "tokyo", 15000, 0.125);
  if (parse(&m, text) != STRATA_OK) {
    CHECK(0, "matrix-only: parse");
    return;
  }
  strata_topo *topo = NULL;
  int rc = strata_plan_topo_from_matrix(&m, "test.json", &topo, err, sizeof err);
  CHECK(rc == STRATA_OK, "matrix-only: topology");
  if (rc != STRATA_OK) {
    printf("%s\n", err);
    strata_link_matrix_free(&m);
    return;
  }
  CHECK(topo->site_count == 2 && strata_topo_nodes(topo) == 4 && strata_topo_gpus(topo) == 0 &&
            topo->link_count == 1,
        "matrix-only: 2 sites, 4 nodes, 0 GPUs, 1 link");
  CHECK(!strcmp(topo->sites[0].name, "paris") && !strcmp(topo->sites[1].name, "tokyo"),
        "matrix-only: named by labels");
  strata_plan_measured ms;
  rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
  CHECK(rc == STRATA_OK && !ms.by_order, "matrix-only: measured by name");
  if (rc == STRATA_OK) {
    ms.inside_sites = 1;
    CHECK(ms.inside_pairs == 4 && near(ms.inside_latency_us, 20) && near(ms.inside_gbps, 1.25),
          "matrix-only: inside medians");
    strata_workload w;
    strata_workload_defaults(&w, strata_workload_auto(topo));
    w.params = 1000;
    strata_plan plan;
    if (strata_plan_build_measured(topo, &w, &ms, &plan, err, sizeof err) == STRATA_OK) {
      CHECK(near(plan.site_fabric.level[1].alpha_us, 20) &&
                near(plan.site_fabric.level[1].per_rank_gbps, 1.25),
            "matrix-only: site level is measured");
      CHECK(plan.wan.measured && near(plan.wan.gbps, 0.125), "matrix-only: wan measured");
      CHECK(!has_finding(&plan, "L3-DISTANCE-UNKNOWN"), "matrix-only: no distance lint");
      CHECK(global_allreduce(&plan) != NULL, "matrix-only: global prediction");
      strata_plan_free(&plan);
    } else {
      printf("build: %s\n", err);
      CHECK(0, "matrix-only: builds");
    }
  }
  strata_plan_measured_free(&ms);
  strata_topo_free(topo);
  strata_link_matrix_free(&m);
}

static void test_malformed(void) {
  static const char *const bad[] = {
      "{\"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1]]}",
      "{\"latency_us\": [[0, -1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]]}",
      "{\"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 0], [1, 0]]}",
      "{\"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]], \"streams\": -2}",
      "{\"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]], \"streams\": 1.5}",
      "{\"latency_us\": [[0, 1], [1, 0]]",
      "[1, 2, 3]",
      ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    strata_link_matrix m;
    char err[512] = "";
    int rc = strata_link_matrix_parse(&m, "bad.json", bad[i], strlen(bad[i]), err, sizeof err);
    CHECK(rc == STRATA_ERR_PARSE && strstr(err, "bad.json") == err, "malformed matrix %zu refused",
          i);
    CHECK(m.latency_us == NULL && m.nranks == 0, "refused matrix zeroed");
  }
  /* streams survive a write and a read */
  strata_link_matrix m, back;
  char text[2048];
  matrix_text(text, sizeof text, "metro-a", "metro-b", 15000, 0.125);
  if (parse(&m, text) == STRATA_OK) {
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (f) {
      strata_link_matrix_write(&m, STRATA_LINKMATRIX_YAML, f);
      fclose(f);
      CHECK(parse(&back, out) == STRATA_OK && back.streams == 4 && !strcmp(back.site[2], "metro-b"),
            "streams round trip");
      strata_link_matrix_free(&back);
    }
    free(out);
    strata_link_matrix_free(&m);
  }
}

int main(void) {
  test_by_name();
  test_by_order_and_clusters();
  test_partial_cover();
  test_sealing_cost();
  test_matrix_only();
  test_malformed();
  if (failures) {
    printf("%d failure(s)\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
