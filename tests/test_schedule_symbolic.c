// SPDX-License-Identifier: Apache-2.0
/*
 * test_schedule_symbolic.c — every collective, every algorithm, n = 1..16 ranks, run through the
 * in-memory executor (tests/helpers/sched_sim.c) in random orders with strict rendezvous
 * matching and the static hazard check.
 *
 * Symbolic values (elem_size 4):
 *  - reductions: element i of rank r is (i << 16) | (1 << r); the algebra ORs two values only
 *    when their element indices agree and their rank sets are disjoint, so the result must be
 *    (i << 16) | (all ranks) — each contribution exactly once, at the right place;
 *  - data movement: element i of rank r's send buffer is 0x40000000 | r << 20 | i, so every
 *    output element names the rank and the position it came from.
 * Unwritten outputs and scratch hold 0xffffffff, which no check accepts.
 * Also: real f64/i32 data with real arithmetic, bad parameters, and unsupported algorithms.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/schedule.h"
#include "helpers/sched_sim.h"
#include "helpers/check.h"

#define POISON 0xffffffffu

static int cases;

static const char *coll_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                   "reduce",    "gather",         "scatter",   "alltoall",
                                   "barrier",   "send",           "recv"};
static const char *algo_names[] = {"auto", "ring", "rhd", "tree", "direct"};

/* ---- symbolic algebra ------------------------------------------------------------------------ */

static int symbolic_reduce(void *ctx, void *dst, const void *a, const void *b, uint64_t count,
                           char *err, size_t errlen) {
  (void)ctx;
  uint32_t *d = dst;
  const uint32_t *x = a, *y = b;
  for (uint64_t i = 0; i < count; i++) {
    if ((x[i] >> 16) != (y[i] >> 16)) {
      snprintf(err, errlen, "reduces element %u with element %u (%#x, %#x)", x[i] >> 16, y[i] >> 16,
               x[i], y[i]);
      return -1;
    }
    if (x[i] & y[i] & 0xffffu) {
      snprintf(err, errlen, "element %u: ranks %#x counted twice", x[i] >> 16,
               x[i] & y[i] & 0xffff);
      return -1;
    }
    d[i] = x[i] | y[i];
  }
  return 0;
}

static int is_reduction(strata_coll c) {
  return c == STRATA_COLL_ALLREDUCE || c == STRATA_COLL_REDUCE_SCATTER || c == STRATA_COLL_REDUCE;
}

static uint32_t send_value(strata_coll c, int rank, uint64_t i) {
  if (is_reduction(c)) return (uint32_t)(i << 16) | (1u << rank);
  return 0x40000000u | (uint32_t)rank << 20 | (uint32_t)i;
}

/* ---- buffer layout per collective (elements) ------------------------------------------------ */

typedef struct layout {
  uint64_t send, recv; /* elements */
  int aliased;         /* one region holds both */
  uint64_t region, send_at, recv_at;
} layout;

static layout layout_for(strata_coll c, int n, int r, int root, uint64_t count, int in_place) {
  layout l = {0, 0, 0, 0, 0, 0};
  const uint64_t all = (uint64_t)n * count;
  switch (c) {
    case STRATA_COLL_ALLREDUCE:
      l.send = l.recv = count, l.aliased = in_place;
      break;
    case STRATA_COLL_REDUCE_SCATTER: /* in_place 2: recvbuf == sendbuf, also allowed */
      l.send = all, l.recv = count, l.aliased = in_place;
      l.recv_at = in_place == 2 ? 0 : (uint64_t)r * count;
      break;
    case STRATA_COLL_ALLGATHER:
      l.send = count, l.recv = all, l.aliased = in_place, l.send_at = (uint64_t)r * count;
      break;
    case STRATA_COLL_BROADCAST:
      l.send = r == root ? count : 0, l.recv = count, l.aliased = in_place && r == root;
      break;
    case STRATA_COLL_REDUCE:
      l.send = count, l.recv = r == root ? count : 0, l.aliased = in_place && r == root;
      break;
    case STRATA_COLL_GATHER:
      l.send = count, l.recv = r == root ? all : 0, l.aliased = in_place && r == root;
      l.send_at = (uint64_t)root * count;
      break;
    case STRATA_COLL_SCATTER:
      l.send = r == root ? all : 0, l.recv = count, l.aliased = in_place && r == root;
      l.recv_at = (uint64_t)root * count;
      break;
    case STRATA_COLL_ALLTOALL:
      l.send = l.recv = all, l.aliased = in_place;
      break;
    case STRATA_COLL_SEND:
      l.send = count;
      break;
    case STRATA_COLL_RECV:
      l.recv = count;
      break;
    default:
      break;
  }
  if (l.aliased)
    l.region = l.send_at + l.send > l.recv_at + l.recv ? l.send_at + l.send : l.recv_at + l.recv;
  else
    l.send_at = l.recv_at = 0;
  return l;
}

typedef struct rank_bufs {
  uint32_t *region, *send, *recv;
  layout l;
} rank_bufs;

