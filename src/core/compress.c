// SPDX-License-Identifier: Apache-2.0
/*
 * compress.c — the wire encodings of compress.h: bf16/f16 (per value), int8 and int4 with a
 * per-block minimum and step, fp8 e4m3 with a per-block power-of-two scale.
 *
 * Why a power of two for fp8: scaling by 2^k changes only exponents, so a block that was decoded
 * and is sent on again (a ring forwarding what it received) re-encodes to exactly the same values.
 * int8 and int4 keep the tightest step ((max − min)/255, /15) for accuracy; re-encoding decoded
 * data can move a value by an ulp of the step, which docs/compression.md states. int4 is int8's
 * scheme with 16 levels, so both share one encoder (min_step_codes) and differ only in packing.
 *
 * Never: read or write past n values / wire_bytes bytes, or turn a non-finite input into a
 * finite output.
 */
#include "core/compress.h"

#include <math.h>
#include <string.h>

#include "core/core.h"

int strata_compress_is_lossy(strata_compress c) {
  return c == STRATA_COMPRESS_BF16 || c == STRATA_COMPRESS_F16 || c == STRATA_COMPRESS_INT8 ||
         c == STRATA_COMPRESS_FP8 || c == STRATA_COMPRESS_INT4;
}

static uint64_t blocks_of(uint64_t n) {
  return (n + STRATA_COMPRESS_BLOCK - 1) / STRATA_COMPRESS_BLOCK;
}

/* Block header sizes (bytes). */
enum { INT8_HEADER = 8, FP8_HEADER = 4, INT4_HEADER = 8 };

uint64_t strata_compress_wire_bytes(strata_compress c, uint64_t n) {
  switch (c) {
    case STRATA_COMPRESS_BF16:
    case STRATA_COMPRESS_F16:
      return 2 * n;
    case STRATA_COMPRESS_INT8:
      return n + INT8_HEADER * blocks_of(n);
    case STRATA_COMPRESS_FP8:
      return n + FP8_HEADER * blocks_of(n);
    case STRATA_COMPRESS_INT4: /* two codes a byte; only the last block can end in half a byte */
      return (n + 1) / 2 + INT4_HEADER * blocks_of(n);
    default:
      return 4 * n;
  }
}

double strata_compress_error_bound(strata_compress c, double m) {
  switch (c) {
    case STRATA_COMPRESS_BF16:
      return m * 0x1p-8; /* half an ulp of 8 significant bits, with room for the carry */
    case STRATA_COMPRESS_F16:
      return m * 0x1p-11;
    case STRATA_COMPRESS_INT8:
      return 2 * m / 510.0; /* step/2, the block spanning at most [-m, m] */
    case STRATA_COMPRESS_FP8:
      return m * 0x1p-4 + m / 448.0 * 0x1p-9; /* relative as a normal + subnormal spacing */
    case STRATA_COMPRESS_INT4:
      return 2 * m / 30.0; /* step/2 = (max − min)/30, the block spanning at most [-m, m] */
    default:
      return 0;
  }
}

/* ---- fp8 e4m3 ---- */
uint8_t strata_f32_to_e4m3(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
  uint32_t mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) return 0x7f; /* NaN */
  float a;
  memcpy(&a, &mag, 4);
  if (a >= 448.0f) return sign | 0x7e; /* saturate: e4m3 has no infinity */
  if (a < 0x1p-6f) {
    /* subnormal: a = m · 2^-9, m in 0..8 (8 is the smallest normal, code 8) */
    return sign | (uint8_t)nearbyintf(a * 0x1p9f);
  }
  /* normal: keep 3 mantissa bits, nearest even; a carry moves into the exponent */
  uint32_t rounded = mag + 0x7ffffu + ((mag >> 20) & 1u);
  uint32_t code = (rounded >> 20) - (120u << 3); /* rebias 127 -> 7 */
  if (code > 0x7e) code = 0x7e;
  return sign | (uint8_t)code;
}

float strata_e4m3_to_f32(uint8_t code) {
  uint32_t exp = (code >> 3) & 0xf, mant = code & 7;
  float v;
  if ((code & 0x7f) == 0x7f)
    v = NAN;
  else if (exp == 0)
    v = ldexpf((float)mant, -9);
  else
    v = ldexpf((float)(8 + mant), (int)exp - 10);
  return (code & 0x80) ? -v : v;
}

static float e4m3_table[256];
static int e4m3_table_ready;

static const float *e4m3_values(void) {
  if (!__atomic_load_n(&e4m3_table_ready, __ATOMIC_ACQUIRE)) {
    for (int i = 0; i < 256; i++) e4m3_table[i] = strata_e4m3_to_f32((uint8_t)i);
    __atomic_store_n(&e4m3_table_ready, 1, __ATOMIC_RELEASE);
  }
  return e4m3_table;
}

