// SPDX-License-Identifier: Apache-2.0
/*
 * calibrate.c — measure the host model's links (calibrate.h, src/model/host.h) inside the job,
 * with the transport and the ranks the collectives will use, under the load the host has now.
 *
 * Everything is timed through public collectives with the algorithm forced to the ring, so each
 * figure is a call the engine really makes:
 *  - fixed costs: a one-byte ring allgather is the call's overhead plus p-1 messages in a row, a
 *    tiny ring allreduce the overhead plus 2(p-1): their difference gives α per message, the
 *    rest the overhead per call;
 *  - the link, at each point: a ring allgather in place of p blocks moves p-1 blocks per rank,
 *    every rank sending and receiving at once (the traffic of a ring step). Over shm each rank's
 *    core pulls those bytes (the sender's core is free), so one transfer runs at X / T; over TCP
 *    each core copies X into the kernel and X out, taking turns, so each copy runs at 2X / T.
 *    That is the simulator's one-core-per-rank model (sim.h), which keeps the two consistent;
 *  - the reduction: a ring reduce-scatter of the same blocks makes the same p-1 transfers and
 *    reduces each block it receives, so what it takes beyond the allgather is p-1 reductions as
 *    the engine runs them (fused into the pull over shm, a pass after the receive over TCP). No
 *    public call reduces locally, and this is the figure the simulator needs;
 *  - memcpy: timed locally, one rank per core at once.
 * Each point's allgather and reduce-scatter are timed in pairs within one repetition, so both
 * see the same moment of the host, and every point is measured in CAL_PASSES passes whose mean is
 * the figure: the host's slow spells then weigh in a point as they do in a row's mean time.
 * Nothing is fitted to the rows it will predict: the points are fixed sizes, measured before any
 * row runs.
 *
 * Invariants: every rank makes the same sequence of calls (sizes and counts come from constants
 * and the communicator alone). Must never: print, or leave a rank blocked on a failure.
 */
#include "calibrate.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CAL_REPEATS 5
#define CAL_PASSES 3
#define CAL_SMALL_CALLS 51
/* Each repetition moves at least this much, so small points are not timer noise (and, repeated
 * over the same buffers, stay in whatever cache level holds them). */
#define CAL_REP_MIN_BYTES ((uint64_t)4 << 20)

enum { CAL_LINK, CAL_REDUCE, CAL_COPY, CAL_FIGURES };

static int cal_reps_for(uint64_t bytes) {
  uint64_t reps = bytes ? CAL_REP_MIN_BYTES / bytes : 1;
  return reps < 1 ? 1 : (int)reps;
}

static strata_coll_args cal_ring(strata_coll coll, const void *send, void *recv, size_t count,
                                 strata_dtype dtype, strata_op op) {
  strata_coll_args args = {.coll = coll,
                           .sendbuf = send,
                           .recvbuf = recv,
                           .count = count,
                           .dtype = dtype,
                           .op = op,
                           .algo = STRATA_ALGO_RING,
                           .compress = STRATA_COMPRESS_NONE};
  return args;
}

/* A ring allgather in place of `block` bytes per rank in buffer `buf` (nranks blocks). */
static strata_coll_args cal_allgather(strata_comm *comm, char *buf, size_t block) {
  return cal_ring(STRATA_COLL_ALLGATHER, buf + (size_t)strata_comm_rank(comm) * block, buf, block,
                  STRATA_U8, STRATA_SUM);
}

/* Median seconds per call of `first` and of `second`, each repetition `calls` of one then
 * `calls` of the other. */
static int cal_pair_s(strata_comm *comm, const strata_coll_args *first,
                      const strata_coll_args *second, int calls, double *first_s,
                      double *second_s) {
  double t1[CAL_REPEATS], t2[CAL_REPEATS];
  int rc = strata_collective(comm, first, NULL); /* warm-up: pages, caches */
  if (!rc) rc = strata_collective(comm, second, NULL);
  if (!rc) rc = strata_barrier(comm);
  for (int r = 0; !rc && r < CAL_REPEATS; r++) {
    double start_s = tool_now_s();
    for (int i = 0; !rc && i < calls; i++) rc = strata_collective(comm, first, NULL);
    double mid_s = tool_now_s();
    for (int i = 0; !rc && i < calls; i++) rc = strata_collective(comm, second, NULL);
    t1[r] = (mid_s - start_s) / calls;
    t2[r] = (tool_now_s() - mid_s) / calls;
  }
  if (!rc) {
    *first_s = tool_median(t1, (size_t)(CAL_REPEATS));
    *second_s = tool_median(t2, (size_t)(CAL_REPEATS));
  }
  return rc;
}

