// SPDX-License-Identifier: Apache-2.0
/*
 * test_comm_shrink_resume.c — an agreement one rank gave up on binds it all the same.
 *
 * One survivor's shrink times out while the other's completes (its store reads are lost: a store
 * far away or a host too loaded to poll in time). Its next call must read the decision it had
 * taken part in and act on it, never decide a new group without the other (two groups of one
 * epoch):
 *  - the decision named both: the retried shrink joins the other in the same epoch, and an
 *    allreduce over the two gives their sum; also when what timed out was the reply to its
 *    contribution (stored all the same): the retry counts that contribution once;
 *  - the decision left this rank out: the retry returns STRATA_ERR_EXCLUDED, and so does every
 *    later shrink or agree on that communicator;
 *  - the same for agree: the retry returns the flag the other rank got;
 *  - a member of the decided group dies before its communicator comes up: shrinking again agrees
 *    anew, without it.
 * Each rank's store is the test's own (strata_store_ops forwarding to the fixture's store), so a
 * rank's reads can be lost and a decision rewritten at an exact point. The late rank starts
 * losing reads only once the other has written its decision (it waits for that key), so the
 * order never depends on timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/store.h"
#include "helpers/net_fixture.h"

enum { COUNT = 4096 };
static const double LATE_OP_TIMEOUT_S = 0.5;   /* the late rank's STRATA_OP_TIMEOUT */
static const double EVENT_TIMEOUT_S = 20;      /* bounds the wait for the other's decision */
static const double MEMBER_DIES_TIMEOUT_S = 2; /* how long a group waits for a dead member */

typedef struct test_store {
  strata_store *store;
  int lose_agreement_reads;    /* every read of an agreement's keys answers "nothing yet" */
  int lose_contribution_reply; /* the next contribution is stored, but its reply is lost */
  char lost_reply_key[512];    /* that contribution's key and value: it must count once */
  int64_t lost_reply_delta;
  int exclude_rank;       /* >= 0: a decision this rank proposes leaves that rank out */
  int die_after_decision; /* the process exits once it has read an agreement's decision */
} test_store;

static int forward_set(void *context, const char *key, const void *value, size_t len) {
  return strata_store_set(((test_store *)context)->store, key, value, len);
}

static int forward_get(void *context, const char *key, void **value, size_t *len,
                       double timeout_s) {
  test_store *t = context;
  int status = strata_store_get(t->store, key, value, len, timeout_s);
  size_t key_len = strlen(key), suffix = strlen("/decision");
  if (t->die_after_decision && status == STRATA_OK && key_len > suffix &&
      !strcmp(key + key_len - suffix, "/decision"))
    _exit(0); /* a member of the decided group dies before its communicator comes up */
  return status;
}

/* "<job>/agreement/<n>/..." -> "<job>/agreement/<n>/decision"; 0 for any other key */
static int decision_key_of(const char *key, char *out, size_t len) {
  const char *at = strstr(key, "/agreement/");
  if (!at) return 0;
  const char *end = strchr(at + strlen("/agreement/"), '/');
  if (!end) return 0;
  snprintf(out, len, "%.*s/decision", (int)(end - key), key);
  return 1;
}

/* An agreement reads with ADDs of 0. A lost read first waits until the other rank has written
 * the decision, so the late rank's shrink is sure to miss a decision that exists. */
static int lossy_add(void *context, const char *key, int64_t delta, int64_t *result) {
  test_store *t = context;
  char decision[512];
  if (t->lose_agreement_reads && delta == 0 && decision_key_of(key, decision, sizeof decision)) {
    void *value = NULL;
    size_t len = 0;
    int status = strata_store_get(t->store, decision, &value, &len, EVENT_TIMEOUT_S);
    free(value);
    *result = 0;
    return status;
  }
  int status = strata_store_add(t->store, key, delta, result);
  if (t->lose_contribution_reply && delta > 0 && strstr(key, "/agreement/") &&
      strstr(key, "/in/")) {
    t->lose_contribution_reply = 0;
    snprintf(t->lost_reply_key, sizeof t->lost_reply_key, "%s", key);
    t->lost_reply_delta = delta;
    return STRATA_ERR_TIMEOUT;
  }
  return status;
}

