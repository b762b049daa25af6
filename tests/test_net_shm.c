// SPDX-License-Identifier: Apache-2.0
/*
 * test_net_shm.c — the shared-memory transport, with real processes.
 *
 * A child process serves the store; each job forks N ranks that open the transport
 * (src/net/shm_*.c) and run one scenario: every pair exchanging messages of many sizes in both
 * directions at once, fused reductions (f32, i32, and a 12-byte element that straddles the ring's
 * end), tag and size mismatches, a peer killed mid-transfer, an abort, partial locality, bad
 * arguments, a peer that never opens, and a /dev/shm too small for a segment. Each scenario runs
 * with cross-memory attach and with STRATA_SHM_CMA=0 (everything inline); the exchange and the
 * reductions run once more with send buffers from strata_mem_alloc, which the receiver must read
 * through its mapping (more regions than a peer keeps mapped, so mappings are dropped and made
 * again). At the end /dev/shm must hold nothing of ours.
 *
 * STRATA_TEST_QUICK=1 (the sanitizer builds) runs every scenario with the largest messages cut
 * to QUICK_LARGE_BYTES: still larger than a ring, a CMA slice and a reduce block, so inline
 * streaming, sliced pulls, mapped pulls, blocked fused reductions, mismatches, aborts and deaths
 * all run, in a fraction of the time the 16 MiB messages take under ThreadSanitizer. The exchange
 * then runs with 2 and 3 ranks, not 4 (no code path needs the fourth).
 *
 * With STRATA_SHM_BENCH=1 it instead measures 8-byte ping-pong latency and large-message
 * bandwidth between two ranks, next to memcpy on this machine (numbers, not assertions).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot/store.h"
#include "core/core.h"
#include "net/shm.h"
#include "helpers/check.h"

#define MAX_RANKS 8
/* The largest message under STRATA_TEST_QUICK: more than a ring (SHM_RING_BYTES), two CMA
 * slices (SHM_CMA_SLICE_BYTES) and many reduce blocks (SHM_REDUCE_BLOCK_BYTES), an odd size. */
#define QUICK_LARGE_BYTES ((1u << 20) + (1u << 18) + 20)
#define CHILD_ALARM_S 60

static char store_addr[64];
static int job_counter;
static int jobs_run;
/* A job may expect strata_shm_open to fail with open_fail_status on one rank (or -1: all). */
static int open_fail_status = STRATA_OK;
static int open_fail_rank = -1;
static double open_timeout_s = 10.0;
static int registered; /* send buffers from strata_mem_alloc */
static int quick;      /* STRATA_TEST_QUICK: see the top of the file */

/* ---- the job harness ---- */

typedef struct job {
  int rank, nranks;
  strata_transport *t;
  const void *arg;
  strata_store *store; /* to open more transports */
  const strata_config *cfg;
  const int *is_local;
} job;

typedef int (*scenario_fn)(job *j);

/* Which ranks a rank considers local: all, unless the scenario says otherwise. */
typedef void (*locality_fn)(int rank, int nranks, int *is_local);

static int child_main(int rank, int nranks, const char *job_id, scenario_fn fn, locality_fn loc,
                      const void *arg) {
  alarm(CHILD_ALARM_S);
  strata_store *store = NULL;
  int rc = strata_store_connect(store_addr, 10.0, &store);
  if (rc != STRATA_OK) {
    fprintf(stderr, "rank %d: store connect: %s\n", rank, strata_strerror(rc));
    return 1;
  }
  strata_config cfg;
  memset(&cfg, 0, sizeof cfg);
  snprintf(cfg.job_id, sizeof cfg.job_id, "%s", job_id);
  cfg.timeout_s = open_timeout_s;
  cfg.shm_cma = getenv("STRATA_SHM_CMA") == NULL; /* the test toggles the knob per scenario */
  int is_local[MAX_RANKS];
  for (int q = 0; q < nranks; q++) is_local[q] = 1;
  if (loc) loc(rank, nranks, is_local);
  char err[256];
  job j = {.rank = rank,
           .nranks = nranks,
           .arg = arg,
           .store = store,
           .cfg = &cfg,
           .is_local = is_local};
  rc = strata_shm_open(&cfg, rank, nranks, store, is_local, &j.t, err, sizeof err);
  if (open_fail_status != STRATA_OK && (open_fail_rank < 0 || rank == open_fail_rank)) {
    strata_store_close(store);
    if (rc == STRATA_OK) j.t->ops->destroy(j.t);
    CHECK_OR_RETURN(rc == open_fail_status && err[0], "open: %s (%s), want %s", strata_err_name(rc),
                    err, strata_err_name(open_fail_status));
    return 0;
  }
  if (rc != STRATA_OK) {
    fprintf(stderr, "rank %d: strata_shm_open: %s (%s)\n", rank, strata_strerror(rc), err);
    strata_store_close(store);
    return 1;
  }
  int result = fn(&j);
  j.t->ops->destroy(j.t);
  strata_store_close(store);
  return result;
}

