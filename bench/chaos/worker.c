// SPDX-License-Identifier: Apache-2.0
/*
 * worker.c — one rank of the chaos harness (bench/chaos/chaos.py starts, kills, freezes and
 * adds these).
 *
 * The elastic loop of docs/elastic.md, checked exactly. Each worker has a persistent id
 * (CHAOS_ID) that survives renumbering; after every membership change the members allgather
 * (id, step), so each knows whose inputs the next allreduce sums and every member resumes at the
 * same step. Inputs are small integers derived from (id, step, element): their f32 sum over any
 * plausible group is exact, so a result is either right to the bit or wrong.
 *
 *   loop: allreduce (out of place) -> check -> agree(ok)
 *         all ok: next step; every CHAOS_GROW_EVERY steps, grow (admit joiners)
 *         else:   shrink (destroy the old communicator), then the same step again
 *
 * A worker started with STRATA_JOIN=1 enters at the members' next grow. A worker the others left
 * out (frozen past STRATA_TIMEOUT, then thawed) gets STRATA_ERR_EXCLUDED and exits with status 3:
 * it must never slip back into the group unnoticed.
 *
 * Everything observable goes out as JSON lines (CHAOS_LOG, default stdout), times in seconds of
 * CLOCK_REALTIME so the driver can line them up with its own kills. A call that runs longer than
 * STRATA_TIMEOUT + 5 s is a hang: the call reports it when it returns, and a watchdog thread
 * reports it while the call is still stuck (a call that never returns leaves that line only).
 * After each membership change and at the end (with no communicator left) the worker counts its
 * own fds, threads and strata memfd segments, so the driver can tell what dead communicators
 * left behind.
 *
 * Shared-state syncs (issue 28 point 3) would go between the allreduce and the agree, as one more
 * operation whose failure takes the same path; the worker does not run any.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <strata.h>

enum { EXIT_EXCLUDED = 3, EXIT_JOIN_FAILED = 4, MAX_MEMBERS = 256 };

/* Set by SIGTERM/SIGINT: a signal handler can only reach a file-scope flag. */
static volatile sig_atomic_t stop_requested;

typedef struct worker {
  int id;
  FILE *log;
  pthread_mutex_t log_lock;
  size_t count;   /* f32 elements per allreduce */
  int grow_every; /* steps between grows */
  double hang_s;  /* a call longer than this is a hang */
  double max_s;   /* stop on our own after this long (the driver may be gone) */
  double step_pause_s;
  strata_config cfg;
  strata_comm *comm;
  int64_t step;
  int nmembers;
  int64_t ids[MAX_MEMBERS];
  float *in, *out;
  /* what the watchdog looks at: the call in progress and since when */
  _Atomic(const char *) call;
  _Atomic int64_t call_start_ns;
  _Atomic int64_t call_reported_ns;
  int lone_reported;     /* said once that a group of one cannot grow */
  atomic_int finished;   /* the watchdog's cue to end: set once no call can run any more */
  double last_failure_t; /* when this worker last saw an operation fail (0: none pending) */
  int baseline_fds, baseline_threads;
} worker;

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_s(double seconds) {
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop_requested) {
  }
}

/* One JSON object per line: {"t":..,"id":..,"ev":"<event>",<fields>}. */
static void emit(worker *w, const char *event, const char *fmt, ...) {
  char fields[1024] = "";
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fields, sizeof fields, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_lock(&w->log_lock);
  fprintf(w->log, "{\"t\":%.6f,\"id\":%d,\"ev\":\"%s\"%s%s}\n", wall_s(), w->id, event,
          fields[0] ? "," : "", fields);
  fflush(w->log);
  pthread_mutex_unlock(&w->log_lock);
}

/* ---- resources: what a dead communicator could leave behind in this process ---- */

typedef struct resources {
  int fds, threads;
  int memfd_fds;  /* open strata segment memfds */
  int memfd_maps; /* distinct strata segments mapped */
  int stale_fds;  /* ... of a job id other than the live communicator's */
  int stale_maps;
} resources;

