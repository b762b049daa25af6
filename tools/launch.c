// SPDX-License-Identifier: Apache-2.0
/*
 * launch.c — `strata launch -n N [options] [--] CMD ARGS...`: run N ranks of a program on this
 * host, the way mpirun or torchrun would, with nothing else installed.
 *
 * The launcher serves the rendezvous store itself (so no rank has to) and gives every child
 * STRATA_ADDR (that store), STRATA_STORE_EXTERNAL=1, STRATA_RANK, STRATA_WORLD_SIZE,
 * STRATA_LOCAL_RANK, and a fresh STRATA_JOB_ID and 32-byte STRATA_SECRET unless the caller's
 * environment already sets them (STRATA_SECRET_FILE counts as setting the secret). The store
 * admits only connections that prove that secret. --order permutes which rank the i-th child
 * gets.
 *
 * --sites MATRIX gives child i STRATA_SITE = the site of row i of a link matrix written by
 * `strata probe` (docs/link-matrix.md): the matrix's site labels when every row has one, else
 * "site<k>" from clustering its latencies (strata_place_sites, the grouping `strata place
 * --sites` prints). A row is a process slot, so the site stays with child i whatever rank
 * --order gives it: `--order "$(strata place -q M)" --sites M` is the placed job, with sites.
 * --topology FILE gives every child STRATA_SITE = the site holding this host in a topology file
 * (STRATA_NODE names the node when the hostname does not; src/topo/nodes.h): ranks never read
 * topology files themselves, so a launcher run on each host of a multi-host job turns the file
 * into the variable ranks read.
 *
 * Binding (--bind core, the default when there are at least two ranks and no more ranks than
 * CPUs the launcher may use): rank r of N gets its share of the launcher's affinity mask, CPUs
 * [r*C/N, (r+1)*C/N) of its C allowed CPUs, as mpirun binds by default. Unbound, the scheduler
 * often starts two ranks on one core and moves one away only later; meanwhile every round trip
 * between them waits for a time slice, which costs a small collective far more than the
 * transfer itself. A share rather than one CPU per rank, because a rank is rarely one thread:
 * a Python rank's data-loader workers inherit the mask, and one CPU would serialize them all.
 * One rank is never bound, for the same reason and because there is no peer to collide with.
 * --bind none leaves placement to the scheduler; with more ranks than CPUs nothing is bound.
 *
 * Supervision (the part that must not go wrong):
 *  - each child leads its own process group, so signals reach the whole tree it starts (a shell,
 *    the python under it, ...); SIGINT, SIGTERM and SIGHUP sent to the launcher are forwarded to
 *    every group, and anything still alive a grace period later gets SIGKILL;
 *  - the first child that exits non-zero or dies by a signal decides the exit status (its code,
 *    or 128+signal like a shell); the others get LAUNCH_FAILURE_LINGER_S to end on their own
 *    (they usually do, having lost a peer: a rank killed at once loses what its stdio had not
 *    written yet, such as a report rank 0 was printing), then SIGTERM, and SIGKILL after the
 *    grace; with --tag, what the ranks wrote is shown before anyone is signalled;
 *  - --elastic: a rank that fails does not stop the others (an elastic job shrinks past it);
 *    --max-restarts N starts up to N replacements in all, each with STRATA_JOIN=1 so that it
 *    joins at the members' next strata_comm_grow, as torchrun's elastic agent restarts workers.
 *    The exit status is 0 when the last rank to end exited 0 (the job survived its failures),
 *    else that of the first failure; a line on stderr counts failures and replacements;
 *  - children die with the launcher even if it is SIGKILLed (PR_SET_PDEATHSIG), so no rank is
 *    left behind waiting for peers that will never come;
 *  - output passes through untouched, or with --tag each line is prefixed "[rank] ".
 * Children see stdin only as rank 0, and only when it is not a terminal: a process outside the
 * terminal's foreground group that reads it would stop, and the job would hang.
 *
 * Everything runs in one thread around poll(): a self-pipe carries signals from the handler,
 * the --tag pipes carry output, and the poll timeout carries the SIGKILL deadline.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "planner.h"
#include "strata.h"
#include "util.h"

extern char **environ;

#define LAUNCH_MAX_RANKS 4096
#define LAUNCH_DEFAULT_GRACE_S 3.0
#define LAUNCH_FAILURE_LINGER_S 1.0
#define LAUNCH_LINE_BYTES 65536
#define LAUNCH_SITE_ENV_BYTES (sizeof "STRATA_SITE=" + STRATA_LINKMATRIX_LABEL_BYTES)

typedef struct launch_options {
  int nranks;
  const char *addr;
  const char *order_text;
  const char *sites_path;    /* --sites MATRIX */
  const char *topology_path; /* --topology FILE */
  int tag;
  int bind; /* --bind: -1 default (core when the ranks fit), 0 none, 1 core */
  double grace_s;
  int elastic;      /* --elastic */
  int max_restarts; /* --max-restarts */
  char **command;
} launch_options;

typedef struct launch_stream {
  int fd; /* read end of a --tag pipe; -1 when closed or unused */
  int out_fd;
  char *line;
  size_t len;
} launch_stream;

