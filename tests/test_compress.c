// SPDX-License-Identifier: Apache-2.0
/*
 * test_compress.c — compression on the wire (src/core/compress.c, the engine's codec path).
 *
 * 1. The codecs alone: wire sizes, every e4m3 code round-trips, nearest-even and saturation,
 *    error bounds on random data of mixed magnitudes, NaN/inf never become finite, fp8 re-encoding
 *    is lossless, decode_reduce = decode + reduce; int4's packing, partial and odd-length blocks,
 *    constant blocks, and that encode and decode stay within wire_bytes.
 * 2. Compressed collectives over shm and TCP, 2..4 ranks, every algorithm: the error against the
 *    exact (double) result stays inside the bound of the encoding times the hops a value takes,
 *    every rank of an allreduce ends with the same bytes, the bytes saved match the encoding,
 *    a compressed non-f32 call is refused, and ranks disagreeing on the encoding get
 *    STRATA_ERR_MISMATCH. Errors and savings are printed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/compress.h"
#include "core/core.h"
#include "helpers/check.h"
#include "helpers/ranks.h"

static const strata_compress codecs[] = {STRATA_COMPRESS_BF16, STRATA_COMPRESS_F16,
                                         STRATA_COMPRESS_INT8, STRATA_COMPRESS_FP8,
                                         STRATA_COMPRESS_INT4};
enum { NCODECS = 5 };

/* xorshift: reproducible data on every rank */
static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
static float rng_unit(uint64_t *s) { /* [-1, 1) */
  return (float)((double)(rng_next(s) >> 11) / 4503599627370496.0 - 1.0);
}

/* ---------------------------------------------------------------- part 1: codecs ---------- */
static void test_wire_bytes(void) {
  const uint64_t ns[] = {0, 1, 255, 256, 257, 1000};
  for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
    uint64_t n = ns[i], blocks = (n + 255) / 256;
    CHECK(strata_compress_wire_bytes(STRATA_COMPRESS_BF16, n) == 2 * n, "bf16 n=%llu",
          (unsigned long long)n);
    CHECK(strata_compress_wire_bytes(STRATA_COMPRESS_F16, n) == 2 * n, "f16");
    CHECK(strata_compress_wire_bytes(STRATA_COMPRESS_INT8, n) == n + 8 * blocks, "int8");
    CHECK(strata_compress_wire_bytes(STRATA_COMPRESS_FP8, n) == n + 4 * blocks, "fp8");
    CHECK(strata_compress_wire_bytes(STRATA_COMPRESS_INT4, n) == (n + 1) / 2 + 8 * blocks, "int4");
    CHECK(strata_compress_wire_bytes(STRATA_COMPRESS_NONE, n) == 4 * n, "none");
  }
}

/* Every encoding's name parses back to it (STRATA_COMPRESS and strata bench --compress use the
 * parser), and int4 in particular. */
static void test_names(void) {
  for (int c = 0; c < STRATA_COMPRESS_COUNT; c++) {
    strata_compress back = STRATA_COMPRESS_COUNT;
    const char *name = strata_compress_name((strata_compress)c);
    CHECK(strata_compress_parse(name, &back) == STRATA_OK && back == (strata_compress)c,
          "compress %d: name '%s' does not parse back", c, name);
  }
  strata_compress c = STRATA_COMPRESS_COUNT;
  CHECK(strata_compress_parse("int4", &c) == STRATA_OK && c == STRATA_COMPRESS_INT4, "int4");
  CHECK(strcmp(strata_compress_name(STRATA_COMPRESS_INT4), "int4") == 0, "name of INT4");
  CHECK(strata_compress_is_lossy(STRATA_COMPRESS_INT4), "int4 is lossy");
  CHECK(strcmp(strata_compress_name(STRATA_COMPRESS_COUNT), "?") == 0, "out of range");
}

