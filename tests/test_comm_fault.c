// SPDX-License-Identifier: Apache-2.0
/*
 * test_comm_fault.c — never wrong, never stuck: a rank killed in the middle of an allreduce makes
 * every other rank return an error within the timeout; ranks that call different collectives,
 * counts, types or ops all get STRATA_ERR_MISMATCH; a wrong secret or protocol version is
 * refused at init with the code that says which.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers/ranks.h"
#include "net/tcp.h"

static const double TIMEOUT_S = 4;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- a rank dies mid-allreduce ---- */
static int kill_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)n, (void)arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  size_t count = 4u << 20; /* 16 MiB of f32 */
  float *buf = calloc(count, sizeof(float));
  for (int iter = 0; iter < 1000; iter++) {
    if (rank == 2 && iter == 2) {
      strata_request *req;
      strata_iallreduce(comm, buf, buf, count, STRATA_F32, STRATA_SUM, &req);
      usleep(2000);
      kill(getpid(), SIGKILL);
    }
    double t0 = now_s();
    int status = strata_allreduce(comm, buf, buf, count, STRATA_F32, STRATA_SUM);
    double waited = now_s() - t0;
    if (status != STRATA_OK) {
      int ok = status == STRATA_ERR_PEER_LOST || status == STRATA_ERR_TIMEOUT ||
               status == STRATA_ERR_ABORTED;
      printf("  rank %d: %s after %.2f s\n", rank, strata_err_name(status), waited);
      free(buf);
      if (!ok) return 1;
      if (waited > TIMEOUT_S + 2) return 1;
      /* the communicator stays failed */
      return strata_barrier(comm) == STRATA_OK;
    }
  }
  free(buf);
  fprintf(stderr, "rank %d: never noticed the dead rank\n", rank);
  return 1;
}

/* ---- mismatches ---- */
/* Different roots are tested in test_comm_lifecycle.c. */
typedef enum {
  MISMATCH_COUNT,
  MISMATCH_COLL,
  MISMATCH_DTYPE,
  MISMATCH_OP,
  MISMATCH_ALGO,
  MISMATCH_CASES
} mismatch_kind;
static const char *mismatch_names[] = {"count", "collective", "dtype", "op", "algorithm"};

static int mismatch_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)n;
  mismatch_kind kind = *(mismatch_kind *)arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  enum { COUNT = 1 << 16 };
  double *send = calloc(2 * COUNT, sizeof(double)), *recv = calloc(2 * COUNT, sizeof(double));
  /* one good call first: the mismatch is in the second */
  int status = strata_allreduce(comm, send, recv, COUNT, STRATA_F32, STRATA_SUM);
  if (status != STRATA_OK) {
    fprintf(stderr, "rank %d: first allreduce failed: %s\n", rank, strata_err_name(status));
    return 1;
  }
  int odd = rank == 1;
  strata_coll_args a = {.coll = STRATA_COLL_ALLREDUCE,
                        .sendbuf = send,
                        .recvbuf = recv,
                        .count = COUNT,
                        .dtype = STRATA_F32,
                        .op = STRATA_SUM,
                        .root = 0};
  if (odd) switch (kind) {
      case MISMATCH_COUNT:
        a.count = COUNT + 1;
        break;
      case MISMATCH_COLL:
        a.coll = STRATA_COLL_BROADCAST;
        break;
      case MISMATCH_DTYPE:
        a.dtype = STRATA_I32;
        break;
      case MISMATCH_OP:
        a.op = STRATA_MAX;
        break;
      case MISMATCH_ALGO:
        a.algo = STRATA_ALGO_TREE;
        break;
      default:
        break;
    }
  if (kind == MISMATCH_ALGO && !odd) a.algo = STRATA_ALGO_RING;
  double t0 = now_s();
  status = strata_collective(comm, &a, NULL);
  double waited = now_s() - t0;
  free(send);
  free(recv);
  printf("  %s mismatch, rank %d: %s after %.2f s\n", mismatch_names[kind], rank,
         strata_err_name(status), waited);
  return status != STRATA_ERR_MISMATCH;
}

/* ---- refused peers ---- */
typedef enum { REFUSE_SECRET, REFUSE_VERSION } refuse_kind;

static void refuse_tweak(strata_config *cfg, int rank, void *arg) {
  refuse_kind kind = *(refuse_kind *)arg;
  if (rank != 1) return;
  if (kind == REFUSE_SECRET) snprintf(cfg->secret, sizeof cfg->secret, "not-the-secret");
  if (kind == REFUSE_VERSION) strata_tcp_set_announced_version_for_test(99);
}

static int refuse_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)n;
  refuse_kind kind = *(refuse_kind *)arg;
  /* a wrong secret is refused by the store itself; its peer, which never hears of that stranger,
   * waits for the rank that never arrives */
  int want = kind == REFUSE_VERSION ? STRATA_ERR_VERSION
             : rank == 1            ? STRATA_ERR_AUTH
                                    : STRATA_ERR_TIMEOUT;
  printf("  %s: rank %d init -> %s\n", kind == REFUSE_SECRET ? "wrong secret" : "wrong version",
         rank, strata_err_name(init_status));
  return comm != NULL || init_status != want;
}

int main(void) {
  int failed = 0;
  for (int shm = 1; shm >= 0; shm--) {
    printf("kill a rank mid-allreduce (%s):\n", shm ? "shm" : "tcp");
    fflush(stdout);
    strata_test_ranks_opts o = {.shm = shm, .timeout_s = TIMEOUT_S, .deadline_s = 60};
    int bad = strata_test_run_ranks(4, &o, kill_body, NULL);
    /* exactly the killed rank fails */
    if (bad != 1) {
      printf("FAILED: %d ranks failed, expected only the killed one\n", bad);
      failed++;
    }
  }
  for (int shm = 1; shm >= 0; shm--)
    for (int k = 0; k < MISMATCH_CASES; k++) {
      mismatch_kind kind = (mismatch_kind)k;
      strata_test_ranks_opts o = {.shm = shm, .timeout_s = 10, .deadline_s = 30};
      fflush(stdout);
      int bad = strata_test_run_ranks(3, &o, mismatch_body, &kind);
      if (bad) {
        printf("FAILED: %s mismatch over %s: %d ranks did not get STRATA_ERR_MISMATCH\n",
               mismatch_names[k], shm ? "shm" : "tcp", bad);
        failed++;
      }
    }
  for (int k = 0; k < 2; k++) {
    refuse_kind kind = (refuse_kind)k;
    strata_test_ranks_opts o = {.shm = 1, .timeout_s = 3, .deadline_s = 30, .tweak = refuse_tweak};
    fflush(stdout);
    int bad = strata_test_run_ranks(2, &o, refuse_body, &kind);
    if (bad) {
      printf("FAILED: refusal case %d: %d ranks\n", k, bad);
      failed++;
    }
  }
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
