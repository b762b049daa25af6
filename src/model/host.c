/*
 * host.c — predict a collective on one host by simulating the engine's schedules (see host.h).
 *
 * The link model is deliberately small: every pair of ranks has the same α and the same rate,
 * measured with the transport the job uses; the simulator's one-core-per-rank mode supplies what
 * a closed formula misses (which core does the copy, that a TCP rank's sends, receives and
 * reductions take turns on its one engine thread, that a fused shm pull+reduce holds only the
 * receiver's core).
 * The rates are not constants: calibrate.c measures each at several working-set sizes, and a
 * prediction reads them at the call's own working set (the bytes its schedule touches per rank),
 * so a call whose buffers stay in cache is costed at cache speed. Fixed costs: α per message
 * (simulated), the engine's per-call overhead (added once).
 * This file must never measure anything: calibrate.c does, so predictions stay reproducible
 * from strata_host_links alone.
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
  double link_gbps, reduce_gbps, memcpy_gbps, fused_gbps, alone_gbps, dirty_gbps, warm_gbps;
  double shared_write_gbps; /* 0 = free */
  double tx_gbps, rx_gbps;  /* TCP: the sender's and the receiver's copy (sim.h); 0 = link */
  uint64_t (*send_hot)[2];  /* per rank: the send-buffer bytes its own local steps read */
  uint64_t footprint_bytes; /* the working set these rates were read at */
  /* per rank: the rates at that rank's own working set; a transfer takes those of whichever of
   * its two ends touches more (host_link). NULL (the per-rank entries themselves): the rates
   * above for every transfer. */
  const struct host_rates *rank_rates;
} host_rates;

int strata_host_cores_shared(const strata_host_links *links) {
  return links->host_cores > 0 && links->host_cores < links->nranks;
}

/* A curve's value at `footprint_bytes`: its rate, or (cost) seconds per GB with a point at 0 GB/s
 * costing nothing. Linear in log(footprint) between points, flat beyond the ends. */
static double host_curve_read(const strata_host_curve *curve, uint64_t footprint_bytes, int cost) {
  const int n = STRATA_HOST_CURVE_POINTS;
  if (!curve || curve->footprint_bytes[0] == 0) return 0;
  double v[STRATA_HOST_CURVE_POINTS];
  for (int i = 0; i < n; i++)
    v[i] = !cost ? curve->gbps[i] : curve->gbps[i] > 0 ? 1.0 / curve->gbps[i] : 0.0;
  if (footprint_bytes <= curve->footprint_bytes[0]) return v[0];
  for (int i = 1; i < n; i++) {
    if (footprint_bytes > curve->footprint_bytes[i]) continue;
    double x0 = log((double)curve->footprint_bytes[i - 1]);
    double x1 = log((double)curve->footprint_bytes[i]);
    double w = x1 > x0 ? (log((double)footprint_bytes) - x0) / (x1 - x0) : 1;
    return v[i - 1] + w * (v[i] - v[i - 1]);
  }
  return v[n - 1];
}

int strata_host_shared_writes_apply(const strata_host_links *links) {
  return links->nranks > 1 && !links->use_tcp && !strata_host_cores_shared(links);
}

double strata_host_curve_gbps(const strata_host_curve *curve, uint64_t footprint_bytes) {
  return host_curve_read(curve, footprint_bytes, 0);
}

/* The rate of `curve` at `footprint_bytes` read in time per byte between points (a point at 0 GB/s
 * costs nothing); 0 if nothing costs anything there. */
static double host_curve_gbps_by_time(const strata_host_curve *curve, uint64_t footprint_bytes) {
  double s_per_gb = host_curve_read(curve, footprint_bytes, 1);
  return s_per_gb > 0 ? 1 / s_per_gb : 0;
}

