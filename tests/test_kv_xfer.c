// SPDX-License-Identifier: Apache-2.0
/*
 * test_kv_xfer.c — the KV agent's transfer suite (strata_kv.h), run once per backend: TCP in
 * clear, TCP sealed, and SHM (the target copies by cross-memory attach) in clear and with its
 * frames sealed; `test_kv_xfer ucx` runs
 * it on UCX (its own ctest entries; exit 77, skipped, in a build without UCX). Two agents of this
 * process on loopback: WRITE of many descriptors of mixed sizes (several slices each, striped
 * over the streams) with a notification, READ back, a notification alone, cancel, a transfer of
 * nothing, loading a restarted peer by name, the metadata through an authenticated store (and a
 * store with another secret refused), and a peer that is destroyed failing its transfers and
 * lane calls with PEER_LOST instead of hanging; on UCX, idle agents that do not keep polling.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "helpers/check.h"
#include "helpers/ranks.h"
#include "strata.h"
#include "strata_kv.h"

#define SECRET "kv-test-secret"
#define REGION_BYTES (24u << 20)
#define BLOCKS 24

typedef struct pair {
  strata_kv_agent *initiator, *target;
  uint8_t *local, *remote;
  uint32_t local_region, remote_region;
  int peer;
} pair;

static int make_agent(const char *name, int backend, int encrypt, strata_kv_agent **out) {
  strata_kv_config cfg;
  strata_kv_config_init(&cfg);
  cfg.name = name;
  cfg.secret = SECRET;
  cfg.backend = backend;
  cfg.seal = encrypt;
  cfg.streams = 3;
  cfg.slice_bytes = 256 << 10;
  cfg.timeout_s = 5;
  return strata_kv_agent_create(&cfg, out);
}

static int load(strata_kv_agent *from, strata_kv_agent *to, int *peer) {
  void *blob;
  size_t bytes;
  int status = strata_kv_metadata_export(to, &blob, &bytes);
  if (status != STRATA_OK) return status;
  status = strata_kv_peer_load(from, blob, bytes, peer);
  free(blob);
  return status;
}

static int pair_open(pair *p, int backend, int encrypt) {
  memset(p, 0, sizeof *p);
  CHECK_OR_RETURN(make_agent("prefill", backend, encrypt, &p->initiator) == STRATA_OK);
  CHECK_OR_RETURN(make_agent("decode", backend, encrypt, &p->target) == STRATA_OK);
  p->local = malloc(REGION_BYTES);
  p->remote = malloc(REGION_BYTES);
  CHECK_OR_RETURN(p->local && p->remote);
  CHECK_STATUS(strata_kv_register(p->initiator, p->local, REGION_BYTES, &p->local_region),
               STRATA_OK);
  CHECK_STATUS(strata_kv_register(p->target, p->remote, REGION_BYTES, &p->remote_region),
               STRATA_OK);
  CHECK_STATUS(load(p->initiator, p->target, &p->peer), STRATA_OK);
  int want = backend == STRATA_KV_BACKEND_AUTO ? STRATA_KV_BACKEND_SHM : backend;
  CHECK(strata_kv_peer_backend(p->initiator, p->peer) == want, "backend %d, want %d",
        strata_kv_peer_backend(p->initiator, p->peer), want);
  return failures;
}

static void pair_close(pair *p) {
  strata_kv_agent_destroy(p->initiator);
  strata_kv_agent_destroy(p->target);
  free(p->local);
  free(p->remote);
}

/* BLOCKS blocks of mixed sizes (1 byte to 1.5 MiB: whole slices, partial ones, many per
 * block), local ones packed from the start, remote ones scattered in reverse order. */
static size_t build_descs(pair *p, strata_kv_desc *local, strata_kv_desc *remote) {
  size_t offset = 0, total = 0;
  for (int i = 0; i < BLOCKS; i++) {
    uint64_t bytes = i == 0 ? 1 : (uint64_t)(i * 65521) % (3u << 19) + 4093;
    local[i] = (strata_kv_desc){.addr = (uint64_t)(uintptr_t)(p->local + offset), .bytes = bytes};
    uint64_t remote_offset = REGION_BYTES - offset - bytes;
    remote[i] = (strata_kv_desc){.addr = (uint64_t)(uintptr_t)(p->remote + remote_offset),
                                 .bytes = bytes,
                                 .region = p->remote_region};
    offset += bytes;
    total += bytes;
  }
  return total;
}

