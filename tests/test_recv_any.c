// SPDX-License-Identifier: Apache-2.0
/*
 * test_recv_any.c — receives from any source (strata_recv_any, strata_irecv_any) through the
 * engine, over TCP and over shared memory, at 3 and 4 ranks:
 *   - rank 0 lets one sender at a time go, in an order it picks, with the receive already
 *     posted: every receive names that sender;
 *   - every other rank sends at once, small and large messages: each message is taken exactly
 *     once, its source is the rank that wrote it, and each rank's messages come in the order it
 *     sent them;
 *   - non-overtaking: a receive from any source posted before a receive from rank p takes p's
 *     first message, one posted after it takes the second;
 *   - a collective runs while a receive from any source waits (its sender sends after the
 *     collective), and one whose sender sent before the collective;
 *   - bad arguments are refused before anything is sent; a message of another size fails with
 *     STRATA_ERR_MISMATCH and no message at all with STRATA_ERR_TIMEOUT, on every rank.
 * Every message is a run of int32: [sender, index, sender * 1000003 + index + k ...].
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/check.h"
#include "helpers/ranks.h"
#include "strata.h"

enum { SMALL_COUNT = 4, LARGE_COUNT = 64 * 1024, SMALL_EACH = 20, LARGE_EACH = 3 };

static void fill(int32_t *buf, size_t count, int sender, int index) {
  buf[0] = sender;
  buf[1] = index;
  for (size_t k = 2; k < count; k++) buf[k] = sender * 1000003 + index + (int32_t)k;
}

/* The message's own sender and index, and every element as fill wrote it. */
static int intact(const int32_t *buf, size_t count) {
  for (size_t k = 2; k < count; k++)
    if (buf[k] != buf[0] * 1000003 + buf[1] + (int32_t)k) return 0;
  return 1;
}

static int send_one(strata_comm *comm, size_t count, int index) {
  int rank = strata_comm_rank(comm);
  int32_t *buf = malloc(count * sizeof *buf);
  CHECK_OR_RETURN(buf, "out of memory");
  fill(buf, count, rank, index);
  int status = strata_send(comm, buf, count, STRATA_I32, 0);
  free(buf);
  CHECK_OR_RETURN(status == STRATA_OK, "rank %d: send %d: %s", rank, index,
                  strata_err_name(status));
  return 0;
}

static int wait_token(strata_comm *comm) {
  char token = 0;
  CHECK_STATUS(strata_recv(comm, &token, 1, STRATA_I8, 0), STRATA_OK);
  return token == 1 ? 0 : 1;
}

/* Rank 0 picks who sends next (last rank first, then the others up) after posting the receive. */
static int ordered(strata_comm *comm, int rank, int n) {
  if (rank != 0) return wait_token(comm) || send_one(comm, SMALL_COUNT, 0);
  for (int i = 0; i < n - 1; i++) {
    int sender = i == 0 ? n - 1 : i;
    int32_t got[SMALL_COUNT] = {0};
    int source = -2;
    strata_request *req = NULL;
    char token = 1;
    CHECK_STATUS(strata_irecv_any(comm, got, SMALL_COUNT, STRATA_I32, &source, &req), STRATA_OK);
    CHECK(source == STRATA_ANY_SOURCE, "source %d before the receive completed", source);
    CHECK_STATUS(strata_send(comm, &token, 1, STRATA_I8, sender), STRATA_OK);
    CHECK_STATUS(strata_request_wait(req), STRATA_OK);
    CHECK(source == sender, "receive %d: source %d, rank %d sent", i, source, sender);
    CHECK(got[0] == sender && got[1] == 0 && intact(got, SMALL_COUNT),
          "receive %d: message [%d, %d] from rank %d", i, got[0], got[1], sender);
  }
  return failures != 0;
}

/* Every sender at once, `each` messages of `count`: all taken, in each sender's order. */
static int racing(strata_comm *comm, int rank, int n, size_t count, int each) {
  CHECK_STATUS(strata_barrier(comm), STRATA_OK);
  if (rank != 0) {
    for (int i = 0; i < each; i++)
      if (send_one(comm, count, i)) return 1;
    return 0;
  }
  int32_t *got = malloc(count * sizeof *got);
  int next[16] = {0};
  CHECK_OR_RETURN(got && n <= 16, "out of memory");
  for (int m = 0; m < (n - 1) * each; m++) {
    int source = -2;
    CHECK_STATUS(strata_recv_any(comm, got, count, STRATA_I32, &source), STRATA_OK);
    if (source < 1 || source >= n) {
      CHECK(0, "message %d: source %d", m, source);
      break;
    }
    CHECK(got[0] == source && got[1] == next[source] && intact(got, count),
          "message %d from rank %d: [%d, %d], expected [%d, %d]", m, source, got[0], got[1], source,
          next[source]);
    next[source]++;
  }
  for (int r = 1; r < n; r++)
    CHECK(next[r] == each, "rank %d: %d messages of %d", r, next[r], each);
  free(got);
  return failures != 0;
}

