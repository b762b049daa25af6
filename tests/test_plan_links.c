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

#include "plan/plan.h"
#include "topo/linkmatrix.h"
#include "topo/topo.h"

static int failures;
#define CHECK(what, cond)        \
  do {                           \
    if (!(cond)) {               \
      printf("FAIL %s\n", what); \
      failures++;                \
    }                            \
  } while (0)

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

static strata_topo *preset(const char *name) {
  char err[512];
  strata_topo *t = NULL;
  if (strata_topo_preset(name, &t, err, sizeof err) != STRATA_OK) {
    printf("FAIL preset %s: %s\n", name, err);
    failures++;
  }
  return t;
}

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
  CHECK("by name: planned", t30 > 0);
  if (t30 <= 0) return;
  CHECK("by name: labels, by name", ms.from_labels && !ms.by_order && ms.matrix_sites == 2);
  CHECK("by name: streams recorded", ms.streams == 4);
  CHECK("by name: one link measured", ms.link_count == 1 && ms.links[0].link == 0);
  CHECK("by name: 8 crossing pairs", ms.links[0].pairs == 8);
  CHECK("by name: latency median", near(ms.links[0].latency_us, 15000));
  CHECK("by name: bandwidth median", near(ms.links[0].gbps, 0.125));
  CHECK("by name: inside not applied", plan.site_fabric.level[1].alpha_us != 20);
  /* the plan's inter-site figures are the matrix's */
  CHECK("wan measured", plan.wan.measured && plan.wan.link == 0);
  CHECK("wan rtt = 2 x one-way", near(plan.wan.rtt_ms, 30));
  CHECK("wan bandwidth", near(plan.wan.gbps, 0.125));
  const strata_level *top = &plan.global_fabric.level[plan.global_fabric.nlevels - 1];
  CHECK("WAN level alpha = measured one-way", near(top->alpha_us, 15000));
  CHECK("WAN level bandwidth = measured", near(top->per_rank_gbps, 0.125));
  strata_wan_model lm;
  strata_plan_link_model(&plan, 0, &lm);
  CHECK("link model measured", lm.measured && near(lm.rtt_ms, 30) && near(lm.gbps, 0.125));
  /* a global allreduce crosses the link at least once: at least one one-way latency */
  CHECK("small allreduce pays the measured latency", t30 >= 15000);
  /* a 1000-parameter model syncs fine over it; 7e9 bf16 per step over 1 Gbit/s does not */
  CHECK("small model: extension kept", !strcmp(plan.decision, "fabric-extension"));
  strata_plan_free(&plan);
  strata_workload big;
  strata_workload_defaults(&big, STRATA_WORKLOAD_TRAIN_SYNC);
  char err[512];
  if (strata_plan_build_measured(topo, &big, &ms, &plan, err, sizeof err) == STRATA_OK) {
    CHECK("7B: decision leaves per-step extension", strcmp(plan.decision, "fabric-extension"));
    CHECK("7B: L4-SYNC-NEEDS-DILOCO", has_finding(&plan, "L4-SYNC-NEEDS-DILOCO"));
    strata_plan_free(&plan);
  } else {
    CHECK("7B plan", 0);
  }
  strata_plan_measured_free(&ms);
  strata_topo_free(topo);

  /* twice the latency: the small-message allreduce gets slower by at least one more latency */
  matrix_text(text, sizeof text, "metro-a", "metro-b", 30000, 0.125);
  double t60 = plan_metro(text, &ms, &plan, &topo);
  CHECK("doubled latency planned", t60 > 0);
  CHECK("doubled latency: rtt 60 ms", near(plan.wan.rtt_ms, 60));
  CHECK("doubled latency: slower allreduce", t60 >= t30 + 15000);
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
    CHECK("modeled: not measured", !plan.wan.measured && plan.measured == NULL);
    CHECK("modeled: faster than measured", global_allreduce(&plan)->time_us < t30);
    CHECK("modeled: bandwidth is MetroX's", plan.wan.gbps > 100);
    strata_plan_free(&plan);
  } else {
    CHECK("modeled plan", 0);
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
    CHECK("by order: accepted", rc == STRATA_OK);
    if (rc == STRATA_OK) {
      CHECK("by order: flagged", ms.by_order == 1);
      CHECK("by order: paris -> metro-a",
            !strcmp(ms.site_name[0], "paris") && ms.topo_site[0] == 0);
      CHECK("by order: link measured", ms.link_count == 1 && near(ms.links[0].gbps, 0.125));
    }
    strata_plan_measured_free(&ms);
    strata_link_matrix_free(&m);
  }
  /* no labels: the latency clusters (2) map by order */
  matrix_text(text, sizeof text, "", "", 15000, 0.125);
  if (topo && parse(&m, text) == STRATA_OK) {
    int rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
    CHECK("clusters: accepted", rc == STRATA_OK);
    if (rc == STRATA_OK) {
      CHECK("clusters: from latency, by order", !ms.from_labels && ms.by_order);
      CHECK("clusters: latency", ms.link_count == 1 && near(ms.links[0].latency_us, 15000));
    }
    strata_plan_measured_free(&ms);
    strata_link_matrix_free(&m);
  }
  /* one label matches, one does not: refused, naming the stranger */
  matrix_text(text, sizeof text, "metro-a", "tokyo", 15000, 0.125);
  if (topo && parse(&m, text) == STRATA_OK) {
    int rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
    CHECK("partial match: refused", rc == STRATA_ERR_INVALID_ARG);
    CHECK("partial match: names tokyo", strstr(err, "tokyo") != NULL);
    CHECK("partial match: names the topology's sites", strstr(err, "metro-b") != NULL);
    CHECK("partial match: zeroed", ms.links == NULL && ms.link_count == 0);
    strata_link_matrix_free(&m);
  }
  /* one site in the matrix (no latency gap), two in the topology: refused */
  matrix_text(text, sizeof text, "", "", 20, 1.25);
  if (topo && parse(&m, text) == STRATA_OK) {
    int rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
    CHECK("count mismatch: refused", rc == STRATA_ERR_INVALID_ARG);
    CHECK("count mismatch: says the counts", strstr(err, "matrix: 1 site, topology: 2") != NULL);
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
  CHECK("three-site topology loads", rc == STRATA_OK);
  if (rc != STRATA_OK) {
    printf("%s\n", err);
    return;
  }
  matrix_text(text, sizeof text, "metro-a", "metro-b", 15000, 0.125);
  if (parse(&m, text) == STRATA_OK) {
    strata_plan_measured ms;
    rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
    CHECK("subset by name: accepted", rc == STRATA_OK);
    if (rc == STRATA_OK) {
      CHECK("subset: link 0 measured", strata_plan_measured_find(&ms, 0) != NULL);
      CHECK("subset: link 1 modeled", strata_plan_measured_find(&ms, 1) == NULL);
      strata_workload w;
      strata_workload_defaults(&w, STRATA_WORKLOAD_DILOCO);
      strata_plan plan;
      if (strata_plan_build_measured(topo, &w, &ms, &plan, err, sizeof err) == STRATA_OK) {
        strata_wan_model a, b;
        strata_plan_link_model(&plan, 0, &a);
        strata_plan_link_model(&plan, 1, &b);
        CHECK("subset: measured link", a.measured && near(a.rtt_ms, 30));
        CHECK("subset: modeled link", !b.measured && b.rtt_ms > 0);
        strata_plan_free(&plan);
      } else {
        CHECK("subset: builds", 0);
      }
    }
    strata_plan_measured_free(&ms);
    strata_link_matrix_free(&m);
  }
  strata_topo_free(topo);
}