static void test_write_read(pair *p, const char *label) {
  strata_kv_desc local[BLOCKS], remote[BLOCKS];
  build_descs(p, local, remote);
  for (size_t i = 0; i < REGION_BYTES; i++) p->local[i] = (uint8_t)(i * 131 + 7);
  memset(p->remote, 0, REGION_BYTES);
  const char note[] = "layer 7 blocks ready";
  strata_kv_xfer *x;
  CHECK_STATUS(strata_kv_xfer_post(p->initiator, STRATA_KV_WRITE, p->peer, local, remote, BLOCKS,
                                   note, sizeof note, &x),
               STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 20), STRATA_OK);
  CHECK(!strcmp(strata_kv_xfer_error(x), ""));
  strata_kv_xfer_release(x);
  int mismatches = 0;
  for (int i = 0; i < BLOCKS; i++)
    if (memcmp((void *)(uintptr_t)local[i].addr, (void *)(uintptr_t)remote[i].addr, local[i].bytes))
      mismatches++;
  CHECK(mismatches == 0, "%s: %d blocks differ after WRITE", label, mismatches);
  /* The notification was queued before the WRITE reported OK. */
  char from[STRATA_KV_NAME_BYTES], msg[64];
  size_t bytes = 0;
  CHECK_STATUS(strata_kv_notifs_get(p->target, from, msg, sizeof msg, &bytes, 0), STRATA_OK);
  CHECK(bytes == sizeof note && !memcmp(msg, note, bytes) && !strcmp(from, "prefill"),
        "%s: notification '%.*s' from %s", label, (int)bytes, msg, from);
  CHECK_STATUS(strata_kv_notifs_get(p->target, from, msg, sizeof msg, &bytes, 0),
               STRATA_ERR_TIMEOUT);

  /* READ the blocks back into a cleared local region. */
  memset(p->local, 0xee, REGION_BYTES);
  for (int i = 0; i < BLOCKS; i++) p->remote[REGION_BYTES - 1 - i] ^= 0x5a; /* make them new */
  CHECK_STATUS(strata_kv_xfer_post(p->initiator, STRATA_KV_READ, p->peer, local, remote, BLOCKS,
                                   NULL, 0, &x),
               STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 20), STRATA_OK);
  strata_kv_xfer_release(x);
  mismatches = 0;
  for (int i = 0; i < BLOCKS; i++)
    if (memcmp((void *)(uintptr_t)local[i].addr, (void *)(uintptr_t)remote[i].addr, local[i].bytes))
      mismatches++;
  CHECK(mismatches == 0, "%s: %d blocks differ after READ", label, mismatches);
}

static void test_small_things(pair *p) {
  strata_kv_xfer *x;
  /* nothing to move: done at once */
  CHECK_STATUS(
      strata_kv_xfer_post(p->initiator, STRATA_KV_READ, p->peer, NULL, NULL, 0, NULL, 0, &x),
      STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_status(x), STRATA_OK);
  strata_kv_xfer_release(x);
  /* a notification alone, through a transfer and through notify */
  CHECK_STATUS(
      strata_kv_xfer_post(p->initiator, STRATA_KV_WRITE, p->peer, NULL, NULL, 0, "n1", 2, &x),
      STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 5), STRATA_OK);
  strata_kv_xfer_release(x);
  CHECK_STATUS(strata_kv_notify(p->initiator, p->peer, "n2", 2), STRATA_OK);
  char msg[4];
  size_t bytes;
  CHECK_STATUS(strata_kv_notifs_get(p->target, NULL, msg, 1, &bytes, 0), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_kv_notifs_get(p->target, NULL, msg, sizeof msg, &bytes, 0), STRATA_OK);
  CHECK(bytes == 2 && !memcmp(msg, "n1", 2));
  CHECK_STATUS(strata_kv_notifs_get(p->target, NULL, msg, sizeof msg, &bytes, 0), STRATA_OK);
  CHECK(bytes == 2 && !memcmp(msg, "n2", 2));
  /* argument checks */
  strata_kv_desc l = {(uint64_t)(uintptr_t)p->local, 16, 0, 0};
  strata_kv_desc r = {(uint64_t)(uintptr_t)p->remote, 8, p->remote_region, 0};
  CHECK_STATUS(strata_kv_xfer_post(p->initiator, STRATA_KV_READ, p->peer, &l, &r, 1, NULL, 0, &x),
               STRATA_ERR_INVALID_ARG); /* lengths differ */
  r.bytes = 16;
  CHECK_STATUS(strata_kv_xfer_post(p->initiator, STRATA_KV_READ, p->peer, &l, &r, 1, "x", 1, &x),
               STRATA_ERR_INVALID_ARG); /* a notification on a READ */
  CHECK_STATUS(strata_kv_xfer_post(p->initiator, STRATA_KV_READ, 17, &l, &r, 1, NULL, 0, &x),
               STRATA_ERR_NOT_FOUND);
  uint8_t unregistered[16];
  l.addr = (uint64_t)(uintptr_t)unregistered;
  CHECK_STATUS(strata_kv_xfer_post(p->initiator, STRATA_KV_READ, p->peer, &l, &r, 1, NULL, 0, &x),
               STRATA_ERR_INVALID_ARG); /* local memory outside the local regions */
}

