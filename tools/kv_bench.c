// SPDX-License-Identifier: Apache-2.0
/*
 * kv_bench.c — KV-cache transfer prefill -> decode with the strata_kv agent, in the shape of
 * nccl-tests: for each block size from -b to -e (×-f), N blocks making -t bytes in all are
 * WRITTEN from the prefill process's registered region into the decode process's, -n timed
 * transfers after -w warm-up ones, over each backend asked for (-B tcp,shm,ucx). Then the
 * low-latency lane: round trips of a -l byte request idle, while bulk WRITEs run, and the same
 * request sent as a small WRITE queued behind the bulk transfer (what the lane avoids).
 *
 * Two processes on this host (fork): the child is the decode agent; the metadata travels over
 * a pipe. Every transfer's bytes are checked once per size (the last one of the row).
 *
 * usage: kv_bench [-b 16K] [-e 4M] [-f 2] [-t 1G] [-n 5] [-w 1] [-B tcp,shm,ucx] [-s streams]
 *                 [-l 4096] [-L iterations] [-R | -P] [-N]
 * The agents' defaults schedule the lane (cfg.lane_realtime: SCHED_FIFO where permitted, the
 * caller only during its calls). -R: the calling thread stays SCHED_FIFO 1 through the whole lane
 * phase; -P: plain scheduling, the lane's threads ordinary (lane_realtime = -1).
 * -N: no lane measurements (the transfer table alone).
 * UCX picks its transports from UCX_TLS as usual (bench/kv/run.sh sets it). The same code is
 * `strata bench kv ARGS` (tools/bench.c dispatches to strata_kv_bench_main; the command's build
 * defines STRATA_KV_BENCH_COMMAND, which leaves main out); bench/kv builds it alone, as
 * build/strata-kv-bench, against the shared library: one source, so the two cannot drift apart.
 * It uses the runtime's public API (strata_kv.h) alone.
 */
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "strata.h"
#include "strata_kv.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A byte count as every strata command reads one; a bad one ends the run with status 2. */
static size_t parse_size(const char *s) {
  uint64_t bytes = 0;
  if (strata_size_parse(s, &bytes) != STRATA_OK || bytes > ((uint64_t)1 << 40)) {
    fprintf(stderr, "kv_bench: '%s': not a size (65536, 64K, 4M, 1G)\n", s);
    exit(2);
  }
  return (size_t)bytes;
}

static int echo(void *ctx, const char *from, uint32_t tag, const void *req, size_t len, void *reply,
                size_t cap, size_t *reply_len) {
  (void)ctx, (void)from, (void)tag;
  if (len > cap) return STRATA_ERR_INVALID_ARG;
  memcpy(reply, req, len);
  *reply_len = len;
  return STRATA_OK;
}

static int realtime; /* -R: 1, this caller SCHED_FIFO for the whole lane phase; -P: -1, none */
static int no_lane;  /* -N */

static const char *backend_name(int backend) {
  switch (backend) {
    case STRATA_KV_BACKEND_SHM:
      return "shm";
    case STRATA_KV_BACKEND_UCX:
      return "ucx";
    default:
      return "tcp";
  }
}

static strata_kv_agent *make(const char *name, int backend, int streams) {
  strata_kv_config cfg;
  strata_kv_config_init(&cfg);
  cfg.name = name;
  cfg.secret = getenv("STRATA_SECRET") ? getenv("STRATA_SECRET") : "kv-bench";
  cfg.backend = backend;
  cfg.streams = streams;
  cfg.timeout_s = 30;
  cfg.lane_realtime = realtime;
  strata_kv_agent *a = NULL;
  if (strata_kv_agent_create(&cfg, &a) != STRATA_OK) {
    fprintf(stderr, "kv_bench: cannot create agent %s\n", name);
    exit(1);
  }
  return a;
}

static int write_all(int fd, const void *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k <= 0) return -1;
    p = (const char *)p + k;
    n -= (size_t)k;
  }
  return 0;
}
static int read_all(int fd, void *p, size_t n) {
  while (n) {
    ssize_t k = read(fd, p, n);
    if (k <= 0) return -1;
    p = (char *)p + k;
    n -= (size_t)k;
  }
  return 0;
}

