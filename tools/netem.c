// SPDX-License-Identifier: Apache-2.0
/*
 * netem.c — `strata netem`: a WAN between emulated sites on one host, for kernels without the
 * netem qdisc.
 *
 *   strata netem up --sites K [--ranks-per-site M] [--link SPEC]... [--name NAME] [--mtu BYTES]
 *                   [--cc bbr|cubic|reno] [--tcp-mem-max BYTES] [--seed N] [--lifetime SECONDS]
 *                   [--pool PACKETS] [--foreground] [--realtime-priority N]
 *   strata netem down [--name NAME]
 *   strata netem status [--name NAME]
 *   strata netem list
 *   strata netem exec [--name NAME] SITE [--] CMD ARGS...
 *   strata netem ping [--name NAME] FROM TO [-c COUNT] [-i SECONDS] [-s BYTES] [-W SECONDS] [-q]
 *   strata netem owd [--name NAME] FROM TO [same options as ping]
 *
 * `up` makes the sites (src/emu/site.c: a namespace "<name>-s<K>" each, TUN "netem0" with
 * 10.77.K.1/16), then forks the forwarder (src/emu/forwarder.c) as a daemon that holds every TUN
 * and applies the links, and returns once it runs. State lives in /run/strata-netem/<name>/:
 * pid, config (what `up` was asked), stats (the forwarder's counters, rewritten every second),
 * log (the forwarder's stderr). The forwarder removes the namespaces and the state when it ends,
 * by a signal or by --lifetime, and `down` removes whatever is left even after a crash, so `down`
 * is idempotent and safe to put in a trap.
 *
 * Link SPEC: "A-B:PARAMS" sets both directions between sites A and B, "A>B:PARAMS" one direction,
 * "*:PARAMS" every pair; later specs override earlier ones field by field. PARAMS is
 * "rate=1gbit,delay=25ms,jitter=1ms,loss=0.1%,reorder=1%,queue=6mb" (src/emu/link.h). Pairs no
 * spec names are unimpaired. See docs/netem.md.
 *
 * `ping` sends ICMP echo requests from inside site FROM to 10.77.TO.1 (raw socket; the kernel of
 * site TO answers) and prints the loss and the round-trip times, so tests need no iputils. `owd`
 * sends UDP datagrams from a socket made in site FROM to one made in site TO, both held by this
 * one process, and prints one-way delays and one-way loss (one clock at both ends).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "commands.h"
#include "planner.h"
#include "util.h"

#define NETEM_STATE_ROOT "/run/strata-netem"
#define NETEM_DEFAULT_NAME "strata"
#define NETEM_MAX_RANKS_PER_SITE 256
#define NETEM_READY_TIMEOUT_MS 10000
#define NETEM_STOP_TIMEOUT_MS 5000
#define NETEM_PING_MAX_COUNT 1000000

static void netem_usage(FILE *out) {
  fprintf(out,
          "usage: strata netem up --sites K [--ranks-per-site M] [--link SPEC]... [--name NAME]\n"
          "                       [--mtu BYTES] [--cc bbr|cubic|reno] [--tcp-mem-max BYTES|host]\n"
          "                       [--seed N] [--lifetime SECONDS] [--pool PACKETS] [--foreground]\n"
          "                       [--realtime-priority N (default 10, 0 = off)] [--no-offload]\n"
          "       strata netem down [--name NAME]\n"
          "       strata netem status [--name NAME]\n"
          "       strata netem list\n"
          "       strata netem exec [--name NAME] SITE [--] CMD ARGS...\n"
          "       strata netem ping [--name NAME] FROM TO [-c COUNT] [-i SECONDS] [-s BYTES]\n"
          "                         [-W SECONDS] [-q]\n"
          "       strata netem owd [--name NAME] FROM TO [same options as ping]\n"
          "\n"
          "SPEC: A-B:PARAMS (both directions), A>B:PARAMS (one direction), *:PARAMS (all pairs)\n"
          "PARAMS: rate=1gbit,delay=25ms,jitter=1ms,jitter_dist=normal|uniform,loss=0.1%%,\n"
          "        ge=P:R[:LOSS_BAD[:LOSS_GOOD]],reorder=1%%,reorder_gap=1ms,queue=6mb|50ms,\n"
          "        flip=4mb (flip one bit of the TCP payload at that offset: tampering)\n"
          "Site K is namespace NAME-sK with address 10.77.K.1 (default NAME: %s). Needs root.\n",
          NETEM_DEFAULT_NAME);
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse_long(const char *text, long lo, long hi, long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_seconds(const char *text, double lo, double hi, double *out) {
  char *end = NULL;
  double v = strtod(text, &end);
  if (end == text || *end || !isfinite(v) || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* NETEM_STATE_ROOT/NAME[/FILE]; names are at most STRATA_EMU_NAME_MAX characters. */
static void state_path(char *out, size_t n, const char *name, const char *file) {
  snprintf(out, n, "%s/%.*s%s%.*s", NETEM_STATE_ROOT, STRATA_EMU_NAME_MAX, name, file ? "/" : "",
           32, file ? file : "");
}

