// SPDX-License-Identifier: Apache-2.0
/*
 * test_net_tcp_tune.c — STRATA_TCP_CC reaches the socket (getsockopt TCP_CONGESTION reads back
 * what was asked, for every algorithm the kernel lists as available and this process may use),
 * a bogus name fails the check with a sentence naming it and the available list, and the config
 * parses STRATA_TCP_CC / STRATA_TCP_LINK_GBPS and defaults STRATA_TCP_BUFFER to auto (0).
 */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/tcp_tune.h"
#include "strata.h"
#include "helpers/check.h"

static int listed(const char *path, const char *name) {
  char line[512] = "";
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (!fgets(line, sizeof line, f)) line[0] = '\0';
  fclose(f);
  for (char *tok = strtok(line, " \n"); tok; tok = strtok(NULL, " \n"))
    if (!strcmp(tok, name)) return 1;
  return 0;
}

static void check_applied(const char *cc) {
  if (!listed("/proc/sys/net/ipv4/tcp_available_congestion_control", cc)) {
    printf("%s: not available in this kernel, not checked\n", cc);
    return;
  }
  strata_config cfg;
  strata_config_init(&cfg);
  snprintf(cfg.tcp_congestion, sizeof cfg.tcp_congestion, "%s", cc);
  char err[512] = "";
  int status = strata_tcp_tune_check(&cfg, err, sizeof err);
  if (status != STRATA_OK) {
    /* available but not allowed to an unprivileged process: the error must say so */
    printf("%s refused: %s\n", cc, err);
    CHECK(geteuid() != 0 && strstr(err, "allowed"));
    return;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0);
  strata_tcp_tune_before_connect(&cfg, fd);
  char got[32] = "";
  CHECK(strata_tcp_congestion_get(fd, got, sizeof got) == STRATA_OK);
  printf("STRATA_TCP_CC=%s -> socket reports %s\n", cc, got);
  CHECK(!strcmp(got, cc));
  close(fd);
}

int main(void) {
  check_applied("cubic");
  check_applied("bbr");
  check_applied("reno");

  strata_config cfg;
  strata_config_init(&cfg);
  CHECK(cfg.tcp_buffer_bytes == 0 && cfg.tcp_congestion[0] == '\0' && cfg.tcp_link_gbps == 0);
  char err[512] = "";
  CHECK(strata_tcp_tune_check(&cfg, err, sizeof err) == STRATA_OK); /* "" = system default */
  snprintf(cfg.tcp_congestion, sizeof cfg.tcp_congestion, "bogus_cc");
  CHECK(strata_tcp_tune_check(&cfg, err, sizeof err) == STRATA_ERR_CONFIG);
  printf("bogus: %s\n", err);
  CHECK(strstr(err, "STRATA_TCP_CC=bogus_cc") && strstr(err, "available"));

  setenv("STRATA_TCP_CC", "cubic", 1);
  setenv("STRATA_TCP_LINK_GBPS", "0.2", 1);
  strata_config_init(&cfg);
  CHECK(strata_config_from_env(&cfg, err, sizeof err) == STRATA_OK);
  CHECK(!strcmp(cfg.tcp_congestion, "cubic") && cfg.tcp_link_gbps > 0.19 &&
        cfg.tcp_link_gbps < 0.21);
  setenv("STRATA_TCP_LINK_GBPS", "-1", 1);
  CHECK(strata_config_from_env(&cfg, err, sizeof err) == STRATA_ERR_CONFIG);
  CHECK(strstr(err, "STRATA_TCP_LINK_GBPS"));
  setenv("STRATA_TCP_CC", "a-name-far-too-long-for-it", 1);
  unsetenv("STRATA_TCP_LINK_GBPS");
  CHECK(strata_config_from_env(&cfg, err, sizeof err) == STRATA_ERR_CONFIG);
  unsetenv("STRATA_TCP_CC");

  if (failures) printf("test_net_tcp_tune: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
