// SPDX-License-Identifier: Apache-2.0
/*
 * scale_rank.c — one rank of bench/scale.sh: how long joining a job takes, how long the first
 * 4-byte allreduce takes, and what the rank holds afterwards (open descriptors, memory).
 *
 * Built twice from this file: against strata (`strata launch -n N scale_rank DIR`) and, with
 * -DSCALE_MPI, against MPI (`mpirun -np N scale_rank_mpi DIR`), so both sides run the very same
 * steps: init, one float summed over the ranks (checked), the measurements, one more allreduce
 * so that no rank tears its connections down before every rank has counted its own, finalize.
 *
 * Each rank writes one line to DIR/<rank>.txt (a file each: nothing to gather, and a rank that
 * hangs leaves the others' figures readable):
 *   rank nranks start_epoch_s init_end_epoch_s init_s allreduce_s fds rss_kb hwm_kb pss_kb
 *   store_requests store_bytes import_s parent_rss_kb parent_hwm_kb
 * (import_s is 0: only Python ranks pay an import, bench/scale_gloo.py). parent_* is the
 * launcher's memory as rank 0 sees it after the first allreduce (-1 on other ranks): under
 * `strata launch` the launcher serves the store, so this is the store's memory with every rank
 * connected. start_epoch_s is taken at main's entry, so the script can tell the launch (process
 * start) from the init call. fds counts /proc/self/fd after the first allreduce, the descriptors a
 * lazy or an eager transport holds for its peers at that point.
 *
 * With -c (strata only), the rank joins through strata_comm_init_store with a store that counts
 * what the library asks of it (requests, and bytes both ways: keys, values and the fixed header of
 * every request and reply, STORE_FRAME_BYTES) and forwards everything to the launcher's store
 * through the public client. That measures the bootstrap's traffic whatever build runs it — the
 * figure the start-up model (src/model/startup.c) predicts. Counts cover init and the first
 * allreduce.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef SCALE_MPI
#include <mpi.h>
#else
#include "strata.h"
#endif

/* The request/reply header of the store's wire format: a length, an id, an op or a status. */
#define STORE_FRAME_BYTES 16

static double now_s(int clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int count_fds(void) {
  DIR *dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dir)))
    if (e->d_name[0] != '.') n++;
  closedir(dir);
  return n - 1; /* the directory's own descriptor */
}

static long read_kb(const char *path, const char *field) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  size_t len = strlen(field);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, len)) {
      kb = strtol(line + len, NULL, 10);
      break;
    }
  fclose(f);
  return kb;
}

#ifndef SCALE_MPI
typedef struct counting_store {
  strata_store *inner;
  pthread_mutex_t lock; /* the public client is one connection: one request at a time */
  long requests, bytes;
} counting_store;

static void count(counting_store *c, size_t out_bytes, size_t in_bytes) {
  c->requests++;
  c->bytes += (long)(2 * STORE_FRAME_BYTES + out_bytes + in_bytes);
}

static int count_set(void *context, const char *key, const void *value, size_t len) {
  counting_store *c = context;
  pthread_mutex_lock(&c->lock);
  int status = strata_store_set(c->inner, key, value, len);
  count(c, strlen(key) + len, 0);
  pthread_mutex_unlock(&c->lock);
  return status;
}

static int count_get(void *context, const char *key, void **value, size_t *len, double timeout_s) {
  counting_store *c = context;
  pthread_mutex_lock(&c->lock);
  int status = strata_store_get(c->inner, key, value, len, timeout_s);
  count(c, strlen(key), status == STRATA_OK ? *len : 0);
  pthread_mutex_unlock(&c->lock);
  return status;
}

static int count_add(void *context, const char *key, int64_t delta, int64_t *result) {
  counting_store *c = context;
  pthread_mutex_lock(&c->lock);
  int status = strata_store_add(c->inner, key, delta, result);
  count(c, strlen(key) + 8, 8);
  pthread_mutex_unlock(&c->lock);
  return status;
}

static int count_set_if_absent(void *context, const char *key, const void *value, size_t len,
                               int *was_set) {
  counting_store *c = context;
  pthread_mutex_lock(&c->lock);
  int status = strata_store_set_if_absent(c->inner, key, value, len, was_set);
  count(c, strlen(key) + len, 1);
  pthread_mutex_unlock(&c->lock);
  return status;
}
#endif

