// SPDX-License-Identifier: Apache-2.0
/*
 * physics.c — the numbers behind every link kind. Each constant names its public source; "derived"
 * means arithmetic on sourced numbers, "assumed" means no source pinned it down and the planner
 * treats it as a soft default a topology may override.
 */
#include "model/physics.h"

#include <math.h>
#include <strings.h>

/* Achieved over peak for a large ring allreduce on NVLink4: nccl-tests#212 and NVIDIA/nccl#1442
 * report 365–370 GB/s busbw on 8×H100 against 450 GB/s per direction: 368/450 ≈ 0.82. The same
 * fraction is applied to the other NVLink generations (assumed). */
#define NVLINK_RING_EFFICIENCY 0.82
/* NCCL's Simple-protocol per-step hardware latencies (µs): NVLink 3.4, PCI 5.7, NET 14
 * (NVIDIA/nccl src/graph/tuning.cc, ring row). */
#define NCCL_LAT_NVLINK_US 3.4
#define NCCL_LAT_PCI_US 5.7
#define NCCL_LAT_NET_US 14.0
/* Achieved fraction of an InfiniBand / RoCE port for large transfers: assumed 0.92 (NCCL's LL128
 * cap, NVIDIA/nccl tuning.cc, used as a stand-in; no published measurement pins it). */
#define NET_EFFICIENCY 0.92

static const strata_tech_info tech_table[STRATA_TECH_COUNT] = {
    /* NVLink: per-GPU totals from the NVIDIA NVLink page / nccl#1442 / GPU operator docs,
     * halved for one direction. */
    [STRATA_TECH_NVLINK3] = {"nvlink3", 1, 300.0, NVLINK_RING_EFFICIENCY, NCCL_LAT_NVLINK_US,
                             "NVIDIA NVLink page (600 GB/s per A100)"},
    [STRATA_TECH_NVLINK4] = {"nvlink4", 1, 450.0, NVLINK_RING_EFFICIENCY, NCCL_LAT_NVLINK_US,
                             "NVIDIA/nccl#1442, nccl-tests#212 (900 GB/s, 450 per direction)"},
    [STRATA_TECH_NVLINK5] = {"nvlink5", 1, 900.0, NVLINK_RING_EFFICIENCY, NCCL_LAT_NVLINK_US,
                             "NVIDIA GPU operator docs (1.8 TB/s per B200)"},
    [STRATA_TECH_NVLINK6] = {"nvlink6", 1, 1800.0, NVLINK_RING_EFFICIENCY, NCCL_LAT_NVLINK_US,
                             "seed page (3.6 TB/s per Rubin GPU; secondary only)"},
    /* PCIe x16 as NCCL models it: width × GT/s / 80 (NVIDIA/nccl src/graph/topo.cc). */
    [STRATA_TECH_PCIE4] = {"pcie4", 1, 24.0, 1.0, NCCL_LAT_PCI_US, "NVIDIA/nccl topo.cc (Gen4 24)"},
    [STRATA_TECH_PCIE5] = {"pcie5", 1, 48.0, 1.0, NCCL_LAT_PCI_US, "NVIDIA/nccl topo.cc (Gen5 48)"},
    [STRATA_TECH_PCIE6] = {"pcie6", 1, 96.0, 1.0, NCCL_LAT_PCI_US, "NVIDIA/nccl topo.cc (Gen6 96)"},
    /* InfiniBand 4x ports: HDR 50, NDR 100, XDR 200 Gb/s per lane (NVIDIA/nccl net_ib ibvSpeeds).
     */
    [STRATA_TECH_IB_HDR] = {"ib-hdr", 2, 25.0, NET_EFFICIENCY, NCCL_LAT_NET_US,
                            "NVIDIA/nccl net_ib ibvSpeeds (200 Gb/s 4x)"},
    [STRATA_TECH_IB_NDR] = {"ib-ndr", 2, 50.0, NET_EFFICIENCY, NCCL_LAT_NET_US,
                            "NVIDIA/nccl net_ib ibvSpeeds (400 Gb/s 4x)"},
    [STRATA_TECH_IB_XDR] = {"ib-xdr", 2, 100.0, NET_EFFICIENCY, NCCL_LAT_NET_US,
                            "NVIDIA/nccl net_ib ibvSpeeds (800 Gb/s 4x)"},
    [STRATA_TECH_ROCE] = {"roce", 2, 0.0, NET_EFFICIENCY, NCCL_LAT_NET_US,
                          "Cumulus Linux RoCE docs (PFC+ECN); rate from the link"},
    /* Kernel TCP: NCCL's socket transport defaults to 1 thread, 1 socket per peer
     * (NVIDIA/nccl net_socket.cc); efficiency assumed 0.8, latency assumed 25 µs. */
    [STRATA_TECH_ETHERNET] = {"ethernet", 2, 0.0, 0.8, 25.0,
                              "NVIDIA/nccl net_socket.cc; efficiency and latency assumed"},
};

