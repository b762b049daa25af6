// SPDX-License-Identifier: Apache-2.0
/* test_plan_recipes.c — the fsdp recipe (sharded data parallel with tensor and pipeline parallel
 * degrees) and the RL placements (colocated vs disaggregated rollout): every figure of the plan
 * against its formula written out here independently (plan.h, strata_plan_fsdp), the model's
 * collective costs taken from src/model directly; bad degrees refused by the command. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "helpers/check.h"
#include "helpers/preset.h"
#include "plan/plan.h"
#include "topo/topo.h"

static int build(const char *preset_name, strata_workload *w, strata_plan *p) {
  strata_topo *t = preset(preset_name);
  if (!t) return -1;
  char err[256];
  int rc = strata_plan_build(t, w, p, err, sizeof err);
  CHECK(rc == STRATA_OK, "%s plan: %s", preset_name, err);
  p->topo = NULL; /* the test reads only the plan's own figures after this */
  strata_topo_free(t);
  return rc == STRATA_OK ? 0 : -1;
}

/* 70B, 80 layers on 32 DGX H100 with SHARP: tp 8 inside each node, pp 4 across nodes, dp 8. */
static void test_fsdp_3d(void) {
  strata_workload w;
  strata_workload_defaults(&w, STRATA_WORKLOAD_FSDP);
  w.params = 70e9;
  w.layers = 80;
  w.tp = 8;
  w.pp = 4;
  strata_plan p;
  if (build("ib-cluster", &w, &p) != 0) return;
  const strata_plan_fsdp *d = &p.fsdp;
  CHECK(d->modeled && d->tp == 8 && d->pp == 4 && d->dp == 8, "degrees %d %d %d", d->tp, d->pp,
        d->dp);
  CHECK(!strcmp(p.decision, "fsdp"), "decision fsdp");
  double h = sqrt(70e9 / (12.0 * 80)), m = 16, stage_layers = 20, mb_tokens = 32768 / m;
  CHECK_REL("hidden", d->hidden, h, 1e-12);
  CHECK(d->micro_batches == 16, "4 x pp micro-batches");
  CHECK(d->dp_ranks_per_domain == 1, "tp 8 fills a node: one dp rank per node");
  CHECK_REL("layer bytes", d->layer_bytes, 70e9 / (80 * 8) * 2, 1e-12);
  /* the dp group: 8 nodes, one GPU each, one of the node's 8 NICs each (NCCL ring, ppn 1) */
  strata_nccl_system g = p.site_fabric.gpu;
  g.nics = 1;
  strata_nccl_cost ag, rs;
  CHECK(strata_nccl_best_proto(&g, 1, 8, STRATA_COLL_ALLGATHER, STRATA_NCCL_RING, d->layer_bytes,
                               &ag) == 0,
        "allgather cost");
  CHECK(strata_nccl_best_proto(&g, 1, 8, STRATA_COLL_REDUCE_SCATTER, STRATA_NCCL_RING,
                               d->layer_bytes, &rs) == 0,
        "reduce-scatter cost");
  strata_nccl_cost pat;
  if (strata_nccl_best_proto(&g, 1, 8, STRATA_COLL_ALLGATHER, STRATA_NCCL_PAT, d->layer_bytes,
                             &pat) == 0 &&
      pat.time_us < ag.time_us)
    ag = pat; /* one GPU per node: NCCL may take PAT */
  CHECK_REL("allgather ms", d->allgather_ms, ag.time_us / 1000, 1e-9);
  CHECK_REL("reduce-scatter ms", d->reduce_scatter_ms, rs.time_us / 1000, 1e-9);
  CHECK_REL("fsdp per step", d->fsdp_ms, stage_layers * (2 * ag.time_us + rs.time_us) / 1000, 1e-9);
  CHECK_REL("fsdp exposed", d->fsdp_exposed_ms, fmax(ag.time_us / 1000, d->fsdp_ms - 500), 1e-9);
  /* TP: 4 allreduces per layer per micro-batch inside the node (NVLS on H100) */
  strata_nccl_cost tp;
  CHECK(strata_nccl_best_proto(&p.site_fabric.gpu, 8, 1, STRATA_COLL_ALLREDUCE, STRATA_NCCL_NVLS,
                               mb_tokens * h * 2, &tp) == 0,
        "tp allreduce");
  CHECK_REL("tp bytes", d->tp_bytes, mb_tokens * h * 2, 1e-12);
  CHECK(d->tp_allreduce_ms <= tp.time_us / 1000 * (1 + 1e-9), "tp allreduce no slower than NVLS");
  CHECK_REL("tp per step", d->tp_ms, 4 * stage_layers * m * d->tp_allreduce_ms, 1e-12);
  /* PP: a micro-batch's activations over one GPU's NIC share, first and last crossings */
  const strata_level *l1 = &p.site_fabric.level[1];
  double p2p = (l1->alpha_us + mb_tokens * h * 2 / (l1->per_rank_gbps * 1e3)) / 1000;
  CHECK_REL("pp p2p", d->pp_p2p_ms, p2p, 1e-9);
  CHECK_REL("pp exposed", d->pp_ms, 2 * 3 * p2p, 1e-9);
  CHECK_REL("bubble", d->bubble_ms, 3.0 / 16 * 500, 1e-12);
  CHECK_REL("comm", d->comm_ms, d->fsdp_exposed_ms + d->tp_ms + d->pp_ms, 1e-12);
  CHECK_REL("utilization", p.utilization, 500 / (500 + d->comm_ms + d->bubble_ms), 1e-12);
  /* memory per GPU: 70e9 / 32 parameters per GPU before sharding over dp 8 */
  double per_gpu = 70e9 / 32;
  CHECK_REL("weights", d->weights_gb, per_gpu * 2 / 8 / 1e9, 1e-12);
  CHECK_REL("optimizer", d->optimizer_gb, per_gpu * 12 / 8 / 1e9, 1e-12);
  CHECK_REL("gathered", d->gathered_gb, 2 * d->layer_bytes / 1e9, 1e-12);
  CHECK_REL("activations", d->activations_gb, mb_tokens * h * (10 + 24.0 / 8) * 20 * 4 / 1e9,
            1e-12);
  CHECK(d->gpu_memory_gb == 80 && d->fits, "fits an 80 GB H100 (%.1f GB)", d->memory_gb);
  printf(
      "fsdp 70B tp8 pp4 dp8 on 32 DGX H100: %.1f ms exposed + %.1f ms bubble per 500 ms, %.1f GB "
      "per GPU\n",
      d->comm_ms, d->bubble_ms, d->memory_gb);
  strata_plan_free(&p);
}