/* --name, which every verb takes. Returns 0, or -1 with the reason printed. */
static int set_name(const char *value, const char **name) {
  if (!strata_emu_name_valid(value)) {
    fprintf(stderr, "netem: --name '%s': expected 1-%d letters, digits, '-' or '_'\n", value,
            STRATA_EMU_NAME_MAX);
    return -1;
  }
  *name = value;
  return 0;
}

#define NETEM_OPT_NAME 'N'
#define NETEM_NAME_OPTION \
  { "name", required_argument, 0, NETEM_OPT_NAME }
#define NETEM_HELP_OPTION \
  { "help", no_argument, 0, 'h' }
#define NETEM_HELP 1 /* a parser's return: --help was asked for and printed */

/* Starts a getopt scan of one verb's arguments (argv[0] is the verb). */
static void getopt_reset(void) {
  optind = 0; /* glibc: a fresh scan */
  opterr = 0;
}

/* The message for getopt's '?' or ':' (the option is argv[optind - 1]). */
static int getopt_complaint(const char *verb, int letter, char **argv) {
  fprintf(stderr, "netem %s: %s '%s'\n", verb,
          letter == ':' ? "missing value after" : "unknown option", argv[optind - 1]);
  return -1;
}

/* Verbs that take --name alone (down, status, list): 0, NETEM_HELP, or -1 with the reason
 * printed. */
static int parse_name_only(const char *verb, int argc, char **argv, const char **name) {
  static const struct option options[] = {NETEM_NAME_OPTION, NETEM_HELP_OPTION, {0, 0, 0, 0}};
  getopt_reset();
  for (int letter; (letter = getopt_long(argc, argv, ":h", options, NULL)) != -1;) {
    if (letter == 'h') return netem_usage(stdout), NETEM_HELP;
    if (letter != NETEM_OPT_NAME) return getopt_complaint(verb, letter, argv);
    if (set_name(optarg, name)) return -1;
  }
  if (optind < argc) {
    fprintf(stderr, "netem %s: unexpected arguments\n", verb);
    return -1;
  }
  return 0;
}

/* ---- up ---- */

typedef struct netem_up_options {
  strata_emu_forwarder_config fwd;
  strata_emu_site_options site;
  long ranks_per_site;
  int foreground;
  const char *specs[256];
  int nspecs;
} netem_up_options;

static int parse_site(const char *text, int nsites, int *site) {
  long v;
  if (parse_long(text, 0, nsites - 1, &v)) return -1;
  *site = (int)v;
  return 0;
}

/* Applies one --link SPEC to the link table. */
static int apply_spec(netem_up_options *o, const char *spec) {
  int n = o->fwd.nsites;
  const char *colon = strchr(spec, ':');
  if (!colon) {
    fprintf(stderr, "netem: --link '%s': expected A-B:PARAMS, A>B:PARAMS or *:PARAMS\n", spec);
    return -1;
  }
  char pair[32];
  size_t len = (size_t)(colon - spec);
  if (len >= sizeof pair) len = sizeof pair - 1;
  memcpy(pair, spec, len);
  pair[len] = 0;
  int all = !strcmp(pair, "*"), a = -1, b = -1, both = 0;
  if (!all) {
    char *sep = strpbrk(pair, "->");
    if (!sep) {
      fprintf(stderr, "netem: --link '%s': expected A-B or A>B before ':'\n", spec);
      return -1;
    }
    both = *sep == '-';
    *sep = 0;
    if (parse_site(pair, n, &a) || parse_site(sep + 1, n, &b) || a == b) {
      fprintf(stderr, "netem: --link '%s': sites must be two different numbers in 0..%d\n", spec,
              n - 1);
      return -1;
    }
  }
  char err[256];
  for (int src = 0; src < n; src++) {
    for (int dst = 0; dst < n; dst++) {
      if (src == dst) continue;
      int hit = all || (src == a && dst == b) || (both && src == b && dst == a);
      if (hit &&
          strata_emu_link_params_parse(colon + 1, &o->fwd.links[src][dst], err, sizeof err)) {
        fprintf(stderr, "netem: --link '%s': %s\n", spec, err);
        return -1;
      }
    }
  }
  return 0;
}

enum {
  UP_SITES = 1000,
  UP_RANKS_PER_SITE,
  UP_LINK,
  UP_MTU,
  UP_CC,
  UP_TCP_MEM_MAX,
  UP_SEED,
  UP_LIFETIME,
  UP_REALTIME_PRIORITY,
  UP_POOL,
  UP_FOREGROUND,
  UP_NO_OFFLOAD
};

