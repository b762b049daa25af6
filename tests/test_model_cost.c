// SPDX-License-Identifier: Apache-2.0
/* test_model_cost.c — the closed forms of src/model/cost.c reduce to the textbook α-β-γ
 * formulas (Thakur, Rabenseifner & Gropp, IJHPCA 2005) on a one-level fabric, respect the hierarchy
 * on a multi-level one, and pick the fastest. */
#include <math.h>
#include <stdio.h>

#include "model/cost.h"
#include "model/physics.h"
#include "helpers/check.h"

static void test_flat_formulas(void) {
  /* α = 10 µs, β = 1/(10 GB/s), γ = 1/(5 GB/s), p = 8, n = 64 MB (textbook α-β-γ notation) */
  const double a = 10, gbps = 10, rg = 5, n = 64e6, p = 8;
  const double beta = 1 / (gbps * 1e3), gamma = 1 / (rg * 1e3); /* µs per byte */
  strata_fabric f;
  strata_fabric_flat(&f, (int)p, a, gbps, rg);
  f.chunk_bytes = 1e12; /* one pipeline round: the textbook, unpipelined schedules */
  CHECK_REL("ring allreduce", strata_cost_time_us(&f, STRATA_COLL_ALLREDUCE, STRATA_MODEL_RING, n),
            2 * (p - 1) * a + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma, 1e-12);
  CHECK_REL("rabenseifner", strata_cost_time_us(&f, STRATA_COLL_ALLREDUCE, STRATA_MODEL_RHD, n),
            2 * log2(p) * a + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma, 1e-12);
  CHECK_REL("binomial bcast", strata_cost_time_us(&f, STRATA_COLL_BROADCAST, STRATA_MODEL_TREE, n),
            log2(p) * (a + n * beta), 1e-12);
  /* every message is posted at once (src/coll/direct.c): one latency, then bytes serialize */
  CHECK_REL("pairwise alltoall",
            strata_cost_time_us(&f, STRATA_COLL_ALLTOALL, STRATA_MODEL_DIRECT, n),
            a + (p - 1) / p * n * beta, 1e-12);
  CHECK_REL("ring reduce-scatter",
            strata_cost_time_us(&f, STRATA_COLL_REDUCE_SCATTER, STRATA_MODEL_RING, n),
            (p - 1) * a + (p - 1) / p * n * (beta + gamma), 1e-12);
  CHECK_REL("ring allgather", strata_cost_time_us(&f, STRATA_COLL_ALLGATHER, STRATA_MODEL_RING, n),
            (p - 1) * a + (p - 1) / p * n * beta, 1e-12);
  CHECK_REL("rd allgather", strata_cost_time_us(&f, STRATA_COLL_ALLGATHER, STRATA_MODEL_RHD, n),
            log2(p) * a + (p - 1) / p * n * beta, 1e-12);
  CHECK(strata_cost_time_us(&f, STRATA_COLL_ALLREDUCE, STRATA_MODEL_HIER, n) < 0,
        "hier needs levels");
  CHECK(strata_cost_time_us(&f, STRATA_COLL_ALLREDUCE, STRATA_MODEL_INNET, n) < 0,
        "innet needs a switch");
  CHECK(strata_cost_time_us(&f, STRATA_COLL_ALLTOALL, STRATA_MODEL_RHD, n) < 0, "no rhd alltoall");
  /* small messages: latency-bound, the log-step algorithm wins; large: ring/rhd tie, tree loses */
  strata_prediction best;
  CHECK(
      strata_cost_best(&f, STRATA_COLL_ALLREDUCE, 8, &best) == 0 && best.algo != STRATA_MODEL_RING,
      "best small");
  CHECK(strata_cost_best(&f, STRATA_COLL_ALLREDUCE, 1e9, &best) == 0 &&
            best.algo != STRATA_MODEL_TREE,
        "best large");
  CHECK_REL("busbw factor", strata_busbw_factor(STRATA_COLL_ALLREDUCE, 8), 1.75, 1e-12);
}

/* The hierarchical formula (reduce-scatter in the node, ring allreduce of S/g across nodes,
 * all-gather in the node; the ring terms above): (g−1)/g·S/B_intra + 2(N−1)/N·(S/g)/B_inter +
 * (g−1)/g·S/B_intra (bandwidth terms; α and γ zero here). */
static void test_hierarchical(void) {
  strata_fabric f = {0};
  f.nlevels = 2;
  f.level[0] = (strata_level){"nvlink", 8, 0, 300, 0, 0, 0, 0};
  f.level[1] = (strata_level){"ib", 16, 0, 50, 0, 0, 0, 0};
  double S = 1e9, g = 8, N = 16;
  double want =
      ((g - 1) / g * S / 300 + 2 * (N - 1) / N * (S / g) / 50 + (g - 1) / g * S / 300) / 1e3;
  CHECK_REL("hierarchical", strata_cost_time_us(&f, STRATA_COLL_ALLREDUCE, STRATA_MODEL_HIER, S),
            want, 1e-12);
  /* a WAN level whose aggregate is shared: flat RHD crossing it with every rank at once is
   * bounded by the aggregate, not each rank's NIC */
  f.nlevels = 3;
  f.level[2] = (strata_level){"wan", 2, 5000, 50, 12.5, 0, 0, 0};
  double hier = strata_cost_time_us(&f, STRATA_COLL_ALLREDUCE, STRATA_MODEL_HIER, S);
  CHECK(hier > 2 * 0.5 * S / 12.5 / 1e3, "wan bound");
  /* in-network reduction on the node level beats plain hierarchy */
  f.level[0].innet = 1;
  f.level[0].innet_efficiency = 0.74;
  f.level[0].innet_alpha_us = 25;
  CHECK(strata_cost_time_us(&f, STRATA_COLL_ALLREDUCE, STRATA_MODEL_INNET, S) > 0, "innet applies");
}

/* 8×H100 on NVLink4/NVSwitch. Published nccl-tests figures: ring allreduce busbw 365–370 GB/s,
 * NVLS ≈ 480 GB/s (nccl-tests#212, NVIDIA/nccl#1442). The model must land within 15%. */
static void test_h100_fidelity(void) {
  const strata_tech_info *nv = strata_tech_get(STRATA_TECH_NVLINK4);
  strata_fabric f;
  strata_fabric_flat(&f, 8, nv->latency_us, nv->peak_gbps * nv->efficiency, 0);
  f.level[0].innet = 1;
  f.level[0].innet_efficiency = 0.74;
  f.level[0].innet_alpha_us = 25;
  strata_prediction ring, nvls, best;
  double S = 8.0 * (1 << 30);
  CHECK(strata_cost_predict(&f, STRATA_COLL_ALLREDUCE, STRATA_MODEL_RING, S, &ring) == 0, "ring");
  CHECK(strata_cost_predict(&f, STRATA_COLL_ALLREDUCE, STRATA_MODEL_INNET, S, &nvls) == 0, "nvls");
  CHECK_REL("h100 ring busbw", ring.busbw_gbps, 367.5, 0.15);
  CHECK_REL("h100 nvls busbw", nvls.busbw_gbps, 480, 0.15);
  CHECK(
      strata_cost_best(&f, STRATA_COLL_ALLREDUCE, S, &best) == 0 && best.algo == STRATA_MODEL_INNET,
      "best is nvls");
}

int main(void) {
  test_flat_formulas();
  test_hierarchical();
  test_h100_fidelity();
  if (failures) return 1;
  printf("ok\n");
  return 0;
}
