// SPDX-License-Identifier: Apache-2.0
/*
 * sendrecv.c — point to point: pass a token around a ring of ranks, then shift a large block one
 * place to the right.
 *
 *   strata launch -n 4 -- ./sendrecv
 *
 * A blocking strata_send may wait until the peer receives (a large message goes straight from
 * the sender's buffer into the receiver's), so a ring where every rank first sends and then
 * receives can wait on itself. Post the receive and the send non-blocking, then wait for both.
 * Messages between one pair of ranks arrive in the order they were sent.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <strata.h>

enum { BLOCK = 4 << 20 }; /* elements of the shifted block: 32 MiB of i64 */

static int fail(const char *what, int status) {
  fprintf(stderr, "sendrecv: %s: %s (%s)\n", what, strata_err_name(status),
          strata_strerror(status));
  return 1;
}

int main(void) {
  strata_comm *comm;
  int status = strata_comm_init_env(&comm);
  if (status != STRATA_OK) return fail("init", status);
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);
  if (n < 2) {
    fprintf(stderr, "sendrecv: needs at least 2 ranks (strata launch -n 2 -- ./sendrecv)\n");
    return 1;
  }
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;

  /* 1. A token goes once around: rank 0 starts it, every other rank adds its rank and passes
   *    it on; blocking calls are fine here because only one message is ever in flight. */
  int64_t token = 0;
  if (rank == 0) {
    status = strata_send(comm, &token, 1, STRATA_I64, next);
    if (status == STRATA_OK) status = strata_recv(comm, &token, 1, STRATA_I64, prev);
  } else {
    status = strata_recv(comm, &token, 1, STRATA_I64, prev);
    token += rank;
    if (status == STRATA_OK) status = strata_send(comm, &token, 1, STRATA_I64, next);
  }
  if (status != STRATA_OK) return fail("token", status);
  if (rank == 0 && token != (int64_t)n * (n - 1) / 2) {
    fprintf(stderr, "sendrecv: the token came back as %lld\n", (long long)token);
    return 1;
  }

  /* 2. Every rank sends a large block right and receives one from the left, both at once. */
  int64_t *out = malloc(BLOCK * sizeof *out), *in = malloc(BLOCK * sizeof *in);
  if (!out || !in) return fail("malloc", STRATA_ERR_NO_MEMORY);
  for (int64_t i = 0; i < BLOCK; i++) out[i] = (int64_t)rank << 32 | i;
  strata_request *recv_req, *send_req;
  status = strata_irecv(comm, in, BLOCK, STRATA_I64, prev, &recv_req);
  if (status != STRATA_OK) return fail("irecv", status);
  status = strata_isend(comm, out, BLOCK, STRATA_I64, next, &send_req);
  if (status != STRATA_OK) return fail("isend", status);
  int recv_status = strata_request_wait(recv_req); /* wait for both, even after a failure: */
  int send_status = strata_request_wait(send_req); /* waiting is what frees a request */
  if (recv_status != STRATA_OK) return fail("receive", recv_status);
  if (send_status != STRATA_OK) return fail("send", send_status);
  for (int64_t i = 0; i < BLOCK; i++)
    if (in[i] != ((int64_t)prev << 32 | i)) {
      fprintf(stderr, "sendrecv: rank %d: element %lld from rank %d is wrong\n", rank, (long long)i,
              prev);
      return 1;
    }
  if (rank == 0)
    printf("sendrecv: the token went round %d ranks (sum %lld); %d MiB shifted right, checked\n", n,
           (long long)token, (int)(BLOCK * sizeof *out >> 20));
  free(out);
  free(in);
  status = strata_comm_destroy(comm);
  return status == STRATA_OK ? 0 : fail("destroy", status);
}
