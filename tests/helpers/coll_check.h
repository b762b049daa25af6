// SPDX-License-Identifier: Apache-2.0
/* coll_check.h — run one collective with a known pattern and check all of its output. */
#ifndef STRATA_TESTS_COLL_CHECK_H
#define STRATA_TESTS_COLL_CHECK_H

#include <stddef.h>

#include "strata.h"

typedef struct strata_check_case {
  strata_coll coll;
  strata_dtype dtype;
  strata_op op;
  size_t count;
  int root;
  int in_place; /* 1: the documented in-place layout; 2 (reduce-scatter): recvbuf == sendbuf */
  int nonblocking;
  strata_algo algo;
} strata_check_case;

/* Returns 0 when the call succeeded and every element is right; prints the first error. */
int strata_check_collective(strata_comm *comm, const strata_check_case *c);
/* Every rank sends to rank+1 and receives from rank-1 with isend/irecv. */
int strata_check_sendrecv_ring(strata_comm *comm, strata_dtype dtype, size_t count);

#endif
