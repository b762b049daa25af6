// SPDX-License-Identifier: Apache-2.0
/*
 * test_tcp_sizing.c — the TCP transport sizes its sockets from the bandwidth-delay product.
 *
 * Pure arithmetic of tcp_tune.c: the auto-mode buffer R·T/S × 2 (1 Gbit/s × 50 ms = 6.25 MB in
 * flight, docs/netem.md), the 10 Gbit/s guess when no rate is given, and TCP_NOTSENT_LOWAT only on
 * connections whose RTT says WAN (>= 1 ms), and the pipelining chunk a WAN RTT asks for (the ring
 * keeps ~4 chunks in flight; they must cover the link's rate x 1.5 RTT). Then the same on real
 * sockets over loopback: a LAN RTT leaves the low-water mark unset. tests/test_tcp_wan.sh checks
 * the WAN side end to end (the info log of sockets over an emulated 40 ms link shows
 * notsent_lowat=262144).
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "coll/schedule.h"
#include "engine/chunk.h"
#include "helpers/check.h"
#include "net/tcp_tune.h"

static int near(double got, double want) {
  return got > want * 0.999 && got < want * 1.001;
}

static void test_want_bytes(void) {
  /* 1 Gbit/s, 50 ms RTT: BDP 6.25 MB; 4 streams -> 1.5625 MB each, x2 headroom */
  double got = (double)strata_tcp_tune_want_bytes(1.0, 50000, 4);
  CHECK(near(got, 3.125e6), "1 Gbit/s 50 ms 4 streams: %.0f bytes", got);
  got = (double)strata_tcp_tune_want_bytes(1.0, 50000, 1);
  CHECK(near(got, 12.5e6), "one stream carries the whole BDP x2: %.0f", got);
  got = (double)strata_tcp_tune_want_bytes(0.2, 40000, 8);
  CHECK(near(got, 0.25e6), "200 Mbit/s 40 ms 8 streams: %.0f", got);
  got = (double)strata_tcp_tune_want_bytes(0, 50000, 4); /* no hint: 10 Gbit/s */
  CHECK(near(got, 31.25e6), "default rate guess: %.0f", got);
  got = (double)strata_tcp_tune_want_bytes(1.0, 50000, 0); /* nonsense stream count: as 1 */
  CHECK(near(got, 12.5e6), "streams <= 0: %.0f", got);
  got = (double)strata_tcp_tune_want_bytes(10.0, 50, 4); /* loopback-like RTT: tiny */
  CHECK(got < 64 * 1024, "LAN want stays small: %.0f", got);
  /* doubling the RTT doubles the want; doubling the streams halves it */
  CHECK(strata_tcp_tune_want_bytes(1.0, 100000, 4) == 2 * strata_tcp_tune_want_bytes(1.0, 50000, 4),
        "linear in RTT");
  CHECK(strata_tcp_tune_want_bytes(1.0, 50000, 8) * 2 == strata_tcp_tune_want_bytes(1.0, 50000, 4),
        "inverse in streams");
}

