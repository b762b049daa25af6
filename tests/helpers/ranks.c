// SPDX-License-Identifier: Apache-2.0
/* ranks.c — see ranks.h. */
#include "helpers/ranks.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers/net_fixture.h"

static int run_child(int rank, int nranks, const char *addr, const strata_test_ranks_opts *o,
                     strata_test_body body, void *arg) {
  strata_config cfg;
  strata_config_init(&cfg);
  cfg.rank = rank;
  cfg.world_size = nranks;
  cfg.local_rank = rank;
  snprintf(cfg.store_addr, sizeof cfg.store_addr, "%s", addr);
  cfg.store_external = 1;
  snprintf(cfg.job_id, sizeof cfg.job_id, "%s", STRATA_NET_FIXTURE_JOB);
  snprintf(cfg.secret, sizeof cfg.secret, "%s", o->secret ? o->secret : STRATA_NET_FIXTURE_SECRET);
  cfg.shm_enabled = o->shm;
  if (o->tcp_streams) cfg.tcp_streams = o->tcp_streams;
  cfg.timeout_s = o->timeout_s > 0 ? o->timeout_s : 10;
  cfg.algo = o->algo;
  const char *log = getenv("STRATA_LOG");
  if (log && !strcmp(log, "info")) cfg.log_level = STRATA_LOG_INFO;
  if (log && !strcmp(log, "debug")) cfg.log_level = STRATA_LOG_DEBUG;
  if (o->tweak) o->tweak(&cfg, rank, arg);
  strata_comm *comm = NULL;
  int status = strata_comm_init(&cfg, &comm);
  int rc = body(status == STRATA_OK ? comm : NULL, rank, nranks, status, arg);
  if (comm) strata_comm_destroy(comm);
  return rc;
}

typedef struct run_args {
  const strata_test_ranks_opts *opts;
  strata_test_body body;
  void *arg;
} run_args;

static int fixture_child(const strata_net_fixture_rank *r) {
  const run_args *a = r->arg;
  return run_child(r->rank, r->nprocs, r->store_addr, a->opts, a->body, a->arg) ? 1 : 0;
}

/* The store runs in its own process (net_fixture), so this process stays single-threaded and
 * forking the ranks is safe, also under the sanitizers. */
int strata_test_run_ranks(int nranks, const strata_test_ranks_opts *opts, strata_test_body body,
                          void *arg) {
  strata_test_ranks_opts o = {0};
  if (opts) o = *opts;
  run_args a = {.opts = &o, .body = body, .arg = arg};
  return strata_net_fixture_run(nranks, fixture_child, &a, o.deadline_s > 0 ? o.deadline_s : 120,
                                NULL);
}

double strata_test_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void strata_test_sleep_s(double seconds) {
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

int strata_test_grow_to(strata_comm *comm, int size, double deadline_s, strata_comm **out) {
  *out = NULL;
  strata_comm *work = comm;
  double end = strata_test_now_s() + deadline_s;
  int status = STRATA_OK;
  /* a grow with nobody waiting returns at once; the joiners' arrival is what is waited for */
  while (status == STRATA_OK && strata_comm_size(work) < size) {
    if (strata_test_now_s() > end) {
      status = STRATA_ERR_TIMEOUT;
      break;
    }
    strata_comm *next = NULL;
    status = strata_comm_grow(work, &next);
    if (status == STRATA_OK && next) {
      if (work != comm) strata_comm_destroy(work);
      work = next;
    } else if (status == STRATA_OK) {
      strata_test_sleep_s(0.02);
    }
  }
  if (status == STRATA_OK && work != comm) {
    *out = work;
  } else if (work != comm) {
    strata_comm_destroy(work);
  }
  return status;
}
