// SPDX-License-Identifier: Apache-2.0
/*
 * nccl.c — NCCL's algorithm and protocol costs on a described GPU cluster (see nccl.h).
 *
 * The cost has NCCL's shape (src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime):
 *   time = latency + bytes / (1000 · algbw)
 * where the latency is a base per algorithm and protocol plus a hardware latency per step
 * (NVLink, PCI or network), and the algorithm bandwidth is the channels' bus bandwidth, cut by
 * the protocol (LL sends a flag with every 8 bytes: 1/2; LL128 120 of every 128 bytes: 0.92),
 * capped per channel where NCCL caps it, then converted to what one call moves.
 *
 * Where NCCL measures the machine (its topology search), this file derives from the node:
 *   - ring and tree channels run over every compute NIC of a node at once, so the node boundary
 *     of a ring carries the sum of the NICs (capped by what a GPU's NVLink can feed);
 *   - a NIC's path to the GPU is its PCIe link with GPUDirect RDMA, half of it without (the bytes
 *     bounce through host memory and the shared uplink carries both copies each way);
 *   - NVLS (NVLink SHARP) reaches nvls_efficiency of a GPU's NVLink; with IB SHARP across nodes
 *     the node's NICs carry each byte once each way (collnet_efficiency of their bandwidth);
 *   - a double binary tree moves each byte up and down, so it gets half the boundary's bandwidth
 *     beyond two nodes; on two nodes each node is a leaf of one tree and NCCL lets the intra-node
 *     bandwidth grow to twice the network's (search.cc, pass 2), which is why two-node tree busbw
 *     exceeds the NICs.
 * No constant here is fitted to a measurement; each names its source.
 */
#include "model/nccl.h"

#include <math.h>
#include <string.h>

static const char *const algo_names[STRATA_NCCL_ALGO_COUNT] = {
    "tree", "ring", "collnet-direct", "collnet-chain", "nvls", "nvls-tree", "pat"};
static const char *const proto_names[STRATA_NCCL_PROTO_COUNT] = {"LL", "LL128", "Simple"};

const char *strata_nccl_algo_name(strata_nccl_algo algo) {
  return (int)algo >= 0 && algo < STRATA_NCCL_ALGO_COUNT ? algo_names[algo] : "?";
}
const char *strata_nccl_proto_name(strata_nccl_proto proto) {
  return (int)proto >= 0 && proto < STRATA_NCCL_PROTO_COUNT ? proto_names[proto] : "?";
}

