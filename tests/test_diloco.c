// SPDX-License-Identifier: Apache-2.0
/*
 * test_diloco.c — DiLoCo and Streaming DiLoCo (src/train/diloco.c) against a reference written
 * here in plain C from the formulas of include/strata.h.
 *
 *  1. The textbook algorithm (P = 1, delay 0, H = 3) at 2 and 3 ranks, with and without
 *     Nesterov, over f32 and over f32 + bf16 buffers: every rank's buffers after every step equal
 *     the reference's (bit for bit at 2 ranks, where the average of two deltas is exact; within
 *     f32 or bf16 rounding at 3 ranks, whose sums may be added in another order). create
 *     broadcasts rank 0's parameters; theta_global and the momentum end the same bytes on every
 *     rank (their checkpoints are compared).
 *  2. Streaming: P = 2 over buffers of 10, 3 and 8 elements (fragments {0} and {1, 2}), H = 4,
 *     delay 1, alpha 0.5: fragment 1 applies after steps 3, 7, 11, fragment 0 after 5, 9, with
 *     the merged values of the reference.
 *  3. Compression (int8, bf16) of the outer gradient: one outer step within the bound of
 *     docs/compression.md of the exact result, the same bytes on every rank, fewer wire bytes.
 *  4. Checkpoints: a saved state loaded back replays the same steps bit for bit; a blob of
 *     another shape gives STRATA_ERR_MISMATCH, a damaged or truncated one STRATA_ERR_PROTOCOL,
 *     and neither changes the state.
 *  5. Bad input: options, buffers, dtypes, ranks that disagree, misuse of outer_start/finish.
 *  6. A peer that exits before an exchange: the others get an error from strata_diloco_step with
 *     their buffers and state as before it, then finish the step on a communicator of the
 *     survivors (strata_diloco_set_comm) as the reference over two ranks says.
 *  7. wan_bytes_sent: two sites (2 + 2 and 2 + 1 ranks) count exactly the bytes sent to the other
 *     site, and an outer step sends some but not all of its bytes across; one site none. Outer
 *     steps compressed with int8, bf16 and fp8 leave every rank with the same parameters.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/store.h"
#include "helpers/check.h"
#include "helpers/ranks.h"

enum { MAX_RANKS = 4, MAX_PARAMS = 3, MAX_ELEMS = 1024 };

/* ---- the reference ---- */

typedef struct reference {
  int nranks;
  size_t nparams, counts[MAX_PARAMS], begin[MAX_PARAMS], total;
  strata_dtype dtypes[MAX_PARAMS];
  strata_diloco_options opt;
  float global[MAX_ELEMS], momentum[MAX_ELEMS];
  float local[MAX_RANKS][MAX_ELEMS], delta[MAX_RANKS][MAX_ELEMS];
} reference;

static float stored(strata_dtype dtype, float v) {
  return dtype == STRATA_BF16 ? strata_bf16_to_f32(strata_f32_to_bf16(v)) : v;
}

/* rank 0's initial parameters: small multiples of 1/4, exact in bf16 */
static float initial_value(size_t i) {
  return 0.25f * (float)((int)(i % 9) - 4) + 1.0f;
}

/* what rank r's inner optimizer subtracts from element i at inner step s */
static float inner_update(int r, uint64_t s, size_t i) {
  return 0.01f * (float)((int)(((r + 1) * 7 + s * 3 + i * 5) % 11) - 5);
}

static void ref_init(reference *ref, int nranks, size_t nparams, const size_t *counts,
                     const strata_dtype *dtypes, const strata_diloco_options *opt) {
  memset(ref, 0, sizeof *ref);
  ref->nranks = nranks;
  ref->nparams = nparams;
  ref->opt = *opt;
  for (size_t b = 0; b < nparams; b++) {
    ref->counts[b] = counts[b], ref->dtypes[b] = dtypes[b], ref->begin[b] = ref->total;
    ref->total += counts[b];
  }
  for (size_t i = 0; i < ref->total; i++) {
    ref->global[i] = initial_value(i);
    for (int r = 0; r < nranks; r++) ref->local[r][i] = initial_value(i);
  }
}

static strata_dtype ref_dtype(const reference *ref, size_t i) {
  size_t b = 0;
  while (b + 1 < ref->nparams && i >= ref->begin[b + 1]) b++;
  return ref->dtypes[b];
}

static void ref_inner(reference *ref, uint64_t s) {
  for (int r = 0; r < ref->nranks; r++)
    for (size_t i = 0; i < ref->total; i++)
      ref->local[r][i] = stored(ref_dtype(ref, i), ref->local[r][i] - inner_update(r, s, i));
}

static void ref_start(reference *ref, size_t begin, size_t end) {
  for (int r = 0; r < ref->nranks; r++)
    for (size_t i = begin; i < end; i++) ref->delta[r][i] = ref->global[i] - ref->local[r][i];
}

