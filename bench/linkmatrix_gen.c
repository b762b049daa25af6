// SPDX-License-Identifier: Apache-2.0
/*
 * linkmatrix_gen.c — a link matrix as `strata probe` would write it for N ranks on S sites of
 * hosts of 8 ranks, for bench/place_scale.sh: one-way latencies of 2 µs (one host), 20 µs (one
 * site) and 15 ms (between sites) in whole nanoseconds halved, bandwidths of 10, 1.25 and
 * 0.125 GB/s, each with up to 1% jitter (seeded), both directions of a latency the same.
 *
 * Usage: strata-linkmatrix-gen N SITES OUT.json
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner.h"

int main(int argc, char **argv) {
  int n = argc == 4 ? atoi(argv[1]) : 0, sites = argc == 4 ? atoi(argv[2]) : 0;
  if (n < 2 || n > STRATA_LINKMATRIX_MAX_RANKS || sites < 1 || sites > n) {
    fprintf(stderr, "usage: strata-linkmatrix-gen N(2..%d) SITES(1..N) OUT.json\n",
            STRATA_LINKMATRIX_MAX_RANKS);
    return 2;
  }
  strata_link_matrix m;
  if (strata_link_matrix_alloc(&m, n) != STRATA_OK) return 1;
  uint64_t state = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < n; i++) {
    snprintf(m.host[i], sizeof m.host[i], "host%d", i / 8);
    snprintf(m.site[i], sizeof m.site[i], "site%d", (int)((int64_t)i * sites / n));
    for (int j = 0; j < n; j++) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      double jitter = 1 + (double)(state % 1000) * 1e-5;
      int host = i / 8 == j / 8;
      int site = (int64_t)i * sites / n == (int64_t)j * sites / n;
      size_t at = (size_t)i * (size_t)n + (size_t)j, mirror = (size_t)j * (size_t)n + (size_t)i;
      double latency_us = host ? 2 : site ? 20 : 15000;
      m.latency_us[at] = i == j  ? 0
                         : j < i ? m.latency_us[mirror]
                                 : floor(latency_us * jitter * 2000) / 2000;
      m.bandwidth_gbps[at] = i == j ? 0 : (host ? 10 : site ? 1.25 : 0.125) * jitter;
    }
  }
  char err[256];
  int rc = strata_link_matrix_save(&m, argv[3], err, sizeof err);
  if (rc != STRATA_OK) fprintf(stderr, "strata-linkmatrix-gen: %s\n", err);
  strata_link_matrix_free(&m);
  return rc == STRATA_OK ? 0 : 1;
}
