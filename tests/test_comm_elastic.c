// SPDX-License-Identifier: Apache-2.0
/*
 * test_comm_elastic.c — a job that goes on: revoke, shrink, agree, grow.
 *  - a rank killed in the middle of an allreduce: the survivors shrink, numbered in their old
 *    order, and the retried allreduce gives exactly the survivors' sum (inputs untouched); in
 *    place too, with STRATA_ELASTIC (the failed call leaves the input as it was);
 *  - a frozen rank (SIGSTOP) is left out once silent for STRATA_TIMEOUT;
 *  - revoke from another thread ends a call blocked on a late (live) peer, on every rank;
 *  - agree: the AND of the flags, on a healthy communicator and after a death, with the failed
 *    set; a rank that shrinks while another agrees after a failure: they meet in the shrink;
 *  - grow: a process started later joins, members keep their ranks; the last survivor of a
 *    job, alone in its communicator, still admits one;
 *  - lineages that part never meet: the members drop the grown communicator and shrink the old
 *    one (a grow that came up on some members only), the joiner goes on with the grown one, and
 *    the two groups of one epoch number each agree and shrink on their own.
 * Over shared memory and over TCP. Ranks are processes (tests/helpers/ranks.c); the store is
 * served apart from them, as elastic jobs need. The harness destroys the communicator it made.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "boot/store.h"
#include "helpers/ranks.h"

static const double TIMEOUT_S = 2.5; /* short for the test, long enough for a loaded machine */
enum { COUNT = 1 << 16 };            /* 256 KiB of f32: several messages per allreduce */

/* Rank `id`'s input: distinct per rank and element, small integers (exact sums). */
static float input(int id, int i) {
  return (float)((id + 1) * 1000 + i % 997);
}

/* Allreduce of ids' inputs (in place when in_place: the communicator must be STRATA_ELASTIC);
 * checks the sum over `ids` (the members' original ids) and, on failure, that the input is as it
 * was. Returns the status, -1000 for a wrong sum, -2000 for a changed input. */
static int allreduce_io(strata_comm *comm, int my_id, const int *ids, int n, int in_place) {
  float *in = malloc(COUNT * sizeof *in), *out = in_place ? in : malloc(COUNT * sizeof *out);
  for (int i = 0; i < COUNT; i++) in[i] = input(my_id, i);
  int status = strata_allreduce(comm, in, out, COUNT, STRATA_F32, STRATA_SUM);
  for (int i = 0; status == STRATA_OK && i < COUNT; i++) {
    float want = 0;
    for (int k = 0; k < n; k++) want += input(ids[k], i);
    if (out[i] != want) status = -1000;
  }
  for (int i = 0; (!in_place || status != STRATA_OK) && status > -1000 && i < COUNT; i++)
    if (in[i] != input(my_id, i)) status = -2000; /* the input must stay as it was */
  if (!in_place) free(out);
  free(in);
  return status;
}

static int allreduce_checked(strata_comm *comm, int my_id, const int *ids, int n) {
  return allreduce_io(comm, my_id, ids, n, 0);
}

static const char *name(int status) {
  return status == -1000   ? "wrong sum"
         : status == -2000 ? "input changed"
                           : strata_err_name(status);
}

