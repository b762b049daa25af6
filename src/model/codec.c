// SPDX-License-Identifier: Apache-2.0
/*
 * codec.c — timing the wire encodings of compressed collectives on this core (codec.h).
 */
#include "model/codec.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/compress.h"
#include "core/core.h"

int strata_codec_measure(strata_compress c, size_t values, int rounds, strata_codec_rate *out) {
  if (!out || values == 0 || rounds < 1 || !strata_compress_is_lossy(c))
    return STRATA_ERR_INVALID_ARG;
  *out = (strata_codec_rate){.codec = c};
  float *src = malloc(values * sizeof *src), *back = malloc(values * sizeof *back);
  uint8_t *wire = malloc((size_t)strata_compress_wire_bytes(c, values));
  int status = src && back && wire ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  /* an outer gradient's look: signs mixed, magnitudes spread over a few decades */
  double amax = 0;
  for (size_t i = 0; status == STRATA_OK && i < values; i++) {
    src[i] = (float)(sin(0.001 * (double)i) * exp(-3.0 * (double)(i % 997) / 997.0));
    amax = fmax(amax, fabs(src[i]));
  }
  double best_encode = INFINITY, best_decode = INFINITY;
  for (int r = 0; status == STRATA_OK && r < rounds; r++) {
    double t0 = strata_now_s();
    strata_compress_encode(c, src, values, wire);
    double t1 = strata_now_s();
    strata_compress_decode(c, wire, values, back);
    double t2 = strata_now_s();
    best_encode = fmin(best_encode, t1 - t0);
    best_decode = fmin(best_decode, t2 - t1);
  }
  double bound = strata_compress_error_bound(c, amax);
  for (size_t i = 0; status == STRATA_OK && i < values; i++)
    if (!(fabs((double)back[i] - (double)src[i]) <= bound)) status = STRATA_ERR_SYSTEM;
  if (status == STRATA_OK) {
    double bytes = (double)values * sizeof(float);
    out->encode_gbps = best_encode > 0 ? bytes / best_encode / 1e9 : 0;
    out->decode_gbps = best_decode > 0 ? bytes / best_decode / 1e9 : 0;
  }
  free(src), free(back), free(wire);
  return status;
}
