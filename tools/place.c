// SPDX-License-Identifier: Apache-2.0
/*
 * place.c — `strata place MATRIX [--ring | --sites | --pipeline S ...] [--json]`: turn a link
 * matrix (docs/link-matrix.md) into a rank order for `strata launch --order`, with the model's
 * prediction for the chosen order beside the identity order and random orders.
 *
 * The solvers live in src/plan/place.c; this file parses arguments and prints. The order
 * printed is launch's meaning of --order: the i-th value is the rank that child i (the process
 * in matrix row i) gets. docs/place.md explains the modes and the numbers.
 *
 * --env prints the site grouping instead, as the variable each row's process needs for the
 * hierarchical collectives: line i is STRATA_SITE=<site of row i> (the names `strata launch
 * --sites` gives; docs/hier.md), for launchers other than `strata launch`.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "planner.h"
#include "strata.h"

#define PLACE_DEFAULT_BYTES (256.0 * 1024 * 1024)
#define PLACE_RANDOM_SAMPLES 200

typedef enum place_mode { PLACE_RING = 0, PLACE_SITES, PLACE_PIPELINE } place_mode;

typedef struct place_options {
  const char *matrix_path;
  place_mode mode;
  double bytes;
  strata_pipeline_spec pipeline;
  double params, param_bytes;
  uint64_t seed;
  int json, quiet, iterations;
  int env;              /* --env: print STRATA_SITE per matrix row */
  const char *evaluate; /* --evaluate ORDER: predict this launch order instead of placing */
} place_options;

static void place_usage(FILE *out) {
  fprintf(out,
          "usage: strata place MATRIX [--ring | --sites | --pipeline STAGES [pipeline options]]\n"
          "                    [--bytes SIZE] [--seed N] [--json | -q]\n\n"
          "Turn a link matrix written by 'strata probe' (JSON or YAML) into a rank order and\n"
          "print it as 'strata launch --order' wants it: the i-th number is the rank child i\n"
          "(matrix row i) gets. The prediction for the order is printed beside the identity\n"
          "order and the mean of %d random orders.\n\n"
          "  --ring              bottleneck ring for an allreduce (default): the ring whose\n"
          "                      slowest hop is fastest; exact up to %d ranks\n"
          "  --sites             a ring with each site's ranks contiguous (site labels from\n"
          "                      the matrix, else clusters of similar latency)\n"
          "  --env               print STRATA_SITE=<site> for each matrix row (line i: row i)\n"
          "                      instead of an order: the sites of 'strata launch --sites'\n"
          "  --pipeline STAGES   assign (stage, replica) positions, after Yuan et al. 2022:\n"
          "    --replicas D        data-parallel replicas (default: ranks / STAGES)\n"
          "    --params N          parameters of the model (suffix K, M, B = 1e3, 1e6, 1e9)\n"
          "    --param-bytes B     bytes per parameter in the allreduce (default 2)\n"
          "    --layers L          layers, split over stages as evenly as possible\n"
          "    --activation-bytes SIZE  activations crossing a stage boundary per micro-batch\n"
          "    --microbatches M    micro-batches per step (default 1)\n"
          "    --iterations N      search rounds (default 200; 3200/ranks above 16 ranks)\n"
          "  --bytes SIZE        allreduce size for --ring/--sites (default 256M; K, M, G =\n"
          "                      2^10, 2^20, 2^30)\n"
          "  --seed N            seed of the random choices (default 1)\n"
          "  --json              machine-readable output\n"
          "  -q, --quiet         print only the order\n"
          "  --evaluate ORDER    predict the ring allreduce of a given launch order (as\n"
          "                      'strata launch --order' takes it) instead of placing\n"
          "  -h, --help          this text\n",
          PLACE_RANDOM_SAMPLES, STRATA_PLACE_EXACT_MAX_RANKS);
}

