// SPDX-License-Identifier: Apache-2.0
/*
 * demo.c — `strata demo`: run every collective on the ranks of this job at a few sizes, check
 * every element, and print one readable table (rank 0). Run it under `strata launch -n N`.
 *
 * The figures are warm, measured as `strata bench` measures: the first call of a size pays for
 * first-touch page faults, the schedule's build and the peers' mappings, which a newcomer would
 * otherwise read as the library's speed. So each size runs once checked (which warms it), once
 * more untimed, then DEMO_TIMED_CALLS timed calls with a barrier before each; a call's time is
 * the slowest rank's, and the table shows the median call. Buffers are allocated once, for the
 * largest size, and reused. When the ranks share fewer CPUs than there are ranks, the table says
 * so: a rank then waits for a time slice while its peer runs, and the figures measure the
 * scheduler as much as the library.
 */
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "strata.h"
#include "util.h"

#define DEMO_TIMED_CALLS 5

typedef struct demo_row {
  const char *name;
  strata_coll coll;
} demo_row;

static const demo_row rows[] = {
    {"allreduce", STRATA_COLL_ALLREDUCE}, {"reduce_scatter", STRATA_COLL_REDUCE_SCATTER},
    {"allgather", STRATA_COLL_ALLGATHER}, {"broadcast", STRATA_COLL_BROADCAST},
    {"reduce", STRATA_COLL_REDUCE},       {"gather", STRATA_COLL_GATHER},
    {"scatter", STRATA_COLL_SCATTER},     {"alltoall", STRATA_COLL_ALLTOALL},
    {"sendrecv", STRATA_COLL_SEND},       {"barrier", STRATA_COLL_BARRIER},
};

/* Input value of element i of block `block` on rank r: small integers, exact in f32 sums. */
static float value(int r, size_t block, size_t i) {
  return (float)((r * 3 + block * 5 + i) % 17);
}

/* One call of `coll` with `count` elements per block; returns its status. */
static int call_one(strata_comm *comm, strata_coll coll, const float *in, float *out,
                    size_t count) {
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm), root = n > 1 ? 1 : 0;
  switch (coll) {
    case STRATA_COLL_ALLREDUCE:
      return strata_allreduce(comm, in, out, count, STRATA_F32, STRATA_SUM);
    case STRATA_COLL_REDUCE_SCATTER:
      return strata_reduce_scatter(comm, in, out, count, STRATA_F32, STRATA_SUM);
    case STRATA_COLL_ALLGATHER:
      return strata_allgather(comm, in, out, count, STRATA_F32);
    case STRATA_COLL_BROADCAST:
      return strata_broadcast(comm, in, out, count, STRATA_F32, root);
    case STRATA_COLL_REDUCE:
      return strata_reduce(comm, in, out, count, STRATA_F32, STRATA_SUM, root);
    case STRATA_COLL_GATHER:
      return strata_gather(comm, in, out, count, STRATA_F32, root);
    case STRATA_COLL_SCATTER:
      return strata_scatter(comm, in, out, count, STRATA_F32, root);
    case STRATA_COLL_ALLTOALL:
      return strata_alltoall(comm, in, out, count, STRATA_F32);
    case STRATA_COLL_BARRIER:
      return strata_barrier(comm);
    case STRATA_COLL_SEND: {
      if (n == 1) return STRATA_OK;
      strata_request *rs, *rr;
      int status = strata_irecv(comm, out, count, STRATA_F32, (rank + n - 1) % n, &rr);
      if (status) return status;
      status = strata_isend(comm, in, count, STRATA_F32, (rank + 1) % n, &rs);
      if (status) return status; /* the communicator is broken; the receive goes with it */
      int recv_status = strata_request_wait(rr), send_status = strata_request_wait(rs);
      return recv_status ? recv_status : send_status;
    }
    default:
      return STRATA_OK;
  }
}

/* Runs `coll` once on known inputs and counts this rank's wrong output elements (all of them
 * when the call fails). */
