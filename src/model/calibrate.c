/*
 * calibrate.c — measure, inside a running job, the host links strata_host_predict needs
 * (host.h): α, the rate of one large transfer, the reduction kernel and memcpy.
 *
 * Why inside the job: the prediction must be about the links this job actually uses (shm with
 * single-copy pulls, or TCP when STRATA_SHM=0), under the load the host has right now, with as
 * many ranks sharing its cores as the collectives will. So transfers are ring shifts among all
 * ranks at once (each rank sends to rank+1 and receives from rank-1: the traffic of a ring step),
 * and the local kernels run on every rank at the same time.
 *
 * Converting a ring shift of X bytes that took T to a link rate: over shm each rank's core pulls
 * X (the sender's core is free), so one pull runs at X/T; over TCP each rank's core copies X into
 * the kernel and X out of it, taking turns, so each copy runs at 2X/T.
 * That is exactly the simulator's one-core-per-rank model (sim.h), which is what makes the two
 * consistent.
 *
 * Invariants: every rank makes the same sequence of calls (sizes and counts come from constants
 * and the communicator alone). Must never: leave a request unwaited, or print.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/host.h"

#define CAL_REPEATS 5
#define CAL_SMALL_SHIFTS 50
#define CAL_SMALL_BYTES 8

static int cal_ring_shift(strata_comm *comm, const void *out, void *in, size_t bytes) {
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);
  strata_request *recv_req = NULL, *send_req = NULL;
  int rc = strata_irecv(comm, in, bytes, STRATA_U8, (rank - 1 + n) % n, &recv_req);
  if (rc) return rc;
  rc = strata_isend(comm, out, bytes, STRATA_U8, (rank + 1) % n, &send_req);
  int recv_rc = strata_request_wait(recv_req);
  int send_rc = rc ? rc : strata_request_wait(send_req);
  return send_rc ? send_rc : recv_rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* Median seconds of one ring shift of `bytes` (each repetition `shifts` shifts). */
static int cal_shift_s(strata_comm *comm, char *out, char *in, size_t bytes, int shifts,
                       double *seconds) {
  double t[CAL_REPEATS];
  int rc = cal_ring_shift(comm, out, in, bytes); /* warm-up: pages, connections */
  if (!rc) rc = strata_barrier(comm);
  for (int r = 0; !rc && r < CAL_REPEATS; r++) {
    double start_s = strata_now_s();
    for (int i = 0; !rc && i < shifts; i++) rc = cal_ring_shift(comm, out, in, bytes);
    t[r] = (strata_now_s() - start_s) / shifts;
  }
  if (!rc) *seconds = median(t, CAL_REPEATS);
  return rc;
}

/* Median seconds of dst = a OP b (op_fn) or dst = a (op_fn NULL) over `bytes`. */
static double cal_local_s(strata_reduce_fn op_fn, char *dst, const char *a, const char *b,
                          size_t bytes, size_t elem_size) {
  double t[CAL_REPEATS];
  for (int r = 0; r < CAL_REPEATS; r++) {
    double start_s = strata_now_s();
    if (op_fn)
      op_fn(dst, a, b, bytes / elem_size);
    else
      memcpy(dst, a, bytes);
    t[r] = strata_now_s() - start_s;
  }
  return median(t, CAL_REPEATS);
}

static void cal_transport(strata_comm *comm, strata_host_links *out) {
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);
  const strata_config *cfg = strata_comm_config(comm);
  out->use_tcp = 0;
  for (int peer = 0; peer < n; peer++) {
    const char *name = peer == rank ? "self" : strata_comm_transport_name(comm, peer);
    if (name && !strcmp(name, "tcp")) out->use_tcp = 1;
  }
  out->chunk_bytes = cfg ? cfg->chunk_bytes : 0; /* the communicator resolved its default */
  out->algo = cfg ? cfg->algo : STRATA_ALGO_AUTO;
}

int strata_host_calibrate(strata_comm *comm, strata_dtype dtype, strata_op op,
                          strata_host_links *out) {
  if (!comm || !out) return STRATA_ERR_INVALID_ARG;
  strata_reduce_fn kernel = strata_reduce_kernel(dtype, op);
  size_t elem = strata_dtype_size(dtype);
  if (!kernel || elem == 0) return STRATA_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  out->nranks = strata_comm_size(comm);
  cal_transport(comm, out);
  size_t bytes = (size_t)STRATA_HOST_CALIBRATE_BYTES;
  char *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes), *c = aligned_alloc(64, bytes);
  int local_ok = a && b && c, all_ok = 0;
  if (local_ok) {
    memset(a, 0, bytes); /* touch every page; zeros are exact in every dtype */
    memset(b, 0, bytes);
    memset(c, 0, bytes);
  }
  int rc = strata_allreduce(comm, &local_ok, &all_ok, 1, STRATA_I32, STRATA_MIN);
  if (!rc && !all_ok) rc = STRATA_ERR_NO_MEMORY;
  /* slowest rank's medians: small shift, large shift, reduce, memcpy */
  double s[4] = {0, 0, 0, 0}, worst[4] = {0, 0, 0, 0};
  if (!rc) rc = strata_barrier(comm);
  if (!rc) {
    s[2] = cal_local_s(kernel, c, a, b, bytes, elem);
    s[3] = cal_local_s(NULL, c, a, NULL, bytes, 1);
  }
  if (!rc && out->nranks > 1)
    rc = cal_shift_s(comm, a, b, CAL_SMALL_BYTES, CAL_SMALL_SHIFTS, &s[0]);
  if (!rc && out->nranks > 1) rc = cal_shift_s(comm, a, b, bytes, 1, &s[1]);
  if (!rc) rc = strata_allreduce(comm, s, worst, 4, STRATA_F64, STRATA_MAX);
  free(a);
  free(b);
  free(c);
  if (rc) return rc;
  double gb = (double)bytes / 1e9;
  out->alpha_us = worst[0] * 1e6;
  out->reduce_gbps = worst[2] > 0 ? gb / worst[2] : 0;
  out->memcpy_gbps = worst[3] > 0 ? gb / worst[3] : 0;
  if (out->nranks > 1)
    out->link_gbps = worst[1] > 0 ? gb * (out->use_tcp ? 2 : 1) / worst[1] : 0;
  else
    out->link_gbps = out->memcpy_gbps;
  return out->link_gbps > 0 ? STRATA_OK : STRATA_ERR_SYSTEM;
}
