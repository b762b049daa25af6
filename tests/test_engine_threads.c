// SPDX-License-Identifier: Apache-2.0
/*
 * test_engine_threads.c — the engine under concurrency: many non-blocking operations in flight,
 * completed by the background progress thread, polled with strata_request_test and waited on from
 * several threads at once. Built also under ThreadSanitizer.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers/ranks.h"

enum { OPS = 48, COUNT = 4099 };

typedef struct waiter {
  strata_request **reqs;
  int first, step;
  int failures;
} waiter;

static void *wait_some(void *arg) {
  waiter *w = arg;
  for (int k = w->first; k < OPS; k += w->step)
    if (strata_request_wait(w->reqs[k]) != STRATA_OK) w->failures++;
  return NULL;
}

static int body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  int failures = 0;
  int *bufs = malloc(sizeof(int) * OPS * COUNT);
  strata_request *reqs[OPS];
  for (int k = 0; k < OPS; k++) {
    for (int i = 0; i < COUNT; i++) bufs[k * COUNT + i] = rank + k + i;
    if (strata_iallreduce(comm, bufs + k * COUNT, bufs + k * COUNT, COUNT, STRATA_I32, STRATA_SUM,
                          &reqs[k]) != STRATA_OK)
      return 1;
  }
  /* let the progress thread alone complete a few before anyone waits */
  usleep(20000);
  int done_by_test = 0;
  while (strata_request_test(reqs[0]) == STRATA_ERR_IN_PROGRESS) usleep(100);
  done_by_test = 1;
  waiter ws[3];
  pthread_t threads[3];
  for (int t = 0; t < 3; t++) {
    ws[t] = (waiter){.reqs = reqs, .first = 1 + t, .step = 3};
    pthread_create(&threads[t], NULL, wait_some, &ws[t]);
  }
  for (int t = 0; t < 3; t++) {
    pthread_join(threads[t], NULL);
    failures += ws[t].failures;
  }
  for (int k = 0; k < OPS; k++)
    for (int i = 0; i < COUNT; i++) {
      int want = n * (k + i) + n * (n - 1) / 2;
      if (bufs[k * COUNT + i] != want) {
        fprintf(stderr, "rank %d: op %d element %d: %d != %d\n", rank, k, i, bufs[k * COUNT + i],
                want);
        failures++;
        break;
      }
    }
  free(bufs);
  return failures != 0 || !done_by_test;
}

int main(void) {
  int failed = 0;
  for (int shm = 1; shm >= 0; shm--)
    for (int n = 2; n <= 3; n++) {
      strata_test_ranks_opts o = {.shm = shm, .timeout_s = 20, .deadline_s = 120};
      int bad = strata_test_run_ranks(n, &o, body, NULL);
      printf("%s %d ranks: %s\n", shm ? "shm" : "tcp", n, bad ? "FAILED" : "ok");
      failed += bad != 0;
    }
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
