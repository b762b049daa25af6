// SPDX-License-Identifier: Apache-2.0
/*
 * codec.h — how fast one core of this host encodes and decodes a compressed collective's wire
 * (src/core/compress.c): the figures the planner's cost of a compressed outer exchange stands on
 * (physics.h, strata_codec_core_gbps), measured by `strata bench --codec`.
 */
#ifndef STRATA_MODEL_CODEC_H
#define STRATA_MODEL_CODEC_H

#include <stddef.h>

#include "strata.h"

typedef struct strata_codec_rate {
  strata_compress codec;
  double encode_gbps, decode_gbps; /* f32 bytes per second (1e9), one core */
} strata_codec_rate;

/* One core encodes and decodes `values` f32 values (a smooth pattern with a spread of
 * magnitudes) `rounds` times with codec c and keeps the best round of each; checks that what
 * comes back lies within the encoding's error bound. STRATA_OK; STRATA_ERR_INVALID_ARG (no
 * values, an unknown or lossless-free codec); STRATA_ERR_NO_MEMORY; STRATA_ERR_SYSTEM when the
 * decoded values are wrong. */
int strata_codec_measure(strata_compress c, size_t values, int rounds, strata_codec_rate *out);

#endif
