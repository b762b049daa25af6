// SPDX-License-Identifier: Apache-2.0
/*
 * test_tcp_govern.c — the WAN window governor (src/net/tcp_govern.c) on synthetic readings.
 *
 * A pair receiving at a known rate over a known minimum RTT: no cap while the rate still grows
 * (slow start), then 1.3 × rate × min RTT once three samples in a row are not 25% faster (a sample
 * spans two busy intervals); readings
 * with no receive waiting make no sample (they say nothing of the path); the max filter forgets a
 * faster past after its window and never drops on one slow sample; the cap splits over the
 * streams as window clamps with a floor; the held sockets' fixed buffers are as large as
 * net.core.rmem_max allows, not near the clamp; losses that go on under the cap (not those of the
 * overshoot before it), or samples well below the rate the cap was set for (a window too small for
 * the round trip the acks take), release the pair for good; a sample after a repaired hole
 * reaches back to where the hole opened (its burst sets no cap); a buffer that autotuning grew is
 * never fixed smaller; a pair whose link rate is given is held from its first byte, and a cap at
 * that rate never counts as starving it; intervals that carried only messages make no sample.
 * tests/test_tcp_wan.sh checks the governor on a real emulated link (its info log shows the rate it
 * measured).
 */
#include <stdio.h>
#include <string.h>

#include "helpers/check.h"
#include "net/tcp_govern.h"

static int near(double got, double want, double tol) {
  return got > want * (1 - tol) && got < want * (1 + tol);
}

/* Feed one reading `dt` after the last, `rate` bytes/s since then. */
typedef struct feeder {
  strata_tcp_governor g;
  double now;
  uint64_t received, ooo;
} feeder;

static uint64_t feed_ooo(feeder *f, double dt, double rate, int busy, double rtt, int ooo) {
  f->now += dt;
  f->received += (uint64_t)(rate * dt);
  f->ooo += (uint64_t)ooo;
  strata_tcp_reading r = {
      .now_s = f->now, .received = f->received, .ooo = f->ooo, .rtt_min_s = rtt, .busy = busy};
  return strata_tcp_governor_feed(&f->g, &r);
}

static uint64_t feed(feeder *f, double dt, double rate, int busy, double rtt) {
  return feed_ooo(f, dt, rate, busy, rtt, 0);
}

/* A fresh governor that has seen `samples` busy samples at rate R (5 make it full). */
static void feeder_at(feeder *f, double R, double rtt, int samples) {
  memset(f, 0, sizeof *f);
  feed(f, 0.2, 0, 1, rtt);
  for (int i = 0; i < samples; i++) feed(f, 0.2, R, 1, rtt);
}

static void test_startup_then_cap(void) {
  feeder f;
  memset(&f, 0, sizeof f);
  const double rtt = 0.05, R = 125e6; /* 1 Gbit/s, 50 ms: BDP 6.25 MB */
  uint64_t cap = feed(&f, 0.2, 0, 1, rtt);
  CHECK(cap == 0, "first reading: no sample, no cap (%llu)", (unsigned long long)cap);
  CHECK(near(f.g.next_s - f.now, 4 * rtt, 1e-9), "next reading after 4 RTT: %.3f s",
        f.g.next_s - f.now);
  /* slow start: the rate doubles every sample */
  for (double rate = R / 64; rate < R; rate *= 2) {
    cap = feed(&f, 0.2, rate, 1, rtt);
    CHECK(cap == 0, "rate still growing (%.0f B/s): no cap yet (%llu)", rate,
          (unsigned long long)cap);
  }
  /* plateau at R: the step to R counts as growth, then 3 samples without 25% more. A sample
   * spans two busy intervals (a repaired hole's burst is spread over both). */
  cap = feed(&f, 0.2, R, 1, rtt);
  CHECK(cap == 0, "the step to R still grows");
  for (int i = 0; i < 4; i++) cap = feed(&f, 0.2, R, 1, rtt);
  CHECK(f.g.full, "samples within 25%%: full");
  CHECK(near((double)cap, 1.3 * R * rtt, 0.01), "cap = 1.3 x rate x min RTT: %llu",
        (unsigned long long)cap);
  cap = feed(&f, 0.2, 1.2 * R, 1, rtt);
  CHECK(near((double)cap, 1.3 * 1.1 * R * rtt, 0.01),
        "a faster interval counts with the one before it (1.1 R): %llu", (unsigned long long)cap);
  /* the smallest RTT any reading reported is the one used */
  cap = feed(&f, 0.2, R, 1, 0.04);
  CHECK(near((double)cap, 1.3 * 1.1 * R * 0.04, 0.01), "a smaller RTT lowers the cap: %llu",
        (unsigned long long)cap);
  cap = feed(&f, 0.2, R, 1, 0.09);
  CHECK(near((double)cap, 1.3 * 1.1 * R * 0.04, 0.01), "a larger RTT does not raise it: %llu",
        (unsigned long long)cap);
}

