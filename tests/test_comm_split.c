// SPDX-License-Identifier: Apache-2.0
/*
 * test_comm_split.c — strata_comm_split and strata_comm_init_store.
 *
 *  1. 4 ranks split by parity, keys reversing the order: each group has 2 ranks numbered by
 *     key, its allreduce sums only its members, and the parent keeps working beside it.
 *  2. A rank giving STRATA_UNDEFINED gets NULL; the other three form one group.
 *  3. A communicator over the caller's store (callbacks forwarding to a store client, as the
 *     torch backend forwards to c10d::Store) runs an allreduce and two agrees (only set, get and
 *     add: the fallbacks for set-if-absent and for waiting on a counter), and its split works.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot/store.h"
#include "helpers/check.h"
#include "helpers/ranks.h"

static int sum_of_ranks(strata_comm *comm, int64_t mine, int64_t *sum) {
  return strata_allreduce(comm, &mine, sum, 1, STRATA_I64, STRATA_SUM);
}

static int forward_set(void *context, const char *key, const void *value, size_t len) {
  return strata_store_set(context, key, value, len);
}
static int forward_get(void *context, const char *key, void **value, size_t *len,
                       double timeout_s) {
  return strata_store_get(context, key, value, len, timeout_s);
}
static int forward_add(void *context, const char *key, int64_t delta, int64_t *result) {
  return strata_store_add(context, key, delta, result);
}

static int body(strata_comm *comm, int rank, int nranks, int init_status, void *arg) {
  (void)arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  /* 0. the bytes each buffer must hold on this rank (strata_coll_buffer_bytes) */
  strata_coll_args q = {.coll = STRATA_COLL_ALLGATHER, .count = 3, .dtype = STRATA_F32};
  uint64_t send_bytes = 0, recv_bytes = 0;
  CHECK(strata_coll_buffer_bytes(comm, &q, &send_bytes, &recv_bytes) == STRATA_OK &&
            send_bytes == 12 && recv_bytes == 12 * (uint64_t)nranks,
        "allgather bytes %llu %llu", (unsigned long long)send_bytes,
        (unsigned long long)recv_bytes);
  q.coll = STRATA_COLL_REDUCE, q.root = 0, q.dtype = STRATA_F64;
  CHECK(strata_coll_buffer_bytes(comm, &q, &send_bytes, &recv_bytes) == STRATA_OK &&
            send_bytes == 24 && recv_bytes == (rank == 0 ? 24u : 0u),
        "reduce bytes %llu %llu", (unsigned long long)send_bytes, (unsigned long long)recv_bytes);
  q.count = SIZE_MAX / 2;
  CHECK(strata_coll_buffer_bytes(comm, &q, &send_bytes, &recv_bytes) == STRATA_ERR_INVALID_ARG,
        "an overflowing count");

  /* 1. parity groups, order reversed by key */
  strata_comm *half = NULL;
  CHECK(strata_comm_split(comm, rank % 2, -rank, &half) == STRATA_OK, "split by parity");
  if (!half) return 1;
  CHECK(strata_comm_size(half) == nranks / 2, "group size %d", strata_comm_size(half));
  int want_rank = (nranks / 2 - 1) - rank / 2;
  CHECK(strata_comm_rank(half) == want_rank, "rank %d in its group, want %d",
        strata_comm_rank(half), want_rank);
  int64_t sum = -1;
  CHECK(sum_of_ranks(half, rank, &sum) == STRATA_OK, "group allreduce");
  int64_t want = rank % 2 ? 1 + 3 : 0 + 2;
  CHECK(sum == want, "group sum %lld, want %lld", (long long)sum, (long long)want);
  CHECK(sum_of_ranks(comm, rank, &sum) == STRATA_OK && sum == 6, "parent still works: %lld",
        (long long)sum);

  /* 2. rank 3 stays out */
  strata_comm *three = (strata_comm *)&three; /* must become NULL for rank 3 */
  CHECK(strata_comm_split(comm, rank == 3 ? STRATA_UNDEFINED : 7, 0, &three) == STRATA_OK,
        "split with an undefined color");
  if (rank == 3) {
    CHECK(three == NULL, "an undefined color got a communicator");
  } else if (three) {
    CHECK(strata_comm_size(three) == 3 && strata_comm_rank(three) == rank, "group of three");
    CHECK(sum_of_ranks(three, 1, &sum) == STRATA_OK && sum == 3, "sum over three %lld",
          (long long)sum);
    strata_comm_destroy(three);
  }
  strata_comm_destroy(half);

  /* 3. the caller's store */
  strata_config cfg = *strata_comm_config(comm);
  strata_store *client = NULL;
  CHECK(strata_store_connect_auth(cfg.store_addr, cfg.secret, cfg.job_id, cfg.timeout_s, &client) ==
            STRATA_OK,
        "connect");
  if (!client) return 1;
  strata_store_ops ops = {
      .context = client, .set = forward_set, .get = forward_get, .add = forward_add};
  snprintf(cfg.job_id, sizeof cfg.job_id, "split-test-ops");
  cfg.chunk_bytes = 0;
  strata_comm *over_ops = NULL;
  CHECK(strata_comm_init_store(&cfg, &ops, &over_ops) == STRATA_OK, "init over the ops");
  if (over_ops) {
    CHECK(sum_of_ranks(over_ops, rank, &sum) == STRATA_OK && sum == 6, "ops allreduce %lld",
          (long long)sum);
    /* agreement over callbacks with only set/get/add: the decision through a ticket (no
     * set-if-absent) and the progress counter polled with adds of 0 (no WAIT_COUNT) */
    int flag = rank != 2;
    CHECK(strata_comm_agree(over_ops, &flag) == STRATA_OK && flag == 0, "ops agree: flag %d", flag);
    flag = 1;
    CHECK(strata_comm_agree(over_ops, &flag) == STRATA_OK && flag == 1, "ops agree again: flag %d",
          flag);
    strata_comm *pair = NULL;
    CHECK(strata_comm_split(over_ops, rank / 2, rank, &pair) == STRATA_OK && pair,
          "split over the ops");
    if (pair) {
      CHECK(sum_of_ranks(pair, rank, &sum) == STRATA_OK && sum == (rank / 2 ? 5 : 1),
            "pair sum %lld", (long long)sum);
      strata_comm_destroy(pair);
    }
    strata_comm_destroy(over_ops);
  }
  strata_store_ops broken = ops;
  broken.add = NULL;
  CHECK(strata_comm_init_store(&cfg, &broken, &over_ops) == STRATA_ERR_INVALID_ARG,
        "ops without add");
  strata_store_close(client);
  return failures != 0;
}

int main(void) {
  int failed = 0;
  for (int shm = 0; shm <= 1; shm++) {
    strata_test_ranks_opts opts = {.shm = shm, .timeout_s = 20, .deadline_s = 120};
    int bad = strata_test_run_ranks(4, &opts, body, NULL);
    if (bad) fprintf(stderr, "%s: %d ranks failed\n", shm ? "shm" : "tcp", bad);
    failed += bad;
  }
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
