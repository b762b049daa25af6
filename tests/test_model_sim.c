// SPDX-License-Identifier: Apache-2.0
/* test_model_sim.c — the simulator runs src/coll's own schedules over modeled links, and the
 * closed forms of src/model/cost.c agree with it within 5% wherever both apply.
 *
 * "Both apply" excludes, on purpose and with the reason:
 *  - pipelined binomial trees (more than one round): the closed form is the root's busy port
 *    plus one round's path, while the schedule's slot reuse serializes rounds further;
 *  - recursive halving/doubling on non-powers of two: the fold is costed as one extra exchange;
 *  - direct reduce-scatter and direct collectives on a two-level fabric: the closed form
 *    serializes every message on the sender's port and ignores how receivers interleave.
 * The simulator is the reference in those cases. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "coll/schedule.h"
#include "model/cost.h"
#include "model/host.h"
#include "model/sim.h"

static int failures, checked;

typedef struct pair {
  strata_coll coll;
  strata_model_algo algo;
} pair;

static const pair pairs[] = {
    {STRATA_COLL_ALLREDUCE, STRATA_MODEL_RING},     {STRATA_COLL_ALLREDUCE, STRATA_MODEL_RHD},
    {STRATA_COLL_ALLREDUCE, STRATA_MODEL_TREE},     {STRATA_COLL_REDUCE_SCATTER, STRATA_MODEL_RING},
    {STRATA_COLL_REDUCE_SCATTER, STRATA_MODEL_RHD}, {STRATA_COLL_ALLGATHER, STRATA_MODEL_RING},
    {STRATA_COLL_ALLGATHER, STRATA_MODEL_RHD},      {STRATA_COLL_ALLGATHER, STRATA_MODEL_DIRECT},
    {STRATA_COLL_BROADCAST, STRATA_MODEL_RING},     {STRATA_COLL_BROADCAST, STRATA_MODEL_TREE},
    {STRATA_COLL_REDUCE, STRATA_MODEL_RING},        {STRATA_COLL_REDUCE, STRATA_MODEL_TREE},
    {STRATA_COLL_GATHER, STRATA_MODEL_DIRECT},      {STRATA_COLL_SCATTER, STRATA_MODEL_DIRECT},
    {STRATA_COLL_SCATTER, STRATA_MODEL_TREE},       {STRATA_COLL_ALLTOALL, STRATA_MODEL_DIRECT},
};

static int is_pow2(int p) {
  return (p & (p - 1)) == 0;
}

/* nccl-tests size → the API's count (elements of 4 bytes) */
static uint64_t count_for(strata_coll coll, double bytes, int p) {
  double per = bytes;
  if (coll == STRATA_COLL_REDUCE_SCATTER || coll == STRATA_COLL_ALLGATHER ||
      coll == STRATA_COLL_ALLTOALL || coll == STRATA_COLL_GATHER || coll == STRATA_COLL_SCATTER)
    per = bytes / p;
  return (uint64_t)(per / 4);
}

static int applies(const pair *c, int p, double bytes, int levels) {
  int pipelined_tree = c->algo == STRATA_MODEL_TREE && bytes > (1 << 20);
  if (pipelined_tree && (c->coll == STRATA_COLL_ALLREDUCE || c->coll == STRATA_COLL_REDUCE))
    return 0;
  if (c->algo == STRATA_MODEL_RHD && !is_pow2(p)) return 0;
  if (c->algo == STRATA_MODEL_DIRECT && levels > 1) return 0;
  if (c->algo == STRATA_MODEL_TREE && !is_pow2(p) && c->coll != STRATA_COLL_BROADCAST) return 0;
  return 1;
}

