/*
 * calibrate.c — measure, inside a running job, the host links strata_host_predict needs
 * (host.h): the fixed costs (α per message, the engine's cost per call) and, as functions of the
 * working set, the rate of one transfer, of the reduction kernel, of memcpy, of what a fused
 * shm pull adds to a plain one, and of what writing lines a peer's pull left in its cache adds
 * (shm; measured again before each row by strata_host_probe, since that cost moves with the
 * host in spells, as TCP's link rates do).
 *
 * Why inside the job: the prediction must be about the links this job actually uses (shm with
 * single-copy pulls, or TCP when STRATA_SHM=0), under the load the host has right now, with as
 * many ranks sharing its cores as the collectives will. So transfers are ring shifts among all
 * ranks at once (each rank sends to rank+1 and receives from rank-1: the traffic of a ring step,
 * in messages of the engine's chunk), and the local kernels run on every rank at the same time.
 *
 * Why curves: a copy over buffers a core's L2 holds runs at tens of GB/s, one that streams from
 * DRAM at a few (docs/model.md has this host's figures). Each rate is measured at sizes of
 * 256 KiB to 64 MiB per rank (x4), each repeated over the same buffers as a benchmark repeats a
 * call, then once more over the whole buffers (the span point, cal_point), and host.c reads the
 * curve at the call's own working set. Nothing here is fitted to the benchmark rows it will
 * predict: the points are fixed sizes, measured by microbenchmarks before any row runs.
 *
 * Converting a ring shift of X bytes that took T to a link rate: over shm each rank's core pulls
 * X (the sender's core is free), so one pull runs at X/(T-α); over TCP each rank's core copies X
 * into the kernel and X out of it, taking turns, so each copy runs at 2X/(T-α). That is exactly
 * the simulator's one-core-per-rank model (sim.h), which is what makes the two consistent. (A
 * TCP model that split the shift's time into core time, from the process's CPU clock, and a
 * slower stream was tried: it predicted 1.3-1.6x too fast at every size here, and was dropped.
 * So was the simulator's port model for TCP, the stream's rate per direction with the cores
 * free to reduce: no closer, and 1.2-1.4x too fast at 64-256 MiB, where the 2 cores that run
 * the kernel's copies also run the reductions.)
 *
 * The fused pull (shm.c: the receiver lands 256 KiB blocks of the peer's bytes with
 * process_vm_readv and reduces each while it is in L2) costs far more than a plain pull on this
 * kind of host (about twice, measured) and no local emulation reproduced that, so it is timed
 * through the engine itself: a ring reduce-scatter of p blocks is p-1 fused ring steps, each
 * paired with a plain shift of the same block timed right after it (cal_fused_s).
 *
 * Invariants: every rank makes the same sequence of calls (sizes and counts come from constants
 * and the communicator alone; whether to time the fused step is agreed by an allreduce). Must
 * never: leave a request unwaited, or print.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/schedule.h"
#include "core/core.h"
#include "engine/engine.h"
#include "model/host.h"

#define CAL_REPEATS 5
/* Passes over all the points (strata_host_calibrate_on), each figure the mean over them. The
 * host's slow spells last tens of milliseconds, a point's repetitions as long: in one run of a
 * 2-rank shm broadcast the whole 16 MiB point measured 2.95 GB/s for a shift and for a warm pull,
 * where the next run's measured 6.45 and 8.72 and both runs' rows pulled at 9.5-11 GB/s. The
 * median over passes was tried (the rows then ran slower than predicted: they average the spells
 * in; 2 ranks, 32 of 40 cells inside by median against 37 with the mean, one sweep each). */
#define CAL_PASSES 3
#define CAL_SMALL_CALLS 51
#define CAL_SMALL_BYTES 8
/* Each repetition of a measurement moves at least this much, so small sizes are not timer noise
 * (and, repeated over the same buffers, stay in whatever cache level holds them). */
#define CAL_REP_MIN_BYTES ((uint64_t)4 << 20)

/* One ring shift of `bytes` cut into messages of at most `message_bytes` (the engine's chunk),
 * with at most STRATA_SCHED_RING_CHUNKS_IN_FLIGHT of them in flight, as the ring keeps its rounds
 * (message i is posted once message i - window has landed). Posting every chunk at once is not
 * what a collective does, and over TCP it measured a quarter slower than the ring's own
 * streaming (64 MiB per rank, 2 ranks: 2.6-2.7 against 3.3-3.8 GB/s for both directions
 * together). lone: the same messages, but only rank 0 sends (to rank 1) and only rank 1
 * receives: a lone pull, every other rank idle (it runs an empty schedule).
 *
 * The shift is one engine operation, driven by the waiting caller as a collective is
 * (strata_engine_run_schedule), so its messages are handed over by engine threads that are
 * already running. Timed through strata_irecv + strata_isend, as until session 8, every post
 * woke the progress thread: on this host an 8-byte shift took 17 us that way against 1.5 us for
 * a one-element collective, and the fixed cost taken off each point (alpha) came out anywhere
 * in 1-24 us from run to run (2 ranks over shm), which moved the 1 MiB rows' predictions by a
 * third. */
