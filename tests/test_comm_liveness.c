// SPDX-License-Identifier: Apache-2.0
/*
 * test_comm_liveness.c — late is not dead. Liveness comes from heartbeats, not from progress:
 *  - a rank that arrives at a collective several STRATA_TIMEOUTs late (a checkpoint, an
 *    evaluation) is waited for, whether it was late while idle or at the first call;
 *  - a frozen rank (SIGSTOP: its connections stay open, nothing more comes) makes the others fail
 *    with STRATA_ERR_TIMEOUT within about STRATA_TIMEOUT, and once thawed it finds its
 *    communicator failed too;
 *  - STRATA_OP_TIMEOUT bounds how long a live rank may be late;
 *  - a rank that dies between collectives is noticed while the survivors are idle.
 * Over shared memory and over TCP.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "helpers/ranks.h"

static const double TIMEOUT_S = 1.5; /* short for the test, long enough for a loaded machine */

/* An allreduce of `count` ranks' (rank + 1) values, checked. Returns its status, or -1000 when it
 * returned OK with a wrong sum. */
static int checked_allreduce(strata_comm *comm, int rank, int n) {
  float v[256];
  for (int i = 0; i < 256; i++) v[i] = (float)(rank + 1) * (float)(i + 1);
  int status = strata_allreduce(comm, v, v, 256, STRATA_F32, STRATA_SUM);
  if (status != STRATA_OK) return status;
  float ranks_sum = (float)(n * (n + 1) / 2);
  for (int i = 0; i < 256; i++)
    if (v[i] != ranks_sum * (float)(i + 1)) return -1000;
  return STRATA_OK;
}

/* ---- late ---- */
static int late_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  /* late at the first call, then late while idle between calls */
  for (int round = 0; round < 2; round++) {
    if (rank == n - 1) strata_test_sleep_s(2.5 * TIMEOUT_S);
    double t0 = strata_test_now_s();
    int status = checked_allreduce(comm, rank, n);
    if (status != STRATA_OK) {
      fprintf(stderr, "rank %d: round %d: %s after %.2f s waiting for a late rank\n", rank, round,
              status == -1000 ? "wrong sum" : strata_err_name(status), strata_test_now_s() - t0);
      return 1;
    }
  }
  return 0;
}

/* ---- frozen ---- */
static int frozen_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  int64_t pids[16] = {0}, mine = (int64_t)getpid();
  if (strata_allgather(comm, &mine, pids, 1, STRATA_I64) != STRATA_OK) return 1;
  if (checked_allreduce(comm, rank, n) != STRATA_OK) return 1;
  int frozen = n - 1;
  if (rank == frozen) {
    raise(SIGSTOP); /* rank 0 thaws us once the others have given up */
    /* the others failed the communicator while we were stopped */
    int status = checked_allreduce(comm, rank, n);
    if (status == STRATA_OK || status == -1000) {
      fprintf(stderr, "rank %d: thawed, an allreduce still returned %s\n", rank,
              status == STRATA_OK ? "OK" : "a wrong sum");
      return 1;
    }
    return 0;
  }
  double t0 = strata_test_now_s();
  int status = checked_allreduce(comm, rank, n);
  double waited = strata_test_now_s() - t0;
  if (rank == 0) kill((pid_t)pids[frozen], SIGCONT);
  printf("  rank %d: %s after %.2f s (frozen rank %d, STRATA_TIMEOUT %.1f s)\n", rank,
         status == -1000 ? "wrong sum" : strata_err_name(status), waited, frozen, TIMEOUT_S);
  /* the silence must be noticed after about the timeout: not before it, not long after */
  if (status != STRATA_ERR_TIMEOUT && status != STRATA_ERR_ABORTED) return 1;
  if (waited < 0.5 * TIMEOUT_S || waited > TIMEOUT_S + 2.0) return 1;
  return 0;
}

/* ---- STRATA_OP_TIMEOUT ---- */
static const double OP_TIMEOUT_S = 1.5;

static void op_timeout_tweak(strata_config *cfg, int rank, void *arg) {
  (void)rank, (void)arg;
  cfg->op_timeout_s = OP_TIMEOUT_S;
}