/* ---- a rank dies mid-allreduce; the survivors shrink and retry ---- */
static int kill_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  int in_place = arg && *(int *)arg;
  if (!comm) return fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status)), 1;
  int victim = n / 2, all[8], survivors[8], k = 0;
  for (int r = 0; r < n; r++) all[r] = r;
  for (int r = 0; r < n; r++)
    if (r != victim) survivors[k++] = r;
  int status = STRATA_OK;
  for (int iter = 0; iter < 50 && status == STRATA_OK; iter++) {
    if (rank == victim && iter == 3) {
      float *buf = malloc(COUNT * sizeof *buf);
      for (int i = 0; i < COUNT; i++) buf[i] = input(rank, i);
      strata_request *req;
      strata_iallreduce(comm, buf, buf, COUNT, STRATA_F32, STRATA_SUM, &req);
      usleep(500);
      kill(getpid(), SIGKILL);
    }
    status = allreduce_io(comm, rank, all, n, in_place);
    /* agree after each step (docs/elastic.md): a survivor that finished the step the victim
     * died in learns that others did not, and retries that step with them after the shrink
     * rather than running one step ahead (which the lineage index reports as a mismatch) */
    int ok = status == STRATA_OK;
    if (status > -1000 && strata_comm_agree(comm, &ok) == STRATA_OK && !ok && status == STRATA_OK)
      status = STRATA_ERR_PEER_LOST;
  }
  if (status == STRATA_OK || status < -999) {
    fprintf(stderr, "rank %d: allreduce never failed (%s)\n", rank, name(status));
    return 1;
  }
  double t0 = strata_test_now_s();
  strata_comm *next = NULL;
  status = strata_comm_shrink(comm, &next);
  double took = strata_test_now_s() - t0;
  if (status != STRATA_OK) {
    fprintf(stderr, "rank %d: shrink: %s\n", rank, strata_err_name(status));
    return 1;
  }
  int failed[8], nfailed = strata_comm_failed_ranks(comm, failed, 8);
  int want_rank = rank < victim ? rank : rank - 1;
  int bad = strata_comm_size(next) != n - 1 || strata_comm_rank(next) != want_rank ||
            strata_comm_epoch(next) != 1 || nfailed != 1 || failed[0] != victim;
  if (bad)
    fprintf(stderr, "rank %d: shrink gave rank %d of %d, epoch %llu, %d failed\n", rank,
            strata_comm_rank(next), strata_comm_size(next),
            (unsigned long long)strata_comm_epoch(next), nfailed);
  for (int iter = 0; iter < 5 && !bad; iter++) {
    status = allreduce_io(next, rank, survivors, n - 1, in_place);
    if (status != STRATA_OK) fprintf(stderr, "rank %d: retry: %s\n", rank, name(status)), bad = 1;
  }
  if (rank == 0) printf("  shrink %d -> %d ranks took %.2f s\n", n, n - 1, took);
  strata_comm_destroy(next);
  return bad;
}

static void elastic_tweak(strata_config *cfg, int rank, void *arg) {
  (void)rank, (void)arg;
  cfg->elastic = 1;
}

/* ---- a frozen rank is left out ---- */
static int frozen_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) return fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status)), 1;
  int64_t pids[8] = {0}, mine = getpid();
  if (strata_allgather(comm, &mine, pids, 1, STRATA_I64) != STRATA_OK) return 1;
  int frozen = n - 1, all[8], survivors[8];
  for (int r = 0; r < n; r++) all[r] = survivors[r] = r;
  if (allreduce_checked(comm, rank, all, n) != STRATA_OK) return 1;
  if (rank == frozen) {
    raise(SIGSTOP);
    return 1; /* never thawed: rank 0 kills it */
  }
  int status = allreduce_checked(comm, rank, all, n);
  if (status != STRATA_ERR_TIMEOUT && status != STRATA_ERR_ABORTED &&
      status != STRATA_ERR_REVOKED) {
    fprintf(stderr, "rank %d: with a frozen peer: %s\n", rank, name(status));
    return 1;
  }
  strata_comm *next = NULL;
  status = strata_comm_shrink(comm, &next);
  if (rank == 0) kill((pid_t)pids[frozen], SIGKILL);
  if (status != STRATA_OK || strata_comm_size(next) != n - 1) {
    fprintf(stderr, "rank %d: shrink: %s\n", rank, strata_err_name(status));
    return 1;
  }
  status = allreduce_checked(next, rank, survivors, n - 1);
  strata_comm_destroy(next);
  if (status != STRATA_OK) fprintf(stderr, "rank %d: after shrink: %s\n", rank, name(status));
  return status != STRATA_OK;
}