/* A decision is "<n> <member>:<value> ...": the proposer here took exclude_rank for dead. */
static int rewriting_set_if_absent(void *context, const char *key, const void *value, size_t len,
                                   int *was_set) {
  test_store *t = context;
  char text[512];
  size_t n = len < sizeof text - 1 ? len : sizeof text - 1;
  memcpy(text, value, n);
  text[n] = '\0';
  size_t key_len = strlen(key), suffix = strlen("/decision");
  if (t->exclude_rank >= 0 && key_len > suffix && !strcmp(key + key_len - suffix, "/decision")) {
    char *p = text;
    for (int spaces = 0; p && spaces <= t->exclude_rank; spaces++) p = strchr(p + 1, ' ');
    if (p) p[1] = '0';
  }
  return strata_store_set_if_absent(t->store, key, text, n, was_set);
}

static float input(int id, int i) {
  return (float)((id + 1) * 1000 + i % 997);
}

/* An allreduce over `comm` whose members are the original ranks `ids`: exactly their sum? */
static int allreduce_checked(strata_comm *comm, int my_id, const int *ids, int n) {
  float *in = malloc(COUNT * sizeof *in), *out = malloc(COUNT * sizeof *out);
  for (int i = 0; i < COUNT; i++) in[i] = input(my_id, i);
  int status = strata_allreduce(comm, in, out, COUNT, STRATA_F32, STRATA_SUM);
  for (int i = 0; status == STRATA_OK && i < COUNT; i++) {
    float want = 0;
    for (int k = 0; k < n; k++) want += input(ids[k], i);
    if (out[i] != want) {
      fprintf(stderr, "rank %d: element %d is %g, want %g\n", my_id, i, out[i], want);
      status = STRATA_ERR_MISMATCH;
    }
  }
  free(in);
  free(out);
  return status;
}

typedef enum scenario {
  DECIDED_BOTH,
  DECIDED_BOTH_REPLY_LOST,
  DECIDED_WITHOUT_LATE,
  AGREE_DECIDED,
  MEMBER_DIES
} scenario;

enum { LATE = 1 }; /* the rank whose first call times out */

static int open_comm(const strata_net_fixture_rank *r, int nranks, test_store *t,
                     strata_comm **comm) {
  strata_config cfg;
  strata_net_fixture_config(r, nranks, &cfg);
  snprintf(cfg.job_id, sizeof cfg.job_id, "resume-%d-%d", (int)getppid(), *(int *)r->arg);
  if (r->rank == LATE) cfg.op_timeout_s = LATE_OP_TIMEOUT_S;
  if (*(int *)r->arg == MEMBER_DIES) cfg.timeout_s = MEMBER_DIES_TIMEOUT_S;
  int status = strata_net_fixture_store(r, &t->store);
  strata_store_ops ops = {.context = t,
                          .set = forward_set,
                          .get = forward_get,
                          .add = lossy_add,
                          .set_if_absent = rewriting_set_if_absent};
  if (status == STRATA_OK) status = strata_comm_init_store(&cfg, &ops, comm);
  if (status != STRATA_OK) fprintf(stderr, "rank %d: init: %s\n", r->rank, strata_err_name(status));
  return status;
}

/* The late rank: its first call times out, with the decision already in the store or (the reply
 * to its contribution lost) with its contribution in the store. */
static int shrink_late(strata_comm *comm, test_store *t, int reply_lost, strata_comm **next) {
  t->lose_agreement_reads = !reply_lost;
  t->lose_contribution_reply = reply_lost;
  int status = strata_comm_shrink(comm, next);
  t->lose_agreement_reads = 0;
  if (status != STRATA_ERR_TIMEOUT || *next) {
    fprintf(stderr, "late rank: first shrink %s, want STRATA_ERR_TIMEOUT\n",
            strata_err_name(status));
    return STRATA_ERR_MISMATCH;
  }
  return strata_comm_shrink(comm, next);
}

