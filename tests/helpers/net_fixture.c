// SPDX-License-Identifier: Apache-2.0
/* net_fixture.c — see net_fixture.h. */
#include "helpers/net_fixture.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"

static void run_child(const strata_net_fixture_rank *r, strata_net_fixture_fn fn,
                      double deadline_s) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  alarm((unsigned)deadline_s + 2);
  int rc = fn(r);
  fflush(NULL);
  _exit(rc);
}

static void describe(int rank, int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    printf("  process %d exited with %d\n", rank, WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    printf("  process %d killed by signal %d\n", rank, WTERMSIG(status));
}

/* The store runs in its own process: the parent stays single-threaded, so forking the ranks
 * never copies a lock held by a server thread (ASan's allocator is not fork-safe). Returns the
 * store process, its port in *port, or -1. */
static pid_t store_process_start(int *port) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(pipefd[0]);
    strata_store_server *server = NULL;
    /* admits the ranks of strata_net_fixture_config and strata_test_run_ranks (ranks.c) */
    int p = strata_store_server_start_auth("127.0.0.1:0", STRATA_NET_FIXTURE_SECRET,
                                           STRATA_NET_FIXTURE_JOB, &server) == STRATA_OK
                ? strata_store_server_port(server)
                : -1;
    if (write(pipefd[1], &p, sizeof p) != (ssize_t)sizeof p) _exit(1);
    for (;;) pause(); /* until the parent kills us */
  }
  close(pipefd[1]);
  int got = pid > 0 && read(pipefd[0], port, sizeof *port) == (ssize_t)sizeof *port;
  close(pipefd[0]);
  if (got && *port > 0) return pid;
  if (pid > 0) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
  return -1;
}

int strata_net_fixture_run(int nprocs, strata_net_fixture_fn fn, void *arg, double deadline_s,
                           int *statuses) {
  /* The job key is memory-hard to derive (core/secret.c) and cached per process: derived here
   * once, the store and every rank forked below inherit it instead of each paying for it. */
  uint8_t key[STRATA_SECRET_KEY_BYTES];
  if (strata_secret_key(STRATA_NET_FIXTURE_SECRET, STRATA_NET_FIXTURE_JOB, key) == STRATA_OK)
    memset(key, 0, sizeof key);
  int port = 0;
  pid_t store_pid = store_process_start(&port);
  if (store_pid < 0) {
    printf("  fixture: cannot start the store\n");
    return nprocs;
  }
  strata_net_fixture_rank r = {.nprocs = nprocs, .arg = arg};
  snprintf(r.store_addr, sizeof r.store_addr, "127.0.0.1:%d", port);
  pid_t *pids = calloc((size_t)nprocs, sizeof *pids);
  int *status = calloc((size_t)nprocs, sizeof *status);
  fflush(NULL);
  for (int i = 0; i < nprocs; i++) {
    r.rank = i;
    pids[i] = fork();
    if (pids[i] == 0) run_child(&r, fn, deadline_s);
  }
  int failed = 0, left = nprocs;
  double deadline = strata_now_s() + deadline_s;
  while (left > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid == store_pid) {
      printf("  fixture: the store process died\n");
      store_pid = -1;
      continue;
    }
    if (pid > 0) {
      for (int i = 0; i < nprocs; i++)
        if (pids[i] == pid) status[i] = st, pids[i] = 0, left--;
      continue;
    }
    if (strata_now_s() > deadline) {
      for (int i = 0; i < nprocs; i++) {
        if (pids[i] <= 0) continue;
        printf("  process %d still running at the %.0f s deadline: killed\n", i, deadline_s);
        kill(pids[i], SIGKILL);
        waitpid(pids[i], &status[i], 0);
        status[i] = -1;
        failed++;
        pids[i] = 0;
        left--;
      }
      break;
    }
    usleep(2000);
  }
  for (int i = 0; i < nprocs; i++) {
    if (status[i] == -1) continue;
    if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0) failed++, describe(i, status[i]);
  }
  if (statuses) memcpy(statuses, status, (size_t)nprocs * sizeof *status);
  free(pids);
  free(status);
  if (store_pid > 0) kill(store_pid, SIGKILL), waitpid(store_pid, NULL, 0);
  return failed;
}

void strata_net_fixture_config(const strata_net_fixture_rank *r, int nranks, strata_config *cfg) {
  strata_config_init(cfg);
  cfg->rank = r->rank;
  cfg->world_size = nranks;
  cfg->local_rank = r->rank;
  snprintf(cfg->store_addr, sizeof cfg->store_addr, "%s", r->store_addr);
  cfg->store_external = 1;
  snprintf(cfg->job_id, sizeof cfg->job_id, "%s", STRATA_NET_FIXTURE_JOB);
  snprintf(cfg->secret, sizeof cfg->secret, "%s", STRATA_NET_FIXTURE_SECRET);
  snprintf(cfg->advertise_host, sizeof cfg->advertise_host, "127.0.0.1");
  cfg->timeout_s = 10;
  cfg->shm_enabled = 0;
  cfg->tcp_streams = 1;
  const char *log = getenv("STRATA_LOG");
  if (log && !strcmp(log, "info")) cfg->log_level = STRATA_LOG_INFO;
  if (log && !strcmp(log, "debug")) cfg->log_level = STRATA_LOG_DEBUG;
  if (log && !strcmp(log, "trace")) cfg->log_level = STRATA_LOG_TRACE;
  strata_log_set_level(cfg->log_level);
}

int strata_net_fixture_store(const strata_net_fixture_rank *r, strata_store **out) {
  return strata_store_connect_auth(r->store_addr, STRATA_NET_FIXTURE_SECRET, STRATA_NET_FIXTURE_JOB,
                                   10.0, out);
}

void strata_net_fixture_count_done(strata_xfer *x) {
  (*(int *)x->user)++;
}

int strata_net_fixture_drive(strata_transport *t, const int *counter, int target, double timeout_s,
                             int *failed_peer) {
  double deadline = strata_now_s() + timeout_s;
  while (*counter < target) {
    int status = t->ops->progress(t, failed_peer);
    if (status != STRATA_OK) return status;
    if (*counter >= target) break;
    if (strata_now_s() > deadline) return STRATA_ERR_TIMEOUT;
    t->ops->wait(t, 1);
  }
  return STRATA_OK;
}

unsigned char strata_net_fixture_byte(int src, int msg, size_t i) {
  uint64_t v = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)src * 0x100000001B3ull +
               (uint64_t)msg * 0xC2B2AE3D27D4EB4Full;
  return (unsigned char)(v >> 29);
}

void strata_net_fixture_fill(void *buf, size_t bytes, int src, int msg) {
  unsigned char *b = buf;
  for (size_t i = 0; i < bytes; i++) b[i] = strata_net_fixture_byte(src, msg, i);
}

size_t strata_net_fixture_check(const void *buf, size_t bytes, int src, int msg) {
  const unsigned char *b = buf;
  for (size_t i = 0; i < bytes; i++)
    if (b[i] != strata_net_fixture_byte(src, msg, i)) return i;
  return (size_t)-1;
}
