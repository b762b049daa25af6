// SPDX-License-Identifier: Apache-2.0
/*
 * test_kv_safety.c — the target is the authority on its memory (strata_kv.h). Through the
 * public API, on TCP and on SHM, crafted remote descriptors — straddling either end of a
 * region, just past it, at an address that wraps around, naming an unknown region, naming a
 * region that does not contain the address, naming a region since deregistered — are refused by
 * the target (its refusal count and message) and fail the initiator's transfer with
 * STRATA_ERR_INVALID_ARG and the target's reason; guard bytes around the region stay untouched
 * and a refused READ leaves the local buffer as it was (nothing disclosed). The connections stay
 * in step: a good transfer follows.
 *
 * Below the API, an authenticated but hostile client (the internal dialer) sends a slice larger
 * than any slice, an oversized message and an unknown frame: each loses its connection and the
 * target keeps serving. Strangers without the secret (garbage, silence) are dropped without
 * delaying a real peer; an agent of another secret is refused with STRATA_ERR_AUTH; every
 * truncation and a sample of corruptions of a metadata blob parse to STRATA_ERR_PARSE or a peer,
 * never a crash.
 *
 * `test_kv_safety ucx` (77, skipped, without UCX): the crafted descriptors on the UCX backend
 * (among them slices large enough to go by rendezvous), and an initiator whose token is not the
 * one the target issued: its WRITE — by rendezvous, then eager — is refused and counted at the
 * target, leaves the region as it was, and fails at the initiator within the timeout instead of
 * hanging.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/core.h"
#include "helpers/check.h"
#include "serve/kv_internal.h"
#include "strata.h"
#include "strata_kv.h"

#define SECRET "kv-safety-secret"
#define GUARD 4096
#define REGION (64u << 10)

static strata_kv_agent *make_agent(const char *name, const char *secret, int backend) {
  strata_kv_config cfg;
  strata_kv_config_init(&cfg);
  cfg.name = name;
  cfg.secret = secret;
  cfg.backend = backend;
  cfg.streams = 2;
  cfg.timeout_s = 3;
  strata_kv_agent *a = NULL;
  CHECK_STATUS(strata_kv_agent_create(&cfg, &a), STRATA_OK);
  return a;
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

static int guards_intact(const uint8_t *block) {
  for (size_t i = 0; i < GUARD; i++)
    if (block[i] != 0xab || block[GUARD + REGION + i] != 0xab) return 0;
  return 1;
}

typedef struct crafted {
  const char *what;
  uint64_t addr, bytes;
  uint32_t region;
  const char *reason; /* a word the target's message must contain */
} crafted;

static void run_crafted(strata_kv_agent *initiator, strata_kv_agent *target, int peer,
                        uint8_t *local, const crafted *c, const uint8_t *block, const char *label) {
  for (int op = STRATA_KV_READ; op <= STRATA_KV_WRITE; op++) {
    memset(local, 0x11, 2 * REGION);
    uint64_t before = strata_kv_agent_refusals(target, NULL, 0);
    strata_kv_desc l = {(uint64_t)(uintptr_t)local, c->bytes, 0, 0};
    strata_kv_desc r = {c->addr, c->bytes, c->region, 0};
    strata_kv_xfer *x;
    CHECK_STATUS(strata_kv_xfer_post(initiator, (strata_kv_op)op, peer, &l, &r, 1, NULL, 0, &x),
                 STRATA_OK);
    int status = strata_kv_xfer_wait(x, 10);
    CHECK(status == STRATA_ERR_INVALID_ARG, "%s %s %s: %s", label, op ? "WRITE" : "READ", c->what,
          strata_err_name(status));
    CHECK(strstr(strata_kv_xfer_error(x), c->reason), "%s %s: initiator's error '%s'", label,
          c->what, strata_kv_xfer_error(x));
    strata_kv_xfer_release(x);
    char last[256];
    CHECK(strata_kv_agent_refusals(target, last, sizeof last) == before + 1,
          "%s %s: the target counts the refusal", label, c->what);
    CHECK(strstr(last, c->reason) && strstr(last, "prefill"), "%s %s: target's '%s'", label,
          c->what, last);
    CHECK(guards_intact(block), "%s %s: guard bytes changed", label, c->what);
    size_t changed = 0;
    for (size_t i = 0; i < 2 * REGION; i++) changed += local[i] != 0x11;
    CHECK(changed == 0, "%s %s: %zu local bytes changed by a refused transfer", label, c->what,
          changed);
  }
}

