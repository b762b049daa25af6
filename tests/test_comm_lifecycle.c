// SPDX-License-Identifier: Apache-2.0
/*
 * test_comm_lifecycle.c — what a user meets at the edges of a communicator's life:
 *  - rooted collectives (broadcast, reduce, gather, scatter) called with different roots on
 *    different ranks make every rank return STRATA_ERR_MISMATCH promptly, over shared memory and
 *    TCP, at 2 and 3 ranks, whatever the algorithm and whoever takes which rank for the root;
 *    the same calls with the same roots still deliver the right data;
 *  - strata_comm_destroy with requests still pending returns without waiting for a peer that
 *    never joins them; the requests stay valid and complete afterwards with STRATA_ERR_ABORTED
 *    (a request that had finished keeps its status). The sanitizer builds run this too, so a
 *    handle pointing into freed memory fails here.
 *
 * The communicators' timeout is long (60 s) and every case must end within a few seconds: a
 * timeout can never pass for a mismatch, nor a destroy that waited for one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers/check.h"
#include "helpers/net_fixture.h"
#include "helpers/ranks.h"

static const double LONG_TIMEOUT_S = 60;
static const double PROMPT_S = 5; /* the abort's flush is 0.2 s; the rest is scheduling */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static strata_test_ranks_opts long_timeout(int shm) {
  strata_test_ranks_opts o = {.shm = shm, .timeout_s = LONG_TIMEOUT_S, .deadline_s = 40};
  return o;
}

/* ---- rooted collectives --------------------------------------------------------------------- */

enum { COUNT = 4096 };

typedef enum {
  ROOTS_OWN,      /* rank r takes itself for the root: a broadcast's ranks all only send */
  ROOTS_NEXT,     /* rank r takes r + 1: a broadcast's ranks all only receive */
  ROOTS_ONE_DIFF, /* the last rank alone names another root */
  ROOTS_SAME      /* every rank names the same root: no mismatch */
} roots_kind;
static const char *roots_names[] = {"own", "next", "one differs", "same"};

typedef struct rooted_case {
  strata_coll coll;
  strata_algo algo;
  roots_kind roots;
  int nonblocking;
} rooted_case;

static int root_of(roots_kind kind, int rank, int n) {
  switch (kind) {
    case ROOTS_OWN:
      return rank;
    case ROOTS_NEXT:
      return (rank + 1) % n;
    case ROOTS_ONE_DIFF:
      return rank == n - 1 ? 1 : 0;
    default:
      return n - 1;
  }
}

/* Buffers large enough for any rooted collective at n ranks, send filled with rank-tagged
 * values. */
typedef struct rooted_bufs {
  float *send, *recv;
} rooted_bufs;

static int bufs_make(rooted_bufs *b, int rank, int n) {
  b->send = malloc(sizeof(float) * COUNT * (size_t)n);
  b->recv = malloc(sizeof(float) * COUNT * (size_t)n);
  if (!b->send || !b->recv) return -1;
  for (size_t i = 0; i < (size_t)COUNT * (size_t)n; i++) {
    b->send[i] = (float)(rank * 100000 + (int)(i % 50000));
    b->recv[i] = -1;
  }
  return 0;
}

static void bufs_free(rooted_bufs *b) {
  free(b->send);
  free(b->recv);
}

static int rooted_call(strata_comm *comm, const rooted_case *c, rooted_bufs *b, int root) {
  strata_coll_args a = {.coll = c->coll,
                        .sendbuf = b->send,
                        .recvbuf = b->recv,
                        .count = COUNT,
                        .dtype = STRATA_F32,
                        .op = STRATA_SUM,
                        .root = root,
                        .algo = c->algo};
  if (!c->nonblocking) return strata_collective(comm, &a, NULL);
  strata_request *req = NULL;
  int status = strata_collective(comm, &a, &req);
  return status == STRATA_OK ? strata_request_wait(req) : status;
}

/* The value element i of the receive buffer must hold after the call, or NAN where this rank
 * receives nothing. */