static int usage_error(const char *what, const char *value) {
  fprintf(stderr, "strata place: %s%s%s\n(see 'strata place --help')\n", what, value ? " " : "",
          value ? value : "");
  return 2;
}

/* The largest sizes accepted: far past any real model or message, and small enough that every
 * prediction made from them stays a finite number of seconds (1e308 bytes would print inf). */
#define PLACE_MAX_BYTES 1125899906842624.0 /* 2^50, 1 PiB */
#define PLACE_MAX_PARAMS 1e15
#define PLACE_MAX_PARAM_BYTES 64.0

/* A count with an optional decimal suffix: K=1e3, M=1e6, G or B=1e9 ("7B" parameters). */
static int parse_count(const char *text, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || !isfinite(v) || v < 0) return -1;
  static const char suffixes[] = "kmgb";
  static const double scales[] = {1e3, 1e6, 1e9, 1e9};
  const char *suffix = *end ? strchr(suffixes, tolower((unsigned char)*end)) : NULL;
  if (*end && (!suffix || end[1])) return -1;
  *out = suffix ? v * scales[suffix - suffixes] : v;
  return isfinite(*out) ? 0 : -1;
}

/* A byte count (strata_size_parse: K=2^10 ...). */
static int parse_bytes(const char *text, double *out) {
  uint64_t bytes;
  if (strata_size_parse(text, &bytes) != STRATA_OK) return -1;
  *out = (double)bytes;
  return 0;
}

/* parse_bytes (binary) or parse_count, then at most `max`: -1 when it is not a number, 1 with a
 * sentence naming the limit. */
static int parse_bounded(const char *option, const char *text, int binary, double max,
                         double *out) {
  int bad = binary ? parse_bytes(text, out) : parse_count(text, out);
  if (bad && binary && parse_count(text, out) == 0) bad = 0, *out = INFINITY; /* past 2^64 */
  if (bad) return -1;
  if (*out <= max) return 0;
  fprintf(stderr, "strata place: %s %s: at most %.6g (larger values give no finite prediction)\n",
          option, text, max);
  return 1;
}

static int parse_int(const char *text, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/* Returns -1 to go on, or an exit status. */
static int parse_args(int argc, char **argv, place_options *o) {
  *o = (place_options){.bytes = PLACE_DEFAULT_BYTES, .param_bytes = 2, .seed = 1};
  o->pipeline.microbatches = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int takes = 1, bad = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      place_usage(stdout);
      return 0;
    } else if (!strcmp(a, "--ring")) {
      o->mode = PLACE_RING, takes = 0;
    } else if (!strcmp(a, "--sites")) {
      o->mode = PLACE_SITES, takes = 0;
    } else if (!strcmp(a, "--env")) {
      o->env = 1, takes = 0;
    } else if (!strcmp(a, "--json")) {
      o->json = 1, takes = 0;
    } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      o->quiet = 1, takes = 0;
    } else if (a[0] != '-' && !o->matrix_path) {
      o->matrix_path = a, takes = 0;
    } else if (!v) {
      return usage_error("missing value or unknown option:", a);
    } else if (!strcmp(a, "--evaluate")) {
      o->evaluate = v;
    } else if (!strcmp(a, "--pipeline")) {
      o->mode = PLACE_PIPELINE;
      bad = parse_int(v, 1, STRATA_LINKMATRIX_MAX_RANKS, &o->pipeline.stages);
    } else if (!strcmp(a, "--replicas")) {
      bad = parse_int(v, 1, STRATA_LINKMATRIX_MAX_RANKS, &o->pipeline.replicas);
    } else if (!strcmp(a, "--layers")) {
      bad = parse_int(v, 1, 1 << 20, &o->pipeline.layers);
    } else if (!strcmp(a, "--microbatches")) {
      bad = parse_int(v, 1, 1 << 20, &o->pipeline.microbatches);
    } else if (!strcmp(a, "--iterations")) {
      bad = parse_int(v, 1, 1 << 20, &o->iterations);
    } else if (!strcmp(a, "--params")) {
      bad = parse_bounded(a, v, 0, PLACE_MAX_PARAMS, &o->params);
    } else if (!strcmp(a, "--param-bytes")) {
      bad = parse_bounded(a, v, 0, PLACE_MAX_PARAM_BYTES, &o->param_bytes);
    } else if (!strcmp(a, "--activation-bytes")) {
      bad = parse_bounded(a, v, 1, PLACE_MAX_BYTES, &o->pipeline.activation_bytes);
    } else if (!strcmp(a, "--bytes")) {
      bad = parse_bounded(a, v, 1, PLACE_MAX_BYTES, &o->bytes);
      bad = bad ? bad : o->bytes <= 0 ? -1 : 0;
    } else if (!strcmp(a, "--seed")) {
      int s = 0;
      bad = parse_int(v, 0, 1 << 30, &s);
      o->seed = (uint64_t)s;
    } else {
      return usage_error("unknown option", a);
    }
    if (bad < 0) fprintf(stderr, "strata place: %s: bad value '%s'\n", a, v);
    if (bad) return 2;
    i += takes;
  }
  if (!o->matrix_path) return usage_error("the link matrix file is missing", NULL);
  o->pipeline.param_bytes = o->params * o->param_bytes;
  return -1;
}

