/*
 * buffer_sets.c — does the same collective run at the same speed on any buffers of a process?
 * (docs/model.md, session 10: it does not on a shared host, which is why `strata bench --predict`
 * calibrates on the benchmark's own buffers.)
 *
 * Run under `strata launch -n 2` (any rank count works). Allocates SETS buffer sets of one
 * process (a send buffer of BLOCK and a receive buffer of BLOCK per rank each), touches them in
 * allocation order (or in reverse with a 4th argument "reverse"), then times an out-of-place
 * allgather on each set in turn, ROUNDS rounds (each: 2 untimed calls, a barrier, 10 calls).
 * Rank 0 prints one line per set: the slowest rank's time per call in every round. If the pages
 * did not matter, every set would read alike. On the 2-vCPU EPYC build host (2026-12-01, 8 MiB
 * blocks) a set kept its speed from round to round while sets differed by up to 1.6x within one
 * process: touched in allocation order, the first set was the slowest in four processes of four
 * (1360-2480 us a call against 1060-1750 for the fastest); touched in reverse, the first touched
 * was the slowest in two of four and the first allocated in the other two. So which buffer is
 * slow is not predictable from outside, and a model calibrated on other buffers than the calls'
 * measures other pages.
 *
 * usage: strata launch -n 2 -- build/strata-buffer-sets [BLOCK_MiB] [ROUNDS] [SETS] [reverse]
 *        (defaults 8, 4, 4)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "strata.h"

enum { BS_MAX_SETS = 16, BS_MAX_ROUNDS = 64, BS_CALLS = 10 };

int main(int argc, char **argv) {
  double mib = argc > 1 ? atof(argv[1]) : 8;
  int rounds = argc > 2 ? atoi(argv[2]) : 4, sets = argc > 3 ? atoi(argv[3]) : 4;
  int reverse = argc > 4 && !strcmp(argv[4], "reverse");
  if (mib <= 0 || mib > 1024 || rounds < 1 || rounds > BS_MAX_ROUNDS || sets < 1 ||
      sets > BS_MAX_SETS || (argc > 4 && !reverse)) {
    fprintf(stderr,
            "usage: strata-buffer-sets [BLOCK_MiB (0, 1024]] [ROUNDS 1-%d] [SETS 1-%d] "
            "[reverse]\n",
            BS_MAX_ROUNDS, BS_MAX_SETS);
    return 2;
  }
  strata_comm *comm;
  int rc = strata_comm_init_env(&comm);
  if (rc) {
    fprintf(stderr, "strata-buffer-sets: %s (run it under strata launch)\n", strata_strerror(rc));
    return 1;
  }
  int n = strata_comm_size(comm), rank = strata_comm_rank(comm);
  size_t block = (size_t)(mib * 1048576.0) / 64 * 64;
  if (block == 0) block = 64;
  char *send[BS_MAX_SETS] = {0}, *recv[BS_MAX_SETS] = {0};
  int ok = 1;
  for (int k = 0; k < sets; k++) {
    send[k] = malloc(block), recv[k] = malloc(block * (size_t)n);
    ok = ok && send[k] && recv[k];
  }
  for (int i = 0; ok && i < sets; i++) { /* first touch: this is when a page is chosen */
    int k = reverse ? sets - 1 - i : i;
    memset(send[k], 1 + k, block), memset(recv[k], 0, block * (size_t)n);
  }
  if (!ok) {
    fprintf(stderr, "strata-buffer-sets: rank %d: out of memory\n", rank);
    strata_comm_abort(comm);
    return 1;
  }
  static double t[BS_MAX_SETS][BS_MAX_ROUNDS];
  for (int q = 0; !rc && q < rounds; q++)
    for (int k = 0; !rc && k < sets; k++) {
      for (int w = 0; !rc && w < 2; w++)
        rc = strata_allgather(comm, send[k], recv[k], block, STRATA_U8);
      if (!rc) rc = strata_barrier(comm);
      double start = strata_now_s();
      for (int i = 0; !rc && i < BS_CALLS; i++)
        rc = strata_allgather(comm, send[k], recv[k], block, STRATA_U8);
      double mine = (strata_now_s() - start) / BS_CALLS;
      if (!rc) rc = strata_allreduce(comm, &mine, &t[k][q], 1, STRATA_F64, STRATA_MAX);
    }
  if (!rc && rank == 0) {
    printf(
        "# %d ranks, allgather of %zu B blocks, %d sets touched %s, %d calls a round; us a call "
        "(slowest rank) per round\n",
        n, block, sets, reverse ? "last to first" : "first to last", BS_CALLS);
    for (int k = 0; k < sets; k++) {
      printf("set %2d:", k);
      for (int q = 0; q < rounds; q++) printf(" %8.1f", t[k][q] * 1e6);
      printf("\n");
    }
  }
  if (rc) fprintf(stderr, "strata-buffer-sets: rank %d: %s\n", rank, strata_strerror(rc));
  for (int k = 0; k < sets; k++) free(send[k]), free(recv[k]);
  strata_comm_destroy(comm);
  return rc ? 1 : 0;
}
