// SPDX-License-Identifier: Apache-2.0
/*
 * seal.c — the AEAD of the TCP data path (seal.h): AES-256-GCM where the CPU has AES-NI,
 * ChaCha20-Poly1305 (RFC 8439) otherwise, both through OpenSSL's EVP interface, with the operation
 * counter as nonce.
 *
 * Nonce layout (12 bytes): the 64-bit counter little-endian, then 4 zero bytes. No associated
 * data. Keys are never shared between directions or connections (handshake.c derives one per
 * direction), so a counter is unique per key by construction. The rekey step is
 * key' = BLAKE2b-256(key, "strata-rekey"), which both ends compute at the same operation without
 * any message.
 *
 * Why OpenSSL's libcrypto for the frames while libsodium keeps X25519, BLAKE2b and Argon2: its
 * AES-GCM and ChaCha20-Poly1305 use the CPU's widest vector units (VAES, VPCLMULQDQ, AVX-512
 * where present) and run at two to three times libsodium 1.0.18's speed on one core, and the
 * cipher is what bounds a sealed link on a fast network (docs/security.md). The bytes on the wire
 * are those libsodium's AEADs produce: tests/test_net_seal.c checks both ways.
 *
 * Each direction keeps one EVP context, keyed at init and at each rekey; a frame only sets its
 * nonce. OpenSSL decrypts before it checks the tag, so a frame that fails to open is wiped: no
 * unverified plaintext is ever left in the caller's buffer. After the library fails once (it
 * should not: nothing here allocates per frame) the direction refuses every later operation.
 */
#include <endian.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <string.h>

#include "core/core.h"
#include "net/seal.h"

#define SEAL_NONCE_BYTES 12
/* EVP counts in int: a longer buffer goes through in steps of this (a multiple of the block) */
#define SEAL_UPDATE_MAX_BYTES (1 << 30)

#ifdef STRATA_TEST_HOOKS
static uint64_t seal_rekey_after_for_test;
static int seal_aes_forbidden_for_test;

void strata_seal_set_aes_for_test(int allowed) {
  seal_aes_forbidden_for_test = !allowed;
}

void strata_seal_set_rekey_after_for_test(uint64_t operations) {
  seal_rekey_after_for_test = operations;
}
#else
enum { seal_rekey_after_for_test = 0, seal_aes_forbidden_for_test = 0 };
#endif

/* libsodium's test is exactly AES-NI and PCLMUL: the CPUs where OpenSSL's AES-GCM is both fast
 * and free of table lookups. Elsewhere the handshake picks ChaCha20-Poly1305. */
int strata_seal_aes_available(void) {
  if (sodium_init() < 0 || seal_aes_forbidden_for_test) return 0;
  return crypto_aead_aes256gcm_is_available();
}

static int seal_fail(strata_seal *s, const char *what) {
  char why[256];
  ERR_error_string_n(ERR_get_error(), why, sizeof why);
  ERR_clear_error();
  STRATA_LOG(STRATA_LOG_ERROR, -1, "seal: OpenSSL failed %s: %s", what, why);
  s->failed = 1;
  return STRATA_ERR_SYSTEM;
}

int strata_seal_init(strata_seal *s, int on, int cipher, const uint8_t key[STRATA_SEAL_KEY_BYTES]) {
  memset(s, 0, sizeof *s);
  s->on = on;
  if (!on) return STRATA_OK;
  if (sodium_init() < 0) return STRATA_ERR_SYSTEM;
  s->cipher = cipher;
  s->rekey_after = seal_rekey_after_for_test ? seal_rekey_after_for_test : STRATA_SEAL_REKEY_AFTER;
  memcpy(s->key, key, STRATA_SEAL_KEY_BYTES);
  s->ctx = EVP_CIPHER_CTX_new();
  if (!s->ctx) {
    strata_seal_free(s);
    return STRATA_ERR_NO_MEMORY;
  }
  const EVP_CIPHER *evp =
      cipher == STRATA_SEAL_AES256_GCM ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
  if (EVP_CipherInit_ex(s->ctx, evp, NULL, s->key, NULL, 1) != 1 ||
      EVP_CIPHER_CTX_get_iv_length(s->ctx) != SEAL_NONCE_BYTES) {
    int status = seal_fail(s, "setting up the cipher");
    strata_seal_free(s);
    return status;
  }
  return STRATA_OK;
}

