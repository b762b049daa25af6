// SPDX-License-Identifier: Apache-2.0
/*
 * plan.h — the advisor: a topology (src/topo) and a workload in, a plan out.
 *
 * A plan says which layer of the seed map carries which traffic, predicts the collectives the
 * workload runs (src/model's α-β costs on a fabric derived from the topology), the
 * communication time per step and the compute utilization, takes the layer-3 decision (fabric
 * extension vs. overlay + DiLoCo, with numbers for both and the reason), and lists every
 * don't-miss mistake it finds as a lint (lint.c; ids documented in docs/lints.md).
 *
 * Ownership: strata_plan_build() fills a caller-owned strata_plan; strata_plan_free() releases
 * what it allocated (the findings array). The plan keeps no pointer into the topology except
 * `topo`, and no pointer to measured links except `measured` (NULL unless built with
 * strata_plan_build_measured); the caller must keep both alive while writing the plan out.
 *
 * Scale: nothing here is per GPU or per node; a 100,000-GPU topology costs what a 8-GPU one does.
 */
#ifndef STRATA_PLAN_PLAN_H
#define STRATA_PLAN_PLAN_H

#include <stdio.h>

#include "model/cost.h"
#include "model/startup.h"
#include "topo/linkmatrix.h"
#include "topo/topo.h"

/* ---- workloads ---- */
typedef enum strata_workload_kind {
  STRATA_WORKLOAD_TRAIN_SYNC = 0, /* data parallel, gradients allreduced every step */
  STRATA_WORKLOAD_DILOCO,         /* inner steps per site, outer sync every H steps */
  STRATA_WORKLOAD_RL,             /* trainer → rollout weight sync */
  STRATA_WORKLOAD_INFERENCE,      /* disaggregated prefill/decode serving */
  STRATA_WORKLOAD_BRINGUP,        /* standing a cluster up: checks and expected figures */
  STRATA_WORKLOAD_FSDP,           /* sharded data parallel, optionally with tensor and pipeline */
  STRATA_WORKLOAD_KIND_COUNT
} strata_workload_kind;

/* What an RL framework ships from trainer to rollout workers at every weight sync. */
typedef enum strata_rl_sync {
  STRATA_RL_SYNC_AUTO = 0, /* the plan recommends: the smaller of full weights and a delta */
  STRATA_RL_SYNC_FULL,     /* full weights (what most frameworks do by default) */
  STRATA_RL_SYNC_DELTA     /* a sparse delta: changed values and their 32-bit indices */
} strata_rl_sync;
/* "auto", "full", "delta"; _parse returns STRATA_OK or STRATA_ERR_INVALID_ARG. */
const char *strata_rl_sync_name(strata_rl_sync sync);
int strata_rl_sync_parse(const char *name, strata_rl_sync *out);

/* What carries the collectives across a routed or overlay link (`strata plan --transport`). RDMA
 * across a fabric extension is NCCL over InfiniBand whatever this says. */
typedef enum strata_wan_transport {
  STRATA_WAN_STRATA = 0,  /* strata's collectives on its TCP transport: wan_streams streams per
                             peer, sealed between hosts (default) */
  STRATA_WAN_NCCL_SOCKET, /* NCCL on its own socket network (NCCL_NET=Socket): one socket per
                             peer by default (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD), in
                             clear, under NCCL's window (STRATA_NCCL_WINDOW_BYTES per channel) */
  STRATA_WAN_NCCL_STRATA  /* NCCL on strata's network plugin (NCCL_NET_PLUGIN=strata,
                             docs/nccl-plugin.md): strata's streams, sealing and governor under
                             NCCL's window */
} strata_wan_transport;
/* "strata", "nccl-socket" (also parsed: "nccl"), "nccl-strata"; _parse returns STRATA_OK or
 * STRATA_ERR_INVALID_ARG. */
const char *strata_wan_transport_name(strata_wan_transport transport);
int strata_wan_transport_parse(const char *name, strata_wan_transport *out);
/* NCCL keeps at most NCCL_BUFFSIZE (4 MiB: NCCL_STEPS = 8 slices of 512 KiB) in flight per
 * channel and peer (NVIDIA/nccl src/init.cc, src/include/device.h), so one channel moves at most
 * that per round trip; STRATA_NCCL_CHANNELS channels are assumed across a WAN (NCCL's ring
 * search settles on 2 for one NIC; NCCL_MIN_NCHANNELS raises it). */
