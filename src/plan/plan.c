// SPDX-License-Identifier: Apache-2.0
/*
 * plan.c — from a topology and a workload to a plan (see plan.h).
 *
 * The topology becomes two fabrics for the cost model: one site (GPUs in an NVLink domain,
 * domains on the site's cluster fabric) and the whole cluster (plus a WAN level whose bandwidth
 * and latency are the bottleneck link between sites). Heterogeneous sites are represented by
 * their largest node group and the average site size; the plan says so in its summary.
 *
 * Then, per workload, the plan computes what each layer carries, the per-step communication and
 * utilization of every layer-3 option, and takes the decision by the seed's rule: fabric
 * extension only for a workload that needs per-step synchronous collectives across the link and
 * a link that can be extended; otherwise change the algorithm (DiLoCo, delta sync, replica
 * routing) and ride the overlay or routed path.
 *
 * Assumptions the plan makes are named where they are made; numbers come from src/model.
 *
 * Measured links (`strata plan --links`, measured.c): every consumer of a link's figures goes
 * through strata_plan_link_model(), which puts a link matrix's medians in place of the modeled
 * RTT and bandwidth. Nothing here may call strata_plan_wan_model() for a link's figures directly,
 * or a measured link would be planned with modeled numbers in one place and measured in another.
 */
#include "plan/plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/compress.h" /* strata_compress_wire_bytes: the engine's own message sizes */
#include "model/physics.h"

/* ---- workloads ---- */

static const char *const workload_names[STRATA_WORKLOAD_KIND_COUNT] = {
    "train-sync", "diloco", "rl", "inference", "bringup", "fsdp"};

const char *strata_workload_kind_name(strata_workload_kind kind) {
  if ((int)kind < 0 || kind >= STRATA_WORKLOAD_KIND_COUNT) return "?";
  return workload_names[kind];
}

int strata_workload_kind_parse(const char *name, strata_workload_kind *out) {
  for (int i = 0; name && i < STRATA_WORKLOAD_KIND_COUNT; i++)
    if (!strcasecmp(name, workload_names[i])) {
      *out = (strata_workload_kind)i;
      return STRATA_OK;
    }
  return STRATA_ERR_INVALID_ARG;
}

void strata_workload_defaults(strata_workload *w, strata_workload_kind kind) {
  memset(w, 0, sizeof *w);
  w->kind = kind;
  w->params = 7e9;
  w->dtype = STRATA_BF16;
  w->step_ms = 500;
  w->inner_steps = 500; /* DiLoCo H (arXiv 2311.08105) */
  w->wire_bits = 16;    /* FP16 pseudo-gradients are lossless (OpenDiLoCo, arXiv 2407.07852) */
  w->fragments = 1;
  w->delay = 0; /* the textbook algorithm: each exchange blocks */
  w->wan_streams = 16;
  w->transport = STRATA_WAN_STRATA;
  w->rank_cores = 1;
  /* ~99% of per-step bf16 updates vanish after the cast (PULSE, arXiv 2602.03839); 5–30% of
   * parameters change over a whole RL run (arXiv 2505.11711) */
  w->update_fraction = 0.01;
  w->sync_every = 1;
  /* KV of a 7B GQA model (32 layers × 8 KV heads × 128 × K,V × 2 B = 128 KiB/token), 2k tokens */
  w->kv_bytes_per_request = 128.0 * 1024 * 2048;
  w->requests_per_s = 10;
  w->replicas_per_site = 1;
  w->token_ms = 20;
  w->tp = w->pp = 1;
  w->layers = 32;                  /* a 7B transformer (Llama 2 7B: 32 layers) */
  w->tokens_per_step = 8.0 * 4096; /* 8 sequences of 4k tokens per data-parallel replica */
  w->micro_batches = 0;
}

/* The link makes its two sites one RDMA fabric: MetroX or RoCE aggregation that no error lint
 * rules out (strata_plan_extension_blocker). */
static int link_extends(const strata_topo *topo, int link) {
  strata_extension_kind k = topo->links[link].extension.kind;
  return (k == STRATA_EXT_METROX || k == STRATA_EXT_ROCE_AGGREGATION) &&
         strata_plan_extension_blocker(topo, link) == NULL;
}

strata_workload_kind strata_workload_auto(const strata_topo *topo) {
  if (!topo || topo->site_count < 2) return STRATA_WORKLOAD_TRAIN_SYNC;
  if (topo->link_count == 0) return STRATA_WORKLOAD_DILOCO;
  for (int i = 0; i < topo->link_count; i++)
    if (!link_extends(topo, i)) return STRATA_WORKLOAD_DILOCO;
  return STRATA_WORKLOAD_TRAIN_SYNC;
}

static const char *const rl_sync_names[] = {"auto", "full", "delta"};

static const char *const transport_names[] = {"strata", "nccl-socket", "nccl-strata"};

const char *strata_wan_transport_name(strata_wan_transport transport) {
  if ((int)transport < 0 || transport > STRATA_WAN_NCCL_STRATA) return "?";
  return transport_names[transport];
}

int strata_wan_transport_parse(const char *name, strata_wan_transport *out) {
  if (!name) return STRATA_ERR_INVALID_ARG;
  if (!strcasecmp(name, "nccl")) name = "nccl-socket";
  for (int i = 0; i <= STRATA_WAN_NCCL_STRATA; i++)
    if (!strcasecmp(name, transport_names[i])) {
      *out = (strata_wan_transport)i;
      return STRATA_OK;
    }
  return STRATA_ERR_INVALID_ARG;
}

const char *strata_rl_sync_name(strata_rl_sync sync) {
  return (unsigned)sync < 3 ? rl_sync_names[sync] : "?";
}

int strata_rl_sync_parse(const char *name, strata_rl_sync *out) {
  for (int i = 0; name && i < 3; i++)
    if (!strcasecmp(name, rl_sync_names[i])) {
      *out = (strata_rl_sync)i;
      return STRATA_OK;
    }
  return STRATA_ERR_INVALID_ARG;
}

const char *strata_severity_name(strata_severity s) {
  switch (s) {
    case STRATA_SEVERITY_INFO:
      return "info";
    case STRATA_SEVERITY_WARNING:
      return "warning";
    case STRATA_SEVERITY_ERROR:
      return "error";
  }
  return "?";
}

static void fmt(char *buf, size_t len, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *buf, size_t len, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, len, f, ap);
  va_end(ap);
}

/* ---- the topology as the model sees it ---- */

/* In-network reduction efficiency. NVLS on Hopper: measured ≈480 GB/s busbw on 8×H100
 * (nccl-tests#212) over 369 GB/s achieved per direction, 480/1.75/369 ≈ 0.74; Blackwell scaled by
 * NCCL's nvlsEfficiency ratio 0.74/0.85 (NVIDIA/nccl tuning.cc). SHARP: assumed as Hopper NVLS.
 * Latencies: NCCL NVLS Simple, NVLink 25 µs, NET 18 µs (tuning.cc). */
#define NVLS_EFFICIENCY_HOPPER 0.74
#define NVLS_EFFICIENCY_BLACKWELL (0.74 * 0.74 / 0.85)
#define SHARP_EFFICIENCY 0.74
#define NVLS_ALPHA_US 25.0
#define SHARP_ALPHA_US 18.0
/* One CPU-side reduction stream is not the bottleneck on GPUs: γ is GPU memory speed, assumed
 * 1000 GB/s (H100 HBM3 is 3.35 TB/s; reads of two operands and a write). */
#define GPU_REDUCE_GBPS 1000.0
/* Route length over great-circle distance, assumed 1.3 (fiber follows roads and rights of way). */
#define ROUTE_FACTOR 1.3

static strata_tech nvlink_tech(strata_nvlink_gen gen) {
  switch (gen) {
    case STRATA_NVLINK_3:
      return STRATA_TECH_NVLINK3;
    case STRATA_NVLINK_5:
      return STRATA_TECH_NVLINK5;
    case STRATA_NVLINK_6:
      return STRATA_TECH_NVLINK6;
    default:
      return STRATA_TECH_NVLINK4;
  }
}

static strata_tech pcie_tech(strata_pcie_gen gen) {
  switch (gen) {
    case STRATA_PCIE_5:
      return STRATA_TECH_PCIE5;
    case STRATA_PCIE_6:
      return STRATA_TECH_PCIE6;
    default:
      return STRATA_TECH_PCIE4;
  }
}

double strata_plan_intra_gbps(const strata_topo_node_spec *spec, int *nvls) {
  if (nvls) *nvls = 0;
  if (spec->intra == STRATA_INTRA_NVLINK) {
    const strata_tech_info *t = strata_tech_get(nvlink_tech(spec->nvlink));
    /* NVLS needs NVSwitch multicast, Hopper (NVLink4) onwards (NVIDIA/nccl tuning.cc) */
    if (nvls) *nvls = spec->nvswitch_domain_gpus > 1 && spec->nvlink >= STRATA_NVLINK_4;
    /* intra gbps in the file is a measured Gb/s per GPU (docs/topology.md): use it as is */
    if (strata_topo_is_set(spec->intra_gbps)) return spec->intra_gbps / 8;
    return t->peak_gbps * t->efficiency;
  }
  if (spec->intra == STRATA_INTRA_PCIE) {
    const strata_tech_info *t = strata_tech_get(pcie_tech(spec->pcie));
    return strata_topo_is_set(spec->intra_gbps) ? spec->intra_gbps / 8 : t->peak_gbps;
  }
  return 0;
}

static double nic_port_gbit(const strata_topo_nic *nic) {
  if (strata_topo_is_set(nic->gbps)) return nic->gbps;
  if (nic->kind == STRATA_NIC_INFINIBAND) {
    switch (nic->ib_speed) {
      case STRATA_IB_HDR:
        return 200;
      case STRATA_IB_XDR:
        return 800;
      default:
        return 400; /* NDR, and unspecified */
    }
  }
  return 100; /* assumed for an Ethernet port with no speed */
}

double strata_plan_node_nic_gbit(const strata_topo_node_spec *spec) {
  double total = 0;
  for (int i = 0; i < spec->nic_count; i++)
    if (spec->nics[i].role == STRATA_NIC_ROLE_COMPUTE)
      total += nic_port_gbit(&spec->nics[i]) * spec->nics[i].count;
  return total;
}

double strata_plan_link_km(const strata_topo *topo, const strata_topo_link *link) {
  if (strata_topo_is_set(link->physical.km)) return link->physical.km;
  double d = strata_topo_site_distance_km(topo, link->site_a, link->site_b);
  return strata_topo_is_set(d) ? d * ROUTE_FACTOR : -1;
}

static double link_capacity_gbit(const strata_topo_link *link) {
  if (strata_topo_is_set(link->physical.capacity_gbps)) return link->physical.capacity_gbps;
  return -1;
}

