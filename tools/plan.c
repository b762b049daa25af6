// SPDX-License-Identifier: Apache-2.0
/*
 * plan.c — `strata plan`: load a topology (file or preset), take a workload from flags, and print
 * the plan (src/plan) as text, JSON or an SVG map. All logic lives in the library; this file only
 * parses arguments and picks the writer. Exit status: 0 planned (findings or not), 2 bad usage or
 * a bad topology or link matrix (or one whose sites do not map onto the topology's), 1 out of
 * memory.
 *
 * --links MATRIX: a link matrix (docs/link-matrix.md) replaces the modeled figures of the
 * inter-site links it covers (src/plan/measured.c); with no topology, the plan is made on a
 * minimal topology synthesized from the matrix (one CPU node per rank).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "planner.h"

static void plan_usage(FILE *out) {
  fprintf(out,
          "usage: strata plan [--preset NAME | FILE.yaml] [--links MATRIX] [options]\n"
          "       strata plan --links MATRIX [options]   (a topology made from the matrix)\n"
          "       strata plan --list-presets\n\n"
          "Describe a cluster and a workload; get which layer carries what, predicted collective\n"
          "times, the layer-3 decision (fabric extension vs. overlay + DiLoCo) and lints.\n\n"
          "  --preset NAME          a built-in topology (see --list-presets)\n"
          "  --list-presets         list the built-in topologies\n"
          "  --links MATRIX         measured link matrix (strata probe; JSON or YAML): its\n"
          "                         inter-site latency and bandwidth replace the modeled\n"
          "                         ones; alone, plan one CPU node per rank from it\n"
          "  --workload KIND        train-sync | diloco | rl | inference | bringup | fsdp\n"
          "                         (default: train-sync on one site or an extended fabric,\n"
          "                         diloco across any other link)\n"
          "  --params N             model parameters (7e9)\n"
          "  --dtype T              gradient / weight type: bf16, f16, f32 ... (bf16)\n"
          "  --step-ms MS           compute time of one training step (500)\n"
          "  --sync-every H         diloco: inner steps per outer step (500); rl: below\n"
          "  --inner-steps H        the same as --sync-every H for diloco\n"
          "  --wire-bits B          outer gradient encoding: 32 (none), 16 (bf16),\n"
          "                         8 (int8), 4 (int4) (16)\n"
          "  --fragments P          streaming DiLoCo fragments, 1..H (1)\n"
          "  --delay TAU            inner steps a fragment's exchange overlaps, below H/P (0)\n"
          "  --param-shapes LIST    diloco: the model's parameter shapes, e.g.\n"
          "                         24x16,24,5x24,5 (sets --params), for the layout over\n"
          "                         FSDP2 shards (default: P flat fragments of N/P values)\n"
          "  --chunk BYTES          diloco: the communicators' STRATA_CHUNK (default: what\n"
          "                         strata picks for the WAN's RTT)\n"
          "  --rank-cores X         diloco: the share of a core each rank's progress thread\n"
          "                         gets to encode and decode a compressed outer gradient\n"
          "                         (1; 0.5 for 4 ranks on 2 cores)\n"
          "  --streams S            TCP connections per peer across the WAN (16)\n"
          "  --transport T          what carries collectives across a routed or overlay\n"
          "                         link: strata (its TCP, default), nccl-socket (NCCL's\n"
          "                         own sockets, one per peer), nccl-strata (NCCL on\n"
          "                         strata's network plugin, NCCL_NET_PLUGIN=strata)\n"
          "  --update-fraction X    RL: share of parameters changed per sync (0.01)\n"
          "  --rl-sync full|delta   RL: what the framework ships per sync (default auto: the\n"
          "                         smaller); full when a delta is smaller trips L4-RL-FULL-SYNC\n"
          "  --sync-every N         RL: trainer steps between weight syncs (1)\n"
          "  --trainer-site NAME    RL: where the trainer runs (first site)\n"
          "  --kv-mb MB             inference: KV cache per request, MB (268)\n"
          "  --requests-per-s R     inference: requests per second per site (10)\n"
          "  --replicas-per-site N  inference: full model replicas per site (1)\n"
          "  --cross-site-pipeline  inference: the model is split across sites\n"
          "  --token-ms MS          inference: decode compute per token (20)\n"
          "  --tp N, --pp N         fsdp: tensor- and pipeline-parallel degrees (1, 1)\n"
          "  --layers N             fsdp: transformer layers (32)\n"
          "  --tokens N             fsdp: tokens per data-parallel replica per step (32768)\n"
          "  --micro-batches M      fsdp: micro-batches per step (4 x pp; one 4k sequence each\n"
          "                         without a pipeline)\n"
          "  --json                 print the plan as JSON (docs/plan-json.md)\n"
          "  --svg FILE             also draw the map as SVG into FILE ('-' = stdout)\n"
          "  -h, --help             this help\n");
}

static int parse_double(const char *flag, const char *text, double min, double max, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || *end != '\0' || !isfinite(v) || v < min || v > max) {
    fprintf(stderr, "strata plan: %s expects a number in [%g, %g], got '%s'\n", flag, min, max,
            text);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_int(const char *flag, const char *text, int min, int max, int *out) {
  double v;
  if (parse_double(flag, text, min, max, &v) != 0) return -1;
  if (v != floor(v)) {
    fprintf(stderr, "strata plan: %s expects a whole number, got '%s'\n", flag, text);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static void list_presets(void) {
  for (size_t i = 0; i < strata_topo_preset_count(); i++)
    printf("%-22s %s\n", strata_topo_preset_name(i), strata_topo_preset_description(i));
}

enum {
  OPT_PRESET = 256,
  OPT_LIST,
  OPT_WORKLOAD,
  OPT_PARAMS,
  OPT_DTYPE,
  OPT_STEP_MS,
  OPT_INNER,
  OPT_WIRE_BITS,
  OPT_FRAGMENTS,
  OPT_DELAY,
  OPT_STREAMS,
  OPT_TRANSPORT,
  OPT_UPDATE,
  OPT_RL_SYNC,
  OPT_SYNC_EVERY,
  OPT_TRAINER,
  OPT_KV,
  OPT_RPS,
  OPT_REPLICAS,
  OPT_PIPELINE,
  OPT_TOKEN_MS,
  OPT_TP,
  OPT_PP,
  OPT_LAYERS,
  OPT_TOKENS,
  OPT_MICRO_BATCHES,
  OPT_PARAM_SHAPES,
  OPT_CHUNK,
  OPT_RANK_CORES,
  OPT_JSON,
  OPT_SVG,
  OPT_LINKS
};

static const struct option plan_options[] = {
    {"preset", required_argument, 0, OPT_PRESET},
    {"list-presets", no_argument, 0, OPT_LIST},
    {"workload", required_argument, 0, OPT_WORKLOAD},
    {"params", required_argument, 0, OPT_PARAMS},
    {"dtype", required_argument, 0, OPT_DTYPE},
    {"step-ms", required_argument, 0, OPT_STEP_MS},
    {"inner-steps", required_argument, 0, OPT_INNER},
    {"wire-bits", required_argument, 0, OPT_WIRE_BITS},
    {"fragments", required_argument, 0, OPT_FRAGMENTS},
    {"delay", required_argument, 0, OPT_DELAY},
    {"streams", required_argument, 0, OPT_STREAMS},
    {"transport", required_argument, 0, OPT_TRANSPORT},
    {"update-fraction", required_argument, 0, OPT_UPDATE},
    {"rl-sync", required_argument, 0, OPT_RL_SYNC},
    {"sync-every", required_argument, 0, OPT_SYNC_EVERY},
    {"trainer-site", required_argument, 0, OPT_TRAINER},
    {"kv-mb", required_argument, 0, OPT_KV},
    {"requests-per-s", required_argument, 0, OPT_RPS},
    {"replicas-per-site", required_argument, 0, OPT_REPLICAS},
    {"cross-site-pipeline", no_argument, 0, OPT_PIPELINE},
    {"token-ms", required_argument, 0, OPT_TOKEN_MS},
    {"tp", required_argument, 0, OPT_TP},
    {"pp", required_argument, 0, OPT_PP},
    {"layers", required_argument, 0, OPT_LAYERS},
    {"tokens", required_argument, 0, OPT_TOKENS},
    {"micro-batches", required_argument, 0, OPT_MICRO_BATCHES},
    {"param-shapes", required_argument, 0, OPT_PARAM_SHAPES},
    {"chunk", required_argument, 0, OPT_CHUNK},
    {"rank-cores", required_argument, 0, OPT_RANK_CORES},
    {"json", no_argument, 0, OPT_JSON},
    {"svg", required_argument, 0, OPT_SVG},
    {"links", required_argument, 0, OPT_LINKS},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0}};

typedef struct plan_args {
  const char *preset, *file, *svg, *links, *param_shapes;
  int json, list, workload_given, chunk;
  strata_workload w; /* kind filled later when not given */
  /* numeric overrides, applied after the kind's defaults: NAN / -1 = not given */
  double params, step_ms, wire_bits, update_fraction, kv_mb, rps, token_ms, tokens, rank_cores;
  int inner, fragments, delay, streams, sync_every, replicas, pipeline, dtype_given, rl_sync_given;
  strata_rl_sync rl_sync;
  strata_wan_transport transport;
  int transport_given;
  int tp, pp, layers, micro_batches;
  strata_dtype dtype;
  const char *trainer;
} plan_args;

