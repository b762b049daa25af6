// SPDX-License-Identifier: Apache-2.0
/*
 * mpi_allreduce.c — OpenMPI's MPI_Allreduce measured the way `strata bench` measures strata, so
 * bench/run.sh can put the two side by side.
 *
 * The method is strata bench's (itself nccl-tests'): for each size, out-of-place then in-place
 * (MPI_IN_PLACE): fill, one untimed call, barrier, N timed calls, the per-rank mean time, the
 * max over ranks (MPI_Allreduce MAX), busbw = size/time x 2(n-1)/n. Then a check: every rank
 * fills rank+1+index%7, runs one call and counts elements that differ from the expected sum.
 * Float32 sum only. Rank 0 prints nccl-tests-shaped rows and, with -J, the JSON strata bench -J
 * writes (same keys), so bench/report.py reads both alike.
 *
 * -R allocates the buffers with MPI_Alloc_mem (OpenMPI's registered memory), the peer of
 * `strata bench -R 1` (strata_mem_alloc).
 *
 * usage: mpirun -np N mpi_allreduce [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-J F]
 *        [-R]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct figures {
  double time_us, algbw_gbps, busbw_gbps;
  long wrong;
} figures;

static int parse_size(const char *text, size_t *out) {
  char *end = NULL;
  double value = strtod(text, &end);
  if (end == text || !(value >= 0)) return -1;
  double unit = 1;
  if (*end == 'K' || *end == 'k') unit = 1024.0;
  if (*end == 'M' || *end == 'm') unit = 1024.0 * 1024;
  if (*end == 'G' || *end == 'g') unit = 1024.0 * 1024 * 1024;
  if (unit > 1) end++;
  if (*end) return -1;
  *out = (size_t)(value * unit);
  return 0;
}

static void fill(float *buf, size_t count, int rank) {
  for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1 + (int)(i % 7));
}

/* One configuration: timed loop then check, as strata bench's bench_time. */
static figures measure(float *send, float *recv, size_t count, int in_place, int iters, int rank,
                       int nranks) {
  figures fig = {0, 0, 0, 0};
  const void *src = in_place ? MPI_IN_PLACE : send;
  fill(in_place ? recv : send, count, rank);
  MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double start_s = MPI_Wtime();
  for (int i = 0; i < iters; i++)
    MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double seconds = (MPI_Wtime() - start_s) / iters;
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  double bytes = (double)count * sizeof(float);
  fig.time_us = seconds * 1e6;
  fig.algbw_gbps = seconds > 0 ? bytes / 1e9 / seconds : 0;
  fig.busbw_gbps = fig.algbw_gbps * 2.0 * (nranks - 1) / nranks;
  fill(in_place ? recv : send, count, rank);
  if (!in_place) memset(recv, 0, count * sizeof(float));
  MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  long wrong = 0;
  for (size_t i = 0; i < count; i++) {
    double want = (double)nranks * (nranks + 1) / 2 + (double)nranks * (double)(i % 7);
    if (recv[i] != (float)want) wrong++;
  }
  MPI_Allreduce(&wrong, &fig.wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return fig;
}

static void print_figures(const figures *f) {
  char time_text[32];
  if (f->time_us >= 10000.0)
    snprintf(time_text, sizeof time_text, "%7.0f", f->time_us);
  else if (f->time_us >= 100.0)
    snprintf(time_text, sizeof time_text, "%7.1f", f->time_us);
  else
    snprintf(time_text, sizeof time_text, "%7.2f", f->time_us);
  printf("  %7s  %6.2f  %6.2f  %5ld", time_text, f->algbw_gbps, f->busbw_gbps, f->wrong);
}

static void json_figures(FILE *out, const char *name, const figures *f) {
  fprintf(out,
          "\"%s\": {\"time_us\": %.3f, \"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, "
          "\"wrong\": %ld}",
          name, f->time_us, f->algbw_gbps, f->busbw_gbps, f->wrong);
}

static int usage(void) {
  fprintf(stderr,
          "usage: mpi_allreduce [-b MIN>=4] [-e MAX] [-f FACTOR>=2] [-n ITERS] "
          "[-w WARMUP] [-J FILE] [-R]\n");
  return 2;
}

int main(int argc, char **argv) {
  size_t min_bytes = 8, max_bytes = 32u << 20, factor = 2;
  int iters = 20, warmup = 5, registered = 0, opt;
  const char *json_path = NULL;
  while ((opt = getopt(argc, argv, "b:e:f:n:w:J:R")) != -1) {
    int bad = 0;
    if (opt == 'b')
      bad = parse_size(optarg, &min_bytes);
    else if (opt == 'e')
      bad = parse_size(optarg, &max_bytes);
    else if (opt == 'f')
      factor = (size_t)atol(optarg);
    else if (opt == 'n')
      iters = atoi(optarg);
    else if (opt == 'w')
      warmup = atoi(optarg);
    else if (opt == 'J')
      json_path = optarg;
    else if (opt == 'R')
      registered = 1;
    else
      bad = 1;
    if (bad) return usage();
  }
  if (optind < argc || factor < 2 || iters < 1 || warmup < 0 || min_bytes < 4 ||
      min_bytes > max_bytes || max_bytes / sizeof(float) > (size_t)INT32_MAX)
    return usage();
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  size_t max_count = max_bytes / sizeof(float);
  float *send = NULL, *recv = NULL;
  MPI_Aint buf_bytes = (MPI_Aint)(max_count * sizeof(float) + 64);
  if (registered) {
    if (MPI_Alloc_mem(buf_bytes, MPI_INFO_NULL, &send) != MPI_SUCCESS ||
        MPI_Alloc_mem(buf_bytes, MPI_INFO_NULL, &recv) != MPI_SUCCESS)
      MPI_Abort(MPI_COMM_WORLD, 1);
  } else {
    send = malloc((size_t)buf_bytes);
    recv = malloc((size_t)buf_bytes);
  }
  if (!send || !recv) MPI_Abort(MPI_COMM_WORLD, 1);
  memset(send, 0, max_count * sizeof(float));
  memset(recv, 0, max_count * sizeof(float));
  for (int i = 0; i < warmup; i++) {
    MPI_Allreduce(send, recv, (int)max_count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(send, recv, (int)(min_bytes / sizeof(float)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  FILE *json = NULL;
  if (rank == 0 && json_path) {
    json = fopen(json_path, "w");
    if (!json) {
      perror(json_path);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fprintf(
        json,
        "{\n  \"tool\": \"mpi_allreduce\",\n  \"collective\": \"allreduce\",\n  \"nranks\": %d,\n"
        "  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"results\": [",
        nranks, iters, warmup);
  }
  if (rank == 0) {
    printf("# mpi_allreduce: MPI_Allreduce float sum, %d ranks, iters %d warmup %d, buffers %s\n",
           nranks, iters, warmup, registered ? "MPI_Alloc_mem" : "malloc");
    printf(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong\n");
  }
  long errors = 0;
  double busbw_sum = 0;
  int busbw_count = 0, first = 1;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    size_t count = bytes / sizeof(float);
    figures out = measure(send, recv, count, 0, iters, rank, nranks);
    figures in = measure(send, recv, count, 1, iters, rank, nranks);
    errors += (out.wrong > 0) + (in.wrong > 0);
    busbw_sum += out.busbw_gbps + in.busbw_gbps;
    busbw_count += 2;
    if (rank == 0) {
      printf("%12zu  %12zu  %8s  %6s  %6i", count * sizeof(float), count, "float", "sum", -1);
      print_figures(&out);
      print_figures(&in);
      printf("\n");
      fflush(stdout);
    }
    if (json) {
      fprintf(json,
              "%s\n    {\"size_bytes\": %zu, \"count\": %zu, \"type\": \"float\", \"redop\": "
              "\"sum\", \"root\": -1, ",
              first ? "" : ",", count * sizeof(float), count);
      json_figures(json, "out_of_place", &out);
      fprintf(json, ", ");
      json_figures(json, "in_place", &in);
      fprintf(json, "}");
    }
    first = 0;
    if (bytes > max_bytes / factor) break;
  }
  if (rank == 0) {
    printf("# Out of bounds values : %ld %s\n", errors, errors ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", busbw_count ? busbw_sum / busbw_count : 0);
  }
  if (json) {
    fprintf(json, "\n  ],\n  \"out_of_bounds\": %ld,\n  \"avg_busbw_gbps\": %.6f\n}\n", errors,
            busbw_count ? busbw_sum / busbw_count : 0);
    fclose(json);
  }
  if (registered) {
    MPI_Free_mem(send);
    MPI_Free_mem(recv);
  } else {
    free(send);
    free(recv);
  }
  MPI_Finalize();
  return errors ? 1 : 0;
}
