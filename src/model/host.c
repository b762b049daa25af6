// SPDX-License-Identifier: Apache-2.0
/*
 * host.c — predict a collective on one host by simulating the engine's schedules (see host.h).
 *
 * The link model is deliberately small: every pair of ranks has the same α and the same rate,
 * measured with the transport the job uses; the simulator's one-core-per-rank mode supplies what
 * a closed formula misses (which core does the copy, that a TCP rank's sends, receives and
 * reductions take turns on its one engine thread, that a shm pull and the reduction of what it
 * pulled hold only the receiver's core). The rates are read off the calibrated curves at the
 * call's own working set (the bytes its schedule touches per rank), so a call whose buffers stay
 * in cache is costed at cache speed. Fixed costs: α per message (simulated), the engine's
 * per-call overhead (added once).
 * This file must never measure anything, so predictions stay reproducible from
 * strata_host_links alone.
 */
#include "model/host.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll/schedule.h"
#include "model/sim.h"

/* The rates of one prediction, read off the calibration curves at the call's working set. */
typedef struct host_rates {
  const strata_host_links *links;
  double link_gbps, reduce_gbps, memcpy_gbps;
} host_rates;

int strata_host_cores_shared(const strata_host_links *links) {
  return links->host_cores > 0 && links->host_cores < links->nranks;
}

uint64_t strata_host_point_bytes(int i) {
  int last = STRATA_HOST_CURVE_POINTS - 1;
  return STRATA_HOST_CALIBRATE_MIN_BYTES << (2 * (i < 0 ? 0 : i < last ? i : last));
}

uint64_t strata_host_point_block_bytes(int i, int nranks) {
  uint64_t p = nranks > 1 ? (uint64_t)nranks : 2;
  uint64_t block = strata_host_point_bytes(i) / (p - 1), most = STRATA_HOST_CALIBRATE_BYTES / p;
  return (block < most ? block : most) / 64 * 64;
}

/* Calibration's calls (tools/calibrate.c): at point i, a ring allgather in place of p blocks of
 * B bytes (the link), a ring reduce-scatter out of place of the same blocks (p B in, B out: the
 * reduction), a memcpy of the point's bytes; over TCP every byte sent or received also passes
 * through the kernel's socket buffers on the same core, and a received block through the
 * reduction's staging scratch, as host_footprint_bytes counts a predicted call. */
void strata_host_point_footprints(strata_host_links *l, int i) {
  uint64_t bytes = strata_host_point_bytes(i);
  l->memcpy.footprint_bytes[i] = 2 * bytes;
  if (l->nranks < 2) {
    l->link.footprint_bytes[i] = l->reduce.footprint_bytes[i] = 2 * bytes;
    return;
  }
  uint64_t p = (uint64_t)l->nranks, block = strata_host_point_block_bytes(i, l->nranks);
  uint64_t socket = l->use_tcp ? 2 * (p - 1) * block : 0;
  l->link.footprint_bytes[i] = p * block + socket;
  l->reduce.footprint_bytes[i] = (p + 1) * block + socket + (l->use_tcp ? block : 0);
}

/* A curve's rate at `footprint_bytes`: linear in log(footprint) between points, flat beyond the
 * ends. */
double strata_host_curve_gbps(const strata_host_curve *curve, uint64_t footprint_bytes) {
  const int n = STRATA_HOST_CURVE_POINTS;
  if (!curve || curve->footprint_bytes[0] == 0) return 0;
  if (footprint_bytes <= curve->footprint_bytes[0]) return curve->gbps[0];
  for (int i = 1; i < n; i++) {
    if (footprint_bytes > curve->footprint_bytes[i]) continue;
    double x0 = log((double)curve->footprint_bytes[i - 1]);
    double x1 = log((double)curve->footprint_bytes[i]);
    double w = x1 > x0 ? (log((double)footprint_bytes) - x0) / (x1 - x0) : 1;
    return curve->gbps[i - 1] + w * (curve->gbps[i] - curve->gbps[i - 1]);
  }
  return curve->gbps[n - 1];
}

static void host_link(void *ctx, int src, int dst, strata_sim_link *out) {
  const host_rates *rates = ctx;
  (void)src, (void)dst; /* one host: every pair of ranks alike */
  out->alpha_us = rates->links->alpha_us;
  out->gbps = rates->link_gbps;
  out->shared = -1;
  out->pull = !rates->links->use_tcp;
}

/* Widen the byte range e = [lo, hi) (empty while hi == 0) to cover [offset, offset + bytes). */
static void extent_add(uint64_t e[2], uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  if (e[1] == 0 || offset < e[0]) e[0] = offset;
  if (offset + bytes > e[1]) e[1] = offset + bytes;
}