/* The average over ranks [0, contributors), torch's SGD, then every rank's merge. */
static void ref_apply(reference *ref, size_t begin, size_t end, int contributors) {
  const float lr = (float)ref->opt.outer_lr, mu = (float)ref->opt.outer_momentum;
  const float alpha = (float)ref->opt.alpha;
  for (size_t i = begin; i < end; i++) {
    float sum = ref->delta[0][i];
    for (int r = 1; r < contributors; r++) sum = sum + ref->delta[r][i];
    float g = sum / (float)contributors;
    float scaled = mu * ref->momentum[i];
    ref->momentum[i] = scaled + g;
    float step = ref->momentum[i];
    if (ref->opt.nesterov) {
      float ahead = mu * ref->momentum[i];
      step = g + ahead;
    }
    float move = -lr * step;
    ref->global[i] = ref->global[i] + move;
    for (int r = 0; r < ref->nranks; r++) {
      float v = ref->global[i];
      if (ref->opt.delay > 0) {
        float kept = alpha * ref->local[r][i], taken = (1.0f - alpha) * ref->global[i];
        v = kept + taken;
      }
      ref->local[r][i] = stored(ref_dtype(ref, i), v);
    }
  }
}

/* ---- this rank's buffers ---- */

typedef struct buffers {
  strata_diloco_param params[MAX_PARAMS];
  size_t nparams;
  float f32[MAX_PARAMS][MAX_ELEMS];
  uint16_t bf16[MAX_PARAMS][MAX_ELEMS];
} buffers;

static void buffers_init(buffers *bufs, int rank, size_t nparams, const size_t *counts,
                         const strata_dtype *dtypes) {
  memset(bufs, 0, sizeof *bufs);
  bufs->nparams = nparams;
  for (size_t b = 0, flat = 0; b < nparams; b++) {
    strata_diloco_param *p = &bufs->params[b];
    p->count = counts[b], p->dtype = dtypes[b];
    p->data = dtypes[b] == STRATA_BF16 ? (void *)bufs->bf16[b] : (void *)bufs->f32[b];
    for (size_t i = 0; i < counts[b]; i++, flat++) {
      /* other ranks start elsewhere: create must replace their values by rank 0's */
      float v = initial_value(flat) + 100.0f * (float)rank;
      if (p->dtype == STRATA_BF16)
        bufs->bf16[b][i] = strata_f32_to_bf16(v);
      else
        bufs->f32[b][i] = v;
    }
  }
}

static float buffer_value(const buffers *bufs, size_t b, size_t i) {
  return bufs->params[b].dtype == STRATA_BF16 ? strata_bf16_to_f32(bufs->bf16[b][i])
                                              : bufs->f32[b][i];
}

static void buffers_inner(buffers *bufs, int rank, uint64_t s) {
  for (size_t b = 0, flat = 0; b < bufs->nparams; b++)
    for (size_t i = 0; i < bufs->params[b].count; i++, flat++) {
      float v = buffer_value(bufs, b, i) - inner_update(rank, s, flat);
      if (bufs->params[b].dtype == STRATA_BF16)
        bufs->bf16[b][i] = strata_f32_to_bf16(v);
      else
        bufs->f32[b][i] = v;
    }
}

/* Compares this rank's buffers with the reference's; returns how many elements differ. */
static int buffers_compare(const buffers *bufs, const reference *ref, int rank, double tol_f32,
                           double tol_bf16, const char *what, uint64_t s) {
  int wrong = 0;
  for (size_t b = 0, flat = 0; b < bufs->nparams; b++)
    for (size_t i = 0; i < bufs->params[b].count; i++, flat++) {
      double got = buffer_value(bufs, b, i), want = ref->local[rank][flat];
      double tol = bufs->params[b].dtype == STRATA_BF16 ? tol_bf16 : tol_f32;
      if (!(fabs(got - want) <= tol)) {
        if (wrong++ < 3)
          CHECK(0, "%s: rank %d step %llu buffer %zu [%zu] = %.9g, want %.9g", what, rank,
                (unsigned long long)s, b, i, got, want);
      }
    }
  return wrong;
}

static uint8_t *save_state(strata_diloco *d, size_t *bytes);

/* ---- 1, 2: the schedule against the reference ---- */

typedef struct schedule_case {
  const char *name;
  size_t nparams, counts[MAX_PARAMS];
  strata_dtype dtypes[MAX_PARAMS];
  int sync_every, fragments, delay, nesterov;
  double alpha;
  int steps;
  /* when set: per step s (1-based), the fragments it applies as a bit mask */
  const unsigned *applied_mask;
  /* when set: fragment p's first buffer and buffer count */
  const size_t (*layout)[2];
} schedule_case;

