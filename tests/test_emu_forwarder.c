// SPDX-License-Identifier: Apache-2.0
/* test_emu_forwarder.c — the forwarder loop (src/emu/forwarder.c) without root: each "TUN" is one
 * end of a SOCK_SEQPACKET socketpair (one packet per read, like a TUN fd), the test holds the
 * other ends. Checks delay and its precision, FIFO order, the rate limit's spacing, per-direction
 * loss, unroutable packets dropped, the stats file, and a clean stop on SIGTERM.
 *
 * The timing checks hold on a loaded host: a stall of the machine holds the forwarder and the
 * test alike, real-time class or not, and delays the packets in flight then. So every packet
 * must be at least as late as configured (the emulator can never be early), and the MEDIAN delay
 * or gap, over many packets of one run, must be near the configured one: a few stalled packets
 * move neither; a wrong delay or rate moves both. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "emu/forwarder.h"
#include "helpers/check.h"

#define PACKET_BYTES 1250

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* The median of n values (sorts a copy). */
static double median_ns(const uint64_t *values, int n) {
  uint64_t sorted[64];
  memcpy(sorted, values, (size_t)n * sizeof *values);
  qsort(sorted, (size_t)n, sizeof *sorted, compare_u64);
  return n % 2 ? (double)sorted[n / 2] : ((double)sorted[n / 2 - 1] + (double)sorted[n / 2]) / 2;
}

/* An IPv4-looking packet to 10.77.dst_site.1 carrying (send time, sequence). */
static void packet_make(unsigned char *pkt, int dst_site, uint32_t seq) {
  memset(pkt, 0, PACKET_BYTES);
  pkt[0] = 0x45;
  pkt[16] = STRATA_EMU_NET_OCTET_A;
  pkt[17] = STRATA_EMU_NET_OCTET_B;
  pkt[18] = (unsigned char)dst_site;
  pkt[19] = 1;
  uint64_t t = now_ns();
  memcpy(pkt + 20, &t, sizeof t);
  memcpy(pkt + 28, &seq, sizeof seq);
}

/* Reads packets from fd until count arrived or timeout; fills delays (ns) and sequences. */
static int receive(int fd, int count, int timeout_ms, uint64_t *delays, uint32_t *seqs,
                   uint64_t *arrivals) {
  int got = 0;
  uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000ull;
  unsigned char pkt[2048];
  do {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms ? 10 : 0) <= 0) continue;
    ssize_t n = read(fd, pkt, sizeof pkt);
    if (n != PACKET_BYTES) continue;
    uint64_t sent, now = now_ns();
    memcpy(&sent, pkt + 20, sizeof sent);
    if (delays) delays[got] = now - sent;
    if (seqs) memcpy(&seqs[got], pkt + 28, sizeof seqs[got]);
    if (arrivals) arrivals[got] = now;
    got++;
  } while (got < count && now_ns() < end);
  return got;
}

