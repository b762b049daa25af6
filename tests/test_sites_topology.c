// SPDX-License-Identifier: Apache-2.0
/*
 * test_sites_topology.c — sites from a topology file, the way ranks get them now: the launcher or
 * `strata site` reads the file and hands each rank STRATA_SITE; a rank never reads a topology.
 *
 *  1. `strata site FILE NODE` for every accepted node-name form (numbered, site-qualified, a
 *     host's full name), $STRATA_NODE when NODE is absent, and a preset (SITE/NODE names).
 *  2. A node missing from the file, and a file that does not exist: exit 2 and a message naming
 *     the node or the file.
 *  3. `strata launch -n 2 --topology FILE` with STRATA_NODE: every child gets STRATA_SITE of that
 *     node (and STRATA_NODE still names it).
 *  4. 4 ranks over TCP whose STRATA_SITE came from `strata site` (east, west interleaved): each
 *     rank reports its site, a large allreduce is chosen hierarchical and its result is right.
 *  5. STRATA_TOPOLOGY without STRATA_SITE: strata_config_from_env fails with STRATA_ERR_CONFIG
 *     and a message naming STRATA_SITE.
 * The command is $STRATA_BIN (set by ctest), else ./strata.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers/check.h"
#include "helpers/ranks.h"

#define COUNT (1 << 20) /* 4 MiB of f32 per rank: AUTO picks hier from 1 MiB (docs/hier.md) */

static const char topology_yaml[] =
    "# two datacenters, two CPU hosts each\n"
    "name: two-dcs\n"
    "sites:\n"
    "  - name: east\n"
    "    fabric: ethernet\n"
    "    nodes: {name: node-e, count: 2, gpu: none}\n"
    "  - name: west\n"
    "    fabric: ethernet\n"
    "    nodes:\n"
    "      - {name: node-w, count: 1, gpu: none}\n"
    "      - {name: spare, count: 1, gpu: none}\n"
    "links:\n"
    "  - between: [east, west]\n"
    "    overlay: {kind: wireguard, rtt_ms: 20}\n";

static const char *strata_bin;
static char topology_path[256];

