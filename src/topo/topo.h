// SPDX-License-Identifier: Apache-2.0
/*
 * topo.h — the in-memory topology model: what a cluster IS, never how fast it is.
 *
 * A topology is sites joined by links. A site has a cluster fabric (layer 2), optional buildings
 * and racks, and node groups: N identical nodes described once (GPU model and count, the fabric
 * inside the node — layer 1 — and its NICs). A link joins two sites on the three layer-3 levels of
 * the seed map: physical (fiber, optics), fabric extension (MetroX, IB router, RoCE aggregation)
 * and overlay (WireGuard over the internet or a cloud interconnect).
 *
 * Invariants, which strata_topo_validate() enforces and every loader calls:
 *   - names are unique within their kind (sites, buildings of a site, racks of a site, links);
 *   - every index (site, building, rack) points into its array or is -1 for "none";
 *   - counts are >= 1; numbers given in the file are >= 0 (and percentages <= 100);
 *   - node groups are stored grouped by site: site->group_begin .. +group_count.
 * Scale: 100,000 GPUs are 12,500 nodes but ONE node group {count: 12500}; nothing in this model
 * is ever materialized per node or per GPU. Totals are int64.
 *
 * Numbers the file leaves out are STRATA_TOPO_UNSET (a negative value; test with
 * strata_topo_is_set). The physics (src/model) derives them from the kinds: NIC speed from the IB
 * generation, RTT from km, and so on. This header must never hold a speed, a latency or a reach;
 * the only defaults filled in at load time are descriptive catalog facts (an H100 node's NVLink is
 * NVLink4 in an 8-GPU NVSwitch domain), and those are flagged `*_defaulted`.
 *
 * Tri-state flags (GPUDirect RDMA, PFC, ECN, SHARP, site-to-site) are int: STRATA_TOPO_UNKNOWN (-1)
 * when the file is silent, 0 no, 1 yes.
 *
 * Every element keeps the position it came from (strata_topo_mark, 1-based line and column) so
 * validation errors and planner lints can say "file:line:col". Errors are always written as
 * "<name>:<line>:<col>: expected <what>[, got <what>]" into the caller's buffer.
 *
 * Ownership: a strata_topo is allocated by a loader and freed with strata_topo_free(); every
 * pointer inside it is owned by it and valid until then. The model is read-only after loading and
 * safe to share between threads for reading.
 */
#ifndef STRATA_TOPO_TOPO_H
#define STRATA_TOPO_TOPO_H

#include <stddef.h>
#include <stdint.h>

#include "strata.h"

#define STRATA_TOPO_NAME_MAX 64  /* names, incl. NUL: sites, nodes, links, templates */
#define STRATA_TOPO_TEXT_MAX 160 /* free text, incl. NUL: descriptions, regions, feature names */
#define STRATA_TOPO_MAX_NICS 4   /* NIC kinds per node (compute, storage, frontend ...) */
#define STRATA_TOPO_UNSET (-1.0) /* a number the file did not give */
#define STRATA_TOPO_UNKNOWN (-1) /* a yes/no the file did not give */

static inline int strata_topo_is_set(double value) {
  return value >= 0.0;
}

/* ---- enums: every kind the format knows. Each has _name() and _parse() below. ---- */

typedef enum strata_gpu_model {
  STRATA_GPU_NONE = 0, /* a CPU-only node ("gpu: none") */
  STRATA_GPU_A100,
  STRATA_GPU_H100,
  STRATA_GPU_H200,
  STRATA_GPU_B200,
  STRATA_GPU_GB200, /* Grace-Blackwell superchip GPUs (NVL72 rack) */
  STRATA_GPU_RUBIN,
  STRATA_GPU_MODEL_COUNT
} strata_gpu_model;

/* How GPUs inside one node talk (layer 1). */
typedef enum strata_intra_kind {
  STRATA_INTRA_NONE = 0, /* a single GPU, or GPUs that cannot talk peer-to-peer */
  STRATA_INTRA_NVLINK,   /* NVLink, with NVSwitch if nvswitch_domain_gpus > 0 */
  STRATA_INTRA_PCIE,     /* PCIe peer-to-peer only */
  STRATA_INTRA_KIND_COUNT
} strata_intra_kind;

