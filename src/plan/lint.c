// SPDX-License-Identifier: Apache-2.0
/*
 * lint.c — the don't-miss checklist of the seed map, and the mistakes around it, as lints.
 *
 * Every lint has a stable id (LAYER-TOPIC), one severity, the layer it belongs to, and produces a
 * message that says what is wrong with numbers and a fix that says what to do instead. The
 * catalog below is the single list: docs/lints.md documents it and tests/test_plan_lint.c
 * checks that each id is tripped by tests/data/lint-<id>.yaml and that no preset trips any.
 *
 * A lint must never fire on a clean preset with the workload the CLI picks for it, and must never
 * guess where the file was silent unless the guess is the lint's point (a RoCE fabric whose PFC
 * setting is unknown is itself the warning).
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "model/physics.h"
#include "plan/plan.h"

static const strata_lint_info catalog[] = {
    {"L3-EXT-NO-SYNC", STRATA_SEVERITY_WARNING, 3,
     "fabric extension on a link the workload does not need to cross every step"},
    {"L3-CLOUD-NO-S2S", STRATA_SEVERITY_ERROR, 3,
     "a cloud interconnect assumed to join two own sites without a site-to-site feature"},
    {"L3-IBROUTER-NOT-EXT", STRATA_SEVERITY_ERROR, 3,
     "an InfiniBand router taken for fabric extension"},
    {"L3-OVERLAY-HOTPATH", STRATA_SEVERITY_ERROR, 3,
     "a decode loop or per-step synchronous collective on a WireGuard overlay"},
    {"L3-ROCE-HEADROOM", STRATA_SEVERITY_ERROR, 3,
     "lossless RoCE stretched past the PFC headroom its switch buffers allow"},
    {"L3-RDMA-OVER-OVERLAY", STRATA_SEVERITY_ERROR, 3,
     "RDMA / NCCL-IB expected to cross a WireGuard overlay"},
    {"L3-OPTICS-REACH", STRATA_SEVERITY_ERROR, 3, "optics used beyond their reach"},
    {"L3-OPTICS-REDUCED-RATE", STRATA_SEVERITY_WARNING, 3,
     "OpenZR+ beyond ~1000 km runs only at reduced rate"},
    {"L3-METROX-REACH", STRATA_SEVERITY_ERROR, 3, "MetroX beyond its 40 km reach"},
    {"L3-EXT-UNOWNED", STRATA_SEVERITY_ERROR, 3,
     "fabric extension over a path not owned end to end"},
    {"L3-INTERNET-NO-OVERLAY", STRATA_SEVERITY_ERROR, 3,
     "collective traffic over the public internet without an overlay"},
    {"L3-SITES-DISCONNECTED", STRATA_SEVERITY_ERROR, 3, "a site no link reaches"},
    {"L3-OVERLAY-MTU", STRATA_SEVERITY_WARNING, 3, "overlay MTU above what WireGuard leaves"},
    {"L3-DISTANCE-UNKNOWN", STRATA_SEVERITY_WARNING, 3,
     "a link with no length, no site locations and no measured RTT"},
    {"L2-ROCE-NO-PFC", STRATA_SEVERITY_ERROR, 2, "RoCEv2 without priority flow control"},
    {"L2-ROCE-PFC-UNKNOWN", STRATA_SEVERITY_WARNING, 2,
     "RoCEv2 whose PFC/ECN setting is not given"},
    {"L2-ROCE-NO-ECN", STRATA_SEVERITY_WARNING, 2, "RoCEv2 without ECN (no DCQCN)"},
    {"L2-NO-GPUDIRECT", STRATA_SEVERITY_WARNING, 2, "RDMA NICs without GPUDirect RDMA"},
    {"L2-OVERSUBSCRIBED", STRATA_SEVERITY_WARNING, 2,
     "an oversubscribed fabric under per-step synchronous training"},
    {"L2-NO-FABRIC", STRATA_SEVERITY_ERROR, 2,
     "several GPU nodes in a site with no compute fabric"},
    {"L1-PCIE-ONLY", STRATA_SEVERITY_WARNING, 1,
     "multi-GPU nodes without NVLink under data-parallel training"},
    {"L4-SYNC-NEEDS-DILOCO", STRATA_SEVERITY_WARNING, 4,
     "per-step synchronous training across sites where the link cannot keep up"},
    {"L4-DILOCO-LOW-UTIL", STRATA_SEVERITY_WARNING, 4,
     "DiLoCo's outer sync still dominates the step"},
    {"L4-RL-FULL-SYNC", STRATA_SEVERITY_WARNING, 4,
     "full-weight RL sync across sites where a sparse delta would do"},
    {"L4-INFER-PIPELINE-SLOW", STRATA_SEVERITY_WARNING, 4,
     "cross-site model-parallel inference where the WAN hop dominates each token"},
    {"L3-WAN-ONE-STREAM", STRATA_SEVERITY_WARNING, 3,
     "a collective across a WAN link on one TCP stream, which cannot fill it"},
    {"L4-ASYMMETRIC-SITES", STRATA_SEVERITY_WARNING, 4,
     "sites of unequal compute synchronized together: the fast ones wait for the slowest"},
    {"L4-ASYMMETRIC-LINKS", STRATA_SEVERITY_WARNING, 4,
     "links between sites of very unequal bandwidth under one ring: the slowest sets the pace"},
};

#define CATALOG_COUNT (sizeof catalog / sizeof catalog[0])

size_t strata_lint_count(void) {
  return CATALOG_COUNT;
}
const strata_lint_info *strata_lint_get(size_t index) {
  return index < CATALOG_COUNT ? &catalog[index] : NULL;
}

static const strata_lint_info *catalog_find(const char *id) {
  for (size_t i = 0; i < CATALOG_COUNT; i++)
    if (!strcmp(catalog[i].id, id)) return &catalog[i];
  return NULL;
}

int strata_plan_add_finding(strata_plan *plan, const char *id, const strata_topo_mark *mark,
                            const char *what, const char *message, const char *fix) {
  const strata_lint_info *info = catalog_find(id);
  if (!info) return -1;
  if (plan->finding_count == plan->finding_cap) {
    int cap = plan->finding_cap ? plan->finding_cap * 2 : 8;
    strata_finding *f = realloc(plan->findings, (size_t)cap * sizeof *f);
    if (!f) return -1;
    plan->findings = f;
    plan->finding_cap = cap;
  }
  strata_finding *f = &plan->findings[plan->finding_count++];
  memset(f, 0, sizeof *f);
  f->id = info->id;
  f->severity = info->severity;
  f->layer = info->layer;
  const char *src = plan->topo ? plan->topo->source : "";
  if (mark && mark->line > 0)
    snprintf(f->where, sizeof f->where, "%.120s:%d:%d%s%.60s%s", src, mark->line, mark->col,
             what && *what ? " (" : "", what ? what : "", what && *what ? ")" : "");
  else
    snprintf(f->where, sizeof f->where, "%s", what ? what : "");
  snprintf(f->message, sizeof f->message, "%s", message);
  snprintf(f->fix, sizeof f->fix, "%s", fix);
  return 0;
}

/* A lint context: the plan, plus formatting of message and fix. */
typedef struct lint_ctx {
  strata_plan *plan;
  int failed;
} lint_ctx;