/* A path that loses packets at random caps each TCP stream at MSS·C / (RTT·√p), C = √(3/2)
 * (Mathis, Semke, Mahdavi and Ott 1997), whatever its capacity; streams add up. The MSS is the
 * MTU less 40 B of TCP/IP headers: 1460 on a bare path, the tunnel's MTU less 40 inside
 * WireGuard (1380 at 1420). */
static double lossy_tcp_gbit(const strata_topo_link *link, double rtt_ms, int streams) {
  double mtu = 1500;
  if (link->overlay.kind == STRATA_OVERLAY_WIREGUARD)
    mtu = strata_topo_is_set(link->overlay.mtu_bytes) ? link->overlay.mtu_bytes
                                                      : strata_wireguard_mtu(1500);
  double mss = mtu > 40 ? mtu - 40 : 1;
  double p = link->overlay.loss_pct / 100;
  double per_stream_bit = mss * 8 * sqrt(1.5) / (rtt_ms / 1000 * sqrt(p));
  return per_stream_bit * (streams > 0 ? streams : 1) / 1e9;
}

void strata_plan_wan_model(const strata_topo *topo, int index, const strata_workload *w,
                           strata_wan_model *out) {
  memset(out, 0, sizeof *out);
  out->link = index;
  const strata_topo_link *link = &topo->links[index];
  out->km = strata_plan_link_km(topo, link);
  out->owned = strata_plan_path_owned(link);
  out->is_overlay = link->overlay.kind == STRATA_OVERLAY_WIREGUARD;
  /* an extension an error lint rules out carries nothing as RDMA: what is left is the routed
   * (or tunnelled) path under it, modeled as such */
  out->extension_ruled_out = strata_plan_extension_blocker(topo, index);
  out->is_extension = link_extends(topo, index);
  /* RTT: measured, else the fiber floor, else assumed (30 ms internet, 1 ms owned) */
  if (strata_topo_is_set(link->overlay.rtt_ms))
    out->rtt_ms = link->overlay.rtt_ms;
  else if (out->km >= 0)
    out->rtt_ms = strata_fiber_rtt_ms(out->km);
  else
    out->rtt_ms = out->owned ? 1.0 : 30.0;
  double cap = link_capacity_gbit(link);
  double gbit;
  int rdma = out->is_extension ||
             (link->extension.kind == STRATA_EXT_IB_ROUTER && !out->extension_ruled_out);
  /* over TCP the transport decides the streams: NCCL's socket network opens one per peer by
   * default; strata, and NCCL on strata's plugin, STRATA_TCP_STREAMS (--streams) */
  out->transport = rdma || !w ? STRATA_WAN_STRATA : w->transport;
  int streams = out->transport == STRATA_WAN_NCCL_SOCKET ? 1 : (w ? w->wan_streams : 16);
  out->streams = streams;
  if (rdma) {
    /* RDMA across: the extension's capacity (MetroX-3: 400G per port, trade press) */
    gbit = strata_topo_is_set(link->extension.gbps) ? link->extension.gbps : (cap > 0 ? cap : 400);
    if (strata_topo_is_set(link->extension.oversubscription) &&
        link->extension.oversubscription > 1)
      gbit /= link->extension.oversubscription;
    gbit *= 0.92; /* as InfiniBand ports (physics.c NET_EFFICIENCY) */
  } else if (strata_topo_is_set(link->overlay.bandwidth_gbps)) {
    /* measured with one flow (iperf3's default, DT-FM's figures): many streams scale it along
     * PCCL's curve (1 → 3.7 Gb/s, 64 → 45 Gb/s), capped by the path when its capacity is known */
    double one = link->overlay.bandwidth_gbps;
    gbit = one * strata_wan_tcp_gbit(0, streams) / strata_wan_tcp_gbit(0, 1);
    if (cap > 0 && gbit > cap) gbit = cap;
  } else {
    /* TCP across: PCCL's many-stream curve, capped by the path (assumed 10 Gb/s if unknown) */
    double path = cap > 0 ? cap : 10;
    gbit = strata_wan_tcp_gbit(path, streams);
    if (out->is_overlay) {
      int mtu =
          strata_topo_is_set(link->overlay.mtu_bytes) ? (int)link->overlay.mtu_bytes + 80 : 1500;
      gbit *= strata_wireguard_efficiency(mtu);
    }
  }
  if (!rdma && strata_topo_is_set(link->overlay.loss_pct) && link->overlay.loss_pct > 0)
    gbit = fmin(gbit, lossy_tcp_gbit(link, out->rtt_ms, streams));
  if (out->transport != STRATA_WAN_STRATA && out->rtt_ms > 0) {
    out->nccl_window_gbps =
        STRATA_NCCL_CHANNELS * STRATA_NCCL_WINDOW_BYTES / (out->rtt_ms / 1000) / 1e9;
    gbit = fmin(gbit, out->nccl_window_gbps * 8);
  }
  out->gbps = gbit / 8.0;
  out->unsealed_gbps = out->gbps;
  /* strata seals its frames (the plugin's too); NCCL's socket network does not */
  out->sealed = !out->is_overlay && !rdma && out->transport != STRATA_WAN_NCCL_SOCKET;
  if (out->sealed && out->gbps > strata_seal_cap_gbps()) out->gbps = strata_seal_cap_gbps();
}

void strata_plan_link_model(const strata_plan *plan, int link, strata_wan_model *out) {
  strata_plan_wan_model(plan->topo, link, &plan->workload, out);
  const strata_plan_measured_link *ml = strata_plan_measured_find(plan->measured, link);
  if (!ml) return;
  /* what the probe's pairs got, as is (sealed or not as they ran): --streams does not rescale it
   * (docs/plan.md) */
  out->rtt_ms = 2 * ml->latency_us / 1000;
  out->gbps = out->unsealed_gbps = ml->gbps;
  out->measured = 1;
}

/* The node group standing for a site (most GPUs), or -1 if the site has none. */
static int site_main_group(const strata_topo *t, int site) {
  const strata_topo_site *s = &t->sites[site];
  int best = -1;
  int64_t best_gpus = -1;
  for (int g = s->group_begin; g < s->group_begin + s->group_count; g++) {
    int64_t gpus = t->groups[g].count * (t->groups[g].spec.gpus > 0 ? t->groups[g].spec.gpus : 1);
    if (gpus > best_gpus) {
      best_gpus = gpus;
      best = g;
    }
  }
  return best;
}

static int cluster_main_group(const strata_topo *t) {
  int best = -1;
  int64_t best_gpus = -1;
  for (int g = 0; g < t->group_count; g++) {
    int64_t gpus = t->groups[g].count * (t->groups[g].spec.gpus > 0 ? t->groups[g].spec.gpus : 1);
    if (gpus > best_gpus) {
      best_gpus = gpus;
      best = g;
    }
  }
  return best;
}

static int clamp_int(double v) {
  if (v < 1) return 1;
  if (v > 2e9) return 2000000000;
  return (int)llround(v);
}

/* NCCL's compute-capability class of a GPU (tuning.cc indexes its constants by it): Ampere 80,
 * Hopper 90, Blackwell 100; Rubin uses Blackwell's, the newest NCCL publishes. */
static int gpu_arch(strata_gpu_model gpu) {
  switch (gpu) {
    case STRATA_GPU_A100:
      return 80;
    case STRATA_GPU_H100:
    case STRATA_GPU_H200:
      return 90;
    default:
      return 100;
  }
}

/* NVLink links per GPU: 12 on A100 (NVLink3), 18 on H100 and Blackwell (NVIDIA NVLink page);
 * Rubin's count is not published, assumed 18. */
static int nvlink_links(strata_nvlink_gen gen) {
  return gen == STRATA_NVLINK_3 ? 12 : 18;
}

/* PCIe Gen3 x16 as NCCL models it (PCI_BW, src/graph/topo.h). */
#define PCIE3_X16_GBPS 12.0

/* Compute NIC ports of a node; *rdma is cleared when any of them is plain Ethernet (NCCL then
 * falls back to its socket transport). */
static int node_compute_nics(const strata_topo_node_spec *spec, int *rdma) {
  int n = 0;
  for (int i = 0; i < spec->nic_count; i++) {
    if (spec->nics[i].role != STRATA_NIC_ROLE_COMPUTE) continue;
    n += spec->nics[i].count;
    if (spec->nics[i].kind == STRATA_NIC_ETHERNET) *rdma = 0;
  }
  return n;
}

/* GPUDirect RDMA on every compute NIC. A file that does not say is taken as on, NCCL's behaviour
 * wherever the peer-memory module is loaded (lint L2-NO-GPUDIRECT covers an explicit off). */
static int node_gpudirect(const strata_topo_node_spec *spec) {
  for (int i = 0; i < spec->nic_count; i++)
    if (spec->nics[i].role == STRATA_NIC_ROLE_COMPUTE && spec->nics[i].gpudirect_rdma == 0)
      return 0;
  return 1;
}

