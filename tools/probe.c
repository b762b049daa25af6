// SPDX-License-Identifier: Apache-2.0
/*
 * probe.c — `strata probe [--out FILE] [--quick]`: measure latency and bandwidth between every
 * pair of ranks and write a link matrix (docs/link-matrix.md) that `strata place` reads. Runs
 * under `strata launch -n N`, mpirun, srun or torchrun like any strata program.
 *
 * Schedule: a round-robin tournament (the circle method). With n ranks (n+1 if n is odd, one
 * rank idling per round) there are n-1 rounds; each round is a perfect matching, so every rank
 * is in at most one pair and the pairs of a round measure at the same time without sharing a
 * rank. When every rank has a site label (STRATA_SITE), pairs crossing between the same two
 * sites are moved to later rounds so that no two of them share that WAN link in one round (the
 * matrix holds what one pair gets alone; src/plan/place.c models the sharing). A barrier
 * separates rounds, so a pair never competes with a late pair of the round before.
 *
 * A pair (a < b), a leading:
 *  - latency: a few warm-up ping-pongs of 8 bytes, then --pings more (or as many as fit in 1 s,
 *    0.2 s with --quick, but at least 10), each timed by a; the matrix gets the median round
 *    trip / 2 (one-way) in both [a][b] and [b][a];
 *  - bandwidth a -> b, then b -> a: the sender announces a size, streams it in pieces, and
 *    stops its clock at the receiver's 1-byte acknowledgement; bandwidth = bytes / (elapsed -
 *    round trip). Unless --bytes fixes the size, a 1 MiB transfer first estimates the rate and
 *    the measured transfer is sized to take --seconds (0.2 s; 0.02 s with --quick). It runs
 *    three times, each sized by the best rate so far, and the fastest counts: on a long link
 *    the first can still be in TCP slow start.
 * Each cell is written by exactly one rank, so a SUM allreduce assembles the matrix everywhere;
 * rank 0 writes it. The progress bar is on rank 0's stderr and only when that is a terminal.
 *
 * Must never: print anything but errors on ranks other than 0; hang (every call is bounded by
 * the communicator's timeout, STRATA_TIMEOUT).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "planner.h"
#include "strata.h"
#include "util.h"

#define PROBE_WARMUP_PINGS 5
#define PROBE_ESTIMATE_BYTES (1u << 20)
#define PROBE_PIECE_BYTES (4u << 20)
#define PROBE_MIN_BYTES (1u << 20)
#define PROBE_MAX_BYTES (4.0 * 1024 * 1024 * 1024)
#define PROBE_REPEATS 3
#define PROBE_MIN_PINGS 10

typedef struct probe_options {
  const char *out_path;
  int pings;
  double bytes;         /* fixed transfer size per direction; 0 = sized by `seconds` */
  double seconds;       /* target duration of one direction's transfer */
  double ping_budget_s; /* stop pinging after this long, once PROBE_MIN_PINGS are timed */
  int quick, progress;
} probe_options;

typedef struct probe_state {
  strata_comm *comm;
  int rank, size;
  probe_options opt;
  unsigned char *buf;                          /* PROBE_PIECE_BYTES */
  double *latency_us, *bandwidth_gbps;         /* n*n, cells this rank measured */
  char (*host)[STRATA_LINKMATRIX_LABEL_BYTES]; /* every rank's, gathered before measuring */
  char (*site)[STRATA_LINKMATRIX_LABEL_BYTES];
} probe_state;

