// SPDX-License-Identifier: Apache-2.0
/*
 * test_engine_run_schedule.c — strata_engine_run_schedule (engine.h): a schedule built by the
 * caller runs as one blocking collective operation. 3 ranks, over shm and over TCP:
 *  - a ring shift in 5 messages with a window of 2 (each message waits for the one two before
 *    it) lands every byte of the left neighbour's buffer;
 *  - a lone transfer (rank 0 to rank 1, rank 2 with an empty schedule) lands rank 0's bytes on
 *    rank 1 and leaves rank 2's buffer alone;
 *  - refused before anything is sent, on every rank alike, and the communicator still works
 *    after: a step outside its buffer (STRATA_ERR_PROTOCOL), a point-to-point name and a
 *    schedule built for another rank (STRATA_ERR_INVALID_ARG);
 *  - an allreduce after all of it agrees, so the runs kept the ranks' sequence of collectives.
 * The schedules given are taken over whatever the outcome (ASan's leak check holds that).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/schedule.h"
#include "engine/engine.h"
#include "helpers/ranks.h"

enum { BYTES = 5 * 4096 + 123, MESSAGES = 5, WINDOW = 2 };

static uint8_t pattern(int rank, size_t i) {
  return (uint8_t)(rank * 131 + i * 7 + 1);
}

static strata_coll_args name_of(size_t count) {
  strata_coll_args a = {.coll = STRATA_COLL_ALLGATHER,
                        .count = count,
                        .dtype = STRATA_U8,
                        .algo = STRATA_ALGO_RING,
                        .compress = STRATA_COMPRESS_NONE};
  return a;
}

/* Messages of `each` bytes to `to` and from `from` (-1: none), message i after message i-WINDOW
 * of the same direction. */
static void build(strata_schedule *s, int rank, int n, int to, int from, size_t bytes,
                  size_t each) {
  memset(s, 0, sizeof *s);
  s->rank = rank;
  s->nranks = n;
  s->coll = STRATA_COLL_ALLGATHER;
  s->algo = STRATA_ALGO_RING;
  int sends[MESSAGES + 1], recvs[MESSAGES + 1];
  for (size_t i = 0, off = 0; off < bytes; i++, off += each) {
    size_t len = bytes - off < each ? bytes - off : each;
    uint32_t dep;
    if (from >= 0) {
      dep = i >= WINDOW ? (uint32_t)recvs[i - WINDOW] : 0;
      recvs[i] =
          strata_sched_recv(s, from, strata_ref(STRATA_BUF_RECV, off), len, &dep, i >= WINDOW);
    }
    if (to >= 0) {
      dep = i >= WINDOW ? (uint32_t)sends[i - WINDOW] : 0;
      sends[i] = strata_sched_send(s, to, strata_ref(STRATA_BUF_SEND, off), len, &dep, i >= WINDOW);
    }
  }
}

static int body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  int bad = 0;
  uint8_t *out = malloc(BYTES), *in = malloc(BYTES);
  for (size_t i = 0; i < BYTES; i++) out[i] = pattern(rank, i);
  strata_coll_args name = name_of(BYTES);
  strata_schedule s;

  /* ring shift */
  memset(in, 0xee, BYTES);
  int left = (rank + n - 1) % n;
  build(&s, rank, n, (rank + 1) % n, left, BYTES, (BYTES + MESSAGES - 1) / MESSAGES);
  int rc = strata_engine_run_schedule(comm, &name, &s, out, BYTES, in, BYTES);
  if (rc != STRATA_OK) {
    fprintf(stderr, "rank %d: shift: %s\n", rank, strata_strerror(rc));
    bad++;
  }
  for (size_t i = 0; i < BYTES && !rc; i++)
    if (in[i] != pattern(left, i)) {
      fprintf(stderr, "rank %d: shift byte %zu: %u, want %u\n", rank, i, in[i], pattern(left, i));
      bad++;
      break;
    }

  /* lone: rank 0 to rank 1, rank 2 idle */
  memset(in, 0xee, BYTES);
  build(&s, rank, n, rank == 0 ? 1 : -1, rank == 1 ? 0 : -1, BYTES, BYTES);
  rc = strata_engine_run_schedule(comm, &name, &s, out, rank == 0 ? BYTES : 0, in,
                                  rank == 1 ? BYTES : 0);
  if (rc != STRATA_OK) {
    fprintf(stderr, "rank %d: lone: %s\n", rank, strata_strerror(rc));
    bad++;
  }
  for (size_t i = 0; i < BYTES && !rc; i++) {
    uint8_t want = rank == 1 ? pattern(0, i) : 0xee;
    if (in[i] != want) {
      fprintf(stderr, "rank %d: lone byte %zu: %u, want %u\n", rank, i, in[i], want);
      bad++;
      break;
    }
  }

  /* refusals, the same on every rank */
  build(&s, rank, n, (rank + 1) % n, left, BYTES, BYTES);
  rc = strata_engine_run_schedule(comm, &name, &s, out, BYTES - 1, in, BYTES);
  if (rc != STRATA_ERR_PROTOCOL) {
    fprintf(stderr, "rank %d: step outside its buffer: %s\n", rank, strata_strerror(rc));
    bad++;
  }
  build(&s, rank, n, (rank + 1) % n, left, BYTES, BYTES);
  strata_coll_args p2p = name;
  p2p.coll = STRATA_COLL_SEND;
  p2p.root = (rank + 1) % n;
  rc = strata_engine_run_schedule(comm, &p2p, &s, out, BYTES, in, BYTES);
  if (rc != STRATA_ERR_INVALID_ARG) {
    fprintf(stderr, "rank %d: point-to-point name: %s\n", rank, strata_strerror(rc));
    bad++;
  }
  build(&s, (rank + 1) % n, n, (rank + 2) % n, rank, BYTES, BYTES);
  rc = strata_engine_run_schedule(comm, &name, &s, out, BYTES, in, BYTES);
  if (rc != STRATA_ERR_INVALID_ARG) {
    fprintf(stderr, "rank %d: another rank's schedule: %s\n", rank, strata_strerror(rc));
    bad++;
  }

  /* still in step with the others */
  int mine = rank + 1, sum = 0;
  rc = strata_allreduce(comm, &mine, &sum, 1, STRATA_I32, STRATA_SUM);
  if (rc != STRATA_OK || sum != n * (n + 1) / 2) {
    fprintf(stderr, "rank %d: allreduce after: %s, %d\n", rank, strata_strerror(rc), sum);
    bad++;
  }
  free(out);
  free(in);
  return bad != 0;
}

int main(void) {
  int failed = 0;
  for (int shm = 1; shm >= 0; shm--) {
    strata_test_ranks_opts o = {.shm = shm, .timeout_s = 20, .deadline_s = 60};
    int bad = strata_test_run_ranks(3, &o, body, NULL);
    printf("%s 3 ranks: %s\n", shm ? "shm" : "tcp", bad ? "FAILED" : "ok");
    failed += bad != 0;
  }
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
