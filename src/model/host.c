/*
 * host.c — predict a collective on one host by simulating the engine's schedules (see host.h).
 *
 * The link model is deliberately small: every pair of ranks has the same α and the same rate,
 * measured with the transport the job uses; the simulator's one-core-per-rank mode supplies what
 * a closed formula misses (which core does the copy, that a TCP rank's sends, receives and
 * reductions take turns on its one engine thread, that a fused shm pull+reduce is one pass).
 * This file must never measure anything: calibrate.c does, so predictions stay reproducible
 * from the five numbers of strata_host_links.
 */
#include "model/host.h"

#include <stdlib.h>

#include "coll/schedule.h"
#include "model/sim.h"

static void host_link(void *ctx, int src, int dst, strata_sim_link *out) {
  const strata_host_links *links = ctx;
  (void)src, (void)dst;
  out->alpha_us = links->alpha_us;
  out->gbps = links->link_gbps;
  out->shared = -1;
  out->pull = !links->use_tcp;
}

/* The engine's resolution (src/engine/api.c operation_create): the call's algorithm, else the
 * communicator's forced one where it exists for the collective, else AUTO. */
static strata_algo host_algo(const strata_host_links *links, strata_coll coll, strata_algo algo) {
  if (algo != STRATA_ALGO_AUTO && strata_schedule_algo_applies(coll, algo)) return algo;
  if (strata_schedule_algo_applies(coll, links->algo)) return links->algo;
  return STRATA_ALGO_AUTO;
}

int strata_host_predict(const strata_host_links *links, strata_coll coll, strata_algo algo,
                        uint64_t count, uint32_t elem_size, int root, double *time_us) {
  if (!links || !time_us || links->nranks < 1 || elem_size == 0 || links->link_gbps <= 0)
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
    strata_sim_model model = {.nranks = p,
                              .link = host_link,
                              .ctx = (void *)links,
                              .reduce_gbps = links->reduce_gbps,
                              .copy_gbps = links->memcpy_gbps,
                              .one_core_per_rank = 1};
    strata_sim_result result;
    rc = strata_sim_run(&model, scheds, &result);
    if (rc == STRATA_OK) *time_us = result.time_us;
  }
  for (int r = 0; r < p; r++) strata_schedule_free(&scheds[r]);
  free(scheds);
  return rc;
}