static void compare(const strata_fabric *f, const pair *c, double bytes, const char *label) {
  int p = (int)strata_fabric_nranks(f);
  double cf = strata_cost_time_us(f, c->coll, c->algo, bytes);
  strata_sched_params sp = {0};
  sp.coll = c->coll;
  sp.algo = strata_model_algo_engine(c->algo);
  sp.nranks = p;
  sp.elem_size = 4;
  sp.count = count_for(c->coll, bytes, p);
  strata_sim_result r;
  int rc = strata_sim_fabric(f, &sp, &r);
  checked++;
  if (rc != 0 || !(cf > 0) || fabs(cf - r.time_us) > 0.05 * r.time_us) {
    printf("FAIL %s %s/%s p=%d bytes=%.0f: sim %.2f us (rc %d), closed form %.2f us\n", label,
           strata_coll_name(c->coll), strata_model_algo_name(c->algo), p, bytes, r.time_us, rc, cf);
    failures++;
  }
}

/* A second opinion on the simulator itself: a ring allreduce on p ranks with γ = 0 and one
 * round is exactly 2(p−1)(α + n/p·β) (Thakur, Rabenseifner & Gropp, IJHPCA 2005). */
static void test_textbook_ring(void) {
  strata_fabric f;
  strata_fabric_flat(&f, 4, 7, 2, 0);
  strata_sched_params sp = {STRATA_COLL_ALLREDUCE, STRATA_ALGO_RING, 0, 4, 0, 65536, 4, 0, 0, NULL};
  strata_sim_result r;
  double n = 65536.0 * 4, want = 2 * 3 * (7 + n / 4 / 2e3);
  if (strata_sim_fabric(&f, &sp, &r) != 0 || fabs(r.time_us - want) > 1e-6 * want) {
    printf("FAIL textbook ring: sim %.4f want %.4f\n", r.time_us, want);
    failures++;
  }
  if (r.messages != 4 * 6 || fabs(r.bytes_sent - 4 * 6 * n / 4) > 0.5) {
    printf("FAIL ring traffic: %llu messages, %.0f bytes\n", (unsigned long long)r.messages,
           r.bytes_sent);
    failures++;
  }
}

/* An unmatched send is an error, not a hang; a model without links is refused. */
static void unit_link(void *ctx, int src, int dst, strata_sim_link *out) {
  (void)ctx, (void)src, (void)dst;
  out->alpha_us = 1;
  out->gbps = 1;
  out->shared = -1;
}

static void test_mismatch(void) {
  strata_step steps[1] = {{0}};
  steps[0].kind = STRATA_STEP_SEND;
  steps[0].peer = 1;
  steps[0].bytes = 8;
  strata_schedule sch[2] = {{0}};
  sch[0].nranks = sch[1].nranks = 2;
  sch[1].rank = 1;
  sch[0].steps = steps;
  sch[0].nsteps = 1;
  strata_sim_model m = {0};
  m.nranks = 2;
  strata_sim_result r;
  if (strata_sim_run(&m, sch, &r) != STRATA_ERR_INVALID_ARG) {
    printf("FAIL sim without link model accepted\n");
    failures++;
  }
  m.link = unit_link;
  if (strata_sim_run(&m, sch, &r) != STRATA_ERR_MISMATCH) {
    printf("FAIL unmatched send not reported\n");
    failures++;
  }
  steps[0].kind = STRATA_STEP_RECV; /* a receive nobody sends never completes */
  if (strata_sim_run(&m, sch, &r) != STRATA_ERR_PROTOCOL) {
    printf("FAIL orphan receive not reported\n");
    failures++;
  }
}

/* host_cores: 4 ranks on 2 cores, one core each, pulling links at 1 GB/s (1 byte/ns) with no
 * latency. A chain broadcast of one chunk is three lone hops: each runs at p/c = 2x the
 * calibrated rate. A ring allgather keeps every core busy at once: the calibrated rate holds. */
static void pull_link(void *ctx, int src, int dst, strata_sim_link *out) {
  (void)ctx, (void)src, (void)dst;
  out->alpha_us = 0;
  out->gbps = 1;
  out->shared = -1;
  out->pull = 1;
}

