// SPDX-License-Identifier: Apache-2.0
/*
 * cipher.c — timing the TCP transport's frame sealing on this core (cipher.h).
 */
#include "model/cipher.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "net/seal.h"

static int measure_one(int cipher, uint8_t *buf, size_t piece, size_t bytes,
                       strata_cipher_rate *rate) {
  uint8_t key[STRATA_SEAL_KEY_BYTES], tag[STRATA_SEAL_TAG_BYTES];
  memset(key, 7, sizeof key);
  strata_seal tx, rx;
  if (strata_seal_init(&tx, 1, cipher, key) || strata_seal_init(&rx, 1, cipher, key)) {
    strata_seal_free(&tx);
    return STRATA_ERR_SYSTEM;
  }
  double seal_s = 0, open_s = 0;
  int bad = 0;
  for (size_t done = 0; done < bytes; done += piece) {
    double t0 = strata_now_s();
    bad |= strata_seal_close(&tx, buf, buf, piece, tag) != STRATA_OK;
    double t1 = strata_now_s();
    bad |= strata_seal_open(&rx, buf, buf, piece, tag) != STRATA_OK;
    open_s += strata_now_s() - t1;
    seal_s += t1 - t0;
  }
  strata_seal_free(&tx);
  strata_seal_free(&rx);
  if (bad) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "%s did not seal or open its own frames", rate->name);
    return STRATA_ERR_SYSTEM;
  }
  size_t moved = (bytes + piece - 1) / piece * piece;
  rate->seal_gbps = seal_s > 0 ? (double)moved / seal_s / 1e9 : 0;
  rate->open_gbps = open_s > 0 ? (double)moved / open_s / 1e9 : 0;
  return STRATA_OK;
}

int strata_cipher_measure(size_t piece, size_t bytes,
                          strata_cipher_rate rates[STRATA_CIPHER_COUNT]) {
  static const struct {
    int cipher;
    const char *name;
  } ciphers[STRATA_CIPHER_COUNT] = {{STRATA_SEAL_CHACHA20_POLY1305, "ChaCha20-Poly1305"},
                                    {STRATA_SEAL_AES256_GCM, "AES-256-GCM"}};
  if (piece == 0) return STRATA_ERR_INVALID_ARG;
  uint8_t *buf = malloc(piece);
  if (!buf) return STRATA_ERR_NO_MEMORY;
  memset(buf, 0x5a, piece);
  int status = STRATA_OK;
  for (int i = 0; i < STRATA_CIPHER_COUNT && status == STRATA_OK; i++) {
    rates[i] = (strata_cipher_rate){.name = ciphers[i].name};
    rates[i].available = ciphers[i].cipher != STRATA_SEAL_AES256_GCM || strata_seal_aes_available();
    if (rates[i].available) status = measure_one(ciphers[i].cipher, buf, piece, bytes, &rates[i]);
  }
  free(buf);
  return status;
}