static void bufs_alloc(rank_bufs *b, sched_sim_buffers *sb, strata_coll c, int n, int r, int root,
                       uint64_t count, int in_place) {
  memset(b, 0, sizeof *b);
  b->l = layout_for(c, n, r, root, count, in_place);
  if (b->l.aliased) {
    b->region = malloc((b->l.region + 1) * 4);
    for (uint64_t i = 0; i < b->l.region; i++) b->region[i] = POISON;
    b->send = b->region + b->l.send_at;
    b->recv = b->region + b->l.recv_at;
  } else {
    b->send = b->l.send ? malloc(b->l.send * 4) : NULL;
    b->recv = b->l.recv ? malloc(b->l.recv * 4) : NULL;
    for (uint64_t i = 0; i < b->l.recv; i++) b->recv[i] = POISON;
  }
  for (uint64_t i = 0; i < b->l.send; i++) b->send[i] = send_value(c, r, i);
  sb->send = b->l.send ? (uint8_t *)b->send : NULL;
  sb->send_bytes = b->l.send * 4;
  sb->recv = b->l.recv ? (uint8_t *)b->recv : NULL;
  sb->recv_bytes = b->l.recv * 4;
}

static void bufs_free(rank_bufs *b) {
  if (b->l.aliased) {
    free(b->region);
  } else {
    free(b->send);
    free(b->recv);
  }
}

/* Expected value of output element i of rank r, or POISON when the rank has no output there. */
static uint32_t expected(strata_coll c, int n, int r, int root, uint64_t count, uint64_t i) {
  const uint32_t everyone = (uint32_t)((1u << n) - 1);
  switch (c) {
    case STRATA_COLL_ALLREDUCE:
    case STRATA_COLL_REDUCE:
      return (uint32_t)(i << 16) | everyone;
    case STRATA_COLL_REDUCE_SCATTER:
      return (uint32_t)(((uint64_t)r * count + i) << 16) | everyone;
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_GATHER:
      return send_value(c, (int)(i / count), i % count);
    case STRATA_COLL_BROADCAST:
      return send_value(c, root, i);
    case STRATA_COLL_SCATTER:
      return send_value(c, root, (uint64_t)r * count + i);
    case STRATA_COLL_ALLTOALL:
      return send_value(c, (int)(i / count), (uint64_t)r * count + i % count);
    case STRATA_COLL_RECV:
      return send_value(STRATA_COLL_SEND, root, i);
    default:
      return POISON;
  }
}

