/*
 * shared_write.c — the host's shared-write spells without strata (docs/model.md, session 15).
 *
 * Two processes, one per CPU (0 and 1), no strata code on the data path. Per window it prints:
 *   shared   µs to rewrite 1 MiB whose lines the other process has just read (each line is
 *            taken back from the other core first), the mean of 20;
 *   private  µs to rewrite the same 1 MiB again at once (the lines this core's alone);
 *   call     the median µs of 50 calls of a 2-rank allreduce's traffic done by hand: each
 *            process pulls the peer's half of a BYTES send buffer with process_vm_readv in
 *            256 KiB blocks, adds it into its receive buffer, and after a barrier pulls the
 *            peer's reduced half (what the engine's shm ring does, minus the engine).
 * On the 2-core AMD EPYC VM of session 15 (1 MiB) the windows came in spells of seconds to
 * minutes: shared 85-143 us/MiB, private 12-22, call 113-157 us; shared 405-665, private 14-48,
 * call 343-476; once a run at shared 15-16 (no dearer than private), call 142-143. The call
 * followed the shared figure in every window but one (shared 380, call 149).
 *
 * usage: build/strata-shared-write [BYTES_KiB] [WINDOWS]   (defaults 1024, 10)
 * Exit status 1 if the processes cannot be set up (no second CPU, process_vm_readv refused).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { PROBE_REPS = 20, CALLS = 50, BLOCK = 256 << 10 };

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* A two-process barrier on a shared counter: generation g is passed when both arrived. A
 * process that fails sets `failed`, which releases the other from any barrier (no hang). */
static atomic_long *arrived, *failed;
static int barrier(long *generation) {
  long g = ++*generation;
  atomic_fetch_add(arrived, 1);
  while (atomic_load(arrived) < 2 * g)
    if (atomic_load(failed))
      return -1;
    else
      sched_yield();
  return 0;
}

static int pull(pid_t peer, void *local, const void *remote, size_t bytes) {
  struct iovec l = {local, bytes}, r = {(void *)remote, bytes};
  return process_vm_readv(peer, &l, 1, &r, 1, 0) == (ssize_t)bytes ? 0 : -1;
}

int main(int argc, char **argv) {
  size_t bytes = (size_t)(argc > 1 ? atol(argv[1]) : 1024) << 10;
  int windows = argc > 2 ? atoi(argv[2]) : 10;
  if (bytes < 2 * BLOCK || bytes % (2 * BLOCK) || windows < 1) {
    fprintf(stderr, "usage: strata-shared-write [BYTES_KiB: a multiple of 512] [WINDOWS]\n");
    return 2;
  }
  const size_t probe_bytes = 1 << 20;
  arrived = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  uint64_t *probe =
      mmap(NULL, probe_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (arrived == MAP_FAILED || probe == MAP_FAILED) return 1;
  failed = arrived + 8; /* its own cache line */
  memset(probe, 0, probe_bytes);
  pid_t parent = getpid(), child = fork();
  if (child < 0) return 1;
  int rank = child ? 0 : 1;
  pid_t peer = child ? child : parent;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(rank, &cpus);
  /* the same addresses in both processes: allocated after the fork, in the same order */
  float *send = malloc(bytes), *recv = malloc(bytes);
  if (sched_setaffinity(0, sizeof cpus, &cpus) != 0 || !send || !recv) {
    perror(!send || !recv ? "malloc" : "sched_setaffinity (two CPUs needed)");
    atomic_store(failed, 1);
    if (child) waitpid(child, NULL, 0);
    return 1;
  }
  for (size_t i = 0; i < bytes / sizeof *send; i++) send[i] = (float)(i % 7), recv[i] = 0;
  long generation = 0;
  volatile uint64_t sink = 0;
  double t[CALLS];
  size_t half = bytes / 2;
  int status = barrier(&generation);
  for (int w = 0; w < windows && !status; w++) {
    double shared = 0, private_us = 0;
    for (int k = 0; k < PROBE_REPS && !status; k++) {
      status = barrier(&generation);
      if (rank == 0) {
        double a = now_us();
        memset(probe, k, probe_bytes);
        double b = now_us();
        memset(probe, k + 1, probe_bytes);
        shared += b - a;
        private_us += now_us() - b;
      }
      if (!status) status = barrier(&generation);
      if (rank == 1) { /* read every line: they are now in both cores' caches */
        uint64_t x = 0;
        for (size_t i = 0; i < probe_bytes / sizeof *probe; i += 8) x += probe[i];
        sink = x;
      }
    }
    for (int c = 0; c < CALLS && !status; c++) {
      double a = now_us();
      char *mine_send = (char *)send + (size_t)rank * half;
      char *mine_recv = (char *)recv + (size_t)rank * half;
      char *other_recv = (char *)recv + (size_t)(1 - rank) * half;
      for (size_t o = 0; o < half && !status; o += BLOCK) {
        status = pull(peer, mine_recv + o, mine_send + o, BLOCK); /* the peer's copy of my half */
        float *x = (float *)(mine_recv + o), *y = (float *)(mine_send + o);
        for (size_t i = 0; i < BLOCK / sizeof *x; i++) x[i] += y[i];
      }
      if (!status) status = barrier(&generation);
      if (!status) status = pull(peer, other_recv, other_recv, half);
      if (!status) status = barrier(&generation);
      t[c] = now_us() - a;
    }
    qsort(t, CALLS, sizeof *t, cmp_double);
    if (rank == 0 && !status) {
      printf("window %d: shared %.0f us/MiB, private %.0f, call %.0f us (%zu KiB allreduce)\n", w,
             shared / PROBE_REPS, private_us / PROBE_REPS, t[CALLS / 2], bytes >> 10);
      fflush(stdout);
    }
  }
  if (status) {
    if (!atomic_load(failed)) perror("process_vm_readv");
    atomic_store(failed, 1);
  }
  (void)sink;
  if (child) {
    int child_status = 0;
    waitpid(child, &child_status, 0);
    if (!WIFEXITED(child_status) || WEXITSTATUS(child_status)) status = 1;
  }
  return status ? 1 : 0;
}