static void print_order(FILE *f, int n, const int *order) {
  for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", order[i]);
}

/* JSON numbers other than whole ones, to 6 significant digits (a prediction is no finer). */
#define PLACE_JSON_REAL_DIGITS 6

static json_t *json_ints(int n, const int *v) {
  json_t *list = json_array();
  for (int i = 0; i < n; i++) list = strata_json_append(list, json_integer(v[i]));
  return list;
}

static int print_json(json_t *doc) {
  if (strata_json_write(stdout, doc, PLACE_JSON_REAL_DIGITS) == 0) return 0;
  fprintf(stderr, "strata place: writing JSON failed\n");
  return 1;
}

static const char *human_time(double us, char *buf, size_t len) {
  if (us >= 1e6)
    snprintf(buf, len, "%.3f s", us / 1e6);
  else if (us >= 1e3)
    snprintf(buf, len, "%.3f ms", us / 1e3);
  else
    snprintf(buf, len, "%.1f us", us);
  return buf;
}

/* The slowest hop of a ring for the text output. */
static void slowest_hop(const strata_link_matrix *m, const int *seq, double chunk, int *from,
                        int *to, double *us) {
  int n = m->nranks;
  *us = -1;
  for (int k = 0; k < n && n > 1; k++) {
    int a = seq[k], b = seq[(k + 1) % n];
    double h = fmax(strata_link_matrix_send_us(m, a, b, chunk),
                    strata_link_matrix_send_us(m, b, a, chunk));
    if (h > *us) *us = h, *from = a, *to = b;
  }
}

/* Parses a launch order (a permutation of 0..n-1, comma-separated) into the ring sequence. */
static int parse_launch_order(const char *text, int n, int *seq) {
  char *seen = calloc((size_t)n, 1);
  const char *p = text;
  int k = 0, bad = !seen;
  while (!bad && k < n) {
    char *end;
    errno = 0;
    long r = strtol(p, &end, 10);
    bad = errno || end == p || r < 0 || r >= n || seen[r] || (*end != ',' && *end != '\0') ||
          (*end == '\0' && k != n - 1);
    if (!bad) {
      seen[r] = 1;
      seq[r] = k++; /* child k gets rank r: rank r's slot is k */
      p = *end ? end + 1 : end;
    }
  }
  free(seen);
  return bad || *p ? -1 : 0;
}

