/*
 * test_place_linkmatrix.c — the link-matrix file: JSON and YAML round trips are exact, and
 * every malformed file is refused with its position and what was expected.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata.h"
#include "topo/linkmatrix.h"

#include "helpers/check.h"

static void fill(strata_link_matrix *m) {
  int n = m->nranks;
  for (int i = 0; i < n; i++) {
    snprintf(m->host[i], sizeof m->host[i], "host-%d", i / 2);
    snprintf(m->site[i], sizeof m->site[i], i < n / 2 ? "east \"1\"" : "west");
    for (int j = 0; j < n; j++) {
      m->latency_us[i * n + j] = i == j ? 0 : 1.0 / 3.0 + i * 1000 + j;
      m->bandwidth_gbps[i * n + j] = i == j ? 0 : 12.5 / (1 + i + 2 * j);
    }
  }
  snprintf(m->measured, sizeof m->measured, "2026-11-30T12:00:00Z");
  snprintf(m->method, sizeof m->method, "synthetic\ttest");
}

static void round_trip(strata_link_matrix_format format, const char *name) {
  strata_link_matrix a, b;
  CHECK(strata_link_matrix_alloc(&a, 5) == STRATA_OK, "alloc");
  fill(&a);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(strata_link_matrix_write(&a, format, f) == STRATA_OK, "write %s", name);
  fclose(f);
  char err[256];
  int rc = strata_link_matrix_parse(&b, name, text, len, err, sizeof err);
  CHECK(rc == STRATA_OK, "%s: %s\n%s", name, err, text);
  if (rc == STRATA_OK) {
    CHECK(b.nranks == 5, "%s ranks", name);
    CHECK(!memcmp(a.latency_us, b.latency_us, 25 * sizeof(double)), "%s latency differs", name);
    CHECK(!memcmp(a.bandwidth_gbps, b.bandwidth_gbps, 25 * sizeof(double)), "%s bw", name);
    CHECK(!strcmp(b.site[0], "east \"1\"") && !strcmp(b.site[4], "west"), "%s sites", name);
    CHECK(!strcmp(b.host[3], "host-1"), "%s hosts", name);
    CHECK(!strcmp(b.measured, a.measured) && !strcmp(b.method, a.method), "%s meta", name);
    CHECK(strata_link_matrix_send_us(&b, 1, 2, 1000) ==
              b.latency_us[1 * 5 + 2] + 1000 / (b.bandwidth_gbps[1 * 5 + 2] * 1e3),
          "send_us");
  }
  strata_link_matrix_free(&a);
  strata_link_matrix_free(&b);
  free(text);
}

/* Each bad text must fail with STRATA_ERR_PARSE and an error containing `expect`. */
static void refuse(const char *text, const char *expect) {
  strata_link_matrix m;
  char err[256] = "";
  int rc = strata_link_matrix_parse(&m, "bad.json", text, strlen(text), err, sizeof err);
  CHECK(rc == STRATA_ERR_PARSE, "accepted: %s", text);
  CHECK(strstr(err, expect) != NULL, "error '%s' lacks '%s'", err, expect);
  CHECK(m.nranks == 0 && m.latency_us == NULL, "not zeroed after failure");
}

static void test_refusals(void) {
  refuse("", "expected a mapping");
  refuse("[1, 2]", "expected a mapping");
  refuse("{\"latency_us\": [[0, 1], [1, 0]]}", "missing key bandwidth_gbps");
  refuse("{\"latency_us\": [[0, 1], [1]], \"bandwidth_gbps\": [[0, 1], [1, 0]]}",
         "bad.json:1:25: latency_us: expected 2 rows of 2 numbers");
  refuse("{\"latency_us\": [[0, -1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]]}",
         "expected a latency >= 0");
  refuse("{\"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 0], [1, 0]]}",
         "expected a bandwidth > 0");
  refuse("{\"latency_us\": [[0, \"x\"], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]]}",
         "expected a number");
  refuse("{\"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]], \"colour\": 1}",
         "colour: unknown key");
  refuse("{\"ranks\": 3, \"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]]}",
         "expected 3 rows");
  refuse(
      "{\"latency\": \"rtt\", \"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, "
      "0]]}",
      "one-way");
  refuse(
      "{\"sites\": [\"a\"], \"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, "
      "0]]}",
      "expected a list of 2 strings");
  refuse("latency_us: [[0, 1], [1, 0]\nbandwidth_gbps: [[0, 1], [1, 0]]\n", "bad.json:");
}

static void test_minimal_yaml(void) {
  const char *text =
      "latency_us:\n  - [~, 5]\n  - [5, null]\nbandwidth_gbps:\n  - [0, 1.25]\n  - [1.5, 0]\n";
  strata_link_matrix m;
  char err[256];
  int rc = strata_link_matrix_parse(&m, "min.yaml", text, strlen(text), err, sizeof err);
  CHECK(rc == STRATA_OK, "%s", err);
  if (rc == STRATA_OK) {
    CHECK(m.nranks == 2 && m.latency_us[1] == 5 && m.bandwidth_gbps[2] == 1.5, "values");
    CHECK(m.site[0][0] == 0 && m.host[1][0] == 0, "labels default to empty");
  }
  strata_link_matrix_free(&m);
  CHECK(strata_link_matrix_load(&m, "/nonexistent/x.json", err, sizeof err) == STRATA_ERR_NOT_FOUND,
        "missing file");
  CHECK(strata_link_matrix_format_for_path("a.YML") == STRATA_LINKMATRIX_YAML, "yml");
  CHECK(strata_link_matrix_format_for_path("a.json") == STRATA_LINKMATRIX_JSON, "json");
  CHECK(strata_link_matrix_alloc(&m, 0) == STRATA_ERR_INVALID_ARG, "alloc 0");
}

int main(void) {
  round_trip(STRATA_LINKMATRIX_JSON, "rt.json");
  round_trip(STRATA_LINKMATRIX_YAML, "rt.yaml");
  test_refusals();
  test_minimal_yaml();
  if (failures) {
    fprintf(stderr, "test_place_linkmatrix: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_place_linkmatrix: ok\n");
  return 0;
}