/* Rank 0 posts (a) any-source then from-1, (b) from-2 then any-source; the sender sends two. */
static int overtaking(strata_comm *comm, int rank, int n) {
  (void)n;
  if (rank == 1 || rank == 2)
    return wait_token(comm) || send_one(comm, 8, 0) || send_one(comm, 8, 1);
  if (rank != 0) return 0;
  for (int sender = 1; sender <= 2; sender++) {
    int32_t first[8] = {0}, second[8] = {0};
    int source = -2;
    strata_request *any = NULL, *specific = NULL;
    char token = 1;
    if (sender == 1) {
      CHECK_STATUS(strata_irecv_any(comm, first, 8, STRATA_I32, &source, &any), STRATA_OK);
      CHECK_STATUS(strata_irecv(comm, second, 8, STRATA_I32, sender, &specific), STRATA_OK);
    } else {
      CHECK_STATUS(strata_irecv(comm, first, 8, STRATA_I32, sender, &specific), STRATA_OK);
      CHECK_STATUS(strata_irecv_any(comm, second, 8, STRATA_I32, &source, &any), STRATA_OK);
    }
    CHECK_STATUS(strata_send(comm, &token, 1, STRATA_I8, sender), STRATA_OK);
    CHECK_STATUS(strata_request_wait(any), STRATA_OK);
    CHECK_STATUS(strata_request_wait(specific), STRATA_OK);
    CHECK(source == sender, "sender %d: any-source receive names %d", sender, source);
    CHECK(first[0] == sender && first[1] == 0 && second[0] == sender && second[1] == 1,
          "sender %d (%s first): took [%d, %d] then [%d, %d]", sender,
          sender == 1 ? "any-source" : "specific", first[0], first[1], second[0], second[1]);
  }
  return failures != 0;
}

/* A ring allreduce of RING_COUNT elements, every element rank + 1 on every rank: the last rank
 * cannot finish before rank 0 has received and passed on what came round the ring. */
enum { RING_COUNT = 1024 };
static int ring_allreduce(strata_comm *comm, int rank, int n) {
  int64_t *data = malloc(RING_COUNT * sizeof *data);
  CHECK_OR_RETURN(data, "out of memory");
  for (int k = 0; k < RING_COUNT; k++) data[k] = rank + 1;
  strata_coll_args a = {.coll = STRATA_COLL_ALLREDUCE,
                        .sendbuf = data,
                        .recvbuf = data,
                        .count = RING_COUNT,
                        .dtype = STRATA_I64,
                        .op = STRATA_SUM,
                        .algo = STRATA_ALGO_RING};
  CHECK_STATUS(strata_collective(comm, &a, NULL), STRATA_OK);
  int wrong = 0;
  for (int k = 0; k < RING_COUNT; k++) wrong += data[k] != (int64_t)n * (n + 1) / 2;
  CHECK(wrong == 0, "ring allreduce: %d elements wrong", wrong);
  free(data);
  return wrong != 0;
}

/* An allreduce while rank 0's receive from any source waits. The last rank sends after it: the
 * allreduce must not wait for that message (its receives go ahead of the waiting one, the peers'
 * next messages being a collective's). Rank 1 sends before it: the message is ahead of its
 * allreduce data on the pair, and the allreduce's receives from rank 1 must leave it alone. */
static int with_collective(strata_comm *comm, int rank, int n) {
  for (int before = 0; before <= 1; before++) {
    int sender = before ? 1 : n - 1;
    if (rank == 0) {
      int32_t got[SMALL_COUNT] = {0};
      int source = -2;
      strata_request *req = NULL;
      CHECK_STATUS(strata_irecv_any(comm, got, SMALL_COUNT, STRATA_I32, &source, &req), STRATA_OK);
      if (ring_allreduce(comm, rank, n)) return 1;
      CHECK_STATUS(strata_request_wait(req), STRATA_OK);
      CHECK(source == sender && got[0] == sender, "%s the allreduce: source %d, message of %d",
            before ? "sent before" : "sent after", source, got[0]);
    } else {
      if (rank == sender && before && send_one(comm, SMALL_COUNT, 0)) return 1;
      if (ring_allreduce(comm, rank, n)) return 1;
      if (rank == sender && !before && send_one(comm, SMALL_COUNT, 0)) return 1;
    }
    /* rank 1 sends the next round's message only once rank 0 has this round's */
    CHECK_STATUS(strata_barrier(comm), STRATA_OK);
  }
  return failures != 0;
}

static int bad_arguments(strata_comm *comm) {
  int32_t buf[4];
  int source = 5;
  strata_request *req = NULL;
  CHECK_STATUS(strata_irecv_any(comm, buf, 4, STRATA_I32, &source, NULL), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_recv_any(comm, NULL, 4, STRATA_I32, &source), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_irecv_any(comm, buf, 4, (strata_dtype)STRATA_DTYPE_COUNT, &source, &req),
               STRATA_ERR_INVALID_ARG);
  CHECK(req == NULL, "a request for a refused call");
  CHECK_STATUS(strata_recv_any(NULL, buf, 4, STRATA_I32, &source), STRATA_ERR_INVALID_ARG);
  CHECK_STATUS(strata_recv(comm, buf, 4, STRATA_I32, -2), STRATA_ERR_INVALID_ARG);
  return failures != 0;
}