static void test_idle_readings_make_no_sample(void) {
  feeder f;
  const double rtt = 0.05, R = 100e6;
  feeder_at(&f, R, rtt, 5);
  uint64_t samples = f.g.samples, cap = f.g.cap_bytes;
  CHECK(f.g.full && cap > 0, "full after a plateau");
  /* nothing posted: a slow interval on either side of an idle reading is not a sample */
  feed(&f, 0.2, R / 50, 0, rtt);
  feed(&f, 0.2, R / 50, 1, rtt);
  CHECK(f.g.samples == samples, "readings next to an idle one: no sample (%llu -> %llu)",
        (unsigned long long)samples, (unsigned long long)f.g.samples);
  /* a counter that went backwards (a reset socket) is no sample either */
  f.received = 0;
  feed(&f, 0.2, 0, 1, rtt);
  CHECK(f.g.samples == samples, "counter went backwards: no sample");
  CHECK(f.g.cap_bytes == cap, "cap unchanged by idle readings (%llu vs %llu)",
        (unsigned long long)f.g.cap_bytes, (unsigned long long)cap);
}

static void test_max_filter(void) {
  feeder f;
  const double rtt = 0.05, R = 100e6;
  feeder_at(&f, R, rtt, 5);
  uint64_t cap = feed(&f, 0.2, R / 4, 1, rtt);
  CHECK(near((double)cap, 1.3 * R * rtt, 0.01), "one slow sample does not lower the cap: %llu",
        (unsigned long long)cap);
  /* a path that became a little slower (not starved by the cap): forgotten after the window */
  for (int i = 0; i < STRATA_TCP_GOVERN_WINDOW; i++) cap = feed(&f, 0.2, 0.85 * R, 1, rtt);
  CHECK(!f.g.released && near((double)cap, 1.3 * 0.85 * R * rtt, 0.01),
        "after %d slower samples the cap follows: %llu", STRATA_TCP_GOVERN_WINDOW,
        (unsigned long long)cap);
  /* a faster one: the cap rises with the first faster interval (averaged with the one before) */
  cap = feed(&f, 0.2, 0.95 * R, 1, rtt);
  CHECK(near((double)cap, 1.3 * 0.9 * R * rtt, 0.01), "a faster interval raises it: %llu",
        (unsigned long long)cap);
  cap = feed(&f, 0.2, 0.95 * R, 1, rtt);
  CHECK(near((double)cap, 1.3 * 0.95 * R * rtt, 0.01), "and the next one to the new rate: %llu",
        (unsigned long long)cap);
}

/* A held pair that, with no loss at all, gets well below the rate its cap was set for (the acks
 * wait behind the other direction's queue, so the window covers less than the round trip): after
 * the grace, 4 of 6 such samples release it; 3 of 6 do not. */