static int parse_option(plan_args *a, int opt, const char *arg) {
  switch (opt) {
    case OPT_PRESET:
      a->preset = arg;
      return 0;
    case OPT_LIST:
      a->list = 1;
      return 0;
    case OPT_WORKLOAD:
      if (strata_workload_kind_parse(arg, &a->w.kind) != STRATA_OK) {
        fprintf(stderr,
                "strata plan: --workload expects train-sync, diloco, rl, inference, bringup or "
                "fsdp, "
                "got '%s'\n",
                arg);
        return -1;
      }
      a->workload_given = 1;
      return 0;
    case OPT_PARAMS:
      return parse_double("--params", arg, 1, 1e16, &a->params);
    case OPT_DTYPE:
      if (strata_dtype_parse(arg, &a->dtype) != STRATA_OK) {
        fprintf(stderr, "strata plan: --dtype expects bf16, f16, f32, ... got '%s'\n", arg);
        return -1;
      }
      a->dtype_given = 1;
      return 0;
    case OPT_STEP_MS:
      return parse_double("--step-ms", arg, 1e-3, 1e9, &a->step_ms);
    case OPT_INNER:
      return parse_int("--inner-steps", arg, 1, 100000000, &a->inner);
    case OPT_WIRE_BITS: {
      int bits = 0;
      if (parse_int("--wire-bits", arg, 1, 64, &bits) != 0 ||
          strata_plan_wire_encoding(bits, NULL) != STRATA_OK) {
        fprintf(stderr,
                "strata plan: --wire-bits expects 32 (none), 16 (bf16), 8 (int8) or 4 (int4), "
                "got '%s'\n",
                arg);
        return -1;
      }
      a->wire_bits = bits;
      return 0;
    }
    case OPT_FRAGMENTS:
      return parse_int("--fragments", arg, 1, 1000000, &a->fragments);
    case OPT_DELAY:
      return parse_int("--delay", arg, 0, 100000000, &a->delay);
    case OPT_PARAM_SHAPES:
      a->param_shapes = arg;
      return 0;
    case OPT_CHUNK:
      return parse_int("--chunk", arg, 1, 1 << 30, &a->chunk);
    case OPT_RANK_CORES:
      return parse_double("--rank-cores", arg, 1e-3, 1, &a->rank_cores);
    case OPT_STREAMS:
      return parse_int("--streams", arg, 1, 1024, &a->streams);
    case OPT_TRANSPORT:
      if (strata_wan_transport_parse(arg, &a->transport) != STRATA_OK) {
        fprintf(stderr,
                "strata plan: --transport expects strata, nccl-socket or nccl-strata, got '%s'\n",
                arg);
        return -1;
      }
      a->transport_given = 1;
      return 0;
    case OPT_UPDATE:
      return parse_double("--update-fraction", arg, 1e-9, 1, &a->update_fraction);
    case OPT_RL_SYNC:
      if (strata_rl_sync_parse(arg, &a->rl_sync) != STRATA_OK) {
        fprintf(stderr, "strata plan: --rl-sync expects full, delta or auto, got '%s'\n", arg);
        return -1;
      }
      a->rl_sync_given = 1;
      return 0;
    case OPT_SYNC_EVERY:
      return parse_int("--sync-every", arg, 1, 100000000, &a->sync_every);
    case OPT_TRAINER:
      a->trainer = arg;
      return 0;
    case OPT_KV:
      return parse_double("--kv-mb", arg, 0, 1e9, &a->kv_mb);
    case OPT_RPS:
      return parse_double("--requests-per-s", arg, 0, 1e12, &a->rps);
    case OPT_REPLICAS:
      return parse_int("--replicas-per-site", arg, 0, 1000000, &a->replicas);
    case OPT_PIPELINE:
      a->pipeline = 1;
      return 0;
    case OPT_TOKEN_MS:
      return parse_double("--token-ms", arg, 1e-6, 1e9, &a->token_ms);
    case OPT_TP:
      return parse_int("--tp", arg, 1, 1000000, &a->tp);
    case OPT_PP:
      return parse_int("--pp", arg, 1, 1000000, &a->pp);
    case OPT_LAYERS:
      return parse_int("--layers", arg, 1, 1000000, &a->layers);
    case OPT_TOKENS:
      return parse_double("--tokens", arg, 1, 1e15, &a->tokens);
    case OPT_MICRO_BATCHES:
      return parse_int("--micro-batches", arg, 1, 100000000, &a->micro_batches);
    case OPT_JSON:
      a->json = 1;
      return 0;
    case OPT_SVG:
      a->svg = arg;
      return 0;
    case OPT_LINKS:
      a->links = arg;
      return 0;
    default:
      return -1;
  }
}