/* Every rank must talk, and the message graph must be connected (count 0 included). */
static int find_root(int *parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

static int messages_connected(const strata_schedule *s, int n) {
  int parent[64], talks[64] = {0};
  for (int r = 0; r < n; r++) parent[r] = r;
  for (int r = 0; r < n; r++) {
    for (uint32_t i = 0; i < s[r].nsteps; i++) {
      const strata_step *st = &s[r].steps[i];
      if (st->kind != STRATA_STEP_SEND) continue;
      talks[r] = talks[st->peer] = 1;
      parent[find_root(parent, r)] = find_root(parent, st->peer);
    }
  }
  for (int r = 0; r < n; r++)
    if (!talks[r] || find_root(parent, r) != find_root(parent, 0)) return 0;
  return 1;
}

/* ---- one symbolic case -------------------------------------------------------------------------
 */

static void run_case(strata_coll c, strata_algo algo, int n, uint64_t count, int root, int in_place,
                     uint64_t chunk_bytes, uint64_t seed) {
  strata_schedule sched[16];
  rank_bufs bufs[16];
  sched_sim_buffers sb[16];
  char err[512] = "", what[160];
  snprintf(what, sizeof what, "%s/%s n=%d count=%llu root=%d in_place=%d chunk=%llu", coll_names[c],
           algo_names[algo], n, (unsigned long long)count, root, in_place,
           (unsigned long long)chunk_bytes);
  cases++;
  memset(sched, 0, sizeof sched);
  int built = 0, ok = 1;
  for (int r = 0; r < n; r++, built++) {
    /* as api.c: reduce-scatter's alias form (in_place 2) is the NCCL one on rank 0 */
    int form = in_place == 2 && r != 0 ? STRATA_IN_PLACE_ALIAS : in_place ? STRATA_IN_PLACE : 0;
    strata_sched_params p = {c, algo, r, n, root, count, 4, form, chunk_bytes, NULL};
    int status = strata_schedule_build(&p, &sched[r]);
    /* as the engine runs it: a rooted collective carries the signature check */
    if (status == STRATA_OK) status = strata_schedule_add_signature_check(&p, &sched[r]);
    if (status != STRATA_OK) {
      CHECK(0, "%s rank %d: build returned %d", what, r, status);
      ok = 0;
      break;
    }
    CHECK(sched[r].algo != STRATA_ALGO_AUTO && (algo == STRATA_ALGO_AUTO || sched[r].algo == algo),
          "%s: built algo %d", what, sched[r].algo);
    CHECK(sched[r].algo == sched[0].algo, "%s: ranks chose different algorithms", what);
  }
  if (ok && n > 1) CHECK(messages_connected(sched, n), "%s: message graph not connected", what);
  for (int r = 0; ok && r < n; r++) bufs_alloc(&bufs[r], &sb[r], c, n, r, root, count, in_place);
  if (ok) {
    sched_sim_algebra alg = {4, symbolic_reduce, NULL};
    sched_sim_options opt = {seed, 1};
    if (sched_sim_run(sched, n, sb, &alg, &opt, err, sizeof err)) {
      CHECK(0, "%s: %s", what, err);
    } else {
      for (int r = 0; r < n; r++) {
        const rank_bufs *b = &bufs[r];
        int wrong = 0;
        for (uint64_t i = 0; i < b->l.recv && wrong < 1; i++) {
          uint32_t want = expected(c, n, r, root, count, i);
          if (b->recv[i] != want) {
            CHECK(0, "%s: rank %d recv[%llu] = %#x, want %#x", what, r, (unsigned long long)i,
                  b->recv[i], want);
            wrong++;
          }
        }
        for (uint64_t i = 0; !b->l.aliased && i < b->l.send && !wrong; i++) {
          if (b->send[i] != send_value(c, r, i)) {
            CHECK(0, "%s: rank %d send[%llu] was modified", what, r, (unsigned long long)i);
            wrong++;
          }
        }
      }
    }
  }
  for (int r = 0; ok && r < n; r++) bufs_free(&bufs[r]);
  for (int r = 0; r < built; r++) strata_schedule_free(&sched[r]);
}

typedef struct coll_algos {
  strata_coll coll;
  strata_algo algos[5];
  int nalgos, rooted, has_in_place; /* has_in_place: how many in-place layouts (1 or 2) */
} coll_algos;

static const coll_algos table[] = {
    {STRATA_COLL_ALLREDUCE,
     {STRATA_ALGO_AUTO, STRATA_ALGO_RING, STRATA_ALGO_RHD, STRATA_ALGO_TREE, STRATA_ALGO_DIRECT},
     5,
     0,
     1},
    {STRATA_COLL_REDUCE_SCATTER,
     {STRATA_ALGO_AUTO, STRATA_ALGO_RING, STRATA_ALGO_RHD, STRATA_ALGO_DIRECT},
     4,
     0,
     2},
    {STRATA_COLL_ALLGATHER,
     {STRATA_ALGO_AUTO, STRATA_ALGO_RING, STRATA_ALGO_RHD, STRATA_ALGO_DIRECT},
     4,
     0,
     1},
    {STRATA_COLL_BROADCAST, {STRATA_ALGO_AUTO, STRATA_ALGO_TREE, STRATA_ALGO_RING}, 3, 1, 1},
    {STRATA_COLL_REDUCE, {STRATA_ALGO_AUTO, STRATA_ALGO_TREE, STRATA_ALGO_RING}, 3, 1, 1},
    {STRATA_COLL_GATHER, {STRATA_ALGO_AUTO, STRATA_ALGO_TREE, STRATA_ALGO_DIRECT}, 3, 1, 1},
    {STRATA_COLL_SCATTER, {STRATA_ALGO_AUTO, STRATA_ALGO_TREE, STRATA_ALGO_DIRECT}, 3, 1, 1},
    {STRATA_COLL_ALLTOALL, {STRATA_ALGO_AUTO, STRATA_ALGO_DIRECT}, 2, 0, 1},
    {STRATA_COLL_BARRIER, {STRATA_ALGO_AUTO, STRATA_ALGO_RHD, STRATA_ALGO_DIRECT}, 3, 0, 0},
};

static void test_symbolic_all(void) {
  uint64_t seed = 1;
  for (int n = 1; n <= 16; n++) {
    const uint64_t counts[6] = {
        0, 1, 7, (uint64_t)n - 1, 3 * (uint64_t)n + 1, 48 * (uint64_t)n + 5};
    const uint64_t chunks[6] = {0, 0, 0, 4, 8, 64};
    int roots[3] = {0, n - 1, n / 2}, nroots = n == 1 ? 1 : (n == 2 ? 2 : 3);
    for (size_t t = 0; t < sizeof table / sizeof table[0]; t++) {
      const coll_algos *ca = &table[t];
      for (int a = 0; a < ca->nalgos; a++) {
        if (n == 1)
          CHECK(strata_schedule_algo_applies(ca->coll, ca->algos[a]), "%s/%s said not to apply",
                coll_names[ca->coll], algo_names[ca->algos[a]]);
        for (int k = 0; k < 6; k++) {
          for (int ip = 0; ip <= ca->has_in_place; ip++) {
            for (int ri = 0; ri < (ca->rooted ? nroots : 1); ri++)
              run_case(ca->coll, ca->algos[a], n, counts[k], roots[ri], ip, chunks[k], seed++);
          }
        }
      }
    }
  }
}

/* Sizes above the recursive-doubling limit (32 KiB) so RHD takes the halving-doubling path; also
 * the AUTO choice there. */
static void test_symbolic_large_allreduce(void) {
  uint64_t seed = 99991;
  for (int n = 1; n <= 16; n++) {
    for (int ip = 0; ip <= 1; ip++) {
      run_case(STRATA_COLL_ALLREDUCE, STRATA_ALGO_RHD, n, 8195 + (uint64_t)n, 0, ip, 0, seed++);
      run_case(STRATA_COLL_ALLREDUCE, STRATA_ALGO_AUTO, n, 20000 + 3 * (uint64_t)n, 0, ip, 4096,
               seed++);
    }
  }
}

/* Point to point: rank a sends to rank b; everybody else has an empty schedule. */
static void test_sendrecv(void) {
  for (int n = 2; n <= 5; n++) {
    for (uint64_t count = 0; count < 20; count += 7) {
      int a = n - 1, b = 0;
      strata_schedule sched[5];
      rank_bufs bufs[5];
      sched_sim_buffers sb[5];
      char err[512];
      memset(sched, 0, sizeof sched);
      strata_sched_params ps = {STRATA_COLL_SEND, STRATA_ALGO_AUTO, a, n, b, count, 4, 0, 0, NULL};
      strata_sched_params pr = {
          STRATA_COLL_RECV, STRATA_ALGO_DIRECT, b, n, a, count, 4, 0, 0, NULL};
      CHECK(strata_schedule_build(&ps, &sched[a]) == STRATA_OK, "send build");
      CHECK(strata_schedule_build(&pr, &sched[b]) == STRATA_OK, "recv build");
      for (int r = 0; r < n; r++) {
        strata_coll c = r == a ? STRATA_COLL_SEND : r == b ? STRATA_COLL_RECV : STRATA_COLL_BARRIER;
        bufs_alloc(&bufs[r], &sb[r], c, n, r, r == b ? a : b, count, 0);
      }
      sched_sim_algebra alg = {4, symbolic_reduce, NULL};
      sched_sim_options opt = {7, 1};
      int rc = sched_sim_run(sched, n, sb, &alg, &opt, err, sizeof err);
      CHECK(rc == 0, "send/recv n=%d: %s", n, err);
      for (uint64_t i = 0; rc == 0 && i < count; i++)
        CHECK(bufs[b].recv[i] == expected(STRATA_COLL_RECV, n, b, a, count, i), "recv[%llu]",
              (unsigned long long)i);
      for (int r = 0; r < n; r++) bufs_free(&bufs[r]), strata_schedule_free(&sched[r]);
    }
  }
}

/* ---- real data ---------------------------------------------------------------------------------
 */

static int f64_sum(void *ctx, void *dst, const void *a, const void *b, uint64_t count, char *err,
                   size_t errlen) {
  (void)ctx, (void)err, (void)errlen;
  double *d = dst;
  const double *x = a, *y = b;
  for (uint64_t i = 0; i < count; i++) d[i] = x[i] + y[i];
  return 0;
}

static int i32_sum(void *ctx, void *dst, const void *a, const void *b, uint64_t count, char *err,
                   size_t errlen) {
  (void)ctx, (void)err, (void)errlen;
  int32_t *d = dst;
  const int32_t *x = a, *y = b;
  for (uint64_t i = 0; i < count; i++) d[i] = (int32_t)((uint32_t)x[i] + (uint32_t)y[i]);
  return 0;
}

/* allreduce of f64 (all algorithms, AUTO at a size that picks the ring) */
static void test_real_f64_allreduce(void) {
  const struct {
    int n;
    uint64_t count, chunk;
    strata_algo algo;
  } runs[] = {{3, 1000, 512, STRATA_ALGO_RING}, {4, 1000, 512, STRATA_ALGO_RHD},
              {7, 5000, 0, STRATA_ALGO_RHD},    {6, 1001, 800, STRATA_ALGO_TREE},
              {5, 9, 0, STRATA_ALGO_RHD},       {5, 1003, 0, STRATA_ALGO_DIRECT},
              {4, 300000, 0, STRATA_ALGO_AUTO}};
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    const int n = runs[k].n;
    const uint64_t count = runs[k].count;
    strata_schedule sched[8];
    double *send[8], *recv[8];
    sched_sim_buffers sb[8];
    char err[512];
    memset(sched, 0, sizeof sched);
    for (int r = 0; r < n; r++) {
      strata_sched_params p = {STRATA_COLL_ALLREDUCE, runs[k].algo, r, n, 0, count, 8, 0,
                               runs[k].chunk,         NULL};
      CHECK(strata_schedule_build(&p, &sched[r]) == STRATA_OK, "f64 build");
      send[r] = malloc(count * 8);
      recv[r] = malloc(count * 8);
      for (uint64_t i = 0; i < count; i++) send[r][i] = (double)(r + 1) * 0.5 + (double)i;
      sb[r] = (sched_sim_buffers){(uint8_t *)send[r], count * 8, (uint8_t *)recv[r], count * 8};
    }
    if (runs[k].algo == STRATA_ALGO_AUTO)
      CHECK(sched[0].algo == STRATA_ALGO_RING, "AUTO allreduce of 2.4 MB picked %s",
            algo_names[sched[0].algo]);
    sched_sim_algebra alg = {8, f64_sum, NULL};
    sched_sim_options opt = {k + 11, count < 10000};
    int rc = sched_sim_run(sched, n, sb, &alg, &opt, err, sizeof err);
    CHECK(rc == 0, "f64 allreduce n=%d: %s", n, err);
    double ranks_sum = 0.5 * n * (n + 1) / 2.0;
    for (int r = 0; rc == 0 && r < n; r++) {
      for (uint64_t i = 0; i < count; i++) {
        double want = ranks_sum + (double)n * (double)i;
        if (recv[r][i] != want) {
          CHECK(0, "f64 allreduce %s n=%d rank %d [%llu] = %g want %g", algo_names[sched[0].algo],
                n, r, (unsigned long long)i, recv[r][i], want);
          break;
        }
      }
    }
    for (int r = 0; r < n; r++) free(send[r]), free(recv[r]), strata_schedule_free(&sched[r]);
  }
}