static void crafted_descriptors(int backend, const char *label) {
  strata_kv_agent *initiator = make_agent("prefill", SECRET, backend);
  strata_kv_agent *target = make_agent("decode", SECRET, backend);
  if (!initiator || !target) return;
  uint8_t *block = malloc(GUARD + REGION + GUARD), *other = malloc(REGION);
  uint8_t *local = malloc(2 * REGION);
  memset(block, 0xab, GUARD + REGION + GUARD);
  uint8_t *region = block + GUARD;
  memset(region, 0x77, REGION);
  uint32_t id, other_id, gone_id, local_id;
  CHECK_STATUS(strata_kv_register(target, region, REGION, &id), STRATA_OK);
  CHECK_STATUS(strata_kv_register(target, other, REGION, &other_id), STRATA_OK);
  CHECK_STATUS(strata_kv_register(target, block, GUARD, &gone_id), STRATA_OK);
  CHECK_STATUS(strata_kv_register(initiator, local, 2 * REGION, &local_id), STRATA_OK);
  int peer;
  CHECK_STATUS(load(initiator, target, &peer), STRATA_OK);
  CHECK_STATUS(strata_kv_deregister(target, gone_id), STRATA_OK); /* after the blob named it */
  CHECK_STATUS(strata_kv_deregister(target, gone_id), STRATA_ERR_NOT_FOUND);
  uint64_t base = (uint64_t)(uintptr_t)region;
  const crafted cases[] = {
      {"past the end", base + REGION - 8, 16, id, "outside"},
      {"before the start", base - 8, 16, id, "outside"},
      {"just past the end", base + REGION, 1, id, "outside"},
      {"the whole region and a byte", base, REGION + 1, id, "outside"},
      {"an address that wraps", UINT64_MAX - 7, 16, id, "outside"},
      {"an unknown region", base, 16, 999, "not registered"},
      {"region 0", base, 16, 0, "not registered"},
      {"another region's id", base, 16, other_id, "outside"},
      {"a deregistered region", base + 64, 16, gone_id, "not registered"},
      /* slices of 64 KiB and more go by rendezvous on UCX: refused before any byte moves */
      {"past the end, a rendezvous' size", base + REGION / 2, REGION, id, "outside"},
      {"an unknown region, a rendezvous' size", base, 2 * REGION, 999, "not registered"},
      {"a deregistered region, a rendezvous' size", base, REGION, gone_id, "not registered"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_crafted(initiator, target, peer, local, &cases[i], block, label);
  /* One refused descriptor among good ones (one batch on one stream): the good ones land, the
   * transfer fails with the refusal, the stream stays in step. */
  {
    memset(local, 0x5e, 2 * REGION);
    strata_kv_desc ml[3], mr[3];
    for (int i = 0; i < 3; i++) {
      ml[i] = (strata_kv_desc){(uint64_t)(uintptr_t)local + 64 * (uint64_t)i, 32, 0, 0};
      mr[i] = (strata_kv_desc){base + 64 * (uint64_t)i, 32, id, 0};
    }
    mr[1].addr = base + REGION - 16; /* straddles the end */
    strata_kv_xfer *mx;
    CHECK_STATUS(strata_kv_xfer_post(initiator, STRATA_KV_WRITE, peer, ml, mr, 3, NULL, 0, &mx),
                 STRATA_OK);
    CHECK_STATUS(strata_kv_xfer_wait(mx, 10), STRATA_ERR_INVALID_ARG);
    CHECK(strstr(strata_kv_xfer_error(mx), "slice 1"), "%s", strata_kv_xfer_error(mx));
    strata_kv_xfer_release(mx);
    CHECK(region[0] == 0x5e && region[128 + 31] == 0x5e && region[REGION - 1] == 0x77,
          "%s: the good descriptors of a partly refused WRITE", label);
    CHECK(guards_intact(block));
    memset(region, 0x77, REGION);
  }
  /* still in step: the whole region, exactly, both ways */
  strata_kv_desc l = {(uint64_t)(uintptr_t)local, REGION, 0, 0};
  strata_kv_desc r = {base, REGION, id, 0};
  strata_kv_xfer *x;
  CHECK_STATUS(strata_kv_xfer_post(initiator, STRATA_KV_READ, peer, &l, &r, 1, NULL, 0, &x),
               STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 10), STRATA_OK);
  strata_kv_xfer_release(x);
  CHECK(local[0] == 0x77 && local[REGION - 1] == 0x77 && local[REGION] == 0x5e);
  /* A region deregistered after a good transfer is refused from then on. */
  CHECK_STATUS(strata_kv_deregister(target, id), STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_post(initiator, STRATA_KV_WRITE, peer, &l, &r, 1, NULL, 0, &x),
               STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 10), STRATA_ERR_INVALID_ARG);
  strata_kv_xfer_release(x);
  CHECK(region[0] == 0x77, "a WRITE to a deregistered region changed it");
  CHECK(guards_intact(block));
  strata_kv_agent_destroy(initiator);
  strata_kv_agent_destroy(target);
  free(block);
  free(other);
  free(local);
  printf("%s crafted descriptors: %s\n", label, failures ? "FAILED" : "ok");
}