static void host_link(void *ctx, int src, int dst, strata_sim_link *out) {
  const host_rates *call = ctx, *rates = call;
  if (call->rank_rates) {
    const host_rates *a = &call->rank_rates[src], *b = &call->rank_rates[dst];
    rates = a->footprint_bytes >= b->footprint_bytes ? a : b;
  }
  out->alpha_us = rates->links->alpha_us;
  out->alpha_ends_us = rates->links->alpha_ends_us;
  out->gbps = rates->link_gbps;
  out->shared = -1;
  out->pull = !rates->links->use_tcp;
  out->alone_gbps = out->pull ? rates->alone_gbps : 0;
  out->dirty_gbps = out->pull ? rates->dirty_gbps : 0;
  out->warm_gbps = out->pull ? rates->warm_gbps : 0;
  out->tx_gbps = out->pull ? 0 : rates->tx_gbps;
  out->rx_gbps = out->pull ? 0 : rates->rx_gbps;
  out->send_hot_lo = call->send_hot ? call->send_hot[src][0] : 0;
  out->send_hot_hi = call->send_hot ? call->send_hot[src][1] : 0;
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
 * buffers on the same core (calibrate.c counts its shifts alike). Repeated calls over the same
 * buffers, as a benchmark makes them, keep that much hot: whether it fits a cache decides the
 * rates (docs/model.md).
 * send_hot: the range of the send buffer its own COPY and REDUCE steps read. Those bytes sit in
 * its core's cache when a peer pulls them, in this call or the next, and the pull crosses cores:
 * 2 ranks, shm, 512 KiB blocks, allgather in place 19-25 us, out of place (the own block copied
 * from SEND) 60-86 us, a lone 512 KiB memcpy 10 us. The lines are clean, so such a pull is costed
 * at the warm curve (a shift after the owner copied its source), not the dirty one (after the
 * owner rewrote it): 2-rank shm allgather at 1 MiB, 3 runs, 0.77-0.81 with the dirty rate,
 * 0.90-1.00 with the warm one, 1.13-1.22 with none (session 7). */
static uint64_t host_footprint_bytes(const strata_schedule *sched, int tcp, uint64_t send_hot[2]) {
  uint64_t lo_hi[3][2] = {{0, 0}, {0, 0}, {0, 0}}, kernel = 0;
  send_hot[0] = send_hot[1] = 0;
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
        if (st->src2.buf == STRATA_BUF_SEND) extent_add(send_hot, st->src2.offset, st->bytes);
        /* fall through */
      case STRATA_STEP_COPY:
        buffer_add(lo_hi, st->src, st->bytes);
        buffer_add(lo_hi, st->dst, st->bytes);
        if (st->src.buf == STRATA_BUF_SEND) extent_add(send_hot, st->src.offset, st->bytes);
        break;
      default:
        break;
    }
  }
  return (tcp ? kernel : 0) + (lo_hi[0][1] - lo_hi[0][0]) + (lo_hi[1][1] - lo_hi[1][0]) +
         (lo_hi[2][1] - lo_hi[2][0]);
}

/* Byte range [lo, hi) of one of a rank's buffers. */
typedef struct host_range {
  uint8_t buf;
  uint64_t lo, hi;
} host_range;