/* reduce_scatter and reduce of i32, in place where the API allows it */
static void test_real_i32(void) {
  for (int n = 2; n <= 6; n += 2) {
    for (int variant = 0; variant < 3; variant++) {
      const uint64_t count = 37;
      strata_coll c = variant == 0 ? STRATA_COLL_REDUCE_SCATTER : STRATA_COLL_REDUCE;
      strata_algo algo = variant == 0   ? STRATA_ALGO_RING
                         : variant == 1 ? STRATA_ALGO_TREE
                                        : STRATA_ALGO_RING;
      const int root = n - 1, in_place = 1;
      strata_schedule sched[6];
      int32_t *mem[6];
      sched_sim_buffers sb[6];
      char err[512];
      memset(sched, 0, sizeof sched);
      for (int r = 0; r < n; r++) {
        strata_sched_params p = {c, algo, r, n, root, count, 4, in_place, 16, NULL};
        CHECK(strata_schedule_build(&p, &sched[r]) == STRATA_OK, "i32 build");
        uint64_t elems = c == STRATA_COLL_REDUCE_SCATTER ? n * count : count;
        mem[r] = malloc(elems * 4);
        for (uint64_t i = 0; i < elems; i++) mem[r][i] = (int32_t)(r * 1000 + (int)i) - 500;
        if (c == STRATA_COLL_REDUCE_SCATTER)
          sb[r] = (sched_sim_buffers){(uint8_t *)mem[r], elems * 4, (uint8_t *)(mem[r] + r * count),
                                      count * 4};
        else
          sb[r] =
              (sched_sim_buffers){(uint8_t *)mem[r], count * 4,
                                  r == root ? (uint8_t *)mem[r] : NULL, r == root ? count * 4 : 0};
      }
      sched_sim_algebra alg = {4, i32_sum, NULL};
      sched_sim_options opt = {(uint64_t)(n * 3 + variant + 1), 1};
      int rc = sched_sim_run(sched, n, sb, &alg, &opt, err, sizeof err);
      CHECK(rc == 0, "i32 %s n=%d: %s", coll_names[c], n, err);
      int32_t rank_part = 1000 * n * (n - 1) / 2;
      for (int r = 0; rc == 0 && r < n; r++) {
        if (c == STRATA_COLL_REDUCE && r != root) continue;
        const int32_t *out = (const int32_t *)sb[r].recv;
        for (uint64_t i = 0; i < count; i++) {
          uint64_t g = c == STRATA_COLL_REDUCE_SCATTER ? r * count + i : i;
          int32_t want = rank_part + n * ((int32_t)g - 500);
          if (out[i] != want) {
            CHECK(0, "i32 %s n=%d rank %d [%llu] = %d want %d", coll_names[c], n, r,
                  (unsigned long long)i, out[i], want);
            break;
          }
        }
      }
      for (int r = 0; r < n; r++) free(mem[r]), strata_schedule_free(&sched[r]);
    }
  }
}

