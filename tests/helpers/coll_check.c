// SPDX-License-Identifier: Apache-2.0
/*
 * coll_check.c — run one collective on a live communicator with a known input pattern and
 * check every output element against the reference (see coll_check.h).
 */
#include "helpers/coll_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/values.h"

typedef struct layout {
  size_t send_elems, recv_elems;
} layout;

static layout layout_of(strata_coll coll, int n, size_t count) {
  layout l = {0, 0};
  switch (coll) {
    case STRATA_COLL_ALLREDUCE:
      l.send_elems = l.recv_elems = count;
      break;
    case STRATA_COLL_REDUCE_SCATTER:
      l.send_elems = n * count, l.recv_elems = count;
      break;
    case STRATA_COLL_ALLGATHER:
      l.send_elems = count, l.recv_elems = n * count;
      break;
    case STRATA_COLL_BROADCAST:
    case STRATA_COLL_REDUCE:
      l.send_elems = l.recv_elems = count;
      break;
    case STRATA_COLL_GATHER:
      l.send_elems = count, l.recv_elems = n * count;
      break;
    case STRATA_COLL_SCATTER:
      l.send_elems = n * count, l.recv_elems = count;
      break;
    case STRATA_COLL_ALLTOALL:
      l.send_elems = l.recv_elems = n * count;
      break;
    default:
      break;
  }
  return l;
}

static double alltoall_value(int from, int to, size_t idx) {
  return (double)((from * 13 + to * 5 + idx * 7) % 101);
}

static int report(const strata_check_case *c, int rank, size_t idx, double got, double want) {
  fprintf(stderr,
          "rank %d: %s %s %s count %zu root %d %s algo %s: element %zu is %g, expected %g\n", rank,
          strata_coll_name(c->coll), strata_dtype_name(c->dtype), strata_op_name(c->op), c->count,
          c->root, c->in_place ? "in-place" : "out-of-place", strata_algo_name(c->algo), idx, got,
          want);
  return 1;
}