static int cal_shift(strata_comm *comm, const char *out, char *in, size_t bytes,
                     size_t message_bytes, int lone) {
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);
  int to = lone ? (rank == 0 ? 1 : -1) : (rank + 1) % n;
  int from = lone ? (rank == 1 ? 0 : -1) : (rank - 1 + n) % n;
  size_t count =
      message_bytes && bytes > message_bytes ? (bytes + message_bytes - 1) / message_bytes : 1;
  size_t each = (bytes + count - 1) / count;
  const size_t window = STRATA_SCHED_RING_CHUNKS_IN_FLIGHT;
  strata_schedule s = {
      .rank = rank, .nranks = n, .coll = STRATA_COLL_ALLGATHER, .algo = STRATA_ALGO_RING};
  int *recv_step = calloc(count, sizeof *recv_step), *send_step = calloc(count, sizeof *send_step);
  if (!recv_step || !send_step) {
    free(recv_step);
    free(send_step);
    return STRATA_ERR_NO_MEMORY;
  }
  for (size_t i = 0; i < count; i++) {
    size_t off = i * each, len = bytes - off < each ? bytes - off : each;
    uint32_t dep;
    if (from >= 0) {
      dep = i >= window ? (uint32_t)recv_step[i - window] : 0;
      recv_step[i] =
          strata_sched_recv(&s, from, strata_ref(STRATA_BUF_RECV, off), len, &dep, i >= window);
    }
    if (to >= 0) {
      dep = i >= window ? (uint32_t)send_step[i - window] : 0;
      send_step[i] =
          strata_sched_send(&s, to, strata_ref(STRATA_BUF_SEND, off), len, &dep, i >= window);
    }
  }
  free(recv_step);
  free(send_step);
  strata_coll_args name = {.coll = STRATA_COLL_ALLGATHER,
                           .count = bytes,
                           .dtype = STRATA_U8,
                           .algo = STRATA_ALGO_RING,
                           .compress = STRATA_COMPRESS_NONE};
  return strata_engine_run_schedule(comm, &name, &s, (void *)out, to >= 0 ? bytes : 0, in,
                                    from >= 0 ? bytes : 0);
}

/* Bytes per rank of calibration point i: STRATA_HOST_CALIBRATE_MIN_BYTES quadrupling up to
 * STRATA_HOST_CALIBRATE_BYTES. Doubling (9 points) was tried: it read the 1 MiB rows at the
 * L2 rates of a 1 MiB point, which calls between two cores do not reach (2 ranks, predicted /
 * measured: reduce-scatter over TCP 1.50-1.75, allgather over shm 1.39-1.53; quadrupling
 * 1.23-1.33 and 1.03-1.24 the same hour). */
uint64_t strata_host_point_bytes(int i) {
  const int largest = STRATA_HOST_CURVE_POINTS - 2; /* the span point moves its bytes */
  return STRATA_HOST_CALIBRATE_MIN_BYTES << (2 * (i < largest ? i : largest));
}

static double fastest(const double *v, int n) {
  double best = v[0];
  for (int i = 1; i < n; i++)
    if (v[i] < best) best = v[i];
  return best;
}

static int cal_reps_for(size_t bytes) {
  uint64_t reps = bytes ? CAL_REP_MIN_BYTES / bytes : 1;
  return reps < 1 ? 1 : (int)reps;
}

/* Median seconds of one shift of `bytes` (each repetition `shifts` shifts; lone: cal_shift's
 * lone pull, which ranks other than 0 and 1 time as nothing). */
static int cal_shift_s(strata_comm *comm, char *out, char *in, size_t bytes, size_t message_bytes,
                       int shifts, int lone, double *seconds) {
  double t[CAL_REPEATS];
  int rc = cal_shift(comm, out, in, bytes, message_bytes, lone); /* warm-up: pages, caches */
  if (!rc) rc = strata_barrier(comm);
  for (int r = 0; !rc && r < CAL_REPEATS; r++) {
    double start_s = strata_now_s();
    for (int i = 0; !rc && i < shifts; i++)
      rc = cal_shift(comm, out, in, bytes, message_bytes, lone);
    t[r] = (strata_now_s() - start_s) / shifts;
  }
  if (!rc) *seconds = strata_median(t, CAL_REPEATS);
  return rc;
}

/* Median seconds of one ring shift of `bytes` whose source every rank has just rewritten (so it
 * sits dirty in the writer's cache when the neighbour pulls it), or, given `copy_to`, has just
 * read by copying it there (clean, but in the reader's cache: what a call's own COPY or REDUCE
 * of its send buffer leaves for the peers that pull it). Each shift is timed alone, between the
 * touch and a barrier. */
#define CAL_DIRTY_SHIFTS 9
static int cal_touched_s(strata_comm *comm, char *out, char *in, char *copy_to, size_t bytes,
                         size_t message_bytes, double *seconds) {
  double t[CAL_DIRTY_SHIFTS];
  int rc = cal_shift(comm, out, in, bytes, message_bytes, 0); /* warm-up */
  for (int k = 0; !rc && k < CAL_DIRTY_SHIFTS; k++) {
    if (copy_to)
      memcpy(copy_to, out, bytes);
    else
      memset(out, k, bytes); /* zeros and small bytes: the content does not matter to a shift */
    rc = strata_barrier(comm);
    double start_s = strata_now_s();
    if (!rc) rc = cal_shift(comm, out, in, bytes, message_bytes, 0);
    t[k] = strata_now_s() - start_s;
  }
  if (!rc) *seconds = strata_median(t, CAL_DIRTY_SHIFTS);
  return rc;
}

/* Median extra seconds of a ring shift whose destination the neighbour has just pulled, over
 * the same shift again at once (its destination then held by this rank's core alone). The
 * neighbour's pull (a shift back, out of `in` into `spare`) leaves the lines in its core's cache,
 * so the next pull into them takes every line back first: what a repeated call pays where it
 * writes bytes a peer pulls (a 2-rank allreduce's reduced half, a ring's forwarded blocks;
 * host.c). Each shift is timed alone, between barriers. */
static int cal_shared_write_s(strata_comm *comm, char *out, char *in, char *spare, size_t bytes,
                              size_t message_bytes, double *seconds) {
  double t[CAL_DIRTY_SHIFTS];
  int rc = cal_shift(comm, in, spare, bytes, message_bytes, 0); /* the neighbour pulls `in` */
  for (int k = 0; !rc && k < CAL_DIRTY_SHIFTS; k++) {
    double s[2] = {0, 0};
    for (int j = 0; !rc && j < 2; j++) {
      rc = strata_barrier(comm);
      double start_s = strata_now_s();
      if (!rc) rc = cal_shift(comm, out, in, bytes, message_bytes, 0);
      s[j] = strata_now_s() - start_s;
    }
    t[k] = s[0] - s[1];
    if (!rc) rc = cal_shift(comm, in, spare, bytes, message_bytes, 0);
  }
  if (!rc) {
    double m = strata_median(t, CAL_DIRTY_SHIFTS);
    *seconds = m > 0 ? m : 0;
  }
  return rc;
}

