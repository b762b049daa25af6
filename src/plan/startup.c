// SPDX-License-Identifier: Apache-2.0
/*
 * startup.c — the plan's start-up section: what joining the job costs when every GPU is a rank,
 * with today's full mesh beside connections on demand (src/model/startup.h).
 *
 * The store's round trip is that of the fabric's outermost level (a rank of a far site reaches
 * the store across the WAN), a peer's that of the site fabric; neither is taken below a TCP
 * round trip inside a datacenter (TCP_FLOOR_RTT_US: the bootstrap and the control path are
 * sockets even where the data moves by RDMA, and a kernel TCP round trip costs tens of
 * microseconds however fast the link is).
 */
#include "plan/plan.h"

#include "topo/json.h"

#define TCP_FLOOR_RTT_US 30.0
#define DEFAULT_TCP_STREAMS 4 /* STRATA_TCP_STREAMS' default */

static double outer_rtt_us(const strata_fabric *f) {
  double alpha = 0;
  for (int l = 1; l < f->nlevels; l++)
    if (f->level[l].fanout > 1) alpha = f->level[l].alpha_us;
  return 2 * alpha > TCP_FLOOR_RTT_US ? 2 * alpha : TCP_FLOOR_RTT_US;
}

void strata_plan_startup(strata_plan *p) {
  strata_startup_costs costs = strata_startup_default_costs();
  /* a rank per GPU; a cluster without GPUs (a --links matrix alone: one CPU node per rank) has
   * a rank per node */
  int64_t ranks = p->gpus > 0 ? p->gpus : p->nodes > 0 ? p->nodes : 1;
  p->startup_job = (strata_startup_job){.ranks = ranks,
                                        .streams = DEFAULT_TCP_STREAMS,
                                        .pattern = STRATA_STARTUP_RING,
                                        .store_rtt_us = outer_rtt_us(&p->global_fabric),
                                        .peer_rtt_us = outer_rtt_us(&p->site_fabric),
                                        .cores = 0};
  strata_startup_model(&p->startup_job, STRATA_STARTUP_EAGER, &costs, &p->startup[0]);
  strata_startup_model(&p->startup_job, STRATA_STARTUP_LAZY, &costs, &p->startup[1]);
}

/* ---- writers (render.c calls them: the section stays in one file) ---- */

/* Linux refuses more descriptors per process than fs.nr_open, 1,048,576 unless raised. */
#define NR_OPEN_DEFAULT 1048576.0