static void test_cancel(pair *p) {
  strata_kv_desc l = {(uint64_t)(uintptr_t)p->local, REGION_BYTES, 0, 0};
  strata_kv_desc r = {(uint64_t)(uintptr_t)p->remote, REGION_BYTES, p->remote_region, 0};
  strata_kv_xfer *x;
  CHECK_STATUS(strata_kv_xfer_post(p->initiator, STRATA_KV_WRITE, p->peer, &l, &r, 1, "c", 1, &x),
               STRATA_OK);
  strata_kv_xfer_cancel(x);
  int status = strata_kv_xfer_wait(x, 20);
  CHECK(status == STRATA_ERR_ABORTED || status == STRATA_OK, "cancel: %s", strata_err_name(status));
  strata_kv_xfer_release(x);
  /* The connections are still in step: a transfer after the cancel works. */
  CHECK_STATUS(strata_kv_xfer_post(p->initiator, STRATA_KV_READ, p->peer, &l, &r, 1, NULL, 0, &x),
               STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 20), STRATA_OK);
  strata_kv_xfer_release(x);
  /* drain the notification the cancelled WRITE may have sent */
  char msg[4];
  size_t bytes;
  (void)strata_kv_notifs_get(p->target, NULL, msg, sizeof msg, &bytes, 0);
}

/* Deregistering a region while a transfer reads it: deregister returns once the slices touching
 * it are done, every later slice is refused, and the memory is freed at once (an access after
 * that is a use after free under AddressSanitizer). */
static void test_deregister_in_flight(pair *p) {
  enum { BYTES = 8 << 20 };
  uint8_t *mem = malloc(BYTES);
  memset(mem, 0x5c, BYTES);
  memset(p->local, 0, REGION_BYTES);
  uint32_t id;
  CHECK_STATUS(strata_kv_register(p->target, mem, BYTES, &id), STRATA_OK);
  strata_kv_desc l[4], r[4];
  for (int i = 0; i < 4; i++) {
    l[i] = (strata_kv_desc){(uint64_t)(uintptr_t)p->local + (uint64_t)i * BYTES / 2, BYTES, 0, 0};
    r[i] = (strata_kv_desc){(uint64_t)(uintptr_t)mem, BYTES, id, 0};
  }
  strata_kv_xfer *x;
  CHECK_STATUS(strata_kv_xfer_post(p->initiator, STRATA_KV_READ, p->peer, l, r, 4, NULL, 0, &x),
               STRATA_OK);
  CHECK_STATUS(strata_kv_deregister(p->target, id), STRATA_OK);
  memset(mem, 0xee, BYTES);
  free(mem);
  int status = strata_kv_xfer_wait(x, 20);
  CHECK(status == STRATA_OK || status == STRATA_ERR_INVALID_ARG, "READ across deregister: %s",
        strata_err_name(status));
  strata_kv_xfer_release(x);
  /* nothing the READ brought back is from after the deregistration */
  size_t late = 0;
  for (size_t i = 0; i < REGION_BYTES; i++) late += p->local[i] == 0xee;
  CHECK(late == 0, "%zu bytes read after the region was withdrawn", late);
}

