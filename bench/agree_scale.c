// SPDX-License-Identifier: Apache-2.0
/*
 * agree_scale.c — one rank of bench/agree.sh: joins the job the environment describes
 * (strata_comm_init_env), waits at a barrier, runs ROUNDS strata_comm_agree calls (argv[1]) and
 * a last barrier; rank 0 prints the mean time per agree. Public API only, so the same source
 * builds against any strata version and the store's request counts compare like for like.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "strata.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 1;
  strata_comm *comm = NULL;
  int status = strata_comm_init_env(&comm);
  if (status != STRATA_OK) {
    fprintf(stderr, "agree_scale: init: %s\n", strata_strerror(status));
    return 1;
  }
  status = strata_barrier(comm);
  double t0 = now_s();
  for (int i = 0; i < rounds && status == STRATA_OK; i++) {
    int flag = 1;
    status = strata_comm_agree(comm, &flag);
    if (status == STRATA_OK && flag != 1) status = STRATA_ERR_PROTOCOL;
  }
  double agree_s = now_s() - t0;
  if (status == STRATA_OK) status = strata_barrier(comm);
  if (status == STRATA_OK && strata_comm_rank(comm) == 0 && rounds > 0)
    printf("agree_scale: %d ranks, %d agrees, %.4f s each\n", strata_comm_size(comm), rounds,
           agree_s / rounds);
  if (status != STRATA_OK) fprintf(stderr, "agree_scale: %s\n", strata_strerror(status));
  strata_comm_destroy(comm);
  return status != STRATA_OK;
}