void strata_seal_free(strata_seal *s) {
  EVP_CIPHER_CTX_free(s->ctx); /* wipes the key schedule */
  sodium_memzero(s, sizeof *s);
}

static int seal_step(strata_seal *s) {
  if (++s->counter < s->rekey_after) return STRATA_OK;
  static const char domain[] = "strata-rekey";
  uint8_t next[STRATA_SEAL_KEY_BYTES];
  crypto_generichash(next, sizeof next, (const unsigned char *)domain, sizeof domain - 1, s->key,
                     sizeof s->key);
  memcpy(s->key, next, sizeof next);
  sodium_memzero(next, sizeof next);
  s->counter = 0;
  /* -1: the context keeps its direction; only the key schedule changes */
  if (EVP_CipherInit_ex(s->ctx, NULL, NULL, s->key, NULL, -1) != 1) return seal_fail(s, "rekeying");
  return STRATA_OK;
}

static void seal_nonce(const strata_seal *s, uint8_t nonce[SEAL_NONCE_BYTES]) {
  uint64_t le = htole64(s->counter);
  memcpy(nonce, &le, 8);
  memset(nonce + 8, 0, SEAL_NONCE_BYTES - 8);
}

/* Start one operation under the current key at the current counter; encrypt 1 or 0. */
static int seal_start(strata_seal *s, int encrypt) {
  uint8_t nonce[SEAL_NONCE_BYTES];
  seal_nonce(s, nonce);
  return EVP_CipherInit_ex(s->ctx, NULL, NULL, NULL, nonce, encrypt) == 1;
}

static int seal_update(strata_seal *s, uint8_t *out, const uint8_t *in, size_t len) {
  while (len > 0) {
    int step = len < SEAL_UPDATE_MAX_BYTES ? (int)len : SEAL_UPDATE_MAX_BYTES, done = 0;
    if (EVP_CipherUpdate(s->ctx, out, &done, in, step) != 1 || done != step) return 0;
    out += step;
    in += step;
    len -= (size_t)step;
  }
  return 1;
}

int strata_seal_close(strata_seal *s, uint8_t *out, const uint8_t *in, size_t len,
                      uint8_t tag[STRATA_SEAL_TAG_BYTES]) {
  if (s->failed) return STRATA_ERR_SYSTEM;
  int tail = 0;
  if (!seal_start(s, 1) || !seal_update(s, out, in, len) ||
      EVP_CipherFinal_ex(s->ctx, out + len, &tail) != 1 || tail != 0 ||
      EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_AEAD_GET_TAG, STRATA_SEAL_TAG_BYTES, tag) != 1)
    return seal_fail(s, "sealing a frame");
  return seal_step(s);
}

int strata_seal_open(strata_seal *s, uint8_t *out, const uint8_t *in, size_t len,
                     const uint8_t tag[STRATA_SEAL_TAG_BYTES]) {
  int status = STRATA_ERR_SYSTEM, tail = 0;
  uint8_t expected[STRATA_SEAL_TAG_BYTES];
  memcpy(expected, tag, sizeof expected);
  if (s->failed) {
    /* refuse, below */
  } else if (!seal_start(s, 0) ||
             EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_AEAD_SET_TAG, sizeof expected, expected) != 1 ||
             !seal_update(s, out, in, len)) {
    seal_fail(s, "opening a frame");
  } else if (EVP_CipherFinal_ex(s->ctx, out + len, &tail) != 1 || tail != 0) {
    ERR_clear_error(); /* a tag that does not verify: the peer's fault, not the library's */
    status = STRATA_ERR_PROTOCOL;
    seal_step(s);
  } else {
    status = seal_step(s);
    if (status == STRATA_OK) return STRATA_OK;
  }
  if (len > 0) memset(out, 0, len);
  return status;
}

int strata_seal_skip(strata_seal *s) {
  if (s->failed) return STRATA_ERR_SYSTEM;
  return seal_step(s);
}