/* ---- revoke from another thread ---- */
static void *revoke_later(void *arg) {
  strata_test_sleep_s(0.3);
  strata_comm_revoke(arg);
  strata_comm_revoke(arg); /* idempotent */
  return NULL;
}

static int revoke_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) return fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status)), 1;
  int all[8];
  for (int r = 0; r < n; r++) all[r] = r;
  if (allreduce_checked(comm, rank, all, n) != STRATA_OK) return 1;
  double t0 = strata_test_now_s();
  int status;
  if (rank == n - 1) {
    strata_test_sleep_s(1.5); /* late, alive: the revocation reaches it while idle */
    status = allreduce_checked(comm, rank, all, n);
  } else if (rank == 0) {
    pthread_t thread;
    pthread_create(&thread, NULL, revoke_later, comm);
    status = allreduce_checked(comm, rank, all, n); /* blocked on the late rank */
    pthread_join(thread, NULL);
  } else {
    status = allreduce_checked(comm, rank, all, n);
  }
  double took = strata_test_now_s() - t0;
  if (status != STRATA_ERR_REVOKED || (rank != n - 1 && took > 1.0)) {
    fprintf(stderr, "rank %d: %s after %.2f s (want STRATA_ERR_REVOKED soon after 0.3 s)\n", rank,
            name(status), took);
    return 1;
  }
  if (strata_allreduce(comm, all, all, 1, STRATA_I32, STRATA_SUM) != STRATA_ERR_REVOKED) return 1;
  strata_comm *next = NULL;
  status = strata_comm_shrink(comm, &next);
  if (status != STRATA_OK || strata_comm_size(next) != n || strata_comm_rank(next) != rank) {
    fprintf(stderr, "rank %d: shrink after revoke: %s\n", rank, strata_err_name(status));
    return 1;
  }
  status = allreduce_checked(next, rank, all, n);
  strata_comm_destroy(next);
  return status != STRATA_OK;
}

/* ---- agree ---- */
static int agree_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) return fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status)), 1;
  int flag = 1, failed[8];
  if (strata_comm_agree(comm, &flag) != STRATA_OK || flag != 1) return 1;
  if (strata_comm_failed_ranks(comm, failed, 8) != 0) return 1;
  flag = rank != 1; /* one rank says no */
  if (strata_comm_agree(comm, &flag) != STRATA_OK || flag != 0) return 1;
  /* the communicator still works between agreements */
  int all[8];
  for (int r = 0; r < n; r++) all[r] = r;
  if (allreduce_checked(comm, rank, all, n) != STRATA_OK) return 1;
  /* every rank has finished the allreduce before the victim dies (else the others' could fail) */
  flag = 1;
  if (strata_comm_agree(comm, &flag) != STRATA_OK || flag != 1) return 1;
  int victim = n - 1;
  if (rank == victim) kill(getpid(), SIGKILL);
  flag = 1;
  int status = strata_comm_agree(comm, &flag);
  int nfailed = strata_comm_failed_ranks(comm, failed, 8);
  if (status != STRATA_OK || flag != 1 || nfailed != 1 || failed[0] != victim) {
    fprintf(stderr, "rank %d: agree after a death: %s, flag %d, %d failed\n", rank,
            strata_err_name(status), flag, nfailed);
    return 1;
  }
  return 0;
}

