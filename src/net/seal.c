/*
 * seal.c — the AEAD of the TCP data path (seal.h): AES-256-GCM where the CPU has AES-NI,
 * ChaCha20-Poly1305 (IETF) otherwise, both from libsodium, with the operation counter as nonce.
 *
 * Nonce layout (12 bytes): the 64-bit counter little-endian, then 4 zero bytes. Keys are never
 * shared between directions or connections (handshake.c derives one per direction), so a counter
 * is unique per key by construction. The rekey step is key' = BLAKE2b-256(key, "strata-rekey"),
 * which both ends compute at the same operation without any message.
 */
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "net/seal.h"

static uint64_t seal_rekey_after_for_test;
static int seal_aes_forbidden_for_test;

void strata_seal_set_aes_for_test(int allowed) {
  seal_aes_forbidden_for_test = !allowed;
}

void strata_seal_set_rekey_after_for_test(uint64_t operations) {
  seal_rekey_after_for_test = operations;
}

int strata_seal_aes_available(void) {
  if (sodium_init() < 0 || seal_aes_forbidden_for_test) return 0;
  return crypto_aead_aes256gcm_is_available();
}

static int seal_expand(strata_seal *s) {
  if (s->cipher != STRATA_SEAL_AES256_GCM) return STRATA_OK;
  if (!s->aes) {
    /* the state must be 16-byte aligned (libsodium's requirement) */
    s->aes = aligned_alloc(16, (sizeof *s->aes + 15) / 16 * 16);
    if (!s->aes) return STRATA_ERR_NO_MEMORY;
  }
  crypto_aead_aes256gcm_beforenm(s->aes, s->key);
  return STRATA_OK;
}

int strata_seal_init(strata_seal *s, int on, int cipher, const uint8_t key[STRATA_SEAL_KEY_BYTES]) {
  memset(s, 0, sizeof *s);
  s->on = on;
  if (!on) return STRATA_OK;
  if (sodium_init() < 0) return STRATA_ERR_SYSTEM;
  s->cipher = cipher;
  s->rekey_after = seal_rekey_after_for_test ? seal_rekey_after_for_test : STRATA_SEAL_REKEY_AFTER;
  memcpy(s->key, key, STRATA_SEAL_KEY_BYTES);
  return seal_expand(s);
}

void strata_seal_free(strata_seal *s) {
  if (s->aes) {
    sodium_memzero(s->aes, sizeof *s->aes);
    free(s->aes);
  }
  sodium_memzero(s, sizeof *s);
}

static void seal_step(strata_seal *s) {
  if (++s->counter < s->rekey_after) return;
  static const char domain[] = "strata-rekey";
  uint8_t next[STRATA_SEAL_KEY_BYTES];
  crypto_generichash(next, sizeof next, (const unsigned char *)domain, sizeof domain - 1, s->key,
                     sizeof s->key);
  memcpy(s->key, next, sizeof next);
  sodium_memzero(next, sizeof next);
  s->counter = 0;
  seal_expand(s); /* the state is allocated already: cannot fail */
}

static void seal_nonce(const strata_seal *s, uint8_t nonce[12]) {
  uint64_t le = htole64(s->counter);
  memcpy(nonce, &le, 8);
  memset(nonce + 8, 0, 4);
}

void strata_seal_close(strata_seal *s, uint8_t *out, const uint8_t *in, size_t len,
                       uint8_t tag[STRATA_SEAL_TAG_BYTES]) {
  uint8_t nonce[12];
  seal_nonce(s, nonce);
  unsigned long long tag_len = 0;
  if (s->cipher == STRATA_SEAL_AES256_GCM)
    crypto_aead_aes256gcm_encrypt_detached_afternm(out, tag, &tag_len, in, len, NULL, 0, NULL,
                                                   nonce, s->aes);
  else
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(out, tag, &tag_len, in, len, NULL, 0, NULL,
                                                       nonce, s->key);
  seal_step(s);
}

int strata_seal_open(strata_seal *s, uint8_t *out, const uint8_t *in, size_t len,
                     const uint8_t tag[STRATA_SEAL_TAG_BYTES]) {
  uint8_t nonce[12];
  seal_nonce(s, nonce);
  int rc;
  if (s->cipher == STRATA_SEAL_AES256_GCM)
    rc = crypto_aead_aes256gcm_decrypt_detached_afternm(out, NULL, in, len, tag, NULL, 0, nonce,
                                                        s->aes);
  else
    rc = crypto_aead_chacha20poly1305_ietf_decrypt_detached(out, NULL, in, len, tag, NULL, 0, nonce,
                                                            s->key);
  seal_step(s);
  return rc == 0 ? 0 : -1;
}

void strata_seal_skip(strata_seal *s) {
  seal_step(s);
}