/* Level 0 (NVLink domain) and level 1 (site fabric) for the site whose main group is `g`. */
static void site_levels(const strata_topo *t, int g, double site_ranks, strata_fabric *f) {
  const strata_topo_node_spec *spec = &t->groups[g].spec;
  const strata_topo_fabric *fab = &t->sites[t->groups[g].site].fabric;
  int gpus = spec->gpus > 0 ? spec->gpus : 1;
  int domain = spec->nvswitch_domain_gpus > gpus ? spec->nvswitch_domain_gpus : gpus;
  if (domain > site_ranks) domain = clamp_int(site_ranks);
  int nvls = 0;
  double intra = strata_plan_intra_gbps(spec, &nvls);
  strata_level *l0 = &f->level[0];
  memset(l0, 0, sizeof *l0);
  l0->name = spec->intra == STRATA_INTRA_NVLINK ? "nvlink" : "pcie";
  l0->fanout = domain;
  l0->alpha_us = strata_tech_get(spec->intra == STRATA_INTRA_NVLINK ? nvlink_tech(spec->nvlink)
                                                                    : pcie_tech(spec->pcie))
                     ->latency_us;
  /* no peer-to-peer: GPUs talk through host memory (~37 GB/s on a no-P2P H100 path,
   * NVIDIA/nccl#1264) */
  l0->per_rank_gbps = intra > 0 ? intra : 37.0 / 2;
  l0->innet = nvls;
  l0->innet_efficiency =
      spec->nvlink >= STRATA_NVLINK_5 ? NVLS_EFFICIENCY_BLACKWELL : NVLS_EFFICIENCY_HOPPER;
  l0->innet_alpha_us = NVLS_ALPHA_US;
  strata_level *l1 = &f->level[1];
  memset(l1, 0, sizeof *l1);
  l1->name = fab->kind == STRATA_FABRIC_INFINIBAND ? "infiniband"
             : fab->kind == STRATA_FABRIC_ROCE     ? "roce"
                                                   : "ethernet";
  l1->fanout = clamp_int(site_ranks / domain);
  int rdma = fab->kind == STRATA_FABRIC_INFINIBAND || fab->kind == STRATA_FABRIC_ROCE;
  int nics = node_compute_nics(spec, &rdma);
  const strata_tech_info *net = strata_tech_get(rdma ? STRATA_TECH_IB_NDR : STRATA_TECH_ETHERNET);
  double nic_gbit = strata_plan_node_nic_gbit(spec);
  if (nic_gbit <= 0 || nics < 1) { /* a node with no compute NIC: assumed 10 GbE frontend */
    nic_gbit = 10;
    nics = 1;
    rdma = 0;
  }
  double per_port = nic_gbit / 8.0 / nics * net->efficiency;
  if (strata_topo_is_set(fab->oversubscription) && fab->oversubscription > 1)
    per_port /= fab->oversubscription;
  /* what NCCL runs on inside the site: the NVLink domain is its node, with every NIC of the
   * domain's trays (NVL72: 18 trays of 4) */
  strata_nccl_system *sys = &f->gpu;
  memset(sys, 0, sizeof *sys);
  sys->present = spec->gpu != STRATA_GPU_NONE && spec->gpus > 0;
  sys->arch = gpu_arch(spec->gpu);
  sys->nvlink_gbps = spec->intra == STRATA_INTRA_NVLINK ? l0->per_rank_gbps : 0;
  sys->nvlink_links = spec->intra == STRATA_INTRA_NVLINK ? nvlink_links(spec->nvlink) : 0;
  sys->intra_gbps = l0->per_rank_gbps;
  sys->nvls = nvls;
  sys->nvls_efficiency = l0->innet_efficiency;
  sys->nics = nics * (domain > gpus ? domain / gpus : 1);
  sys->nic_gbps = per_port;
  sys->pcie_gbps = spec->pcie == STRATA_PCIE_3 ? PCIE3_X16_GBPS
                                               : strata_tech_get(pcie_tech(spec->pcie))->peak_gbps;
  sys->gpudirect = rdma && node_gpudirect(spec);
  sys->sockets = !rdma;
  sys->net_latency_us = rdma ? 0 : net->latency_us;
  sys->collnet = fab->kind == STRATA_FABRIC_INFINIBAND && fab->sharp == 1;
  sys->collnet_efficiency = SHARP_EFFICIENCY;
  /* every GPU's share of the node's boundary, as NCCL's channels fill it (GPUDirect or not) */
  l1->per_rank_gbps = sys->present ? strata_nccl_net_gbps(sys) / domain : per_port * nics / gpus;
  l1->alpha_us = net->latency_us;
  l1->innet = fab->kind == STRATA_FABRIC_INFINIBAND && fab->sharp == 1;
  l1->innet_efficiency = SHARP_EFFICIENCY;
  l1->innet_alpha_us = SHARP_ALPHA_US;
  f->reduce_gbps = GPU_REDUCE_GBPS;
}

/* The bottleneck link between sites: the slowest link (of one kind: extensions or not, or any),
 * or none (-1). */
static void choose_wan(const strata_plan *p, int want_extension, strata_wan_model *out) {
  memset(out, 0, sizeof *out);
  out->link = -1;
  double best = INFINITY;
  for (int i = 0; i < p->topo->link_count; i++) {
    strata_wan_model m;
    strata_plan_link_model(p, i, &m);
    if (want_extension >= 0 && m.is_extension != want_extension) continue;
    if (m.gbps < best || (m.gbps == best && m.rtt_ms > out->rtt_ms)) {
      best = m.gbps;
      *out = m;
    }
  }
}

