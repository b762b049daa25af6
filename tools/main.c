// SPDX-License-Identifier: Apache-2.0
/* main.c — the `strata` command: dispatch to a subcommand, or, when run through a link named
 * after a nccl-tests binary (all_reduce_perf, all_gather_perf, ...; `make install` makes them),
 * be that test: `all_reduce_perf ARGS` is `strata bench all_reduce_perf ARGS`, so scripts
 * written for nccl-tests run unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "strata.h"

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} command;

static const command commands[] = {
    {"launch", strata_cmd_launch, "start N local ranks of a program: launch -n N [--] CMD ARGS..."},
    {"store", strata_cmd_store, "serve a standalone rendezvous store: store [--addr HOST:PORT]"},
    {"bench", strata_cmd_bench,
     "nccl-tests compatible benchmark: bench COLL [-b -e -f -n -w -c ...]"},
    {"plan", strata_cmd_plan, "plan a cluster: plan --preset NAME | FILE.yaml [--json] [--svg F]"},
    {"demo", strata_cmd_demo, "run every collective on local ranks and check the results"},
    {"probe", strata_cmd_probe, "measure every rank pair, write a link matrix: probe --out F.json"},
    {"place", strata_cmd_place,
     "rank order from a link matrix: place F.json [--ring|--sites|--pipeline S]"},
    {"site", strata_cmd_site,
     "the site of a node in a topology: site FILE [NODE] (for STRATA_SITE)"},
    {"doctor", strata_cmd_doctor,
     "check this node (and, under a launcher, the job): doctor [--json] [--link GBPS,RTT_MS]"},
    {"netem", strata_cmd_netem,
     "emulate a WAN between sites on this host: netem up|down|status|exec|ping"},
};

static void usage(FILE *out) {
  fprintf(out, "strata %s — collective communication from one chassis to many datacenters\n\n",
          STRATA_VERSION_STRING);
  fprintf(out, "usage: strata COMMAND [ARGS...]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "  %-8s %s\n", "version", "print the version");
  fprintf(out, "\n'strata COMMAND --help' describes one command.\n");
}

/* Runs `strata bench NAME ARGS...` for a program called NAME ending in "_perf". */
static int run_as_perf_test(const char *name, int argc, char **argv) {
  char **bench_argv = calloc((size_t)argc + 2, sizeof *bench_argv);
  if (!bench_argv) {
    fprintf(stderr, "%s: out of memory\n", name);
    return 1;
  }
  bench_argv[0] = "bench";
  bench_argv[1] = (char *)name;
  for (int i = 1; i < argc; i++) bench_argv[i + 1] = argv[i];
  int status = strata_cmd_bench(argc + 1, bench_argv);
  free(bench_argv);
  return status;
}

int main(int argc, char **argv) {
  /* Every line out as soon as it is whole, a pipe included (nccl-tests does the same): a demo
   * or a benchmark piped into tee or a log must show its progress, not a block at exit. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
  const char *program = argc > 0 ? (slash ? slash + 1 : argv[0]) : "strata";
  size_t length = strlen(program);
  if (length > 5 && !strcmp(program + length - 5, "_perf"))
    return run_as_perf_test(program, argc, argv);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *name = argv[1];
  if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(name, "version") || !strcmp(name, "--version")) {
    printf("strata %s\n", STRATA_VERSION_STRING);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(name, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "strata: unknown command '%s'\n\n", name);
  usage(stderr);
  return 2;
}
