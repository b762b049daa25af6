// SPDX-License-Identifier: Apache-2.0
/*
 * test_config_set.c — strata_config_set: a field set by its variable's name, checked by the
 * same parser as the environment, and nothing changed on error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/check.h"
#include "strata.h"

int main(void) {
  strata_config cfg;
  char err[256];
  strata_config_init(&cfg);
  CHECK(strata_config_set(&cfg, "timeout", "600", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(cfg.timeout_s == 600, "timeout %g", cfg.timeout_s);
  /* "forever" is clamped where millisecond poll timeouts still hold it */
  CHECK(strata_config_set(&cfg, "timeout", "3e9", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(cfg.timeout_s == STRATA_TIMEOUT_MAX_S, "timeout 3e9 -> %g", cfg.timeout_s);
  CHECK(strata_config_set(&cfg, "timeout", "600", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(cfg.encrypt == STRATA_ENCRYPT_AUTO, "encrypt defaults to auto: %d", cfg.encrypt);
  CHECK(strata_config_set(&cfg, "encrypt", "on", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(cfg.encrypt == STRATA_ENCRYPT_ON, "encrypt on: %d", cfg.encrypt);
  CHECK(strata_config_set(&cfg, "STRATA_ENCRYPT", "0", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(cfg.encrypt == STRATA_ENCRYPT_OFF, "encrypt 0: %d", cfg.encrypt);
  CHECK(strata_config_set(&cfg, "encrypt", "maybe", err, sizeof err) == STRATA_ERR_CONFIG &&
            strstr(err, "auto, on or off"),
        "encrypt=maybe: %s", err);
  CHECK(strata_config_set(&cfg, "encrypt", "auto", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(strata_config_set(&cfg, "STRATA_TCP_STREAMS", "8", err, sizeof err) == STRATA_OK, "%s",
        err);
  CHECK(cfg.tcp_streams == 8, "streams %d", cfg.tcp_streams);
  CHECK(strata_config_set(&cfg, "Compress", "bf16", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(cfg.compress == STRATA_COMPRESS_BF16, "compress %d", (int)cfg.compress);
  CHECK(strata_config_set(&cfg, "chunk", "1M", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(cfg.chunk_bytes == 1 << 20, "chunk %zu", cfg.chunk_bytes);
  CHECK(strata_config_set(&cfg, "addr", "10.0.0.1:4000", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(!strcmp(cfg.store_addr, "10.0.0.1:4000"), "addr '%s'", cfg.store_addr);
  CHECK(strata_config_set(&cfg, "secret", "s3cret", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(!strcmp(cfg.secret, "s3cret"), "secret");
  CHECK(strata_config_set(&cfg, "rank", "1", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(strata_config_set(&cfg, "world_size", "2", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(cfg.rank == 1 && cfg.world_size == 2, "rank %d of %d", cfg.rank, cfg.world_size);

  /* Errors leave the config as it was and say why. */
  strata_config before = cfg;
  CHECK(strata_config_set(&cfg, "timeout", "soon", err, sizeof err) == STRATA_ERR_CONFIG, "bad");
  CHECK(strstr(err, "STRATA_TIMEOUT=soon") != NULL, "message '%s'", err);
  CHECK(strata_config_set(&cfg, "tcp_streams", "1000", err, sizeof err) == STRATA_ERR_CONFIG,
        "range");
  CHECK(strata_config_set(&cfg, "rank", "5", err, sizeof err) == STRATA_ERR_CONFIG,
        "rank past the world size");
  CHECK(strata_config_set(&cfg, "no_such_knob", "1", err, sizeof err) == STRATA_ERR_CONFIG,
        "unknown");
  CHECK(strstr(err, "no_such_knob") != NULL, "message '%s'", err);
  CHECK(strata_config_set(&cfg, "time out", "1", err, sizeof err) == STRATA_ERR_CONFIG, "space");
  CHECK(strata_config_set(&cfg, "", "1", err, sizeof err) == STRATA_ERR_CONFIG, "empty name");
  CHECK(strata_config_set(NULL, "timeout", "1", err, sizeof err) == STRATA_ERR_INVALID_ARG, "NULL");
  CHECK(!memcmp(&before, &cfg, sizeof cfg), "an error changed the config");

  /* The environment is not read: only the one setting. */
  setenv("STRATA_TCP_STREAMS", "3", 1);
  CHECK(strata_config_set(&cfg, "timeout", "5", err, sizeof err) == STRATA_OK, "%s", err);
  CHECK(cfg.tcp_streams == 8, "the environment leaked in: %d", cfg.tcp_streams);
  unsetenv("STRATA_TCP_STREAMS");
  printf("%s\n", failures ? "FAIL" : "PASS");
  return failures != 0;
}
