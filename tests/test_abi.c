// SPDX-License-Identifier: Apache-2.0
/*
 * test_abi.c — the version macros, and the struct header of the option structs (strata.h,
 * STRATA_STRUCT_MAGIC): a struct not filled by its _init call is refused, so is one from a newer
 * header (larger), and one from an older header (smaller, a prefix of today's) is read with the
 * missing fields at their defaults and never written past its end.
 *
 * An "older program" is simulated by a buffer of offsetof(struct, a late field) bytes followed by
 * guard bytes, initialized by the _init_sized call the older header's macro would have made.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/check.h"
#include "strata.h"
#include "strata_kv.h"

#define GUARD 0x5a
#define GUARD_BYTES 64

static int guard_intact(const unsigned char *buf, size_t size) {
  for (size_t i = 0; i < GUARD_BYTES; i++)
    if (buf[size + i] != GUARD) return 0;
  return 1;
}

/* A buffer of `size` bytes that an older program's struct would be, then the guard. */
static unsigned char *older(size_t size) {
  unsigned char *buf = malloc(size + GUARD_BYTES);
  if (!buf) abort();
  memset(buf, GUARD, size + GUARD_BYTES);
  return buf;
}

static void test_version(void) {
  char text[32];
  snprintf(text, sizeof text, "%d.%d.%d", STRATA_VERSION_MAJOR, STRATA_VERSION_MINOR,
           STRATA_VERSION_PATCH);
  CHECK(strata_version_number() == STRATA_VERSION_NUMBER, "library %d, header %d",
        strata_version_number(), STRATA_VERSION_NUMBER);
  CHECK(!strcmp(strata_version(), text) && !strcmp(STRATA_VERSION_STRING, text),
        "version '%s', header '%s', macros '%s'", strata_version(), STRATA_VERSION_STRING, text);
  CHECK(STRATA_VERSION_NUMBER ==
            STRATA_VERSION_MAJOR * 10000 + STRATA_VERSION_MINOR * 100 + STRATA_VERSION_PATCH,
        "number %d", STRATA_VERSION_NUMBER);
}