typedef struct launch_child {
  pid_t pid;  /* 0 once reaped */
  pid_t pgid; /* its process group; 0 once known to be empty */
  int rank;
  int bound; /* 1: run on cpus; 0: keep the launcher's mask */
  cpu_set_t cpus;
  char site_env[LAUNCH_SITE_ENV_BYTES]; /* "STRATA_SITE=..." with --sites, else "" */
  int joining;                          /* a replacement: STRATA_JOIN=1 */
  char **envp;
  launch_stream out, err;
} launch_child;

typedef struct launcher {
  launch_options opt;
  launch_child *children;
  int live;
  int exit_status; /* of the first child that failed; 0 while none did */
  int last_status; /* of the last child that ended (--elastic decides by it) */
  int failures, restarts;
  int stopping;         /* a signal or a failure ends the job: no replacements */
  double stop_at;       /* SIGTERM what is left at this time; 0 = not armed */
  double kill_deadline; /* SIGKILL what is left at this time; 0 = not armed */
  int killed;
  strata_store_server *server;
  char addr_env[300], world_env[48], job_env[160], secret_env[160];
  char torch_world_env[48], master_addr_env[280], master_port_env[32]; /* torch's env:// */
} launcher;

static int signal_pipe[2] = {-1, -1};

/* ---- usage ---- */

static void launch_usage(FILE *out) {
  fprintf(out,
          "usage: strata launch -n N [--addr HOST:PORT] [--order R0,R1,...]\n"
          "                     [--sites MATRIX | --topology FILE]\n"
          "                     [--bind core|none] [--tag] [--grace SECONDS] [--] CMD [ARGS...]\n\n"
          "Start N ranks of CMD on this host with a rendezvous store served by the launcher.\n"
          "Each rank gets STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_RANK, STRATA_ADDR,\n"
          "STRATA_STORE_EXTERNAL=1, and a fresh STRATA_JOB_ID and STRATA_SECRET unless set.\n\n"
          "  -n, -np, --np N   number of ranks (1..%d)\n"
          "  --addr HOST:PORT  where the store listens (default 127.0.0.1:0, a free port)\n"
          "  --order LIST      rank of each child in start order, a permutation of 0..N-1\n"
          "  --sites MATRIX    STRATA_SITE of child i = the site of row i of a link matrix\n"
          "                    from 'strata probe' (its site labels, else latency clusters)\n"
          "  --topology FILE   STRATA_SITE of every child = the site holding this host in a\n"
          "                    topology file or preset:NAME (STRATA_NODE names the node)\n"
          "  --bind core|none  core (default when 1 < N <= the CPUs we may use): rank r of N\n"
          "                    runs on the r-th N-th of those CPUs; none: the scheduler\n"
          "                    places the ranks (one rank is never bound)\n"
          "  --tag             prefix every output line with [rank]\n"
          "  --grace SECONDS   wait this long after SIGTERM before SIGKILL (default %.0f)\n"
          "  --elastic         a rank that fails does not stop the others\n"
          "  --max-restarts N  with --elastic: start up to N replacements in all, each joining\n"
          "                    at the next grow (STRATA_JOIN=1)\n"
          "  -h, --help        this text\n\n"
          "The first rank that fails stops the others; the exit status is that rank's\n"
          "(128+N when it died by signal N). SIGINT, SIGTERM and SIGHUP are forwarded.\n",
          LAUNCH_MAX_RANKS, LAUNCH_DEFAULT_GRACE_S);
}

static int usage_error(const char *fmt, const char *what) {
  fprintf(stderr, "strata launch: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, "\n(see 'strata launch --help')\n");
  return 2;
}

static int parse_count(const char *text, int *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < 1 || v > LAUNCH_MAX_RANKS) return -1;
  *out = (int)v;
  return 0;
}

/* One option with its value. Returns -1 to go on, or an exit status. */
static int apply_option(int letter, const char *v, launch_options *opt) {
  switch (letter) {
    case 'h':
      launch_usage(stdout);
      return 0;
    case 'T':
      opt->tag = 1;
      return -1;
    case 'n':
      if (parse_count(v, &opt->nranks) != 0)
        return usage_error("-n wants a number of ranks from 1 to 4096, not '%s'", v);
      return -1;
    case 'a':
      opt->addr = v;
      return -1;
    case 'o':
      opt->order_text = v;
      return -1;
    case 's':
      if (!*v) return usage_error("%s", "--sites wants a link matrix file (strata probe --out)");
      opt->sites_path = v;
      return -1;
    case 't':
      if (!*v) return usage_error("%s", "--topology wants a topology file or preset:NAME");
      opt->topology_path = v;
      return -1;
    case 'b':
      if (strcmp(v, "core") && strcmp(v, "none"))
        return usage_error("--bind wants core or none, not '%s'", v);
      opt->bind = !strcmp(v, "core");
      return -1;
    case 'E':
      opt->elastic = 1;
      return -1;
    case 'R': {
      char *end;
      long n = strtol(v, &end, 10);
      if (end == v || *end || n < 0 || n > 1000000)
        return usage_error("--max-restarts wants a count from 0 to 1000000, not '%s'", v);
      opt->max_restarts = (int)n;
      return -1;
    }
    case 'g': {
      char *end;
      opt->grace_s = strtod(v, &end);
      if (end == v || *end || !(opt->grace_s >= 0 && opt->grace_s <= 3600))
        return usage_error("--grace wants seconds from 0 to 3600, not '%s'", v);
      return -1;
    }
    default:
      return usage_error("%s", "unknown option");
  }
}