static int body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  CHECK_OR_RETURN(comm, "rank %d: init: %s", rank, strata_err_name(init_status));
  if (bad_arguments(comm) || ordered(comm, rank, n) ||
      racing(comm, rank, n, SMALL_COUNT, SMALL_EACH) ||
      racing(comm, rank, n, LARGE_COUNT, LARGE_EACH) || overtaking(comm, rank, n) ||
      with_collective(comm, rank, n))
    return 1;
  CHECK_STATUS(strata_barrier(comm), STRATA_OK);
  return failures != 0;
}

/* A receive from any source that gets a message of another size fails with STRATA_ERR_MISMATCH
 * (as strata_recv does); one that gets none fails after STRATA_OP_TIMEOUT. Both fail the
 * communicator, so each has a run of its own: `arg` says which. */
enum { MISMATCHED = 1, NOTHING_SENT = 2 };
enum { SHORT_OP_TIMEOUT_MS = 300 };

static void short_op_timeout(strata_config *cfg, int rank, void *arg) {
  (void)rank, (void)arg;
  cfg->op_timeout_s = SHORT_OP_TIMEOUT_MS / 1000.0;
}

static int failing(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)n;
  CHECK_OR_RETURN(comm, "rank %d: init: %s", rank, strata_err_name(init_status));
  int which = *(const int *)arg;
  int32_t buf[8] = {0};
  int source = 7;
  if (rank == 0) {
    double start = strata_test_now_s();
    int status = strata_recv_any(comm, buf, 4, STRATA_I32, &source);
    double waited = strata_test_now_s() - start;
    CHECK_STATUS(status, which == MISMATCHED ? STRATA_ERR_MISMATCH : STRATA_ERR_TIMEOUT);
    CHECK(source == STRATA_ANY_SOURCE, "a failed receive named %d", source);
    /* its own STRATA_OP_TIMEOUT, or a peer's barrier that timed out first and aborted */
    if (which == NOTHING_SENT)
      CHECK(waited < 10, "timed out after %.2f s (STRATA_OP_TIMEOUT %d ms)", waited,
            SHORT_OP_TIMEOUT_MS);
  } else if (rank == 1 && which == MISMATCHED) {
    fill(buf, 8, rank, 0);
    strata_send(comm, buf, 8, STRATA_I32, 0); /* may succeed: the mismatch is the receiver's */
  }
  /* everyone learns of the failure instead of hanging */
  CHECK(strata_barrier(comm) != STRATA_OK, "rank %d: a barrier after the failure succeeded", rank);
  return failures != 0;
}

/* A world of one has nobody to receive from. */
static int alone(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)rank, (void)n, (void)arg;
  CHECK_OR_RETURN(comm, "init: %s", strata_err_name(init_status));
  int32_t buf[4];
  int source = 0;
  CHECK_STATUS(strata_recv_any(comm, buf, 4, STRATA_I32, &source), STRATA_ERR_INVALID_ARG);
  return failures != 0;
}

/* Sealed frames: the probe opens a header as the receive path would, and leaves it for it. */
static void seal(strata_config *cfg, int rank, void *arg) {
  (void)rank, (void)arg;
  cfg->encrypt = STRATA_ENCRYPT_ON;
}

int main(void) {
  int failed = 0;
  const struct {
    const char *name;
    strata_test_ranks_opts opts;
  } cases[] = {
      {"tcp", {.timeout_s = 20, .deadline_s = 60}},
      {"tcp, 4 streams, sealed",
       {.tcp_streams = 4, .timeout_s = 20, .deadline_s = 60, .tweak = seal}},
      {"shared memory", {.shm = 1, .timeout_s = 20, .deadline_s = 60}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int n = 3; n <= 4; n++) {
      printf("%s, %d ranks\n", cases[c].name, n);
      fflush(stdout);
      int bad = strata_test_run_ranks(n, &cases[c].opts, body, NULL);
      if (bad) printf("FAILED: %s with %d ranks (%d ranks failed)\n", cases[c].name, n, bad);
      failed += bad != 0;
    }
  for (int shm = 0; shm <= 1; shm++)
    for (int which = MISMATCHED; which <= NOTHING_SENT; which++) {
      printf("%s, %s\n", shm ? "shared memory" : "tcp",
             which == MISMATCHED ? "a message of another size" : "no message");
      fflush(stdout);
      strata_test_ranks_opts o = {
          .shm = shm, .timeout_s = 20, .deadline_s = 30, .tweak = short_op_timeout};
      int bad = strata_test_run_ranks(3, &o, failing, &which);
      if (bad) printf("FAILED: the receive's failure (%d ranks failed)\n", bad);
      failed += bad != 0;
    }
  strata_test_ranks_opts o = {.timeout_s = 20, .deadline_s = 30};
  int bad = strata_test_run_ranks(1, &o, alone, NULL);
  if (bad) printf("FAILED: a world of one\n");
  failed += bad != 0;
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
