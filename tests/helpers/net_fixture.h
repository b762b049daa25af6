// SPDX-License-Identifier: Apache-2.0
/*
 * net_fixture.h — run a transport-level test body on N forked ranks. A separate process serves
 * the rendezvous store on loopback, so the parent stays single-threaded and forking is safe
 * (even under ASan); the parent reaps the children; each child gets its rank and the store
 * address. Every run is bounded: a child alive at the deadline is killed, and a
 * child whose parent dies is killed too (PR_SET_PDEATHSIG), so a broken test never hangs.
 *
 * Shared by the tcp, shm and engine tests: the helpers below open a transport-ready config,
 * connect to the store, and drive a transport until a counter of completions reaches a target.
 */
#ifndef STRATA_TESTS_NET_FIXTURE_H
#define STRATA_TESTS_NET_FIXTURE_H

#include <stddef.h>
#include <sys/types.h>

#include "boot/store.h"
#include "net/transport.h"
#include "strata.h"

typedef struct strata_net_fixture_rank {
  int rank;   /* 0 .. nprocs-1 (a test may use some processes as non-ranks, e.g. a bad client) */
  int nprocs; /* processes forked */
  char store_addr[64];
  void *arg;
} strata_net_fixture_rank;

/* Returns the child's exit code (0 = success). */
typedef int (*strata_net_fixture_fn)(const strata_net_fixture_rank *r);

/* Fork nprocs children running fn, wait up to deadline_s for all of them. statuses (may be NULL)
 * receives each child's waitpid status. Returns how many children did not exit with 0 (killed,
 * signalled, non-zero, or past the deadline), printing one line for each. */
int strata_net_fixture_run(int nprocs, strata_net_fixture_fn fn, void *arg, double deadline_s,
                           int *statuses);

/* The job and secret of the fixture's ranks; its store admits only connections that prove them. */
#define STRATA_NET_FIXTURE_JOB "netfix"
#define STRATA_NET_FIXTURE_SECRET "fixture-secret"

/* A configuration for a transport test: defaults, then rank/world size, the fixture's job id and
 * secret, advertise host 127.0.0.1, timeout 10 s, shm off, 1 TCP stream, and
 * the log level of STRATA_LOG when set. Change fields after the call. */
void strata_net_fixture_config(const strata_net_fixture_rank *r, int nranks, strata_config *cfg);

/* Connect to the fixture's store (10 s timeout). Returns STRATA_OK or the store's error. */
int strata_net_fixture_store(const strata_net_fixture_rank *r, strata_store **out);

/* Counts completions: use as strata_xfer.done with x->user pointing at an int counter. */
void strata_net_fixture_count_done(strata_xfer *x);

/* Progress t (waiting in between) until *counter >= target. Returns STRATA_OK, the first error
 * progress() returned (*failed_peer names the peer; may be NULL), or STRATA_ERR_TIMEOUT. */
int strata_net_fixture_drive(strata_transport *t, const int *counter, int target, double timeout_s,
                             int *failed_peer);

/* Deterministic test bytes: byte i of message `msg` from `src` (stripe errors shift it). */
unsigned char strata_net_fixture_byte(int src, int msg, size_t i);
void strata_net_fixture_fill(void *buf, size_t bytes, int src, int msg);
/* Index of the first wrong byte, or (size_t)-1 when all match. */
size_t strata_net_fixture_check(const void *buf, size_t bytes, int src, int msg);

#endif
