// SPDX-License-Identifier: Apache-2.0
/*
 * nccl.h — what NCCL does with a GPU cluster: its algorithms (ring, double binary tree, NVLS,
 * NVLS tree, CollNet/SHARP, PAT), its protocols (LL, LL128, Simple) and the cost model it picks
 * them with, fed with the bandwidths the hardware of a node actually delivers.
 *
 * The structure and every constant of the cost are NCCL's own (NVIDIA/nccl src/graph/tuning.cc:
 * baseLat, hwLat, llMaxBws, perChMax*Bws, the LL 1/2 and LL128 120/128 efficiencies, the tree's
 * 0.92 and its correction factors; src/graph/search.cc: channel duplication). What NCCL learns
 * from probing the machine (its topology search) is replaced by arithmetic on the node's
 * description: a ring or tree channel per compute NIC, all NICs of a node used at once (so a
 * ring's node boundary carries the node's whole NIC bandwidth, not one port's), the NVLink a GPU
 * achieves, and the GPU-to-NIC path with or without GPUDirect RDMA.
 *
 * A "node" here is NCCL's: the GPUs one NVLink fabric joins (an HGX board, or a whole NVL72 rack
 * when its trays form one multi-node NVLink domain). Everything is O(1) in the cluster's size.
 */
#ifndef STRATA_MODEL_NCCL_H
#define STRATA_MODEL_NCCL_H

#include "strata.h"

typedef enum strata_nccl_algo {
  STRATA_NCCL_TREE = 0,       /* intra-node chain + inter-node double binary tree */
  STRATA_NCCL_RING,           /* rings over every channel (one or two per NIC) */
  STRATA_NCCL_COLLNET_DIRECT, /* SHARP on the network fabric, every GPU to its own NIC */
  STRATA_NCCL_COLLNET_CHAIN,  /* SHARP, the node's GPUs chained to the NICs */
  STRATA_NCCL_NVLS,           /* NVLink SHARP in the NVSwitch (with IB SHARP across nodes) */
  STRATA_NCCL_NVLS_TREE,      /* NVLS inside nodes, a tree across them */
  STRATA_NCCL_PAT,            /* allgather / reduce-scatter with one GPU per node: log depth */
  STRATA_NCCL_ALGO_COUNT
} strata_nccl_algo;

typedef enum strata_nccl_proto {
  STRATA_NCCL_LL = 0, /* 8-byte stores with a flag in each: half the bandwidth, lowest latency */
  STRATA_NCCL_LL128,  /* 128-byte lines, 120 bytes of data: 120/128 */
  STRATA_NCCL_SIMPLE, /* bulk copies with fences: full bandwidth, highest latency */
  STRATA_NCCL_PROTO_COUNT
} strata_nccl_proto;

const char *strata_nccl_algo_name(strata_nccl_algo algo);    /* "ring", "tree", "nvls", ... */
const char *strata_nccl_proto_name(strata_nccl_proto proto); /* "LL", "LL128", "Simple" */

/* The hardware of one NCCL communicator's nodes. How many nodes and ranks per node a call spans
 * is an argument of the cost, so one description serves a node, a site and an island. Bandwidths
 * are GB/s one direction, what the hardware achieves (not line rate): the caller applies each
 * link's efficiency. */
typedef struct strata_nccl_system {
  int present;        /* 0: not a GPU cluster NCCL would run on */
  int arch;           /* 80 Ampere, 90 Hopper, 100 Blackwell (NCCL's compute-capability index) */
  double nvlink_gbps; /* per GPU into the NVLink fabric; 0 = none (PCIe only) */
  int nvlink_links;   /* NVLink links per GPU (bounds channels inside a node) */
  double intra_gbps;  /* per GPU between GPUs of a node (NVLink, else PCIe or host memory) */
  int nvls;           /* NVSwitch with multicast/reduction (Hopper onwards) */
  double nvls_efficiency;    /* NVLS allreduce algbw over intra_gbps */
  int nics;                  /* compute NIC ports per node (all of the domain's trays) */
  double nic_gbps;           /* achieved per port */
  double pcie_gbps;          /* a GPU's (and its NIC's) PCIe link */
  int gpudirect;             /* the NIC reads and writes GPU memory directly */
  int collnet;               /* the fabric reduces in its switches (IB SHARP) */
  double collnet_efficiency; /* SHARP allreduce over the node's NIC bandwidth */
  int sockets;               /* no RDMA: NCCL's socket transport over kernel TCP */
  double net_latency_us;     /* added to every network hop (a kernel stack's; 0 for RDMA) */
} strata_nccl_system;

/* The bandwidth of the node's network boundary NCCL's channels can fill, GB/s: every compute NIC,
 * each at min(its rate, its path to the GPU). Without GPUDirect RDMA the path bounces through
 * host memory: the shared PCIe uplink carries the send and the receive copies in each direction,
 * so a NIC gets at most half the PCIe link. */
double strata_nccl_net_gbps(const strata_nccl_system *s);
/* Channels NCCL's ring (and tree) search ends with: one per NIC across nodes, NVLink links inside
 * one, doubled as ncclTopoDupChannels does. */
int strata_nccl_channels(const strata_nccl_system *s, int ranks_per_node, int nodes);

typedef struct strata_nccl_cost {
  strata_nccl_algo algo;
  strata_nccl_proto proto;
  double latency_us;
  double algbw_gbps; /* after the protocol and NCCL's corrections for this size */
  double time_us;
} strata_nccl_cost;

/* NCCL's time for `coll` over `nodes` nodes of `ranks_per_node` GPUs (STRATA_COLL_ALLREDUCE,
 * _REDUCE_SCATTER, _ALLGATHER, _BROADCAST or _REDUCE) of `bytes` (nccl-tests' size) with one
 * algorithm and protocol. Returns 0, or -1 when NCCL would not run that combination here. */
int strata_nccl_time(const strata_nccl_system *s, int ranks_per_node, int nodes, strata_coll coll,
                     strata_nccl_algo algo, strata_nccl_proto proto, double bytes,
                     strata_nccl_cost *out);
/* The protocol NCCL would pick for one algorithm (the fastest); -1 if the algorithm never runs. */
int strata_nccl_best_proto(const strata_nccl_system *s, int ranks_per_node, int nodes,
                           strata_coll coll, strata_nccl_algo algo, double bytes,
                           strata_nccl_cost *out);

#endif
