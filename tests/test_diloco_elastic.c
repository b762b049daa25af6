// SPDX-License-Identifier: Apache-2.0
/*
 * test_diloco_elastic.c — DiLoCo goes on when a worker dies and when one joins.
 *
 * Three workers train (a toy inner step: each subtracts its own small delta), H = 4. Worker 2
 * dies in the middle of an outer exchange; the survivors' strata_diloco_step fails, they shrink,
 * move the state to the new communicator (strata_diloco_set_comm), repeat the step and go on. A
 * fourth process started with STRATA_JOIN waits; at an outer-step boundary the survivors grow, and
 * strata_diloco_sync gives the joiner the members' theta_global, momentum and step counts (it
 * pulls; they do not). All go on together, and after every later outer step every worker holds
 * the same parameters, bit for bit, and the same step counts.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers/ranks.h"

enum { H = 4, ELEMS = 4096, MEMBERS = 3, JOINER = 3 };

static void inner_step(float *w, int id) {
  for (int i = 0; i < ELEMS; i++) w[i] -= 0.001f * (float)(id + 1) * (float)((i % 7) + 1);
}

static void tweak(strata_config *cfg, int rank, void *arg) {
  (void)arg;
  if (rank == JOINER) {
    cfg->join = 1;
    cfg->rank = cfg->world_size = -1;
  } else {
    cfg->world_size = MEMBERS;
  }
}

#define FAIL(...)                              \
  do {                                         \
    fprintf(stderr, "worker %d: ", id);        \
    fprintf(stderr, __VA_ARGS__);              \
    fprintf(stderr, " (line %d)\n", __LINE__); \
    return 1;                                  \
  } while (0)

/* Every worker's parameters and step counts, compared through an allgather of a digest. */
static int all_equal(strata_comm *comm, const float *w, strata_diloco *d) {
  uint64_t h = 1469598103934665603ull;
  const uint8_t *b = (const uint8_t *)w;
  for (size_t i = 0; i < ELEMS * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
  uint64_t mine[3] = {h, strata_diloco_inner_steps(d), strata_diloco_outer_steps(d)};
  uint64_t all[3 * 8];
  if (strata_allgather(comm, mine, all, 3, STRATA_U64) != STRATA_OK) return 0;
  for (int r = 0; r < strata_comm_size(comm); r++)
    if (memcmp(&all[3 * r], mine, sizeof mine)) return 0;
  return 1;
}

static int body(strata_comm *comm, int id, int n, int init_status, void *arg) {
  (void)n, (void)arg;
  if (!comm) FAIL("init: %s", strata_strerror(init_status));
  float *w = malloc(ELEMS * sizeof *w);
  for (int i = 0; i < ELEMS; i++) w[i] = 1.0f + (float)(i % 5);
  strata_diloco_param param = {w, ELEMS, STRATA_F32};
  strata_diloco_options opt;
  strata_diloco_options_init(&opt);
  opt.sync_every = H;
  strata_diloco *d = NULL;
  strata_comm *work = comm;

  if (id == JOINER) {
    /* init returned: the members grew; take their state */
    if (strata_diloco_create(NULL, &param, 1, &opt, &d) != STRATA_OK) FAIL("create alone");
    if (strata_diloco_step(d, NULL) != STRATA_ERR_INVALID_ARG) FAIL("a detached state stepped");
    int pulled = 0;
    int status = strata_diloco_sync(d, work, &pulled);
    if (status != STRATA_OK || !pulled)
      FAIL("sync: %s, pulled %d", strata_err_name(status), pulled);
  } else {
    if (strata_diloco_create(comm, &param, 1, &opt, &d) != STRATA_OK) FAIL("create");
    int survivor = 1;
    for (int s = 1; s <= 3 * H && survivor; s++) {
      inner_step(w, id);
      if (id == 2 && s == 2 * H) kill(getpid(), SIGKILL); /* before its exchange */
      int status = strata_diloco_step(d, NULL);
      if (status == STRATA_OK) continue;
      /* a worker died: the survivors agree on a new group and repeat the step there */
      strata_comm *next = NULL;
      status = strata_comm_shrink(work, &next);
      if (status != STRATA_OK) FAIL("shrink: %s", strata_err_name(status));
      if (strata_comm_size(next) != MEMBERS - 1) FAIL("shrink: %d ranks", strata_comm_size(next));
      if (strata_diloco_set_comm(d, next) != STRATA_OK) FAIL("set_comm");
      if (work != comm) strata_comm_destroy(work);
      work = next;
      status = strata_diloco_step(d, NULL);
      if (status != STRATA_OK) FAIL("repeated step: %s", strata_err_name(status));
    }
    if (strata_comm_size(work) != MEMBERS - 1) FAIL("no worker died");
    if (!all_equal(work, w, d)) FAIL("survivors differ after 3 outer steps");
    /* at the outer-step boundary: admit the joiner */
    strata_comm *next = NULL;
    int grown = strata_test_grow_to(work, MEMBERS, 10, &next);
    if (grown != STRATA_OK) FAIL("grow: %s", strata_err_name(grown));
    if (work != comm) strata_comm_destroy(work);
    work = next;
    int pulled = 1;
    int status = strata_diloco_sync(d, work, &pulled);
    if (status != STRATA_OK || pulled) FAIL("sync: %s, pulled %d", strata_err_name(status), pulled);
  }
  if (!all_equal(work, w, d)) FAIL("workers differ right after the joiner's sync");
  for (int outer = 0; outer < 2; outer++) {
    for (int s = 0; s < H; s++) {
      inner_step(w, id);
      int status = strata_diloco_step(d, NULL);
      if (status != STRATA_OK) FAIL("step with the joiner: %s", strata_err_name(status));
    }
    if (!all_equal(work, w, d)) FAIL("workers differ after outer step %d with the joiner", outer);
  }
  strata_diloco_destroy(d);
  if (work != comm) strata_comm_destroy(work);
  free(w);
  return 0;
}

int main(void) {
  int failures = 0;
  for (int shm = 1; shm >= 0; shm--) {
    strata_test_ranks_opts o = {.shm = shm, .timeout_s = 3, .deadline_s = 90, .tweak = tweak};
    int bad = strata_test_run_ranks(MEMBERS + 1, &o, body, NULL);
    /* the killed worker counts as one */
    printf("%s DiLoCo through a death and a join (%s): %d failed besides the killed worker\n",
           bad == 1 ? "ok" : "FAIL", shm ? "shm" : "tcp", bad - 1);
    failures += bad != 1;
  }
  printf("%d failed\n", failures);
  return failures != 0;
}