/* ---- below the API ---- */

static int raw_dial_flags(strata_kv_agent *self, strata_kv_agent *target, kv_peer *p, kv_conn *c,
                          int flags, int *granted) {
  memset(p, 0, sizeof *p);
  p->agent = self;
  snprintf(p->address, sizeof p->address, "%s", target->address);
  char err[400] = "";
  return kv_dial(self, p, 0, flags, c, granted, NULL, err, sizeof err);
}

static int raw_dial(strata_kv_agent *self, strata_kv_agent *target, kv_peer *p, kv_conn *c) {
  int granted;
  return raw_dial_flags(self, target, p, c, 0, &granted);
}

/* 1 when the target closed the connection (EOF or reset) within its timeout. */
static int closed_by_target(kv_conn *c) {
  kv_wire_header h;
  int status = kv_conn_recv_header(c, &h, 0);
  return status == STRATA_ERR_PEER_LOST;
}

static void hostile_client(void) {
  strata_kv_agent *target = make_agent("decode", SECRET, STRATA_KV_BACKEND_TCP);
  strata_kv_agent *self = make_agent("mallory", SECRET, STRATA_KV_BACKEND_TCP);
  strata_kv_agent *honest = make_agent("prefill", SECRET, STRATA_KV_BACKEND_TCP);
  uint8_t *mem = calloc(1, REGION), *local = calloc(1, REGION);
  uint32_t id, local_id;
  CHECK_STATUS(strata_kv_register(target, mem, REGION, &id), STRATA_OK);
  CHECK_STATUS(strata_kv_register(honest, local, REGION, &local_id), STRATA_OK);
  kv_peer p;
  kv_conn c;
  const kv_wire_header frames[] = {
      {.type = KV_READ, .region = id, .addr = (uint64_t)(uintptr_t)mem, .bytes = UINT64_MAX},
      {.type = KV_WRITE,
       .region = id,
       .addr = (uint64_t)(uintptr_t)mem,
       .bytes = KV_WIRE_MAX_SLICE_BYTES + 1ull},
      {.type = KV_NOTIF, .aux_bytes = UINT32_MAX},
      {.type = KV_LANE, .aux_bytes = STRATA_KV_LANE_MAX_BYTES + 1},
      {.type = 77},
      {.type = KV_READ,
       .flags = KV_FLAG_SHM,
       .region = id,
       .addr = (uint64_t)(uintptr_t)mem,
       .bytes = 8,
       .local_addr = 4096}, /* SHM on a connection that was not granted it */
  };
  for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
    if (raw_dial(self, target, &p, &c) != STRATA_OK) {
      CHECK(!"the hostile client authenticates");
      continue;
    }
    CHECK_STATUS(kv_conn_send_header(&c, &frames[i]), STRATA_OK);
    CHECK(closed_by_target(&c), "hostile frame %zu: the target keeps the connection", i);
    kv_conn_close(&c);
  }
  /* A stranger sends garbage, another says nothing: an honest peer is served meanwhile. */
  int garbage = socket(AF_INET, SOCK_STREAM, 0), silent = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  char host[sizeof target->address];
  memcpy(host, target->address, sizeof host);
  *strrchr(host, ':') = '\0';
  inet_pton(AF_INET, host, &sa.sin_addr);
  sa.sin_port = htons((uint16_t)atoi(strrchr(target->address, ':') + 1));
  CHECK(connect(garbage, (struct sockaddr *)&sa, sizeof sa) == 0);
  CHECK(connect(silent, (struct sockaddr *)&sa, sizeof sa) == 0);
  uint8_t junk[4096];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 37 + 11);
  (void)!write(garbage, junk, sizeof junk);
  int peer;
  CHECK_STATUS(load(honest, target, &peer), STRATA_OK);
  memset(mem, 0x42, REGION);
  strata_kv_desc l = {(uint64_t)(uintptr_t)local, REGION, 0, 0};
  strata_kv_desc r = {(uint64_t)(uintptr_t)mem, REGION, id, 0};
  strata_kv_xfer *x;
  CHECK_STATUS(strata_kv_xfer_post(honest, STRATA_KV_READ, peer, &l, &r, 1, NULL, 0, &x),
               STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 10), STRATA_OK);
  strata_kv_xfer_release(x);
  CHECK(local[0] == 0x42 && local[REGION - 1] == 0x42);
  /* It may get the handshake's REJECT first; then the end of the stream, within the timeout. */
  struct timeval limit = {.tv_sec = 10};
  setsockopt(garbage, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  char sink[512];
  ssize_t got;
  while ((got = read(garbage, sink, sizeof sink)) > 0) continue;
  CHECK(got == 0 || errno == ECONNRESET, "the garbage sender is dropped (read: %s)",
        got < 0 ? strerror(errno) : "data");
  close(garbage);
  close(silent);
  /* More silent strangers than the responder keeps: a real peer still gets in, promptly. */
  {
    enum { CROWD = KV_MAX_RESPONDER_CONNS + 44 };
    static int crowd[CROWD];
    for (int i = 0; i < CROWD; i++) {
      crowd[i] = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(crowd[i], (struct sockaddr *)&sa, sizeof sa) != 0) CHECK(!"crowd connects");
    }
    strata_kv_agent *late = make_agent("late", SECRET, STRATA_KV_BACKEND_TCP);
    int late_peer;
    CHECK_STATUS(load(late, target, &late_peer), STRATA_OK);
    strata_kv_agent_destroy(late);
    for (int i = 0; i < CROWD; i++) close(crowd[i]);
  }
  /* Another secret: refused at the handshake, both ways. */
  strata_kv_agent *stranger = make_agent("eve", "not the secret", STRATA_KV_BACKEND_TCP);
  CHECK_STATUS(load(stranger, target, &peer), STRATA_ERR_AUTH);
  strata_kv_agent_destroy(stranger);
  strata_kv_agent_destroy(honest);
  strata_kv_agent_destroy(self);
  strata_kv_agent_destroy(target);
  free(mem);
  free(local);
  printf("hostile peers: %s\n", failures ? "FAILED" : "ok");
}

