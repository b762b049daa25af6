// SPDX-License-Identifier: Apache-2.0
/* test_model_startup.c — the start-up model (src/model/startup.c): exact counts for small jobs
 * (the eager ones are what bench/scale.sh's counted runs measure on a live job: 8 ranks, median
 * 24.5 requests, the busiest 28, 41 descriptors), the closed forms, and that every cost grows
 * with the job while the lazy scheme's per-rank costs stay flat or logarithmic. */
#include <math.h>
#include <stdio.h>

#include "helpers/check.h"
#include "model/startup.h"

static strata_startup run(int64_t ranks, strata_startup_scheme scheme,
                          strata_startup_pattern pattern, double cores) {
  strata_startup_costs costs = strata_startup_default_costs();
  strata_startup_job job = {.ranks = ranks,
                            .streams = 4,
                            .pattern = pattern,
                            .store_rtt_us = 30,
                            .peer_rtt_us = 30,
                            .cores = cores};
  strata_startup out;
  CHECK(strata_startup_model(&job, scheme, &costs, &out) == 0, "model of %lld ranks",
        (long long)ranks);
  return out;
}

static void small_jobs(void) {
  strata_startup e8 = run(8, STRATA_STARTUP_EAGER, STRATA_STARTUP_RHD, 2);
  CHECK_NEAR("eager 8: requests per rank", e8.requests_per_rank, 24.5, 0);
  CHECK_NEAR("eager 8: busiest rank", e8.requests_max, 28, 0);
  CHECK_NEAR("eager 8: requests", e8.requests_total, 196, 0);
  CHECK_NEAR("eager 8: sockets", e8.sockets_per_rank, 35, 0);
  CHECK_NEAR("eager 8: descriptors", e8.fds_per_rank, 41, 0);
  CHECK_NEAR("eager 8: connections", e8.connections_total, 140, 0);
  CHECK_NEAR("eager 8: entries", e8.store_entries, 48, 0);
  strata_startup e16 = run(16, STRATA_STARTUP_EAGER, STRATA_STARTUP_RHD, 2);
  CHECK_NEAR("eager 16: requests per rank", e16.requests_per_rank, 44.5, 0);
  CHECK_NEAR("eager 16: busiest rank", e16.requests_max, 52, 0);
  CHECK_NEAR("eager 16: descriptors", e16.fds_per_rank, 81, 0);

  strata_startup ring = run(8, STRATA_STARTUP_LAZY, STRATA_STARTUP_RING, 2);
  CHECK_NEAR("lazy ring 8: peers", ring.peers_per_rank, 2, 0);
  CHECK_NEAR("lazy ring 8: requests per rank", ring.requests_per_rank, 14 + 1 + 3.0 / 8, 1e-12);
  CHECK_NEAR("lazy ring 8: busiest rank", ring.requests_max, 14 + 3 + 2, 0);
  CHECK_NEAR("lazy ring 8: descriptors", ring.fds_per_rank, 16, 0);
  CHECK_NEAR("lazy ring 8: connections", ring.connections_total, 40, 0);
  strata_startup rhd = run(1024, STRATA_STARTUP_LAZY, STRATA_STARTUP_RHD, 0);
  CHECK_NEAR("lazy rhd 1024: peers", rhd.peers_per_rank, 10, 0);
  CHECK_NEAR("lazy rhd 1024: busiest rank", rhd.requests_max, 14 + 3 + 10, 0);
  CHECK_NEAR("lazy rhd 1024: requests", rhd.requests_total, 1024 * (14 + 5) + 3, 1e-9);
  strata_startup pair = run(2, STRATA_STARTUP_LAZY, STRATA_STARTUP_RING, 0);
  CHECK_NEAR("lazy ring 2: one peer", pair.peers_per_rank, 1, 0);

  strata_startup one = run(1, STRATA_STARTUP_EAGER, STRATA_STARTUP_RING, 0);
  CHECK(one.requests_total == 0 && one.connections_total == 0 && one.store_memory_bytes == 0,
        "one rank needs no store and no network");
  CHECK(one.init_s > 0, "one rank still pays its own start");
}

