// SPDX-License-Identifier: Apache-2.0
/*
 * demo_layer4.c — `strata demo layer4`: the two layer-4 algorithms that decide how fast a WAN
 * must be, run once each on the ranks of this job and checked (rank 0 prints).
 *
 * DiLoCo: every rank starts from the same parameters, takes one "inner step" of its own (adds a
 * rank-dependent update), and one outer step averages the ranks' deltas and applies Nesterov
 * SGD with the default outer learning rate and momentum. The check recomputes that outer step
 * locally in f32 from what every rank's update was. One exchange of the parameters' size
 * replaces the H allreduces of data parallelism.
 *
 * Weight sync: rank 0 publishes a bf16 tensor (version 1, a full copy), changes 1% of its
 * elements and publishes version 2 (a sparse zstd patch); every other rank updates to each
 * version in turn. The check: each subscriber's buffer equals, bit for bit, the tensor the
 * publisher holds at that version (regenerated locally from the same rule).
 *
 * Small on purpose (a few MiB): the scene shows what the calls do and what they cost in bytes,
 * in well under a second of a local run.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "strata.h"
#include "util.h"

#define LAYER4_PARAMS (1u << 20)  /* DiLoCo: f32 parameters (4 MiB) */
#define LAYER4_WEIGHTS (4u << 20) /* weight sync: bf16 elements (8 MiB) */
#define LAYER4_CHANGED_EVERY 100  /* version 2 changes every 100th element: 1% */

/* theta_0 and rank r's inner update of element i: small values, exact in f32. */
static float theta_start(size_t i) {
  return (float)(i % 13) * 0.25f;
}

static float inner_update(int rank, size_t i) {
  return (float)((rank + 1) * (int)(i % 7 + 1)) * 0.125f;
}

/* The outer step as strata.h defines it, computed from every rank's update: g = theta_0 -
 * mean(theta_local); momentum buffer = g (it starts at 0); Nesterov step = g + mu*buf. */
static float outer_expected(int nranks, size_t i, float lr, float mu) {
  float start = theta_start(i), sum = 0;
  for (int r = 0; r < nranks; r++) sum += start + inner_update(r, i);
  float g = start - sum / (float)nranks;
  return start - lr * (g + mu * g);
}

/* Returns 1 when the outer step matched on every rank, 0 when not, -1 on a failed call. */
static int layer4_diloco(strata_comm *comm, int rank, int nranks) {
  float *theta = malloc(LAYER4_PARAMS * sizeof *theta);
  if (!theta) return -1;
  for (size_t i = 0; i < LAYER4_PARAMS; i++) theta[i] = theta_start(i);
  strata_diloco_param param = {theta, LAYER4_PARAMS, STRATA_F32};
  strata_diloco_options opt;
  strata_diloco_options_init(&opt);
  opt.sync_every = 1; /* one inner step per outer step: the scene shows one of each */
  strata_diloco *d = NULL;
  strata_comm_stats before, after;
  int status = strata_diloco_create(comm, &param, 1, &opt, &d);
  strata_comm_get_stats(comm, &before); /* after create's broadcast of theta_0 */
  for (size_t i = 0; i < LAYER4_PARAMS && !status; i++) theta[i] += inner_update(rank, i);
  double t0 = tool_now_s();
  int applied = 0;
  if (!status) status = strata_diloco_step(d, &applied);
  double seconds = tool_now_s() - t0;
  strata_comm_get_stats(comm, &after);
  double worst = 0;
  for (size_t i = 0; i < LAYER4_PARAMS && !status; i++) {
    float want = outer_expected(nranks, i, (float)opt.outer_lr, (float)opt.outer_momentum);
    worst = fmax(worst, fabs((double)theta[i] - want) / (fabs(want) + 1));
  }
  int ok = !status && applied == 1 && worst <= 1e-6, all_ok = ok;
  if (strata_allreduce(comm, &ok, &all_ok, 1, STRATA_I32, STRATA_MIN)) all_ok = 0;
  if (rank == 0)
    printf(
        "  DiLoCo outer step: %u f32 parameters, Nesterov lr %.1f momentum %.1f, one average\n"
        "    of the ranks' deltas: %.1f ms, rank 0 sent %.2f MiB; max relative error %.1e: %s\n",
        LAYER4_PARAMS, opt.outer_lr, opt.outer_momentum, seconds * 1e3,
        (double)(after.data_bytes_sent - before.data_bytes_sent) / (1 << 20), worst,
        all_ok ? "ok" : "FAILED");
  strata_diloco_destroy(d);
  free(theta);
  return status ? -1 : all_ok;
}