/* An SHM batch as a hostile (or unlucky) initiator may send it, on a connection granted SHM:
 * slices whose bytes on the initiator's side are unmapped, wholly or from the middle, among good
 * ones and a refused one. The target copies every good slice, fails the others alone, names the
 * first failure in its one reply, and keeps the connection in step; malformed batches close
 * it. */
static int shm_batch_reply(kv_conn *c, int type, const kv_wire_slice *slices, size_t n,
                           kv_wire_header *reply, char *why, size_t why_len) {
  kv_wire_slice wire[8];
  for (size_t i = 0; i < n; i++) {
    wire[i] = slices[i];
    kv_wire_slice_encode(&wire[i]);
  }
  kv_wire_header h = {.type = (uint16_t)type,
                      .flags = KV_FLAG_SHM,
                      .value = n,
                      .aux_bytes = (uint32_t)(n * sizeof *wire)};
  int status = kv_conn_send_frame(c, &h, wire, n * sizeof *wire);
  if (status == STRATA_OK) status = kv_conn_recv_header(c, reply, 0);
  why[0] = '\0';
  if (status == STRATA_OK && reply->aux_bytes < why_len) {
    status = kv_conn_recv(c, why, reply->aux_bytes);
    why[reply->aux_bytes] = '\0';
  }
  return status;
}