static void probe_usage(FILE *out) {
  fprintf(out,
          "usage: strata probe [--out FILE] [--quick] [--pings N] [--bytes SIZE]\n"
          "                    [--seconds S] [--progress | --no-progress]\n\n"
          "Measure latency and bandwidth between every pair of ranks and write a link matrix\n"
          "(JSON, or YAML when FILE ends in .yaml/.yml) for 'strata place'. Run it under a\n"
          "launcher: strata launch -n N -- strata probe --out links.json\n\n"
          "  --out FILE      where rank 0 writes the matrix (default '-', stdout)\n"
          "  --quick         20 pings, transfers of ~0.02 s: a fast, rough matrix\n"
          "  --pings N       timed ping-pongs per pair (default 200; fewer if they take over\n"
          "                  1 s, 0.2 s with --quick, but at least 10)\n"
          "  --bytes SIZE    bytes per direction per pair (K, M, G = 2^10.. ; default: sized\n"
          "                  to take --seconds)\n"
          "  --seconds S     target duration of one transfer (default 0.2)\n"
          "  --progress      force the progress bar (default: when stderr is a terminal)\n"
          "  -h, --help      this text\n");
}

static int parse_size(const char *text, double *out) {
  uint64_t bytes;
  if (strata_size_parse(text, &bytes) != STRATA_OK || bytes == 0) return -1;
  *out = (double)bytes;
  return 0;
}

/* Returns -1 to go on, or an exit status. */
static int parse_args(int argc, char **argv, probe_options *o) {
  *o = (probe_options){.out_path = "-", .pings = 0, .seconds = 0, .progress = -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      probe_usage(stdout);
      return 0;
    } else if (!strcmp(a, "--quick")) {
      o->quick = 1;
    } else if (!strcmp(a, "--progress")) {
      o->progress = 1;
    } else if (!strcmp(a, "--no-progress")) {
      o->progress = 0;
    } else if (!strcmp(a, "--out") && v) {
      o->out_path = argv[++i];
    } else if (!strcmp(a, "--pings") && v) {
      long p = strtol(argv[++i], &end, 10);
      if (*end || end == v || p < 1 || p > 1000000) {
        fprintf(stderr, "strata probe: --pings wants 1..1000000, not '%s'\n", v);
        return 2;
      }
      o->pings = (int)p;
    } else if (!strcmp(a, "--bytes") && v) {
      if (parse_size(argv[++i], &o->bytes) || o->bytes > PROBE_MAX_BYTES) {
        fprintf(stderr, "strata probe: --bytes wants a size from 1 to 4G, not '%s'\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--seconds") && v) {
      o->seconds = strtod(argv[++i], &end);
      if (*end || end == v || !(o->seconds > 0) || o->seconds > 60) {
        fprintf(stderr, "strata probe: --seconds wants a duration in (0, 60], not '%s'\n", v);
        return 2;
      }
    } else {
      fprintf(stderr,
              "strata probe: unknown option or missing value: %s\n"
              "(see 'strata probe --help')\n",
              a);
      return 2;
    }
  }
  if (o->pings == 0) o->pings = o->quick ? 20 : 200;
  if (o->seconds == 0) o->seconds = o->quick ? 0.02 : 0.2;
  o->ping_budget_s = o->quick ? 0.2 : 1.0;
  return -1;
}

/* ---- one pair ---- */

/* Ping-pongs; the leader returns the median round trip in *rtt_s. The leader decides when to
 * stop (after --pings timed ones, or at least PROBE_MIN_PINGS once the time budget is spent, so
 * a 100 ms link does not take 20 s) and says so in the first byte: 1 = echo me, 0 = done. */
static int measure_latency(probe_state *p, int peer, int leader, double *rtt_s) {
  unsigned char msg[8] = {1};
  int rc = STRATA_OK;
  if (!leader) {
    while (rc == STRATA_OK) {
      rc = strata_recv(p->comm, msg, 8, STRATA_U8, peer);
      if (rc != STRATA_OK || msg[0] == 0) return rc;
      rc = strata_send(p->comm, msg, 8, STRATA_U8, peer);
    }
    return rc;
  }
  double *rtt = malloc(sizeof(double) * (size_t)p->opt.pings);
  if (!rtt) return STRATA_ERR_NO_MEMORY;
  int timed = 0;
  double deadline = tool_now_s() + p->opt.ping_budget_s;
  for (int k = 0; rc == STRATA_OK && timed < p->opt.pings; k++) {
    if (timed >= PROBE_MIN_PINGS && tool_now_s() > deadline) break;
    double t0 = tool_now_s();
    rc = strata_send(p->comm, msg, 8, STRATA_U8, peer);
    if (rc == STRATA_OK) rc = strata_recv(p->comm, msg, 8, STRATA_U8, peer);
    if (k >= PROBE_WARMUP_PINGS) rtt[timed++] = tool_now_s() - t0;
  }
  msg[0] = 0;
  if (rc == STRATA_OK) rc = strata_send(p->comm, msg, 8, STRATA_U8, peer);
  if (rc == STRATA_OK) {
    *rtt_s = tool_median(rtt, (size_t)timed);
  }
  free(rtt);
  return rc;
}