/* Median seconds of one collective call (each repetition enough calls to move `bytes` at
 * least CAL_REP_MIN_BYTES). */
static int cal_coll_s(strata_comm *comm, const strata_coll_args *args, size_t bytes,
                      double *seconds) {
  int calls = cal_reps_for(bytes);
  double t[CAL_REPEATS];
  int rc = strata_collective(comm, args, NULL); /* warm-up */
  if (!rc) rc = strata_barrier(comm);
  for (int r = 0; !rc && r < CAL_REPEATS; r++) {
    double start_s = strata_now_s();
    for (int i = 0; !rc && i < calls; i++) rc = strata_collective(comm, args, NULL);
    t[r] = (strata_now_s() - start_s) / calls;
  }
  if (!rc) *seconds = strata_median(t, CAL_REPEATS);
  return rc;
}

/* What a fused pull adds, measured in pairs: each repetition times reduce-scatter calls (`args`,
 * p-1 fused steps of `bytes`) and then as many plain shifts of `bytes` out of the same send
 * buffer into the same receive buffer, and keeps rs - (p-1) * shift per call; the figure is the
 * median over repetitions. The difference is a small share of either time at the small points
 * (2 ranks, 256 KiB: ~10 us of ~37), so each repetition's pair sees the same moment of the host:
 * timed apart (the shift first, with the other points' figures between), the difference came out
 * anywhere in 0-10 us from run to run and the 1 MiB reduce-scatter rows 1.2-1.7x optimistic. */
static int cal_fused_s(strata_comm *comm, const strata_coll_args *args, char *out, char *in,
                       size_t bytes, size_t message_bytes, double *seconds) {
  int calls = cal_reps_for(bytes), steps = strata_comm_size(comm) - 1;
  double d[CAL_REPEATS];
  int rc = strata_collective(comm, args, NULL); /* warm-up */
  if (!rc) rc = cal_shift(comm, out, in, bytes, message_bytes, 0);
  if (!rc) rc = strata_barrier(comm);
  for (int r = 0; !rc && r < CAL_REPEATS; r++) {
    double start_s = strata_now_s();
    for (int i = 0; !rc && i < calls; i++) rc = strata_collective(comm, args, NULL);
    double mid_s = strata_now_s();
    for (int i = 0; !rc && i < calls; i++) rc = cal_shift(comm, out, in, bytes, message_bytes, 0);
    double end_s = strata_now_s();
    d[r] = ((mid_s - start_s) - steps * (end_s - mid_s)) / calls;
  }
  if (!rc) *seconds = strata_median(d, CAL_REPEATS);
  return rc;
}

/* Over TCP a shift is timed through the engine: a ring allgather in place, each rank's block
 * `block` bytes, so every rank sends and receives (p-1) blocks, chunked and windowed by the ring
 * builder as a collective's messages are, with the engine thread posting each next message
 * itself. Point-to-point requests waited on from this thread pay a wake-up of the caller per
 * message: with the 64 KiB TCP chunk that was most of the time (a 64 MiB shift measured 0.9 GB/s
 * per direction while an allreduce of the same size moved 2.2-2.5). */
static int cal_engine_shift_s(strata_comm *comm, char *buf, size_t block, double *seconds) {
  strata_coll_args args = {.coll = STRATA_COLL_ALLGATHER,
                           .sendbuf = buf + (size_t)strata_comm_rank(comm) * block,
                           .recvbuf = buf,
                           .count = block,
                           .dtype = STRATA_U8,
                           .algo = STRATA_ALGO_AUTO,
                           .compress = STRATA_COMPRESS_NONE};
  return cal_coll_s(comm, &args, block * (size_t)(strata_comm_size(comm) - 1), seconds);
}

/* Bytes one rank sends (and receives) in point i's shift, and the bytes it touches doing so. shm:
 * a ring shift of X from one buffer into another. TCP: the allgather above, whose p blocks must
 * fit one calibration buffer. */
static void cal_shift_geometry(int i, int nranks, int tcp, uint64_t *moved, uint64_t *footprint) {
  uint64_t bytes = strata_host_point_bytes(i);
  if (!tcp || nranks < 2) {
    *moved = bytes;
    *footprint = 2 * bytes;
    return;
  }
  uint64_t block = bytes / (uint64_t)(nranks - 1),
           most = STRATA_HOST_CALIBRATE_BYTES / (uint64_t)nranks;
  if (block > most) block = most;
  *moved = block * (uint64_t)(nranks - 1);
  /* the buffer, and what crosses the kernel's socket buffers both ways (host.c counts a call's
   * transfers alike: 2 ranks, 1 MiB reduce-scatter 1.13 -> 1.01, allreduce 1.26 -> 1.21) */
  *footprint = block * (uint64_t)nranks + 2 * *moved;
}

typedef enum cal_local_kind { CAL_MEMCPY, CAL_REDUCE } cal_local_kind;

/* One pass of a local kernel over `bytes`: dst = a, or dst = a OP b. */
static void cal_local_pass(cal_local_kind kind, strata_reduce_fn op_fn, size_t elem_size, char *dst,
                           const char *a, const char *b, size_t bytes) {
  if (kind == CAL_MEMCPY)
    memcpy(dst, a, bytes);
  else
    op_fn(dst, a, b, bytes / elem_size);
}

/* The engine's own ring reduce-scatter with `bytes` per rank: its p-1 steps each pull `bytes`
 * from the left neighbour and reduce them into the destination as they land (shm.c's fused
 * pull; no public point-to-point call fuses a reduction). `a` holds p * bytes, `b` bytes. */
static strata_coll_args cal_rs_args(strata_dtype dtype, strata_op op, char *a, char *b,
                                    size_t bytes) {
  strata_coll_args args = {.coll = STRATA_COLL_REDUCE_SCATTER,
                           .sendbuf = a,
                           .recvbuf = b,
                           .count = bytes / strata_dtype_size(dtype),
                           .dtype = dtype,
                           .op = op,
                           .algo = STRATA_ALGO_RING,
                           .compress = STRATA_COMPRESS_NONE};
  return args;
}