/* Fork nranks ranks; killed_rank (or -1) is expected to die by SIGKILL. Returns 0 if all passed. */
static int run_job(const char *label, int nranks, scenario_fn fn, locality_fn loc, const void *arg,
                   int killed_rank) {
  char job_id[64];
  snprintf(job_id, sizeof job_id, "shmtest-%d-%d", (int)getpid(), job_counter++);
  pid_t pids[MAX_RANKS];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0)
      exit(child_main(r, nranks, job_id, fn, loc, arg)); /* exit: LSan checks the child */
  }
  int bad = 0;
  for (int r = 0; r < nranks; r++) {
    int status = 0;
    while (waitpid(pids[r], &status, 0) < 0 && errno == EINTR) {
    }
    int ok = r == killed_rank ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                              : WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) {
      fprintf(stderr, "FAIL %s: rank %d %s %d\n", label, r,
              WIFSIGNALED(status) ? "killed by signal" : "exited with",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      bad = 1;
    }
  }
  printf("%s %s (%d ranks, CMA %s)\n", bad ? "FAIL" : "ok  ", label, nranks,
         getenv("STRATA_SHM_CMA") ? "off" : "on");
  failures += bad;
  jobs_run++;
  return bad;
}

/* ---- driving transfers ---- */

static void on_done(strata_xfer *x) {
  (*(int *)x->user)--;
}

typedef struct drive_result {
  int progress_rc; /* first error progress() returned */
  int failed_peer;
  double elapsed_s;
} drive_result;

/* Progress until *remaining reaches 0 or timeout_s passes. Returns 0 if all completed. */
static int drive(strata_transport *t, int *remaining, double timeout_s, drive_result *res) {
  double start = strata_now_s();
  drive_result local = {STRATA_OK, -1, 0};
  for (;;) {
    int fp = -1;
    int rc = t->ops->progress(t, &fp);
    if (rc != STRATA_OK && local.progress_rc == STRATA_OK) {
      local.progress_rc = rc;
      local.failed_peer = fp;
    }
    local.elapsed_s = strata_now_s() - start;
    if (*remaining == 0 || local.elapsed_s > timeout_s) break;
    t->ops->wait(t, 5);
  }
  if (res) *res = local;
  return *remaining == 0 ? 0 : 1;
}

static void xfer_init(strata_xfer *x, int peer, uint64_t tag, void *buf, uint64_t bytes,
                      int *counter) {
  memset(x, 0, sizeof *x);
  x->peer = peer;
  x->tag = tag;
  x->buf = buf;
  x->bytes = bytes;
  x->done = on_done;
  x->user = counter;
  x->status = 12345; /* must be overwritten */
}

static uint8_t pattern_byte(int src, int dst, int k, uint64_t i) {
  return (uint8_t)((i * 131u) ^ (i >> 9) ^ (uint64_t)(src * 29 + dst * 7 + k * 13));
}

static void pattern_fill(uint8_t *buf, uint64_t n, int src, int dst, int k) {
  for (uint64_t i = 0; i < n; i++) buf[i] = pattern_byte(src, dst, k, i);
}

/* Index of the first wrong byte, or -1. */
static int64_t pattern_check(const uint8_t *buf, uint64_t n, int src, int dst, int k) {
  for (uint64_t i = 0; i < n; i++)
    if (buf[i] != pattern_byte(src, dst, k, i)) return (int64_t)i;
  return -1;
}

/* ---- scenario: every pair exchanges every size, both ways, many in flight ---- */

/* The last size is cut to QUICK_LARGE_BYTES under STRATA_TEST_QUICK (main). */
static uint64_t exchange_sizes[] = {0, 1, 7, 1000, 65536, (1u << 20) + 3, 16u << 20};
#define NSIZES (sizeof exchange_sizes / sizeof exchange_sizes[0])
#define REPS 2

typedef struct msg_slot {
  strata_xfer x;
  uint8_t *buf;
} msg_slot;

/* With registered send buffers and CMA on, every large message (at least `largest` bytes from
 * each peer) must have been read through the mapping; with malloc'd ones, none. */
static int check_mapped(job *j, uint64_t largest) {
  uint64_t mapped = strata_shm_mapped_bytes(j->t);
  int cma = strata_shm_uses_cma(j->t, j->rank == 0 ? 1 : 0);
  if (registered && cma)
    CHECK_OR_RETURN(mapped >= largest * (uint64_t)(j->nranks - 1),
                    "rank %d: only %llu bytes mapped", j->rank, (unsigned long long)mapped);
  else
    CHECK_OR_RETURN(mapped == 0, "rank %d: %llu bytes mapped from malloc'd buffers", j->rank,
                    (unsigned long long)mapped);
  return 0;
}