static void test_e4m3(void) {
  for (int c = 0; c < 256; c++) {
    float v = strata_e4m3_to_f32((uint8_t)c);
    if ((c & 0x7f) == 0x7f) {
      CHECK(isnan(v), "code %#x must be NaN", c);
      continue;
    }
    CHECK(strata_f32_to_e4m3(v) == c, "code %#x -> %g -> %#x", c, v, strata_f32_to_e4m3(v));
  }
  CHECK(strata_e4m3_to_f32(0x7e) == 448.0f, "largest finite is 448");
  CHECK(strata_e4m3_to_f32(0x01) == 0x1p-9f, "smallest subnormal is 2^-9");
  CHECK(strata_e4m3_to_f32(0x08) == 0x1p-6f, "smallest normal is 2^-6");
  CHECK(strata_f32_to_e4m3(1e6f) == 0x7e && strata_f32_to_e4m3(-1e6f) == 0xfe, "saturates");
  CHECK(strata_f32_to_e4m3(INFINITY) == 0x7e, "inf saturates (the block codec maps it to NaN)");
  CHECK((strata_f32_to_e4m3(NAN) & 0x7f) == 0x7f, "NaN stays NaN");
  /* ties to even: 1.0625 lies between 1.0 (mantissa 000) and 1.125 (001): even is 1.0 */
  CHECK(strata_e4m3_to_f32(strata_f32_to_e4m3(1.0625f)) == 1.0f, "tie to even (down)");
  CHECK(strata_e4m3_to_f32(strata_f32_to_e4m3(1.1875f)) == 1.25f, "tie to even (up)");
  CHECK(strata_e4m3_to_f32(strata_f32_to_e4m3(1.07f)) == 1.125f, "nearest");
  CHECK(strata_e4m3_to_f32(strata_f32_to_e4m3(0x1.8p-10f)) == 0x1p-9f, "subnormal tie to even");
}

/* Worst error of one round trip, against each encoding's own bound. */
static void test_round_trip(void) {
  enum { N = 256 * 40 + 77 };
  float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
  float *y2 = malloc(N * sizeof(float));
  uint8_t *wire = malloc(4 * N + 4096), *wire2 = malloc(4 * N + 4096);
  uint64_t seed = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < N; i++) {
    /* magnitudes from 1e-6 to 1e3, some blocks constant, some zero */
    int block = i / 256;
    float mag = powf(10.0f, (float)(block % 10) - 6.0f);
    x[i] = block == 7 ? 0.0f : block == 8 ? 3.5f : rng_unit(&seed) * mag;
  }
  for (int k = 0; k < NCODECS; k++) {
    strata_compress c = codecs[k];
    strata_compress_encode(c, x, N, wire);
    strata_compress_decode(c, wire, N, y);
    double worst = 0; /* error / allowed */
    for (int b = 0; b * 256 < N; b++) {
      int lo = b * 256, hi = lo + 256 < N ? lo + 256 : N;
      float mn = x[lo], mx = x[lo], amax = 0;
      for (int i = lo; i < hi; i++) {
        mn = fminf(mn, x[i]), mx = fmaxf(mx, x[i]), amax = fmaxf(amax, fabsf(x[i]));
      }
      for (int i = lo; i < hi; i++) {
        double err = fabs((double)y[i] - x[i]), allowed;
        if (c == STRATA_COMPRESS_BF16)
          allowed = fabs(x[i]) * 0x1p-8 + 1e-38;
        else if (c == STRATA_COMPRESS_F16)
          allowed = fabs(x[i]) * 0x1p-11 + 0x1p-25; /* f16 subnormals below 2^-14 */
        else if (c == STRATA_COMPRESS_INT8)
          allowed = ((double)mx - mn) / 510.0 * 1.0001 + fabs(x[i]) * 0x1p-23;
        else if (c == STRATA_COMPRESS_INT4)
          allowed = ((double)mx - mn) / 30.0 * 1.0001 + fabs(x[i]) * 0x1p-23;
        else /* fp8: 2^-4 relative as a normal; half the subnormal spacing 2^-10 * scale */
          allowed = fabs(x[i]) * 0x1p-4 + (double)amax / 448.0 * 2 * 0x1p-10;
        if (err / allowed > worst) worst = err / allowed;
        if (err > allowed) {
          CHECK(err <= allowed, "%s: x[%d] = %g decoded %g (error %g > %g)",
                strata_compress_name(c), i, x[i], y[i], err, allowed);
          break;
        }
      }
    }
    printf("codec %-5s %5.2f bits/value, worst error %.2f of its bound\n", strata_compress_name(c),
           8.0 * (double)strata_compress_wire_bytes(c, N) / N, worst);
    /* re-encoding what was decoded: lossless for the per-value encodings and fp8 (power-of-two
     * scales); within a hair for int8 and int4 */
    strata_compress_encode(c, y, N, wire2);
    strata_compress_decode(c, wire2, N, y2);
    int exact = c != STRATA_COMPRESS_INT8 && c != STRATA_COMPRESS_INT4;
    for (int i = 0; i < N; i++) {
      int same = exact ? memcmp(&y[i], &y2[i], 4) == 0
                       : fabsf(y2[i] - y[i]) <= 1e-6f * fabsf(x[i]) + 1e-6f * 3.5f;
      if (!same) {
        CHECK(same, "%s: re-encoding moved value %d: %a -> %a", strata_compress_name(c), i, y[i],
              y2[i]);
        break;
      }
    }
    /* decode_reduce == decode then sum, bit for bit */
    strata_reduce_fn sum = strata_reduce_kernel(STRATA_F32, STRATA_SUM);
    strata_compress_decode_reduce(c, wire, N, x, y2, sum);
    for (int i = 0; i < N; i++) {
      float want = x[i] + y[i];
      if (memcmp(&want, &y2[i], 4) != 0) {
        CHECK(0, "%s: decode_reduce[%d] %a != %a", strata_compress_name(c), i, y2[i], want);
        break;
      }
    }
  }
  free(x), free(y), free(y2), free(wire), free(wire2);
}

