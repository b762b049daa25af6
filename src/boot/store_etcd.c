// SPDX-License-Identifier: Apache-2.0
/*
 * store_etcd.c — the rendezvous store kept in an etcd cluster (STRATA_STORE=etcd://h:p,h:p,...),
 * so that coordination outlives any one host: rendezvous, agreement (shrink, agree), grow's
 * tickets and grants all go on while a majority of the etcd members is up, whichever ranks died.
 *
 * It speaks etcd's v3 JSON gateway (POST /v3/kv/range, /v3/kv/put, /v3/kv/txn; keys and values
 * base64) over plain HTTP/1.1 (http_lite.c), one keep-alive connection at a time. A call that
 * cannot reach its endpoint, or gets an answer etcd gives while it has no leader, moves on to the
 * next endpoint of the list and tries again until its deadline; so losing an etcd member costs
 * a reconnect, and losing the leader an election.
 *
 * Layout: every key of a job lives under "strata/<job>/" (<job>: the job id up to its first '/'
 * or '~', as core/secret.c salts it, so the communicators of one elastic job share the prefix),
 *   v/<key>                 a value (set, set_if_absent, get, wait)
 *   c/<len>/<key>/<nonce>   one add to counter <key> (<len>: the key's length, so no counter's
 *                           entries fall under another's prefix)
 * A counter is the sum of its entries; an add writes its own entry, then reads the counter and
 * counts the entries created up to its own (create_revision), which orders the adds as etcd
 * ordered their writes. An add whose answer was lost (the member died mid-call) writes the same
 * entry again on the next member: if the first write landed, the second changes nothing, so an
 * add never counts twice — a read-modify-write of one key could not tell. Likewise a set is
 * idempotent, and set_if_absent knows its own write again by the nonce inside the value.
 *
 * Every value stored is sealed: version, a random nonce, the payload, and a BLAKE2b-256 MAC keyed
 * with the job key's etcd subkey over the etcd key and all of that. etcd itself authenticates no
 * one here (the operator secures it: docs/elastic.md), so anything read from it that fails the MAC
 * is refused with STRATA_ERR_AUTH: nobody without the job secret can plant an address, a
 * decision or a grant, or move one to another key. What the MAC cannot stop is deleting or
 * rolling back keys — availability, which whoever can write to etcd controls in any case. Peers
 * still prove the secret on every data connection (net/handshake.c), so an address taken from
 * the store never admits a stranger either.
 *
 * A counter read as a value (get on a key only ever added to) is not supported: strata's callers
 * keep the two apart, and a get of such a key waits until its timeout.
 * Must never: block without a deadline, trust a byte etcd returns before checking it.
 */
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "boot/http_lite.h"
#include "boot/json_lite.h"
#include "boot/store.h"
#include "boot/store_net.h"
#include "boot/store_wire.h"
#include "core/core.h"
#include "core/store.h"

#define ETCD_MAX_ENDPOINTS 16
#define ETCD_NONCE_BYTES 16
#define ETCD_MAC_BYTES 32
#define ETCD_SEAL_VERSION 1
/* version, nonce, MAC */
#define ETCD_SEAL_OVERHEAD (1 + ETCD_NONCE_BYTES + ETCD_MAC_BYTES)
/* the most tokens an answer may split into: a range of a counter with many entries */
#define ETCD_MAX_TOKENS (1 << 20)

static const strata_store_impl etcd_impl;

typedef struct etcd_store {
  strata_store_head head; /* first: core/store.c dispatches through it */
  pthread_mutex_t lock;   /* calls serialize */
  http_lite_conn endpoints[ETCD_MAX_ENDPOINTS];
  int nendpoints, current;
  char prefix[64]; /* "strata/<job>/" */
  uint8_t mac_key[32];
  double op_timeout_s; /* bound of calls that do not wait (set, add, set_if_absent) */
  char url[512];       /* for log lines */
} etcd_store;

static etcd_store *etcd_of(strata_store *s) {
  return (etcd_store *)(void *)s;
}