/* Returns 0, or -1 (said why) when the flags contradict each other. */
static int apply_overrides(const plan_args *a, strata_workload *w) {
  if (!isnan(a->params)) w->params = a->params;
  if (a->dtype_given) w->dtype = a->dtype;
  if (!isnan(a->step_ms)) w->step_ms = a->step_ms;
  if (!isnan(a->wire_bits)) w->wire_bits = a->wire_bits;
  if (!isnan(a->update_fraction)) w->update_fraction = a->update_fraction;
  if (a->rl_sync_given) w->rl_sync = a->rl_sync;
  if (!isnan(a->kv_mb)) w->kv_bytes_per_request = a->kv_mb * 1e6;
  if (!isnan(a->rps)) w->requests_per_s = a->rps;
  if (!isnan(a->token_ms)) w->token_ms = a->token_ms;
  if (a->inner >= 0) w->inner_steps = a->inner;
  /* --sync-every is DiLoCo's H for diloco (the library's option name), RL's sync period else */
  if (w->kind == STRATA_WORKLOAD_DILOCO && a->sync_every >= 0) {
    if (a->inner >= 0 && a->inner != a->sync_every) {
      fprintf(stderr,
              "strata plan: --sync-every %d and --inner-steps %d both set DiLoCo's H; give one\n",
              a->sync_every, a->inner);
      return -1;
    }
    w->inner_steps = a->sync_every;
  }
  if (a->fragments >= 0) w->fragments = a->fragments;
  if (a->delay >= 0) w->delay = a->delay;
  if (a->streams >= 0) w->wan_streams = a->streams;
  if (a->transport_given) w->transport = a->transport;
  if (a->sync_every >= 0) w->sync_every = a->sync_every;
  if (a->replicas >= 0) w->replicas_per_site = a->replicas;
  if (a->pipeline) w->cross_site_pipeline = 1;
  if (a->trainer) snprintf(w->trainer_site, sizeof w->trainer_site, "%s", a->trainer);
  if (a->tp > 0) w->tp = a->tp;
  if (a->pp > 0) w->pp = a->pp;
  if (a->layers > 0) w->layers = a->layers;
  if (!isnan(a->tokens)) w->tokens_per_step = a->tokens;
  if (a->micro_batches > 0) w->micro_batches = a->micro_batches;
  if (a->chunk > 0) w->chunk_bytes = (uint64_t)a->chunk;
  if (!isnan(a->rank_cores)) w->rank_cores = a->rank_cores;
  if (a->param_shapes) {
    if (!isnan(a->params)) {
      fprintf(stderr, "strata plan: --param-shapes gives the parameters; leave out --params\n");
      return -1;
    }
    w->param_shapes = a->param_shapes;
    w->params = 1; /* the shapes' total, counted by the plan */
  }
  return 0;
}