/* The smallest power of two s with 448·s >= amax (amax > 0, finite). */
static float fp8_scale(float amax) {
  int e;
  frexpf(amax, &e); /* amax = m·2^e, m in [0.5, 1) */
  int k = e - 9;
  while (ldexpf(448.0f, k) < amax) k++;
  while (ldexpf(448.0f, k - 1) >= amax) k--;
  return ldexpf(1.0f, k);
}

static void fp8_encode_block(const float *v, size_t k, uint8_t *out) {
  float amax = 0;
  int finite = 1;
  for (size_t i = 0; i < k; i++) {
    float a = fabsf(v[i]);
    finite &= isfinite(a) != 0;
    amax = a > amax ? a : amax;
  }
  float scale = !finite ? NAN : amax > 0 ? fp8_scale(amax) : 1.0f;
  memcpy(out, &scale, 4);
  uint8_t *q = out + FP8_HEADER;
  if (!finite) {
    memset(q, 0, k);
    return;
  }
  float inv = 1.0f / scale; /* exact: a power of two */
  for (size_t i = 0; i < k; i++) q[i] = strata_f32_to_e4m3(v[i] * inv);
}

static void fp8_decode_block(const uint8_t *in, size_t k, float *dst) {
  const float *table = e4m3_values();
  float scale;
  memcpy(&scale, in, 4);
  const uint8_t *q = in + FP8_HEADER;
  for (size_t i = 0; i < k; i++) dst[i] = table[q[i]] * scale;
}

/* ---- int8 / int4: min and step ---- */
/* What the decoder computes for code q (kept in one place: the step search must agree with it). */
static inline float min_step_value(float lo, float step, uint8_t q) {
  float product = (float)q * step;
  __asm__("" : "+x"(product)); /* keep the product rounded: no fused multiply-add */
  return lo + product;
}

/* The smallest step s with lo + top·s >= hi as the decoder computes it (top = the largest code).
 * Choosing the smallest makes re-encoding decoded data find the same step again (its maximum is
 * lo + top·s, and no smaller step reaches it), so forwarded blocks do not drift. */
static float min_step_step(float lo, float hi, uint8_t top) {
  if (!(hi > lo)) return 0;
  float s = (float)(((double)hi - (double)lo) / top); /* in double: hi − lo may overflow */
  while (min_step_value(lo, s, top) < hi) s = nextafterf(s, INFINITY);
  for (;;) {
    float smaller = nextafterf(s, 0);
    if (smaller <= 0 || min_step_value(lo, smaller, top) < hi) break;
    s = smaller;
  }
  return s;
}

/* Writes the 8-byte header (f32 min, f32 step) of k values to `header` and their codes 0..top,
 * one per byte, to q: rounded to nearest. A block holding NaN or ±inf gets NaN for both (it
 * decodes to NaN throughout) and codes 0; a constant block gets step 0 and codes 0 (exact). */