static void sleep_s(double s) {
  if (s <= 0) return;
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- base64 and JSON text ---- */

/* Appends `"<base64 of bytes>"` to a growing text. */
typedef struct text {
  char *buf;
  size_t len, cap;
  int failed;
} text;

static void text_reserve(text *t, size_t more) {
  if (t->failed || t->len + more + 1 <= t->cap) return;
  size_t cap = t->cap ? t->cap : 256;
  while (cap < t->len + more + 1) cap *= 2;
  char *buf = realloc(t->buf, cap);
  if (!buf) {
    t->failed = 1;
    return;
  }
  t->buf = buf;
  t->cap = cap;
}

static void text_add(text *t, const char *s) {
  size_t n = strlen(s);
  text_reserve(t, n);
  if (t->failed) return;
  memcpy(t->buf + t->len, s, n + 1);
  t->len += n;
}

static void text_base64(text *t, const void *bytes, size_t len) {
  size_t n = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
  text_reserve(t, n + 2);
  if (t->failed) return;
  t->buf[t->len++] = '"';
  sodium_bin2base64(t->buf + t->len, n, bytes, len, sodium_base64_VARIANT_ORIGINAL);
  t->len += n - 1; /* n counts the NUL */
  t->buf[t->len++] = '"';
  t->buf[t->len] = '\0';
}

/* The bytes of a base64 string token (malloc'd; *len). STRATA_ERR_PROTOCOL if not base64. */
static int token_base64(const json_lite_doc *doc, int token, uint8_t **out, size_t *len) {
  *out = NULL;
  *len = 0;
  if (token < 0 || doc->tokens[token].type != JSON_LITE_STRING) return STRATA_ERR_PROTOCOL;
  const char *b64 = doc->text + doc->tokens[token].start;
  size_t b64_len = doc->tokens[token].end - doc->tokens[token].start;
  if (!(*out = malloc(b64_len / 4 * 3 + 3))) return STRATA_ERR_NO_MEMORY;
  if (sodium_base642bin(*out, b64_len / 4 * 3 + 3, b64, b64_len, NULL, len, NULL,
                        sodium_base64_VARIANT_ORIGINAL) != 0) {
    free(*out);
    *out = NULL;
    return STRATA_ERR_PROTOCOL;
  }
  return STRATA_OK;
}

/* ---- sealed values ---- */

static void seal_mac(const etcd_store *e, const char *etcd_key, const uint8_t *sealed, size_t len,
                     uint8_t mac[ETCD_MAC_BYTES]) {
  crypto_generichash_state st;
  uint8_t key_len[4];
  size_t n = strlen(etcd_key);
  for (int i = 0; i < 4; i++) key_len[i] = (uint8_t)(n >> (8 * i));
  crypto_generichash_init(&st, e->mac_key, sizeof e->mac_key, ETCD_MAC_BYTES);
  crypto_generichash_update(&st, key_len, sizeof key_len);
  crypto_generichash_update(&st, (const uint8_t *)etcd_key, n);
  crypto_generichash_update(&st, sealed, len);
  crypto_generichash_final(&st, mac, ETCD_MAC_BYTES);
}

/* version | nonce | payload | MAC over (etcd_key, all before it). malloc'd, *len. */
static uint8_t *seal(const etcd_store *e, const char *etcd_key, const uint8_t nonce[16],
                     const void *payload, size_t payload_len, size_t *len) {
  *len = ETCD_SEAL_OVERHEAD + payload_len;
  uint8_t *out = malloc(*len);
  if (!out) return NULL;
  out[0] = ETCD_SEAL_VERSION;
  memcpy(out + 1, nonce, ETCD_NONCE_BYTES);
  if (payload_len) memcpy(out + 1 + ETCD_NONCE_BYTES, payload, payload_len);
  seal_mac(e, etcd_key, out, *len - ETCD_MAC_BYTES, out + *len - ETCD_MAC_BYTES);
  return out;
}

/* Checks a sealed value; the payload is sealed[1 + 16 .. len - 32). STRATA_ERR_AUTH if forged. */
static int unseal(const etcd_store *e, const char *etcd_key, const uint8_t *sealed, size_t len) {
  if (len < ETCD_SEAL_OVERHEAD || sealed[0] != ETCD_SEAL_VERSION) goto forged;
  uint8_t mac[ETCD_MAC_BYTES];
  seal_mac(e, etcd_key, sealed, len - ETCD_MAC_BYTES, mac);
  if (sodium_memcmp(mac, sealed + len - ETCD_MAC_BYTES, ETCD_MAC_BYTES) == 0) return STRATA_OK;
forged:
  STRATA_LOG(STRATA_LOG_ERROR, -1,
             "store: etcd key '%s' holds a value not sealed with this job's key: written by "
             "someone without the job secret (or by a job of the same id with another secret)",
             etcd_key);
  return STRATA_ERR_AUTH;
}

/* ---- one gateway call, failing over between endpoints ---- */

/* gRPC codes that say "try again, maybe elsewhere": unavailable (no leader, shutting down),
 * deadline exceeded (a proposal that timed out), aborted, unknown (a leader change). */
static int retryable_grpc(int64_t code) {
  return code == 14 || code == 4 || code == 10 || code == 2;
}

/* POSTs body to path on the current endpoint, moving on to the next one on failure, until
 * deadline_s; one attempt at least. On STRATA_OK *doc holds the parsed answer (the caller frees it
 * and *text). */
static int gateway_call(etcd_store *e, const char *path, const text *body, double deadline_s,
                        json_lite_doc *doc, char **answer) {
  *answer = NULL;
  memset(doc, 0, sizeof *doc);
  if (body->failed) return STRATA_ERR_NO_MEMORY;
  double backoff_s = 0.005;
  int tries = 0, status = STRATA_ERR_TIMEOUT;
  char why[640] = "no answer";
  for (;;) {
    http_lite_conn *c = &e->endpoints[e->current];
    /* a member that accepts and falls silent (frozen, or cut off from the others) must not take
     * the whole budget: an attempt gets a share of the call's timeout, a second at least */
    double now = store_net_now_s(), left = deadline_s - now;
    double share = e->op_timeout_s / (2.0 * e->nendpoints);
    if (share < 1.0) share = 1.0;
    if (share > left) share = left;
    int code = 0, err = 0;
    char *out = NULL;
    size_t out_len = 0;
    status = http_lite_post(c, path, body->buf, body->len, now + (share > 0 ? share : 0.001), &code,
                            &out, &out_len, &err);
    tries++;
    int retry = 0;
    if (status == STRATA_OK) {
      status = json_lite_parse(out, out_len, ETCD_MAX_TOKENS, doc);
      if (status == STRATA_OK && code == 200) {
        *answer = out;
        return STRATA_OK;
      }
      int64_t grpc = -1;
      if (status == STRATA_OK) json_lite_int64(doc, json_lite_member(doc, 0, "code"), &grpc);
      int message = status == STRATA_OK ? json_lite_member(doc, 0, "message") : -1;
      int message_len =
          message >= 0 ? (int)(doc->tokens[message].end - doc->tokens[message].start) : 0;
      snprintf(why, sizeof why, "%s:%s answered HTTP %d: %.*s", c->host, c->port, code,
               message_len < 200 ? message_len : 200,
               message >= 0 ? out + doc->tokens[message].start : "");
      for (char *p = why; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) *p = '?';
      retry = code >= 500 || retryable_grpc(grpc) || status != STRATA_OK;
      json_lite_free(doc);
      free(out);
      if (!retry) {
        STRATA_LOG(STRATA_LOG_ERROR, -1, "store: etcd %s", why);
        /* unauthenticated, permission denied: etcd's users are on; resource exhausted: its
         * backend quota is full ("database space exceeded"), as the store's own quota refuses */
        return grpc == 16 || grpc == 7 ? STRATA_ERR_AUTH
               : grpc == 8             ? STRATA_ERR_QUOTA
                                       : STRATA_ERR_PROTOCOL;
      }
      http_lite_close(c); /* try another member: this one may be cut off from the leader */
    } else {
      snprintf(why, sizeof why, "%s:%s: %s", c->host, c->port,
               status == STRATA_ERR_TIMEOUT ? "no answer in time"
               : err                        ? strerror(err)
                                            : strata_strerror(status));
    }
    e->current = (e->current + 1) % e->nendpoints;
    left = deadline_s - store_net_now_s();
    if (left <= 0) break;
    if (tries % e->nendpoints == 0) { /* a round over every member: back off */
      sleep_s(backoff_s < left ? backoff_s : left);
      if (backoff_s < 0.2) backoff_s *= 2;
    }
  }
  STRATA_LOG(STRATA_LOG_WARN, -1, "store: no etcd member of %s answered in time (last: %s)", e->url,
             why);
  return STRATA_ERR_TIMEOUT;
}

/* ---- keys ---- */

static int key_ok(const char *key) {
  size_t n = key ? strlen(key) : 0;
  return n > 0 && n <= STORE_WIRE_MAX_KEY_BYTES;
}

/* "strata/<job>/v/<key>" (malloc'd) */
static char *value_key(const etcd_store *e, const char *key) {
  size_t n = strlen(e->prefix) + 2 + strlen(key) + 1;
  char *out = malloc(n);
  if (out) snprintf(out, n, "%sv/%s", e->prefix, key);
  return out;
}

/* "strata/<job>/c/<len>/<key>/" (malloc'd): the prefix of a counter's entries */
static char *counter_prefix(const etcd_store *e, const char *key) {
  size_t n = strlen(e->prefix) + 16 + strlen(key) + 2;
  char *out = malloc(n);
  if (out) snprintf(out, n, "%sc/%zu/%s/", e->prefix, strlen(key), key);
  return out;
}

/* {"key": k, "range_end": the end of k as a prefix} */
static void text_prefix_range(text *t, const char *prefix) {
  size_t n = strlen(prefix);
  char *end = malloc(n + 1);
  if (!end) {
    t->failed = 1;
    return;
  }
  memcpy(end, prefix, n + 1);
  end[n - 1]++; /* prefixes end in '/': its successor bounds them */
  text_add(t, "{\"key\":");
  text_base64(t, prefix, n);
  text_add(t, ",\"range_end\":");
  text_base64(t, end, n);
  free(end);
}

/* The kvs array of a range answer at `at` (0: a range's own answer), -1 when empty. */
static int answer_kvs(const json_lite_doc *doc, int at) {
  return json_lite_member(doc, at, "kvs");
}

/* ---- the calls ---- */

static int etcd_range_value(etcd_store *e, const char *etcd_key, double deadline_s, int count_only,
                            uint8_t **sealed, size_t *sealed_len, int *found) {
  *found = 0;
  text body = {0};
  text_add(&body, "{\"key\":");
  text_base64(&body, etcd_key, strlen(etcd_key));
  text_add(&body, count_only ? ",\"count_only\":true}" : "}");
  json_lite_doc doc;
  char *answer;
  int status = gateway_call(e, "/v3/kv/range", &body, deadline_s, &doc, &answer);
  free(body.buf);
  if (status != STRATA_OK) return status;
  if (count_only) {
    int64_t count = 0;
    json_lite_int64(&doc, json_lite_member(&doc, 0, "count"), &count);
    *found = count > 0;
  } else {
    int kv = json_lite_element(&doc, answer_kvs(&doc, 0), 0);
    if (kv >= 0) {
      status = token_base64(&doc, json_lite_member(&doc, kv, "value"), sealed, sealed_len);
      *found = status == STRATA_OK;
    }
  }
  json_lite_free(&doc);
  free(answer);
  return status;
}

static int etcd_put(etcd_store *e, const char *etcd_key, const uint8_t *sealed, size_t len,
                    double deadline_s) {
  text body = {0};
  text_add(&body, "{\"key\":");
  text_base64(&body, etcd_key, strlen(etcd_key));
  text_add(&body, ",\"value\":");
  text_base64(&body, sealed, len);
  text_add(&body, "}");
  json_lite_doc doc;
  char *answer;
  int status = gateway_call(e, "/v3/kv/put", &body, deadline_s, &doc, &answer);
  free(body.buf);
  if (status == STRATA_OK) json_lite_free(&doc);
  free(answer);
  return status;
}

/* The etcd key of `key` and `value` sealed under it with a fresh nonce: STRATA_OK (the caller
 * frees both) or STRATA_ERR_NO_MEMORY (nothing to free). */
static int seal_value(const etcd_store *e, const char *key, const void *value, size_t len,
                      char **etcd_key, uint8_t **sealed, size_t *sealed_len) {
  uint8_t nonce[ETCD_NONCE_BYTES];
  randombytes_buf(nonce, sizeof nonce);
  *sealed = NULL;
  *sealed_len = 0;
  *etcd_key = value_key(e, key);
  if (*etcd_key) *sealed = seal(e, *etcd_key, nonce, value, len, sealed_len);
  if (*sealed) return STRATA_OK;
  free(*etcd_key);
  *etcd_key = NULL;
  return STRATA_ERR_NO_MEMORY;
}

static int store_set(strata_store *s, const char *key, const void *value, size_t len) {
  etcd_store *e = etcd_of(s);
  if (!key_ok(key) || (!value && len) || len > STORE_WIRE_MAX_VALUE_BYTES)
    return STRATA_ERR_INVALID_ARG;
  char *etcd_key;
  uint8_t *sealed;
  size_t sealed_len;
  int status = seal_value(e, key, value, len, &etcd_key, &sealed, &sealed_len);
  if (status != STRATA_OK) return status;
  pthread_mutex_lock(&e->lock);
  status = etcd_put(e, etcd_key, sealed, sealed_len, store_net_now_s() + e->op_timeout_s);
  pthread_mutex_unlock(&e->lock);
  free(sealed);
  free(etcd_key);
  return status;
}

/* A txn: if etcd_key was never created, put sealed; else range it. *was_set: our value is
 * there (written by this call, or by its earlier attempt whose answer was lost). */
static int store_set_if_absent(strata_store *s, const char *key, const void *value, size_t len,
                               int *was_set) {
  etcd_store *e = etcd_of(s);
  if (!key_ok(key) || (!value && len) || len > STORE_WIRE_MAX_VALUE_BYTES || !was_set)
    return STRATA_ERR_INVALID_ARG;
  *was_set = 0;
  char *etcd_key;
  uint8_t *sealed;
  size_t sealed_len;
  if (seal_value(e, key, value, len, &etcd_key, &sealed, &sealed_len) != STRATA_OK)
    return STRATA_ERR_NO_MEMORY;
  text body = {0};
  text_add(&body, "{\"compare\":[{\"key\":");
  text_base64(&body, etcd_key, strlen(etcd_key));
  text_add(&body,
           ",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}],"
           "\"success\":[{\"request_put\":{\"key\":");
  text_base64(&body, etcd_key, strlen(etcd_key));
  text_add(&body, ",\"value\":");
  text_base64(&body, sealed, sealed_len);
  text_add(&body, "}}],\"failure\":[{\"request_range\":{\"key\":");
  text_base64(&body, etcd_key, strlen(etcd_key));
  text_add(&body, "}}]}");
  json_lite_doc doc;
  char *answer;
  pthread_mutex_lock(&e->lock);
  int status =
      gateway_call(e, "/v3/kv/txn", &body, store_net_now_s() + e->op_timeout_s, &doc, &answer);
  pthread_mutex_unlock(&e->lock);
  free(body.buf);
  if (status == STRATA_OK) {
    if (json_lite_true(&doc, json_lite_member(&doc, 0, "succeeded"))) {
      *was_set = 1;
    } else { /* someone's value is there: ours, if an earlier attempt of this call landed */
      int range =
          json_lite_member(&doc, json_lite_element(&doc, json_lite_member(&doc, 0, "responses"), 0),
                           "response_range");
      int kv = json_lite_element(&doc, answer_kvs(&doc, range), 0);
      uint8_t *there = NULL;
      size_t there_len = 0;
      status = token_base64(&doc, json_lite_member(&doc, kv, "value"), &there, &there_len);
      if (status == STRATA_OK) status = unseal(e, etcd_key, there, there_len);
      /* the nonce follows the version byte in both */
      if (status == STRATA_OK) *was_set = !memcmp(there + 1, sealed + 1, ETCD_NONCE_BYTES);
      free(there);
    }
    json_lite_free(&doc);
  }
  free(answer);
  free(sealed);
  free(etcd_key);
  return status;
}

static int store_get(strata_store *s, const char *key, void **value, size_t *len,
                     double timeout_s) {
  etcd_store *e = etcd_of(s);
  if (!key_ok(key) || !value || !len || !(timeout_s >= 0)) return STRATA_ERR_INVALID_ARG;
  *value = NULL;
  *len = 0;
  char *etcd_key = value_key(e, key);
  if (!etcd_key) return STRATA_ERR_NO_MEMORY;
  /* etcd's watch would wake us at the write; a poll backing off to 20 ms costs a few requests
   * per rendezvous and keeps the client one request, one answer */
  double deadline_s = store_net_now_s() + timeout_s, pause_s = 0.001;
  int status;
  for (;;) {
    uint8_t *sealed = NULL;
    size_t sealed_len = 0;
    int found = 0;
    double now = store_net_now_s(), bound = now + e->op_timeout_s;
    pthread_mutex_lock(&e->lock);
    status = etcd_range_value(e, etcd_key, bound, 0, &sealed, &sealed_len, &found);
    pthread_mutex_unlock(&e->lock);
    if (status == STRATA_OK && found) {
      status = unseal(e, etcd_key, sealed, sealed_len);
      size_t n = sealed_len - ETCD_SEAL_OVERHEAD;
      uint8_t *copy = status == STRATA_OK ? malloc(n ? n : 1) : NULL;
      if (status == STRATA_OK && !copy) status = STRATA_ERR_NO_MEMORY;
      if (copy) {
        memcpy(copy, sealed + 1 + ETCD_NONCE_BYTES, n);
        *value = copy;
        *len = n;
      }
      free(sealed);
      break;
    }
    free(sealed);
    if (status != STRATA_OK) break;
    double left = deadline_s - store_net_now_s();
    if (left <= 0) {
      status = STRATA_ERR_TIMEOUT;
      break;
    }
    sleep_s(pause_s < left ? pause_s : left);
    if (pause_s < 0.02) pause_s *= 1.5;
  }
  free(etcd_key);
  return status;
}

static int store_wait(strata_store *s, const char *const *keys, size_t nkeys, double timeout_s) {
  etcd_store *e = etcd_of(s);
  if ((!keys && nkeys) || nkeys > STORE_WIRE_MAX_WAIT_KEYS || !(timeout_s >= 0))
    return STRATA_ERR_INVALID_ARG;
  for (size_t i = 0; i < nkeys; i++)
    if (!key_ok(keys[i])) return STRATA_ERR_INVALID_ARG;
  double deadline_s = store_net_now_s() + timeout_s, pause_s = 0.001;
  int status = STRATA_OK;
  for (size_t i = 0; i < nkeys && status == STRATA_OK;) {
    char *etcd_key = value_key(e, keys[i]);
    if (!etcd_key) return STRATA_ERR_NO_MEMORY;
    int found = 0;
    pthread_mutex_lock(&e->lock);
    status =
        etcd_range_value(e, etcd_key, store_net_now_s() + e->op_timeout_s, 1, NULL, NULL, &found);
    pthread_mutex_unlock(&e->lock);
    free(etcd_key);
    if (status != STRATA_OK) break;
    if (found) {
      i++;
      continue;
    }
    double left = deadline_s - store_net_now_s();
    if (left <= 0) return STRATA_ERR_TIMEOUT;
    sleep_s(pause_s < left ? pause_s : left);
    if (pause_s < 0.02) pause_s *= 1.5;
  }
  return status;
}

/* The counter at prefix: the sum of its entries; with `mine` (an entry's key), of the entries
 * created up to that one (STRATA_ERR_PROTOCOL when it is not there: deleted meanwhile). */
static int counter_sum(etcd_store *e, const char *prefix, double deadline_s, const char *mine,
                       int64_t *sum) {
  text body = {0};
  text_prefix_range(&body, prefix);
  text_add(&body, "}");
  json_lite_doc doc;
  char *answer;
  int status = gateway_call(e, "/v3/kv/range", &body, deadline_s, &doc, &answer);
  free(body.buf);
  if (status != STRATA_OK) return status;
  int kvs = answer_kvs(&doc, 0), n = kvs >= 0 ? doc.tokens[kvs].count : 0;
  int64_t *created = calloc((size_t)n + 1, sizeof *created), mine_revision = 0;
  uint64_t *delta = calloc((size_t)n + 1, sizeof *delta);
  if (!created || !delta) status = STRATA_ERR_NO_MEMORY;
  /* element by element along the tokens (json_lite_element from the start each time would make
   * an answer of many entries quadratic) */
  for (int i = 0, kv = json_lite_element(&doc, kvs, 0); i < n && status == STRATA_OK;
       i++, kv = kv >= 0 && kv < doc.ntokens ? doc.tokens[kv].after : -1) {
    uint8_t *key = NULL, *sealed = NULL;
    size_t key_len = 0, sealed_len = 0;
    status = token_base64(&doc, json_lite_member(&doc, kv, "key"), &key, &key_len);
    if (status == STRATA_OK)
      status = token_base64(&doc, json_lite_member(&doc, kv, "value"), &sealed, &sealed_len);
    if (status == STRATA_OK &&
        json_lite_int64(&doc, json_lite_member(&doc, kv, "create_revision"), &created[i]) != 0)
      status = STRATA_ERR_PROTOCOL;
    char *name = NULL;
    if (status == STRATA_OK && !(name = malloc(key_len + 1))) status = STRATA_ERR_NO_MEMORY;
    if (status == STRATA_OK) {
      memcpy(name, key, key_len);
      name[key_len] = '\0';
      if (strlen(name) != key_len || strncmp(name, prefix, strlen(prefix)) != 0)
        status = STRATA_ERR_PROTOCOL; /* not an entry of this counter */
    }
    if (status == STRATA_OK) status = unseal(e, name, sealed, sealed_len);
    if (status == STRATA_OK && sealed_len != ETCD_SEAL_OVERHEAD + 8) status = STRATA_ERR_PROTOCOL;
    if (status == STRATA_OK) {
      for (int b = 0; b < 8; b++) delta[i] |= (uint64_t)sealed[1 + ETCD_NONCE_BYTES + b] << (8 * b);
      if (mine && !strcmp(name, mine)) mine_revision = created[i];
    }
    free(name);
    free(key);
    free(sealed);
  }
  if (status == STRATA_OK && mine && mine_revision == 0) status = STRATA_ERR_PROTOCOL;
  uint64_t total = 0;
  for (int i = 0; i < n && status == STRATA_OK; i++)
    if (!mine || created[i] <= mine_revision) total += delta[i];
  if (status == STRATA_OK) *sum = (int64_t)total;
  free(created);
  free(delta);
  json_lite_free(&doc);
  free(answer);
  return status;
}

static int store_add(strata_store *s, const char *key, int64_t delta, int64_t *result) {
  etcd_store *e = etcd_of(s);
  if (!key_ok(key)) return STRATA_ERR_INVALID_ARG;
  char *prefix = counter_prefix(e, key);
  if (!prefix) return STRATA_ERR_NO_MEMORY;
  int64_t sum = 0;
  int status;
  double deadline_s = store_net_now_s() + e->op_timeout_s;
  pthread_mutex_lock(&e->lock);
  if (delta == 0) {
    status = counter_sum(e, prefix, deadline_s, NULL, &sum);
  } else {
    uint8_t nonce[ETCD_NONCE_BYTES], payload[8];
    randombytes_buf(nonce, sizeof nonce);
    char hex[2 * ETCD_NONCE_BYTES + 1];
    sodium_bin2hex(hex, sizeof hex, nonce, sizeof nonce);
    size_t n = strlen(prefix) + sizeof hex;
    char *entry = malloc(n);
    for (int b = 0; b < 8; b++) payload[b] = (uint8_t)((uint64_t)delta >> (8 * b));
    size_t sealed_len = 0;
    uint8_t *sealed = NULL;
    if (entry) {
      snprintf(entry, n, "%s%s", prefix, hex);
      sealed = seal(e, entry, nonce, payload, sizeof payload, &sealed_len);
    }
    status = sealed ? etcd_put(e, entry, sealed, sealed_len, deadline_s) : STRATA_ERR_NO_MEMORY;
    /* every entry created up to ours: the adds etcd ordered before this one, and this one */
    if (status == STRATA_OK) status = counter_sum(e, prefix, deadline_s, entry, &sum);
    free(sealed);
    free(entry);
  }
  pthread_mutex_unlock(&e->lock);
  free(prefix);
  if (status == STRATA_OK && result) *result = sum;
  return status;
}

static int store_local_host(const strata_store *s, char *host, size_t len) {
  const etcd_store *e = (const etcd_store *)(const void *)s;
  if (!host || len == 0) return STRATA_ERR_INVALID_ARG;
  for (int i = 0; i < e->nendpoints; i++) {
    const http_lite_conn *c = &e->endpoints[(e->current + i) % e->nendpoints];
    if (c->local_host[0]) {
      snprintf(host, len, "%s", c->local_host);
      return STRATA_OK;
    }
  }
  return STRATA_ERR_SYSTEM;
}

static void store_close(strata_store *s) {
  etcd_store *e = etcd_of(s);
  for (int i = 0; i < e->nendpoints; i++) {
    http_lite_close(&e->endpoints[i]);
    free(e->endpoints[i].in);
  }
  sodium_memzero(e->mac_key, sizeof e->mac_key);
  pthread_mutex_destroy(&e->lock);
  free(e);
}

static const strata_store_impl etcd_impl = {.set = store_set,
                                            .set_if_absent = store_set_if_absent,
                                            .get = store_get,
                                            .wait = store_wait,
                                            .add = store_add,
                                            .local_host = store_local_host,
                                            .close = store_close};

int strata_store_is_etcd_url(const char *url) {
  return url && !strncmp(url, STRATA_ETCD_SCHEME, strlen(STRATA_ETCD_SCHEME));
}

/* "etcd://h:p,h:p" into e's endpoints; why it is not one into err. */
static int parse_url(etcd_store *e, const char *url, char *err, size_t err_len) {
  const char *p = url + strlen(STRATA_ETCD_SCHEME);
  while (*p) {
    size_t n = strcspn(p, ",");
    char endpoint[300];
    if (n == 0 || n >= sizeof endpoint) {
      snprintf(err, err_len, "an empty or overlong endpoint");
      return STRATA_ERR_CONFIG;
    }
    if (e->nendpoints == ETCD_MAX_ENDPOINTS) {
      snprintf(err, err_len, "more than %d endpoints", ETCD_MAX_ENDPOINTS);
      return STRATA_ERR_CONFIG;
    }
    memcpy(endpoint, p, n);
    endpoint[n] = '\0';
    if (http_lite_init(&e->endpoints[e->nendpoints], endpoint) != STRATA_OK) {
      snprintf(err, err_len, "'%s' is not HOST:PORT", endpoint);
      return STRATA_ERR_CONFIG;
    }
    e->nendpoints++;
    p += n;
    if (*p == ',') p++;
  }
  if (e->nendpoints == 0) {
    snprintf(err, err_len, "no endpoint");
    return STRATA_ERR_CONFIG;
  }
  return STRATA_OK;
}

int strata_store_connect_etcd(const char *url, const char *secret, const char *job_id,
                              double timeout_s, strata_store **out) {
  if (!out || !strata_store_is_etcd_url(url) || !(timeout_s > 0)) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  etcd_store *e = calloc(1, sizeof *e);
  if (!e) return STRATA_ERR_NO_MEMORY;
  e->head.impl = &etcd_impl;
  for (int i = 0; i < ETCD_MAX_ENDPOINTS; i++) e->endpoints[i].fd = -1;
  pthread_mutex_init(&e->lock, NULL);
  snprintf(e->url, sizeof e->url, "%s", url);
  e->op_timeout_s = timeout_s;
  char err[320] = "";
  int status = parse_url(e, url, err, sizeof err);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "store: %.200s: %s (expected %sHOST:PORT[,HOST:PORT...])", url,
               err, STRATA_ETCD_SCHEME);
    store_close((strata_store *)(void *)e);
    return status;
  }
  const char *job = job_id && job_id[0] ? job_id : "strata";
  size_t job_len = strcspn(job, "/~"); /* the job's own id, as core/secret.c salts it */
  snprintf(e->prefix, sizeof e->prefix, "strata/%.*s/", (int)(job_len > 32 ? 32 : job_len), job);
  uint8_t job_key[32];
  status = store_net_auth_key(secret, job_id, job_key);
  if (status == STRATA_OK) {
    static const char domain[] = "strata-etcd-value-v1";
    crypto_generichash(e->mac_key, sizeof e->mac_key, (const uint8_t *)domain, sizeof domain - 1,
                       job_key, sizeof job_key);
  }
  sodium_memzero(job_key, sizeof job_key);
  /* one round trip that a member with a leader answers: the cluster is there */
  if (status == STRATA_OK) {
    int found = 0;
    char probe[96];
    snprintf(probe, sizeof probe, "%sv/", e->prefix);
    pthread_mutex_lock(&e->lock);
    status = etcd_range_value(e, probe, store_net_now_s() + timeout_s, 1, NULL, NULL, &found);
    pthread_mutex_unlock(&e->lock);
  }
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "store: cannot reach etcd at %s: %s", url,
               strata_strerror(status));
    store_close((strata_store *)(void *)e);
    return status;
  }
  *out = (strata_store *)(void *)e;
  return STRATA_OK;
}
