/*
 * test_host_calibrate_on.c — `strata bench --predict` calibrates on the benchmark's own buffers
 * (src/model/calibrate.c, strata_host_calibrate_on): the pages a buffer got decide much of its
 * rates on a shared host, so the model must be measured on the pages the calls will use.
 *  - 2 ranks over shm and 2 over TCP: calibration on three caller buffers succeeds, fills every
 *    curve the transport has with positive rates, gives a prediction, and has written the
 *    caller's buffers (a sentinel over their last calibration point's bytes is gone: a
 *    calibration that measured on buffers of its own would leave it);
 *  - a rank that brings no buffer (NULL) fails the calibration on every rank, with
 *    STRATA_ERR_NO_MEMORY, instead of hanging its peers, and one whose buffers are shorter than
 *    the largest point likewise with STRATA_ERR_INVALID_ARG; the communicator works afterwards.
 *  - buffers of two largest points (the largest is then measured on each: calibrate.c,
 *    cal_point) calibrate alike, also when one rank offers fewer (every rank then takes the
 *    smallest span instead of waiting on shifts its peer never posts).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/ranks.h"
#include "model/host.h"
#include "strata.h"

enum { SENTINEL = 0x5a };

typedef struct want {
  int tcp;
  int null_rank;  /* -1: every rank brings its buffers */
  int short_rank; /* -1: every rank's buffers hold the largest point */
  int windows;    /* the buffers hold this many largest points */
  int one_window; /* this rank says its buffers hold one (-1: none) */
} want;

/* Pages of `buf` (`bytes`) still holding the sentinel. */
static size_t sentinel_left(const unsigned char *buf, size_t bytes) {
  size_t left = 0;
  for (size_t i = 0; i < bytes; i += 4096) left += buf[i] == SENTINEL;
  return left;
}

static int curve_ok(const strata_host_curve *c, const char *name, int rank) {
  for (int i = 0; i < STRATA_HOST_CURVE_POINTS; i++)
    if (!(c->gbps[i] > 0) || c->footprint_bytes[i] == 0) {
      fprintf(stderr, "rank %d: %s point %d: %g GB/s at %llu B\n", rank, name, i, c->gbps[i],
              (unsigned long long)c->footprint_bytes[i]);
      return 0;
    }
  return 1;
}

static int body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  const want *w = arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  size_t bytes = (size_t)STRATA_HOST_CALIBRATE_BYTES * (size_t)w->windows;
  unsigned char *buf[3];
  for (int k = 0; k < 3; k++) {
    buf[k] = malloc(bytes);
    if (!buf[k]) return 1;
    memset(buf[k], SENTINEL, bytes);
  }
  strata_host_links links;
  int bad = 0;
  int rc = strata_host_calibrate_on(comm, STRATA_F32, STRATA_SUM, buf[0], buf[1],
                                    rank == w->null_rank ? NULL : buf[2],
                                    rank == w->short_rank   ? bytes / 2
                                    : rank == w->one_window ? (size_t)STRATA_HOST_CALIBRATE_BYTES
                                                            : bytes,
                                    &links);
  if (w->null_rank >= 0 || w->short_rank >= 0) {
    int want_rc = w->null_rank >= 0 ? STRATA_ERR_NO_MEMORY : STRATA_ERR_INVALID_ARG;
    if (rc != want_rc) {
      fprintf(stderr, "rank %d: rank %d had %s, calibration returned %s\n", rank,
              w->null_rank >= 0 ? w->null_rank : w->short_rank,
              w->null_rank >= 0 ? "no buffer" : "a short one", strata_strerror(rc));
      bad++;
    }
  } else if (rc != STRATA_OK) {
    fprintf(stderr, "rank %d: calibration: %s\n", rank, strata_strerror(rc));
    bad++;
  } else {
    if (links.nranks != n || links.use_tcp != w->tcp) {
      fprintf(stderr, "rank %d: nranks %d use_tcp %d, want %d and %d\n", rank, links.nranks,
              links.use_tcp, n, w->tcp);
      bad++;
    }
    bad += !curve_ok(&links.link, "link", rank) + !curve_ok(&links.memcpy, "memcpy", rank) +
           !curve_ok(&links.reduce, "reduce", rank) + !curve_ok(&links.link_alone, "lone", rank);
    if (!w->tcp)
      bad += !curve_ok(&links.fused, "fused", rank) + !curve_ok(&links.link_warm, "warm", rank) +
             !curve_ok(&links.link_dirty, "dirty", rank);
    /* the span point reaches over the buffers every rank offered; the point before it, over
     * the first window only */
    const int last = STRATA_HOST_CURVE_POINTS - 1;
    uint32_t want_scale = w->one_window >= 0 ? 1 : (uint32_t)w->windows;
    if (links.span_scale != want_scale ||
        links.link.footprint_bytes[last] != want_scale * links.link.footprint_bytes[last - 1] ||
        links.link.footprint_bytes[last - 1] != 2 * STRATA_HOST_CALIBRATE_BYTES) {
      fprintf(stderr, "rank %d: span scale %u (want %u), link working sets %llu then %llu B\n",
              rank, links.span_scale, want_scale,
              (unsigned long long)links.link.footprint_bytes[last - 1],
              (unsigned long long)links.link.footprint_bytes[last]);
      bad++;
    }
    double us = 0;
    rc = strata_host_predict(&links, STRATA_COLL_ALLGATHER, STRATA_ALGO_AUTO, 1u << 20, 4, 0, &us);
    if (rc != STRATA_OK || !(us > 0)) {
      fprintf(stderr, "rank %d: prediction: %s, %g us\n", rank, strata_strerror(rc), us);
      bad++;
    }
    /* a and b carry every point's shift (the last point: every window of the buffer) */
    for (int k = 0; k < 2; k++) {
      size_t left = sentinel_left(buf[k], bytes);
      if (left > bytes / 4096 / 2) {
        fprintf(stderr, "rank %d: buffer %d: %zu of %zu pages untouched by calibration\n", rank, k,
                left, bytes / 4096);
        bad++;
      }
    }
  }
  /* the communicator still works, with the same buffers */
  int one = 1, sum = 0;
  rc = strata_allreduce(comm, &one, &sum, 1, STRATA_I32, STRATA_SUM);
  if (rc != STRATA_OK || sum != n) {
    fprintf(stderr, "rank %d: allreduce after calibration: %s, %d\n", rank, strata_strerror(rc),
            sum);
    bad++;
  }
  for (int k = 0; k < 3; k++) free(buf[k]);
  return bad != 0;
}

int main(void) {
  int failed = 0;
  const struct {
    const char *name;
    int shm;
    want w;
  } cases[] = {
      {"shm, 2 ranks, own buffers of two windows", 1, {0, -1, -1, 2, -1}},
      {"shm, 2 ranks, two windows but rank 1 offers one", 1, {0, -1, -1, 2, 1}},
      {"tcp, 2 ranks, own buffers", 0, {1, -1, -1, 1, -1}},
      {"shm, 2 ranks, rank 1 without a buffer", 1, {0, 1, -1, 1, -1}},
      {"shm, 2 ranks, rank 0 with buffers below the largest point", 1, {0, -1, 0, 1, -1}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    strata_test_ranks_opts o = {.shm = cases[i].shm, .timeout_s = 30, .deadline_s = 120};
    int bad = strata_test_run_ranks(2, &o, body, (void *)&cases[i].w);
    printf("%s: %s\n", cases[i].name, bad ? "FAILED" : "ok");
    failed += bad != 0;
  }
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
