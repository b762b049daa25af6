// SPDX-License-Identifier: Apache-2.0
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
      /* both directions halve one round trip, up to jitter: [i][j] and [j][i] differ by 1 in 1000
       */
      m->latency_us[i * n + j] = i == j ? 0 : 1.0 / 3.0 + (i + j) * 1000 + (i > j);
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
         "bad.json:1:21: latency_us: expected a latency from 0 to 1e7 us");
  refuse("{\"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 0], [1, 0]]}",
         "expected a bandwidth from 1e-6 to 1e6 GB/s");
  /* absurd figures whose send times sum to infinity in the placers (strata place --pipeline) */
  refuse("{\"latency_us\": [[0, 1e308], [1e308, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]]}",
         "bad.json:1:21: latency_us: expected a latency from 0 to 1e7 us");
  refuse("{\"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 1e-300], [1, 0]]}",
         "bad.json:1:57: bandwidth_gbps: expected a bandwidth from 1e-6");
  /* a figure on the diagonal, and one-way latencies that disagree */
  refuse("{\"latency_us\": [[5, 1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]]}",
         "bad.json:1:18: latency_us: expected 0 or null on the diagonal");
  refuse("{\"latency_us\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 1], [1, 2]]}",
         "bandwidth_gbps: expected 0 or null on the diagonal");
  refuse("{\"latency_us\": [[0, 900], [10, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]]}",
         "bad.json:1:28: latency_us: expected the one-way latency (RTT/2) of [0][1], 900, within "
         "10%; got 10");
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

/* What the loader refuses, strata_link_matrix_validate refuses in a matrix built in memory. */
static void test_validate(void) {
  strata_link_matrix m;
  char err[256];
  strata_link_matrix_alloc(&m, 2);
  m.latency_us[1] = m.latency_us[2] = 100;
  m.bandwidth_gbps[1] = m.bandwidth_gbps[2] = 1;
  CHECK(strata_link_matrix_validate(&m, err, sizeof err) == STRATA_OK, "%s", err);
  m.latency_us[2] = 105; /* jitter of two medians */
  CHECK(strata_link_matrix_validate(&m, err, sizeof err) == STRATA_OK, "%s", err);
  m.latency_us[2] = 200;
  CHECK(strata_link_matrix_validate(&m, err, sizeof err) == STRATA_ERR_PARSE &&
            strstr(err, "latency_us[1][0] = 200 but latency_us[0][1] = 100"),
        "asymmetric: %s", err);
  m.latency_us[2] = 100;
  m.latency_us[0] = 3;
  CHECK(strata_link_matrix_validate(&m, err, sizeof err) == STRATA_ERR_PARSE &&
            strstr(err, "diagonal"),
        "diagonal: %s", err);
  m.latency_us[0] = 0;
  m.latency_us[1] = m.latency_us[2] = 1e308;
  CHECK(strata_link_matrix_validate(&m, err, sizeof err) == STRATA_ERR_PARSE &&
            strstr(err, "latency_us[0][1] = 1e+308"),
        "huge latency: %s", err);
  strata_link_matrix_free(&m);
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
  test_validate();
  test_minimal_yaml();
  if (failures) {
    fprintf(stderr, "test_place_linkmatrix: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_place_linkmatrix: ok\n");
  return 0;
}