/* getopt_long_only, so that mpirun's "-np 4" reads as --np; "+" stops at the command. */
static int parse_options(int argc, char **argv, launch_options *opt) {
  static const struct option long_options[] = {
      {"np", required_argument, 0, 'n'},       {"addr", required_argument, 0, 'a'},
      {"order", required_argument, 0, 'o'},    {"sites", required_argument, 0, 's'},
      {"topology", required_argument, 0, 't'}, {"bind", required_argument, 0, 'b'},
      {"grace", required_argument, 0, 'g'},    {"tag", no_argument, 0, 'T'},
      {"elastic", no_argument, 0, 'E'},        {"max-restarts", required_argument, 0, 'R'},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
  *opt = (launch_options){.grace_s = LAUNCH_DEFAULT_GRACE_S, .bind = -1};
  optind = 0; /* glibc: a fresh scan (main may have run getopt) */
  opterr = 0;
  for (;;) {
    int letter = getopt_long_only(argc, argv, "+:hn:", long_options, NULL);
    if (letter == -1) break;
    if (letter == ':') return usage_error("'%s' wants a value", argv[optind - 1]);
    if (letter == '?') return usage_error("unknown option '%s'", argv[optind - 1]);
    int rc = apply_option(letter, optarg, opt);
    if (rc >= 0) return rc;
  }
  if (opt->sites_path && opt->topology_path)
    return usage_error("%s", "--sites and --topology both set the sites; give one");
  if (opt->max_restarts && !opt->elastic)
    return usage_error("%s", "--max-restarts needs --elastic (replacements join a running job)");
  if (opt->nranks == 0) return usage_error("%s", "the number of ranks is missing (-n N)");
  if (optind >= argc) return usage_error("%s", "no command to run (strata launch -n N -- CMD ...)");
  opt->command = argv + optind;
  return -1; /* parsed, go on */
}

/* order[i] = rank of child i. Returns 0 or a usage error (2). */
static int parse_order(const launch_options *opt, int *order) {
  for (int i = 0; i < opt->nranks; i++) order[i] = i;
  if (!opt->order_text) return 0;
  const char *p = opt->order_text;
  char *seen = calloc((size_t)opt->nranks, 1);
  int n = 0, bad = !seen;
  while (!bad && *p) {
    char *end;
    errno = 0;
    long r = strtol(p, &end, 10);
    bad = errno || end == p || r < 0 || r >= opt->nranks || n >= opt->nranks || seen[r] ||
          (*end && *end != ',') || (*end == ',' && end[1] == '\0');
    if (!bad) {
      seen[r] = 1;
      order[n++] = (int)r;
      p = *end ? end + 1 : end;
    }
  }
  free(seen);
  if (bad || n != opt->nranks) {
    fprintf(stderr,
            "strata launch: --order '%s' must list each rank 0..%d exactly once, "
            "comma-separated\n",
            opt->order_text, opt->nranks - 1);
    return 2;
  }
  return 0;
}

/* ---- --sites ---- */

/* A name STRATA_SITE accepts (src/boot/env.c): not empty, no spaces or control characters. */
static int site_name_ok(const char *name) {
  if (!*name) return 0;
  for (const char *c = name; *c; c++)
    if (isspace((unsigned char)*c) || iscntrl((unsigned char)*c)) return 0;
  return 1;
}

/* Child i's STRATA_SITE from row i of the matrix. Returns 0, 1 (out of memory) or 2 (bad
 * input: unreadable matrix, wrong number of rows, a label STRATA_SITE would refuse). */
static int load_sites(launcher *l) {
  const char *path = l->opt.sites_path;
  strata_link_matrix m;
  char err[512] = "";
  int status = strata_link_matrix_load(&m, path, err, sizeof err);
  if (status != STRATA_OK) {
    fprintf(stderr, "strata launch: --sites: %s\n", err[0] ? err : strata_strerror(status));
    return 2;
  }
  int rc = 0, nsites = 0, from_labels = 0;
  int *site_of = malloc(sizeof(int) * (size_t)m.nranks);
  if (m.nranks != l->opt.nranks) {
    fprintf(stderr,
            "strata launch: --sites %s: the matrix has %d rows, -n is %d (row i is child i)\n",
            path, m.nranks, l->opt.nranks);
    rc = 2;
  } else if (!site_of || strata_place_sites(&m, site_of, &nsites, &from_labels) != STRATA_OK) {
    fprintf(stderr, "strata launch: out of memory\n");
    rc = 1;
  }
  for (int i = 0; rc == 0 && i < m.nranks; i++) {
    char name[STRATA_LINKMATRIX_LABEL_BYTES];
    strata_place_site_name(&m, site_of, from_labels, i, name, sizeof name);
    if (!site_name_ok(name)) {
      fprintf(stderr,
              "strata launch: --sites %s: the site label '%s' of row %d is not a valid "
              "STRATA_SITE (no spaces or control characters)\n",
              path, name, i);
      rc = 2;
    }
    snprintf(l->children[i].site_env, sizeof l->children[i].site_env, "STRATA_SITE=%s", name);
  }
  if (rc == 0 && nsites < 2)
    fprintf(stderr, "strata launch: --sites %s: every row is in one site; collectives stay flat\n",
            path);
  free(site_of);
  strata_link_matrix_free(&m);
  return rc;
}

/* Every child's STRATA_SITE from the topology file: the site of this host's node. Returns 0 or
 * 2 (bad input: unreadable file, a node the file does not hold, an unusable site name). */
static int load_topology_site(launcher *l) {
  const char *path = l->opt.topology_path;
  char node[256] = "", site[STRATA_LINKMATRIX_LABEL_BYTES], err[768] = "";
  if (strata_topo_this_node(node, sizeof node) != STRATA_OK) {
    fprintf(stderr, "strata launch: --topology: cannot read this host's name; set STRATA_NODE\n");
    return 2;
  }
  int status = strata_topo_site_of_node(path, node, site, sizeof site, err, sizeof err);
  if (status != STRATA_OK) {
    fprintf(stderr, "strata launch: --topology %s: node '%s': %s\n", path, node,
            err[0] ? err : strata_strerror(status));
    return 2;
  }
  if (!site_name_ok(site)) {
    fprintf(stderr, "strata launch: --topology %s: site '%s' is not a valid STRATA_SITE\n", path,
            site);
    return 2;
  }
  for (int i = 0; i < l->opt.nranks; i++)
    snprintf(l->children[i].site_env, sizeof l->children[i].site_env, "STRATA_SITE=%s", site);
  return 0;
}

/* ---- environment of the children ---- */

static int random_hex(char *out, size_t nbytes) {
  unsigned char raw[64];
  if (nbytes > sizeof raw) return -1;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t got = read(fd, raw, nbytes);
  close(fd);
  if (got != (ssize_t)nbytes) return -1;
  for (size_t i = 0; i < nbytes; i++) sprintf(out + 2 * i, "%02x", raw[i]);
  return 0;
}

static int is_launch_var(const launcher *l, const char *entry) {
  if ((l->opt.sites_path || l->opt.topology_path) &&
      !strncmp(entry, "STRATA_SITE=", strlen("STRATA_SITE=")))
    return 1;
  static const char *const names[] = {"STRATA_RANK=",
                                      "STRATA_WORLD_SIZE=",
                                      "STRATA_LOCAL_RANK=",
                                      "STRATA_ADDR=",
                                      "STRATA_STORE_EXTERNAL=",
                                      "RANK=",
                                      "WORLD_SIZE=",
                                      "LOCAL_RANK="};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strncmp(entry, names[i], strlen(names[i]))) return 1;
  return 0;
}