static void test_chunk_bytes(void) {
  const uint64_t lan = 1 << 20, mib = 1 << 20;
  CHECK(strata_chunk_for_path(0, 0, lan) == lan, "unknown RTT: the LAN chunk");
  CHECK(strata_chunk_for_path(60, 0, lan) == lan, "loopback: the LAN chunk");
  CHECK(strata_chunk_for_path(999, 10, lan) == lan, "LAN even at 10 Gbit/s");
  /* a fast LAN with its rate given: 100 Gbit/s x 60 us x 1.5 / 4 = 281 KB -> 320 KiB */
  const uint64_t small = 64 << 10;
  CHECK(strata_chunk_for_path(60, 0, small) == small, "no rate given: the LAN chunk");
  CHECK(strata_chunk_for_path(60, 10, small) == small, "10 Gbit/s x 60 us fits 64 KiB");
  uint64_t fast = strata_chunk_for_path(60, 100, small);
  CHECK(fast == 5 * small, "100 Gbit/s x 60 us: %llu", (unsigned long long)fast);
  CHECK(fast * STRATA_SCHED_RING_CHUNKS_IN_FLIGHT >= 100e9 / 8 * 60e-6 * 1.5, "covers BDP x 1.5");
  CHECK(strata_chunk_for_path(900, 400, small) == 4u << 20, "LAN chunks capped at 4 MiB");
  /* 1 Gbit/s (the default guess) x 50 ms = 6.25 MB -> 8 MiB */
  uint64_t c = strata_chunk_for_path(50000, 0, lan);
  CHECK(c == 8 * mib, "1 Gbit/s 50 ms: %llu", (unsigned long long)c);
  CHECK(strata_chunk_for_path(50000, 1.0, lan) == c, "the default guess is 1 Gbit/s");
  CHECK(c >= 6.25e6 && c < 2 * 6.25e6, "one chunk holds one BDP, less than two");
  CHECK(strata_chunk_for_path(25000, 1.0, lan) == 4 * mib, "1 Gbit/s 25 ms: 3.1 MB -> 4 MiB");
  /* a small WAN: 200 Mbit/s x 4 ms = 100 KB -> 1 MiB, never below the LAN chunk */
  CHECK(strata_chunk_for_path(4000, 0.2, mib) == mib, "small BDP: 1 MiB");
  CHECK(strata_chunk_for_path(4000, 0.2, 2 * mib) == 2 * mib, "never below the LAN chunk");
  /* a big one is capped: 10 Gbit/s x 100 ms would want 47 MB */
  CHECK(strata_chunk_for_path(100000, 10, lan) == 16 * mib, "capped at 16 MiB");
  /* monotone in RTT */
  uint64_t prev = 0;
  for (unsigned rtt = 1000; rtt <= 200000; rtt += 7000) {
    uint64_t now = strata_chunk_for_path(rtt, 1.0, lan);
    CHECK(now >= prev, "not monotone at %u us", rtt);
    CHECK(now % mib == 0, "whole MiB at %u us", rtt);
    prev = now;
  }
}

static int is(const char *got, const char *want) {
  return got && strcmp(got, want) == 0;
}

static void test_auto_congestion(void) {
  CHECK(is(strata_tcp_tune_auto_congestion("bbr", 0, 0), "cubic"), "bbr default: start cubic");
  CHECK(is(strata_tcp_tune_auto_congestion("bbr", 1, 60), "cubic"), "loopback: stays cubic");
  CHECK(is(strata_tcp_tune_auto_congestion("bbr", 1, 999), "cubic"), "LAN: stays cubic");
  CHECK(is(strata_tcp_tune_auto_congestion("bbr", 1, 0), "cubic"), "no RTT: stays cubic");
  CHECK(is(strata_tcp_tune_auto_congestion("bbr", 1, 1000), "bbr"), "WAN: bbr again");
  CHECK(strata_tcp_tune_auto_congestion("cubic", 0, 0) == NULL, "cubic default: the system's");
  CHECK(strata_tcp_tune_auto_congestion("reno", 1, 50000) == NULL, "reno default: the system's");
  CHECK(strata_tcp_tune_auto_congestion(NULL, 0, 0) == NULL, "unknown default: the system's");
}

static void test_lowat(void) {
  CHECK(strata_tcp_tune_notsent_lowat_bytes(0) == 0, "no RTT: unset");
  CHECK(strata_tcp_tune_notsent_lowat_bytes(60) == 0, "loopback: unset");
  CHECK(strata_tcp_tune_notsent_lowat_bytes(999) == 0, "LAN: unset");
  CHECK(strata_tcp_tune_notsent_lowat_bytes(1000) == 256 * 1024, "1 ms: WAN");
  CHECK(strata_tcp_tune_notsent_lowat_bytes(50000) == 256 * 1024, "50 ms: WAN");
}

