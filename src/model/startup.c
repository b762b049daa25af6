// SPDX-License-Identifier: Apache-2.0
/*
 * startup.c — the start-up model of startup.h: counts from the protocol, times from calibrated
 * per-request and per-connection costs.
 *
 * The eager counts are those of today's init, request by request (src/net/net.c, tcp_mesh.c,
 * src/engine/sites.c): rank r adds to three "opens" counters, sets its identity, its address
 * and its site, gets the address of each of the r lower ranks it dials, and every other rank's
 * identity and every rank's site. bench/scale.sh's counted runs (scale_rank -c) measure the same
 * counts on a live job, which is how the two are kept from drifting apart.
 */
#include "model/startup.h"

#include <math.h>

enum {
  HANDSHAKE_STEPS = 4,      /* connect + hello/auth: two round trips, four one-way steps */
  EAGER_FIXED_REQUESTS = 6, /* three opens counters, identity, address, site */
  EAGER_ENTRIES_PER_RANK = 6,
  /* three opens counters; its host record filed (an add, a set); its address set; its site's
   * name, its site and its chunk (a set, two adds) and an add saying so; the joined counter's add
   * and wait; its host's list read; the sites' answer read */
  LAZY_FIXED_REQUESTS = 14,
  SITE_COUNTS_PER_REQUEST = 8192, /* ranks whose site and chunk rank 0 reads in one request */
  LAZY_ENTRIES_PER_RANK = 7,      /* three opens counters, host record, address, site, chunk */
  COUNTER_BYTES = 8,
  SITE_ANSWER_BYTES = 48 /* the sites' answer: runs of ranks per site (engine/sites.c), 2 sites */
};

/* Calibration (docs/scale.md, "The model"): bench/scale.sh on a 2-core host, strata's full mesh
 * from 8 to 32 ranks with 5 and 2 connections per pair (STRATA_TCP_STREAMS=4 and 1), so that
 * connections and requests, both N^2 in a full mesh, can be told apart; scale_report.py fits
 * process_us and connection_us (a connection's CPU includes the handshake's key agreement and
 * the mesh's poll loop over every connection in progress). A request's cost is a store round
 * trip on loopback, split between server and client. The byte sizes are fitted to the counted
 * runs (scale_rank -c) of a `strata launch` job. store_conn_bytes is an upper bound: the store's
 * process did not grow measurably from 8 to 32 clients. */
strata_startup_costs strata_startup_default_costs(void) {
  return (strata_startup_costs){.request_server_us = 4.0,
                                .request_client_us = 4.0,
                                .connection_us = 900.0,
                                .process_us = 65000.0,
                                .key_bytes = 30,
                                .identity_bytes = 104,
                                .address_bytes = 16,
                                .site_bytes = 7,
                                .frame_bytes = 16,
                                .entry_overhead_bytes = 64,
                                .store_conn_bytes = 8192,
                                .base_fds = 6};
}

const char *strata_startup_scheme_name(strata_startup_scheme scheme) {
  return scheme == STRATA_STARTUP_LAZY ? "lazy" : "eager";
}

/* Peers a rank talks to in its first schedule, and how many of them it dials (the lower rank of
 * a pair dials): the mean over ranks and the most any rank dials. */
static void schedule_peers(int64_t n, strata_startup_pattern pattern, double *peers,
                           double *dialed_mean, double *dialed_max) {
  if (n < 2) {
    *peers = *dialed_mean = *dialed_max = 0;
    return;
  }
  if (pattern == STRATA_STARTUP_RHD) {
    double partners = ceil(log2((double)n));
    *peers = partners < (double)(n - 1) ? partners : (double)(n - 1);
  } else {
    *peers = n == 2 ? 1 : 2;
  }
  *dialed_mean = *peers / 2;
  *dialed_max = *peers; /* rank 0 is the lower end of every pair it is in */
}

/* One-way message steps of the first small allreduce. */
static double allreduce_steps(int64_t n, strata_startup_pattern pattern) {
  if (n < 2) return 0;
  return pattern == STRATA_STARTUP_RHD ? ceil(log2((double)n)) : 2.0 * (double)(n - 1);
}