static int schedule_body(strata_comm *comm, int rank, int nranks, int init_status, void *arg) {
  const schedule_case *c = arg;
  CHECK_OR_RETURN(comm != NULL, "%s: init: %s", c->name, strata_err_name(init_status));
  strata_diloco_options opt;
  strata_diloco_options_init(&opt);
  opt.sync_every = c->sync_every, opt.fragments = c->fragments, opt.delay = c->delay;
  opt.nesterov = c->nesterov, opt.alpha = c->alpha, opt.compress = STRATA_COMPRESS_NONE;
  static buffers bufs;
  static reference ref;
  buffers_init(&bufs, rank, c->nparams, c->counts, c->dtypes);
  ref_init(&ref, nranks, c->nparams, c->counts, c->dtypes, &opt);
  strata_diloco *d = NULL;
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, c->nparams, &opt, &d), STRATA_OK);
  CHECK_OR_RETURN(d != NULL, "%s: create", c->name);
  /* exact at 2 ranks; at 3 a sum in another order rounds differently, by an f32 ulp that a bf16
   * rounding may turn into one bf16 ulp */
  double tol_f32 = nranks == 2 ? 0 : 1e-5, tol_bf16 = nranks == 2 ? 0 : 0.02;
  buffers_compare(&bufs, &ref, rank, 0, 0, "rank 0's parameters broadcast", 0);

  size_t frag_begin[8], frag_end[8];
  for (int p = 0; p < c->fragments; p++) {
    size_t first = 99, n = 99;
    CHECK(strata_diloco_fragment(d, p, &first, &n) == c->fragments, "fragment count");
    if (c->layout)
      CHECK(first == c->layout[p][0] && n == c->layout[p][1], "%s: fragment %d is [%zu, +%zu)",
            c->name, p, first, n);
    frag_begin[p] = ref.begin[first];
    frag_end[p] = first + n < c->nparams ? ref.begin[first + n] : ref.total;
  }
  uint64_t due[8] = {0}, applied_total = 0;
  for (uint64_t s = 1; s <= (uint64_t)c->steps; s++) {
    buffers_inner(&bufs, rank, s);
    ref_inner(&ref, s);
    int applied = -1;
    CHECK_STATUS(strata_diloco_step(d, &applied), STRATA_OK);
    unsigned mask = 0;
    for (int p = 0; p < c->fragments; p++) {
      uint64_t h = (uint64_t)c->sync_every, offset = (uint64_t)p * h / (uint64_t)c->fragments;
      if (s % h == offset) {
        ref_start(&ref, frag_begin[p], frag_end[p]);
        due[p] = s + (uint64_t)c->delay;
      }
    }
    for (int p = 0; p < c->fragments; p++)
      if (due[p] == s) {
        ref_apply(&ref, frag_begin[p], frag_end[p], nranks);
        mask |= 1u << p;
        due[p] = 0;
      }
    int want_applied = __builtin_popcount(mask);
    applied_total += (uint64_t)want_applied;
    CHECK(applied == want_applied, "%s: step %llu applied %d, want %d", c->name,
          (unsigned long long)s, applied, want_applied);
    if (c->applied_mask)
      CHECK(mask == c->applied_mask[s], "%s: step %llu: the reference applies mask %u, want %u",
            c->name, (unsigned long long)s, mask, c->applied_mask[s]);
    if (buffers_compare(&bufs, &ref, rank, tol_f32, tol_bf16, c->name, s)) break;
  }
  /* the same theta_global and momentum on every rank (their checkpoints are the same bytes),
   * whatever order each added the deltas in; and without a merge the same parameters too */
  static uint8_t all[MAX_RANKS][sizeof bufs.f32 + sizeof bufs.bf16];
  uint8_t *mine = all[MAX_RANKS - 1];
  memcpy(mine, bufs.f32, sizeof bufs.f32);
  memcpy(mine + sizeof bufs.f32, bufs.bf16, sizeof bufs.bf16);
  CHECK_STATUS(strata_allgather(comm, mine, all, sizeof all[0], STRATA_U8), STRATA_OK);
  for (int r = 1; r < nranks && c->delay == 0; r++)
    CHECK(memcmp(all[0], all[r], sizeof all[0]) == 0, "%s: rank %d's parameters differ", c->name,
          r);
  size_t bytes = 0;
  uint8_t *blob = save_state(d, &bytes), *blobs = malloc(bytes * (size_t)nranks);
  CHECK_OR_RETURN(blob && blobs, "save");
  CHECK_STATUS(strata_allgather(comm, blob, blobs, bytes, STRATA_U8), STRATA_OK);
  for (int r = 1; r < nranks; r++)
    CHECK(memcmp(blobs, blobs + (size_t)r * bytes, bytes) == 0, "%s: rank %d's state differs",
          c->name, r);
  free(blob);
  free(blobs);
  CHECK(strata_diloco_inner_steps(d) == (uint64_t)c->steps, "%s: inner steps %llu", c->name,
        (unsigned long long)strata_diloco_inner_steps(d));
  CHECK(strata_diloco_outer_steps(d) == applied_total, "%s: outer steps %llu, want %llu", c->name,
        (unsigned long long)strata_diloco_outer_steps(d), (unsigned long long)applied_total);
  strata_diloco_destroy(d);
  return failures != 0;
}

/* ---- 3: compression ---- */

