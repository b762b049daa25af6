// SPDX-License-Identifier: Apache-2.0
/*
 * test_schedule_hier.c — the hierarchical builders (src/coll/hier.c) over many site layouts,
 * run through the in-memory executor (tests/helpers/sched_sim.c) with strict rendezvous matching,
 * random event orders and the static hazard check.
 *
 * Symbolic values (elem_size 4), as in test_schedule_symbolic.c: a reduction input element i of
 * rank r is (i mod 2^16) << 16 | 1 << r and the algebra refuses to combine different elements or
 * to count a rank twice, so an output equal to (i << 16) | all-ranks is an exact reduction. Data
 * movement inputs are 0x40000000 | r << 20 | i. Outputs and scratch start as 0xffffffff.
 * Also: AUTO picks HIER only when sites exist and the message is large, and bad site arrays fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/schedule.h"
#include "helpers/sched_sim.h"
#include "helpers/check.h"

#define POISON 0xffffffffu
#define MAX_RANKS 8

static int cases;

static int symbolic_reduce(void *ctx, void *dst, const void *a, const void *b, uint64_t count,
                           char *err, size_t errlen) {
  (void)ctx;
  uint32_t *d = dst;
  const uint32_t *x = a, *y = b;
  for (uint64_t i = 0; i < count; i++) {
    if ((x[i] >> 16) != (y[i] >> 16) || (x[i] & y[i] & 0xffffu)) {
      snprintf(err, errlen, "bad reduction of %#x with %#x", x[i], y[i]);
      return -1;
    }
    d[i] = x[i] | y[i];
  }
  return 0;
}

static int is_reduction(strata_coll c) {
  return c == STRATA_COLL_ALLREDUCE || c == STRATA_COLL_REDUCE_SCATTER;
}

static uint32_t input(strata_coll c, int r, uint64_t i) {
  if (is_reduction(c)) return (uint32_t)((i & 0xffffu) << 16) | (1u << r);
  return 0x40000000u | (uint32_t)r << 20 | (uint32_t)i;
}

static uint32_t expected(strata_coll c, int n, int r, int root, uint64_t count, uint64_t i) {
  const uint32_t all = (1u << n) - 1;
  switch (c) {
    case STRATA_COLL_ALLREDUCE:
      return (uint32_t)((i & 0xffffu) << 16) | all;
    case STRATA_COLL_REDUCE_SCATTER:
      return (uint32_t)((((uint64_t)r * count + i) & 0xffffu) << 16) | all;
    case STRATA_COLL_ALLGATHER:
      return input(c, (int)(i / count), i % count);
    default:
      return input(c, root, i);
  }
}

/* Element counts of send and receive buffers, and where they sit in one region when in place. */
typedef struct layout {
  uint64_t send, recv, send_at, recv_at, region;
} layout;

static layout layout_for(strata_coll c, int n, int r, int root, uint64_t count) {
  const uint64_t all = (uint64_t)n * count;
  layout l = {count, count, 0, 0, count};
  if (c == STRATA_COLL_REDUCE_SCATTER)
    l.send = all, l.recv_at = (uint64_t)r * count, l.region = all;
  if (c == STRATA_COLL_ALLGATHER) l.recv = all, l.send_at = (uint64_t)r * count, l.region = all;
  if (c == STRATA_COLL_BROADCAST && r != root) l.send = 0;
  return l;
}

static const char *coll_name(strata_coll c) {
  return c == STRATA_COLL_ALLREDUCE        ? "allreduce"
         : c == STRATA_COLL_REDUCE_SCATTER ? "reduce_scatter"
         : c == STRATA_COLL_ALLGATHER      ? "allgather"
                                           : "broadcast";
}

static void run_case(strata_coll c, const int *sites, int n, uint64_t count, int root, int in_place,
                     uint64_t chunk_bytes, uint64_t seed) {
  strata_schedule sched[MAX_RANKS];
  uint32_t *region[MAX_RANKS], *send[MAX_RANKS], *recv[MAX_RANKS];
  sched_sim_buffers sb[MAX_RANKS];
  layout l[MAX_RANKS];
  char what[200], err[512] = "", layout_text[64] = "";
  for (int r = 0; r < n; r++)
    snprintf(layout_text + strlen(layout_text), sizeof layout_text - strlen(layout_text), "%d",
             sites ? sites[r] : 0);
  snprintf(what, sizeof what, "%s sites=%s count=%llu root=%d in_place=%d chunk=%llu", coll_name(c),
           layout_text, (unsigned long long)count, root, in_place, (unsigned long long)chunk_bytes);
  cases++;
  memset(sched, 0, sizeof sched);
  int built = 0;
  for (; built < n; built++) {
    strata_sched_params p = {c, STRATA_ALGO_HIER, built,       n,    root, count,
                             4, in_place,         chunk_bytes, sites};
    int status = strata_schedule_build(&p, &sched[built]);
    if (status != STRATA_OK) {
      CHECK(0, "%s rank %d: build returned %d", what, built, status);
      break;
    }
    CHECK(sched[built].algo == STRATA_ALGO_HIER, "%s: built algo %d", what, sched[built].algo);
  }
  if (built == n) {
    for (int r = 0; r < n; r++) {
      l[r] = layout_for(c, n, r, root, count);
      const int aliased = in_place && l[r].send;
      region[r] = malloc((l[r].region + l[r].send + l[r].recv + 1) * 4);
      for (uint64_t i = 0; i < l[r].region + l[r].send + l[r].recv; i++) region[r][i] = POISON;
      send[r] = aliased ? region[r] + l[r].send_at : region[r] + l[r].region;
      recv[r] = aliased ? region[r] + l[r].recv_at : region[r] + l[r].region + l[r].send;
      for (uint64_t i = 0; i < l[r].send; i++) send[r][i] = input(c, r, i);
      sb[r] = (sched_sim_buffers){l[r].send ? (uint8_t *)send[r] : NULL, l[r].send * 4,
                                  (uint8_t *)recv[r], l[r].recv * 4};
    }
    sched_sim_algebra alg = {4, symbolic_reduce, NULL};
    sched_sim_options opt = {seed, count < 5000};
    if (sched_sim_run(sched, n, sb, &alg, &opt, err, sizeof err)) {
      CHECK(0, "%s: %s", what, err);
    } else {
      for (int r = 0; r < n; r++)
        for (uint64_t i = 0; i < l[r].recv; i++) {
          uint32_t want = expected(c, n, r, root, count, i);
          if (recv[r][i] != want) {
            CHECK(0, "%s: rank %d recv[%llu] = %#x, want %#x", what, r, (unsigned long long)i,
                  recv[r][i], want);
            break;
          }
        }
      for (int r = 0; r < n; r++) /* inputs never written (out of place) */
        for (uint64_t i = 0; !in_place && i < l[r].send; i++)
          if (send[r][i] != input(c, r, i)) {
            CHECK(0, "%s: rank %d send[%llu] overwritten", what, r, (unsigned long long)i);
            break;
          }
    }
    for (int r = 0; r < n; r++) free(region[r]);
  }
  for (int r = 0; r < n; r++) strata_schedule_free(&sched[r]);
}