/* Ranks 0 and 1 survive rank 2 and shrink; rank 1's shrink times out once. */
static int decided_both(strata_comm *comm, int rank, test_store *t, int reply_lost) {
  int all[3] = {0, 1, 2}, survivors[2] = {0, 1}, flag = 1;
  if (allreduce_checked(comm, rank, all, 3) != STRATA_OK) return 1;
  if (strata_comm_agree(comm, &flag) != STRATA_OK || !flag) return 1;
  if (rank == 2) _exit(0); /* dies: its connections close */
  strata_comm *next = NULL;
  int status =
      rank == LATE ? shrink_late(comm, t, reply_lost, &next) : strata_comm_shrink(comm, &next);
  int failed[3], nfailed = strata_comm_failed_ranks(comm, failed, 3);
  if (status != STRATA_OK || strata_comm_size(next) != 2 || strata_comm_rank(next) != rank ||
      strata_comm_epoch(next) != 1 || nfailed != 1 || failed[0] != 2) {
    fprintf(stderr,
            "rank %d: shrink %s: rank %d of %d, epoch %llu, %d failed; want rank %d of 2, "
            "epoch 1, rank 2 failed\n",
            rank, strata_err_name(status), strata_comm_rank(next), strata_comm_size(next),
            (unsigned long long)strata_comm_epoch(next), nfailed, rank);
    strata_comm_destroy(next);
    return 1;
  }
  int64_t counted = 0;
  if (rank == LATE && reply_lost &&
      (strata_store_add(t->store, t->lost_reply_key, 0, &counted) != STRATA_OK ||
       counted != t->lost_reply_delta)) {
    fprintf(stderr, "rank 1: its contribution counts %lld, want %lld (written once)\n",
            (long long)counted, (long long)t->lost_reply_delta);
    strata_comm_destroy(next);
    return 1;
  }
  status = allreduce_checked(next, rank, survivors, 2);
  if (status != STRATA_OK)
    fprintf(stderr, "rank %d: after shrink: %s\n", rank, strata_err_name(status));
  strata_comm_destroy(next);
  return status != STRATA_OK;
}

/* Rank 0 decides a group without rank 1 (it took it for dead); rank 1's shrink had timed out. */
static int decided_without_late(strata_comm *comm, int rank, test_store *t) {
  int all[2] = {0, 1}, alone[1] = {0};
  if (allreduce_checked(comm, rank, all, 2) != STRATA_OK) return 1;
  strata_comm *next = NULL;
  if (rank == 0) {
    t->exclude_rank = LATE;
    int status = strata_comm_shrink(comm, &next);
    if (status == STRATA_OK && strata_comm_size(next) == 1 && strata_comm_epoch(next) == 1)
      status = allreduce_checked(next, 0, alone, 1);
    else if (status == STRATA_OK)
      status = STRATA_ERR_MISMATCH;
    if (status != STRATA_OK) fprintf(stderr, "rank 0: shrink alone: %s\n", strata_err_name(status));
    strata_comm_destroy(next);
    return status != STRATA_OK;
  }
  int status = shrink_late(comm, t, 0, &next);
  int again = strata_comm_shrink(comm, &next), flag = 1;
  int agreed = strata_comm_agree(comm, &flag);
  if (status != STRATA_ERR_EXCLUDED || again != STRATA_ERR_EXCLUDED ||
      agreed != STRATA_ERR_EXCLUDED || next) {
    fprintf(stderr,
            "rank 1: retried shrink %s, shrink again %s, agree %s%s; want STRATA_ERR_EXCLUDED\n",
            strata_err_name(status), strata_err_name(again), strata_err_name(agreed),
            next ? ", and a communicator" : "");
    strata_comm_destroy(next);
    return 1;
  }
  return 0;
}