static int op_timeout_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  if (checked_allreduce(comm, rank, n) != STRATA_OK) return 1;
  int late = n - 1;
  if (rank == late) strata_test_sleep_s(OP_TIMEOUT_S + 2.5);
  double t0 = strata_test_now_s();
  int status = checked_allreduce(comm, rank, n);
  double waited = strata_test_now_s() - t0;
  if (rank == late) return status == STRATA_OK || status == -1000; /* the others gave up */
  printf("  rank %d: %s after %.2f s (STRATA_OP_TIMEOUT %.1f s)\n", rank,
         status == -1000 ? "wrong sum" : strata_err_name(status), waited, OP_TIMEOUT_S);
  if (status != STRATA_ERR_TIMEOUT && status != STRATA_ERR_ABORTED) return 1;
  return waited < OP_TIMEOUT_S - 0.2 || waited > OP_TIMEOUT_S + 2.0;
}

/* ---- dead while idle ---- */
static int idle_death_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  if (checked_allreduce(comm, rank, n) != STRATA_OK) return 1;
  /* every rank has finished the allreduce before one dies: a death fails whatever is in flight */
  int all_done = 1;
  if (strata_comm_agree(comm, &all_done) != STRATA_OK || !all_done) return 1;
  if (rank == n - 1) _exit(0); /* no destroy: the others must not take it for an orderly leave */
  /* idle for longer than the timeout: the loss is found meanwhile, not at the next call */
  double deadline = strata_test_now_s() + TIMEOUT_S + 3.0;
  while (strata_comm_error(comm) == STRATA_OK && strata_test_now_s() < deadline)
    strata_test_sleep_s(0.01);
  int error = strata_comm_error(comm);
  if (error == STRATA_OK) {
    fprintf(stderr, "rank %d: a dead peer went unnoticed while idle\n", rank);
    return 1;
  }
  double t0 = strata_test_now_s();
  int status = checked_allreduce(comm, rank, n);
  if (status == STRATA_OK || status == -1000 || strata_test_now_s() - t0 > 0.5) {
    fprintf(stderr, "rank %d: after the loss an allreduce returned %s in %.2f s\n", rank,
            strata_err_name(status), strata_test_now_s() - t0);
    return 1;
  }
  return 0;
}

int main(void) {
  int failures = 0;
  for (int shm = 1; shm >= 0; shm--) {
    const char *via = shm ? "shm" : "tcp";
    for (int n = 2; n <= 3; n++) {
      strata_test_ranks_opts o = {.shm = shm, .timeout_s = TIMEOUT_S, .deadline_s = 60};
      int bad = strata_test_run_ranks(n, &o, frozen_body, NULL);
      printf("%s frozen rank, %d ranks (%s): %d failed\n", bad ? "FAIL" : "ok", n, via, bad);
      failures += bad != 0;

      bad = strata_test_run_ranks(n, &o, idle_death_body, NULL);
      printf("%s rank dead while idle, %d ranks (%s): %d failed\n", bad ? "FAIL" : "ok", n, via,
             bad);
      failures += bad != 0;
    }
    /* the slow cases (ranks sleep for seconds) at 3 ranks only */
    strata_test_ranks_opts o = {.shm = shm, .timeout_s = TIMEOUT_S, .deadline_s = 60};
    int bad = strata_test_run_ranks(3, &o, late_body, NULL);
    printf("%s late rank, 3 ranks (%s): %d failed\n", bad ? "FAIL" : "ok", via, bad);
    failures += bad != 0;

    strata_test_ranks_opts ot = o;
    ot.timeout_s = 10; /* liveness is not what fails here */
    ot.tweak = op_timeout_tweak;
    bad = strata_test_run_ranks(3, &ot, op_timeout_body, NULL);
    printf("%s STRATA_OP_TIMEOUT, 3 ranks (%s): %d failed\n", bad ? "FAIL" : "ok", via, bad);
    failures += bad != 0;
  }
  printf("%d failed\n", failures);
  return failures != 0;
}