/* ---- parameters ---------------------------------------------------------------------------------
 */

static void test_bad_params(void) {
  strata_schedule s;
  memset(&s, 0, sizeof s);
  const strata_sched_params good = {
      STRATA_COLL_BROADCAST, STRATA_ALGO_AUTO, 1, 4, 2, 10, 4, 0, 0, NULL};
  strata_sched_params p = good;
  CHECK(strata_schedule_build(&p, &s) == STRATA_OK, "good params");
  strata_schedule_free(&s);
  p = good, p.rank = -1;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "rank -1");
  p = good, p.rank = 4;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "rank == nranks");
  p = good, p.nranks = 0, p.rank = 0, p.root = 0;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "nranks 0");
  p = good, p.root = 4;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "root == nranks");
  p = good, p.root = -1;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "root -1");
  p = good, p.elem_size = 0;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "elem_size 0");
  p = good, p.count = UINT64_MAX / 2;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "count overflow");
  p = good, p.coll = STRATA_COLL_ALLGATHER, p.count = (UINT64_MAX / 4) / 3;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "count*elem*n overflow");
  p = good, p.coll = STRATA_COLL_SEND, p.root = 1;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "send to self");
  p = good, p.coll = STRATA_COLL_RECV, p.root = 1;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "recv from self");
  p = good, p.coll = STRATA_COLL_RECV, p.root = STRATA_ANY_SOURCE;
  CHECK(strata_schedule_build(&p, &s) == STRATA_OK && s.nsteps == 1 &&
            s.steps[0].kind == STRATA_STEP_RECV && s.steps[0].peer == STRATA_ANY_SOURCE,
        "recv from any source: one receive, its peer left to the engine");
  strata_schedule_free(&s);
  p = good, p.coll = STRATA_COLL_SEND, p.root = STRATA_ANY_SOURCE;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "send to any");
  p = good, p.coll = STRATA_COLL_RECV, p.nranks = 1, p.rank = 0, p.root = STRATA_ANY_SOURCE;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "recv from any source alone");
  p = good, p.coll = STRATA_COLL_SEND, p.nranks = 1, p.rank = 0, p.root = 0;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "send alone");
  p = good, p.coll = (strata_coll)STRATA_COLL_COUNT;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "bad coll");
  p = good, p.algo = (strata_algo)STRATA_ALGO_COUNT;
  CHECK(strata_schedule_build(&p, &s) == STRATA_ERR_INVALID_ARG, "bad algo");
  CHECK(strata_schedule_build(NULL, &s) == STRATA_ERR_INVALID_ARG, "NULL params");
  CHECK(s.steps == NULL && s.nsteps == 0, "nothing allocated on error");
  const struct {
    strata_coll coll;
    strata_algo algo;
  } unsupported[] = {
      {STRATA_COLL_ALLTOALL, STRATA_ALGO_RING},       {STRATA_COLL_ALLTOALL, STRATA_ALGO_TREE},
      {STRATA_COLL_REDUCE_SCATTER, STRATA_ALGO_TREE}, {STRATA_COLL_ALLGATHER, STRATA_ALGO_TREE},
      {STRATA_COLL_BROADCAST, STRATA_ALGO_DIRECT},    {STRATA_COLL_BARRIER, STRATA_ALGO_RING},
      {STRATA_COLL_SEND, STRATA_ALGO_RING},           {STRATA_COLL_GATHER, STRATA_ALGO_RING}};
  for (size_t k = 0; k < sizeof unsupported / sizeof unsupported[0]; k++) {
    p = good, p.coll = unsupported[k].coll, p.algo = unsupported[k].algo, p.root = 2;
    CHECK(!strata_schedule_algo_applies(p.coll, p.algo), "%s/%s said to apply", coll_names[p.coll],
          algo_names[p.algo]);
    int rc = strata_schedule_build(&p, &s);
    CHECK(rc == STRATA_ERR_UNSUPPORTED, "%s/%s gave %d, want UNSUPPORTED", coll_names[p.coll],
          algo_names[p.algo], rc);
  }
}