/* One option of `netem up`. Returns 0, or -1 when its value is bad. */
static int apply_up_option(int letter, const char *val, netem_up_options *o) {
  long v;
  double seconds;
  char err[256];
  switch (letter) {
    case UP_FOREGROUND:
      o->foreground = 1;
      return 0;
    case UP_NO_OFFLOAD:
      o->site.offload = 0; /* one packet per read/write, as on a link without TSO */
      return 0;
    case UP_SITES:
      if (parse_long(val, 2, STRATA_EMU_MAX_SITES, &v)) return -1;
      o->fwd.nsites = (int)v;
      return 0;
    case UP_RANKS_PER_SITE:
      return parse_long(val, 1, NETEM_MAX_RANKS_PER_SITE, &o->ranks_per_site);
    case UP_LINK:
      if (o->nspecs >= (int)(sizeof o->specs / sizeof o->specs[0])) return -1;
      o->specs[o->nspecs++] = val;
      return 0;
    case UP_MTU:
      if (parse_long(val, STRATA_EMU_MTU_MIN, STRATA_EMU_MTU_MAX, &v)) return -1;
      o->fwd.mtu = o->site.mtu = (uint32_t)v;
      return 0;
    case UP_CC:
      o->site.congestion_control = val;
      return 0;
    case UP_TCP_MEM_MAX: {
      if (!strcmp(val, "host")) {
        o->site.tcp_mem_max_bytes = 0; /* the host's own values, as a user would have them */
        return 0;
      }
      strata_emu_link_params scratch = {0};
      char spec[64];
      snprintf(spec, sizeof spec, "queue=%s", val);
      if (strata_emu_link_params_parse(spec, &scratch, err, sizeof err) ||
          scratch.queue_bytes < 65536)
        return -1;
      o->site.tcp_mem_max_bytes = scratch.queue_bytes;
      return 0;
    }
    case UP_SEED:
      if (parse_long(val, 0, 0x7fffffffL, &v)) return -1;
      o->fwd.seed = (uint64_t)v;
      return 0;
    case UP_LIFETIME:
      if (parse_seconds(val, 1, 7 * 86400, &seconds)) return -1;
      o->fwd.lifetime_s = seconds;
      return 0;
    case UP_REALTIME_PRIORITY:
      if (parse_long(val, 0, 99, &v)) return -1;
      o->fwd.realtime_priority = (int)v;
      return 0;
    case UP_POOL:
      if (parse_long(val, 1024, 1 << 22, &v)) return -1;
      o->fwd.pool_packets = (uint32_t)v;
      return 0;
    default:
      return -1;
  }
}

static int parse_up(int argc, char **argv, netem_up_options *o, const char **name) {
  static const struct option options[] = {
      {"sites", required_argument, 0, UP_SITES},
      {"ranks-per-site", required_argument, 0, UP_RANKS_PER_SITE},
      {"link", required_argument, 0, UP_LINK},
      {"mtu", required_argument, 0, UP_MTU},
      {"cc", required_argument, 0, UP_CC},
      {"tcp-mem-max", required_argument, 0, UP_TCP_MEM_MAX},
      {"seed", required_argument, 0, UP_SEED},
      {"lifetime", required_argument, 0, UP_LIFETIME},
      {"realtime-priority", required_argument, 0, UP_REALTIME_PRIORITY},
      {"pool", required_argument, 0, UP_POOL},
      {"foreground", no_argument, 0, UP_FOREGROUND},
      {"no-offload", no_argument, 0, UP_NO_OFFLOAD},
      NETEM_NAME_OPTION,
      NETEM_HELP_OPTION,
      {0, 0, 0, 0}};
  o->fwd.nsites = 0;
  o->fwd.mtu = 1500;
  o->fwd.ready_fd = -1;
  o->fwd.realtime_priority = 10;
  o->site.mtu = 1500;
  o->site.tcp_mem_max_bytes = 64ull << 20;
  o->site.offload = 1;
  o->ranks_per_site = 1;
  getopt_reset();
  int index = 0;
  for (int letter; (letter = getopt_long(argc, argv, ":h", options, &index)) != -1;) {
    if (letter == 'h') return netem_usage(stdout), NETEM_HELP;
    if (letter == '?' || letter == ':') return getopt_complaint("up", letter, argv);
    if (letter == NETEM_OPT_NAME) {
      if (set_name(optarg, name)) return -1;
    } else if (apply_up_option(letter, optarg, o)) {
      fprintf(stderr, "netem up: --%s '%s': bad value\n", options[index].name,
              optarg ? optarg : "");
      return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "netem up: unexpected '%s'\n", argv[optind]);
    return -1;
  }
  if (o->fwd.nsites < 2) {
    fprintf(stderr, "netem up: --sites K (2..%d) is required\n", STRATA_EMU_MAX_SITES);
    return -1;
  }
  for (int s = 0; s < o->nspecs; s++)
    if (apply_spec(o, o->specs[s])) return -1;
  return 0;
}

static void write_config(const char *name, const netem_up_options *o) {
  char path[256];
  state_path(path, sizeof path, name, "config");
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "name %s\nsites %d\nranks_per_site %ld\nmtu %u\ncc %s\ntcp_mem_max %llu\noffload %d\n",
          name, o->fwd.nsites, o->ranks_per_site, o->fwd.mtu,
          o->site.congestion_control ? o->site.congestion_control : "(default)",
          (unsigned long long)o->site.tcp_mem_max_bytes, o->site.offload);
  if (o->fwd.lifetime_s > 0) fprintf(f, "lifetime_s %.0f\n", o->fwd.lifetime_s);
  for (int src = 0; src < o->fwd.nsites; src++) {
    for (int dst = 0; dst < o->fwd.nsites; dst++) {
      if (src == dst) continue;
      char text[512];
      strata_emu_link_params_format(&o->fwd.links[src][dst], text, sizeof text);
      fprintf(f, "link %d>%d %s\n", src, dst, text);
    }
  }
  fclose(f);
}

