// SPDX-License-Identifier: Apache-2.0
/*
 * test_comm_reinit.c — one process creates and destroys communicators again and again on the
 * same store address while rank 0 serves the store itself (the torchrun, mpirun and srun path:
 * no external store). Every cycle is init, one allreduce checked exactly, destroy, and every
 * cycle must succeed: a rank that finishes a cycle early must never reach the store of the
 * communicator that is still going away, nor its keys.
 *
 * The ranks are forked processes (net_fixture), each running every cycle; the address is a
 * loopback port below the kernel's ephemeral range, so no outgoing connection of another test
 * takes it while it is unbound between cycles.
 *
 * Then the rule that makes this work, at the store's level: a job's store admits each rank of
 * its job and size once, keeps everyone else out while it lives, and a rank kept out ends up
 * connected to the store that replaces it.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "boot/store.h"
#include "helpers/check.h"
#include "helpers/net_fixture.h"

typedef struct reinit_case {
  int nranks;
  int cycles;
  int shm;
  char addr[64];
  char job_id[64];
} reinit_case;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Every rank contributes rank + 1 + cycle * 1000 + i at element i: sums are exact in f32. */
static int one_cycle(const reinit_case *c, int rank, int cycle) {
  strata_config cfg;
  strata_config_init(&cfg);
  cfg.rank = rank;
  cfg.world_size = c->nranks;
  cfg.local_rank = rank;
  snprintf(cfg.store_addr, sizeof cfg.store_addr, "%s", c->addr);
  cfg.store_external = 0;
  snprintf(cfg.job_id, sizeof cfg.job_id, "%s", c->job_id);
  snprintf(cfg.secret, sizeof cfg.secret, "reinit-secret");
  cfg.shm_enabled = c->shm;
  cfg.timeout_s = 10;
  const char *log = getenv("STRATA_LOG");
  if (log && !strcmp(log, "debug")) cfg.log_level = STRATA_LOG_DEBUG;
  strata_comm *comm = NULL;
  int status = strata_comm_init(&cfg, &comm);
  if (status != STRATA_OK) {
    printf("  rank %d cycle %d: init: %s\n", rank, cycle, strata_err_name(status));
    return 1;
  }
  enum { COUNT = 64 };
  float buf[COUNT];
  for (int i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1 + cycle * 1000 + i);
  status = strata_allreduce(comm, buf, buf, COUNT, STRATA_F32, STRATA_SUM);
  int wrong = 0;
  int n = c->nranks;
  for (int i = 0; status == STRATA_OK && i < COUNT; i++) {
    float want = (float)(n * (n + 1) / 2 + n * (cycle * 1000 + i));
    wrong += buf[i] != want;
  }
  int destroyed = strata_comm_destroy(comm);
  if (status != STRATA_OK || wrong || destroyed != STRATA_OK) {
    printf("  rank %d cycle %d: allreduce %s, %d wrong elements, destroy %s\n", rank, cycle,
           strata_err_name(status), wrong, strata_err_name(destroyed));
    return 1;
  }
  return 0;
}

static int reinit_rank(const strata_net_fixture_rank *r) {
  const reinit_case *c = r->arg;
  for (int cycle = 0; cycle < c->cycles; cycle++)
    if (one_cycle(c, r->rank, cycle) != 0) return 1;
  return 0;
}

/* A loopback port that is free now, from 20000..32767 (below the ephemeral range). */
static int pick_port(void) {
  int start = 20000 + (int)(getpid() % 12000);
  for (int k = 0; k < 12768; k++) {
    int port = 20000 + (start - 20000 + k) % 12768;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int bound = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    if (bound) return port;
  }
  return -1;
}

/* ---- the store's rule ---- */

typedef struct late_rank {
  const char *addr;
  int status;
  char seen[16];
} late_rank;

/* Rank 1 of a later communicator of job "j": connects, then reads which store it reached. */
static void *late_rank_main(void *arg) {
  late_rank *l = arg;
  strata_store *s = NULL;
  l->status = strata_store_connect_job(l->addr, "j", 1, 2, 10, &s);
  void *value = NULL;
  size_t len = 0;
  if (l->status == STRATA_OK) l->status = strata_store_get(s, "store", &value, &len, 10);
  if (l->status == STRATA_OK)
    snprintf(l->seen, sizeof l->seen, "%.*s", (int)(len < 15 ? len : 15), (const char *)value);
  free(value);
  strata_store_close(s);
  return NULL;
}

