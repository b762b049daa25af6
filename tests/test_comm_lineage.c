// SPDX-License-Identifier: Apache-2.0
/*
 * test_comm_lineage.c — a retry after a shrink never sums two different steps.
 *
 * Three ranks run in-place allreduces of step-dependent inputs (STRATA_ELASTIC). At step 1 the
 * call finishes on ranks 0 and 2 but fails on rank 1 (a test hook: its last bytes "lost" with
 * rank 2, which then dies, as a rank dies just as a call finishes on some ranks only).
 *  - naive retry (no agree): rank 0 goes on to step 2, fails, shrinks and retries step 2; rank 1
 *    shrinks and retries step 1. Their collectives carry different indices in the communicator's
 *    lineage, so both get STRATA_ERR_MISMATCH (before, each got the sum of step 2's input and
 *    step 1's, as a success);
 *  - the documented loop (agree after each step, undo after the shrink): both retry step 1 and
 *    get its exact sum over the survivors.
 * And a broadcast whose ranks name different roots fails on both, and a rank that saw the other's
 * message (the other may learn of the failure from its abort first) logs both roots.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/engine.h"
#include "helpers/check.h"
#include "helpers/ranks.h"

enum { COUNT = 1024, VICTIM = 2 };

static float input_of(int step, int rank) {
  return (float)((step + 1) * 100 + rank + 1);
}

static void fill(float *buf, int step, int rank) {
  for (int i = 0; i < COUNT; i++) buf[i] = input_of(step, rank);
}

/* The sum over ranks 0 and 1 of `step`, or -1 when buf holds anything else. */
static int sum_step(const float *buf) {
  for (int step = 0; step < 4; step++) {
    float want = input_of(step, 0) + input_of(step, 1);
    int all = 1;
    for (int i = 0; i < COUNT && all; i++) all = buf[i] == want;
    if (all) return step;
  }
  return -1;
}

/* A page the ranks share (mapped before they fork): rank 0 has finished step 1. The victim dies
 * only after that, so that rank 0 is one step ahead of rank 1 whatever the scheduling. */
static int *step1_done;

static void tweak(strata_config *cfg, int rank, void *arg) {
  (void)rank, (void)arg;
  cfg->elastic = 1;
  cfg->timeout_s = 3;
}

/* Steps 0 and 1 on all three; at step 1 rank 1 is told its call failed and rank 2 dies. Returns
 * the status of rank 1's step 1 (the others': STRATA_OK) or -1 on an unexpected failure. */
static int first_steps(strata_comm *comm, int rank, float *buf) {
  fill(buf, 0, rank);
  if (strata_allreduce(comm, buf, buf, COUNT, STRATA_F32, STRATA_SUM) != STRATA_OK) return -1;
  fill(buf, 1, rank);
  if (rank == 1) strata_engine_test_fail_next(comm, STRATA_ERR_PEER_LOST);
  int status = strata_allreduce(comm, buf, buf, COUNT, STRATA_F32, STRATA_SUM);
  if (rank == 0 && status == STRATA_OK) __atomic_store_n(step1_done, 1, __ATOMIC_RELEASE);
  if (rank == VICTIM) {
    for (int waited_ms = 0; waited_ms < 10000 && !__atomic_load_n(step1_done, __ATOMIC_ACQUIRE);
         waited_ms++)
      usleep(1000);
    _exit(0);
  }
  return status;
}

static int naive_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)n, (void)arg;
  if (!comm) return printf("  rank %d: init %s\n", rank, strata_err_name(init_status)), 1;
  float *buf = malloc(COUNT * sizeof *buf);
  int status = first_steps(comm, rank, buf);
  int step = status == STRATA_OK ? 2 : 1;
  if (status == STRATA_OK) {
    fill(buf, 2, rank); /* rank 0 goes on; its step 2 fails: rank 2 is gone */
    status = strata_allreduce(comm, buf, buf, COUNT, STRATA_F32, STRATA_SUM);
  }
  if (status == STRATA_OK) return printf("  rank %d: step %d did not fail\n", rank, step), 1;
  strata_comm *next = NULL;
  status = strata_comm_shrink(comm, &next);
  if (status != STRATA_OK)
    return printf("  rank %d: shrink %s\n", rank, strata_err_name(status)), 1;
  fill(buf, step, rank); /* the naive retry: this rank's step again, no agree */
  status = strata_allreduce(next, buf, buf, COUNT, STRATA_F32, STRATA_SUM);
  printf("  naive retry: rank %d retried step %d: %s%s\n", rank, step, strata_err_name(status),
         status == STRATA_OK && sum_step(buf) < 0 ? " with a wrong sum" : "");
  strata_comm_destroy(next);
  free(buf);
  return status == STRATA_ERR_MISMATCH ? 0 : 1;
}