static void report(lint_ctx *c, const char *id, const strata_topo_mark *mark, const char *what,
                   const char *fix, const char *f, ...) __attribute__((format(printf, 6, 7)));
static void report(lint_ctx *c, const char *id, const strata_topo_mark *mark, const char *what,
                   const char *fix, const char *f, ...) {
  char message[480];
  va_list ap;
  va_start(ap, f);
  vsnprintf(message, sizeof message, f, ap);
  va_end(ap);
  if (strata_plan_add_finding(c->plan, id, mark, what, message, fix) != 0) c->failed = 1;
}

static const strata_topo_mark *best_mark(const strata_topo_mark *a, const strata_topo_mark *b) {
  return a->line > 0 ? a : b;
}

static int needs_per_step_sync(const strata_plan *p) {
  const strata_workload *w = &p->workload;
  return w->kind == STRATA_WORKLOAD_TRAIN_SYNC ||
         (w->kind == STRATA_WORKLOAD_INFERENCE &&
          (w->cross_site_pipeline || w->replicas_per_site == 0)) ||
         !strcmp(p->decision, "fabric-extension");
}

static int is_cloud(strata_provider p) {
  return p != STRATA_PROVIDER_OWN;
}

/* ---- layer 3, per link ---- */

/* The tests behind the error lints that rule fabric extension out: one definition each, used by
 * the lints below and, through strata_plan_extension_blocker(), by the model and the decision. */

int strata_plan_path_owned(const strata_topo_link *link) {
  strata_phys_kind kind = link->physical.kind;
  return kind == STRATA_PHYS_DARK_FIBER || kind == STRATA_PHYS_DWDM ||
         kind == STRATA_PHYS_PRIVATE_BACKBONE;
}

static int metrox_past_reach(const strata_topo_link *k, double km) {
  return k->extension.kind == STRATA_EXT_METROX && km > strata_optic_reach_km(STRATA_OPTIC_METROX3);
}

/* PFC headroom of the site's switches over a stretched lossless domain: the switch buffer
 * (default Trident4 64 MB, a figure from secondary sources) over 32 ports, at the fabric's port
 * rate (default 400G). */
typedef struct roce_stretch {
  double buffer_bytes, rate_gbit, headroom_bytes, max_km;
} roce_stretch;

static roce_stretch roce_stretch_of(const strata_topo *t, const strata_topo_link *k) {
  const strata_topo_fabric *fab = &t->sites[k->site_a].fabric;
  roce_stretch r;
  r.buffer_bytes = strata_topo_is_set(fab->switch_buffer_mb) ? fab->switch_buffer_mb * 1e6
                                                             : STRATA_SWITCH_BUFFER_TRIDENT4_BYTES;
  r.rate_gbit = strata_topo_is_set(fab->link_gbps) ? fab->link_gbps : 400;
  r.headroom_bytes = strata_switch_headroom_per_port_bytes(r.buffer_bytes, 32);
  r.max_km = strata_roce_max_lossless_km(r.headroom_bytes, r.rate_gbit, 9216);
  return r;
}

/* Only a lossless domain stretched across the link needs the headroom. RoCE aggregation as Meta's
 * ATSW keeps each building lossless and absorbs bursts by oversubscription at the aggregation
 * layer (the file says so by leaving extension.pfc unset or false). */
static int roce_past_headroom(const strata_topo *t, const strata_topo_link *k, double km) {
  return k->extension.kind == STRATA_EXT_ROCE_AGGREGATION && k->extension.pfc == 1 && km >= 0 &&
         km > roce_stretch_of(t, k).max_km;
}

