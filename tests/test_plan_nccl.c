// SPDX-License-Identifier: Apache-2.0
/* test_plan_nccl.c — the planner against published nccl-tests all_reduce_perf figures on clusters
 * described as their owners describe them (tests/data/nccl-*.yaml, each naming its source): the
 * algorithm the plan chooses must predict busbw within 20% of the published figure. Then what the
 * multi-node model must get right by construction: every NIC of a node carries a ring, GPUDirect
 * RDMA off bounces through host memory, small messages pick a low-latency protocol, SHARP is used
 * where the fabric has it.
 *
 * A case here is never made to pass by changing a constant of src/model: the constants are NCCL's
 * (tuning.cc) and the hardware's; a case outside the band is a finding about the model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/check.h"
#include "helpers/preset.h"
#include "plan/plan.h"
#include "topo/topo.h"

typedef struct published {
  const char *file;    /* tests/data/<file> */
  const char *cluster; /* for the table */
  double bytes;        /* all_reduce_perf size the figure was read at */
  double busbw_gbps;   /* published */
  const char *source;  /* where it was published */
} published;

/* Each figure's source is also in its YAML file's header. */
static const published cases[] = {
    /* https://github.com/NVIDIA/nccl-tests/issues/100: 2 HGX A100, 4x HDR each, 1-8 GB */
    {"nccl-a100-2x4hdr.yaml", "2x HGX A100, 4x HDR", 8.0 * (1 << 30), 91, "nccl-tests#100"},
    /* https://github.com/NVIDIA/nccl/issues/812 (NVIDIA: 192 GB/s across DGX A100 with 8x HDR);
     * rings beyond two nodes, ~24 GB/s per HDR NIC: https://github.com/NVIDIA/nccl-tests/issues/160
     */
    {"nccl-dgx-a100-4.yaml", "4x DGX A100, 8x HDR", 8.0 * (1 << 30), 192, "nccl#812"},
    {"nccl-dgx-a100-16.yaml", "16x DGX A100, 8x HDR", 8.0 * (1 << 30), 192, "nccl#812"},
    /* https://github.com/NVIDIA/nccl/issues/320: NVIDIA's estimate for CollNet (IB SHARP) on
     * DGX A100 with 8 NICs, ~110 GB/s algbw, ~220 GB/s busbw (not a measurement) */
    {"nccl-dgx-a100-16-sharp.yaml", "16x DGX A100, 8x HDR, SHARP", 8.0 * (1 << 30), 220,
     "nccl#320 (estimate)"},
    /* https://github.com/NVIDIA/nccl/issues/1221: 8x H100 + 8x 400G RoCE, -b 4G -e 8G, NVLS on */
    {"nccl-h100-2.yaml", "2x H100, 8x 400G RoCE", 8.0 * (1 << 30), 430, "nccl#1221"},
    {"nccl-h100-4.yaml", "4x H100, 8x 400G RoCE", 8.0 * (1 << 30), 320, "nccl#1221"},
    /* https://github.com/NVIDIA/nccl-tests/issues/283: 248x 8 H200, 512 MB, "around 350" */
    {"nccl-h200-248.yaml", "248x H200, 8x 400G", 512.0 * (1 << 20), 350, "nccl-tests#283"},
    /* https://www.lixueduan.com/posts/ai/13-gb200-mnnvl-nccl-test: 2 trays over MNNVL */
    {"nccl-gb200-2trays.yaml", "GB200, 2 trays (8 GPUs) MNNVL", 8.0 * (1 << 30), 811,
     "lixueduan.com"},
    /* https://github.com/coreweave/nccl-tests/pull/43: a full NVL72 rack, 8 GiB out of place */
    {"nccl-gb200-nvl72.yaml", "GB200 NVL72 (72 GPUs)", 8.0 * (1 << 30), 834.57,
     "coreweave/nccl-tests#43"},
};

static strata_topo *load(const char *file) {
  const char *src = getenv("STRATA_SOURCE_DIR");
  char path[1024], err[512];
  snprintf(path, sizeof path, "%s/tests/data/%s", src ? src : ".", file);
  strata_topo *t = NULL;
  int rc = strata_topo_load_file(path, &t, err, sizeof err);
  CHECK(rc == STRATA_OK, "%s: %s", path, err);
  return rc == STRATA_OK ? t : NULL;
}

/* The plan's chosen allreduce of `bytes` (the gradient of bytes/2 bf16 parameters) on the widest
 * scope inside the site: "site" across NVLink domains, else "node". */
