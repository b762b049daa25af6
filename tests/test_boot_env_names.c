// SPDX-License-Identifier: Apache-2.0
/*
 * test_boot_env_names.c — a misspelt STRATA_* variable is reported by strata_config_from_env
 * (rank 0, once per process) with the closest real name; real ones are not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/store.h"
#include "helpers/check.h"
#include "strata.h"

/* strata_config_from_env's log while it runs. */
static void config_log(char *text, size_t cap) {
  char path[] = "/tmp/strata-env-names-XXXXXX";
  int fd = mkstemp(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  strata_config cfg;
  char err[256];
  strata_config_init(&cfg);
  CHECK(strata_config_from_env(&cfg, err, sizeof err) == STRATA_OK, "%s", err);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ssize_t n = pread(fd, text, cap - 1, 0);
  text[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
}

int main(void) {
  CHECK(strata_env_name_known("STRATA_STORE_QUOTA", 18));
  CHECK(strata_env_name_known("STRATA_TCP_STREAMS", 18));
  CHECK(!strata_env_name_known("STRATA_STREAMS", 14));
  setenv("STRATA_STREAMS", "4", 1);
  setenv("STRATA_TIMOUT", "3", 1);
  setenv("STRATA_QQQQQQQQQ", "1", 1);
  setenv("STRATA_SHM", "0", 1);
  char text[4096];
  config_log(text, sizeof text);
  printf("%s", text);
  CHECK(strstr(text,
               "STRATA_STREAMS is not a variable strata reads (did you mean "
               "STRATA_TCP_STREAMS?)") != NULL);
  CHECK(strstr(text,
               "STRATA_TIMOUT is not a variable strata reads (did you mean "
               "STRATA_TIMEOUT?)") != NULL);
  CHECK(strstr(text, "STRATA_QQQQQQQQQ is not a variable strata reads: it has no effect") != NULL);
  CHECK(strstr(text, "STRATA_SHM ") == NULL, "a real variable was reported");
  config_log(text, sizeof text);
  CHECK(text[0] == '\0', "reported twice: %s", text);
  printf("test_boot_env_names: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