static int parse_args(int argc, char **argv, plan_args *a) {
  memset(a, 0, sizeof *a);
  a->params = a->step_ms = a->wire_bits = a->update_fraction = a->kv_mb = a->rps = a->token_ms =
      a->tokens = a->rank_cores = NAN;
  a->inner = a->fragments = a->delay = a->streams = a->sync_every = a->replicas = -1;
  optind = 1;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":h", plan_options, NULL)) != -1) {
    if (opt == 'h') return 1;
    if (opt == '?' || opt == ':') {
      const char *bad = argv[optind - 1];
      fprintf(stderr, "strata plan: %s '%s' (see strata plan --help)\n",
              opt == ':' ? "missing value for" : "unknown option", bad);
      return -1;
    }
    if (parse_option(a, opt, optarg) != 0) return -1;
  }
  if (optind < argc) a->file = argv[optind++];
  if (optind < argc) {
    fprintf(stderr, "strata plan: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  if (!a->list && (a->preset && a->file)) {
    fprintf(stderr, "strata plan: give one of --preset NAME or FILE.yaml, not both\n");
    return -1;
  }
  if (!a->list && !a->preset && !a->file && !a->links) {
    fprintf(stderr,
            "strata plan: give exactly one of --preset NAME or FILE.yaml, or --links MATRIX "
            "(see strata plan --help)\n");
    return -1;
  }
  return 0;
}

