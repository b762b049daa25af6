// SPDX-License-Identifier: Apache-2.0
/* test_emu_link.c — the link model of the WAN emulator (src/emu/link.c) checked exactly, with no
 * namespaces: serialization at the rate, tail drop at the queue limit, delay, FIFO under jitter,
 * reordering, Bernoulli and Gilbert-Elliott loss rates, and the parameter syntax. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emu/link.h"
#include "helpers/check.h"

static strata_emu_link_params params_of(const char *text) {
  strata_emu_link_params p;
  memset(&p, 0, sizeof p);
  char err[256] = "";
  int rc = strata_emu_link_params_parse(text, &p, err, sizeof err);
  CHECK(rc == 0, "parse '%s': %s", text, err);
  return p;
}

static void test_rate_and_delay(void) {
  /* 1 Gbit/s: a 1500-byte packet takes 12 µs to serialize; 10 ms delay on top. */
  strata_emu_link_params p = params_of("rate=1gbit,delay=10ms,queue=1mb");
  strata_emu_link link;
  strata_emu_link_init(&link, &p, 1);
  for (int i = 0; i < 100; i++) {
    uint64_t due;
    int reordered;
    strata_emu_verdict v = strata_emu_link_admit(&link, 1000000, 1500, &due, &reordered);
    CHECK(v == STRATA_EMU_DELIVER, "packet %d dropped", i);
    uint64_t want = 1000000 + (uint64_t)(i + 1) * 12000 + 10000000;
    CHECK(due == want, "packet %d due %llu, want %llu", i, (unsigned long long)due,
          (unsigned long long)want);
  }
}

static void test_queue_tail_drop(void) {
  /* 15000-byte queue holds 10 packets of 1500 B in a burst; the 11th and later are dropped. */
  strata_emu_link_params p = params_of("rate=100mbit,queue=15000");
  strata_emu_link link;
  strata_emu_link_init(&link, &p, 1);
  int delivered = 0, dropped = 0;
  for (int i = 0; i < 20; i++) {
    uint64_t due;
    int reordered;
    if (strata_emu_link_admit(&link, 0, 1500, &due, &reordered) == STRATA_EMU_DELIVER)
      delivered++;
    else
      dropped++;
  }
  CHECK(delivered == 10 && dropped == 10, "delivered %d dropped %d", delivered, dropped);
  CHECK(link.stats.dropped_queue == 10, "dropped_queue %llu",
        (unsigned long long)link.stats.dropped_queue);
  /* After the queue drains (10 × 120 µs), packets are admitted again. */
  uint64_t due;
  int reordered;
  CHECK(strata_emu_link_admit(&link, 1200000, 1500, &due, &reordered) == STRATA_EMU_DELIVER,
        "not admitted after drain");
  /* Default queue: one BDP of 2 × delay, at least 64 KiB. */
  strata_emu_link_params d = params_of("rate=1gbit,delay=25ms");
  CHECK(strata_emu_link_queue_default_bytes(&d) == 6250000, "default queue %llu",
        (unsigned long long)strata_emu_link_queue_default_bytes(&d));
  strata_emu_link_params small = params_of("rate=1mbit");
  CHECK(strata_emu_link_queue_default_bytes(&small) == 65536, "small default queue");
  strata_emu_link_params timed = params_of("rate=100mbit,queue=10ms");
  strata_emu_link_init(&link, &timed, 1);
  CHECK(link.queue_limit_bytes == 125000, "queue=10ms at 100mbit: %llu",
        (unsigned long long)link.queue_limit_bytes);
}

static void test_jitter_keeps_fifo(void) {
  strata_emu_link_params p = params_of("delay=20ms,jitter=2ms");
  strata_emu_link link;
  strata_emu_link_init(&link, &p, 7);
  uint64_t last = 0;
  double sum = 0;
  int n = 20000, out_of_order = 0;
  for (int i = 0; i < n; i++) {
    uint64_t now = (uint64_t)i * 20000000, due; /* 20 ms apart: beyond 3σ, never clamped */
    int reordered;
    strata_emu_link_admit(&link, now, 100, &due, &reordered);
    if (due < last) out_of_order++;
    last = due;
    sum += (double)(due - now);
  }
  double mean_ms = sum / n / 1e6;
  CHECK(out_of_order == 0, "%d packets out of order without reorder=", out_of_order);
  CHECK(fabs(mean_ms - 20.0) < 0.1, "mean delay %.3f ms, want 20 ± 0.1", mean_ms);
}