const strata_tech_info *strata_tech_get(strata_tech tech) {
  if ((int)tech < 0 || tech >= STRATA_TECH_COUNT) return NULL;
  return &tech_table[tech];
}

int strata_tech_parse(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < STRATA_TECH_COUNT; i++)
    if (!strcasecmp(name, tech_table[i].name)) return i;
  return -1;
}

/* Light in fiber: 4.9 µs/km one way, ≈1 ms RTT per 100 km (NetApp MetroCluster ISL docs). */
double strata_fiber_delay_us(double km) {
  return km > 0 ? km * STRATA_FIBER_US_PER_KM : 0.0;
}
double strata_fiber_rtt_ms(double km) {
  return 2.0 * strata_fiber_delay_us(km) / 1000.0;
}

static const struct {
  const char *name;
  double reach_km;
} optic_table[STRATA_OPTIC_COUNT] = {
    [STRATA_OPTIC_GRAY_LR4] = {"lr4", 10.0},      /* IEEE 802.3 400GBASE-LR4 (assumed) */
    [STRATA_OPTIC_ZR] = {"400zr", 120.0},         /* Juniper coherent-optics docs */
    [STRATA_OPTIC_ZR_PLUS] = {"openzr+", 1000.0}, /* Juniper: ~450–1000+ km */
    [STRATA_OPTIC_ZR_PLUS_REDUCED] = {"openzr+-reduced", 2000.0}, /* seed page */
    [STRATA_OPTIC_METROX3] = {"metrox-3", 40.0},       /* trade press: 400G IB to 40 km */
    [STRATA_OPTIC_LONGHAUL] = {"long-haul", INFINITY}, /* carrier DWDM, amplified and regenerated */
};

double strata_optic_reach_km(strata_optic optic) {
  if ((int)optic < 0 || optic >= STRATA_OPTIC_COUNT) return 0.0;
  return optic_table[optic].reach_km;
}

const char *strata_optic_name(strata_optic optic) {
  if ((int)optic < 0 || optic >= STRATA_OPTIC_COUNT) return "?";
  return optic_table[optic].name;
}

/* The Mellanox headroom formula (gist; mlxsw commit): MTU_tx + MTU_rx + 2·rate·t_cable + the
 * peer's response time, ~3.8 KB. t_cable is one-way propagation, 4.9 µs/km. */
#define PFC_RESPONSE_BYTES 3800.0

double strata_pfc_headroom_per_km_bytes(double rate_gbit) {
  double bytes_per_us = rate_gbit * 1e9 / 8.0 / 1e6;
  return 2.0 * bytes_per_us * STRATA_FIBER_US_PER_KM;
}

double strata_pfc_headroom_bytes(double rate_gbit, double km, double mtu_bytes) {
  if (km < 0) km = 0;
  return 2.0 * mtu_bytes + strata_pfc_headroom_per_km_bytes(rate_gbit) * km + PFC_RESPONSE_BYTES;
}

double strata_roce_max_lossless_km(double headroom_bytes, double rate_gbit, double mtu_bytes) {
  double spare = headroom_bytes - 2.0 * mtu_bytes - PFC_RESPONSE_BYTES;
  double per_km = strata_pfc_headroom_per_km_bytes(rate_gbit);
  if (spare <= 0 || per_km <= 0) return 0.0;
  return spare / per_km;
}