static int write_svg(const char *path, const strata_plan *plan) {
  if (!strcmp(path, "-")) {
    strata_plan_write_svg(stdout, plan);
    return 0;
  }
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "strata plan: cannot write %s: %s\n", path, strerror(errno));
    return 2;
  }
  strata_plan_write_svg(f, plan);
  if (fclose(f) != 0) {
    fprintf(stderr, "strata plan: cannot write %s: %s\n", path, strerror(errno));
    return 2;
  }
  return 0;
}

static int exit_status(int status) {
  return status == STRATA_ERR_NO_MEMORY ? 1 : 2;
}

/* Builds the plan for the loaded topology and writes it. Returns the exit status. */
static int plan_and_write(const plan_args *a, const strata_topo *topo,
                          const strata_plan_measured *measured) {
  strata_workload_kind kind = a->workload_given ? a->w.kind : strata_workload_auto(topo);
  strata_workload w;
  strata_workload_defaults(&w, kind);
  if (apply_overrides(a, &w) != 0) return 2;
  if (w.trainer_site[0] && strata_topo_site_index(topo, w.trainer_site) < 0) {
    fprintf(stderr, "strata plan: --trainer-site '%s' is not a site of %s\n", w.trainer_site,
            topo->source);
    return 2;
  }
  char err[512];
  strata_plan plan;
  int status = strata_plan_build_measured(topo, &w, measured, &plan, err, sizeof err);
  if (status != STRATA_OK) {
    fprintf(stderr, "strata plan: %s\n", err[0] ? err : strata_strerror(status));
    return exit_status(status);
  }
  int svg_to_stdout = a->svg && !strcmp(a->svg, "-");
  if (a->json)
    strata_plan_write_json(stdout, &plan);
  else if (!svg_to_stdout)
    strata_plan_write_text(stdout, &plan);
  int rc = a->svg ? write_svg(a->svg, &plan) : 0;
  strata_plan_free(&plan);
  return rc;
}

/* The topology: a preset, a file, or (only --links) one made from the matrix. */
static int load_topology(const plan_args *a, const strata_link_matrix *matrix, strata_topo **topo,
                         char *err, size_t err_len) {
  if (a->preset) return strata_topo_preset(a->preset, topo, err, err_len);
  if (a->file) return strata_topo_load_file(a->file, topo, err, err_len);
  return strata_plan_topo_from_matrix(matrix, a->links, topo, err, err_len);
}

/* Reads --links and maps it onto the topology. STRATA_OK with nothing to do without --links. */
static int load_measured(const plan_args *a, const strata_topo *topo,
                         const strata_link_matrix *matrix, strata_plan_measured *measured,
                         char *err, size_t err_len) {
  memset(measured, 0, sizeof *measured);
  if (!a->links) return STRATA_OK;
  int status = strata_plan_measured_from_matrix(topo, matrix, a->links, measured, err, err_len);
  /* a synthesized topology has no fabric facts of its own: the matrix's pairs inside a site
   * are the site fabric */
  if (status == STRATA_OK && !a->preset && !a->file) measured->inside_sites = 1;
  return status;
}

int strata_cmd_plan(int argc, char **argv) {
  plan_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc > 0) {
    plan_usage(stdout);
    return 0;
  }
  if (rc < 0) return 2;
  if (a.list) {
    list_presets();
    return 0;
  }
  char err[1024];
  err[0] = '\0';
  strata_link_matrix matrix;
  memset(&matrix, 0, sizeof matrix);
  int status = a.links ? strata_link_matrix_load(&matrix, a.links, err, sizeof err) : STRATA_OK;
  if (status != STRATA_OK) {
    fprintf(stderr, "strata plan: --links: %s\n", err[0] ? err : strata_strerror(status));
    return exit_status(status);
  }
  strata_topo *topo = NULL;
  strata_plan_measured measured;
  memset(&measured, 0, sizeof measured);
  status = load_topology(&a, &matrix, &topo, err, sizeof err);
  if (status == STRATA_OK) status = load_measured(&a, topo, &matrix, &measured, err, sizeof err);
  strata_link_matrix_free(&matrix);
  if (status != STRATA_OK) {
    fprintf(stderr, "strata plan: %s\n", err[0] ? err : strata_strerror(status));
    strata_topo_free(topo);
    return exit_status(status);
  }
  rc = plan_and_write(&a, topo, a.links ? &measured : NULL);
  strata_plan_measured_free(&measured);
  strata_topo_free(topo);
  return rc;
}