static int scenario_exchange(job *j) {
  int n = j->nranks, me = j->rank, per_peer = (int)(REPS * NSIZES);
  int total = (n - 1) * per_peer;
  msg_slot *sends = calloc((size_t)total, sizeof *sends);
  msg_slot *recvs = calloc((size_t)total, sizeof *recvs);
  CHECK_OR_RETURN(sends && recvs, "out of memory");
  int remaining = 2 * total;
  for (int q = 0, s = 0; q < n; q++) {
    if (q == me) continue;
    for (int k = 0; k < per_peer; k++, s++) {
      uint64_t bytes = exchange_sizes[k % NSIZES];
      sends[s].buf = strata_mem_buffer(bytes ? bytes : 1, registered);
      recvs[s].buf = malloc(bytes ? bytes : 1);
      CHECK_OR_RETURN(sends[s].buf && recvs[s].buf, "out of memory");
      pattern_fill(sends[s].buf, bytes, me, q, k);
      memset(recvs[s].buf, 0xee, bytes);
      xfer_init(&sends[s].x, q, 0x1000u + (uint64_t)k, sends[s].buf, bytes, &remaining);
      xfer_init(&recvs[s].x, q, 0x1000u + (uint64_t)k, recvs[s].buf, bytes, &remaining);
    }
  }
  /* First repetition's receives, then every send, then (after some progress, so records wait in
   * the rings with no receive posted) the second repetition's receives. */
  for (int s = 0; s < total; s++)
    if (s % per_peer < (int)NSIZES)
      CHECK_OR_RETURN(j->t->ops->post_recv(j->t, &recvs[s].x) == STRATA_OK, "post_recv %d", s);
  for (int s = 0; s < total; s++)
    CHECK_OR_RETURN(j->t->ops->post_send(j->t, &sends[s].x) == STRATA_OK, "post_send %d", s);
  for (int i = 0; i < 50; i++) {
    int fp;
    CHECK_OR_RETURN(j->t->ops->progress(j->t, &fp) == STRATA_OK, "progress");
  }
  for (int s = 0; s < total; s++)
    if (s % per_peer >= (int)NSIZES)
      CHECK_OR_RETURN(j->t->ops->post_recv(j->t, &recvs[s].x) == STRATA_OK, "post_recv %d", s);
  drive_result res;
  CHECK_OR_RETURN(drive(j->t, &remaining, 30.0, &res) == 0, "rank %d: %d transfers still pending",
                  me, remaining);
  CHECK_OR_RETURN(res.progress_rc == STRATA_OK, "progress returned %s",
                  strata_err_name(res.progress_rc));
  for (int q = 0, s = 0; q < n; q++) {
    if (q == me) continue;
    for (int k = 0; k < per_peer; k++, s++) {
      uint64_t bytes = exchange_sizes[k % NSIZES];
      CHECK_OR_RETURN(sends[s].x.status == STRATA_OK, "send to %d #%d: %d", q, k,
                      sends[s].x.status);
      CHECK_OR_RETURN(recvs[s].x.status == STRATA_OK, "recv from %d #%d: %d", q, k,
                      recvs[s].x.status);
      int64_t bad = pattern_check(recvs[s].buf, bytes, q, me, k);
      CHECK_OR_RETURN(bad < 0, "rank %d: message %d (%llu bytes) from %d wrong at byte %lld", me, k,
                      (unsigned long long)bytes, q, (long long)bad);
      strata_mem_buffer_free(sends[s].buf, registered);
      free(recvs[s].buf);
    }
  }
  free(sends);
  free(recvs);
  return check_mapped(j, exchange_sizes[NSIZES - 1]);
}

/* ---- scenario: fused receive-reduce ---- */

static void sum_f32(void *dst, const void *a, const void *b, size_t count) {
  float *d = dst;
  const float *x = a, *y = b;
  for (size_t i = 0; i < count; i++) d[i] = x[i] + y[i];
}

static void sum_i32(void *dst, const void *a, const void *b, size_t count) {
  int32_t *d = dst;
  const int32_t *x = a, *y = b;
  for (size_t i = 0; i < count; i++) d[i] = (int32_t)((uint32_t)x[i] + (uint32_t)y[i]);
}

/* A 12-byte element (three floats): its elements straddle the ring's end in inline mode. */
static void sum_vec3(void *dst, const void *a, const void *b, size_t count) {
  sum_f32(dst, a, b, count * 3);
}

typedef struct reduce_case {
  strata_reduce_fn fn;
  uint32_t elem_size;
  uint64_t count;
  int in_place;
} reduce_case;

/* Counts above QUICK_LARGE_BYTES are cut to it under STRATA_TEST_QUICK (main). */
static reduce_case reduce_cases[] = {
    {sum_f32, 4, 0, 0},       {sum_f32, 4, 3, 0},        {sum_f32, 4, 5000, 0},
    {sum_f32, 4, 300001, 0},  {sum_f32, 4, 4194305, 1},  {sum_i32, 4, 7, 1},
    {sum_i32, 4, 1000003, 0}, {sum_vec3, 12, 100003, 0}, {sum_vec3, 12, 5, 1},
};
#define NREDUCE (sizeof reduce_cases / sizeof reduce_cases[0])

/* Element value i (as i32 or float words) sent by src to dst in case c. Small integers, so the
 * f32 sums are exact. */
static int32_t reduce_word(int src, int dst, int c, uint64_t word) {
  return (int32_t)((word * 7 + (uint64_t)src * 100 + (uint64_t)dst * 10 + (uint64_t)c) % 4099);
}

static void reduce_fill(void *buf, const reduce_case *rc, int src, int dst, int c) {
  uint64_t words = rc->count * rc->elem_size / 4;
  for (uint64_t w = 0; w < words; w++) {
    int32_t v = reduce_word(src, dst, c, w);
    if (rc->fn == sum_i32)
      ((int32_t *)buf)[w] = v - 2000;
    else
      ((float *)buf)[w] = (float)v;
  }
}

static uint64_t largest_reduce_bytes(void) {
  uint64_t largest = 0;
  for (size_t c = 0; c < NREDUCE; c++) {
    uint64_t bytes = reduce_cases[c].count * reduce_cases[c].elem_size;
    if (bytes > largest) largest = bytes;
  }
  return largest;
}