static int env_set(const char *name) {
  return getenv(name) && *getenv(name);
}

/* A TCP port free on the launcher's host now, for torch's store (rank 0 binds it again soon). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sin;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0 &&
      getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
    port = ntohs(sin.sin_port);
  close(fd);
  return port;
}

/* torch's env:// rendezvous (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), so that
 * init_process_group runs under strata launch as under torchrun; what the caller set is kept. */
static int prepare_torch_env(launcher *l, const char *reach) {
  snprintf(l->torch_world_env, sizeof l->torch_world_env, "WORLD_SIZE=%d", l->opt.nranks);
  if (!env_set("MASTER_ADDR"))
    snprintf(l->master_addr_env, sizeof l->master_addr_env, "MASTER_ADDR=%s", reach);
  if (!env_set("MASTER_PORT")) {
    int port = free_port();
    if (port == 65535) port = free_port(); /* strata reads MASTER_PORT + 1 under torchrun */
    if (port < 0 || port == 65535) return -1;
    snprintf(l->master_port_env, sizeof l->master_port_env, "MASTER_PORT=%d", port);
  }
  return 0;
}

/* The variables every child shares; address of the store as the children reach it. */
static int prepare_shared_env(launcher *l) {
  char host[256];
  int port;
  if (strata_store_addr_parse(l->opt.addr, 1, host, sizeof host, &port, NULL, 0) != STRATA_OK)
    return -1;
  port = strata_store_server_port(l->server);
  const char *reach = host;
  if (!host[0] || !strcmp(host, "0.0.0.0") || !strcmp(host, "*")) reach = "127.0.0.1";
  if (!strcmp(host, "::")) reach = "::1";
  int bracket = strchr(reach, ':') != NULL;
  snprintf(l->addr_env, sizeof l->addr_env, "STRATA_ADDR=%s%s%s:%d", bracket ? "[" : "", reach,
           bracket ? "]" : "", port);
  snprintf(l->world_env, sizeof l->world_env, "STRATA_WORLD_SIZE=%d", l->opt.nranks);
  return prepare_torch_env(l, reach);
}

/* The job id and secret the ranks get (fresh ones unless the caller's environment has them) and
 * the store requires: into secret and job, for strata_store_server_start_auth. Prints why and
 * returns -1 when the caller's STRATA_* variables are invalid. */
static int prepare_job_identity(launcher *l, char *secret, size_t secret_len, char *job,
                                size_t job_len) {
  char hex[129];
  if (!env_set("STRATA_JOB_ID")) {
    if (random_hex(hex, 8) != 0) return -1;
    snprintf(l->job_env, sizeof l->job_env, "STRATA_JOB_ID=launch-%s", hex);
  }
  if (!env_set("STRATA_SECRET") && !env_set("STRATA_SECRET_FILE")) {
    if (random_hex(hex, 32) != 0) return -1;
    snprintf(l->secret_env, sizeof l->secret_env, "STRATA_SECRET=%s", hex);
  }
  /* what a rank will read: the caller's variables, as strata_config_from_env reads them */
  strata_config cfg;
  strata_config_init(&cfg);
  char err[512];
  if (strata_config_from_env(&cfg, err, sizeof err) != STRATA_OK) {
    fprintf(stderr, "strata launch: %s\n", err);
    return -1;
  }
  const char *chosen_job = l->job_env[0] ? strchr(l->job_env, '=') + 1 : cfg.job_id;
  const char *chosen_secret = l->secret_env[0] ? strchr(l->secret_env, '=') + 1 : cfg.secret;
  snprintf(job, job_len, "%s", chosen_job);
  snprintf(secret, secret_len, "%s", chosen_secret);
  memset(cfg.secret, 0, sizeof cfg.secret);
  return 0;
}

