// SPDX-License-Identifier: Apache-2.0
/*
 * test_place_scale.c — `strata place` at the size it accepts (4,096 ranks) must finish in
 * seconds. Tested cheaply, at a size a test can afford:
 *  1. every number of a JSON grid reads back as strtod reads it, bit for bit (the grid reader of
 *     src/topo/json_grid.c has its own decimal conversion), and the writer's fewest digits read
 *     back as the double written;
 *  2. cutting the grids out keeps every other position: an error after them, and one inside them
 *     (read again as a tree), name the line and column of the file;
 *  3. reading a matrix and placing its ring grow as the cells do: from 512 to 1,024 ranks (4x the
 *     cells) the CPU time grows by at most 8x (the tree reader of before grew 7x per doubling of
 *     ranks at these sizes and took ~25 s at 4,096), and 1,024 ranks take under 3 s of CPU
 *     (about 0.2 s normally). bench/place_scale.sh measures 4,096.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers/check.h"
#include "plan/place.h"
#include "strata.h"
#include "topo/json_grid.h"
#include "topo/linkmatrix.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_random(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* Doubles of every magnitude a matrix holds and more, as %.17g, %.15g and the writer's digits. */
static void test_numbers_exact(void) {
  enum { COUNT = 60000 };
  char *text = malloc((size_t)COUNT * 32 + 64);
  double *want = malloc(COUNT * sizeof *want);
  size_t used = (size_t)sprintf(text, "{\"g\": [[");
  for (int i = 0; i < COUNT; i++) {
    double mantissa = (double)(next_random() >> 11) / 9007199254740992.0;
    int exponent = (int)(next_random() % 40) - 20;
    double v = mantissa * pow(10, exponent);
    if (i % 3 == 1) v = floor(v * 2000) / 2000; /* a probe's latency: whole ns halved, in µs */
    if (i % 7 == 0) v = -v;
    const char *format = i % 5 == 4 ? "%.17e" : i % 2 ? "%.17g" : "%.15g";
    size_t start = used;
    used += (size_t)snprintf(text + used, 32, format, v);
    want[i] = strtod(text + start, NULL);
    text[used++] = i + 1 < COUNT ? ',' : ']';
  }
  used += (size_t)sprintf(text + used, "]}");
  strata_json_grid grid = {.key = "g"};
  CHECK(strata_json_grids_take(text, &used, &grid, 1) == 1 && grid.found, "grid not taken");
  int wrong = 0;
  for (int i = 0; grid.found && i < COUNT; i++)
    if (memcmp(&grid.cells[i], &want[i], sizeof want[i]) && wrong++ < 5)
      CHECK(0, "cell %d: %.17g, strtod %.17g", i, grid.cells[i], want[i]);
  CHECK(wrong == 0, "%d of %d cells differ from strtod", wrong, COUNT);
  strata_json_grids_free(&grid, 1);
  free(text);
  free(want);

  /* the writer's fewest digits read back as what was written */
  strata_link_matrix m, back;
  CHECK(strata_link_matrix_alloc(&m, 40) == STRATA_OK, "alloc");
  for (int i = 0; i < 40; i++)
    for (int j = 0; j < 40; j++) {
      double lat = 1 + (double)(next_random() % 10000000) / 2000.0 * (1 + i % 3);
      m.latency_us[i * 40 + j] = i == j ? 0 : j < i ? m.latency_us[j * 40 + i] : lat;
      m.bandwidth_gbps[i * 40 + j] = i == j ? 0 : (double)(next_random() >> 11) / 1e12 + 1e-3;
    }
  char *file = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&file, &len);
  CHECK(strata_link_matrix_write(&m, STRATA_LINKMATRIX_JSON, f) == STRATA_OK, "write");
  fclose(f);
  char err[256];
  CHECK(strata_link_matrix_parse(&back, "w.json", file, len, err, sizeof err) == STRATA_OK, "%s",
        err);
  CHECK(back.nranks == 40 && !memcmp(back.latency_us, m.latency_us, 1600 * sizeof(double)) &&
            !memcmp(back.bandwidth_gbps, m.bandwidth_gbps, 1600 * sizeof(double)),
        "written and read back differ");
  strata_link_matrix_free(&back);
  strata_link_matrix_free(&m);
  free(file);
}

static void expect_error(const char *text, const char *want) {
  strata_link_matrix m;
  char err[256] = "";
  int rc = strata_link_matrix_parse(&m, "m.json", text, strlen(text), err, sizeof err);
  CHECK(rc == STRATA_ERR_PARSE && strstr(err, want), "error '%s' (%s), want '%s'", err,
        strata_err_name(rc), want);
}

