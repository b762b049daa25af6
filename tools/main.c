/* main.c — the `strata` command: dispatch to a subcommand. */
#include <stdio.h>
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
    {"bench", strata_cmd_bench, "nccl-tests compatible benchmark: bench COLL [-b -e -f -n -w -c ...]"},
    {"plan", strata_cmd_plan, "plan a cluster: plan --preset NAME | FILE.yaml [--json] [--svg F]"},
    {"demo", strata_cmd_demo, "run every collective on local ranks and check the results"},
    {"probe", strata_cmd_probe, "measure every rank pair, write a link matrix: probe --out F.json"},
    {"place", strata_cmd_place, "rank order from a link matrix: place F.json [--ring|--sites|--pipeline S]"},
    {"site", strata_cmd_site, "the site of a node in a topology: site FILE [NODE] (for STRATA_SITE)"},
    {"netem", strata_cmd_netem, "emulate a WAN between sites on this host: netem up|down|status|exec|ping"},
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

int main(int argc, char **argv) {
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