/* ---- after a death, one rank shrinks while another agrees: they meet ---- */
static int mixed_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) return fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status)), 1;
  int all[8], flag = 1;
  for (int r = 0; r < n; r++) all[r] = r;
  if (allreduce_checked(comm, rank, all, n) != STRATA_OK) return 1;
  if (strata_comm_agree(comm, &flag) != STRATA_OK || !flag) return 1;
  if (rank == n - 1) kill(getpid(), SIGKILL);
  if (rank == 1) { /* this one checks with the others first */
    flag = 1;
    int status = strata_comm_agree(comm, &flag);
    if (status != STRATA_OK || flag != 0) {
      fprintf(stderr, "rank 1: agree beside a shrink: %s, flag %d\n", name(status), flag);
      return 1;
    }
  }
  strata_comm *next = NULL;
  int status = strata_comm_shrink(comm, &next);
  if (status != STRATA_OK || strata_comm_size(next) != n - 1) {
    fprintf(stderr, "rank %d: shrink: %s\n", rank, name(status));
    return 1;
  }
  status = allreduce_checked(next, rank, all, n - 1);
  strata_comm_destroy(next);
  return status != STRATA_OK;
}

/* ---- grow ---- */
typedef struct grow_case {
  int members;
  int staggered; /* the last joiner starts only once the others are in */
} grow_case;

#define GROW_KEY "grow-test/admitted"

static void grow_tweak(strata_config *cfg, int rank, void *arg) {
  const grow_case *g = arg;
  if (rank >= g->members) {
    cfg->join = 1;
    cfg->rank = -1;
    cfg->world_size = -1;
  } else {
    cfg->world_size = g->members;
  }
  if (g->staggered && rank > g->members) {
    /* wait (before this joiner's init) for rank 0 to say the earlier joiners were admitted */
    strata_store *store = NULL;
    void *value = NULL;
    size_t len = 0;
    if (strata_store_connect_auth(cfg->store_addr, cfg->secret, cfg->job_id, 10, &store) ==
        STRATA_OK)
      strata_store_get(store, GROW_KEY, &value, &len, 20);
    free(value);
    strata_store_close(store);
  }
}

static int grow_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  const grow_case *g = arg;
  int members = g->members, all[8];
  for (int r = 0; r < n; r++) all[r] = r;
  if (!comm) return fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status)), 1;
  strata_comm *work = comm, *early = NULL;
  if (rank < members && allreduce_checked(comm, rank, all, members) != STRATA_OK) return 1;
  int status = STRATA_OK;
  if (g->staggered && strata_comm_size(comm) < n - 1) {
    /* the earlier joiners first; rank 0 then lets the last one start */
    status = strata_test_grow_to(comm, n - 1, 20, &early);
    if (status != STRATA_OK) return fprintf(stderr, "rank %d: grow: %s\n", rank, name(status)), 1;
    if (early) work = early;
    if (rank == 0) {
      strata_store *store = NULL;
      const strata_config *cfg = strata_comm_config(comm);
      status = strata_store_connect_auth(cfg->store_addr, cfg->secret, cfg->job_id, 10, &store);
      if (status == STRATA_OK) status = strata_store_set(store, GROW_KEY, "1", 1);
      strata_store_close(store);
      if (status != STRATA_OK) return fprintf(stderr, "store: %s\n", name(status)), 1;
    }
  }
  /* grow until every joiner is in: they start at their own pace, so a joiner's init may return
   * from a grow that admitted only some of them, and it is then a member of the next grows */
  strata_comm *grown = NULL;
  status = strata_test_grow_to(work, n, 20, &grown);
  if (status != STRATA_OK) return fprintf(stderr, "rank %d: grow: %s\n", rank, name(status)), 1;
  if (grown) work = grown;
  if (rank < members && strata_comm_rank(work) != rank) return 1;
  if (strata_comm_size(work) != n) {
    fprintf(stderr, "rank %d: size %d after grow, want %d\n", rank, strata_comm_size(work), n);
    return 1;
  }
  status = allreduce_checked(work, strata_comm_rank(work), all, n);
  if (status != STRATA_OK) fprintf(stderr, "rank %d: after grow: %s\n", rank, name(status));
  if (grown) strata_comm_destroy(grown);
  if (early) strata_comm_destroy(early);
  return status != STRATA_OK;
}

