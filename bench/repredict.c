/*
 * repredict.c — score the host model of this build against rows an earlier `strata bench
 * --predict` run measured (bench/predict.sh --rescore DIR uses it).
 *
 * Usage: strata-repredict FILE COLL
 *   FILE  the text output of `strata bench COLL ... --predict` (rank 0's stdout)
 *   COLL  allreduce, reduce_scatter, allgather or broadcast (float32 rows)
 * Prints one line per row: size, measured out-of-place busbw, the busbw that run printed, and
 * the busbw this build's strata_host_predict_calls gives for the links that run calibrated (its
 * `# Model` and `# Model curves` lines): the printed rates at the working sets calibrate.c
 * gives each point (strata_host_point_footprints), per call of the run's timed loop (iters x
 * agg iters calls in a row, from its first line; a run with a barrier after every call, -z 1,
 * which that line does not say, is not re-predicted as such).
 *
 * STRATA_REPREDICT_WITHOUT in the environment names figures to ignore, to judge them on the same
 * rows: shared_write (the printed shared-write curve: the model as before session 15), tcp_now
 * (the TCP curves measured again before each row: calibration's, as before session 16), or both
 * ("shared_write,tcp_now").
 *
 * Why: a model change can then be judged on the very rows the last one was judged on, instead
 * of on a new sweep whose measurement moved (docs/model.md, "Agreement": a cell's measurement
 * spans more than 25% over three runs in 5-8 of 40 two-rank cells). Exit status 2 on a file it
 * cannot read (no model lines, a malformed curve).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/host.h"

#define LINE_BYTES 8192

static int parse_coll(const char *name, strata_coll *out) {
  static const struct {
    const char *name;
    strata_coll coll;
  } known[] = {{"allreduce", STRATA_COLL_ALLREDUCE},
               {"reduce_scatter", STRATA_COLL_REDUCE_SCATTER},
               {"allgather", STRATA_COLL_ALLGATHER},
               {"broadcast", STRATA_COLL_BROADCAST}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(name, known[i].name)) {
      *out = known[i].coll;
      return 0;
    }
  return -1;
}

/* "# Model (--predict): one host, N ranks on C cores, tcp|shm ..., chunk B B; ... alpha A us
 * [(E us down a chain)]" (the chain's α from session 14 on; 0 before: alpha_us stands in) */
static int parse_model_line(const char *line, strata_host_links *l) {
  const char *host = strstr(line, "one host, "), *chunk = strstr(line, "chunk "),
             *alpha = strstr(line, "alpha ");
  unsigned long long chunk_bytes = 0;
  if (!host || !chunk || !alpha ||
      sscanf(host, "one host, %d ranks on %d cores", &l->nranks, &l->host_cores) != 2 ||
      sscanf(chunk, "chunk %llu", &chunk_bytes) != 1 ||
      sscanf(alpha, "alpha %lf", &l->alpha_us) != 1)
    return -1;
  if (sscanf(alpha, "alpha %*f us (%lf us down a chain)", &l->alpha_ends_us) != 1)
    l->alpha_ends_us = 0;
  l->chunk_bytes = chunk_bytes;
  l->use_tcp = strstr(line, ", tcp,") != NULL;
  return l->nranks >= 2 ? 0 : -1;
}

/* "# Model curves ..., per-call overhead O us: 512K link L reduce R memcpy M [lone . dirty .
 * fused . [warm .]]; ..." Runs printed before session 12 have one point fewer (no span point: it
 * then repeats the largest, span_scale 1); from session 12 on, the span point's printed link
 * working set over the largest point's is span_scale. */
