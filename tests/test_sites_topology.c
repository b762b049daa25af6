/*
 * test_sites_topology.c — ranks that learn their site only from a topology file and their node
 * name (STRATA_TOPOLOGY, STRATA_NODE; src/engine/sites.c), never from STRATA_SITE.
 *
 *  1. 4 ranks over TCP on a file with sites east and west (written to a temp dir), nodes named
 *     in every accepted form (numbered, site-qualified, a host's full name): each rank reports
 *     its site, a large allreduce is chosen hierarchical and its result is right.
 *  2. The same with a preset (STRATA_TOPOLOGY=preset:metro-2-sites, SITE/NODE names).
 *  3. A node missing from the file: that rank fails init with STRATA_ERR_CONFIG and a log line
 *     naming the node and the file, and every other rank fails too, at once (well inside its
 *     timeout), also when the failing rank is rank 0 serving the store itself.
 *  4. A topology file that does not exist: the loader's error, everyone fails at once.
 * Every rank's variables go through strata_config_from_env, so the knobs are tested as users
 * set them.
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "helpers/ranks.h"

#define MAX_RANKS 4
#define COUNT (1 << 20) /* 4 MiB of f32 per rank: AUTO picks hier from 1 MiB (docs/hier.md) */

typedef struct scenario {
  const char *name;
  char topology[512];
  const char *node[MAX_RANKS];
  const char *want_site[MAX_RANKS]; /* all NULL: init must fail */
  int want_status[MAX_RANKS];       /* for failing scenarios: each rank's init status */
  int failing_rank;                 /* its log must name the node and the file; -1 none */
  int expect_hier;
  int rank0_serves; /* store served by rank 0 instead of the harness */
  char store_addr[64];
  char log_dir[256];
} scenario;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double init_started_s;

/* Runs in each rank's process before init: the variables a user would set, read by env.c. */
static void tweak(strata_config *cfg, int rank, void *arg) {
  const scenario *s = arg;
  setenv("STRATA_TOPOLOGY", s->topology, 1);
  setenv("STRATA_NODE", s->node[rank], 1);
  unsetenv("STRATA_SITE");
  strata_config from_env;
  strata_config_init(&from_env);
  char err[256];
  if (strata_config_from_env(&from_env, err, sizeof err) != STRATA_OK)
    fprintf(stderr, "rank %d: %s\n", rank, err);
  memcpy(cfg->topology, from_env.topology, sizeof cfg->topology);
  memcpy(cfg->node, from_env.node, sizeof cfg->node);
  if (s->rank0_serves) {
    cfg->store_external = 0;
    snprintf(cfg->store_addr, sizeof cfg->store_addr, "%s", s->store_addr);
  }
  if (s->log_dir[0]) { /* keep this rank's log to check what it says */
    char path[320];
    snprintf(path, sizeof path, "%s/rank%d.log", s->log_dir, rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, 2), close(fd);
  }
  init_started_s = now_s();
}

/* The failing rank's log names its node and the file; the others name the failing rank. */
static int check_log(const scenario *s, int rank) {
  char path[320], text[4096] = "", others[64];
  snprintf(path, sizeof path, "%s/rank%d.log", s->log_dir, rank);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  text[n] = '\0';
  if (f) fclose(f);
  if (rank == s->failing_rank && (!strstr(text, s->node[rank]) || !strstr(text, s->topology))) {
    printf("rank %d: the log does not name node '%s' and file '%s':\n%s\n", rank, s->node[rank],
           s->topology, text);
    return 1;
  }
  snprintf(others, sizeof others, "rank %d could not find its site", s->failing_rank);
  if (rank != s->failing_rank && !strstr(text, others)) {
    printf("rank %d: the log does not say '%s':\n%s\n", rank, others, text);
    return 1;
  }
  return 0;
}

static int check_failure(const scenario *s, int rank, int init_status) {
  double took_s = now_s() - init_started_s;
  int bad = 0;
  if (init_status != s->want_status[rank]) {
    printf("rank %d: init gave %s, expected %s\n", rank, strata_err_name(init_status),
           strata_err_name(s->want_status[rank]));
    bad = 1;
  }
  if (took_s > 5) { /* the timeout is 10 s: nobody may wait it out */
    printf("rank %d: the failure took %.1f s\n", rank, took_s);
    bad = 1;
  }
  if (s->failing_rank >= 0 && s->log_dir[0]) bad |= check_log(s, rank);
  return bad;
}