static int count_dir(const char *path) {
  DIR *dir = opendir(path);
  if (!dir) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(dir));)
    if (e->d_name[0] != '.') n++;
  closedir(dir);
  return n;
}

/* A segment is named "strata-<job id>-<rank>" (src/net/shm_setup.c); `live_job` is the live
 * communicator's job id, or NULL when there is none (then every segment is stale). */
static int is_stale(const char *segment, const char *live_job) {
  if (!live_job) return 1;
  size_t n = strlen(live_job);
  return strncmp(segment, live_job, n) != 0 || segment[n] != '-';
}

static resources count_resources(const char *live_job) {
  resources r = {0};
  r.fds = count_dir("/proc/self/fd") - 1; /* less the directory being read */
  r.threads = count_dir("/proc/self/task");
  DIR *dir = opendir("/proc/self/fd");
  for (struct dirent *e; dir && (e = readdir(dir));) {
    char path[PATH_MAX], target[PATH_MAX];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    const char *prefix = "/memfd:strata-";
    if (strncmp(target, prefix, strlen(prefix)) != 0) continue;
    r.memfd_fds++;
    r.stale_fds += is_stale(target + strlen(prefix), live_job);
  }
  if (dir) closedir(dir);
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[1024], seen[64][128];
  int nseen = 0;
  while (maps && fgets(line, sizeof line, maps)) {
    char *name = strstr(line, "/memfd:strata-");
    if (!name) continue;
    name += strlen("/memfd:strata-");
    name[strcspn(name, " \n")] = '\0';
    int known = 0;
    for (int i = 0; i < nseen && !known; i++) known = !strcmp(seen[i], name);
    if (known || nseen == 64) continue;
    snprintf(seen[nseen++], sizeof seen[0], "%s", name);
    r.memfd_maps++;
    r.stale_maps += is_stale(name, live_job);
  }
  if (maps) fclose(maps);
  return r;
}

static void emit_resources(worker *w, const char *event) {
  const char *job = w->comm ? strata_comm_config(w->comm)->job_id : NULL;
  resources r = count_resources(job);
  emit(w, event,
       "\"epoch\":%llu,\"size\":%d,\"fds\":%d,\"threads\":%d,\"memfd_fds\":%d,"
       "\"memfd_maps\":%d,\"stale_fds\":%d,\"stale_maps\":%d,\"baseline_fds\":%d,"
       "\"baseline_threads\":%d",
       w->comm ? (unsigned long long)strata_comm_epoch(w->comm) : 0ull,
       w->comm ? strata_comm_size(w->comm) : 0, r.fds, r.threads, r.memfd_fds, r.memfd_maps,
       r.stale_fds, r.stale_maps, w->baseline_fds, w->baseline_threads);
}

/* ---- timed calls and the watchdog ---- */

static void call_begin(worker *w, const char *name) {
  atomic_store(&w->call_start_ns, mono_ns());
  atomic_store(&w->call, name);
}

/* Returns the call's duration; logs a hang if it overran. */
static double call_end(worker *w, int status) {
  double took = (double)(mono_ns() - atomic_load(&w->call_start_ns)) * 1e-9;
  const char *name = atomic_load(&w->call);
  atomic_store(&w->call, (const char *)NULL);
  if (took > w->hang_s)
    emit(w, "hang", "\"call\":\"%s\",\"dur\":%.3f,\"status\":\"%s\",\"returned\":1", name, took,
         strata_err_name(status));
  return took;
}

static void *watchdog(void *arg) {
  worker *w = arg;
  while (!atomic_load(&w->finished)) {
    sleep_s(0.25);
    const char *name = atomic_load(&w->call);
    int64_t start = atomic_load(&w->call_start_ns);
    if (!name || atomic_load(&w->call_reported_ns) == start) continue;
    double running = (double)(mono_ns() - start) * 1e-9;
    if (running > w->hang_s) {
      atomic_store(&w->call_reported_ns, start);
      emit(w, "hang", "\"call\":\"%s\",\"dur\":%.3f,\"returned\":0", name, running);
    }
  }
  return NULL;
}

