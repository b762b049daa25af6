// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_weights.c — libFuzzer harness for the weight-sync blob decoder (src/train/weights_codec.c):
 * the input is one version's bytes as a subscriber receives them, applied to a staging copy of a
 * small set (bf16 [7,5], f16 [3], f32 [2]). Every input must be applied (STRATA_OK) or refused
 * with STRATA_ERR_PROTOCOL and a sentence, without reading or writing outside the blob and the
 * staging tensors, leaking, or spinning; a tensor the decoder wrote must be marked touched.
 * The same bytes fed as a stream (weights_full_apply_prefix, pieces of 1 + size % 13 bytes, as
 * chunks arrive) must end the same way: a full copy applied in pieces is the one applied whole.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint16_t w[35], b[3];
  static float s[2];
  static weights_set set;
  static int ready;
  if (!ready) {
    strata_weights_tensor t[3] = {{"w", w, STRATA_BF16, 2, {7, 5}},
                                  {"b", b, STRATA_F16, 1, {3}},
                                  {"s", s, STRATA_F32, 1, {2}}};
    char err[256];
    if (weights_set_init(&set, t, 3, err, sizeof err) != STRATA_OK) abort();
    ready = 1;
  }
  uint16_t sw[35] = {0}, sb[3] = {0};
  float ss[2] = {0};
  uint8_t *staging[3] = {(uint8_t *)sw, (uint8_t *)sb, (uint8_t *)ss};
  uint8_t before[3][70];
  for (int i = 0; i < 3; i++) memcpy(before[i], staging[i], set.tensors[i].bytes);
  const size_t map[3] = {0, 1, 2};
  uint8_t touched[3] = {0};
  char err[512] = "";
  /* a copy of exactly `size` bytes, so a read past the blob is caught */
  uint8_t *blob = malloc(size ? size : 1);
  if (!blob) return 0;
  memcpy(blob, data, size);
  int status = weights_blob_apply(&set, map, staging, touched, blob, size, err, sizeof err);
  if (status != STRATA_OK && (status != STRATA_ERR_PROTOCOL || !err[0])) abort();
  for (int i = 0; i < 3; i++)
    if (!touched[i] && memcmp(before[i], staging[i], set.tensors[i].bytes)) abort();
  weights_blob_header h;
  if (weights_blob_parse(blob, size, &h, err, sizeof err) == STRATA_OK &&
      h.kind == WEIGHTS_BLOB_FULL) {
    uint16_t pw[35] = {0}, pb[3] = {0};
    float ps[2] = {0};
    uint8_t *pieces[3] = {(uint8_t *)pw, (uint8_t *)pb, (uint8_t *)ps};
    uint8_t touched_too[3] = {0};
    weights_full_cursor c = {0};
    int streamed = STRATA_OK;
    size_t step = 1 + size % 13;
    for (size_t arrived = 0; arrived < size && streamed == STRATA_OK;) {
      arrived = size - arrived < step ? size : arrived + step;
      streamed = weights_full_apply_prefix(&set, map, pieces, touched_too, &c, blob, arrived, size,
                                           err, sizeof err);
    }
    weights_full_cursor_free(&c);
    if ((streamed == STRATA_OK) != (status == STRATA_OK)) abort();
    for (int i = 0; status == STRATA_OK && i < 3; i++)
      if (memcmp(pieces[i], staging[i], set.tensors[i].bytes)) abort();
  }
  free(blob);
  return 0;
}
