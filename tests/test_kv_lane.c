// SPDX-License-Identifier: Apache-2.0
/*
 * test_kv_lane.c — the low-latency lane (strata_kv_lane_call): request/reply with tags, the
 * handler's errors and reply limits reaching the caller, calls from several threads to one peer
 * serialized correctly, and — the point of the lane — 4 KiB calls answered while a large WRITE
 * to the same peer is on the wire (a call counts when the transfer is still in progress after
 * its reply arrived; up to 50 such calls, then the transfer is waited for). Functional only: the
 * lane's latency under load is a benchmark (bench/kv), not a timed test.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/check.h"
#include "strata.h"
#include "strata_kv.h"

#define SECRET "kv-lane-secret"
#define BULK (128u << 20)

static strata_kv_agent *make_agent(const char *name) {
  strata_kv_config cfg;
  strata_kv_config_init(&cfg);
  cfg.name = name;
  cfg.secret = SECRET;
  cfg.backend = STRATA_KV_BACKEND_TCP;
  cfg.streams = 2;
  cfg.timeout_s = 10;
  strata_kv_agent *a = NULL;
  CHECK_STATUS(strata_kv_agent_create(&cfg, &a), STRATA_OK);
  return a;
}

/* tag 1: echo; tag 2: refuse; tag 3: a reply of the request's first byte × 1000 bytes */
static int handler(void *ctx, const char *from, uint32_t tag, const void *req, size_t len,
                   void *reply, size_t cap, size_t *reply_len) {
  (void)ctx;
  if (strcmp(from, "prefill")) return STRATA_ERR_AUTH;
  if (tag == 2) return STRATA_ERR_NOT_FOUND;
  if (tag == 3) {
    size_t n = len ? (size_t)((const uint8_t *)req)[0] * 1000 : 0;
    if (n > cap) return STRATA_ERR_INVALID_ARG;
    memset(reply, 'r', n);
    *reply_len = n;
    return STRATA_OK;
  }
  memcpy(reply, req, len);
  *reply_len = len;
  return STRATA_OK;
}

typedef struct caller {
  strata_kv_agent *agent;
  int peer, id, errors;
} caller;

static void *call_many(void *arg) {
  caller *c = arg;
  for (int i = 0; i < 200; i++) {
    char req[64], rep[64];
    int n = snprintf(req, sizeof req, "caller %d call %d", c->id, i);
    size_t got = 0;
    int status =
        strata_kv_lane_call(c->agent, c->peer, 1, req, (size_t)n, rep, sizeof rep, &got, 0);
    if (status != STRATA_OK || got != (size_t)n || memcmp(req, rep, got)) c->errors++;
  }
  return NULL;
}

int main(void) {
  strata_kv_agent *prefill = make_agent("prefill"), *decode = make_agent("decode");
  if (!prefill || !decode) return 1;
  uint8_t *src = malloc(BULK), *dst = malloc(BULK);
  memset(src, 0x3c, BULK);
  memset(dst, 0, BULK);
  uint32_t src_id, dst_id;
  CHECK_STATUS(strata_kv_register(prefill, src, BULK, &src_id), STRATA_OK);
  CHECK_STATUS(strata_kv_register(decode, dst, BULK, &dst_id), STRATA_OK);
  void *blob;
  size_t blob_bytes;
  int peer;
  CHECK_STATUS(strata_kv_metadata_export(decode, &blob, &blob_bytes), STRATA_OK);
  CHECK_STATUS(strata_kv_peer_load(prefill, blob, blob_bytes, &peer), STRATA_OK);
  free(blob);

  /* before a handler is set: UNSUPPORTED, and the lane stays usable */
  size_t got;
  char reply[STRATA_KV_LANE_MAX_BYTES];
  CHECK_STATUS(strata_kv_lane_call(prefill, peer, 1, "x", 1, reply, sizeof reply, &got, 0),
               STRATA_ERR_UNSUPPORTED);
  strata_kv_lane_set_handler(decode, handler, NULL);
  CHECK_STATUS(strata_kv_lane_call(prefill, peer, 1, "hello", 5, reply, sizeof reply, &got, 0),
               STRATA_OK);
  CHECK(got == 5 && !memcmp(reply, "hello", 5));
  CHECK_STATUS(strata_kv_lane_call(prefill, peer, 2, "x", 1, reply, sizeof reply, &got, 0),
               STRATA_ERR_NOT_FOUND);
  uint8_t big = 60; /* 60000 bytes back */
  CHECK_STATUS(strata_kv_lane_call(prefill, peer, 3, &big, 1, reply, sizeof reply, &got, 0),
               STRATA_OK);
  CHECK(got == 60000 && reply[0] == 'r' && reply[59999] == 'r');
  CHECK_STATUS(strata_kv_lane_call(prefill, peer, 3, &big, 1, reply, 100, &got, 0),
               STRATA_ERR_INVALID_ARG); /* the caller's buffer is too small: in step after */
  CHECK_STATUS(strata_kv_lane_call(prefill, peer, 1, reply, STRATA_KV_LANE_MAX_BYTES, reply,
                                   sizeof reply, &got, 0),
               STRATA_OK); /* a request of the largest size */
  CHECK_STATUS(strata_kv_lane_call(prefill, peer, 1, reply, STRATA_KV_LANE_MAX_BYTES + 1, reply,
                                   sizeof reply, &got, 0),
               STRATA_ERR_INVALID_ARG);

  /* several threads, one peer */
  caller callers[3];
  pthread_t threads[3];
  for (int i = 0; i < 3; i++) {
    callers[i] = (caller){prefill, peer, i, 0};
    pthread_create(&threads[i], NULL, call_many, &callers[i]);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(threads[i], NULL);
    CHECK(callers[i].errors == 0, "caller %d: %d wrong replies", i, callers[i].errors);
  }

  /* calls answered while a bulk WRITE to the same peer is in flight */
  strata_kv_desc l = {(uint64_t)(uintptr_t)src, BULK, 0, 0};
  strata_kv_desc r = {(uint64_t)(uintptr_t)dst, BULK, dst_id, 0};
  strata_kv_xfer *x;
  CHECK_STATUS(strata_kv_xfer_post(prefill, STRATA_KV_WRITE, peer, &l, &r, 1, NULL, 0, &x),
               STRATA_OK);
  int during = 0, calls = 0;
  while (strata_kv_xfer_status(x) == STRATA_ERR_IN_PROGRESS && during < 50) {
    char req[4096];
    memset(req, calls & 0xff, sizeof req);
    CHECK_STATUS(
        strata_kv_lane_call(prefill, peer, 1, req, sizeof req, reply, sizeof reply, &got, 0),
        STRATA_OK);
    calls++;
    if (strata_kv_xfer_status(x) == STRATA_ERR_IN_PROGRESS) during++;
  }
  CHECK_STATUS(strata_kv_xfer_wait(x, 60), STRATA_OK);
  strata_kv_xfer_release(x);
  CHECK(during > 0, "no lane call completed while the bulk WRITE ran");
  CHECK(dst[0] == 0x3c && dst[BULK - 1] == 0x3c);
  printf("lane: %d calls answered during a %u MiB WRITE\n", during, BULK >> 20);
  strata_kv_agent_destroy(prefill);
  strata_kv_agent_destroy(decode);
  free(src);
  free(dst);
  printf("lane: %s\n", failures ? "FAILED" : "ok");
  return failures != 0;
}