static int parse_curves_line(const char *line, strata_host_links *l) {
  const char *over = strstr(line, "overhead "), *q = strstr(line, "us:");
  if (!over || !q || sscanf(over, "overhead %lf", &l->op_overhead_us) != 1) return -1;
  q += 3;
  unsigned long long printed_k[STRATA_HOST_CURVE_POINTS] = {0};
  int points = 0;
  for (int i = 0; i < STRATA_HOST_CURVE_POINTS; i++) {
    double link, reduce, memcpy_gbps, lone = 0, dirty = 0, fused = 0, warm = 0, shared = 0;
    int used = 0;
    if (sscanf(q, " %lluK link %lf reduce %lf memcpy %lf%n", &printed_k[i], &link, &reduce,
               &memcpy_gbps, &used) != 4)
      break;
    q += used;
    if (sscanf(q, " lone %lf dirty %lf fused %lf%n", &lone, &dirty, &fused, &used) == 3) q += used;
    if (sscanf(q, " warm %lf%n", &warm, &used) == 1) q += used;     /* printed from session 7 on */
    if (sscanf(q, " shared %lf%n", &shared, &used) == 1) q += used; /* from session 15 on */
    const char *next = strchr(q, ';');
    if (next) q = next + 1;
    l->link.gbps[i] = link;
    l->reduce.gbps[i] = reduce;
    l->memcpy.gbps[i] = memcpy_gbps;
    l->link_alone.gbps[i] = lone; /* 0 where the run printed none (one rank) */
    l->link_dirty.gbps[i] = dirty;
    l->fused.gbps[i] = fused;
    l->link_warm.gbps[i] = warm;      /* 0: the dirty rate stands in (sim.h) */
    l->shared_write.gbps[i] = shared; /* 0: free */
    points++;
  }
  const int last = STRATA_HOST_CURVE_POINTS - 1;
  if (points < last) return -1;
  if (points == last) { /* an older run: the span point repeats the largest */
    strata_host_curve *curves[] = {&l->link,       &l->reduce, &l->memcpy,    &l->link_alone,
                                   &l->link_dirty, &l->fused,  &l->link_warm, &l->shared_write};
    for (size_t k = 0; k < sizeof curves / sizeof curves[0]; k++)
      curves[k]->gbps[last] = curves[k]->gbps[last - 1];
    l->span_scale = 1;
  } else {
    l->span_scale = printed_k[last - 1] ? (uint32_t)(printed_k[last] / printed_k[last - 1]) : 1;
  }
  for (int i = 0; i < STRATA_HOST_CURVE_POINTS; i++)
    strata_host_point_footprints(l, i); /* calibrate.c's working sets; the rates printed */
  l->link_gbps = l->link.gbps[last];
  l->reduce_gbps = l->reduce.gbps[last];
  l->memcpy_gbps = l->memcpy.gbps[last];
  return l->link_gbps > 0 ? 0 : -1;
}

/* The curves measured again just before the next row, point by point (matched by the printed
 * working set): "# Model: shared writes now (GB/s at the working set per rank): 512K X 2048K Y
 * ..." (shm, session 15 on) or, tcp, "# Model: TCP links now (...): 1024K link X lone Y ..."
 * (session 16 on). ignore: parse, but keep the curves (STRATA_REPREDICT_WITHOUT). */
static int parse_now(const char *line, int tcp, int ignore, strata_host_links *l) {
  const char *q = strstr(line, "):");
  if (!q) return -1;
  q += 2;
  const strata_host_curve *labels = tcp ? &l->link : &l->shared_write;
  int points = 0, used = 0;
  unsigned long long k;
  double v, lone = 1;
  while ((tcp ? sscanf(q, " %lluK link %lf lone %lf%n", &k, &v, &lone, &used) == 3
              : sscanf(q, " %lluK %lf%n", &k, &v, &used) == 2)) {
    q += used;
    int i = 0;
    while (i < STRATA_HOST_CURVE_POINTS && labels->footprint_bytes[i] >> 10 != k) i++;
    /* a TCP rate of 0 would make the transfer take forever; a shared-write 0 means free */
    if (i == STRATA_HOST_CURVE_POINTS || v < 0 || (tcp && !(v > 0 && lone > 0))) return -1;
    if (!ignore && tcp) l->link.gbps[i] = v, l->link_alone.gbps[i] = lone;
    if (!ignore && !tcp) l->shared_write.gbps[i] = v;
    points++;
  }
  return points > 0 && q[strspn(q, " \n")] == '\0' ? 0 : -1;
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
  const char *without = getenv("STRATA_REPREDICT_WITHOUT");
  const int without_shared = without && strstr(without, "shared_write");
  const int without_tcp = without && strstr(without, "tcp_now");
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
      return 2;
    }
    if (!strncmp(line, "# Model (--predict):", 20)) {
      have_model = parse_model_line(line, &links) == 0;
      continue;
    }
    if (!strncmp(line, "# Model curves", 14)) {
      have_curves = have_model && parse_curves_line(line, &links) == 0;
      if (without_shared) memset(links.shared_write.gbps, 0, sizeof links.shared_write.gbps);
      continue;
    }
    if (!strncmp(line, "# Model: shared writes now", 26) && have_curves) {
      /* printed before each shm row from session 15 on: the row's figures (bench.c) */
      if (parse_now(line, 0, without_shared, &links) != 0) {
        fprintf(stderr, "%s: malformed line: %s", argv[1], line);
        status = 2;
      }
      continue;
    }
    if (!strncmp(line, "# Model: TCP links now", 22) && have_curves) {
      /* printed before each TCP row from session 16 on (bench.c) */
      if (parse_now(line, 1, without_tcp, &links) != 0) {
        fprintf(stderr, "%s: malformed line: %s", argv[1], line);
        status = 2;
      }
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