static void test_non_finite(void) {
  enum { N = 600 };
  float x[N], y[N];
  uint8_t wire[4 * N + 64];
  for (int i = 0; i < N; i++) x[i] = (float)i / N;
  x[10] = NAN;       /* block 0 */
  x[300] = INFINITY; /* block 1 */
  for (int k = 0; k < NCODECS; k++) {
    strata_compress c = codecs[k];
    strata_compress_encode(c, x, N, wire);
    strata_compress_decode(c, wire, N, y);
    CHECK(isnan(y[10]), "%s: NaN must stay NaN", strata_compress_name(c));
    CHECK(!isfinite(y[300]), "%s: inf must not become finite (%g)", strata_compress_name(c),
          y[300]);
    if (c == STRATA_COMPRESS_INT8 || c == STRATA_COMPRESS_FP8 || c == STRATA_COMPRESS_INT4) {
      CHECK(isnan(y[0]) && isnan(y[511]), "%s: a block with NaN/inf decodes to NaN",
            strata_compress_name(c));
      CHECK(isfinite(y[599]) && fabsf(y[599] - x[599]) < 0.07f, "%s: other blocks unharmed (%g)",
            strata_compress_name(c), y[599]);
    }
  }
}

/* Encodes n values of x into a buffer of exactly wire_bytes (so ASan sees any overrun) framed by
 * guard bytes that must stay untouched, decodes into exactly n floats, and returns the largest
 * error divided by the per-block bound (max − min)/30 plus an ulp of slack (> 1: out of bounds). */