/* The decode side: register, send the blob, serve until the parent closes the pipe. */
static void decode_main(int backend, int streams, size_t total, int to_parent, int from_parent) {
  strata_kv_agent *a = make("decode", backend, streams);
  strata_kv_lane_set_handler(a, echo, NULL);
  uint8_t *mem = malloc(total);
  memset(mem, 0, total);
  uint32_t region;
  strata_kv_register(a, mem, total, &region);
  void *blob;
  size_t bytes;
  strata_kv_metadata_export(a, &blob, &bytes);
  uint64_t len = bytes;
  write_all(to_parent, &len, sizeof len);
  write_all(to_parent, blob, bytes);
  char c;
  while (read(from_parent, &c, 1) > 0) {
    /* 'c': check the region against the pattern the parent wrote, answer 1 byte */
    size_t bad = 0;
    for (size_t i = 0; i < total; i += 4093) bad += mem[i] != (uint8_t)(i * 7 + c);
    char ok = bad == 0;
    write_all(to_parent, &ok, 1);
  }
  strata_kv_agent_destroy(a);
  _exit(0);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct lane_stats {
  double p50_us, p99_us;
} lane_stats;

/* back to an ordinary thread after the lane's round trips */
static void ordinary(void) {
  struct sched_param param = {.sched_priority = 0};
  pthread_setschedparam(pthread_self(), SCHED_OTHER, &param);
}

static lane_stats lane_rtts(strata_kv_agent *a, int peer, size_t bytes, int iterations) {
  if (realtime > 0) {
    struct sched_param param = {.sched_priority = 1};
    pthread_setschedparam(pthread_self(), SCHED_FIFO, &param);
  }
  double *rtt = malloc(sizeof(double) * (size_t)iterations);
  char *req = calloc(1, bytes), *rep = calloc(1, bytes);
  for (int i = 0; i < iterations; i++) {
    size_t got;
    double t0 = now_s();
    int status = strata_kv_lane_call(a, peer, (uint32_t)i, req, bytes, rep, bytes, &got, 10);
    rtt[i] = (now_s() - t0) * 1e6;
    if (status != STRATA_OK) fprintf(stderr, "lane call: %s\n", strata_err_name(status));
  }
  if (realtime > 0) ordinary();
  qsort(rtt, (size_t)iterations, sizeof *rtt, cmp_double);
  lane_stats s = {rtt[iterations / 2], rtt[(int)(iterations * 0.99)]};
  free(rtt);
  free(req);
  free(rep);
  return s;
}

static void run_backend(int backend, int streams, size_t min_b, size_t max_b, double factor,
                        size_t total, int iters, int warmup, size_t lane_bytes, int lane_iters) {
  int down[2], up[2];
  if (pipe(down) || pipe(up)) exit(1);
  pid_t child = fork();
  if (child == 0) {
    close(down[1]);
    close(up[0]);
    decode_main(backend, streams, total, up[1], down[0]);
  }
  close(down[0]);
  close(up[1]);
  strata_kv_agent *a = make("prefill", backend, streams);
  uint8_t *mem = malloc(total);
  uint32_t region;
  strata_kv_register(a, mem, total, &region);
  uint64_t len;
  read_all(up[0], &len, sizeof len);
  void *blob = malloc(len);
  read_all(up[0], blob, len);
  int peer;
  int status = strata_kv_peer_load(a, blob, len, &peer);
  free(blob);
  if (status != STRATA_OK) {
    fprintf(stderr, "kv_bench: load: %s\n", strata_err_name(status));
    exit(1);
  }
  uint32_t remote_region;
  uint64_t remote_base, remote_bytes;
  strata_kv_peer_region(a, peer, 0, &remote_region, &remote_base, &remote_bytes);
  const char *name = backend_name(strata_kv_peer_backend(a, peer));
  const char *tls = getenv("UCX_TLS");
  printf("# backend %s%s%s, %d streams, %zu bytes per transfer, WRITE prefill -> decode\n", name,
         backend == STRATA_KV_BACKEND_UCX && tls ? ", UCX_TLS=" : "",
         backend == STRATA_KV_BACKEND_UCX && tls ? tls : "", streams, total);
  printf("#%12s %8s %12s %10s %6s\n", "size(B)", "blocks", "time(us)", "algbw(GB/s)", "check");
  for (size_t b = min_b; b <= max_b; b = (size_t)(b * factor)) {
    size_t n = total / b;
    strata_kv_desc *local = malloc(n * sizeof *local), *remote = malloc(n * sizeof *remote);
    for (size_t i = 0; i < n; i++) {
      /* decode blocks in reverse order: a scatter, as a paged KV cache is */
      local[i] = (strata_kv_desc){(uint64_t)(uintptr_t)mem + i * b, b, 0, 0};
      remote[i] = (strata_kv_desc){remote_base + (n - 1 - i) * b, b, remote_region, 0};
    }
    char c = (char)(b % 127 + 1);
    for (size_t i = 0; i < total; i++) mem[i] = 0;
    double best = 1e30, sum = 0;
    for (int it = 0; it < warmup + iters; it++) {
      strata_kv_xfer *x;
      double t0 = now_s();
      status = strata_kv_xfer_post(a, STRATA_KV_WRITE, peer, local, remote, n, NULL, 0, &x);
      if (status == STRATA_OK) status = strata_kv_xfer_wait(x, -1);
      double t = now_s() - t0;
      if (status != STRATA_OK) fprintf(stderr, "xfer: %s\n", strata_kv_xfer_error(x));
      strata_kv_xfer_release(x);
      if (it >= warmup) {
        sum += t;
        if (t < best) best = t;
      }
    }
    /* the check: put the pattern the decode side expects at every 4093rd byte of its region
     * into the local block that lands there, write once more, let the decode side verify */
    for (size_t j = 0; j < n * b; j += 4093) {
      size_t remote_block = j / b, local_block = n - 1 - remote_block;
      mem[local_block * b + j % b] = (uint8_t)(j * 7 + (size_t)c);
    }
    strata_kv_xfer *x;
    strata_kv_xfer_post(a, STRATA_KV_WRITE, peer, local, remote, n, NULL, 0, &x);
    strata_kv_xfer_wait(x, -1);
    strata_kv_xfer_release(x);
    char ok = 0;
    write_all(down[1], &c, 1);
    read_all(up[0], &ok, 1);
    /* the check samples every 4093rd byte of the whole region: only rows where n*b == total */
    double mean = sum / iters;
    printf(" %12zu %8zu %12.0f %10.2f %6s\n", b, n, mean * 1e6, (double)(n * b) / mean / 1e9,
           n * b == total ? (ok ? "ok" : "BAD") : "-");
    fflush(stdout);
    free(local);
    free(remote);
  }
  if (no_lane) {
    strata_kv_agent_destroy(a);
    close(down[1]);
    int wstatus;
    waitpid(child, &wstatus, 0);
    close(up[0]);
    free(mem);
    return;
  }
  /* the lane: idle, under bulk load, and the same bytes queued behind bulk */
  lane_stats idle = lane_rtts(a, peer, lane_bytes, lane_iters);
  strata_kv_desc big_l = {(uint64_t)(uintptr_t)mem, total, 0, 0};
  strata_kv_desc big_r = {remote_base, total, remote_region, 0};
  strata_kv_xfer *bulk;
  lane_stats loaded = {0, 0};
  int loaded_iters = 0;
  double *behind = malloc(sizeof(double) * 64);
  int nbehind = 0;
  for (int round = 0; round < 8; round++) {
    strata_kv_xfer_post(a, STRATA_KV_WRITE, peer, &big_l, &big_r, 1, NULL, 0, &bulk);
    if (round % 2 == 0) {
      lane_stats s = lane_rtts(a, peer, lane_bytes, lane_iters / 4);
      loaded.p50_us += s.p50_us;
      loaded.p99_us = s.p99_us > loaded.p99_us ? s.p99_us : loaded.p99_us;
      loaded_iters++;
    } else {
      strata_kv_desc sl = {(uint64_t)(uintptr_t)mem, lane_bytes, 0, 0};
      strata_kv_desc sr = {remote_base, lane_bytes, remote_region, 0};
      strata_kv_xfer *small;
      double t0 = now_s();
      strata_kv_xfer_post(a, STRATA_KV_WRITE, peer, &sl, &sr, 1, NULL, 0, &small);
      strata_kv_xfer_wait(small, -1);
      behind[nbehind++] = (now_s() - t0) * 1e6;
      strata_kv_xfer_release(small);
    }
    strata_kv_xfer_wait(bulk, -1);
    strata_kv_xfer_release(bulk);
  }
  qsort(behind, (size_t)nbehind, sizeof *behind, cmp_double);
  printf("# lane, %zu-byte request/reply round trip (us):\n", lane_bytes);
  printf("#   idle                 p50 %9.1f  p99 %9.1f\n", idle.p50_us, idle.p99_us);
  printf("#   during bulk WRITEs   p50 %9.1f  p99 %9.1f  (max p99 of %d rounds)\n",
         loaded.p50_us / loaded_iters, loaded.p99_us, loaded_iters);
  printf("#   as a WRITE behind a %zu-byte bulk WRITE: median %.1f (of %d)\n", total,
         behind[nbehind / 2], nbehind);
  free(behind);
  strata_kv_agent_destroy(a);
  close(down[1]);
  int wstatus;
  waitpid(child, &wstatus, 0);
  close(up[0]);
  free(mem);
}

int strata_kv_bench_main(int argc, char **argv);

static void kv_usage(FILE *out) {
  fprintf(out,
          "usage: strata bench kv [-b MIN] [-e MAX] [-f FACTOR] [-t TOTAL] [-n ITERS] [-w WARMUP]\n"
          "                       [-B tcp,shm,ucx] [-s STREAMS] [-l LANE_BYTES] [-L LANE_ITERS]\n"
          "                       [-R | -P] [-N]\n"
          "KV-cache transfer between two processes of this host (it starts both; no launcher):\n"
          "block sizes MIN..MAX (16K..4M, x FACTOR 2), TOTAL bytes per transfer (1G), ITERS timed\n"
          "transfers (5) after WARMUP (1), per backend (tcp,shm), STREAMS TCP streams (4); then\n"
          "the lane's LANE_BYTES (4096) request/reply round trip, LANE_ITERS times (2000).\n"
          "  -R  the caller stays SCHED_FIFO through the lane phase   -P  plain scheduling\n"
          "  -N  no lane measurements                                  -h, --help  this text\n"
          "Sizes take K, M, G. docs/kv.md says what the columns mean.\n");
}

int strata_kv_bench_main(int argc, char **argv) {
  size_t min_b = 16 << 10, max_b = 4 << 20, total = 1u << 30, lane_bytes = 4096;
  double factor = 2;
  int iters = 5, warmup = 1, streams = 4, lane_iters = 2000;
  const char *backends = "tcp,shm";
  static const struct option long_options[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int opt;
  optind = 0; /* glibc: a fresh scan (the command may have run getopt) */
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "b:e:f:t:n:w:B:s:l:L:RPNh", long_options, NULL)) != -1) {
    switch (opt) {
      case 'b':
        min_b = parse_size(optarg);
        break;
      case 'e':
        max_b = parse_size(optarg);
        break;
      case 'f':
        factor = atof(optarg);
        break;
      case 't':
        total = parse_size(optarg);
        break;
      case 'n':
        iters = atoi(optarg);
        break;
      case 'w':
        warmup = atoi(optarg);
        break;
      case 'B':
        backends = optarg;
        break;
      case 's':
        streams = atoi(optarg);
        break;
      case 'l':
        lane_bytes = parse_size(optarg);
        break;
      case 'L':
        lane_iters = atoi(optarg);
        break;
      case 'R':
        realtime = 1;
        break;
      case 'P':
        realtime = -1;
        break;
      case 'N':
        no_lane = 1;
        break;
      case 'h':
        kv_usage(stdout);
        return 0;
      default:
        fprintf(stderr, "kv_bench: unknown option or missing value '%s'\n", argv[optind - 1]);
        kv_usage(stderr);
        return 2;
    }
  }
  if (min_b == 0 || min_b > max_b || factor <= 1 || iters < 1 || lane_iters < 8 ||
      lane_bytes == 0 || lane_bytes > STRATA_KV_LANE_MAX_BYTES || total < max_b) {
    fprintf(stderr, "kv_bench: bad arguments (see --help)\n");
    return 2;
  }
  if (strstr(backends, "ucx") && !strata_kv_backend_supported(STRATA_KV_BACKEND_UCX)) {
    fprintf(stderr, "kv_bench: backend ucx: this libstrata was built without UCX (libucx-dev)\n");
    return 2;
  }
  if (strstr(backends, "tcp"))
    run_backend(STRATA_KV_BACKEND_TCP, streams, min_b, max_b, factor, total, iters, warmup,
                lane_bytes, lane_iters);
  if (strstr(backends, "shm"))
    run_backend(STRATA_KV_BACKEND_SHM, streams, min_b, max_b, factor, total, iters, warmup,
                lane_bytes, lane_iters);
  if (strstr(backends, "ucx"))
    run_backend(STRATA_KV_BACKEND_UCX, streams, min_b, max_b, factor, total, iters, warmup,
                lane_bytes, lane_iters);
  return 0;
}

#ifndef STRATA_KV_BENCH_COMMAND
int main(int argc, char **argv) {
  return strata_kv_bench_main(argc, argv);
}
#endif