/* Fixed costs, from calls with one element (8-byte ring shifts and one-element ring
 * reduce-scatters):
 *  - alpha, the latency of one message inside a stream of calls: shifts back to back, the median
 *    repetition of CAL_SMALL_CALLS. A benchmark's calls and a collective's messages follow each
 *    other while the engine threads are still running (engine.c spins 30 us before it sleeps),
 *    so neither pays a sleeping thread's wake-up;
 *  - the per-call overhead: reduce-scatters back to back, likewise, minus their p-1 messages;
 *  - the fixed cost of a shift timed alone, between barriers, as the dirty and warm points are:
 *    CAL_SMALL_CALLS individually timed shifts, the fastest over shm (on a loaded host most of
 *    them wait for a thread to be scheduled, 30-100 us, which a timed point does not always pay)
 *    and the median over TCP (an idle TCP engine blocks in poll(), engine.c engine_idle).
 * Until session 8 alpha was that last figure, measured through point-to-point calls. */
typedef struct cal_fixed {
  double alpha_s, call_s, alone_s, chain_s;
} cal_fixed;

/* One round trip down a chain and back: a one-element chain broadcast from rank 0 (0 -> 1 -> ...
 * -> p-1), then a one-element chain reduce to rank 0 (p-1 -> ... -> 0), 2(p-1) messages one after
 * another, each with its two ends running and the other ranks waiting for theirs. With more
 * ranks than cores that is the α of a message whose ends have a core (sim.c, both_ends_have_cores),
 * which the all-busy shifts above do not see: there most of α is a receiver waiting for a core (4
 * ranks on 2 cores, TCP: 60-75 us a shift; a 1 MiB chain broadcast's hops measured ~185 us each
 * against 162 us of copying). */
static int cal_chain_pair(strata_comm *comm, char *a, char *b) {
  strata_coll_args bcast = {.coll = STRATA_COLL_BROADCAST,
                            .sendbuf = a,
                            .recvbuf = a,
                            .count = CAL_SMALL_BYTES,
                            .dtype = STRATA_U8,
                            .root = 0,
                            .algo = STRATA_ALGO_RING,
                            .compress = STRATA_COMPRESS_NONE};
  strata_coll_args reduce = bcast;
  reduce.coll = STRATA_COLL_REDUCE;
  reduce.recvbuf = b;
  reduce.op = STRATA_MAX;
  int rc = strata_collective(comm, &bcast, NULL);
  return rc ? rc : strata_collective(comm, &reduce, NULL);
}

static int cal_fixed_s(strata_comm *comm, strata_dtype dtype, strata_op op, char *a, char *b,
                       const strata_host_links *links, cal_fixed *out) {
  int tcp = links->use_tcp;
  double t_alone[CAL_SMALL_CALLS], t_shift[CAL_REPEATS], t_call[CAL_REPEATS];
  strata_coll_args args = cal_rs_args(dtype, op, a, b, strata_dtype_size(dtype));
  int rc = cal_shift(comm, a, b, CAL_SMALL_BYTES, 0, 0);
  if (!rc) rc = strata_collective(comm, &args, NULL);
  for (int i = 0; !rc && i < CAL_SMALL_CALLS; i++) {
    rc = strata_barrier(comm);
    double start_s = strata_now_s();
    if (!rc) rc = cal_shift(comm, a, b, CAL_SMALL_BYTES, 0, 0);
    t_alone[i] = strata_now_s() - start_s;
  }
  for (int r = 0; !rc && r < CAL_REPEATS; r++) {
    double start_s = strata_now_s();
    for (int i = 0; !rc && i < CAL_SMALL_CALLS; i++)
      rc = cal_shift(comm, a, b, CAL_SMALL_BYTES, 0, 0);
    double mid_s = strata_now_s();
    for (int i = 0; !rc && i < CAL_SMALL_CALLS; i++) rc = strata_collective(comm, &args, NULL);
    t_shift[r] = (mid_s - start_s) / CAL_SMALL_CALLS;
    t_call[r] = (strata_now_s() - mid_s) / CAL_SMALL_CALLS;
  }
  if (rc) return rc;
  out->alone_s = tcp ? strata_median(t_alone, CAL_SMALL_CALLS) : fastest(t_alone, CAL_SMALL_CALLS);
  out->alpha_s = strata_median(t_shift, CAL_REPEATS);
  out->call_s = strata_median(t_call, CAL_REPEATS);
  out->chain_s = 0;
  /* only TCP with ranks outnumbering cores uses it (sim.c): a pull is not a stream, and with a
   * core per rank the shifts' α is the chain's */
  if (!tcp || !strata_host_cores_shared(links)) return STRATA_OK;
  double t_chain[CAL_REPEATS];
  rc = cal_chain_pair(comm, a, b); /* warm-up */
  for (int r = 0; !rc && r < CAL_REPEATS; r++) {
    double start_s = strata_now_s();
    for (int i = 0; !rc && i < CAL_SMALL_CALLS; i++) rc = cal_chain_pair(comm, a, b);
    t_chain[r] = (strata_now_s() - start_s) / CAL_SMALL_CALLS;
  }
  if (!rc) out->chain_s = strata_median(t_chain, CAL_REPEATS);
  return rc;
}

/* Median seconds of one pass (each repetition enough passes to move CAL_REP_MIN_BYTES). */
static double cal_local_s(cal_local_kind kind, strata_reduce_fn op_fn, size_t elem_size, char *dst,
                          const char *a, const char *b, size_t bytes) {
  double t[CAL_REPEATS];
  int passes = cal_reps_for(bytes);
  cal_local_pass(kind, op_fn, elem_size, dst, a, b, bytes); /* warm-up: the cache state */
  for (int r = 0; r < CAL_REPEATS; r++) {
    double start_s = strata_now_s();
    for (int i = 0; i < passes; i++) cal_local_pass(kind, op_fn, elem_size, dst, a, b, bytes);
    t[r] = (strata_now_s() - start_s) / passes;
  }
  return strata_median(t, CAL_REPEATS);
}

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

/* Per calibration point: seconds of a shift, a reduction, a memcpy, a fused shift, a lone pull
 * (shm), a shift from a just-written source and one from a just-read source (shm), and what
 * rewriting a source a neighbour has pulled costs beyond a private rewrite (shm). */
