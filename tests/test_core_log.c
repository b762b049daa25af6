// SPDX-License-Identifier: Apache-2.0
/*
 * test_core_log.c — the log line format and its thread safety: stderr is redirected to a
 * temporary file, four threads log concurrently, and every line must come out whole, in the
 * form "strata[<rank>] <host>:<pid> <LEVEL>: <message>". Lines above the level are dropped.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "helpers/check.h"

enum { THREADS = 4, LINES_PER_THREAD = 2000 };

static void *log_thread(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < LINES_PER_THREAD; i++)
    STRATA_LOG(STRATA_LOG_INFO, id, "thread %d line %d %s", id, i, "payload-payload-payload");
  return NULL;
}

static void check_line(const char *line, const char *host, long pid, int *seen) {
  int rank = -1, thread = -1, index = -1, consumed = 0;
  char prefix[160];
  if (sscanf(line, "strata[%d] %159s INFO: thread %d line %d payload-payload-payload\n%n", &rank,
             prefix, &thread, &index, &consumed) != 4 ||
      line[consumed] != '\0') {
    CHECK(0, "malformed line: %s", line);
    return;
  }
  char want[160];
  snprintf(want, sizeof want, "%s:%ld", host, pid);
  CHECK(strcmp(prefix, want) == 0, "host:pid is '%s', want '%s'", prefix, want);
  CHECK(rank == thread && thread >= 0 && thread < THREADS && index >= 0 && index < LINES_PER_THREAD,
        "bad fields: %s", line);
  if (rank == thread && thread >= 0 && thread < THREADS && index >= 0 && index < LINES_PER_THREAD)
    seen[thread * LINES_PER_THREAD + index]++;
}

int main(void) {
  char path[] = "/tmp/strata_test_log_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return perror("mkstemp"), 1;
  fflush(stderr);
  int saved_stderr = dup(2);
  dup2(fd, 2);

  strata_log_set_level(STRATA_LOG_INFO);
  STRATA_LOG(STRATA_LOG_DEBUG, 0, "this must not appear");
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; t++)
    pthread_create(&threads[t], NULL, log_thread, (void *)(intptr_t)t);
  for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  strata_log_write(STRATA_LOG_WARN, -1, "no rank here\n");
  char big[3000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  strata_log_write(STRATA_LOG_ERROR, 1, "%s", big);
  fflush(stderr);
  dup2(saved_stderr, 2);

  char host[64] = "";
  gethostname(host, sizeof host - 1);
  char *dot = strchr(host, '.');
  if (dot) *dot = '\0';
  FILE *in = fopen(path, "r");
  if (!in) return perror("fopen"), 1;
  static int seen[THREADS * LINES_PER_THREAD];
  char line[4096];
  int lines = 0, saw_no_rank = 0, saw_truncated = 0;
  while (fgets(line, sizeof line, in)) {
    lines++;
    if (strstr(line, "must not appear"))
      CHECK(0, "a DEBUG line passed an INFO level");
    else if (strncmp(line, "strata ", 7) == 0)
      saw_no_rank = strstr(line, " WARN: no rank here\n") != NULL;
    else if (strstr(line, " ERROR: xxx"))
      saw_truncated = strlen(line) < 1100 && strstr(line, "...\n");
    else
      check_line(line, host, (long)getpid(), seen);
  }
  fclose(in);
  unlink(path);
  CHECK(lines == THREADS * LINES_PER_THREAD + 2, "%d lines, want %d", lines,
        THREADS * LINES_PER_THREAD + 2);
  for (int i = 0; i < THREADS * LINES_PER_THREAD; i++)
    CHECK(seen[i] == 1, "line %d of thread %d seen %d times", i % LINES_PER_THREAD,
          i / LINES_PER_THREAD, seen[i]);
  CHECK(saw_no_rank, "rank -1 line is not 'strata host:pid WARN: ...' with one newline");
  CHECK(saw_truncated, "an over-long line is not truncated with '...'");
  if (failures) {
    printf("test_core_log: %d failures\n", failures);
    return 1;
  }
  printf("test_core_log: ok\n");
  return 0;
}