/* The AUTO table (schedule.c) at a few sizes on both sides of each threshold. */
static void test_auto_choice(void) {
  const struct {
    strata_coll coll;
    int n;
    uint64_t bytes;
    strata_algo want;
  } rows[] = {
      {STRATA_COLL_ALLREDUCE, 8, 1024, STRATA_ALGO_RHD},
      {STRATA_COLL_ALLREDUCE, 8, 256 << 10, STRATA_ALGO_RHD},
      {STRATA_COLL_ALLREDUCE, 8, 8 << 20, STRATA_ALGO_RING},
      {STRATA_COLL_ALLREDUCE, 6, 256 << 10, STRATA_ALGO_RING},
      {STRATA_COLL_ALLREDUCE, 6, 16 << 10, STRATA_ALGO_RHD},
      {STRATA_COLL_REDUCE_SCATTER, 4, 1024, STRATA_ALGO_DIRECT},
      {STRATA_COLL_REDUCE_SCATTER, 16, 1024, STRATA_ALGO_RHD},
      {STRATA_COLL_REDUCE_SCATTER, 4, 1 << 20, STRATA_ALGO_RING},
      {STRATA_COLL_ALLGATHER, 8, 1024, STRATA_ALGO_RHD},
      {STRATA_COLL_ALLGATHER, 8, 1 << 20, STRATA_ALGO_RING},
      {STRATA_COLL_BROADCAST, 8, 1024, STRATA_ALGO_TREE},
      {STRATA_COLL_BROADCAST, 8, 4 << 20, STRATA_ALGO_RING},
      {STRATA_COLL_REDUCE, 2, 4 << 20, STRATA_ALGO_TREE},
      {STRATA_COLL_REDUCE, 8, 4 << 20, STRATA_ALGO_RING},
      {STRATA_COLL_GATHER, 8, 1024, STRATA_ALGO_TREE},
      {STRATA_COLL_SCATTER, 8, 1 << 20, STRATA_ALGO_DIRECT},
      {STRATA_COLL_ALLTOALL, 8, 1024, STRATA_ALGO_DIRECT},
      {STRATA_COLL_BARRIER, 8, 0, STRATA_ALGO_RHD},
      {STRATA_COLL_SEND, 8, 1024, STRATA_ALGO_DIRECT},
  };
  for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
    strata_sched_params p = {
        rows[k].coll, STRATA_ALGO_AUTO, 0, rows[k].n, 1, rows[k].bytes / 4, 4, 0, 0, NULL};
    strata_algo got = strata_schedule_choose(&p);
    CHECK(got == rows[k].want, "AUTO %s n=%d %llu bytes: %s, want %s", coll_names[rows[k].coll],
          rows[k].n, (unsigned long long)rows[k].bytes, algo_names[got], algo_names[rows[k].want]);
  }
}

/* The executor itself must catch broken schedules. */
static void test_sim_catches(void) {
  strata_schedule s[2];
  char err[512];
  uint32_t a[4] = {0}, b[4] = {0};
  sched_sim_buffers sb[2] = {{(uint8_t *)a, 16, (uint8_t *)b, 16},
                             {(uint8_t *)a, 16, (uint8_t *)b, 16}};
  sched_sim_algebra alg = {4, symbolic_reduce, NULL};
  sched_sim_options opt = {0, 1};
  /* deadlock: both receive first, then send */
  memset(s, 0, sizeof s);
  for (int r = 0; r < 2; r++) {
    s[r].rank = r, s[r].nranks = 2;
    int got = strata_sched_recv(&s[r], 1 - r, strata_ref(STRATA_BUF_RECV, 0), 4, NULL, 0);
    uint32_t dep = (uint32_t)got;
    strata_sched_send(&s[r], 1 - r, strata_ref(STRATA_BUF_SEND, 0), 4, &dep, 1);
  }
  CHECK(sched_sim_run(s, 2, sb, &alg, &opt, err, sizeof err) && strstr(err, "deadlock"),
        "deadlock not caught: %s", err);
  for (int r = 0; r < 2; r++) strata_schedule_free(&s[r]);
  /* byte mismatch, out of bounds, unmatched, unordered overlap */
  memset(s, 0, sizeof s);
  s[0].nranks = s[1].nranks = 2, s[1].rank = 1;
  strata_sched_send(&s[0], 1, strata_ref(STRATA_BUF_SEND, 0), 8, NULL, 0);
  strata_sched_recv(&s[1], 0, strata_ref(STRATA_BUF_RECV, 0), 4, NULL, 0);
  CHECK(sched_sim_run(s, 2, sb, &alg, &opt, err, sizeof err) && strstr(err, "bytes"),
        "byte mismatch not caught: %s", err);
  s[1].steps[0].bytes = 8;
  s[1].steps[0].dst.offset = 12;
  CHECK(sched_sim_run(s, 2, sb, &alg, &opt, err, sizeof err) && strstr(err, "outside"),
        "out of bounds not caught: %s", err);
  s[1].steps[0].dst.offset = 0;
  strata_sched_send(&s[0], 1, strata_ref(STRATA_BUF_SEND, 0), 8, NULL, 0);
  CHECK(sched_sim_run(s, 2, sb, &alg, &opt, err, sizeof err) && strstr(err, "unmatched"),
        "unmatched not caught: %s", err);
  strata_sched_recv(&s[1], 0, strata_ref(STRATA_BUF_RECV, 4), 8, NULL, 0);
  CHECK(sched_sim_run(s, 2, sb, &alg, &opt, err, sizeof err) && strstr(err, "same bytes"),
        "overlap not caught: %s", err);
  for (int r = 0; r < 2; r++) strata_schedule_free(&s[r]);
  /* double counting */
  memset(s, 0, sizeof s);
  s[0].nranks = s[1].nranks = 2, s[1].rank = 1, s[1].scratch_bytes = 4;
  a[0] = 1, b[0] = 1;
  strata_sched_send(&s[0], 1, strata_ref(STRATA_BUF_SEND, 0), 4, NULL, 0);
  strata_sched_recv_reduce(&s[1], 0, strata_ref(STRATA_BUF_SEND, 0), strata_ref(STRATA_BUF_RECV, 0),
                           strata_ref(STRATA_BUF_SCRATCH, 0), 4, NULL, 0);
  CHECK(sched_sim_run(s, 2, sb, &alg, &opt, err, sizeof err) && strstr(err, "twice"),
        "double counting not caught: %s", err);
  for (int r = 0; r < 2; r++) strata_schedule_free(&s[r]);
}

