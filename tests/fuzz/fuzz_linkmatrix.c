// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_linkmatrix.c — coverage-guided fuzzing of the link-matrix reader (src/topo/linkmatrix.c),
 * the file `strata probe` writes and `strata place` and `strata plan --links` read, in either
 * spelling (JSON, or YAML: one parser reads both).
 *
 * Every input must either load as a matrix that passes strata_link_matrix_validate, or fail with
 * STRATA_ERR_PARSE, a message naming the source ("fuzz:...") and the struct zeroed. A matrix that
 * loads must also survive the trip `strata probe` makes: written as JSON and as YAML, each reads
 * back to the same numbers, bit for bit, and the same labels. Anything else aborts, so libFuzzer
 * keeps the input. Seeds: tests/fuzz/corpus/linkmatrix; run: tests/fuzz/README.md.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata.h"
#include "topo/linkmatrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_zeroed(const strata_link_matrix *m) {
  static const strata_link_matrix zero;
  return memcmp(m, &zero, sizeof zero) == 0;
}

static int same_matrix(const strata_link_matrix *a, const strata_link_matrix *b) {
  size_t cells = (size_t)a->nranks * (size_t)a->nranks;
  if (a->nranks != b->nranks || a->streams != b->streams || strcmp(a->measured, b->measured) ||
      strcmp(a->method, b->method) ||
      memcmp(a->latency_us, b->latency_us, cells * sizeof(double)) ||
      memcmp(a->bandwidth_gbps, b->bandwidth_gbps, cells * sizeof(double)))
    return 0;
  for (int i = 0; i < a->nranks; i++)
    if (strcmp(a->host[i], b->host[i]) || strcmp(a->site[i], b->site[i])) return 0;
  return 1;
}

/* Writes m in `format` to memory and reads it back; aborts unless the copy matches. */
static void check_round_trip(const strata_link_matrix *m, strata_link_matrix_format format) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  if (out == NULL) return;
  int rc = strata_link_matrix_write(m, format, out);
  fclose(out);
  if (rc != STRATA_OK) abort();
  strata_link_matrix copy;
  char err[512];
  rc = strata_link_matrix_parse(&copy, "written", text, len, err, sizeof err);
  if (rc != STRATA_OK) {
    fprintf(stderr, "a loaded matrix written back does not load: %s\n%s\n", err, text);
    abort();
  }
  if (!same_matrix(m, &copy)) {
    fprintf(stderr, "a loaded matrix written back reads back different:\n%s\n", text);
    abort();
  }
  strata_link_matrix_free(&copy);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  strata_link_matrix m;
  char err[512] = "";
  int rc = strata_link_matrix_parse(&m, "fuzz", (const char *)data, size, err, sizeof err);
  if (rc != STRATA_OK) {
    if (rc != STRATA_ERR_PARSE || !is_zeroed(&m) || strncmp(err, "fuzz:", 5) != 0) abort();
    return 0;
  }
  if (strata_link_matrix_validate(&m, err, sizeof err) != STRATA_OK) abort();
  check_round_trip(&m, STRATA_LINKMATRIX_JSON);
  check_round_trip(&m, STRATA_LINKMATRIX_YAML);
  strata_link_matrix_free(&m);
  return 0;
}