static void write_pid(const char *name, pid_t pid) {
  char path[256];
  state_path(path, sizeof path, name, "pid");
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "%d\n", (int)pid);
  fclose(f);
}

static void remove_state(const char *name) {
  static const char *files[] = {"pid", "config", "stats", "stats.tmp", "log"};
  char path[256];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    state_path(path, sizeof path, name, files[i]);
    unlink(path);
  }
  state_path(path, sizeof path, name, NULL);
  rmdir(path);
}

/* The forwarder process: runs, then removes everything it stood for. */
static int run_forwarder(const char *name, netem_up_options *o) {
  char stats[256];
  state_path(stats, sizeof stats, name, "stats");
  o->fwd.stats_path = stats;
  strata_emu_forwarder_end end = strata_emu_forwarder_run(&o->fwd);
  for (int k = 0; k < o->fwd.nsites; k++) close(o->fwd.tun_fds[k]);
  strata_emu_sites_destroy(name);
  remove_state(name);
  if (end == STRATA_EMU_END_LIFETIME)
    fprintf(stderr, "netem %s: lifetime of %.0f s reached, removed\n", name, o->fwd.lifetime_s);
  return end == STRATA_EMU_END_ERROR ? 1 : 0;
}

static int daemonize_forwarder(const char *name, netem_up_options *o) {
  int ready[2];
  if (pipe(ready)) return perror("netem: pipe"), -1;
  pid_t pid = fork();
  if (pid < 0) return perror("netem: fork"), -1;
  if (pid == 0) {
    close(ready[0]);
    setsid();
    char log[256];
    state_path(log, sizeof log, name, "log");
    int null_fd = open("/dev/null", O_RDWR);
    int log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (null_fd >= 0) dup2(null_fd, 0), dup2(null_fd, 1);
    if (log_fd >= 0) dup2(log_fd, 2);
    write_pid(name, getpid());
    o->fwd.ready_fd = ready[1];
    _exit(run_forwarder(name, o));
  }
  close(ready[1]);
  struct pollfd pfd = {.fd = ready[0], .events = POLLIN};
  char byte = 0;
  int ok = poll(&pfd, 1, NETEM_READY_TIMEOUT_MS) == 1 && read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  if (!ok) {
    fprintf(stderr, "netem: the forwarder did not start (see %s/%s/log)\n", NETEM_STATE_ROOT, name);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
  }
  return 0;
}

static int netem_check_environment(void) {
  if (geteuid() != 0) {
    fprintf(stderr, "netem: needs root (it creates network namespaces and TUN devices)\n");
    return -1;
  }
  if (access("/dev/net/tun", R_OK | W_OK)) {
    fprintf(stderr, "netem: /dev/net/tun is not usable: %s\n", strerror(errno));
    return -1;
  }
  return 0;
}

static int netem_up_run(int argc, char **argv, netem_up_options *o) {
  const char *name = NETEM_DEFAULT_NAME;
  int parsed = parse_up(argc, argv, o, &name);
  if (parsed) return parsed == NETEM_HELP ? 0 : 2;
  if (netem_check_environment()) return 1;
  mkdir(NETEM_STATE_ROOT, 0755);
  char dir[256];
  state_path(dir, sizeof dir, name, NULL);
  if (mkdir(dir, 0755)) {
    fprintf(stderr, "netem: %s: %s (already up? `strata netem down --name %s`)\n", dir,
            strerror(errno), name);
    return 1;
  }
  char err[512];
  o->site.name = name;
  o->site.nsites = o->fwd.nsites;
  o->fwd.vnet_hdr = o->site.offload;
  if (strata_emu_sites_create(&o->site, o->fwd.tun_fds, err, sizeof err)) {
    fprintf(stderr, "netem up: %s\n", err);
    remove_state(name);
    return 1;
  }
  write_config(name, o);
  if (o->foreground) {
    write_pid(name, getpid());
    printf("netem %s: %d sites up, forwarding in the foreground (Ctrl-C ends)\n", name,
           o->fwd.nsites);
    fflush(stdout);
    return run_forwarder(name, o);
  }
  fflush(stdout);
  fflush(stderr);
  if (daemonize_forwarder(name, o)) {
    for (int k = 0; k < o->fwd.nsites; k++) close(o->fwd.tun_fds[k]);
    strata_emu_sites_destroy(name);
    remove_state(name);
    return 1;
  }
  for (int k = 0; k < o->fwd.nsites; k++) close(o->fwd.tun_fds[k]);
  printf("netem %s: %d sites up (namespaces %s-s0..%s-s%d, site K at 10.77.K.1)\n", name,
         o->fwd.nsites, name, name, o->fwd.nsites - 1);
  return 0;
}

static int netem_up(int argc, char **argv) {
  netem_up_options *options = calloc(1, sizeof *options); /* the link table is ~0.5 MB */
  if (!options) return perror("netem up"), 1;
  int rc = netem_up_run(argc, argv, options);
  free(options);
  return rc;
}

/* ---- down, status ---- */

static pid_t read_pid(const char *name) {
  char path[256];
  state_path(path, sizeof path, name, "pid");
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int pid = -1;
  if (fscanf(f, "%d", &pid) != 1) pid = -1;
  fclose(f);
  return pid > 1 ? pid : -1;
}