static void shm_batches(void) {
  strata_kv_agent *target = make_agent("decode", SECRET, STRATA_KV_BACKEND_SHM);
  strata_kv_agent *self = make_agent("mallory", SECRET, STRATA_KV_BACKEND_SHM);
  uint8_t *block = malloc(GUARD + REGION + GUARD);
  memset(block, 0xab, GUARD + REGION + GUARD);
  uint8_t *region = block + GUARD;
  memset(region, 0x77, REGION);
  uint32_t id;
  CHECK_STATUS(strata_kv_register(target, region, REGION, &id), STRATA_OK);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint8_t *mine = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(mine != MAP_FAILED);
  if (mine == MAP_FAILED) return;
  uint8_t *hole = mine + 2 * page;
  CHECK(munmap(hole, page) == 0);
  for (size_t i = 0; i < 2 * page; i++) mine[i] = (uint8_t)(i * 13 + 1);
  uint64_t base = (uint64_t)(uintptr_t)region, src = (uint64_t)(uintptr_t)mine;
  const kv_wire_slice slices[] = {
      {.addr = base, .bytes = 256, .local_addr = src, .region = id},
      {.addr = base + 1024, .bytes = 256, .local_addr = (uint64_t)(uintptr_t)hole, .region = id},
      {.addr = base + 2048, .bytes = 256, .local_addr = src + 256, .region = id},
      {.addr = base + REGION - 16, .bytes = 32, .local_addr = src, .region = id}, /* refused */
      {.addr = base + 8192, .bytes = 200, .local_addr = src + 2 * page - 100, .region = id},
      {.addr = base + 12288, .bytes = 256, .local_addr = src + 512, .region = id},
  };
  const size_t n = sizeof slices / sizeof slices[0];
  kv_peer p;
  kv_conn c;
  int granted = 0;
  CHECK_STATUS(raw_dial_flags(self, target, &p, &c, KV_FLAG_SHM, &granted), STRATA_OK);
  CHECK(granted, "the target grants SHM to a process it can reach");
  uint64_t before = strata_kv_agent_refusals(target, NULL, 0);
  kv_wire_header reply;
  char why[256];
  CHECK_STATUS(shm_batch_reply(&c, KV_WRITE, slices, n, &reply, why, sizeof why), STRATA_OK);
  CHECK(reply.type == KV_DONE && reply.status == STRATA_ERR_INVALID_ARG && reply.value == 1,
        "WRITE batch: the first failure is slice 1 (%d, %s, slice %llu)", reply.type,
        strata_err_name(reply.status), (unsigned long long)reply.value);
  CHECK(strstr(why, "cross-memory"), "WRITE batch: reason '%s'", why);
  CHECK(strata_kv_agent_refusals(target, NULL, 0) == before + 1, "one refusal counted");
  CHECK(!memcmp(region, mine, 256) && !memcmp(region + 2048, mine + 256, 256) &&
            !memcmp(region + 12288, mine + 512, 256),
        "the good slices of the batch land");
  CHECK(region[1024] == 0x77 && region[1024 + 255] == 0x77, "the unmapped slice writes nothing");
  CHECK(!memcmp(region + 8192, mine + 2 * page - 100, 100) && region[8192 + 100] == 0x77 &&
            region[8192 + 199] == 0x77,
        "a slice cut by a hole writes what was there, nothing past it");
  CHECK(region[REGION - 16] == 0x77 && guards_intact(block), "the refused slice writes nothing");
  /* READ the same way: the target writes into this process */
  memset(mine, 0x11, 2 * page);
  memset(region, 0x66, REGION);
  CHECK_STATUS(shm_batch_reply(&c, KV_READ, slices, n, &reply, why, sizeof why), STRATA_OK);
  CHECK(reply.status == STRATA_ERR_INVALID_ARG && reply.value == 1, "READ batch: %s, slice %llu",
        strata_err_name(reply.status), (unsigned long long)reply.value);
  CHECK(mine[0] == 0x66 && mine[255] == 0x66 && mine[256] == 0x66 && mine[512 + 255] == 0x66,
        "READ batch: the good slices land");
  CHECK(mine[2 * page - 100] == 0x66 && mine[2 * page - 1] == 0x66,
        "READ batch: a slice cut by a hole fills what is mapped");
  CHECK(mine[768] == 0x11, "READ batch: nothing else written");
  /* still in step: a good batch */
  CHECK_STATUS(shm_batch_reply(&c, KV_WRITE, slices, 1, &reply, why, sizeof why), STRATA_OK);
  CHECK(reply.status == STRATA_OK && reply.value == 0 && reply.aux_bytes == 0, "a good batch: %s",
        strata_err_name(reply.status));
  kv_conn_close(&c);
  /* malformed batches lose the connection */
  kv_wire_slice big = slices[0];
  big.bytes = KV_WIRE_MAX_SLICE_BYTES + 1ull;
  kv_wire_slice_encode(&big);
  const struct {
    uint64_t value;
    uint32_t aux_bytes;
    uint64_t bytes;
  } bad[] = {{0, 0, 0},
             {KV_WIRE_MAX_SHM_SLICES + 1, (KV_WIRE_MAX_SHM_SLICES + 1) * sizeof(kv_wire_slice), 0},
             {2, sizeof(kv_wire_slice), 0},
             {1, sizeof(kv_wire_slice), 256},
             {1, sizeof(kv_wire_slice), 0}}; /* the last carries a slice above the largest */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (raw_dial_flags(self, target, &p, &c, KV_FLAG_SHM, &granted) != STRATA_OK || !granted) {
      CHECK(!"the SHM client authenticates");
      continue;
    }
    kv_wire_header h = {.type = KV_WRITE,
                        .flags = KV_FLAG_SHM,
                        .value = bad[i].value,
                        .bytes = bad[i].bytes,
                        .aux_bytes = bad[i].aux_bytes};
    CHECK_STATUS(kv_conn_send_header(&c, &h), STRATA_OK);
    if (i + 1 == sizeof bad / sizeof bad[0])
      CHECK_STATUS(kv_conn_send(&c, &big, sizeof big), STRATA_OK);
    CHECK(closed_by_target(&c), "malformed SHM batch %zu: the target keeps the connection", i);
    kv_conn_close(&c);
  }
  CHECK(guards_intact(block));
  munmap(mine, 2 * page);
  munmap(hole + page, page);
  strata_kv_agent_destroy(self);
  strata_kv_agent_destroy(target);
  free(block);
  printf("shm batches: %s\n", failures ? "FAILED" : "ok");
}