/* ---- the checked allreduce ---- */

/* Small positive integers: a sum over a few hundred members stays below 2^24, exact in f32. */
static float input(int64_t id, int64_t step, size_t i) {
  return (float)(((uint64_t)id * 7919u + (uint64_t)step * 104729u + i * 31u) % 4093u + 1u);
}

/* 1 if out[] holds exactly the members' sum; logs the first wrong element. */
static int check_sum(worker *w) {
  for (size_t i = 0; i < w->count; i++) {
    float want = 0;
    for (int m = 0; m < w->nmembers; m++) want += input(w->ids[m], w->step, i);
    if (w->out[i] != want) {
      emit(w, "wrong",
           "\"step\":%lld,\"epoch\":%llu,\"size\":%d,\"index\":%zu,\"got\":%.1f,"
           "\"want\":%.1f",
           (long long)w->step, (unsigned long long)strata_comm_epoch(w->comm), w->nmembers, i,
           (double)w->out[i], (double)want);
      return 0;
    }
  }
  for (size_t i = 0; i < w->count; i++)
    if (w->in[i] != input(w->id, w->step, i)) {
      emit(w, "wrong", "\"step\":%lld,\"what\":\"input changed\",\"index\":%zu", (long long)w->step,
           i);
      return 0;
    }
  return 1;
}

/* ---- membership ---- */

/* Everyone learns every member's id and resumes at the furthest step (a joiner knows none).
 * Returns 1 when the members agree it worked. */
static int sync_members(worker *w) {
  int n = strata_comm_size(w->comm);
  if (n > MAX_MEMBERS) return 0;
  int64_t mine[2] = {w->id, w->step}, all[2 * MAX_MEMBERS];
  call_begin(w, "allgather");
  int status = strata_allgather(w->comm, mine, all, 2, STRATA_I64);
  call_end(w, status);
  int ok = status == STRATA_OK;
  call_begin(w, "agree");
  int agreed = strata_comm_agree(w->comm, &ok);
  call_end(w, agreed);
  if (agreed == STRATA_ERR_EXCLUDED) return -1;
  if (agreed != STRATA_OK || !ok) {
    emit(w, "fail", "\"where\":\"members\",\"status\":\"%s\",\"agree\":\"%s\"",
         strata_err_name(status), strata_err_name(agreed));
    return 0;
  }
  w->nmembers = n;
  char ids[4096];
  size_t used = 0;
  ids[0] = '\0';
  for (int r = 0; r < n; r++) {
    w->ids[r] = all[2 * r];
    if (all[2 * r + 1] > w->step) w->step = all[2 * r + 1];
    used += (size_t)snprintf(ids + used, sizeof ids - used, "%s%lld", r ? "," : "",
                             (long long)all[2 * r]);
    if (used >= sizeof ids) used = sizeof ids - 1;
  }
  emit(w, "members", "\"epoch\":%llu,\"rank\":%d,\"size\":%d,\"step\":%lld,\"ids\":[%s]",
       (unsigned long long)strata_comm_epoch(w->comm), strata_comm_rank(w->comm), n,
       (long long)w->step, ids);
  emit_resources(w, "resources");
  return 1;
}

/* After a failure: shrink until a communicator of the survivors exists. A shrink whose new
 * communicator could not be made (a survivor died during it) is repeated on the same one.
 * Returns 1, or -1 when this worker was left out. */
