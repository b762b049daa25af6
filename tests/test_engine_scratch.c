// SPDX-License-Identifier: Apache-2.0
/*
 * test_engine_scratch.c — a communicator's scratch cache (engine.c, "scratch"): buffers given
 * back are taken again instead of new ones, the smallest that fits is chosen, and at most
 * STRATA_SCRATCH_CACHE are kept (the largest). Driven on a bare communicator (only its lock and
 * cache are used). That schedules stay right with stale bytes in a reused scratch is coll_matrix's
 * part: it runs every collective many times on one communicator and checks every result.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "helpers/check.h"

static void test_take_give(void) {
  strata_comm *comm = calloc(1, sizeof *comm);
  CHECK(comm != NULL, "calloc");
  if (!comm) return;
  pthread_mutex_init(&comm->scratch_lock, NULL);

  uint64_t cap_a = 0, cap_b = 0, cap = 0;
  void *a = strata_scratch_take(comm, 1000, &cap_a);
  CHECK(a != NULL && cap_a >= 1000 && ((uintptr_t)a % 64) == 0, "take 1000: %p cap %llu", a,
        (unsigned long long)cap_a);
  memset(a, 0xab, cap_a); /* the whole capacity is ours (ASan checks) */
  void *b = strata_scratch_take(comm, 1 << 20, &cap_b);
  CHECK(b != NULL && b != a && cap_b >= (1u << 20), "second take");

  /* nothing cached yet: a third take is new memory */
  void *c = strata_scratch_take(comm, 64, &cap);
  CHECK(c != NULL && c != a && c != b, "third take while both are out");
  strata_scratch_give(comm, a, cap_a);
  strata_scratch_give(comm, b, cap_b);
  /* the cache is full (2): c, the smallest, is freed rather than kept */
  strata_scratch_give(comm, c, cap);

  /* the smallest buffer that fits: 500 bytes -> a (1000), not b (1 MiB) */
  void *got = strata_scratch_take(comm, 500, &cap);
  CHECK(got == a && cap == cap_a, "take 500 got %p (a %p, b %p), cap %llu", got, a, b,
        (unsigned long long)cap);
  strata_scratch_give(comm, got, cap);
  /* 4 KiB: only b fits */
  got = strata_scratch_take(comm, 4096, &cap);
  CHECK(got == b && cap == cap_b, "take 4096 got %p (b %p)", got, b);
  strata_scratch_give(comm, got, cap);
  /* larger than anything cached: new memory, and when given back it evicts the smaller (a) */
  uint64_t cap_d = 0;
  void *d = strata_scratch_take(comm, 2 << 20, &cap_d);
  CHECK(d != NULL && d != a && d != b && cap_d >= (2u << 20), "take 2 MiB");
  strata_scratch_give(comm, d, cap_d);
  int has_a = 0, has_b = 0, has_d = 0;
  for (int i = 0; i < STRATA_SCRATCH_CACHE; i++) {
    has_a += comm->scratch_cache[i] == a;
    has_b += comm->scratch_cache[i] == b;
    has_d += comm->scratch_cache[i] == d;
  }
  CHECK(!has_a && has_b && has_d, "cache after 2 MiB given back: a %d b %d d %d", has_a, has_b,
        has_d);
  strata_scratch_release(comm);
  for (int i = 0; i < STRATA_SCRATCH_CACHE; i++)
    CHECK(comm->scratch_cache[i] == NULL, "slot %d not released", i);
  pthread_mutex_destroy(&comm->scratch_lock);
  free(comm);
}

int main(void) {
  test_take_give();
  if (failures)
    fprintf(stderr, "test_engine_scratch: %d failure(s)\n", failures);
  else
    printf("test_engine_scratch: ok\n");
  return failures != 0;
}