static void test_config(void) {
  char err[512];
  strata_config cfg;
  strata_config_init(&cfg);
  CHECK(cfg.struct_size == sizeof cfg && cfg.struct_magic == STRATA_STRUCT_MAGIC &&
            cfg.struct_version == (uint32_t)STRATA_VERSION_NUMBER,
        "header %zu %#x %u", cfg.struct_size, cfg.struct_magic, cfg.struct_version);

  /* not from strata_config_init: every call that takes it refuses, naming the call to make */
  strata_config raw;
  memset(&raw, 0, sizeof raw);
  raw.rank = 0, raw.world_size = 1, raw.timeout_s = 5, raw.tcp_streams = 1;
  strata_comm *comm = NULL;
  CHECK_STATUS(strata_config_from_env(&raw, err, sizeof err), STRATA_ERR_INVALID_ARG);
  CHECK(strstr(err, "strata_config_init") != NULL, "message '%s'", err);
  CHECK_STATUS(strata_config_set(&raw, "timeout", "3", err, sizeof err), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_comm_init(&raw, &comm), STRATA_ERR_INVALID_ARG);
  CHECK(comm == NULL, "a communicator from a raw struct");

  /* from a newer header: larger than this library's */
  strata_config newer;
  strata_config_init(&newer);
  newer.struct_size += 16;
  newer.struct_version = STRATA_VERSION_NUMBER + 100;
  CHECK_STATUS(strata_config_from_env(&newer, err, sizeof err), STRATA_ERR_VERSION);
  CHECK(strstr(err, "newer strata") != NULL, "message '%s'", err);
  CHECK_STATUS(strata_comm_init(&newer, &comm), STRATA_ERR_VERSION);

  /* _init with a larger size than this library knows: its tail zeroed, then refused */
  unsigned char *big = older(sizeof(strata_config) + 32);
  strata_config_init_sized((strata_config *)big, sizeof(strata_config) + 32,
                           STRATA_VERSION_NUMBER + 100);
  CHECK(big[sizeof(strata_config) + 31] == 0 && guard_intact(big, sizeof(strata_config) + 32),
        "the tail of a newer struct");
  CHECK_STATUS(strata_config_from_env((strata_config *)big, err, sizeof err), STRATA_ERR_VERSION);
  free(big);

  /* from an older header: a prefix, the fields past it at their defaults */
  size_t size = offsetof(strata_config, join);
  unsigned char *buf = older(size);
  strata_config *old = (strata_config *)buf;
  strata_config_init_sized(old, size, STRATA_VERSION_NUMBER);
  CHECK(guard_intact(buf, size), "strata_config_init_sized wrote past %zu bytes", size);
  CHECK(old->struct_size == size && old->tcp_streams == 4, "old: %zu bytes, %d streams",
        old->struct_size, old->tcp_streams);
  setenv("STRATA_TIMEOUT", "7", 1);
  setenv("STRATA_JOIN", "1", 1); /* a field the older program has not: read, not written */
  CHECK_STATUS(strata_config_from_env(old, err, sizeof err), STRATA_OK);
  unsetenv("STRATA_TIMEOUT");
  unsetenv("STRATA_JOIN");
  CHECK(old->timeout_s == 7, "old timeout %g", old->timeout_s);
  CHECK(guard_intact(buf, size), "strata_config_from_env wrote past %zu bytes", size);
  CHECK_STATUS(strata_config_set(old, "tcp_streams", "2", err, sizeof err), STRATA_OK);
  CHECK(old->tcp_streams == 2 && guard_intact(buf, size), "strata_config_set on an older struct");
  CHECK_STATUS(strata_config_set(old, "rank", "0", err, sizeof err), STRATA_OK);
  CHECK_STATUS(strata_config_set(old, "world_size", "1", err, sizeof err), STRATA_OK);
  CHECK_STATUS(strata_comm_init(old, &comm), STRATA_OK);
  if (comm) {
    const strata_config *in_use = strata_comm_config(comm);
    CHECK(in_use->join == 0 && in_use->encrypt == STRATA_ENCRYPT_AUTO,
          "fields past the older struct: join %d, encrypt %d", in_use->join, (int)in_use->encrypt);
    CHECK(in_use->timeout_s == 7 && in_use->tcp_streams == 2, "the older struct's fields");
    /* what a program copies out of it is the size it passed in */
    CHECK(in_use->struct_size == size, "strata_comm_config's header: %zu", in_use->struct_size);
    float x = 1, y = 0;
    CHECK_STATUS(strata_allreduce(comm, &x, &y, 1, STRATA_F32, STRATA_SUM), STRATA_OK);
    CHECK(y == 1, "allreduce over an older struct's communicator: %g", y);
    strata_comm_destroy(comm);
  }
  CHECK(guard_intact(buf, size), "a guard byte changed");
  free(buf);
}

static void test_diloco_options(void) {
  float theta[4] = {1, 2, 3, 4};
  strata_diloco_param param = {.data = theta, .count = 4, .dtype = STRATA_F32};
  strata_diloco *d = NULL;
  strata_diloco_options raw;
  memset(&raw, 0, sizeof raw);
  raw.sync_every = 10, raw.fragments = 1, raw.outer_lr = 0.7;
  CHECK_STATUS(strata_diloco_create(NULL, &param, 1, &raw, &d), STRATA_ERR_INVALID_ARG);
  strata_diloco_options newer;
  strata_diloco_options_init(&newer);
  newer.struct_size += 8;
  CHECK_STATUS(strata_diloco_create(NULL, &param, 1, &newer, &d), STRATA_ERR_VERSION);
  size_t size = offsetof(strata_diloco_options, compress);
  unsigned char *buf = older(size);
  strata_diloco_options *old = (strata_diloco_options *)buf;
  strata_diloco_options_init_sized(old, size, STRATA_VERSION_NUMBER);
  old->sync_every = 10;
  CHECK(guard_intact(buf, size) && old->fragments == 1, "older diloco options");
  CHECK_STATUS(strata_diloco_create(NULL, &param, 1, old, &d), STRATA_OK);
  strata_diloco_destroy(d);
  free(buf);
}