#define STRATA_NCCL_WINDOW_BYTES (4.0 * 1024 * 1024)
#define STRATA_NCCL_CHANNELS 2

typedef struct strata_workload {
  strata_workload_kind kind;
  double params;      /* model parameters */
  strata_dtype dtype; /* of gradients and weights */
  double step_ms;     /* compute time of one training step */
  int inner_steps;    /* DiLoCo H (500 in arXiv 2311.08105) */
  double wire_bits;   /* outer gradient encoding: 32 none, 16 bf16, 8 int8, 4 int4 */
  int fragments;      /* streaming DiLoCo fragments; 1 = plain DiLoCo */
  int delay; /* DiLoCo tau: inner steps a fragment's exchange overlaps, < inner_steps/fragments */
  int wan_streams;                         /* TCP connections per peer across the WAN */
  strata_wan_transport transport;          /* what carries collectives across it */
  double update_fraction;                  /* RL: share of parameters that change per sync */
  int sync_every;                          /* RL: trainer steps between weight syncs */
  strata_rl_sync rl_sync;                  /* RL: what the framework ships per sync */
  char trainer_site[STRATA_TOPO_NAME_MAX]; /* RL: "" = the first site */
  double kv_bytes_per_request;             /* inference: KV cache moved prefill → decode */
  double requests_per_s;                   /* inference: per site */
  int replicas_per_site;   /* inference: full model replicas at each site (0 = none) */
  int cross_site_pipeline; /* inference: the model is split across sites */
  double token_ms;         /* inference: decode compute per token */
  int tp, pp;              /* fsdp: tensor- and pipeline-parallel degrees (1 = none) */
  int layers;              /* fsdp: transformer layers */
  double tokens_per_step;  /* fsdp: tokens one data-parallel replica processes per step */
  int micro_batches;       /* fsdp: micro-batches per step through the pipeline (0 = 4 x pp) */
  /* diloco: the model's parameter shapes, "24x16,24,5x24,5" (borrowed; NULL = fragments of
   * N/P one-dimensional values), for the sharded layout; they set params */
  const char *param_shapes;
  uint64_t chunk_bytes; /* diloco: the communicators' STRATA_CHUNK (0 = strata's own choice) */
  /* diloco: the share of a core each rank's progress thread gets for the outer gradient's codec
   * (1 = a core of its own; ranks / cores where more ranks than cores share a host) */
  double rank_cores;
} strata_workload;

const char *strata_workload_kind_name(strata_workload_kind kind); /* "train-sync", ... */
int strata_workload_kind_parse(const char *name, strata_workload_kind *out);
/* Defaults for a kind: 7e9 bf16 parameters, 500 ms steps, H = 500, 16-bit outer sync, ... */
void strata_workload_defaults(strata_workload *w, strata_workload_kind kind);
/* The workload a topology was evidently built for, when the user names none: train-sync on one
 * site or on sites joined only by fabric extension no error lint rules out
 * (strata_plan_extension_blocker), diloco otherwise. */
strata_workload_kind strata_workload_auto(const strata_topo *topo);

/* ---- findings (lints) ---- */
typedef enum strata_severity {
  STRATA_SEVERITY_INFO = 0,
  STRATA_SEVERITY_WARNING,
  STRATA_SEVERITY_ERROR
} strata_severity;
const char *strata_severity_name(strata_severity s); /* "info", "warning", "error" */

typedef struct strata_finding {
  const char *id; /* stable, e.g. "L3-EXT-NO-SYNC" */
  strata_severity severity;
  int layer;                             /* 1..4 */
  char where[STRATA_TOPO_TEXT_MAX + 32]; /* "file:line:col (link a--b)" or "" */
  char message[480];
  char fix[360];
} strata_finding;

/* The catalog of every lint the planner knows (for docs/lints.md and tests). */
typedef struct strata_lint_info {
  const char *id;
  strata_severity severity;
  int layer;
  const char *summary;
} strata_lint_info;
size_t strata_lint_count(void);
const strata_lint_info *strata_lint_get(size_t index);