static float rooted_expected(strata_coll coll, int rank, int n, int root, size_t i) {
  switch (coll) {
    case STRATA_COLL_BROADCAST:
      return i < COUNT ? (float)(root * 100000 + (int)i) : NAN;
    case STRATA_COLL_REDUCE: {
      if (rank != root || i >= COUNT) return NAN;
      float sum = 0;
      for (int r = 0; r < n; r++) sum += (float)(r * 100000 + (int)i);
      return sum;
    }
    case STRATA_COLL_GATHER:
      return rank == root ? (float)((int)(i / COUNT) * 100000 + (int)(i % COUNT)) : NAN;
    case STRATA_COLL_SCATTER:
      return i < COUNT ? (float)(root * 100000 + (int)((size_t)rank * COUNT + i)) : NAN;
    default:
      return NAN;
  }
}

static int check_rooted_result(const rooted_case *c, const rooted_bufs *b, int rank, int n,
                               int root) {
  for (size_t i = 0; i < (size_t)COUNT * (size_t)n; i++) {
    float want = rooted_expected(c->coll, rank, n, root, i);
    if (want != want) continue;
    CHECK_OR_RETURN(b->recv[i] == want, "rank %d: %s root %d: recv[%zu] = %g, want %g", rank,
                    strata_coll_name(c->coll), root, i, (double)b->recv[i], (double)want);
  }
  return 0;
}

/* One good call with root 0 everywhere, then the case's call: with different roots every rank
 * must return STRATA_ERR_MISMATCH within PROMPT_S; with the same root, the right data. */
static int rooted_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  const rooted_case *c = arg;
  CHECK_OR_RETURN(comm, "rank %d: init: %s", rank, strata_err_name(init_status));
  rooted_bufs b;
  CHECK_OR_RETURN(bufs_make(&b, rank, n) == 0, "rank %d: out of memory", rank);
  int status = rooted_call(comm, c, &b, 0);
  int bad = check_rooted_result(c, &b, rank, n, 0);
  CHECK(status == STRATA_OK, "rank %d: first %s (root 0): %s", rank, strata_coll_name(c->coll),
        strata_err_name(status));
  int root = root_of(c->roots, rank, n);
  double t0 = now_s();
  status = rooted_call(comm, c, &b, root);
  double waited = now_s() - t0;
  if (c->roots == ROOTS_SAME) {
    CHECK(status == STRATA_OK, "rank %d: %s root %d: %s", rank, strata_coll_name(c->coll), root,
          strata_err_name(status));
    if (status == STRATA_OK) bad |= check_rooted_result(c, &b, rank, n, root);
  } else {
    CHECK(status == STRATA_ERR_MISMATCH && waited < PROMPT_S,
          "rank %d: %s %s with root %d (roots: %s): %s after %.2f s, want STRATA_ERR_MISMATCH "
          "within %.0f s",
          rank, strata_algo_name(c->algo), strata_coll_name(c->coll), root, roots_names[c->roots],
          strata_err_name(status), waited, PROMPT_S);
    /* the communicator stays failed */
    int again = strata_barrier(comm);
    CHECK(again == STRATA_ERR_MISMATCH, "rank %d: barrier after the mismatch: %s", rank,
          strata_err_name(again));
  }
  bufs_free(&b);
  return failures != 0 || bad;
}

static int run_rooted(int n, int shm, const rooted_case *c) {
  strata_test_ranks_opts o = long_timeout(shm);
  fflush(stdout);
  int bad = strata_test_run_ranks(n, &o, rooted_body, (void *)c);
  if (bad)
    printf("FAILED: %s %s%s, %d ranks over %s, roots %s: %d ranks failed\n",
           strata_coll_name(c->coll), strata_algo_name(c->algo), c->nonblocking ? " (request)" : "",
           n, shm ? "shm" : "tcp", roots_names[c->roots], bad);
  return bad != 0;
}