/* ---- the last survivor admits a joiner ---- */
static void lone_tweak(strata_config *cfg, int rank, void *arg) {
  (void)arg;
  if (rank == 2) {
    cfg->join = 1;
    cfg->rank = cfg->world_size = -1;
  } else {
    cfg->world_size = 2;
  }
}

static int lone_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)n, (void)arg;
  if (!comm) return fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status)), 1;
  int ids[2] = {0, 2}; /* the survivor (id 0) and the joiner (id 2) */
  if (rank == 2) {     /* the joiner: its init returned at the survivor's grow */
    int status = allreduce_checked(comm, 2, ids, 2);
    if (status != STRATA_OK) fprintf(stderr, "joiner: %s\n", name(status));
    return status != STRATA_OK;
  }
  int pair[2] = {0, 1}, flag = 1;
  if (allreduce_checked(comm, rank, pair, 2) != STRATA_OK) return 1;
  if (strata_comm_agree(comm, &flag) != STRATA_OK || !flag) return 1;
  if (rank == 1) kill(getpid(), SIGKILL);
  if (allreduce_checked(comm, rank, pair, 2) == STRATA_OK) return 1;
  strata_comm *alone = NULL, *grown = NULL;
  if (strata_comm_shrink(comm, &alone) != STRATA_OK || strata_comm_size(alone) != 1) return 1;
  int status = strata_test_grow_to(alone, 2, 10, &grown);
  if (status == STRATA_OK) status = allreduce_checked(grown, 0, ids, 2);
  if (status != STRATA_OK) fprintf(stderr, "the last survivor with the joiner: %s\n", name(status));
  strata_comm_destroy(grown);
  strata_comm_destroy(alone);
  return status != STRATA_OK;
}

/* ---- two groups of one epoch ----
 * Members 0 and 1 grow with joiner 2 (epoch 1), then leave the grown communicator and shrink the
 * old one (epoch 1 again, without the joiner) and agree there; only then does the joiner find
 * itself alone in the grown one and shrink it. The two groups have the same epoch number and
 * each runs agreement 0: their job ids, and so their store keys, must differ, or the joiner
 * reads the members' decision (a group of 2 where it expects 3: STRATA_ERR_PROTOCOL). */
#define PARTED_KEY "parted-test/members-agreed"

static int parted_signal(const strata_comm *comm, int set) {
  const strata_config *cfg = strata_comm_config(comm);
  strata_store *store = NULL;
  int status = strata_store_connect_auth(cfg->store_addr, cfg->secret, cfg->job_id, 10, &store);
  void *value = NULL;
  size_t len = 0;
  if (status == STRATA_OK)
    status = set ? strata_store_set(store, PARTED_KEY, "1", 1)
                 : strata_store_get(store, PARTED_KEY, &value, &len, 20);
  free(value);
  strata_store_close(store);
  return status;
}

static int parted_body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) return fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status)), 1;
  int all[3] = {0, 1, 2}, pair[2] = {0, 1};
  strata_comm *grown = comm;
  int status = STRATA_OK;
  if (rank < 2) status = strata_test_grow_to(comm, n, 20, &grown);
  if (status == STRATA_OK) status = allreduce_checked(grown, rank, all, n);
  if (status != STRATA_OK) return fprintf(stderr, "rank %d: grown: %s\n", rank, name(status)), 1;
  if (rank == 2) { /* the joiner: alone in the grown communicator once the members agreed */
    status = parted_signal(grown, 0);
    if (status == STRATA_OK && allreduce_checked(grown, rank, all, n) == STRATA_OK) status = -1;
    strata_comm *alone = NULL;
    if (status == STRATA_OK) status = strata_comm_shrink(grown, &alone);
    int flag = 1;
    if (status == STRATA_OK && strata_comm_size(alone) != 1) status = -1;
    if (status == STRATA_OK) status = strata_comm_agree(alone, &flag);
    strata_comm_destroy(alone);
    if (status != STRATA_OK) fprintf(stderr, "joiner: %s\n", name(status));
    return status != STRATA_OK;
  }
  strata_comm *shrunk = NULL;
  int flag = 1;
  status = strata_comm_shrink(comm, &shrunk); /* the old communicator: epoch 1 again */
  if (status == STRATA_OK && strata_comm_size(shrunk) != 2) status = -1;
  if (status == STRATA_OK) status = strata_comm_agree(shrunk, &flag);
  if (status == STRATA_OK && rank == 0) status = parted_signal(shrunk, 1);
  strata_comm_destroy(grown); /* the joiner's peers in the grown communicator go */
  if (status == STRATA_OK) status = allreduce_checked(shrunk, rank, pair, 2);
  strata_comm_destroy(shrunk);
  if (status != STRATA_OK) fprintf(stderr, "rank %d: members: %s\n", rank, name(status));
  return status != STRATA_OK;
}

