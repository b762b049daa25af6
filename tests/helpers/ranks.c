/* ranks.c — see ranks.h. */
#include "helpers/ranks.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot/store.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int run_child(int rank, int nranks, const char *addr, const strata_test_ranks_opts *o,
                     strata_test_body body, void *arg) {
  strata_config cfg;
  strata_config_init(&cfg);
  cfg.rank = rank;
  cfg.world_size = nranks;
  cfg.local_rank = rank;
  snprintf(cfg.store_addr, sizeof cfg.store_addr, "%s", addr);
  cfg.store_external = 1;
  snprintf(cfg.job_id, sizeof cfg.job_id, "test-%d", (int)getppid());
  snprintf(cfg.secret, sizeof cfg.secret, "%s", o->secret ? o->secret : "test-secret");
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

int strata_test_run_ranks(int nranks, const strata_test_ranks_opts *opts, strata_test_body body,
                          void *arg) {
  strata_test_ranks_opts o = {0};
  if (opts) o = *opts;
  strata_store_server *server = NULL;
  if (strata_store_server_start("127.0.0.1:0", &server) != STRATA_OK) {
    fprintf(stderr, "ranks: cannot start the store\n");
    return nranks;
  }
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", strata_store_server_port(server));
  fflush(NULL);
  pid_t *pids = calloc((size_t)nranks, sizeof(pid_t));
  for (int r = 0; r < nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm((unsigned)((o.deadline_s > 0 ? o.deadline_s : 120) + 5));
      int rc = run_child(r, nranks, addr, &o, body, arg);
      fflush(NULL);
      _exit(rc ? 1 : 0);
    }
  }
  double deadline = now_s() + (o.deadline_s > 0 ? o.deadline_s : 120);
  int failed = 0, left = nranks;
  while (left > 0) {
    int wstatus;
    pid_t pid = waitpid(-1, &wstatus, WNOHANG);
    if (pid > 0) {
      int r = 0;
      while (r < nranks && pids[r] != pid) r++;
      if (r == nranks) continue;
      pids[r] = 0;
      left--;
      if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        failed++;
        if (WIFSIGNALED(wstatus))
          fprintf(stderr, "ranks: rank %d died of signal %d\n", r, WTERMSIG(wstatus));
        else
          fprintf(stderr, "ranks: rank %d exited with %d\n", r, WEXITSTATUS(wstatus));
      }
      continue;
    }
    if (now_s() > deadline) {
      for (int r = 0; r < nranks; r++)
        if (pids[r] > 0) {
          fprintf(stderr, "ranks: rank %d still running at the deadline: killed\n", r);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          pids[r] = 0;
          failed++;
          left--;
        }
      break;
    }
    usleep(2000);
  }
  free(pids);
  strata_store_server_stop(server);
  return failed;
}