static void closed_forms(void) {
  for (int64_t n = 2; n <= 100000; n *= 7) {
    double d = (double)n;
    strata_startup e = run(n, STRATA_STARTUP_EAGER, STRATA_STARTUP_RHD, 0);
    CHECK_NEAR("eager requests", e.requests_total, d * (2 * d + 5) + d * (d - 1) / 2, 1e-6 * d * d);
    CHECK_NEAR("eager connections", e.connections_total, d * (d - 1) / 2 * 5, 1e-6 * d * d);
    CHECK_NEAR("eager store busy", e.store_busy_s,
               e.requests_total * strata_startup_default_costs().request_server_us * 1e-6, 1e-9);
    strata_startup l = run(n, STRATA_STARTUP_LAZY, STRATA_STARTUP_RING, 0);
    CHECK_NEAR("lazy entries", l.store_entries, 7 * d, 0);
    CHECK(l.requests_per_rank < 17, "a lazy ring rank asks the store fewer than 17 times, not %g",
          l.requests_per_rank);
    CHECK_NEAR("lazy rank 0 reads every site a batch at a time", l.requests_max,
               14 + 2 + ceil(d / 8192) + (n == 2 ? 1 : 2), 0);
  }
}

static void growth(void) {
  strata_startup last_e = {0}, last_l = {0};
  for (int64_t n = 2; n <= 100000; n *= 2) {
    strata_startup e = run(n, STRATA_STARTUP_EAGER, STRATA_STARTUP_RHD, 0);
    strata_startup l = run(n, STRATA_STARTUP_LAZY, STRATA_STARTUP_RHD, 0);
    CHECK(e.requests_total > last_e.requests_total &&
              e.store_memory_bytes > last_e.store_memory_bytes && e.init_s >= last_e.init_s &&
              e.fds_per_rank > last_e.fds_per_rank,
          "eager costs grow with %lld ranks", (long long)n);
    CHECK(l.requests_total > last_l.requests_total && l.init_s >= last_l.init_s &&
              l.peers_per_rank >= last_l.peers_per_rank,
          "lazy costs grow with %lld ranks", (long long)n);
    if (n >= 8)
      /* the store keeps about as many entries per rank either way: its memory is about the same */
      CHECK(l.requests_total < e.requests_total && l.fds_per_rank < e.fds_per_rank &&
                l.store_memory_bytes < 1.05 * e.store_memory_bytes && l.init_s < e.init_s,
            "lazy is cheaper than eager at %lld ranks", (long long)n);
    if (last_l.ranks >= 64) /* beside one answer of a few bytes the job shares */
      CHECK_REL("lazy store memory is linear", l.store_memory_bytes / last_l.store_memory_bytes, 2,
                1e-3);
    last_e = e;
    last_l = l;
  }
  /* quadratic against linear: doubling the job quadruples the eager job's requests */
  strata_startup a = run(10000, STRATA_STARTUP_EAGER, STRATA_STARTUP_RHD, 0);
  strata_startup b = run(20000, STRATA_STARTUP_EAGER, STRATA_STARTUP_RHD, 0);
  CHECK_REL("eager requests are quadratic", b.requests_total / a.requests_total, 4, 1e-3);
  /* a shared host's cores bound the time: half the cores, (about) twice the time */
  strata_startup two = run(256, STRATA_STARTUP_EAGER, STRATA_STARTUP_RHD, 2);
  strata_startup one = run(256, STRATA_STARTUP_EAGER, STRATA_STARTUP_RHD, 1);
  CHECK(two.cpu_bound_s > 0 && one.init_s > 1.9 * two.init_s - 0.01, "one core: %g s, two: %g s",
        one.init_s, two.init_s);
}

static void bad_input(void) {
  strata_startup_costs costs = strata_startup_default_costs();
  strata_startup out;
  strata_startup_job job = {.ranks = 0, .streams = 4};
  CHECK(strata_startup_model(&job, STRATA_STARTUP_EAGER, &costs, &out) == -1, "0 ranks refused");
  job.ranks = 4;
  job.streams = 0;
  CHECK(strata_startup_model(&job, STRATA_STARTUP_LAZY, &costs, &out) == -1, "0 streams refused");
  CHECK(strata_startup_model(NULL, STRATA_STARTUP_LAZY, &costs, &out) == -1, "NULL job refused");
}

int main(void) {
  small_jobs();
  closed_forms();
  growth();
  bad_input();
  if (failures) return 1;
  printf("test_model_startup: ok\n");
  return 0;
}
