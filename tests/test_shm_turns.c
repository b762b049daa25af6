// SPDX-License-Identifier: Apache-2.0
/*
 * test_shm_turns.c — one progress() call completes at most one large receive per peer.
 *
 * Why it matters. The engine learns of a completion only when progress() returns, and only then
 * posts what depended on it. In a 2-rank ring allreduce the send the peer waits for next depends
 * on the receive that just finished; when progress() went on to pull the following 1 MiB
 * message first, the peer idled for that long every round (out of place, 1 MiB chunks: 16 MiB
 * took 2x as long as in place, where a dependency happened to stop the loop).
 *
 * The scenario: rank 1 posts three large sends to rank 0 and tells it through the store; rank 0
 * posts three receives and then calls progress() once per expected completion, checking that
 * each call completes exactly one and that the bytes are right. Run with cross-memory attach
 * (skipped if the kernel forbids it) and inline (STRATA_SHM_CMA=0), 1 MiB and 64 KiB messages.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot/store.h"
#include "core/core.h"
#include "helpers/net_fixture.h"
#include "net/shm.h"
#include "helpers/check.h"

#define NMSG 3

typedef struct turns_case {
  int cma;
  size_t bytes;
} turns_case;

static int turns_sender(strata_transport *t, strata_store *store, const turns_case *c) {
  uint8_t *bufs[NMSG];
  strata_xfer xs[NMSG];
  int done = 0;
  memset(xs, 0, sizeof xs);
  for (int m = 0; m < NMSG; m++) {
    bufs[m] = malloc(c->bytes);
    if (!bufs[m]) return 1;
    strata_net_fixture_fill(bufs[m], c->bytes, 1, m);
    xs[m].peer = 0;
    xs[m].tag = 7;
    xs[m].bytes = c->bytes;
    xs[m].buf = bufs[m];
    xs[m].done = strata_net_fixture_count_done;
    xs[m].user = &done;
    if (t->ops->post_send(t, &xs[m]) != STRATA_OK) return 1;
  }
  /* CMA records and inline payloads that fit the ring are written at post time */
  if (strata_store_set(store, "turns/posted", "1", 1) != STRATA_OK) return 1;
  int rc = strata_net_fixture_drive(t, &done, NMSG, 10.0, NULL);
  for (int m = 0; m < NMSG; m++) free(bufs[m]);
  if (rc != STRATA_OK) fprintf(stderr, "sender: %s\n", strata_strerror(rc));
  return rc != STRATA_OK;
}

static int turns_receiver(strata_transport *t, strata_store *store, const turns_case *c) {
  uint8_t *bufs[NMSG];
  strata_xfer xs[NMSG];
  int done = 0, bad = 0;
  memset(xs, 0, sizeof xs);
  for (int m = 0; m < NMSG; m++) {
    bufs[m] = calloc(1, c->bytes);
    if (!bufs[m]) return 1;
    xs[m].peer = 1;
    xs[m].tag = 7;
    xs[m].bytes = c->bytes;
    xs[m].buf = bufs[m];
    xs[m].done = strata_net_fixture_count_done;
    xs[m].user = &done;
    if (t->ops->post_recv(t, &xs[m]) != STRATA_OK) return 1;
  }
  const char *keys[1] = {"turns/posted"};
  if (strata_store_wait(store, keys, 1, 10.0) != STRATA_OK) return 1;
  for (int m = 0; m < NMSG && !bad; m++) {
    double deadline = strata_now_s() + 10.0;
    int before = done;
    /* one call may find nothing yet (inline data still streaming): call until one completes */
    while (done == before && strata_now_s() < deadline) {
      if (t->ops->progress(t, NULL) != STRATA_OK) return 1;
      if (done == before) t->ops->wait(t, 1);
    }
    CHECK(done == before + 1, "%zu-byte messages, %s: one progress() call completed %d receives",
          c->bytes, c->cma ? "CMA" : "inline", done - before);
    bad |= done != before + 1;
  }
  for (int m = 0; m < NMSG && !bad; m++) {
    size_t at = strata_net_fixture_check(bufs[m], c->bytes, 1, m);
    CHECK(at == (size_t)-1, "message %d wrong at byte %zu", m, at);
    bad |= at != (size_t)-1;
  }
  for (int m = 0; m < NMSG; m++) free(bufs[m]);
  return bad;
}

static int turns_rank(const strata_net_fixture_rank *r) {
  const turns_case *c = r->arg;
  strata_config cfg;
  strata_net_fixture_config(r, 2, &cfg);
  cfg.shm_enabled = 1;
  cfg.shm_cma = c->cma;
  strata_store *store = NULL;
  if (strata_net_fixture_store(r, &store) != STRATA_OK) return 1;
  int is_local[2] = {1, 1};
  strata_transport *t = NULL;
  char err[256];
  int rc = strata_shm_open(&cfg, r->rank, 2, store, is_local, &t, err, sizeof err);
  if (rc != STRATA_OK) {
    fprintf(stderr, "rank %d: shm open: %s\n", r->rank, err);
    strata_store_close(store);
    return 1;
  }
  int failed;
  if (c->cma && !strata_shm_uses_cma(t, 1 - r->rank)) {
    printf("skip: process_vm_readv not permitted here\n");
    failed = 0;
  } else {
    failed = r->rank == 0 ? turns_receiver(t, store, c) : turns_sender(t, store, c);
  }
  t->ops->destroy(t);
  strata_store_close(store);
  return failed;
}

int main(void) {
  const turns_case cases[] = {{1, 1u << 20}, {1, 64u << 10}, {0, 1u << 20}, {0, 64u << 10}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int bad = strata_net_fixture_run(2, turns_rank, (void *)&cases[i], 30.0, NULL);
    printf("%s %zu-byte messages, %s\n", bad ? "FAIL" : "ok  ", cases[i].bytes,
           cases[i].cma ? "CMA" : "inline");
    failures += bad != 0;
  }
  printf("test_shm_turns: %s\n", failures ? "FAILED" : "PASS");
  return failures != 0;
}