static int run_evaluate(const place_options *o, const strata_link_matrix *m) {
  int n = m->nranks, *seq = malloc(sizeof(int) * n);
  if (!seq || parse_launch_order(o->evaluate, n, seq) != 0) {
    fprintf(stderr, "strata place: --evaluate '%s' must list each rank 0..%d exactly once\n",
            o->evaluate, n - 1);
    free(seq);
    return 2;
  }
  double us = strata_place_ring_allreduce_us(m, seq, o->bytes);
  int rc = 0;
  if (o->json)
    rc =
        print_json(json_pack("{s:s, s:o, s:o}", "order", o->evaluate, "bytes",
                             strata_json_number(o->bytes), "allreduce_us", strata_json_number(us)));
  else
    printf("predicted ring allreduce of %.0f bytes with --order %s: %.1f us\n", o->bytes,
           o->evaluate, us);
  free(seq);
  return rc;
}

/* --env: one STRATA_SITE line per matrix row; nothing printed when a label is unusable. */
static int run_env(const strata_link_matrix *m) {
  int n = m->nranks, nsites = 0, labelled = 0, *site_of = malloc(sizeof(int) * n);
  if (!site_of || strata_place_sites(m, site_of, &nsites, &labelled) != STRATA_OK) {
    fprintf(stderr, "strata place: out of memory\n");
    free(site_of);
    return 1;
  }
  char name[STRATA_LINKMATRIX_LABEL_BYTES];
  int rc = 0;
  for (int pass = 0; pass < 2 && rc == 0; pass++)
    for (int i = 0; i < n && rc == 0; i++) {
      strata_place_site_name(m, site_of, labelled, i, name, sizeof name);
      if (pass == 1) {
        printf("STRATA_SITE=%s\n", name);
      } else if (!name[0] || strcspn(name, " \t\n\r\f\v") != strlen(name)) {
        fprintf(stderr, "strata place: the site label '%s' of row %d is not a valid STRATA_SITE\n",
                name, i);
        rc = 2;
      }
    }
  free(site_of);
  return rc;
}

static int run_ring(const place_options *o, const strata_link_matrix *m) {
  int n = m->nranks, nsites = 1, labelled = 0;
  int *seq = malloc(sizeof(int) * n), *order = malloc(sizeof(int) * n);
  int *ident = malloc(sizeof(int) * n), *site_of = malloc(sizeof(int) * n);
  double *w = malloc(sizeof(double) * n * n);
  int rc = seq && order && ident && site_of && w ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (rc == STRATA_OK) rc = strata_place_sites(m, site_of, &nsites, &labelled);
  if (rc == STRATA_OK && o->mode == PLACE_SITES) {
    rc = strata_place_sites_ring(m, o->bytes, o->seed, seq);
  } else if (rc == STRATA_OK) {
    rc = strata_place_ring_for_allreduce(m, o->bytes, o->seed, seq);
  }
  if (rc != STRATA_OK) {
    fprintf(stderr, "strata place: %s\n", strata_strerror(rc));
    free(seq), free(order), free(ident), free(site_of), free(w);
    return 1;
  }
  for (int i = 0; i < n; i++) ident[i] = i;
  strata_place_launch_order(n, seq, order);
  double placed = strata_place_ring_allreduce_us(m, seq, o->bytes);
  double identity = strata_place_ring_allreduce_us(m, ident, o->bytes);
  double random = strata_place_random_allreduce_us(m, o->bytes, PLACE_RANDOM_SAMPLES, o->seed);
  int from = 0, to = 0;
  double hop = 0;
  slowest_hop(m, seq, o->bytes / n, &from, &to, &hop);
  const char *mode = o->mode == PLACE_SITES ? "sites" : "ring";
  const char *solver = o->mode == PLACE_SITES              ? "site blocks + 2-opt/Or-opt"
                       : n <= STRATA_PLACE_EXACT_MAX_RANKS ? "exact"
                                                           : "nearest neighbour + 2-opt/Or-opt";
  int json_rc = 0;
  if (o->quiet) {
    print_order(stdout, n, order);
    putchar('\n');
  } else if (o->json) {
    json_t *hop_json =
        json_pack("{s:i, s:i, s:o}", "from", from, "to", to, "us", strata_json_number(hop));
    json_t *times =
        json_pack("{s:o, s:o, s:o}", "placed", strata_json_number(placed), "identity",
                  strata_json_number(identity), "random_mean", strata_json_number(random));
    json_rc = print_json(json_pack(
        "{s:s, s:s, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "mode", mode, "solver", solver,
        "ranks", n, "bytes", strata_json_number(o->bytes), "order", json_ints(n, order), "ring",
        json_ints(n, seq), "sites", json_ints(n, site_of), "slowest_hop", hop_json, "allreduce_us",
        times, "speedup_vs_random", strata_json_number(placed > 0 ? random / placed : 1),
        "speedup_vs_identity", strata_json_number(placed > 0 ? identity / placed : 1)));
  } else {
    char t1[32], t2[32], t3[32], t4[32];
    printf("%s placement of %d ranks (%s), allreduce of %.0f bytes\n", mode, n, solver, o->bytes);
    printf("order: ");
    print_order(stdout, n, order);
    printf("\n  (strata launch -n %d --order <order> ...: child i gets rank order[i])\n", n);
    printf("ring (matrix rows in ring order): ");
    for (int k = 0; k < n; k++) printf("%s%d", k ? " " : "", seq[k]);
    printf("\nsites: %d (%s)\n", nsites, labelled ? "from labels" : "by latency clustering");
    if (n > 1)
      printf("slowest hop: %d <-> %d, %s per chunk of %.0f bytes\n", from, to,
             human_time(hop, t1, sizeof t1), o->bytes / n);
    printf("predicted ring allreduce: placed %s, identity %s, random (mean of %d) %s\n",
           human_time(placed, t2, sizeof t2), human_time(identity, t3, sizeof t3),
           PLACE_RANDOM_SAMPLES, human_time(random, t4, sizeof t4));
    printf("placed is %.2fx faster than random, %.2fx than identity\n",
           placed > 0 ? random / placed : 1.0, placed > 0 ? identity / placed : 1.0);
  }
  free(seq), free(order), free(ident), free(site_of), free(w);
  return json_rc;
}