/* Runs a shell command, its stdout and stderr into out; returns its exit status (-1 if killed). */
static int run_command(const char *command, char *out, size_t out_len) {
  char full[2048];
  snprintf(full, sizeof full, "%s 2>&1", command);
  FILE *p = popen(full, "r");
  if (!p) return -1;
  size_t n = fread(out, 1, out_len - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* `strata site SOURCE NODE` (NODE may be NULL); on exit 0, *site holds the printed name. */
static int strata_site(const char *source, const char *node, char *site, size_t site_len) {
  char command[1024], out[1024];
  snprintf(command, sizeof command, "'%s' site '%s'%s%s%s", strata_bin, source, node ? " '" : "",
           node ? node : "", node ? "'" : "");
  int status = run_command(command, out, sizeof out);
  out[strcspn(out, "\n")] = '\0';
  size_t n = strlen(out) < site_len - 1 ? strlen(out) : site_len - 1;
  memcpy(site, out, n);
  site[n] = '\0';
  return status;
}

static void check_site_command(void) {
  static const struct {
    const char *source, *node, *site;
  } cases[] = {
      {topology_path, "node-e0", "east"},
      {topology_path, "node-e1", "east"},
      {topology_path, "node-w", "west"},
      {topology_path, "west/spare", "west"},
      {topology_path, "node-e-1.dc.example.com", "east"},
      {"preset:metro-2-sites", "metro-b/dgx-07", "metro-b"},
      {"preset:metro-2-sites", "metro-a/dgx1", "metro-a"},
  };
  char site[1024];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int status = strata_site(cases[i].source, cases[i].node, site, sizeof site);
    CHECK(status == 0 && !strcmp(site, cases[i].site),
          "strata site %s %s: exit %d, '%s', want '%s'", cases[i].source, cases[i].node, status,
          site, cases[i].site);
  }
  setenv("STRATA_NODE", "west/spare", 1); /* NODE absent: STRATA_NODE names it */
  int status = strata_site(topology_path, NULL, site, sizeof site);
  CHECK(status == 0 && !strcmp(site, "west"), "STRATA_NODE=west/spare strata site: exit %d, '%s'",
        status, site);
  unsetenv("STRATA_NODE");

  status = strata_site(topology_path, "node-x3", site, sizeof site);
  CHECK(status == 2 && strstr(site, "node-x3") && strstr(site, topology_path),
        "a missing node: exit %d, message '%s' (want 2, naming node-x3 and the file)", status,
        site);
  char missing_file[300];
  snprintf(missing_file, sizeof missing_file, "%s.nope", topology_path);
  status = strata_site(missing_file, "node-e0", site, sizeof site);
  CHECK(status == 2 && strstr(site, missing_file),
        "a missing file: exit %d, message '%s' (want 2, naming the file)", status, site);
}

static void check_launch_topology(void) {
  char command[1024], out[1024];
  snprintf(command, sizeof command,
           "STRATA_NODE=node-e-1.dc.example.com STRATA_SITE=elsewhere '%s' launch -n 2 "
           "--topology '%s' -- sh -c 'echo \"rank=$STRATA_RANK site=$STRATA_SITE "
           "node=$STRATA_NODE\"'",
           strata_bin, topology_path);
  int status = run_command(command, out, sizeof out);
  CHECK(status == 0, "strata launch --topology: exit %d: %s", status, out);
  for (int rank = 0; rank < 2; rank++) {
    char want[128];
    snprintf(want, sizeof want, "rank=%d site=east node=node-e-1.dc.example.com", rank);
    CHECK(strstr(out, want) != NULL, "strata launch --topology: no '%s' in:\n%s", want, out);
  }
  snprintf(command, sizeof command, "STRATA_NODE=node-x3 '%s' launch -n 2 --topology '%s' -- true",
           strata_bin, topology_path);
  status = run_command(command, out, sizeof out);
  CHECK(status == 2 && strstr(out, "node-x3"),
        "strata launch --topology with a missing node: exit %d: %s", status, out);
}

/* ---- hierarchical allreduce on sites from `strata site` ---- */

static const char *const rank_node[4] = {"node-e0", "node-w", "node-e-1.dc.example.com",
                                         "west/spare"};
static const char *const rank_site[4] = {"east", "west", "east", "west"};

/* Runs in each rank's process before init: STRATA_SITE=$(strata site FILE NODE), as a user's
 * job script sets it, read by strata_config_from_env. */
static void take_site(strata_config *cfg, int rank, void *arg) {
  (void)arg;
  char site[256];
  if (strata_site(topology_path, rank_node[rank], site, sizeof site) != 0) site[0] = '\0';
  setenv("STRATA_SITE", site, 1);
  strata_config from_env;
  strata_config_init(&from_env);
  char err[256];
  if (strata_config_from_env(&from_env, err, sizeof err) != STRATA_OK)
    fprintf(stderr, "rank %d: %s\n", rank, err);
  memcpy(cfg->site, from_env.site, sizeof cfg->site);
}

static int hier_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) {
    printf("rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  const char *site = strata_comm_config(comm)->site;
  if (strcmp(site, rank_site[rank]) != 0) {
    printf("rank %d (node '%s'): site '%s', expected '%s'\n", rank, rank_node[rank], site,
           rank_site[rank]);
    return 1;
  }
  float *buf = malloc(sizeof(float) * COUNT);
  if (!buf) return 1;
  for (int i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1) + (float)(i % 1000);
  strata_coll_args args = {.coll = STRATA_COLL_ALLREDUCE,
                           .sendbuf = buf,
                           .recvbuf = buf,
                           .count = COUNT,
                           .dtype = STRATA_F32,
                           .op = STRATA_SUM};
  int bad = 0;
  strata_algo algo = strata_comm_algorithm(comm, &args);
  if (algo != STRATA_ALGO_HIER) {
    printf("rank %d: allreduce of %d floats runs %s, expected hier\n", rank, COUNT,
           strata_algo_name(algo));
    bad = 1;
  }
  int status = strata_collective(comm, &args, NULL);
  if (status != STRATA_OK) {
    printf("rank %d: allreduce: %s\n", rank, strata_strerror(status));
    free(buf);
    return 1;
  }
  for (int i = 0; i < COUNT && !bad; i++) {
    float want = (float)(n * (n + 1) / 2) + (float)n * (float)(i % 1000);
    if (buf[i] != want) {
      printf("rank %d: element %d is %g, expected %g\n", rank, i, buf[i], want);
      bad = 1;
    }
  }
  free(buf);
  return bad;
}

static void check_topology_without_site(void) {
  setenv("STRATA_TOPOLOGY", topology_path, 1);
  unsetenv("STRATA_SITE");
  strata_config cfg;
  strata_config_init(&cfg);
  char err[512] = "";
  int status = strata_config_from_env(&cfg, err, sizeof err);
  CHECK(status == STRATA_ERR_CONFIG, "STRATA_TOPOLOGY without STRATA_SITE: %s, want %s",
        strata_err_name(status), strata_err_name(STRATA_ERR_CONFIG));
  CHECK(strstr(err, "STRATA_TOPOLOGY") && strstr(err, "STRATA_SITE"),
        "the message names neither STRATA_TOPOLOGY nor STRATA_SITE: '%s'", err);
  setenv("STRATA_SITE", "east", 1); /* both set: the site is taken, the file never read */
  strata_config_init(&cfg);
  status = strata_config_from_env(&cfg, err, sizeof err);
  CHECK(status == STRATA_OK && !strcmp(cfg.site, "east"), "STRATA_SITE with STRATA_TOPOLOGY: %s",
        strata_err_name(status));
  unsetenv("STRATA_TOPOLOGY");
  unsetenv("STRATA_SITE");
}

int main(void) {
  strata_bin = getenv("STRATA_BIN");
  if (!strata_bin || !*strata_bin) strata_bin = "./strata";
  char dir[] = "/tmp/strata-sites-XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  snprintf(topology_path, sizeof topology_path, "%s/cluster.yaml", dir);
  FILE *f = fopen(topology_path, "w");
  if (!f || fputs(topology_yaml, f) < 0 || fclose(f) != 0) return perror(topology_path), 1;
  unsetenv("STRATA_NODE");
  unsetenv("STRATA_SITE");
  unsetenv("STRATA_TOPOLOGY");

  check_site_command();
  check_launch_topology();
  strata_test_ranks_opts o = {.shm = 0, .timeout_s = 10, .deadline_s = 60, .tweak = take_site};
  CHECK(strata_test_run_ranks(4, &o, hier_body, NULL) == 0,
        "hierarchical allreduce on sites from `strata site` failed");
  check_topology_without_site();

  unlink(topology_path);
  rmdir(dir);
  printf("test_sites_topology: %s\n", failures ? "FAIL" : "ok");
  return failures != 0;
}