static void blobs(void) {
  strata_kv_agent *a = make_agent("prefill", SECRET, STRATA_KV_BACKEND_TCP);
  strata_kv_agent *b = make_agent("decode", SECRET, STRATA_KV_BACKEND_TCP);
  uint8_t mem[256];
  uint32_t id;
  CHECK_STATUS(strata_kv_register(b, mem, sizeof mem, &id), STRATA_OK);
  void *blob;
  size_t bytes;
  CHECK_STATUS(strata_kv_metadata_export(b, &blob, &bytes), STRATA_OK);
  int peer;
  for (size_t n = 0; n < bytes; n++)
    CHECK_STATUS(strata_kv_peer_load(a, blob, n, &peer), STRATA_ERR_PARSE);
  uint8_t *copy = malloc(bytes + 8);
  for (size_t i = 0; i < bytes; i++) {
    memcpy(copy, blob, bytes);
    copy[i] ^= 0xff;
    int status = strata_kv_peer_load(a, copy, bytes, &peer);
    /* a corrupted name or address may still name a reachable agent, or none */
    CHECK(status == STRATA_ERR_PARSE || status == STRATA_OK || status == STRATA_ERR_PEER_LOST ||
              status == STRATA_ERR_TIMEOUT || status == STRATA_ERR_UNSUPPORTED,
          "byte %zu flipped: %s", i, strata_err_name(status));
    if (status == STRATA_OK) strata_kv_peer_forget(a, peer);
  }
  memcpy(copy, blob, bytes);
  memset(copy + bytes, 0, 8);
  CHECK_STATUS(strata_kv_peer_load(a, copy, bytes + 1, &peer), STRATA_ERR_PARSE);
  CHECK_STATUS(strata_kv_peer_load(a, blob, bytes, &peer), STRATA_OK);
  free(copy);
  free(blob);
  strata_kv_agent_destroy(a);
  strata_kv_agent_destroy(b);
  printf("metadata blobs: %s\n", failures ? "FAILED" : "ok");
}