typedef enum strata_nvlink_gen {
  STRATA_NVLINK_NONE = 0,
  STRATA_NVLINK_3 = 3, /* A100 */
  STRATA_NVLINK_4 = 4, /* H100, H200 */
  STRATA_NVLINK_5 = 5, /* B200, GB200 */
  STRATA_NVLINK_6 = 6  /* Rubin */
} strata_nvlink_gen;

typedef enum strata_pcie_gen {
  STRATA_PCIE_UNSPECIFIED = 0,
  STRATA_PCIE_3 = 3,
  STRATA_PCIE_4 = 4,
  STRATA_PCIE_5 = 5,
  STRATA_PCIE_6 = 6
} strata_pcie_gen;

typedef enum strata_nic_kind {
  STRATA_NIC_INFINIBAND = 0,
  STRATA_NIC_ROCE,     /* RoCEv2 */
  STRATA_NIC_ETHERNET, /* plain TCP/IP Ethernet, no RDMA */
  STRATA_NIC_KIND_COUNT
} strata_nic_kind;

typedef enum strata_ib_speed {
  STRATA_IB_UNSPECIFIED = 0,
  STRATA_IB_HDR, /* 50 Gb/s per lane */
  STRATA_IB_NDR, /* 100 Gb/s per lane */
  STRATA_IB_XDR, /* 200 Gb/s per lane */
  STRATA_IB_SPEED_COUNT
} strata_ib_speed;

typedef enum strata_nic_role {
  STRATA_NIC_ROLE_COMPUTE = 0, /* the GPU/collective fabric (default) */
  STRATA_NIC_ROLE_STORAGE,
  STRATA_NIC_ROLE_FRONTEND, /* management / internet-facing */
  STRATA_NIC_ROLE_COUNT
} strata_nic_role;

/* The cluster fabric of one site (layer 2). */
typedef enum strata_fabric_kind {
  STRATA_FABRIC_NONE = 0, /* a single node, or nodes not networked for collectives */
  STRATA_FABRIC_INFINIBAND,
  STRATA_FABRIC_ROCE,
  STRATA_FABRIC_ETHERNET, /* TCP only */
  STRATA_FABRIC_KIND_COUNT
} strata_fabric_kind;

/* Where a site lives / who owns it. */
typedef enum strata_provider {
  STRATA_PROVIDER_OWN = 0, /* an own or colocated datacenter (default) */
  STRATA_PROVIDER_AWS,
  STRATA_PROVIDER_AZURE,
  STRATA_PROVIDER_GCP,
  STRATA_PROVIDER_OCI,
  STRATA_PROVIDER_OTHER_CLOUD,
  STRATA_PROVIDER_COUNT
} strata_provider;

/* Layer 3a: what physically joins two sites. */
typedef enum strata_phys_kind {
  STRATA_PHYS_UNSPECIFIED = 0,
  STRATA_PHYS_DARK_FIBER,         /* own or leased fiber, own optics */
  STRATA_PHYS_DWDM,               /* a wavelength service / DWDM line system */
  STRATA_PHYS_PRIVATE_BACKBONE,   /* an operator's own backbone (B4, 10x Backbone ...) */
  STRATA_PHYS_CLOUD_INTERCONNECT, /* Direct Connect, ExpressRoute, Cloud Interconnect ... */
  STRATA_PHYS_INTERNET,           /* the public internet: nobody owns it end to end */
  STRATA_PHYS_KIND_COUNT
} strata_phys_kind;

typedef enum strata_optics {
  STRATA_OPTICS_UNSPECIFIED = 0,
  STRATA_OPTICS_GREY,        /* short-reach client optics (LR/ER/FR) */
  STRATA_OPTICS_400ZR,       /* coherent 400ZR */
  STRATA_OPTICS_OPENZR_PLUS, /* coherent OpenZR+ */
  STRATA_OPTICS_COUNT
} strata_optics;