static int agreeing_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)n, (void)arg;
  if (!comm) return printf("  rank %d: init %s\n", rank, strata_err_name(init_status)), 1;
  float *buf = malloc(COUNT * sizeof *buf);
  int status = first_steps(comm, rank, buf);
  int ok = status == STRATA_OK;
  if (strata_comm_agree(comm, &ok) != STRATA_OK || ok)
    return printf("  rank %d: agree should say the step failed\n", rank), 1;
  strata_comm *next = NULL;
  status = strata_comm_shrink(comm, &next);
  if (status != STRATA_OK)
    return printf("  rank %d: shrink %s\n", rank, strata_err_name(status)), 1;
  int undone = strata_comm_undo(comm); /* rank 0 finished step 1: its input back */
  status = strata_allreduce(next, buf, buf, COUNT, STRATA_F32, STRATA_SUM);
  int got = status == STRATA_OK ? sum_step(buf) : -1;
  printf("  agreeing retry: rank %d (undo %d): %s, the sum of step %d\n", rank, undone,
         strata_err_name(status), got);
  strata_comm_destroy(next);
  free(buf);
  return status == STRATA_OK && got == 1 ? 0 : 1;
}

/* Each rank takes itself for the root; its log goes to a file the body reads back. */
static int roots_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)n;
  int *named_by = arg; /* shared with the parent: which ranks named both roots */
  if (!comm) return printf("  rank %d: init %s\n", rank, strata_err_name(init_status)), 1;
  char path[] = "/tmp/strata-lineage-log-XXXXXX";
  int log_fd = mkstemp(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(log_fd, 2);
  int value = rank;
  int status = strata_broadcast(comm, &value, &value, 1, STRATA_I32, rank);
  fflush(stderr);
  dup2(saved, 2);
  char text[8192] = "";
  ssize_t got = pread(log_fd, text, sizeof text - 1, 0);
  text[got > 0 ? got : 0] = '\0';
  close(log_fd);
  unlink(path);
  char want[96];
  snprintf(want, sizeof want, "with root %d, this rank with root %d", 1 - rank, rank);
  int named = strstr(text, want) != NULL;
  named_by[rank] = named;
  printf("  rank %d: broadcast %s, roots named: %s\n", rank, strata_err_name(status),
         named ? "yes" : "no");
  return status == STRATA_ERR_MISMATCH ? 0 : 1;
}

int main(void) {
  strata_test_ranks_opts opts = {.shm = 0, .tweak = tweak, .deadline_s = 60};
  step1_done =
      mmap(NULL, sizeof *step1_done, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(step1_done != MAP_FAILED, "a shared page");
  printf("naive retry after a shrink:\n");
  CHECK(strata_test_run_ranks(3, &opts, naive_body, NULL) == 0,
        "the ranks at different steps must get STRATA_ERR_MISMATCH");
  *step1_done = 0;
  printf("agree, shrink, undo, retry:\n");
  CHECK(strata_test_run_ranks(3, &opts, agreeing_body, NULL) == 0,
        "the agreeing loop must retry step 1 exactly");
  printf("two ranks, each the root of a broadcast:\n");
  strata_test_ranks_opts two = {.shm = 0, .deadline_s = 60};
  int *named_by =
      mmap(NULL, 2 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (named_by == MAP_FAILED) return 1;
  CHECK(strata_test_run_ranks(2, &two, roots_body, named_by) == 0,
        "a root mismatch must fail on both ranks");
  CHECK(named_by[0] || named_by[1], "no rank named both roots");
  munmap(named_by, 2 * sizeof(int));
  printf("test_comm_lineage: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