/* The bytes of one of the call's buffers that `ref` names. */
static void buffer_add(uint64_t lo_hi[3][2], strata_bufref ref, uint64_t bytes) {
  if (ref.buf <= STRATA_BUF_SCRATCH) extent_add(lo_hi[ref.buf], ref.offset, bytes);
}

/* The working set of one rank's call: the bytes of its send, receive and scratch buffers its
 * steps read or write (a fused shm pull never touches the staging scratch), and over TCP
 * (tcp != 0) also every byte it sends or receives, which passes through the kernel's socket
 * buffers on the same core. Repeated calls over the same buffers, as a benchmark makes them,
 * keep that much hot: whether it fits a cache decides the rates. */
static uint64_t host_footprint_bytes(const strata_schedule *sched, int tcp) {
  uint64_t lo_hi[3][2] = {{0, 0}, {0, 0}, {0, 0}}, kernel = 0;
  for (uint32_t i = 0; i < sched->nsteps; i++) {
    const strata_step *st = &sched->steps[i];
    switch (st->kind) {
      case STRATA_STEP_SEND:
        buffer_add(lo_hi, st->src, st->bytes);
        kernel += st->bytes;
        break;
      case STRATA_STEP_RECV:
        buffer_add(lo_hi, st->dst, st->bytes);
        kernel += st->bytes;
        break;
      case STRATA_STEP_RECV_REDUCE:
        buffer_add(lo_hi, st->src, st->bytes);
        buffer_add(lo_hi, st->dst, st->bytes);
        if (tcp) buffer_add(lo_hi, st->staging, st->bytes);
        kernel += st->bytes;
        break;
      case STRATA_STEP_REDUCE:
        buffer_add(lo_hi, st->src2, st->bytes);
        /* fall through */
      case STRATA_STEP_COPY:
        buffer_add(lo_hi, st->src, st->bytes);
        buffer_add(lo_hi, st->dst, st->bytes);
        break;
      default:
        break;
    }
  }
  return (tcp ? kernel : 0) + (lo_hi[0][1] - lo_hi[0][0]) + (lo_hi[1][1] - lo_hi[1][0]) +
         (lo_hi[2][1] - lo_hi[2][0]);
}

/* An allreduce's two phases touch its buffers in turn: the reduce-scatter reads the send buffer
 * and lands partial sums, the allgather fills the receive buffer, and what the first writes the
 * second reads while it is still hot. So an allreduce's curves are read at the working set of one
 * phase, half the call's; the one-phase collectives at the whole, as calibration's calls are. */
static uint64_t host_phases(strata_coll coll) {
  return coll == STRATA_COLL_ALLREDUCE ? 2 : 1;
}

static void host_rates_at(const strata_host_links *links, uint64_t footprint_bytes,
                          host_rates *out) {
  out->links = links;
  out->link_gbps = strata_host_curve_gbps(&links->link, footprint_bytes);
  out->reduce_gbps = strata_host_curve_gbps(&links->reduce, footprint_bytes);
  out->memcpy_gbps = strata_host_curve_gbps(&links->memcpy, footprint_bytes);
}

/* The engine's resolution (src/engine/api.c operation_create): the call's algorithm, else the
 * communicator's forced one where it exists for the collective, else AUTO. */
static strata_algo host_algo(const strata_host_links *links, strata_coll coll, strata_algo algo) {
  if (algo != STRATA_ALGO_AUTO && strata_schedule_algo_applies(coll, algo)) return algo;
  if (strata_schedule_algo_applies(coll, links->algo)) return links->algo;
  return STRATA_ALGO_AUTO;
}

/* `calls` copies of one rank's schedule back to back, as a rank runs blocking calls in a row:
 * each copy's first steps (those with no dependency) wait for every last step of the copy before
 * (the steps no other depends on), so a rank starts its next call once its own part of the last
 * is done, whatever its peers still do. */
static int host_repeat(const strata_schedule *one, int calls, strata_schedule *out) {
  memset(out, 0, sizeof *out);
  out->rank = one->rank, out->nranks = one->nranks, out->coll = one->coll, out->algo = one->algo;
  out->scratch_bytes = one->scratch_bytes;
  uint32_t n = one->nsteps, nsinks = 0;
  uint8_t *depended = calloc(n ? n : 1, 1);
  uint32_t *after = malloc((n ? n : 1) * sizeof *after);
  int status = depended && after ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  for (uint32_t i = 0; status == STRATA_OK && i < one->ndeps; i++) depended[one->deps[i]] = 1;
  for (int c = 0; status == STRATA_OK && c < calls; c++) {
    uint32_t base = out->nsteps; /* the last call's last steps, where this one lands */
    status = strata_sched_append(out, one, after, nsinks, NULL, NULL);
    nsinks = 0;
    for (uint32_t i = 0; i < n; i++)
      if (!depended[i]) after[nsinks++] = base + i;
  }
  free(depended);
  free(after);
  if (status != STRATA_OK) strata_schedule_free(out);
  return status;
}

