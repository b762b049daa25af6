// SPDX-License-Identifier: Apache-2.0
/*
 * host.h — the host model behind `strata bench --predict`: the time the engine's own schedules
 * should take on the links of the one host a job runs on.
 *
 * One host, one rank per process, each rank's work done by one engine thread (the simulator's
 * one-core-per-rank mode, sim.h). A transfer between two ranks is either a single-copy pull by
 * the receiver's core (shm with cross-memory attach: the sender's core stays free) or a TCP
 * stream over loopback (the sender's core copies into the kernel, the receiver's copies out).
 * Every rate is a curve over the working set (the bytes one rank touches per call), because a
 * copy whose buffers stay in a cache runs several times faster than one that streams from
 * memory. A prediction runs the simulator over exactly the schedules strata_schedule_build gives
 * the engine for that call (same algorithm choice, same chunk size), with the rates read at the
 * call's working set.
 *
 * The figures come from a calibration inside the job (tools/calibrate.c, through the public API
 * only); this side never measures anything, so a prediction is reproducible from
 * strata_host_links alone. It is a check of the schedules and the simulator on a machine anyone
 * has, not the planner's model of a cluster (cost.h, sim.h's fabric mode).
 */
#ifndef STRATA_MODEL_HOST_H
#define STRATA_MODEL_HOST_H

#include <stdint.h>

#include "strata.h"

/* Calibration points: every rate is measured at this many working sets, from one a core's L2
 * holds to one only DRAM holds (point i moves strata_host_point_bytes(i) per rank). */
#define STRATA_HOST_CURVE_POINTS 5
#define STRATA_HOST_CALIBRATE_MIN_BYTES ((uint64_t)256 << 10)
#define STRATA_HOST_CALIBRATE_BYTES ((uint64_t)64 << 20)

typedef struct strata_host_curve {
  uint64_t footprint_bytes[STRATA_HOST_CURVE_POINTS]; /* per rank, ascending */
  double gbps[STRATA_HOST_CURVE_POINTS];
} strata_host_curve;

typedef struct strata_host_links {
  int nranks;
  int use_tcp;           /* 1: some peer is reached over TCP; 0: all by shared memory */
  int host_cores;        /* every rank on this host (one kernel): its online CPUs; else 0 */
  uint64_t chunk_bytes;  /* the engine's pipelining unit for this communicator */
  strata_algo algo;      /* the communicator's forced algorithm (STRATA_ALGO), or AUTO */
  double alpha_us;       /* latency of one small message inside a collective */
  double op_overhead_us; /* the engine's fixed cost of one collective call beyond its messages */
  /* Rates (GB/s) as functions of the working set per rank:
   *  link    one transfer on the core(s) it holds (shm: the puller's; TCP: each end's copy);
   *  reduce  reducing received bytes into a buffer, as the engine does it (shm: what reducing
   *          adds to a pull; TCP: the separate pass after the receive), per byte of one operand;
   *  memcpy  a local copy. */
  strata_host_curve link, reduce, memcpy;
} strata_host_links;

/* Bytes per rank that calibration point i (0 .. STRATA_HOST_CURVE_POINTS-1) moves: from
 * STRATA_HOST_CALIBRATE_MIN_BYTES up by 4x to STRATA_HOST_CALIBRATE_BYTES. */
uint64_t strata_host_point_bytes(int i);

/* The bytes per rank of point i's ring block: the transfer moves (nranks - 1) blocks, which with
 * the whole ring (nranks blocks) must fit STRATA_HOST_CALIBRATE_BYTES; a multiple of 64. */
uint64_t strata_host_point_block_bytes(int i, int nranks);

/* Set point i's working sets (footprint_bytes[i] of the three curves) for l->nranks and
 * l->use_tcp: what one rank touches in calibration's call at that point, counted as
 * strata_host_predict counts a call's working set. The rates are left alone. */
void strata_host_point_footprints(strata_host_links *l, int i);

/* All ranks on one host with fewer cores than ranks (host_cores set and below nranks): the ranks
 * take turns on the cores, which calibration and the simulator both account for. */
int strata_host_cores_shared(const strata_host_links *links);

/* The rate of `curve` at a working set of `footprint_bytes` per rank: interpolated linearly in
 * log(footprint) between calibration points, flat beyond the ends. 0 if the curve is empty. */
double strata_host_curve_gbps(const strata_host_curve *curve, uint64_t footprint_bytes);

/* Predicted time (µs) of one out-of-place call of `coll` with `count` elements of `elem_size`
 * bytes (count as the public API means it), `root` for rooted collectives, over `links`.
 * The algorithm is what the engine would build: `algo` if it applies to `coll` (else
 * links->algo if it applies, else AUTO). Returns STRATA_OK, STRATA_ERR_INVALID_ARG for links
 * without a link rate, or a schedule/simulator error. */
int strata_host_predict(const strata_host_links *links, strata_coll coll, strata_algo algo,
                        uint64_t count, uint32_t elem_size, int root, double *time_us);

/* The same, as the time per call of `calls` (>= 1) calls in a row, as a benchmark's timed loop
 * makes them: each rank starts its next call when its own part of the last is done, so calls
 * overlap where a rank's part ends early (a chain's root and first hops). The first call is
 * simulated alone, and calls - 1 periods of the calls after it (over three calls in a row) are
 * added: (T(1) + (calls - 1) (T(3) - T(1)) / 2) / calls. calls = 1 is strata_host_predict. */
int strata_host_predict_calls(const strata_host_links *links, strata_coll coll, strata_algo algo,
                              uint64_t count, uint32_t elem_size, int root, uint64_t calls,
                              double *time_us);

#endif