/* No topology: one site per matrix site, one CPU node per rank, inside figures from the matrix. */
static void test_matrix_only(void) {
  char text[2048], err[1024];
  strata_link_matrix m;
  matrix_text(text, sizeof text, "paris", "tokyo", 15000, 0.125);
  if (parse(&m, text) != STRATA_OK) {
    CHECK("matrix-only: parse", 0);
    return;
  }
  strata_topo *topo = NULL;
  int rc = strata_plan_topo_from_matrix(&m, "test.json", &topo, err, sizeof err);
  CHECK("matrix-only: topology", rc == STRATA_OK);
  if (rc != STRATA_OK) {
    printf("%s\n", err);
    strata_link_matrix_free(&m);
    return;
  }
  CHECK("matrix-only: 2 sites, 4 nodes, 0 GPUs, 1 link",
        topo->site_count == 2 && strata_topo_nodes(topo) == 4 && strata_topo_gpus(topo) == 0 &&
            topo->link_count == 1);
  CHECK("matrix-only: named by labels",
        !strcmp(topo->sites[0].name, "paris") && !strcmp(topo->sites[1].name, "tokyo"));
  strata_plan_measured ms;
  rc = strata_plan_measured_from_matrix(topo, &m, "test.json", &ms, err, sizeof err);
  CHECK("matrix-only: measured by name", rc == STRATA_OK && !ms.by_order);
  if (rc == STRATA_OK) {
    ms.inside_sites = 1;
    CHECK("matrix-only: inside medians",
          ms.inside_pairs == 4 && near(ms.inside_latency_us, 20) && near(ms.inside_gbps, 1.25));
    strata_workload w;
    strata_workload_defaults(&w, strata_workload_auto(topo));
    w.params = 1000;
    strata_plan plan;
    if (strata_plan_build_measured(topo, &w, &ms, &plan, err, sizeof err) == STRATA_OK) {
      CHECK("matrix-only: site level is measured",
            near(plan.site_fabric.level[1].alpha_us, 20) &&
                near(plan.site_fabric.level[1].per_rank_gbps, 1.25));
      CHECK("matrix-only: wan measured", plan.wan.measured && near(plan.wan.gbps, 0.125));
      CHECK("matrix-only: no distance lint", !has_finding(&plan, "L3-DISTANCE-UNKNOWN"));
      CHECK("matrix-only: global prediction", global_allreduce(&plan) != NULL);
      strata_plan_free(&plan);
    } else {
      printf("build: %s\n", err);
      CHECK("matrix-only: builds", 0);
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
    char what[64];
    snprintf(what, sizeof what, "malformed matrix %zu refused", i);
    CHECK(what, rc == STRATA_ERR_PARSE && strstr(err, "bad.json") == err);
    CHECK("refused matrix zeroed", m.latency_us == NULL && m.nranks == 0);
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
      CHECK("streams round trip", parse(&back, out) == STRATA_OK && back.streams == 4 &&
                                      !strcmp(back.site[2], "metro-b"));
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
  test_matrix_only();
  test_malformed();
  if (failures) {
    printf("%d failure(s)\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