static double host_time_us(strata_coll coll, int cores) {
  enum { P = 4 };
  strata_schedule sch[P];
  memset(sch, 0, sizeof sch);
  for (int r = 0; r < P; r++) {
    strata_sched_params sp = {.coll = coll,
                              .algo = STRATA_ALGO_RING,
                              .rank = r,
                              .nranks = P,
                              .count = 1000,
                              .elem_size = 4,
                              .in_place = 1,
                              .chunk_bytes = 1u << 20};
    if (strata_schedule_build(&sp, &sch[r]) != STRATA_OK) return -1;
  }
  strata_sim_model m = {
      .nranks = P, .link = pull_link, .one_core_per_rank = 1, .host_cores = cores};
  strata_sim_result res;
  double t = strata_sim_run(&m, sch, &res) == STRATA_OK ? res.time_us : -1;
  for (int r = 0; r < P; r++) strata_schedule_free(&sch[r]);
  return t;
}

static void test_host_cores(void) {
  double chain = host_time_us(STRATA_COLL_BROADCAST, 0);
  double chain2 = host_time_us(STRATA_COLL_BROADCAST, 2);
  double ring = host_time_us(STRATA_COLL_ALLGATHER, 0);
  double ring2 = host_time_us(STRATA_COLL_ALLGATHER, 2);
  checked += 2;
  /* 3 hops of 4000 bytes at 1 byte/ns: 12 us, then 6 us on 2 cores */
  if (!(fabs(chain - 12.0) < 1e-6 && fabs(chain2 - 6.0) < 1e-6)) {
    printf("FAIL host_cores: chain broadcast %g us (want 12), on 2 cores %g (want 6)\n", chain,
           chain2);
    failures++;
  }
  if (!(ring > 0 && fabs(ring2 - ring) < 1e-6)) {
    printf("FAIL host_cores: ring allgather %g us, on 2 cores %g (want the same)\n", ring, ring2);
    failures++;
  }
}

/* host_cores, with latency: 4 ranks on 2 cores, links that do not pull at 1 byte/ns, α 10 us.
 * Ranks 2 and 3 copy 4000 bytes, then 40000; ranks 0 and 1 swap 1000 bytes, then fly 10 us. At
 * time 0 the local steps go first (sim.c, sim_event): the first copies run at 2x (two ranks
 * busy, two cores) to 2 us, the sends at 4/3x and 1x (three, then four busy) to 0.75 and 1 us.
 * The second copies start at 2 us, while the swapped messages fly: their receivers count as busy
 * (sim.c, busy_with for core_share), so rank 2's copy runs at 4/3x (three busy) to 32 us and rank
 * 3's at 1x (four) to 42. Counted as idle, the flying ranks would leave both copies 2x: 22 us. */
static void tcp_link_alpha(void *ctx, int src, int dst, strata_sim_link *out) {
  pull_link(ctx, src, dst, out);
  out->pull = 0;
  out->alpha_us = 10;
}

/* Runs `p` hand-built schedules on `m`, frees them, and checks the simulated time against `want`
 * (`label` and `note` name the case when it fails). */
static void expect_time(const char *label, strata_sim_model *m, strata_schedule *sch, int p,
                        double want, const char *note) {
  strata_sim_result res;
  double t = strata_sim_run(m, sch, &res) == STRATA_OK ? res.time_us : -1;
  for (int r = 0; r < p; r++) strata_schedule_free(&sch[r]);
  checked++;
  if (!(fabs(t - want) < 1e-6)) {
    printf("FAIL %s: %g us (want %g%s)\n", label, t, want, note);
    failures++;
  }
}