static int shrink(worker *w) {
  for (int attempt = 1;; attempt++) {
    strata_comm *next = NULL;
    int old_size = strata_comm_size(w->comm);
    call_begin(w, "shrink");
    int status = strata_comm_shrink(w->comm, &next);
    double took = call_end(w, status);
    if (status == STRATA_ERR_EXCLUDED) {
      emit(w, "excluded", "\"where\":\"shrink\",\"dur\":%.3f", took);
      return -1;
    }
    if (status != STRATA_OK) {
      emit(w, "shrink_error", "\"status\":\"%s\",\"dur\":%.3f,\"attempt\":%d",
           strata_err_name(status), took, attempt);
      if (stop_requested || attempt >= 10) return 0;
      continue;
    }
    int failed[MAX_MEMBERS], nfailed = strata_comm_failed_ranks(w->comm, failed, MAX_MEMBERS);
    char failed_ids[1024] = "";
    size_t used = 0;
    for (int i = 0; i < nfailed && i < MAX_MEMBERS && used < sizeof failed_ids - 32; i++)
      used += (size_t)snprintf(failed_ids + used, sizeof failed_ids - used, "%s%lld", i ? "," : "",
                               failed[i] < w->nmembers ? (long long)w->ids[failed[i]] : -1ll);
    strata_comm_destroy(w->comm);
    w->comm = next;
    emit(w, "shrink", "\"dur\":%.3f,\"from\":%d,\"to\":%d,\"epoch\":%llu,\"failed_ids\":[%s]", took,
         old_size, strata_comm_size(next), (unsigned long long)strata_comm_epoch(next), failed_ids);
    return 1;
  }
}

/* ---- the loop ---- */

typedef enum outcome { STEP_DONE, STEP_FAILED, STEP_EXCLUDED } outcome;

static outcome one_step(worker *w) {
  for (size_t i = 0; i < w->count; i++) w->in[i] = input(w->id, w->step, i);
  double t0 = wall_s();
  call_begin(w, "allreduce");
  int status = strata_allreduce(w->comm, w->in, w->out, w->count, STRATA_F32, STRATA_SUM);
  double op_s = call_end(w, status);
  double returned_t = wall_s();
  int ok = status == STRATA_OK && check_sum(w);
  call_begin(w, "agree");
  int agreed = strata_comm_agree(w->comm, &ok);
  double agree_s = call_end(w, agreed);
  if (agreed == STRATA_ERR_EXCLUDED) {
    emit(w, "excluded", "\"where\":\"agree\",\"status\":\"%s\"", strata_err_name(status));
    return STEP_EXCLUDED;
  }
  if (agreed == STRATA_OK && ok) {
    emit(w, "op",
         "\"step\":%lld,\"epoch\":%llu,\"size\":%d,\"t0\":%.6f,\"op_s\":%.6f,"
         "\"agree_s\":%.6f",
         (long long)w->step, (unsigned long long)strata_comm_epoch(w->comm), w->nmembers, t0, op_s,
         agree_s);
    if (w->last_failure_t > 0) {
      emit(w, "recovered", "\"since_failure_s\":%.6f", wall_s() - w->last_failure_t);
      w->last_failure_t = 0;
    }
    w->step++;
    return STEP_DONE;
  }
  /* The time this worker learnt of the failure: its own call's error, or the agreement. */
  double detected_t = status != STRATA_OK ? returned_t : wall_s();
  if (w->last_failure_t == 0) w->last_failure_t = detected_t;
  emit(w, "fail",
       "\"where\":\"%s\",\"step\":%lld,\"epoch\":%llu,\"status\":\"%s\","
       "\"agree\":\"%s\",\"detected_t\":%.6f,\"op_s\":%.6f",
       status != STRATA_OK ? "allreduce" : "agree", (long long)w->step,
       (unsigned long long)strata_comm_epoch(w->comm), strata_err_name(status),
       strata_err_name(agreed), detected_t, op_s);
  return STEP_FAILED;
}

/* Admit joiners. Grow's outcome can differ between members (one saw a death during it, another
 * finished first), so the members agree on it before anyone moves to the new communicator:
 * either all go on with it, or all drop it and shrink the old one (its joiners then fail their
 * first membership exchange and join again). Returns 1 when the membership changed, 0 when not,
 * -1 on a failure, -2 when this worker was left out. */