/* Layer 3b: what makes two sites one RDMA fabric (or joins their subnets). */
typedef enum strata_extension_kind {
  STRATA_EXT_NONE = 0,
  STRATA_EXT_METROX,           /* NVIDIA MetroX: one IB fabric across buildings */
  STRATA_EXT_IB_ROUTER,        /* IB router: joins subnets, NOT one fabric */
  STRATA_EXT_ROCE_AGGREGATION, /* RoCE aggregation layer a la Meta's ATSW */
  STRATA_EXT_KIND_COUNT
} strata_extension_kind;

/* Layer 3c. */
typedef enum strata_overlay_kind {
  STRATA_OVERLAY_NONE = 0,
  STRATA_OVERLAY_WIREGUARD,
  STRATA_OVERLAY_KIND_COUNT
} strata_overlay_kind;

/* What the overlay rides on. */
typedef enum strata_transit_kind {
  STRATA_TRANSIT_UNSPECIFIED = 0,
  STRATA_TRANSIT_INTERNET,
  STRATA_TRANSIT_CLOUD_INTERCONNECT,
  STRATA_TRANSIT_PRIVATE, /* own fiber / private WAN */
  STRATA_TRANSIT_KIND_COUNT
} strata_transit_kind;

/* ---- elements ---- */

typedef struct strata_topo_mark {
  int line; /* 1-based; 0 for "not from a file" */
  int col;  /* 1-based */
} strata_topo_mark;

typedef struct strata_topo_nic {
  strata_nic_kind kind;
  strata_nic_role role;
  strata_ib_speed ib_speed; /* INFINIBAND only; UNSPECIFIED otherwise or if omitted */
  int count;                /* ports of this kind per node, >= 1 */
  double gbps;              /* per port; UNSET: derive from kind/ib_speed */
  int gpudirect_rdma;       /* tri-state: NIC DMAs GPU memory directly */
  int pfc;                  /* tri-state, RoCE: priority flow control enabled */
  int ecn;                  /* tri-state, RoCE: ECN marking / DCQCN enabled */
  strata_topo_mark mark;
} strata_topo_nic;

/* One node's hardware. Shared by every node of a group. */
typedef struct strata_topo_node_spec {
  strata_gpu_model gpu;
  int gpus;                 /* GPUs per node; 0 for gpu none */
  double gpu_memory_gb;     /* UNSET */
  strata_intra_kind intra;  /* layer 1 */
  strata_nvlink_gen nvlink; /* NVLINK_NONE unless intra == NVLINK */
  int nvswitch_domain_gpus; /* GPUs in one NVSwitch domain; 0 = no NVSwitch. May exceed gpus
                               (NVL72: a 72-GPU domain across 18 nodes of 4) */
  strata_pcie_gen pcie;
  double intra_gbps;   /* UNSET: derive from nvlink/pcie generation */
  int intra_defaulted; /* 1: intra/nvlink/domain/pcie came from the GPU catalog, not the file */
  int nic_count;       /* entries used in nics[] (0..STRATA_TOPO_MAX_NICS) */
  strata_topo_nic nics[STRATA_TOPO_MAX_NICS];
} strata_topo_node_spec;

/* N identical nodes. */
typedef struct strata_topo_node_group {
  char name[STRATA_TOPO_NAME_MAX];          /* "" if the file gave none */
  char template_name[STRATA_TOPO_NAME_MAX]; /* the template it came from, "" if none */
  int site;                                 /* index into topo->sites */
  int building;                             /* index into topo->buildings, -1 none */
  int rack;                                 /* index into topo->racks, -1 none */
  int64_t count;                            /* nodes in this group (already times the rack count) */
  strata_topo_node_spec spec;
  strata_topo_mark mark;
} strata_topo_node_group;

