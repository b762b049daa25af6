// SPDX-License-Identifier: Apache-2.0
/*
 * agree_after_death.c — a reproduction for the library's owners (bench/chaos/README.md,
 * "Findings").
 *
 * N ranks (default 3) complete an allreduce; the last rank then dies (SIGKILL) while the others
 * are between calls; they wait PAUSE seconds (default 0.5) and call strata_comm_agree on the
 * communicator, which is healthy in their eyes (nothing failed during a call).
 * Expected (strata.h: agree works on a healthy or a failed communicator): agree returns within
 * about STRATA_TIMEOUT with flag 1 and the dead rank in the failed set. A survivor still inside
 * agree after STRATA_TIMEOUT + 5 s prints HANG; the exit status is then 1.
 *
 *   build/strata store --addr 127.0.0.1:29657 &
 *   STRATA_ADDR=127.0.0.1:29657 STRATA_STORE_EXTERNAL=1 STRATA_JOB_ID=aad STRATA_TIMEOUT=1 \
 *     STRATA_SHM=0 ./agree_after_death [ranks] [pause_s]
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <strata.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int rank_main(int rank, int size, double pause_s) {
  strata_config cfg;
  strata_config_init(&cfg);
  strata_config_from_env(&cfg, NULL, 0);
  cfg.rank = rank;
  cfg.world_size = size;
  strata_comm *comm = NULL;
  if (strata_comm_init(&cfg, &comm) != STRATA_OK) return 2;
  int value = 1, sum = 0;
  int status = strata_allreduce(comm, &value, &sum, 1, STRATA_I32, STRATA_SUM);
  if (rank == size - 1) raise(SIGKILL);
  usleep((useconds_t)(pause_s * 1e6));
  int flag = 1, failed[64];
  double t0 = now_s();
  alarm((unsigned)(cfg.timeout_s + 5) + 1); /* SIGALRM: the parent sees the hang */
  int agreed = strata_comm_agree(comm, &flag);
  int nfailed = strata_comm_failed_ranks(comm, failed, 64);
  printf("rank %d: allreduce %s; agree %s after %.3f s, flag %d, %d failed%s\n", rank,
         strata_err_name(status), strata_err_name(agreed), now_s() - t0, flag, nfailed,
         nfailed == 1 && failed[0] == size - 1 ? " (the dead rank)" : "");
  strata_comm_destroy(comm);
  return agreed != STRATA_OK;
}

int main(int argc, char **argv) {
  int size = argc > 1 ? atoi(argv[1]) : 3;
  double pause_s = argc > 2 ? atof(argv[2]) : 0.5;
  setvbuf(stdout, NULL, _IOLBF, 0);
  pid_t pids[64];
  for (int r = 0; r < size; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(rank_main(r, size, pause_s));
  }
  int failures = 0;
  for (int r = 0; r < size - 1; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) printf("HANG: rank %d still in agree\n", r);
    failures += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  waitpid(pids[size - 1], NULL, 0);
  printf("%s\n", failures ? "FAIL" : "ok");
  return failures != 0;
}