/* ---- the plan ---- */
#define STRATA_PLAN_MAX_PREDICTIONS 24
#define STRATA_PLAN_MAX_ROLES 8
#define STRATA_PLAN_MAX_OPTIONS 4
#define STRATA_PLAN_MAX_CHECKS 12

/* What one layer carries for this workload on this topology. */
typedef struct strata_layer_role {
  char layer[8];        /* "1", "2", "3a", "3b", "3c", "4" */
  char technology[512]; /* "NVLink4 + NVSwitch (8 GPUs), NVLS" */
  char carries[320];    /* what crosses it, and how much */
} strata_layer_role;

/* One way of crossing layer 3, with its numbers. */
typedef struct strata_plan_option {
  char name[40];             /* "fabric-extension", "overlay+diloco", "overlay-per-step" */
  int available;             /* the topology has what it needs */
  char ruled_out_by[32];     /* "" or the id of the error finding that makes it impossible */
  double comm_ms_per_step;   /* exposed communication per training step */
  double utilization;        /* step / (step + exposed comm) */
  double wan_bytes_per_step; /* bytes per site crossing layer 3, per step (amortized) */
  char note[240];
} strata_plan_option;

/* The link joining sites, as the model sees it. */
typedef struct strata_wan_model {
  int link;  /* index into topo->links, -1 if none */
  double km; /* route length used (given, from locations, or assumed) */
  double rtt_ms;
  double gbps;                     /* GB/s usable by collectives */
  int is_extension;                /* MetroX / RoCE aggregation that can work: RDMA across */
  const char *extension_ruled_out; /* the error lint id when the link's extension cannot work
                                      (strata_plan_extension_blocker), else NULL */
  int is_overlay;                  /* WireGuard */
  int owned;                       /* dark fiber / DWDM / private backbone */
  int measured; /* rtt_ms and gbps come from a link matrix (strata plan --links), not the model */
  int sealed;   /* strata seals its TCP frames across it (STRATA_ENCRYPT=auto between hosts; not
                   over a WireGuard overlay, which seals already, nor RDMA extensions) */
  double unsealed_gbps; /* gbps before the sealing cap (== gbps when sealing does not bind) */
  strata_wan_transport transport; /* the workload's, over TCP; STRATA_WAN_STRATA over RDMA */
  int streams;                    /* TCP connections per peer the figures assume */
  double nccl_window_gbps;        /* NCCL's in-flight window over the RTT (GB/s; 0 = not NCCL) */
} strata_wan_model;

/* ---- measured links (`strata plan --links MATRIX`, measured.c) ----
 * A link matrix (docs/link-matrix.md) measured between ranks replaces the modeled figures of the
 * topology's inter-site links. The matrix's ranks are grouped into sites (their labels when every
 * rank has one, else strata_place_sites()'s latency clustering); matrix sites map to topology
 * sites by name (labels equal to site names), else by order when the counts agree and no label
 * names a topology site. Per topology link whose two sites both have ranks: the median one-way
 * latency and the median bandwidth over the ordered rank pairs crossing between them. */
typedef struct strata_plan_measured_link {
  int link;          /* index into topo->links */
  double latency_us; /* one-way (RTT/2): median over the crossing ordered rank pairs */
  double gbps;       /* GB/s (10^9 B/s), what one pair got: median over the same pairs */
  int pairs;         /* ordered rank pairs that crossed */
} strata_plan_measured_link;

typedef struct strata_plan_measured {
  char source[STRATA_TOPO_TEXT_MAX]; /* the matrix file, for messages */
  char when[64];                     /* the matrix's "measured" time, or "" */
  char method[256];                  /* the matrix's "method", or "" */
  int ranks;                         /* rows of the matrix */
  int streams;                       /* TCP connections per pair it was measured with; 0 unknown */
  int matrix_sites;                  /* sites found in the matrix */
  int from_labels;                   /* 1: grouped by site labels; 0: by latency clustering */
  int by_order;                      /* 1: mapped to topology sites by order, not by name */
  char (*site_name)[STRATA_LINKMATRIX_LABEL_BYTES]; /* per matrix site: label or "site<k>" */
  int *site_ranks;                                  /* per matrix site: ranks in it */
  int *topo_site;                                   /* per matrix site: topology site index */
  strata_plan_measured_link *links;                 /* one per topology link measured */
  int link_count;
  /* Inside sites: the medians over ordered pairs of ranks of the same site (inside_pairs 0: no
   * such pair). Applied to the site fabric only when inside_sites is set, which
   * strata_plan_topo_from_matrix() asks for: a real topology's fabric (GPUs, RDMA) is not what
   * CPU ranks of a probe measure inside a site. */
  int inside_sites;
  double inside_latency_us, inside_gbps;
  int inside_pairs;
} strata_plan_measured;

