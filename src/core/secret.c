// SPDX-License-Identifier: Apache-2.0
/*
 * secret.c — the one key every authenticated exchange of a job is keyed with, derived from the
 * job secret (STRATA_SECRET / STRATA_SECRET_FILE).
 *
 * The key is Argon2id (libsodium crypto_pwhash) of the secret, salted with the job's name. A
 * handshake or store challenge that an eavesdropper or a stranger posing as a peer sees lets it
 * test guesses of the secret offline; a memory-hard hash makes each guess cost tens of
 * milliseconds and megabytes instead of one SHA-256, and the salt stops one precomputed table
 * from serving every job. The derivation runs once per process and (secret, salt) — it is cached
 * — so communicators created again (elastic epochs, init after destroy) pay nothing.
 *
 * An empty secret derives a key too (every rank computes the same one), so the protocol is the
 * same with or without a secret; only the protection differs, and strata_secret_warn_once says so.
 */
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* Argon2id cost: about 30-60 ms on a current core, 32 MiB. */
#define SECRET_OPSLIMIT 2ull
#define SECRET_MEMLIMIT (32u << 20)

static pthread_mutex_t secret_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t cached_id[crypto_generichash_BYTES];
static uint8_t cached_key[STRATA_SECRET_KEY_BYTES];
static int cached_valid;

/* The salt a job id names: communicators derived from a job share its key, so the salt is the
 * job id up to the first '/' (split communicators are "<job>/<n>/<color>", engine/comm.c) or '~'
 * (elastic epochs are "<job, at most 32 characters>~e<n>~<hash>", engine/elastic.c), and at most
 * 32 characters. The store, which knows only the job's own id, derives the same key. */
enum { SECRET_SALT_NAME_MAX = 32 };

static size_t salt_name_length(const char *job_id) {
  size_t len = strcspn(job_id, "/~");
  return len < SECRET_SALT_NAME_MAX ? len : SECRET_SALT_NAME_MAX;
}

int strata_secret_key(const char *secret, const char *job_id,
                      uint8_t key[STRATA_SECRET_KEY_BYTES]) {
  if (sodium_init() < 0) return STRATA_ERR_SYSTEM;
  if (!secret) secret = "";
  if (!job_id) job_id = "";
  size_t name_len = salt_name_length(job_id);
  uint8_t salt[crypto_pwhash_SALTBYTES];
  static const char salt_domain[] = "strata-secret-salt-v1";
  crypto_generichash_state st;
  crypto_generichash_init(&st, (const unsigned char *)salt_domain, sizeof salt_domain - 1,
                          sizeof salt);
  crypto_generichash_update(&st, (const unsigned char *)job_id, name_len);
  crypto_generichash_final(&st, salt, sizeof salt);

  /* the cache is looked up by a hash of (salt, secret), never by the secret itself */
  uint8_t id[crypto_generichash_BYTES];
  crypto_generichash_init(&st, salt, sizeof salt, sizeof id);
  crypto_generichash_update(&st, (const unsigned char *)secret, strlen(secret));
  crypto_generichash_final(&st, id, sizeof id);

  pthread_mutex_lock(&secret_lock);
  if (cached_valid && sodium_memcmp(id, cached_id, sizeof id) == 0) {
    memcpy(key, cached_key, STRATA_SECRET_KEY_BYTES);
    pthread_mutex_unlock(&secret_lock);
    return STRATA_OK;
  }
  int status = STRATA_OK;
  if (secret[0] == '\0') {
    /* nothing to protect: no point paying for the slow hash */
    crypto_generichash(key, STRATA_SECRET_KEY_BYTES, salt, sizeof salt, NULL, 0);
  } else if (crypto_pwhash(key, STRATA_SECRET_KEY_BYTES, secret, strlen(secret), salt,
                           SECRET_OPSLIMIT, SECRET_MEMLIMIT, crypto_pwhash_ALG_ARGON2ID13) != 0) {
    status = STRATA_ERR_NO_MEMORY; /* Argon2 could not allocate its memory */
  }
  if (status == STRATA_OK) {
    memcpy(cached_id, id, sizeof id);
    memcpy(cached_key, key, STRATA_SECRET_KEY_BYTES);
    cached_valid = 1;
  }
  pthread_mutex_unlock(&secret_lock);
  sodium_memzero(id, sizeof id);
  return status;
}

void strata_secret_warn_once(const char *secret, int rank) {
  static int warned;
  if (secret && secret[0]) return;
  pthread_mutex_lock(&secret_lock);
  int first = !warned;
  warned = 1;
  pthread_mutex_unlock(&secret_lock);
  if (first)
    STRATA_LOG(STRATA_LOG_WARN, rank,
               "no job secret: peers and the store are not authenticated (anyone who can reach "
               "them can join or read the job). Set STRATA_SECRET, or STRATA_SECRET_FILE to a file "
               "holding it, the same on every rank");
}