static double int4_round_trip(const float *x, size_t n, float *y, const char *what) {
  size_t bytes = (size_t)strata_compress_wire_bytes(STRATA_COMPRESS_INT4, n);
  uint8_t *frame = malloc(bytes + 32);
  memset(frame, 0xa5, bytes + 32);
  uint8_t *wire = frame + 16;
  float *exact_y = malloc((n ? n : 1) * sizeof(float));
  strata_compress_encode(STRATA_COMPRESS_INT4, x, n, wire);
  int guards = 1;
  for (size_t i = 0; i < 16; i++) guards &= frame[i] == 0xa5 && wire[bytes + i] == 0xa5;
  CHECK(guards, "int4 %s: encode wrote outside its %zu bytes", what, bytes);
  strata_compress_decode(STRATA_COMPRESS_INT4, wire, n, exact_y);
  double worst = 0;
  for (size_t lo = 0; lo < n; lo += 256) {
    size_t hi = lo + 256 < n ? lo + 256 : n;
    float mn = x[lo], mx = x[lo];
    for (size_t i = lo; i < hi; i++) mn = fminf(mn, x[i]), mx = fmaxf(mx, x[i]);
    for (size_t i = lo; i < hi; i++) {
      double allowed = ((double)mx - mn) / 30.0 * 1.0001 + fabs(x[i]) * 0x1p-23 + 1e-30;
      double err = fabs((double)exact_y[i] - x[i]);
      if (err / allowed > worst) worst = err / allowed;
    }
  }
  memcpy(y, exact_y, n * sizeof(float));
  free(frame), free(exact_y);
  return worst;
}

static void test_int4(void) {
  enum { N = 256 * 3 + 101 }; /* three whole blocks, then a partial one of odd length */
  static float x[N], y[N];
  uint64_t seed = 0x5eed5eedULL;

  /* the bound strata_compress_error_bound states, on blocks spanning [-m, m] */
  const double ms[] = {1e-5, 1.0, 3e4};
  for (size_t t = 0; t < sizeof ms / sizeof *ms; t++) {
    for (int i = 0; i < N; i++) x[i] = rng_unit(&seed) * (float)ms[t];
    double worst = int4_round_trip(x, N, y, "random");
    CHECK(worst <= 1.0, "int4 random m=%g: error %.3f of the block bound", ms[t], worst);
    double bound = strata_compress_error_bound(STRATA_COMPRESS_INT4, ms[t]), err = 0;
    for (int i = 0; i < N; i++) err = fmax(err, fabs((double)y[i] - x[i]));
    CHECK(err <= bound * 1.0001, "int4 m=%g: error %g > error_bound %g", ms[t], err, bound);
    CHECK(err > bound * 0.5, "int4 m=%g: error %g, suspiciously far below %g (16 levels?)", ms[t],
          err, bound);
  }

  /* every length up to two blocks and a bit: partial blocks, odd counts (a trailing half byte) */
  for (size_t n = 0; n <= 2 * 256 + 3; n++) {
    for (size_t i = 0; i < n; i++) x[i] = rng_unit(&seed);
    double worst = int4_round_trip(x, n, y, "length");
    if (worst > 1.0) {
      CHECK(worst <= 1.0, "int4 n=%zu: error %.3f of the bound", n, worst);
      break;
    }
  }

  /* the grid itself decodes exactly, and the packing is low nibble first */
  for (int i = 0; i < 17; i++) x[i] = (float)(i % 16) - 5.0f; /* min -5, step 1, 17 values */
  uint8_t wire[8 + 9];
  strata_compress_encode(STRATA_COMPRESS_INT4, x, 17, wire);
  float lo, step;
  memcpy(&lo, wire, 4), memcpy(&step, wire + 4, 4);
  CHECK(lo == -5.0f && step == 1.0f, "int4 header: min %g step %g", lo, step);
  CHECK(wire[8] == 0x10 && wire[9] == 0x32 && wire[15] == 0xfe && wire[16] == 0x00,
        "int4 packing: %02x %02x .. %02x %02x", wire[8], wire[9], wire[15], wire[16]);
  strata_compress_decode(STRATA_COMPRESS_INT4, wire, 17, y);
  CHECK(memcmp(x, y, 17 * sizeof(float)) == 0, "int4: values on the grid decode exactly");

  /* constant blocks (step 0) are exact, whole or partial, including zero and a huge value */
  const float constants[] = {3.25f, 0.0f, -1e-20f, 3e38f};
  for (size_t t = 0; t < sizeof constants / sizeof *constants; t++) {
    for (int i = 0; i < N; i++) x[i] = constants[t];
    double worst = int4_round_trip(x, N, y, "constant");
    CHECK(worst == 0 && memcmp(x, y, sizeof x) == 0, "int4 constant %g not exact (%g)",
          constants[t], y[N - 1]);
  }

  /* large magnitudes: max − min near the top of f32's range */
  for (int i = 0; i < 256; i++) x[i] = i & 1 ? 1.5e38f : -1.5e38f;
  double worst = int4_round_trip(x, 256, y, "extremes");
  CHECK(worst <= 1.0 && isfinite(y[0]) && isfinite(y[1]), "int4 extremes: %g %g (%.3f)", y[0], y[1],
        worst);

  /* a non-finite value in the partial block: that block is NaN, the others intact */
  for (int i = 0; i < N; i++) x[i] = rng_unit(&seed);
  x[N - 1] = -INFINITY;
  static uint8_t packed[N];
  strata_compress_encode(STRATA_COMPRESS_INT4, x, N, packed);
  strata_compress_decode(STRATA_COMPRESS_INT4, packed, N, y);
  CHECK(isnan(y[3 * 256]) && isnan(y[N - 1]) && isfinite(y[3 * 256 - 1]),
        "int4: -inf in the last block: %g %g %g", y[3 * 256], y[N - 1], y[3 * 256 - 1]);
}