/* Which transport the job uses, its chunk and forced algorithm. */
static void cal_transport(strata_comm *comm, strata_host_links *out) {
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);
  const strata_config *cfg = strata_comm_config(comm);
  out->use_tcp = 0;
  for (int peer = 0; peer < n; peer++) {
    const char *name = peer == rank ? "self" : strata_comm_transport_name(comm, peer);
    if (name && !strcmp(name, "tcp")) out->use_tcp = 1;
  }
  out->chunk_bytes = cfg ? cfg->chunk_bytes : 0; /* the communicator resolved its default */
  out->algo = cfg ? cfg->algo : STRATA_ALGO_AUTO;
}

/* Are all ranks on this kernel? (boot_id is one per boot, the same in every network namespace,
 * which the TCP benchmarks use.) Collective. Sets out->host_cores to the fewest online CPUs any
 * rank sees, or 0 when the ranks span hosts or a rank cannot tell. */
static int cal_host_cores(strata_comm *comm, strata_host_links *out) {
  char id[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(id, sizeof id, f)) id[0] = '\0';
    fclose(f);
  }
  int64_t h = 1469598103934665603ll; /* FNV-1a; 0 = unknown */
  for (const char *c = id; *c; c++) h = (int64_t)(((uint64_t)h ^ (uint8_t)*c) * 1099511628211ull);
  if (!id[0]) h = 0;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t mine[3] = {h, h == INT64_MIN ? INT64_MAX : -h, cpus > 0 ? -(int64_t)cpus : 0}, most[3];
  int rc = strata_allreduce(comm, mine, most, 3, STRATA_I64, STRATA_MAX);
  if (rc) return rc;
  /* max(h) == min(h) (= -max(-h)), known, and every rank knows its CPUs (-max(-cpus) > 0) */
  int one_host = most[0] == -most[1] && most[0] != 0 && most[2] < 0;
  out->host_cores = one_host ? (int)-most[2] : 0;
  return STRATA_OK;
}

/* How many ranks time memcpy at once: all of them, or one per core when more ranks than cores
 * share the host (a copy longer than a scheduler slice would otherwise measure a share of a core
 * at some sizes and a whole core at others). cal_all_busy_scale turns it into the rate each rank
 * gets with all busy, which is what the simulator's core shares start from (sim.h host_cores). */
static int cal_local_ranks(const strata_host_links *links) {
  return strata_host_cores_shared(links) ? links->host_cores : links->nranks;
}

static double cal_all_busy_scale(const strata_host_links *links, int busy) {
  if (!strata_host_cores_shared(links)) return 1;
  int c = links->host_cores;
  return (double)(busy > c ? busy : c) / links->nranks;
}

/* Fixed costs: seconds of a one-byte ring allgather and of a tiny ring allreduce (one byte per
 * rank), calls back to back, as a benchmark's calls follow each other. */
static int cal_fixed_s(strata_comm *comm, char *a, char *b, double *allgather_s,
                       double *allreduce_s) {
  int p = strata_comm_size(comm);
  strata_coll_args allgather = cal_allgather(comm, a, 1);
  strata_coll_args allreduce =
      cal_ring(STRATA_COLL_ALLREDUCE, b, b + p, (size_t)p, STRATA_U8, STRATA_MAX);
  return cal_pair_s(comm, &allgather, &allreduce, CAL_SMALL_CALLS, allgather_s, allreduce_s);
}

/* Point i into s[CAL_FIGURES], this rank's seconds: the allgather, the reduce-scatter, memcpy. */
static int cal_point(strata_comm *comm, const strata_host_links *links, strata_dtype dtype,
                     strata_op op, char *a, char *b, int i, double s[CAL_FIGURES]) {
  size_t bytes = (size_t)strata_host_point_bytes(i);
  int rc = strata_barrier(comm);
  if (!rc && strata_comm_rank(comm) < cal_local_ranks(links)) {
    double t[CAL_REPEATS];
    int passes = cal_reps_for(bytes);
    memcpy(b, a, bytes); /* warm-up: the cache state */
    for (int r = 0; r < CAL_REPEATS; r++) {
      double start_s = tool_now_s();
      for (int k = 0; k < passes; k++) memcpy(b, a, bytes);
      t[r] = (tool_now_s() - start_s) / passes;
    }
    s[CAL_COPY] = tool_median(t, (size_t)(CAL_REPEATS));
  }
  if (rc || links->nranks < 2) return rc;
  size_t block = (size_t)strata_host_point_block_bytes(i, links->nranks);
  strata_coll_args allgather = cal_allgather(comm, a, block);
  strata_coll_args reduce_scatter =
      cal_ring(STRATA_COLL_REDUCE_SCATTER, a, b, block / strata_dtype_size(dtype), dtype, op);
  rc = strata_barrier(comm);
  if (!rc)
    rc = cal_pair_s(comm, &allgather, &reduce_scatter,
                    cal_reps_for((uint64_t)block * (uint64_t)(links->nranks - 1)), &s[CAL_LINK],
                    &s[CAL_REDUCE]);
  return rc;
}