/* environ minus what we set, plus the shared and per-rank variables: one allocation holding
 * the NULL-terminated pointer array and, after it, the per-rank strings. free() releases it. */
static char **child_env(const launcher *l, launch_child *c) {
  int rank = c->rank;
  size_t n = 0;
  while (environ[n]) n++;
  size_t slots = n + 18;
  char **envp = calloc(1, slots * sizeof *envp + 4 * 40);
  if (!envp) return NULL;
  char *rank_env = (char *)(envp + slots), *local_env = rank_env + 40;
  char *torch_rank_env = local_env + 40, *torch_local_env = torch_rank_env + 40;
  snprintf(rank_env, 40, "STRATA_RANK=%d", rank);
  snprintf(local_env, 40, "STRATA_LOCAL_RANK=%d", rank); /* one host: local rank = rank */
  snprintf(torch_rank_env, 40, "RANK=%d", rank);
  snprintf(torch_local_env, 40, "LOCAL_RANK=%d", rank);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!is_launch_var(l, environ[i]) && !(c->joining && !strncmp(environ[i], "STRATA_JOIN=", 12)))
      envp[k++] = environ[i];
  envp[k++] = rank_env;
  envp[k++] = local_env;
  envp[k++] = (char *)l->world_env;
  envp[k++] = (char *)l->addr_env;
  envp[k++] = "STRATA_STORE_EXTERNAL=1";
  envp[k++] = torch_rank_env;
  envp[k++] = torch_local_env;
  envp[k++] = (char *)l->torch_world_env;
  if (l->master_addr_env[0]) envp[k++] = (char *)l->master_addr_env;
  if (l->master_port_env[0]) envp[k++] = (char *)l->master_port_env;
  if (l->job_env[0]) envp[k++] = (char *)l->job_env;
  if (l->secret_env[0]) envp[k++] = (char *)l->secret_env;
  if (c->site_env[0]) envp[k++] = c->site_env;
  if (l->opt.elastic && !env_set("STRATA_ELASTIC")) envp[k++] = "STRATA_ELASTIC=1";
  if (c->joining) envp[k++] = "STRATA_JOIN=1";
  envp[k] = NULL;
  return envp;
}

/* ---- signals ---- */

static void on_signal(int sig) {
  int saved = errno;
  unsigned char byte = (unsigned char)sig;
  ssize_t n = write(signal_pipe[1], &byte, 1);
  (void)n;
  errno = saved;
}

static int install_signals(void) {
  if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    if (sigaction(sigs[i], &sa, NULL) != 0) return -1;
  signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the supervisor */
  /* orphans of our ranks are re-parented to us, so we can reap them and see their groups end */
  (void)prctl(PR_SET_CHILD_SUBREAPER, 1);
  return 0;
}

static void restore_signals(void) {
  const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
  if (signal_pipe[0] >= 0) close(signal_pipe[0]);
  if (signal_pipe[1] >= 0) close(signal_pipe[1]);
  signal_pipe[0] = signal_pipe[1] = -1;
}

/* Signals every rank's process group, also of ranks that exited: what they left running in
 * the background belongs to the job too. */
static int signal_children(launcher *l, int sig) {
  int groups = 0;
  for (int i = 0; i < l->opt.nranks; i++) {
    launch_child *c = &l->children[i];
    if (c->pgid <= 0) continue;
    if (kill(-c->pgid, sig) == 0)
      groups++;
    else if (errno == ESRCH)
      c->pgid = 0;
  }
  return groups;
}

/* SIGTERM (or the forwarded signal) now, SIGKILL after the grace period. */
static void stop_children(launcher *l, int sig) {
  l->stopping = 1;
  signal_children(l, sig);
  if (l->kill_deadline == 0) l->kill_deadline = tool_now_s() + l->opt.grace_s;
}

/* ---- children ---- */

/* One write(2) of the whole line: ranks that fail together share the stderr file, and pieces
 * written separately would interleave. Async-signal-safe (no stdio, no allocation). */
static void child_write_error(const char *cmd, int err) {
  const char *parts[] = {"strata launch: cannot run '", cmd, "': ", strerror(err), "\n"};
  char line[512];
  size_t len = 0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    for (const char *p = parts[i]; *p && len < sizeof line - 1; p++) line[len++] = *p;
  if (len == sizeof line - 1) line[len - 1] = '\n';
  ssize_t n = write(2, line, len);
  (void)n;
}