static int compress_body(strata_comm *comm, int rank, int nranks, int init_status, void *arg) {
  const strata_compress codec = *(const strata_compress *)arg;
  CHECK_OR_RETURN(comm != NULL, "init: %s", strata_err_name(init_status));
  enum { COUNT = 1000 };
  const size_t counts[1] = {COUNT};
  const strata_dtype dtypes[1] = {STRATA_F32};
  strata_diloco_options opt;
  strata_diloco_options_init(&opt);
  opt.sync_every = 1, opt.compress = codec;
  static buffers bufs;
  static reference ref;
  buffers_init(&bufs, rank, 1, counts, dtypes);
  ref_init(&ref, nranks, 1, counts, dtypes, &opt);
  strata_diloco *d = NULL;
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, 1, &opt, &d), STRATA_OK);
  CHECK_OR_RETURN(d != NULL, "create");
  strata_comm_stats before, after;
  strata_comm_get_stats(comm, &before);
  buffers_inner(&bufs, rank, 1);
  ref_inner(&ref, 1);
  ref_start(&ref, 0, COUNT);
  double delta_max = 0;
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < COUNT; i++) delta_max = fmax(delta_max, fabs(ref.delta[r][i]));
  int applied = 0;
  CHECK_STATUS(strata_diloco_step(d, &applied), STRATA_OK);
  CHECK(applied == 1, "%s: applied %d", strata_compress_name(codec), applied);
  strata_comm_get_stats(comm, &after);
  ref_apply(&ref, 0, COUNT, nranks);
  /* docs/compression.md: at most 2n quantizations of partial sums of magnitude <= n * delta_max,
   * then the step scales the average by lr * (1 + momentum) */
  double sum_error = 2.0 * nranks * strata_compress_error_bound(codec, nranks * delta_max);
  double tol = opt.outer_lr * (1 + opt.outer_momentum) * sum_error / nranks + 1e-6;
  buffers_compare(&bufs, &ref, rank, tol, tol, strata_compress_name(codec), 1);
  uint64_t data = after.data_bytes_sent - before.data_bytes_sent;
  uint64_t wire = after.wire_bytes_sent - before.wire_bytes_sent;
  CHECK(data > 0 && wire < data, "%s: %llu wire bytes for %llu data bytes",
        strata_compress_name(codec), (unsigned long long)wire, (unsigned long long)data);
  /* every rank holds the same parameters */
  static float all[MAX_RANKS * COUNT];
  CHECK_STATUS(strata_allgather(comm, bufs.f32[0], all, COUNT, STRATA_F32), STRATA_OK);
  for (int r = 1; r < nranks; r++)
    CHECK(memcmp(all, all + (size_t)r * COUNT, COUNT * sizeof(float)) == 0,
          "%s: rank %d's parameters differ from rank 0's", strata_compress_name(codec), r);
  strata_diloco_destroy(d);
  return failures != 0;
}

/* ---- 4: checkpoints ---- */

static uint8_t *save_state(strata_diloco *d, size_t *bytes) {
  *bytes = 0;
  if (strata_diloco_state_bytes(d, bytes) != STRATA_OK) return NULL;
  uint8_t *blob = malloc(*bytes);
  if (blob && strata_diloco_save(d, blob, *bytes) != STRATA_OK) {
    free(blob);
    return NULL;
  }
  return blob;
}

/* Does a fresh save of d equal `blob`? */
static int state_is(strata_diloco *d, const uint8_t *blob, size_t bytes) {
  size_t now_bytes;
  uint8_t *now = save_state(d, &now_bytes);
  int same = now && now_bytes == bytes && memcmp(now, blob, bytes) == 0;
  free(now);
  return same;
}

static void run_steps(strata_diloco *d, buffers *bufs, int rank, uint64_t from, uint64_t to) {
  for (uint64_t s = from; s <= to; s++) {
    buffers_inner(bufs, rank, s);
    CHECK_STATUS(strata_diloco_step(d, NULL), STRATA_OK);
  }
}