static long check_one(strata_comm *comm, strata_coll coll, float *in, float *out, size_t count) {
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm), root = n > 1 ? 1 : 0;
  size_t total = count * (size_t)n;
  for (size_t b = 0; b < (size_t)n; b++)
    for (size_t i = 0; i < count; i++) in[b * count + i] = value(rank, b, i);
  memset(out, 0xff, total * sizeof(float));
  int status = call_one(comm, coll, in, out, count);
  long wrong = status == STRATA_OK ? 0 : (long)(total ? total : 1);
  if (status != STRATA_OK)
    fprintf(stderr, "strata demo: rank %d: %s failed: %s\n", rank, strata_coll_name(coll),
            strata_strerror(status));
  for (size_t i = 0; status == STRATA_OK && i < total; i++) {
    size_t b = i / (count ? count : 1), j = i % (count ? count : 1);
    float want;
    int check = 1;
    switch (coll) {
      case STRATA_COLL_ALLREDUCE:
      case STRATA_COLL_REDUCE:
        check = i < count && (coll == STRATA_COLL_ALLREDUCE || rank == root);
        want = 0;
        for (int r = 0; r < n; r++) want += value(r, 0, i);
        break;
      case STRATA_COLL_REDUCE_SCATTER:
        check = i < count;
        want = 0;
        for (int r = 0; r < n; r++) want += value(r, (size_t)rank, i);
        break;
      case STRATA_COLL_ALLGATHER:
        want = value((int)b, 0, j);
        break;
      case STRATA_COLL_GATHER:
        check = rank == root, want = value((int)b, 0, j);
        break;
      case STRATA_COLL_BROADCAST:
        check = i < count, want = value(root, 0, i);
        break;
      case STRATA_COLL_SCATTER:
        check = i < count, want = value(root, (size_t)rank, i);
        break;
      case STRATA_COLL_ALLTOALL:
        want = value((int)b, (size_t)rank, j);
        break;
      case STRATA_COLL_SEND:
        check = n > 1 && i < count, want = value((rank + n - 1) % n, 0, i);
        break;
      default:
        check = 0, want = 0;
    }
    if (check && out[i] != want) wrong++;
  }
  return wrong;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The warm time of one call, in seconds, the same on every rank: one untimed call, then
 * DEMO_TIMED_CALLS calls each after a barrier; a call takes as long as its slowest rank; the
 * median call. Negative when a call failed. */
static double time_warm(strata_comm *comm, strata_coll coll, const float *in, float *out,
                        size_t count) {
  double seconds[DEMO_TIMED_CALLS], slowest[DEMO_TIMED_CALLS];
  int status = call_one(comm, coll, in, out, count);
  for (int k = 0; k < DEMO_TIMED_CALLS; k++) {
    if (status == STRATA_OK) status = strata_barrier(comm);
    double t0 = tool_now_s();
    if (status == STRATA_OK) status = call_one(comm, coll, in, out, count);
    seconds[k] = status == STRATA_OK ? tool_now_s() - t0 : INFINITY;
  }
  if (strata_allreduce(comm, seconds, slowest, DEMO_TIMED_CALLS, STRATA_F64, STRATA_MAX)) return -1;
  qsort(slowest, DEMO_TIMED_CALLS, sizeof *slowest, compare_doubles);
  double median = slowest[DEMO_TIMED_CALLS / 2];
  return isfinite(median) ? median : -1;
}

/* How many CPUs the ranks may run on together (the union of their affinity masks), so that the
 * table can say when they take turns. 0 when unknown. */
static int job_cpus(strata_comm *comm) {
  int n = strata_comm_size(comm);
  cpu_set_t mine, *all = calloc((size_t)n, sizeof *all);
  CPU_ZERO(&mine);
  int known = all && sched_getaffinity(0, sizeof mine, &mine) == 0;
  int all_known = known;
  if (strata_allreduce(comm, &known, &all_known, 1, STRATA_I32, STRATA_MIN) || !all_known ||
      strata_allgather(comm, &mine, all, sizeof mine, STRATA_U8)) {
    free(all);
    return 0;
  }
  cpu_set_t any;
  CPU_ZERO(&any);
  for (int r = 0; r < n; r++) CPU_OR(&any, &any, &all[r]);
  free(all);
  return CPU_COUNT(&any);
}

/* Gradient-like test data for the compression demo: smooth, signed, varying magnitude. */
static float gradient(int r, size_t i) {
  return sinf(0.0007f * (float)i + 1.3f * (float)r) * (1.0f + (float)(i % 1000) / 1000.0f);
}

