// SPDX-License-Identifier: Apache-2.0
/*
 * env_names.c — a STRATA_* environment variable strata does not read is reported with the
 * closest real name instead of silently changing nothing. The real names are the rows of the
 * settings table (settings.c) and the few the project's own harnesses read.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "boot/settings.h"
#include "boot/store.h"
#include "core/core.h"

/* What the project's own scripts, tests and benchmarks read (not the library or the command,
 * whose variables are the rows of settings.c): known, so that their runs warn of nothing. */
static const char *const HARNESS_NAMES[] = {
    "STRATA_BIN",         "STRATA_CTEST_JOBS",  "STRATA_FUZZ_ITERATIONS", "STRATA_FUZZ_SECONDS",
    "STRATA_FUZZ_SEED",   "STRATA_PYTHON",      "STRATA_SHM_BENCH",       "STRATA_SOURCE_DIR",
    "STRATA_TEST_DEVICE", "STRATA_TEST_IMPORT", "STRATA_TEST_QUICK",      "STRATA_TOPOLOGY",
    "STRATA_TORCH"};
enum { HARNESS_COUNT = sizeof HARNESS_NAMES / sizeof HARNESS_NAMES[0], NAME_MAX_BYTES = 64 };

/* Calls visit(name, len, ctx) for every known name, the table's rows (a row may name several,
 * ", " between them) and the harness's, until it returns nonzero; returns that. */
static int for_each_known(int (*visit)(const char *, size_t, void *), void *ctx) {
  size_t count;
  const strata_setting *rows = strata_settings(&count);
  for (size_t r = 0; r < count; r++) {
    for (const char *name = rows[r].name; *name;) {
      size_t len = strcspn(name, ", ");
      int stop = len && !strncmp(name, "STRATA_", 7) ? visit(name, len, ctx) : 0;
      if (stop) return stop;
      name += len;
      name += strspn(name, ", ");
    }
  }
  for (int i = 0; i < HARNESS_COUNT; i++) {
    int stop = visit(HARNESS_NAMES[i], strlen(HARNESS_NAMES[i]), ctx);
    if (stop) return stop;
  }
  return 0;
}

/* Edit distance of a (alen) and b, capped: anything above `cap` reads as cap + 1. */
static int edit_distance(const char *a, size_t alen, const char *b, int cap) {
  size_t blen = strlen(b);
  if (alen >= NAME_MAX_BYTES || blen >= NAME_MAX_BYTES) return cap + 1;
  int row[NAME_MAX_BYTES + 1];
  for (size_t j = 0; j <= blen; j++) row[j] = (int)j;
  for (size_t i = 1; i <= alen; i++) {
    int diagonal = row[0], best = row[0] = (int)i;
    for (size_t j = 1; j <= blen; j++) {
      int above = row[j];
      int cost = diagonal + (a[i - 1] != b[j - 1]);
      if (above + 1 < cost) cost = above + 1;
      if (row[j - 1] + 1 < cost) cost = row[j - 1] + 1;
      row[j] = cost;
      diagonal = above;
      if (cost < best) best = cost;
    }
    if (best > cap) return cap + 1;
  }
  return row[blen] > cap ? cap + 1 : row[blen];
}

typedef struct closest {
  const char *name, *tail, *best;
  size_t len, tail_len, best_len;
  int best_distance;
} closest;

static int consider(const char *known, size_t known_len, void *ctx) {
  closest *c = ctx;
  char text[NAME_MAX_BYTES];
  if (known_len >= sizeof text) return 0;
  memcpy(text, known, known_len);
  text[known_len] = '\0';
  int distance = edit_distance(c->name, c->len, text, 2);
  if (distance > 2 && c->tail_len >= 3 && known_len > c->tail_len &&
      !strncmp(known + known_len - c->tail_len, c->tail, c->tail_len) &&
      known[known_len - c->tail_len - 1] == '_')
    distance = 2;
  if (distance < c->best_distance) {
    c->best = known;
    c->best_len = known_len;
    c->best_distance = distance;
  }
  return 0;
}

/* The known name closest to `name` (len bytes): within 2 edits, or one that ends with what
 * follows "STRATA_" in it ("STRATA_STREAMS" -> "STRATA_TCP_STREAMS"); best NULL when none is. */
static closest closest_name(const char *name, size_t len) {
  closest c = {.name = name, .len = len, .tail = name + 7, .tail_len = len - 7, .best_distance = 3};
  for_each_known(consider, &c);
  return c;
}

static int same_name(const char *known, size_t known_len, void *ctx) {
  const closest *c = ctx;
  return known_len == c->len && !strncmp(known, c->name, known_len);
}

int strata_env_name_known(const char *name, size_t len) {
  closest c = {.name = name, .len = len};
  return for_each_known(same_name, &c);
}

void strata_env_warn_unknown(char *const *envp) {
  static atomic_int warned; /* once a scan found something: not again in this process */
  if (!envp || atomic_load(&warned)) return;
  for (; *envp; envp++) {
    const char *entry = *envp, *equals = strchr(entry, '=');
    if (strncmp(entry, "STRATA_", 7) || !equals) continue;
    size_t len = (size_t)(equals - entry);
    if (strata_env_name_known(entry, len)) continue;
    atomic_store(&warned, 1);
    closest hint = closest_name(entry, len);
    STRATA_LOG(STRATA_LOG_WARN, -1, "%.*s is not a variable strata reads%s%.*s%s: it has no effect",
               (int)len, entry, hint.best ? " (did you mean " : "", (int)hint.best_len,
               hint.best ? hint.best : "", hint.best ? "?)" : "");
  }
}