static int chosen(const strata_topo *t, double bytes, strata_prediction *out) {
  strata_workload w;
  strata_workload_defaults(&w, STRATA_WORKLOAD_TRAIN_SYNC);
  w.params = bytes / 2;
  strata_plan p;
  char err[256];
  if (strata_plan_build(t, &w, &p, err, sizeof err) != STRATA_OK) return -1;
  int found = -1;
  for (const char *scope = "site"; found < 0 && scope;
       scope = strcmp(scope, "site") ? NULL : "node")
    for (int i = 0; i < p.prediction_count; i++)
      if (p.prediction_chosen[i] && !strcmp(p.prediction_scope[i], scope) &&
          p.predictions[i].coll == STRATA_COLL_ALLREDUCE && p.predictions[i].bytes == bytes) {
        *out = p.predictions[i];
        found = 0;
      }
  strata_plan_free(&p);
  return found;
}

static void test_published(void) {
  printf("%-32s %9s %10s  %-24s %10s %-18s %6s\n", "cluster", "size", "published", "source",
         "predicted", "algorithm", "ratio");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const published *c = &cases[i];
    strata_topo *t = load(c->file);
    if (!t) continue;
    strata_prediction pr;
    CHECK(chosen(t, c->bytes, &pr) == 0, "%s: a chosen allreduce", c->file);
    if (chosen(t, c->bytes, &pr) == 0) {
      char algo[40];
      snprintf(algo, sizeof algo, "%s/%s", strata_model_algo_name(pr.algo),
               pr.proto >= 0 ? strata_nccl_proto_name((strata_nccl_proto)pr.proto) : "-");
      double ratio = pr.busbw_gbps / c->busbw_gbps;
      printf("%-32s %7.0fMB %10.1f  %-24s %10.1f %-18s %6.2f\n", c->cluster, c->bytes / (1 << 20),
             c->busbw_gbps, c->source, pr.busbw_gbps, algo, ratio);
      CHECK(fabs(ratio - 1) <= 0.20, "%s: predicted %.1f GB/s, published %.1f (%s)", c->file,
            pr.busbw_gbps, c->busbw_gbps, c->source);
    }
    strata_topo_free(t);
  }
}

static double site_busbw(const char *yaml, strata_model_algo algo, double bytes, int *proto) {
  strata_topo *t = NULL;
  char err[512];
  int rc = strata_topo_load_string("test", yaml, strlen(yaml), &t, err, sizeof err);
  CHECK(rc == STRATA_OK, "topology: %s", err);
  if (rc != STRATA_OK) return -1;
  strata_workload w;
  strata_workload_defaults(&w, STRATA_WORKLOAD_TRAIN_SYNC);
  strata_plan p;
  double busbw = -1;
  if (strata_plan_build(t, &w, &p, err, sizeof err) == STRATA_OK) {
    strata_prediction pr;
    if (strata_cost_predict(&p.site_fabric, STRATA_COLL_ALLREDUCE, algo, bytes, &pr) == 0) {
      busbw = pr.busbw_gbps;
      if (proto) *proto = pr.proto;
    }
    strata_plan_free(&p);
  }
  strata_topo_free(t);
  return busbw;
}

#define DGX_H100_SITE(nics, gdr)                                                                 \
  "sites:\n  - name: dc\n    fabric: {kind: infiniband, speed: ndr, oversubscription: 1}\n"      \
  "    nodes: {count: 4, template: dgx-h100, nics: [{kind: infiniband, speed: ndr, count: " nics \
  ", gpudirect_rdma: " gdr "}]}\n"

/* A ring across nodes runs a channel over every NIC: 8 NICs carry 8 times one NIC (up to what a
 * GPU's NVLink feeds), where one flow over one NIC was 1/8 of published figures. */
static void test_rings_use_every_nic(void) {
  double one = site_busbw(DGX_H100_SITE("1", "true"), STRATA_MODEL_RING, 8e9, NULL);
  double eight = site_busbw(DGX_H100_SITE("8", "true"), STRATA_MODEL_RING, 8e9, NULL);
  printf("4x DGX H100 ring busbw: 1 NIC %.1f GB/s, 8 NICs %.1f GB/s\n", one, eight);
  CHECK(one > 0 && eight > 6 * one, "8 NICs carry ~8x one NIC's ring busbw");
  CHECK(eight <= 370, "and never more than a GPU's NVLink feeds");
}

/* Without GPUDirect RDMA every byte bounces through host memory: the PCIe uplink the GPU shares
 * with its NIC carries both copies each way, so a Gen5 NIC path halves to 24 GB/s. */
static void test_gpudirect(void) {
  double on = site_busbw(DGX_H100_SITE("8", "true"), STRATA_MODEL_RING, 8e9, NULL);
  double off = site_busbw(DGX_H100_SITE("8", "false"), STRATA_MODEL_RING, 8e9, NULL);
  printf("4x DGX H100 ring busbw: GPUDirect RDMA on %.1f GB/s, off %.1f GB/s\n", on, off);
  CHECK(off > 0 && off < 0.6 * on, "GPUDirect RDMA off costs the host bounce");
  CHECK_REL("no-GDR ring = 8 NICs x PCIe Gen5 / 2", off, 8 * 48.0 / 2, 0.05);
}