/* 1 if pid is alive and is a strata process (guards against a recycled pid). */
static int forwarder_alive(pid_t pid) {
  if (pid <= 1 || kill(pid, 0)) return 0;
  char path[64], comm[64] = "";
  snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
  fclose(f);
  char stat_path[64], state = 0;
  snprintf(stat_path, sizeof stat_path, "/proc/%d/stat", (int)pid);
  FILE *s = fopen(stat_path, "r");
  if (s) {
    if (fscanf(s, "%*d %*s %c", &state) != 1) state = 0;
    fclose(s);
  }
  return strstr(comm, "strata") != NULL && state != 'Z';
}

static int netem_down(int argc, char **argv) {
  const char *name = NETEM_DEFAULT_NAME;
  int parsed = parse_name_only("down", argc, argv, &name);
  if (parsed) return parsed == NETEM_HELP ? 0 : 2;
  pid_t pid = read_pid(name);
  int stopped = 0;
  if (forwarder_alive(pid)) {
    kill(pid, SIGTERM);
    uint64_t deadline = mono_ns() + (uint64_t)NETEM_STOP_TIMEOUT_MS * 1000000ull;
    while (forwarder_alive(pid) && mono_ns() < deadline) usleep(10000);
    if (forwarder_alive(pid)) kill(pid, SIGKILL);
    stopped = 1;
  }
  int removed = strata_emu_sites_destroy(name);
  remove_state(name);
  printf("netem %s: %s, %d namespace%s removed\n", name,
         stopped ? "forwarder stopped" : "no forwarder running", removed, removed == 1 ? "" : "s");
  return 0;
}

static void print_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) printf("  %s", line);
  fclose(f);
}