/* In the forked child: never returns. Only async-signal-safe calls until exec. */
static void child_exec(const launcher *l, const launch_child *c, pid_t parent, int out_w,
                       int err_w) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127); /* the launcher is already gone */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  if (c->rank != 0 || isatty(0)) {
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    if (null_fd > 0) close(null_fd);
  }
  if (out_w >= 0) dup2(out_w, 1);
  if (err_w >= 0) dup2(err_w, 2);
  if (c->bound)
    sched_setaffinity(0, sizeof c->cpus, &c->cpus); /* best effort: unbound is still correct */
  execvpe(l->opt.command[0], l->opt.command, c->envp);
  int err = errno;
  child_write_error(l->opt.command[0], err);
  _exit(err == ENOENT ? 127 : 126);
}

static int open_tag_pipe(launch_stream *s, int out_fd, int *write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  s->fd = fds[0];
  s->out_fd = out_fd;
  *write_end = fds[1];
  return 0;
}

static int spawn_child(launcher *l, launch_child *c) {
  int out_w = -1, err_w = -1;
  if (l->opt.tag &&
      (open_tag_pipe(&c->out, 1, &out_w) != 0 || open_tag_pipe(&c->err, 2, &err_w) != 0)) {
    if (out_w >= 0) close(out_w);
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) child_exec(l, c, parent, out_w, err_w);
  int saved = errno;
  if (out_w >= 0) close(out_w);
  if (err_w >= 0) close(err_w);
  if (pid < 0) {
    errno = saved;
    return -1;
  }
  setpgid(pid, pid); /* also here, so no signal can miss the group */
  c->pid = c->pgid = pid;
  l->live++;
  return 0;
}

static void describe_failure(const launch_child *c, int status) {
  if (WIFSIGNALED(status))
    fprintf(stderr, "strata launch: rank %d (pid %d) killed by signal %d (%s)", c->rank,
            (int)c->pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    fprintf(stderr, "strata launch: rank %d (pid %d) exited with status %d", c->rank, (int)c->pid,
            WEXITSTATUS(status));
}

static launch_child *find_child(launcher *l, pid_t pid) {
  for (int i = 0; i < l->opt.nranks; i++)
    if (l->children[i].pid == pid) return &l->children[i];
  return NULL;
}

static int spawn_child(launcher *l, launch_child *c);
static void pump_stream(const launcher *l, const launch_child *c, launch_stream *s);
static void emit_line(const launcher *l, const launch_child *c, const launch_stream *s,
                      const char *text, size_t n, int add_newline);

/* Shows what a --tag pipe of an ended rank still holds, then closes it (without waiting on
 * what the rank left running in the background, which may hold the pipe open). */
static void drain_stream(const launcher *l, const launch_child *c, launch_stream *s) {
  while (s->fd >= 0) {
    struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
    if (poll(&pfd, 1, 0) <= 0 || !(pfd.revents & (POLLIN | POLLHUP))) {
      if (s->len) emit_line(l, c, s, s->line, s->len, 1);
      s->len = 0;
      close(s->fd);
      s->fd = -1;
      return;
    }
    pump_stream(l, c, s);
  }
}

/* --elastic: a failed rank's slot gets a replacement that joins the running job, while the
 * restart budget lasts; the others go on either way. */
static void elastic_failure(launcher *l, launch_child *c) {
  if (l->stopping || l->restarts >= l->opt.max_restarts) {
    fprintf(stderr, "; the other ranks go on (--elastic%s)\n",
            l->opt.max_restarts ? ", no restart left" : "");
    return;
  }
  l->restarts++;
  fprintf(stderr, "; starting a replacement that joins at the next grow (restart %d of %d)\n",
          l->restarts, l->opt.max_restarts);
  drain_stream(l, c, &c->out); /* the replacement gets pipes of its own */
  drain_stream(l, c, &c->err);
  free(c->envp);
  c->joining = 1;
  c->envp = child_env(l, c);
  if (!c->envp || spawn_child(l, c) != 0)
    fprintf(stderr, "strata launch: cannot start a replacement for rank %d: %s\n", c->rank,
            strerror(errno));
}

/* Reaps every exited process: ranks, and (as a subreaper) whatever they orphaned. */
static void reap_children(launcher *l) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    launch_child *c = find_child(l, pid);
    if (!c) continue; /* an orphaned grandchild */
    int failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    l->live--;
    l->last_status = failed ? code : 0;
    if (failed) l->failures++;
    if (failed && l->exit_status == 0) l->exit_status = code;
    if (failed && l->opt.elastic) {
      describe_failure(c, status);
      c->pid = 0;
      elastic_failure(l, c);
      continue;
    }
    if (failed && !l->stopping) {
      describe_failure(c, status);
      fprintf(stderr, l->live > 0 ? "; stopping the other ranks\n" : "\n");
      /* the others have lost a peer and usually end on their own: let them, so what they had
       * not written yet is not lost with them */
      l->stopping = 1;
      l->stop_at = tool_now_s() + LAUNCH_FAILURE_LINGER_S;
    }
    c->pid = 0;
  }
}

/* After the last rank: what ranks left running in their groups gets SIGTERM, then SIGKILL. */
static void reap_leftovers(launcher *l) {
  if (signal_children(l, 0) == 0) return;
  signal_children(l, SIGTERM);
  double deadline = tool_now_s() + l->opt.grace_s;
  while (signal_children(l, 0) > 0 && tool_now_s() < deadline) {
    reap_children(l);
    struct timespec tick = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    nanosleep(&tick, NULL);
  }
  if (signal_children(l, SIGKILL) > 0) {
    struct timespec tick = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    for (int i = 0; i < 50 && signal_children(l, 0) > 0; i++) {
      reap_children(l);
      nanosleep(&tick, NULL);
    }
  }
}