/* Simulate `scheds` (one per rank) with `model`: the time the last rank ends. */
static int host_sim(const strata_sim_model *model, const strata_schedule *scheds, double *time_us) {
  strata_sim_result result;
  int rc = strata_sim_run(model, scheds, &result);
  if (rc == STRATA_OK) *time_us = result.time_us;
  return rc;
}

/* How many calls the period of back-to-back calls is simulated over (host.h,
 * strata_host_predict_calls): the period is (T(HOST_PERIOD_CALLS) - T(1)) / (HOST_PERIOD_CALLS -
 * 1), past the first call, which also fills the pipeline. */
#define HOST_PERIOD_CALLS 3

int strata_host_predict_calls(const strata_host_links *links, strata_coll coll, strata_algo algo,
                              uint64_t count, uint32_t elem_size, int root, uint64_t calls,
                              double *time_us) {
  if (!links || !time_us || links->nranks < 1 || elem_size == 0 || links->link.gbps[0] <= 0 ||
      calls < 1)
    return STRATA_ERR_INVALID_ARG;
  int p = links->nranks;
  strata_schedule *scheds = calloc((size_t)p, sizeof *scheds);
  if (!scheds) return STRATA_ERR_NO_MEMORY;
  int rc = STRATA_OK;
  for (int r = 0; rc == STRATA_OK && r < p; r++) {
    strata_sched_params sp = {.coll = coll,
                              .algo = host_algo(links, coll, algo),
                              .rank = r,
                              .nranks = p,
                              .root = root,
                              .count = count,
                              .elem_size = elem_size,
                              .in_place = 0,
                              .chunk_bytes = links->chunk_bytes};
    rc = strata_schedule_build(&sp, &scheds[r]);
  }
  if (rc == STRATA_OK) {
    /* every rank's steps at the largest working set of any rank: the slowest rank decides */
    uint64_t footprint = 0;
    for (int r = 0; r < p; r++) {
      uint64_t f = host_footprint_bytes(&scheds[r], links->use_tcp);
      if (f > footprint) footprint = f;
    }
    host_rates rates;
    host_rates_at(links, footprint / host_phases(coll), &rates);
    strata_sim_model model = {.nranks = p,
                              .link = host_link,
                              .ctx = &rates,
                              .reduce_gbps = rates.reduce_gbps,
                              .copy_gbps = rates.memcpy_gbps,
                              .one_core_per_rank = 1,
                              .host_cores = links->host_cores};
    double one_us = 0, many_us = 0;
    if (rc == STRATA_OK) rc = host_sim(&model, scheds, &one_us);
    double per_call_us = one_us;
    /* Calls in a row: a rank starts its next call when its own part of the last is done, so a
     * rooted chain's root and first hops run the next call while the last hops finish this one
     * (a benchmark's loop). Per call: the first call's time plus
     * calls - 1 periods, over calls. */
    if (rc == STRATA_OK && calls > 1 && p > 1) {
      strata_schedule *rep = calloc((size_t)p, sizeof *rep);
      if (!rep) rc = STRATA_ERR_NO_MEMORY;
      for (int r = 0; rc == STRATA_OK && r < p; r++)
        rc = host_repeat(&scheds[r], HOST_PERIOD_CALLS, &rep[r]);
      if (rc == STRATA_OK) rc = host_sim(&model, rep, &many_us);
      double period_us = (many_us - one_us) / (HOST_PERIOD_CALLS - 1);
      if (rc == STRATA_OK) per_call_us = (one_us + (double)(calls - 1) * period_us) / (double)calls;
      for (int r = 0; rep && r < p; r++) strata_schedule_free(&rep[r]);
      free(rep);
    }
    if (rc == STRATA_OK) *time_us = per_call_us + (p > 1 ? links->op_overhead_us : 0);
  }
  for (int r = 0; r < p; r++) strata_schedule_free(&scheds[r]);
  free(scheds);
  return rc;
}

int strata_host_predict(const strata_host_links *links, strata_coll coll, strata_algo algo,
                        uint64_t count, uint32_t elem_size, int root, double *time_us) {
  return strata_host_predict_calls(links, coll, algo, count, elem_size, root, 1, time_us);
}