int strata_check_collective(strata_comm *comm, const strata_check_case *c) {
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);
  size_t elem = strata_dtype_size(c->dtype), count = c->count;
  layout l = layout_of(c->coll, n, count);
  int is_root = rank == c->root;
  /* in place: one buffer big enough for both views */
  size_t big = l.send_elems > l.recv_elems ? l.send_elems : l.recv_elems;
  uint8_t *sendbuf = malloc(big * elem + 8), *recvbuf = malloc(big * elem + 8);
  if (!sendbuf || !recvbuf) return 1;
  memset(sendbuf, 0xA5, big * elem + 8);
  memset(recvbuf, 0x5A, big * elem + 8);
  int failed = 0;

  /* fill the input where the collective reads it */
  for (size_t i = 0; i < l.send_elems; i++) {
    double v;
    switch (c->coll) {
      case STRATA_COLL_ALLREDUCE:
      case STRATA_COLL_REDUCE:
      case STRATA_COLL_REDUCE_SCATTER:
        v = strata_test_reduce_value(c->op, rank, i);
        break;
      case STRATA_COLL_SCATTER:
        v = strata_test_move_value((int)(i / (count ? count : 1)), i % (count ? count : 1));
        break;
      case STRATA_COLL_ALLTOALL:
        v = alltoall_value(rank, (int)(i / count), i % count);
        break;
      case STRATA_COLL_BROADCAST:
        v = strata_test_move_value(c->root, i);
        break;
      default:
        v = strata_test_move_value(rank, i);
        break;
    }
    strata_test_put(c->dtype, sendbuf, i, v);
  }
  const void *s = sendbuf;
  void *r = recvbuf;
  if (c->in_place) {
    switch (c->coll) {
      case STRATA_COLL_ALLREDUCE:
      case STRATA_COLL_ALLTOALL:
      case STRATA_COLL_BROADCAST:
      case STRATA_COLL_REDUCE:
        r = sendbuf;
        break;
      case STRATA_COLL_REDUCE_SCATTER:
        r = c->in_place == 2 ? sendbuf : sendbuf + (size_t)rank * count * elem;
        break;
      case STRATA_COLL_ALLGATHER:
        /* own block already sits at its place in the output */
        memcpy(recvbuf + (size_t)rank * count * elem, sendbuf, count * elem);
        s = recvbuf + (size_t)rank * count * elem;
        break;
      case STRATA_COLL_GATHER:
        if (is_root) {
          memcpy(recvbuf + (size_t)c->root * count * elem, sendbuf, count * elem);
          s = recvbuf + (size_t)c->root * count * elem;
        }
        break;
      case STRATA_COLL_SCATTER:
        if (is_root) r = sendbuf + (size_t)c->root * count * elem;
        break;
      default:
        break;
    }
  }
  strata_coll_args args = {.coll = c->coll,
                           .sendbuf = s,
                           .recvbuf = r,
                           .count = count,
                           .dtype = c->dtype,
                           .op = c->op,
                           .root = c->root,
                           .algo = c->algo};
  int status;
  if (c->nonblocking) {
    strata_request *req = NULL;
    status = strata_collective(comm, &args, &req);
    if (status == STRATA_OK) status = strata_request_wait(req);
  } else {
    status = strata_collective(comm, &args, NULL);
  }
  if (status != STRATA_OK) {
    fprintf(stderr, "rank %d: %s %s %s count %zu root %d %s algo %s returned %s\n", rank,
            strata_coll_name(c->coll), strata_dtype_name(c->dtype), strata_op_name(c->op), count,
            c->root, c->in_place ? "in-place" : "out-of-place", strata_algo_name(c->algo),
            strata_err_name(status));
    free(sendbuf);
    free(recvbuf);
    return 1;
  }
  const uint8_t *out = r;
  for (size_t i = 0; i < l.recv_elems && !failed; i++) {
    double want;
    int check = 1;
    switch (c->coll) {
      case STRATA_COLL_ALLREDUCE:
        want = strata_test_reduce_expected(c->dtype, c->op, n, i);
        break;
      case STRATA_COLL_REDUCE:
        check = is_root;
        want = strata_test_reduce_expected(c->dtype, c->op, n, i);
        break;
      case STRATA_COLL_REDUCE_SCATTER:
        want = strata_test_reduce_expected(c->dtype, c->op, n, (size_t)rank * count + i);
        break;
      case STRATA_COLL_ALLGATHER:
        want = strata_test_move_value((int)(i / count), i % count);
        break;
      case STRATA_COLL_GATHER:
        check = is_root;
        want = strata_test_move_value((int)(i / count), i % count);
        break;
      case STRATA_COLL_BROADCAST:
        want = strata_test_move_value(c->root, i);
        break;
      case STRATA_COLL_SCATTER:
        want = strata_test_move_value(rank, i);
        break;
      case STRATA_COLL_ALLTOALL:
        want = alltoall_value((int)(i / count), rank, i % count);
        break;
      default:
        check = 0, want = 0;
        break;
    }
    if (!check) break;
    double got = strata_test_get(c->dtype, out, i);
    if (!strata_test_equal(c->dtype, c->op, got, strata_test_cast(c->dtype, want)))
      failed = report(c, rank, i, got, want);
  }
  free(sendbuf);
  free(recvbuf);
  return failed;
}

int strata_check_sendrecv_ring(strata_comm *comm, strata_dtype dtype, size_t count) {
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);
  if (n < 2) return 0;
  size_t elem = strata_dtype_size(dtype);
  uint8_t *out = malloc(count * elem + 1), *in = malloc(count * elem + 1);
  for (size_t i = 0; i < count; i++)
    strata_test_put(dtype, out, i, strata_test_move_value(rank, i));
  strata_request *rs = NULL, *rr = NULL;
  int to = (rank + 1) % n, from = (rank + n - 1) % n;
  int status = strata_irecv(comm, in, count, dtype, from, &rr);
  if (status == STRATA_OK) status = strata_isend(comm, out, count, dtype, to, &rs);
  int s1 = rr ? strata_request_wait(rr) : status;
  int s2 = rs ? strata_request_wait(rs) : status;
  int failed = 0;
  if (s1 || s2) {
    fprintf(stderr, "rank %d: send/recv %s count %zu: %s / %s\n", rank, strata_dtype_name(dtype),
            count, strata_err_name(s1), strata_err_name(s2));
    failed = 1;
  }
  for (size_t i = 0; i < count && !failed; i++) {
    double got = strata_test_get(dtype, in, i),
           want = strata_test_cast(dtype, strata_test_move_value(from, i));
    if (got != want) {
      fprintf(stderr, "rank %d: recv %s count %zu element %zu is %g, expected %g\n", rank,
              strata_dtype_name(dtype), count, i, got, want);
      failed = 1;
    }
  }
  free(out);
  free(in);
  return failed;
}