int main(void) {
  alarm(60);
  static strata_emu_forwarder_config config;
  int test_end[3];
  config.nsites = 3;
  config.mtu = 1500;
  config.seed = 5;
  config.ready_fd = -1;
  /* Timing under a loaded host needs the real-time class (root); without it, slower wakeups. */
  config.realtime_priority = 10;
  struct sched_param sp = {.sched_priority = 5}; /* the test's reader too; it sleeps, never spins */
  sched_setscheduler(0, SCHED_FIFO, &sp);
  char stats_path[] = "/tmp/test_emu_forwarder_XXXXXX";
  int stats_fd = mkstemp(stats_path);
  close(stats_fd);
  config.stats_path = stats_path;
  for (int k = 0; k < 3; k++) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair)) return perror("socketpair"), 1;
    fcntl(pair[0], F_SETFL, O_NONBLOCK);
    config.tun_fds[k] = pair[0];
    test_end[k] = pair[1];
  }
  char err[256];
  /* 0>1: 5 ms; 0>2: 10 Mbit/s (1 ms per 1250-byte packet); 1>0: all lost. */
  if (strata_emu_link_params_parse("delay=5ms", &config.links[0][1], err, sizeof err) ||
      strata_emu_link_params_parse("rate=10mbit,queue=1mb", &config.links[0][2], err, sizeof err) ||
      strata_emu_link_params_parse("loss=100%", &config.links[1][0], err, sizeof err)) {
    fprintf(stderr, "FAIL parse: %s\n", err);
    return 1;
  }
  int ready[2];
  if (pipe(ready)) return 1;
  config.ready_fd = ready[1];
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    for (int k = 0; k < 3; k++) close(test_end[k]);
    _exit(strata_emu_forwarder_run(&config) == STRATA_EMU_END_SIGNAL ? 0 : 3);
  }
  close(ready[1]);
  char byte;
  CHECK(read(ready[0], &byte, 1) == 1, "forwarder did not start");
  for (int k = 0; k < 3; k++) close(config.tun_fds[k]);

  unsigned char pkt[PACKET_BYTES];
  /* Delay and order: 50 packets 0 -> 1, 1 ms apart; every one in order and at least 5 ms late,
   * the median under 8 ms (a busy host adds a millisecond or two; a doubled delay is 10 ms). */
  enum { N = 50 };
  uint64_t delays[N], arrivals[N];
  uint32_t seqs[N];
  int got = 0, sent01 = 0;
  /* Send and receive interleaved, so a packet is timed when it comes out, not when read late. */
  uint64_t next = now_ns();
  for (int i = 0; i < N || got < N;) {
    if (i < N && now_ns() >= next) {
      packet_make(pkt, 1, (uint32_t)i++);
      CHECK(write(test_end[0], pkt, sizeof pkt) == (ssize_t)sizeof pkt, "write");
      sent01++;
      next += 1000000;
    }
    /* Sleep (never spin: a spinning real-time process gets every real-time task throttled)
     * until a packet comes or the next send is due. */
    uint64_t now = now_ns(), until = i < N ? next : now + 10000000;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = until > now ? (long)(until - now) : 0};
    struct pollfd pfd = {.fd = test_end[1], .events = POLLIN};
    if (ppoll(&pfd, 1, &ts, NULL) == 1 &&
        receive(test_end[1], 1, 0, delays + got, seqs + got, NULL) == 1)
      got++;
    if (now_ns() > next + 2000000000ull) break; /* 2 s after the last send: give up */
  }
  CHECK(got == N, "0>1 delivered %d of %d", got, N);
  for (int i = 0; i < got; i++) {
    CHECK(seqs[i] == (uint32_t)i, "0>1 order: position %d holds %u", i, seqs[i]);
    CHECK(delays[i] >= 5000000, "0>1 packet %d early: %llu ns", i, (unsigned long long)delays[i]);
  }
  if (got == N) {
    double median_us = median_ns(delays, N) / 1e3;
    printf("0>1 delay=5ms: median %.1f us\n", median_us);
    CHECK(median_us < 5000 * 1.6, "0>1 median delay %.1f us, want 5 ms + < 60%%", median_us);
  }

  /* Rate: a burst of 40 packets 0 -> 2 at 10 Mbit/s leaves 1 ms apart. The reader may take
   * packets two or three at a time (one wakeup, several queued), so single gaps alternate between
   * ~0 and ~2 ms; the spacing is read over windows of 10 gaps: their median within 1 ms
   * -20%/+30%. */
  for (int i = 0; i < 40; i++) {
    packet_make(pkt, 2, (uint32_t)i);
    CHECK(write(test_end[0], pkt, sizeof pkt) == (ssize_t)sizeof pkt, "write");
  }
  got = receive(test_end[2], 40, 2000, NULL, NULL, arrivals);
  CHECK(got == 40, "0>2 delivered %d of 40", got);
  if (got == 40) {
    enum { WINDOW = 10, WINDOWS = 40 - WINDOW };
    uint64_t spacing[WINDOWS];
    for (int i = 0; i < WINDOWS; i++) spacing[i] = (arrivals[i + WINDOW] - arrivals[i]) / WINDOW;
    double gap_ms = median_ns(spacing, WINDOWS) / 1e6;
    printf("0>2 rate=10mbit: median spacing %.3f ms over %.2f ms (want 1 ms)\n", gap_ms,
           (double)(arrivals[39] - arrivals[0]) / 1e6);
    CHECK(gap_ms > 0.8 && gap_ms < 1.3, "0>2 median spacing %.3f ms, want 1 ms", gap_ms);
  }

  /* Loss 100% on 1>0 but not on 0>1 (checked above); unroutable packets are dropped. */
  for (int i = 0; i < 10; i++) {
    packet_make(pkt, 0, (uint32_t)i);
    CHECK(write(test_end[1], pkt, sizeof pkt) == (ssize_t)sizeof pkt, "write");
    packet_make(pkt, 9, (uint32_t)i); /* no site 9 */
    CHECK(write(test_end[1], pkt, sizeof pkt) == (ssize_t)sizeof pkt, "write");
  }
  got = receive(test_end[0], 10, 200, NULL, NULL, NULL);
  CHECK(got == 0, "1>0 with loss=100%% delivered %d", got);

  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forwarder exit status %d", status);
  FILE *f = fopen(stats_path, "r");
  char text[4096] = "";
  if (f) {
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
  }
  CHECK(strstr(text, "unroutable=10") != NULL, "stats: %s", text);
  CHECK(strstr(text, "link 1>0 packets_in=10 ") && strstr(text, "dropped_loss=10 "),
        "stats for 1>0: %s", text);
  char want01[64];
  snprintf(want01, sizeof want01, "link 0>1 packets_in=%d ", sent01);
  CHECK(strstr(text, want01) != NULL, "stats for 0>1 (%d sent): %s", sent01, text);
  CHECK(strstr(text, "running=0") != NULL, "final stats not written: %s", text);
  unlink(stats_path);
  for (int k = 0; k < 3; k++) close(test_end[k]);
  if (failures) {
    printf("test_emu_forwarder: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_emu_forwarder: ok\n");
  return 0;
}