/* Every rooted collective with each of its algorithms, every way of disagreeing on the root. */
static int test_rooted(void) {
  static const strata_coll colls[] = {STRATA_COLL_BROADCAST, STRATA_COLL_REDUCE, STRATA_COLL_GATHER,
                                      STRATA_COLL_SCATTER};
  int failed = 0;
  for (int shm = 1; shm >= 0; shm--)
    for (int n = 2; n <= 3; n++) {
      printf("rooted collectives, %d ranks over %s\n", n, shm ? "shm" : "tcp");
      for (size_t k = 0; k < sizeof colls / sizeof colls[0]; k++) {
        strata_coll coll = colls[k];
        int chained = coll == STRATA_COLL_BROADCAST || coll == STRATA_COLL_REDUCE;
        strata_algo algos[2] = {STRATA_ALGO_TREE, chained ? STRATA_ALGO_RING : STRATA_ALGO_DIRECT};
        for (int a = 0; a < 2; a++)
          for (int roots = ROOTS_OWN; roots <= ROOTS_SAME; roots++) {
            if (roots == ROOTS_ONE_DIFF && n == 2) continue; /* that is ROOTS_OWN at 2 */
            /* the request form once per collective: it waits where the blocking call does */
            rooted_case c = {coll, algos[a], (roots_kind)roots, a == 1 && roots == ROOTS_NEXT};
            failed += run_rooted(n, shm, &c);
          }
      }
    }
  return failed;
}

/* ---- destroy with requests pending ----------------------------------------------------------- */

/* Rank 0 destroys its communicator with requests pending on a rank that never joins them (the
 * last rank); at 3 ranks rank 1 joins the allreduce and must hear of the abort. Rank 0 tells the
 * others through this pipe that its destroy returned: until then they stay alive, so that rank
 * 0's requests cannot fail with STRATA_ERR_PEER_LOST before destroy runs. */
static int destroyed_pipe[2];

typedef struct destroy_case {
  int shm;
} destroy_case;

enum { ALLREDUCE_COUNT = 1 << 16 };

static int destroy_rank0(strata_comm *comm, int n) {
  float *data = calloc(ALLREDUCE_COUNT, sizeof(float));
  float *sum = calloc(ALLREDUCE_COUNT, sizeof(float));
  char byte = 7, got = 0;
  CHECK_OR_RETURN(data && sum, "out of memory");
  /* one request that finishes before destroy: its status survives */
  strata_request *sent = NULL, *received = NULL, *reduced = NULL;
  CHECK_STATUS(strata_isend(comm, &byte, 1, STRATA_I8, 1, &sent), STRATA_OK);
  CHECK_STATUS(strata_barrier(comm), STRATA_OK); /* rank 1 received it, so it was sent */
  /* two that cannot finish: the last rank never sends, never joins the allreduce */
  CHECK_STATUS(strata_irecv(comm, &got, 1, STRATA_I8, n - 1, &received), STRATA_OK);
  CHECK_STATUS(
      strata_iallreduce(comm, data, sum, ALLREDUCE_COUNT, STRATA_F32, STRATA_SUM, &reduced),
      STRATA_OK);
  CHECK_OR_RETURN(sent && received && reduced, "requests not made");
  CHECK_STATUS(strata_request_test(received), STRATA_ERR_IN_PROGRESS);
  double t0 = now_s();
  int status = strata_comm_destroy(comm);
  double took = now_s() - t0;
  CHECK(status == STRATA_OK && took < PROMPT_S, "destroy: %s after %.2f s", strata_err_name(status),
        took);
  printf("  rank 0: destroy with 2 requests pending: %s after %.2f s\n", strata_err_name(status),
         took);
  for (int r = 1; r < n; r++)
    if (write(destroyed_pipe[1], "x", 1) != 1) CHECK(0, "cannot tell rank %d", r);
  /* the handles are still valid: test and wait report how each ended, and free them */
  CHECK_STATUS(strata_request_test(received), STRATA_ERR_ABORTED);
  CHECK_STATUS(strata_request_wait(reduced), STRATA_ERR_ABORTED);
  CHECK_STATUS(strata_request_wait(sent), STRATA_OK);
  free(data);
  free(sum);
  return failures != 0;
}

/* A rank that joined the allreduce with rank 0: the abort rank 0's destroy sends ends it. */
static int destroy_joiner(strata_comm *comm, int rank) {
  float *data = calloc(ALLREDUCE_COUNT, sizeof(float));
  float *sum = calloc(ALLREDUCE_COUNT, sizeof(float));
  CHECK_OR_RETURN(data && sum, "out of memory");
  double t0 = now_s();
  int status = strata_allreduce(comm, data, sum, ALLREDUCE_COUNT, STRATA_F32, STRATA_SUM);
  double waited = now_s() - t0;
  CHECK(status != STRATA_OK && waited < PROMPT_S,
        "rank %d: allreduce abandoned by rank 0's destroy: %s after %.2f s", rank,
        strata_err_name(status), waited);
  printf("  rank %d: its allreduce, abandoned by rank 0's destroy: %s after %.2f s\n", rank,
         strata_err_name(status), waited);
  char token;
  CHECK(read(destroyed_pipe[0], &token, 1) == 1, "rank 0 never said it destroyed");
  free(data);
  free(sum);
  return failures != 0;
}