static int grow(worker *w) {
  strata_comm *next = NULL;
  call_begin(w, "grow");
  int status = strata_comm_grow(w->comm, &next);
  double took = call_end(w, status);
  if (status == STRATA_ERR_UNSUPPORTED && strata_comm_size(w->comm) == 1) {
    /* a library that gives a group of one no store cannot admit anyone: go on alone, counted */
    if (!w->lone_reported) emit(w, "grow_unsupported", "\"size\":1");
    w->lone_reported = 1;
    return 0;
  }
  int ok = status == STRATA_OK;
  call_begin(w, "agree");
  int agreed = strata_comm_agree(w->comm, &ok);
  call_end(w, agreed);
  if (agreed == STRATA_ERR_EXCLUDED) {
    strata_comm_destroy(next);
    emit(w, "excluded", "\"where\":\"grow\",\"status\":\"%s\"", strata_err_name(status));
    return -2;
  }
  if (agreed != STRATA_OK || !ok) {
    strata_comm_destroy(next);
    if (w->last_failure_t == 0) w->last_failure_t = wall_s();
    emit(w, "fail",
         "\"where\":\"grow\",\"step\":%lld,\"epoch\":%llu,\"status\":\"%s\",\"agree\":\"%s\","
         "\"detected_t\":%.6f,\"op_s\":%.6f",
         (long long)w->step, (unsigned long long)strata_comm_epoch(w->comm),
         strata_err_name(status), strata_err_name(agreed), wall_s(), took);
    return -1;
  }
  if (!next) return 0;
  emit(w, "grow", "\"dur\":%.3f,\"from\":%d,\"to\":%d,\"epoch\":%llu", took,
       strata_comm_size(w->comm), strata_comm_size(next),
       (unsigned long long)strata_comm_epoch(next));
  strata_comm_destroy(w->comm);
  w->comm = next;
  return 1;
}

enum { RUN_REJOIN = -1 };

/* Returns the exit status, or RUN_REJOIN when a joiner's group fell apart before its first
 * membership exchange (the members dropped the grow that admitted it). */
static int run(worker *w, int joined) {
  int need_members = 1;
  double deadline = wall_s() + w->max_s;
  while (!stop_requested && wall_s() < deadline) {
    int failed = 0;
    if (need_members) {
      int synced = sync_members(w);
      if (synced <= 0 && joined) return RUN_REJOIN;
      if (synced < 0) return emit(w, "excluded", "\"where\":\"members\""), EXIT_EXCLUDED;
      need_members = !synced;
      failed = !synced;
      joined = 0;
    }
    if (!failed) {
      outcome o = one_step(w);
      if (o == STEP_EXCLUDED) return EXIT_EXCLUDED;
      failed = o == STEP_FAILED;
      if (!failed && w->step % w->grow_every == 0) {
        int grown = grow(w);
        if (grown == -2) return EXIT_EXCLUDED;
        failed = grown < 0;
        need_members = grown > 0;
      }
    }
    if (failed) {
      if (stop_requested) break;
      int shrunk = shrink(w);
      if (shrunk < 0) return EXIT_EXCLUDED;
      if (shrunk == 0) return emit(w, "gave_up", NULL), 1;
      need_members = 1;
    }
    if (w->step_pause_s > 0) sleep_s(w->step_pause_s);
  }
  return 0;
}

static double env_double(const char *name, double fallback) {
  const char *v = getenv(name);
  return v && *v ? strtod(v, NULL) : fallback;
}

static void on_stop(int sig) {
  (void)sig;
  stop_requested = 1;
}

