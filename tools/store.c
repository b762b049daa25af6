// SPDX-License-Identifier: Apache-2.0
/*
 * store.c — `strata store [--addr HOST:PORT]`: serve a rendezvous store on its own, for jobs whose
 * ranks set STRATA_STORE_EXTERNAL=1 and STRATA_ADDR to this address (no rank has to serve it).
 * Runs until SIGINT, SIGTERM or SIGHUP, then stops cleanly and exits 0.
 *
 * The store admits only connections that prove the job secret: it reads STRATA_SECRET (or
 * STRATA_SECRET_FILE) and STRATA_JOB_ID as the ranks do (strata_config_from_env), so the same
 * environment serves both. Without a secret anyone who reaches the port can use the store, and it
 * says so.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "strata.h"

#define STORE_DEFAULT_ADDR "0.0.0.0:29400"

static void store_usage(FILE *out) {
  fprintf(out,
          "usage: strata store [--addr HOST:PORT]\n\n"
          "Serve a standalone rendezvous store until interrupted (SIGINT/SIGTERM/SIGHUP).\n"
          "Ranks reach it with STRATA_ADDR=HOST:PORT and STRATA_STORE_EXTERNAL=1.\n"
          "Only connections that know the job secret are served: set STRATA_SECRET (or\n"
          "STRATA_SECRET_FILE) and STRATA_JOB_ID here as on the ranks.\n\n"
          "  --addr HOST:PORT  address to listen on (default %s; port 0 picks a free one;\n"
          "                    an empty host or 0.0.0.0 means every interface)\n"
          "  -h, --help        this text\n",
          STORE_DEFAULT_ADDR);
}

int strata_cmd_store(int argc, char **argv) {
  static const struct option options[] = {
      {"addr", required_argument, 0, 'a'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  const char *addr = STORE_DEFAULT_ADDR;
  optind = 0; /* glibc: a fresh scan (main may have run getopt) */
  opterr = 0;
  for (int letter; (letter = getopt_long(argc, argv, ":h", options, NULL)) != -1;) {
    if (letter == 'h') {
      store_usage(stdout);
      return 0;
    }
    if (letter == 'a') {
      addr = optarg;
      continue;
    }
    fprintf(stderr, "strata store: %s '%s'\n\n",
            letter == ':' ? "missing HOST:PORT after" : "unknown argument", argv[optind - 1]);
    store_usage(stderr);
    return 2;
  }
  if (optind < argc) {
    fprintf(stderr, "strata store: unknown argument '%s'\n\n", argv[optind]);
    store_usage(stderr);
    return 2;
  }
  char host[256], err[320];
  int port;
  if (strata_store_addr_parse(addr, 1, host, sizeof host, &port, err, sizeof err) != STRATA_OK) {
    fprintf(stderr, "strata store: %s\n", err);
    return 2;
  }
  strata_config cfg;
  strata_config_init(&cfg);
  char env_err[512];
  if (strata_config_from_env(&cfg, env_err, sizeof env_err) != STRATA_OK) {
    fprintf(stderr, "strata store: %s\n", env_err);
    return 2;
  }
  strata_store_server *server;
  int status = strata_store_server_start_auth(addr, cfg.secret, cfg.job_id, &server);
  int have_secret = cfg.secret[0] != '\0';
  memset(cfg.secret, 0, sizeof cfg.secret);
  if (status != STRATA_OK) {
    fprintf(stderr, "strata store: cannot serve on %s: %s\n", addr, strata_strerror(status));
    return 1;
  }
  int bracket = strchr(host, ':') != NULL;
  printf("strata store listening on %s%s%s:%d\n", bracket ? "[" : "", host[0] ? host : "0.0.0.0",
         bracket ? "]" : "", strata_store_server_port(server));
  fflush(stdout);
  if (!have_secret)
    fprintf(stderr,
            "strata store: no job secret: anyone who can reach this port can read and change the "
            "job's keys. Set STRATA_SECRET (or STRATA_SECRET_FILE) and STRATA_JOB_ID, the same "
            "here as on every rank\n");
  status = strata_store_server_run(server);
  printf("strata store: served %llu requests\n",
         (unsigned long long)strata_store_server_requests(server));
  fflush(stdout);
  strata_store_server_stop(server);
  if (status != STRATA_OK) {
    fprintf(stderr, "strata store: stopped: %s\n", strata_strerror(status));
    return 1;
  }
  return 0;
}