/* One announced transfer, sender side: returns elapsed seconds until the ack. */
static int send_transfer(probe_state *p, int peer, double bytes, double *elapsed_s) {
  uint64_t header = (uint64_t)bytes;
  int rc = strata_send(p->comm, &header, 1, STRATA_U64, peer);
  double t0 = tool_now_s();
  for (uint64_t left = header; rc == STRATA_OK && left > 0;) {
    size_t piece = left < PROBE_PIECE_BYTES ? (size_t)left : PROBE_PIECE_BYTES;
    rc = strata_send(p->comm, p->buf, piece, STRATA_U8, peer);
    left -= piece;
  }
  unsigned char ack;
  if (rc == STRATA_OK) rc = strata_recv(p->comm, &ack, 1, STRATA_U8, peer);
  *elapsed_s = tool_now_s() - t0;
  return rc;
}

/* Receiver side: transfers until a zero header. */
static int receive_transfers(probe_state *p, int peer) {
  for (;;) {
    uint64_t header = 0;
    int rc = strata_recv(p->comm, &header, 1, STRATA_U64, peer);
    if (rc != STRATA_OK || header == 0) return rc;
    for (uint64_t left = header; rc == STRATA_OK && left > 0;) {
      size_t piece = left < PROBE_PIECE_BYTES ? (size_t)left : PROBE_PIECE_BYTES;
      rc = strata_recv(p->comm, p->buf, piece, STRATA_U8, peer);
      left -= piece;
    }
    unsigned char ack = 1;
    if (rc == STRATA_OK) rc = strata_send(p->comm, &ack, 1, STRATA_U8, peer);
    if (rc != STRATA_OK) return rc;
  }
}

/* Sender side of one direction: GB/s in *gbps. rtt_s is the pair's round trip. */
static double clamp_bytes(double bytes) {
  return fmin(fmax(bytes, PROBE_MIN_BYTES), PROBE_MAX_BYTES);
}

static int send_bandwidth(probe_state *p, int peer, double rtt_s, double *gbps) {
  double elapsed = 0, rate = 0; /* best bytes/s so far */
  int rc = STRATA_OK;
  if (p->opt.bytes == 0) { /* estimate, then size the real transfers to take opt.seconds */
    rc = send_transfer(p, peer, PROBE_ESTIMATE_BYTES, &elapsed);
    rate = PROBE_ESTIMATE_BYTES / fmax(elapsed - rtt_s, elapsed * 0.1);
  }
  /* The best of PROBE_REPEATS, each sized by the best rate so far: the estimate and the first
   * transfer may still be in TCP slow start on a long link. The ack costs a round trip on top
   * of the stream; never let that make the time negative. */
  double best = 0;
  for (int r = 0; r < PROBE_REPEATS && rc == STRATA_OK; r++) {
    double bytes = p->opt.bytes > 0 ? p->opt.bytes : clamp_bytes(rate * p->opt.seconds);
    rc = send_transfer(p, peer, bytes, &elapsed);
    best = fmax(best, bytes / fmax(elapsed - rtt_s, elapsed * 0.5));
    rate = fmax(rate, best);
  }
  *gbps = best / 1e9;
  uint64_t stop = 0;
  if (rc == STRATA_OK) rc = strata_send(p->comm, &stop, 1, STRATA_U64, peer);
  return rc;
}

