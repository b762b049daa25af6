// SPDX-License-Identifier: Apache-2.0
/*
 * test_shared_state.c — strata_shared_sync: every member ends with the newest revision's bytes,
 * the majority's among the ranks at that revision, pulled only by the ranks that differ:
 *  - all equal: nothing but digests moves;
 *  - a rank behind (older revision) pulls; a corrupted rank at the newest revision is outvoted;
 *  - joiners at revision 0 outnumbering the members still take the members' state, spread over
 *    the holders;
 *  - names or sizes that differ: STRATA_ERR_MISMATCH on every rank;
 *  - a process that joins with strata_comm_grow receives the state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers/ranks.h"

enum { A_COUNT = 100000, B_COUNT = 3 };

typedef struct model {
  float a[A_COUNT];
  double b[B_COUNT];
  strata_shared_entry entries[2];
  strata_shared_state state;
} model;

static void model_init(model *m, uint64_t revision, float seed) {
  for (int i = 0; i < A_COUNT; i++) m->a[i] = seed + (float)i;
  for (int i = 0; i < B_COUNT; i++) m->b[i] = seed * 2 + i;
  m->entries[0] = (strata_shared_entry){"weights", m->a, sizeof m->a};
  m->entries[1] = (strata_shared_entry){"moments", m->b, sizeof m->b};
  m->state = (strata_shared_state){revision, 2, m->entries};
}

static int holds(const model *m, uint64_t revision, float seed) {
  if (m->state.revision != revision) return 0;
  for (int i = 0; i < A_COUNT; i++)
    if (m->a[i] != seed + (float)i) return 0;
  for (int i = 0; i < B_COUNT; i++)
    if (m->b[i] != seed * 2 + i) return 0;
  return 1;
}

#define CHECK(cond, ...)                         \
  do {                                           \
    if (!(cond)) {                               \
      fprintf(stderr, "rank %d: ", rank);        \
      fprintf(stderr, __VA_ARGS__);              \
      fprintf(stderr, " (line %d)\n", __LINE__); \
      free(m);                                   \
      return 1;                                  \
    }                                            \
  } while (0)

static int sync_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) return fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status)), 1;
  model *m = malloc(sizeof *m);
  strata_shared_sync_info info;

  /* all equal */
  model_init(m, 7, 1.0f);
  int status = strata_shared_sync(comm, &m->state, &info);
  CHECK(status == STRATA_OK && holds(m, 7, 1.0f), "all equal: %s", strata_err_name(status));
  CHECK(!info.pulled && info.bytes_received == 0 && info.bytes_sent == 0 &&
            info.ranks_in_majority == n,
        "all equal moved bytes");

  /* the last rank is one revision behind */
  model_init(m, rank == n - 1 ? 7 : 8, rank == n - 1 ? 1.0f : 2.0f);
  status = strata_shared_sync(comm, &m->state, &info);
  CHECK(status == STRATA_OK && holds(m, 8, 2.0f), "behind: %s", strata_err_name(status));
  CHECK(info.pulled == (rank == n - 1), "behind: pulled %d", info.pulled);
  if (rank == n - 1)
    CHECK(info.bytes_received == sizeof m->a + sizeof m->b && info.source != rank,
          "behind: received %llu from %d", (unsigned long long)info.bytes_received, info.source);

  /* rank 1 corrupted at the newest revision: outvoted */
  model_init(m, 9, 3.0f);
  if (rank == 1) m->a[12345] = -1.0f;
  status = strata_shared_sync(comm, &m->state, &info);
  CHECK(status == STRATA_OK && holds(m, 9, 3.0f), "corrupted: %s", strata_err_name(status));
  CHECK(info.pulled == (rank == 1) && info.ranks_in_majority == n - 1, "corrupted: plan");

  /* joiners at revision 0 outnumber the holders of revision 4: the newest wins, and the pullers
   * spread over the holders */
  int joiner = rank >= 2;
  model_init(m, joiner ? 0 : 4, joiner ? 0.0f : 5.0f);
  status = strata_shared_sync(comm, &m->state, &info);
  CHECK(status == STRATA_OK && holds(m, 4, 5.0f), "joiners: %s", strata_err_name(status));
  if (joiner && n >= 4)
    CHECK(info.source == rank - 2, "joiner %d pulled from %d", rank, info.source);

  /* sizes differ */
  model_init(m, 1, 1.0f);
  if (rank == 0) m->entries[1].bytes -= sizeof(double);
  status = strata_shared_sync(comm, &m->state, &info);
  CHECK(status == STRATA_ERR_MISMATCH, "sizes differ: %s", strata_err_name(status));

  /* bad arguments are refused before anything is sent */
  model_init(m, 1, 1.0f);
  m->entries[1].name = "weights";
  CHECK(strata_shared_sync(comm, &m->state, &info) == STRATA_ERR_INVALID_ARG, "duplicate name");
  free(m);
  return 0;
}

/* ---- a joiner receives the state ---- */
static void grow_tweak(strata_config *cfg, int rank, void *arg) {
  (void)arg;
  if (rank == 2) {
    cfg->join = 1;
    cfg->rank = cfg->world_size = -1;
  } else {
    cfg->world_size = 2;
  }
}

static int grow_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg, (void)n;
  if (!comm) return fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status)), 1;
  model *m = malloc(sizeof *m);
  strata_comm *work = comm;
  if (rank < 2) {
    model_init(m, 11, 6.0f);
    strata_comm *next = NULL;
    int status = strata_test_grow_to(comm, 3, 10, &next);
    CHECK(status == STRATA_OK, "grow: %s", strata_err_name(status));
    work = next;
  } else {
    model_init(m, 0, 0.0f);
  }
  strata_shared_sync_info info;
  int status = strata_shared_sync(work, &m->state, &info);
  CHECK(status == STRATA_OK && holds(m, 11, 6.0f), "after grow: %s", strata_err_name(status));
  CHECK(info.pulled == (rank == 2), "after grow: pulled %d", info.pulled);
  if (work != comm) strata_comm_destroy(work);
  free(m);
  return 0;
}

int main(void) {
  int failures = 0;
  for (int shm = 1; shm >= 0; shm--) {
    for (int n = 3; n <= 4; n++) {
      strata_test_ranks_opts o = {.shm = shm, .timeout_s = 5, .deadline_s = 60};
      int bad = strata_test_run_ranks(n, &o, sync_body, NULL);
      printf("%s shared-state sync, %d ranks (%s): %d failed\n", bad ? "FAIL" : "ok", n,
             shm ? "shm" : "tcp", bad);
      failures += bad != 0;
    }
    strata_test_ranks_opts og = {.shm = shm, .timeout_s = 5, .deadline_s = 60, .tweak = grow_tweak};
    int bad = strata_test_run_ranks(3, &og, grow_body, NULL);
    printf("%s a joiner receives the state (%s): %d failed\n", bad ? "FAIL" : "ok",
           shm ? "shm" : "tcp", bad);
    failures += bad != 0;
  }
  printf("%d failed\n", failures);
  return failures != 0;
}