static int scenario_reduce(job *j) {
  int n = j->nranks, me = j->rank, total = (n - 1) * (int)NREDUCE;
  msg_slot *sends = calloc((size_t)total, sizeof *sends);
  msg_slot *recvs = calloc((size_t)total, sizeof *recvs);
  void **local = calloc((size_t)total, sizeof *local), **out = calloc((size_t)total, sizeof *out);
  CHECK_OR_RETURN(sends && recvs && local && out, "out of memory");
  int remaining = 2 * total;
  for (int q = 0, s = 0; q < n; q++) {
    if (q == me) continue;
    for (int c = 0; c < (int)NREDUCE; c++, s++) {
      const reduce_case *rc = &reduce_cases[c];
      uint64_t bytes = rc->count * rc->elem_size;
      sends[s].buf = strata_mem_buffer(bytes + 4, registered);
      local[s] = malloc(bytes + 4);
      out[s] = rc->in_place ? local[s] : malloc(bytes + 4);
      CHECK_OR_RETURN(sends[s].buf && local[s] && out[s], "out of memory");
      reduce_fill(sends[s].buf, rc, me, q, c);
      reduce_fill(local[s], rc, q, me, c + 50); /* our own contribution */
      xfer_init(&sends[s].x, q, 0x2000u + (uint64_t)c, sends[s].buf, bytes, &remaining);
      xfer_init(&recvs[s].x, q, 0x2000u + (uint64_t)c, NULL, bytes, &remaining);
      recvs[s].x.reduce = rc->fn;
      recvs[s].x.reduce_src = local[s];
      recvs[s].x.reduce_dst = out[s];
      recvs[s].x.elem_size = rc->elem_size;
      CHECK_OR_RETURN(j->t->ops->post_recv(j->t, &recvs[s].x) == STRATA_OK, "post_recv");
      CHECK_OR_RETURN(j->t->ops->post_send(j->t, &sends[s].x) == STRATA_OK, "post_send");
    }
  }
  CHECK_OR_RETURN(j->t->fuses_reduce == 1, "shm must fuse reductions");
  drive_result res;
  CHECK_OR_RETURN(drive(j->t, &remaining, 30.0, &res) == 0, "%d reduce transfers pending",
                  remaining);
  CHECK_OR_RETURN(res.progress_rc == STRATA_OK, "progress returned %s",
                  strata_err_name(res.progress_rc));
  for (int q = 0, s = 0; q < n; q++) {
    if (q == me) continue;
    for (int c = 0; c < (int)NREDUCE; c++, s++) {
      const reduce_case *rc = &reduce_cases[c];
      CHECK_OR_RETURN(sends[s].x.status == STRATA_OK && recvs[s].x.status == STRATA_OK, "status");
      uint64_t words = rc->count * rc->elem_size / 4;
      for (uint64_t w = 0; w < words; w++) {
        int32_t a = reduce_word(q, me, c + 50, w), b = reduce_word(q, me, c, w);
        if (rc->fn == sum_i32) {
          int32_t want = (a - 2000) + (b - 2000), got = ((int32_t *)out[s])[w];
          CHECK_OR_RETURN(got == want, "case %d from %d: i32 word %llu = %d, want %d", c, q,
                          (unsigned long long)w, got, want);
        } else {
          float want = (float)(a + b), got = ((float *)out[s])[w];
          CHECK_OR_RETURN(got == want, "case %d from %d: f32 word %llu = %g, want %g", c, q,
                          (unsigned long long)w, got, want);
        }
      }
      if (!rc->in_place) free(out[s]);
      free(local[s]);
      strata_mem_buffer_free(sends[s].buf, registered);
    }
  }
  free(sends);
  free(recvs);
  free(local);
  free(out);
  return check_mapped(j, largest_reduce_bytes());
}

/* ---- scenario: mismatched tags and sizes ---- */

#define GUARD 64

static int scenario_mismatch(job *j) {
  /* rank 1 sends six messages; rank 0 expects something else for the first four. */
  static const struct {
    uint64_t send_tag, send_bytes, recv_tag, recv_bytes;
    int want;
  } cases[] = {
      {100, 64, 999, 64, STRATA_ERR_MISMATCH},             /* tag, inline */
      {101, 64, 101, 32, STRATA_ERR_MISMATCH},             /* size, inline */
      {102, 2u << 20, 999, 2u << 20, STRATA_ERR_MISMATCH}, /* tag, large */
      {103, 2u << 20, 103, 1u << 20, STRATA_ERR_MISMATCH}, /* size, large (smaller buffer) */
      {104, 1000, 104, 1000, STRATA_OK},                   /* the stream stays in step */
      {105, 3u << 20, 105, 3u << 20, STRATA_OK},
  };
  enum { NCASES = sizeof cases / sizeof cases[0] };
  msg_slot slots[NCASES];
  int remaining = NCASES;
  for (int c = 0; c < NCASES; c++) {
    uint64_t bytes = j->rank == 1 ? cases[c].send_bytes : cases[c].recv_bytes;
    slots[c].buf = malloc(bytes + GUARD);
    CHECK_OR_RETURN(slots[c].buf, "out of memory");
    if (j->rank == 1) {
      pattern_fill(slots[c].buf, bytes, 1, 0, c);
      xfer_init(&slots[c].x, 0, cases[c].send_tag, slots[c].buf, bytes, &remaining);
      CHECK_OR_RETURN(j->t->ops->post_send(j->t, &slots[c].x) == STRATA_OK, "post_send");
    } else {
      memset(slots[c].buf, 0xab, bytes + GUARD);
      xfer_init(&slots[c].x, 1, cases[c].recv_tag, slots[c].buf, bytes, &remaining);
      CHECK_OR_RETURN(j->t->ops->post_recv(j->t, &slots[c].x) == STRATA_OK, "post_recv");
    }
  }
  drive_result res;
  CHECK_OR_RETURN(drive(j->t, &remaining, 20.0, &res) == 0, "%d pending", remaining);
  for (int c = 0; c < NCASES; c++) {
    if (j->rank == 1) {
      CHECK_OR_RETURN(slots[c].x.status == STRATA_OK, "send %d completed with %d", c,
                      slots[c].x.status);
    } else {
      uint64_t bytes = cases[c].recv_bytes;
      CHECK_OR_RETURN(slots[c].x.status == cases[c].want, "recv %d: %s, want %s", c,
                      strata_err_name(slots[c].x.status), strata_err_name(cases[c].want));
      for (uint64_t i = cases[c].want == STRATA_OK ? bytes : 0; i < bytes + GUARD; i++)
        CHECK_OR_RETURN(slots[c].buf[i] == 0xab, "recv %d wrote byte %llu", c,
                        (unsigned long long)i);
      if (cases[c].want == STRATA_OK)
        CHECK_OR_RETURN(pattern_check(slots[c].buf, bytes, 1, 0, c) < 0, "recv %d content", c);
    }
    free(slots[c].buf);
  }
  return 0;
}