enum {
  CAL_SHIFT = 0,
  CAL_RED,
  CAL_COPY,
  CAL_FUSED_EXTRA, /* cal_fused_s: a reduce-scatter call minus its p-1 steps as plain shifts */
  CAL_LONE,
  CAL_DIRTY,
  CAL_WARM,
  CAL_SHARED_WRITE,
  CAL_FIGURES
};

/* The bytes per rank of point i's fused shift: the reduce-scatter's send buffer (p of them)
 * must fit the calibration buffer. */
static size_t cal_fused_bytes(int i, int nranks) {
  size_t bytes = (size_t)strata_host_point_bytes(i);
  size_t most = (size_t)STRATA_HOST_CALIBRATE_BYTES / (size_t)nranks / 64 * 64;
  return bytes < most ? bytes : most;
}

/* How many ranks time the local kernels at once: all of them, or one per core when more ranks
 * than cores share the host. A kernel shorter than a scheduler slice runs on a whole core even
 * when ranks outnumber cores, a longer one on a share: timing every rank at once made the 4-rank
 * curves of this 2-core host whole-core rates up to 5 MiB and half-core rates beyond (memcpy
 * 14 GB/s at 5 MiB, 4.3 at 21 MiB; 2 ranks: 14 and 14). One rank per core measures the same thing
 * at every size, and cal_curves_fill scales it to the p-ranks-busy rate the simulator expects. */
static int cal_local_ranks(const strata_host_links *links) {
  return strata_host_cores_shared(links) ? links->host_cores : links->nranks;
}

/* A rate measured while `busy` ranks ran, as the rate each of the p ranks gets when all are busy
 * (what the simulator's core shares start from, sim.h host_cores): with more ranks than cores,
 * busy ranks had max(busy, cores) cores' worth between them; otherwise every rank has a core. */
static double cal_all_busy_scale(const strata_host_links *links, int busy) {
  if (!strata_host_cores_shared(links)) return 1;
  int c = links->host_cores;
  return (double)(busy > c ? busy : c) / links->nranks;
}

/* The transfers of point `i` on buffers a, b, c, into s[] (the slots it measures; the others are
 * left alone). */
static int cal_point_transfers(strata_comm *comm, const strata_host_links *links,
                               strata_dtype dtype, strata_op op, char *a, char *b, char *c, int i,
                               double s[CAL_FIGURES]) {
  size_t bytes = (size_t)strata_host_point_bytes(i);
  int rc = STRATA_OK;
  if (links->nranks > 1 && links->use_tcp) {
    uint64_t moved, footprint;
    cal_shift_geometry(i, links->nranks, 1, &moved, &footprint);
    rc =
        cal_engine_shift_s(comm, b, (size_t)(moved / (uint64_t)(links->nranks - 1)), &s[CAL_SHIFT]);
    /* one way, rank 0 to rank 1, the others idle: the same bytes as one message, which the
     * transport streams (one wake-up of the caller, not one per chunk) */
    if (!rc) rc = cal_shift_s(comm, a, b, (size_t)moved, 0, cal_reps_for(moved), 1, &s[CAL_LONE]);
  } else if (links->nranks > 1) {
    size_t chunk = (size_t)links->chunk_bytes;
    int reps = cal_reps_for(bytes);
    rc = cal_shift_s(comm, a, b, bytes, chunk, reps, 0, &s[CAL_SHIFT]);
    if (!rc) rc = cal_shift_s(comm, a, b, bytes, chunk, reps, 1, &s[CAL_LONE]);
    if (!rc) rc = cal_touched_s(comm, a, b, NULL, bytes, chunk, &s[CAL_DIRTY]);
    /* past 16 MiB the peer's cache lets go */
    if (!rc && bytes <= STRATA_HOST_SHARED_WRITE_MAX_BYTES &&
        strata_host_shared_writes_apply(links))
      rc = cal_shared_write_s(comm, a, b, c, bytes, chunk, &s[CAL_SHARED_WRITE]);
    if (!rc) rc = cal_touched_s(comm, a, b, c, bytes, chunk, &s[CAL_WARM]);
  }
  if (!rc && links->nranks > 1 && !links->use_tcp) /* only shm pulls fuse a reduction */
  {
    size_t fused = cal_fused_bytes(i, links->nranks);
    strata_coll_args args = cal_rs_args(dtype, op, a, b, fused);
    rc = cal_fused_s(comm, &args, a, b, fused, (size_t)links->chunk_bytes, &s[CAL_FUSED_EXTRA]);
  }
  return rc;
}

/* Every rank, at the same time, measures point `i` (not the span point) into s[], on the first
 * bytes of the caller's buffers, where the rows of its size run. The shifts are collective; the
 * local kernels run between barriers so all ranks load the host together. */
static int cal_point(strata_comm *comm, const strata_host_links *links, strata_dtype dtype,
                     strata_op op, char *a, char *b, char *c, int i, double s[CAL_FIGURES]) {
  strata_reduce_fn kernel = strata_reduce_kernel(dtype, op);
  size_t elem = strata_dtype_size(dtype), bytes = (size_t)strata_host_point_bytes(i);
  int rc = strata_barrier(comm);
  if (!rc && strata_comm_rank(comm) < cal_local_ranks(links)) {
    s[CAL_RED] = cal_local_s(CAL_REDUCE, kernel, elem, c, a, b, bytes);
    s[CAL_COPY] = cal_local_s(CAL_MEMCPY, kernel, elem, c, a, NULL, bytes);
  }
  if (!rc) rc = cal_point_transfers(comm, links, dtype, op, a, b, c, i, s);
  return rc;
}