static int checkpoint_body(strata_comm *comm, int rank, int nranks, int init_status, void *arg) {
  (void)nranks, (void)arg;
  CHECK_OR_RETURN(comm != NULL, "init: %s", strata_err_name(init_status));
  const size_t counts[3] = {10, 3, 8};
  const strata_dtype dtypes[3] = {STRATA_F32, STRATA_BF16, STRATA_F32};
  strata_diloco_options opt;
  strata_diloco_options_init(&opt);
  opt.sync_every = 4, opt.fragments = 2, opt.delay = 1;
  static buffers bufs, saved_bufs, replay_end;
  buffers_init(&bufs, rank, 3, counts, dtypes);
  strata_diloco *d = NULL;
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, 3, &opt, &d), STRATA_OK);
  CHECK_OR_RETURN(d != NULL, "create");

  /* after step 5 no exchange is in flight (fragment 1: 2 -> 3, fragment 0: 4 -> 5) */
  run_steps(d, &bufs, rank, 1, 5);
  size_t bytes = 0;
  uint8_t *blob = save_state(d, &bytes);
  CHECK_OR_RETURN(blob != NULL, "save");
  saved_bufs = bufs;
  run_steps(d, &bufs, rank, 6, 9);
  replay_end = bufs;
  uint64_t outer_end = strata_diloco_outer_steps(d);
  CHECK(outer_end == 4, "outer steps after 9 inner steps: %llu", (unsigned long long)outer_end);

  CHECK_STATUS(strata_diloco_load(d, blob, bytes), STRATA_OK);
  CHECK(strata_diloco_inner_steps(d) == 5 && strata_diloco_outer_steps(d) == 2,
        "loaded counters %llu %llu", (unsigned long long)strata_diloco_inner_steps(d),
        (unsigned long long)strata_diloco_outer_steps(d));
  memcpy(bufs.f32, saved_bufs.f32, sizeof bufs.f32);
  memcpy(bufs.bf16, saved_bufs.bf16, sizeof bufs.bf16);
  run_steps(d, &bufs, rank, 6, 9);
  CHECK(memcmp(bufs.f32, replay_end.f32, sizeof bufs.f32) == 0 &&
            memcmp(bufs.bf16, replay_end.bf16, sizeof bufs.bf16) == 0,
        "the replay from the checkpoint differs");
  CHECK(strata_diloco_outer_steps(d) == outer_end, "replayed outer steps");

  /* a save with an exchange in flight (fragment 1 started after step 10) still applies it */
  run_steps(d, &bufs, rank, 10, 10);
  size_t mid_bytes = 0;
  uint8_t *mid = save_state(d, &mid_bytes);
  CHECK(mid != NULL && mid_bytes == bytes, "save with an exchange in flight");
  int applied = 0;
  buffers_inner(&bufs, rank, 11);
  CHECK_STATUS(strata_diloco_step(d, &applied), STRATA_OK);
  CHECK(applied == 1, "the exchange waited for by save applied %d", applied);
  free(mid);

  /* refusals change nothing */
  size_t now_bytes = 0;
  uint8_t *now = save_state(d, &now_bytes);
  CHECK_OR_RETURN(now != NULL && now_bytes == bytes, "save");
  uint8_t *bad = malloc(bytes);
  memcpy(bad, now, bytes);
  bad[bytes / 2] ^= 0x10; /* inside theta_global or the momentum */
  CHECK_STATUS(strata_diloco_load(d, bad, bytes), STRATA_ERR_PROTOCOL);
  memcpy(bad, now, bytes);
  bad[3] ^= 1; /* the magic */
  CHECK_STATUS(strata_diloco_load(d, bad, bytes), STRATA_ERR_PROTOCOL);
  memcpy(bad, now, bytes);
  bad[bytes - 1] ^= 0x80; /* the digest */
  CHECK_STATUS(strata_diloco_load(d, bad, bytes), STRATA_ERR_PROTOCOL);
  CHECK_STATUS(strata_diloco_load(d, now, bytes - 1), STRATA_ERR_PROTOCOL);
  CHECK_STATUS(strata_diloco_load(d, now, 7), STRATA_ERR_PROTOCOL);
  CHECK_STATUS(strata_diloco_load(d, NULL, bytes), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_save(d, bad, bytes - 1), STRATA_ERR_INVALID_ARG);
  CHECK(state_is(d, now, bytes), "a refused load changed the state");

  /* another shape: the same buffers in one fragment; and a buffer fewer */
  strata_diloco_options one = opt;
  one.fragments = 1, one.delay = 0;
  strata_diloco *other = NULL;
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, 3, &one, &other), STRATA_OK);
  if (other) {
    size_t other_bytes = 0;
    uint8_t *other_blob = save_state(other, &other_bytes);
    CHECK_STATUS(strata_diloco_load(other, now, bytes), STRATA_ERR_MISMATCH);
    CHECK(other_blob && state_is(other, other_blob, other_bytes), "a mismatch changed the state");
    CHECK_STATUS(strata_diloco_load(d, other_blob, other_bytes), STRATA_ERR_MISMATCH);
    free(other_blob);
    strata_diloco_destroy(other);
  }
  strata_diloco *fewer = NULL;
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, 2, &opt, &fewer), STRATA_OK);
  if (fewer) {
    CHECK_STATUS(strata_diloco_load(fewer, now, bytes), STRATA_ERR_MISMATCH);
    strata_diloco_destroy(fewer);
  }
  CHECK(state_is(d, now, bytes), "the state changed");
  free(bad);
  free(now);
  free(blob);
  strata_diloco_destroy(d);
  return failures != 0;
}

/* ---- 5: bad input ---- */