/* A restarted target (same name, new agent) replaces its predecessor; old transfers fail. */
static void test_restart(pair *p, int backend, int encrypt) {
  strata_kv_agent *again;
  if (make_agent("decode", backend, encrypt, &again) != STRATA_OK) {
    CHECK(!"agent created");
    return;
  }
  uint8_t *mem = calloc(1, 1 << 20);
  uint32_t region;
  CHECK_STATUS(strata_kv_register(again, mem, 1 << 20, &region), STRATA_OK);
  int peer;
  CHECK_STATUS(load(p->initiator, again, &peer), STRATA_OK);
  CHECK(peer == p->peer, "the restarted peer takes its predecessor's slot");
  memset(p->local, 3, 4096);
  strata_kv_desc l = {(uint64_t)(uintptr_t)p->local, 4096, 0, 0};
  strata_kv_desc r = {(uint64_t)(uintptr_t)mem + 8192, 4096, region, 0};
  strata_kv_xfer *x;
  CHECK_STATUS(strata_kv_xfer_post(p->initiator, STRATA_KV_WRITE, peer, &l, &r, 1, NULL, 0, &x),
               STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 10), STRATA_OK);
  strata_kv_xfer_release(x);
  CHECK(mem[8192] == 3 && mem[8192 + 4095] == 3);
  /* The peer goes away: transfers and lane calls fail, promptly, with PEER_LOST. */
  strata_kv_agent_destroy(again);
  free(mem);
  int status = strata_kv_xfer_post(p->initiator, STRATA_KV_WRITE, peer, &l, &r, 1, NULL, 0, &x);
  if (status == STRATA_OK) {
    status = strata_kv_xfer_wait(x, 20);
    strata_kv_xfer_release(x);
  }
  CHECK(status == STRATA_ERR_PEER_LOST, "to a destroyed peer: %s", strata_err_name(status));
  size_t bytes;
  CHECK_STATUS(strata_kv_lane_call(p->initiator, peer, 1, "q", 1, NULL, 0, &bytes, 5),
               STRATA_ERR_PEER_LOST);
  CHECK_STATUS(strata_kv_peer_forget(p->initiator, peer), STRATA_OK);
  CHECK_STATUS(strata_kv_peer_forget(p->initiator, peer), STRATA_ERR_NOT_FOUND);
}

static void test_store(pair *p) {
  strata_store_server *server, *other;
  if (strata_store_server_start_auth("127.0.0.1:0", SECRET, "strata-kv", &server) != STRATA_OK) {
    CHECK(!"store started");
    return;
  }
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", strata_store_server_port(server));
  CHECK_STATUS(strata_kv_metadata_publish(p->target, addr, 5), STRATA_OK);
  int peer;
  CHECK_STATUS(strata_kv_peer_fetch(p->initiator, addr, "decode", 5, &peer), STRATA_OK);
  CHECK(peer == p->peer, "fetching a loaded name replaces it in place");
  p->peer = peer;
  CHECK_STATUS(strata_kv_peer_fetch(p->initiator, addr, "nobody", 0.3, &peer), STRATA_ERR_TIMEOUT);
  strata_store_server_stop(server);
  /* A store of another secret refuses the agent. */
  if (strata_store_server_start_auth("127.0.0.1:0", "another secret", "strata-kv", &other) !=
      STRATA_OK) {
    CHECK(!"second store started");
    return;
  }
  snprintf(addr, sizeof addr, "127.0.0.1:%d", strata_store_server_port(other));
  CHECK_STATUS(strata_kv_metadata_publish(p->target, addr, 2), STRATA_ERR_AUTH);
  strata_store_server_stop(other);
}

/* STRATA_KV_BACKEND names the backend of an agent whose config leaves AUTO; a config that
 * names one wins; a value that names none is refused. */