static int64_t mtime_ns(const char *path) {
  struct stat st;
  if (stat(path, &st)) return -1;
  return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

/* Asks the forwarder (SIGUSR1) for fresh counters and waits up to 1 s for the file to change. */
static void refresh_stats(pid_t pid, const char *path) {
  int64_t before = mtime_ns(path);
  if (kill(pid, SIGUSR1)) return;
  for (int i = 0; i < 200 && mtime_ns(path) == before; i++) usleep(5000);
}

static int netem_status(int argc, char **argv) {
  const char *name = NETEM_DEFAULT_NAME;
  int parsed = parse_name_only("status", argc, argv, &name);
  if (parsed) return parsed == NETEM_HELP ? 0 : 2;
  char dir[256], path[256];
  state_path(dir, sizeof dir, name, NULL);
  if (access(dir, F_OK)) {
    printf("netem %s: down\n", name);
    return 1;
  }
  pid_t pid = read_pid(name);
  printf("netem %s: forwarder %s (pid %d)\n", name,
         forwarder_alive(pid) ? "running" : "NOT running", (int)pid);
  state_path(path, sizeof path, name, "config");
  print_file(path);
  state_path(path, sizeof path, name, "stats");
  if (forwarder_alive(pid)) refresh_stats(pid, path);
  print_file(path);
  return forwarder_alive(pid) ? 0 : 1;
}

/* Every emulation this host has state for, and whether its forwarder runs. */
static int netem_list(int argc, char **argv) {
  const char *name = NETEM_DEFAULT_NAME;
  int parsed = parse_name_only("list", argc, argv, &name);
  if (parsed) return parsed == NETEM_HELP ? 0 : 2;
  DIR *dir = opendir(NETEM_STATE_ROOT);
  int count = 0;
  for (struct dirent *e; dir && (e = readdir(dir));) {
    if (e->d_name[0] == '.' || !strata_emu_name_valid(e->d_name)) continue;
    pid_t pid = read_pid(e->d_name);
    printf("%s %s\n", e->d_name, forwarder_alive(pid) ? "running" : "stale (run down)");
    count++;
  }
  if (dir) closedir(dir);
  if (!count) printf("no emulated WAN is up\n");
  return 0;
}

/* ---- exec ---- */

static int netem_exec(int argc, char **argv) {
  static const struct option options[] = {NETEM_NAME_OPTION, NETEM_HELP_OPTION, {0, 0, 0, 0}};
  const char *name = NETEM_DEFAULT_NAME;
  getopt_reset();
  /* "+": the options end at SITE; what follows belongs to the command */
  for (int letter; (letter = getopt_long(argc, argv, "+:h", options, NULL)) != -1;) {
    if (letter == 'h') return netem_usage(stdout), 0;
    if (letter != NETEM_OPT_NAME) return getopt_complaint("exec", letter, argv), 2;
    if (set_name(optarg, &name)) return 2;
  }
  if (optind >= argc) {
    fprintf(stderr, "netem exec: expected SITE [--] CMD ARGS...\n");
    return 2;
  }
  long site;
  if (parse_long(argv[optind], 0, STRATA_EMU_MAX_SITES - 1, &site)) {
    fprintf(stderr, "netem exec: SITE '%s': expected a site number\n", argv[optind]);
    return 2;
  }
  int first = optind + 1;
  if (first < argc && !strcmp(argv[first], "--")) first++;
  if (first >= argc) {
    fprintf(stderr, "netem exec: no command given\n");
    return 2;
  }
  char err[256], addr[32], text[16];
  if (strata_emu_site_enter(name, (int)site, err, sizeof err)) {
    fprintf(stderr, "netem exec: %s\n", err);
    return 1;
  }
  strata_emu_site_address(addr, sizeof addr, (int)site);
  snprintf(text, sizeof text, "%ld", site);
  setenv("STRATA_NETEM_SITE", text, 1);
  setenv("STRATA_NETEM_ADDR", addr, 1);
  setenv("STRATA_HOST", addr, 0); /* ranks advertise the site's address unless told otherwise */
  execvp(argv[first], argv + first);
  fprintf(stderr, "netem exec: %s: %s\n", argv[first], strerror(errno));
  return 127;
}

/* ---- ping ---- */

typedef struct ping_options {
  int from, to;
  long count;
  double interval_s, wait_s;
  long size;
  int quiet;
} ping_options;

static uint16_t icmp_checksum(const void *data, size_t len) {
  const unsigned char *p = data;
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
  if (len & 1) sum += (uint32_t)(p[len - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons((uint16_t)~sum);
}

/* ping and owd: FROM TO and ping's own flags, in any order. */
static int parse_ping(const char *verb, int argc, char **argv, ping_options *o, const char **name) {
  static const struct option options[] = {NETEM_NAME_OPTION, NETEM_HELP_OPTION, {0, 0, 0, 0}};
  o->count = 10;
  o->interval_s = 0.2;
  o->wait_s = -1;
  o->size = 56;
  getopt_reset();
  for (int letter; (letter = getopt_long(argc, argv, ":hqc:i:W:s:", options, NULL)) != -1;) {
    int bad = 0;
    switch (letter) {
      case 'h':
        netem_usage(stdout);
        return NETEM_HELP;
      case NETEM_OPT_NAME:
        if (set_name(optarg, name)) return -1;
        break;
      case 'q':
        o->quiet = 1;
        break;
      case 'c':
        bad = parse_long(optarg, 1, NETEM_PING_MAX_COUNT, &o->count);
        break;
      case 'i':
        bad = parse_seconds(optarg, 0.0001, 60, &o->interval_s);
        break;
      case 'W':
        bad = parse_seconds(optarg, 0.01, 60, &o->wait_s);
        break;
      case 's':
        bad = parse_long(optarg, 16, 8000, &o->size);
        break;
      default:
        return getopt_complaint(verb, letter, argv);
    }
    if (bad) {
      fprintf(stderr, "netem %s: -%c %s: bad value\n", verb, letter, optarg);
      return -1;
    }
  }
  long from, to;
  if (argc - optind != 2 || parse_long(argv[optind], 0, STRATA_EMU_MAX_SITES - 1, &from) ||
      parse_long(argv[optind + 1], 0, STRATA_EMU_MAX_SITES - 1, &to) || from == to) {
    fprintf(stderr, "netem %s: expected two different sites FROM TO\n", verb);
    return -1;
  }
  o->from = (int)from;
  o->to = (int)to;
  return 0;
}

typedef struct ping_tally {
  long received;
  double min_ms, max_ms, sum_ms, sum_sq_ms;
  unsigned char *seen;
  double *ms; /* every sample, for the median: one stall of a busy host (tens of ms) moves the
               * average of 50 samples by several percent, the median not at all */
} ping_tally;

static void tally_add(ping_tally *t, double ms) {
  if (!t->received || ms < t->min_ms) t->min_ms = ms;
  if (ms > t->max_ms) t->max_ms = ms;
  t->sum_ms += ms;
  t->sum_sq_ms += ms * ms;
  t->ms[t->received++] = ms;
}

/* The line's tail that ping and owd share: "sent=S received=R loss=L% KIND min=.. avg=.. max=..
 * mdev=.. median=.." (ms). Sorts t->ms. */
static void tally_print(ping_tally *t, long sent, const char *kind) {
  double avg = t->received ? t->sum_ms / (double)t->received : 0;
  double var = t->received ? t->sum_sq_ms / (double)t->received - avg * avg : 0;
  printf("sent=%ld received=%ld loss=%.3f%% %s min=%.3f avg=%.3f max=%.3f mdev=%.3f median=%.3f\n",
         sent, t->received, sent ? 100.0 * (double)(sent - t->received) / (double)sent : 0, kind,
         t->min_ms, avg, t->max_ms, sqrt(var > 0 ? var : 0),
         tool_median(t->ms, (size_t)t->received));
}

static uint64_t real_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Receives one datagram; *at_ns is the kernel's arrival time (SO_TIMESTAMPNS, CLOCK_REALTIME),
 * so a ping process that is scheduled late does not inflate the round trip it reports. */
static ssize_t ping_recv(int fd, unsigned char *buf, size_t bytes, uint64_t *at_ns) {
  char control[256];
  struct iovec iov = {.iov_base = buf, .iov_len = bytes};
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
  ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
  *at_ns = real_ns();
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); n > 0 && c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
      struct timespec ts;
      memcpy(&ts, CMSG_DATA(c), sizeof ts);
      *at_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }
  }
  return n;
}