static void check_auto(void) {
  const int two_by_two[4] = {0, 0, 1, 1}, one_site[4] = {0, 0, 0, 0}, singles[4] = {0, 1, 2, 3};
  strata_sched_params p = {
      STRATA_COLL_ALLREDUCE, STRATA_ALGO_AUTO, 0, 4, 0, 64u << 20, 4, 0, 0, two_by_two};
  CHECK(strata_schedule_choose(&p) == STRATA_ALGO_HIER, "AUTO 2x2 256 MiB is not hier");
  p.count = 16;
  CHECK(strata_schedule_choose(&p) != STRATA_ALGO_HIER, "AUTO 2x2 64 B is hier");
  p.count = 64u << 20, p.site_of_rank = one_site;
  CHECK(strata_schedule_choose(&p) != STRATA_ALGO_HIER, "AUTO one site is hier");
  p.site_of_rank = singles;
  CHECK(strata_schedule_choose(&p) != STRATA_ALGO_HIER, "AUTO one rank per site is hier");
  p.site_of_rank = NULL;
  CHECK(strata_schedule_choose(&p) != STRATA_ALGO_HIER, "AUTO without sites is hier");
  const int bad[4] = {0, 0, -1, 1};
  strata_schedule s;
  memset(&s, 0, sizeof s);
  p.algo = STRATA_ALGO_HIER, p.site_of_rank = bad, p.count = 100;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "negative site accepted");
  p.coll = STRATA_COLL_REDUCE;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_UNSUPPORTED, "hier reduce accepted");
  CHECK(strata_schedule_algo_applies(STRATA_COLL_ALLREDUCE, STRATA_ALGO_HIER), "applies");
}

int main(void) {
  static const struct {
    int n;
    int sites[MAX_RANKS];
  } layouts[] = {
      {4, {0, 0, 1, 1}},       /* 2 x 2 */
      {4, {0, 1, 0, 1}},       /* 2 x 2, interleaved ranks */
      {6, {0, 0, 1, 1, 2, 2}}, /* 3 x 2 */
      {6, {1, 0, 1, 0, 1, 0}}, /* 2 x 3, interleaved */
      {6, {0, 0, 0, 1, 1, 1}}, /* 2 x 3 */
      {4, {0, 0, 0, 1}},       /* uneven 3 + 1 */
      {6, {2, 0, 0, 2, 1, 0}}, /* uneven 3 + 1 + 2 */
      {4, {0, 0, 0, 0}},       /* one site */
      {4, {0, 1, 2, 3}},       /* every rank its own site */
      {5, {3, 3, 4, 4, 4}},    /* sparse site numbers (< nranks), 2 + 3 */
      {2, {0, 1}},             /* two singletons */
  };
  const strata_coll colls[] = {STRATA_COLL_ALLREDUCE, STRATA_COLL_REDUCE_SCATTER,
                               STRATA_COLL_ALLGATHER, STRATA_COLL_BROADCAST};
  const uint64_t counts[] = {0, 1, 7, 13, 1001, 40003};
  uint64_t seed = 1;
  for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++)
    for (size_t ci = 0; ci < sizeof colls / sizeof colls[0]; ci++)
      for (size_t m = 0; m < sizeof counts / sizeof counts[0]; m++)
        for (int in_place = 0; in_place < 2; in_place++) {
          const int n = layouts[k].n;
          uint64_t count = counts[m];
          if (colls[ci] != STRATA_COLL_ALLREDUCE && colls[ci] != STRATA_COLL_BROADCAST &&
              count > 5000)
            count = 5003; /* per-rank blocks: keep n * count small */
          const int root = colls[ci] == STRATA_COLL_BROADCAST ? (int)(m + k) % n : 0;
          run_case(colls[ci], layouts[k].sites, n, count, root, in_place, count > 1000 ? 4096 : 0,
                   seed++);
        }
  run_case(STRATA_COLL_ALLREDUCE, NULL, 4, 1001, 0, 0, 0, 99); /* no sites: one group */
  check_auto();
  printf("%d hierarchical cases, %d failures\n", cases, failures);
  return failures ? 1 : 0;
}