static int extension_unowned(const strata_topo_link *k) {
  return k->extension.kind != STRATA_EXT_NONE && !strata_plan_path_owned(k) &&
         k->physical.kind != STRATA_PHYS_UNSPECIFIED;
}

static int rdma_over_overlay(const strata_topo_link *k) {
  return k->extension.kind != STRATA_EXT_NONE && k->overlay.kind == STRATA_OVERLAY_WIREGUARD;
}

const char *strata_plan_extension_blocker(const strata_topo *topo, int link) {
  const strata_topo_link *k = &topo->links[link];
  double km = strata_plan_link_km(topo, k);
  if (metrox_past_reach(k, km)) return "L3-METROX-REACH";
  if (roce_past_headroom(topo, k, km)) return "L3-ROCE-HEADROOM";
  if (extension_unowned(k)) return "L3-EXT-UNOWNED";
  if (rdma_over_overlay(k)) return "L3-RDMA-OVER-OVERLAY";
  return NULL;
}

static void lint_link_reach(lint_ctx *c, const strata_topo_link *k, double km) {
  const strata_topo_physical *ph = &k->physical;
  const strata_topo_mark *m = best_mark(&ph->mark, &k->mark);
  if (km < 0) return;
  double reach = -1;
  const char *optic = strata_optics_name(ph->optics);
  if (ph->optics == STRATA_OPTICS_GREY) reach = strata_optic_reach_km(STRATA_OPTIC_GRAY_LR4);
  if (ph->optics == STRATA_OPTICS_400ZR) reach = strata_optic_reach_km(STRATA_OPTIC_ZR);
  if (ph->optics == STRATA_OPTICS_OPENZR_PLUS)
    reach = strata_optic_reach_km(STRATA_OPTIC_ZR_PLUS_REDUCED);
  if (reach > 0 && km > reach)
    report(c, "L3-OPTICS-REACH", m, k->name,
           "use a longer-reach tier (400ZR ~120 km, OpenZR+ ~1000 km, managed long-haul DWDM "
           "beyond) or add amplification/regeneration sites",
           "%s optics reach ~%.0f km but the route is %.0f km", optic, reach, km);
  else if (ph->optics == STRATA_OPTICS_OPENZR_PLUS &&
           km > strata_optic_reach_km(STRATA_OPTIC_ZR_PLUS))
    report(c, "L3-OPTICS-REDUCED-RATE", m, k->name,
           "plan the link capacity at the reduced rate, or use a managed long-haul wave",
           "OpenZR+ runs at full rate to ~%.0f km; %.0f km is only reachable at reduced rate "
           "(up to %.0f km)",
           strata_optic_reach_km(STRATA_OPTIC_ZR_PLUS), km,
           strata_optic_reach_km(STRATA_OPTIC_ZR_PLUS_REDUCED));
  if (metrox_past_reach(k, km))
    report(c, "L3-METROX-REACH", best_mark(&k->extension.mark, &k->mark), k->name,
           "keep MetroX to metro distances; beyond them route IP and change the algorithm "
           "(DiLoCo) instead of extending the fabric",
           "MetroX extends InfiniBand to %.0f km, this link is %.0f km",
           strata_optic_reach_km(STRATA_OPTIC_METROX3), km);
}

static void lint_roce_headroom(lint_ctx *c, const strata_topo_link *k, double km) {
  if (!roce_past_headroom(c->plan->topo, k, km)) return;
  roce_stretch r = roce_stretch_of(c->plan->topo, k);
  report(c, "L3-ROCE-HEADROOM", best_mark(&k->extension.mark, &k->mark), k->name,
         "do not stretch PFC: aggregate RoCE at the building edge and accept oversubscription "
         "(Meta's ATSW: extension.pfc false), keep the lossless domain inside each building, or "
         "extend with MetroX on InfiniBand",
         "lossless RoCE over %.0f km at %.0f Gb/s needs %.2f MB of PFC headroom per port; "
         "%.0f MB of switch buffer over 32 ports leaves %.2f MB, enough for %.1f km",
         km, r.rate_gbit, strata_pfc_headroom_bytes(r.rate_gbit, km, 9216) / 1e6,
         r.buffer_bytes / 1e6, r.headroom_bytes / 1e6, r.max_km);
}