static int bad_body(strata_comm *comm, int rank, int nranks, int init_status, void *arg) {
  (void)nranks, (void)arg;
  CHECK_OR_RETURN(comm != NULL, "init: %s", strata_err_name(init_status));
  const size_t counts[2] = {16, 8};
  const strata_dtype dtypes[2] = {STRATA_F32, STRATA_F32};
  static buffers bufs;
  buffers_init(&bufs, rank, 2, counts, dtypes);
  strata_diloco_options good;
  strata_diloco_options_init(&good);
  good.sync_every = 4;
  strata_diloco *d = (strata_diloco *)&d;

  /* every rank passes the same bad option: every rank refuses it */
  for (int k = 0; k < 11; k++) {
    strata_diloco_options o = good;
    switch (k) {
      case 0:
        o.sync_every = 0;
        break;
      case 1:
        o.fragments = 0;
        break;
      case 2:
        o.fragments = 5;
        break; /* more than H */
      case 3:
        o.fragments = 3;
        break; /* more than the buffers */
      case 4:
        o.fragments = 2, o.delay = 2;
        break; /* past H/P - 1 */
      case 5:
        o.delay = -1;
        break;
      case 6:
        o.outer_lr = -0.1;
        break;
      case 7:
        o.outer_lr = NAN;
        break;
      case 8:
        o.outer_momentum = 1.5;
        break;
      case 9:
        o.alpha = 2;
        break;
      default:
        o.compress = (strata_compress)99;
        break;
    }
    CHECK_STATUS(strata_diloco_create(comm, bufs.params, 2, &o, &d), STRATA_ERR_INVALID_ARG);
    CHECK(d == NULL, "option case %d left *out set", k);
  }
  CHECK_STATUS(strata_diloco_create(comm, NULL, 2, &good, &d), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, 0, &good, &d), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, 2, NULL, &d), STRATA_ERR_INVALID_ARG);
  /* no communicator: a joining worker's state, which exchanges nothing until strata_diloco_sync */
  CHECK_STATUS(strata_diloco_create(NULL, bufs.params, 2, &good, &d), STRATA_OK);
  CHECK_STATUS(strata_diloco_step(d, NULL), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_outer_start(d, 0), STRATA_ERR_INVALID_ARG);
  strata_diloco_destroy(d);
  d = NULL;
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, 2, &good, NULL), STRATA_ERR_INVALID_ARG);
  strata_diloco_param params[2] = {bufs.params[0], bufs.params[1]};
  params[1].dtype = STRATA_F64;
  CHECK_STATUS(strata_diloco_create(comm, params, 2, &good, &d), STRATA_ERR_UNSUPPORTED);
  params[1] = bufs.params[1], params[1].data = NULL;
  CHECK_STATUS(strata_diloco_create(comm, params, 2, &good, &d), STRATA_ERR_INVALID_ARG);
  params[1] = bufs.params[1], params[1].count = 0;
  CHECK_STATUS(strata_diloco_create(comm, params, 2, &good, &d), STRATA_ERR_INVALID_ARG);

  /* ranks that disagree: all fail, the one with a bad argument says so */
  params[1] = bufs.params[1];
  if (rank == 1) params[1].count = 7;
  CHECK_STATUS(strata_diloco_create(comm, params, 2, &good, &d), STRATA_ERR_MISMATCH);
  params[1] = bufs.params[1];
  strata_diloco_options skewed = good;
  if (rank == 1) skewed.outer_lr = 0.5;
  CHECK_STATUS(strata_diloco_create(comm, params, 2, &skewed, &d), STRATA_ERR_MISMATCH);
  if (rank == 1) skewed.outer_lr = good.outer_lr, skewed.sync_every = 0;
  CHECK_STATUS(strata_diloco_create(comm, params, 2, &skewed, &d),
               rank == 1 ? STRATA_ERR_INVALID_ARG : STRATA_ERR_MISMATCH);
  CHECK(d == NULL, "a failed create left *out set");

  /* misuse of a good state */
  good.fragments = 2;
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, 2, &good, &d), STRATA_OK);
  CHECK_OR_RETURN(d != NULL, "create");
  size_t first = 0, n = 0;
  CHECK(strata_diloco_fragment(d, 1, &first, &n) == 2 && first == 1 && n == 1, "fragment 1");
  CHECK_STATUS(strata_diloco_fragment(d, 2, &first, &n), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_fragment(d, -1, NULL, NULL), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_fragment(NULL, 0, NULL, NULL), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_outer_finish(d, 0), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_outer_start(d, 2), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_outer_start(d, 0), STRATA_OK);
  CHECK_STATUS(strata_diloco_outer_start(d, 0), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_outer_finish(d, 0), STRATA_OK);
  CHECK_STATUS(strata_diloco_outer_finish(d, 0), STRATA_ERR_INVALID_ARG);
  CHECK(strata_diloco_outer_steps(d) == 1, "outer steps by hand");
  CHECK_STATUS(strata_diloco_set_comm(d, NULL), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_step(NULL, NULL), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_diloco_state_bytes(d, NULL), STRATA_ERR_INVALID_ARG);
  CHECK(strata_diloco_inner_steps(NULL) == 0 && strata_diloco_outer_steps(NULL) == 0, "NULL");
  strata_diloco_options_init(NULL);
  strata_diloco_destroy(NULL);
  strata_diloco_destroy(d);
  return failures != 0;
}

/* ---- 6: a peer exits ---- */