/* Rank 0 says no; rank 1's agree times out, and its retry must hear that no. */
static int agree_decided(strata_comm *comm, int rank, test_store *t) {
  int flag = rank == LATE, status;
  if (rank == LATE) {
    t->lose_agreement_reads = 1;
    status = strata_comm_agree(comm, &flag);
    t->lose_agreement_reads = 0;
    if (status != STRATA_ERR_TIMEOUT) {
      fprintf(stderr, "rank 1: first agree %s, want STRATA_ERR_TIMEOUT\n", strata_err_name(status));
      return 1;
    }
    flag = 1;
  }
  status = strata_comm_agree(comm, &flag);
  if (status != STRATA_OK || flag != 0) {
    fprintf(stderr, "rank %d: agree %s, flag %d; want STRATA_OK, 0\n", rank,
            strata_err_name(status), flag);
    return 1;
  }
  /* both are at the same agreement again */
  flag = 1;
  status = strata_comm_agree(comm, &flag);
  int all[2] = {0, 1};
  if (status == STRATA_OK && flag == 1) status = allreduce_checked(comm, rank, all, 2);
  if (status != STRATA_OK || flag != 1)
    fprintf(stderr, "rank %d: next agree %s, flag %d\n", rank, strata_err_name(status), flag);
  return status != STRATA_OK || flag != 1;
}

/* Rank 2 dies; ranks 0 and 1 decide to go on together, and rank 1 dies as soon as it has read
 * that decision. The group's communicator cannot come up; rank 0's next shrink must agree anew
 * and go on alone (forming the decided group again would wait for rank 1 every time). */
static int member_dies(strata_comm *comm, int rank, test_store *t) {
  int all[3] = {0, 1, 2}, alone[1] = {0}, flag = 1;
  if (allreduce_checked(comm, rank, all, 3) != STRATA_OK) return 1;
  /* everyone has its allreduce's bytes before rank 2 leaves */
  if (strata_comm_agree(comm, &flag) != STRATA_OK || !flag) return 1;
  if (rank == 2) _exit(0);
  t->die_after_decision = rank == 1;
  strata_comm *next = NULL;
  int first = strata_comm_shrink(comm, &next);
  if (first == STRATA_OK) { /* cannot be: rank 1 never makes the communicator */
    fprintf(stderr, "rank 0: the group with a dead member came up\n");
    strata_comm_destroy(next);
    return 1;
  }
  int status = strata_comm_shrink(comm, &next);
  if (status == STRATA_OK && (strata_comm_size(next) != 1 || strata_comm_epoch(next) != 1))
    status = STRATA_ERR_MISMATCH;
  if (status == STRATA_OK) status = allreduce_checked(next, 0, alone, 1);
  if (status != STRATA_OK)
    fprintf(stderr, "rank 0: first shrink %s, the next %s; want a communicator of rank 0 alone\n",
            strata_err_name(first), strata_err_name(status));
  strata_comm_destroy(next);
  return status != STRATA_OK;
}

static int run_rank(const strata_net_fixture_rank *r) {
  scenario s = (scenario) * (int *)r->arg;
  test_store t = {.exclude_rank = -1};
  strata_comm *comm = NULL;
  if (open_comm(r, r->nprocs, &t, &comm) != STRATA_OK) return 1;
  int bad = s == DECIDED_BOTH              ? decided_both(comm, r->rank, &t, 0)
            : s == DECIDED_BOTH_REPLY_LOST ? decided_both(comm, r->rank, &t, 1)
            : s == DECIDED_WITHOUT_LATE    ? decided_without_late(comm, r->rank, &t)
            : s == MEMBER_DIES             ? member_dies(comm, r->rank, &t)
                                           : agree_decided(comm, r->rank, &t);
  strata_comm_destroy(comm);
  strata_store_close(t.store);
  return bad;
}

int main(void) {
  struct {
    scenario s;
    int nranks;
    const char *what;
  } cases[] = {
      {DECIDED_BOTH, 3, "a shrink that timed out joins the group the other survivor formed"},
      {DECIDED_BOTH_REPLY_LOST, 3,
       "a shrink whose contribution's reply was lost resumes with that contribution"},
      {DECIDED_WITHOUT_LATE, 2, "a shrink that timed out learns the others excluded it"},
      {AGREE_DECIDED, 2, "an agree that timed out returns the flag the other rank got"},
      {MEMBER_DIES, 3, "a shrink whose decided group lost a member agrees anew without it"},
  };
  int failures = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int s = (int)cases[c].s;
    int bad = strata_net_fixture_run(cases[c].nranks, run_rank, &s, 60, NULL);
    printf("%s %s\n", bad ? "FAIL" : "ok", cases[c].what);
    failures += bad != 0;
  }
  printf("%d failed\n", failures);
  return failures != 0;
}
