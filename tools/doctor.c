// SPDX-License-Identifier: Apache-2.0
/*
 * doctor.c — `strata doctor`: is this node, and this job, ready to move data? (docs/doctor.md)
 *
 * Alone, it runs the node checks (doctor_checks.c) and prints each with its grade and fix.
 * Under a launcher (`strata launch`, torchrun, mpirun, srun: a world of more than one rank, read
 * from the environment as every rank reads it, src/boot/env.c), every rank runs the node checks
 * where it runs, rank 0 gathers them, adds what only the job can see (ranks per node against its
 * CPUs, checks whose grade differs between nodes, the clock offsets between nodes), and the job
 * runs a short `strata bench` sweep (tools/bench.h: the very benchmark, with --predict) whose
 * rows are judged against the model's prediction.
 *
 * The verdict band is docs/model.md's: a row is "within" when predicted/measured busbw lies in
 * [0.75, 1.25], the band the model's accuracy is stated and tracked in (bench/predict.sh). One
 * row is one run on one host in one state, so the sweep is judged by the median of its rows: a
 * median outside the band is a WARN (the host's load or state is not what it was calibrated
 * at), never a FAIL; a FAIL is a collective that failed or gave wrong bytes.
 *
 * Exit status, the same on every rank: 0 when nothing FAILed, 1 when something did, 2 for bad
 * usage or input. Only rank 0 prints. The report goes to stdout, as text or, with --json, as one
 * JSON document of the same content; the bench's own nccl-tests table goes to stderr.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "commands.h"
#include "doctor.h"
#include "planner.h"
#include "strata.h"
#include "util.h"

#define DOCTOR_EXIT_OK 0
#define DOCTOR_EXIT_FAIL 1
#define DOCTOR_EXIT_USAGE 2
#define DOCTOR_JSON_FORMAT 1
#define DOCTOR_BAND_LOW 0.75
#define DOCTOR_BAND_HIGH 1.25
#define DOCTOR_WRAP_COLUMNS 100
#define DOCTOR_CLOCK_ROUNDS 3
#define DOCTOR_CLOCK_WARN_MS 10.0 /* beyond this, two nodes' log lines mislead about order */

/* The sweep: allreduce (the collective training runs) from 64 KiB (latency-bound) to 16 MiB
 * (bandwidth-bound) by 4x, few iterations: seconds on loopback, enough to see a broken path. */
static char *doctor_sweep_argv[] = {"bench", "allreduce", "-b", "64K", "-e", "16M", "-f",       "4",
                                    "-n",    "10",        "-w", "3",   "-c", "1",   "--predict"};
#define DOCTOR_SWEEP_ARGC ((int)(sizeof doctor_sweep_argv / sizeof doctor_sweep_argv[0]))

typedef struct doctor_options {
  int json;
  int sweep;
  int ranks; /* 0 = not given */
  char root[4096];
  const char *topo_path;
  doctor_link *links;
  int links_count;
} doctor_options;

/* What rank 0 holds at the end: every rank's node report, the job's own checks, the sweep. */
typedef struct doctor_job {
  int nranks;
  int nodes;
  doctor_report *reports; /* nranks of them (one when alone) */
  int *node_of;           /* rank -> index of the first rank on its node */
  doctor_report job;      /* the job's checks (host unused) */
  int has_job;
  bench_sweep_row *rows;
  size_t rows_count;
  int sweep_ran;
  int sweep_status;
} doctor_job;

static void doctor_usage(FILE *out) {
  fprintf(out,
          "usage: strata doctor [--json] [--link GBPS,RTT_MS]... [--topo FILE] [--ranks N]\n"
          "                     [--root DIR] [--no-sweep]\n"
          "  the bring-up check of this node; under a launcher (strata launch -n N -- strata\n"
          "  doctor, torchrun, mpirun) of the job too, with a short bench sweep\n"
          "  --json               the same content as one JSON document\n"
          "  --link GBPS,RTT_MS   a link the TCP buffers must fill (Gb/s, round trip in ms);\n"
          "                       repeat for several\n"
          "  --topo FILE          the links of a topology (.yaml) or a link matrix (strata probe)\n"
          "  --ranks N            ranks of the job, for the open-file check (default: the\n"
          "                       launcher's world size, else this node's CPUs)\n"
          "  --root DIR           read /proc and /sys under DIR (or STRATA_DOCTOR_ROOT), for\n"
          "                       tests and for a node's saved tree\n"
          "  --no-sweep           under a launcher, skip the bench sweep\n"
          "exit status: 0 nothing failed, 1 a check failed, 2 bad usage\n");
}

/* ---------------------------------------------------------------------------------------------
 * Options and links.
 * ------------------------------------------------------------------------------------------- */