/* The span point (the last) into s[]: the largest point's transfers on up to CAL_WINDOWS windows
 * spread over the caller's buffers (`span` bytes each), averaged, window 0 being the largest
 * point's own measurement (`largest`, whose local kernels it takes over). Past the caches a
 * transfer's rate depends on which pages it crosses, and the windows of one process differ
 * steadily (2 ranks, shm, a 64 MiB shift on the four 64 MiB windows of 256 MiB buffers, eight
 * passes: 7.0-7.3, 7.7-8.2, 8.4-8.8 and 9.0-9.6 GB/s in one process, 5.1-5.4 against 6.4-7.2 in
 * another): a row that crosses all the pages runs at their mean, a row inside the first window
 * at that window's rate. Session 11 put the mean at the largest point itself; the 64 MiB rows,
 * which run in window 0, then came out optimistic (2 ranks, shm, out of place, 64 MiB: allgather
 * 0.93-1.26 before, 1.25-1.86 after; reduce-scatter 0.86-1.23 before, 1.13-1.42 after, five
 * sweeps). */
#define CAL_WINDOWS 4
static size_t cal_windows(size_t span) {
  size_t windows = span / (size_t)STRATA_HOST_CALIBRATE_BYTES;
  return windows > CAL_WINDOWS ? CAL_WINDOWS : windows < 1 ? 1 : windows;
}

static int cal_span_point(strata_comm *comm, const strata_host_links *links, strata_dtype dtype,
                          strata_op op, char *a, char *b, char *c, size_t span,
                          const double largest[CAL_FIGURES], double s[CAL_FIGURES]) {
  const int i = STRATA_HOST_CURVE_POINTS - 1;
  const size_t bytes = (size_t)strata_host_point_bytes(i), windows = cal_windows(span);
  memcpy(s, largest, CAL_FIGURES * sizeof *s);
  int rc = STRATA_OK;
  for (size_t w = 1; !rc && w < windows; w++) {
    size_t off = (span - bytes) / (windows - 1) * w / 64 * 64;
    double t[CAL_FIGURES] = {0};
    rc = strata_barrier(comm);
    if (!rc) rc = cal_point_transfers(comm, links, dtype, op, a + off, b + off, c + off, i, t);
    for (int f = 0; f < CAL_FIGURES; f++) s[f] += t[f]; /* t's local kernels stay 0 */
  }
  for (int f = 0; f < CAL_FIGURES; f++)
    if (f != CAL_RED && f != CAL_COPY) s[f] /= (double)windows;
  return rc;
}

/* The working set per rank of calibration point i for every curve that applies to `l`'s ranks and
 * transport (l->nranks, l->use_tcp): what one rank touches per pass. A shift sends from one
 * buffer and lands in another (2x; over TCP the allgather's buffer plus the socket bytes, see
 * cal_shift_geometry), memcpy reads one and writes one (2x), a reduction reads two and writes one
 * (3x), a fused shift of the reduce-scatter reads p blocks and writes one; shm's lone and dirty
 * pulls are shifts, TCP's one-way stream sits at the link's points. Rates are set separately, so
 * bench/repredict.c rebuilds the curves from printed rates with these same footprints. */
void strata_host_point_footprints(strata_host_links *l, int i) {
  int p = l->nranks;
  /* the span point: the largest point's working set, times the windows' reach */
  uint64_t scale = i == STRATA_HOST_CURVE_POINTS - 1 && l->span_scale > 1 ? l->span_scale : 1;
  uint64_t bytes = strata_host_point_bytes(i), moved, shift_footprint;
  cal_shift_geometry(i, p, l->use_tcp, &moved, &shift_footprint);
  l->reduce.footprint_bytes[i] = 3 * bytes * scale;
  l->memcpy.footprint_bytes[i] = 2 * bytes * scale;
  l->link.footprint_bytes[i] = (p > 1 ? shift_footprint : 2 * bytes) * scale;
  if (p > 1 && l->use_tcp) l->link_alone.footprint_bytes[i] = shift_footprint * scale;
  if (p > 1 && !l->use_tcp) {
    l->fused.footprint_bytes[i] = (uint64_t)(p + 1) * cal_fused_bytes(i, p) * scale;
    l->link_alone.footprint_bytes[i] = l->link_dirty.footprint_bytes[i] =
        l->shared_write.footprint_bytes[i] = 2 * bytes * scale;
    /* a warm shift's owner also copies its source into a third buffer (cal_touched_s) */
    l->link_warm.footprint_bytes[i] = 3 * bytes * scale;
  }
}

/* Point i of `curve`: `bytes` moved in `seconds`. */
static void cal_rate_set(strata_host_curve *curve, int i, double bytes, double seconds) {
  curve->gbps[i] = seconds > 0 ? bytes / 1e9 / seconds : 0;
}

/* A transfer's own time: the measured `total` minus the fixed cost the prediction adds itself
 * (α per message, or a call's), never below half the total. */
static double cal_minus_fixed(double total, double fixed) {
  return total - fixed < 0.5 * total ? 0.5 * total : total - fixed;
}

/* TCP, point i: the link rate (each core copies X in and X out, taking turns: see the top) from
 * the two-way shift's seconds minus a call's fixed cost (the allgather is one call, its
 * messages' α overlap), and the sending core's rate in a one-way stream from its seconds minus
 * α. Over loopback the sending core also runs the receive side's protocol work (softirq), so it
 * is slower than the average copy the two-way shift gives: 2 ranks, 64 MiB, a broadcast in place
 * ran 3.4-4.8 GB/s where the shift's copies ran 5.4-6. Measured with 2 ranks busy: scaled like
 * the local kernels to the all-busy rate when ranks outnumber cores. */
static void cal_tcp_rates(strata_host_links *out, int i, double shift_total_s, double lone_total_s,
                          double alpha_s, double call_s) {
  uint64_t shift_moved, shift_footprint;
  cal_shift_geometry(i, out->nranks, 1, &shift_moved, &shift_footprint);
  cal_rate_set(&out->link, i, (double)shift_moved * 2, cal_minus_fixed(shift_total_s, call_s));
  cal_rate_set(&out->link_alone, i, (double)shift_moved * cal_all_busy_scale(out, 2),
               cal_minus_fixed(lone_total_s, alpha_s));
}

/* Turn the slowest rank's seconds into the curves (footprints: strata_host_point_footprints).
 * Transfer rates exclude the fixed costs (α per message, the engine's per-operation cost), which
 * the prediction adds once per message and per call. The fused curve is the rate of what the
 * fusion adds to a plain pull (a reduce-scatter step minus a plain shift of the same size); never
 * below a tenth of the pull's time. */
