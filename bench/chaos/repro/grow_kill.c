// SPDX-License-Identifier: Apache-2.0
/*
 * grow_kill.c — a reproduction for the library's owners (bench/chaos/README.md, "Findings").
 *
 * N ranks (default 4) loop over { strata_comm_grow with nobody waiting to join; an allreduce;
 * strata_comm_agree }, the elastic loop of docs/elastic.md with a grow at every step. The last
 * rank SIGKILLs itself at a random moment (seeded) around a grow. Every survivor must see a
 * failure within STRATA_TIMEOUT, shrink, and finish. Expected: exit 0 within a few seconds.
 * A survivor still inside a call after STRATA_TIMEOUT + 5 s prints "HANG" and the parent dumps
 * its threads with gdb, then exits 1.
 *
 *   build/strata store --addr 127.0.0.1:29656 &
 *   STRATA_ADDR=127.0.0.1:29656 STRATA_STORE_EXTERNAL=1 STRATA_JOB_ID=gk STRATA_TIMEOUT=1 \
 *     ./grow_kill [ranks] [seed]
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <strata.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int rank_main(int rank, int size, unsigned seed) {
  strata_config cfg;
  strata_config_init(&cfg);
  strata_config_from_env(&cfg, NULL, 0);
  cfg.rank = rank;
  cfg.world_size = size;
  strata_comm *comm = NULL;
  if (strata_comm_init(&cfg, &comm) != STRATA_OK) return 2;
  srand(seed);
  int die_at = 20 + rand() % 50, die_after_us = rand() % 20000;
  int data[1024], sum[1024];
  for (int step = 0; step < 400; step++) {
    if (rank == size - 1 && step == die_at) {
      usleep((useconds_t)die_after_us);
      raise(SIGKILL);
    }
    strata_comm *next = NULL;
    double t0 = now_s();
    int status = strata_comm_grow(comm, &next);
    double took = now_s() - t0;
    if (took > cfg.timeout_s + 5)
      printf("rank %d step %d: grow took %.1f s (%s)\n", rank, step, took, strata_err_name(status));
    if (status == STRATA_OK && next) {
      strata_comm_destroy(comm);
      comm = next;
    }
    int ok = status == STRATA_OK;
    if (ok) {
      for (int i = 0; i < 1024; i++) data[i] = rank + i;
      ok = strata_allreduce(comm, data, sum, 1024, STRATA_I32, STRATA_SUM) == STRATA_OK;
    }
    int agreed = strata_comm_agree(comm, &ok);
    if (agreed == STRATA_OK && ok) continue;
    strata_comm *shrunk = NULL;
    status = strata_comm_shrink(comm, &shrunk);
    printf("rank %d step %d: failure, shrink %s -> size %d\n", rank, step, strata_err_name(status),
           shrunk ? strata_comm_size(shrunk) : -1);
    strata_comm_destroy(comm);
    comm = shrunk;
    if (!comm) return 1;
    if (strata_comm_size(comm) == 1) break; /* (a group of one cannot grow: lone_grow.c) */
  }
  strata_comm_destroy(comm);
  return 0;
}

int main(int argc, char **argv) {
  int size = argc > 1 ? atoi(argv[1]) : 4;
  unsigned seed = argc > 2 ? (unsigned)atoi(argv[2]) : 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  pid_t pids[64];
  for (int r = 0; r < size; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(rank_main(r, size, seed));
  }
  double deadline = now_s() + 20;
  int left = size - 1, failures = 0; /* the last rank kills itself */
  waitpid(pids[size - 1], NULL, 0);
  while (left > 0 && now_s() < deadline) {
    for (int r = 0; r < size - 1; r++) {
      int st;
      if (pids[r] > 0 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        failures += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        pids[r] = 0;
        left--;
      }
    }
    usleep(10000);
  }
  for (int r = 0; r < size - 1; r++) {
    if (pids[r] <= 0) continue;
    printf("HANG: rank %d (pid %d) still runs\n", r, (int)pids[r]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "gdb -p %d -batch -ex 'thread apply all bt' 2>/dev/null",
             (int)pids[r]);
    if (system(cmd) != 0) printf("(no gdb)\n");
    kill(pids[r], SIGKILL);
    failures++;
  }
  printf("%s\n", failures ? "FAIL" : "ok");
  return failures != 0;
}