/* Shared-buffer switches (Tomahawk 2 42 MB, Trident4 64 MB; secondary sources) give each
 * lossless port about buffer/ports: 64 MB over 32×400G ports ≈ 2 MB ⇒ ~4 km (derived). */
double strata_switch_headroom_per_port_bytes(double buffer_bytes, int lossless_ports) {
  if (lossless_ports <= 0) return 0.0;
  return buffer_bytes / lossless_ports;
}

/* AES-256-GCM runs at 5-6 GB/s on one core with AES-NI (ChaCha20-Poly1305 2.0-2.5 GB/s:
 * jedisct1/aegis benchmarks, FACTS.md). seal.c's OpenSSL code measures a little under the low end
 * on a shared 2-core guest with VAES (`strata bench --cipher`, docs/security.md), so the low end
 * stays, halved because each byte a rank exchanges is sealed by the sender and opened by the
 * receiver, each on one progress thread. */
double strata_seal_cap_gbps(void) {
  return STRATA_AEAD_AES256GCM_GBYTES_PER_CORE / 2;
}

/* `strata bench --codec` on one x86-64 core (a 2-core guest with AVX2; gcc -O2, the build's
 * flags), the best of 5 rounds over 16 MiB of f32: the block encodings (int8, int4, fp8) scan
 * each block for its range before coding it, so they encode several times slower than they
 * decode; bf16 and f16 are one rounding per value each way. */
static const struct {
  strata_compress codec;
  double encode_gbps, decode_gbps;
} CODEC_CORE_GBPS[] = {
    {STRATA_COMPRESS_BF16, 14.0, 16.0}, {STRATA_COMPRESS_F16, 18.0, 17.0},
    {STRATA_COMPRESS_INT8, 1.7, 5.4},   {STRATA_COMPRESS_FP8, 1.3, 5.7},
    {STRATA_COMPRESS_INT4, 1.6, 5.7},
};

void strata_codec_core_gbps(strata_compress c, double *encode_gbps, double *decode_gbps) {
  double e = 0, d = 0;
  for (size_t i = 0; i < sizeof CODEC_CORE_GBPS / sizeof CODEC_CORE_GBPS[0]; i++)
    if (CODEC_CORE_GBPS[i].codec == c)
      e = CODEC_CORE_GBPS[i].encode_gbps, d = CODEC_CORE_GBPS[i].decode_gbps;
  if (encode_gbps) *encode_gbps = e;
  if (decode_gbps) *decode_gbps = d;
}

/* WireGuard adds 60 B per packet over IPv4 and 80 B over IPv6 (Donenfeld, WireGuard list 2017);
 * wg-quick plans for the IPv6 case, so a 1500 B path gives a 1420 B tunnel MTU. */
int strata_wireguard_mtu(int path_mtu) {
  int mtu = path_mtu - STRATA_WIREGUARD_OVERHEAD_V6_BYTES;
  return mtu > 0 ? mtu : 0;
}

/* TCP payload per packet inside and outside the tunnel (IPv4 20 + TCP 20 + timestamps 12). */
double strata_wireguard_efficiency(int path_mtu) {
  const double tcp_ip_bytes = 52.0;
  double bare = path_mtu - tcp_ip_bytes;
  double inner = strata_wireguard_mtu(path_mtu) - tcp_ip_bytes;
  if (bare <= 0 || inner <= 0) return 0.0;
  return inner / bare;
}

/* PCCL (arXiv 2505.14065): 1 connection ≈ 3.7 Gb/s, 64 ≈ 45 Gb/s. A power law through both
 * points, 3.7·n^0.6, capped by the path. */
double strata_wan_tcp_gbit(double link_gbit, int streams) {
  if (streams < 1) streams = 1;
  double exponent = log(45.0 / 3.7) / log(64.0);
  double gbit = 3.7 * pow((double)streams, exponent);
  return link_gbit > 0 && gbit > link_gbit ? link_gbit : gbit;
}