static double pipeline_random_us(const strata_link_matrix *m, const strata_pipeline_spec *spec,
                                 uint64_t seed, int *scratch) {
  int n = m->nranks;
  double total = 0;
  uint64_t s = seed * 2654435761u + 1;
  for (int r = 0; r < PLACE_RANDOM_SAMPLES; r++) {
    for (int k = 0; k < n; k++) scratch[k] = k;
    for (int k = n - 1; k > 0; k--) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      int j = (int)((s >> 33) % (uint64_t)(k + 1)), t = scratch[k];
      scratch[k] = scratch[j];
      scratch[j] = t;
    }
    total += strata_place_pipeline_cost(m, spec, scratch).total_us;
  }
  return total / PLACE_RANDOM_SAMPLES;
}

static int run_pipeline(place_options *o, const strata_link_matrix *m) {
  int n = m->nranks;
  strata_pipeline_spec *spec = &o->pipeline;
  if (spec->replicas == 0) spec->replicas = n / spec->stages;
  if ((long)spec->stages * spec->replicas != n) {
    fprintf(stderr,
            "strata place: --pipeline %d x %d replicas needs %ld ranks; the matrix has %d\n",
            spec->stages, spec->replicas, (long)spec->stages * spec->replicas, n);
    return 2;
  }
  if (spec->layers && spec->layers < spec->stages) {
    fprintf(stderr, "strata place: --layers %d is fewer than %d stages\n", spec->layers,
            spec->stages);
    return 2;
  }
  int *slot_of = malloc(sizeof(int) * n), *order = malloc(sizeof(int) * n);
  int *scratch = malloc(sizeof(int) * n);
  int rc = slot_of && order && scratch ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (rc == STRATA_OK) rc = strata_place_pipeline(m, spec, o->iterations, o->seed, slot_of);
  if (rc != STRATA_OK) {
    fprintf(stderr, "strata place: %s\n", strata_strerror(rc));
    free(slot_of), free(order), free(scratch);
    return rc == STRATA_ERR_INVALID_ARG ? 2 : 1;
  }
  /* rank r = stage * replicas + replica runs in slot slot_of[r] */
  strata_place_launch_order(n, slot_of, order);
  strata_pipeline_cost placed = strata_place_pipeline_cost(m, spec, slot_of);
  for (int k = 0; k < n; k++) scratch[k] = k;
  strata_pipeline_cost identity = strata_place_pipeline_cost(m, spec, scratch);
  double random = pipeline_random_us(m, spec, o->seed, scratch);
  int D = spec->replicas;
  int json_rc = 0;
  if (o->quiet) {
    print_order(stdout, n, order);
    putchar('\n');
  } else if (o->json) {
    json_t *slots = json_array();
    for (int s = 0; s < spec->stages; s++)
      slots = strata_json_append(slots, json_ints(D, slot_of + s * D));
    json_t *placed_us =
        json_pack("{s:o, s:o, s:o}", "dp", strata_json_number(placed.dp_us), "pp",
                  strata_json_number(placed.pp_us), "total", strata_json_number(placed.total_us));
    json_t *identity_us = json_pack("{s:o, s:o, s:o}", "dp", strata_json_number(identity.dp_us),
                                    "pp", strata_json_number(identity.pp_us), "total",
                                    strata_json_number(identity.total_us));
    json_rc = print_json(json_pack(
        "{s:s, s:i, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:o}", "mode", "pipeline", "ranks", n,
        "stages", spec->stages, "replicas", D, "order", json_ints(n, order),
        "slot_of_stage_replica", slots, "placed_us", placed_us, "identity_us", identity_us,
        "random_mean_total_us", strata_json_number(random), "speedup_vs_random",
        strata_json_number(placed.total_us > 0 ? random / placed.total_us : 1.0)));
  } else {
    char a[32], b[32], c[32], d[32], e[32];
    printf("pipeline placement: %d stages x %d replicas on %d ranks (rank = stage*%d + replica)\n",
           spec->stages, D, n, D);
    printf("order: ");
    print_order(stdout, n, order);
    printf("\n  (strata launch -n %d --order <order> ...: child i gets rank order[i])\n", n);
    for (int s = 0; s < spec->stages; s++) {
      printf("stage %d: matrix rows", s);
      for (int r = 0; r < D; r++) printf(" %d", slot_of[s * D + r]);
      printf("\n");
    }
    printf(
        "predicted communication per step: placed %s (dp %s + pp %s), identity %s, "
        "random (mean of %d) %s\n",
        human_time(placed.total_us, a, sizeof a), human_time(placed.dp_us, b, sizeof b),
        human_time(placed.pp_us, c, sizeof c), human_time(identity.total_us, d, sizeof d),
        PLACE_RANDOM_SAMPLES, human_time(random, e, sizeof e));
    printf("placed is %.2fx faster than random, %.2fx than identity\n",
           placed.total_us > 0 ? random / placed.total_us : 1.0,
           placed.total_us > 0 ? identity.total_us / placed.total_us : 1.0);
  }
  free(slot_of), free(order), free(scratch);
  return json_rc;
}

int strata_cmd_place(int argc, char **argv) {
  place_options o;
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0) return rc;
  strata_link_matrix m;
  char err[512];
  rc = strata_link_matrix_load(&m, o.matrix_path, err, sizeof err);
  if (rc != STRATA_OK) {
    fprintf(stderr, "strata place: %s\n", err[0] ? err : strata_strerror(rc));
    return 2;
  }
  if (o.env)
    rc = run_env(&m);
  else if (o.evaluate)
    rc = run_evaluate(&o, &m);
  else
    rc = o.mode == PLACE_PIPELINE ? run_pipeline(&o, &m) : run_ring(&o, &m);
  strata_link_matrix_free(&m);
  return rc;
}