/* ---- the signature check -----------------------------------------------------------------------
 * Ranks called with different roots (or counts) must all fail: some rank must receive a message
 * of another signature, and no rank may complete its schedule first. A small model of the
 * engine's matching (transport.h, engine.c): per directed link a FIFO of messages; each rank
 * posts its transfers to a peer in index order once their dependencies are done; a posted
 * receive takes the link's next message and fails (stays pending) on another signature or byte
 * count. Eager: a send completes when posted, as over a transport that buffers (the most a rank
 * can complete); otherwise when a receive takes it (rendezvous: the fewest messages move). The
 * final state does not depend on the order of events, so one sweep to a fixpoint decides. */
enum { SIG_MAX_RANKS = 8 };

typedef struct sig_message {
  int sig;
  uint64_t bytes;
  uint32_t sender_step;
} sig_message;

typedef struct sig_link {
  sig_message msgs[4096];
  uint32_t head, tail;
} sig_link;

typedef struct sig_world {
  int n, eager;
  const strata_schedule *s;
  const int *sig;
  uint8_t *done[SIG_MAX_RANKS];
  uint32_t send_cur[SIG_MAX_RANKS][SIG_MAX_RANKS], recv_cur[SIG_MAX_RANKS][SIG_MAX_RANKS];
  int stuck[SIG_MAX_RANKS][SIG_MAX_RANKS];
  sig_link *links; /* links[from * n + to] */
  int mismatches;
} sig_world;

static int sig_ready(const sig_world *w, int r, uint32_t i) {
  const strata_step *st = &w->s[r].steps[i];
  for (uint32_t k = 0; k < st->dep_count; k++)
    if (!w->done[r][w->s[r].deps[st->dep_begin + k]]) return 0;
  return 1;
}

/* The next transfer of `kind` between r and peer at or after *cursor (nsteps when none). */
static uint32_t sig_next(const sig_world *w, int r, int peer, int send, uint32_t *cursor) {
  const strata_schedule *s = &w->s[r];
  while (*cursor < s->nsteps) {
    const strata_step *st = &s->steps[*cursor];
    int is_send = st->kind == STRATA_STEP_SEND;
    int is_recv = st->kind == STRATA_STEP_RECV || st->kind == STRATA_STEP_RECV_REDUCE;
    if (st->peer == peer && (send ? is_send : is_recv)) break;
    (*cursor)++;
  }
  return *cursor;
}

static int sig_sweep(sig_world *w) {
  int moved = 0;
  for (int r = 0; r < w->n; r++) {
    const strata_schedule *s = &w->s[r];
    for (uint32_t i = 0; i < s->nsteps; i++)
      if (!w->done[r][i] && s->steps[i].kind >= STRATA_STEP_COPY && sig_ready(w, r, i))
        w->done[r][i] = 1, moved = 1;
    for (int q = 0; q < w->n; q++) {
      if (q == r) continue;
      uint32_t i;
      while ((i = sig_next(w, r, q, 1, &w->send_cur[r][q])) < s->nsteps && sig_ready(w, r, i)) {
        sig_link *l = &w->links[r * w->n + q];
        if (l->tail == sizeof l->msgs / sizeof l->msgs[0]) return -1;
        l->msgs[l->tail++] = (sig_message){w->sig[r], s->steps[i].bytes, i};
        if (w->eager) w->done[r][i] = 1;
        w->send_cur[r][q]++, moved = 1;
      }
      sig_link *in = &w->links[q * w->n + r];
      while (!w->stuck[r][q] && (i = sig_next(w, r, q, 0, &w->recv_cur[r][q])) < s->nsteps &&
             sig_ready(w, r, i) && in->head < in->tail) {
        const sig_message *m = &in->msgs[in->head++];
        moved = 1;
        if (m->sig != w->sig[r] || m->bytes != s->steps[i].bytes) {
          w->stuck[r][q] = 1, w->mismatches++;
          break;
        }
        w->done[r][i] = 1;
        if (!w->eager) w->done[q][m->sender_step] = 1;
        w->recv_cur[r][q]++;
      }
    }
  }
  return moved;
}