static int fault_body(strata_comm *comm, int rank, int nranks, int init_status, void *arg) {
  (void)arg;
  CHECK_OR_RETURN(comm != NULL, "init: %s", strata_err_name(init_status));
  strata_comm *survivors = NULL;
  CHECK_STATUS(strata_comm_split(comm, rank < 2 ? 0 : STRATA_UNDEFINED, rank, &survivors),
               STRATA_OK);
  const size_t counts[2] = {64, 32};
  const strata_dtype dtypes[2] = {STRATA_F32, STRATA_BF16};
  strata_diloco_options opt;
  strata_diloco_options_init(&opt);
  opt.sync_every = 2;
  static buffers bufs, before;
  static reference ref;
  buffers_init(&bufs, rank, 2, counts, dtypes);
  ref_init(&ref, nranks, 2, counts, dtypes, &opt);
  strata_diloco *d = NULL;
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, 2, &opt, &d), STRATA_OK);
  CHECK_OR_RETURN(d != NULL, "create");
  for (uint64_t s = 1; s <= 3; s++) { /* one outer step, after step 2, on all three */
    buffers_inner(&bufs, rank, s);
    ref_inner(&ref, s);
    CHECK_STATUS(strata_diloco_step(d, NULL), STRATA_OK);
    if (s == 2) {
      ref_start(&ref, 0, ref.total);
      ref_apply(&ref, 0, ref.total, nranks);
    }
  }
  /* Rank 2 leaves once the others are through step 3 (a rank that closes its connections while
   * its peers still finish an exchange with it breaks that exchange), told through the store. */
  const strata_config *cfg = strata_comm_config(comm);
  strata_store *store = NULL;
  CHECK_OR_RETURN(
      strata_store_connect_auth(cfg->store_addr, cfg->secret, cfg->job_id, 10, &store) == STRATA_OK,
      "store");
  char key[160];
  if (rank == 2) {
    for (int r = 0; r < 2; r++) {
      void *value = NULL;
      size_t len = 0;
      snprintf(key, sizeof key, "%s/diloco-through-3/%d", cfg->job_id, r);
      CHECK_STATUS(strata_store_get(store, key, &value, &len, 10), STRATA_OK);
      free(value);
    }
    _exit(failures != 0); /* gone before the exchange after step 4 */
  }
  buffers_inner(&bufs, rank, 4);
  ref_inner(&ref, 4);
  before = bufs;
  size_t bytes = 0;
  uint8_t *blob = save_state(d, &bytes);
  CHECK_OR_RETURN(blob != NULL, "save");
  snprintf(key, sizeof key, "%s/diloco-through-3/%d", cfg->job_id, rank);
  CHECK_STATUS(strata_store_set(store, key, "1", 1), STRATA_OK);
  strata_store_close(store);
  int applied = -1;
  int status = strata_diloco_step(d, &applied);
  CHECK(status == STRATA_ERR_PEER_LOST || status == STRATA_ERR_TIMEOUT ||
            status == STRATA_ERR_ABORTED,
        "step with a dead peer: %s", strata_err_name(status));
  CHECK(applied == 0, "applied %d", applied);
  CHECK(memcmp(bufs.f32, before.f32, sizeof bufs.f32) == 0 &&
            memcmp(bufs.bf16, before.bf16, sizeof bufs.bf16) == 0,
        "a failed exchange changed theta_local");
  CHECK(strata_diloco_inner_steps(d) == 3, "a failed step counted: %llu",
        (unsigned long long)strata_diloco_inner_steps(d));
  /* the blob ends with theta_global, the momentum and a 32-byte digest (diloco.c); before them,
   * the step's bookkeeping of the exchange it owes now */
  size_t now_bytes = 0, arrays = 2 * ref.total * sizeof(float);
  uint8_t *now = save_state(d, &now_bytes);
  CHECK(now && now_bytes == bytes &&
            memcmp(now + bytes - 32 - arrays, blob + bytes - 32 - arrays, arrays) == 0,
        "a failed exchange changed theta_global or the momentum");
  free(now);
  free(blob);
  /* the same step again over the survivors: the average of ranks 0 and 1 */
  CHECK_OR_RETURN(survivors != NULL, "split");
  CHECK_STATUS(strata_diloco_set_comm(d, survivors), STRATA_OK);
  CHECK_STATUS(strata_diloco_step(d, &applied), STRATA_OK);
  CHECK(applied == 1 && strata_diloco_inner_steps(d) == 4, "the repeated step: applied %d",
        applied);
  ref_start(&ref, 0, ref.total);
  ref_apply(&ref, 0, ref.total, 2);
  buffers_compare(&bufs, &ref, rank, 1e-5, 0.02, "after set_comm", 4); /* 3-rank sums earlier */
  strata_diloco_destroy(d);
  strata_comm_destroy(survivors);
  return failures != 0;
}

/* ---- 7: bytes that cross sites ---- */

static void two_sites(strata_config *cfg, int rank, void *arg) {
  if (*(const int *)arg) snprintf(cfg->site, sizeof cfg->site, "%s", rank < 2 ? "a" : "b");
}

