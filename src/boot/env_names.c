// SPDX-License-Identifier: Apache-2.0
/*
 * env_names.c — every STRATA_* environment variable strata reads (the runtime, the tools, the
 * tests' and benchmarks' harnesses), so that a misspelt one is reported with the closest real
 * name instead of silently changing nothing. A variable added anywhere belongs in this list.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "boot/store.h"
#include "core/core.h"

static const char *const KNOWN_NAMES[] = {"STRATA_ADDR",
                                          "STRATA_ALGO",
                                          "STRATA_BIN",
                                          "STRATA_CHUNK",
                                          "STRATA_COMPRESS",
                                          "STRATA_DOCTOR_ROOT",
                                          "STRATA_ELASTIC",
                                          "STRATA_ENCRYPT",
                                          "STRATA_FUZZ_ITERATIONS",
                                          "STRATA_FUZZ_SECONDS",
                                          "STRATA_FUZZ_SEED",
                                          "STRATA_HOST",
                                          "STRATA_JOB_ID",
                                          "STRATA_JOIN",
                                          "STRATA_KV_BACKEND",
                                          "STRATA_KV_SYSCALL_BYTES",
                                          "STRATA_KV_UCX_POLL_US",
                                          "STRATA_KV_UCX_RNDV_BYTES",
                                          "STRATA_LOCAL_RANK",
                                          "STRATA_LOG",
                                          "STRATA_NETEM_ADDR",
                                          "STRATA_NETEM_SITE",
                                          "STRATA_NODE",
                                          "STRATA_OP_TIMEOUT",
                                          "STRATA_RANK",
                                          "STRATA_SECRET",
                                          "STRATA_SECRET_FILE",
                                          "STRATA_SHM",
                                          "STRATA_SHM_BENCH",
                                          "STRATA_SHM_CMA",
                                          "STRATA_SITE",
                                          "STRATA_SOURCE_DIR",
                                          "STRATA_STORE_EXTERNAL",
                                          "STRATA_STORE_QUOTA",
                                          "STRATA_TCP_BUFFER",
                                          "STRATA_TCP_CC",
                                          "STRATA_TCP_GOVERN",
                                          "STRATA_TCP_LINK_GBPS",
                                          "STRATA_TCP_STREAMS",
                                          "STRATA_TEST_QUICK",
                                          "STRATA_TIMEOUT",
                                          "STRATA_TOPOLOGY",
                                          "STRATA_TORCH",
                                          "STRATA_WORLD_SIZE"};
enum { KNOWN_COUNT = sizeof KNOWN_NAMES / sizeof KNOWN_NAMES[0], NAME_MAX_BYTES = 64 };

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

/* The known name closest to `name` (len bytes): within 2 edits, or one that ends with what
 * follows "STRATA_" in it ("STRATA_STREAMS" -> "STRATA_TCP_STREAMS"); NULL when none is. */
static const char *closest_name(const char *name, size_t len) {
  const char *best = NULL;
  int best_distance = 3;
  const char *tail = name + strlen("STRATA_");
  size_t tail_len = len - strlen("STRATA_");
  for (int i = 0; i < KNOWN_COUNT; i++) {
    const char *known = KNOWN_NAMES[i];
    size_t known_len = strlen(known);
    int distance = edit_distance(name, len, known, 2);
    if (distance > 2 && tail_len >= 3 && known_len > tail_len &&
        !strncmp(known + known_len - tail_len, tail, tail_len) &&
        known[known_len - tail_len - 1] == '_')
      distance = 2;
    if (distance < best_distance) {
      best = known;
      best_distance = distance;
    }
  }
  return best;
}

int strata_env_name_known(const char *name, size_t len) {
  for (int i = 0; i < KNOWN_COUNT; i++)
    if (strlen(KNOWN_NAMES[i]) == len && !strncmp(KNOWN_NAMES[i], name, len)) return 1;
  return 0;
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
    const char *hint = closest_name(entry, len);
    STRATA_LOG(STRATA_LOG_WARN, -1, "%.*s is not a variable strata reads%s%s%s: it has no effect",
               (int)len, entry, hint ? " (did you mean " : "", hint ? hint : "", hint ? "?)" : "");
  }
}