static void check_store_rule(int port) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  strata_store_server *old = NULL;
  CHECK_STATUS(strata_store_server_start_job(addr, "j", 2, &old), STRATA_OK);
  if (!old) return;
  strata_store *rank0 = NULL, *rank1 = NULL, *refused = NULL;
  CHECK_STATUS(strata_store_connect_job(addr, "j", 0, 2, 5, &rank0), STRATA_OK);
  CHECK_STATUS(strata_store_connect_job(addr, "j", 1, 2, 5, &rank1), STRATA_OK);
  if (rank0) CHECK_STATUS(strata_store_set(rank0, "store", "old", 3), STRATA_OK);
  /* while it lives, nobody else gets in: a later rank 1, another job, another size */
  CHECK_STATUS(strata_store_connect_job(addr, "j", 1, 2, 0.3, &refused), STRATA_ERR_TIMEOUT);
  CHECK_STATUS(strata_store_connect_job(addr, "k", 1, 2, 0.3, &refused), STRATA_ERR_TIMEOUT);
  CHECK_STATUS(strata_store_connect_job(addr, "j", 1, 3, 0.3, &refused), STRATA_ERR_TIMEOUT);
  CHECK(refused == NULL);
  /* a plain client (a split's communicator, a tool) is not a rank of the job: it gets in */
  strata_store *plain = NULL;
  CHECK_STATUS(strata_store_connect(addr, 5, &plain), STRATA_OK);
  strata_store_close(plain);
  /* a later rank 1 ends on the store that replaces this one, whether it reached this one first
   * (and waited for it to close) or not */
  late_rank late = {.addr = addr};
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, late_rank_main, &late) == 0);
  strata_store_close(rank0);
  strata_store_close(rank1);
  strata_store_server_stop(old);
  strata_store_server *replacement = NULL;
  CHECK_STATUS(strata_store_server_start_job(addr, "j", 2, &replacement), STRATA_OK);
  strata_store *new_rank0 = NULL;
  CHECK_STATUS(strata_store_connect_job(addr, "j", 0, 2, 5, &new_rank0), STRATA_OK);
  if (new_rank0) CHECK_STATUS(strata_store_set(new_rank0, "store", "new", 3), STRATA_OK);
  pthread_join(thread, NULL);
  CHECK_STATUS(late.status, STRATA_OK);
  CHECK(!strcmp(late.seen, "new"), "the later rank 1 read '%s' from its store", late.seen);
  strata_store_close(new_rank0);
  strata_store_server_stop(replacement);
  printf("a job's store admits each of its ranks once: %s\n", failures ? "FAILED" : "ok");
}

/* ---- init, allreduce, destroy, again ---- */

static void run_case(int nranks, int cycles, int shm, double deadline_s) {
  reinit_case c = {.nranks = nranks, .cycles = cycles, .shm = shm};
  int port = pick_port();
  CHECK(port > 0, "no free loopback port");
  if (port <= 0) return;
  snprintf(c.addr, sizeof c.addr, "127.0.0.1:%d", port);
  snprintf(c.job_id, sizeof c.job_id, "reinit-%d-%d-%d", (int)getpid(), nranks, shm);
  double t0 = now_s();
  int failed = strata_net_fixture_run(nranks, reinit_rank, &c, deadline_s, NULL);
  printf("%d ranks (%s), %d cycles of init/allreduce/destroy: %s in %.2f s\n", nranks,
         shm ? "shm" : "tcp", cycles, failed ? "FAILED" : "ok", now_s() - t0);
  CHECK(failed == 0, "%d of %d ranks failed", failed, nranks);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  run_case(2, 200, 1, 60);
  run_case(2, 50, 0, 60);
  run_case(3, 50, 1, 60);
  /* last, so that the ranks are forked from a process that never ran a thread */
  int port = pick_port();
  CHECK(port > 0, "no free loopback port");
  if (port > 0) check_store_rule(port);
  return failures != 0;
}