static int wan_body(strata_comm *comm, int rank, int nranks, int init_status, void *arg) {
  const int sites = *(const int *)arg;
  CHECK_OR_RETURN(comm != NULL, "init: %s", strata_err_name(init_status));
  enum { COUNT = MAX_ELEMS };
  static float buf[COUNT];
  strata_comm_stats a, b;
  /* rank 0 sends to rank 1 (its site), then to rank 2 (the other site when there are two) */
  for (int peer = 1; peer <= 2; peer++) {
    strata_comm_get_stats(comm, &a);
    if (rank == 0) CHECK_STATUS(strata_send(comm, buf, COUNT, STRATA_F32, peer), STRATA_OK);
    if (rank == peer) CHECK_STATUS(strata_recv(comm, buf, COUNT, STRATA_F32, 0), STRATA_OK);
    strata_comm_get_stats(comm, &b);
    uint64_t wire = b.wire_bytes_sent - a.wire_bytes_sent;
    uint64_t wan = b.wan_bytes_sent - a.wan_bytes_sent;
    uint64_t want_wire = rank == 0 ? COUNT * sizeof(float) : 0;
    CHECK(wire == want_wire, "send to %d: %llu wire bytes", peer, (unsigned long long)wire);
    CHECK(wan == (sites && peer == 2 ? want_wire : 0), "send to %d: %llu WAN bytes, sites %d", peer,
          (unsigned long long)wan, sites);
  }
  /* an outer step: hierarchical over two sites, so some bytes stay inside the site */
  const size_t counts[1] = {COUNT};
  const strata_dtype dtypes[1] = {STRATA_F32};
  static buffers bufs;
  buffers_init(&bufs, rank, 1, counts, dtypes);
  strata_diloco_options opt;
  strata_diloco_options_init(&opt);
  opt.sync_every = 1;
  strata_diloco *d = NULL;
  CHECK_STATUS(strata_diloco_create(comm, bufs.params, 1, &opt, &d), STRATA_OK);
  CHECK_OR_RETURN(d != NULL, "create");
  strata_comm_get_stats(comm, &a);
  buffers_inner(&bufs, rank, 1);
  CHECK_STATUS(strata_diloco_step(d, NULL), STRATA_OK);
  strata_comm_get_stats(comm, &b);
  /* summed over the ranks: with unequal sites one rank may send only across, another only
   * inside its site */
  uint64_t mine[2] = {b.wire_bytes_sent - a.wire_bytes_sent, b.wan_bytes_sent - a.wan_bytes_sent};
  uint64_t sums[2] = {0, 0};
  CHECK_STATUS(strata_allreduce(comm, mine, sums, 2, STRATA_U64, STRATA_SUM), STRATA_OK);
  uint64_t wire = sums[0], wan = sums[1];
  if (sites)
    CHECK(wan > 0 && wan < wire, "outer step over two sites: %llu WAN of %llu wire bytes",
          (unsigned long long)wan, (unsigned long long)wire);
  else
    CHECK(wire > 0 && wan == 0, "outer step in one site: %llu WAN bytes", (unsigned long long)wan);
  CHECK(b.wan_bytes_sent <= b.wire_bytes_sent, "WAN bytes above the wire bytes");
  strata_diloco_destroy(d);

  /* compressed outer steps over the sites leave every rank with the same parameters */
  for (int k = 0; k < 3; k++) {
    strata_compress codecs[3] = {STRATA_COMPRESS_INT8, STRATA_COMPRESS_BF16, STRATA_COMPRESS_FP8};
    opt.compress = codecs[k];
    CHECK_STATUS(strata_diloco_create(comm, bufs.params, 1, &opt, &d), STRATA_OK);
    CHECK_OR_RETURN(d != NULL, "create");
    for (uint64_t s = 1; s <= 2; s++) {
      buffers_inner(&bufs, rank, s);
      CHECK_STATUS(strata_diloco_step(d, NULL), STRATA_OK);
    }
    static float all[MAX_RANKS * COUNT];
    CHECK_STATUS(strata_allgather(comm, bufs.f32[0], all, COUNT, STRATA_F32), STRATA_OK);
    for (int r = 1; r < nranks; r++)
      CHECK(memcmp(all, all + (size_t)r * COUNT, COUNT * sizeof(float)) == 0,
            "%s over %s: rank %d's parameters differ from rank 0's",
            strata_compress_name(codecs[k]), sites ? "two sites" : "one site", r);
    strata_diloco_destroy(d);
  }
  return failures != 0;
}

/* ---- main ---- */

static int run(const char *what, int nranks, const strata_test_ranks_opts *opts,
               strata_test_body body, void *arg) {
  printf("%s, %d ranks\n", what, nranks);
  fflush(stdout);
  int bad = strata_test_run_ranks(nranks, opts, body, arg);
  if (bad) printf("  %d rank(s) failed\n", bad);
  return bad;
}

int main(void) {
  int failed = 0;
  strata_test_ranks_opts opts = {.shm = 1, .timeout_s = 20, .deadline_s = 120};

  static const unsigned streaming_mask[12] = {0, 0, 0, 2, 0, 1, 0, 2, 0, 1, 0, 2};
  static const size_t streaming_layout[2][2] = {{0, 1}, {1, 2}};
  const schedule_case cases[] = {
      {"textbook nesterov f32",
       2,
       {40, 24},
       {STRATA_F32, STRATA_F32},
       3,
       1,
       0,
       1,
       0.5,
       9,
       NULL,
       NULL},
      {"textbook momentum f32",
       2,
       {40, 24},
       {STRATA_F32, STRATA_F32},
       3,
       1,
       0,
       0,
       0.5,
       9,
       NULL,
       NULL},
      {"textbook nesterov f32+bf16",
       2,
       {40, 24},
       {STRATA_F32, STRATA_BF16},
       3,
       1,
       0,
       1,
       0.5,
       9,
       NULL,
       NULL},
      {"streaming P=2 delay 1",
       3,
       {10, 3, 8},
       {STRATA_F32, STRATA_F32, STRATA_BF16},
       4,
       2,
       1,
       1,
       0.5,
       11,
       streaming_mask,
       streaming_layout},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int n = 2; n <= 3; n++)
      failed += run(cases[k].name, n, &opts, schedule_body, (void *)&cases[k]);

  strata_compress codecs[2] = {STRATA_COMPRESS_INT8, STRATA_COMPRESS_BF16};
  for (int k = 0; k < 2; k++)
    for (int n = 2; n <= 3; n++)
      failed += run(strata_compress_name(codecs[k]), n, &opts, compress_body, &codecs[k]);

  failed += run("checkpoints", 2, &opts, checkpoint_body, NULL);
  failed += run("bad input", 2, &opts, bad_body, NULL);

  strata_test_ranks_opts fault = {.shm = 0, .timeout_s = 3, .deadline_s = 60};
  failed += run("a peer exits before an exchange", 3, &fault, fault_body, NULL);

  for (int sites = 0; sites <= 1; sites++) {
    strata_test_ranks_opts wan = opts;
    wan.tweak = two_sites;
    failed +=
        run(sites ? "WAN bytes, two sites" : "WAN bytes, one site", 4, &wan, wan_body, &sites);
    if (sites) failed += run("WAN bytes, two unequal sites", 3, &wan, wan_body, &sites);
  }
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