/* Fills *out from a matrix against a topology. Returns STRATA_OK; STRATA_ERR_INVALID_ARG when the
 * matrix's sites cannot be mapped to the topology's (err says which names did not match, or
 * the counts); STRATA_ERR_NO_MEMORY. `source` names the matrix in messages. On failure *out is
 * zeroed. Free with strata_plan_measured_free(). */
int strata_plan_measured_from_matrix(const strata_topo *topo, const strata_link_matrix *m,
                                     const char *source, strata_plan_measured *out, char *err,
                                     size_t err_len);
void strata_plan_measured_free(strata_plan_measured *measured); /* NULL and zeroed are fine */
/* The measured figures of topology link `link`, or NULL when it was not measured. */
const strata_plan_measured_link *strata_plan_measured_find(const strata_plan_measured *measured,
                                                           int link);
/* A minimal topology straight from a matrix, for `strata plan --links MATRIX` with no topology:
 * one site per matrix site (named by its label, else "site<k>"), one CPU node per rank (gpu:
 * none, Ethernet), a link between every two sites with no physical facts. Returns STRATA_OK,
 * STRATA_ERR_NO_MEMORY or STRATA_ERR_PARSE (a label the topology format refuses). The caller
 * frees *out with strata_topo_free(); pass the same matrix to strata_plan_measured_from_matrix()
 * and set inside_sites. */
int strata_plan_topo_from_matrix(const strata_link_matrix *m, const char *source, strata_topo **out,
                                 char *err, size_t err_len);

/* DiLoCo's outer sync as strata runs it (include/strata.h, DiLoCo): every fragment's outer
 * gradient (f32, params / fragments values) is averaged by the hierarchical allreduce
 * (src/coll/hier.c) once per H inner steps, in the encoding wire_bits names. Across sites only
 * the allreduce among the S ranks of each local index moves data: each of a site's ranks sends
 * 2(S-1)/S of its shard, encoded per message by strata_compress_wire_bytes(), so a site sends
 * 2(S-1)/S x the encoded fragment. The figures are bytes handed to the transports (what
 * strata_comm_stats.wan_bytes_sent counts), summed over a site's ranks. */
typedef struct strata_plan_diloco {
  int modeled;                     /* 1 when the plan has >= 2 sites and a training workload */
  const char *encoding;            /* "none", "bf16", "int8", "int4" */
  int sites, ranks_per_site;       /* S, and ranks per site (GPUs, else nodes) */
  double fragment_values;          /* values of the average fragment (params / fragments) */
  double site_bytes_per_fragment;  /* one fragment exchange, bytes a site sends across the WAN */
  double site_bytes_per_outer;     /* every fragment once (one outer period of H inner steps) */
  double rank_bytes_per_outer;     /* the same per rank of equal sites */
  double site_bytes_per_inner;     /* site_bytes_per_outer / H */
  double sync_site_bytes_per_step; /* synchronous data parallel: f32 gradient allreduce per step */
  double ratio;                    /* sync_site_bytes_per_step / site_bytes_per_inner */
  double exchange_ms;              /* one fragment exchange on the WAN link: latency + bytes/bw */
  double latency_ms;               /* its latency part: 2(S-1) one-way WAN hops */
  double overlap_ms;               /* compute it can hide behind: delay x step_ms */
  int hidden;                      /* delay > 0 and exchange_ms <= overlap_ms */
  double exposed_ms_per_outer;     /* fragments x max(0, exchange_ms - overlap_ms) */
  double hide_gbps; /* WAN GB/s that would hide one exchange behind the delay; NaN if delay 0 */
} strata_plan_diloco;

/* DiLoCo over FSDP2 shards (python/strata/diloco_sharded.py; src/plan/diloco_shard.c says how
 * it is counted): inside each site of L ranks every parameter is cut along dim 0 in chunks of
 * ceil(rows / L) rows (the last holding rank fewer, any after it none), and each rank averages
 * its shards of each fragment with the same shard index of the other sites over a communicator
 * of S ranks. The bytes are the engine's, exactly: wan_bytes_sent over one outer step (every
 * fragment once). */