/* ---- scenario: two transports of one job at once (two communicators) ---- */

static int scenario_two_transports(job *j) {
  strata_transport *t2 = NULL;
  char err[256];
  int rc = strata_shm_open(j->cfg, j->rank, j->nranks, j->store, j->is_local, &t2, err, sizeof err);
  CHECK_OR_RETURN(rc == STRATA_OK, "second open: %s (%s)", strata_err_name(rc), err);
  /* the same tags on both, different contents: nothing may cross over */
  enum { BYTES = 100000 };
  int remaining = 0;
  int n = j->nranks - 1;
  msg_slot *slots = calloc((size_t)(4 * n), sizeof *slots);
  CHECK_OR_RETURN(slots, "out of memory");
  for (int q = 0, s = 0; q < j->nranks; q++) {
    if (q == j->rank) continue;
    for (int which = 0; which < 2; which++, s += 2) {
      strata_transport *t = which ? t2 : j->t;
      slots[s].buf = malloc(BYTES);
      slots[s + 1].buf = malloc(BYTES);
      CHECK_OR_RETURN(slots[s].buf && slots[s + 1].buf, "out of memory");
      pattern_fill(slots[s].buf, BYTES, j->rank, q, which);
      xfer_init(&slots[s].x, q, 42, slots[s].buf, BYTES, &remaining);
      xfer_init(&slots[s + 1].x, q, 42, slots[s + 1].buf, BYTES, &remaining);
      remaining += 2;
      CHECK_OR_RETURN(t->ops->post_send(t, &slots[s].x) == STRATA_OK, "post_send");
      CHECK_OR_RETURN(t->ops->post_recv(t, &slots[s + 1].x) == STRATA_OK, "post_recv");
    }
  }
  double start = strata_now_s();
  while (remaining > 0 && strata_now_s() - start < 20) {
    int fp = -1;
    int rc1 = j->t->ops->progress(j->t, &fp);
    CHECK_OR_RETURN(rc1 == STRATA_OK, "progress 1: %s (peer %d)", strata_err_name(rc1), fp);
    int rc2 = t2->ops->progress(t2, &fp);
    CHECK_OR_RETURN(rc2 == STRATA_OK, "progress 2: %s (peer %d)", strata_err_name(rc2), fp);
  }
  CHECK_OR_RETURN(remaining == 0, "%d transfers pending", remaining);
  for (int q = 0, s = 0; q < j->nranks; q++) {
    if (q == j->rank) continue;
    for (int which = 0; which < 2; which++, s += 2) {
      CHECK_OR_RETURN(slots[s + 1].x.status == STRATA_OK, "status");
      CHECK_OR_RETURN(pattern_check(slots[s + 1].buf, BYTES, q, j->rank, which) < 0,
                      "transport %d: message from %d crossed over", which, q);
      free(slots[s].buf);
      free(slots[s + 1].buf);
    }
  }
  free(slots);
  /* no barrier: a rank leaves as soon as its own transfers are done, while its peers may still
   * be taking what it wrote, which must not look like a death to them */
  t2->ops->destroy(t2);
  return 0;
}

/* ---- scenario: a peer dies; the others notice long before any timeout and keep working ----
 * Liveness is polled every few milliseconds, so the bound is about the mechanism, not the
 * clock: 5 s leaves room for a loaded machine descheduling the survivors, and is still far
 * below the 10 s the drive waits, which is what a missed death would take. */