int main(void) {
  worker w = {0};
  w.id = (int)env_double("CHAOS_ID", -1);
  w.count = (size_t)env_double("CHAOS_COUNT", 16384);
  w.grow_every = (int)env_double("CHAOS_GROW_EVERY", 10);
  w.max_s = env_double("CHAOS_MAX_S", 3600);
  w.step_pause_s = env_double("CHAOS_STEP_PAUSE_S", 0);
  const char *log_path = getenv("CHAOS_LOG");
  w.log = log_path && *log_path ? fopen(log_path, "a") : stdout;
  if (w.id < 0 || !w.log || w.count == 0 || w.grow_every <= 0) {
    fprintf(stderr, "chaos worker: needs CHAOS_ID >= 0, a writable CHAOS_LOG, CHAOS_COUNT > 0\n");
    return 2;
  }
  pthread_mutex_init(&w.log_lock, NULL);
  /* A worker whose driver is gone must not live on. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  struct sigaction sa = {.sa_handler = on_stop};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  strata_config_init(&w.cfg);
  char err[256] = "";
  if (strata_config_from_env(&w.cfg, err, sizeof err) != STRATA_OK) {
    fprintf(stderr, "chaos worker: %s\n", err);
    return 2;
  }
  w.hang_s = w.cfg.timeout_s + 5;
  w.in = malloc(w.count * sizeof *w.in);
  w.out = malloc(w.count * sizeof *w.out);
  pthread_t dog;
  pthread_create(&dog, NULL, watchdog, &w);
  /* What the process holds with no communicator: the end must come back to it. */
  resources base = count_resources(NULL);
  w.baseline_fds = base.fds;
  w.baseline_threads = base.threads;
  emit(&w, "start", "\"pid\":%d,\"join\":%d,\"timeout_s\":%.3f,\"count\":%zu", (int)getpid(),
       w.cfg.join, w.cfg.timeout_s, w.count);

  int rc = RUN_REJOIN;
  for (int attempt = 1; rc == RUN_REJOIN && !stop_requested; attempt++) {
    double t0 = wall_s();
    int status = strata_comm_init(&w.cfg, &w.comm);
    if (status != STRATA_OK) {
      emit(&w, "init_failed", "\"join\":%d,\"status\":\"%s\",\"dur\":%.3f", w.cfg.join,
           strata_err_name(status), wall_s() - t0);
      /* a joiner's admission fails with its grow (another joiner of the batch died): again */
      if (w.cfg.join && attempt < 20) continue;
      rc = w.cfg.join ? EXIT_JOIN_FAILED : 1;
      break;
    }
    emit(&w, w.cfg.join ? "joined" : "init",
         "\"dur\":%.3f,\"epoch\":%llu,\"rank\":%d,\"size\":%d,\"attempt\":%d", wall_s() - t0,
         (unsigned long long)strata_comm_epoch(w.comm), strata_comm_rank(w.comm),
         strata_comm_size(w.comm), attempt);
    rc = run(&w, w.cfg.join);
    if (rc == RUN_REJOIN) {
      emit(&w, "rejoin", "\"epoch\":%llu", (unsigned long long)strata_comm_epoch(w.comm));
      strata_comm_destroy(w.comm);
      w.comm = NULL;
      w.step = 0;
    }
  }
  if (rc == RUN_REJOIN) rc = 0;
  emit(&w, "stopping", "\"rc\":%d,\"step\":%lld", rc, (long long)w.step);
  strata_comm_destroy(w.comm);
  w.comm = NULL;
  atomic_store(&w.finished, 1);
  pthread_join(dog, NULL);
  /* The library may finish tearing threads down just after destroy returns. */
  resources end = count_resources(NULL);
  for (int i = 0; i < 20 && (end.threads > w.baseline_threads || end.fds > w.baseline_fds); i++) {
    sleep_s(0.05);
    end = count_resources(NULL);
  }
  /* the watchdog thread is gone now: one thread fewer than the baseline counted */
  emit(&w, "final",
       "\"rc\":%d,\"fds\":%d,\"threads\":%d,\"memfd_fds\":%d,\"memfd_maps\":%d,"
       "\"leaked_fds\":%d,\"leaked_threads\":%d",
       rc, end.fds, end.threads, end.memfd_fds, end.memfd_maps, end.fds - w.baseline_fds,
       end.threads - (w.baseline_threads - 1));
  free(w.in);
  free(w.out);
  if (w.log != stdout) fclose(w.log);
  return rc;
}