#define STRATA_PLAN_MAX_RANK_GROUPS 8
typedef struct strata_plan_diloco_rank_group {
  int first, last;     /* consecutive ranks of a site with these figures */
  double values;       /* elements of a rank's shards (all fragments) */
  double wan_bytes;    /* a rank's WAN bytes per outer step */
  double messages;     /* its messages to other sites per outer step */
  double header_bytes; /* of its bytes, the encoding's block headers (int8/int4/fp8 scale) */
} strata_plan_diloco_rank_group;

typedef struct strata_plan_diloco_sharded {
  int modeled;
  int sites, ranks_per_site;
  int from_shapes;     /* the layout comes from --param-shapes, not N/P flat buffers */
  double parameters;   /* tensors */
  double model_values; /* their elements */
  int uneven;          /* parameters whose dim-0 split leaves a shorter (or empty) last shard */
  uint64_t uneven_rows, uneven_row_values; /* the largest such, as an example: rows x row size */
  uint64_t chunk_bytes;                    /* the pipelining chunk the counts assume */
  double site_bytes_per_outer;             /* site 0's ranks together, per outer step */
  double site_bytes_min, site_bytes_max; /* over the sites (they differ only in a ring of S > 2) */
  double messages_per_outer;             /* site 0's ranks together */
  double latency_ms;            /* of one exchange: its schedule's hops (simulated, no bytes) */
  double exchange_ms_per_outer; /* every fragment's exchange, simulated (diloco_shard.c) */
  double exposed_ms_per_outer;  /* what delay x step_ms does not hide */
  double codec_ms_per_outer;    /* of exchange_ms_per_outer: encoding and decoding (compressed) */
  double codec_encode_gbps,
      codec_decode_gbps; /* the rates that assumes, a rank's share of a core */
  int group_count, groups_truncated;
  strata_plan_diloco_rank_group group[STRATA_PLAN_MAX_RANK_GROUPS];
} strata_plan_diloco_sharded;

/* Fills *d for S sites of L ranks on a WAN of this RTT, rate (GB/s) and one-way time alpha_ms.
 * Returns STRATA_OK, STRATA_ERR_INVALID_ARG (bad shapes or fewer parameters than fragments; err
 * says which) or STRATA_ERR_NO_MEMORY. */
int strata_plan_diloco_shard(const strata_workload *w, const char *shapes, int sites,
                             int ranks_per_site, double rtt_ms, double gbps, double alpha_ms,
                             strata_plan_diloco_sharded *d, char *err, size_t err_len);

/* The elements of the parameters a --param-shapes list names ("24x16,24"): STRATA_OK, or
 * STRATA_ERR_INVALID_ARG with err saying what is wrong with the list. */
int strata_plan_shapes_values(const char *spec, double *values, char *err, size_t err_len);

/* The wire encoding of DiLoCo's outer gradient for wire_bits 32, 16, 8 or 4 (none, bf16, int8,
 * int4). Returns STRATA_OK or STRATA_ERR_INVALID_ARG for any other value. */
int strata_plan_wire_encoding(double wire_bits, strata_compress *out);

/* Sharded data parallel (FSDP / ZeRO-3) with tensor parallel degree tp inside NVLink domains and
 * pipeline parallel degree pp across them; dp = GPUs / (tp x pp). Per step, for every layer of a
 * pipeline stage: its parameters (one TP rank's part) are allgathered over the dp ranks holding
 * the same TP rank and stage before the forward and again before the backward, and its gradients
 * reduce-scattered after the backward (arXiv 2304.11277); every layer runs 2 TP allreduces of the
 * activations forward and 2 backward per micro-batch (Megatron, arXiv 1909.08053); each
 * micro-batch's activations cross each stage boundary forward and their gradients back. FSDP's
 * collectives overlap the compute of other layers (prefetch): only what exceeds the step's compute,
 * and never less than one layer's allgather, is exposed. TP allreduces are on the critical path.
 * The pipeline costs its bubble, (pp - 1) / micro-batches of the compute, and the first and last
 * crossings of the stage boundaries. Memory per GPU: the mixed-precision Adam states (dtype weights
 * and gradients, f32 master weights and two moments: 2 + 2 + 12 bytes per bf16 parameter, ZeRO,
 * arXiv 1910.02054) sharded over dp, two layers gathered at once, and the activations of the
 * micro-batches 1F1B keeps in flight (s·b·h·(10 + 24/tp) bytes per layer with flash attention,
 * arXiv 2205.05198). */
