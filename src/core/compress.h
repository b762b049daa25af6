// SPDX-License-Identifier: Apache-2.0
/*
 * compress.h — wire encodings of f32 data (docs/compression.md).
 *
 * An encoding turns n f32 values into strata_compress_wire_bytes(c, n) bytes and back. The size
 * depends only on (encoding, n), so both ends of a transfer know it without a header: the engine
 * (src/engine) encodes each message of a compressed call as it is posted and decodes it when it
 * lands, reducing in f32.
 *
 * Formats (all little-endian, blocks of STRATA_COMPRESS_BLOCK values, the last one shorter):
 *  - bf16, f16: 2 bytes per value, round to nearest even (src/core/half.c). f16 overflows to inf
 *    past 65504.
 *  - int8: per block, f32 min and f32 step, then one byte q per value: v ≈ min + q·step,
 *    step = (max − min)/255, q rounded to nearest. Error ≤ step/2 per value.
 *  - int4: int8's header and rule with 16 levels, step = (max − min)/15, the codes q in 0..15
 *    packed two per byte (value 2j in the low nibble of byte j, 2j+1 in the high one; a block of
 *    odd length ends in a byte whose high nibble is 0). Error ≤ step/2 per value.
 *  - fp8: per block, f32 scale = amax/448, then one e4m3 byte per value (OCP FP8 E4M3: bias 7,
 *    no infinities, 448 the largest finite), value/scale rounded to nearest even. Relative error
 *    ≤ 2^-4 for normals; values below 2^-6·scale lose precision as subnormals.
 * A block holding NaN or ±inf decodes to NaN everywhere (int8, int4, fp8): a diverging value is
 * never hidden as a finite one. bf16 and f16 carry NaN and inf as they are.
 *
 * Invariants: encode writes exactly wire_bytes bytes and reads exactly n values; decode of encode
 * of a decoded block returns the same values (re-encoding what was received is lossless), which
 * is what lets the engine make senders keep what they sent.
 */
#ifndef STRATA_CORE_COMPRESS_H
#define STRATA_CORE_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h" /* strata_reduce_fn */
#include "strata.h"

enum { STRATA_COMPRESS_BLOCK = 256 };

/* 1 for the encodings that change the bytes (bf16, f16, int8, fp8, int4), 0 for NONE/DEFAULT. */
int strata_compress_is_lossy(strata_compress c);
/* Bytes on the wire for n f32 values. */
uint64_t strata_compress_wire_bytes(strata_compress c, uint64_t n);
void strata_compress_encode(strata_compress c, const float *src, size_t n, uint8_t *wire);
void strata_compress_decode(strata_compress c, const uint8_t *wire, size_t n, float *dst);
/* dst = src OP decode(wire), elementwise in f32 with the f32 kernel `reduce`; dst may equal src. */
void strata_compress_decode_reduce(strata_compress c, const uint8_t *wire, size_t n,
                                   const float *src, float *dst, strata_reduce_fn reduce);

/* FP8 E4M3 (OCP): nearest-even encoding of a float already scaled into range (saturates at
 * ±448; NaN -> 0x7f) and its exact decoding. */
uint8_t strata_f32_to_e4m3(float f);
float strata_e4m3_to_f32(uint8_t code);

#endif