/* Compression on the wire: one 4 Mi-float allreduce per encoding; prints the bytes saved (this
 * rank's counters) and the largest error against the exact sum, and checks that every rank got
 * the same bytes and that the error stays within the encoding's bound (docs/compression.md).
 * Returns how many encodings failed. */
static int demo_compression(strata_comm *comm, int rank, int n) {
  static const strata_compress codecs[] = {STRATA_COMPRESS_BF16, STRATA_COMPRESS_F16,
                                           STRATA_COMPRESS_INT8, STRATA_COMPRESS_FP8,
                                           STRATA_COMPRESS_INT4};
  enum { COUNT = 4 << 20 };
  float *buf = malloc(sizeof(float) * COUNT);
  if (!buf) return 1;
  int failed = 0;
  if (rank == 0)
    printf(
        "\n  compressed allreduce, %d MiB of f32 (reduced in f32 at every hop):\n"
        "  %-6s %14s %14s %12s  %s\n",
        (int)(sizeof(float) * COUNT >> 20), "wire", "of the data", "wire bytes", "max error",
        "same on all ranks");
  for (size_t k = 0; k < sizeof codecs / sizeof *codecs; k++) {
    for (size_t i = 0; i < COUNT; i++) buf[i] = gradient(rank, i);
    strata_comm_stats before, after;
    strata_comm_get_stats(comm, &before);
    strata_coll_args a = {.coll = STRATA_COLL_ALLREDUCE,
                          .sendbuf = buf,
                          .recvbuf = buf,
                          .count = COUNT,
                          .dtype = STRATA_F32,
                          .op = STRATA_SUM,
                          .compress = codecs[k]};
    int status = strata_collective(comm, &a, NULL);
    strata_comm_get_stats(comm, &after);
    double worst = 0, amax = 0;
    uint64_t hash = 1469598103934665603ULL;
    for (size_t i = 0; i < COUNT && status == STRATA_OK; i++) {
      double want = 0;
      for (int r = 0; r < n; r++) want += gradient(r, i);
      worst = fmax(worst, fabs(buf[i] - want));
      amax = fmax(amax, fabs(want));
      uint32_t bits;
      memcpy(&bits, &buf[i], 4);
      hash = (hash ^ bits) * 1099511628211ULL;
    }
    uint64_t lo = hash, hi = hash;
    strata_allreduce(comm, &hash, &lo, 1, STRATA_U64, STRATA_MIN);
    strata_allreduce(comm, &hash, &hi, 1, STRATA_U64, STRATA_MAX);
    uint64_t wire = after.wire_bytes_sent - before.wire_bytes_sent;
    uint64_t data = after.data_bytes_sent - before.data_bytes_sent;
    int ok = status == STRATA_OK && lo == hi &&
             worst <= 2.0 * n * strata_compress_error_bound(codecs[k], amax);
    int all_ok = ok;
    strata_allreduce(comm, &ok, &all_ok, 1, STRATA_I32, STRATA_MIN);
    failed += !all_ok;
    if (rank == 0)
      printf("  %-6s %13.1f%% %14llu %12.2e  %s\n", strata_compress_name(codecs[k]),
             data ? 100.0 * (double)wire / (double)data : 0, (unsigned long long)wire, worst,
             !all_ok    ? "FAILED"
             : lo == hi ? "yes"
                        : "no");
  }
  free(buf);
  return failed;
}