static int scenario_peer_lost(job *j) {
  int victim = j->nranks - 1;
  if (j->rank == victim) {
    usleep(100 * 1000);
    raise(SIGKILL);
  }
  uint64_t big = 4u << 20;
  uint8_t *sbuf = malloc(big), small[8];
  CHECK_OR_RETURN(sbuf, "out of memory");
  memset(sbuf, 1, big);
  int remaining = 2;
  strata_xfer send, recv;
  xfer_init(&send, victim, 7, sbuf, big, &remaining);
  xfer_init(&recv, victim, 8, small, sizeof small, &remaining);
  CHECK_OR_RETURN(j->t->ops->post_send(j->t, &send) == STRATA_OK, "post_send");
  CHECK_OR_RETURN(j->t->ops->post_recv(j->t, &recv) == STRATA_OK, "post_recv");
  drive_result res;
  CHECK_OR_RETURN(drive(j->t, &remaining, 10.0, &res) == 0,
                  "transfers to a dead peer never completed");
  CHECK_OR_RETURN(res.elapsed_s < 5.0, "noticed the death after %.2f s", res.elapsed_s);
  CHECK_OR_RETURN(send.status == STRATA_ERR_PEER_LOST, "send: %s", strata_err_name(send.status));
  CHECK_OR_RETURN(recv.status == STRATA_ERR_PEER_LOST, "recv: %s", strata_err_name(recv.status));
  CHECK_OR_RETURN(res.progress_rc == STRATA_ERR_PEER_LOST && res.failed_peer == victim,
                  "progress returned %s for peer %d", strata_err_name(res.progress_rc),
                  res.failed_peer);
  strata_xfer again;
  xfer_init(&again, victim, 9, small, sizeof small, &remaining);
  CHECK_OR_RETURN(j->t->ops->post_send(j->t, &again) == STRATA_ERR_PEER_LOST,
                  "post to a lost peer");
  /* The survivors still talk to each other. */
  if (j->nranks > 2) {
    int other = 1 - j->rank;
    uint64_t v = 0x1234 + (uint64_t)j->rank, got = 0;
    strata_xfer s2, r2;
    remaining = 2;
    xfer_init(&s2, other, 10, &v, sizeof v, &remaining);
    xfer_init(&r2, other, 10, &got, sizeof got, &remaining);
    CHECK_OR_RETURN(j->t->ops->post_send(j->t, &s2) == STRATA_OK, "post_send");
    CHECK_OR_RETURN(j->t->ops->post_recv(j->t, &r2) == STRATA_OK, "post_recv");
    CHECK_OR_RETURN(drive(j->t, &remaining, 5.0, NULL) == 0, "survivors' exchange");
    CHECK_OR_RETURN(got == 0x1234 + (uint64_t)other, "survivors' exchange content");
  }
  free(sbuf);
  return 0;
}

/* ---- scenario: abort word ---- */

static int scenario_abort(job *j) {
  if (j->rank == 1) {
    j->t->ops->send_abort(j->t, 0, STRATA_ERR_ABORTED, 0);
    return 0;
  }
  double start = strata_now_s();
  while (j->t->remote_abort_status == 0 && strata_now_s() - start < 5.0) {
    int fp;
    j->t->ops->progress(j->t, &fp);
    j->t->ops->wait(j->t, 5);
  }
  CHECK_OR_RETURN(j->t->remote_abort_status == STRATA_ERR_ABORTED, "remote_abort_status %d",
                  j->t->remote_abort_status);
  CHECK_OR_RETURN(j->t->remote_abort_peer == 1, "remote_abort_peer %d", j->t->remote_abort_peer);
  return 0;
}

/* ---- scenario: only some ranks share the host; bad arguments ---- */

static void locality_first_two(int rank, int nranks, int *is_local) {
  for (int q = 0; q < nranks; q++) is_local[q] = (rank < 2) == (q < 2);
}

/* Rank 0 believes rank 1 shares its host; rank 1 does not and never publishes a segment. */
static void locality_one_sided(int rank, int nranks, int *is_local) {
  for (int q = 0; q < nranks; q++) is_local[q] = rank == 0 || q == rank;
}

static int scenario_nothing(job *j) {
  (void)j;
  return 0;
}

static int scenario_partial(job *j) {
  uint64_t v = 77, got = 0;
  int remaining = 0;
  strata_xfer x;
  xfer_init(&x, 2, 1, &v, sizeof v, &remaining);
  CHECK_OR_RETURN(j->t->ops->post_send(j->t, &x) == STRATA_ERR_INVALID_ARG || j->rank == 2,
                  "rank 2 is not local");
  xfer_init(&x, j->rank, 1, &v, sizeof v, &remaining);
  CHECK_OR_RETURN(j->t->ops->post_send(j->t, &x) == STRATA_ERR_INVALID_ARG, "send to self");
  xfer_init(&x, 99, 1, &v, sizeof v, &remaining);
  CHECK_OR_RETURN(j->t->ops->post_recv(j->t, &x) == STRATA_ERR_INVALID_ARG, "peer out of range");
  if (j->rank == 2) return 0;
  int other = 1 - j->rank;
  xfer_init(&x, other, 1, NULL, 8, &remaining);
  x.reduce = sum_f32;
  x.elem_size = 0;
  x.reduce_src = x.reduce_dst = &got;
  CHECK_OR_RETURN(j->t->ops->post_recv(j->t, &x) == STRATA_ERR_INVALID_ARG, "elem_size 0");
  x.elem_size = 3; /* 8 bytes is not whole 3-byte elements */
  CHECK_OR_RETURN(j->t->ops->post_recv(j->t, &x) == STRATA_ERR_INVALID_ARG, "partial element");
  xfer_init(&x, other, 1, NULL, 8, &remaining);
  CHECK_OR_RETURN(j->t->ops->post_send(j->t, &x) == STRATA_ERR_INVALID_ARG, "NULL buffer");
  CHECK_OR_RETURN(strata_shm_uses_cma(j->t, other) == (getenv("STRATA_SHM_CMA") == NULL),
                  "CMA use %d", strata_shm_uses_cma(j->t, other));
  strata_xfer s, r;
  remaining = 2;
  xfer_init(&s, other, 5, &v, sizeof v, &remaining);
  xfer_init(&r, other, 5, &got, sizeof got, &remaining);
  CHECK_OR_RETURN(
      j->t->ops->post_recv(j->t, &r) == STRATA_OK && j->t->ops->post_send(j->t, &s) == 0, "post");
  CHECK_OR_RETURN(drive(j->t, &remaining, 5.0, NULL) == 0 && got == 77, "exchange");
  return 0;
}