static int check_allreduce(strata_comm *comm, const scenario *s, int rank, int n) {
  float *buf = malloc(sizeof(float) * COUNT);
  if (!buf) return 1;
  for (int i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1) + (float)(i % 1000);
  strata_coll_args args = {.coll = STRATA_COLL_ALLREDUCE,
                           .sendbuf = buf,
                           .recvbuf = buf,
                           .count = COUNT,
                           .dtype = STRATA_F32,
                           .op = STRATA_SUM};
  strata_algo algo = strata_comm_algorithm(comm, &args);
  int bad = 0;
  if (s->expect_hier && algo != STRATA_ALGO_HIER) {
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
  for (int i = 0; i < COUNT; i++) {
    float want = (float)(n * (n + 1) / 2) + (float)n * (float)(i % 1000);
    if (buf[i] != want) {
      printf("rank %d: element %d is %g, expected %g\n", rank, i, buf[i], want);
      bad = 1;
      break;
    }
  }
  free(buf);
  return bad;
}

static int body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  const scenario *s = arg;
  if (!s->want_site[0]) return check_failure(s, rank, init_status);
  if (!comm) {
    printf("rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  const char *site = strata_comm_config(comm)->site;
  if (strcmp(site, s->want_site[rank]) != 0) {
    printf("rank %d (node '%s'): site '%s', expected '%s'\n", rank, s->node[rank], site,
           s->want_site[rank]);
    return 1;
  }
  return check_allreduce(comm, s, rank, n);
}

static int run(scenario *s, int nranks) {
  strata_test_ranks_opts o = {.shm = 0, .timeout_s = 10, .deadline_s = 60, .tweak = tweak};
  int bad = strata_test_run_ranks(nranks, &o, body, s);
  printf("%s: %s\n", s->name, bad ? "FAILED" : "ok");
  return bad != 0;
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

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

int main(void) {
  char dir[] = "/tmp/strata-sites-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char path[256];
  snprintf(path, sizeof path, "%s/cluster.yaml", dir);
  FILE *f = fopen(path, "w");
  if (!f || fputs(topology_yaml, f) < 0 || fclose(f) != 0) {
    perror(path);
    return 1;
  }
  int failed = 0;

  /* sites interleaved with ranks: 0 east, 1 west, 2 east, 3 west */
  scenario file = {.name = "topology file, 2 sites x 2 ranks",
                   .expect_hier = 1,
                   .node = {"node-e0", "node-w", "node-e-1.dc.example.com", "west/spare"},
                   .want_site = {"east", "west", "east", "west"},
                   .failing_rank = -1};
  snprintf(file.topology, sizeof file.topology, "%s", path);
  failed += run(&file, 4);

  scenario preset = {.name = "preset:metro-2-sites, SITE/NODE names",
                     .expect_hier = 0,
                     .node = {"metro-b/dgx-07", "metro-a/dgx1", "metro-a/dgx2"},
                     .want_site = {"metro-b", "metro-a", "metro-a"},
                     .failing_rank = -1};
  snprintf(preset.topology, sizeof preset.topology, "preset:metro-2-sites");
  failed += run(&preset, 3);

  scenario missing = {.name = "a node missing from the file",
                      .node = {"node-e0", "node-x3", "node-w"},
                      .want_status = {STRATA_ERR_CONFIG, STRATA_ERR_CONFIG, STRATA_ERR_CONFIG},
                      .failing_rank = 1};
  snprintf(missing.topology, sizeof missing.topology, "%s", path);
  snprintf(missing.log_dir, sizeof missing.log_dir, "%s", dir);
  failed += run(&missing, 3);

  scenario missing0 = {.name = "rank 0 (serving the store) missing from the file",
                       .node = {"nowhere", "node-e1", "node-w"},
                       .want_status = {STRATA_ERR_CONFIG, STRATA_ERR_CONFIG, STRATA_ERR_CONFIG},
                       .failing_rank = 0,
                       .rank0_serves = 1};
  snprintf(missing0.topology, sizeof missing0.topology, "%s", path);
  snprintf(missing0.log_dir, sizeof missing0.log_dir, "%s", dir);
  snprintf(missing0.store_addr, sizeof missing0.store_addr, "127.0.0.1:%d", free_port());
  failed += run(&missing0, 3);

  scenario no_file = {.name = "a topology file that does not exist",
                      .node = {"node-e0", "node-e1"},
                      .want_status = {STRATA_ERR_NOT_FOUND, STRATA_ERR_NOT_FOUND},
                      .failing_rank = -1};
  snprintf(no_file.topology, sizeof no_file.topology, "%s/nope.yaml", dir);
  failed += run(&no_file, 2);

  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