/* A real loopback connection tuned in auto mode keeps the kernel's default low-water mark. */
static void test_loopback_socket(void) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (lfd < 0 || cfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 1) ||
      getsockname(lfd, (struct sockaddr *)&a, &len) ||
      connect(cfd, (struct sockaddr *)&a, sizeof a)) {
    CHECK(0, "no loopback TCP connection here");
    if (lfd >= 0) close(lfd);
    if (cfd >= 0) close(cfd);
    return;
  }
  strata_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.tcp_streams = 4;
  unsigned before = 0;
  socklen_t blen = sizeof before;
  getsockopt(cfd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &before, &blen);
  /* the LAN default: with the system's bbr, a loopback socket is cubic from before it connects
   * (the sockets here were made without strata_tcp_tune_before_connect: check that one on a
   * fresh socket) and stays cubic after tuning */
  char system_default[32] = "", cc_fresh[32] = "", cc_after[32] = "";
  FILE *f = fopen("/proc/sys/net/ipv4/tcp_congestion_control", "r");
  if (f) {
    if (fscanf(f, "%31s", system_default) != 1) system_default[0] = '\0';
    fclose(f);
  }
  int fresh = socket(AF_INET, SOCK_STREAM, 0);
  int have_cubic = fresh >= 0 && setsockopt(fresh, IPPROTO_TCP, TCP_CONGESTION, "bbr", 3) == 0 &&
                   setsockopt(fresh, IPPROTO_TCP, TCP_CONGESTION, "cubic", 5) == 0;
  if (fresh >= 0) close(fresh);
  fresh = socket(AF_INET, SOCK_STREAM, 0);
  if (fresh >= 0) {
    strata_tcp_tune_before_connect(&cfg, fresh);
    strata_tcp_congestion_get(fresh, cc_fresh, sizeof cc_fresh);
    close(fresh);
  }
  /* The tuner classifies the pair by the RTT the kernel measured for it. On a loaded host (the
   * sanitizer passes run tests side by side on two cores) even loopback's handshake can take a
   * millisecond, and the pair is then rightly tuned as a WAN one: the LAN checks below hold only
   * for the RTT the tuner sees, read here (an idle socket takes no new samples in between). */
  struct tcp_info info;
  socklen_t ilen = sizeof info;
  memset(&info, 0, sizeof info);
  getsockopt(cfd, IPPROTO_TCP, TCP_INFO, &info, &ilen);
  int lan = strata_tcp_tune_notsent_lowat_bytes(info.tcpi_rtt) == 0;
  strata_tcp_tune_established(&cfg, cfd, 0, 1, 0);
  strata_tcp_congestion_get(cfd, cc_after, sizeof cc_after);
  if (!lan) {
    printf(
        "loopback measured %u us at connect (a loaded host): tuned as a WAN pair, LAN checks "
        "not applicable\n",
        info.tcpi_rtt);
    close(cfd);
    close(lfd);
    return;
  }
  if (!strcmp(system_default, "bbr") && have_cubic) {
    CHECK(!strcmp(cc_fresh, "cubic"), "system bbr: a socket starts with %s", cc_fresh);
    CHECK(!strcmp(cc_after, "cubic"), "system bbr: a loopback socket left tuning with %s",
          cc_after);
  } else
    printf("LAN congestion check not applicable: system default %s, cubic %d\n", system_default,
           have_cubic);
  unsigned after = 0;
  socklen_t alen = sizeof after;
  CHECK(getsockopt(cfd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &after, &alen) == 0, "getsockopt");
  CHECK(after == before, "loopback low-water mark changed: %u -> %u", before, after);
  close(cfd);
  close(lfd);
}

int main(void) {
  test_want_bytes();
  test_chunk_bytes();
  test_lowat();
  test_auto_congestion();
  test_loopback_socket();
  if (failures)
    fprintf(stderr, "test_tcp_sizing: %d failure(s)\n", failures);
  else
    printf("test_tcp_sizing: ok\n");
  return failures != 0;
}