static void test_host_cores_latency(void) {
  enum { P = 4 };
  strata_schedule sch[P];
  memset(sch, 0, sizeof sch);
  for (int r = 0; r < P; r++) sch[r].rank = r, sch[r].nranks = P;
  for (int r = 0; r < 2; r++) {
    strata_sched_send(&sch[r], 1 - r, strata_ref(STRATA_BUF_SEND, 0), 1000, NULL, 0);
    strata_sched_recv(&sch[r], 1 - r, strata_ref(STRATA_BUF_RECV, 0), 1000, NULL, 0);
  }
  for (int r = 2; r < P; r++) {
    uint32_t first = (uint32_t)strata_sched_copy(&sch[r], strata_ref(STRATA_BUF_SEND, 0),
                                                 strata_ref(STRATA_BUF_RECV, 0), 4000, NULL, 0);
    strata_sched_copy(&sch[r], strata_ref(STRATA_BUF_SEND, 0), strata_ref(STRATA_BUF_RECV, 0),
                      40000, &first, 1);
  }
  strata_sim_model m = {
      .nranks = P, .link = tcp_link_alpha, .one_core_per_rank = 1, .host_cores = 2, .copy_gbps = 1};
  expect_time("host_cores with latency", &m, sch, P, 42.0, "; 22 counts flying ranks idle");
}

/* A TCP message streams when both ends have a core (sim.c, sim_send_core): the receiver's core
 * copies the bytes out as they land, from α after the sender's copy began, and the receive
 * completes no earlier than α after the sender's copy ended. One message of 8000 bytes, both
 * copies at 1 byte/ns, α 10 us: 18 us; taken whole, copy in, fly, copy out: 26. With the two
 * ranks on one core it is taken whole, each copy at 2x with the other rank idle: 4 + 10 + 4 = 18
 * us; streamed, 14. */
static void one_message(strata_schedule sch[2]) {
  memset(sch, 0, 2 * sizeof *sch);
  for (int r = 0; r < 2; r++) sch[r].rank = r, sch[r].nranks = 2;
  strata_sched_send(&sch[0], 1, strata_ref(STRATA_BUF_SEND, 0), 8000, NULL, 0);
  strata_sched_recv(&sch[1], 0, strata_ref(STRATA_BUF_RECV, 0), 8000, NULL, 0);
}

static void test_tcp_stream(void) {
  strata_schedule sch[2];
  one_message(sch);
  strata_sim_model m = {.nranks = 2, .link = tcp_link_alpha, .one_core_per_rank = 1};
  expect_time("a TCP message streams", &m, sch, 2, 18.0, "; 26 taken whole");
  one_message(sch);
  m.host_cores = 1;
  expect_time("a TCP message on a shared core", &m, sch, 2, 18.0, "; 14 streamed");
}

/* Three ranks on two cores (sim.c, both_ends_have_cores): a message from rank 0 to rank 1 streams
 * while rank 2 is idle, as a chain broadcast's hop does, and is taken whole while rank 2 copies,
 * the two ends and rank 2 outnumbering the cores. 8000 bytes at 1 byte/ns times the share 3/2
 * (3 ranks, 2 cores), α 10 us: streamed, the copy-out runs from 10 to 10 + 5.33 us = 15.33; taken
 * whole, copy in to 5.33, fly to 15.33, copy out to 20.67. Rank 2's copy, 4000 bytes at 1.5
 * bytes/ns, ends at 2.67 us. */
static void three_ranks_one_message(strata_schedule sch[3], int rank2_copies) {
  memset(sch, 0, 3 * sizeof *sch);
  for (int r = 0; r < 3; r++) sch[r].rank = r, sch[r].nranks = 3;
  strata_sched_send(&sch[0], 1, strata_ref(STRATA_BUF_SEND, 0), 8000, NULL, 0);
  strata_sched_recv(&sch[1], 0, strata_ref(STRATA_BUF_RECV, 0), 8000, NULL, 0);
  if (rank2_copies)
    strata_sched_copy(&sch[2], strata_ref(STRATA_BUF_SEND, 0), strata_ref(STRATA_BUF_RECV, 0), 4000,
                      NULL, 0);
}

static void test_tcp_stream_idle_ranks(void) {
  strata_schedule sch[3];
  strata_sim_model m = {
      .nranks = 3, .link = tcp_link_alpha, .one_core_per_rank = 1, .host_cores = 2, .copy_gbps = 1};
  three_ranks_one_message(sch, 0);
  expect_time("a TCP message with a rank idle", &m, sch, 3, 46.0 / 3, "; 62/3 taken whole");
  three_ranks_one_message(sch, 1);
  expect_time("a TCP message with every rank busy", &m, sch, 3, 62.0 / 3, "; 46/3 streamed");
}

