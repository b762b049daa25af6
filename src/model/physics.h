// SPDX-License-Identifier: Apache-2.0
/*
 * physics.h — what each kind of link can physically do: bandwidth, latency, reach, and the
 * derived limits the planner lints against (PFC headroom, the longest lossless RoCE span, the
 * WireGuard MTU). Every constant names its public source in physics.c.
 *
 * Units: bandwidth in GB/s (1e9 bytes per second, one direction) unless a name says gbit;
 * latency in microseconds; distance in kilometres; sizes in bytes.
 *
 * This file is pure arithmetic on numbers. It never reads a topology (src/topo) or a schedule.
 */
#ifndef STRATA_MODEL_PHYSICS_H
#define STRATA_MODEL_PHYSICS_H

#include <stddef.h>
#include <stdint.h>

#include "strata.h"

/* One technology the map names, with what it can carry. */
typedef enum strata_tech {
  STRATA_TECH_NVLINK3 = 0, /* A100, 600 GB/s per GPU both directions */
  STRATA_TECH_NVLINK4,     /* H100/H200, 900 GB/s */
  STRATA_TECH_NVLINK5,     /* B200/GB200, 1.8 TB/s */
  STRATA_TECH_NVLINK6,     /* Rubin, 3.6 TB/s */
  STRATA_TECH_PCIE4,       /* x16 */
  STRATA_TECH_PCIE5,
  STRATA_TECH_PCIE6,
  STRATA_TECH_IB_HDR,   /* 4x port: 200 Gb/s */
  STRATA_TECH_IB_NDR,   /* 400 Gb/s */
  STRATA_TECH_IB_XDR,   /* 800 Gb/s */
  STRATA_TECH_ROCE,     /* RoCEv2 over Ethernet; rate from the link */
  STRATA_TECH_ETHERNET, /* plain TCP/IP over Ethernet; rate from the link */
  STRATA_TECH_COUNT
} strata_tech;

typedef struct strata_tech_info {
  const char *name;
  int layer;          /* 1 chassis, 2 datacenter */
  double peak_gbps;   /* GB/s one direction, per GPU or per port (0: from the link) */
  double efficiency;  /* achievable fraction of peak for large ring transfers */
  double latency_us;  /* per message (α) as NCCL's tuning model uses it */
  const char *source; /* where the numbers come from */
} strata_tech_info;

const strata_tech_info *strata_tech_get(strata_tech tech);
/* Case-insensitive lookup by name ("nvlink4", "ib-ndr", "pcie5", ...); -1 when unknown. */
int strata_tech_parse(const char *name);

/* ---- layer 3: fiber, optics, appliances ---- */
#define STRATA_FIBER_US_PER_KM 4.9       /* one way */
double strata_fiber_delay_us(double km); /* one way */
double strata_fiber_rtt_ms(double km);

typedef enum strata_optic {
  STRATA_OPTIC_GRAY_LR4 = 0,    /* 10 km gray optics */
  STRATA_OPTIC_ZR,              /* 400ZR coherent, ~120 km amplified */
  STRATA_OPTIC_ZR_PLUS,         /* OpenZR+, ~1000 km at full rate */
  STRATA_OPTIC_ZR_PLUS_REDUCED, /* OpenZR+ at reduced rate, 2000 km */
  STRATA_OPTIC_METROX3,         /* NVIDIA MetroX-3: 400G InfiniBand to 40 km */
  STRATA_OPTIC_LONGHAUL,        /* managed long-haul DWDM / carrier wave: no reach limit */
  STRATA_OPTIC_COUNT
} strata_optic;
double strata_optic_reach_km(strata_optic optic);
const char *strata_optic_name(strata_optic optic);

/* ---- PFC / lossless RoCE over distance ---- */
/* Headroom one lossless port needs for a cable of `km` at `rate_gbit` Gb/s:
 * MTU_tx + MTU_rx + 2·rate·t_cable + response (~3.8 KB) (Mellanox headroom formula). */
double strata_pfc_headroom_bytes(double rate_gbit, double km, double mtu_bytes);
/* The headroom each additional kilometre costs (~123 KB/km at 100G, ~490 KB/km at 400G). */
double strata_pfc_headroom_per_km_bytes(double rate_gbit);
/* The longest span that `headroom_bytes` per port keeps lossless; 0 if not even a 0 km cable. */
double strata_roce_max_lossless_km(double headroom_bytes, double rate_gbit, double mtu_bytes);
/* Headroom a shared-buffer switch can give each lossless port: buffer / ports. */
double strata_switch_headroom_per_port_bytes(double buffer_bytes, int lossless_ports);
#define STRATA_SWITCH_BUFFER_TRIDENT4_BYTES (64.0e6)
#define STRATA_SWITCH_BUFFER_TOMAHAWK2_BYTES (42.0e6)

/* ---- sealing (strata's own AEAD on TCP, src/net/seal.c) ---- */
/* One core's AES-256-GCM with AES-NI, GB/s (16 KiB messages; the low end of published figures
 * for code like OpenSSL's, which seal.c uses: libsodium 1.0.18's reaches about half of it). A rank
 * seals what it sends and opens what it receives on its progress thread, so one rank moves at
 * most half of it. */
#define STRATA_AEAD_AES256GCM_GBYTES_PER_CORE 5.0
double strata_seal_cap_gbps(void);

/* ---- the wire encodings of compressed collectives (src/core/compress.c) ---- */
/* f32 GB/s one core encodes and decodes encoding c (0 and 0 for none): what the engine's
 * progress thread spends on each message of a compressed call. */
void strata_codec_core_gbps(strata_compress c, double *encode_gbps, double *decode_gbps);

/* ---- overlays ---- */
#define STRATA_WIREGUARD_OVERHEAD_V4_BYTES 60
#define STRATA_WIREGUARD_OVERHEAD_V6_BYTES 80
/* Inner MTU for an outer path MTU (IPv6 worst case, as wg-quick does): 1500 → 1420. */
int strata_wireguard_mtu(int path_mtu);
/* Goodput of TCP inside WireGuard relative to TCP on the bare path (per-packet overhead). */
double strata_wireguard_efficiency(int path_mtu);
/* What one tunnel endpoint moves, GB/s: the kernel module or wireguard-go with GSO/GRO. */
#define STRATA_WIREGUARD_TUNNEL_GBIT 10.0

/* ---- TCP across a WAN ---- */
/* PCCL measured ~3.7 Gb/s on one TCP connection and ~45 Gb/s on 64 (western Europe). This gives
 * the usable Gb/s of `streams` parallel connections on a path of capacity `link_gbit`. */
double strata_wan_tcp_gbit(double link_gbit, int streams);

#endif