static int share_rtt(probe_state *p, int peer, int leader, double *rtt_s) {
  if (leader) return strata_send(p->comm, rtt_s, 1, STRATA_F64, peer);
  return strata_recv(p->comm, rtt_s, 1, STRATA_F64, peer);
}

static int measure_pair(probe_state *p, int peer) {
  int leader = p->rank < peer, n = p->size;
  double rtt = 0, gbps = 0;
  int rc = measure_latency(p, peer, leader, &rtt);
  if (rc == STRATA_OK) rc = share_rtt(p, peer, leader, &rtt);
  if (rc != STRATA_OK) return rc;
  if (leader) {
    p->latency_us[(size_t)p->rank * n + peer] = rtt / 2 * 1e6;
    p->latency_us[(size_t)peer * n + p->rank] = rtt / 2 * 1e6;
  }
  for (int dir = 0; dir < 2 && rc == STRATA_OK; dir++) {
    if ((dir == 0) == leader) {
      rc = send_bandwidth(p, peer, rtt, &gbps);
      p->bandwidth_gbps[(size_t)p->rank * n + peer] = gbps;
    } else {
      rc = receive_transfers(p, peer);
    }
  }
  return rc;
}

/* ---- schedule ---- */

/* Partner of `rank` in round `round` of the circle method over m (even) slots; -1 = idle. */
static int partner(int rank, int round, int m, int n) {
  int fixed = m - 1, q;
  if (rank == fixed)
    q = round;
  else if (rank == round)
    q = fixed;
  else
    q = ((2 * round - rank) % (m - 1) + (m - 1)) % (m - 1);
  return q >= n ? -1 : q;
}

static void draw_progress(const probe_state *p, int done, int rounds) {
  if (!p->opt.progress) return;
  int width = 30, filled = rounds ? done * width / rounds : width;
  fprintf(stderr, "\rstrata probe [");
  for (int k = 0; k < width; k++) fputc(k < filled ? '#' : '.', stderr);
  fprintf(stderr, "] round %d/%d", done, rounds);
  if (done == rounds) fputc('\n', stderr);
  fflush(stderr);
}

/* Site of each rank as a small number (labels compared as strings); *nsites = 0 when some rank
 * has no label, and then the schedule cannot know which pairs share a link. */
static int *site_numbers(const probe_state *p, int *nsites) {
  int n = p->size, *site = calloc((size_t)n, sizeof *site);
  *nsites = 0;
  if (!site) return NULL;
  for (int i = 0; i < n; i++)
    if (p->site[i][0] == '\0') return site; /* all zero, nsites 0 */
  for (int i = 0; i < n; i++) {
    site[i] = *nsites;
    for (int j = 0; j < i; j++)
      if (!strcmp(p->site[i], p->site[j])) {
        site[i] = site[j];
        break;
      }
    if (site[i] == *nsites) ++*nsites;
  }
  return site;
}

/* Packs the tournament's pairs, in tournament order, into rounds where no rank is used twice
 * and no two pairs cross between the same two sites (they would share that WAN link and each
 * measure a fraction of it). Without site labels this is the tournament itself. Returns the
 * number of rounds and this rank's partner in each (-1 = idle), or -1 when out of memory. */