/* Host links with the same rates at every working set. */
static void host_links_flat(strata_host_links *l, double link_gbps, double reduce_gbps,
                            double memcpy_gbps) {
  for (int i = 0; i < STRATA_HOST_CURVE_POINTS; i++) {
    strata_host_point_footprints(l, i);
    l->link.gbps[i] = link_gbps;
    l->reduce.gbps[i] = reduce_gbps;
    l->memcpy.gbps[i] = memcpy_gbps;
  }
}

static double host_us(const strata_host_links *l, strata_coll coll, uint64_t bytes) {
  double us = -1;
  return strata_host_predict(l, coll, STRATA_ALGO_AUTO, bytes / 4, 4, 0, &us) == STRATA_OK ? us
                                                                                           : -1;
}

/* A call is costed at the rates of its working set (host.c): a 2-rank shm allgather out of place
 * of 16 MiB per rank (its own block copied, 48 MiB touched per rank) on a link curve of 8 GB/s up
 * to 4 MiB and 2 GB/s from 16 MiB is predicted as on a flat 2 GB/s link, and one of 1 MiB as on a
 * flat 8 GB/s link. */
static void test_host_working_set(void) {
  strata_host_links l;
  memset(&l, 0, sizeof l);
  l.nranks = 2, l.alpha_us = 2, l.chunk_bytes = 1u << 20;
  const uint64_t sizes[2] = {1u << 20, 16u << 20};
  double flat[2][2];
  for (int k = 0; k < 2; k++) {
    host_links_flat(&l, k ? 2 : 8, 16, 16);
    for (int s = 0; s < 2; s++) flat[k][s] = host_us(&l, STRATA_COLL_ALLGATHER, sizes[s]);
  }
  for (int i = 0; i < STRATA_HOST_CURVE_POINTS; i++)
    l.link.gbps[i] = strata_host_point_bytes(i) <= (4u << 20) ? 8 : 2;
  for (int s = 0; s < 2; s++) {
    double curve = host_us(&l, STRATA_COLL_ALLGATHER, sizes[s]), want = flat[s][s];
    checked++;
    if (!(want > 0 && fabs(curve - want) < 1e-6 * want)) {
      printf("FAIL host working set, %llu MiB: %g us on the curve, want %g\n",
             (unsigned long long)(sizes[s] >> 20), curve, want);
      failures++;
    }
  }
  memset(&l.link, 0, sizeof l.link); /* no link rate: refused, not divided by zero */
  double us = 0;
  checked++;
  if (strata_host_predict(&l, STRATA_COLL_ALLGATHER, STRATA_ALGO_AUTO, 1024, 4, 0, &us) !=
      STRATA_ERR_INVALID_ARG) {
    printf("FAIL host links without a link rate accepted\n");
    failures++;
  }
}

/* A pull starts once the receiver has posted its receive (sim.c, sim_send_core): rank 0's send
 * is ready at once, but rank 1 posts the receive for it only after a message from rank 2, which
 * first copies 8000 bytes (8 us at 1 byte/ns). Pulls at 1 byte/ns, no latency: rank 1 pulls
 * rank 2's 8000 bytes over 8-16 us, then rank 0's over 16-24 us. Booked when the send was
 * ready, rank 0's pull would run over 0-8 us, before rank 1 had asked for it: 16. */