/* ------------------------------------------------------- part 2: compressed collectives --- */
enum { COUNT = 100003 };

static void fill_rank(float *buf, size_t count, int rank) {
  uint64_t seed = 0x1234567ULL + (uint64_t)rank * 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i < count; i++) buf[i] = rng_unit(&seed);
}

static double unit_error(strata_compress c, double m) {
  return strata_compress_error_bound(c, m);
}

/* Where every rank must end with the same bytes (docs/compression.md): per-value encodings
 * always; block encodings when every message cuts blocks at the same places — the ring, and
 * halving-doubling on a power of two. */
static int must_match(strata_compress c, strata_algo algo, int n) {
  if (c == STRATA_COMPRESS_BF16 || c == STRATA_COMPRESS_F16) return 1;
  return algo == STRATA_ALGO_RING || (algo == STRATA_ALGO_RHD && (n & (n - 1)) == 0);
}

static int run_allreduce(strata_comm *comm, int rank, int n, strata_compress c, strata_algo algo,
                         const double *exact, float *buf) {
  int bad = 0;
  fill_rank(buf, COUNT, rank);
  strata_comm_stats before, after;
  strata_comm_get_stats(comm, &before);
  strata_coll_args a = {.coll = STRATA_COLL_ALLREDUCE,
                        .sendbuf = buf,
                        .recvbuf = buf,
                        .count = COUNT,
                        .dtype = STRATA_F32,
                        .op = STRATA_SUM,
                        .algo = algo,
                        .compress = c};
  int status = strata_collective(comm, &a, NULL);
  if (status == STRATA_ERR_UNSUPPORTED) return 0; /* the algorithm does not apply here */
  if (status != STRATA_OK) {
    fprintf(stderr, "rank %d: %s %s: %s\n", rank, strata_compress_name(c), strata_algo_name(algo),
            strata_strerror(status));
    return 1;
  }
  strata_comm_get_stats(comm, &after);
  /* a value passes through at most 2n quantizations (ring: n-1 partial sums + 1 final; trees and
   * halving-doubling: 2 log n), each bounded by the encoding's error at the partial sum's size */
  double bound = 2.0 * n * unit_error(c, n), worst = 0, sq = 0;
  for (size_t i = 0; i < COUNT; i++) {
    double err = fabs((double)buf[i] - exact[i]);
    sq += err * err;
    if (err > worst) worst = err;
  }
  if (!(worst <= bound)) {
    fprintf(stderr, "rank %d: %s %s: max error %g > bound %g\n", rank, strata_compress_name(c),
            strata_algo_name(algo), worst, bound);
    bad++;
  }
  /* the same bytes on every rank: compare a hash of the result */
  uint64_t h = 1469598103934665603ULL, *hs = malloc(sizeof(uint64_t) * (size_t)n);
  const uint8_t *p = (const uint8_t *)buf;
  for (size_t i = 0; i < COUNT * sizeof(float); i++) h = (h ^ p[i]) * 1099511628211ULL;
  if (strata_allgather(comm, &h, hs, 1, STRATA_U64) != STRATA_OK) bad++;
  int same_everywhere = 1;
  for (int r = 0; r < n; r++) same_everywhere &= hs[r] == h;
  free(hs);
  if (!same_everywhere && must_match(c, algo, n)) {
    fprintf(stderr, "rank %d: %s %s: result differs between ranks\n", rank, strata_compress_name(c),
            strata_algo_name(algo));
    bad++;
  } else if (!same_everywhere) {
    /* allowed to differ, by no more than the encoding's error: compare with rank 0's */
    float *ref = malloc(sizeof(float) * COUNT);
    memcpy(ref, buf, sizeof(float) * COUNT);
    if (strata_broadcast(comm, ref, ref, COUNT, STRATA_F32, 0) != STRATA_OK) bad++;
    double diff = 0;
    for (size_t i = 0; i < COUNT; i++) diff = fmax(diff, fabs((double)ref[i] - buf[i]));
    if (!(diff <= bound)) {
      fprintf(stderr, "rank %d: %s %s: differs from rank 0 by %g > %g\n", rank,
              strata_compress_name(c), strata_algo_name(algo), diff, bound);
      bad++;
    }
    if (rank == 0)
      printf("  (%s %s: ranks differ, within the bound)\n", strata_compress_name(c),
             strata_algo_name(algo));
    free(ref);
  }
  uint64_t data = after.data_bytes_sent - before.data_bytes_sent;
  uint64_t wire = after.wire_bytes_sent - before.wire_bytes_sent;
  double ratio = data ? (double)wire / (double)data : 0;
  double want = (double)strata_compress_wire_bytes(c, 1 << 20) / (4 << 20);
  /* small messages pay relatively more block headers: allow 2% */
  if (data == 0 || ratio < want * 0.999 || ratio > want * 1.02) {
    fprintf(stderr, "rank %d: %s: wire/data %.4f, expected ~%.4f\n", rank, strata_compress_name(c),
            ratio, want);
    bad++;
  }
  if (rank == 0)
    printf(
        "  %d ranks %-6s %-5s  wire %5.1f%% of data (%llu of %llu B)  max error %.2e "
        "(bound %.2e) rms %.2e\n",
        n, strata_algo_name(algo), strata_compress_name(c), 100 * ratio, (unsigned long long)wire,
        (unsigned long long)data, worst, bound, sqrt(sq / COUNT));
  return bad;
}