static int doctor_add_link(doctor_options *opt, const char *name, double gbit, double rtt_ms) {
  if (opt->links_count == DOCTOR_MAX_LINKS) return 0; /* the widest are kept: callers sort */
  doctor_link *links = realloc(opt->links, (size_t)(opt->links_count + 1) * sizeof *links);
  if (!links) return -1;
  opt->links = links;
  doctor_link *link = &links[opt->links_count++];
  snprintf(link->name, sizeof link->name, "%s", name);
  link->gbit_per_s = gbit;
  link->rtt_ms = rtt_ms;
  return 0;
}

static int doctor_parse_link(doctor_options *opt, const char *text) {
  char *end = NULL;
  errno = 0;
  double gbit = strtod(text, &end);
  if (end == text || *end != ',' || errno || !(gbit > 0) || gbit > 1e6) return -1;
  const char *rtt_text = end + 1;
  double rtt_ms = strtod(rtt_text, &end);
  if (end == rtt_text || *end || errno || !(rtt_ms > 0) || rtt_ms > 1e5) return -1;
  return doctor_add_link(opt, "", gbit, rtt_ms); /* named by its figures */
}

typedef struct doctor_pair {
  int i, j;
  double gbit, rtt_ms;
} doctor_pair;

static int doctor_pair_wider(const void *a, const void *b) {
  const doctor_pair *x = a, *y = b;
  double bx = x->gbit * x->rtt_ms, by = y->gbit * y->rtt_ms;
  return bx < by ? 1 : bx > by ? -1 : 0;
}

/* The pairs of a link matrix between different hosts (hosts unknown: every pair), widest
 * first, up to DOCTOR_MAX_LINKS. */
static int doctor_links_from_matrix(doctor_options *opt, const strata_link_matrix *m) {
  size_t n = (size_t)m->nranks, count = 0;
  doctor_pair *pairs = calloc(n * n + 1, sizeof *pairs);
  if (!pairs) return -1;
  for (int i = 0; i < m->nranks; i++)
    for (int j = i + 1; j < m->nranks; j++) {
      if (m->host[i][0] && !strcmp(m->host[i], m->host[j])) continue;
      double gbytes = strata_link_matrix_bandwidth_gbps(m, i, j);
      double rtt_ms = 2 * strata_link_matrix_latency_us(m, i, j) / 1000;
      if (!(gbytes > 0) || !(rtt_ms > 0) || !isfinite(gbytes) || !isfinite(rtt_ms)) continue;
      pairs[count++] = (doctor_pair){i, j, gbytes * 8, rtt_ms};
    }
  qsort(pairs, count, sizeof *pairs, doctor_pair_wider);
  int status = 0;
  for (size_t k = 0; k < count && !status && opt->links_count < DOCTOR_MAX_LINKS; k++) {
    char name[DOCTOR_LINK_NAME_BYTES];
    snprintf(name, sizeof name, "ranks %d-%d", pairs[k].i, pairs[k].j);
    status = doctor_add_link(opt, name, pairs[k].gbit, pairs[k].rtt_ms);
  }
  free(pairs);
  return status;
}

/* The TCP links between sites of a topology, as the planner models them. A stream joins two
 * nodes, so the rate a pair of ranks can fill is the link's, but no more than a node's NICs
 * (the fastest node at either end); an extension carries RDMA across, not TCP, and is left out. */
static int doctor_links_from_topology(doctor_options *opt, const strata_topo *topo) {
  strata_workload workload;
  strata_workload_defaults(&workload, strata_workload_auto(topo));
  for (int l = 0; l < topo->link_count; l++) {
    strata_wan_model model;
    strata_plan_wan_model(topo, l, &workload, &model);
    if (model.is_extension || !(model.gbps > 0) || !(model.rtt_ms > 0)) continue;
    double gbit = model.gbps * 8, nic_gbit = 0;
    for (int g = 0; g < topo->group_count; g++) {
      const strata_topo_node_group *group = &topo->groups[g];
      if (group->site != topo->links[l].site_a && group->site != topo->links[l].site_b) continue;
      double node_gbit = strata_plan_node_nic_gbit(&group->spec);
      if (node_gbit > nic_gbit) nic_gbit = node_gbit;
    }
    if (nic_gbit > 0 && nic_gbit < gbit) gbit = nic_gbit;
    if (doctor_add_link(opt, topo->links[l].name, gbit, model.rtt_ms)) return -1;
  }
  return 0;
}

static int doctor_has_suffix(const char *path, const char *suffix) {
  size_t n = strlen(path), k = strlen(suffix);
  return n >= k && !strcmp(path + n - k, suffix);
}

