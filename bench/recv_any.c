// SPDX-License-Identifier: Apache-2.0
/*
 * recv_any.c — what a receive from any source costs against a receive from a named rank: a
 * ping-pong of 8-byte messages between ranks 0 and 1, interleaved rounds of strata_recv and
 * strata_recv_any on both sides, the median round trip of each and their ratio.
 *
 *   gcc -O2 -Iinclude bench/recv_any.c -Lbuild -lstrata -Wl,-rpath,$PWD/build -o build/recv_any
 *   build/strata launch -n 2 -- build/recv_any                  # shared memory
 *   STRATA_SHM=0 build/strata launch -n 2 -- build/recv_any     # loopback TCP
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "strata.h"

enum { ROUNDS = 9, ROUND_TRIPS = 2000 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int receive(strata_comm *comm, char *buf, int any, int peer) {
  int source;
  return any ? strata_recv_any(comm, buf, 8, STRATA_U8, &source)
             : strata_recv(comm, buf, 8, STRATA_U8, peer);
}

int main(void) {
  strata_comm *comm;
  int status = strata_comm_init_env(&comm);
  if (status != STRATA_OK) {
    fprintf(stderr, "init: %s\n", strata_strerror(status));
    return 1;
  }
  int rank = strata_comm_rank(comm);
  double us[2][ROUNDS];
  char buf[8] = {0};
  for (int round = 0; round < 2 * ROUNDS && status == STRATA_OK; round++) {
    int any = round % 2;
    status = strata_barrier(comm);
    double start = now_s();
    for (int i = 0; i < ROUND_TRIPS && status == STRATA_OK && rank < 2; i++) {
      if (rank == 0) {
        status = strata_send(comm, buf, 8, STRATA_U8, 1);
        if (status == STRATA_OK) status = receive(comm, buf, any, 1);
      } else {
        status = receive(comm, buf, any, 0);
        if (status == STRATA_OK) status = strata_send(comm, buf, 8, STRATA_U8, 0);
      }
    }
    us[any][round / 2] = (now_s() - start) / ROUND_TRIPS * 1e6;
  }
  if (status == STRATA_OK && rank == 0) {
    qsort(us[0], ROUNDS, sizeof us[0][0], by_value);
    qsort(us[1], ROUNDS, sizeof us[1][0], by_value);
    double named = us[0][ROUNDS / 2], any = us[1][ROUNDS / 2];
    printf(
        "%s, 8 bytes: strata_recv %.1f us, strata_recv_any %.1f us per round trip (median of "
        "%d rounds of %d): ratio %.2f\n",
        strata_comm_transport_name(comm, 1), named, any, ROUNDS, ROUND_TRIPS, any / named);
  }
  strata_comm_destroy(comm);
  if (status != STRATA_OK) fprintf(stderr, "rank %d: %s\n", rank, strata_strerror(status));
  return status != STRATA_OK;
}