static int host_range_cmp(const void *a, const void *b) {
  const host_range *x = a, *y = b;
  if (x->buf != y->buf) return x->buf < y->buf ? -1 : 1;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The bytes of [ref, ref + bytes) inside the sorted, disjoint ranges r[0..n). */
static uint64_t host_overlap(const host_range *r, size_t n, strata_bufref ref, uint64_t bytes) {
  uint64_t lo = ref.offset, hi = ref.offset + bytes, inside = 0;
  size_t a = 0, b = n; /* the first range of ref.buf ending after lo */
  while (a < b) {
    size_t m = a + (b - a) / 2;
    if (r[m].buf < ref.buf || (r[m].buf == ref.buf && r[m].hi <= lo))
      a = m + 1;
    else
      b = m;
  }
  for (size_t i = a; i < n && r[i].buf == ref.buf && r[i].lo < hi; i++)
    inside += (r[i].hi < hi ? r[i].hi : hi) - (r[i].lo > lo ? r[i].lo : lo);
  return inside;
}

/* Per step of `sched`, the bytes it writes that a peer pulls from this rank (shm): the sources of
 * its SENDs, which the receivers' pulls leave in their cores' caches, so a repeated call's write
 * there takes every line back first (host.h, shared_write). The steps that write: a receive's
 * destination (the pull runs on this rank's core) and a local COPY's or REDUCE's. Measured
 * without strata (bench/shared_write.c, 2 processes, a 1 MiB allreduce's traffic by hand, whose
 * reduced half the peer pulls): 113-157 us a call while rewriting 1 MiB of lines the other core
 * read took 85-143 us, 343-476 while it took 405-665, in the host's slow spells (session 15).
 * Used over shm with a core per rank only (host_rates_at); over TCP no peer reads a rank's
 * memory. */
static int host_shared_writes(const strata_schedule *sched, uint64_t *out) {
  size_t n = 0;
  for (uint32_t i = 0; i < sched->nsteps; i++) n += sched->steps[i].kind == STRATA_STEP_SEND;
  host_range *r = malloc((n ? n : 1) * sizeof *r);
  if (!r) return STRATA_ERR_NO_MEMORY;
  n = 0;
  for (uint32_t i = 0; i < sched->nsteps; i++) {
    const strata_step *st = &sched->steps[i];
    if (st->kind == STRATA_STEP_SEND && st->bytes > 0)
      r[n++] = (host_range){st->src.buf, st->src.offset, st->src.offset + st->bytes};
  }
  qsort(r, n, sizeof *r, host_range_cmp);
  size_t m = 0; /* merge overlapping and touching ranges of one buffer */
  for (size_t i = 0; i < n; i++) {
    if (m > 0 && r[m - 1].buf == r[i].buf && r[i].lo <= r[m - 1].hi) {
      if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
    } else {
      r[m++] = r[i];
    }
  }
  for (uint32_t i = 0; i < sched->nsteps; i++) {
    const strata_step *st = &sched->steps[i];
    int writes = st->kind == STRATA_STEP_RECV || st->kind == STRATA_STEP_RECV_REDUCE ||
                 st->kind == STRATA_STEP_COPY || st->kind == STRATA_STEP_REDUCE;
    out[i] = writes ? host_overlap(r, m, st->dst, st->bytes) : 0;
  }
  free(r);
  return STRATA_OK;
}

/* An allreduce's two phases touch its buffers in turn: the reduce-scatter reads the send buffer
 * and lands partial sums, the allgather fills the receive buffer, and what the first writes the
 * second reads while it is still hot. So an allreduce's curves are read at the working set of one
 * phase, half the call's; the one-phase collectives (reduce-scatter, allgather, broadcast, reduce)
 * at the whole. Calibration shifts touch their two buffers at once, as a one-phase call does.
 * Measured, shm allreduce, 2 ranks, out of place, predicted/measured at 1/4/16/64/256 MiB, 3 runs
 * each, alternating, 2026-11-30 21:15 UTC: whole call 0.71-1.20 / 0.59-0.69 / 0.55-0.73 /
 * 0.78-0.80 / 0.83-0.85; one phase 1.14-1.39 / 0.89-1.01 / 0.78-1.07 / 0.85-1.05 / 0.86-0.91.
 * (Halving the one-phase collectives too made them 1.4-3.4x optimistic.) */
static uint64_t host_phases(strata_coll coll) {
  return coll == STRATA_COLL_ALLREDUCE ? 2 : 1;
}

static void host_rates_at(const strata_host_links *links, uint64_t footprint_bytes,
                          host_rates *out) {
  out->links = links;
  out->footprint_bytes = footprint_bytes;
  /* Both transports at the working set. (TCP was read flat at the largest point while its
   * calibration posted point-to-point messages from the caller's thread: those shifts had a cache
   * credit the collectives did not show. Timed through the engine's own allgather, the TCP curve
   * and the allreduce agree: 2 ranks over loopback, 64 KiB chunks, 2 runs, predicted/measured
   * 0.95-1.44 / 0.96-0.98 / 1.01 / 0.91-1.00 / 0.91-0.92 at 1/4/16/64/256 MiB, where flat gave
   * 0.69-0.72 / 0.75-0.76 / 0.81-0.87 / 0.95-1.01 / 0.89.) */
  uint64_t link_at = footprint_bytes;
  out->link_gbps = strata_host_curve_gbps(&links->link, link_at);
  out->reduce_gbps = strata_host_curve_gbps(&links->reduce, footprint_bytes);
  /* A copy's rate is read in seconds per byte between points (the others in GB/s): past a
   * cache a copy's time grows with the share of its lines that miss, and memcpy falls furthest
   * across this host's shared L3 (4 MiB point 35-45 GB/s, 16 MiB point 7-12). Read in GB/s, a
   * working set between them (the 2-rank shm allgather at 16 MiB, out of place: 24 MiB per rank)
   * was costed most of the way to the cache's rate. Re-scored on six sweeps' rows (session 19,
   * two of them measured after the choice), cells inside by median 2 ranks 223 -> 228 of 240,
   * 4 ranks 208 -> 206; every curve read this way (session 16) lost cells in every run.
   * docs/model.md, Agreement. */
  out->memcpy_gbps = host_curve_gbps_by_time(&links->memcpy, footprint_bytes);
  out->fused_gbps = strata_host_curve_gbps(&links->fused, footprint_bytes);
  out->alone_gbps = strata_host_curve_gbps(&links->link_alone, link_at);
  out->dirty_gbps = strata_host_curve_gbps(&links->link_dirty, link_at);
  out->warm_gbps = strata_host_curve_gbps(&links->link_warm, link_at);
  /* shared writes: only with a core per rank (strata_host_shared_writes_apply). With ranks
   * outnumbering cores the calibrated difference is mostly ranks waiting for a core: 4 ranks on
   * 2 cores, 1.0-1.3 GB/s at 512 KiB in a slow spell, which made the 4-rank shm rows 0.25-0.69 of
   * the measurement at 1-4 MiB (session 15, the 14:52 sweep). */
  out->shared_write_gbps = strata_host_shared_writes_apply(links)
                               ? host_curve_gbps_by_time(&links->shared_write, link_at)
                               : 0;
  /* TCP: the two-way link rate is the mean of a sender's and a receiver's copy (2X per core in
   * T); the one-way (lone) rate is the sender's, so the receiver's copy takes the rest of the
   * time: 1/rx = 2/link - 1/tx, at most 10x faster than the sender's. */
  out->tx_gbps = out->rx_gbps = 0;
  if (links->use_tcp && out->alone_gbps > 0 && out->link_gbps > 0) {
    double tx = out->alone_gbps < out->link_gbps ? out->alone_gbps : out->link_gbps;
    double rx_per_gb = 2 / out->link_gbps - 1 / tx, floor_per_gb = 0.1 / tx;
    out->tx_gbps = tx;
    out->rx_gbps = 1 / (rx_per_gb > floor_per_gb ? rx_per_gb : floor_per_gb);
  }
  /* links filled by hand (tests, older callers): the single figures */
  if (out->link_gbps <= 0) out->link_gbps = links->link_gbps;
  if (out->reduce_gbps <= 0) out->reduce_gbps = links->reduce_gbps;
  if (out->memcpy_gbps <= 0) out->memcpy_gbps = links->memcpy_gbps;
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

/* Simulate `scheds` (one per rank) with `model` (its shared-write bytes are filled here, per
 * step of these schedules, when rates->shared_write_gbps applies): the time the last rank ends. */
static int host_sim(strata_sim_model model, const host_rates *rates, const strata_schedule *scheds,
                    double *time_us) {
  int p = model.nranks, rc = STRATA_OK;
  uint64_t **shared = NULL;
  if (rates->shared_write_gbps > 0) {
    shared = calloc((size_t)p, sizeof *shared);
    if (!shared) rc = STRATA_ERR_NO_MEMORY;
    for (int r = 0; rc == STRATA_OK && r < p; r++) {
      shared[r] = calloc(scheds[r].nsteps ? scheds[r].nsteps : 1, sizeof *shared[r]);
      rc = shared[r] ? host_shared_writes(&scheds[r], shared[r]) : STRATA_ERR_NO_MEMORY;
    }
  }
  model.shared_write_gbps = shared ? rates->shared_write_gbps : 0;
  model.shared_write_bytes = (const uint64_t *const *)shared;
  strata_sim_result result;
  if (rc == STRATA_OK) rc = strata_sim_run(&model, scheds, &result);
  if (rc == STRATA_OK) *time_us = result.time_us;
  for (int r = 0; shared && r < p; r++) free(shared[r]);
  free(shared);
  return rc;
}

/* How many calls the period of back-to-back calls is simulated over (host.h,
 * strata_host_predict_calls): the period is (T(HOST_PERIOD_CALLS) - T(1)) / (HOST_PERIOD_CALLS -
 * 1), past the first call, which also fills the pipeline. */
#define HOST_PERIOD_CALLS 3

int strata_host_predict_calls(const strata_host_links *links, strata_coll coll, strata_algo algo,
                              uint64_t count, uint32_t elem_size, int root, uint64_t calls,
                              double *time_us) {
  if (!links || !time_us || links->nranks < 1 || elem_size == 0 || links->link_gbps <= 0 ||
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
    /* Local steps and the shared-write cost: at the largest rank's working set. A transfer: at
     * the larger of its two ends' (its rate depends on both ends' buffers), so in a rooted call
     * (a broadcast root touches its send and receive buffers, the others one) the pulls from the
     * root are read at the root's and a chain's later hops at their own ranks'. Read at the
     * root's for every hop, the 4-rank shm chain broadcast at 16 MiB (one round, three hops in
     * turn) was 0.68 and 0.64 of the measurement by median on two sweeps; at each hop's own, 0.81
     * and 0.73, no other row of the table moving (session 20, docs/model.md). */
    uint64_t(*send_hot)[2] = calloc((size_t)p, sizeof *send_hot);
    host_rates *rank_rates = calloc((size_t)p, sizeof *rank_rates);
    if (!send_hot || !rank_rates) rc = STRATA_ERR_NO_MEMORY;
    int largest = 0;
    for (int r = 0; rc == STRATA_OK && r < p; r++) {
      uint64_t f = host_footprint_bytes(&scheds[r], links->use_tcp, send_hot[r]);
      host_rates_at(links, f / host_phases(coll), &rank_rates[r]);
      if (rank_rates[r].footprint_bytes > rank_rates[largest].footprint_bytes) largest = r;
    }
    host_rates rates = {0};
    if (rc == STRATA_OK) rates = rank_rates[largest];
    rates.send_hot = send_hot;
    rates.rank_rates = rank_rates;
    strata_sim_model model = {.nranks = p,
                              .link = host_link,
                              .ctx = &rates,
                              .reduce_gbps = rates.reduce_gbps,
                              .copy_gbps = rates.memcpy_gbps,
                              .one_core_per_rank = 1,
                              .fused_reduce_gbps = rates.fused_gbps,
                              .host_cores = links->host_cores};
    double one_us = 0, many_us = 0;
    if (rc == STRATA_OK) rc = host_sim(model, &rates, scheds, &one_us);
    double per_call_us = one_us;
    /* Calls in a row: a rank starts its next call when its own part of the last is done, so a
     * rooted chain's root and first hops run the next call while the last hops finish this one
     * (a benchmark's loop; docs/model.md, session 21). Per call: the first call's time plus
     * calls - 1 periods, over calls. */
    if (rc == STRATA_OK && calls > 1 && p > 1) {
      strata_schedule *rep = calloc((size_t)p, sizeof *rep);
      if (!rep) rc = STRATA_ERR_NO_MEMORY;
      for (int r = 0; rc == STRATA_OK && r < p; r++)
        rc = host_repeat(&scheds[r], HOST_PERIOD_CALLS, &rep[r]);
      if (rc == STRATA_OK) rc = host_sim(model, &rates, rep, &many_us);
      double period_us = (many_us - one_us) / (HOST_PERIOD_CALLS - 1);
      if (rc == STRATA_OK) per_call_us = (one_us + (double)(calls - 1) * period_us) / (double)calls;
      for (int r = 0; rep && r < p; r++) strata_schedule_free(&rep[r]);
      free(rep);
    }
    if (rc == STRATA_OK) *time_us = per_call_us + (p > 1 ? links->op_overhead_us : 0);
    free(send_hot);
    free(rank_rates);
  }
  for (int r = 0; r < p; r++) strata_schedule_free(&scheds[r]);
  free(scheds);
  return rc;
}

int strata_host_predict(const strata_host_links *links, strata_coll coll, strata_algo algo,
                        uint64_t count, uint32_t elem_size, int root, double *time_us) {
  return strata_host_predict_calls(links, coll, algo, count, elem_size, root, 1, time_us);
}