int main(int argc, char **argv) {
  double start_epoch_s = now_s(CLOCK_REALTIME);
  int counted = argc > 2 && !strcmp(argv[1], "-c");
  if (argc != 2 + counted) {
    fprintf(stderr, "usage: scale_rank [-c] OUT_DIR\n");
    return 2;
  }
  const char *dir = argv[1 + counted];
  int rank = 0, nranks = 0;
  long requests = -1, bytes = -1;
  float value = 0, sum = 0;
  double t0 = now_s(CLOCK_MONOTONIC);
#ifdef SCALE_MPI
  (void)counted;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
#define ALLREDUCE(in, out) MPI_Allreduce(in, out, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)
#else
  strata_comm *comm = NULL;
  counting_store store = {.lock = PTHREAD_MUTEX_INITIALIZER};
  strata_config cfg;
  strata_config_init(&cfg);
  char err[256] = "";
  int status = strata_config_from_env(&cfg, err, sizeof err);
  if (status == STRATA_OK && counted) {
    status = strata_store_connect_auth(cfg.store_addr, cfg.secret, cfg.job_id, cfg.timeout_s,
                                       &store.inner);
    strata_store_ops ops = {&store, count_set, count_get, count_add, count_set_if_absent};
    if (status == STRATA_OK) status = strata_comm_init_store(&cfg, &ops, &comm);
  } else if (status == STRATA_OK) {
    status = strata_comm_init(&cfg, &comm);
  }
  if (status != STRATA_OK) {
    fprintf(stderr, "scale_rank: init failed: %s %s\n", strata_strerror(status), err);
    return 1;
  }
  rank = strata_comm_rank(comm);
  nranks = strata_comm_size(comm);
#define ALLREDUCE(in, out)                                                        \
  do {                                                                            \
    int s_ = strata_allreduce(comm, in, out, 1, STRATA_F32, STRATA_SUM);          \
    if (s_ != STRATA_OK) {                                                        \
      fprintf(stderr, "scale_rank: allreduce failed: %s\n", strata_strerror(s_)); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)
#endif
  double t1 = now_s(CLOCK_MONOTONIC), init_end_epoch_s = now_s(CLOCK_REALTIME);
  value = (float)(rank + 1);
  ALLREDUCE(&value, &sum);
  double t2 = now_s(CLOCK_MONOTONIC);
  float want = (float)nranks * (float)(nranks + 1) / 2;
  if (sum != want) {
    fprintf(stderr, "scale_rank: rank %d: allreduce gave %g, expected %g\n", rank, sum, want);
    return 1;
  }
#ifndef SCALE_MPI
  if (counted) {
    pthread_mutex_lock(&store.lock);
    requests = store.requests;
    bytes = store.bytes;
    pthread_mutex_unlock(&store.lock);
  }
#endif
  int fds = count_fds();
  long rss_kb = read_kb("/proc/self/status", "VmRSS:");
  long hwm_kb = read_kb("/proc/self/status", "VmHWM:");
  long pss_kb = read_kb("/proc/self/smaps_rollup", "Pss:");
  long parent_rss_kb = -1, parent_hwm_kb = -1;
  char path[4096];
  if (rank == 0) {
    snprintf(path, sizeof path, "/proc/%d/status", (int)getppid());
    parent_rss_kb = read_kb(path, "VmRSS:");
    parent_hwm_kb = read_kb(path, "VmHWM:");
  }
  snprintf(path, sizeof path, "%s/%d.txt", dir, rank);
  FILE *out = fopen(path, "w");
  if (!out) {
    fprintf(stderr, "scale_rank: %s: %s\n", path, strerror(errno));
    return 1;
  }
  fprintf(out, "%d %d %.6f %.6f %.6f %.6f %d %ld %ld %ld %ld %ld 0 %ld %ld\n", rank, nranks,
          start_epoch_s, init_end_epoch_s, t1 - t0, t2 - t1, fds, rss_kb, hwm_kb, pss_kb, requests,
          bytes, parent_rss_kb, parent_hwm_kb);
  fclose(out);
  ALLREDUCE(&value, &sum); /* everyone has counted before anyone closes */
#ifdef SCALE_MPI
  MPI_Finalize();
#else
  strata_comm_destroy(comm);
  strata_store_close(store.inner);
#endif
  return 0;
}
