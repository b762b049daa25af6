// SPDX-License-Identifier: Apache-2.0
/*
 * test_net_tcp_tune.c — STRATA_TCP_CC reaches the socket (getsockopt TCP_CONGESTION reads back
 * what was asked, for every algorithm the kernel lists as available and this process may use),
 * a bogus name fails the check with a sentence naming it and the available list, and the config
 * parses STRATA_TCP_CC / STRATA_TCP_LINK_GBPS and defaults STRATA_TCP_BUFFER to auto (0).
 * Auto mode never fixes a small buffer when it cannot read the limits: the decision alone, and a
 * loopback connection tuned by a process that is out of descriptors (its /proc reads fail) keeps
 * the kernel's buffers. A bbr connection still in its startup is started afresh; others are not.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

static void check_buffer_decision(void) {
  const size_t loopback_want = strata_tcp_tune_want_bytes(0, 10, 1); /* ~25 KB */
  CHECK(strata_tcp_tune_buffer_bytes(loopback_want, 0, 0) == 0, "limits unreadable: autotuning");
  CHECK(strata_tcp_tune_buffer_bytes(loopback_want, 0, 212992) == 0);
  CHECK(strata_tcp_tune_buffer_bytes(loopback_want, 6291456, 212992) == 0, "autotuning gets there");
  CHECK(strata_tcp_tune_buffer_bytes(50000000, 6291456, 0) == 50000000, "core limit unreadable");
  CHECK(strata_tcp_tune_buffer_bytes(50000000, 6291456, 16777216) == 16777216, "capped");
  CHECK(strata_tcp_tune_buffer_bytes(50000000, 6291456, 67108864) == 50000000);
  CHECK(strata_tcp_tune_buffer_bytes(50000000, 33554432, 16777216) == 0, "autotuning reaches more");
}

static int get_buffer(int fd, int option) {
  int value = -1;
  socklen_t len = sizeof value;
  getsockopt(fd, SOL_SOCKET, option, &value, &len);
  return value;
}

/* A connected loopback pair; fds[0] is the dialing end. */
static int loopback_pair(int fds[2]) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
  socklen_t len = sizeof sin;
  fds[0] = fds[1] = -1;
  if (listener < 0 || bind(listener, (struct sockaddr *)&sin, sizeof sin) != 0 ||
      listen(listener, 1) != 0 || getsockname(listener, (struct sockaddr *)&sin, &len) != 0) {
    if (listener >= 0) close(listener);
    return -1;
  }
  fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fds[0] >= 0 && connect(fds[0], (struct sockaddr *)&sin, sizeof sin) == 0)
    fds[1] = accept(listener, NULL, NULL);
  close(listener);
  return fds[0] >= 0 && fds[1] >= 0 ? 0 : -1;
}

/* Out of descriptors, the sysctls cannot be read: the connection keeps the kernel's buffers
 * (before the fix it got a fixed buffer of the loopback want, about 25 KB). */
static void check_tuned_out_of_descriptors(void) {
  int fds[2];
  CHECK(loopback_pair(fds) == 0);
  if (fds[0] < 0 || fds[1] < 0) return;
  int sndbuf = get_buffer(fds[0], SO_SNDBUF), rcvbuf = get_buffer(fds[0], SO_RCVBUF);
  struct rlimit saved, tight;
  CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  tight = saved;
  tight.rlim_cur = (rlim_t)(fds[1] > fds[0] ? fds[1] : fds[0]) + 1; /* no descriptor is free */
  CHECK(setrlimit(RLIMIT_NOFILE, &tight) == 0);
  int fillers[64], nfillers = 0; /* the free numbers below the limit */
  while (nfillers < 64 && (fillers[nfillers] = dup(0)) >= 0) nfillers++;
  int fill_errno = errno;
  CHECK(nfillers < 64 && fill_errno == EMFILE, "the process should be out of descriptors");
  CHECK(strata_tcp_sysctl_long("/proc/sys/net/ipv4/tcp_rmem", 2) == 0);
  strata_config cfg;
  strata_config_init(&cfg);
  strata_tcp_tune_established(&cfg, fds[0], 0, 1, 0);
  for (int i = 0; i < nfillers; i++) close(fillers[i]);
  CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);
  printf("out of descriptors: sndbuf %d -> %d, rcvbuf %d -> %d\n", sndbuf,
         get_buffer(fds[0], SO_SNDBUF), rcvbuf, get_buffer(fds[0], SO_RCVBUF));
  CHECK(get_buffer(fds[0], SO_SNDBUF) == sndbuf, "the send buffer was fixed");
  CHECK(get_buffer(fds[0], SO_RCVBUF) == rcvbuf, "the receive buffer was fixed");
  close(fds[0]);
  close(fds[1]);
}

/* bbr started afresh: a young bbr connection (still in startup, nothing in flight) is restarted
 * and runs bbr after it; a cubic one is left alone. */
static void check_bbr_restart(void) {
  const char *available = "/proc/sys/net/ipv4/tcp_available_congestion_control";
  const char *allowed = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
  if (!listed(available, "bbr") || !listed(available, "cubic") ||
      (geteuid() != 0 &&
       !(listed(allowed, "bbr") && listed(allowed, "reno") && listed(allowed, "cubic")))) {
    printf("bbr restart: bbr, cubic or reno not available to this process, not checked\n");
    return;
  }
  int fds[2];
  CHECK(loopback_pair(fds) == 0);
  if (fds[0] < 0 || fds[1] < 0) return;
  char got[32] = "";
  CHECK(setsockopt(fds[0], IPPROTO_TCP, TCP_CONGESTION, "cubic", 5) == 0);
  CHECK(strata_tcp_tune_bbr_restart(fds[0]) == 0, "a cubic connection is not bbr's to restart");
  CHECK(strata_tcp_congestion_get(fds[0], got, sizeof got) == STRATA_OK && !strcmp(got, "cubic"));
  CHECK(setsockopt(fds[0], IPPROTO_TCP, TCP_CONGESTION, "bbr", 3) == 0);
  /* bbr reports its gains once acks have come: a small exchange, read whole, then acked */
  char data[4096] = {0}, sink[4096];
  CHECK(send(fds[0], data, sizeof data, 0) == (ssize_t)sizeof data);
  size_t got_bytes = 0;
  while (got_bytes < sizeof data) {
    ssize_t n = recv(fds[1], sink, sizeof sink, 0);
    if (n <= 0) break;
    got_bytes += (size_t)n;
  }
  CHECK(got_bytes == sizeof data);
  struct tcp_info info;
  for (int i = 0; i < 1000; i++) { /* acked within a loopback round trip; bounded all the same */
    socklen_t len = sizeof info;
    memset(&info, 0, sizeof info);
    if (getsockopt(fds[0], IPPROTO_TCP, TCP_INFO, &info, &len) != 0 || info.tcpi_unacked == 0)
      break;
    usleep(1000);
  }
  CHECK(info.tcpi_unacked == 0, "the exchange was acknowledged");
  CHECK(strata_tcp_tune_bbr_restart(fds[0]) == 1, "a young bbr connection is in its startup");
  CHECK(strata_tcp_congestion_get(fds[0], got, sizeof got) == STRATA_OK && !strcmp(got, "bbr"),
        "the connection runs bbr again");
  printf("bbr restart: young bbr restarted, runs %s; cubic left alone\n", got);
  close(fds[0]);
  close(fds[1]);
}

int main(void) {
  check_buffer_decision();
  check_bbr_restart();
  check_tuned_out_of_descriptors();
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