static int build_schedule(const probe_state *p, int **partner_out) {
  int n = p->size, m = n + (n % 2), npairs = n * (n - 1) / 2, nsites = 0, nrounds = 0;
  int *pairs = malloc(sizeof(int) * 2 * (size_t)(npairs ? npairs : 1)), k = 0;
  int *site = site_numbers(p, &nsites);
  char *busy = malloc((size_t)n),
       *link = malloc((size_t)(nsites ? nsites : 1) * (nsites ? nsites : 1));
  int *mine = malloc(sizeof(int) * (size_t)(npairs ? npairs : 1));
  if (!pairs || !site || !busy || !link || !mine) {
    free(pairs), free(site), free(busy), free(link), free(mine);
    return -1;
  }
  for (int r = 0; r < m - 1; r++)
    for (int a = 0; a < n; a++) {
      int b = partner(a, r, m, n);
      if (b > a) pairs[2 * k] = a, pairs[2 * k + 1] = b, k++;
    }
  for (int left = npairs; left > 0; nrounds++) {
    memset(busy, 0, (size_t)n);
    if (nsites) memset(link, 0, (size_t)nsites * nsites);
    mine[nrounds] = -1;
    for (int q = 0; q < npairs; q++) {
      int a = pairs[2 * q], b = pairs[2 * q + 1];
      if (a < 0 || busy[a] || busy[b]) continue;
      int lo = nsites ? (site[a] < site[b] ? site[a] : site[b]) : 0;
      int hi = nsites ? (site[a] < site[b] ? site[b] : site[a]) : 0;
      if (lo != hi && link[lo * nsites + hi]) continue;
      if (lo != hi) link[lo * nsites + hi] = 1;
      busy[a] = busy[b] = 1;
      if (a == p->rank) mine[nrounds] = b;
      if (b == p->rank) mine[nrounds] = a;
      pairs[2 * q] = -1;
      left--;
    }
  }
  free(pairs), free(site), free(busy), free(link);
  *partner_out = mine;
  return nrounds;
}

static int run_rounds(probe_state *p) {
  int *peer_in = NULL, rounds = build_schedule(p, &peer_in), rc = STRATA_OK;
  if (rounds < 0) return STRATA_ERR_NO_MEMORY;
  if (p->rank == 0) draw_progress(p, 0, rounds);
  for (int r = 0; r < rounds && rc == STRATA_OK; r++) {
    if (peer_in[r] >= 0) rc = measure_pair(p, peer_in[r]);
    if (rc == STRATA_OK) rc = strata_barrier(p->comm);
    if (p->rank == 0 && rc == STRATA_OK) draw_progress(p, r + 1, rounds);
  }
  free(peer_in);
  return rc;
}

/* ---- assembling and writing ---- */

static void utc_now(char *out, size_t len) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int gather_labels(probe_state *p) {
  char mine[2][STRATA_LINKMATRIX_LABEL_BYTES] = {{0}};
  gethostname(mine[0], sizeof mine[0] - 1);
  snprintf(mine[1], sizeof mine[1], "%s", strata_comm_config(p->comm)->site);
  char(*all)[STRATA_LINKMATRIX_LABEL_BYTES] = calloc((size_t)p->size * 2, sizeof *all);
  p->host = calloc((size_t)p->size, sizeof *p->host);
  p->site = calloc((size_t)p->size, sizeof *p->site);
  if (!all || !p->host || !p->site) {
    free(all);
    return STRATA_ERR_NO_MEMORY;
  }
  int rc = strata_allgather(p->comm, mine, all, sizeof mine, STRATA_U8);
  for (int i = 0; rc == STRATA_OK && i < p->size; i++) {
    memcpy(p->host[i], all[2 * i], STRATA_LINKMATRIX_LABEL_BYTES);
    memcpy(p->site[i], all[2 * i + 1], STRATA_LINKMATRIX_LABEL_BYTES);
    p->host[i][STRATA_LINKMATRIX_LABEL_BYTES - 1] = 0;
    p->site[i][STRATA_LINKMATRIX_LABEL_BYTES - 1] = 0;
  }
  free(all);
  return rc;
}

static void describe_method(const probe_state *p, strata_link_matrix *m) {
  const char *transport =
      p->size > 1 ? strata_comm_transport_name(p->comm, p->rank ? 0 : 1) : "self";
  char size[64];
  if (p->opt.bytes > 0)
    snprintf(size, sizeof size, "%.0f bytes", p->opt.bytes);
  else
    snprintf(size, sizeof size, "sized to ~%g s", p->opt.seconds);
  snprintf(
      m->method, sizeof m->method,
      "strata probe: latency = median of up to %d ping-pongs of 8 B / 2; bandwidth = best of 3 "
      "transfers per direction (%s) until acknowledged, minus one round trip; "
      "round-robin pairs; transport %s",
      p->opt.pings, size, transport);
}