static void eager_counts(const strata_startup_job *job, const strata_startup_costs *c,
                         strata_startup *out) {
  double n = (double)job->ranks, frame = 2 * c->frame_bytes + c->key_bytes;
  out->requests_per_rank = 2 * n + EAGER_FIXED_REQUESTS - 1 + (n - 1) / 2;
  out->requests_max = 3 * n + EAGER_FIXED_REQUESTS - 2;
  out->requests_total = n * out->requests_per_rank;
  double mean_bytes = out->requests_per_rank * frame + 3 * 2 * COUNTER_BYTES + c->identity_bytes +
                      c->address_bytes + c->site_bytes + (n - 1) / 2 * c->address_bytes +
                      (n - 1) * c->identity_bytes + n * c->site_bytes;
  out->store_bytes_total = n * mean_bytes;
  out->store_rounds = out->requests_max;
  out->peer_rounds = HANDSHAKE_STEPS + allreduce_steps(job->ranks, job->pattern);
  out->peers_per_rank = n - 1;
  out->store_entries = EAGER_ENTRIES_PER_RANK * n;
  out->store_memory_bytes =
      out->store_entries * (c->key_bytes + c->entry_overhead_bytes) +
      n * (3 * COUNTER_BYTES + c->identity_bytes + c->address_bytes + c->site_bytes);
}

static void lazy_counts(const strata_startup_job *job, const strata_startup_costs *c,
                        strata_startup *out) {
  double n = (double)job->ranks, frame = 2 * c->frame_bytes + c->key_bytes;
  double peers, dialed_mean, dialed_max,
      record = c->identity_bytes + c->address_bytes + c->site_bytes;
  schedule_peers(job->ranks, job->pattern, &peers, &dialed_mean, &dialed_max);
  /* rank 0 waits for every rank's site, reads them a batch per request, reads the one site's
   * name and sets the answer instead of reading it */
  double rank0_extra = 2 + ceil(n / SITE_COUNTS_PER_REQUEST);
  out->requests_per_rank = LAZY_FIXED_REQUESTS + dialed_mean + rank0_extra / n;
  out->requests_max = LAZY_FIXED_REQUESTS + rank0_extra + dialed_max;
  out->requests_total = n * out->requests_per_rank;
  /* each rank reads the sites' answer (a few bytes per site); rank 0 reads two counters a rank */
  out->store_bytes_total = n * (out->requests_per_rank * frame + 5 * COUNTER_BYTES + record +
                                dialed_mean * c->address_bytes + SITE_ANSWER_BYTES) +
                           n * 2 * (COUNTER_BYTES + c->key_bytes);
  out->store_rounds = out->requests_max;
  /* the dials of one schedule go out together: one handshake's latency, then the allreduce */
  out->peer_rounds = HANDSHAKE_STEPS + allreduce_steps(job->ranks, job->pattern);
  out->peers_per_rank = peers;
  out->store_entries = LAZY_ENTRIES_PER_RANK * n;
  out->store_memory_bytes = out->store_entries * (c->key_bytes + c->entry_overhead_bytes) +
                            n * (5 * COUNTER_BYTES + record) + SITE_ANSWER_BYTES;
}

int strata_startup_model(const strata_startup_job *job, strata_startup_scheme scheme,
                         const strata_startup_costs *costs, strata_startup *out) {
  if (!job || !costs || !out || job->ranks < 1 || job->streams < 1) return -1;
  *out = (strata_startup){.scheme = scheme, .ranks = job->ranks};
  double n = (double)job->ranks;
  if (job->ranks >= 2) {
    if (scheme == STRATA_STARTUP_LAZY)
      lazy_counts(job, costs, out);
    else
      eager_counts(job, costs, out);
    out->store_memory_bytes += n * costs->store_conn_bytes;
  }
  double per_pair = (double)job->streams + 1;
  out->sockets_per_rank = out->peers_per_rank * per_pair;
  out->fds_per_rank = out->sockets_per_rank + costs->base_fds;
  out->connections_total = n * out->peers_per_rank / 2 * per_pair;
  double us = 1e-6;
  out->store_busy_s = out->requests_total * costs->request_server_us * us;
  out->rank_busy_s =
      (costs->process_us + out->store_rounds * (job->store_rtt_us + costs->request_client_us) +
       out->sockets_per_rank * costs->connection_us / 2) *
      us;
  if (job->cores > 0)
    out->cpu_bound_s =
        (out->requests_total * (costs->request_server_us + costs->request_client_us) +
         out->connections_total * costs->connection_us + n * costs->process_us) *
        us / job->cores;
  double bound = out->store_busy_s;
  if (out->rank_busy_s > bound) bound = out->rank_busy_s;
  if (out->cpu_bound_s > bound) bound = out->cpu_bound_s;
  out->init_s = bound + out->peer_rounds * job->peer_rtt_us / 2 * us;
  return 0;
}
