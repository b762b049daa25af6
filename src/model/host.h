/*
 * host.h — `strata bench --predict`: the links of the host a job runs on, measured inside the
 * job, and the time the engine's own schedules should take over them.
 *
 * One host, one rank per process, each rank's work done by one engine thread. A large transfer
 * between two ranks is either a single-copy pull by the receiver's core (shm with cross-memory
 * attach: the sender's core stays free, and a reduction on receipt is fused into the pull, block
 * by block, at an extra cost calibrated separately), or a TCP stream over loopback (the sender's
 * core copies into the kernel, the receiver's core copies out; a reduction is a separate pass).
 * strata_host_calibrate measures what that model needs with the transport the collectives will
 * use — fixed costs, and rates as functions of the working set (the caches) — and
 * strata_host_predict runs the simulator (sim.h, one core per rank) over exactly the schedules
 * strata_schedule_build gives the engine for that call: same algorithm choice, same chunk size.
 *
 * Calibration is collective (every rank calls it, in the same order as its other collectives)
 * and takes about a second on a quiet 2-core host (longer when loaded); prediction is local and
 * pure. docs/model.md says how well it agrees with the measurement, and where it does not.
 */
#ifndef STRATA_MODEL_HOST_H
#define STRATA_MODEL_HOST_H

#include <stdint.h>

#include "strata.h"

/* Calibration points: every rate is measured at this many working-set sizes (the bytes one rank
 * touches per repetition), from one that fits a core's L2 to one that only DRAM holds, because
 * on a real host a copy or a reduction over buffers that stay in cache runs several times faster
 * than one that streams from memory (docs/model.md has this host's figures). */
/* The last point is the *span point*: the largest point's transfers again, averaged over windows
 * spread across the caller's whole buffers (strata_host_calibrate_on), at the working set of
 * those buffers (span_scale below); the points before it run on the buffers' first bytes. */
#define STRATA_HOST_CURVE_POINTS 6

typedef struct strata_host_curve {
  uint64_t footprint_bytes[STRATA_HOST_CURVE_POINTS]; /* per rank, ascending */
  double gbps[STRATA_HOST_CURVE_POINTS];
} strata_host_curve;

