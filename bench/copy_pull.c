/*
 * copy_pull.c — what a local copy costs beside a shared-memory allgather (docs/model.md, session
 * 9: the out-of-place one-phase collectives over shm run slower than their copy and their pull
 * add up to, which the host model does not capture).
 *
 * Run under `strata launch -n 2` (any rank count works). Each variant makes CALLS calls back to
 * back, REPS times; rank 0 prints the median time of one call per variant (the slowest rank's,
 * taken by an allreduce of the per-rank medians):
 *   in place           allgather with the own block already in RECV
 *   out of place       allgather from SEND (the engine copies the own block itself)
 *   copy only          memcpy of the own block SEND -> RECV, no collective
 *   own copy + in place   that memcpy, then the in-place call
 *   other copy + in place a memcpy between two buffers the call never touches, then the call
 *   spin + in place    no memory touched: the core busy for as long as "copy only" took, then
 *                      the call (separates what the copy does to the caches from what any local
 *                      work between calls does to the engine's timing)
 * If the copies cost what they cost alone, "own copy + in place" = "copy only" + "in place".
 *
 * usage: strata launch -n 2 -- build/strata-copy-pull [BLOCK_MiB] [CALLS] [REPS]
 *        (defaults 8, 20, 5; BLOCK_MiB may be a fraction: 0.5)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "strata.h"

enum {
  CP_IN_PLACE,
  CP_OUT_OF_PLACE,
  CP_COPY_ONLY,
  CP_OWN_COPY,
  CP_OTHER_COPY,
  CP_SPIN,
  CP_VARIANTS
};

static const char *const cp_names[CP_VARIANTS] = {
    "in place",       "out of place", "copy only", "own copy + in place", "other copy + in place",
    "spin + in place"};

typedef struct cp_bufs {
  char *send, *recv, *x, *y;
  size_t block;
  int rank;
  double spin_s; /* CP_SPIN: how long */
} cp_bufs;

static int cp_call(strata_comm *comm, const cp_bufs *b, int variant) {
  char *own = b->recv + (size_t)b->rank * b->block;
  switch (variant) {
    case CP_OUT_OF_PLACE:
      return strata_allgather(comm, b->send, b->recv, b->block, STRATA_U8);
    case CP_COPY_ONLY:
      memcpy(own, b->send, b->block);
      return STRATA_OK;
    case CP_OWN_COPY:
      memcpy(own, b->send, b->block);
      break;
    case CP_OTHER_COPY:
      memcpy(b->y, b->x, b->block);
      break;
    case CP_SPIN: {
      double until = strata_now_s() + b->spin_s;
      while (strata_now_s() < until) {
      }
      break;
    }
    default:
      break;
  }
  return strata_allgather(comm, own, b->recv, b->block, STRATA_U8);
}

int main(int argc, char **argv) {
  double mib = argc > 1 ? atof(argv[1]) : 8;
  int calls = argc > 2 ? atoi(argv[2]) : 20, reps = argc > 3 ? atoi(argv[3]) : 5;
  if (mib <= 0 || mib > 1024 || calls < 1 || calls > 100000 || reps < 1 || reps > 1000) {
    fprintf(stderr, "usage: strata-copy-pull [BLOCK_MiB (0, 1024]] [CALLS] [REPS]\n");
    return 2;
  }
  strata_comm *comm;
  int rc = strata_comm_init_env(&comm);
  if (rc) {
    fprintf(stderr, "strata-copy-pull: %s (run it under strata launch)\n", strata_strerror(rc));
    return 1;
  }
  cp_bufs b = {.block = (size_t)(mib * 1048576.0) / 64 * 64, .rank = strata_comm_rank(comm)};
  if (b.block == 0) b.block = 64;
  int n = strata_comm_size(comm);
  b.send = malloc(b.block), b.recv = malloc(b.block * (size_t)n);
  b.x = malloc(b.block), b.y = malloc(b.block);
  double *t = calloc((size_t)reps, sizeof *t), med[CP_VARIANTS], worst[CP_VARIANTS];
  if (!b.send || !b.recv || !b.x || !b.y || !t) {
    fprintf(stderr, "strata-copy-pull: out of memory\n");
    strata_comm_abort(comm);
    return 1;
  }
  memset(b.send, 1, b.block), memset(b.recv, 2, b.block * (size_t)n);
  memset(b.x, 3, b.block), memset(b.y, 4, b.block);
  for (int v = 0; !rc && v < CP_VARIANTS; v++) {
    for (int w = 0; !rc && w < 3; w++) rc = cp_call(comm, &b, v); /* warm-up */
    for (int r = 0; !rc && r < reps; r++) {
      rc = strata_barrier(comm);
      double start = strata_now_s();
      for (int i = 0; !rc && i < calls; i++) rc = cp_call(comm, &b, v);
      t[r] = (strata_now_s() - start) / calls;
    }
    med[v] = strata_median(t, (size_t)reps);
    if (v == CP_COPY_ONLY) b.spin_s = med[v];
  }
  if (!rc) rc = strata_allreduce(comm, med, worst, CP_VARIANTS, STRATA_F64, STRATA_MAX);
  if (!rc && b.rank == 0) {
    printf("# %d ranks, block %zu B, %d calls x %d repetitions, median call (slowest rank)\n", n,
           b.block, calls, reps);
    for (int v = 0; v < CP_VARIANTS; v++) printf("%-22s %10.1f us\n", cp_names[v], worst[v] * 1e6);
    printf("# own copy + in place - (copy only + in place): %+.1f us\n",
           (worst[CP_OWN_COPY] - worst[CP_COPY_ONLY] - worst[CP_IN_PLACE]) * 1e6);
  }
  if (rc) fprintf(stderr, "strata-copy-pull: rank %d: %s\n", b.rank, strata_strerror(rc));
  free(t), free(b.send), free(b.recv), free(b.x), free(b.y);
  strata_comm_destroy(comm);
  return rc ? 1 : 0;
}
