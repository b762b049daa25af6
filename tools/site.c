// SPDX-License-Identifier: Apache-2.0
/*
 * site.c — `strata site FILE [NODE]`: print the site holding a node in a topology file.
 *
 * Ranks take their site from STRATA_SITE and never read topology files (the runtime does not
 * link the planner). A job started by torchrun, srun or mpirun turns its topology into that
 * variable with this command on each host: export STRATA_SITE=$(strata site cluster.yaml).
 * NODE defaults to STRATA_NODE, then the hostname; src/topo/nodes.h says how a name matches.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "planner.h"
#include "strata.h"

static void site_usage(FILE *out) {
  fprintf(out,
          "usage: strata site FILE|preset:NAME [NODE]\n\n"
          "Print the name of the site holding NODE (default: $STRATA_NODE, else this host's\n"
          "name) in a topology file, for STRATA_SITE:\n"
          "  export STRATA_SITE=$(strata site cluster.yaml)\n");
}

int strata_cmd_site(int argc, char **argv) {
  static const struct option options[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  optind = 0; /* glibc: a fresh scan (main may have run getopt) */
  opterr = 0;
  for (int letter; (letter = getopt_long(argc, argv, "h", options, NULL)) != -1;) {
    if (letter == 'h') {
      site_usage(stdout);
      return 0;
    }
    fprintf(stderr, "strata site: unknown option '%s'\n", argv[optind - 1]);
    site_usage(stderr);
    return 2;
  }
  argc -= optind - 1; /* argv[1] is FILE from here on */
  argv += optind - 1;
  if (argc < 2 || argc > 3) {
    site_usage(stderr);
    return 2;
  }
  char host[256] = "", site[256], err[768] = "";
  const char *node = argc == 3 ? argv[2] : host;
  if (argc < 3 && strata_topo_this_node(host, sizeof host) != STRATA_OK) {
    fprintf(stderr, "strata site: cannot read this host's name; give NODE\n");
    return 2;
  }
  int status = strata_topo_site_of_node(argv[1], node, site, sizeof site, err, sizeof err);
  if (status != STRATA_OK) {
    fprintf(stderr, "strata site: %s: node '%s': %s\n", argv[1], node,
            err[0] ? err : strata_strerror(status));
    return 2;
  }
  printf("%s\n", site);
  return 0;
}