/* A peer of the job that presents a token the target never issued (a UCX sender that did not
 * come through the authenticated HELLO, as far as the target can tell). */
static void forged_token(void) {
  strata_kv_agent *target = make_agent("decode", SECRET, STRATA_KV_BACKEND_UCX);
  strata_kv_agent *initiator = make_agent("prefill", SECRET, STRATA_KV_BACKEND_UCX);
  if (!target || !initiator) return;
  uint8_t *mem = malloc(REGION), *local = malloc(REGION);
  memset(mem, 0x77, REGION);
  memset(local, 0x33, REGION);
  uint32_t id, local_id;
  CHECK_STATUS(strata_kv_register(target, mem, REGION, &id), STRATA_OK);
  CHECK_STATUS(strata_kv_register(initiator, local, REGION, &local_id), STRATA_OK);
  int peer;
  CHECK_STATUS(load(initiator, target, &peer), STRATA_OK);
  CHECK(strata_kv_peer_backend(initiator, peer) == STRATA_KV_BACKEND_UCX);
  strata_kv_desc l = {(uint64_t)(uintptr_t)local, 4096, 0, 0};
  strata_kv_desc r = {(uint64_t)(uintptr_t)mem, 4096, id, 0};
  strata_kv_xfer *x;
  /* first the real token: the WRITE lands */
  CHECK_STATUS(strata_kv_xfer_post(initiator, STRATA_KV_WRITE, peer, &l, &r, 1, NULL, 0, &x),
               STRATA_OK);
  CHECK_STATUS(strata_kv_xfer_wait(x, 10), STRATA_OK);
  strata_kv_xfer_release(x);
  CHECK(mem[0] == 0x33 && mem[4095] == 0x33 && mem[4096] == 0x77);
  /* then a forged token: the whole region (a rendezvous' offer, dropped unfetched), and after
   * reconnecting, 4 KiB (eager, dropped unread) */
  for (int rendezvous = 1; rendezvous >= 0; rendezvous--) {
    uint64_t before = strata_kv_agent_refusals(target, NULL, 0);
    kv_ucx_forge_token_for_test(initiator->peers[peer]->ucx_link);
    memset(local, 0x44, REGION);
    l.bytes = r.bytes = rendezvous ? REGION : 4096;
    CHECK_STATUS(strata_kv_xfer_post(initiator, STRATA_KV_WRITE, peer, &l, &r, 1, NULL, 0, &x),
                 STRATA_OK);
    CHECK_STATUS(strata_kv_xfer_wait(x, 30), STRATA_ERR_TIMEOUT); /* no answer to a stranger */
    strata_kv_xfer_release(x);
    char last[256];
    CHECK(strata_kv_agent_refusals(target, last, sizeof last) == before + 1,
          "the target counts the forged request");
    CHECK(strstr(last, "token"), "target's '%s'", last);
    CHECK(mem[0] == 0x33 && mem[4095] == 0x33 && mem[REGION - 1] == 0x77,
          "a forged WRITE changed the region");
    CHECK_STATUS(strata_kv_peer_forget(initiator, peer), STRATA_OK);
    CHECK_STATUS(load(initiator, target, &peer), STRATA_OK);
  }
  strata_kv_agent_destroy(initiator);
  strata_kv_agent_destroy(target);
  free(mem);
  free(local);
  printf("ucx forged token: %s\n", failures ? "FAILED" : "ok");
}

int main(int argc, char **argv) {
  strata_log_set_level(STRATA_LOG_ERROR);
  if (argc > 1 && !strcmp(argv[1], "ucx")) {
    if (!strata_kv_backend_supported(STRATA_KV_BACKEND_UCX)) {
      printf("ucx: SKIP (built without UCX)\n");
      return 77;
    }
    crafted_descriptors(STRATA_KV_BACKEND_UCX, "ucx");
    forged_token();
    return failures != 0;
  }
  crafted_descriptors(STRATA_KV_BACKEND_TCP, "tcp");
  crafted_descriptors(STRATA_KV_BACKEND_SHM, "shm");
  hostile_client();
  shm_batches();
  blobs();
  return failures != 0;
}
