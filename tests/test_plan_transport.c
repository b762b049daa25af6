// SPDX-License-Identifier: Apache-2.0
/* test_plan_transport.c — `strata plan --transport`: what carries the collectives across a routed
 * or overlay link changes the cross-site figures, and the lints name strata's NCCL plugin where
 * the plan is NCCL over the overlay.
 *
 *   - the names parse both ways ("nccl" is nccl-socket), nonsense does not
 *   - NCCL's socket network: one stream per peer, in clear; NCCL on strata's plugin: the
 *     workload's streams, under NCCL's window (2 channels x 4 MiB per round trip) — so on a
 *     long overlay the plugin is predicted faster than NCCL's sockets and never faster than
 *     strata's own transport, and the cross-site allreduce times follow
 *   - on the link of bench/nccl-plugin/run.sh (1 Gbit/s, 50 ms) the plugin's figure is the
 *     strata transport's: the window (168 MB/s) does not bind below the link's 125 MB/s
 *   - L3-OVERLAY-HOTPATH names NCCL_NET_PLUGIN=strata with both figures for NCCL over the overlay,
 *     and keeps DiLoCo as its fix otherwise; L3-RDMA-OVER-OVERLAY names the plugin;
 *     L3-WAN-ONE-STREAM fires for NCCL's one socket and names the plugin */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/check.h"
#include "plan/plan.h"
#include "topo/topo.h"

static strata_topo *load(const char *name) {
  char path[1024], err[512];
  const char *src = getenv("STRATA_SOURCE_DIR");
  snprintf(path, sizeof path, "%s/tests/data/%s", src ? src : ".", name);
  strata_topo *topo = NULL;
  if (strata_topo_load_file(path, &topo, err, sizeof err) != STRATA_OK) {
    printf("FAILED: %s does not load: %s\n", path, err);
    failures++;
    return NULL;
  }
  return topo;
}

static const strata_finding *finding(const strata_plan *p, const char *id) {
  for (int i = 0; i < p->finding_count; i++)
    if (!strcmp(p->findings[i].id, id)) return &p->findings[i];
  return NULL;
}

/* The fastest global allreduce the plan predicts, microseconds. */
static double global_allreduce_us(const strata_plan *p) {
  double best = INFINITY;
  for (int i = 0; i < p->prediction_count; i++)
    if (!strcmp(p->prediction_scope[i], "global") &&
        p->predictions[i].coll == STRATA_COLL_ALLREDUCE && p->predictions[i].time_us < best)
      best = p->predictions[i].time_us;
  return best;
}

static int build(const strata_topo *t, strata_workload_kind kind, strata_wan_transport transport,
                 strata_plan *p) {
  strata_workload w;
  strata_workload_defaults(&w, kind);
  w.transport = transport;
  char err[512];
  int rc = strata_plan_build(t, &w, p, err, sizeof err);
  CHECK(rc == STRATA_OK, "plan: %s", err);
  return rc;
}

static void names(void) {
  strata_wan_transport t;
  for (int i = 0; i <= STRATA_WAN_NCCL_STRATA; i++) {
    CHECK(strata_wan_transport_parse(strata_wan_transport_name((strata_wan_transport)i), &t) ==
              STRATA_OK &&
          (int)t == i);
  }
  CHECK(strata_wan_transport_parse("nccl", &t) == STRATA_OK && t == STRATA_WAN_NCCL_SOCKET);
  CHECK(strata_wan_transport_parse("NCCL-Strata", &t) == STRATA_OK && t == STRATA_WAN_NCCL_STRATA);
  CHECK(strata_wan_transport_parse("ib", &t) == STRATA_ERR_INVALID_ARG);
  CHECK(strata_wan_transport_parse(NULL, &t) == STRATA_ERR_INVALID_ARG);
}