/* ---- /dev/shm must be clean ---- */

static int count_leftovers(void) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "strata-shmtest-%d-", (int)getpid());
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int found = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
      fprintf(stderr, "leftover /dev/shm/%s\n", e->d_name);
      found++;
    }
  closedir(d);
  return found;
}

/* ---- benchmark (STRATA_SHM_BENCH=1) ---- */

static int bench_pingpong(job *j, int iters) {
  uint64_t v = 0;
  int other = 1 - j->rank, remaining;
  strata_xfer s, r;
  double start = 0;
  for (int i = -1000; i < iters; i++) {
    if (i == 0) start = strata_now_s();
    if (j->rank == 0) {
      remaining = 2;
      xfer_init(&r, other, 1, &v, 8, &remaining);
      j->t->ops->post_recv(j->t, &r);
      xfer_init(&s, other, 1, &v, 8, &remaining);
      j->t->ops->post_send(j->t, &s);
    } else {
      remaining = 1;
      xfer_init(&r, other, 1, &v, 8, &remaining);
      j->t->ops->post_recv(j->t, &r);
      drive(j->t, &remaining, 10, NULL);
      remaining = 1;
      xfer_init(&s, other, 1, &v, 8, &remaining);
      j->t->ops->post_send(j->t, &s);
    }
    CHECK_OR_RETURN(drive(j->t, &remaining, 10, NULL) == 0, "ping-pong stalled");
  }
  double us = (strata_now_s() - start) / iters * 1e6;
  if (j->rank == 0) printf("  8-byte ping-pong: %.2f us round trip, %.2f us one way\n", us, us / 2);
  return 0;
}

/* Seconds for `iters` messages of `bytes` (one way, or both ways at once); reduce: the receive
 * is a fused f32 sum. */
static double bench_run(job *j, uint8_t *sbuf, uint8_t *rbuf, uint8_t *mine, uint64_t bytes,
                        int iters, int both, int reduce) {
  int other = 1 - j->rank;
  double start = 0;
  for (int i = -2; i < iters; i++) {
    if (i == 0) start = strata_now_s();
    int remaining = 0;
    strata_xfer s, r;
    if (both || j->rank == 0) {
      remaining++;
      xfer_init(&s, other, 3, sbuf, bytes, &remaining);
      j->t->ops->post_send(j->t, &s);
    }
    if (both || j->rank == 1) {
      remaining++;
      xfer_init(&r, other, 3, rbuf, bytes, &remaining);
      if (reduce) {
        r.reduce = sum_f32;
        r.elem_size = 4;
        r.reduce_src = mine;
        r.reduce_dst = rbuf;
      }
      j->t->ops->post_recv(j->t, &r);
    }
    if (drive(j->t, &remaining, 30, NULL) != 0) return -1;
  }
  return strata_now_s() - start;
}

/* Best of three runs, in GB/s per direction. */
static int bench_bandwidth(job *j, uint64_t bytes, int both, int reduce) {
  uint8_t *sbuf = malloc(bytes), *rbuf = malloc(bytes), *mine = malloc(bytes);
  CHECK_OR_RETURN(sbuf && rbuf && mine, "out of memory");
  memset(sbuf, 0, bytes);
  memset(rbuf, 0, bytes);
  memset(mine, 0, bytes);
  int iters = (int)((128u << 20) / bytes);
  if (iters > 2000) iters = 2000;
  if (iters < 4) iters = 4;
  double best = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    double s = bench_run(j, sbuf, rbuf, mine, bytes, iters, both, reduce);
    CHECK_OR_RETURN(s >= 0, "bandwidth run stalled");
    if (s < best) best = s;
  }
  if (j->rank == 0)
    printf("  %-6s %-6s %8llu KiB: %6.2f GB/s\n", both ? "bidir" : "unidir",
           reduce ? "reduce" : "copy", (unsigned long long)(bytes >> 10),
           (double)bytes * iters / best / 1e9);
  free(sbuf);
  free(rbuf);
  free(mine);
  return 0;
}

static int scenario_bench(job *j) {
  if (bench_pingpong(j, 20000)) return 1;
  static const uint64_t sizes[] = {8u << 10,  16u << 10, 24u << 10,  32u << 10,
                                   48u << 10, 64u << 10, 128u << 10, 256u << 10,
                                   1u << 20,  4u << 20,  16u << 20,  64u << 20};
  for (int both = 0; both < 2; both++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      if (bench_bandwidth(j, sizes[i], both, 0)) return 1;
  for (uint64_t bytes = 1u << 20; bytes <= (16u << 20); bytes *= 4)
    if (bench_bandwidth(j, bytes, 1, 1)) return 1;
  return 0;
}

static void bench_memcpy(void) {
  for (uint64_t bytes = 64u << 10; bytes <= (64u << 20); bytes *= 4) {
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    int iters = (int)((512u << 20) / bytes);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
      double start = strata_now_s();
      for (int i = 0; i < iters; i++) {
        memcpy(b, a, bytes);
        a[i % bytes] ^= b[(i * 7) % bytes];
      }
      double s = strata_now_s() - start;
      if (s < best) best = s;
    }
    printf("  memcpy %8llu KiB: %6.2f GB/s\n", (unsigned long long)(bytes >> 10),
           (double)bytes * iters / best / 1e9);
    free(a);
    free(b);
  }
}

/* ---- main ---- */

/* The store runs in its own process, so the ranks fork from a parent without threads (LeakSanitizer
 * then checks every rank at exit). Returns its pid, with store_addr set, or -1. */
