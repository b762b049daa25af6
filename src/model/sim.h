// SPDX-License-Identifier: Apache-2.0
/*
 * sim.h — run the engine's own schedules (src/coll/schedule.h) over modeled links and return the
 * time they would take. What we predict and what we run are the same step lists.
 *
 * The model, per transfer p→q of b bytes over the link between them (α, bandwidth B):
 *   - it starts once the SEND step is ready and p's send port, q's receive port and (if the
 *     link is shared, e.g. a site's WAN uplink or one host's memory bus) the shared resource are
 *     free — a send that finds one busy is deferred to when it frees and competes again, so no
 *     rank books a receiver's future; it holds all of them for b/B; it arrives α later (α is
 *     latency: it does not occupy the ports);
 *   - the matching RECV completes at max(its own readiness, arrival); a RECV_REDUCE then pays
 *     b·γ on the receiver's compute resource (one per rank, serialized), as do REDUCE steps;
 *     COPY steps pay b / copy bandwidth on the same resource;
 *   - a SEND completes when its bytes have left (eager: buffering is the transport's).
 * With one_core_per_rank (one host, see strata_sim_model) ports give way to one core per rank.
 * Steps are list-scheduled in order of readiness (a heap of events), so the simulation is
 * deterministic and O(steps · log steps).
 *
 * It must never allocate per rank pair (p² memory): matching uses per-rank sorted tables.
 */
#ifndef STRATA_MODEL_SIM_H
#define STRATA_MODEL_SIM_H

#include "coll/schedule.h"
#include "model/cost.h"

typedef struct strata_sim_link {
  double alpha_us;
  double gbps;
  int shared; /* index of a shared resource both ends' traffic serializes on, or -1 */
  int pull;   /* one_core_per_rank only: the receiver's core moves the bytes (a single-copy pull,
                 as shm's cross-memory attach) and the sender's core stays free; otherwise the
                 sender's core copies the bytes in and the receiver's copies them out (TCP) */
} strata_sim_link;

typedef void (*strata_sim_link_fn)(void *ctx, int src, int dst, strata_sim_link *out);

typedef struct strata_sim_model {
  int nranks;
  strata_sim_link_fn link;
  void *ctx;
  int nshared;               /* shared resources */
  const double *shared_gbps; /* bandwidth of each */
  double reduce_gbps;        /* γ = 1/reduce_gbps per byte reduced; 0 = free */
  double copy_gbps;          /* local copies; 0 = free */
  /* 0: the port model above. 1: every rank is one core (one host, the engine's one progress
   * thread): its sends, receives, reductions and copies serialize on it. A pulling link holds
   * the receiver's core for bytes / gbps; any other link holds the sender's core for bytes /
   * gbps (copy in, buffered), then the receiver's for as long (copy out), which may start α
   * after the sender's when both ends have a core (a stream). Ports and shared resources are
   * not used. A received reduction costs bytes / reduce_gbps on the receiver's core after the
   * bytes are in. */
  int one_core_per_rank;
  /* one_core_per_rank, all ranks on one host with fewer cores than ranks (0 = a core each): the
   * rates above were measured with every rank busy at once (a share of cores/nranks each). A
   * step that starts while k ranks' cores are busy (itself included) runs at the rate times
   * nranks / max(k, host_cores): a chain broadcast's lone hop gets a whole core, a ring's
   * every-rank-at-once step the calibrated share. The share is fixed when the step starts. A
   * rank a message is flying to counts as busy until it lands (α, measured with every rank
   * running, is mostly the receiver waiting for a core others hold). */
  int host_cores;
  /* A compressed collective's codec on the rank's core (0 = free): a SEND first encodes its
   * step's bytes (the uncompressed size) at encode_gbps, and with decode_sent decodes them back
   * into its source (as the engine does where the source is writable, as in an in-place
   * allreduce) at decode_gbps; a receive decodes what arrived at decode_gbps after its last byte.
   * The link carries what the encoding leaves (give the link's rate per uncompressed byte). */
  double encode_gbps, decode_gbps;
  int decode_sent;
} strata_sim_model;

typedef struct strata_sim_result {
  double time_us;    /* when the last rank finished */
  double bytes_sent; /* total over all ranks */
  uint64_t messages; /* transfers simulated */
} strata_sim_result;

/* Run one schedule per rank (scheds[r].rank == r). Returns STRATA_OK; STRATA_ERR_MISMATCH when a
 * SEND has no matching RECV (or the sizes differ); STRATA_ERR_PROTOCOL when steps never become
 * ready (a dependency cycle or a receive nobody sends); STRATA_ERR_NO_MEMORY. */
int strata_sim_run(const strata_sim_model *model, const strata_schedule *scheds,
                   strata_sim_result *out);

/* Build the schedules for `params` (params->rank is ignored) on every rank of `fabric` with
 * strata_schedule_build and run them over the fabric's levels. The fabric's nranks must equal
 * params->nranks. A level with aggregate_gbps > 0 becomes a shared resource per group. */
int strata_sim_fabric(const strata_fabric *fabric, const strata_sched_params *params,
                      strata_sim_result *out);

#endif