static void lint_link_kinds(lint_ctx *c, const strata_topo_link *k, const strata_wan_model *m) {
  const strata_plan *p = c->plan;
  const strata_topo *t = p->topo;
  const strata_topo_site *a = &t->sites[k->site_a], *b = &t->sites[k->site_b];
  int cloud_path = k->physical.kind == STRATA_PHYS_CLOUD_INTERCONNECT ||
                   k->overlay.transit == STRATA_TRANSIT_CLOUD_INTERCONNECT;
  if (cloud_path && !is_cloud(a->provider) && !is_cloud(b->provider) &&
      k->overlay.site_to_site != 1)
    report(c, "L3-CLOUD-NO-S2S", best_mark(&k->physical.mark, &k->mark), k->name,
           "turn on the provider's site-to-site feature (ExpressRoute Global Reach, or the "
           "equivalent) and say so (overlay.site_to_site: true), or lease a circuit between the "
           "sites",
           "%s and %s are both own sites joined through a cloud interconnect: Direct Connect / "
           "ExpressRoute connect a site to the cloud, not two sites to each other, unless a "
           "site-to-site feature re-exports the backbone",
           a->name, b->name);
  if (extension_unowned(k))
    report(c, "L3-EXT-UNOWNED", best_mark(&k->extension.mark, &k->mark), k->name,
           "fabric extension needs dark fiber or a DWDM wave you control; over a shared path use "
           "an overlay and change the algorithm (DiLoCo)",
           "%s over %s: an RDMA fabric cannot be extended over a path nobody owns end to end",
           strata_extension_kind_name(k->extension.kind), strata_phys_kind_name(k->physical.kind));
  if (rdma_over_overlay(k))
    report(c, "L3-RDMA-OVER-OVERLAY", best_mark(&k->overlay.mark, &k->mark), k->name,
           "pin collectives crossing the tunnel to TCP: NCCL on strata's network plugin "
           "(NCCL_NET_PLUGIN=strata, many streams, docs/nccl-plugin.md), NCCL's own sockets "
           "(NCCL_NET=Socket, NCCL_SOCKET_IFNAME=wg0), or strata's TCP transport; keep RDMA inside "
           "each site",
           "%s carries RDMA, and RDMA bypasses the kernel: it cannot enter a WireGuard tunnel",
           strata_extension_kind_name(k->extension.kind));
  if (k->extension.kind == STRATA_EXT_IB_ROUTER && needs_per_step_sync(p))
    report(c, "L3-IBROUTER-NOT-EXT", best_mark(&k->extension.mark, &k->mark), k->name,
           "an IB router joins subnets for segregation and fault isolation; for one fabric across "
           "buildings use MetroX (within 40 km), or run DiLoCo across the router",
           "the workload (%s) needs one tightly coupled fabric across %s and %s, but an IB "
           "router is not fabric extension",
           strata_workload_kind_name(p->workload.kind), a->name, b->name);
  int internet =
      k->physical.kind == STRATA_PHYS_INTERNET || k->overlay.transit == STRATA_TRANSIT_INTERNET;
  if (internet && k->overlay.kind == STRATA_OVERLAY_NONE)
    report(c, "L3-INTERNET-NO-OVERLAY", best_mark(&k->overlay.mark, &k->mark), k->name,
           "put a WireGuard overlay on the link (and authenticate peers: STRATA_SECRET)",
           "%s -- %s crosses the public internet with no overlay: collective traffic would travel "
           "unencrypted and unauthenticated",
           a->name, b->name);
  if (k->overlay.kind == STRATA_OVERLAY_WIREGUARD && strata_topo_is_set(k->overlay.mtu_bytes) &&
      k->overlay.mtu_bytes > strata_wireguard_mtu(1500))
    report(c, "L3-OVERLAY-MTU", best_mark(&k->overlay.mark, &k->mark), k->name,
           "set the tunnel MTU to 1420 (1500 - 80 B of WireGuard over IPv6), or raise the path MTU",
           "tunnel MTU %.0f exceeds the %d bytes a 1500-byte path leaves after WireGuard's 60-80 "
           "bytes: packets fragment or black-hole",
           k->overlay.mtu_bytes, strata_wireguard_mtu(1500));
  if (m->km < 0 && !strata_topo_is_set(k->overlay.rtt_ms) && !m->measured)
    report(c, "L3-DISTANCE-UNKNOWN", &k->mark, k->name,
           "give physical.km, site locations, or a measured overlay.rtt_ms",
           "no route length, site locations or measured RTT: the model assumed RTT %.3g ms",
           m->rtt_ms);
}

static void lint_link_workload(lint_ctx *c, const strata_topo_link *k, const strata_wan_model *m) {
  const strata_plan *p = c->plan;
  const strata_workload *w = &p->workload;
  const strata_topo *t = p->topo;
  /* inside an island, DiLoCo's inner loop crosses the extension every step: that is its use */
  int inner_loop_crosses = p->island_mode && strstr(p->decision, "diloco") != NULL;
  if (m->is_extension && !needs_per_step_sync(p) && !inner_loop_crosses &&
      w->kind != STRATA_WORKLOAD_BRINGUP)
    report(c, "L3-EXT-NO-SYNC", best_mark(&k->extension.mark, &k->mark), k->name,
           "drop the extension for this workload: DiLoCo / delta sync / replica routing over a "
           "routed or overlay path does the job without a metro appliance",
           "%s extends the fabric across %s -- %s, but the %s workload does not run per-step "
           "synchronous collectives across it (decision: %s)",
           strata_extension_kind_name(k->extension.kind), t->sites[k->site_a].name,
           t->sites[k->site_b].name, strata_workload_kind_name(w->kind), p->decision);
  if (k->overlay.kind == STRATA_OVERLAY_WIREGUARD && !m->is_extension) {
    if (w->kind == STRATA_WORKLOAD_INFERENCE &&
        (w->cross_site_pipeline || w->replicas_per_site == 0))
      report(c, "L3-OVERLAY-HOTPATH", best_mark(&k->overlay.mark, &k->mark), k->name,
             "keep decode inside a site (region-replica routing), or carry cross-site inference "
             "on a transport built for it (P2P inference transport), not the training overlay",
             "the decode loop of a model split across sites crosses the WireGuard overlay every "
             "token (RTT %.3g ms)",
             m->rtt_ms);
    else if (w->kind == STRATA_WORKLOAD_TRAIN_SYNC && m->transport == STRATA_WAN_NCCL_SOCKET) {
      /* the user's plan is NCCL over the overlay: its own socket network is the weak part */
      strata_workload plugged = *w;
      plugged.transport = STRATA_WAN_NCCL_STRATA;
      strata_wan_model alt;
      strata_plan_wan_model(t, m->link, &plugged, &alt);
      char fix[360];
      snprintf(
          fix, sizeof fix,
          "give NCCL strata's network plugin: NCCL_NET_PLUGIN=strata (libnccl-net-strata.so, "
          "STRATA_TCP_STREAMS=%d, STRATA_ENCRYPT=off inside WireGuard) moves %.3g GB/s here "
          "where NCCL's sockets move %.3g; and run DiLoCo (--workload diloco) to cross every H "
          "steps",
          plugged.wan_streams, alt.gbps, m->gbps);
      report(c, "L3-OVERLAY-HOTPATH", best_mark(&k->overlay.mark, &k->mark), k->name, fix,
             "per-step synchronous gradient allreduce with NCCL on its socket network across the "
             "WireGuard overlay %s: one socket per peer, %.3g GB/s and RTT %.3g ms every step",
             k->name, m->gbps, m->rtt_ms);
    } else if (w->kind == STRATA_WORKLOAD_TRAIN_SYNC)
      report(c, "L3-OVERLAY-HOTPATH", best_mark(&k->overlay.mark, &k->mark), k->name,
             "run DiLoCo (--workload diloco): sync every H steps over the overlay, not every step",
             "per-step synchronous gradient allreduce across the WireGuard overlay %s: "
             "%.3g GB/s and RTT %.3g ms every step",
             k->name, m->gbps, m->rtt_ms);
  }
}