static void test_release_when_starved(void) {
  const double rtt = 0.05, R = 100e6;
  feeder f;
  feeder_at(&f, R, rtt, 5);
  CHECK(f.g.full && f.g.cap_bytes > 0, "capped");
  /* starved from the cap on: the grace (5 samples) and 3 more starved ones do not release it,
   * the 4th does */
  int n = 0;
  while (!f.g.released && n < 40) {
    feed(&f, 0.2, 0.5 * R, 1, rtt);
    n++;
  }
  CHECK(f.g.released && n >= 8 && n <= 9, "starved from the cap on: released after %d samples", n);
  uint64_t cap;
  /* samples span two intervals: a pattern of 2 fast then 2 slow intervals reads R, 0.75R, 0.5R,
   * 0.75R, R, ... so 3 of every 4 samples are starved (< 0.8 R) */
  feeder g;
  feeder_at(&g, R, rtt, 5);
  for (int i = 0; i < 5; i++) feed(&g, 0.2, R, 1, rtt); /* grace, not starved */
  feed(&g, 0.2, R, 1, rtt);
  feed(&g, 0.2, R, 1, rtt);
  feed(&g, 0.2, 0.7 * R, 1, rtt);       /* sample 0.85 R: not starved */
  feed(&g, 0.2, 0.5 * R, 1, rtt);       /* 0.6 R: starved */
  feed(&g, 0.2, 0.5 * R, 1, rtt);       /* 0.5 R: starved */
  cap = feed(&g, 0.2, 0.5 * R, 1, rtt); /* 0.5 R: starved; last 6: 0 0 0 1 1 1 */
  CHECK(cap > 0 && !g.g.released, "3 of the last 6 starved: still capped (%llu)",
        (unsigned long long)cap);
  cap = feed(&g, 0.2, 0.5 * R, 1, rtt);
  CHECK(cap == 0 && g.g.released, "4 of the last 6 starved, no loss: released (%llu)",
        (unsigned long long)cap);
  CHECK(__builtin_popcount(g.g.starved_bits) == 4 && g.g.lossy_bits == 0,
        "the release says why: starved %#x, lossy %#x", g.g.starved_bits, g.g.lossy_bits);
}

static void test_short_rtt_interval_and_rcvbuf(void) {
  feeder f;
  memset(&f, 0, sizeof f);
  feed(&f, 0.0, 0, 1, 0.002); /* 2 ms RTT: readings every 20 ms, not 8 */
  CHECK(near(f.g.next_s - f.now, 0.02, 1e-9), "interval floor 20 ms: %.4f", f.g.next_s - f.now);
  CHECK(strata_tcp_governor_clamp(8000000, 4) == 2000000, "8 MB over 4 streams: %d",
        strata_tcp_governor_clamp(8000000, 4));
  CHECK(strata_tcp_governor_clamp(100000, 8) == 64 << 10, "floor 64 KiB: %d",
        strata_tcp_governor_clamp(100000, 8));
  CHECK(strata_tcp_governor_clamp(8000000, 0) == 8000000, "streams <= 0 as 1: %d",
        strata_tcp_governor_clamp(8000000, 0));
}

/* The held socket's fixed buffer: as large as rmem_max allows, never near the clamp (a buffer
 * near it prunes what arrives behind a loss); none when rmem_max is below twice the clamp. */