int strata_cmd_demo(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf(
        "usage: strata launch -n N -- strata demo [layer4]\n"
        "Runs every collective at a few sizes on the job's ranks and checks every element.\n"
        "layer4: one DiLoCo outer step and one weight patch between the ranks instead, each\n"
        "checked (tools/demo_layer4.c).\n");
    return 0;
  }
  int layer4 = argc > 1 && !strcmp(argv[1], "layer4");
  if (argc > 2 || (argc > 1 && !layer4)) {
    fprintf(stderr, "strata demo: unknown argument '%s' (see strata demo --help)\n", argv[1]);
    return 2;
  }
  strata_comm *comm;
  int status = strata_comm_init_env(&comm);
  if (status != STRATA_OK) {
    fprintf(stderr, "strata demo: cannot join the job: %s\n", strata_strerror(status));
    return 1;
  }
  if (layer4) {
    status = demo_layer4(comm);
    strata_comm_destroy(comm);
    return status;
  }
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);
  /* floats per block: an allreduce of 8 B, 128 KiB and 16 MiB, sizes make bench reports */
  static const size_t sizes[] = {2, 32 << 10, 4 << 20};
  enum { SIZE_COUNT = sizeof sizes / sizeof sizes[0] };
  size_t most = sizes[SIZE_COUNT - 1] * (size_t)n;
  float *in = malloc(most * sizeof(float)), *out = malloc(most * sizeof(float));
  int have = in && out, all_have = have;
  strata_allreduce(comm, &have, &all_have, 1, STRATA_I32, STRATA_MIN);
  if (!all_have) {
    if (!have) fprintf(stderr, "strata demo: rank %d: out of memory\n", rank);
    free(in), free(out);
    strata_comm_destroy(comm);
    return 1;
  }
  int cpus = job_cpus(comm);
  if (rank == 0) {
    printf("strata demo: %d ranks on this host\n", n);
    for (int p = 1; p < n; p++)
      printf("  rank 0 -> rank %d: %s\n", p, strata_comm_transport_name(comm, p));
    if (cpus > 0 && cpus < n)
      printf(
          "  note: the %d ranks share %d CPU%s, so they take turns: a rank waits for a time\n"
          "  slice while a peer runs, and small calls measure the scheduler more than strata\n",
          n, cpus, cpus == 1 ? "" : "s");
    printf(
        "\n  warm figures: per size one checked call, one more untimed, then the median of %d\n"
        "  timed calls (each the slowest rank's time), as strata bench measures\n",
        DEMO_TIMED_CALLS);
    printf("\n  %-15s %10s %8s %12s %10s  %s\n", "collective", "bytes", "algo", "time (us)",
           "busbw GB/s", "check");
  }
  long total_wrong = 0;
  int total_runs = 0;
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    for (size_t s = 0; s < SIZE_COUNT; s++) {
      size_t count = rows[r].coll == STRATA_COLL_BARRIER ? 0 : sizes[s];
      long wrong = check_one(comm, rows[r].coll, in, out, count);
      long all_wrong = wrong;
      strata_allreduce(comm, &wrong, &all_wrong, 1, STRATA_I64, STRATA_SUM);
      double seconds = time_warm(comm, rows[r].coll, in, out, count);
      if (seconds < 0 && !all_wrong) all_wrong = 1; /* a timed call failed */
      total_wrong += all_wrong;
      total_runs++;
      if (rank == 0) {
        int coll_kind = rows[r].coll;
        size_t bytes = count * sizeof(float);
        double factor = 1;
        if (coll_kind == STRATA_COLL_ALLREDUCE) factor = n > 1 ? 2.0 * (n - 1) / n : 0;
        if (coll_kind == STRATA_COLL_REDUCE_SCATTER || coll_kind == STRATA_COLL_ALLGATHER ||
            coll_kind == STRATA_COLL_ALLTOALL) {
          bytes *= (size_t)n;
          factor = (double)(n - 1) / n;
        }
        strata_coll_args call = {.coll = rows[r].coll,
                                 .count = count,
                                 .dtype = STRATA_F32,
                                 .op = STRATA_SUM,
                                 .root = n > 1 ? 1 : 0};
        const char *algo = rows[r].coll == STRATA_COLL_SEND
                               ? "p2p"
                               : strata_algo_name(strata_comm_algorithm(comm, &call));
        double busbw = seconds > 0 ? bytes / seconds / 1e9 * factor : 0;
        printf("  %-15s %10zu %8s %12.1f %10.2f  %s\n", rows[r].name, bytes, algo,
               seconds > 0 ? seconds * 1e6 : 0, busbw, all_wrong ? "WRONG" : "ok");
      }
      if (rows[r].coll == STRATA_COLL_BARRIER) break;
    }
  }
  free(in);
  free(out);
  int compress_failed = n > 1 ? demo_compression(comm, rank, n) : 0;
  total_wrong += compress_failed;
  if (rank == 0)
    printf("\n%d runs, %ld wrong elements: %s\n", total_runs, total_wrong,
           total_wrong ? "FAILED" : "every collective checked, all correct");
  strata_comm_destroy(comm);
  return total_wrong ? 1 : 0;
}