static void test_pull_waits_for_receive(void) {
  strata_schedule sch[3];
  memset(sch, 0, sizeof sch);
  for (int r = 0; r < 3; r++) sch[r].rank = r, sch[r].nranks = 3;
  strata_sched_send(&sch[0], 1, strata_ref(STRATA_BUF_SEND, 0), 8000, NULL, 0);
  uint32_t copied = (uint32_t)strata_sched_copy(&sch[2], strata_ref(STRATA_BUF_SEND, 0),
                                                strata_ref(STRATA_BUF_RECV, 0), 8000, NULL, 0);
  strata_sched_send(&sch[2], 1, strata_ref(STRATA_BUF_RECV, 0), 8000, &copied, 1);
  uint32_t first =
      (uint32_t)strata_sched_recv(&sch[1], 2, strata_ref(STRATA_BUF_RECV, 0), 8000, NULL, 0);
  strata_sched_recv(&sch[1], 0, strata_ref(STRATA_BUF_RECV, 8000), 8000, &first, 1);
  strata_sim_model m = {.nranks = 3, .link = pull_link, .one_core_per_rank = 1, .copy_gbps = 1};
  expect_time("a pull waits for its receive", &m, sch, 3, 24.0, "; 16 if pulled before posted");
}

/* Calls in a row (host.c, strata_host_predict_calls): each rank starts its next call when its
 * own part of the last is done. A 4-rank chain broadcast of one chunk is three hops in turn, and
 * rank 1 takes part in two of them (it pulls, then rank 2 pulls from it), so in a long row of
 * calls the root's next first hop runs beside the last hop: a period of two hops, 2/3 of one
 * call alone. A ring allreduce keeps every rank in every step: its period is the call's own. One
 * call in a row is strata_host_predict. */
static void test_host_calls_in_a_row(void) {
  strata_host_links l;
  memset(&l, 0, sizeof l);
  l.nranks = 4, l.alpha_us = 2;
  host_links_flat(&l, 2, 1000, 1000);
  const uint64_t S = 16u << 20;
  l.chunk_bytes = S;
  const struct {
    strata_coll coll;
    double want; /* per call of 1000 in a row, over one call alone */
  } cases[] = {{STRATA_COLL_BROADCAST, 2.0 / 3}, {STRATA_COLL_ALLREDUCE, 1.0}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    double one = -1, in_row_1 = -1, in_row = -1;
    int rc = strata_host_predict(&l, cases[c].coll, STRATA_ALGO_AUTO, S / 4, 4, 0, &one);
    if (!rc)
      rc =
          strata_host_predict_calls(&l, cases[c].coll, STRATA_ALGO_AUTO, S / 4, 4, 0, 1, &in_row_1);
    if (!rc)
      rc = strata_host_predict_calls(&l, cases[c].coll, STRATA_ALGO_AUTO, S / 4, 4, 0, 1000,
                                     &in_row);
    checked++;
    if (rc || !(one > 0) || in_row_1 != one || fabs(in_row / one - cases[c].want) > 0.01) {
      printf(
          "FAIL %s calls in a row: %g us a call of 1000 (%.3f of one alone, want %.3f), one "
          "alone %g us, one in a row %g (%s)\n",
          strata_coll_name(cases[c].coll), in_row, in_row / one, cases[c].want, one, in_row_1,
          strata_strerror(rc));
      failures++;
    }
  }
  double us = 0;
  checked++;
  if (strata_host_predict_calls(&l, STRATA_COLL_BROADCAST, STRATA_ALGO_AUTO, S / 4, 4, 0, 0, &us) !=
      STRATA_ERR_INVALID_ARG) {
    printf("FAIL zero calls in a row accepted\n");
    failures++;
  }
}

/* The working set each calibration point is labelled with is what one rank touches in
 * calibration's calls (host.h): 2 ranks, a ring allgather in place of two blocks of B (2B; over
 * TCP also B sent and B received through the socket buffers: 4B), a ring reduce-scatter of the
 * same blocks (2B in, B out: 3B; over TCP 3B more for the socket and the staging), memcpy of the
 * point's X bytes 2X. B is X but at the largest point, whose two blocks must fit the calibration
 * buffer. */