/* ---- --tag output ---- */

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

static void emit_line(const launcher *l, const launch_child *c, const launch_stream *s,
                      const char *text, size_t n, int add_newline) {
  char prefix[32];
  int width = l->opt.nranks > 1000 ? 4 : l->opt.nranks > 100 ? 3 : l->opt.nranks > 10 ? 2 : 1;
  int p = snprintf(prefix, sizeof prefix, "[%*d] ", width, c->rank);
  /* one write per line, so lines of different ranks never interleave */
  char *buf = malloc((size_t)p + n + 1);
  if (!buf) return;
  memcpy(buf, prefix, (size_t)p);
  memcpy(buf + p, text, n);
  if (add_newline) buf[(size_t)p + n++] = '\n';
  write_all(s->out_fd, buf, (size_t)p + n);
  free(buf);
}

/* Reads what a tag pipe holds and prints every complete line. */
static void pump_stream(const launcher *l, const launch_child *c, launch_stream *s) {
  if (!s->line && !(s->line = malloc(LAUNCH_LINE_BYTES))) return;
  ssize_t n = read(s->fd, s->line + s->len, LAUNCH_LINE_BYTES - s->len);
  if (n < 0 && errno == EINTR) return;
  if (n <= 0) { /* EOF: print the unterminated tail */
    if (s->len) emit_line(l, c, s, s->line, s->len, 1);
    s->len = 0;
    close(s->fd);
    s->fd = -1;
    return;
  }
  s->len += (size_t)n;
  size_t start = 0;
  for (size_t i = 0; i < s->len; i++) {
    if (s->line[i] != '\n') continue;
    emit_line(l, c, s, s->line + start, i + 1 - start, 0);
    start = i + 1;
  }
  memmove(s->line, s->line + start, s->len - start);
  s->len -= start;
  if (s->len == LAUNCH_LINE_BYTES) { /* a line longer than the buffer: print it in pieces */
    emit_line(l, c, s, s->line, s->len, 1);
    s->len = 0;
  }
}

/* ---- the supervision loop ---- */

static int open_streams(const launcher *l) {
  int n = 0;
  for (int i = 0; i < l->opt.nranks; i++)
    n += (l->children[i].out.fd >= 0) + (l->children[i].err.fd >= 0);
  return n;
}

static void handle_signals(launcher *l) {
  unsigned char sigs[64];
  ssize_t n;
  while ((n = read(signal_pipe[0], sigs, sizeof sigs)) > 0) {
    for (ssize_t i = 0; i < n; i++)
      if (sigs[i] != SIGCHLD) stop_children(l, sigs[i]);
  }
}

static void supervise(launcher *l) {
  struct pollfd *pfds = calloc(1 + 2 * (size_t)l->opt.nranks, sizeof *pfds);
  launch_stream **streams = calloc(1 + 2 * (size_t)l->opt.nranks, sizeof *streams);
  const launch_child **owners = calloc(1 + 2 * (size_t)l->opt.nranks, sizeof *owners);
  double drain_deadline = 0; /* after the last child: stop waiting for output that never ends */
  while (pfds && streams && owners) {
    reap_children(l);
    if (l->live == 0 && drain_deadline == 0) drain_deadline = tool_now_s() + 2.0;
    if (l->live == 0 && (open_streams(l) == 0 || tool_now_s() >= drain_deadline)) break;
    if (l->stop_at > 0 && tool_now_s() >= l->stop_at) {
      l->stop_at = 0;
      if (l->live > 0) stop_children(l, SIGTERM);
    }
    if (l->kill_deadline > 0 && !l->killed && tool_now_s() >= l->kill_deadline) {
      signal_children(l, SIGKILL);
      l->killed = 1;
    }
    size_t n = 0;
    pfds[n++] = (struct pollfd){.fd = signal_pipe[0], .events = POLLIN};
    for (int i = 0; i < l->opt.nranks; i++) {
      launch_stream *ss[2] = {&l->children[i].out, &l->children[i].err};
      for (int k = 0; k < 2; k++) {
        if (ss[k]->fd < 0) continue;
        owners[n] = &l->children[i];
        streams[n] = ss[k];
        pfds[n++] = (struct pollfd){.fd = ss[k]->fd, .events = POLLIN};
      }
    }
    double wake = l->live == 0 ? drain_deadline : (l->killed ? 0 : l->kill_deadline);
    if (l->live > 0 && l->stop_at > 0) wake = l->stop_at;
    int timeout_ms = wake > 0 ? (int)((wake - tool_now_s()) * 1000) + 1 : -1;
    if (timeout_ms < -1) timeout_ms = 0;
    if (poll(pfds, n, timeout_ms) < 0 && errno != EINTR) break;
    if (pfds[0].revents) handle_signals(l);
    for (size_t i = 1; i < n; i++)
      if (pfds[i].revents) pump_stream(l, owners[i], streams[i]);
  }
  if (l->live > 0) { /* out of memory or poll failed: leave nothing behind */
    signal_children(l, SIGKILL);
    for (int i = 0; i < l->opt.nranks; i++)
      if (l->children[i].pid > 0) waitpid(l->children[i].pid, NULL, 0);
    l->live = 0;
    if (l->exit_status == 0) l->exit_status = 1;
  }
  reap_leftovers(l);
  free(pfds);
  free(streams);
  free(owners);
}

