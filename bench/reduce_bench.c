// SPDX-License-Identifier: Apache-2.0
/*
 * reduce_bench.c — throughput of strata's reduction kernels beside memcpy.
 *
 * Build and run from the repository root (standalone, no CMake needed):
 *
 *   gcc -std=gnu11 -O3 -D_GNU_SOURCE -Iinclude -Isrc bench/reduce_bench.c src/core/[a-z]*.c \
 *       -o build/reduce_bench -lm -lpthread -lsodium
 *   build/reduce_bench [bytes per buffer, default 64 MiB] [iterations, default 10]
 *
 * For each instruction-set build (generic, avx2), dtype and op it times dst = a OP b out of
 * place and dst = dst OP b in place (the engine's common case), best of the iterations, and
 * prints two rates: "buf GB/s" = bytes of one buffer per second (what a collective's bandwidth
 * sees), and "mem GB/s" = bytes read plus written (a and b read, dst written: 3 buffers, in
 * place too). memcpy is printed first on the same buffers (2 buffers of
 * memory traffic) as the ceiling a memory-bound kernel can reach. A second pass uses 256 KiB
 * buffers, which stay in cache like a pipelined chunk, to show the compute-bound rate. The
 * public f16/bf16 array conversions are timed too. On a loaded machine take the best of several
 * runs: every figure is already the best of its iterations.
 * This is a benchmark, not a test: it checks nothing and its numbers depend on the machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static double best_time_s(strata_reduce_fn kernel, void *dst, const void *a, const void *b,
                          size_t count, int iterations) {
  double best = 1e30;
  for (int i = 0; i < iterations; i++) {
    double t0 = strata_now_s();
    kernel(dst, a, b, count);
    double t = strata_now_s() - t0;
    if (t < best) best = t;
  }
  return best;
}

static double memcpy_time_s(void *dst, const void *src, size_t bytes, int iterations) {
  double best = 1e30;
  for (int i = 0; i < iterations; i++) {
    double t0 = strata_now_s();
    memcpy(dst, src, bytes);
    double t = strata_now_s() - t0;
    if (t < best) best = t;
  }
  return best;
}

/* Inputs that keep every op finite and away from subnormals (slow paths are not the point). */
static void fill_ones(void *buf, size_t bytes, strata_dtype dtype) {
  size_t size = strata_dtype_size(dtype), count = bytes / size;
  for (size_t i = 0; i < count; i++) {
    unsigned char *e = (unsigned char *)buf + i * size;
    switch (dtype) {
      case STRATA_F16:
        *(uint16_t *)e = strata_f32_to_f16(1.0f);
        break;
      case STRATA_BF16:
        *(uint16_t *)e = strata_f32_to_bf16(1.0f);
        break;
      case STRATA_F32:
        *(float *)e = 1.0f;
        break;
      case STRATA_F64:
        *(double *)e = 1.0;
        break;
      default:
        memset(e, 0, size);
        e[0] = 1;
        break;
    }
  }
}

typedef void (*convert_fn)(void *dst, const void *src, size_t count);

static void widen_f16(void *dst, const void *src, size_t n) {
  strata_f16_to_f32_array(dst, src, n);
}
static void narrow_f16(void *dst, const void *src, size_t n) {
  strata_f32_to_f16_array(dst, src, n);
}
static void widen_bf16(void *dst, const void *src, size_t n) {
  strata_bf16_to_f32_array(dst, src, n);
}
static void narrow_bf16(void *dst, const void *src, size_t n) {
  strata_f32_to_bf16_array(dst, src, n);
}

/* The public array conversions (on-wire f16/bf16 compression uses them): rate in f32 bytes. */
static void run_conversions(unsigned char *wide, unsigned char *narrow, size_t bytes, int reps) {
  static const struct {
    const char *name;
    convert_fn fn;
    int to_narrow;
  } conversions[] = {{"f16->f32", widen_f16, 0},
                     {"f32->f16", narrow_f16, 1},
                     {"bf16->f32", widen_bf16, 0},
                     {"f32->bf16", narrow_bf16, 1}};
  size_t count = bytes / sizeof(float);
  fill_ones(wide, bytes, STRATA_F32);
  fill_ones(narrow, bytes / 2, STRATA_F16);
  for (size_t c = 0; c < sizeof conversions / sizeof conversions[0]; c++) {
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
      double t0 = strata_now_s();
      if (conversions[c].to_narrow)
        conversions[c].fn(narrow, wide, count);
      else
        conversions[c].fn(wide, narrow, count);
      double t = strata_now_s() - t0;
      if (t < best) best = t;
    }
    printf("%-8s %-11s %10.2f f32 GB/s\n", "convert", conversions[c].name, bytes / best / 1e9);
  }
}

static void run_size(size_t bytes, int iterations) {
  unsigned char *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes),
                *dst = aligned_alloc(64, bytes);
  if (!a || !b || !dst) {
    fprintf(stderr, "reduce_bench: cannot allocate 3 x %zu bytes\n", bytes);
    exit(1);
  }
  memset(a, 1, bytes);
  memset(b, 1, bytes);
  memset(dst, 0, bytes);
  int reps = iterations * (bytes < (1u << 20) ? 20 : 1);
  double t = memcpy_time_s(dst, a, bytes, reps);
  printf("\n# %zu bytes per buffer\n%-8s %-5s %-5s %12s %12s %12s %12s\n", bytes, "isa", "type",
         "op", "buf GB/s", "mem GB/s", "inpl buf", "inpl mem");
  printf("%-8s %-5s %-5s %12.2f %12.2f\n", "memcpy", "-", "-", bytes / t / 1e9,
         2 * bytes / t / 1e9);
  run_conversions(a, b, bytes, reps);
  static const char *const isas[] = {"generic", "avx2"};
  for (int s = 0; s < 2; s++)
    for (int d = 0; d < STRATA_DTYPE_COUNT; d++)
      for (int o = 0; o < STRATA_OP_COUNT; o++) {
        /* avg is the sum kernel; a float dtype has no bitwise kernel (NULL) */
        strata_reduce_fn k = strata_reduce_kernel_isa((strata_dtype)d, (strata_op)o, isas[s]);
        if (!k || o == STRATA_AVG) continue;
        size_t count = bytes / strata_dtype_size((strata_dtype)d);
        fill_ones(a, bytes, (strata_dtype)d);
        fill_ones(b, bytes, (strata_dtype)d);
        double out_s = best_time_s(k, dst, a, b, count, reps);
        double in_s = best_time_s(k, a, a, b, count, reps);
        printf("%-8s %-5s %-5s %12.2f %12.2f %12.2f %12.2f\n", isas[s],
               strata_dtype_name((strata_dtype)d), strata_op_name((strata_op)o),
               bytes / out_s / 1e9, 3 * bytes / out_s / 1e9, bytes / in_s / 1e9,
               3 * bytes / in_s / 1e9);
      }
  free(a);
  free(b);
  free(dst);
}

int main(int argc, char **argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)64 << 20;
  int iterations = argc > 2 ? atoi(argv[2]) : 10;
  if (bytes < 64 || iterations < 1) {
    fprintf(stderr, "usage: reduce_bench [bytes >= 64] [iterations >= 1]\n");
    return 2;
  }
  bytes = bytes / 64 * 64;
  run_size(bytes, iterations);
  run_size((size_t)256 << 10, iterations);
  return 0;
}