typedef struct strata_topo_fabric {
  strata_fabric_kind kind;
  strata_ib_speed ib_speed; /* INFINIBAND */
  double link_gbps;         /* per switch port; UNSET */
  double oversubscription;  /* ratio x:1 at the spine; UNSET means "not given" (model: 1) */
  int sharp;                /* tri-state: in-network reduction capable (SHARP) */
  int pfc;                  /* tri-state, ROCE */
  int ecn;                  /* tri-state, ROCE */
  double switch_buffer_mb;  /* per switch; UNSET */
  int rail_optimized;       /* tri-state */
  strata_topo_mark mark;
} strata_topo_fabric;

typedef struct strata_topo_building {
  char name[STRATA_TOPO_NAME_MAX];
  int site;
  strata_topo_mark mark;
} strata_topo_building;

typedef struct strata_topo_rack {
  char name[STRATA_TOPO_NAME_MAX];
  int site;
  int building;  /* -1 none */
  int64_t count; /* identical racks described by this entry */
  strata_topo_mark mark;
} strata_topo_rack;

typedef struct strata_topo_site {
  char name[STRATA_TOPO_NAME_MAX];
  char region[STRATA_TOPO_TEXT_MAX]; /* free text: "us-east-1", "Frankfurt"; "" */
  char campus[STRATA_TOPO_NAME_MAX]; /* sites sharing a campus name are buildings of it; "" */
  strata_provider provider;
  int has_location; /* 1: lat_deg/lon_deg are valid */
  double lat_deg, lon_deg;
  strata_topo_fabric fabric;
  int group_begin; /* node groups of this site: topo->groups[group_begin ..] */
  int group_count;
  strata_topo_mark mark;
} strata_topo_site;

typedef struct strata_topo_physical {
  strata_phys_kind kind;
  double km; /* route length; UNSET (the model may use site locations) */
  strata_optics optics;
  double capacity_gbps;  /* total; UNSET */
  int wavelengths;       /* 0 = not given */
  strata_topo_mark mark; /* line 0 if the link has no physical: section */
} strata_topo_physical;

typedef struct strata_topo_extension {
  strata_extension_kind kind;
  double gbps;             /* capacity across the link; UNSET */
  double oversubscription; /* UNSET */
  /* tri-state, ROCE_AGGREGATION: the lossless (PFC) domain spans the link. Unknown or 0 is the
   * ATSW design: each building lossless on its own, the aggregation layer absorbing bursts
   * with oversubscription instead of PFC headroom. */
  int pfc;
  strata_topo_mark mark;
} strata_topo_extension;

typedef struct strata_topo_overlay {
  strata_overlay_kind kind;
  strata_transit_kind transit;
  int site_to_site; /* tri-state: a site-to-site feature (e.g. ExpressRoute Global Reach) on */
  char site_to_site_feature[STRATA_TOPO_TEXT_MAX]; /* its name, "" */
  double rtt_ms;                                   /* measured; UNSET */
  double bandwidth_gbps;                           /* measured; UNSET */
  double loss_pct;                                 /* measured, 0..100; UNSET */
  double mtu_bytes;                                /* UNSET */
  strata_topo_mark mark;
} strata_topo_overlay;

typedef struct strata_topo_link {
  char name[STRATA_TOPO_NAME_MAX]; /* "a--b" if the file gave none */
  int site_a, site_b;              /* indices into topo->sites, a != b */
  strata_topo_physical physical;
  strata_topo_extension extension;
  strata_topo_overlay overlay;
  strata_topo_mark mark;
} strata_topo_link;

typedef struct strata_topo {
  char source[STRATA_TOPO_TEXT_MAX]; /* the file name or "preset:NAME" used in messages */
  char name[STRATA_TOPO_NAME_MAX];
  char description[STRATA_TOPO_TEXT_MAX];
  strata_topo_site *sites;
  int site_count;
  strata_topo_building *buildings;
  int building_count;
  strata_topo_rack *racks;
  int rack_count;
  strata_topo_node_group *groups;
  int group_count;
  strata_topo_link *links;
  int link_count;
} strata_topo;