static void min_step_codes(const float *v, size_t k, uint8_t top, uint8_t *header, uint8_t *q) {
  float lo = v[0], hi = v[0];
  int finite = 1;
  for (size_t i = 0; i < k; i++) {
    finite &= isfinite(v[i]) != 0;
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  if (!finite) {
    float nan = NAN;
    memcpy(header, &nan, 4);
    memcpy(header + 4, &nan, 4);
    memset(q, 0, k);
    return;
  }
  float step = min_step_step(lo, hi, top);
  memcpy(header, &lo, 4);
  memcpy(header + 4, &step, 4);
  if (step == 0) {
    memset(q, 0, k);
    return;
  }
  double inv = 1.0 / (double)step, ceiling = top;
  for (size_t i = 0; i < k; i++) {
    double x = ((double)v[i] - (double)lo) * inv + 0.5;
    q[i] = (uint8_t)(x >= ceiling ? top : x <= 0 ? 0 : (int)x);
  }
}

static void int8_encode_block(const float *v, size_t k, uint8_t *out) {
  min_step_codes(v, k, 255, out, out + INT8_HEADER);
}

static void int8_decode_block(const uint8_t *in, size_t k, float *dst) {
  float lo, step;
  memcpy(&lo, in, 4);
  memcpy(&step, in + 4, 4);
  const uint8_t *q = in + INT8_HEADER;
  for (size_t i = 0; i < k; i++) dst[i] = min_step_value(lo, step, q[i]);
}

/* int4 packs value 2j in the low nibble of byte j and value 2j+1 in its high nibble; an odd
 * block's last byte has a zero high nibble, so the wire bytes depend only on the data. */
static void int4_encode_block(const float *v, size_t k, uint8_t *out) {
  uint8_t q[STRATA_COMPRESS_BLOCK];
  min_step_codes(v, k, 15, out, q);
  uint8_t *packed = out + INT4_HEADER;
  for (size_t j = 0; j < k / 2; j++) packed[j] = (uint8_t)(q[2 * j] | q[2 * j + 1] << 4);
  if (k & 1) packed[k / 2] = q[k - 1];
}

static void int4_decode_block(const uint8_t *in, size_t k, float *dst) {
  float lo, step;
  memcpy(&lo, in, 4);
  memcpy(&step, in + 4, 4);
  const uint8_t *packed = in + INT4_HEADER;
  for (size_t j = 0; j < k / 2; j++) {
    dst[2 * j] = min_step_value(lo, step, packed[j] & 15);
    dst[2 * j + 1] = min_step_value(lo, step, packed[j] >> 4);
  }
  if (k & 1) dst[k - 1] = min_step_value(lo, step, packed[k / 2] & 15);
}

/* ---- dispatch ---- */
typedef void (*block_encode_fn)(const float *, size_t, uint8_t *);
typedef void (*block_decode_fn)(const uint8_t *, size_t, float *);

/* A block of k values takes wire_bytes(c, k) bytes: the header and its codes. */
static void blocks_encode(strata_compress c, const float *src, size_t n, uint8_t *wire,
                          block_encode_fn fn) {
  for (size_t at = 0; at < n; at += STRATA_COMPRESS_BLOCK) {
    size_t k = n - at < STRATA_COMPRESS_BLOCK ? n - at : STRATA_COMPRESS_BLOCK;
    fn(src + at, k, wire);
    wire += strata_compress_wire_bytes(c, k);
  }
}

static void blocks_decode(strata_compress c, const uint8_t *wire, size_t n, float *dst,
                          block_decode_fn fn) {
  for (size_t at = 0; at < n; at += STRATA_COMPRESS_BLOCK) {
    size_t k = n - at < STRATA_COMPRESS_BLOCK ? n - at : STRATA_COMPRESS_BLOCK;
    fn(wire, k, dst + at);
    wire += strata_compress_wire_bytes(c, k);
  }
}

void strata_compress_encode(strata_compress c, const float *src, size_t n, uint8_t *wire) {
  switch (c) {
    case STRATA_COMPRESS_BF16:
      strata_f32_to_bf16_array((uint16_t *)(void *)wire, src, n);
      break;
    case STRATA_COMPRESS_F16:
      strata_f32_to_f16_array((uint16_t *)(void *)wire, src, n);
      break;
    case STRATA_COMPRESS_INT8:
      blocks_encode(c, src, n, wire, int8_encode_block);
      break;
    case STRATA_COMPRESS_FP8:
      blocks_encode(c, src, n, wire, fp8_encode_block);
      break;
    case STRATA_COMPRESS_INT4:
      blocks_encode(c, src, n, wire, int4_encode_block);
      break;
    default:
      memcpy(wire, src, 4 * n);
  }
}

void strata_compress_decode(strata_compress c, const uint8_t *wire, size_t n, float *dst) {
  switch (c) {
    case STRATA_COMPRESS_BF16:
      strata_bf16_to_f32_array(dst, (const uint16_t *)(const void *)wire, n);
      break;
    case STRATA_COMPRESS_F16:
      strata_f16_to_f32_array(dst, (const uint16_t *)(const void *)wire, n);
      break;
    case STRATA_COMPRESS_INT8:
      blocks_decode(c, wire, n, dst, int8_decode_block);
      break;
    case STRATA_COMPRESS_FP8:
      blocks_decode(c, wire, n, dst, fp8_decode_block);
      break;
    case STRATA_COMPRESS_INT4:
      blocks_decode(c, wire, n, dst, int4_decode_block);
      break;
    default:
      memcpy(dst, wire, 4 * n);
  }
}

void strata_compress_decode_reduce(strata_compress c, const uint8_t *wire, size_t n,
                                   const float *src, float *dst, strata_reduce_fn reduce) {
  /* one block at a time through a small buffer that stays in L1 */
  float tmp[STRATA_COMPRESS_BLOCK * 8];
  const size_t step = STRATA_COMPRESS_BLOCK * 8;
  for (size_t at = 0; at < n; at += step) {
    size_t k = n - at < step ? n - at : step;
    /* at is a block multiple, so whole blocks (and whole bytes for int4) precede it */
    const uint8_t *w = wire + strata_compress_wire_bytes(c, at);
    strata_compress_decode(c, w, k, tmp);
    reduce(dst + at, src + at, tmp, k);
  }
}