static void test_point_footprints(void) {
  for (int tcp = 0; tcp < 2; tcp++) {
    strata_host_links l;
    memset(&l, 0, sizeof l);
    l.nranks = 2, l.use_tcp = tcp;
    for (int i = 0; i < STRATA_HOST_CURVE_POINTS; i++) {
      strata_host_point_footprints(&l, i);
      uint64_t x = strata_host_point_bytes(i), b = strata_host_point_block_bytes(i, 2);
      int last = i == STRATA_HOST_CURVE_POINTS - 1;
      int ok = b == (last ? x / 2 : x) && l.memcpy.footprint_bytes[i] == 2 * x &&
               l.link.footprint_bytes[i] == (tcp ? 4 : 2) * b &&
               l.reduce.footprint_bytes[i] == (tcp ? 6 : 3) * b;
      checked++;
      if (!ok) {
        printf("FAIL point %d footprints (%s): link %llu reduce %llu memcpy %llu for %llu bytes\n",
               i, tcp ? "tcp" : "shm", (unsigned long long)l.link.footprint_bytes[i],
               (unsigned long long)l.reduce.footprint_bytes[i],
               (unsigned long long)l.memcpy.footprint_bytes[i], (unsigned long long)x);
        failures++;
      }
    }
  }
}

/* A compressed message's codec on the ranks' cores (sim.h, encode_gbps): one message of 8000 f32
 * bytes on the port model, the link at 1 byte/ns and α 10 us: 8 + 10 = 18 us uncoded. Encoding at
 * 2 bytes/ns (4 us) and decoding back into the source at 4 (2 us) before the send, then decoding
 * on arrival (2 us): 6 + 8 + 10 + 2 = 26 us; without the decode back, 24. */
static void test_codec(void) {
  strata_schedule sch[2];
  one_message(sch);
  strata_sim_model m = {.nranks = 2, .link = tcp_link_alpha};
  expect_time("a message, no codec", &m, sch, 2, 18.0, "");
  one_message(sch);
  m.encode_gbps = 2, m.decode_gbps = 4, m.decode_sent = 1;
  expect_time("a coded message", &m, sch, 2, 26.0, "; encode 4 + decode back 2 + 8 + 10 + 2");
  one_message(sch);
  m.decode_sent = 0;
  expect_time("a coded message, source kept", &m, sch, 2, 24.0, "; encode 4 + 8 + 10 + 2");
}

int main(void) {
  const int ranks[] = {2, 3, 4, 6, 8, 16};
  const double sizes[] = {4096, 1 << 20, 64.0 * (1 << 20)};
  for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (size_t c = 0; c < sizeof pairs / sizeof pairs[0]; c++) {
        int p = ranks[i];
        if (p == 16 && sizes[s] > (1 << 20)) continue; /* keeps the test fast */
        /* one level: α 10 µs, 10 GB/s, reductions 4× faster than the link */
        strata_fabric f;
        strata_fabric_flat(&f, p, 10, 10, 40);
        if (applies(&pairs[c], p, sizes[s], 1)) compare(&f, &pairs[c], sizes[s], "flat");
        /* two levels: 4 ranks per node on a 40 GB/s, 3 µs link; nodes on 10 GB/s, 10 µs */
        if (p % 4 == 0 && p > 4) {
          f.nlevels = 2;
          f.level[1] = f.level[0];
          f.level[1].fanout = p / 4;
          f.level[0].fanout = 4;
          f.level[0].per_rank_gbps = 40;
          f.level[0].alpha_us = 3;
          if (applies(&pairs[c], p, sizes[s], 2)) compare(&f, &pairs[c], sizes[s], "2-level");
        }
      }
  test_textbook_ring();
  test_mismatch();
  test_host_cores();
  test_host_cores_latency();
  test_tcp_stream();
  test_codec();
  test_tcp_stream_idle_ranks();
  test_point_footprints();
  test_host_working_set();
  test_pull_waits_for_receive();
  test_host_calls_in_a_row();
  if (failures) {
    printf("%d of %d comparisons failed\n", failures, checked);
    return 1;
  }
  printf("ok: %d closed-form / simulator comparisons within 5%%\n", checked);
  return 0;
}