/* Union-find over sites: is every site reachable? */
static int find_root(int *parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

static void lint_connectivity(lint_ctx *c) {
  const strata_topo *t = c->plan->topo;
  if (t->site_count < 2) return;
  int *parent = malloc((size_t)t->site_count * sizeof *parent);
  if (!parent) {
    c->failed = 1;
    return;
  }
  for (int i = 0; i < t->site_count; i++) parent[i] = i;
  for (int i = 0; i < t->link_count; i++)
    parent[find_root(parent, t->links[i].site_a)] = find_root(parent, t->links[i].site_b);
  for (int i = 1; i < t->site_count; i++)
    if (find_root(parent, i) != find_root(parent, 0)) {
      report(c, "L3-SITES-DISCONNECTED", &t->sites[i].mark, t->sites[i].name,
             "add a link (physical path plus extension or overlay) to the other sites",
             "site %s is not reachable from %s by any link", t->sites[i].name, t->sites[0].name);
    }
  free(parent);
}

/* One TCP stream moves at most its window per round trip, and on a long fat path far less than
 * the path carries: PCCL measured ~3.7 Gb/s for one connection (arXiv 2505.14065). The window is
 * Linux's default ceiling of autotuning, net.ipv4.tcp_rmem max = 6 MiB (ip-sysctl.rst). */
#define ONE_STREAM_WINDOW_BYTES (6.0 * 1024 * 1024)
#define ONE_STREAM_CAP_GBIT 3.7
#define MAX_WAN_STREAMS 64 /* strata's STRATA_TCP_STREAMS limit */

static int collective_crosses_sites(const strata_plan *p) {
  strata_workload_kind k = p->workload.kind;
  return p->sites > 1 && (k == STRATA_WORKLOAD_TRAIN_SYNC || k == STRATA_WORKLOAD_DILOCO ||
                          k == STRATA_WORKLOAD_RL);
}

static void lint_one_stream(lint_ctx *c, const strata_topo_link *k, const strata_wan_model *m) {
  const strata_plan *p = c->plan;
  if (m->streams != 1 || !collective_crosses_sites(p) || m->is_extension || m->measured) return;
  int known = strata_topo_is_set(k->physical.capacity_gbps);
  double path_gbit = known ? k->physical.capacity_gbps : 10; /* as strata_plan_wan_model assumes */
  double rtt_s = m->rtt_ms / 1000;
  double window_gbit = ONE_STREAM_WINDOW_BYTES * 8 / rtt_s / 1e9;
  double one = fmin(fmin(window_gbit, ONE_STREAM_CAP_GBIT), path_gbit);
  if (one >= 0.5 * path_gbit) return;
  /* streams to fill the path: the BDP over one window, and along PCCL's curve (3.7 n^0.6 Gb/s)
   * to the path's capacity; the larger, within what strata opens */
  double bdp_bytes = path_gbit * 1e9 / 8 * rtt_s;
  double by_window = ceil(bdp_bytes / ONE_STREAM_WINDOW_BYTES);
  double by_cap = ceil(pow(path_gbit / ONE_STREAM_CAP_GBIT, log(64.0) / log(45.0 / 3.7)));
  double need = fmin(fmax(fmax(by_window, by_cap), 2), MAX_WAN_STREAMS);
  char fix[360];
  if (m->transport == STRATA_WAN_NCCL_SOCKET)
    snprintf(fix, sizeof fix,
             "open %.0f TCP streams per peer across the link: NCCL on strata's network plugin "
             "(NCCL_NET_PLUGIN=strata, STRATA_TCP_STREAMS=%.0f, --transport nccl-strata), or "
             "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = %.0f (at most 64)",
             need, need, need);
  else
    snprintf(fix, sizeof fix,
             "open %.0f TCP streams per peer across the link (strata: --streams %.0f, "
             "STRATA_TCP_STREAMS=%.0f; NCCL: its network plugin NCCL_NET_PLUGIN=strata, or "
             "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = %.0f, at most 64)",
             need, need, need, need);
  report(c, "L3-WAN-ONE-STREAM", &k->mark, k->name, fix,
         "the %s workload's collectives cross %s on one TCP stream: %.3g Gb/s of the path's %.3g "
         "Gb/s%s (window %.0f MiB / RTT %.3g ms = %.3g Gb/s; one flow ~%.3g Gb/s measured). "
         "Filling it takes %.0f streams (BDP %.3g MB / window: %.0f; per-flow cap on PCCL's "
         "curve: %.0f; strata opens at most 64)",
         strata_workload_kind_name(p->workload.kind), k->name, one, path_gbit,
         known ? "" : " (assumed)", ONE_STREAM_WINDOW_BYTES / (1024 * 1024), m->rtt_ms, window_gbit,
         ONE_STREAM_CAP_GBIT, need, bdp_bytes / 1e6, by_window, by_cap);
}

/* Dense BF16 tensor TFLOPS per GPU, from NVIDIA's datasheets (A100 SXM 312; H100 and H200 SXM
 * 989; HGX B200 2250; GB200 NVL72 180 PFLOPS over 72 GPUs = 2500). 0: not known (Rubin, CPUs). */
static double gpu_dense_tflops(strata_gpu_model gpu) {
  switch (gpu) {
    case STRATA_GPU_A100:
      return 312;
    case STRATA_GPU_H100:
    case STRATA_GPU_H200:
      return 989;
    case STRATA_GPU_B200:
      return 2250;
    case STRATA_GPU_GB200:
      return 2500;
    default:
      return 0;
  }
}

/* Site compute (dense TFLOPS) and its slowest GPU; 0 when any of its GPUs is not known. */
static double site_tflops(const strata_topo *t, int s, double *slowest_gpu) {
  const strata_topo_site *site = &t->sites[s];
  double total = 0;
  *slowest_gpu = INFINITY;
  for (int g = site->group_begin; g < site->group_begin + site->group_count; g++) {
    const strata_topo_node_group *grp = &t->groups[g];
    double per = gpu_dense_tflops(grp->spec.gpu);
    if (grp->spec.gpus < 1) continue;
    if (per <= 0) return 0;
    total += per * grp->spec.gpus * (double)grp->count;
    *slowest_gpu = fmin(*slowest_gpu, per);
  }
  return total;
}

/* A synchronous step (data parallel: every rank the same batch) waits for the slowest GPU; an
 * outer step of DiLoCo (every site the same batch and H) waits for the site of least compute.
 * Below 3/4 of the fastest, a quarter of the fast side's time is spent waiting. */
#define ASYMMETRY_WARN_RATIO 0.75

static void lint_asymmetric_sites(lint_ctx *c) {
  const strata_plan *p = c->plan;
  const strata_topo *t = p->topo;
  strata_workload_kind kind = p->workload.kind;
  if (p->sites < 2 || (kind != STRATA_WORKLOAD_TRAIN_SYNC && kind != STRATA_WORKLOAD_DILOCO))
    return;
  int per_gpu = kind == STRATA_WORKLOAD_TRAIN_SYNC;
  int lo = -1, hi = -1;
  double lo_v = INFINITY, hi_v = 0;
  for (int s = 0; s < t->site_count; s++) {
    double slowest = 0, total = site_tflops(t, s, &slowest);
    if (total <= 0) {
      if (strata_topo_site_gpus(t, s) > 0) return; /* a GPU whose speed is not known */
      continue;
    }
    double v = per_gpu ? slowest : total;
    if (v < lo_v) lo_v = v, lo = s;
    if (v > hi_v) hi_v = v, hi = s;
  }
  if (lo < 0 || hi < 0 || lo_v >= ASYMMETRY_WARN_RATIO * hi_v) return;
  const strata_topo_mark none = {0, 0};
  report(c, "L4-ASYMMETRIC-SITES", &none, "workload",
         "placement: give each site work in proportion to its compute (batch per site, or "
         "layers); DiLoCo with inner steps per site in that proportion; or hierarchical: train "
         "the matched sites together and join the slow one through DiLoCo's outer sync",
         per_gpu ? "per-step synchronous training waits for the slowest GPU: %s has %.0f dense "
                   "TFLOPS per GPU, %s %.0f, so every step runs at %.0f%% of the fast GPUs' pace "
                   "(straggler bound: they idle %.0f%% of each step)"
                 : "DiLoCo's outer step waits for the site of least compute: %s has %.3g PFLOPS, "
                   "%s %.3g, so with equal work per site the outer sync runs at %.0f%% of the fast "
                   "site's pace (straggler bound: it idles %.0f%% of each outer period)",
         t->sites[lo].name, per_gpu ? lo_v : lo_v / 1000, t->sites[hi].name,
         per_gpu ? hi_v : hi_v / 1000, 100 * lo_v / hi_v, 100 * (1 - lo_v / hi_v));
}

/* A ring across sites moves one chunk per hop per step: the slowest link sets every step, the
 * fast links sit idle for the difference. Only with three sites or more can the links differ
 * along the ring (two sites share their one bottleneck, which the model already takes). Sites
 * joined by extension into islands already run hierarchically (inner loop inside the island,
 * outer sync between islands): there the ring is the one between islands, over the links that
 * are not extensions. */
#define LINK_ASYMMETRY_WARN 4.0

static void lint_asymmetric_links(lint_ctx *c) {
  const strata_plan *p = c->plan;
  const strata_topo *t = p->topo;
  int ring = p->island_mode ? p->islands : p->sites;
  if (ring < 3 || !collective_crosses_sites(p) || p->workload.kind == STRATA_WORKLOAD_RL) return;
  int lo = -1, hi = -1;
  double lo_g = INFINITY, hi_g = 0;
  for (int i = 0; i < t->link_count; i++) {
    strata_wan_model m;
    strata_plan_link_model(p, i, &m);
    if (p->island_mode && m.is_extension) continue;
    if (m.gbps < lo_g) lo_g = m.gbps, lo = i;
    if (m.gbps > hi_g) hi_g = m.gbps, hi = i;
  }
  if (lo < 0 || hi < 0 || !(lo_g > 0) || hi_g < LINK_ASYMMETRY_WARN * lo_g) return;
  report(c, "L4-ASYMMETRIC-LINKS", &t->links[lo].mark, t->links[lo].name,
         "placement: order the ring so the slow link carries one hop (strata place --ring on a "
         "probed matrix); hierarchical: reduce inside the well-connected sites first and send "
         "one shard over the slow link; or run DiLoCo across it",
         "the links between sites differ %.3gx: %s carries %.3g GB/s, %s %.3g GB/s. A ring "
         "across them moves at the slowest hop, so the fast links are used %.0f%% of the time "
         "(straggler bound: the cross-site allreduce takes %.3gx what the fast links alone would)",
         hi_g / lo_g, t->links[lo].name, lo_g, t->links[hi].name, hi_g, 100 * lo_g / hi_g,
         hi_g / lo_g);
}

/* ---- layer 2 and 1, per site / node group ---- */

static void lint_roce(lint_ctx *c, const strata_topo_site *s) {
  const strata_topo_fabric *f = &s->fabric;
  if (f->kind != STRATA_FABRIC_ROCE) return;
  const char *fix =
      "enable PFC on the RDMA priority (usually 3) and ECN marking for DCQCN on "
      "every switch port and NIC (Cumulus RoCE docs), and say so in the file";
  if (f->pfc == 0)
    report(c, "L2-ROCE-NO-PFC", &f->mark, s->name, fix,
           "RoCEv2 fabric of %s has PFC off: RDMA over a lossy Ethernet retransmits whole "
           "windows on every drop",
           s->name);
  else if (f->pfc == STRATA_TOPO_UNKNOWN)
    report(c, "L2-ROCE-PFC-UNKNOWN", &f->mark, s->name, fix,
           "RoCEv2 fabric of %s does not say whether PFC is on: RoCE needs a lossless priority",
           s->name);
  if (f->ecn == 0)
    report(c, "L2-ROCE-NO-ECN", &f->mark, s->name, fix,
           "RoCEv2 fabric of %s has ECN off: without DCQCN, PFC pauses spread congestion", s->name);
}

static void lint_groups(lint_ctx *c) {
  const strata_plan *p = c->plan;
  const strata_topo *t = p->topo;
  int training =
      p->workload.kind == STRATA_WORKLOAD_TRAIN_SYNC || p->workload.kind == STRATA_WORKLOAD_DILOCO;
  for (int s = 0; s < t->site_count; s++) {
    const strata_topo_site *site = &t->sites[s];
    lint_roce(c, site);
    int64_t nodes = strata_topo_site_nodes(t, s);
    if (training && p->workload.kind == STRATA_WORKLOAD_TRAIN_SYNC && nodes > 1 &&
        strata_topo_is_set(site->fabric.oversubscription) && site->fabric.oversubscription > 1)
      report(c, "L2-OVERSUBSCRIBED", &site->fabric.mark, site->name,
             "use a non-blocking (1:1) fabric or rail-optimized placement for data-parallel "
             "groups, or expect the cross-node allreduce to slow by the ratio",
             "fabric of %s is %.3g:1 oversubscribed: every step's cross-node allreduce gets "
             "1/%.3g of the NIC bandwidth",
             site->name, site->fabric.oversubscription, site->fabric.oversubscription);
    int reported_fabric = 0, reported_gdr = 0, reported_pcie = 0;
    for (int g = site->group_begin; g < site->group_begin + site->group_count; g++) {
      const strata_topo_node_group *grp = &t->groups[g];
      const strata_topo_node_spec *spec = &grp->spec;
      if (!reported_fabric && nodes > 1 && spec->gpus > 0 &&
          (site->fabric.kind == STRATA_FABRIC_NONE || strata_plan_node_nic_gbit(spec) <= 0)) {
        reported_fabric = 1;
        report(c, "L2-NO-FABRIC", best_mark(&site->fabric.mark, &grp->mark), site->name,
               "give the site a cluster fabric (InfiniBand or RoCEv2) and the nodes compute NICs",
               "%s has %lld GPU nodes but no compute fabric between them", site->name,
               (long long)nodes);
      }
      for (int n = 0; !reported_gdr && nodes > 1 && n < spec->nic_count; n++) {
        const strata_topo_nic *nic = &spec->nics[n];
        if (nic->role == STRATA_NIC_ROLE_COMPUTE && nic->kind != STRATA_NIC_ETHERNET &&
            nic->gpudirect_rdma == 0 && spec->gpus > 0) {
          reported_gdr = 1;
          report(c, "L2-NO-GPUDIRECT", &nic->mark, grp->name,
                 "enable GPUDirect RDMA (nvidia-peermem) so the NIC reads GPU memory directly",
                 "%s NICs of %s have GPUDirect RDMA off: every transfer bounces through host "
                 "memory",
                 strata_nic_kind_name(nic->kind), grp->name[0] ? grp->name : site->name);
        }
      }
      if (!reported_pcie && training && spec->gpus > 1 && spec->intra != STRATA_INTRA_NVLINK) {
        reported_pcie = 1;
        double gbps = strata_plan_intra_gbps(spec, NULL);
        report(c, "L1-PCIE-ONLY", &grp->mark, grp->name,
               "expect PCIe-bound allreduce inside the node; prefer NVLink (SXM) nodes for "
               "data-parallel training, or shard less (fewer GPUs per model replica)",
               "%d GPUs per node of %s talk over %s (%.0f GB/s per GPU), no NVLink domain",
               spec->gpus, grp->name[0] ? grp->name : site->name,
               spec->intra == STRATA_INTRA_PCIE ? "PCIe" : "host memory", gbps > 0 ? gbps : 18.5);
      }
    }
  }
}

/* ---- layer 4: the decision's own numbers ---- */

static void lint_decision(lint_ctx *c) {
  const strata_plan *p = c->plan;
  const strata_workload *w = &p->workload;
  const strata_topo_mark none = {0, 0};
  if (p->sites < 2) return;
  if (w->kind == STRATA_WORKLOAD_TRAIN_SYNC && strcmp(p->decision, "fabric-extension") != 0)
    report(c, "L4-SYNC-NEEDS-DILOCO", &none, "workload",
           "run DiLoCo across sites (--workload diloco): per-site data parallelism every step, "
           "outer sync every H steps",
           "per-step synchronous training across %d sites over %.3g GB/s / %.3g ms RTT: the "
           "extension is %s, and the per-step path keeps only %.0f%% utilization",
           p->sites, p->wan.gbps, p->wan.rtt_ms,
           p->option_count > 0 && p->options[0].available ? "not worth it" : "not possible",
           p->option_count > 2 ? 100 * p->options[1].utilization : 0.0);
  /* DiLoCo's own cost is the outer sync (the site allreduce is layer 2's business). Published
   * runs keep 83–96% utilization (INTELLECT-1, arXiv 2412.01152; OpenDiLoCo 90–95%, arXiv
   * 2407.07852): an outer sync costing over a quarter of the compute falls clearly short. */
  double outer_ms = p->comm_ms_per_step - p->site_comm_ms;
  if ((!strcmp(p->decision, "overlay+diloco") || !strcmp(p->decision, "extension+diloco")) &&
      outer_ms > 0.25 * w->step_ms)
    report(c, "L4-DILOCO-LOW-UTIL", &none, "workload",
           "raise H (--inner-steps), send fewer bits (--wire-bits 8 or 4, as INTELLECT-1 and "
           "Streaming DiLoCo), overlap streamed fragments with inner steps (--fragments P --delay "
           "TAU) or add WAN streams",
           "DiLoCo's outer sync still costs %.3g ms per %.0f ms step (%.0f%% utilization overall)",
           outer_ms, w->step_ms, 100 * p->utilization);
  /* only what the framework is said to ship can be a mistake; compared on the real sizes, so a
   * delta larger than the weights (most values changing) never asks for delta sync */
  double full = strata_plan_rl_full_bytes(w), delta = strata_plan_rl_delta_bytes(w);
  if (w->kind == STRATA_WORKLOAD_RL && w->rl_sync == STRATA_RL_SYNC_FULL && delta < full)
    report(c, "L4-RL-FULL-SYNC", &none, "workload",
           "send sparse deltas (only changed values and their indices) with periodic full "
           "anchors (delta weight sync; --rl-sync delta to plan it)",
           "RL weight sync ships full weights (%.3g GB) across sites every %d step%s; with %.3g%% "
           "of parameters changing, a sparse delta would be %.3g GB (%.3gx smaller)",
           full / 1e9, w->sync_every, w->sync_every > 1 ? "s" : "", 100 * w->update_fraction,
           delta / 1e9, full / delta);
  if (!strcmp(p->decision, "cross-wan-pipeline") && p->wan.rtt_ms > w->token_ms)
    report(c, "L4-INFER-PIPELINE-SLOW", &none, "workload",
           "if a full replica fits in one site, route requests to replicas (region-replica "
           "routing); otherwise batch more sequences per step to amortize the hop",
           "each decode token waits %.3g ms per remote site (a round trip), more than its %.3g ms "
           "of compute",
           p->wan.rtt_ms, w->token_ms);
}

int strata_plan_lint(strata_plan *plan) {
  lint_ctx c = {plan, 0};
  const strata_topo *t = plan->topo;
  for (int i = 0; i < t->link_count; i++) {
    const strata_topo_link *k = &t->links[i];
    strata_wan_model m;
    strata_plan_link_model(plan, i, &m);
    lint_link_reach(&c, k, m.km);
    lint_roce_headroom(&c, k, m.km);
    lint_link_kinds(&c, k, &m);
    lint_link_workload(&c, k, &m);
    lint_one_stream(&c, k, &m);
  }
  lint_connectivity(&c);
  lint_asymmetric_sites(&c);
  lint_asymmetric_links(&c);
  lint_groups(&c);
  lint_decision(&c);
  return c.failed ? -1 : 0;
}