/* The rank that never joins: once rank 0 is gone, its next call fails promptly. */
static int destroy_absent(strata_comm *comm, int rank) {
  char token;
  CHECK_OR_RETURN(read(destroyed_pipe[0], &token, 1) == 1, "rank 0 never said it destroyed");
  double t0 = now_s();
  int status = strata_barrier(comm);
  double waited = now_s() - t0;
  CHECK(status != STRATA_OK && waited < PROMPT_S,
        "rank %d: barrier after rank 0's destroy: %s after %.2f s", rank, strata_err_name(status),
        waited);
  printf("  rank %d: a call after rank 0's destroy: %s after %.2f s\n", rank,
         strata_err_name(status), waited);
  return failures != 0;
}

/* ranks.c destroys the communicator after the body; rank 0 destroys its own here, so the ranks
 * run on the fixture directly. */
static int destroy_child(const strata_net_fixture_rank *r) {
  const destroy_case *c = r->arg;
  strata_config cfg;
  strata_net_fixture_config(r, r->nprocs, &cfg);
  cfg.shm_enabled = c->shm;
  cfg.timeout_s = LONG_TIMEOUT_S;
  strata_comm *comm = NULL;
  int status = strata_comm_init(&cfg, &comm);
  CHECK_OR_RETURN(status == STRATA_OK, "rank %d: init: %s", r->rank, strata_err_name(status));
  int n = r->nprocs;
  if (r->rank == 0) return destroy_rank0(comm, n);
  if (r->rank == 1) {
    char byte = 0;
    CHECK_STATUS(strata_recv(comm, &byte, 1, STRATA_I8, 0), STRATA_OK);
    CHECK(byte == 7, "received %d", byte);
  }
  CHECK_STATUS(strata_barrier(comm), STRATA_OK);
  int bad = r->rank < n - 1 ? destroy_joiner(comm, r->rank) : destroy_absent(comm, r->rank);
  strata_comm_destroy(comm);
  return bad;
}

static int test_destroy_pending(void) {
  int failed = 0;
  for (int shm = 1; shm >= 0; shm--)
    for (int n = 2; n <= 3; n++) {
      printf("destroy with requests pending, %d ranks over %s\n", n, shm ? "shm" : "tcp");
      destroy_case c = {shm};
      if (pipe(destroyed_pipe) != 0) return failed + 1;
      fflush(stdout);
      int bad = strata_net_fixture_run(n, destroy_child, &c, 40, NULL);
      close(destroyed_pipe[0]);
      close(destroyed_pipe[1]);
      if (bad) {
        printf("FAILED: destroy with requests pending, %d ranks over %s: %d ranks failed\n", n,
               shm ? "shm" : "tcp", bad);
        failed++;
      }
    }
  return failed;
}

/* A communicator of one rank: every operation finishes at once, so its request survives destroy
 * with STRATA_OK and the result in place. */
static int test_destroy_single(void) {
  strata_config cfg;
  strata_config_init(&cfg);
  cfg.rank = 0, cfg.world_size = 1;
  strata_comm *comm = NULL;
  CHECK_STATUS(strata_comm_init(&cfg, &comm), STRATA_OK);
  if (!comm) return 1;
  float x[4] = {1, 2, 3, 4};
  strata_request *req = NULL;
  CHECK_STATUS(strata_iallreduce(comm, x, x, 4, STRATA_F32, STRATA_SUM, &req), STRATA_OK);
  CHECK_STATUS(strata_comm_destroy(comm), STRATA_OK);
  CHECK_STATUS(strata_request_wait(req), STRATA_OK);
  CHECK(x[0] == 1 && x[3] == 4, "one rank's allreduce changed the data");
  return failures != 0;
}

int main(void) {
  int failed = test_rooted();
  failed += test_destroy_pending();
  failed += test_destroy_single();
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