/* NCCL's protocols: a small allreduce is latency-bound and takes LL or LL128, a large one Simple.
 */
static void test_protocols(void) {
  int small = -1, large = -1;
  site_busbw(DGX_H100_SITE("8", "true"), STRATA_MODEL_RING, 64 * 1024, &small);
  site_busbw(DGX_H100_SITE("8", "true"), STRATA_MODEL_RING, 8e9, &large);
  CHECK(small == STRATA_NCCL_LL || small == STRATA_NCCL_LL128, "64 KiB ring: LL or LL128 (%d)",
        small);
  CHECK(large == STRATA_NCCL_SIMPLE, "8 GB ring: Simple (%d)", large);
}

/* One GPU per node: NCCL's PAT allgather has log-depth latency, so it wins small allgathers on
 * many nodes, where a ring pays a network hop per node. */
static void test_pat(void) {
  const char *yaml =
      "sites:\n  - name: dc\n    fabric: {kind: infiniband, speed: ndr, oversubscription: 1}\n"
      "    nodes: {count: 256, gpu: h100, gpus: 1, intra: none,\n"
      "            nics: [{kind: infiniband, speed: ndr}]}\n";
  strata_topo *t = NULL;
  char err[512];
  CHECK(strata_topo_load_string("pat", yaml, strlen(yaml), &t, err, sizeof err) == STRATA_OK,
        "topology: %s", err);
  if (!t) return;
  strata_workload w;
  strata_workload_defaults(&w, STRATA_WORKLOAD_TRAIN_SYNC);
  strata_plan p;
  CHECK(strata_plan_build(t, &w, &p, err, sizeof err) == STRATA_OK, "plan");
  strata_prediction best;
  CHECK(strata_cost_best(&p.site_fabric, STRATA_COLL_ALLGATHER, 1 << 20, &best) == 0 &&
            best.algo == STRATA_MODEL_PAT,
        "1 MiB allgather on 256 single-GPU nodes: PAT (%s)", strata_model_algo_name(best.algo));
  CHECK(strata_cost_predict(&p.site_fabric, STRATA_COLL_ALLREDUCE, STRATA_MODEL_PAT, 1 << 20,
                            &best) != 0,
        "no PAT allreduce");
  strata_plan_free(&p);
  strata_topo_free(t);
}

/* SHARP in the fabric: NVLS with IB SHARP and CollNet apply, and NVLS+SHARP beats the ring. */
static void test_sharp(void) {
  strata_topo *t = preset("ib-cluster");
  if (!t) return;
  strata_workload w;
  strata_workload_defaults(&w, STRATA_WORKLOAD_TRAIN_SYNC);
  strata_plan p;
  char err[256];
  CHECK(strata_plan_build(t, &w, &p, err, sizeof err) == STRATA_OK, "ib-cluster plan");
  strata_prediction ring, innet, collnet, best;
  double S = 8e9;
  CHECK(
      strata_cost_predict(&p.site_fabric, STRATA_COLL_ALLREDUCE, STRATA_MODEL_RING, S, &ring) == 0,
      "ring");
  CHECK(strata_cost_predict(&p.site_fabric, STRATA_COLL_ALLREDUCE, STRATA_MODEL_INNET, S, &innet) ==
            0,
        "NVLS + IB SHARP applies");
  CHECK(strata_cost_predict(&p.site_fabric, STRATA_COLL_ALLREDUCE, STRATA_MODEL_COLLNET, S,
                            &collnet) == 0,
        "CollNet applies");
  CHECK(strata_cost_best(&p.site_fabric, STRATA_COLL_ALLREDUCE, S, &best) == 0 &&
            best.algo == STRATA_MODEL_INNET && innet.busbw_gbps > 1.3 * ring.busbw_gbps,
        "NVLS + SHARP chosen over the ring");
  strata_plan_free(&p);
  strata_topo_free(t);
  /* without SHARP neither applies */
  const char *no_sharp = DGX_H100_SITE("8", "true");
  CHECK(site_busbw(no_sharp, STRATA_MODEL_COLLNET, S, NULL) < 0, "no CollNet without SHARP");
  CHECK(site_busbw(no_sharp, STRATA_MODEL_INNET, S, NULL) < 0,
        "no NVLS across nodes without SHARP");
}

int main(void) {
  test_published();
  test_rings_use_every_nic();
  test_gpudirect();
  test_protocols();
  test_sharp();
  test_pat();
  if (failures) printf("%d failure(s)\n", failures);
  return failures != 0;
}