static int island_root(int *parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

/* Sites joined by fabric-extension links form islands; returns how many (sites if none). */
static int count_islands(const strata_topo *t) {
  int *parent = malloc((size_t)t->site_count * sizeof *parent);
  if (!parent) return t->site_count;
  for (int i = 0; i < t->site_count; i++) parent[i] = i;
  for (int i = 0; i < t->link_count; i++)
    if (link_extends(t, i))
      parent[island_root(parent, t->links[i].site_a)] = island_root(parent, t->links[i].site_b);
  int n = 0;
  for (int i = 0; i < t->site_count; i++) n += island_root(parent, i) == i;
  free(parent);
  return n;
}

/* A level for a link between groups: its bandwidth is the whole boundary's. */
static void wan_level(strata_level *l, const strata_wan_model *m, int fanout) {
  memset(l, 0, sizeof *l);
  l->name = m->is_extension ? "extension" : m->is_overlay ? "overlay" : "wan";
  l->fanout = fanout;
  double gbps = m->link >= 0 ? m->gbps : 1e-6; /* cut off: effectively nothing */
  l->per_rank_gbps = gbps;
  l->aggregate_gbps = gbps;
  /* a measured latency already went through a transport's stack; a modeled one gets its α */
  l->alpha_us = m->rtt_ms * 1000 / 2 + (m->measured ? 0 : m->is_extension ? 14.0 : 25.0);
}

static void build_fabrics(strata_plan *p) {
  const strata_topo *t = p->topo;
  int g = cluster_main_group(t);
  int gpus = t->groups[g].spec.gpus > 0 ? t->groups[g].spec.gpus : 1;
  p->gpus_per_node = gpus;
  double ranks = (double)(p->gpus > 0 ? p->gpus : p->nodes);
  double site_ranks = ranks / p->sites;
  int sg = site_main_group(t, t->groups[g].site);
  memset(&p->site_fabric, 0, sizeof p->site_fabric);
  p->site_fabric.nlevels = 2;
  site_levels(t, sg >= 0 ? sg : g, site_ranks, &p->site_fabric);
  const strata_plan_measured *ms = p->measured;
  if (ms && ms->inside_sites && ms->inside_pairs > 0) { /* a topology made from the matrix */
    p->site_fabric.level[1].alpha_us = ms->inside_latency_us;
    p->site_fabric.level[1].per_rank_gbps = ms->inside_gbps;
    p->site_fabric.level[1].name = "measured";
  }
  p->global_fabric = p->site_fabric;
  p->islands = count_islands(t);
  p->island_mode = p->islands > 1 && p->islands < p->sites;
  if (p->sites <= 1) {
    choose_wan(p, -1, &p->wan);
    return;
  }
  if (!p->island_mode) {
    choose_wan(p, -1, &p->wan);
    wan_level(&p->global_fabric.level[2], &p->wan, p->sites);
    p->global_fabric.nlevels = 3;
    return;
  }
  strata_wan_model ext;
  choose_wan(p, 1, &ext);
  p->island_link = ext;
  choose_wan(p, 0, &p->wan);
  int per_island = clamp_int((double)p->sites / p->islands);
  p->island_fabric = p->site_fabric;
  wan_level(&p->island_fabric.level[2], &ext, per_island);
  p->island_fabric.nlevels = 3;
  p->global_fabric = p->island_fabric;
  wan_level(&p->global_fabric.level[3], &p->wan, p->islands);
  p->global_fabric.nlevels = 4;
}

/* ---- predictions ---- */

static void add_prediction(strata_plan *p, const strata_fabric *f, const char *scope,
                           strata_coll coll, double bytes, int algo) {
  if (p->prediction_count >= STRATA_PLAN_MAX_PREDICTIONS || bytes <= 0) return;
  strata_prediction pr;
  int rc = algo < 0 ? strata_cost_best(f, coll, bytes, &pr)
                    : strata_cost_predict(f, coll, (strata_model_algo)algo, bytes, &pr);
  if (rc != 0) return;
  fmt(p->prediction_scope[p->prediction_count], sizeof p->prediction_scope[0], "%s", scope);
  p->prediction_chosen[p->prediction_count] = algo < 0;
  p->predictions[p->prediction_count++] = pr;
}

/* Every applicable algorithm for one collective and size; the fastest is marked chosen. */
static void add_all_algorithms(strata_plan *p, const strata_fabric *f, const char *scope,
                               strata_coll coll, double bytes) {
  int first = p->prediction_count, best = -1;
  for (int a = 0; a < STRATA_MODEL_ALGO_COUNT; a++) add_prediction(p, f, scope, coll, bytes, a);
  for (int i = first; i < p->prediction_count; i++)
    if (best < 0 || p->predictions[i].time_us < p->predictions[best].time_us) best = i;
  if (best >= 0) p->prediction_chosen[best] = 1;
}

static double grad_bytes(const strata_workload *w) {
  return w->params * (double)strata_dtype_size(w->dtype);
}

int strata_plan_wire_encoding(double wire_bits, strata_compress *out) {
  strata_compress c;
  if (wire_bits == 32)
    c = STRATA_COMPRESS_NONE;
  else if (wire_bits == 16)
    c = STRATA_COMPRESS_BF16;
  else if (wire_bits == 8)
    c = STRATA_COMPRESS_INT8;
  else if (wire_bits == 4)
    c = STRATA_COMPRESS_INT4;
  else
    return STRATA_ERR_INVALID_ARG;
  if (out) *out = c;
  return STRATA_OK;
}

/* Encoded bytes of `values` f32 outer-gradient values, as the engine sizes a message of them. */
static double outer_wire_bytes(const strata_workload *w, double values) {
  strata_compress c = STRATA_COMPRESS_NONE;
  strata_plan_wire_encoding(w->wire_bits, &c);
  if (!(values > 0)) return 0;
  return (double)strata_compress_wire_bytes(c, (uint64_t)llround(values));
}

static void build_predictions(strata_plan *p) {
  double g = grad_bytes(&p->workload);
  /* one NVLink domain, as nccl-tests would measure it: 8 GiB allreduce, every algorithm */
  strata_fabric node = p->site_fabric;
  node.nlevels = 1;
  if (strata_fabric_nranks(&node) > 1)
    add_all_algorithms(p, &node, "node", STRATA_COLL_ALLREDUCE, 8.0 * (1 << 30));
  /* one site: the gradient allreduce under every algorithm, then the best of each collective */
  if (strata_fabric_nranks(&p->site_fabric) > strata_fabric_nranks(&node)) {
    add_all_algorithms(p, &p->site_fabric, "site", STRATA_COLL_ALLREDUCE, g);
    add_prediction(p, &p->site_fabric, "site", STRATA_COLL_REDUCE_SCATTER, g, -1);
    add_prediction(p, &p->site_fabric, "site", STRATA_COLL_ALLGATHER, g, -1);
    add_prediction(p, &p->site_fabric, "site", STRATA_COLL_BROADCAST, g, -1);
    add_prediction(p, &p->site_fabric, "site", STRATA_COLL_ALLTOALL, 64.0 * (1 << 20), -1);
  } else if (strata_fabric_nranks(&node) > 1) {
    add_prediction(p, &node, "node", STRATA_COLL_REDUCE_SCATTER, g, -1);
    add_prediction(p, &node, "node", STRATA_COLL_ALLGATHER, g, -1);
    add_prediction(p, &node, "node", STRATA_COLL_BROADCAST, g, -1);
    add_prediction(p, &node, "node", STRATA_COLL_ALLTOALL, 64.0 * (1 << 20), -1);
  }
  if (p->sites > 1) {
    add_all_algorithms(p, &p->global_fabric, "global", STRATA_COLL_ALLREDUCE, g);
    if (p->workload.kind == STRATA_WORKLOAD_DILOCO ||
        p->workload.kind == STRATA_WORKLOAD_TRAIN_SYNC)
      add_prediction(p, &p->global_fabric, "outer", STRATA_COLL_ALLREDUCE,
                     outer_wire_bytes(&p->workload, p->workload.params), -1);
  }
}

/* ---- workloads ---- */

static double best_ms(const strata_fabric *f, strata_coll coll, double bytes) {
  if (strata_fabric_nranks(f) <= 1 || bytes <= 0) return 0;
  strata_prediction pr;
  if (strata_cost_best(f, coll, bytes, &pr) != 0) return 0;
  return pr.time_us / 1000;
}

static double util(double step_ms, double comm_ms) {
  return step_ms > 0 ? step_ms / (step_ms + comm_ms) : 0;
}

static const char *extension_ruled_out(const strata_plan *p, char *why, size_t len);

static strata_plan_option *add_option(strata_plan *p, const char *name, int available,
                                      double comm_ms, double wan_bytes) {
  if (p->option_count >= STRATA_PLAN_MAX_OPTIONS) return NULL;
  strata_plan_option *o = &p->options[p->option_count++];
  memset(o, 0, sizeof *o);
  fmt(o->name, sizeof o->name, "%s", name);
  o->available = available;
  o->comm_ms_per_step = comm_ms;
  o->utilization = util(p->workload.step_ms, comm_ms);
  o->wan_bytes_per_step = wan_bytes;
  /* an option a finding rules out carries that finding's id, so no reader takes it for a choice */
  char why[200];
  const char *id = NULL;
  if (!strcmp(name, "fabric-extension") || !strcmp(name, "extension-pipeline"))
    id = extension_ruled_out(p, why, sizeof why);
  if (id) {
    o->available = 0;
    fmt(o->ruled_out_by, sizeof o->ruled_out_by, "%s", id);
  }
  return o;
}

static const strata_plan_option *find_option(const strata_plan *p, const char *name) {
  for (int i = 0; i < p->option_count; i++)
    if (!strcmp(p->options[i].name, name)) return &p->options[i];
  return NULL;
}

/* The error finding that rules out making every site one fabric, or NULL: an extension on any
 * link that cannot work (strata_plan_extension_blocker, the bottleneck's first), or an IB router
 * between sites, which joins subnets and is never one fabric (L3-IBROUTER-NOT-EXT: to get one,
 * the router would have to be replaced). `why` gets the reason, the id first. */
static const char *extension_ruled_out(const strata_plan *p, char *why, size_t len) {
  const strata_topo *t = p->topo;
  const char *id = NULL;
  int link = -1;
  if (p->wan.link >= 0 && p->wan.extension_ruled_out) {
    id = p->wan.extension_ruled_out;
    link = p->wan.link;
  }
  for (int i = 0; !id && i < t->link_count; i++)
    if ((id = strata_plan_extension_blocker(t, i))) link = i;
  for (int i = 0; !id && i < t->link_count; i++)
    if (t->links[i].extension.kind == STRATA_EXT_IB_ROUTER) {
      id = "L3-IBROUTER-NOT-EXT";
      link = i;
    }
  if (!id) return NULL;
  const strata_topo_link *k = &t->links[link];
  fmt(why, len, "ruled out by %s: %s on %s cannot make one fabric (see the finding)", id,
      strata_extension_kind_name(k->extension.kind), k->name);
  return id;
}

/* Can every site become one fabric: an extension that works, or owned fiber within MetroX reach
 * where one could be bought? Sets o->ruled_out_by when an error finding says no. */
static int extension_possible(const strata_plan *p, char *why, size_t len) {
  if (extension_ruled_out(p, why, len)) return 0;
  if (p->wan.is_extension) {
    fmt(why, len, "the link already extends the fabric");
    return 1;
  }
  if (p->wan.link < 0) {
    fmt(why, len, "some site has no link at all");
    return 0;
  }
  if (!p->wan.owned) {
    fmt(why, len, "the path is not owned end to end (MetroX needs dark fiber or DWDM)");
    return 0;
  }
  if (p->wan.km > strata_optic_reach_km(STRATA_OPTIC_METROX3)) {
    fmt(why, len, "%.0f km exceeds MetroX reach (%.0f km)", p->wan.km,
        strata_optic_reach_km(STRATA_OPTIC_METROX3));
    return 0;
  }
  fmt(why, len, "owned fiber within MetroX reach: needs MetroX appliances");
  return 1;
}

/* The global fabric with the WAN level replaced by a MetroX extension over the same route. */
static void extension_fabric(const strata_plan *p, strata_fabric *f) {
  *f = p->global_fabric;
  if (p->wan.is_extension) return;
  strata_level *l2 = &f->level[f->nlevels - 1];
  double gbit =
      p->wan.link >= 0 && strata_topo_is_set(p->topo->links[p->wan.link].physical.capacity_gbps)
          ? p->topo->links[p->wan.link].physical.capacity_gbps
          : 400;
  l2->per_rank_gbps = l2->aggregate_gbps = gbit * 0.92 / 8;
  l2->alpha_us = strata_fiber_delay_us(p->wan.km > 0 ? p->wan.km : 0) + 14.0;
}

/* One-way time of a message across a link, as wan_level() models it. */
static double link_alpha_us(const strata_wan_model *m) {
  return m->rtt_ms * 1000 / 2 + (m->measured ? 0 : m->is_extension ? 14.0 : 25.0);
}

/* DiLoCo's outer sync in bytes and time (strata_plan_diloco in plan.h says what is counted).
 * Fragments hold params / P values each, the remainder spread one value apiece, as the library
 * splits a flat parameter set. The exchange time is the cross-site phase on the bottleneck
 * link: 2(S-1) one-way hops (the ring among the S ranks of a local index) plus the site's
 * bytes at the link's bandwidth; the phases inside a site are layer 2's and not counted. */
static void build_diloco(strata_plan *p) {
  const strata_workload *w = &p->workload;
  strata_plan_diloco *d = &p->diloco;
  memset(d, 0, sizeof *d);
  d->hide_gbps = NAN;
  strata_compress c = STRATA_COMPRESS_NONE;
  strata_plan_wire_encoding(w->wire_bits, &c);
  d->encoding = strata_compress_name(c);
  if (p->sites < 2 || (w->kind != STRATA_WORKLOAD_DILOCO && w->kind != STRATA_WORKLOAD_TRAIN_SYNC))
    return;
  d->modeled = 1;
  const int S = p->sites, P = w->fragments, H = w->inner_steps;
  const double cross = 2.0 * (S - 1) / S; /* share of its data each rank sends across sites */
  double ranks = (double)(p->gpus > 0 ? p->gpus : p->nodes);
  d->sites = S;
  d->ranks_per_site = clamp_int(ranks / S);
  double n = floor(w->params + 0.5);
  double lo = floor(n / P), rem = n - lo * P; /* rem fragments of lo + 1 values, the rest lo */
  double outer = rem * outer_wire_bytes(w, lo + 1) + (P - rem) * outer_wire_bytes(w, lo);
  d->fragment_values = n / P;
  d->site_bytes_per_outer = cross * outer;
  d->site_bytes_per_fragment = d->site_bytes_per_outer / P;
  d->rank_bytes_per_outer = d->site_bytes_per_outer / d->ranks_per_site;
  d->site_bytes_per_inner = d->site_bytes_per_outer / H;
  d->sync_site_bytes_per_step = cross * 4.0 * n;
  d->ratio = d->sync_site_bytes_per_step / d->site_bytes_per_inner;
  /* no link at all: wan_level()'s cut-off, effectively nothing gets across */
  double gbps = p->wan.link >= 0 && p->wan.gbps > 0 ? p->wan.gbps : 1e-6;
  d->latency_ms = 2.0 * (S - 1) * link_alpha_us(&p->wan) / 1000;
  d->exchange_ms = d->latency_ms + d->site_bytes_per_fragment / (gbps * 1e6);
  d->overlap_ms = w->delay * w->step_ms;
  d->hidden = w->delay > 0 && d->exchange_ms <= d->overlap_ms;
  d->exposed_ms_per_outer = P * fmax(0, d->exchange_ms - d->overlap_ms);
  if (w->delay > 0 && d->overlap_ms > d->latency_ms)
    d->hide_gbps = d->site_bytes_per_fragment / ((d->overlap_ms - d->latency_ms) * 1e6);
}

static void train_options(strata_plan *p, double site_ms) {
  const strata_workload *w = &p->workload;
  double g = grad_bytes(w);
  char why[200];
  int ext_ok = extension_possible(p, why, sizeof why);
  strata_fabric ext;
  extension_fabric(p, &ext);
  double ext_ms = best_ms(&ext, STRATA_COLL_ALLREDUCE, g);
  strata_plan_option *o = add_option(p, "fabric-extension", ext_ok, ext_ms, 2.0 * g / p->sites);
  if (o)
    fmt(o->note, sizeof o->note, "per-step allreduce of %.3g GB across sites; %s", g / 1e9, why);
  /* per-step sync over what exists (overlay or routed IP); an extended link has no other path */
  double flat_ms = best_ms(&p->global_fabric, STRATA_COLL_ALLREDUCE, g);
  if (!p->wan.is_extension) {
    o = add_option(p, p->wan.is_overlay ? "overlay-per-step" : "routed-per-step", p->wan.link >= 0,
                   flat_ms, 2.0 * g / p->sites);
    if (o)
      fmt(o->note, sizeof o->note, "per-step allreduce over %.3g GB/s, RTT %.3g ms%s", p->wan.gbps,
          p->wan.rtt_ms, p->wan.measured ? " (measured)" : "");
  }
  /* DiLoCo: site-local allreduce every step; every H steps each fragment's outer exchange,
   * exposed except for what `delay` inner steps of compute hide (build_diloco) */
  const strata_plan_diloco *d = &p->diloco;
  int H = w->inner_steps > 0 ? w->inner_steps : 1;
  double exposed = d->exposed_ms_per_outer / H;
  o = add_option(p, p->wan.is_extension ? "extension+diloco" : "overlay+diloco", p->wan.link >= 0,
                 site_ms + exposed, d->site_bytes_per_inner);
  if (o)
    fmt(o->note, sizeof o->note,
        "%s allreduce %.3g ms/step + outer exchange %.3g s per fragment, %d fragment%s every %d "
        "steps across %d %s (%g-bit %s, delay %d: %s)",
        p->island_mode ? "island (sites joined by extension)" : "site", site_ms,
        d->exchange_ms / 1000, w->fragments, w->fragments > 1 ? "s" : "", H,
        p->island_mode ? p->islands : p->sites, p->island_mode ? "islands" : "sites", w->wire_bits,
        d->encoding, w->delay,
        d->hidden      ? "hidden behind inner steps"
        : w->delay > 0 ? "partly hidden"
                       : "blocking");
}

/* "possible", "not possible", or "ruled out by ID" for a decision's reason. */
static void ext_state_text(const strata_plan_option *ext, char *buf, size_t len) {
  if (ext->ruled_out_by[0])
    fmt(buf, len, "ruled out by %s", ext->ruled_out_by);
  else
    fmt(buf, len, "%s", ext->available ? "possible" : "not possible");
}

static void decide_training(strata_plan *p, double site_ms) {
  const strata_workload *w = &p->workload;
  p->site_comm_ms = site_ms;
  if (p->sites <= 1) {
    fmt(p->decision, sizeof p->decision, "single-site");
    p->comm_ms_per_step = site_ms;
    p->utilization = util(w->step_ms, site_ms);
    fmt(p->decision_reason, sizeof p->decision_reason,
        "one site: layers 1-2 only, no layer-3 decision to take; the gradient allreduce costs "
        "%.3g ms per %.0f ms step",
        site_ms, w->step_ms);
    return;
  }
  p->site_comm_ms = site_ms;
  if (p->island_mode) { /* DiLoCo's inner loop spans an island of extended sites */
    site_ms = best_ms(&p->island_fabric, STRATA_COLL_ALLREDUCE, grad_bytes(w));
    p->site_comm_ms = site_ms;
  }
  train_options(p, site_ms);
  const strata_plan_option *ext = &p->options[0], *diloco = &p->options[p->option_count - 1];
  const strata_plan_option *per_step = p->option_count > 2 ? &p->options[1] : ext;
  const strata_plan_option *pick;
  char ext_state[64];
  ext_state_text(ext, ext_state, sizeof ext_state);
  if (w->kind == STRATA_WORKLOAD_TRAIN_SYNC && ext->available && ext->utilization >= 0.5) {
    pick = ext;
    fmt(p->decision_reason, sizeof p->decision_reason,
        "the workload synchronizes every step and the link can be one fabric: extension keeps "
        "%.0f%% utilization (%.3g ms comm/step)%s%s%s; DiLoCo would give %.0f%% but changes the "
        "algorithm",
        100 * ext->utilization, ext->comm_ms_per_step, per_step == ext ? "" : ", ",
        per_step == ext ? "" : per_step->name, per_step == ext ? "" : " much less",
        100 * diloco->utilization);
  } else {
    pick = diloco;
    if (w->kind == STRATA_WORKLOAD_TRAIN_SYNC)
      fmt(p->decision_reason, sizeof p->decision_reason,
          "per-step sync across sites is not viable here (%s: %.0f%% utilization; extension %s, "
          "%.0f%%): change the algorithm - DiLoCo keeps %.0f%% over the existing link",
          per_step->name, 100 * per_step->utilization, ext_state, 100 * ext->utilization,
          100 * diloco->utilization);
    else
      fmt(p->decision_reason, sizeof p->decision_reason,
          "the workload does not need per-step sync across %s, so no fabric extension: "
          "DiLoCo over the existing link keeps %.0f%% utilization (extension would give "
          "%.0f%%%s%s)",
          p->island_mode ? "islands (sites already joined by extension run the inner loop "
                           "together)"
                         : "sites",
          100 * diloco->utilization, 100 * ext->utilization,
          ext->available         ? ", at the price of MetroX"
          : ext->ruled_out_by[0] ? ", but it is ruled out by "
                                 : " and is not possible here",
          ext->ruled_out_by);
  }
  fmt(p->decision, sizeof p->decision, "%s", pick->name);
  p->comm_ms_per_step = pick->comm_ms_per_step;
  p->utilization = pick->utilization;
}

double strata_plan_rl_full_bytes(const strata_workload *w) {
  return grad_bytes(w);
}

/* Sparse delta: changed values plus 32-bit indices (TRL delta sync: 1.2 GB → 20–35 MB). */
double strata_plan_rl_delta_bytes(const strata_workload *w) {
  return w->params * w->update_fraction * ((double)strata_dtype_size(w->dtype) + 4);
}

/* What crosses per sync: what the framework ships when the workload says, else the smaller. */
static double rl_sync_bytes(const strata_workload *w, int *delta) {
  double full = strata_plan_rl_full_bytes(w), sparse = strata_plan_rl_delta_bytes(w);
  *delta =
      w->rl_sync == STRATA_RL_SYNC_DELTA || (w->rl_sync == STRATA_RL_SYNC_AUTO && sparse < full);
  return *delta ? sparse : full;
}

static void decide_rl(strata_plan *p, double site_ms) {
  const strata_workload *w = &p->workload;
  int delta = 0;
  double bytes = rl_sync_bytes(w, &delta);
  int every = w->sync_every > 0 ? w->sync_every : 1;
  p->site_comm_ms = site_ms;
  /* inside the site: broadcast of the update to rollout GPUs (pipelined, best algorithm) */
  double local_ms = best_ms(&p->site_fabric, STRATA_COLL_BROADCAST, bytes);
  /* the trainer's uplink carries one copy per rollout site: the slowest link touching it */
  strata_wan_model up = p->wan;
  int trainer = w->trainer_site[0] ? strata_topo_site_index(p->topo, w->trainer_site) : 0;
  double slowest = INFINITY;
  for (int i = 0; trainer >= 0 && i < p->topo->link_count; i++) {
    const strata_topo_link *k = &p->topo->links[i];
    if (k->site_a != trainer && k->site_b != trainer) continue;
    strata_wan_model m;
    strata_plan_link_model(p, i, &m);
    if (m.gbps < slowest) {
      slowest = m.gbps;
      up = m;
    }
  }
  double wan_ms = 0;
  if (p->sites > 1 && up.link >= 0) wan_ms = (p->sites - 1) * bytes / (up.gbps * 1e6) + up.rtt_ms;
  double per_step = site_ms + (local_ms + wan_ms) / every;
  /* Inside the trainer's site, two ways to place rollout (HybridFlow/verl colocates, AReaL
   * disaggregates): colocated, the rollout engine runs on the trainer's GPUs and
   * a sync regathers the weights out of the training shards inside each NVLink domain (an
   * allgather of the sync's bytes over NVLink), and generation and training take turns on the
   * GPUs; disaggregated, rollout has GPUs of its own and a sync broadcasts the bytes from the
   * trainer over the site fabric, while generation overlaps training. */
  strata_fabric domain = p->site_fabric;
  domain.nlevels = 1;
  double colocated_ms = best_ms(&domain, STRATA_COLL_ALLGATHER, bytes);
  double disaggregated_ms = local_ms;
  if (p->sites > 1) {
    char why[200];
    int ext_ok = extension_possible(p, why, sizeof why);
    strata_fabric ext;
    extension_fabric(p, &ext);
    const strata_level *top = &ext.level[ext.nlevels - 1];
    double ext_wan = (p->sites - 1) * bytes / (top->per_rank_gbps * 1e6) + top->alpha_us / 500;
    strata_plan_option *o =
        add_option(p, "fabric-extension", ext_ok, site_ms + (local_ms + ext_wan) / every, bytes);
    if (o) fmt(o->note, sizeof o->note, "weight sync over RDMA across sites; %s", why);
    o = add_option(p, delta ? "overlay+delta-sync" : "overlay+full-sync", p->wan.link >= 0,
                   per_step, bytes / every);
    if (o)
      fmt(o->note, sizeof o->note, "%s weight sync %.3g GB to %d rollout site%s every %d step%s",
          delta ? "sparse delta" : "full", bytes / 1e9, p->sites - 1, p->sites > 2 ? "s" : "",
          every, every > 1 ? "s" : "");
    const strata_plan_option *pick = &p->options[1];
    if (ext_ok && p->options[1].utilization < 0.5 && p->options[0].utilization > 0.8)
      pick = &p->options[0];
    fmt(p->decision, sizeof p->decision, "%s", pick->name);
    p->comm_ms_per_step = pick->comm_ms_per_step;
    p->utilization = pick->utilization;
    fmt(p->decision_reason, sizeof p->decision_reason,
        "rollout sites need the policy only every %d step%s: a %s of %.3g GB takes %.3g s over "
        "the existing link (%.0f%% utilization) vs %.0f%% with fabric extension%s%s",
        every, every > 1 ? "s" : "", delta ? "sparse delta" : "full copy", bytes / 1e9,
        wan_ms / 1000, 100 * p->options[1].utilization, 100 * p->options[0].utilization,
        pick == &p->options[0]          ? ", so extension pays"
        : p->options[0].ruled_out_by[0] ? ", which is ruled out by "
                                        : ", so no extension",
        p->options[0].ruled_out_by);
  } else {
    strata_plan_option *o = add_option(p, "colocated", 1, site_ms + colocated_ms / every, 0);
    if (o)
      fmt(o->note, sizeof o->note,
          "rollout on the trainer's GPUs: each sync regathers %.3g MB inside every NVLink domain "
          "(%.3g ms); generation and training take turns on the GPUs",
          bytes / 1e6, colocated_ms);
    o = add_option(p, "disaggregated", p->nodes > 1, site_ms + disaggregated_ms / every, 0);
    if (o)
      fmt(o->note, sizeof o->note,
          "rollout on GPUs of its own: each sync broadcasts %.3g MB over the site fabric (%.3g "
          "ms); generation overlaps training%s",
          bytes / 1e6, disaggregated_ms, p->nodes > 1 ? "" : " (needs a second node)");
    fmt(p->decision, sizeof p->decision, "colocated");
    p->comm_ms_per_step = site_ms + colocated_ms / every;
    p->utilization = util(w->step_ms, p->comm_ms_per_step);
    fmt(p->decision_reason, sizeof p->decision_reason,
        "one site: the %s (%.3g MB) costs %.3g ms per sync colocated (regathered over NVLink) and "
        "%.3g ms disaggregated (broadcast over the site fabric); colocated moves less, "
        "disaggregated lets generation overlap training - the choice is the rollout's compute, "
        "not the sync",
        delta ? "sparse delta" : "full weights", bytes / 1e6, colocated_ms, disaggregated_ms);
  }
  fmt(p->summary, sizeof p->summary,
      "RL: trainer gradient allreduce %.3g ms/step; weight sync %.3g MB (%s, %.0f%% of parameters "
      "changed) every %d step%s",
      site_ms, bytes / 1e6, delta ? "sparse delta" : "full", 100 * w->update_fraction, every,
      every > 1 ? "s" : "");
}

/* A pipeline's client sits at one site and makes a round trip to every other site per token: the
 * sum of those round trips, from the site where it is least, each over the direct link between
 * the two sites (the fastest one if several; the plan's WAN link where none joins them). */
static double pipeline_round_trips_ms(const strata_plan *p) {
  const strata_topo *t = p->topo;
  double best = -1;
  for (int c = 0; c < t->site_count; c++) {
    double sum = 0;
    for (int j = 0; j < t->site_count; j++) {
      if (j == c) continue;
      int links[8];
      int n = strata_topo_links_between(t, c, j, links, 8);
      double rtt = -1;
      for (int k = 0; k < n && k < 8; k++) {
        strata_wan_model m;
        strata_plan_link_model(p, links[k], &m);
        if (rtt < 0 || m.rtt_ms < rtt) rtt = m.rtt_ms;
      }
      sum += rtt >= 0 ? rtt : p->wan.rtt_ms;
    }
    if (best < 0 || sum < best) best = sum;
  }
  return best >= 0 ? best : (p->sites - 1) * p->wan.rtt_ms;
}

static void decide_inference(strata_plan *p) {
  const strata_workload *w = &p->workload;
  /* prefill → decode KV transfer: one GPU's NIC share inside the site (NIXL / Mooncake style) */
  double kv_ms = w->kv_bytes_per_request / (p->site_fabric.level[1].per_rank_gbps * 1e6) +
                 p->site_fabric.level[1].alpha_us / 1000;
  double load_gbps = w->kv_bytes_per_request * w->requests_per_s / 1e9;
  p->comm_ms_per_step = kv_ms;
  p->utilization = 0;
  /* per decode token of a model split across sites, activations (hidden 4096 × dtype, a 7B
   * model) go to every remote site's span and back: the client that holds the embedding and
   * the head drives each hop itself (Petals' client-side routing, strata.serve), so a remote
   * span costs a whole round trip, not the half of one a server-to-server chain would. */
  double act = 4096.0 * (double)strata_dtype_size(w->dtype);
  double act_ms = 2 * act / (p->wan.gbps * 1e6);
  double trips_ms = p->sites > 1 ? pipeline_round_trips_ms(p) : 0;
  double hop_ms = p->sites > 1 ? trips_ms / (p->sites - 1) + act_ms : 0; /* the mean remote site */
  int split = w->cross_site_pipeline || w->replicas_per_site == 0;
  if (p->sites > 1) {
    strata_plan_option *o = add_option(p, "replica-routing", w->replicas_per_site > 0, 0, 0);
    if (o) {
      o->utilization = 1;
      fmt(o->note, sizeof o->note,
          "requests served by the nearest full replica: no per-token "
          "traffic across sites (needs a replica per site)");
    }
    double added = (p->sites - 1) * hop_ms;
    o = add_option(p, "cross-wan-pipeline", 1, added, 2 * act * (p->sites - 1));
    if (o) {
      o->utilization = w->token_ms / (w->token_ms + added);
      fmt(o->note, sizeof o->note,
          "every decode token waits %.3g ms per remote site on average (a client round trip "
          "+ activations both ways); comm is per token",
          hop_ms);
    }
    char why[200];
    int ext_ok = extension_possible(p, why, sizeof why);
    double ext_hop = strata_fiber_delay_us(p->wan.km > 0 ? p->wan.km : 0) / 1000 + 0.014;
    o = add_option(p, "extension-pipeline", ext_ok, (p->sites - 1) * ext_hop, act * (p->sites - 1));
    if (o) {
      o->utilization = w->token_ms / (w->token_ms + (p->sites - 1) * ext_hop);
      fmt(o->note, sizeof o->note, "the split model over RDMA across sites; %s", why);
    }
  }
  if (p->sites > 1 && split) {
    double token_ms = w->token_ms + (p->sites - 1) * hop_ms;
    fmt(p->decision, sizeof p->decision, "cross-wan-pipeline");
    fmt(p->decision_reason, sizeof p->decision_reason,
        "the model is split across %d sites: every decode token makes a round trip to %d remote "
        "site%s (%.3g ms each on average), %.3g ms/token = %.3g tokens/s per sequence vs %.3g "
        "tokens/s on one "
        "site",
        p->sites, p->sites - 1, p->sites > 2 ? "s" : "", hop_ms, token_ms, 1000 / token_ms,
        1000 / w->token_ms);
  } else if (p->sites > 1) {
    fmt(p->decision, sizeof p->decision, "replica-routing");
    fmt(p->decision_reason, sizeof p->decision_reason,
        "%d full replica%s per site: route each request to the nearest replica; layer 3 carries "
        "no per-token traffic, only model distribution and control",
        w->replicas_per_site, w->replicas_per_site == 1 ? "" : "s");
  } else {
    fmt(p->decision, sizeof p->decision, "single-site");
    fmt(p->decision_reason, sizeof p->decision_reason,
        "one site: disaggregated prefill/decode inside layers 1-2");
  }
  fmt(p->summary, sizeof p->summary,
      "inference: %.3g MB of KV per request moves prefill -> decode in %.3g ms over layer 2; "
      "%.3g req/s per site is %.3g GB/s of KV traffic",
      w->kv_bytes_per_request / 1e6, kv_ms, w->requests_per_s, load_gbps);
}

static void add_check(strata_plan *p, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void add_check(strata_plan *p, const char *f, ...) {
  if (p->check_count >= STRATA_PLAN_MAX_CHECKS) return;
  va_list ap;
  va_start(ap, f);
  vsnprintf(p->checks[p->check_count++], sizeof p->checks[0], f, ap);
  va_end(ap);
}

static void decide_bringup(strata_plan *p) {
  const strata_topo *t = p->topo;
  strata_fabric node = p->site_fabric;
  node.nlevels = 1;
  strata_prediction pr;
  const strata_level *l0 = &p->site_fabric.level[0], *l1 = &p->site_fabric.level[1];
  add_check(p,
            "layer 1: nvidia-smi topo -m shows %s between every GPU pair; p2p bandwidth "
            "~%.0f GB/s per direction",
            !strcmp(l0->name, "nvlink") ? "NV# (NVLink)" : "PIX/PXB (PCIe)", l0->per_rank_gbps);
  if (strata_fabric_nranks(&node) > 1 &&
      strata_cost_best(&node, STRATA_COLL_ALLREDUCE, 8.0 * (1 << 30), &pr) == 0)
    add_check(p, "layer 1: all_reduce_perf -b 8 -e 8G -f 2 -g %d: busbw ~%.0f GB/s at 8 GB (%s)",
              l0->fanout, pr.busbw_gbps, strata_model_algo_name(pr.algo));
  if (l1->fanout > 1) {
    add_check(p,
              "layer 2: ib_write_bw / iperf3 per NIC port at line rate; %.1f GB/s per GPU "
              "usable",
              l1->per_rank_gbps);
    if (strata_cost_best(&p->site_fabric, STRATA_COLL_ALLREDUCE, 8.0 * (1 << 30), &pr) == 0)
      add_check(p, "layer 2: all_reduce_perf across %d nodes: busbw ~%.0f GB/s at 8 GB (%s)",
                l1->fanout, pr.busbw_gbps, strata_model_algo_name(pr.algo));
  }
  for (int s = 0; s < t->site_count; s++)
    if (t->sites[s].fabric.kind == STRATA_FABRIC_ROCE) {
      add_check(p,
                "layer 2 (%s): PFC on the RDMA priority (usually 3) and ECN/DCQCN on every "
                "port and NIC",
                t->sites[s].name);
      break;
    }
  for (int i = 0; i < t->link_count; i++) {
    strata_wan_model m;
    strata_plan_link_model(p, i, &m);
    add_check(p, "layer 3 (%s): ping RTT ~%.3g ms%s; iperf3 -P %d ~%.3g Gb/s%s%s", t->links[i].name,
              m.rtt_ms,
              m.measured  ? " (measured)"
              : m.km >= 0 ? " (fiber floor)"
                          : "",
              p->workload.wan_streams, m.gbps * 8, m.measured ? " (measured, one pair)" : "",
              m.is_overlay ? "; ip link show wg0: mtu 1420" : "");
  }
  fmt(p->decision, sizeof p->decision, "bringup");
  fmt(p->decision_reason, sizeof p->decision_reason,
      "validate layer by layer, inside out: every figure below is the model's prediction; a "
      "measurement far below it points at the layer to fix");
}

/* ---- fsdp: sharded data parallel with tensor and pipeline parallel (strata_plan_fsdp) ---- */

/* The fabric one dp group runs on. Pipeline stages are placed across NVLink domains, so a domain
 * holds one stage: its GPUs form domain/tp dp groups' members (r), which share the domain's NICs
 * while every group runs at once. The group spans ceil(dp / r) domains. */
static void fsdp_dp_fabric(const strata_plan *p, int tp, int dp, strata_fabric *f, int *r_out) {
  int domain = p->site_fabric.level[0].fanout > 0 ? p->site_fabric.level[0].fanout : 1;
  int r = tp < domain ? domain / tp : 1;
  if (r > dp) r = dp;
  int domains = (dp + r - 1) / r;
  int site_domains = p->site_fabric.level[1].fanout > 0 ? p->site_fabric.level[1].fanout : 1;
  if (domains <= site_domains || p->sites < 2) {
    *f = p->site_fabric;
    f->nlevels = 2;
    f->level[1].fanout = domains;
  } else {
    *f = p->global_fabric;
    f->level[1].fanout = site_domains;
    f->level[f->nlevels - 1].fanout = clamp_int(ceil((double)domains / site_domains));
  }
  f->level[0].fanout = r;
  double share = (double)r / domain; /* of the domain's NICs, for one group */
  strata_nccl_system *g = &f->gpu;
  if (g->nics * share >= 1) {
    g->nics = (int)floor(g->nics * share);
  } else {
    g->nic_gbps *= g->nics * share;
    g->nics = 1;
  }
  *r_out = r;
}

static double fabric_ms(const strata_fabric *f, strata_coll coll, double bytes, char *algo,
                        size_t len) {
  strata_prediction pr;
  if (strata_fabric_nranks(f) <= 1 || bytes <= 0 || strata_cost_best(f, coll, bytes, &pr) != 0) {
    if (algo) fmt(algo, len, "none");
    return 0;
  }
  if (algo)
    fmt(algo, len, "%s%s%s", strata_model_algo_name(pr.algo), pr.proto >= 0 ? "/" : "",
        pr.proto >= 0 ? strata_nccl_proto_name((strata_nccl_proto)pr.proto) : "");
  return pr.time_us / 1000;
}

static void build_fsdp(strata_plan *p) {
  const strata_workload *w = &p->workload;
  strata_plan_fsdp *d = &p->fsdp;
  memset(d, 0, sizeof *d);
  d->modeled = 1;
  double gpus = (double)(p->gpus > 0 ? p->gpus : p->nodes);
  int tp = w->tp, pp = w->pp;
  if ((double)tp * pp > gpus) {
    fmt(d->note, sizeof d->note, "tp x pp = %d exceeds the %.0f GPUs: planned with tp 1, pp 1",
        tp * pp, gpus);
    tp = pp = 1;
  }
  int dp = clamp_int(floor(gpus / ((double)tp * pp)));
  int domain = p->site_fabric.level[0].fanout > 0 ? p->site_fabric.level[0].fanout : 1;
  if (tp > domain && !d->note[0])
    fmt(d->note, sizeof d->note,
        "tp %d spans more than one NVLink domain (%d GPUs): its allreduces cross the network", tp,
        domain);
  double dsz = (double)strata_dtype_size(w->dtype);
  d->tp = tp;
  d->pp = pp;
  d->dp = dp;
  d->layers = w->layers;
  d->micro_batches = w->micro_batches > 0 ? w->micro_batches
                     : pp > 1             ? 4 * pp
                                          : clamp_int(ceil(w->tokens_per_step / 4096));
  d->hidden = sqrt(w->params / (12.0 * w->layers));
  double stage_layers = (double)w->layers / pp;
  double mb_tokens = w->tokens_per_step / d->micro_batches;
  /* FSDP over the dp group */
  strata_fabric f;
  fsdp_dp_fabric(p, tp, dp, &f, &d->dp_ranks_per_domain);
  d->layer_bytes = w->params / ((double)w->layers * tp) * dsz;
  d->allgather_ms = fabric_ms(&f, STRATA_COLL_ALLGATHER, d->layer_bytes, d->allgather_algo,
                              sizeof d->allgather_algo);
  d->reduce_scatter_ms = fabric_ms(&f, STRATA_COLL_REDUCE_SCATTER, d->layer_bytes, NULL, 0);
  d->fsdp_ms = stage_layers * (2 * d->allgather_ms + d->reduce_scatter_ms);
  d->fsdp_exposed_ms = fmax(d->allgather_ms, d->fsdp_ms - w->step_ms);
  /* TP inside the NVLink domain (or across it, when tp is larger) */
  strata_fabric tpf = p->site_fabric;
  if (tp <= domain) {
    tpf.nlevels = 1;
    tpf.level[0].fanout = tp;
  } else {
    tpf.nlevels = 2;
    tpf.level[1].fanout = clamp_int(ceil((double)tp / domain));
  }
  d->tp_bytes = tp > 1 ? mb_tokens * d->hidden * dsz : 0;
  d->tp_allreduce_ms = tp > 1 ? fabric_ms(&tpf, STRATA_COLL_ALLREDUCE, d->tp_bytes, NULL, 0) : 0;
  d->tp_ms = 4 * stage_layers * d->micro_batches * d->tp_allreduce_ms;
  /* PP: across domains when there are enough of them, else over NVLink */
  const strata_level *cross = p->site_fabric.level[1].fanout > 1 && gpus / domain >= pp
                                  ? &p->site_fabric.level[1]
                                  : &p->site_fabric.level[0];
  d->pp_bytes = pp > 1 ? mb_tokens * d->hidden * dsz : 0;
  d->pp_p2p_ms =
      pp > 1 ? (cross->alpha_us + d->pp_bytes / (fmax(cross->per_rank_gbps, 1e-9) * 1e3)) / 1000
             : 0;
  d->pp_ms = 2.0 * (pp - 1) * d->pp_p2p_ms;
  d->bubble_ms = (double)(pp - 1) / d->micro_batches * w->step_ms;
  d->comm_ms = d->fsdp_exposed_ms + d->tp_ms + d->pp_ms;
  d->step_total_ms = w->step_ms + d->comm_ms + d->bubble_ms;
  /* memory per GPU */
  double per_gpu_params = w->params / ((double)tp * pp);
  d->weights_gb = per_gpu_params * dsz / dp / 1e9;
  d->grads_gb = d->weights_gb;
  d->optimizer_gb = per_gpu_params * 12.0 / dp / 1e9;
  d->gathered_gb = 2 * d->layer_bytes / 1e9;
  double in_flight = fmin(pp, d->micro_batches);
  d->activations_gb = mb_tokens * d->hidden * (10.0 + 24.0 / tp) * stage_layers * in_flight / 1e9;
  d->memory_gb = d->weights_gb + d->grads_gb + d->optimizer_gb + d->gathered_gb + d->activations_gb;
  const strata_topo_node_spec *spec = &p->topo->groups[cluster_main_group(p->topo)].spec;
  d->gpu_memory_gb = strata_topo_is_set(spec->gpu_memory_gb) ? spec->gpu_memory_gb : 0;
  d->fits = d->gpu_memory_gb <= 0 || d->memory_gb <= d->gpu_memory_gb;
}

static void decide_fsdp(strata_plan *p) {
  const strata_workload *w = &p->workload;
  build_fsdp(p);
  const strata_plan_fsdp *d = &p->fsdp;
  p->comm_ms_per_step = d->comm_ms + d->bubble_ms;
  p->utilization = w->step_ms / d->step_total_ms;
  p->site_comm_ms = d->comm_ms;
  fmt(p->decision, sizeof p->decision, "fsdp");
  fmt(p->decision_reason, sizeof p->decision_reason,
      "tp %d x pp %d x dp %d: FSDP exposes %.3g ms of its %.3g ms of allgather/reduce-scatter, "
      "TP allreduces %.3g ms, pipeline %.3g ms of crossings and %.3g ms of bubble per %.0f ms "
      "step; %.1f GB per GPU%s",
      d->tp, d->pp, d->dp, d->fsdp_exposed_ms, d->fsdp_ms, d->tp_ms, d->pp_ms, d->bubble_ms,
      w->step_ms, d->memory_gb,
      d->gpu_memory_gb <= 0 ? " (GPU memory not given)"
      : d->fits             ? ""
                            : ", more than the GPU holds");
  fmt(p->summary, sizeof p->summary,
      "fsdp: %.3g B parameters (%s), tp %d, pp %d, dp %d; %.3g ms exposed communication + %.3g "
      "ms bubble per %.0f ms step, %.0f%% compute utilization; %.1f GB per GPU",
      w->params / 1e9, strata_dtype_name(w->dtype), d->tp, d->pp, d->dp, d->comm_ms, d->bubble_ms,
      w->step_ms, 100 * p->utilization, d->memory_gb);
}

static void build_roles(strata_plan *p);

int strata_plan_build(const strata_topo *topo, const strata_workload *w, strata_plan *out,
                      char *err, size_t err_len) {
  return strata_plan_build_measured(topo, w, NULL, out, err, err_len);
}

int strata_plan_build_measured(const strata_topo *topo, const strata_workload *w,
                               const strata_plan_measured *measured, strata_plan *out, char *err,
                               size_t err_len) {
  if (err && err_len) err[0] = 0;
  if (!topo || !w || !out) return STRATA_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  strata_workload shaped; /* --param-shapes: the parameters are the shapes' elements */
  if (w->param_shapes) {
    shaped = *w;
    int status = strata_plan_shapes_values(w->param_shapes, &shaped.params, err, err_len);
    if (status != STRATA_OK) return status;
    w = &shaped;
  }
  if (!(w->params > 0) || !(w->step_ms > 0) ||
      strata_plan_wire_encoding(w->wire_bits, NULL) != STRATA_OK || w->inner_steps < 1 ||
      w->fragments < 1 || w->wan_streams < 1 ||
      !(w->update_fraction > 0 && w->update_fraction <= 1) || w->sync_every < 1 ||
      !(w->kv_bytes_per_request >= 0) || w->replicas_per_site < 0 ||
      (unsigned)w->rl_sync > STRATA_RL_SYNC_DELTA || strata_dtype_size(w->dtype) == 0 ||
      w->tp < 1 || w->pp < 1 || w->layers < 1 || !(w->tokens_per_step > 0) ||
      w->micro_batches < 0) {
    if (err && err_len)
      fmt(err, err_len,
          "invalid workload: params, step-ms, inner-steps, fragments, streams and "
          "sync-every must be positive, wire-bits 32, 16, 8 or 4, update-fraction in (0,1]; "
          "tp, pp, layers and tokens at least 1");
    return STRATA_ERR_INVALID_ARG;
  }
  /* the library's limits (strata_diloco_options): P <= H, and a fragment's exchange must be
   * applied before the same fragment's next one starts H/P steps later */
  if (w->fragments > w->inner_steps || w->delay < 0 || w->delay >= w->inner_steps / w->fragments) {
    if (err && err_len)
      fmt(err, err_len,
          "invalid workload: DiLoCo needs fragments (%d) <= H (%d) and 0 <= delay (%d) < H / "
          "fragments (%d inner steps between two exchanges of a fragment)",
          w->fragments, w->inner_steps, w->delay,
          w->fragments > 0 ? w->inner_steps / w->fragments : 0);
    return STRATA_ERR_INVALID_ARG;
  }
  if (topo->group_count < 1 || topo->site_count < 1) {
    if (err && err_len) fmt(err, err_len, "the topology has no nodes");
    return STRATA_ERR_INVALID_ARG;
  }
  out->topo = topo;
  out->measured = measured;
  out->workload = *w;
  out->gpus = strata_topo_gpus(topo);
  out->nodes = strata_topo_nodes(topo);
  out->sites = topo->site_count;
  build_fabrics(out);
  if (w->kind == STRATA_WORKLOAD_DILOCO && out->sites >= 2) {
    double ranks = (double)(out->gpus > 0 ? out->gpus : out->nodes);
    int status = strata_plan_diloco_shard(
        w, w->param_shapes, out->sites, clamp_int(ranks / out->sites), out->wan.rtt_ms,
        out->wan.link >= 0 && out->wan.gbps > 0 ? out->wan.gbps : 1e-6,
        link_alpha_us(&out->wan) / 1000, &out->diloco_sharded, err, err_len);
    if (status != STRATA_OK) return status;
  }
  out->workload.param_shapes = NULL; /* borrowed: read above, never kept */
  build_predictions(out);
  build_diloco(out);
  strata_plan_startup(out);
  double site_ms = best_ms(&out->site_fabric, STRATA_COLL_ALLREDUCE, grad_bytes(w));
  switch (w->kind) {
    case STRATA_WORKLOAD_TRAIN_SYNC:
    case STRATA_WORKLOAD_DILOCO:
      decide_training(out, site_ms);
      fmt(out->summary, sizeof out->summary,
          "%s: %.3g B parameters (%s), %.3g GB of gradients per step; %.3g ms of communication "
          "per %.0f ms step, %.0f%% compute utilization",
          strata_workload_kind_name(w->kind), w->params / 1e9, strata_dtype_name(w->dtype),
          grad_bytes(w) / 1e9, out->comm_ms_per_step, w->step_ms, 100 * out->utilization);
      break;
    case STRATA_WORKLOAD_RL:
      decide_rl(out, site_ms);
      break;
    case STRATA_WORKLOAD_INFERENCE:
      decide_inference(out);
      break;
    case STRATA_WORKLOAD_FSDP:
      decide_fsdp(out);
      break;
    default:
      decide_bringup(out);
      break;
  }
  build_roles(out);
  if (strata_plan_lint(out) != 0) {
    strata_plan_free(out);
    return STRATA_ERR_NO_MEMORY;
  }
  return STRATA_OK;
}

void strata_plan_free(strata_plan *plan) {
  if (!plan) return;
  free(plan->findings);
  plan->findings = NULL;
  plan->finding_count = plan->finding_cap = 0;
}

/* ---- what every layer carries ---- */

static strata_layer_role *add_role(strata_plan *p, const char *layer) {
  if (p->role_count >= STRATA_PLAN_MAX_ROLES) return NULL;
  strata_layer_role *r = &p->roles[p->role_count++];
  memset(r, 0, sizeof *r);
  fmt(r->layer, sizeof r->layer, "%s", layer);
  return r;
}

static const char *carries_training(const strata_plan *p, int level, char *buf, size_t len) {
  const strata_workload *w = &p->workload;
  double g = grad_bytes(w);
  if (w->kind == STRATA_WORKLOAD_INFERENCE) {
    fmt(buf, len,
        level == 0 ? "tensor-parallel activations of every token"
                   : "KV cache prefill -> decode, %.3g MB per request",
        w->kv_bytes_per_request / 1e6);
  } else if (w->kind == STRATA_WORKLOAD_BRINGUP) {
    fmt(buf, len, "benchmark traffic (nccl-tests / strata bench)");
  } else if (level == 0) {
    fmt(buf, len, "reduce-scatter + allgather of %.3g GB gradients every step", g / 1e9);
  } else {
    fmt(buf, len, "allreduce of %.3g GB shards per GPU every step",
        g / p->site_fabric.level[0].fanout / 1e9);
  }
  return buf;
}

/* What carries the cross-site collectives, in words, for the layer table. */
static void wan_transport_text(const strata_wan_model *m, char *buf, size_t len) {
  if (m->transport == STRATA_WAN_NCCL_STRATA)
    snprintf(buf, len,
             "NCCL on strata's network plugin (NCCL_NET_PLUGIN=strata), %d stream%s per peer",
             m->streams, m->streams == 1 ? "" : "s");
  else if (m->transport == STRATA_WAN_NCCL_SOCKET)
    snprintf(buf, len,
             "NCCL on its socket network (NCCL_NET=Socket), %d socket%s per peer, in clear",
             m->streams, m->streams == 1 ? "" : "s");
  else
    snprintf(buf, len, "collectives on strata TCP, %d stream%s per peer", m->streams,
             m->streams == 1 ? "" : "s");
  if (m->nccl_window_gbps > 0 && m->nccl_window_gbps <= m->gbps * 1.0001) {
    size_t used = strlen(buf);
    snprintf(
        buf + used, len - used,
        "; NCCL's window (%d channels x %.0f MiB per %.3g ms round trip) holds it to %.3g GB/s",
        STRATA_NCCL_CHANNELS, STRATA_NCCL_WINDOW_BYTES / (1024 * 1024), m->rtt_ms,
        m->nccl_window_gbps);
  }
}

static void build_roles(strata_plan *p) {
  const strata_topo *t = p->topo;
  const strata_level *l0 = &p->site_fabric.level[0], *l1 = &p->site_fabric.level[1];
  int g = cluster_main_group(t);
  const strata_topo_node_spec *spec = &t->groups[g].spec;
  strata_layer_role *r = add_role(p, "1");
  if (r) {
    if (spec->intra == STRATA_INTRA_NVLINK)
      fmt(r->technology, sizeof r->technology, "NVLink%d%s (%d GPUs), %.0f GB/s per GPU%s",
          (int)spec->nvlink, spec->nvswitch_domain_gpus > 1 ? " + NVSwitch" : "", l0->fanout,
          l0->per_rank_gbps, l0->innet ? ", NVLS" : "");
    else if (spec->gpu == STRATA_GPU_NONE && spec->gpus == 0)
      fmt(r->technology, sizeof r->technology, "none: CPU nodes, one rank each (no GPUs known)");
    else
      fmt(r->technology, sizeof r->technology, "%s (%d GPUs), %.0f GB/s per GPU",
          spec->intra == STRATA_INTRA_PCIE ? "PCIe peer-to-peer" : "host memory", l0->fanout,
          l0->per_rank_gbps);
    if (spec->gpu == STRATA_GPU_NONE && spec->gpus == 0)
      fmt(r->carries, sizeof r->carries, "nothing: every rank is a node of its own");
    else
      carries_training(p, 0, r->carries, sizeof r->carries);
  }
  if (l1->fanout > 1 && (r = add_role(p, "2"))) {
    if (p->gpus > 0)
      fmt(r->technology, sizeof r->technology, "%s, %d nodes/site, %.0f GB/s per GPU%s", l1->name,
          l1->fanout, l1->per_rank_gbps, l1->innet ? ", SHARP" : "");
    else
      fmt(r->technology, sizeof r->technology, "%s, %d nodes/site, %.3g GB/s per rank", l1->name,
          l1->fanout, l1->per_rank_gbps);
    carries_training(p, 1, r->carries, sizeof r->carries);
  }
  if (p->sites <= 1) return;
  const strata_workload *w = &p->workload;
  int l = p->wan.link;
  double wan_step_gb = 0;
  const strata_plan_option *o = find_option(p, p->decision);
  if (o) wan_step_gb = o->wan_bytes_per_step / 1e9;
  if (l >= 0 && (r = add_role(p, "3a"))) {
    const strata_topo_link *k = &t->links[l];
    char km[32] = "length unknown";
    if (p->wan.km >= 0) fmt(km, sizeof km, "%.0f km", p->wan.km);
    fmt(r->technology, sizeof r->technology, "%s%s%s, %s, RTT %.3g ms%s",
        strata_phys_kind_name(k->physical.kind), k->physical.optics ? " " : "",
        k->physical.optics ? strata_optics_name(k->physical.optics) : "", km, p->wan.rtt_ms,
        p->wan.measured ? " (measured)" : "");
    fmt(r->carries, sizeof r->carries, "whatever 3b/3c put on it: %.3g GB per site per step",
        wan_step_gb);
  }
  if (p->island_mode && p->island_link.link >= 0 && (r = add_role(p, "3b"))) {
    const strata_topo_link *k = &t->links[p->island_link.link];
    fmt(r->technology, sizeof r->technology, "%s inside islands (e.g. %s), %.3g GB/s",
        strata_extension_kind_name(k->extension.kind), k->name, p->island_link.gbps);
    fmt(r->carries, sizeof r->carries,
        "RDMA between the extended sites of an island (%d islands in all): the inner loop's "
        "per-step allreduce of %.3g GB",
        p->islands, grad_bytes(w) / 1e9);
  }
  if (l >= 0 && t->links[l].extension.kind != STRATA_EXT_NONE && (r = add_role(p, "3b"))) {
    fmt(r->technology, sizeof r->technology, "%s, %.3g GB/s%s",
        strata_extension_kind_name(t->links[l].extension.kind), p->wan.gbps,
        p->wan.measured ? " (measured)" : "");
    if (p->wan.extension_ruled_out)
      fmt(r->carries, sizeof r->carries,
          "nothing: ruled out by %s; the traffic rides the path under it (TCP)",
          p->wan.extension_ruled_out);
    else
      fmt(r->carries, sizeof r->carries, "%s",
          p->wan.is_extension ? "RDMA (NCCL over IB) across buildings: one fabric"
                              : "routed RDMA between subnets (not one fabric)");
  }
  if (l >= 0 && (r = add_role(p, "3c"))) {
    char sealing[200], carrier[240];
    wan_transport_text(&p->wan, carrier, sizeof carrier);
    double cap = strata_seal_cap_gbps();
    if (p->wan.unsealed_gbps > cap)
      fmt(sealing, sizeof sealing,
          "; sealed by strata (AES-256-GCM, %.3g GB/s per rank at one core's %.3g GB/s: "
          "%.0f%% of the link's %.3g GB/s; STRATA_ENCRYPT=off on a trusted path)",
          cap, STRATA_AEAD_AES256GCM_GBYTES_PER_CORE, 100 * cap / p->wan.unsealed_gbps,
          p->wan.unsealed_gbps);
    else
      fmt(sealing, sizeof sealing,
          "; sealed by strata (AES-256-GCM: a rank seals and opens %.3g GB/s on one core, "
          "above the link's %.3g: no cost)",
          cap, p->wan.unsealed_gbps);
    if (p->wan.is_overlay)
      fmt(r->technology, sizeof r->technology,
          "WireGuard over %s, MTU 1420, %.3g GB/s%s, TCP only: %s (NCCL: "
          "NCCL_SOCKET_IFNAME=wg0, or its plugin's STRATA_HOST on wg0; strata: "
          "STRATA_ENCRYPT=off, WireGuard seals already)",
          strata_transit_kind_name(t->links[l].overlay.transit), p->wan.gbps,
          p->wan.measured ? " (measured)" : "", carrier);
    else if (p->wan.is_extension)
      fmt(r->technology, sizeof r->technology, "none needed (the path is owned and extended)");
    else
      fmt(r->technology, sizeof r->technology, "none: routed IP, %s%s", carrier,
          p->wan.sealed ? sealing : "");
    fmt(r->carries, sizeof r->carries, "%s",
        p->wan.is_overlay ? "the cross-site collectives of the decision, over TCP" : "nothing");
  }
  if ((r = add_role(p, "4"))) {
    if (!strcmp(p->decision, "overlay+diloco") || !strcmp(p->decision, "extension+diloco"))
      fmt(r->technology, sizeof r->technology, "DiLoCo H=%d, %g-bit outer gradients%s",
          w->inner_steps, w->wire_bits, w->fragments > 1 ? ", streaming" : "");
    else if (strstr(p->decision, "delta"))
      fmt(r->technology, sizeof r->technology, "delta weight sync (%.0f%% of parameters)",
          100 * w->update_fraction);
    else
      fmt(r->technology, sizeof r->technology, "%s", p->decision);
    fmt(r->carries, sizeof r->carries, "%s", p->decision_reason);
  }
}