/* A well-mixed 32-bit hash of i (so the changed elements and values follow no pattern zstd
 * could fold away, as a training step's would not). */
static uint32_t mix(uint32_t i) {
  i ^= i >> 16;
  i *= 0x7feb352dU;
  i ^= i >> 15;
  i *= 0x846ca68bU;
  return i ^ (i >> 16);
}

/* Element i of the publisher's tensor at version v (1 or 2), as bf16 bits. */
static uint16_t weight_at(size_t i, int version) {
  uint32_t h = mix((uint32_t)i);
  float value = (float)((int)(h % 2001) - 1000) / 512.0f;
  if (version == 2 && mix(h) % LAYER4_CHANGED_EVERY == 0) value += (float)(mix(h + 1) % 64 + 1) / 8;
  return strata_f32_to_bf16(value);
}

/* One round at `version`: rank 0 publishes and serves, the others update and compare. Returns
 * 1 when every subscriber holds the version bit for bit, 0 when not, -1 on a failed call. */
static int layer4_round(strata_comm *comm, strata_weights *w, uint16_t *data, int rank,
                        int version) {
  strata_weights_round_info info = {0};
  int status = STRATA_OK;
  if (rank == 0) {
    for (size_t i = 0; i < LAYER4_WEIGHTS; i++) data[i] = weight_at(i, version);
    status = strata_weights_publish(w, NULL);
    if (!status) status = strata_weights_serve(w, comm, &info);
  } else {
    status = strata_weights_update(w, comm, STRATA_WEIGHTS_NEWEST, &info);
  }
  int ok = !status && info.version == (uint64_t)version;
  for (size_t i = 0; i < LAYER4_WEIGHTS && ok && rank != 0; i++)
    ok = data[i] == weight_at(i, version);
  int all_ok = ok;
  if (strata_allreduce(comm, &ok, &all_ok, 1, STRATA_I32, STRATA_MIN)) all_ok = 0;
  if (rank == 0)
    printf("    version %d, %s: %.1f KiB down the fan-out to %d subscriber%s: %s\n", version,
           version == 1 ? "a full copy" : "1% of the elements changed (a sparse patch)",
           (double)info.stream_bytes / 1024, info.subscribers, info.subscribers == 1 ? "" : "s",
           all_ok ? "ok, bit for bit" : "FAILED");
  return status ? -1 : all_ok;
}

static int layer4_weights(strata_comm *comm, int rank) {
  uint16_t *data = calloc(LAYER4_WEIGHTS, sizeof *data);
  if (!data) return -1;
  strata_weights_tensor tensor = {.name = "layer.weight",
                                  .data = data,
                                  .dtype = STRATA_BF16,
                                  .ndim = 2,
                                  .shape = {LAYER4_WEIGHTS / 1024, 1024}};
  strata_weights *w = NULL;
  int status = rank == 0 ? strata_weights_publisher_create(&tensor, 1, NULL, &w)
                         : strata_weights_subscriber_create(&tensor, 1, &w);
  if (rank == 0)
    printf(
        "  weight sync: rank 0 publishes a %u-element bf16 tensor (%.0f MiB), the others\n"
        "  update to each version, checked per tensor (xxHash3) before their buffers change:\n",
        LAYER4_WEIGHTS, (double)LAYER4_WEIGHTS * 2 / (1 << 20));
  int result = status ? -1 : layer4_round(comm, w, data, rank, 1);
  if (result == 1) result = layer4_round(comm, w, data, rank, 2);
  strata_weights_destroy(w);
  free(data);
  return result;
}

int demo_layer4(strata_comm *comm) {
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);
  if (n < 2) {
    if (rank == 0) fprintf(stderr, "strata demo layer4: needs 2 ranks or more\n");
    return 2;
  }
  if (rank == 0) printf("strata demo layer4: %d ranks on this host\n", n);
  int diloco = layer4_diloco(comm, rank, n);
  int weights = diloco < 0 ? -1 : layer4_weights(comm, rank);
  int passed = diloco == 1 && weights == 1;
  if (rank == 0)
    printf("layer 4: %s\n",
           passed ? "the outer step and both versions checked, all correct" : "FAILED");
  return passed ? 0 : 1;
}