/* Broadcast, allgather and reduce-scatter compressed: within one quantization (bcast, gather)
 * or the reduction bound. */
static int run_others(strata_comm *comm, int rank, int n, strata_compress c, const double *exact,
                      float *buf) {
  int bad = 0;
  float *all = malloc(sizeof(float) * COUNT * (size_t)n);
  /* broadcast from the last rank */
  fill_rank(buf, COUNT, n - 1);
  float *ref = malloc(sizeof(float) * COUNT);
  fill_rank(ref, COUNT, n - 1);
  strata_coll_args a = {.coll = STRATA_COLL_BROADCAST,
                        .sendbuf = buf,
                        .recvbuf = buf,
                        .count = COUNT,
                        .dtype = STRATA_F32,
                        .root = n - 1,
                        .compress = c};
  if (strata_collective(comm, &a, NULL) != STRATA_OK) bad++;
  for (size_t i = 0; i < COUNT && !bad; i++)
    if (fabs((double)buf[i] - ref[i]) > unit_error(c, 1.0) * 1.0001) {
      fprintf(stderr, "rank %d: %s broadcast [%zu] %g vs %g\n", rank, strata_compress_name(c), i,
              buf[i], ref[i]);
      bad++;
    }
  /* allgather (out of place) */
  fill_rank(buf, COUNT, rank);
  a = (strata_coll_args){.coll = STRATA_COLL_ALLGATHER,
                         .sendbuf = buf,
                         .recvbuf = all,
                         .count = COUNT,
                         .dtype = STRATA_F32,
                         .compress = c};
  if (strata_collective(comm, &a, NULL) != STRATA_OK) bad++;
  for (int r = 0; r < n && !bad; r++) {
    fill_rank(ref, COUNT, r);
    for (size_t i = 0; i < COUNT; i++)
      if (fabs((double)all[(size_t)r * COUNT + i] - ref[i]) > unit_error(c, 1.0) * 1.0001) {
        fprintf(stderr, "rank %d: %s allgather block %d [%zu]\n", rank, strata_compress_name(c), r,
                i);
        bad++;
        break;
      }
  }
  /* reduce-scatter: every rank contributes n blocks; block b of rank r is fill(r) scaled */
  for (int b = 0; b < n; b++) fill_rank(all + (size_t)b * COUNT, COUNT, rank);
  a = (strata_coll_args){.coll = STRATA_COLL_REDUCE_SCATTER,
                         .sendbuf = all,
                         .recvbuf = buf,
                         .count = COUNT,
                         .dtype = STRATA_F32,
                         .op = STRATA_SUM,
                         .compress = c};
  if (strata_collective(comm, &a, NULL) != STRATA_OK) bad++;
  double bound = 2.0 * n * unit_error(c, n);
  for (size_t i = 0; i < COUNT && !bad; i++)
    if (fabs((double)buf[i] - exact[i]) > bound) {
      fprintf(stderr, "rank %d: %s reduce_scatter [%zu] %g vs %g\n", rank, strata_compress_name(c),
              i, buf[i], exact[i]);
      bad++;
    }
  free(all);
  free(ref);
  return bad;
}

