// SPDX-License-Identifier: Apache-2.0
/*
 * membw.c — the physical limit beside the shared-memory benchmarks: how fast this host copies
 * memory.
 *
 * Reports memcpy bandwidth (bytes copied per second, GB/s = 1e9 B/s) of one thread and of T
 * threads copying at once (each its own buffers), best of several repetitions over buffers far
 * larger than the caches. A shared-memory collective moves every byte through memory at least
 * once per copy, so its bus bandwidth can approach but not pass these figures (an allreduce of
 * 2 ranks over shm copies each byte in and reduces it: read two, write one).
 *
 * usage: membw [-s SIZE_MiB] [-r REPS] [-t THREADS] [-J FILE]   (prints JSON on stdout too)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct membw_job {
  size_t bytes;
  int reps;
  pthread_barrier_t *start;
  double best_s;
} membw_job;

static double membw_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *membw_copy_thread(void *arg) {
  membw_job *job = arg;
  char *src = malloc(job->bytes), *dst = malloc(job->bytes);
  job->best_s = 0;
  if (!src || !dst) goto done;
  memset(src, 1, job->bytes); /* fault every page in before timing */
  memset(dst, 2, job->bytes);
  for (int i = 0; i < job->reps; i++) {
    if (job->start) pthread_barrier_wait(job->start);
    double start_s = membw_now_s();
    memcpy(dst, src, job->bytes);
    double elapsed_s = membw_now_s() - start_s;
    src[(size_t)i % job->bytes] = dst[job->bytes - 1]; /* the copy is observed */
    if (job->best_s == 0 || elapsed_s < job->best_s) job->best_s = elapsed_s;
  }
done:
  free(src);
  free(dst);
  return NULL;
}

/* Aggregate GB/s of `threads` threads copying `bytes` each, best repetition of each thread. */
static double membw_measure(int threads, size_t bytes, int reps) {
  pthread_t ids[64];
  membw_job jobs[64];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)threads);
  for (int t = 0; t < threads; t++) {
    jobs[t] = (membw_job){bytes, reps, &start, 0};
    pthread_create(&ids[t], NULL, membw_copy_thread, &jobs[t]);
  }
  double total_gbps = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(ids[t], NULL);
    if (jobs[t].best_s > 0) total_gbps += (double)bytes / jobs[t].best_s / 1e9;
  }
  pthread_barrier_destroy(&start);
  return total_gbps;
}

int main(int argc, char **argv) {
  long size_mib = 256, reps = 5, threads = sysconf(_SC_NPROCESSORS_ONLN);
  const char *json_path = NULL;
  int opt;
  while ((opt = getopt(argc, argv, "s:r:t:J:")) != -1) {
    switch (opt) {
      case 's':
        size_mib = atol(optarg);
        break;
      case 'r':
        reps = atol(optarg);
        break;
      case 't':
        threads = atol(optarg);
        break;
      case 'J':
        json_path = optarg;
        break;
      default:
        fprintf(stderr, "usage: membw [-s SIZE_MiB] [-r REPS] [-t THREADS] [-J FILE]\n");
        return 2;
    }
  }
  if (size_mib < 1 || reps < 1 || threads < 1 || threads > 64) {
    fprintf(stderr, "membw: -s, -r and -t must be >= 1 (-t <= 64)\n");
    return 2;
  }
  size_t bytes = (size_t)size_mib << 20;
  double one_gbps = membw_measure(1, bytes, (int)reps);
  double all_gbps = membw_measure((int)threads, bytes, (int)reps);
  char json[512];
  snprintf(json, sizeof json,
           "{\"tool\": \"membw\", \"buffer_bytes\": %zu, \"reps\": %ld, "
           "\"memcpy_1thread_gbps\": %.3f, \"threads\": %ld, \"memcpy_all_threads_gbps\": %.3f}\n",
           bytes, reps, one_gbps, threads, all_gbps);
  fputs(json, stdout);
  if (json_path) {
    FILE *out = fopen(json_path, "w");
    if (!out || fputs(json, out) < 0 || fclose(out) != 0) {
      perror(json_path);
      return 1;
    }
  }
  return one_gbps > 0 ? 0 : 1;
}