static void cal_curves_fill(strata_host_links *out, const cal_fixed *fixed,
                            double worst[][CAL_FIGURES]) {
  double alpha_s = fixed->alpha_s, call_s = fixed->call_s, alone_s = fixed->alone_s;
  int p = out->nranks;
  for (int i = 0; i < STRATA_HOST_CURVE_POINTS; i++) {
    strata_host_point_footprints(out, i);
    double moved = (double)strata_host_point_bytes(i), *w = worst[i];
    uint64_t shift_moved, shift_footprint;
    cal_shift_geometry(i, p, out->use_tcp, &shift_moved, &shift_footprint);
    /* the bytes' share of a shift: minus α (shm: one message), or minus a call's fixed cost (TCP:
     * the allgather is one call, its messages' α overlap) */
    double shift_s = cal_minus_fixed(w[CAL_SHIFT], out->use_tcp ? call_s : alpha_s);
    double lone_s = cal_minus_fixed(w[CAL_LONE], alpha_s);
    double local_share = cal_all_busy_scale(out, cal_local_ranks(out));
    cal_rate_set(&out->reduce, i, moved * local_share, w[CAL_RED]);
    cal_rate_set(&out->memcpy, i, moved * local_share, w[CAL_COPY]);
    if (p > 1 && !out->use_tcp) {
      double fused = (double)cal_fused_bytes(i, p);
      double plain_s = shift_s * fused / moved; /* a plain shift of the same size */
      /* the call's p-1 fused steps and one call overhead, minus p-1 shifts with theirs */
      double op_s = fmax(call_s - (p - 1) * alpha_s, 0);
      double extra_s = (w[CAL_FUSED_EXTRA] + (p - 2) * op_s) / (p - 1);
      if (extra_s < 0.1 * plain_s) extra_s = 0.1 * plain_s;
      cal_rate_set(&out->fused, i, fused, extra_s);
      cal_rate_set(&out->link_alone, i, moved, lone_s);
      /* a source its owner just touched: never faster than a clean one */
      cal_rate_set(&out->link_dirty, i, moved,
                   fmax(cal_minus_fixed(w[CAL_DIRTY], alone_s), shift_s));
      cal_rate_set(&out->link_warm, i, moved, fmax(cal_minus_fixed(w[CAL_WARM], alone_s), shift_s));
      cal_rate_set(&out->shared_write, i, moved, w[CAL_SHARED_WRITE]); /* 0 s: free (0 GB/s) */
    }
    if (p > 1 && out->use_tcp)
      cal_tcp_rates(out, i, w[CAL_SHIFT], w[CAL_LONE], alpha_s, call_s);
    else if (p > 1)
      cal_rate_set(&out->link, i, (double)shift_moved, shift_s);
    else
      cal_rate_set(&out->link, i, moved, w[CAL_COPY]);
  }
  int last = STRATA_HOST_CURVE_POINTS - 1;
  out->link_gbps = out->link.gbps[last];
  out->reduce_gbps = out->reduce.gbps[last];
  out->memcpy_gbps = out->memcpy.gbps[last];
  out->alpha_us = alpha_s * 1e6;
  out->call_us = call_s * 1e6;
  double op_s = call_s - (p - 1) * alpha_s;
  out->op_overhead_us = p > 1 && op_s > 0 ? op_s * 1e6 : 0;
  /* the chain's round trip: two calls, 2(p-1) messages; never above the all-busy α. On a loaded
   * host the per-call estimate (slowest rank's call minus its α) can exceed the round trip
   * itself: the hop is then the round trip's share alone (CI, load 5 on 2 cores: the figure was
   * dropped and the all-busy α stood in) */
  double hop_s = 0;
  if (p > 2 && fixed->chain_s > 0) {
    hop_s = (fixed->chain_s - 2 * out->op_overhead_us * 1e-6) / (2.0 * (p - 1));
    if (hop_s <= 0) hop_s = fixed->chain_s / (2.0 * (p - 1));
  }
  out->alpha_ends_us = hop_s > 0 ? fmin(hop_s, alpha_s) * 1e6 : 0;
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

int strata_host_calibrate(strata_comm *comm, strata_dtype dtype, strata_op op, int registered,
                          strata_host_links *out) {
  if (!comm || !out) return STRATA_ERR_INVALID_ARG;
  size_t bytes = (size_t)STRATA_HOST_CALIBRATE_BYTES;
  char *a = strata_mem_buffer(bytes, registered), *b = strata_mem_buffer(bytes, registered),
       *c = strata_mem_buffer(bytes, registered);
  /* a rank without its buffers still takes part (the NULLs fail it collectively) */
  int rc = strata_host_calibrate_on(comm, dtype, op, a, b, c, bytes, out);
  strata_mem_buffer_free(a, registered);
  strata_mem_buffer_free(b, registered);
  strata_mem_buffer_free(c, registered);
  return rc;
}

strata_host_probe_kind strata_host_probe_plan(const strata_host_links *links, int *points) {
  strata_host_probe_kind kind = !links ? STRATA_HOST_PROBE_NONE
                                : strata_host_shared_writes_apply(links)
                                    ? STRATA_HOST_PROBE_SHARED_WRITE
                                : links->nranks > 1 && links->use_tcp ? STRATA_HOST_PROBE_TCP
                                                                      : STRATA_HOST_PROBE_NONE;
  uint64_t most = kind == STRATA_HOST_PROBE_SHARED_WRITE ? STRATA_HOST_SHARED_WRITE_MAX_BYTES
                  : kind == STRATA_HOST_PROBE_TCP        ? STRATA_HOST_PROBE_TCP_MAX_BYTES
                                                         : 0;
  int n = 0;
  while (n < STRATA_HOST_CURVE_POINTS && strata_host_point_bytes(n) <= most) n++;
  if (points) *points = n;
  return n > 0 ? kind : STRATA_HOST_PROBE_NONE;
}

int strata_host_probe(strata_comm *comm, void *a, void *b, void *c, strata_host_links *links) {
  if (!comm || !links || !a || !b || !c) return STRATA_ERR_INVALID_ARG;
  int n = 0;
  strata_host_probe_kind kind = strata_host_probe_plan(links, &n);
  if (kind == STRATA_HOST_PROBE_NONE) return STRATA_OK;
  /* per point: shared writes' extra seconds, or TCP's two-way shift and one-way stream */
  double s[2 * STRATA_HOST_CURVE_POINTS] = {0}, worst[2 * STRATA_HOST_CURVE_POINTS] = {0};
  int rc = STRATA_OK;
  for (int i = 0; !rc && i < n; i++) {
    size_t bytes = (size_t)strata_host_point_bytes(i);
    if (kind == STRATA_HOST_PROBE_SHARED_WRITE) {
      rc = cal_shared_write_s(comm, a, b, c, bytes, (size_t)links->chunk_bytes, &s[2 * i]);
      continue;
    }
    double t[CAL_FIGURES] = {0};
    rc = strata_barrier(comm);
    /* TCP points measure only transfers: no reduction is fused, dtype and op go unused */
    if (!rc)
      rc = cal_point_transfers(comm, links, STRATA_F32, STRATA_SUM, (char *)a, (char *)b, (char *)c,
                               i, t);
    s[2 * i] = t[CAL_SHIFT], s[2 * i + 1] = t[CAL_LONE];
  }
  if (!rc) rc = strata_allreduce(comm, s, worst, (uint64_t)(2 * n), STRATA_F64, STRATA_MAX);
  for (int i = 0; !rc && i < n; i++) {
    if (kind == STRATA_HOST_PROBE_SHARED_WRITE)
      cal_rate_set(&links->shared_write, i, (double)strata_host_point_bytes(i), worst[2 * i]);
    else
      cal_tcp_rates(links, i, worst[2 * i], worst[2 * i + 1], links->alpha_us * 1e-6,
                    links->call_us * 1e-6);
  }
  return rc;
}

int strata_host_calibrate_on(strata_comm *comm, strata_dtype dtype, strata_op op, void *buf_a,
                             void *buf_b, void *buf_c, size_t span, strata_host_links *out) {
  if (!comm || !out) return STRATA_ERR_INVALID_ARG;
  strata_reduce_fn kernel = strata_reduce_kernel(dtype, op);
  size_t elem = strata_dtype_size(dtype);
  if (!kernel || elem == 0) return STRATA_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  out->nranks = strata_comm_size(comm);
  cal_transport(comm, out);
  size_t bytes = (size_t)STRATA_HOST_CALIBRATE_BYTES;
  char *a = buf_a, *b = buf_b, *c = buf_c;
  /* 2: usable, 1: too small, 0: missing (agreed, so every rank fails alike) */
  int local_ok = !(a && b && c) ? 0 : span < bytes ? 1 : 2, all_ok = 0;
  if (local_ok == 2) {
    memset(a, 0, span); /* touch every page; zeros are exact in every dtype */
    memset(b, 0, span);
    memset(c, 0, span);
  }
  int rc = strata_allreduce(comm, &local_ok, &all_ok, 1, STRATA_I32, STRATA_MIN);
  if (!rc && all_ok < 2) rc = all_ok == 1 ? STRATA_ERR_INVALID_ARG : STRATA_ERR_NO_MEMORY;
  /* the windows of the largest point are collective shifts: every rank takes the smallest span */
  uint64_t my_span = span, least = 0;
  if (!rc) rc = strata_allreduce(comm, &my_span, &least, 1, STRATA_U64, STRATA_MIN);
  if (!rc) span = (size_t)least;
  /* the span point reaches over the whole buffers */
  out->span_scale = span / bytes > 1 ? (uint32_t)(span / bytes) : 1;
  int any_tcp = 0; /* every rank must agree: the fused calibration is collective */
  if (!rc) rc = strata_allreduce(comm, &out->use_tcp, &any_tcp, 1, STRATA_I32, STRATA_MAX);
  out->use_tcp = any_tcp;
  if (!rc) rc = cal_host_cores(comm, out);
  /* slowest rank's figures: α, a one-element call, a shift alone, a chain's round trip
   * (cal_fixed_s), then CAL_FIGURES per calibration point */
  enum { FIXED = 4, N = FIXED + STRATA_HOST_CURVE_POINTS * CAL_FIGURES };
  double s[N], worst[N];
  memset(s, 0, sizeof s);
  memset(worst, 0, sizeof worst);
  if (!rc && out->nranks > 1) {
    cal_fixed mine = {0, 0, 0, 0};
    rc = cal_fixed_s(comm, dtype, op, a, b, out, &mine);
    s[0] = mine.alpha_s, s[1] = mine.call_s, s[2] = mine.alone_s, s[3] = mine.chain_s;
  }
  /* every point once per pass, the figure the mean over passes: the host's slow spells then
   * weigh in a point as they do in a row's mean time, not all or nothing */
  double passes[CAL_PASSES][N];
  memset(passes, 0, sizeof passes);
  enum { SPAN = STRATA_HOST_CURVE_POINTS - 1 };
  for (int k = 0; !rc && k < CAL_PASSES; k++) {
    for (int i = 0; !rc && i < SPAN; i++)
      rc = cal_point(comm, out, dtype, op, a, b, c, i, &passes[k][FIXED + i * CAL_FIGURES]);
    if (!rc)
      rc = cal_span_point(comm, out, dtype, op, a, b, c, span,
                          &passes[k][FIXED + (SPAN - 1) * CAL_FIGURES],
                          &passes[k][FIXED + SPAN * CAL_FIGURES]);
  }
  for (int f = FIXED; !rc && f < N; f++)
    for (int k = 0; k < CAL_PASSES; k++) s[f] += passes[k][f] / CAL_PASSES;
  if (!rc) rc = strata_allreduce(comm, s, worst, N, STRATA_F64, STRATA_MAX);
  if (rc) return rc;
  cal_fixed fixed = {
      .alpha_s = worst[0], .call_s = worst[1], .alone_s = worst[2], .chain_s = worst[3]};
  cal_curves_fill(out, &fixed, (double(*)[CAL_FIGURES])(void *)&worst[FIXED]);
  return out->link_gbps > 0 ? STRATA_OK : STRATA_ERR_SYSTEM;
}