typedef struct strata_host_links {
  int nranks;
  int use_tcp;           /* 1: some peer is reached over TCP; 0: all by shared memory */
  double alpha_us;       /* latency of one small message, ring neighbour to neighbour */
  double alpha_ends_us;  /* 3+ ranks: the same down a chain, each message's two ends running and
                            the others waiting (calibrate.c, cal_chain_pair); 0 = alpha_us */
  double call_us;        /* calibration's one-element call (its α's and the overhead): the fixed
                            cost taken off TCP points (strata_host_probe takes it off too) */
  double op_overhead_us; /* the engine's fixed cost of one collective call beyond its messages'
                            α (posting, waking the progress thread, completing): once per call */
  /* The figures at the largest calibrated working set (DRAM-bound), for printing: */
  double link_gbps;   /* GB/s of one large transfer on the core(s) it occupies */
  double reduce_gbps; /* GB/s of the reduction kernel (bytes of one operand) on the dtype */
  double memcpy_gbps; /* GB/s of a local copy */
  /* The same rates as functions of the working set; a prediction reads them at the call's own
   * working set (host.c). fused: the reduction a shm pull fuses in (dst = src OP block, the
   * block just pulled and still in L2), an extra pass on the receiver's core. */
  strata_host_curve link, reduce, memcpy, fused;
  /* shm, 2+ ranks: one pull while every other rank idles (rank 1 from rank 0). `link` is measured
   * with every rank pulling at once; on this host two pulls at once each ran somewhat slower
   * than a lone one (2 ranks, 16 MiB: 6.6 against 10.2 GB/s, session 6). TCP: the sending core's
   * rate in a one-way stream from rank 0 to rank 1 (host.c splits the two-way link rate into a
   * sender's and a receiver's copy with it), at the link curve's footprints. */
  strata_host_curve link_alone;
  /* shm: ring shifts whose source its owner has just written (still in that core's cache, so
   * every line crosses from the other core): 512 KiB measured 9.4 GB/s against 28.6 from a
   * buffer not written since (session 4). Used for pulls from the sender's receive or scratch
   * buffer, which the call itself wrote. Empty over TCP (the sender's own core copies). */
  strata_host_curve link_dirty;
  /* shm: ring shifts whose source its owner has just read (copied into another buffer), as a
   * call's own COPY or REDUCE reads its send buffer before or while a peer pulls it: the lines
   * are clean but sit in that core's cache. Between a clean and a dirty source: 2 ranks, 512 KiB
   * (session 7). Empty over TCP, and in runs printed before session 7 (the dirty rate then
   * stands in). */
  strata_host_curve link_warm;
  /* shm: bytes per second of the extra a core pays to write lines a peer's pull left in that
   * peer's cache (each line is taken back first), beyond a write to lines it holds alone. A
   * repeated call pays it wherever it writes bytes a peer pulls: a 2-rank allreduce's reduced
   * half, a ring's forwarded blocks (host.c). On this host, 1 MiB: ~100 us per MiB when the two
   * vCPUs share a cache, ~400 in spells when they do not (docs/model.md, session 15). 0 = free
   * (over TCP, in runs printed before session 15, and where calibration saw no difference). */
  strata_host_curve shared_write;
  uint64_t chunk_bytes; /* the engine's pipelining unit for this communicator */
  strata_algo algo;     /* the communicator's forced algorithm (STRATA_ALGO), or AUTO */
  int host_cores;       /* every rank on this host (one kernel): its online CPUs; else 0 */
  /* the span point's working set over the largest point's: how many of the largest point's
   * shifts the calibrated buffers hold (1: the span point repeats the largest point) */
  uint32_t span_scale;
} strata_host_links;

/* All ranks on one host with fewer cores than ranks (host_cores set and below nranks): the ranks
 * take turns on the cores, which calibration and the simulator both account for. */
int strata_host_cores_shared(const strata_host_links *links);

/* Whether the shared-write cost applies to `links` (shm, 2+ ranks, a core per rank): where
 * calibration and strata_host_probe measure it and the prediction charges it. With
 * ranks outnumbering cores a peer may run on the writer's own core, and over TCP no peer reads a
 * rank's memory. */
int strata_host_shared_writes_apply(const strata_host_links *links);

/* The rate of `curve` at a working set of `footprint_bytes` per rank: interpolated linearly in
 * log(footprint) between calibration points, flat beyond the ends. 0 if the curve is empty. */
double strata_host_curve_gbps(const strata_host_curve *curve, uint64_t footprint_bytes);

/* Measure `out` on `comm` (collective: every rank calls it). The reduction kernel is timed on
 * `dtype` and `op`. α: ring shifts of 8 bytes (each rank sends to rank+1 and receives from
 * rank-1 at once); link: ring shifts at each calibration size, converted to the rate of one
 * transfer on the core(s) it holds (shm: the puller's; TCP: both ends'); γ and memcpy: local, one
 * rank per core at once (calibrate.c); the fused reduction: through the engine, every rank at
 * once. Sizes run from STRATA_HOST_CALIBRATE_MIN_BYTES up by 4x to STRATA_HOST_CALIBRATE_BYTES.
 * Each figure is the median of a few repetitions, the slowest rank's. Returns STRATA_OK or the
 * error of a failed collective. Never uses the collectives it will predict to measure a rate. */
#define STRATA_HOST_CALIBRATE_MIN_BYTES ((uint64_t)256 << 10)
#define STRATA_HOST_CALIBRATE_BYTES ((uint64_t)64 << 20)
/* Bytes per rank that calibration point i (0 .. STRATA_HOST_CURVE_POINTS-1) moves in one
 * transfer (the span point: the largest point's, once per window). */
