// SPDX-License-Identifier: Apache-2.0
/*
 * cipher.h — how fast this host's core seals and opens the TCP transport's frames with each
 * cipher it may agree (src/net/seal.c): the figure the planner's encryption cost stands on
 * (physics.c), measured by `strata bench --cipher`.
 */
#ifndef STRATA_MODEL_CIPHER_H
#define STRATA_MODEL_CIPHER_H

#include <stddef.h>

#define STRATA_CIPHER_COUNT 2

typedef struct strata_cipher_rate {
  const char *name; /* "ChaCha20-Poly1305", "AES-256-GCM" */
  int available;    /* 0: this CPU lacks what the cipher needs (AES-NI); no rates */
  double seal_gbps, open_gbps;
} strata_cipher_rate;

/* One core seals and opens `bytes` in frames of `piece` bytes with every cipher, in place, and
 * checks each frame opens. STRATA_OK; STRATA_ERR_NO_MEMORY; STRATA_ERR_SYSTEM when a cipher did
 * not start or did not open its own frames (the log says which). */
int strata_cipher_measure(size_t piece, size_t bytes,
                          strata_cipher_rate rates[STRATA_CIPHER_COUNT]);

#endif