static void test_rcvbuf(void) {
  int got = strata_tcp_governor_rcvbuf(312000, 4194304, 0);
  CHECK(got == 4194304, "a 312 KB clamp with rmem_max 4 MiB: the whole 4 MiB (%d)", got);
  got = strata_tcp_governor_rcvbuf(2000000, 4194304, 0);
  CHECK(got == 4194304, "a 2 MB clamp: still rmem_max, not twice the clamp (%d)", got);
  got = strata_tcp_governor_rcvbuf(2200000, 4194304, 0);
  CHECK(got == 0, "rmem_max below twice the clamp: the buffer is left to the kernel (%d)", got);
  got = strata_tcp_governor_rcvbuf(312000, 0, 0);
  CHECK(got == 0, "rmem_max unknown: left to the kernel (%d)", got);
  got = strata_tcp_governor_rcvbuf(0, 4194304, 0);
  CHECK(got == 0, "no clamp: left to the kernel (%d)", got);
  got = strata_tcp_governor_rcvbuf(1 << 20, 1L << 40, 0);
  CHECK(got == 0x3fffffff, "a huge rmem_max fits an int (%d)", got);
}

/* A fresh connection's startup can grow a buffer past what a fixed one may be (the kernel reports
 * twice what is set): fixing it then would shrink a buffer that holds data, and the kernel would
 * prune what it had acknowledged selectively. Such a buffer is left to the kernel; one at or
 * below the fixed size is fixed. */
static void test_rcvbuf_never_shrinks(void) {
  int got = strata_tcp_governor_rcvbuf(2000000, 4194304, 53004068);
  CHECK(got == 0, "a buffer autotuning grew to 53 MB is not fixed at 8 MiB (%d)", got);
  got = strata_tcp_governor_rcvbuf(2000000, 4194304, 2 * 4194304 + 1);
  CHECK(got == 0, "one byte above the fixed size: left alone (%d)", got);
  got = strata_tcp_governor_rcvbuf(2000000, 4194304, 2 * 4194304);
  CHECK(got == 4194304, "exactly the fixed size: fixed (%d)", got);
  got = strata_tcp_governor_rcvbuf(2000000, 4194304, 131072);
  CHECK(got == 4194304, "a small buffer: fixed at rmem_max (%d)", got);
}

/* Losses under the cap: the overshoot's own in the grace samples are forgiven; losses that go on
 * (4 of 6 capped samples) mean a lossy path, and the governor lets go for good. */
static void test_release_on_lossy_path(void) {
  const double rtt = 0.05, R = 100e6;
  feeder f;
  memset(&f, 0, sizeof f);
  feed(&f, 0.2, 0, 1, rtt);
  for (int i = 0; i < 4; i++) feed_ooo(&f, 0.2, R, 1, rtt, 500); /* startup overshoot */
  uint64_t cap = feed_ooo(&f, 0.2, R, 1, rtt, 500);
  CHECK(cap > 0 && f.g.full, "capped despite losses before the cap");
  for (int i = 0; i < 5; i++) cap = feed_ooo(&f, 0.2, R, 1, rtt, 300); /* grace */
  for (int i = 0; i < 12; i++) cap = feed_ooo(&f, 0.2, R, 1, rtt, i % 4 == 1 ? 5 : 0);
  CHECK(cap > 0 && !f.g.released, "losses in the grace and 1 of 4 later: still capped (%llu)",
        (unsigned long long)cap);
  cap = feed_ooo(&f, 0.2, R, 1, rtt, 3); /* the last 6: 0 0 5 0 0 3 */
  cap = feed_ooo(&f, 0.2, R, 1, rtt, 2);
  CHECK(cap > 0 && !f.g.released, "3 of the last 6 lossy: still capped");
  cap = feed_ooo(&f, 0.2, R, 1, rtt, 1);
  CHECK(cap == 0 && f.g.released, "4 of the last 6 lossy: released (%llu)",
        (unsigned long long)cap);
  for (int i = 0; i < 30; i++) cap = feed(&f, 0.2, R, 1, rtt);
  CHECK(cap == 0, "released for good (%llu)", (unsigned long long)cap);
  /* idle readings under the cap are not samples: their losses do not count */
  feeder_at(&f, R, rtt, 8);
  for (int i = 0; i < 6; i++) cap = feed_ooo(&f, 0.2, R, i % 2, rtt, 50);
  CHECK(cap > 0 && !f.g.released, "losses only across idle readings: still capped");
}