/* ---- NVIDIA/nccl src/graph/tuning.cc, ncclTunerConstantsDefaults (µs, GB/s) ---- */
enum { HW_NVLINK = 0, HW_PCI, HW_NET };
static const double base_latency_us[STRATA_NCCL_ALGO_COUNT][STRATA_NCCL_PROTO_COUNT] = {
    {6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, /* tree, ring */
    {0, 0, 0},        {0, 0, 0},        /* collnet direct, chain */
    {0, 0, 0},        {0, 0, 0},        /* nvls, nvls tree */
    {8.0, 8.0, 8.0},                    /* pat */
};
static const double hw_latency_us[3][STRATA_NCCL_ALGO_COUNT][STRATA_NCCL_PROTO_COUNT] = {
    {{0.6, 1.25, 4.0},
     {0.6, 1.9, 3.4},
     {0, 0, 3.7},
     {0, 0, 2.8},
     {0, 0, 25},
     {0, 0, 25},
     {0, 0, 4.0}},
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}},
    {{5.0, 8.5, 14},
     {2.7, 4.0, 14.0},
     {0, 0, 31},
     {0, 0, 30},
     {0, 0, 18},
     {0, 0, 20.9},
     {0, 0, 14}},
};
/* Rows: Volta, Ampere, Hopper, Blackwell; columns: 1 node, 2 nodes, more. */
static const double ll_max_bws[4][3] = {
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
static const double per_ch_max_ring_ll128_bws[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {40.0, 40.0, 40.0}};
static const double per_ch_max_tree_ll128_bws[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
static const double per_ch_max_tree_bws[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
static const double per_ch_max_nvls_tree_bws[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 80.0}};
/* Trees do not follow the model at medium sizes: NCCL's static correction, powers of two from
 * 64 B (tuning.cc, treeCorrectionFactor). */
static const double tree_correction[STRATA_NCCL_PROTO_COUNT][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6,  .5,
     .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6,  .6,
     .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
     .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9},
};
/* getNetOverhead(): a network post costs 1 µs on x86 (Intel; AMD 2), three times for Simple. The
 * CPU is not in a topology file: Intel assumed, as for llMaxBws' multi-node row below. */
#define NET_OVERHEAD_US 1.0
/* The protocols' own efficiencies: LL carries 8 bytes of data per 16 (tuning.cc busBw * .5),
 * LL128 120 of 128 (0.92); the tree's allreduce 0.92 and LL 1/3.8; LL128 trees 7/9 in a node. */
#define LL_EFFICIENCY 0.5
#define LL128_EFFICIENCY 0.92
#define TREE_EFFICIENCY 0.92
#define TREE_LL_EFFICIENCY (1.0 / 3.8)
/* NCCL's maximum channels (MAXCHANNELS); channels are doubled while one carries at least 25 GB/s,
 * except from Hopper on below 50 GB/s with more than 4 (search.cc, ncclTopoDupChannels). */
#define MAX_CHANNELS 32

static int arch_index(int arch) {
  return arch >= 100 ? 3 : arch >= 90 ? 2 : arch >= 80 ? 1 : 0;
}
static int nodes_index(int nodes) {
  return nodes <= 2 ? nodes - 1 : 2;
}

double strata_nccl_net_gbps(const strata_nccl_system *s) {
  if (!s || s->nics < 1 || !(s->nic_gbps > 0)) return 0;
  double path = s->pcie_gbps > 0 ? s->pcie_gbps : s->nic_gbps;
  if (!s->gpudirect || s->sockets) path /= 2; /* GPU -> host -> NIC: both copies on the uplink */
  return s->nics * fmin(s->nic_gbps, path);
}

/* What a GPU's links into its node fabric carry (infinite with one GPU per node). */
static double intra_cap(const strata_nccl_system *s, int ppn) {
  return ppn > 1 ? s->intra_gbps : INFINITY;
}

int strata_nccl_channels(const strata_nccl_system *s, int ranks_per_node, int nodes) {
  int ch;
  double bw;
  if (nodes > 1) {
    ch = s->nics > 0 ? s->nics : 1;
    bw = fmin(intra_cap(s, ranks_per_node), strata_nccl_net_gbps(s)) / ch;
  } else {
    ch = s->nvlink_links > 0 ? s->nvlink_links : 2;
    bw = s->intra_gbps / ch;
  }
  int dup = bw >= 25.0 && !(s->arch > 80 && bw < 50.0 && ch > 4);
  if (dup) ch *= 2;
  return ch > MAX_CHANNELS ? MAX_CHANNELS : ch;
}

static int nsteps_of(strata_coll coll, double n) {
  if (coll == STRATA_COLL_ALLREDUCE) return (int)(2 * (n - 1));
  if (coll == STRATA_COLL_REDUCE_SCATTER || coll == STRATA_COLL_ALLGATHER) return (int)(n - 1);
  return (int)n;
}

/* log2 rounded down, as NCCL's log2i. */
static int log2i(double x) {
  int l = 0;
  while (x >= 2) {
    x /= 2;
    l++;
  }
  return l;
}

/* LL128 runs only where NCCL enables it by default: NVLink inside the node and, across nodes, a
 * NIC reached peer to peer (GPUDirect RDMA, not through the CPU). */
static int ll128_enabled(const strata_nccl_system *s, int ppn, int nodes) {
  if (ppn > 1 && !(s->nvlink_gbps > 0)) return 0;
  return nodes == 1 || (s->gpudirect && !s->sockets);
}

/* The bus bandwidth NCCL sets for a ring of `raw` GB/s per rank, per protocol. */
static double ring_busbw(const strata_nccl_system *s, int nodes, int ch, double raw,
                         strata_nccl_proto p) {
  int ai = arch_index(s->arch), ni = nodes_index(nodes);
  /* llMaxBws is indexed by GPU inside one node and by CPU across nodes (Intel: row 0) */
  double ll_max = ll_max_bws[nodes == 1 ? ai : 0][ni];
  if (p == STRATA_NCCL_LL) return fmin(ll_max, raw * LL_EFFICIENCY);
  if (p == STRATA_NCCL_LL128)
    return fmin(raw * LL128_EFFICIENCY, ch * per_ch_max_ring_ll128_bws[ai][ni]);
  return raw;
}

static double tree_busbw(const strata_nccl_system *s, int nodes, int ch, double raw,
                         strata_nccl_proto p) {
  int ai = arch_index(s->arch), ni = nodes_index(nodes);
  double ll_max = ll_max_bws[nodes == 1 ? ai : 0][ni];
  double bw = fmin(raw * TREE_EFFICIENCY, ch * per_ch_max_tree_bws[ai][ni]);
  if (p == STRATA_NCCL_LL) return fmin(bw * TREE_LL_EFFICIENCY, ll_max);
  if (p == STRATA_NCCL_LL128)
    return fmin(bw * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0),
                ch * per_ch_max_tree_ll128_bws[ai][ni]);
  return bw;
}