/* Recursive doubling (small calls) at a rank count that is not a power of two: the folded rank
 * gets the result through one more quantization than the other doubling ranks hold, and every
 * rank must still end with the same bytes. */
static int run_allreduce_small(strata_comm *comm, int rank, int n, strata_compress c) {
  enum { SMALL = 300 };
  float buf[SMALL];
  uint64_t h = 1469598103934665603ULL, hs[16];
  fill_rank(buf, SMALL, rank);
  strata_coll_args a = {.coll = STRATA_COLL_ALLREDUCE,
                        .sendbuf = buf,
                        .recvbuf = buf,
                        .count = SMALL,
                        .dtype = STRATA_F32,
                        .op = STRATA_AVG,
                        .algo = STRATA_ALGO_RHD,
                        .compress = c};
  if (n > 16 || strata_collective(comm, &a, NULL) != STRATA_OK) return 1;
  const uint8_t *p = (const uint8_t *)buf;
  for (size_t i = 0; i < sizeof buf; i++) h = (h ^ p[i]) * 1099511628211ULL;
  if (strata_allgather(comm, &h, hs, 1, STRATA_U64) != STRATA_OK) return 1;
  for (int r = 0; r < n; r++)
    if (hs[r] != h) {
      fprintf(stderr, "rank %d: %s rhd, %d values: result differs from rank %d's\n", rank,
              strata_compress_name(c), SMALL, r);
      return 1;
    }
  return 0;
}

typedef struct coll_arg {
  int shm;
} coll_arg;