typedef struct strata_plan_fsdp {
  int modeled;
  int tp, pp, dp, layers, micro_batches;
  double hidden;           /* sqrt(params / (12 layers)): a transformer's 12 h^2 per layer */
  int dp_ranks_per_domain; /* dp ranks sharing one NVLink domain (and its NICs) */
  double layer_bytes;      /* one layer's parameters on one TP rank: each allgather */
  double allgather_ms, reduce_scatter_ms; /* one layer's, over the dp group */
  char allgather_algo[40];                /* the allgather's algorithm, e.g. "ring/Simple" */
  double fsdp_ms; /* per step: (2 allgathers + 1 reduce-scatter) per stage layer */
  double fsdp_exposed_ms;
  double tp_bytes;               /* one TP allreduce: a micro-batch's activations */
  double tp_allreduce_ms, tp_ms; /* one, and per step (4 per layer per micro-batch) */
  double pp_bytes;               /* a micro-batch's activations across one stage boundary */
  double pp_p2p_ms, pp_ms;       /* one crossing; exposed per step (first and last crossings) */
  double bubble_ms;              /* idle compute of the pipeline's fill and drain */
  double comm_ms;                /* exposed per step: fsdp + tp + pp (without the bubble) */
  double step_total_ms;          /* compute + comm + bubble */
  double weights_gb, grads_gb, optimizer_gb, gathered_gb, activations_gb, memory_gb;
  double gpu_memory_gb; /* the node's, or 0 when the file does not say */
  int fits;             /* memory_gb <= gpu_memory_gb (1 when unknown) */
  char note[240];       /* why the degrees were adjusted, or "" */
} strata_plan_fsdp;

typedef struct strata_plan {
  const strata_topo *topo;
  const strata_plan_measured *measured; /* NULL, or the caller's, kept alive like topo */
  strata_workload workload;
  int64_t gpus, nodes;
  int sites;
  int gpus_per_node;
  strata_fabric site_fabric;   /* one site: levels node, site */
  strata_fabric global_fabric; /* all sites: levels node, site, wan */
  strata_wan_model wan;        /* the bottleneck cross-site link (wan.link -1 if one site) */
  /* Islands: sites joined by fabric extension (MetroX, RoCE aggregation) act as one fabric. When
   * some but not all sites are joined so (1 < islands < sites), the global fabric gets a level
   * for the extension inside an island and one for the WAN between islands; DiLoCo's inner loop
   * then spans an island and only the outer sync crosses the WAN. */
  int islands;
  int island_mode;
  strata_fabric island_fabric;  /* one island: node, site, extension (island_mode only) */
  strata_wan_model island_link; /* the slowest extension inside an island (island_mode only) */
  strata_prediction predictions[STRATA_PLAN_MAX_PREDICTIONS];
  int prediction_count;
  char prediction_scope[STRATA_PLAN_MAX_PREDICTIONS][16]; /* "node", "site" or "global" */
  int prediction_chosen[STRATA_PLAN_MAX_PREDICTIONS];     /* the fastest of its collective+size */
  strata_layer_role roles[STRATA_PLAN_MAX_ROLES];
  int role_count;
  strata_plan_option options[STRATA_PLAN_MAX_OPTIONS];
  int option_count;
  char decision[40]; /* option name, or "single-site", "replica-routing", ... */
  char decision_reason[480];
  double comm_ms_per_step; /* of the decision */
  double site_comm_ms;     /* the per-step allreduce inside one site (layers 1-2) */
  double utilization;
  strata_plan_diloco diloco;                 /* the outer sync's bytes and time (modeled or not) */
  strata_plan_diloco_sharded diloco_sharded; /* the same over FSDP2 shards (--workload diloco) */
  strata_plan_fsdp fsdp;                     /* the fsdp recipe (modeled for --workload fsdp) */
  char summary[480];                         /* the workload's headline numbers in one paragraph */
  char checks[STRATA_PLAN_MAX_CHECKS][200];  /* bringup: check — expected figure */
  int check_count;
  /* what starting the job costs, one rank per GPU: [0] eager mesh (today), [1] on demand (lazy);
   * src/plan/startup.c */
  strata_startup startup[2];
  strata_startup_job startup_job;
  strata_finding *findings;
  int finding_count, finding_cap;
} strata_plan;