static void ping_receive(int fd, uint16_t id, const ping_options *o, ping_tally *t) {
  unsigned char buf[9000];
  for (;;) {
    uint64_t now;
    ssize_t n = ping_recv(fd, buf, sizeof buf, &now);
    if (n <= 0) return;
    size_t ihl = (size_t)(buf[0] & 0x0f) * 4;
    if ((size_t)n < ihl + 8 + sizeof(uint64_t)) continue;
    struct icmphdr *h = (struct icmphdr *)(buf + ihl);
    if (h->type != ICMP_ECHOREPLY || ntohs(h->un.echo.id) != id) continue;
    uint16_t seq = ntohs(h->un.echo.sequence);
    uint64_t sent_ns;
    memcpy(&sent_ns, buf + ihl + 8, sizeof sent_ns);
    uint64_t index;
    memcpy(&index, buf + ihl + 8 + sizeof sent_ns, sizeof index);
    if (index >= (uint64_t)o->count || (uint16_t)index != seq || t->seen[index]) continue;
    t->seen[index] = 1;
    double rtt_ms = (double)(now - sent_ns) / 1e6;
    tally_add(t, rtt_ms);
    if (!o->quiet) printf("reply seq=%u rtt=%.3f ms\n", seq, rtt_ms);
  }
}

static int ping_send(int fd, const struct sockaddr_in *to, uint16_t id, long index, long size) {
  unsigned char pkt[8 + 8000];
  memset(pkt, 0, sizeof pkt);
  struct icmphdr *h = (struct icmphdr *)pkt;
  h->type = ICMP_ECHO;
  h->un.echo.id = htons(id);
  h->un.echo.sequence = htons((uint16_t)index);
  uint64_t now = real_ns(), index64 = (uint64_t)index;
  memcpy(pkt + 8, &now, sizeof now);
  memcpy(pkt + 16, &index64, sizeof index64);
  size_t len = 8 + (size_t)size;
  h->checksum = icmp_checksum(pkt, len);
  return sendto(fd, pkt, len, 0, (const struct sockaddr *)to, sizeof *to) == (ssize_t)len ? 0 : -1;
}

static void ping_wait(int fd, uint64_t until_ns) {
  uint64_t now = mono_ns();
  if (until_ns <= now) return;
  struct timespec ts = {.tv_sec = (time_t)((until_ns - now) / 1000000000ull),
                        .tv_nsec = (long)((until_ns - now) % 1000000000ull)};
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  ppoll(&pfd, 1, &ts, NULL);
}

static int netem_ping(int argc, char **argv) {
  const char *name = NETEM_DEFAULT_NAME;
  ping_options o = {0};
  int parsed = parse_ping("ping", argc, argv, &o, &name);
  if (parsed) return parsed == NETEM_HELP ? 0 : 2;
  char err[256], addr[32];
  if (strata_emu_site_enter(name, o.from, err, sizeof err)) {
    fprintf(stderr, "netem ping: %s\n", err);
    return 1;
  }
  int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
  if (fd < 0) {
    fprintf(stderr, "netem ping: raw ICMP socket: %s\n", strerror(errno));
    return 1;
  }
  int rcvbuf = 4 << 20, on = 1;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
  /* Sends on time even on a busy host (a late send only delays, it does not skew the RTT). */
  struct sched_param sp = {.sched_priority = 5};
  sched_setscheduler(0, SCHED_FIFO, &sp);
  strata_emu_site_address(addr, sizeof addr, o.to);
  struct sockaddr_in to = {.sin_family = AF_INET};
  inet_pton(AF_INET, addr, &to.sin_addr);
  uint16_t id = (uint16_t)(getpid() ^ (mono_ns() >> 10));
  ping_tally t = {.seen = calloc((size_t)o.count, 1),
                  .ms = calloc((size_t)o.count, sizeof(double))};
  if (!t.seen || !t.ms) return free(t.seen), free(t.ms), close(fd), 1;
  uint64_t interval_ns = (uint64_t)(o.interval_s * 1e9), next = mono_ns(), last_sent = next;
  long sent = 0;
  for (; sent < o.count; sent++) {
    while (mono_ns() < next) {
      ping_wait(fd, next);
      ping_receive(fd, id, &o, &t);
    }
    if (ping_send(fd, &to, id, sent, o.size)) {
      fprintf(stderr, "netem ping: send: %s\n", strerror(errno));
      break;
    }
    last_sent = mono_ns();
    next += interval_ns;
    ping_receive(fd, id, &o, &t);
  }
  double wait_s = o.wait_s > 0 ? o.wait_s : fmax(1.0, 3 * t.max_ms / 1000);
  uint64_t end = last_sent + (uint64_t)(wait_s * 1e9);
  while (t.received < sent && mono_ns() < end) {
    ping_wait(fd, end);
    ping_receive(fd, id, &o, &t);
  }
  close(fd);
  printf("ping site %d -> %s: ", o.from, addr);
  tally_print(&t, sent, "rtt_ms");
  free(t.seen), free(t.ms);
  return t.received ? 0 : 1;
}

/* ---- owd: one-way delay and loss ---- */

/* A UDP socket bound to 10.77.SITE.1 inside that site, back in the root namespace afterwards
 * (a socket stays in the namespace it was made in). */