static const char *count_text(double v, char *buf, size_t len) {
  const char *units[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  while (v >= 1000 && u < 5) {
    v /= 1000;
    u++;
  }
  snprintf(buf, len, "%.3g%s", v, units[u]);
  return buf;
}

static const char *seconds_text(double s, char *buf, size_t len) {
  if (s < 1)
    snprintf(buf, len, "%.3g ms", s * 1e3);
  else if (s < 3600)
    snprintf(buf, len, "%.3g s", s);
  else
    snprintf(buf, len, "%.3g h", s / 3600);
  return buf;
}

/* The largest term of the estimate (strata_startup_model): a bound, or the rounds' latency. */
static const char *bound_name(const strata_startup *s, const strata_startup_job *job) {
  double latency_s = s->peer_rounds * job->peer_rtt_us / 2 * 1e-6;
  if (latency_s > s->store_busy_s && latency_s > s->rank_busy_s && latency_s > s->cpu_bound_s)
    return "rounds between ranks";
  if (s->store_busy_s >= s->rank_busy_s && s->store_busy_s >= s->cpu_bound_s)
    return "the store's loop";
  return "one rank's work";
}

void strata_plan_write_startup_text(FILE *out, const strata_plan *p) {
  const strata_startup *e = &p->startup[0], *l = &p->startup[1];
  char a[32], b[32];
  fprintf(out,
          "\nstart-up (%lld ranks, one per %s, %d TCP streams per pair; model, docs/scale.md)\n",
          (long long)p->startup_job.ranks, p->gpus > 0 ? "GPU" : "node", p->startup_job.streams);
  fprintf(out, "  %-26s %18s %18s\n", "", "full mesh", "on demand (ring)");
  fprintf(out, "  %-26s %18s %18s\n", "store requests, busiest", count_text(e->requests_max, a, 32),
          count_text(l->requests_max, b, 32));
  fprintf(out, "  %-26s %18s %18s\n", "store requests, job", count_text(e->requests_total, a, 32),
          count_text(l->requests_total, b, 32));
  fprintf(out, "  %-26s %16sB %16sB\n", "store traffic", count_text(e->store_bytes_total, a, 32),
          count_text(l->store_bytes_total, b, 32));
  fprintf(out, "  %-26s %16sB %16sB\n", "store memory", count_text(e->store_memory_bytes, a, 32),
          count_text(l->store_memory_bytes, b, 32));
  fprintf(out, "  %-26s %18s %18s\n", "peers per rank", count_text(e->peers_per_rank, a, 32),
          count_text(l->peers_per_rank, b, 32));
  fprintf(out, "  %-26s %18s %18s\n", "descriptors per rank", count_text(e->fds_per_rank, a, 32),
          count_text(l->fds_per_rank, b, 32));
  fprintf(out, "  %-26s %18s %18s\n", "TCP connections, job",
          count_text(e->connections_total, a, 32), count_text(l->connections_total, b, 32));
  fprintf(out, "  %-26s %18s %18s\n", "init + first allreduce", seconds_text(e->init_s, a, 32),
          seconds_text(l->init_s, b, 32));
  fprintf(out, "  %-26s %18s %18s\n", "bound by", bound_name(e, &p->startup_job),
          bound_name(l, &p->startup_job));
  if (e->fds_per_rank > NR_OPEN_DEFAULT)
    fprintf(out,
            "  the full mesh needs more descriptors per rank than Linux allows (fs.nr_open)\n");
  else if (e->fds_per_rank > 1024)
    fprintf(out, "  the full mesh needs ulimit -n above the usual 1024 (docs/scale.md)\n");
}

static json_t *startup_json(const strata_startup *s) {
  json_t *o = json_object();
  o = strata_json_set(o, "requests_per_rank", strata_json_number(s->requests_per_rank));
  o = strata_json_set(o, "requests_max", strata_json_number(s->requests_max));
  o = strata_json_set(o, "requests_total", strata_json_number(s->requests_total));
  o = strata_json_set(o, "store_bytes_total", strata_json_number(s->store_bytes_total));
  o = strata_json_set(o, "store_memory_bytes", strata_json_number(s->store_memory_bytes));
  o = strata_json_set(o, "store_rounds", strata_json_number(s->store_rounds));
  o = strata_json_set(o, "peer_rounds", strata_json_number(s->peer_rounds));
  o = strata_json_set(o, "peers_per_rank", strata_json_number(s->peers_per_rank));
  o = strata_json_set(o, "fds_per_rank", strata_json_number(s->fds_per_rank));
  o = strata_json_set(o, "connections_total", strata_json_number(s->connections_total));
  o = strata_json_set(o, "store_busy_s", strata_json_number(s->store_busy_s));
  o = strata_json_set(o, "rank_busy_s", strata_json_number(s->rank_busy_s));
  return strata_json_set(o, "init_s", strata_json_number(s->init_s));
}

json_t *strata_plan_startup_json(const strata_plan *p) {
  json_t *o = json_object();
  o = strata_json_set(o, "ranks", strata_json_number((double)p->startup_job.ranks));
  o = strata_json_set(o, "streams", strata_json_number(p->startup_job.streams));
  o = strata_json_set(o, "store_rtt_us", strata_json_number(p->startup_job.store_rtt_us));
  o = strata_json_set(o, "eager", startup_json(&p->startup[0]));
  return strata_json_set(o, "lazy", startup_json(&p->startup[1]));
}