/* Plain FSDP on one DGX H100: 7B over 8 dp ranks of one NVLink domain; a 70B does not fit. */
static void test_fsdp_plain(void) {
  strata_workload w;
  strata_workload_defaults(&w, STRATA_WORKLOAD_FSDP);
  strata_plan p;
  if (build("dgx-h100", &w, &p) != 0) return;
  const strata_plan_fsdp *d = &p.fsdp;
  CHECK(d->dp == 8 && d->tp == 1 && d->pp == 1 && d->dp_ranks_per_domain == 8, "dp 8 in a node");
  CHECK(d->tp_ms == 0 && d->pp_ms == 0 && d->bubble_ms == 0, "no tp, no pp");
  CHECK_REL("optimizer", d->optimizer_gb, 7e9 * 12 / 8 / 1e9, 1e-12);
  CHECK(d->fits, "7B fits");
  strata_plan_free(&p);
  w.params = 70e9;
  w.layers = 80;
  if (build("dgx-h100", &w, &p) != 0) return;
  CHECK(!p.fsdp.fits && strstr(p.decision_reason, "more than the GPU holds"),
        "70B on 8 GPUs does not fit (%.1f GB)", p.fsdp.memory_gb);
  strata_plan_free(&p);
  /* degrees the cluster cannot hold are said and planned without */
  strata_workload_defaults(&w, STRATA_WORKLOAD_FSDP);
  w.tp = 8;
  w.pp = 4;
  if (build("dgx-h100", &w, &p) != 0) return;
  CHECK(p.fsdp.tp == 1 && p.fsdp.pp == 1 && strstr(p.fsdp.note, "exceeds"), "tp x pp > GPUs");
  strata_plan_free(&p);
}

/* RL on one site: colocated (regather over NVLink) and disaggregated (broadcast over the fabric)
 * are both costed, each with its weight sync. */
static void test_rl_placements(void) {
  strata_workload w;
  strata_workload_defaults(&w, STRATA_WORKLOAD_RL);
  w.update_fraction = 1;
  strata_plan p;
  if (build("ib-cluster", &w, &p) != 0) return;
  const strata_plan_option *co = NULL, *dis = NULL;
  for (int i = 0; i < p.option_count; i++) {
    if (!strcmp(p.options[i].name, "colocated")) co = &p.options[i];
    if (!strcmp(p.options[i].name, "disaggregated")) dis = &p.options[i];
  }
  CHECK(co && dis, "both placements costed");
  if (co && dis) {
    strata_fabric node = p.site_fabric;
    node.nlevels = 1;
    strata_prediction ag, bc;
    double bytes = 7e9 * 2;
    CHECK(strata_cost_best(&node, STRATA_COLL_ALLGATHER, bytes, &ag) == 0, "regather");
    CHECK(strata_cost_best(&p.site_fabric, STRATA_COLL_BROADCAST, bytes, &bc) == 0, "broadcast");
    CHECK_REL("colocated", co->comm_ms_per_step, p.site_comm_ms + ag.time_us / 1000, 1e-9);
    CHECK_REL("disaggregated", dis->comm_ms_per_step, p.site_comm_ms + bc.time_us / 1000, 1e-9);
    CHECK(co->available && dis->available, "both possible on 32 nodes");
  }
  strata_plan_free(&p);
}

static void test_cli(void) {
  const char *bin = getenv("STRATA_BIN");
  if (!bin) {
    printf("skip: STRATA_BIN not set\n");
    return;
  }
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s plan --preset ib-cluster --workload fsdp --tp 0 2>/dev/null", bin);
  int rc = system(cmd);
  CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "--tp 0 refused with status 2");
  snprintf(cmd, sizeof cmd,
           "%s plan --preset ib-cluster --workload fsdp --tp 8 --pp 4 --params 70e9 --layers 80 "
           "--json",
           bin);
  FILE *f = popen(cmd, "r");
  static char buf[1 << 16];
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  buf[n] = 0;
  CHECK(f && pclose(f) == 0, "fsdp plan as JSON");
  CHECK(strstr(buf, "\"fsdp\": {") || strstr(buf, "\"fsdp\":{"), "JSON has the fsdp object");
  CHECK(strstr(buf, "\"memory_gb\""), "and its memory per GPU");
}

int main(void) {
  test_fsdp_3d();
  test_fsdp_plain();
  test_rl_placements();
  test_cli();
  if (failures) printf("%d failure(s)\n", failures);
  return failures != 0;
}
