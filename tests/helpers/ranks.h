// SPDX-License-Identifier: Apache-2.0
/*
 * ranks.h — run a test body on N ranks, each a forked process with its own communicator.
 * The parent serves the rendezvous store; children get rank, size and address directly.
 * Every run is bounded: a child still alive at the deadline is killed and counted as failed.
 */
#ifndef STRATA_TESTS_RANKS_H
#define STRATA_TESTS_RANKS_H

#include "strata.h"

typedef struct strata_test_ranks_opts {
  int shm;           /* 1 = shared memory between ranks, 0 = TCP only */
  int tcp_streams;   /* 0 = default */
  double timeout_s;  /* communicator timeout; 0 = 10 s */
  double deadline_s; /* whole run; 0 = 120 s */
  strata_algo algo;  /* forced algorithm, AUTO by default */
  const char
      *secret; /* NULL = the fixture's (net_fixture.h); another one is refused by the store */
  /* per-rank tweak of the configuration before init (may be NULL) */
  void (*tweak)(strata_config *cfg, int rank, void *arg);
} strata_test_ranks_opts;

/* body returns 0 on success; init failures are passed to body as comm == NULL with the status
 * in *init_status (body decides whether that was expected). Returns the number of ranks that
 * failed (non-zero exit, signal or deadline). */
typedef int (*strata_test_body)(strata_comm *comm, int rank, int nranks, int init_status,
                                void *arg);
int strata_test_run_ranks(int nranks, const strata_test_ranks_opts *opts, strata_test_body body,
                          void *arg);

/* Seconds on the monotonic clock; sleep for `seconds` (restarted after a signal). */
double strata_test_now_s(void);
void strata_test_sleep_s(double seconds);

/* Members of `comm` call strata_comm_grow until the processes that join (started at their own
 * pace) are in and the group has `size` ranks, or `deadline_s` seconds pass. *out = the grown
 * communicator (`comm` stays the caller's), NULL if they never came. Returns the first status
 * other than STRATA_OK, or STRATA_ERR_TIMEOUT at the deadline. Intermediate communicators (a
 * joiner that came alone) are destroyed on the way. */
int strata_test_grow_to(strata_comm *comm, int size, double deadline_s, strata_comm **out);

#endif