static void test_reorder(void) {
  strata_emu_link_params p = params_of("delay=5ms,reorder=10%,reorder_gap=2ms");
  strata_emu_link link;
  strata_emu_link_init(&link, &p, 3);
  int n = 20000, held = 0, overtaken = 0;
  uint64_t prev_due = 0;
  for (int i = 0; i < n; i++) {
    uint64_t now = (uint64_t)i * 10000, due;
    int reordered;
    strata_emu_link_admit(&link, now, 100, &due, &reordered);
    if (reordered) {
      held++;
      CHECK(due >= now + 7000000, "held packet due too early");
    } else if (i && due < prev_due) {
      overtaken++;
    }
    prev_due = due;
  }
  CHECK(fabs(held / (double)n - 0.10) < 0.01, "reordered fraction %.4f, want 0.10",
        held / (double)n);
  CHECK(overtaken > 0, "no packet overtook a held one");
}

static double loss_fraction(const char *text, int n) {
  strata_emu_link_params p = params_of(text);
  strata_emu_link link;
  strata_emu_link_init(&link, &p, 11);
  for (int i = 0; i < n; i++) {
    uint64_t due;
    int reordered;
    strata_emu_link_admit(&link, (uint64_t)i * 1000, 100, &due, &reordered);
  }
  return (double)link.stats.dropped_loss / n;
}

static void test_loss(void) {
  double f = loss_fraction("loss=1%", 200000);
  CHECK(fabs(f - 0.01) < 0.001, "Bernoulli 1%%: %.4f", f);
  f = loss_fraction("loss=0.05", 200000);
  CHECK(fabs(f - 0.05) < 0.003, "Bernoulli 5%%: %.4f", f);
  CHECK(loss_fraction("loss=0%", 1000) == 0, "loss=0 lost packets");
  /* Gilbert-Elliott: stationary P(bad) = p / (p + r) = 1/31 with full loss in the bad state. */
  f = loss_fraction("ge=1%:30%", 400000);
  CHECK(fabs(f - 1.0 / 31) < 0.004, "Gilbert-Elliott: %.4f, want %.4f", f, 1.0 / 31);
}

static void test_parse_errors(void) {
  static const char *bad[] = {"delay=10",    "rate=fast", "loss=120%",
                              "loss=-1%",    "queue=0",   "nonsense=1",
                              "delay",       "ge=1%",     "jitter=1ms,jitter_dist=pareto",
                              "rate=100mbps"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    strata_emu_link_params p;
    memset(&p, 0, sizeof p);
    char err[256] = "";
    CHECK(strata_emu_link_params_parse(bad[i], &p, err, sizeof err) != 0, "'%s' accepted", bad[i]);
    CHECK(err[0] != 0, "'%s': no message", bad[i]);
  }
}

static void test_format_round_trip(void) {
  strata_emu_link_params p = params_of(
      "rate=250mbit,delay=12ms,jitter=500us,loss=0.5%,reorder=2%,reorder_gap=3ms,queue=300000");
  char text[512];
  strata_emu_link_params_format(&p, text, sizeof text);
  strata_emu_link_params q = params_of(text);
  CHECK(q.rate_bps == 250000000 && q.delay_ns == 12000000 && q.jitter_ns == 500000 &&
            fabs(q.loss - 0.005) < 1e-12 && fabs(q.reorder - 0.02) < 1e-12 &&
            q.reorder_gap_ns == 3000000 && q.queue_bytes == 300000,
        "round trip of '%s'", text);
  /* Later items override earlier ones field by field. */
  strata_emu_link_params r = params_of("rate=1gbit,delay=5ms");
  char err[128];
  CHECK(strata_emu_link_params_parse("delay=7ms", &r, err, sizeof err) == 0, "%s", err);
  CHECK(r.rate_bps == 1000000000 && r.delay_ns == 7000000, "merge");
}

int main(void) {
  test_rate_and_delay();
  test_queue_tail_drop();
  test_jitter_keeps_fifo();
  test_reorder();
  test_loss();
  test_parse_errors();
  test_format_round_trip();
  if (failures) {
    printf("test_emu_link: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_emu_link: ok\n");
  return 0;
}
