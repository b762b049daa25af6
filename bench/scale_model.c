// SPDX-License-Identifier: Apache-2.0
/*
 * scale_model.c — the start-up model (src/model/startup.h) as a table, for bench/scale.sh (the
 * model beside each measured point) and docs/scale.md (the model at 1,000 to 100,000 ranks).
 *
 * Usage: strata-scale-model [--cores C] [--streams S] [--rtt-us U] N...
 *   --cores C   the ranks share C cores (one host: what bench/scale.sh runs); 0, the default,
 *               gives every rank its own (a cluster)
 *   --streams S STRATA_TCP_STREAMS (4)
 *   --rtt-us U  round trip to the store and between ranks (30 us)
 * Prints CSV: one row per scheme (eager = today's full mesh, lazy = on demand with a ring) and N.
 * Exit status 2 on a bad argument.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/startup.h"

static int parse_double(const char *text, double *out) {
  char *end = NULL;
  *out = strtod(text, &end);
  return end != text && !*end && *out >= 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  double cores = 0, streams = 4, rtt_us = 30;
  int first = 1;
  while (first + 1 < argc && !strncmp(argv[first], "--", 2)) {
    double *target = !strcmp(argv[first], "--cores")     ? &cores
                     : !strcmp(argv[first], "--streams") ? &streams
                     : !strcmp(argv[first], "--rtt-us")  ? &rtt_us
                                                         : NULL;
    if (!target || parse_double(argv[first + 1], target) != 0) {
      fprintf(stderr, "strata-scale-model: bad option %s %s\n", argv[first], argv[first + 1]);
      return 2;
    }
    first += 2;
  }
  if (first >= argc) {
    fprintf(stderr, "usage: strata-scale-model [--cores C] [--streams S] [--rtt-us U] N...\n");
    return 2;
  }
  strata_startup_costs costs = strata_startup_default_costs();
  printf(
      "scheme,ranks,requests_per_rank,requests_max,requests_total,store_bytes_total,"
      "store_rounds,peer_rounds,peers_per_rank,fds_per_rank,connections_total,store_entries,"
      "store_memory_bytes,store_busy_s,rank_busy_s,cpu_bound_s,init_s\n");
  for (int scheme = STRATA_STARTUP_EAGER; scheme <= STRATA_STARTUP_LAZY; scheme++)
    for (int i = first; i < argc; i++) {
      double ranks = 0;
      if (parse_double(argv[i], &ranks) != 0 || ranks < 1) {
        fprintf(stderr, "strata-scale-model: %s is not a rank count\n", argv[i]);
        return 2;
      }
      strata_startup_job job = {.ranks = (int64_t)ranks,
                                .streams = (int)streams,
                                .pattern = STRATA_STARTUP_RING,
                                .store_rtt_us = rtt_us,
                                .peer_rtt_us = rtt_us,
                                .cores = cores};
      strata_startup s;
      if (strata_startup_model(&job, (strata_startup_scheme)scheme, &costs, &s) != 0) {
        fprintf(stderr, "strata-scale-model: cannot model %s ranks, %g streams\n", argv[i],
                streams);
        return 2;
      }
      printf("%s,%lld,%g,%g,%.6g,%.6g,%g,%g,%g,%g,%.6g,%g,%.6g,%.6g,%.6g,%.6g,%.6g\n",
             strata_startup_scheme_name(s.scheme), (long long)s.ranks, s.requests_per_rank,
             s.requests_max, s.requests_total, s.store_bytes_total, s.store_rounds, s.peer_rounds,
             s.peers_per_rank, s.fds_per_rank, s.connections_total, s.store_entries,
             s.store_memory_bytes, s.store_busy_s, s.rank_busy_s, s.cpu_bound_s, s.init_s);
    }
  return 0;
}
