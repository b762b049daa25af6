// SPDX-License-Identifier: Apache-2.0
/*
 * test_net_seal.c — the AEAD of sealed TCP frames (src/net/seal.c), for each cipher this CPU
 * runs (ChaCha20-Poly1305 always, AES-256-GCM with AES-NI):
 *  - a sender and a receiver keyed alike open every frame, of sizes 0 to 1 MiB, in place;
 *  - a flipped bit in the ciphertext or the tag, a replayed frame, two frames swapped and a
 *    dropped frame all fail to open (the nonce is the frame's position, never sent);
 *  - after a rekey (every 3 operations here) both ends still agree, and the key really changed:
 *    the same plaintext at the same counter seals differently after it;
 *  - keys of the two directions differ, so one direction's frame does not open in the other;
 *  - a frame that fails to open leaves zeros, never unverified plaintext;
 *  - the wire is libsodium's AEAD (as it was when libsodium sealed the frames, so old and new
 *    ends interoperate): the same key and counter seal to the same bytes and tag as libsodium's
 *    detached AES-256-GCM / ChaCha20-Poly1305-IETF with the nonce counter LE + 4 zero bytes and
 *    no associated data, across rekeys (BLAKE2b-256(key, "strata-rekey")), and each opens the
 *    other's frames.
 */
#include <endian.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/check.h"
#include "net/seal.h"

static int failures;

static void fill(uint8_t *buf, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 8));
}

static int run_cipher(int cipher) {
  uint8_t key[STRATA_SEAL_KEY_BYTES], other[STRATA_SEAL_KEY_BYTES];
  randombytes_buf(key, sizeof key);
  randombytes_buf(other, sizeof other);
  strata_seal tx, rx;
  CHECK_OR_RETURN(strata_seal_init(&tx, 1, cipher, key) == 0, "init");
  CHECK_OR_RETURN(strata_seal_init(&rx, 1, cipher, key) == 0, "init");
  static const size_t sizes[] = {0, 1, 48, 1000, 65536, 1 << 20};
  uint8_t *plain = malloc(1 << 20), *wire = malloc(1 << 20), tag[STRATA_SEAL_TAG_BYTES];
  CHECK_OR_RETURN(plain && wire, "malloc");
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    fill(plain, sizes[i], (unsigned)i);
    strata_seal_close(&tx, wire, plain, sizes[i], tag);
    if (sizes[i] >= 48)
      CHECK_OR_RETURN(memcmp(wire, plain, 48) != 0, "ciphertext equals the plaintext");
    CHECK_OR_RETURN(strata_seal_open(&rx, wire, wire, sizes[i], tag) == 0, "size %zu: no open",
                    sizes[i]);
    CHECK_OR_RETURN(memcmp(wire, plain, sizes[i]) == 0, "size %zu: wrong plaintext", sizes[i]);
  }
  /* every failure below ends the connection in the transport: start each case on fresh ends */