static int doctor_load_topo(doctor_options *opt) {
  char err[512] = "";
  const char *path = opt->topo_path;
  if (doctor_has_suffix(path, ".yaml") || doctor_has_suffix(path, ".yml")) {
    strata_topo *topo = NULL;
    if (strata_topo_load_file(path, &topo, err, sizeof err) != STRATA_OK) {
      fprintf(stderr, "strata doctor: --topo %s\n", err);
      return -1;
    }
    int status = doctor_links_from_topology(opt, topo);
    strata_topo_free(topo);
    if (status) fprintf(stderr, "strata doctor: out of memory\n");
    return status;
  }
  strata_link_matrix matrix;
  if (strata_link_matrix_load(&matrix, path, err, sizeof err) != STRATA_OK) {
    fprintf(stderr,
            "strata doctor: --topo %s: %s (want a topology .yaml or a link matrix from strata "
            "probe)\n",
            path, err);
    return -1;
  }
  int status = doctor_links_from_matrix(opt, &matrix);
  strata_link_matrix_free(&matrix);
  if (status) fprintf(stderr, "strata doctor: out of memory\n");
  return status;
}

/* The root to read under: "" for the real one, else the directory without a trailing '/'. */
static int doctor_set_root(doctor_options *opt, const char *dir) {
  struct stat st;
  if (!dir[0] || stat(dir, &st) || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "strata doctor: root '%s': not a directory\n", dir);
    return -1;
  }
  snprintf(opt->root, sizeof opt->root, "%s", dir);
  size_t n = strlen(opt->root);
  while (n > 0 && opt->root[n - 1] == '/') opt->root[--n] = '\0';
  return 0;
}