uint64_t strata_host_point_bytes(int i);
/* Set point i's working set (footprint_bytes[i]) of every curve that applies to l->nranks and
 * l->use_tcp, as calibration measures it; the rates are left alone. */
void strata_host_point_footprints(strata_host_links *l, int i);
/* The figures that move with the host's state, measured again before each row of
 * `strata bench --predict` (strata_host_probe), because a row predicted with calibration's
 * figures was predicted for another state of the host:
 *  - shared writes (shm, where strata_host_shared_writes_apply), the points up to 16 MiB per
 *    rank: 4x in spells of seconds (two vCPUs sharing a cache or not, docs/model.md session 15);
 *  - TCP's link and one-way (lone) curves (some peer over TCP), the points up to 4 MiB per rank:
 *    over loopback the same small transfers run in states of seconds ~3x apart (2 ranks, 256 KiB
 *    per rank: a link rate of 1.9 GB/s in one calibration and 6.1 in another while the 1 MiB
 *    allreduce rows after both ran 3.1-3.4 GB/s busbw; session 16).
 * At most one applies to a communicator. */
#define STRATA_HOST_SHARED_WRITE_MAX_BYTES ((uint64_t)16 << 20)
#define STRATA_HOST_PROBE_TCP_MAX_BYTES ((uint64_t)4 << 20)
typedef enum strata_host_probe_kind {
  STRATA_HOST_PROBE_NONE = 0,
  STRATA_HOST_PROBE_SHARED_WRITE, /* links->shared_write */
  STRATA_HOST_PROBE_TCP           /* links->link and links->link_alone */
} strata_host_probe_kind;
/* Which figures strata_host_probe measures for `links`, and at how many points (*points: 0 ..
 * n-1, every curve's first points). */
strata_host_probe_kind strata_host_probe_plan(const strata_host_links *links, int *points);
/* Measure them again, now (collective: every rank calls it), on the caller's buffers a, b, c (each
 * at least the points' bytes; the same buffers as calibration's; b and c are written): each
 * point once (calibration averages three passes), the slowest rank's, the other points and
 * curves left alone. No-op where nothing applies. Returns STRATA_OK or a failed collective's
 * error, the curves then as they were. */
int strata_host_probe(strata_comm *comm, void *a, void *b, void *c, strata_host_links *links);

/* registered: measure with buffers from strata_mem_alloc (peers of one host read them
 * directly), as the calls to be predicted will use; 0: malloc'd buffers. */
int strata_host_calibrate(strata_comm *comm, strata_dtype dtype, strata_op op, int registered,
                          strata_host_links *out);

/* The same, measured on the caller's own buffers: the ones the calls to be predicted will use.
 * Which physical pages a buffer got decides a good part of its rates on a host whose caches and
 * memory are shared (session 10, bench/buffer_sets.c: 2 ranks, shm, one allgather of 8 MiB
 * blocks over four buffer sets of one process, each set steady from round to round, the sets up
 * to 1.6x apart), so rates measured on buffers of their own told the prediction about other
 * pages than the benchmark's (docs/model.md). a, b and c each hold `span` bytes, at least
 * STRATA_HOST_CALIBRATE_BYTES, and do not overlap; malloc'd or from strata_mem_alloc, peers read
 * either kind. The largest point is measured across all of them (calibrate.c, cal_point). Their
 * contents are overwritten. A rank passing NULL fails the calibration on every rank
 * (STRATA_ERR_NO_MEMORY), one passing a smaller span likewise (STRATA_ERR_INVALID_ARG). */
int strata_host_calibrate_on(strata_comm *comm, strata_dtype dtype, strata_op op, void *a, void *b,
                             void *c, size_t span, strata_host_links *out);

/* Predicted time (µs) of one out-of-place call of `coll` with `count` elements of `elem_size`
 * bytes (count as the public API means it), `root` for rooted collectives, over `links`.
 * The algorithm is what the engine would build: `algo` if it applies to `coll` (else
 * links->algo if it applies, else AUTO). Returns STRATA_OK or a schedule/simulator error. */
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