static int udp_socket_in_site(const char *name, int site, int root_ns, struct sockaddr_in *addr) {
  char err[256], text[32];
  if (strata_emu_site_enter(name, site, err, sizeof err)) {
    fprintf(stderr, "netem owd: %s\n", err);
    return -1;
  }
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  strata_emu_site_address(text, sizeof text, site);
  memset(addr, 0, sizeof *addr);
  addr->sin_family = AF_INET;
  inet_pton(AF_INET, text, &addr->sin_addr);
  socklen_t len = sizeof *addr;
  if (fd < 0 || bind(fd, (struct sockaddr *)addr, sizeof *addr) ||
      getsockname(fd, (struct sockaddr *)addr, &len)) {
    fprintf(stderr, "netem owd: UDP socket in site %d: %s\n", site, strerror(errno));
    if (fd >= 0) close(fd);
    fd = -1;
  }
  if (setns(root_ns, CLONE_NEWNET)) {
    perror("netem owd: setns back");
    exit(1);
  }
  return fd;
}

static void owd_receive(int fd, const ping_options *o, ping_tally *t) {
  unsigned char buf[9000];
  for (;;) {
    uint64_t now, sent_ns, index;
    ssize_t n = ping_recv(fd, buf, sizeof buf, &now);
    if (n <= 0) return;
    if ((size_t)n < 2 * sizeof(uint64_t)) continue;
    memcpy(&sent_ns, buf, sizeof sent_ns);
    memcpy(&index, buf + sizeof sent_ns, sizeof index);
    if (index >= (uint64_t)o->count || t->seen[index]) continue;
    t->seen[index] = 1;
    double ms = (double)(now - sent_ns) / 1e6;
    tally_add(t, ms);
    if (!o->quiet) printf("datagram %llu delay=%.3f ms\n", (unsigned long long)index, ms);
  }
}

/* Sends UDP datagrams from site FROM to site TO, both ends in this one process, so the sender's
 * and the receiver's clocks are the same clock: the delay printed is one way. */
static int netem_owd(int argc, char **argv) {
  const char *name = NETEM_DEFAULT_NAME;
  ping_options o = {0};
  int parsed = parse_ping("owd", argc, argv, &o, &name);
  if (parsed) return parsed == NETEM_HELP ? 0 : 2;
  int root_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (root_ns < 0) return perror("netem owd: /proc/self/ns/net"), 1;
  struct sockaddr_in rx_addr, tx_addr;
  int rx = udp_socket_in_site(name, o.to, root_ns, &rx_addr);
  int tx = rx >= 0 ? udp_socket_in_site(name, o.from, root_ns, &tx_addr) : -1;
  close(root_ns);
  if (rx < 0 || tx < 0) return 1;
  int rcvbuf = 8 << 20, on = 1;
  setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  setsockopt(rx, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
  struct sched_param sp = {.sched_priority = 5};
  sched_setscheduler(0, SCHED_FIFO, &sp);
  ping_tally t = {.seen = calloc((size_t)o.count, 1),
                  .ms = calloc((size_t)o.count, sizeof(double))};
  unsigned char payload[8000] = {0};
  if (!t.seen || !t.ms) return free(t.seen), free(t.ms), close(rx), close(tx), 1;
  uint64_t interval_ns = (uint64_t)(o.interval_s * 1e9), next = mono_ns(), last_sent = next;
  long sent = 0;
  for (; sent < o.count; sent++) {
    while (mono_ns() < next) {
      ping_wait(rx, next);
      owd_receive(rx, &o, &t);
    }
    uint64_t now = real_ns(), index = (uint64_t)sent;
    memcpy(payload, &now, sizeof now);
    memcpy(payload + sizeof now, &index, sizeof index);
    if (sendto(tx, payload, (size_t)o.size, 0, (struct sockaddr *)&rx_addr, sizeof rx_addr) < 0) {
      fprintf(stderr, "netem owd: send: %s\n", strerror(errno));
      break;
    }
    last_sent = mono_ns();
    next += interval_ns;
  }
  double wait_s = o.wait_s > 0 ? o.wait_s : fmax(1.0, 3 * t.max_ms / 1000);
  uint64_t end = last_sent + (uint64_t)(wait_s * 1e9);
  while (t.received < sent && mono_ns() < end) {
    ping_wait(rx, end);
    owd_receive(rx, &o, &t);
  }
  close(rx);
  close(tx);
  printf("owd site %d -> site %d: ", o.from, o.to);
  tally_print(&t, sent, "delay_ms");
  free(t.seen), free(t.ms);
  return t.received ? 0 : 1;
}

int strata_cmd_netem(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      !strcmp(argv[1], "help")) {
    netem_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *verb = argv[1];
  char **args = argv + 1; /* args[0] is the verb, as getopt wants argv[0] */
  int n = argc - 1;
  if (!strcmp(verb, "up")) return netem_up(n, args);
  if (!strcmp(verb, "down")) return netem_down(n, args);
  if (!strcmp(verb, "status")) return netem_status(n, args);
  if (!strcmp(verb, "list")) return netem_list(n, args);
  if (!strcmp(verb, "exec")) return netem_exec(n, args);
  if (!strcmp(verb, "ping")) return netem_ping(n, args);
  if (!strcmp(verb, "owd")) return netem_owd(n, args);
  fprintf(stderr, "netem: unknown subcommand '%s'\n", verb);
  netem_usage(stderr);
  return 2;
}