/* Runs the world to its fixpoint; returns how many ranks completed every step (-1: overflow). */
static int sig_run(const strata_schedule *s, const int *sig, int n, int eager, int *mismatches) {
  sig_world w;
  memset(&w, 0, sizeof w);
  w.n = n, w.eager = eager, w.s = s, w.sig = sig;
  w.links = calloc((size_t)n * (size_t)n, sizeof *w.links);
  for (int r = 0; r < n; r++) w.done[r] = calloc(s[r].nsteps + 1, 1);
  int moved;
  while ((moved = sig_sweep(&w)) > 0) {
  }
  int completed = 0;
  for (int r = 0; r < n; r++) {
    uint32_t i = 0;
    while (i < s[r].nsteps && w.done[r][i]) i++;
    completed += i == s[r].nsteps;
    free(w.done[r]);
  }
  free(w.links);
  *mismatches = w.mismatches;
  return moved < 0 ? -1 : completed;
}

static void signature_case(strata_coll c, strata_algo algo, int n, const int *roots,
                           const uint64_t *counts, const char *pattern) {
  strata_schedule sched[SIG_MAX_RANKS];
  int sig[SIG_MAX_RANKS], agree = 1, ok = 1;
  char what[160];
  snprintf(what, sizeof what, "signature check: %s/%s n=%d %s", coll_names[c], algo_names[algo], n,
           pattern);
  cases++;
  memset(sched, 0, sizeof sched);
  for (int r = 0; r < n; r++) {
    strata_sched_params p = {c, algo, r, n, roots[r], counts[r], 4, 0, 8, NULL};
    sig[r] = roots[r] * 1000003 + (int)counts[r];
    agree &= sig[r] == sig[0];
    ok &= strata_schedule_build(&p, &sched[r]) == STRATA_OK &&
          strata_schedule_add_signature_check(&p, &sched[r]) == STRATA_OK;
  }
  CHECK(ok, "%s: build failed", what);
  for (int r = 0; ok && r < n; r++) {
    /* round 0 first and free to go: nothing the mismatch blocks can hold it back */
    const strata_step *st = sched[r].steps;
    CHECK(sched[r].nsteps >= 2 && st[0].kind == STRATA_STEP_SEND && st[0].peer == (r + 1) % n &&
              st[0].bytes == 0 && st[0].dep_count == 0 && st[1].kind == STRATA_STEP_RECV &&
              st[1].peer == (r + n - 1) % n && st[1].bytes == 0 && st[1].dep_count == 0,
          "%s: rank %d does not start with the check's first round", what, r);
  }
  for (int eager = 0; ok && eager <= 1; eager++) {
    int mismatches = 0, completed = sig_run(sched, sig, n, eager, &mismatches);
    CHECK(completed >= 0, "%s: model overflow", what);
    if (agree)
      CHECK(completed == n && mismatches == 0, "%s (%s): %d ranks completed, %d mismatches", what,
            eager ? "eager" : "rendezvous", completed, mismatches);
    else if (eager)
      CHECK(completed == 0 && mismatches > 0, "%s (eager): %d ranks completed, %d mismatches", what,
            completed, mismatches);
    else
      CHECK(mismatches > 0, "%s (rendezvous): nobody noticed", what);
  }
  for (int r = 0; r < n; r++) strata_schedule_free(&sched[r]);
}

static void test_signature_check(void) {
  static const strata_coll colls[] = {STRATA_COLL_BROADCAST, STRATA_COLL_REDUCE, STRATA_COLL_GATHER,
                                      STRATA_COLL_SCATTER};
  uint64_t seed = 12345;
  for (int n = 2; n <= SIG_MAX_RANKS; n++)
    for (size_t k = 0; k < sizeof colls / sizeof colls[0]; k++) {
      int chained = colls[k] == STRATA_COLL_BROADCAST || colls[k] == STRATA_COLL_REDUCE;
      strata_algo algos[3] = {STRATA_ALGO_AUTO, STRATA_ALGO_TREE,
                              chained ? STRATA_ALGO_RING : STRATA_ALGO_DIRECT};
      for (int a = 0; a < 3; a++)
        for (uint64_t count = 1; count <= 41; count += 20) {
          int roots[SIG_MAX_RANKS];
          uint64_t counts[SIG_MAX_RANKS];
          for (int r = 0; r < n; r++) roots[r] = 0, counts[r] = count;
          signature_case(colls[k], algos[a], n, roots, counts, "same root");
          for (int r = 0; r < n; r++) roots[r] = r;
          signature_case(colls[k], algos[a], n, roots, counts, "each its own root");
          for (int r = 0; r < n; r++) roots[r] = (r + 1) % n;
          signature_case(colls[k], algos[a], n, roots, counts, "each the next root");
          for (int odd = 0; odd < n; odd++) {
            for (int r = 0; r < n; r++) roots[r] = r == odd ? (odd + 1) % n : 0;
            signature_case(colls[k], algos[a], n, roots, counts, "one other root");
            for (int r = 0; r < n; r++) roots[r] = 0, counts[r] = count + (r == odd);
            signature_case(colls[k], algos[a], n, roots, counts, "one other count");
            for (int r = 0; r < n; r++) counts[r] = count;
          }
          for (int trial = 0; trial < 4; trial++) {
            for (int r = 0; r < n; r++) {
              seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
              roots[r] = (int)((seed >> 33) % (uint64_t)n);
            }
            signature_case(colls[k], algos[a], n, roots, counts, "random roots");
          }
        }
    }
}

int main(void) {
  alarm(120);
  test_bad_params();
  test_auto_choice();
  test_sim_catches();
  test_sendrecv();
  test_real_f64_allreduce();
  test_real_i32();
  test_symbolic_all();
  test_symbolic_large_allreduce();
  test_signature_check();
  if (failures) {
    fprintf(stderr, "%d failure(s) in %d symbolic cases\n", failures, cases);
    return 1;
  }
  printf("ok: %d symbolic cases\n", cases);
  return 0;
}