/* A repaired hole releases at once the bytes that queued behind it: a sample of the two intervals
 * after the stall reads above the link. The sample reaches back to the interval where the packets
 * behind the hole began to arrive out of order, so the burst counts over the time its bytes took
 * to arrive. Had the burst set the cap (1.4 R), every honest sample at R after it would read
 * starved (< 0.8 x 1.4 R) and the pair would be released. */
static void test_burst_after_hole_sets_no_cap(void) {
  const double rtt = 0.05, R = 100e6;
  feeder f;
  feeder_at(&f, R, rtt, 5);
  uint64_t cap = f.g.cap_bytes;
  CHECK(f.g.full && near((double)cap, 1.3 * R * rtt, 0.01), "held at 1.3 R: %llu",
        (unsigned long long)cap);
  feed_ooo(&f, 0.2, 0.2 * R, 1, rtt, 300);       /* the loss: a stall, packets out of order */
  cap = feed_ooo(&f, 0.2, 1.8 * R, 1, rtt, 100); /* the repair releases what queued */
  CHECK(near((double)cap, 1.3 * R * rtt, 0.01), "the stall and the burst: R (%llu)",
        (unsigned long long)cap);
  cap = feed(&f, 0.2, R, 1, rtt); /* burst + this: 1.4 R over two intervals, R from the hole */
  CHECK(near((double)cap, 1.3 * R * rtt, 0.01), "the sample after the burst reaches back: %llu",
        (unsigned long long)cap);
  for (int i = 0; i < 12; i++) feed(&f, 0.2, R, 1, rtt);
  CHECK(!f.g.released, "honest samples at R after the burst: not starved, not released");
}

/* The span: two intervals; back to the first of a run of intervals with packets out of order that
 * reaches the oldest of the two; never past the intervals known. */
static void test_span_rate(void) {
  strata_tcp_interval spans[STRATA_TCP_GOVERN_SPANS] = {{100, 1, 0}, {300, 1, 1}, {20, 1, 1},
                                                        {80, 1, 0},  {500, 1, 1}, {500, 1, 1}};
  double got = strata_tcp_governor_span_rate(spans, 6, 0);
  CHECK(near(got, 200, 1e-9), "the last two intervals: %.1f", got);
  got = strata_tcp_governor_span_rate(spans, 6, 1);
  CHECK(near(got, 140, 1e-9), "back to the hole, not past the clean interval: %.1f", got);
  spans[1].holes = 0;
  got = strata_tcp_governor_span_rate(spans, 6, 1);
  CHECK(near(got, 200, 1e-9), "no packets out of order in the older of the two: %.1f", got);
  for (int i = 0; i < STRATA_TCP_GOVERN_SPANS; i++) spans[i].holes = 1;
  got = strata_tcp_governor_span_rate(spans, 4, 1);
  CHECK(near(got, 125, 1e-9), "holes all along: every interval known (4): %.1f", got);
  got = strata_tcp_governor_span_rate(spans, 1, 1);
  CHECK(near(got, 100, 1e-9), "one interval: %.1f", got);
  CHECK(strata_tcp_governor_span_rate(spans, 0, 1) == 0, "none: 0");
}

/* A pair whose link rate is given: held to 1.3 x that rate x the handshake's RTT before any
 * sample; the samples set the cap once they stop growing, never below that first cap (slow samples
 * on a known link are a slow sender or host), above it when the path delivers more. No rate: no
 * cap until the samples say so. */