static void overlay(void) {
  strata_topo *t = load("lint-l3-overlay-hotpath.yaml");
  if (!t) return;
  strata_plan own, sock, plug;
  if (build(t, STRATA_WORKLOAD_TRAIN_SYNC, STRATA_WAN_STRATA, &own) ||
      build(t, STRATA_WORKLOAD_TRAIN_SYNC, STRATA_WAN_NCCL_SOCKET, &sock) ||
      build(t, STRATA_WORKLOAD_TRAIN_SYNC, STRATA_WAN_NCCL_STRATA, &plug)) {
    strata_topo_free(t);
    return;
  }
  CHECK(sock.wan.streams == 1 && plug.wan.streams == 16 && own.wan.streams == 16);
  CHECK(sock.wan.transport == STRATA_WAN_NCCL_SOCKET &&
        plug.wan.transport == STRATA_WAN_NCCL_STRATA);
  double window = STRATA_NCCL_CHANNELS * STRATA_NCCL_WINDOW_BYTES / (plug.wan.rtt_ms / 1000) / 1e9;
  CHECK_NEAR("nccl window GB/s", plug.wan.nccl_window_gbps, window, 1e-9);
  CHECK_NEAR("plugin GB/s", plug.wan.gbps, fmin(own.wan.gbps, window), 1e-9);
  CHECK(sock.wan.gbps < plug.wan.gbps && plug.wan.gbps <= own.wan.gbps, "%g %g %g", sock.wan.gbps,
        plug.wan.gbps, own.wan.gbps);
  double t_sock = global_allreduce_us(&sock), t_plug = global_allreduce_us(&plug),
         t_own = global_allreduce_us(&own);
  CHECK(t_plug < t_sock && t_own <= t_plug, "global allreduce: sockets %g, plugin %g, strata %g us",
        t_sock, t_plug, t_own);
  printf(
      "overlay a--b (RTT %.3g ms): NCCL sockets %.3g GB/s, NCCL on the plugin %.3g GB/s, "
      "strata %.3g GB/s; global allreduce %.3g / %.3g / %.3g s\n",
      sock.wan.rtt_ms, sock.wan.gbps, plug.wan.gbps, own.wan.gbps, t_sock / 1e6, t_plug / 1e6,
      t_own / 1e6);
  const strata_finding *f = finding(&sock, "L3-OVERLAY-HOTPATH");
  CHECK(f && strstr(f->fix, "NCCL_NET_PLUGIN=strata") && strstr(f->message, "socket"), "%s",
        f ? f->fix : "no L3-OVERLAY-HOTPATH");
  char figure[32];
  snprintf(figure, sizeof figure, "%.3g GB/s", plug.wan.gbps);
  CHECK(f && strstr(f->fix, figure), "the fix does not give the plugin's %s: %s", figure,
        f ? f->fix : "");
  f = finding(&own, "L3-OVERLAY-HOTPATH");
  CHECK(f && !strstr(f->fix, "NCCL_NET_PLUGIN") && strstr(f->fix, "DiLoCo"));
  f = finding(&sock, "L3-WAN-ONE-STREAM");
  CHECK(f && strstr(f->fix, "NCCL_NET_PLUGIN=strata"), "one socket across the WAN not flagged");
  CHECK(!finding(&plug, "L3-WAN-ONE-STREAM") && !finding(&own, "L3-WAN-ONE-STREAM"));
  strata_plan_free(&own);
  strata_plan_free(&sock);
  strata_plan_free(&plug);
  strata_topo_free(t);
}

static void rdma_over_overlay(void) {
  strata_topo *t = load("lint-l3-rdma-over-overlay.yaml");
  if (!t) return;
  strata_plan p;
  if (build(t, strata_workload_auto(t), STRATA_WAN_STRATA, &p) == STRATA_OK) {
    const strata_finding *f = finding(&p, "L3-RDMA-OVER-OVERLAY");
    CHECK(f && strstr(f->fix, "NCCL_NET_PLUGIN=strata"), "%s", f ? f->fix : "not tripped");
    strata_plan_free(&p);
  }
  strata_topo_free(t);
}

static void bench_link(void) {
  strata_topo *t = load("plan-nccl-plugin-wan.yaml");
  if (!t) return;
  strata_plan own, plug;
  if (build(t, STRATA_WORKLOAD_TRAIN_SYNC, STRATA_WAN_STRATA, &own) == STRATA_OK) {
    if (build(t, STRATA_WORKLOAD_TRAIN_SYNC, STRATA_WAN_NCCL_STRATA, &plug) == STRATA_OK) {
      CHECK_NEAR("rtt", plug.wan.rtt_ms, 50, 1e-9);
      CHECK_NEAR("window", plug.wan.nccl_window_gbps, 2 * 4.0 * 1048576 / 0.05 / 1e9, 1e-9);
      CHECK_NEAR("plugin = strata on this link", plug.wan.gbps, own.wan.gbps, 1e-12);
      CHECK(plug.wan.gbps <= 0.125 && plug.wan.gbps > 0.1, "%g GB/s", plug.wan.gbps);
      printf(
          "1 Gbit/s x 50 ms: the plugin is predicted at %.4g GB/s: a 256 MiB transfer each way "
          "in %.3f s\n",
          plug.wan.gbps, 268435456 / (plug.wan.gbps * 1e9));
      strata_plan_free(&plug);
    }
    strata_plan_free(&own);
  }
  strata_topo_free(t);
}

int main(void) {
  names();
  overlay();
  rdma_over_overlay();
  bench_link();
  printf("%s\n", failures ? "FAILED" : "all passed");
  return failures != 0;
}