static int body(strata_comm *comm, int rank, int n, int init_status, void *varg) {
  coll_arg *arg = varg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  int bad = 0;
  float *buf = malloc(sizeof(float) * COUNT), *tmp = malloc(sizeof(float) * COUNT);
  double *exact = calloc(COUNT, sizeof(double));
  for (int r = 0; r < n; r++) {
    fill_rank(tmp, COUNT, r);
    for (size_t i = 0; i < COUNT; i++) exact[i] += tmp[i];
  }
  const strata_algo algos[] = {STRATA_ALGO_RING, STRATA_ALGO_RHD, STRATA_ALGO_TREE,
                               STRATA_ALGO_DIRECT};
  for (int k = 0; k < NCODECS; k++)
    for (int j = 0; j < 4; j++)
      bad += run_allreduce(comm, rank, n, codecs[k], algos[j], exact, buf);
  for (int k = 0; k < NCODECS; k++) bad += run_others(comm, rank, n, codecs[k], exact, buf);
  for (int k = 0; k < NCODECS; k++) bad += run_allreduce_small(comm, rank, n, codecs[k]);

  /* a compressed call on other data than f32 is refused, on every rank alike */
  int32_t ints[4] = {1, 2, 3, 4};
  strata_coll_args a = {.coll = STRATA_COLL_ALLREDUCE,
                        .sendbuf = ints,
                        .recvbuf = ints,
                        .count = 4,
                        .dtype = STRATA_I32,
                        .op = STRATA_SUM,
                        .compress = STRATA_COMPRESS_BF16};
  if (strata_collective(comm, &a, NULL) != STRATA_ERR_UNSUPPORTED) {
    fprintf(stderr, "rank %d: compressed i32 allreduce was not refused\n", rank);
    bad++;
  }
  a.compress = (strata_compress)99;
  if (strata_collective(comm, &a, NULL) != STRATA_ERR_INVALID_ARG) bad++;
  /* every rank has made its refused calls before any rank breaks the communicator below (a
   * broken communicator answers every later call with its error, before checking arguments) */
  if (strata_barrier(comm) != STRATA_OK) bad++;

  /* ranks that disagree on the encoding: a mismatch on every rank, never a hang or garbage.
   * (Last: it breaks the communicator.) */
  if (arg->shm >= 0) {
    fill_rank(buf, COUNT, rank);
    a = (strata_coll_args){.coll = STRATA_COLL_ALLREDUCE,
                           .sendbuf = buf,
                           .recvbuf = buf,
                           .count = COUNT,
                           .dtype = STRATA_F32,
                           .op = STRATA_SUM,
                           .compress = rank == 0 ? STRATA_COMPRESS_BF16 : STRATA_COMPRESS_NONE};
    int status = strata_collective(comm, &a, NULL);
    if (status != STRATA_ERR_MISMATCH) {
      fprintf(stderr, "rank %d: disagreeing encodings gave %s, not a mismatch\n", rank,
              strata_strerror(status));
      bad++;
    }
  }
  free(buf), free(tmp), free(exact);
  return bad != 0;
}

int main(void) {
  test_wire_bytes();
  test_names();
  test_e4m3();
  test_round_trip();
  test_non_finite();
  test_int4();
  int failed = failures;
  for (int shm = 1; shm >= 0; shm--)
    for (int n = 2; n <= 4; n++) {
      if (!shm && n == 3) continue; /* bounded run time: tcp at 2 and 4 */
      coll_arg arg = {.shm = shm};
      strata_test_ranks_opts o = {.shm = shm, .timeout_s = 20, .deadline_s = 180};
      printf("%s, %d ranks:\n", shm ? "shm" : "tcp", n);
      fflush(stdout);
      int bad = strata_test_run_ranks(n, &o, body, &arg);
      printf("%s %d ranks: %s\n", shm ? "shm" : "tcp", n, bad ? "FAILED" : "ok");
      failed += bad != 0;
    }
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