/* Algorithm bandwidth of one call, GB/s, or 0 when NCCL would not run it. */
static double algbw_of(const strata_nccl_system *s, int ppn, int nodes, strata_coll coll,
                       strata_nccl_algo a, strata_nccl_proto p) {
  double n = (double)ppn * nodes;
  double net = strata_nccl_net_gbps(s), intra = intra_cap(s, ppn);
  int ch = strata_nccl_channels(s, ppn, nodes);
  int allreduce = coll == STRATA_COLL_ALLREDUCE;
  if (p == STRATA_NCCL_LL128 && !ll128_enabled(s, ppn, nodes)) return 0;
  if (nodes > 1 && !(net > 0)) return 0;
  switch (a) {
    case STRATA_NCCL_RING: {
      double raw = nodes > 1 ? fmin(intra, net) : s->intra_gbps;
      return ring_busbw(s, nodes, ch, raw, p) * n / nsteps_of(coll, n);
    }
    case STRATA_NCCL_TREE: {
      if (!allreduce) return 0;
      /* two nodes: NCCL grows the intra-node bandwidth to twice the network's (search.cc) */
      double raw = nodes == 1 ? s->intra_gbps : fmin(intra, nodes <= 2 ? 2 * net : net);
      return 0.5 * tree_busbw(s, nodes, ch, raw, p);
    }
    case STRATA_NCCL_NVLS: {
      /* NVLink SHARP: one node, or with IB SHARP across nodes; Simple only */
      if (!allreduce || p != STRATA_NCCL_SIMPLE || !s->nvls || ppn < 2) return 0;
      double bw = s->intra_gbps * s->nvls_efficiency;
      if (nodes > 1) {
        if (!s->collnet) return 0;
        bw = fmin(bw, net * s->collnet_efficiency);
      }
      return bw;
    }
    case STRATA_NCCL_NVLS_TREE: {
      if (!allreduce || p != STRATA_NCCL_SIMPLE || !s->nvls || ppn < 2 || nodes < 2) return 0;
      int ai = arch_index(s->arch), ni = nodes_index(nodes);
      double inter = 0.5 * net * (nodes <= 2 ? 2 : 1);
      double cap = 0.5 * ch * per_ch_max_nvls_tree_bws[ai][ni];
      return fmin(fmin(s->intra_gbps * s->nvls_efficiency, inter), cap > 0 ? cap : INFINITY);
    }
    case STRATA_NCCL_PAT: {
      /* allgather and reduce-scatter only, Simple, and only with one GPU per node (ncclPatEnable);
       * 0.75 of the network, already an algorithm bandwidth (tuning.cc converts nothing) */
      if (allreduce || coll == STRATA_COLL_BROADCAST || coll == STRATA_COLL_REDUCE) return 0;
      if (p != STRATA_NCCL_SIMPLE || ppn != 1 || nodes < 2) return 0;
      return 0.75 * net;
    }
    case STRATA_NCCL_COLLNET_DIRECT:
    case STRATA_NCCL_COLLNET_CHAIN: {
      /* SHARP in the fabric; NVSwitch systems only for Direct (tuning.cc); Simple only */
      if (!allreduce || p != STRATA_NCCL_SIMPLE || !s->collnet || nodes < 2) return 0;
      double bw = fmin(intra, net);
      if (a == STRATA_NCCL_COLLNET_DIRECT) {
        if (!(s->nvlink_gbps > 0) || ppn < 2) return 0;
        double factor = (double)ppn / ch; /* GPUs per NIC channel */
        factor -= (factor - 1) / 2;
        if (factor > 1) bw /= factor;
        if (s->arch >= 90) bw *= 0.85;
      }
      return 0.5 * bw;
    }
    default:
      return 0;
  }
}