static void test_weights_options(void) {
  float w[8] = {0};
  strata_weights_tensor t = {.name = "w", .data = w, .dtype = STRATA_F32, .ndim = 1, .shape = {8}};
  strata_weights *pub = NULL;
  strata_weights_options raw;
  memset(&raw, 0, sizeof raw);
  raw.anchor_every = 4, raw.history = 4, raw.zstd_level = 1, raw.chunk_bytes = 1 << 20;
  CHECK_STATUS(strata_weights_publisher_create(&t, 1, &raw, &pub), STRATA_ERR_INVALID_ARG);
  size_t size = offsetof(strata_weights_options, chunk_bytes);
  unsigned char *buf = older(size);
  strata_weights_options *old = (strata_weights_options *)buf;
  strata_weights_options_init_sized(old, size, STRATA_VERSION_NUMBER);
  CHECK(guard_intact(buf, size) && old->anchor_every == 16, "older weights options");
  CHECK_STATUS(strata_weights_publisher_create(&t, 1, old, &pub), STRATA_OK);
  uint64_t version = 0;
  if (pub) CHECK_STATUS(strata_weights_publish(pub, &version), STRATA_OK);
  CHECK(version == 1, "published version %llu", (unsigned long long)version);
  strata_weights_destroy(pub);
  free(buf);
}

static void test_kv_config(void) {
  strata_kv_agent *agent = NULL;
  strata_kv_config raw;
  memset(&raw, 0, sizeof raw);
  raw.name = "raw";
  CHECK_STATUS(strata_kv_agent_create(&raw, &agent), STRATA_ERR_INVALID_ARG);
  strata_kv_config newer;
  strata_kv_config_init(&newer);
  newer.name = "newer";
  newer.struct_size += 8;
  CHECK_STATUS(strata_kv_agent_create(&newer, &agent), STRATA_ERR_VERSION);
  size_t size = offsetof(strata_kv_config, seal);
  unsigned char *buf = older(size);
  strata_kv_config *old = (strata_kv_config *)buf;
  strata_kv_config_init_sized(old, size, STRATA_VERSION_NUMBER);
  old->name = "older";
  old->secret = "abi";
  old->backend = STRATA_KV_BACKEND_TCP;
  old->lane_realtime = STRATA_KV_LANE_PLAIN;
  CHECK(guard_intact(buf, size), "strata_kv_config_init_sized wrote past %zu bytes", size);
  CHECK_STATUS(strata_kv_agent_create(old, &agent), STRATA_OK);
  strata_kv_agent_destroy(agent);
  free(buf);
}

/* The STRATA_KV_* variables come from the settings table and fail creation as a rank's do. */
static void test_kv_environment(void) {
  static const char *const bad[][2] = {{"STRATA_KV_BACKEND", "carrier-pigeon"},
                                       {"STRATA_KV_SYSCALL_BYTES", "12"},
                                       {"STRATA_KV_UCX_RNDV_BYTES", "-1"},
                                       {"STRATA_KV_UCX_POLL_US", "soon"}};
  strata_kv_config cfg;
  strata_kv_config_init(&cfg);
  cfg.name = "env";
  cfg.lane_realtime = STRATA_KV_LANE_PLAIN;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    strata_kv_agent *agent = NULL;
    setenv(bad[i][0], bad[i][1], 1);
    CHECK(strata_kv_agent_create(&cfg, &agent) == STRATA_ERR_CONFIG && agent == NULL,
          "%s=%s did not fail with STRATA_ERR_CONFIG", bad[i][0], bad[i][1]);
    unsetenv(bad[i][0]);
    strata_kv_agent_destroy(agent);
  }
  strata_kv_agent *agent = NULL;
  setenv("STRATA_KV_SYSCALL_BYTES", "1M", 1); /* a size suffix is not a byte count here */
  CHECK_STATUS(strata_kv_agent_create(&cfg, &agent), STRATA_ERR_CONFIG);
  setenv("STRATA_KV_SYSCALL_BYTES", "131072", 1);
  setenv("STRATA_KV_BACKEND", "TCP", 1);
  CHECK_STATUS(strata_kv_agent_create(&cfg, &agent), STRATA_OK);
  unsetenv("STRATA_KV_SYSCALL_BYTES");
  unsetenv("STRATA_KV_BACKEND");
  strata_kv_agent_destroy(agent);
}

int main(void) {
  test_version();
  test_config();
  test_diloco_options();
  test_weights_options();
  test_kv_config();
  test_kv_environment();
  printf("%s\n", failures ? "FAIL" : "PASS");
  return failures != 0;
}
