// SPDX-License-Identifier: Apache-2.0
/*
 * test_comm_chunk_agree.c — the ranks of a communicator cut every schedule by the same chunk,
 * whatever each proposed (sites.c). Ranks that disagree build different schedules and the first
 * collective longer than the smallest chunk fails with STRATA_ERR_MISMATCH (a loaded rank can
 * measure a WAN-like round trip over loopback and choose another chunk).
 *  - 4 ranks over TCP, each given another chunk (64, 192, 320, 128 KiB): every rank ends with
 *    320 KiB, and a ring allreduce of 1 MiB + 3 floats, cut into pieces by it, sums right;
 *  - 3 ranks over shm, rank 1 given 1 MiB and the others the default: every rank ends with the
 *    largest proposal (the shm default) and a 4 MiB ring allreduce sums right;
 *  - 2 ranks of this host over TCP, no chunk given: 1 MiB, loopback's (comm.c,
 *    default_chunk_bytes; a LAN peer in another host or namespace would get 64 KiB).
 */
#include <stdio.h>
#include <stdlib.h>

#include "helpers/ranks.h"
#include "strata.h"

enum { KIB = 1024 };
static const uint64_t tcp_chunks[4] = {64 * KIB, 192 * KIB, 320 * KIB, 128 * KIB};

static void tcp_tweak(strata_config *cfg, int rank, void *arg) {
  (void)arg;
  cfg->chunk_bytes = tcp_chunks[rank];
}

static void shm_tweak(strata_config *cfg, int rank, void *arg) {
  (void)arg;
  cfg->chunk_bytes = rank == 1 ? 1024 * KIB : 0;
}

typedef struct expect {
  uint64_t chunk; /* 0 = at least the largest given */
  size_t count;
} expect;

static int body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  const expect *e = arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  int bad = 0;
  uint64_t chunk = strata_comm_config(comm)->chunk_bytes;
  if (e->chunk ? chunk != e->chunk : chunk < 1024 * KIB) {
    fprintf(stderr, "rank %d: chunk %llu B, want %llu\n", rank, (unsigned long long)chunk,
            (unsigned long long)e->chunk);
    bad++;
  }
  /* every rank must hold the same chunk: a max and a min agree only then */
  uint64_t hi = 0, lo = 0;
  int rc = strata_allreduce(comm, &chunk, &hi, 1, STRATA_U64, STRATA_MAX);
  if (rc == STRATA_OK) rc = strata_allreduce(comm, &chunk, &lo, 1, STRATA_U64, STRATA_MIN);
  if (rc != STRATA_OK || hi != lo) {
    fprintf(stderr, "rank %d: chunks differ: %llu..%llu (%s)\n", rank, (unsigned long long)lo,
            (unsigned long long)hi, strata_strerror(rc));
    bad++;
  }
  float *in = malloc(e->count * sizeof *in), *out = malloc(e->count * sizeof *out);
  if (!in || !out) return 1;
  for (size_t i = 0; i < e->count; i++) in[i] = (float)((rank + 1) * (i % 97));
  strata_coll_args a = {.coll = STRATA_COLL_ALLREDUCE,
                        .sendbuf = in,
                        .recvbuf = out,
                        .count = e->count,
                        .dtype = STRATA_F32,
                        .op = STRATA_SUM,
                        .algo = STRATA_ALGO_RING};
  rc = strata_collective(comm, &a, NULL);
  if (rc != STRATA_OK) {
    fprintf(stderr, "rank %d: ring allreduce: %s\n", rank, strata_strerror(rc));
    bad++;
  }
  for (size_t i = 0; rc == STRATA_OK && i < e->count; i++) {
    float want = (float)(n * (n + 1) / 2 * (int)(i % 97));
    if (out[i] != want) {
      fprintf(stderr, "rank %d: element %zu: %g, want %g\n", rank, i, out[i], want);
      bad++;
      break;
    }
  }
  free(in);
  free(out);
  return bad != 0;
}

int main(void) {
  int failed = 0;
  expect tcp = {.chunk = 320 * KIB, .count = (1u << 18) + 3};
  strata_test_ranks_opts o = {.shm = 0, .timeout_s = 20, .deadline_s = 60, .tweak = tcp_tweak};
  int bad = strata_test_run_ranks(4, &o, body, &tcp);
  printf("tcp 4 ranks, chunks 64/192/320/128 KiB: %s\n", bad ? "FAILED" : "ok");
  failed += bad != 0;
  expect shm = {.chunk = 0, .count = 1u << 20};
  o = (strata_test_ranks_opts){.shm = 1, .timeout_s = 20, .deadline_s = 60, .tweak = shm_tweak};
  bad = strata_test_run_ranks(3, &o, body, &shm);
  printf("shm 3 ranks, rank 1 chunk 1 MiB, the others the default: %s\n", bad ? "FAILED" : "ok");
  failed += bad != 0;
  expect loopback = {.chunk = 1024 * KIB, .count = (1u << 20) + 5};
  o = (strata_test_ranks_opts){.shm = 0, .timeout_s = 20, .deadline_s = 60};
  bad = strata_test_run_ranks(2, &o, body, &loopback);
  printf("tcp 2 ranks of one host, the default chunk: %s\n", bad ? "FAILED" : "ok");
  failed += bad != 0;
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