static int assemble_and_write(probe_state *p, const char *started) {
  strata_link_matrix m;
  int rc = strata_link_matrix_alloc(&m, p->size);
  if (rc != STRATA_OK) return rc;
  size_t cells = (size_t)p->size * (size_t)p->size;
  rc = strata_allreduce(p->comm, p->latency_us, m.latency_us, cells, STRATA_F64, STRATA_SUM);
  if (rc == STRATA_OK)
    rc = strata_allreduce(p->comm, p->bandwidth_gbps, m.bandwidth_gbps, cells, STRATA_F64,
                          STRATA_SUM);
  if (rc == STRATA_OK) {
    memcpy(m.host, p->host, (size_t)p->size * sizeof *p->host);
    memcpy(m.site, p->site, (size_t)p->size * sizeof *p->site);
  }
  if (rc == STRATA_OK && p->rank == 0) {
    snprintf(m.measured, sizeof m.measured, "%s", started);
    /* bandwidth over TCP is striped over the communicator's streams per pair (shm: not a
     * stream count) */
    for (int peer = 0; peer < p->size; peer++)
      if (!strcmp(strata_comm_transport_name(p->comm, peer), "tcp"))
        m.streams = strata_comm_config(p->comm)->tcp_streams;
    describe_method(p, &m);
    char err[512];
    if (strata_link_matrix_save(&m, p->opt.out_path, err, sizeof err) != STRATA_OK) {
      fprintf(stderr, "strata probe: %s\n", err);
      rc = STRATA_ERR_SYSTEM;
    }
  }
  strata_link_matrix_free(&m);
  return rc;
}

int strata_cmd_probe(int argc, char **argv) {
  probe_state p = {0};
  int rc = parse_args(argc, argv, &p.opt);
  if (rc >= 0) return rc;
  /* The matrix holds what the path carries, so the window governor (src/net/tcp_govern.c) stays
   * out even when the job's environment sets STRATA_TCP_GOVERN=1 for the training run: the
   * probe's transfers last 0.2 s, about the time the governor needs to see the rate stop growing,
   * and a hold taken from that startup reads the link well below its rate. */
  strata_config cfg;
  char cfg_err[512];
  strata_config_init(&cfg);
  rc = strata_config_from_env(&cfg, cfg_err, sizeof cfg_err);
  if (rc != STRATA_OK) {
    fprintf(stderr, "strata probe: %s\n", cfg_err[0] ? cfg_err : strata_strerror(rc));
    return 1;
  }
  cfg.tcp_govern = 0;
  rc = strata_comm_init(&cfg, &p.comm);
  if (rc != STRATA_OK) {
    fprintf(stderr, "strata probe: cannot join the job: %s (run under 'strata launch -n N')\n",
            strata_strerror(rc));
    return 1;
  }
  p.rank = strata_comm_rank(p.comm);
  p.size = strata_comm_size(p.comm);
  if (p.opt.progress < 0) p.opt.progress = isatty(2);
  size_t cells = (size_t)p.size * (size_t)p.size;
  p.buf = calloc(PROBE_PIECE_BYTES, 1);
  p.latency_us = calloc(cells, sizeof *p.latency_us);
  p.bandwidth_gbps = calloc(cells, sizeof *p.bandwidth_gbps);
  char started[64];
  utc_now(started, sizeof started);
  if (!p.buf || !p.latency_us || !p.bandwidth_gbps) rc = STRATA_ERR_NO_MEMORY;
  if (rc == STRATA_OK) rc = strata_barrier(p.comm);
  if (rc == STRATA_OK) rc = gather_labels(&p);
  if (rc == STRATA_OK) rc = run_rounds(&p);
  if (rc == STRATA_OK) rc = assemble_and_write(&p, started);
  if (rc != STRATA_OK) {
    fprintf(stderr, "strata probe: rank %d: %s\n", p.rank, strata_strerror(rc));
    strata_comm_abort(p.comm);
  }
  strata_comm_destroy(p.comm);
  free(p.buf);
  free(p.latency_us);
  free(p.bandwidth_gbps);
  free(p.host);
  free(p.site);
  return rc == STRATA_OK ? 0 : 1;
}