/* Point i of `curve`: `bytes` moved in `seconds`. */
static void cal_rate_set(strata_host_curve *curve, int i, double bytes, double seconds) {
  curve->gbps[i] = seconds > 0 ? bytes / 1e9 / seconds : 0;
}

/* The slowest rank's seconds into the links: fixed costs, then the curves. A transfer's own time
 * is the call's minus the fixed cost the prediction adds itself, never below half the call. */
static void cal_fill(strata_host_links *out, double allgather_s, double allreduce_s,
                     double worst[][CAL_FIGURES]) {
  int p = out->nranks;
  double call_s = 0;
  if (p > 1) {
    double hops = p - 1, alpha_s = (allreduce_s - allgather_s) / hops;
    if (!(alpha_s > 0) || alpha_s * hops > allgather_s) alpha_s = allgather_s / hops;
    out->alpha_us = alpha_s * 1e6;
    out->op_overhead_us = (allgather_s - hops * alpha_s) * 1e6;
    call_s = allgather_s;
  }
  double local_share = cal_all_busy_scale(out, cal_local_ranks(out));
  for (int i = 0; i < STRATA_HOST_CURVE_POINTS; i++) {
    strata_host_point_footprints(out, i);
    double bytes = (double)strata_host_point_bytes(i), *w = worst[i];
    cal_rate_set(&out->memcpy, i, bytes * local_share, w[CAL_COPY]);
    if (p < 2) {
      out->link.gbps[i] = out->reduce.gbps[i] = out->memcpy.gbps[i];
      continue;
    }
    double block = (double)strata_host_point_block_bytes(i, p), moved = block * (p - 1);
    double link_s =
        w[CAL_LINK] - call_s < 0.5 * w[CAL_LINK] ? 0.5 * w[CAL_LINK] : w[CAL_LINK] - call_s;
    cal_rate_set(&out->link, i, out->use_tcp ? 2 * moved : moved, link_s);
    /* p-1 reductions of a block; never below a tenth of the block's transfer */
    double reduce_s = fmax((w[CAL_REDUCE] - w[CAL_LINK]) / (p - 1), 0.1 * link_s / (p - 1));
    cal_rate_set(&out->reduce, i, block, reduce_s);
  }
}

int calibrate_host(strata_comm *comm, strata_dtype dtype, strata_op op, void *buf_a, void *buf_b,
                   size_t bytes, strata_host_links *out) {
  if (!comm || !out || strata_dtype_size(dtype) == 0) return STRATA_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  out->nranks = strata_comm_size(comm);
  cal_transport(comm, out);
  char *a = buf_a, *b = buf_b;
  /* 2: usable, 1: too small, 0: missing (agreed, so every rank fails alike) */
  int local_ok = !(a && b) ? 0 : bytes < STRATA_HOST_CALIBRATE_BYTES ? 1 : 2, all_ok = 0;
  if (local_ok == 2) {
    memset(a, 0, bytes); /* touch every page; zeros are exact in every dtype and op */
    memset(b, 0, bytes);
  }
  int rc = strata_allreduce(comm, &local_ok, &all_ok, 1, STRATA_I32, STRATA_MIN);
  if (!rc && all_ok < 2) rc = all_ok == 1 ? STRATA_ERR_INVALID_ARG : STRATA_ERR_NO_MEMORY;
  int any_tcp = 0; /* the slowest transport decides, and every rank must agree */
  if (!rc) rc = strata_allreduce(comm, &out->use_tcp, &any_tcp, 1, STRATA_I32, STRATA_MAX);
  out->use_tcp = any_tcp;
  if (!rc) rc = cal_host_cores(comm, out);
  enum { FIXED = 2, N = FIXED + STRATA_HOST_CURVE_POINTS * CAL_FIGURES };
  double s[N] = {0}, worst[N] = {0};
  if (!rc && out->nranks > 1) rc = cal_fixed_s(comm, a, b, &s[0], &s[1]);
  for (int k = 0; !rc && k < CAL_PASSES; k++) {
    for (int i = 0; !rc && i < STRATA_HOST_CURVE_POINTS; i++) {
      double t[CAL_FIGURES] = {0};
      rc = cal_point(comm, out, dtype, op, a, b, i, t);
      for (int f = 0; f < CAL_FIGURES; f++) s[FIXED + i * CAL_FIGURES + f] += t[f] / CAL_PASSES;
    }
  }
  if (!rc) rc = strata_allreduce(comm, s, worst, N, STRATA_F64, STRATA_MAX);
  if (rc) return rc;
  cal_fill(out, worst[0], worst[1], (double(*)[CAL_FIGURES])(void *)&worst[FIXED]);
  return out->link.gbps[0] > 0 ? STRATA_OK : STRATA_ERR_SYSTEM;
}