#define FRESH_PAIR()                                                     \
  do {                                                                   \
    strata_seal_free(&tx);                                               \
    strata_seal_free(&rx);                                               \
    CHECK_OR_RETURN(strata_seal_init(&tx, 1, cipher, key) == 0, "init"); \
    CHECK_OR_RETURN(strata_seal_init(&rx, 1, cipher, key) == 0, "init"); \
  } while (0)
  /* a flipped bit in the ciphertext, then in the tag */
  for (int where = 0; where < 2; where++) {
    FRESH_PAIR();
    fill(plain, 4096, 9);
    strata_seal_close(&tx, wire, plain, 4096, tag);
    if (where == 0)
      wire[1234] ^= 0x10;
    else
      tag[5] ^= 0x01;
    CHECK_OR_RETURN(strata_seal_open(&rx, wire, wire, 4096, tag) == STRATA_ERR_PROTOCOL,
                    "a flipped bit in the %s opened", where ? "tag" : "ciphertext");
    for (size_t i = 0; i < 4096; i++)
      CHECK_OR_RETURN(wire[i] == 0, "a frame that failed to open left byte %zu unwiped", i);
  }
  FRESH_PAIR();
  /* replay: the same frame twice */
  uint8_t first[256], first_tag[STRATA_SEAL_TAG_BYTES];
  fill(plain, sizeof first, 3);
  strata_seal_close(&tx, first, plain, sizeof first, first_tag);
  uint8_t copy[256];
  memcpy(copy, first, sizeof copy);
  CHECK_OR_RETURN(strata_seal_open(&rx, copy, copy, sizeof copy, first_tag) == 0, "fresh frame");
  CHECK_OR_RETURN(strata_seal_open(&rx, first, first, sizeof first, first_tag) != 0,
                  "a replayed frame opened");
  /* reorder: frames a, b arrive as b, a; and a dropped frame */
  FRESH_PAIR();
  uint8_t a[100], b[100], ta[16], tb[16];
  fill(plain, 100, 4);
  strata_seal_close(&tx, a, plain, 100, ta);
  strata_seal_close(&tx, b, plain, 100, tb);
  CHECK_OR_RETURN(strata_seal_open(&rx, b, b, 100, tb) != 0, "a frame opened out of order");
  FRESH_PAIR();
  strata_seal_close(&tx, a, plain, 100, ta); /* dropped */
  strata_seal_close(&tx, b, plain, 100, tb);
  CHECK_OR_RETURN(strata_seal_open(&rx, b, b, 100, tb) != 0, "a frame after a drop opened");
  /* the other direction's key */
  strata_seal back;
  CHECK_OR_RETURN(strata_seal_init(&back, 1, cipher, other) == 0, "init");
  strata_seal_close(&back, a, plain, 100, ta);
  strata_seal fresh_rx;
  CHECK_OR_RETURN(strata_seal_init(&fresh_rx, 1, cipher, key) == 0, "init");
  CHECK_OR_RETURN(strata_seal_open(&fresh_rx, a, a, 100, ta) != 0,
                  "a frame sealed with the other direction's key opened");
  strata_seal_free(&back);
  strata_seal_free(&fresh_rx);
  strata_seal_free(&tx);
  strata_seal_free(&rx);

  /* rekeying every 3 operations: still in step, and the key changed */
  strata_seal_set_rekey_after_for_test(3);
  CHECK_OR_RETURN(strata_seal_init(&tx, 1, cipher, key) == 0, "init");
  CHECK_OR_RETURN(strata_seal_init(&rx, 1, cipher, key) == 0, "init");
  uint8_t at0[64], at3[64], t0[16], t3[16];
  fill(plain, 64, 5);
  for (int op = 0; op < 40; op++) {
    uint8_t *out = op == 0 ? at0 : op == 3 ? at3 : wire;
    uint8_t *tag_out = op == 0 ? t0 : op == 3 ? t3 : tag;
    strata_seal_close(&tx, out, plain, 64, tag_out);
    uint8_t opened[64];
    CHECK_OR_RETURN(strata_seal_open(&rx, opened, out, 64, tag_out) == 0, "op %d after rekeys", op);
    CHECK_OR_RETURN(memcmp(opened, plain, 64) == 0, "op %d: wrong plaintext", op);
  }
  CHECK_OR_RETURN(memcmp(at0, at3, 64) != 0, "counter 0 before and after a rekey sealed alike");
  strata_seal_set_rekey_after_for_test(0);
  strata_seal_free(&tx);
  strata_seal_free(&rx);
  free(plain);
  free(wire);
  return 0;
}

/* libsodium's detached AEAD of the cipher: what every strata before OpenSSL put on the wire. */
static void sodium_seal(int cipher, uint8_t *out, uint8_t tag[16], const uint8_t *in, size_t len,
                        const uint8_t nonce[12], const uint8_t key[32]) {
  if (cipher == STRATA_SEAL_AES256_GCM)
    crypto_aead_aes256gcm_encrypt_detached(out, tag, NULL, in, len, NULL, 0, NULL, nonce, key);
  else
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(out, tag, NULL, in, len, NULL, 0, NULL,
                                                       nonce, key);
}