/* Returns 0, -1 for --help, or DOCTOR_EXIT_USAGE (said why). */
static int doctor_parse(int argc, char **argv, doctor_options *opt) {
  static const struct option long_options[] = {
      {"json", no_argument, 0, 'j'},       {"link", required_argument, 0, 'l'},
      {"topo", required_argument, 0, 't'}, {"ranks", required_argument, 0, 'n'},
      {"root", required_argument, 0, 'r'}, {"no-sweep", no_argument, 0, 's'},
      {"help", no_argument, 0, 'h'},       {0, 0, 0, 0}};
  memset(opt, 0, sizeof *opt);
  opt->sweep = 1;
  const char *root = getenv("STRATA_DOCTOR_ROOT");
  optind = 0;
  opterr = 0;
  for (;;) {
    int letter = getopt_long(argc, argv, "h", long_options, NULL);
    if (letter == -1) break;
    char *end = NULL;
    long value = 0;
    switch (letter) {
      case 'h':
        return -1;
      case 'j':
        opt->json = 1;
        break;
      case 's':
        opt->sweep = 0;
        break;
      case 'r':
        root = optarg;
        break;
      case 't':
        opt->topo_path = optarg;
        break;
      case 'l':
        if (doctor_parse_link(opt, optarg)) {
          fprintf(stderr,
                  "strata doctor: --link '%s': want GBPS,RTT_MS, both > 0 (e.g. --link 100,40 "
                  "for 100 Gb/s at 40 ms)\n",
                  optarg);
          return DOCTOR_EXIT_USAGE;
        }
        break;
      case 'n':
        errno = 0;
        value = strtol(optarg, &end, 10);
        if (end == optarg || *end || errno || value < 1 || value > 1000000) {
          fprintf(stderr, "strata doctor: --ranks '%s': want an integer from 1 to 1000000\n",
                  optarg);
          return DOCTOR_EXIT_USAGE;
        }
        opt->ranks = (int)value;
        break;
      default:
        fprintf(stderr, "strata doctor: '%s': unknown option or missing value (see --help)\n",
                argv[optind - 1]);
        return DOCTOR_EXIT_USAGE;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "strata doctor: '%s': unexpected argument (see --help)\n", argv[optind]);
    return DOCTOR_EXIT_USAGE;
  }
  if (root && root[0] && doctor_set_root(opt, root)) return DOCTOR_EXIT_USAGE;
  if (opt->topo_path) {
    int given = opt->links_count;
    if (doctor_load_topo(opt)) return DOCTOR_EXIT_USAGE;
    if (opt->links_count == given)
      fprintf(stderr,
              "strata doctor: --topo %s: no TCP link between nodes in it (one site, fabric "
              "extensions only, or one host): the TCP buffers are judged without it\n",
              opt->topo_path);
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The job: gather, clock offsets, job checks, the sweep.
 * ------------------------------------------------------------------------------------------- */

static double doctor_wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Collective. Rank 0 estimates each other node's wall-clock offset (NTP's way: its time against
 * the middle of our round trip to it; the round with the shortest trip of a few) on the first
 * rank r of that node: offsets_ms[r] on rank 0, with half that round trip, which bounds the
 * estimate's error, in error_ms[r]. */
static int doctor_clock_offsets(strata_comm *comm, const doctor_job *job, double *offsets_ms,
                                double *error_ms) {
  int rank = strata_comm_rank(comm);
  for (int r = 1; r < job->nranks; r++) {
    if (job->node_of[r] != r || job->node_of[r] == job->node_of[0]) continue;
    for (int round = 0; round < DOCTOR_CLOCK_ROUNDS; round++) {
      double value = 0;
      int status = STRATA_OK;
      if (rank == 0) {
        double sent = doctor_wall_s(), sent_mono = tool_now_s();
        status = strata_send(comm, &sent, 1, STRATA_F64, r);
        if (!status) status = strata_recv(comm, &value, 1, STRATA_F64, r);
        double half_ms = (tool_now_s() - sent_mono) / 2 * 1e3;
        double offset_ms = (value - (sent + half_ms * 1e-3)) * 1e3;
        if (!status && (round == 0 || half_ms < error_ms[r])) {
          error_ms[r] = half_ms;
          offsets_ms[r] = offset_ms;
        }
      } else if (rank == r) {
        status = strata_recv(comm, &value, 1, STRATA_F64, 0);
        value = doctor_wall_s();
        if (!status) status = strata_send(comm, &value, 1, STRATA_F64, 0);
      }
      if (status) return status;
    }
  }
  return STRATA_OK;
}

static void doctor_job_check_nodes(doctor_job *job) {
  char crowded[DOCTOR_TEXT_BYTES] = "", differ[DOCTOR_TEXT_BYTES] = "";
  size_t crowded_used = 0, differ_used = 0;
  for (int r = 0; r < job->nranks; r++) {
    if (job->node_of[r] != r) continue;
    int local = 0;
    for (int q = 0; q < job->nranks; q++) local += job->node_of[q] == r;
    if (local > job->reports[r].cpus && crowded_used < sizeof crowded - 1)
      crowded_used += (size_t)snprintf(crowded + crowded_used, sizeof crowded - crowded_used,
                                       "%s%s: %d ranks on %d CPU%s", crowded_used ? ", " : "",
                                       job->reports[r].host, local, job->reports[r].cpus,
                                       job->reports[r].cpus == 1 ? "" : "s");
  }
  const doctor_report *first = &job->reports[0];
  for (int c = 0; c < first->count; c++) {
    for (int r = 1; r < job->nranks; r++) {
      if (job->node_of[r] != r || c >= job->reports[r].count) continue;
      const doctor_check *other = &job->reports[r].checks[c];
      if (other->status == first->checks[c].status) continue;
      if (differ_used < sizeof differ - 1)
        differ_used +=
            (size_t)snprintf(differ + differ_used, sizeof differ - differ_used,
                             "%s%s (%s %s, %s %s)", differ_used ? "; " : "", first->checks[c].id,
                             first->host, doctor_status_name(first->checks[c].status),
                             job->reports[r].host, doctor_status_name(other->status));
      break;
    }
  }
  if (crowded[0] || differ[0]) {
    doctor_add(&job->job, "job_nodes", DOCTOR_WARN,
               crowded[0] && differ[0]
                   ? "run at most one rank per CPU; make the nodes alike (the fixes above, on "
                     "every node): the slowest node sets every collective's pace"
               : crowded[0] ? "run at most one rank per CPU (fewer ranks per node, or more CPUs "
                              "in the job's cpuset)"
                            : "make the nodes alike (the fixes above, on every node): the "
                              "slowest node sets every collective's pace",
               "%d ranks on %d node%s%s%s%s%s", job->nranks, job->nodes, job->nodes == 1 ? "" : "s",
               crowded[0] ? "; more ranks than CPUs: " : "", crowded,
               differ[0] ? "; nodes differ in: " : "", differ);
    return;
  }
  doctor_add(&job->job, "job_nodes", DOCTOR_PASS, NULL,
             "%d ranks on %d node%s, no node with more ranks than CPUs%s", job->nranks, job->nodes,
             job->nodes == 1 ? "" : "s",
             job->nodes > 1 ? ", every check graded alike on every node" : "");
}

static void doctor_job_check_clock(doctor_job *job, const double *offsets_ms,
                                   const double *error_ms) {
  if (job->nodes == 1) {
    doctor_add(&job->job, "job_clock", DOCTOR_PASS, NULL, "one node: one clock");
    return;
  }
  int worst = -1;
  for (int r = 1; r < job->nranks; r++)
    if (job->node_of[r] == r && job->node_of[r] != job->node_of[0] &&
        (worst < 0 || fabs(offsets_ms[r]) > fabs(offsets_ms[worst])))
      worst = r;
  if (worst < 0) return;
  int bad = fabs(offsets_ms[worst]) - error_ms[worst] > DOCTOR_CLOCK_WARN_MS;
  doctor_add(&job->job, "job_clock", bad ? DOCTOR_WARN : DOCTOR_PASS,
             bad ? "synchronize every node's clock (the clock check above: chrony or "
                   "systemd-timesyncd)"
                 : NULL,
             "largest offset from %s: %s %+.3f ms (+-%.3f ms, half the round trip); %s %.0f ms",
             job->reports[0].host, job->reports[worst].host, offsets_ms[worst], error_ms[worst],
             bad ? "beyond" : "within", DOCTOR_CLOCK_WARN_MS);
}

static double doctor_row_ratio(const bench_sweep_row *row) {
  if (isnan(row->predicted_busbw_gbps) || !(row->busbw_gbps > 0)) return NAN;
  return row->predicted_busbw_gbps / row->busbw_gbps;
}

static int doctor_row_within(double ratio) {
  return ratio >= DOCTOR_BAND_LOW && ratio <= DOCTOR_BAND_HIGH;
}

static int doctor_compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void doctor_job_check_sweep(doctor_job *job) {
  if (!job->sweep_ran) {
    doctor_add(&job->job, "job_sweep", DOCTOR_INFO, NULL, "skipped (--no-sweep)");
    return;
  }
  if (job->sweep_status) {
    doctor_add(&job->job, "job_sweep", DOCTOR_FAIL,
               "run it alone for the full story: strata launch -n N -- strata bench allreduce "
               "-b 64K -e 16M -f 4 --predict (STRATA_LOG=info names each peer's transport)",
               "the allreduce sweep %s",
               job->sweep_status == 1 ? "failed or gave wrong results" : "could not start");
    return;
  }
  double ratios[64];
  int count = 0, within = 0;
  for (size_t i = 0; i < job->rows_count && count < 64; i++) {
    double ratio = doctor_row_ratio(&job->rows[i]);
    if (isnan(ratio)) continue;
    ratios[count++] = ratio;
    within += doctor_row_within(ratio);
  }
  if (!count) {
    doctor_add(&job->job, "job_sweep", DOCTOR_WARN, NULL,
               "%zu sizes ran with correct results, but the model gave no prediction "
               "(calibration failed)",
               job->rows_count);
    return;
  }
  qsort(ratios, (size_t)count, sizeof *ratios, doctor_compare_double);
  double median = count % 2 ? ratios[count / 2] : (ratios[count / 2 - 1] + ratios[count / 2]) / 2;
  int inside = doctor_row_within(median);
  doctor_add(&job->job, "job_sweep", inside ? DOCTOR_PASS : DOCTOR_WARN,
             inside ? NULL
                    : "run the sweep again on a quiet node; if it stays outside, compare "
                      "strata bench --predict on a healthy node (docs/model.md)",
             "allreduce, %zu sizes, results correct; %d of %d within [%.2f, %.2f] of the "
             "model's busbw (predicted/measured), median %.2f",
             job->rows_count, within, count, DOCTOR_BAND_LOW, DOCTOR_BAND_HIGH, median);
}

/* Runs the sweep on every rank; rank 0's bench table goes to stderr, so that stdout holds the
 * doctor's report alone (one JSON document with --json). */
static void doctor_run_sweep(strata_comm *comm, doctor_job *job) {
  int saved = -1;
  if (strata_comm_rank(comm) == 0) {
    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    if (saved >= 0) dup2(STDERR_FILENO, STDOUT_FILENO);
  }
  job->sweep_status =
      bench_sweep(comm, DOCTOR_SWEEP_ARGC, doctor_sweep_argv, &job->rows, &job->rows_count);
  job->sweep_ran = 1;
  if (saved >= 0) {
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
  }
}

/* ---------------------------------------------------------------------------------------------
 * Output.
 * ------------------------------------------------------------------------------------------- */

static void doctor_count(const doctor_report *report, int counts[4]) {
  for (int c = 0; c < report->count; c++) counts[report->checks[c].status]++;
}

static void doctor_counts(const doctor_job *job, int counts[4]) {
  memset(counts, 0, 4 * sizeof *counts);
  for (int r = 0; r < job->nranks; r++)
    if (job->node_of[r] == r) doctor_count(&job->reports[r], counts);
  if (job->has_job) doctor_count(&job->job, counts);
}

/* `text` after `indent` columns already used, wrapped at DOCTOR_WRAP_COLUMNS, each further line
 * indented by `indent`. */
static void doctor_print_wrapped(const char *text, int indent) {
  int column = indent;
  const char *p = text;
  while (*p) {
    const char *word_end = strchr(p, ' ');
    int length = word_end ? (int)(word_end - p) : (int)strlen(p);
    if (column > indent && column + 1 + length > DOCTOR_WRAP_COLUMNS) {
      printf("\n%*s", indent, "");
      column = indent;
    } else if (column > indent) {
      putchar(' ');
      column++;
    }
    printf("%.*s", length, p);
    column += length;
    p += length;
    while (*p == ' ') p++;
  }
  putchar('\n');
}

static void doctor_print_checks(const doctor_report *report) {
  for (int c = 0; c < report->count; c++) {
    const doctor_check *check = &report->checks[c];
    printf("  %-4s  %-12s ", doctor_status_name(check->status), check->id);
    doctor_print_wrapped(check->found, 21);
    if (check->fix[0]) {
      printf("%21s", "fix: ");
      doctor_print_wrapped(check->fix, 21);
    }
  }
}

static void doctor_ranks_text(const doctor_job *job, int node, char *out, size_t len) {
  size_t used = 0;
  int count = 0;
  out[0] = '\0';
  for (int r = 0; r < job->nranks && used < len - 1; r++)
    if (job->node_of[r] == node)
      used += (size_t)snprintf(out + used, len - used, "%s%d", count++ ? "," : "", r);
}

static void doctor_print_text(const doctor_options *opt, const doctor_job *job, int exit_status) {
  printf("strata doctor %s: %d node%s%s%s\n", strata_version(), job->nodes,
         job->nodes == 1 ? "" : "s", opt->root[0] ? ", root " : "", opt->root);
  for (int r = 0; r < job->nranks; r++) {
    if (job->node_of[r] != r) continue;
    char ranks[256];
    doctor_ranks_text(job, r, ranks, sizeof ranks);
    printf("\nnode %s%s%s\n", job->reports[r].host, job->has_job ? ", ranks " : "",
           job->has_job ? ranks : "");
    doctor_print_checks(&job->reports[r]);
  }
  if (job->has_job) {
    printf("\njob: %d ranks on %d node%s\n", job->nranks, job->nodes, job->nodes == 1 ? "" : "s");
    doctor_print_checks(&job->job);
    if (job->rows_count) {
      printf("\n  sweep: strata");
      for (int i = 0; i < DOCTOR_SWEEP_ARGC; i++) printf(" %s", doctor_sweep_argv[i]);
      printf("\n  within: predicted/measured busbw in [%.2f, %.2f] (docs/model.md)\n",
             DOCTOR_BAND_LOW, DOCTOR_BAND_HIGH);
      printf("  %12s  %10s  %12s  %12s  %6s  %s\n", "size (B)", "time (us)", "busbw (GB/s)",
             "model (GB/s)", "ratio", "verdict");
      for (size_t i = 0; i < job->rows_count; i++) {
        const bench_sweep_row *row = &job->rows[i];
        double ratio = doctor_row_ratio(row);
        printf("  %12zu  %10.1f  %12.2f  %12.2f  %6.2f  %s\n", row->bytes, row->time_us,
               row->busbw_gbps, row->predicted_busbw_gbps, ratio,
               isnan(ratio)               ? "no prediction"
               : doctor_row_within(ratio) ? "within"
                                          : "outside");
      }
    }
  }
  int counts[4];
  doctor_counts(job, counts);
  printf("\nsummary: %d PASS, %d WARN, %d FAIL, %d INFO; exit %d\n", counts[DOCTOR_PASS],
         counts[DOCTOR_WARN], counts[DOCTOR_FAIL], counts[DOCTOR_INFO], exit_status);
}

static json_t *doctor_json_checks(const doctor_report *report) {
  json_t *list = json_array();
  for (int c = 0; c < report->count; c++) {
    const doctor_check *check = &report->checks[c];
    json_t *item =
        json_pack("{s:s, s:s, s:o}", "id", check->id, "status", doctor_status_name(check->status),
                  "found", strata_json_string(check->found));
    item =
        strata_json_set(item, "fix", check->fix[0] ? strata_json_string(check->fix) : json_null());
    list = strata_json_append(list, item);
  }
  return list;
}

static json_t *doctor_json_sweep(const doctor_job *job) {
  json_t *rows = json_array();
  for (size_t i = 0; i < job->rows_count; i++) {
    const bench_sweep_row *row = &job->rows[i];
    double ratio = doctor_row_ratio(row);
    rows = strata_json_append(
        rows, json_pack("{s:I, s:o, s:o, s:o, s:o, s:s}", "bytes", (json_int_t)row->bytes,
                        "time_us", strata_json_number(row->time_us), "busbw_gbps",
                        strata_json_number(row->busbw_gbps), "predicted_busbw_gbps",
                        strata_json_number(row->predicted_busbw_gbps), "ratio",
                        strata_json_number(ratio), "verdict",
                        isnan(ratio)               ? "no prediction"
                        : doctor_row_within(ratio) ? "within"
                                                   : "outside"));
  }
  json_t *argv = json_array();
  for (int i = 0; i < DOCTOR_SWEEP_ARGC; i++)
    argv = strata_json_append(argv, json_string(doctor_sweep_argv[i]));
  return json_pack("{s:b, s:o, s:[f, f], s:s, s:o}", "ran", job->sweep_ran, "command", argv, "band",
                   DOCTOR_BAND_LOW, DOCTOR_BAND_HIGH, "ratio", "predicted busbw / measured busbw",
                   "rows", rows);
}

static int doctor_print_json(const doctor_options *opt, const doctor_job *job, int exit_status) {
  json_t *nodes = json_array();
  for (int r = 0; r < job->nranks; r++) {
    if (job->node_of[r] != r) continue;
    json_t *ranks = json_array();
    for (int q = 0; q < job->nranks; q++)
      if (job->node_of[q] == r) ranks = strata_json_append(ranks, json_integer(q));
    nodes = strata_json_append(
        nodes, json_pack("{s:o, s:i, s:o, s:o}", "host", strata_json_string(job->reports[r].host),
                         "cpus", job->reports[r].cpus, "ranks", ranks, "checks",
                         doctor_json_checks(&job->reports[r])));
  }
  json_t *job_json = json_null();
  if (job->has_job)
    job_json = json_pack("{s:i, s:i, s:o, s:o}", "ranks", job->nranks, "nodes", job->nodes,
                         "checks", doctor_json_checks(&job->job), "sweep", doctor_json_sweep(job));
  json_t *links = json_array();
  for (int l = 0; l < opt->links_count; l++)
    links = strata_json_append(
        links, json_pack("{s:o, s:o, s:o}", "name", strata_json_string(opt->links[l].name),
                         "gbit_per_s", strata_json_number(opt->links[l].gbit_per_s), "rtt_ms",
                         strata_json_number(opt->links[l].rtt_ms)));
  int counts[4];
  doctor_counts(job, counts);
  json_t *doc =
      json_pack("{s:i, s:s, s:o, s:o, s:o, s:o, s:{s:i, s:i, s:i, s:i}, s:s, s:i}", "doctor_format",
                DOCTOR_JSON_FORMAT, "version", strata_version(), "root",
                strata_json_string(opt->root[0] ? opt->root : "/"), "links", links, "nodes", nodes,
                "job", job_json, "counts", "pass", counts[DOCTOR_PASS], "warn", counts[DOCTOR_WARN],
                "fail", counts[DOCTOR_FAIL], "info", counts[DOCTOR_INFO], "verdict",
                counts[DOCTOR_FAIL]   ? "fail"
                : counts[DOCTOR_WARN] ? "warn"
                                      : "pass",
                "exit_status", exit_status);
  return strata_json_write(stdout, doc, 6);
}

/* ---------------------------------------------------------------------------------------------
 * The command.
 * ------------------------------------------------------------------------------------------- */

static doctor_inputs doctor_inputs_for(const doctor_options *opt, const strata_config *cfg,
                                       int ranks, int local_ranks) {
  doctor_inputs in = {.root = opt->root,
                      .ranks = ranks,
                      .local_ranks = local_ranks,
                      .streams = cfg->tcp_streams,
                      .congestion = cfg->tcp_congestion,
                      .links = opt->links,
                      .links_count = opt->links_count};
  return in;
}

static int doctor_exit_status(const doctor_job *job) {
  int counts[4];
  doctor_counts(job, counts);
  return counts[DOCTOR_FAIL] ? DOCTOR_EXIT_FAIL : DOCTOR_EXIT_OK;
}

static int doctor_output(const doctor_options *opt, const doctor_job *job, int exit_status) {
  if (opt->json) return doctor_print_json(opt, job, exit_status) ? DOCTOR_EXIT_FAIL : exit_status;
  doctor_print_text(opt, job, exit_status);
  return exit_status;
}

/* Alone: this node only, for a job of --ranks ranks (default one per CPU of this node). */
static int doctor_alone(const doctor_options *opt, const strata_config *cfg) {
  doctor_report *report = calloc(1, sizeof *report);
  int node_of = 0;
  if (!report) return DOCTOR_EXIT_FAIL;
  /* the CPU count first, so that the defaults can follow it */
  doctor_inputs probe = doctor_inputs_for(opt, cfg, 1, 1);
  doctor_run_checks(&probe, report);
  int ranks = opt->ranks ? opt->ranks : report->cpus;
  int local = ranks < report->cpus ? ranks : report->cpus;
  doctor_inputs in = doctor_inputs_for(opt, cfg, ranks, local);
  doctor_run_checks(&in, report);
  doctor_job job = {.nranks = 1, .nodes = 1, .reports = report, .node_of = &node_of};
  int status = doctor_output(opt, &job, doctor_exit_status(&job));
  free(report);
  return status;
}

/* Under a launcher: every rank checks its node; rank 0 reports for all. */
static int doctor_in_job(const doctor_options *opt, const strata_config *cfg, strata_comm *comm) {
  int rank = strata_comm_rank(comm), nranks = strata_comm_size(comm);
  doctor_job job = {.nranks = nranks, .has_job = 1};
  char host[DOCTOR_HOST_BYTES] = "";
  doctor_report *mine = calloc(1, sizeof *mine);
  char *hosts = calloc((size_t)nranks, sizeof host);
  job.node_of = calloc((size_t)nranks, sizeof *job.node_of);
  job.reports = calloc(rank == 0 ? (size_t)nranks : 1, sizeof *job.reports);
  double *offsets = calloc((size_t)nranks, sizeof *offsets);
  double *errors = calloc((size_t)nranks, sizeof *errors);
  int status = mine && hosts && job.node_of && job.reports && offsets && errors
                   ? STRATA_OK
                   : STRATA_ERR_NO_MEMORY;
  /* the node a rank is on is the host name the checks read (the root's, in a test tree) */
  if (!status) {
    doctor_inputs probe = doctor_inputs_for(opt, cfg, nranks, 1);
    doctor_run_checks(&probe, mine);
    memcpy(host, mine->host, sizeof host);
    status = strata_allgather(comm, host, hosts, sizeof host, STRATA_U8);
  }
  if (!status) {
    int local = 0;
    for (int r = 0; r < nranks; r++) {
      job.node_of[r] = r;
      for (int q = 0; q < r; q++)
        if (!strncmp(hosts + (size_t)q * sizeof host, hosts + (size_t)r * sizeof host,
                     sizeof host)) {
          job.node_of[r] = q;
          break;
        }
      job.nodes += job.node_of[r] == r;
      local += !strncmp(hosts + (size_t)r * sizeof host, host, sizeof host);
    }
    doctor_inputs in = doctor_inputs_for(opt, cfg, nranks, local);
    doctor_run_checks(&in, mine);
    status = strata_gather(comm, mine, job.reports, sizeof *mine, STRATA_U8, 0);
  }
  if (!status) status = doctor_clock_offsets(comm, &job, offsets, errors);
  if (status) {
    fprintf(stderr, "strata doctor: rank %d: gathering the nodes' checks failed: %s\n", rank,
            strata_strerror(status));
    strata_comm_abort(comm);
  } else {
    if (opt->sweep) doctor_run_sweep(comm, &job);
    if (rank == 0) {
      doctor_job_check_nodes(&job);
      doctor_job_check_clock(&job, offsets, errors);
      doctor_job_check_sweep(&job);
    }
  }
  int exit_status = status ? DOCTOR_EXIT_FAIL : DOCTOR_EXIT_OK;
  if (!status && rank == 0) exit_status = doctor_output(opt, &job, doctor_exit_status(&job));
  fflush(stdout); /* the report is out before any rank learns the verdict and ends the job */
  /* every rank exits as rank 0 does (a launcher reports the worst); a failed sweep has aborted
   * the communicator, and then every rank knows it failed already */
  if (!status && !job.sweep_status) {
    int agreed = exit_status;
    if (strata_broadcast(comm, &exit_status, &agreed, 1, STRATA_I32, 0) == STRATA_OK)
      exit_status = agreed;
  } else if (!status) {
    exit_status = DOCTOR_EXIT_FAIL;
  }
  free(mine);
  free(hosts);
  free(job.node_of);
  free(job.reports);
  free(job.rows);
  free(offsets);
  free(errors);
  return exit_status;
}

int strata_cmd_doctor(int argc, char **argv) {
  doctor_options opt;
  int status = doctor_parse(argc, argv, &opt);
  if (status == -1) {
    doctor_usage(stdout);
    free(opt.links);
    return DOCTOR_EXIT_OK;
  }
  if (status) {
    free(opt.links);
    return status;
  }
  strata_config cfg;
  char err[256] = "";
  strata_config_init(&cfg);
  if (strata_config_from_env(&cfg, err, sizeof err) != STRATA_OK) {
    fprintf(stderr, "strata doctor: %s\n", err);
    free(opt.links);
    return DOCTOR_EXIT_USAGE;
  }
  if (cfg.world_size <= 1) {
    status = doctor_alone(&opt, &cfg);
    free(opt.links);
    return status;
  }
  strata_comm *comm = NULL;
  status = strata_comm_init(&cfg, &comm);
  if (status != STRATA_OK) {
    fprintf(stderr,
            "strata doctor: rank %d: cannot join the job of %d ranks: %s (the launcher's "
            "environment names the rendezvous: STRATA_ADDR, MASTER_ADDR/MASTER_PORT)\n",
            cfg.rank, cfg.world_size, strata_strerror(status));
    free(opt.links);
    return DOCTOR_EXIT_FAIL;
  }
  status = doctor_in_job(&opt, &cfg, comm);
  strata_comm_destroy(comm);
  free(opt.links);
  return status;
}
