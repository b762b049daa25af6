// SPDX-License-Identifier: Apache-2.0
/*
 * lone_grow.c — a reproduction for the library's owners (bench/chaos/README.md, "Findings").
 *
 * Two ranks; rank 1 dies; rank 0 shrinks to a communicator of one rank, then a third process
 * asks to join (STRATA_JOIN=1) and rank 0 calls strata_comm_grow to admit it. Expected:
 * grow returns STRATA_OK with a communicator of 2 ranks. The library gives a communicator of one
 * rank no store (comm.c connects the world only when nranks > 1), so grow — and shrink — return
 * STRATA_ERR_UNSUPPORTED: the last survivor of a job can never admit anyone again, and the
 * joiner waits for ever.
 *
 *   build/strata store --addr 127.0.0.1:29655 &
 *   STRATA_ADDR=127.0.0.1:29655 STRATA_STORE_EXTERNAL=1 STRATA_JOB_ID=lone STRATA_TIMEOUT=1 \
 *     ./lone_grow
 * Exit status 0 when grow admitted the joiner, 1 otherwise.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <strata.h>

static strata_comm *start(int rank, int size, int join) {
  strata_config cfg;
  strata_config_init(&cfg);
  strata_config_from_env(&cfg, NULL, 0);
  cfg.rank = rank;
  cfg.world_size = size;
  cfg.join = join;
  strata_comm *comm = NULL;
  int status = strata_comm_init(&cfg, &comm);
  if (status != STRATA_OK) fprintf(stderr, "init (join %d): %s\n", join, strata_err_name(status));
  return comm;
}

int main(void) {
  pid_t dying = fork();
  if (dying == 0) {
    strata_comm *comm = start(1, 2, 0);
    if (comm) strata_barrier(comm);
    raise(SIGKILL);
  }
  strata_comm *comm = start(0, 2, 0);
  if (!comm) return 1;
  strata_barrier(comm);
  waitpid(dying, NULL, 0);
  int value = 1, status = strata_allreduce(comm, &value, &value, 1, STRATA_I32, STRATA_SUM);
  printf("allreduce with the dead rank: %s\n", strata_err_name(status));
  strata_comm *alone = NULL;
  status = strata_comm_shrink(comm, &alone);
  printf("shrink: %s, size %d\n", strata_err_name(status), alone ? strata_comm_size(alone) : -1);
  strata_comm_destroy(comm);
  if (!alone) return 1;

  pid_t joiner = fork();
  if (joiner == 0) {
    alarm(10); /* it would wait for ever */
    strata_comm *joined = start(-1, -1, 1);
    if (joined) strata_barrier(joined);
    _exit(joined ? 0 : 1);
  }
  sleep(1); /* the joiner has taken its ticket */
  strata_comm *grown = NULL;
  status = strata_comm_grow(alone, &grown);
  printf("grow of a one-rank communicator: %s, size %d\n", strata_err_name(status),
         grown ? strata_comm_size(grown) : -1);
  if (grown) strata_barrier(grown);
  int joiner_status = 0;
  waitpid(joiner, &joiner_status, 0);
  printf("joiner: %s\n", WIFEXITED(joiner_status) && WEXITSTATUS(joiner_status) == 0
                             ? "admitted"
                             : "never admitted");
  strata_comm_destroy(grown);
  strata_comm_destroy(alone);
  return status == STRATA_OK && grown ? 0 : 1;
}