int main(void) {
  int failures = 0;
  for (int shm = 1; shm >= 0; shm--) {
    const char *via = shm ? "shm" : "tcp";
    strata_test_ranks_opts o = {.shm = shm, .timeout_s = TIMEOUT_S, .deadline_s = 60};
    /* the killed rank counts as one failed process */
    int bad = strata_test_run_ranks(4, &o, kill_body, NULL);
    printf("%s kill, shrink, retry, 4 ranks (%s): %d failed of the survivors\n",
           bad == 1 ? "ok" : "FAIL", via, bad - 1);
    failures += bad != 1;

    /* in place: STRATA_ELASTIC keeps the input for the retry */
    int in_place = 1;
    strata_test_ranks_opts oe = o;
    oe.tweak = elastic_tweak;
    bad = strata_test_run_ranks(4, &oe, kill_body, &in_place);
    printf("%s in place: kill, shrink, exact retry, 4 ranks (%s): %d failed of the survivors\n",
           bad == 1 ? "ok" : "FAIL", via, bad - 1);
    failures += bad != 1;

    bad = strata_test_run_ranks(3, &o, frozen_body, NULL);
    printf("%s frozen rank left out, 3 ranks (%s)\n", bad == 1 ? "ok" : "FAIL", via);
    failures += bad != 1;

    bad = strata_test_run_ranks(3, &o, revoke_body, NULL);
    printf("%s revoke from another thread, 3 ranks (%s): %d failed\n", bad ? "FAIL" : "ok", via,
           bad);
    failures += bad != 0;

    bad = strata_test_run_ranks(3, &o, agree_body, NULL);
    printf("%s agree, 3 ranks (%s)\n", bad == 1 ? "ok" : "FAIL", via);
    failures += bad != 1;

    bad = strata_test_run_ranks(3, &o, mixed_body, NULL);
    printf("%s one rank shrinks while another agrees, 3 ranks (%s)\n", bad == 1 ? "ok" : "FAIL",
           via);
    failures += bad != 1;

    strata_test_ranks_opts ol = o;
    ol.tweak = lone_tweak;
    bad = strata_test_run_ranks(3, &ol, lone_body, NULL);
    printf("%s the last survivor admits a joiner (%s)\n", bad == 1 ? "ok" : "FAIL", via);
    failures += bad != 1;

    bad = strata_test_run_ranks(3, &ol, parted_body, NULL);
    printf("%s two groups of one epoch keep apart (%s): %d failed\n", bad ? "FAIL" : "ok", via,
           bad);
    failures += bad != 0;

    strata_test_ranks_opts og = o;
    og.tweak = grow_tweak;
    for (int staggered = 0; staggered <= 1; staggered++) {
      grow_case g = {.members = 2, .staggered = staggered};
      bad = strata_test_run_ranks(4, &og, grow_body, &g);
      printf("%s grow 2 -> 4 ranks%s (%s): %d failed\n", bad ? "FAIL" : "ok",
             staggered ? ", the last joiner after the first" : "", via, bad);
      failures += bad != 0;
    }
  }
  printf("%d failed\n", failures);
  return failures != 0;
}