static void test_backend_env(void) {
  strata_kv_agent *a = NULL, *b = NULL;
  setenv("STRATA_KV_BACKEND", "bogus", 1);
  CHECK_STATUS(make_agent("x", STRATA_KV_BACKEND_AUTO, 0, &a), STRATA_ERR_CONFIG);
  setenv("STRATA_KV_BACKEND", "tcp", 1);
  if (make_agent("prefill", STRATA_KV_BACKEND_AUTO, 0, &a) == STRATA_OK &&
      make_agent("decode", STRATA_KV_BACKEND_SHM, 0, &b) == STRATA_OK) {
    int peer;
    CHECK_STATUS(load(a, b, &peer), STRATA_OK);
    CHECK(strata_kv_peer_backend(a, peer) == STRATA_KV_BACKEND_TCP, "AUTO + env tcp: %d",
          strata_kv_peer_backend(a, peer));
    CHECK_STATUS(load(b, a, &peer), STRATA_OK);
    CHECK(strata_kv_peer_backend(b, peer) == STRATA_KV_BACKEND_SHM, "a config's SHM wins: %d",
          strata_kv_peer_backend(b, peer));
  } else {
    CHECK(!"agents created");
  }
  strata_kv_agent_destroy(a);
  strata_kv_agent_destroy(b);
  a = NULL;
  setenv("STRATA_KV_BACKEND", "ucx", 1);
  int want =
      strata_kv_backend_supported(STRATA_KV_BACKEND_UCX) ? STRATA_OK : STRATA_ERR_UNSUPPORTED;
  CHECK_STATUS(make_agent("x", STRATA_KV_BACKEND_AUTO, 0, &a), want);
  strata_kv_agent_destroy(a);
  unsetenv("STRATA_KV_BACKEND");
  printf("backend from the environment: %s\n", failures ? "FAILED" : "ok");
}

/* UCX: the worker polls while slices are in flight and shortly after; then it sleeps. Over half
 * a second starting 0.1 s after a transfer, both agents' threads together use a small part of a
 * core (a worker that kept polling would use all of one, or two). */
static void test_idle_sleeps(void) {
  struct rusage before, after;
  strata_test_sleep_s(0.1); /* past the polling that follows the last transfer */
  getrusage(RUSAGE_SELF, &before);
  strata_test_sleep_s(0.5);
  getrusage(RUSAGE_SELF, &after);
  double used = (double)(after.ru_utime.tv_sec - before.ru_utime.tv_sec) +
                (double)(after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
                1e-6 * (double)(after.ru_utime.tv_usec - before.ru_utime.tv_usec) +
                1e-6 * (double)(after.ru_stime.tv_usec - before.ru_stime.tv_usec);
  CHECK(used < 0.2, "idle UCX agents used %.3f s of CPU in 0.5 s: a worker does not sleep", used);
}

static void suite(int backend, int encrypt, const char *label) {
  pair p;
  if (pair_open(&p, backend, encrypt) == 0) {
    test_write_read(&p, label);
    if (backend == STRATA_KV_BACKEND_UCX) test_idle_sleeps();
    test_small_things(&p);
    test_cancel(&p);
    test_deregister_in_flight(&p);
    test_store(&p);
    test_write_read(&p, label); /* through the peer fetched from the store */
    test_restart(&p, backend, encrypt);
  }
  pair_close(&p);
  printf("%s: %s\n", label, failures ? "FAILED" : "ok");
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : "";
  if (!strcmp(only, "ucx")) {
    if (!strata_kv_backend_supported(STRATA_KV_BACKEND_UCX)) {
      printf("ucx: SKIP (built without UCX)\n");
      return 77;
    }
    suite(STRATA_KV_BACKEND_UCX, 0, "ucx");
    /* backend UCX towards an agent that runs no UCP worker: refused, clearly */
    strata_kv_agent *ucx = NULL, *plain = NULL;
    if (make_agent("prefill", STRATA_KV_BACKEND_UCX, 0, &ucx) == STRATA_OK &&
        make_agent("decode", STRATA_KV_BACKEND_TCP, 0, &plain) == STRATA_OK) {
      int peer;
      CHECK_STATUS(load(ucx, plain, &peer), STRATA_ERR_UNSUPPORTED);
      CHECK_STATUS(load(plain, ucx, &peer), STRATA_OK); /* the other way: TCP, as it asked */
    } else {
      CHECK(!"agents created");
    }
    strata_kv_agent_destroy(ucx);
    strata_kv_agent_destroy(plain);
    return failures != 0;
  }
  if (!only[0] || !strcmp(only, "tcp")) suite(STRATA_KV_BACKEND_TCP, 0, "tcp");
  if (!only[0] || !strcmp(only, "tcp-sealed")) suite(STRATA_KV_BACKEND_TCP, 1, "tcp-sealed");
  if (!only[0] || !strcmp(only, "shm")) suite(STRATA_KV_BACKEND_SHM, 0, "shm");
  if (!only[0] || !strcmp(only, "shm-sealed")) suite(STRATA_KV_BACKEND_SHM, 1, "shm-sealed");
  if (!only[0]) test_backend_env();
  return failures != 0;
}