static int sodium_open(int cipher, uint8_t *out, const uint8_t *in, size_t len,
                       const uint8_t tag[16], const uint8_t nonce[12], const uint8_t key[32]) {
  if (cipher == STRATA_SEAL_AES256_GCM)
    return crypto_aead_aes256gcm_decrypt_detached(out, NULL, in, len, tag, NULL, 0, nonce, key);
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(out, NULL, in, len, tag, NULL, 0, nonce,
                                                            key);
}

static int run_interop(int cipher) {
  enum { REKEY = 3, MAX = (1 << 20) + 13 };
  static const size_t sizes[] = {0, 1, 48, 1000, 65536 + 13, MAX};
  uint8_t key[STRATA_SEAL_KEY_BYTES], sodium_key[STRATA_SEAL_KEY_BYTES];
  randombytes_buf(key, sizeof key);
  memcpy(sodium_key, key, sizeof key);
  strata_seal_set_rekey_after_for_test(REKEY);
  strata_seal tx, rx;
  CHECK_OR_RETURN(strata_seal_init(&tx, 1, cipher, key) == 0, "init");
  CHECK_OR_RETURN(strata_seal_init(&rx, 1, cipher, key) == 0, "init");
  strata_seal_set_rekey_after_for_test(0);
  uint8_t *plain = malloc(MAX), *ours = malloc(MAX), *theirs = malloc(MAX), *back = malloc(MAX);
  CHECK_OR_RETURN(plain && ours && theirs && back, "malloc");
  for (int op = 0; op < 14; op++) {
    size_t len = sizes[op % (sizeof sizes / sizeof sizes[0])];
    uint64_t counter = htole64((uint64_t)(op % REKEY));
    uint8_t nonce[12] = {0}, our_tag[16], their_tag[16];
    memcpy(nonce, &counter, 8);
    if (op > 0 && op % REKEY == 0) {
      static const char domain[] = "strata-rekey";
      crypto_generichash(sodium_key, sizeof sodium_key, (const unsigned char *)domain,
                         sizeof domain - 1, sodium_key, sizeof sodium_key);
    }
    fill(plain, len, (unsigned)op + 17);
    CHECK_OR_RETURN(strata_seal_close(&tx, ours, plain, len, our_tag) == 0, "op %d: seal", op);
    sodium_seal(cipher, theirs, their_tag, plain, len, nonce, sodium_key);
    CHECK_OR_RETURN(memcmp(ours, theirs, len) == 0 && memcmp(our_tag, their_tag, 16) == 0,
                    "op %d, %zu bytes: sealed bytes differ from libsodium's", op, len);
    CHECK_OR_RETURN(sodium_open(cipher, back, ours, len, our_tag, nonce, sodium_key) == 0 &&
                        memcmp(back, plain, len) == 0,
                    "op %d, %zu bytes: libsodium did not open our frame", op, len);
    CHECK_OR_RETURN(strata_seal_open(&rx, theirs, theirs, len, their_tag) == 0 &&
                        memcmp(theirs, plain, len) == 0,
                    "op %d, %zu bytes: libsodium's frame did not open", op, len);
  }
  strata_seal_free(&tx);
  strata_seal_free(&rx);
  free(plain);
  free(ours);
  free(theirs);
  free(back);
  return 0;
}

int main(void) {
  if (sodium_init() < 0) {
    printf("libsodium did not start\n");
    return 1;
  }
  printf("ChaCha20-Poly1305\n");
  failures += run_cipher(STRATA_SEAL_CHACHA20_POLY1305) != 0;
  failures += run_interop(STRATA_SEAL_CHACHA20_POLY1305) != 0;
  if (strata_seal_aes_available()) {
    printf("AES-256-GCM\n");
    failures += run_cipher(STRATA_SEAL_AES256_GCM) != 0;
    failures += run_interop(STRATA_SEAL_AES256_GCM) != 0;
  } else {
    printf("AES-256-GCM: this CPU has no AES-NI, not checked\n");
  }
  printf("%s\n", failures ? "test_net_seal: FAILED" : "test_net_seal: all passed");
  return failures ? 1 : 0;
}