/* ---- loading. On failure *out is NULL and err (if err_len > 0) holds one line:
 * "<name>:<line>:<col>: expected ...". Returns STRATA_OK, STRATA_ERR_PARSE (syntax, unknown key,
 * wrong type, unknown template, semantic error, a file over 64 MiB), STRATA_ERR_NOT_FOUND (no
 * such file or preset name), STRATA_ERR_SYSTEM (the file exists but cannot be read),
 * STRATA_ERR_NO_MEMORY or STRATA_ERR_INVALID_ARG (NULL arguments). A command maps PARSE to exit
 * status 2. Loading is thread-safe: no global state. ---- */
int strata_topo_load_file(const char *path, strata_topo **out, char *err, size_t err_len);
/* `yaml` is len bytes (need not be NUL-terminated); name_for_errors prefixes messages. */
int strata_topo_load_string(const char *name_for_errors, const char *yaml, size_t len,
                            strata_topo **out, char *err, size_t err_len);
int strata_topo_preset(const char *name, strata_topo **out, char *err, size_t err_len);
void strata_topo_free(strata_topo *topo);

/* Semantic checks (already run by every loader): unknown site in a link, duplicate names,
 * count 0, negative km, a link from a site to itself ... STRATA_OK or STRATA_ERR_PARSE. */
int strata_topo_validate(const strata_topo *topo, char *err, size_t err_len);

/* ---- presets: built-in topologies, stored as YAML and parsed by the same parser. ---- */
size_t strata_topo_preset_count(void);
const char *strata_topo_preset_name(size_t index);        /* NULL past the end */
const char *strata_topo_preset_description(size_t index); /* one line; NULL past the end */
const char *strata_topo_preset_yaml(const char *name);    /* the source text; NULL if unknown */

/* ---- lookups ---- */
int strata_topo_site_index(const strata_topo *topo, const char *name); /* -1 if none */
const strata_topo_site *strata_topo_site_find(const strata_topo *topo, const char *name);
/* Links joining sites a and b in either direction: writes up to max indices into out and returns
 * how many there are in total. */
int strata_topo_links_between(const strata_topo *topo, int site_a, int site_b, int *out, int max);
int64_t strata_topo_site_gpus(const strata_topo *topo, int site);  /* GPUs at one site */
int64_t strata_topo_site_nodes(const strata_topo *topo, int site); /* nodes at one site */
int64_t strata_topo_gpus(const strata_topo *topo);                 /* GPUs everywhere */
int64_t strata_topo_nodes(const strata_topo *topo);
/* Great-circle distance between two sites that both have a location, in km; UNSET otherwise.
 * Geometry only: the route length is physical.km when given. */
double strata_topo_site_distance_km(const strata_topo *topo, int site_a, int site_b);

/* The GPU catalog's descriptive defaults for a model's node fabric (used when the file omits
 * intra:): writes intra kind, NVLink generation, NVSwitch domain and PCIe generation. */
void strata_topo_gpu_defaults(strata_gpu_model gpu, strata_topo_node_spec *spec);

/* ---- names as they appear in the file ("h100", "nvlink", "infiniband", "400zr" ...). _name()
 * never returns NULL ("?" when out of range); _parse() returns STRATA_OK or
 * STRATA_ERR_INVALID_ARG. ---- */
const char *strata_gpu_model_name(strata_gpu_model v);
const char *strata_intra_kind_name(strata_intra_kind v);
const char *strata_nic_kind_name(strata_nic_kind v);
const char *strata_nic_role_name(strata_nic_role v);
const char *strata_ib_speed_name(strata_ib_speed v);
const char *strata_fabric_kind_name(strata_fabric_kind v);
const char *strata_provider_name(strata_provider v);
const char *strata_phys_kind_name(strata_phys_kind v);
const char *strata_optics_name(strata_optics v);
const char *strata_extension_kind_name(strata_extension_kind v);
const char *strata_overlay_kind_name(strata_overlay_kind v);
const char *strata_transit_kind_name(strata_transit_kind v);
int strata_gpu_model_parse(const char *s, strata_gpu_model *out);
int strata_fabric_kind_parse(const char *s, strata_fabric_kind *out);

#endif
