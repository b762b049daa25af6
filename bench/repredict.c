// SPDX-License-Identifier: Apache-2.0
/*
 * repredict.c — predict again, with the host model of this build, the rows a saved
 * `strata bench --predict` run measured (bench/predict.sh --rescore DIR uses it, and
 * tests/test_bench_predict.sh checks that a run's printed figures give its printed prediction
 * back).
 *
 * Usage: strata-repredict FILE COLL
 *   FILE  the text output of `strata bench COLL ... --predict` (rank 0's stdout)
 *   COLL  allreduce, reduce_scatter, allgather or broadcast (float32 rows)
 * Prints one line per row: size, measured out-of-place busbw, the busbw that run printed, and
 * the busbw this build's strata_host_predict_calls gives for the links that run calibrated (its
 * `# Model` and `# Model curves` lines, at the working sets strata_host_point_footprints gives
 * each point), per call of the run's timed loop (iters x agg iters calls in a row, from its first
 * line; a run with a barrier after every call, -z 1, which that line does not say, is not
 * re-predicted as such).
 *
 * Why: a model change can then be judged on the very rows the last one was judged on, instead
 * of on a new sweep whose measurement moved. Exit status 2 on a file it cannot read (no model
 * lines, a malformed curve).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

#define LINE_BYTES 8192

static int parse_coll(const char *name, strata_coll *out) {
  static const strata_coll known[] = {STRATA_COLL_ALLREDUCE, STRATA_COLL_REDUCE_SCATTER,
                                      STRATA_COLL_ALLGATHER, STRATA_COLL_BROADCAST};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(name, strata_coll_name(known[i]))) {
      *out = known[i];
      return 0;
    }
  return -1;
}

/* "# Model (--predict): one host, N ranks on C cores, tcp|shm ..., algorithm A, chunk B B;
 * measured now: alpha X us, per-call overhead Y us, ..." */
static int parse_model_line(const char *line, strata_host_links *l) {
  const char *ranks = strstr(line, "): "), *algo = strstr(line, "algorithm "),
             *chunk = strstr(line, "chunk "), *alpha = strstr(line, "alpha "),
             *over = strstr(line, "overhead ");
  unsigned long long chunk_bytes = 0;
  char algo_name[16] = "";
  if (!ranks || !algo || !chunk || !alpha || !over ||
      sscanf(algo, "algorithm %15[a-z]", algo_name) != 1 ||
      strata_algo_parse(algo_name, &l->algo) != STRATA_OK ||
      sscanf(chunk, "chunk %llu", &chunk_bytes) != 1 ||
      sscanf(alpha, "alpha %lf", &l->alpha_us) != 1 ||
      sscanf(over, "overhead %lf", &l->op_overhead_us) != 1)
    return -1;
  if (sscanf(ranks, "): one host, %d ranks on %d cores", &l->nranks, &l->host_cores) != 2 &&
      sscanf(ranks, "): %d ranks on several hosts", &l->nranks) != 1)
    return -1;
  l->chunk_bytes = chunk_bytes;
  l->use_tcp = strstr(line, ", tcp,") != NULL;
  return l->nranks >= 1 ? 0 : -1;
}

/* "# Model curves (...): 256K link L reduce R memcpy M; ..." , one point per calibration point */
static int parse_curves_line(const char *line, strata_host_links *l) {
  const char *q = strstr(line, "):");
  if (!q) return -1;
  q += 2;
  for (int i = 0; i < STRATA_HOST_CURVE_POINTS; i++) {
    unsigned long long k = 0;
    int used = 0;
    if (sscanf(q, " %lluK link %lf reduce %lf memcpy %lf%n", &k, &l->link.gbps[i],
               &l->reduce.gbps[i], &l->memcpy.gbps[i], &used) != 4 ||
        k << 10 != strata_host_point_bytes(i) || !(l->link.gbps[i] > 0))
      return -1;
    q += used;
    if (*q == ';') q++;
    strata_host_point_footprints(l, i); /* calibration's working sets; the rates printed */
  }
  return q[strspn(q, " \n")] == '\0' ? 0 : -1;
}

int main(int argc, char **argv) {
  strata_coll coll;
  if (argc != 3 || parse_coll(argv[2], &coll) != 0) {
    fprintf(stderr, "usage: strata-repredict FILE allreduce|reduce_scatter|allgather|broadcast\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "r");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  strata_host_links links;
  memset(&links, 0, sizeof links);
  char line[LINE_BYTES];
  int have_model = 0, have_curves = 0, rows = 0, status = 0;
  unsigned long long iters = 1, agg_iters = 1; /* the timed loop's calls in a row */
  while (fgets(line, sizeof line, f)) {
    const char *loop = strstr(line, "warmup iters: ");
    if (!strncmp(line, "# nThread", 9) && loop &&
        sscanf(loop, "warmup iters: %*d iters: %llu agg iters: %llu", &iters, &agg_iters) != 2) {
      fprintf(stderr, "%s: malformed line: %s", argv[1], line);
      status = 2;
      break;
    }
    if (!strncmp(line, "# Model (--predict):", 20)) {
      have_model = parse_model_line(line, &links) == 0;
      if (!have_model) fprintf(stderr, "%s: malformed line: %s", argv[1], line);
      continue;
    }
    if (!strncmp(line, "# Model curves", 14)) {
      have_curves = have_model && parse_curves_line(line, &links) == 0;
      if (!have_curves) fprintf(stderr, "%s: malformed line: %s", argv[1], line);
      continue;
    }
    if (line[0] == '#' || !have_curves) continue;
    unsigned long long size, count;
    char type[32], op[32], wrong_oop[32], wrong_ip[32];
    int root;
    double t_oop, alg_oop, bus_oop, t_ip, alg_ip, bus_ip, printed;
    if (sscanf(line, "%llu %llu %31s %31s %d %lf %lf %lf %31s %lf %lf %lf %31s %lf", &size, &count,
               type, op, &root, &t_oop, &alg_oop, &bus_oop, wrong_oop, &t_ip, &alg_ip, &bus_ip,
               wrong_ip, &printed) != 14 ||
        strcmp(type, "float"))
      continue;
    double us = 0;
    int p = links.nranks;
    uint64_t calls = iters * agg_iters > 0 ? iters * agg_iters : 1;
    if (strata_host_predict_calls(&links, coll, STRATA_ALGO_AUTO, count, 4, root < 0 ? 0 : root,
                                  calls, &us) != STRATA_OK ||
        us <= 0) {
      fprintf(stderr, "%s: no prediction for the %llu-byte row\n", argv[1], size);
      status = 2;
      continue;
    }
    /* nccl-tests' bus bandwidth factors (docs/bench.md) */
    double factor = coll == STRATA_COLL_ALLREDUCE   ? 2.0 * (p - 1) / p
                    : coll == STRATA_COLL_BROADCAST ? 1.0
                                                    : (double)(p - 1) / p;
    printf("%llu %.4f %.4f %.4f\n", size, bus_oop, printed, (double)size / us / 1e3 * factor);
    rows++;
  }
  fclose(f);
  if (!have_curves || rows == 0) {
    fprintf(stderr, "%s: no `# Model` lines or no float rows with a model column\n", argv[1]);
    return 2;
  }
  return status;
}