static void test_positions(void) {
  /* after the grids: "hosts" on line 7, its list at column 12 */
  expect_error(
      "{\"latency_us\": [[0, 5],\n"
      "  [5, 0]],\n"
      " \"bandwidth_gbps\": [\r\n"
      "  [0, 1],\r\n"
      "  [1, 0]\r\n"
      "    ], \"sites\": [\"a\", \"b\"],\n"
      " \"hosts\": [\"a\"]}\n",
      "m.json:7:11: hosts: expected a list of 2 strings");
  /* the grid's last line shares a line with the next key: its column is kept */
  expect_error(
      "{\"latency_us\": [[0, 5], [5, 0]], \"bogus\": 1,\n"
      " \"bandwidth_gbps\": [[0, 1], [1, 0]]}\n",
      "m.json:1:34: bogus: unknown key");
  /* inside a grid: read again as a tree, whose error names the cell */
  expect_error(
      "{\"latency_us\": [[0, 5],\n"
      "  [5, 0]],\n"
      " \"bandwidth_gbps\": [[0, 1],\n"
      "  [1e9, 0]]}\n",
      "m.json:4:4: bandwidth_gbps: expected a bandwidth");
  expect_error("{\"latency_us\": [[0, 5], [50, 0]], \"bandwidth_gbps\": [[0, 1], [1, 0]]}",
               "m.json:1:26: latency_us: expected the one-way latency");
  expect_error("{\"latency_us\": [[0, 5], [5, 0, 1]], \"bandwidth_gbps\": [[0, 1], [1, 0]]}",
               "m.json:1:25: latency_us: expected 2 rows of 2 numbers");
}

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A matrix as a probe of n ranks on `sites` sites of hosts of 8 would write it. */
static char *probe_like(int n, int sites, size_t *len) {
  strata_link_matrix m;
  if (strata_link_matrix_alloc(&m, n) != STRATA_OK) return NULL;
  for (int i = 0; i < n; i++) {
    snprintf(m.host[i], sizeof m.host[i], "host%d", i / 8);
    snprintf(m.site[i], sizeof m.site[i], "site%d", i * sites / n);
    for (int j = 0; j < n; j++) {
      int host = i / 8 == j / 8, site = i * sites / n == j * sites / n;
      double jitter = 1 + (double)(next_random() % 1000) * 1e-5;
      double lat = host ? 2 : site ? 20 : 15000;
      double *cell = &m.latency_us[(size_t)i * (size_t)n + (size_t)j];
      *cell = i == j  ? 0
              : j < i ? m.latency_us[(size_t)j * (size_t)n + (size_t)i]
                      : floor(lat * jitter * 2000) / 2000;
      m.bandwidth_gbps[(size_t)i * (size_t)n + (size_t)j] = i == j ? 0
                                                                   : (host   ? 10
                                                                      : site ? 1.25
                                                                             : 0.125) *
                                                                         jitter;
    }
  }
  char *text = NULL;
  FILE *f = open_memstream(&text, len);
  int rc = strata_link_matrix_write(&m, STRATA_LINKMATRIX_JSON, f);
  fclose(f);
  strata_link_matrix_free(&m);
  if (rc != STRATA_OK) free(text);
  return rc == STRATA_OK ? text : NULL;
}

/* CPU seconds to read the matrix and place its ring (what `strata place --ring` does). */
static double read_and_place(const char *text, size_t len, int n) {
  double start = cpu_s();
  strata_link_matrix m;
  char err[256];
  int rc = strata_link_matrix_parse(&m, "scale.json", text, len, err, sizeof err);
  CHECK(rc == STRATA_OK, "parse %d ranks: %s", n, err);
  if (rc != STRATA_OK) return 0;
  int *seq = malloc((size_t)n * sizeof *seq);
  CHECK(strata_place_ring_for_allreduce(&m, 64.0 * (1 << 20), 1, seq) == STRATA_OK, "ring");
  double took = cpu_s() - start;
  free(seq);
  strata_link_matrix_free(&m);
  return took;
}

static void test_growth(void) {
  size_t small_len, large_len;
  /* 2 sites: each site's block is above the full search's size in both (the full search at 256
   * is the placer's most expensive size per rank, and bounded there). */
  char *small = probe_like(640, 2, &small_len), *large = probe_like(1280, 2, &large_len);
  CHECK(small && large, "matrices not written");
  if (!small || !large) return;
  double small_s = 1e9, large_s = 1e9;
  for (int run = 0; run < 3; run++) { /* the least of 3: the machine's noise only adds */
    small_s = fmin(small_s, read_and_place(small, small_len, 640));
    large_s = fmin(large_s, read_and_place(large, large_len, 1280));
  }
  printf("read and place: 640 ranks %.3f s, 1,280 ranks %.3f s of CPU (%.1fx)\n", small_s, large_s,
         large_s / small_s);
  CHECK(large_s < 3.0, "1,280 ranks took %.2f s of CPU", large_s);
  CHECK(large_s < 8 * small_s, "640 -> 1,280 ranks: %.3f s -> %.3f s, more than 8x", small_s,
        large_s);
  free(small);
  free(large);
}

int main(void) {
  test_numbers_exact();
  test_positions();
  test_growth();
  printf("%s\n", failures ? "FAIL" : "PASS");
  return failures != 0;
}