static void launcher_free(launcher *l) {
  for (int i = 0; l->children && i < l->opt.nranks; i++) {
    launch_child *c = &l->children[i];
    if (c->out.fd >= 0) close(c->out.fd);
    if (c->err.fd >= 0) close(c->err.fd);
    free(c->out.line);
    free(c->err.line);
    free(c->envp);
  }
  free(l->children);
  /* at STRATA_LOG=info, what the job asked of its store (bench/scale.sh reads it) */
  const char *log = getenv("STRATA_LOG");
  if (l->server && log && (!strcasecmp(log, "info") || !strcasecmp(log, "debug")))
    fprintf(stderr, "strata launch: the store served %llu requests\n",
            (unsigned long long)strata_store_server_requests(l->server));
  if (l->server) strata_store_server_stop(l->server);
  restore_signals();
}

/* --bind: rank r of N gets CPUs [r*C/N, (r+1)*C/N) of the C CPUs in our affinity mask, a
 * non-empty share whenever N <= C; one rank, --bind none or N > C: nobody is bound. */
static void assign_cpus(launcher *l) {
  cpu_set_t mask;
  int cpus[CPU_SETSIZE], count = 0, nranks = l->opt.nranks;
  for (int i = 0; i < nranks; i++) l->children[i].bound = 0;
  if (l->opt.bind == 0 || nranks == 1 || sched_getaffinity(0, sizeof mask, &mask) != 0) return;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
    if (CPU_ISSET(cpu, &mask)) cpus[count++] = cpu;
  if (nranks > count) {
    if (l->opt.bind == 1)
      fprintf(stderr, "strata launch: --bind core: %d ranks but %d CPUs; not binding\n", nranks,
              count);
    return;
  }
  for (int i = 0; i < nranks; i++) {
    launch_child *c = &l->children[i];
    long first = (long)c->rank * count / nranks, end = (long)(c->rank + 1) * count / nranks;
    CPU_ZERO(&c->cpus);
    for (long k = first; k < end; k++) CPU_SET(cpus[k], &c->cpus);
    c->bound = 1;
  }
}

static int start_children(launcher *l) {
  assign_cpus(l);
  for (int i = 0; i < l->opt.nranks; i++) {
    launch_child *c = &l->children[i];
    c->envp = child_env(l, c);
    if (!c->envp || spawn_child(l, c) != 0) {
      fprintf(stderr, "strata launch: cannot start rank %d: %s\n", c->rank, strerror(errno));
      return -1;
    }
  }
  return 0;
}

int strata_cmd_launch(int argc, char **argv) {
  launcher l = {.exit_status = 0};
  int rc = parse_options(argc, argv, &l.opt);
  if (rc >= 0) return rc;
  if (!l.opt.addr) l.opt.addr = "127.0.0.1:0";
  char host[256], err[320];
  int port;
  if (strata_store_addr_parse(l.opt.addr, 1, host, sizeof host, &port, err, sizeof err) != 0) {
    fprintf(stderr, "strata launch: --addr: %s\n", err);
    return 2;
  }
  int *order = calloc((size_t)l.opt.nranks, sizeof *order);
  l.children = calloc((size_t)l.opt.nranks, sizeof *l.children);
  if (!order || !l.children) {
    free(order);
    free(l.children);
    fprintf(stderr, "strata launch: out of memory\n");
    return 1;
  }
  if (parse_order(&l.opt, order) != 0) {
    free(order);
    free(l.children);
    return 2;
  }
  for (int i = 0; i < l.opt.nranks; i++)
    l.children[i] = (launch_child){.rank = order[i], .out = {.fd = -1}, .err = {.fd = -1}};
  if ((l.opt.sites_path && (rc = load_sites(&l)) != 0) ||
      (l.opt.topology_path && (rc = load_topology_site(&l)) != 0)) {
    free(order);
    free(l.children);
    return rc;
  }
  /* the store admits only connections that prove the job secret the ranks are given */
  char secret[256], job[160];
  if (prepare_job_identity(&l, secret, sizeof secret, job, sizeof job) != 0) {
    free(order);
    free(l.children);
    return 2;
  }
  int status = strata_store_server_start_auth(l.opt.addr, secret, job, &l.server);
  memset(secret, 0, sizeof secret);
  if (status != STRATA_OK) {
    fprintf(stderr, "strata launch: cannot serve the store on %s: %s\n", l.opt.addr,
            strata_strerror(status));
    l.server = NULL;
    rc = 1;
  } else if (prepare_shared_env(&l) != 0 || install_signals() != 0) {
    fprintf(stderr, "strata launch: cannot prepare the ranks: %s\n", strerror(errno));
    rc = 1;
  } else {
    if (start_children(&l) != 0) {
      stop_children(&l, SIGTERM);
      if (l.exit_status == 0) l.exit_status = 1;
    }
    supervise(&l);
    rc = l.exit_status;
    if (l.opt.elastic && l.failures) {
      if (l.last_status == 0) rc = 0;
      fprintf(stderr,
              "strata launch: --elastic: %d rank failure%s, %d replacement%s started; the last "
              "rank to end exited with %d, so the launcher exits with %d\n",
              l.failures, l.failures == 1 ? "" : "s", l.restarts, l.restarts == 1 ? "" : "s",
              l.last_status, rc);
    }
  }
  free(order);
  launcher_free(&l);
  return rc;
}
