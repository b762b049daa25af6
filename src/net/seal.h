// SPDX-License-Identifier: Apache-2.0
/*
 * seal.h — authenticated encryption of one direction of one TCP connection (seal.c).
 *
 * Each direction of each connection has its own key, agreed in the handshake, and a counter of
 * the AEAD operations done under it, which is the nonce: the sender and the receiver count the
 * same frames in the same order, so a frame that is dropped, replayed, reordered or altered fails
 * to open, and the nonce never travels. Before a counter could repeat (long before: after
 * STRATA_SEAL_REKEY_AFTER operations) both ends step the key forward by a one-way hash at the same
 * operation, so no (key, nonce) pair is ever used twice.
 */
#ifndef STRATA_NET_SEAL_H
#define STRATA_NET_SEAL_H

#include <stddef.h>
#include <stdint.h>

#define STRATA_SEAL_KEY_BYTES 32
#define STRATA_SEAL_TAG_BYTES 16
#define STRATA_SEAL_REKEY_AFTER (1ull << 32)

typedef enum strata_seal_cipher {
  STRATA_SEAL_CHACHA20_POLY1305 = 0, /* everywhere */
  STRATA_SEAL_AES256_GCM = 1         /* when both ends' CPUs have AES-NI and CLMUL */
} strata_seal_cipher;

/* What the handshake agreed for one connection. */
typedef struct strata_seal_keys {
  int encrypt;                       /* 0: frames travel in clear */
  int cipher;                        /* strata_seal_cipher */
  uint8_t tx[STRATA_SEAL_KEY_BYTES]; /* our frames to the peer */
  uint8_t rx[STRATA_SEAL_KEY_BYTES]; /* the peer's frames to us */
} strata_seal_keys;

struct evp_cipher_ctx_st; /* OpenSSL's EVP_CIPHER_CTX, kept out of every includer */

typedef struct strata_seal {
  int on;
  int cipher;
  int failed;           /* the cipher library failed once: every later operation fails */
  uint64_t counter;     /* operations done under the current key */
  uint64_t rekey_after; /* STRATA_SEAL_REKEY_AFTER, smaller in tests */
  uint8_t key[STRATA_SEAL_KEY_BYTES];
  struct evp_cipher_ctx_st *ctx; /* keyed once (and at each rekey); only the nonce per frame */
} strata_seal;

/* 1 when this CPU has AES-NI and PCLMUL, so AES-256-GCM is fast and constant-time here. */
int strata_seal_aes_available(void);

/* Set up one direction from the agreed key. STRATA_OK, STRATA_ERR_NO_MEMORY, or
 * STRATA_ERR_SYSTEM when the cipher library cannot provide the cipher. */
int strata_seal_init(strata_seal *s, int on, int cipher, const uint8_t key[STRATA_SEAL_KEY_BYTES]);
void strata_seal_free(strata_seal *s);

/* out = ciphertext of in (len bytes; out == in allowed), tag = its authenticator. STRATA_OK, or
 * STRATA_ERR_SYSTEM when the cipher library failed (the direction is then unusable). */
int strata_seal_close(strata_seal *s, uint8_t *out, const uint8_t *in, size_t len,
                      uint8_t tag[STRATA_SEAL_TAG_BYTES]);
/* out = plaintext of in (out == in allowed). STRATA_OK when tag verifies; STRATA_ERR_PROTOCOL
 * when it does not, STRATA_ERR_SYSTEM when the cipher library failed: then out holds zeros, never
 * unverified plaintext. */
int strata_seal_open(strata_seal *s, uint8_t *out, const uint8_t *in, size_t len,
                     const uint8_t tag[STRATA_SEAL_TAG_BYTES]);
/* Count one operation without doing it (a frame the receiver discards unread). STRATA_OK, or
 * STRATA_ERR_SYSTEM when a rekey it reached failed. */
int strata_seal_skip(strata_seal *s);

/* Tests: rekey after this many operations instead of STRATA_SEAL_REKEY_AFTER (0 = default). */
void strata_seal_set_rekey_after_for_test(uint64_t operations);
/* Tests: 0 = act as if this CPU had no AES-NI (ChaCha20-Poly1305 then). */
void strata_seal_set_aes_for_test(int allowed);

#endif