static double latency_of(const strata_nccl_system *s, int ppn, int nodes, strata_coll coll,
                         strata_nccl_algo a, strata_nccl_proto p) {
  int intra_hw = s->nvlink_gbps > 0 ? HW_NVLINK : HW_PCI;
  double n = (double)ppn * nodes;
  int nsteps = nsteps_of(coll, n);
  double lat = base_latency_us[a][p];
  double intra = hw_latency_us[intra_hw][a][p];
  /* with one GPU per node every hop is exposed: the tree's network latency */
  double inter =
      (ppn == 1 ? hw_latency_us[HW_NET][STRATA_NCCL_TREE][p] : hw_latency_us[HW_NET][a][p]) +
      s->net_latency_us * (p == STRATA_NCCL_SIMPLE ? 2 : 1);
  switch (a) {
    case STRATA_NCCL_RING:
      if (coll == STRATA_COLL_BROADCAST || coll == STRATA_COLL_REDUCE) {
        int hw = nodes == 1 ? intra_hw : HW_NET;
        double step = hw_latency_us[hw][p == STRATA_NCCL_SIMPLE ? STRATA_NCCL_TREE : a][p];
        return lat + nsteps * step;
      } else {
        if (nodes > 1) intra = fmax(intra, NET_OVERHEAD_US * (p == STRATA_NCCL_SIMPLE ? 3 : 1));
        int inter_steps = nodes == 1                      ? 0
                          : coll == STRATA_COLL_ALLREDUCE ? 2 * (nodes - 1)
                                                          : nodes - 1;
        return lat + (nsteps - inter_steps) * intra + inter_steps * inter;
      }
    case STRATA_NCCL_TREE:
      return lat + 2 * ((ppn - 1) * intra + log2i(nodes) * inter);
    case STRATA_NCCL_COLLNET_DIRECT:
      return lat + 2 * ((ppn > 1 ? 1 : 0) * intra + (ppn - 1) * 0.4) + inter;
    case STRATA_NCCL_COLLNET_CHAIN:
      return lat + 2 * (ppn - 1) * intra + inter;
    case STRATA_NCCL_NVLS:
      return intra + (nodes > 1 ? inter : 0);
    case STRATA_NCCL_NVLS_TREE:
      return lat + intra + 2 * log2i(nodes) * inter;
    case STRATA_NCCL_PAT: /* a logarithmic part and, still, a linear one (tuning.cc) */
      return lat + log2i(nodes) * (inter / 3.5) + n * 2.8;
    default:
      return lat;
  }
}

int strata_nccl_time(const strata_nccl_system *s, int ppn, int nodes, strata_coll coll,
                     strata_nccl_algo a, strata_nccl_proto p, double bytes, strata_nccl_cost *out) {
  if (!s || !s->present || ppn < 1 || nodes < 1 || (int)a < 0 || a >= STRATA_NCCL_ALGO_COUNT ||
      (int)p < 0 || p >= STRATA_NCCL_PROTO_COUNT || bytes < 0)
    return -1;
  if (coll != STRATA_COLL_ALLREDUCE && coll != STRATA_COLL_REDUCE_SCATTER &&
      coll != STRATA_COLL_ALLGATHER && coll != STRATA_COLL_BROADCAST && coll != STRATA_COLL_REDUCE)
    return -1;
  if ((double)ppn * nodes < 2) return -1;
  double bw = algbw_of(s, ppn, nodes, coll, a, p);
  if (!(bw > 0)) return -1;
  double lat = latency_of(s, ppn, nodes, coll, a, p);
  int log_size = log2i(floor(bytes / 64));
  if (bytes < 64) log_size = -1;
  if (a == STRATA_NCCL_TREE && log_size >= 0 && log_size < 23) bw *= tree_correction[p][log_size];
  /* the "plateau effect of ring" across nodes (ncclTopoGetAlgoTime) */
  int ch = strata_nccl_channels(s, ppn, nodes);
  if (a == STRATA_NCCL_RING && p == STRATA_NCCL_SIMPLE && nodes > 1 &&
      coll == STRATA_COLL_ALLREDUCE && bytes / (ch * (double)ppn * nodes) >= 64)
    lat *= s->arch < 80 ? 1.9 : 1.4;
  memset(out, 0, sizeof *out);
  out->algo = a;
  out->proto = p;
  out->latency_us = lat;
  out->algbw_gbps = bw;
  out->time_us = lat + bytes / (1000 * bw);
  return 0;
}

int strata_nccl_best_proto(const strata_nccl_system *s, int ppn, int nodes, strata_coll coll,
                           strata_nccl_algo a, double bytes, strata_nccl_cost *out) {
  int found = -1;
  for (int p = 0; p < STRATA_NCCL_PROTO_COUNT; p++) {
    strata_nccl_cost c;
    if (strata_nccl_time(s, ppn, nodes, coll, a, (strata_nccl_proto)p, bytes, &c) != 0) continue;
    if (found != 0 || c.time_us < out->time_us) *out = c;
    found = 0;
  }
  return found;
}