static pid_t store_process_start(void) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(600);
    strata_store_server *server = NULL;
    int port = -1;
    if (strata_store_server_start("127.0.0.1:0", &server) == STRATA_OK)
      port = strata_store_server_port(server);
    if (write(fds[1], &port, sizeof port) != (ssize_t)sizeof port || port < 0) _exit(1);
    for (;;) pause(); /* until the parent's SIGTERM */
  }
  close(fds[1]);
  int port = -1;
  if (pid < 0 || read(fds[0], &port, sizeof port) != (ssize_t)sizeof port || port < 0) {
    fprintf(stderr, "FAIL: could not start the store server\n");
    close(fds[0]);
    return -1;
  }
  close(fds[0]);
  snprintf(store_addr, sizeof store_addr, "127.0.0.1:%d", port);
  return pid;
}

static void run_all_scenarios(void) {
  /* 4 ranks take no path 3 do not (the same ring size, more peers to visit): quick runs omit it */
  int most_ranks = quick ? 3 : 4;
  for (int n = 2; n <= most_ranks; n++) run_job("exchange", n, scenario_exchange, NULL, NULL, -1);
  run_job("reduce", 2, scenario_reduce, NULL, NULL, -1);
  run_job("reduce", 3, scenario_reduce, NULL, NULL, -1);
  run_job("mismatch", 2, scenario_mismatch, NULL, NULL, -1);
  run_job("peer lost", 2, scenario_peer_lost, NULL, NULL, 1);
  run_job("peer lost", 3, scenario_peer_lost, NULL, NULL, 2);
  run_job("abort", 2, scenario_abort, NULL, NULL, -1);
  run_job("two transports at once", 3, scenario_two_transports, NULL, NULL, -1);
  run_job("partial locality", 3, scenario_partial, locality_first_two, NULL, -1);
  open_fail_status = STRATA_ERR_TIMEOUT;
  open_fail_rank = 0;
  open_timeout_s = 0.5;
  run_job("peer never opens", 2, scenario_nothing, locality_one_sided, NULL, -1);
  open_fail_status = STRATA_OK;
  open_fail_rank = -1;
  open_timeout_s = 10.0;
}

/* Segments are memfds, not /dev/shm files: a 1 MiB /dev/shm (a private tmpfs in a mount
 * namespace of our own, like a container's default 64 MiB one but smaller than one segment)
 * must not matter. Skipped where we may not create mount namespaces. */
static void run_tiny_dev_shm(void) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(CHILD_ALARM_S);
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
      printf("skip tiny /dev/shm (no mount namespace: %s)\n", strerror(errno));
      _exit(0);
    }
    int bad = run_job("exchange with a 1 MiB /dev/shm", 2, scenario_exchange, NULL, NULL, -1);
    fflush(stdout);
    _exit(bad);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!ok) fprintf(stderr, "FAIL tiny /dev/shm\n");
  failures += !ok;
  jobs_run++;
}

static int quick_mode(void) {
  const char *v = getenv("STRATA_TEST_QUICK");
  return v && strcmp(v, "0") != 0;
}

/* Cut the largest messages to QUICK_LARGE_BYTES, keeping every case (and so every count of
 * messages and of registered regions) as it is. */
static void make_quick(void) {
  exchange_sizes[NSIZES - 1] = QUICK_LARGE_BYTES;
  for (size_t c = 0; c < NREDUCE; c++) {
    reduce_case *rc = &reduce_cases[c];
    uint64_t most = QUICK_LARGE_BYTES / rc->elem_size;
    if (rc->count > most) rc->count = most - (most % 2 == 0); /* an odd count */
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  quick = quick_mode() && !getenv("STRATA_SHM_BENCH");
  if (quick) make_quick();
  const char *log = getenv("STRATA_LOG");
  strata_log_set_level(STRATA_LOG_ERROR); /* the expected "peer died" warnings are noise */
  if (log && strcmp(log, "info") == 0) strata_log_set_level(STRATA_LOG_INFO);
  if (log && strcmp(log, "debug") == 0) strata_log_set_level(STRATA_LOG_DEBUG);
  pid_t store_pid = store_process_start();
  if (store_pid < 0) return 1;
  unsetenv("STRATA_SHM_CMA");
  if (getenv("STRATA_SHM_BENCH")) {
    bench_memcpy();
    printf("CMA on:\n");
    run_job("bench", 2, scenario_bench, NULL, NULL, -1);
    setenv("STRATA_SHM_CMA", "0", 1);
    printf("CMA off (inline streaming):\n");
    run_job("bench", 2, scenario_bench, NULL, NULL, -1);
  } else {
    run_all_scenarios();
    setenv("STRATA_SHM_CMA", "0", 1);
    run_all_scenarios();
    unsetenv("STRATA_SHM_CMA");
    run_tiny_dev_shm();
    registered = 1;
    for (int n = 2; n <= 3; n++)
      run_job("exchange, registered", n, scenario_exchange, NULL, NULL, -1);
    run_job("reduce, registered", 3, scenario_reduce, NULL, NULL, -1);
    registered = 0;
  }
  kill(store_pid, SIGTERM);
  waitpid(store_pid, NULL, 0);
  int leftovers = count_leftovers();
  if (leftovers) fprintf(stderr, "FAIL: %d segments left in /dev/shm\n", leftovers);
  failures += leftovers != 0;
  printf("test_net_shm: %d passed, %d failed\n", jobs_run + 1 - failures, failures);
  return failures ? 1 : 0;
}