static void test_held_from_first_byte(void) {
  const double rtt = 0.05, R = 125e6; /* 1 Gbit/s */
  feeder f;
  memset(&f, 0, sizeof f);
  uint64_t cap = strata_tcp_governor_start(&f.g, 1.0, 50000);
  CHECK(near((double)cap, 1.3 * R * rtt, 0.01), "1 Gbit/s x 50 ms: held from the start (%llu)",
        (unsigned long long)cap);
  cap = feed(&f, 0.2, 0, 1, rtt);
  for (int i = 0; i < 2; i++) cap = feed(&f, 0.2, R / 8, 1, rtt);
  CHECK(!f.g.full && near((double)cap, 1.3 * R * rtt, 0.01), "still growing: the first cap (%llu)",
        (unsigned long long)cap);
  for (int i = 0; i < 4; i++) cap = feed(&f, 0.2, R / 8, 1, rtt);
  CHECK(f.g.full && near((double)cap, 1.3 * R * rtt, 0.01),
        "samples at 1/8 of the given rate: not held below it (%llu)", (unsigned long long)cap);
  for (int i = 0; i < 3; i++) cap = feed(&f, 0.2, 1.2 * R, 1, rtt);
  CHECK(near((double)cap, 1.3 * 1.2 * R * rtt, 0.01), "a faster path raises it (%llu)",
        (unsigned long long)cap);
  feeder n;
  CHECK(strata_tcp_governor_start(&n.g, 0, 50000) == 0 && n.g.cap_bytes == 0,
        "no rate given: nothing held");
  CHECK(strata_tcp_governor_start(&n.g, 1.0, 0) == 0, "no RTT: nothing held");
}

/* A pair held at the floor a given link rate set, whose sender stays far below that rate (a
 * loaded host): the floor is not what keeps it slow, so it is not released as starved. */
static void test_floor_never_starves(void) {
  const double rtt = 0.05, R = 125e6;
  feeder f;
  memset(&f, 0, sizeof f);
  uint64_t cap = strata_tcp_governor_start(&f.g, 1.0, 50000);
  cap = feed(&f, 0.2, 0, 1, rtt);
  for (int i = 0; i < 16; i++) cap = feed(&f, 0.2, R / 8, 1, rtt);
  CHECK(f.g.full && !f.g.released && near((double)cap, 1.3 * R * rtt, 0.01),
        "slow samples under the floor: still held at it (released %d, cap %llu)", f.g.released,
        (unsigned long long)cap);
}

/* A pair that carries only messages while a receive waits (heartbeats, a small reply) makes no
 * sample: it is not judged full at a rate near zero, so a transfer that follows starts unheld
 * and is capped at its own plateau. */
static void test_messages_make_no_sample(void) {
  const double rtt = 0.05, R = 125e6;
  feeder f;
  memset(&f, 0, sizeof f);
  uint64_t cap = feed(&f, 0.2, 0, 1, rtt);
  for (int i = 0; i < 12; i++) cap = feed(&f, 0.2, 1000, 1, rtt); /* 200 B per reading */
  CHECK(!f.g.full && cap == 0 && f.g.samples == 0,
        "messages only: no sample, not full, nothing held (samples %llu, cap %llu)",
        (unsigned long long)f.g.samples, (unsigned long long)cap);
  for (double rate = R / 64; rate < R; rate *= 2) cap = feed(&f, 0.2, rate, 1, rtt);
  for (int i = 0; i < 5; i++) cap = feed(&f, 0.2, R, 1, rtt);
  CHECK(f.g.full && near((double)cap, 1.3 * R * rtt, 0.01),
        "the transfer after them is capped at its own plateau (%llu)", (unsigned long long)cap);
}

int main(void) {
  test_startup_then_cap();
  test_idle_readings_make_no_sample();
  test_max_filter();
  test_short_rtt_interval_and_rcvbuf();
  test_release_on_lossy_path();
  test_release_when_starved();
  test_rcvbuf();
  test_rcvbuf_never_shrinks();
  test_burst_after_hole_sets_no_cap();
  test_span_rate();
  test_held_from_first_byte();
  test_floor_never_starves();
  test_messages_make_no_sample();
  if (failures) fprintf(stderr, "test_tcp_govern: %d failure(s)\n", failures);
  return failures != 0;
}