/* Build the plan. Returns STRATA_OK, STRATA_ERR_INVALID_ARG (NULL, bad workload numbers; `err`
 * says which) or STRATA_ERR_NO_MEMORY. */
int strata_plan_build(const strata_topo *topo, const strata_workload *w, strata_plan *out,
                      char *err, size_t err_len);
void strata_plan_free(strata_plan *plan);
/* As strata_plan_build, with measured links (may be NULL) replacing the modeled figures of the
 * links they cover everywhere: fabrics, predictions, decision, lints, writers. `measured` must
 * have been made for this topology and stay alive as long as the plan. */
int strata_plan_build_measured(const strata_topo *topo, const strata_workload *w,
                               const strata_plan_measured *measured, strata_plan *out, char *err,
                               size_t err_len);

/* Fills plan->startup and startup_job from the topology's ranks and fabrics (startup.c). */
void strata_plan_startup(strata_plan *plan);
/* The start-up section of `strata plan`'s text and JSON (render.c calls them). */
void strata_plan_write_startup_text(FILE *out, const strata_plan *plan);
struct json_t;
struct json_t *strata_plan_startup_json(const strata_plan *plan);

/* Append a finding (lint.c uses it). Returns 0 or -1 when out of memory. */
int strata_plan_add_finding(strata_plan *plan, const char *id, const strata_topo_mark *mark,
                            const char *what, const char *message, const char *fix);
/* Run every lint over the topology and plan (called by strata_plan_build). */
int strata_plan_lint(strata_plan *plan);

/* ---- model helpers the lints and writers share ---- */
/* GB/s one GPU gets inside its node, and whether NVLS (NVSwitch multicast) is available. */
double strata_plan_intra_gbps(const strata_topo_node_spec *spec, int *nvls);
/* Total compute-NIC Gb/s of one node (0 if none). */
double strata_plan_node_nic_gbit(const strata_topo_node_spec *spec);
/* Route length of a link in km: physical.km, else from site locations ×1.3, else -1. */
double strata_plan_link_km(const strata_topo *topo, const strata_topo_link *link);
/* The link as the model sees it (for one link). */
void strata_plan_wan_model(const strata_topo *topo, int link, const strata_workload *w,
                           strata_wan_model *out);
/* The error lint that says fabric extension cannot work over link `link`, from the topology
 * alone (L3-METROX-REACH, L3-ROCE-HEADROOM, L3-EXT-UNOWNED, L3-RDMA-OVER-OVERLAY), or NULL. The
 * lints fire on the same tests (lint.c), so the model treats such a link as the routed path it
 * really is (is_extension 0, extension_ruled_out the id) and no decision picks an extension
 * over it. An IB router is never extension (L3-IBROUTER-NOT-EXT; see plan.c). */
const char *strata_plan_extension_blocker(const strata_topo *topo, int link);
/* 1 when the physical path is owned end to end (dark fiber, DWDM, a private backbone). */
int strata_plan_path_owned(const strata_topo_link *link);
/* The link as this plan sees it: strata_plan_wan_model(), with the measured RTT (2 × the median
 * one-way latency) and bandwidth in place of the modeled ones when the plan has them for this
 * link (out->measured = 1). Everything after strata_plan_build uses this one. */
void strata_plan_link_model(const strata_plan *plan, int link, strata_wan_model *out);

/* RL weight sync: full weights (params x dtype), and a sparse delta (update_fraction of the
 * values plus a 32-bit index each), in bytes. */
double strata_plan_rl_full_bytes(const strata_workload *w);
double strata_plan_rl_delta_bytes(const strata_workload *w);

/* ---- writers ---- */
void strata_plan_write_text(FILE *out, const strata_plan *plan);
void strata_plan_write_json(FILE *out, const strata_plan *plan);
/* The map as an SVG picture: sites, node groups, links coloured by layer. */
void strata_plan_write_svg(FILE *out, const strata_plan *plan);

#endif
