// SPDX-License-Identifier: Apache-2.0
/*
 * bench.c — `strata bench COLL`: nccl-tests for strata.
 *
 * Reads every option of nccl-tests' *_perf binaries, release BENCH_NCCL_TESTS_VERSION (the
 * version its first line names; src/common.cu and src/util.cu there), with its defaults, and
 * prints what that release prints: the version and "Collective test starting" lines, the "#"
 * header, one row per size with out-of-place then in-place figures (time, algbw, busbw, #wrong;
 * with -I the per-iteration min, max, p99 and cv; with -S a timestamp), "# Out of bounds
 * values", "# Avg bus bandwidth" and "Collective test concluded". -J FILE writes that release's
 * JSON (the same keys and nesting, with a "strata" object added). What has no meaning on CPU
 * ranks is accepted and said so: -x (CTA policy) is ignored with a note, -D above 0 (a device
 * implementation) is refused, -G only takes 0, -t and -g only 1; -M reports host memory (the
 * ranks' resident set) where nccl-tests reports GPU memory. Called through a link named after a
 * nccl-tests binary (all_reduce_perf, all_gather_perf, ...; tools/main.c), the command is that
 * test. A script written for nccl-tests runs unchanged. --predict adds the cost model's busbw
 * beside the measured one.
 *
 * What the numbers mean (as nccl-tests, src/common.cu, src/<coll>.cu and
 * doc/PERFORMANCE.md):
 *   size   bytes of the larger of the send and receive buffers (the total across ranks for
 *          allgather, reduce_scatter, alltoall, gather, scatter);
 *   count  elements passed to the call (per rank for those five);
 *   time   average time of one call on a rank, then combined over ranks by -a: 0 rank 0's,
 *          1 the mean (the default, as nccl-tests'), 2 the min, 3 the max (the slowest rank,
 *          which decides when a collective is done);
 *   algbw  size / time (GB/s, 1e9 bytes);
 *   busbw  algbw x 2(n-1)/n for allreduce, x (n-1)/n for reduce_scatter, allgather, alltoall,
 *          gather and scatter (nccl-tests' gather.cu/scatter.cu use (n-1)/n too), x 1 for
 *          broadcast, reduce and sendrecv.
 *
 * #wrong is a real check, separate from the timed loop: every rank fills its input with small
 * integers that depend on rank, element and repetition (exact in every dtype, bf16 included),
 * zeroes its output, runs the collective once, computes locally what the result must be and
 * counts the elements that differ; the counts are summed over ranks. Reductions get patterns
 * whose results stay exact: for sum/avg the ranks' values add up to n*base with base in 1..4 (so
 * avg is exact too), for prod the values are 1 or 2, for min/max 1..97. In-place sendrecv is
 * checked too: a rank sends its buffer and receives the previous rank's into the same buffer,
 * which strata does through a scratch buffer and a copy (a send may still be reading the
 * buffer while the receive lands).
 *
 * Invariants: every rank runs the same sequence of collectives (sizes, types and ops are computed
 * from the options alone, which all ranks share); only rank 0 prints or writes files; buffers
 * are allocated once for the largest size, after every rank agreed that they fit in this host's
 * available memory (MemAvailable, shared by the ranks on the host) and that rank 0 can create
 * the -J file: a run that cannot finish is refused before it starts, never killed halfway. Exit
 * status: 0 all good, 1 a failed collective or any #wrong > 0, 2 bad usage. This file must never
 * print a row before its figures are final, and must never leave a peer blocked on a failure: a
 * failing rank aborts the communicator.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_alltoallv.h"
#include "bench_predict.h"
#include "commands.h"
#include "planner.h"
#include "strata.h"
#include "util.h"

extern char **environ;

#define BENCH_EXIT_OK 0
#define BENCH_EXIT_FAILED 1
#define BENCH_EXIT_USAGE 2
#define BENCH_HOST_LINE_BYTES 256
#define BENCH_MAX_RUN_LIST 16
#define BENCH_NCCL_TESTS_VERSION "2.19.6" /* the release whose output and options this matches */

/* ---------------------------------------------------------------------------------------------
 * The collectives, their names and how nccl-tests sizes and scores them.
 * ------------------------------------------------------------------------------------------- */
typedef enum bench_kind {
  BENCH_ALLREDUCE,
  BENCH_REDUCE_SCATTER,
  BENCH_ALLGATHER,
  BENCH_BROADCAST,
  BENCH_REDUCE,
  BENCH_GATHER,
  BENCH_SCATTER,
  BENCH_ALLTOALL,
  BENCH_SENDRECV,
  BENCH_ALLTOALLV, /* nccl-tests' alltoallv_perf: uneven shares (bench_alltoallv.h) */
  BENCH_HYPERCUBE, /* hypercube_perf: an allgather by recursive doubling of send/recv pairs */
  BENCH_KIND_COUNT
} bench_kind;

typedef struct bench_kind_info {
  const char *name;      /* ours, as typed after `strata bench` */
  const char *alias;     /* nccl-tests' binary stem */
  int is_reduction;      /* takes -o */
  int is_rooted;         /* takes -r; others print root -1 */
  int is_per_rank;       /* count is per rank, size is the total (nccl-tests' paramcount) */
  int inplace_checkable; /* in-place has a defined result */
} bench_kind_info;

static const bench_kind_info bench_kinds[BENCH_KIND_COUNT] = {
    [BENCH_ALLREDUCE] = {"allreduce", "all_reduce", 1, 0, 0, 1},
    [BENCH_REDUCE_SCATTER] = {"reduce_scatter", "reducescatter", 1, 0, 1, 1},
    [BENCH_ALLGATHER] = {"allgather", "all_gather", 0, 0, 1, 1},
    [BENCH_BROADCAST] = {"broadcast", "bcast", 0, 1, 0, 1},
    [BENCH_REDUCE] = {"reduce", "reduce", 1, 1, 0, 1},
    [BENCH_GATHER] = {"gather", "gather", 0, 1, 1, 1},
    [BENCH_SCATTER] = {"scatter", "scatter", 0, 1, 1, 1},
    [BENCH_ALLTOALL] = {"alltoall", "all_to_all", 0, 0, 1, 1},
    [BENCH_SENDRECV] = {"sendrecv", "send_recv", 0, 0, 0, 1},
    /* in place, nccl-tests sends and receives in one buffer and leaves the result unchecked */
    [BENCH_ALLTOALLV] = {"alltoallv", "alltoallv", 0, 0, 0, 0},
    [BENCH_HYPERCUBE] = {"hypercube", "hypercube", 0, 0, 1, 1},
};

/* nccl-tests' binary of each collective: the name of a link that runs it (tools/main.c), and
 * the name its start and end lines print. */
static const char *const bench_perf_names[BENCH_KIND_COUNT] = {
    [BENCH_ALLREDUCE] = "all_reduce_perf", [BENCH_REDUCE_SCATTER] = "reduce_scatter_perf",
    [BENCH_ALLGATHER] = "all_gather_perf", [BENCH_BROADCAST] = "broadcast_perf",
    [BENCH_REDUCE] = "reduce_perf",        [BENCH_GATHER] = "gather_perf",
    [BENCH_SCATTER] = "scatter_perf",      [BENCH_ALLTOALL] = "alltoall_perf",
    [BENCH_SENDRECV] = "sendrecv_perf",    [BENCH_ALLTOALLV] = "alltoallv_perf",
    [BENCH_HYPERCUBE] = "hypercube_perf",
};

/* nccl-tests' -d names (src/common.cu test_typenames), indexed by strata_dtype; nccl-tests has
 * no 16-bit integers, whose names follow its other integer names. */
static const char *const bench_type_names[STRATA_DTYPE_COUNT] = {
    [STRATA_I8] = "int8",    [STRATA_U8] = "uint8",      [STRATA_I32] = "int32",
    [STRATA_U32] = "uint32", [STRATA_I64] = "int64",     [STRATA_U64] = "uint64",
    [STRATA_F16] = "half",   [STRATA_BF16] = "bfloat16", [STRATA_F32] = "float",
    [STRATA_F64] = "double", [STRATA_I16] = "int16",     [STRATA_U16] = "uint16",
};

/* nccl-tests' "-d all" order: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16.
 * "-d all" and "-o all" stay nccl-tests' sets; int16, uint16 and the bitwise ops are named. */
static const strata_dtype bench_all_types[] = {STRATA_I8,  STRATA_U8,  STRATA_I32, STRATA_U32,
                                               STRATA_I64, STRATA_U64, STRATA_F16, STRATA_F32,
                                               STRATA_F64, STRATA_BF16};
static const strata_op bench_all_ops[] = {STRATA_SUM, STRATA_PROD, STRATA_MAX, STRATA_MIN,
                                          STRATA_AVG};

/* Element counts of one size (nccl-tests' getCollByteCount). In place, the send buffer starts
 * at recvbuf + rank*send_inplace_offset and the receive buffer at recvbuf +
 * rank*recv_inplace_offset (elements). */
typedef struct bench_layout {
  size_t param_count; /* the count passed to the call and printed */
  size_t send_count;
  size_t recv_count;
  size_t send_inplace_offset;
  size_t recv_inplace_offset;
} bench_layout;

/* alltoallv and hypercube round a rank's share down to 16 bytes, as nccl-tests does. */
static size_t bench_share16(size_t count, int nranks, size_t type_bytes) {
  return (count / (size_t)nranks) & ~(16 / type_bytes - 1);
}

static bench_layout bench_layout_for(bench_kind kind, size_t count, size_t type_bytes, int nranks,
                                     const bench_alltoallv *pattern) {
  size_t per_rank = count / (size_t)nranks, share = bench_share16(count, nranks, type_bytes);
  bench_layout layout = {count, count, count, 0, 0};
  switch (kind) {
    case BENCH_ALLTOALLV: /* from a matrix file, -b is not a size: the count passed is 0 */
      layout.param_count = pattern->bytes ? 0 : share;
      bench_alltoallv_max_counts(pattern, type_bytes, nranks, share * nranks * type_bytes,
                                 &layout.send_count, &layout.recv_count);
      layout.send_inplace_offset = layout.recv_inplace_offset = 0;
      break;
    case BENCH_HYPERCUBE:
      layout = (bench_layout){share, share, share * nranks, share, 0};
      break;
    case BENCH_REDUCE_SCATTER:
    case BENCH_SCATTER:
      layout = (bench_layout){per_rank, per_rank * nranks, per_rank, 0, per_rank};
      break;
    case BENCH_ALLGATHER:
    case BENCH_GATHER:
      layout = (bench_layout){per_rank, per_rank, per_rank * nranks, per_rank, 0};
      break;
    case BENCH_ALLTOALL:
      layout = (bench_layout){per_rank, per_rank * nranks, per_rank * nranks, 0, 0};
      break;
    default:
      break;
  }
  return layout;
}

/* nccl-tests' getBw: algbw over the bytes one call moves, busbw scaled to the link load. */
static void bench_bandwidth(bench_kind kind, const bench_layout *layout, size_t type_bytes,
                            double seconds, int nranks, double *algbw_gbps, double *busbw_gbps) {
  double bytes = (double)layout->param_count * (double)type_bytes;
  if (bench_kinds[kind].is_per_rank) bytes *= nranks;
  if (kind == BENCH_HYPERCUBE) bytes = bytes / nranks * (nranks - 1); /* received per rank */
  if (kind == BENCH_ALLTOALLV)                                        /* the busiest rank's bytes */
    bytes = (double)(layout->send_count > layout->recv_count ? layout->send_count
                                                             : layout->recv_count) *
            (double)type_bytes;
  double n = nranks;
  double factor = 1.0;
  if (kind == BENCH_ALLREDUCE) factor = 2.0 * (n - 1) / n;
  if (kind == BENCH_REDUCE_SCATTER || kind == BENCH_ALLGATHER || kind == BENCH_ALLTOALL ||
      kind == BENCH_GATHER || kind == BENCH_SCATTER || kind == BENCH_ALLTOALLV)
    factor = (n - 1) / n;
  *algbw_gbps = (bytes > 0 && seconds > 0) ? bytes / 1.0e9 / seconds : 0.0;
  *busbw_gbps = *algbw_gbps * factor;
}

/* ---------------------------------------------------------------------------------------------
 * Options.
 * ------------------------------------------------------------------------------------------- */
typedef struct bench_options {
  bench_kind kind;
  size_t min_bytes, max_bytes, step_bytes, step_factor;
  int iters, warmup_iters, agg_iters;
  int run_cycles; /* -N: sweeps of every size; 0 = until interrupted */
  int check;      /* -c: checked calls per size and placement (nccl-tests' datacheck count) */
  int types_count;
  strata_dtype types[BENCH_MAX_RUN_LIST];
  int ops_count;
  strata_op ops[BENCH_MAX_RUN_LIST];
  int root;
  int average;  /* 0 rank 0, 1 mean, 2 min, 3 max */
  int blocking; /* -z: 1 barrier after each call, 2 nothing more (a strata call has finished when
                   it returns), 3 a barrier after each of the -n iterations, outside the time */
  int report_cputime;
  int report_timestamps; /* -S */
  int per_iter_timing;   /* -I: each iteration timed; min, max, p99 and cv over them */
  int per_iter_skip;     /* -K: leading iterations left out of those statistics */
  int memory_report;     /* -M */
  int unalign;           /* -u: buffers start this many elements past their alignment */
  int parallel_init;     /* -p: accepted (one thread per rank: nothing to run in parallel) */
  double timeout_s;      /* -T: a call that makes no progress this long fails (0 = the config's) */
  int predict;
  int registered; /* -R: buffers from strata_mem_alloc (peers of one host read them directly) */
  strata_compress compress; /* --compress; DEFAULT = STRATA_COMPRESS (none) */
  const char *json_path;
  bench_alltoallv pattern; /* alltoallv: who sends whom how much (bench_options_free) */
} bench_options;

static void bench_usage(FILE *out) {
  fprintf(
      out,
      "usage: strata bench COLL [options]    (run it on every rank: strata launch -n N -- "
      "strata bench ...)\n"
      "  COLL: allreduce reduce_scatter allgather broadcast reduce gather scatter alltoall "
      "sendrecv\n"
      "        alltoallv (uneven shares; NCCL_TESTS_ALLTOALLV_SPREAD, _MATRIX_FILE, _MATRIX_SCALE\n"
      "        and _PRINT_SUMMARY as nccl-tests reads them), hypercube (power-of-two ranks)\n"
      "        (nccl-tests' names all_reduce, all_gather, ..._perf are accepted too, and\n"
      "        strata run through a link named all_reduce_perf, ... is that test)\n"
      "  strata bench kv [-b -e -f -t -n -w -B tcp,shm,ucx ...]: KV-cache transfer between\n"
      "        two processes of this host (docs/kv.md); no launcher\n"
      "  -b, --minbytes SIZE      smallest size (8, 64K, 1M, 2G; default 32M)\n"
      "  -e, --maxbytes SIZE      largest size (default 32M)\n"
      "  -f, --stepfactor N       multiply the size by N each step (default 1: use -i)\n"
      "  -i, --stepbytes SIZE     add SIZE each step when -f is 1 (default 1M)\n"
      "  -n, --iters N            timed iterations per size (default 20)\n"
      "  -w, --warmup_iters N     warm-up calls at each size from -b to -e, doubling (default 1)\n"
      "  -m, --agg_iters N        calls per timed iteration (default 1)\n"
      "  -N, --run_cycles N       sweeps of every size, each printed (default 1; 0 = until\n"
      "                           interrupted)\n"
      "  -c, --check N            checked calls per size, fresh data each (default 1; 0: none)\n"
      "  -d, --datatype T|all     int8 uint8 int32 uint32 int64 uint64 half float double\n"
      "                           bfloat16 int16 uint16 (or i8 ... f32 bf16; default float)\n"
      "  -o, --op OP|all          sum prod min max avg, band bor bxor for integer types\n"
      "                           (default sum; reductions only; all: the first five)\n"
      "  -r, --root R             root rank of rooted collectives (default 0)\n"
      "  -a, --average 0|1|2|3    time over ranks: rank 0, mean, min, max (default 1)\n"
      "  -z, --blocking 0|1|2|3   1: barrier after each call; 2: no barrier (a call has\n"
      "                           finished when it returns); 3: barrier after each of the -n\n"
      "                           iterations, outside the time (default 0)\n"
      "  -I, --per_iter_timing 0|1  time each iteration; print min, max, p99, cv%% (default 0)\n"
      "  -K, --per_iter_skip N    leading iterations left out of -I's figures (default 0)\n"
      "  -S, --report_timestamps 0|1  a timestamp at the end of each row (default 0)\n"
      "  -M, --memory 0|1         report the ranks' memory: communicator, buffers, run (RSS)\n"
      "  -u, --unalign N          start the buffers N elements past their alignment\n"
      "  -T, --timeout SECONDS    a call making no progress this long fails every rank\n"
      "                           (STRATA_OP_TIMEOUT; also bounds STRATA_TIMEOUT; 0: those)\n"
      "  -C, --report_cputime 0|1 label the time cputime (on CPU ranks the same figure)\n"
      "  -t, --nthreads 1  -g, --ngpus 1  -p, --parallel_init 0|1  -y, --stream_null 0|1\n"
      "  -G, --cudagraph 0  -x, --cta_policy 0|1|2  -D, --device_implementation 0\n"
      "  -V, --device_cta_count N  accepted as nccl-tests takes them; strata ranks are CPU\n"
      "                           processes with no GPU, CTA or graph (-x is ignored)\n"
      "  -J, --output_file FILE   also write nccl-tests' JSON (rank 0; FILE.0, FILE.1, ...\n"
      "                           when FILE exists; refused before the run if unwritable;\n"
      "                           --json is the same)\n"
      "  -R, --local_register 0|1|2  1 or 2: buffers from strata_mem_alloc, which ranks of\n"
      "                           one host read directly (default 0: malloc)\n"
      "      --predict            print the cost model's busbw beside the measured one\n"
      "      --compress C         wire encoding of float calls: none bf16 f16 int8 fp8 int4\n"
      "                           (lossy: #wrong then allows the encoding's error)\n"
      "      --cipher             alone: this core's speed sealing and opening TCP frames\n"
      "                           (AES-256-GCM, ChaCha20-Poly1305), no job needed\n"
      "      --codec              alone: this core's speed encoding and decoding each lossy\n"
      "                           wire encoding (bf16 f16 int8 fp8 int4), no job needed\n"
      "  -h, --help\n"
      "exit status: 0 ok, 1 a failed run or wrong results, 2 bad usage\n");
}

/* nccl-tests' parsesize: a number with an optional K, M or G (powers of 1024). */
static int bench_parse_size(const char *text, size_t *out) {
  uint64_t bytes;
  if (strata_size_parse(text, &bytes) != STRATA_OK || bytes > ((uint64_t)1 << 60)) return -1;
  *out = (size_t)bytes;
  return 0;
}

static int bench_parse_int(const char *text, long min, long max, long *out) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 0);
  if (end == text || *end || errno || value < min || value > max) return -1;
  *out = value;
  return 0;
}

static int bench_parse_kind(const char *text, bench_kind *out) {
  char name[64];
  snprintf(name, sizeof name, "%s", text);
  size_t len = strlen(name);
  if (len > 5 && !strcmp(name + len - 5, "_perf")) name[len - 5] = '\0';
  for (int k = 0; k < BENCH_KIND_COUNT; k++) {
    if (!strcmp(name, bench_kinds[k].name) || !strcmp(name, bench_kinds[k].alias)) {
      *out = (bench_kind)k;
      return 0;
    }
  }
  return -1;
}

static int bench_parse_types(const char *text, bench_options *opt) {
  if (!strcmp(text, "all")) {
    opt->types_count = (int)(sizeof bench_all_types / sizeof bench_all_types[0]);
    memcpy(opt->types, bench_all_types, sizeof bench_all_types);
    return 0;
  }
  opt->types_count = 1;
  return strata_dtype_parse(text, &opt->types[0]) == STRATA_OK ? 0 : -1;
}

static int bench_parse_ops(const char *text, bench_options *opt) {
  if (!strcmp(text, "all")) {
    opt->ops_count = (int)(sizeof bench_all_ops / sizeof bench_all_ops[0]);
    memcpy(opt->ops, bench_all_ops, sizeof bench_all_ops);
    return 0;
  }
  opt->ops_count = 1;
  return strata_op_parse(text, &opt->ops[0]) == STRATA_OK ? 0 : -1;
}

static void bench_options_init(bench_options *opt) {
  memset(opt, 0, sizeof *opt);
  /* nccl-tests' defaults (src/common.cu) */
  opt->min_bytes = opt->max_bytes = 32u << 20;
  opt->step_bytes = 1u << 20;
  opt->step_factor = 1;
  opt->iters = 20;
  opt->warmup_iters = 1;
  opt->run_cycles = 1;
  opt->agg_iters = 1;
  opt->check = 1;
  opt->types_count = 1;
  opt->types[0] = STRATA_F32;
  opt->ops_count = 1;
  opt->ops[0] = STRATA_SUM;
  opt->root = 0;
  opt->average = 1;
}

#define BENCH_BAD(...)                             \
  do {                                             \
    fprintf(stderr, "strata bench: " __VA_ARGS__); \
    fprintf(stderr, "\n");                         \
    return BENCH_EXIT_USAGE;                       \
  } while (0)

/* Long options with no letter of their own in nccl-tests (-K and -P are taken there). */
enum { BENCH_OPT_PREDICT = 1000, BENCH_OPT_COMPRESS };

/* One option letter with its argument. Returns 0 or BENCH_EXIT_USAGE (message printed). */
static int bench_option_apply(bench_options *opt, int letter, const char *arg) {
  long value = 0;
  switch (letter) {
    case 'b':
      if (bench_parse_size(arg, &opt->min_bytes)) BENCH_BAD("-b '%s': not a size", arg);
      return 0;
    case 'e':
      if (bench_parse_size(arg, &opt->max_bytes)) BENCH_BAD("-e '%s': not a size", arg);
      return 0;
    case 'i':
      if (bench_parse_size(arg, &opt->step_bytes)) BENCH_BAD("-i '%s': not a size", arg);
      return 0;
    case 'f':
      if (bench_parse_int(arg, 1, 1L << 30, &value))
        BENCH_BAD("-f '%s': want an integer >= 1", arg);
      opt->step_factor = (size_t)value;
      return 0;
    case 'n':
      if (bench_parse_int(arg, 1, 1L << 30, &value))
        BENCH_BAD("-n '%s': want an integer >= 1", arg);
      opt->iters = (int)value;
      return 0;
    case 'w':
      if (bench_parse_int(arg, 0, 1L << 30, &value))
        BENCH_BAD("-w '%s': want an integer >= 0", arg);
      opt->warmup_iters = (int)value;
      return 0;
    case 'm':
      if (bench_parse_int(arg, 1, 1L << 20, &value))
        BENCH_BAD("-m '%s': want an integer >= 1", arg);
      opt->agg_iters = (int)value;
      return 0;
    case 'c':
      if (bench_parse_int(arg, 0, 1L << 20, &value))
        BENCH_BAD("-c '%s': want a number of checks >= 0", arg);
      opt->check = (int)value;
      return 0;
    case 'N':
      if (bench_parse_int(arg, 0, 1L << 30, &value))
        BENCH_BAD("-N '%s': want a number of cycles >= 0 (0: until interrupted)", arg);
      opt->run_cycles = (int)value;
      return 0;
    case 'd':
      if (bench_parse_types(arg, opt))
        BENCH_BAD(
            "-d '%s': unknown datatype (int8 uint8 int16 uint16 int32 uint32 int64 uint64 half "
            "float double bfloat16, or all)",
            arg);
      return 0;
    case 'o':
      if (bench_parse_ops(arg, opt))
        BENCH_BAD("-o '%s': unknown op (sum prod min max avg band bor bxor, or all)", arg);
      return 0;
    case 'r':
      if (bench_parse_int(arg, 0, 1L << 30, &value)) BENCH_BAD("-r '%s': want a rank >= 0", arg);
      opt->root = (int)value;
      return 0;
    case 'a':
      if (bench_parse_int(arg, 0, 3, &value))
        BENCH_BAD("-a '%s': want 0 (rank 0), 1 (mean), 2 (min) or 3 (max)", arg);
      opt->average = (int)value;
      return 0;
    case 'z':
      if (bench_parse_int(arg, 0, 3, &value)) BENCH_BAD("-z '%s': want 0, 1, 2 or 3", arg);
      opt->blocking = (int)value;
      return 0;
    case 'I':
      if (bench_parse_int(arg, 0, 1L << 30, &value)) BENCH_BAD("-I '%s': want 0 or 1", arg);
      opt->per_iter_timing = (int)value;
      return 0;
    case 'K':
      if (bench_parse_int(arg, 0, 1L << 30, &value))
        BENCH_BAD("-K '%s': want a number of iterations >= 0", arg);
      opt->per_iter_skip = (int)value;
      return 0;
    case 'S':
      if (bench_parse_int(arg, 0, 1, &value)) BENCH_BAD("-S '%s': want 0 or 1", arg);
      opt->report_timestamps = (int)value;
      return 0;
    case 'M':
      if (bench_parse_int(arg, 0, 1, &value)) BENCH_BAD("-M '%s': want 0 or 1", arg);
      opt->memory_report = (int)value;
      return 0;
    case 'u':
      if (bench_parse_int(arg, 0, 1L << 20, &value))
        BENCH_BAD("-u '%s': want a number of elements >= 0", arg);
      opt->unalign = (int)value;
      return 0;
    case 'x':
      if (bench_parse_int(arg, 0, 2, &value)) BENCH_BAD("-x '%s': want 0, 1 or 2", arg);
      fprintf(stderr, "strata bench: -x %ld: strata ranks run no CTAs (CPU processes); ignored\n",
              value);
      return 0;
    case 'D':
      if (bench_parse_int(arg, 0, 1L << 20, &value)) BENCH_BAD("-D '%s': want 0", arg);
      if (value > 0)
        BENCH_BAD("-D %ld: no device implementation exists on CPU ranks; only -D 0", value);
      return 0;
    case 'V':
      if (bench_parse_int(arg, 1, 128, &value))
        BENCH_BAD("-V '%s': device_cta_count must be positive and at most 128", arg);
      return 0; /* used only by -D above 0, which CPU ranks refuse */
    case 'C':
      if (bench_parse_int(arg, 0, 1, &value)) BENCH_BAD("-C '%s': want 0 or 1", arg);
      opt->report_cputime = (int)value;
      return 0;
    case 't':
      if (bench_parse_int(arg, 1, 1L << 20, &value)) BENCH_BAD("-t '%s': want 1", arg);
      if (value != 1)
        BENCH_BAD(
            "-t %ld: one thread per process only; start more ranks instead "
            "(strata launch -n N)",
            value);
      return 0;
    case 'g':
      if (bench_parse_int(arg, 1, 1L << 20, &value)) BENCH_BAD("-g '%s': want 1", arg);
      if (value != 1)
        BENCH_BAD(
            "-g %ld: strata ranks are CPU processes and use no GPUs; use -g 1 and start "
            "more ranks (strata launch -n N)",
            value);
      return 0;
    case 'p':
      if (bench_parse_int(arg, 0, 1, &value)) BENCH_BAD("-p '%s': want 0 or 1", arg);
      opt->parallel_init = (int)value;
      return 0;
    case 'y':
      if (bench_parse_int(arg, 0, 1, &value)) BENCH_BAD("-y '%s': want 0 or 1", arg);
      return 0; /* nccl-tests' stream_null: there are no streams on CPU ranks */
    case 'T':
      if (bench_parse_int(arg, 0, 1L << 20, &value))
        BENCH_BAD("-T '%s': want a timeout in seconds >= 0", arg);
      opt->timeout_s = (double)value;
      return 0;
    case 'G':
      if (bench_parse_int(arg, 0, 1L << 30, &value) || value != 0)
        BENCH_BAD("-G '%s': CUDA graphs do not exist here; only -G 0", arg);
      return 0;
    case 'J':
      opt->json_path = arg;
      return 0;
    case 'R':
      if (bench_parse_int(arg, 0, 2, &value)) BENCH_BAD("-R '%s': want 0, 1 or 2", arg);
      opt->registered = value > 0;
      return 0;
    case BENCH_OPT_PREDICT:
      opt->predict = 1;
      return 0;
    case BENCH_OPT_COMPRESS:
      if (strata_compress_parse(arg, &opt->compress) != STRATA_OK ||
          opt->compress == STRATA_COMPRESS_DEFAULT)
        BENCH_BAD("--compress '%s': want none, bf16, f16, int8, fp8 or int4", arg);
      return 0;
    default:
      BENCH_BAD("unknown option (see strata bench --help)");
  }
}

static int bench_is_float(strata_dtype dtype);
static int bench_is_bitwise(strata_op op);

/* nccl-tests' own corrections after parsing: a bad -I or -K is disabled with a message. */
static void bench_options_settle(bench_options *opt) {
  if (opt->per_iter_timing != 0 && opt->per_iter_timing != 1) {
    fprintf(stderr, "per-iteration timing (-I) only supports 0=off or 1=on. Disabling.\n");
    opt->per_iter_timing = 0;
  }
  if (opt->per_iter_skip < 0 || opt->per_iter_skip >= opt->iters) {
    fprintf(stderr, "per-iteration skip (-K) must be between 0 and %d. Disabling.\n",
            opt->iters - 1);
    opt->per_iter_skip = 0;
  }
  if (opt->per_iter_skip && !opt->per_iter_timing) {
    fprintf(stderr, "per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.\n");
    opt->per_iter_skip = 0;
  }
}

static int bench_options_check(bench_options *opt) {
  bench_options_settle(opt);
  for (int t = 0; t < opt->types_count && bench_kinds[opt->kind].is_reduction; t++)
    for (int o = 0; o < opt->ops_count; o++)
      if (bench_is_float(opt->types[t]) && bench_is_bitwise(opt->ops[o]))
        BENCH_BAD("-o %s: bitwise ops take integer types, not %s", strata_op_name(opt->ops[o]),
                  bench_type_names[opt->types[t]]);
  if (opt->min_bytes > opt->max_bytes)
    BENCH_BAD("-b %zu is larger than -e %zu", opt->min_bytes, opt->max_bytes);
  if (opt->step_factor <= 1 && opt->step_bytes == 0)
    BENCH_BAD("-i 0 with -f 1 never reaches -e; give -f 2 or -i SIZE");
  if (opt->step_factor > 1 && opt->min_bytes == 0)
    BENCH_BAD("-b 0 with -f %zu never grows; give -b 1 or more", opt->step_factor);
  if (opt->max_bytes > ((size_t)1 << 40)) BENCH_BAD("-e %zu: more than 1 TiB", opt->max_bytes);
  return 0;
}

/* Parses argv (argv[0] = "bench"). Returns 0, BENCH_EXIT_USAGE, or -1 for --help. */
static int bench_options_parse(int argc, char **argv, bench_options *opt) {
  static const struct option long_options[] = {
      {"nthreads", required_argument, 0, 't'},
      {"ngpus", required_argument, 0, 'g'},
      {"minbytes", required_argument, 0, 'b'},
      {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'},
      {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},
      {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'},
      {"run_cycles", required_argument, 0, 'N'},
      {"parallel_init", required_argument, 0, 'p'},
      {"check", required_argument, 0, 'c'},
      {"op", required_argument, 0, 'o'},
      {"datatype", required_argument, 0, 'd'},
      {"root", required_argument, 0, 'r'},
      {"blocking", required_argument, 0, 'z'},
      {"stream_null", required_argument, 0, 'y'},
      {"timeout", required_argument, 0, 'T'},
      {"cudagraph", required_argument, 0, 'G'},
      {"report_cputime", required_argument, 0, 'C'},
      {"average", required_argument, 0, 'a'},
      {"report_timestamps", required_argument, 0, 'S'},
      {"output_file", required_argument, 0, 'J'},
      {"json", required_argument, 0, 'J'},
      {"local_register", required_argument, 0, 'R'},
      {"cta_policy", required_argument, 0, 'x'},
      {"device_implementation", required_argument, 0, 'D'},
      {"device_cta_count", required_argument, 0, 'V'},
      {"memory", required_argument, 0, 'M'},
      {"unalign", required_argument, 0, 'u'},
      {"per_iter_timing", required_argument, 0, 'I'},
      {"per_iter_skip", required_argument, 0, 'K'},
      {"predict", no_argument, 0, BENCH_OPT_PREDICT},
      {"compress", required_argument, 0, BENCH_OPT_COMPRESS},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  bench_options_init(opt);
  const char *kind_name = NULL;
  optind = 0; /* glibc: restart scanning (main may have used getopt) */
  opterr = 0;
  for (;;) {
    int letter = getopt_long(
        argc, argv,
        "-t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:", long_options, NULL);
    if (letter == -1) break;
    if (letter == 'h') return -1;
    if (letter == 1) { /* a positional argument, in order */
      if (kind_name) BENCH_BAD("one collective at a time ('%s' and '%s')", kind_name, optarg);
      kind_name = optarg;
      continue;
    }
    if (letter == '?' || letter == ':') {
      if (optopt) BENCH_BAD("-%c: unknown option or missing value (see --help)", optopt);
      BENCH_BAD("'%s': unknown option or missing value (see --help)", argv[optind - 1]);
    }
    int status = bench_option_apply(opt, letter, optarg);
    if (status) return status;
  }
  if (!kind_name)
    BENCH_BAD(
        "which collective? allreduce reduce_scatter allgather broadcast reduce gather "
        "scatter alltoall sendrecv alltoallv hypercube (see --help)");
  if (bench_parse_kind(kind_name, &opt->kind))
    BENCH_BAD(
        "'%s': unknown collective (allreduce reduce_scatter allgather broadcast reduce "
        "gather scatter alltoall sendrecv alltoallv hypercube)",
        kind_name);
  if (opt->kind == BENCH_ALLTOALLV) {
    char err[256];
    if (bench_alltoallv_load(&opt->pattern, err, sizeof err))
      BENCH_BAD("NCCL_TESTS_ALLTOALLV_MATRIX_FILE: %s", err);
    if (opt->pattern.bytes && opt->min_bytes != opt->max_bytes) {
      bench_alltoallv_free(&opt->pattern);
      BENCH_BAD("-b and -e must be the same (e.g. -b 32M -e 32M) with a traffic matrix file");
    }
  }
  return bench_options_check(opt);
}

static void bench_options_free(bench_options *opt) {
  bench_alltoallv_free(&opt->pattern);
}

/* ---------------------------------------------------------------------------------------------
 * Data patterns and the expected results. Every value is a small integer, exact in every dtype.
 * ------------------------------------------------------------------------------------------- */
static int bench_is_float(strata_dtype dtype) {
  return dtype == STRATA_F16 || dtype == STRATA_BF16 || dtype == STRATA_F32 || dtype == STRATA_F64;
}

static int bench_is_bitwise(strata_op op) {
  return op == STRATA_BAND || op == STRATA_BOR || op == STRATA_BXOR;
}

/* Stores an integer: floats convert exactly (|v| <= 256 whenever this is used for bf16),
 * integers keep the low bytes (two's-complement wrap, the same as the reduction kernels). */
static inline void bench_store_int(strata_dtype dtype, void *buf, size_t k, uint64_t v) {
  switch (dtype) {
    case STRATA_I8:
    case STRATA_U8:
      ((uint8_t *)buf)[k] = (uint8_t)v;
      break;
    case STRATA_I16:
    case STRATA_U16:
      ((uint16_t *)buf)[k] = (uint16_t)v;
      break;
    case STRATA_I32:
    case STRATA_U32:
      ((uint32_t *)buf)[k] = (uint32_t)v;
      break;
    case STRATA_I64:
    case STRATA_U64:
      ((uint64_t *)buf)[k] = v;
      break;
    case STRATA_F16:
      ((uint16_t *)buf)[k] = strata_f32_to_f16((float)(int64_t)v);
      break;
    case STRATA_BF16:
      ((uint16_t *)buf)[k] = strata_f32_to_bf16((float)(int64_t)v);
      break;
    case STRATA_F32:
      ((float *)buf)[k] = (float)(int64_t)v;
      break;
    case STRATA_F64:
      ((double *)buf)[k] = (double)(int64_t)v;
      break;
    default:
      break;
  }
}

static inline void bench_store_real(strata_dtype dtype, void *buf, size_t k, double v) {
  switch (dtype) {
    case STRATA_F16:
      ((uint16_t *)buf)[k] = strata_f32_to_f16((float)v);
      break;
    case STRATA_BF16:
      ((uint16_t *)buf)[k] = strata_f32_to_bf16((float)v);
      break;
    case STRATA_F32:
      ((float *)buf)[k] = (float)v;
      break;
    case STRATA_F64:
      ((double *)buf)[k] = v;
      break;
    default:
      bench_store_int(dtype, buf, k, (uint64_t)(int64_t)v);
  }
}

static inline double bench_load_real(strata_dtype dtype, const void *buf, size_t k) {
  switch (dtype) {
    case STRATA_I8:
      return ((const int8_t *)buf)[k];
    case STRATA_U8:
      return ((const uint8_t *)buf)[k];
    case STRATA_I16:
      return ((const int16_t *)buf)[k];
    case STRATA_U16:
      return ((const uint16_t *)buf)[k];
    case STRATA_I32:
      return ((const int32_t *)buf)[k];
    case STRATA_U32:
      return ((const uint32_t *)buf)[k];
    case STRATA_I64:
      return (double)((const int64_t *)buf)[k];
    case STRATA_U64:
      return (double)((const uint64_t *)buf)[k];
    case STRATA_F16:
      return strata_f16_to_f32(((const uint16_t *)buf)[k]);
    case STRATA_BF16:
      return strata_bf16_to_f32(((const uint16_t *)buf)[k]);
    case STRATA_F32:
      return ((const float *)buf)[k];
    case STRATA_F64:
      return ((const double *)buf)[k];
    default:
      return 0;
  }
}

/* Loads an integer-typed element as a signed or unsigned 64-bit value. */
static inline int64_t bench_load_int(strata_dtype dtype, const void *buf, size_t k) {
  switch (dtype) {
    case STRATA_I8:
      return ((const int8_t *)buf)[k];
    case STRATA_U8:
      return ((const uint8_t *)buf)[k];
    case STRATA_I16:
      return ((const int16_t *)buf)[k];
    case STRATA_U16:
      return ((const uint16_t *)buf)[k];
    case STRATA_I32:
      return ((const int32_t *)buf)[k];
    case STRATA_U32:
      return ((const uint32_t *)buf)[k];
    case STRATA_I64:
      return ((const int64_t *)buf)[k];
    case STRATA_U64:
      return (int64_t)((const uint64_t *)buf)[k];
    default:
      return 0;
  }
}

/* What rank `rank` holds at global index `index` for data-movement collectives: 1..97. */
static inline uint64_t bench_value_plain(int rank, size_t index, int rep) {
  return ((uint64_t)rank * 13u + (index % 97u) * 7u + (uint64_t)rep * 5u) % 97u + 1u;
}

/* sum/avg: base in 1..4; rank index%n adds n, every rank adds base-1, so the sum is n*base. */
static inline uint64_t bench_sum_base(size_t index, int rep) {
  return ((index % 89u) * 7u + (uint64_t)rep * 3u) % 4u + 1u;
}

static inline uint64_t bench_value_reduce(strata_op op, int rank, size_t index, int nranks,
                                          int rep) {
  switch (op) {
    case STRATA_SUM:
    case STRATA_AVG:
      return bench_sum_base(index, rep) - 1u +
             ((size_t)rank == index % (size_t)nranks ? (uint64_t)nranks : 0u);
    case STRATA_PROD:
      return ((index + (size_t)rank + (size_t)rep) % 4u == 0) ? 2u : 1u;
    default:
      return bench_value_plain(rank, index, rep);
  }
}

/* Number of ranks r in [0, n) with (index + r + rep) % 4 == 0: the power of two prod yields. */
static inline unsigned bench_prod_twos(size_t index, int nranks, int rep) {
  unsigned first = (unsigned)((4u - (index + (size_t)rep) % 4u) % 4u);
  return (unsigned)nranks > first ? ((unsigned)nranks - 1u - first) / 4u + 1u : 0u;
}

/* Stores the reduction over all ranks of element `index` into out[k]. */
static void bench_store_reduced(strata_dtype dtype, strata_op op, int nranks, int rep, size_t index,
                                void *out, size_t k) {
  uint64_t base = bench_sum_base(index, rep);
  if (op == STRATA_SUM) {
    bench_store_int(dtype, out, k, base * (uint64_t)nranks);
  } else if (op == STRATA_AVG) {
    if (bench_is_float(dtype)) {
      bench_store_real(dtype, out, k, (double)(base * (uint64_t)nranks) / nranks);
    } else { /* the sum wraps in the dtype first, then integer division (strata.h) */
      bench_store_int(dtype, out, k, base * (uint64_t)nranks);
      bench_store_int(dtype, out, k, (uint64_t)(bench_load_int(dtype, out, k) / nranks));
    }
  } else if (op == STRATA_PROD) {
    unsigned twos = bench_prod_twos(index, nranks, rep);
    if (bench_is_float(dtype))
      bench_store_real(dtype, out, k, ldexp(1.0, (int)twos));
    else
      bench_store_int(dtype, out, k, twos >= 64 ? 0 : (uint64_t)1 << twos);
  } else if (bench_is_bitwise(op)) {
    uint64_t acc = bench_value_plain(0, index, rep);
    for (int r = 1; r < nranks; r++) {
      uint64_t v = bench_value_plain(r, index, rep);
      acc = op == STRATA_BAND ? acc & v : op == STRATA_BOR ? acc | v : acc ^ v;
    }
    bench_store_int(dtype, out, k, acc);
  } else {
    uint64_t best = bench_value_plain(0, index, rep);
    for (int r = 1; r < nranks; r++) {
      uint64_t v = bench_value_plain(r, index, rep);
      if ((op == STRATA_MIN) == (v < best)) best = v;
    }
    bench_store_int(dtype, out, k, best);
  }
}

/* One check or timing configuration: what runs and how its buffers are laid out. */
typedef struct bench_case {
  bench_kind kind;
  strata_dtype dtype;
  strata_op op;
  int root;
  int in_place;
  bench_layout layout;
  size_t type_bytes;
} bench_case;

typedef struct bench_ctx {
  strata_comm *comm;
  int rank, nranks;
  const bench_options *opt;
  int argc; /* the command line, for -J's "args" */
  char **argv;
  char *rank_lines;    /* rank 0: every rank's "#  Rank ..." line, BENCH_HOST_LINE_BYTES each */
  FILE *json;          /* rank 0 with -J: opened before the run */
  char *json_path;     /* the file it writes (-J FILE, or FILE.N when FILE exists) */
  char start_time[32]; /* for -J: when the run started, as nccl-tests writes it */
  char *sendbuf, *recvbuf, *expected;
  size_t buffer_bytes;
  size_t alloc_bytes; /* each of sendbuf, recvbuf, expected */
  int rep;
  bench_predict *model; /* --predict: calibrated by every rank at start; NULL = no prediction */
  double rss_start, rss_joined, rss_buffers; /* -M: resident bytes at each stage (0: unknown) */
} bench_ctx;

/* This process's resident set in bytes (/proc/self/statm), 0 when unknown: -M's measure. */
static double bench_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  int n = f ? fscanf(f, "%llu %llu", &size, &resident) : 0;
  if (f) fclose(f);
  return n == 2 ? (double)resident * (double)sysconf(_SC_PAGESIZE) : 0;
}

/* -u: both buffers start unalign elements past their (64-byte) alignment, as nccl-tests'. */
static size_t bench_unalign_bytes(const bench_ctx *ctx, const bench_case *c) {
  return (size_t)ctx->opt->unalign * c->type_bytes;
}

static char *bench_send_ptr(const bench_ctx *ctx, const bench_case *c) {
  size_t skew = bench_unalign_bytes(ctx, c);
  if (!c->in_place) return ctx->sendbuf + skew;
  return ctx->recvbuf + skew + (size_t)ctx->rank * c->layout.send_inplace_offset * c->type_bytes;
}

static char *bench_recv_ptr(const bench_ctx *ctx, const bench_case *c) {
  return ctx->recvbuf + bench_unalign_bytes(ctx, c) +
         (c->in_place ? (size_t)ctx->rank * c->layout.recv_inplace_offset * c->type_bytes : 0);
}

/* alltoallv: elements rank `from` sends rank `to` at this row's size (each rank sends
 * param_count x nranks elements in all when the pattern is generated). */
static size_t bench_alltoallv_elements(const bench_ctx *ctx, const bench_case *c, int from,
                                       int to) {
  size_t total = c->layout.param_count * (size_t)ctx->nranks * c->type_bytes;
  return bench_alltoallv_peer_bytes(&ctx->opt->pattern, from, to, ctx->nranks, total) /
         c->type_bytes;
}

/* alltoallv: elements rank `from` sends to every rank. */
static size_t bench_alltoallv_sent(const bench_ctx *ctx, const bench_case *c, int from) {
  size_t sum = 0;
  for (int to = 0; to < ctx->nranks; to++) sum += bench_alltoallv_elements(ctx, c, from, to);
  return sum;
}

/* alltoallv's expected output on this rank: from each source in rank order, its elements for
 * this rank, which start after what it sends the ranks before this one. Returns the count. */
static size_t bench_alltoallv_expected(const bench_ctx *ctx, const bench_case *c, int rep) {
  size_t at = 0;
  for (int from = 0; from < ctx->nranks; from++) {
    size_t first = 0, count = bench_alltoallv_elements(ctx, c, from, ctx->rank);
    for (int before = 0; before < ctx->rank; before++)
      first += bench_alltoallv_elements(ctx, c, from, before);
    for (size_t k = 0; k < count; k++)
      bench_store_int(c->dtype, ctx->expected, at++, bench_value_plain(from, first + k, rep));
  }
  return at;
}

/* Fills this rank's input for repetition `rep` and zeroes the output (results are never 0). */
static void bench_fill_input(const bench_ctx *ctx, const bench_case *c, int rep) {
  const bench_layout *l = &c->layout;
  size_t rank = (size_t)ctx->rank, span = l->recv_count;
  if (c->in_place) {
    size_t send_end = rank * l->send_inplace_offset + l->send_count;
    size_t recv_end = rank * l->recv_inplace_offset + l->recv_count;
    span = send_end > recv_end ? send_end : recv_end;
  }
  memset(ctx->recvbuf, 0, span * c->type_bytes + bench_unalign_bytes(ctx, c));
  char *in = bench_send_ptr(ctx, c);
  size_t offset =
      (c->kind == BENCH_ALLGATHER || c->kind == BENCH_GATHER || c->kind == BENCH_HYPERCUBE)
          ? (size_t)ctx->rank * l->param_count
          : 0;
  int reduction = bench_kinds[c->kind].is_reduction;
  size_t send_count =
      c->kind == BENCH_ALLTOALLV ? bench_alltoallv_sent(ctx, c, ctx->rank) : l->send_count;
  for (size_t k = 0; k < send_count; k++) {
    size_t index = offset + k;
    uint64_t v = reduction ? bench_value_reduce(c->op, ctx->rank, index, ctx->nranks, rep)
                           : bench_value_plain(ctx->rank, index, rep);
    bench_store_int(c->dtype, in, k, v);
  }
}

/* Computes this rank's expected output into ctx->expected. Returns its element count, or 0 when
 * this rank has no defined output (non-root of reduce and gather). */
static size_t bench_fill_expected(const bench_ctx *ctx, const bench_case *c, int rep) {
  const bench_layout *l = &c->layout;
  int rank = ctx->rank, n = ctx->nranks;
  size_t p = l->param_count;
  if ((c->kind == BENCH_REDUCE || c->kind == BENCH_GATHER) && rank != c->root) return 0;
  if (c->kind == BENCH_ALLTOALLV) return bench_alltoallv_expected(ctx, c, rep);
  for (size_t k = 0; k < l->recv_count; k++) {
    switch (c->kind) {
      case BENCH_ALLREDUCE:
      case BENCH_REDUCE:
        bench_store_reduced(c->dtype, c->op, n, rep, k, ctx->expected, k);
        break;
      case BENCH_REDUCE_SCATTER:
        bench_store_reduced(c->dtype, c->op, n, rep, (size_t)rank * p + k, ctx->expected, k);
        break;
      case BENCH_ALLGATHER:
      case BENCH_GATHER:
      case BENCH_HYPERCUBE:
        bench_store_int(c->dtype, ctx->expected, k, bench_value_plain((int)(k / p), k, rep));
        break;
      case BENCH_BROADCAST:
        bench_store_int(c->dtype, ctx->expected, k, bench_value_plain(c->root, k, rep));
        break;
      case BENCH_SCATTER:
        bench_store_int(c->dtype, ctx->expected, k,
                        bench_value_plain(c->root, (size_t)rank * p + k, rep));
        break;
      case BENCH_ALLTOALL:
        bench_store_int(c->dtype, ctx->expected, k,
                        bench_value_plain((int)(k / p), (size_t)rank * p + k % p, rep));
        break;
      case BENCH_SENDRECV:
        bench_store_int(c->dtype, ctx->expected, k, bench_value_plain((rank - 1 + n) % n, k, rep));
        break;
      default:
        break;
    }
  }
  return l->recv_count;
}

/* Elements of `got` that differ from `want`. Bit-exact, except avg of floating types, which a
 * kernel may compute as a multiply by 1/n: there a few f32/f64 ulps are allowed (f16 and bf16
 * round such an error away, so they stay exact). */
static long bench_count_wrong(const bench_case *c, const char *got, const char *want, size_t count,
                              double lossy_abs) {
  size_t bytes = count * c->type_bytes;
  if (memcmp(got, want, bytes) == 0) return 0;
  int tolerant = c->op == STRATA_AVG && bench_is_float(c->dtype);
  double tolerance = c->dtype == STRATA_F64 ? 1e-12 : 1e-6;
  long wrong = 0;
  for (size_t k = 0; k < count; k++) {
    const char *g = got + k * c->type_bytes, *w = want + k * c->type_bytes;
    if (!memcmp(g, w, c->type_bytes)) continue;
    double a = bench_load_real(c->dtype, got, k), b = bench_load_real(c->dtype, want, k);
    if (tolerant && fabs(a - b) <= tolerance * fabs(b)) continue;
    if (fabs(a - b) <= lossy_abs) continue;
    wrong++;
  }
  return wrong;
}

/* The error a compressed call may make on this case (0 when nothing is compressed): every
 * value takes at most 2n quantizations (docs/compression.md), each within the encoding's error
 * at the largest expected magnitude. */
static double bench_lossy_tolerance(const bench_ctx *ctx, const bench_case *c, const char *want,
                                    size_t count) {
  /* --compress was written into the communicator's config at init */
  strata_compress codec = strata_comm_config(ctx->comm)->compress;
  if (c->dtype != STRATA_F32 || codec == STRATA_COMPRESS_NONE) return 0;
  double amax = 0;
  for (size_t k = 0; k < count; k++) amax = fmax(amax, fabs(bench_load_real(c->dtype, want, k)));
  return 2.0 * ctx->nranks * strata_compress_error_bound(codec, amax);
}

/* ---------------------------------------------------------------------------------------------
 * Running one call.
 * ------------------------------------------------------------------------------------------- */
/* Sends `in` to the next rank and receives the previous rank's into `out`. One rank copies
 * `in` to `out`. In place (in == out) with more ranks, the receive lands in the scratch buffer
 * ctx->expected and is copied over `out` once the send is done with it: a transport may read the
 * sender's buffer until its send completes, and the receive must not overwrite it first. The copy
 * is part of the time. */
static int bench_sendrecv(const bench_ctx *ctx, const void *in, void *out, size_t count,
                          strata_dtype dtype) {
  int to = (ctx->rank + 1) % ctx->nranks, from = (ctx->rank - 1 + ctx->nranks) % ctx->nranks;
  if (ctx->nranks == 1) { /* to itself: strata_isend has no self peer, the copy is the call */
    if (in != out) memcpy(out, in, count * strata_dtype_size(dtype));
    return STRATA_OK;
  }
  int staged = in == out;
  void *landing = staged ? ctx->expected : out;
  strata_request *recv_req = NULL, *send_req = NULL;
  int status = strata_irecv(ctx->comm, landing, count, dtype, from, &recv_req);
  if (status) return status;
  status = strata_isend(ctx->comm, in, count, dtype, to, &send_req);
  int recv_status = strata_request_wait(recv_req);
  int send_status = status ? status : strata_request_wait(send_req);
  if (staged && !recv_status && !send_status)
    memcpy(out, landing, count * strata_dtype_size(dtype));
  return send_status ? send_status : recv_status;
}

/* alltoallv (nccl-tests' AlltoAllvRunColl): a receive from and a send to every other rank at
 * once, each share in rank order; this rank's own share is a copy. In place, the receives land
 * in the scratch buffer and are copied over the input once every send is done with it. */
static int bench_alltoallv_call(const bench_ctx *ctx, const bench_case *c, const char *in,
                                char *out) {
  int n = ctx->nranks, rank = ctx->rank, posted = 0, status = STRATA_OK;
  size_t type_bytes = c->type_bytes, send_at = 0, recv_at = 0;
  strata_request **requests = calloc(2 * (size_t)n, sizeof *requests);
  if (!requests) return STRATA_ERR_NO_MEMORY;
  char *landing = c->in_place ? ctx->expected : out;
  for (int peer = 0; peer < n && !status; peer++) {
    size_t send = bench_alltoallv_elements(ctx, c, rank, peer);
    size_t recv = bench_alltoallv_elements(ctx, c, peer, rank);
    if (peer == rank) {
      memcpy(landing + recv_at * type_bytes, in + send_at * type_bytes, send * type_bytes);
    } else {
      if (recv)
        status = strata_irecv(ctx->comm, landing + recv_at * type_bytes, recv, c->dtype, peer,
                              &requests[posted++]);
      if (!status && send)
        status = strata_isend(ctx->comm, in + send_at * type_bytes, send, c->dtype, peer,
                              &requests[posted++]);
    }
    send_at += send;
    recv_at += recv;
  }
  for (int i = 0; i < posted; i++) {
    int done = strata_request_wait(requests[i]);
    if (!status) status = done;
  }
  if (!status && c->in_place) memcpy(out, landing, recv_at * type_bytes);
  free(requests);
  return status;
}

/* hypercube (nccl-tests' HyperCubeRunColl): this rank's block into place, then log2(n) rounds
 * in which each rank swaps everything it holds with the rank that differs in one bit. */
static int bench_hypercube_call(const bench_ctx *ctx, const bench_case *c, const char *in,
                                char *out) {
  int rank = ctx->rank;
  size_t count = c->layout.param_count, block = count * c->type_bytes;
  if (out + (size_t)rank * block != in) memcpy(out + (size_t)rank * block, in, block);
  for (int mask = 1; mask < ctx->nranks; mask <<= 1) {
    int mine = rank & ~(mask - 1), theirs = mine ^ mask;
    strata_request *recv = NULL, *send = NULL;
    int status = strata_irecv(ctx->comm, out + (size_t)theirs * block, count * (size_t)mask,
                              c->dtype, rank ^ mask, &recv);
    if (status) return status;
    status = strata_isend(ctx->comm, out + (size_t)mine * block, count * (size_t)mask, c->dtype,
                          rank ^ mask, &send);
    int recv_status = strata_request_wait(recv);
    int send_status = status ? status : strata_request_wait(send);
    if (send_status || recv_status) return send_status ? send_status : recv_status;
  }
  return STRATA_OK;
}

static int bench_call(const bench_ctx *ctx, const bench_case *c) {
  size_t count = c->layout.param_count;
  /* nccl-tests skips empty calls too; alltoallv from a matrix passes 0 and still moves bytes */
  if (count == 0 && c->kind != BENCH_ALLTOALLV) return STRATA_OK;
  const void *in = bench_send_ptr(ctx, c);
  void *out = bench_recv_ptr(ctx, c);
  strata_comm *comm = ctx->comm;
  switch (c->kind) {
    case BENCH_ALLREDUCE:
      return strata_allreduce(comm, in, out, count, c->dtype, c->op);
    case BENCH_REDUCE_SCATTER:
      return strata_reduce_scatter(comm, in, out, count, c->dtype, c->op);
    case BENCH_ALLGATHER:
      return strata_allgather(comm, in, out, count, c->dtype);
    case BENCH_BROADCAST:
      return strata_broadcast(comm, in, out, count, c->dtype, c->root);
    case BENCH_REDUCE:
      return strata_reduce(comm, in, out, count, c->dtype, c->op, c->root);
    case BENCH_GATHER:
      return strata_gather(comm, in, out, count, c->dtype, c->root);
    case BENCH_SCATTER:
      return strata_scatter(comm, in, out, count, c->dtype, c->root);
    case BENCH_ALLTOALL:
      return strata_alltoall(comm, in, out, count, c->dtype);
    case BENCH_SENDRECV:
      return bench_sendrecv(ctx, in, out, count, c->dtype);
    case BENCH_ALLTOALLV:
      return bench_alltoallv_call(ctx, c, in, out);
    case BENCH_HYPERCUBE:
      return bench_hypercube_call(ctx, c, in, out);
    default:
      return STRATA_ERR_INVALID_ARG;
  }
}

/* Combines a per-rank time as -a says (nccl-tests' Allreduce(args, &deltaSec, average)). */
static int bench_combine_time(const bench_ctx *ctx, double *seconds) {
  double value = *seconds;
  int status;
  switch (ctx->opt->average) {
    case 0:
      status = strata_broadcast(ctx->comm, &value, &value, 1, STRATA_F64, 0);
      break;
    case 1:
      status = strata_allreduce(ctx->comm, &value, &value, 1, STRATA_F64, STRATA_AVG);
      break;
    case 2:
      status = strata_allreduce(ctx->comm, &value, &value, 1, STRATA_F64, STRATA_MIN);
      break;
    default:
      status = strata_allreduce(ctx->comm, &value, &value, 1, STRATA_F64, STRATA_MAX);
      break;
  }
  *seconds = value;
  return status;
}

/* Checks one call: fresh data, one run, local comparison, sum over ranks. *wrong = -1 if the
 * result is undefined (in-place sendrecv). */
static int bench_check(bench_ctx *ctx, const bench_case *c, long *wrong) {
  *wrong = -1;
  if (c->in_place && !bench_kinds[c->kind].inplace_checkable) return STRATA_OK;
  int rep = ++ctx->rep;
  bench_fill_input(ctx, c, rep);
  int status = bench_call(ctx, c);
  if (status) return status;
  size_t count = c->layout.param_count ? bench_fill_expected(ctx, c, rep) : 0;
  int64_t local = count ? bench_count_wrong(c, bench_recv_ptr(ctx, c), ctx->expected, count,
                                            bench_lossy_tolerance(ctx, c, ctx->expected, count))
                        : 0;
  int64_t total = 0;
  status = strata_allreduce(ctx->comm, &local, &total, 1, STRATA_I64, STRATA_SUM);
  *wrong = (long)total;
  return status;
}

/* -I: statistics over the iterations (nccl-tests' computeIterStats), in microseconds. */
typedef struct bench_iter_stats {
  double min_us, max_us, avg_us, p50_us, p95_us, p99_us, stdev_us, cv_pct;
} bench_iter_stats;

typedef struct bench_figures {
  double time_us, algbw_gbps, busbw_gbps;
  long wrong;           /* -1: not checked */
  double *iter_us;      /* -I: each iteration, the slowest rank's (opt->iters); else NULL */
  double *rank_iter_us; /* -I, rank 0 with more ranks: every rank's (nranks x iters) for -J */
  bench_iter_stats stats;
} bench_figures;

static int bench_compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* nccl-tests' percentileIndex (nearest rank). */
static int bench_percentile_index(int n, int percentile) {
  int index = (n * percentile + 99) / 100 - 1;
  return index < n - 1 ? index : n - 1;
}

static int bench_iter_stats_of(const double *times_us, int n, bench_iter_stats *st) {
  double *sorted = malloc((size_t)n * sizeof *sorted);
  if (!sorted) return STRATA_ERR_NO_MEMORY;
  memcpy(sorted, times_us, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, bench_compare_doubles);
  double sum = 0, var = 0;
  for (int i = 0; i < n; i++) sum += sorted[i];
  st->avg_us = sum / n;
  for (int i = 0; i < n; i++) var += (sorted[i] - st->avg_us) * (sorted[i] - st->avg_us);
  st->min_us = sorted[0];
  st->max_us = sorted[n - 1];
  st->p50_us = sorted[n / 2];
  st->p95_us = sorted[bench_percentile_index(n, 95)];
  st->p99_us = sorted[bench_percentile_index(n, 99)];
  st->stdev_us = sqrt(var / n);
  st->cv_pct = st->avg_us > 0 ? st->stdev_us / st->avg_us * 100.0 : 0.0;
  free(sorted);
  return STRATA_OK;
}

static void bench_figures_free(bench_figures *fig) {
  free(fig->iter_us);
  free(fig->rank_iter_us);
  fig->iter_us = fig->rank_iter_us = NULL;
}

/* -I: each iteration's time becomes the slowest rank's (nccl-tests takes the max over process
 * rows), rank 0 keeps every rank's for -J, and the statistics skip the first -K. Collective. */
static int bench_iter_combine(bench_ctx *ctx, bench_figures *fig, const double *local_s) {
  int n = ctx->opt->iters;
  double *local_us = malloc((size_t)n * sizeof *local_us);
  fig->iter_us = malloc((size_t)n * sizeof *fig->iter_us);
  double *all = malloc((size_t)n * (size_t)ctx->nranks * sizeof *all);
  int status = local_us && fig->iter_us && all ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  for (int i = 0; !status && i < n; i++) local_us[i] = local_s[i] * 1e6;
  /* every rank takes part even without memory, so that no peer waits: the verdict is shared */
  int have = !status, all_have = have;
  int agreed = strata_allreduce(ctx->comm, &have, &all_have, 1, STRATA_I32, STRATA_MIN);
  if (!agreed && all_have)
    agreed = strata_allgather(ctx->comm, local_us, all, (size_t)n, STRATA_F64);
  status = agreed ? agreed : (all_have ? STRATA_OK : STRATA_ERR_NO_MEMORY);
  for (int i = 0; !status && i < n; i++) {
    fig->iter_us[i] = all[i];
    for (int r = 1; r < ctx->nranks; r++) fig->iter_us[i] = fmax(fig->iter_us[i], all[r * n + i]);
  }
  if (!status) {
    int skip = ctx->opt->per_iter_skip;
    status = bench_iter_stats_of(fig->iter_us + skip, n - skip, &fig->stats);
  }
  if (!status && ctx->rank == 0 && ctx->nranks > 1) {
    fig->rank_iter_us = all;
    all = NULL;
  }
  free(local_us);
  free(all);
  return status;
}

/* nccl-tests' BenchTime: one untimed call, barrier, the timed loop (-z 1: a barrier after each
 * call; 3: one after each of the -n iterations, left out of the time), then -c checks, each on
 * fresh data, stopping at the first that finds a wrong element. */
static int bench_time(bench_ctx *ctx, const bench_case *c, bench_figures *fig) {
  const bench_options *opt = ctx->opt;
  if (opt->check) bench_fill_input(ctx, c, 99);
  int status = bench_call(ctx, c);
  if (!status) status = strata_barrier(ctx->comm);
  double *iter_s = opt->per_iter_timing ? calloc((size_t)opt->iters, sizeof *iter_s) : NULL;
  if (opt->per_iter_timing && !iter_s) status = STRATA_ERR_NO_MEMORY;
  double start_s = tool_now_s(), timed_s = 0;
  for (int i = 0; i < opt->iters && !status; i++) {
    double t0 = tool_now_s();
    for (int a = 0; a < opt->agg_iters && !status; a++) {
      status = bench_call(ctx, c);
      if (!status && opt->blocking == 1) status = strata_barrier(ctx->comm);
    }
    double t1 = tool_now_s();
    if (iter_s) iter_s[i] = (t1 - t0) / opt->agg_iters;
    timed_s += t1 - t0;
    if (!status && opt->blocking == 3) status = strata_barrier(ctx->comm);
  }
  double calls = (double)opt->iters * opt->agg_iters;
  double seconds = (opt->blocking == 3 ? timed_s : tool_now_s() - start_s) / calls;
  if (!status) status = bench_combine_time(ctx, &seconds);
  if (!status && iter_s) status = bench_iter_combine(ctx, fig, iter_s);
  free(iter_s);
  if (status) return status;
  fig->time_us = seconds * 1e6;
  bench_bandwidth(c->kind, &c->layout, c->type_bytes, seconds, ctx->nranks, &fig->algbw_gbps,
                  &fig->busbw_gbps);
  fig->wrong = -1;
  for (int k = 0; k < opt->check && !status; k++) {
    status = bench_check(ctx, c, &fig->wrong);
    if (fig->wrong > 0) break;
  }
  return status;
}

/* ---------------------------------------------------------------------------------------------
 * Output: the nccl-tests table on stdout and, with -J, JSON.
 * ------------------------------------------------------------------------------------------- */
typedef struct bench_row {
  size_t bytes, count;
  strata_dtype dtype;
  const char *redop;
  int root;
  bench_figures out_of_place, in_place;
  double predicted_busbw_gbps; /* NAN without --predict */
} bench_row;

typedef struct bench_report {
  int keep_rows; /* 0 (-N 0 without -J: an endless run): only the totals below are kept */
  bench_row *rows;
  size_t rows_count, rows_capacity;
  int errors; /* tests with #wrong > 0 (nccl-tests' "Out of bounds values") */
  double busbw_sum;
  int busbw_count;
} bench_report;

/* nccl-tests' getFloatStr: two decimals when they fit the width, then one, then none, then an
 * exponent. */
static void bench_float_text(double value, int width, char *out) {
  if (snprintf(out, (size_t)width + 1, "%*.2f", width, value) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.1f", width, value) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.0f", width, value) <= width) return;
  snprintf(out, (size_t)width + 1, width >= 7 ? "%*.1e" : "%*.0e", width, value);
}

/* "YYYY-mm-dd HH:MM:SS" of now, local time (nccl-tests' formatNow). */
static void bench_time_text(char *out, size_t len) {
  time_t now = time(NULL);
  struct tm local;
  if (!localtime_r(&now, &local) || !strftime(out, len, "%Y-%m-%d %H:%M:%S", &local))
    snprintf(out, len, "?");
}

static void bench_print_timestamp(void) {
  char text[32];
  bench_time_text(text, sizeof text);
  printf("%21s", text);
}

/* One placement's figures (nccl-tests' writeBenchmarkLineBody), then -I's. */
static void bench_print_figures(const bench_options *opt, const bench_figures *fig, int in_place) {
  char time_text[8], algbw_text[7], busbw_text[7];
  bench_float_text(fig->time_us, 7, time_text);
  bench_float_text(fig->algbw_gbps, 6, algbw_text);
  bench_float_text(fig->busbw_gbps, 6, busbw_text);
  if (fig->wrong >= 0)
    printf("  %7s  %6s  %6s  %6g", time_text, algbw_text, busbw_text, (double)fig->wrong);
  else
    printf("  %7s  %6s  %6s    N/A", time_text, algbw_text, busbw_text);
  if (in_place && opt->report_timestamps && !opt->per_iter_timing) bench_print_timestamp();
  if (!opt->per_iter_timing) return;
  char min_text[8], max_text[8], p99_text[8], cv_text[8];
  bench_float_text(fig->stats.min_us, 7, min_text);
  bench_float_text(fig->stats.max_us, 7, max_text);
  bench_float_text(fig->stats.p99_us, 7, p99_text);
  bench_float_text(fig->stats.cv_pct, 7, cv_text);
  printf("  %7s  %7s  %7s  %7s", min_text, max_text, p99_text, cv_text);
  if (in_place && opt->report_timestamps) bench_print_timestamp();
}

static void bench_print_row(const bench_options *opt, const bench_row *row) {
  char root[16];
  snprintf(root, sizeof root, "%6i", row->root);
  printf("%12zu  %12zu  %8s  %6s  %6s", row->bytes, row->count, bench_type_names[row->dtype],
         row->redop, root);
  bench_print_figures(opt, &row->out_of_place, 0);
  bench_print_figures(opt, &row->in_place, 1);
  if (opt->predict) {
    if (isnan(row->predicted_busbw_gbps))
      printf("  %7s", "N/A");
    else
      printf("  %7.2f", row->predicted_busbw_gbps);
  }
  printf("\n");
  fflush(stdout);
}

/* nccl-tests' writeResultHeader, with --predict's column after its own. */
static void bench_print_columns(const bench_options *opt) {
  const char *time_name = opt->report_cputime ? "cputime" : "time";
  const char *ts_label = opt->report_timestamps ? "timestamp" : "";
  const char *ts_format = opt->report_timestamps ? "%Y-%m-%d %H:%M:%S" : "";
  int ts_pad = opt->report_timestamps ? 19 : 0;
  const char *model[3] = {"", "", ""};
  if (opt->predict) {
    model[0] = "    model";
    model[1] = "    busbw";
    model[2] = "   (GB/s)";
  }
  printf("#\n");
  if (opt->per_iter_timing) {
    printf(
        "# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)       "
        "                         in-place (+ per-iteration)%s\n",
        "", "", "", "", "", model[0]);
    printf(
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  "
        "%6s  %7s  %7s  %7s  %7s %*s%s\n",
        "size", "count", "type", "redop", "root", time_name, "algbw", "busbw", "#wrong", "i_min",
        "i_max", "i_p99", "i_cv%", time_name, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
        "i_cv%", ts_pad, ts_label, model[1]);
    printf(
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  "
        "%6s  %7s  %7s  %7s  %7s %*s%s\n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)",
        "(%)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", ts_pad, ts_format,
        model[2]);
  } else {
    printf(
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place   "
        "       %s\n",
        "", "", "", "", "", model[0]);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s%s\n", "size",
           "count", "type", "redop", "root", time_name, "algbw", "busbw", "#wrong", time_name,
           "algbw", "busbw", "#wrong", ts_pad, ts_label, model[1]);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s%s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
           ts_pad, ts_format, model[2]);
  }
  fflush(stdout);
}

/* The "# Using devices" lines, one per rank, gathered to rank 0 in rank order. */
static int bench_print_ranks(bench_ctx *ctx) {
  char host[128] = "?", line[BENCH_HOST_LINE_BYTES];
  gethostname(host, sizeof host - 1);
  const strata_config *cfg = strata_comm_config(ctx->comm);
  int peer = (ctx->rank + 1) % ctx->nranks;
  snprintf(line, sizeof line,
           "#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] to rank %d: %s", ctx->rank, 0,
           (int)getpid(), host, cfg && cfg->local_rank > 0 ? cfg->local_rank : 0, peer,
           strata_comm_transport_name(ctx->comm, peer));
  char *lines = calloc((size_t)ctx->nranks, sizeof line);
  if (!lines) return STRATA_ERR_NO_MEMORY;
  int status = strata_allgather(ctx->comm, line, lines, sizeof line, STRATA_U8);
  if (!status && ctx->rank == 0) {
    printf("# Using devices\n");
    for (int r = 0; r < ctx->nranks; r++)
      printf("%.*s\n", BENCH_HOST_LINE_BYTES - 1, lines + r * sizeof line);
    ctx->rank_lines = lines; /* for -J's "devices" */
  } else {
    free(lines);
  }
  return status;
}

/* nccl-tests' start lines. The version line names strata's version where nccl-tests names its
 * own, and NCCL's as 0: there is no NCCL here. */
static void bench_print_header(const bench_options *opt) {
  printf("# nccl-tests version %s nccl-headers=0 nccl-library=0\n", BENCH_NCCL_TESTS_VERSION);
  printf("# Collective test starting: %s\n", bench_perf_names[opt->kind]);
  printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: %d validation: %d graph: 0 unalign: %d\n",
      opt->min_bytes, opt->max_bytes, opt->step_factor > 1 ? opt->step_factor : opt->step_bytes,
      opt->step_factor > 1 ? "factor" : "bytes", opt->warmup_iters, opt->iters, opt->agg_iters,
      opt->check, opt->unalign);
  if (opt->blocking == 1)
    printf("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (opt->blocking == 2)
    printf("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (opt->blocking == 3)
    printf(
        "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes "
        "barrier \n");
  if (opt->per_iter_timing) {
    printf("# Per-Iteration Report: CPU clock timing; i_* uses max over process rows");
    if (opt->per_iter_skip) printf("; summary skips first %d iterations", opt->per_iter_skip);
    printf(" \n");
  }
  printf("#\n");
}

static double bench_average_busbw(const bench_report *report) {
  return report->busbw_count ? report->busbw_sum / report->busbw_count : 0.0;
}

/* NCCL_TESTS_MIN_BW (GB/s), as nccl-tests reads it: the average bus bandwidth must reach 90% of
 * it. Returns "unchecked" when unset, else "true" or "false". */
static const char *bench_min_bw_verdict(const bench_report *report) {
  const char *text = getenv("NCCL_TESTS_MIN_BW");
  if (!text) return "unchecked";
  return bench_average_busbw(report) < atof(text) * 0.9 ? "false" : "true";
}

/* The row and per-iteration figures a report holds. */
static void bench_report_free(bench_report *report) {
  for (size_t i = 0; i < report->rows_count; i++) {
    bench_figures_free(&report->rows[i].out_of_place);
    bench_figures_free(&report->rows[i].in_place);
  }
  free(report->rows);
  report->rows = NULL;
}

static int bench_report_add(bench_report *report, bench_row *row) {
  const bench_figures *both[2] = {&row->out_of_place, &row->in_place};
  for (int i = 0; i < 2; i++) {
    if (both[i]->wrong > 0) report->errors++;
    report->busbw_sum += both[i]->busbw_gbps;
    report->busbw_count++;
  }
  if (!report->keep_rows) {
    bench_figures_free(&row->out_of_place);
    bench_figures_free(&row->in_place);
    return STRATA_OK;
  }
  if (report->rows_count == report->rows_capacity) {
    size_t capacity = report->rows_capacity ? report->rows_capacity * 2 : 64;
    bench_row *rows = realloc(report->rows, capacity * sizeof *rows);
    if (!rows) return STRATA_ERR_NO_MEMORY; /* the caller frees the row's figures */
    report->rows = rows;
    report->rows_capacity = capacity;
  }
  report->rows[report->rows_count++] = *row;
  return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * -J: nccl-tests' JSON (src/util.cu there): the same keys, nesting and value types, booleans as
 * the strings "true"/"false" and the root as a "%6i" string as it writes them; what only strata
 * knows goes under "strata".
 * ------------------------------------------------------------------------------------------- */
#define BENCH_JSON_FORMAT_VERSION 3 /* JSON_FILE_VERSION of BENCH_NCCL_TESTS_VERSION */
#define BENCH_JSON_REAL_DIGITS 9
#define BENCH_JSON_MAX_SUFFIX 1000

/* Rank 0: creates the -J file before anything runs, as nccl-tests does (never overwriting: when
 * FILE exists, FILE.0, FILE.1, ...). Returns 0, or -1 with the reason printed. */
static int bench_json_open(bench_ctx *ctx) {
  const char *path = ctx->opt->json_path;
  size_t len = strlen(path) + 16;
  ctx->json_path = malloc(len);
  if (!ctx->json_path) return -1;
  snprintf(ctx->json_path, len, "%s", path);
  for (int suffix = 0; !(ctx->json = fopen(ctx->json_path, "wx")); suffix++) {
    if (errno != EEXIST || suffix == BENCH_JSON_MAX_SUFFIX) {
      fprintf(stderr, "strata bench: -J %s: cannot create %s: %s\n", path, ctx->json_path,
              strerror(errno));
      return -1;
    }
    snprintf(ctx->json_path, len, "%s.%d", path, suffix);
  }
  printf("# Writing JSON output to %s\n", ctx->json_path);
  bench_time_text(ctx->start_time, sizeof ctx->start_time);
  return 0;
}

/* A variable's "NAME=value" for "env", with the value hidden when the name says it is a secret
 * (STRATA_SECRET, tokens, passwords, keys): a results file gets shared. */
static json_t *bench_json_env_entry(const char *entry) {
  static const char *const secret_words[] = {"SECRET", "TOKEN", "PASSW", "CREDENTIAL", "KEY"};
  const char *equals = strchr(entry, '=');
  size_t name_len = equals ? (size_t)(equals - entry) : strlen(entry);
  char name[256];
  snprintf(name, sizeof name, "%.*s", (int)(name_len < sizeof name ? name_len : sizeof name - 1),
           entry);
  for (size_t w = 0; equals && w < sizeof secret_words / sizeof *secret_words; w++) {
    if (!strstr(name, secret_words[w])) continue;
    char hidden[300];
    snprintf(hidden, sizeof hidden, "%s=(hidden)", name);
    return strata_json_string(hidden);
  }
  return strata_json_string(entry);
}

static json_t *bench_json_strings(int count, char *const *strings, int env) {
  json_t *list = json_array();
  for (int i = 0; env ? strings[i] != NULL : i < count; i++)
    list = strata_json_append(
        list, env ? bench_json_env_entry(strings[i]) : strata_json_string(strings[i]));
  return list;
}

/* "devices": nccl-tests parses its "#  Rank ..." lines into these fields; so do we. */
static json_t *bench_json_devices(const bench_ctx *ctx) {
  json_t *list = json_array();
  for (int r = 0; ctx->rank_lines && r < ctx->nranks; r++) {
    const char *line = ctx->rank_lines + (size_t)r * BENCH_HOST_LINE_BYTES;
    int rank = r, group = 0, pid = 0, device = 0;
    char host[128] = "", hex[32] = "", info[BENCH_HOST_LINE_BYTES] = "";
    sscanf(line, "#  Rank %d Group %d Pid %d on %127s device %d [%31[^]]] %255[^\n]", &rank, &group,
           &pid, host, &device, hex, info);
    list = strata_json_append(
        list, json_pack("{s:i, s:i, s:i, s:o, s:i, s:o, s:o}", "rank", rank, "group", group, "pid",
                        pid, "hostname", strata_json_string(host), "device", device, "device_hex",
                        strata_json_string(hex), "device_info", strata_json_string(info)));
  }
  return list;
}

static json_t *bench_json_config(const bench_ctx *ctx) {
  const bench_options *opt = ctx->opt;
  json_t *config =
      json_pack("{s:i, s:i, s:I, s:I}", "nthreads", 1, "ngpus", 1, "minimum_bytes",
                (json_int_t)opt->min_bytes, "maximum_bytes", (json_int_t)opt->max_bytes);
  if (opt->step_factor > 1)
    config = strata_json_set(config, "step_factor", json_integer((json_int_t)opt->step_factor));
  else
    config = strata_json_set(config, "step_bytes", json_integer((json_int_t)opt->step_bytes));
  config = strata_json_set(config, "warmup_iters", json_integer(opt->warmup_iters));
  config = strata_json_set(config, "iterations", json_integer(opt->iters));
  config = strata_json_set(config, "aggregated_iterations", json_integer(opt->agg_iters));
  config = strata_json_set(config, "validation", json_integer(opt->check));
  config = strata_json_set(config, "graph", json_integer(0));
  config = strata_json_set(config, "blocking_collectives",
                           json_string(opt->blocking ? "true" : "false"));
  config = strata_json_set(config, "per_iter_timing",
                           json_string(opt->per_iter_timing ? "true" : "false"));
  config = strata_json_set(config, "per_iter_skip", json_integer(opt->per_iter_skip));
  config =
      strata_json_set(config, "parallel_init", json_string(opt->parallel_init ? "true" : "false"));
  return strata_json_set(config, "devices", bench_json_devices(ctx));
}

static json_t *bench_json_figures(const bench_options *opt, const bench_figures *fig) {
  return json_pack("{s:f, s:f, s:f, s:o}", opt->report_cputime ? "cpu_time" : "time", fig->time_us,
                   "alg_bw", fig->algbw_gbps, "bus_bw", fig->busbw_gbps, "nwrong",
                   fig->wrong < 0 ? json_null() : json_real((double)fig->wrong));
}

static json_t *bench_json_reals(const double *values, int n) {
  json_t *list = json_array();
  for (int i = 0; i < n; i++) list = strata_json_append(list, json_real(values[i]));
  return list;
}

/* -I: nccl-tests' "*_per_iter" object. */
static json_t *bench_json_per_iter(const bench_ctx *ctx, const bench_figures *fig) {
  const bench_iter_stats *st = &fig->stats;
  int n = ctx->opt->iters;
  json_t *json = json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:o}",
                           "skipped_iterations", ctx->opt->per_iter_skip, "min_us", st->min_us,
                           "max_us", st->max_us, "avg_us", st->avg_us, "p50_us", st->p50_us,
                           "p95_us", st->p95_us, "p99_us", st->p99_us, "stdev_us", st->stdev_us,
                           "cv_pct", st->cv_pct, "times_us", bench_json_reals(fig->iter_us, n));
  if (!fig->rank_iter_us) return json;
  json_t *rows = json_array();
  for (int r = 0; r < ctx->nranks; r++)
    rows = strata_json_append(rows, bench_json_reals(fig->rank_iter_us + (size_t)r * n, n));
  return strata_json_set(json, "per_process_max_times_us", rows);
}

static json_t *bench_json_row(const bench_ctx *ctx, const bench_row *row) {
  char root[16];
  snprintf(root, sizeof root, "%6i", row->root);
  const bench_options *opt = ctx->opt;
  json_t *json =
      json_pack("{s:I, s:I, s:s, s:s, s:s, s:o}", "size", (json_int_t)row->bytes, "count",
                (json_int_t)row->count, "type", bench_type_names[row->dtype], "redop", row->redop,
                "root", root, "out_of_place", bench_json_figures(opt, &row->out_of_place));
  if (opt->per_iter_timing)
    json = strata_json_set(json, "out_of_place_per_iter",
                           bench_json_per_iter(ctx, &row->out_of_place));
  json = strata_json_set(json, "in_place", bench_json_figures(opt, &row->in_place));
  if (opt->per_iter_timing)
    json = strata_json_set(json, "in_place_per_iter", bench_json_per_iter(ctx, &row->in_place));
  json = strata_json_set(json, "actual_iterations", json_integer(opt->iters));
  json = strata_json_set(json, "experiment_name", json_string(""));
  if (!isnan(row->predicted_busbw_gbps))
    json = strata_json_set(json, "predicted_bus_bw", json_real(row->predicted_busbw_gbps));
  return json;
}

static int bench_write_json(bench_ctx *ctx, const bench_report *report) {
  const bench_options *opt = ctx->opt;
  json_t *results = json_array();
  for (size_t i = 0; i < report->rows_count; i++)
    results = strata_json_append(results, bench_json_row(ctx, &report->rows[i]));
  char end_time[32];
  bench_time_text(end_time, sizeof end_time);
  json_t *strata = json_pack(
      "{s:s, s:s, s:i, s:s, s:i, s:s}", "version", strata_version(), "collective",
      bench_kinds[opt->kind].name, "nranks", ctx->nranks, "transport",
      strata_comm_transport_name(ctx->comm, (ctx->rank + 1) % ctx->nranks), "average", opt->average,
      "compress", strata_compress_name(strata_comm_config(ctx->comm)->compress));
  json_t *doc = json_pack(
      "{s:i, s:s, s:o, s:o, s:i, s:o, s:o, s:o, s:{s:f, s:s}, s:[], s:o, s:s}", "version",
      BENCH_JSON_FORMAT_VERSION, "start_time", ctx->start_time, "args",
      bench_json_strings(ctx->argc, ctx->argv, 0), "env", bench_json_strings(0, environ, 1),
      "nccl_version", 0, "config", bench_json_config(ctx), "results", results, "out_of_bounds",
      json_pack("{s:i, s:s}", "count", report->errors, "okay", report->errors ? "false" : "true"),
      "average_bus_bandwidth", "bandwidth", bench_average_busbw(report), "okay",
      bench_min_bw_verdict(report), "errors", "strata", strata, "end_time", end_time);
  int rc = strata_json_write(ctx->json, doc, BENCH_JSON_REAL_DIGITS);
  if (fclose(ctx->json) != 0) rc = -1;
  ctx->json = NULL;
  if (rc) fprintf(stderr, "strata bench: writing %s failed\n", ctx->json_path);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The model's prediction (--predict, tools/bench_predict.h).
 * ------------------------------------------------------------------------------------------- */
static const strata_coll bench_kind_colls[BENCH_KIND_COUNT] = {
    [BENCH_ALLREDUCE] = STRATA_COLL_ALLREDUCE, [BENCH_REDUCE_SCATTER] = STRATA_COLL_REDUCE_SCATTER,
    [BENCH_ALLGATHER] = STRATA_COLL_ALLGATHER, [BENCH_BROADCAST] = STRATA_COLL_BROADCAST,
    [BENCH_REDUCE] = STRATA_COLL_REDUCE,       [BENCH_GATHER] = STRATA_COLL_GATHER,
    [BENCH_SCATTER] = STRATA_COLL_SCATTER,     [BENCH_ALLTOALL] = STRATA_COLL_ALLTOALL,
    [BENCH_SENDRECV] = STRATA_COLL_SEND,       [BENCH_ALLTOALLV] = STRATA_COLL_SEND,
    [BENCH_HYPERCUBE] = STRATA_COLL_SEND, /* point to point, as sendrecv: no prediction */
};

/* The model's busbw for this row (out of place), scored like the measurement. NAN when the
 * model has no answer (sendrecv: not one collective schedule). */
static double bench_predict_busbw(const bench_ctx *ctx, const bench_case *c) {
  size_t count = c->layout.param_count;
  if (!ctx->model || count == 0 || c->kind == BENCH_SENDRECV || c->kind == BENCH_ALLTOALLV ||
      c->kind == BENCH_HYPERCUBE)
    return NAN;
  /* per call of the timed loop's calls in a row (bench_time): -z 1 one call alone, -z 3 the -m
   * calls of one iteration, else all of them */
  const bench_options *opt = ctx->opt;
  uint64_t calls = opt->blocking == 1   ? 1
                   : opt->blocking == 3 ? (uint64_t)opt->agg_iters
                                        : (uint64_t)opt->iters * (uint64_t)opt->agg_iters;
  double time_us = bench_predict_time_us(ctx->model, bench_kind_colls[c->kind], count,
                                         c->type_bytes, c->root < 0 ? 0 : c->root, calls);
  if (!(time_us > 0)) return NAN;
  double algbw = 0, busbw = 0;
  bench_bandwidth(c->kind, &c->layout, c->type_bytes, time_us * 1e-6, ctx->nranks, &algbw, &busbw);
  return busbw;
}

/* ---------------------------------------------------------------------------------------------
 * The run: for each type, op and size, out-of-place then in-place.
 * ------------------------------------------------------------------------------------------- */
static bench_case bench_case_for(const bench_ctx *ctx, strata_dtype dtype, strata_op op,
                                 size_t bytes) {
  bench_case c = {.kind = ctx->opt->kind, .dtype = dtype, .op = op, .root = ctx->opt->root};
  c.type_bytes = strata_dtype_size(dtype);
  c.layout =
      bench_layout_for(c.kind, bytes / c.type_bytes, c.type_bytes, ctx->nranks, &ctx->opt->pattern);
  if (!bench_kinds[c.kind].is_rooted) c.root = -1;
  return c;
}

/* nccl-tests' warm-up: -w calls at every size from -b to -e, doubling (whatever -f and -i say). */
static int bench_warmup(bench_ctx *ctx, strata_dtype dtype, strata_op op) {
  const bench_options *opt = ctx->opt;
  for (size_t bytes = opt->min_bytes; bytes <= opt->max_bytes;
       bytes = bytes && bytes * 2 > bytes ? bytes * 2 : opt->max_bytes + 1) {
    bench_case c = bench_case_for(ctx, dtype, op, bytes);
    for (int i = 0; i < opt->warmup_iters; i++) {
      int status = bench_call(ctx, &c);
      if (status) return status;
    }
  }
  return STRATA_OK;
}

static int bench_one_size(bench_ctx *ctx, bench_report *report, strata_dtype dtype, strata_op op,
                          size_t bytes) {
  bench_case c = bench_case_for(ctx, dtype, op, bytes);
  bench_row row = {.dtype = dtype, .root = c.root, .count = c.layout.param_count};
  size_t send = c.layout.send_count, recv = c.layout.recv_count;
  row.bytes = (send > recv ? send : recv) * c.type_bytes;
  /* nccl-tests names no op for data movement, and hypercube.cu passes an empty one */
  row.redop = bench_kinds[c.kind].is_reduction ? strata_op_name(op)
              : c.kind == BENCH_HYPERCUBE      ? ""
                                               : "none";
  row.predicted_busbw_gbps = ctx->opt->predict ? bench_predict_busbw(ctx, &c) : NAN;
  int status = bench_time(ctx, &c, &row.out_of_place);
  if (!status && ctx->rank == 0 && c.kind == BENCH_ALLTOALLV && ctx->opt->pattern.print_summary)
    bench_alltoallv_print_summary(&ctx->opt->pattern, ctx->nranks,
                                  c.layout.param_count * (size_t)ctx->nranks * c.type_bytes,
                                  row.out_of_place.time_us * 1e-6);
  if (!status) {
    c.in_place = 1;
    status = bench_time(ctx, &c, &row.in_place);
  }
  if (!status) {
    if (ctx->rank == 0) bench_print_row(ctx->opt, &row);
    status = bench_report_add(report, &row);
  }
  if (status) {
    fprintf(stderr, "strata bench: rank %d: %s of %zu bytes (%s) failed: %s\n", ctx->rank,
            bench_kinds[c.kind].name, row.bytes, c.in_place ? "in-place" : "out-of-place",
            strata_strerror(status));
    bench_figures_free(&row.out_of_place);
    bench_figures_free(&row.in_place);
  }
  return status;
}

static size_t bench_next_size(const bench_options *opt, size_t bytes) {
  size_t next = opt->step_factor > 1 ? bytes * opt->step_factor : bytes + opt->step_bytes;
  return next <= bytes ? opt->max_bytes + 1 : next; /* overflow ends the loop */
}

static int bench_run(bench_ctx *ctx, bench_report *report) {
  const bench_options *opt = ctx->opt;
  int op_count = bench_kinds[opt->kind].is_reduction ? opt->ops_count : 1;
  if (opt->kind == BENCH_HYPERCUBE && (ctx->nranks & (ctx->nranks - 1))) {
    if (ctx->rank == 0) printf("nRanks %d is not a power of 2, skipping\n", ctx->nranks);
    return STRATA_OK; /* as nccl-tests: no rows, not a failure */
  }
  for (int t = 0; t < opt->types_count; t++) {
    for (int o = 0; o < op_count; o++) {
      int status = bench_warmup(ctx, opt->types[t], opt->ops[o]);
      /* -N: the sweep again, each row printed; 0 runs until interrupted */
      for (long cycle = 0; !status && (opt->run_cycles == 0 || cycle < opt->run_cycles); cycle++)
        for (size_t bytes = opt->min_bytes; !status && bytes <= opt->max_bytes;
             bytes = bench_next_size(opt, bytes))
          status = bench_one_size(ctx, report, opt->types[t], opt->ops[o], bytes);
      if (status) return status;
    }
  }
  return STRATA_OK;
}

/* Bytes of each of the three buffers (send, receive, expected). */
static size_t bench_buffer_bytes(const bench_options *opt) {
  /* 64 bytes of slack past -e, and -u's skew of up to 8 bytes an element (nccl-tests pads so) */
  size_t bytes = (opt->max_bytes + 64 + 8 * (size_t)opt->unalign + 63) / 64 * 64;
  /* --predict calibrates on these very buffers (bench_predict_setup), which must hold its
   * largest point */
  if (opt->predict && bytes < bench_predict_buffer_bytes()) bytes = bench_predict_buffer_bytes();
  return bytes;
}

/* MemAvailable from /proc/meminfo, in bytes; 0 when unknown. */
static double bench_mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  double kib = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib * 1024;
}

static double bench_gib(double bytes) {
  return bytes / (1024.0 * 1024 * 1024);
}

/* Whether the buffers of every rank on this host fit in its available memory, decided before any
 * is allocated: past that, the kernel's OOM killer ends the run with no word. Collective.
 * Returns 0 when they fit (or the memory is unknown), 1 when not (this rank said why), or a
 * negative strata status. */
static int bench_check_memory(const bench_ctx *ctx) {
  char host[64] = "", *hosts = calloc((size_t)ctx->nranks, sizeof host);
  if (!hosts) return STRATA_ERR_NO_MEMORY;
  gethostname(host, sizeof host - 1);
  int status = strata_allgather(ctx->comm, host, hosts, sizeof host, STRATA_U8);
  int on_host = 0, first_on_host = ctx->rank;
  for (int r = 0; !status && r < ctx->nranks; r++) {
    int same = !strncmp(hosts + (size_t)r * sizeof host, host, sizeof host);
    if (same && !on_host) first_on_host = r;
    on_host += same;
  }
  free(hosts);
  if (status) return -status;
  double each = (double)bench_buffer_bytes(ctx->opt), need = 3.0 * each * on_host;
  double available = bench_mem_available();
  if (available <= 0 || need <= available) return 0;
  if (ctx->rank != first_on_host) return 1; /* one message per host */
  fprintf(stderr,
          "strata bench: rank %d: -e %zu needs 3 buffers of %.2f GiB (send, receive, check) on "
          "each of the %d ranks on %s, %.2f GiB in all, but %.2f GiB is available "
          "(MemAvailable in /proc/meminfo); lower -e\n",
          ctx->rank, ctx->opt->max_bytes, bench_gib(each), on_host, host, bench_gib(need),
          bench_gib(available));
  return 1;
}

static int bench_buffers_alloc(bench_ctx *ctx) {
  size_t bytes = bench_buffer_bytes(ctx->opt);
  ctx->buffer_bytes = ctx->opt->max_bytes + 64;
  ctx->alloc_bytes = bytes;
  ctx->sendbuf = tool_buffer_alloc(bytes, ctx->opt->registered);
  ctx->recvbuf = tool_buffer_alloc(bytes, ctx->opt->registered);
  ctx->expected = tool_buffer_alloc(bytes, 0); /* private: no peer reads it */
  if (!ctx->sendbuf || !ctx->recvbuf || !ctx->expected) {
    fprintf(stderr, "strata bench: rank %d: cannot allocate 3 x %zu bytes%s\n", ctx->rank, bytes,
            ctx->opt->registered ? " (-R: strata_mem_alloc)" : "");
    return -1;
  }
  memset(ctx->sendbuf, 0, bytes); /* touch every page before timing */
  memset(ctx->recvbuf, 0, bytes);
  memset(ctx->expected, 0, bytes);
  return 0;
}

static void bench_buffers_free(bench_ctx *ctx) {
  tool_buffer_free(ctx->sendbuf, ctx->opt->registered);
  tool_buffer_free(ctx->recvbuf, ctx->opt->registered);
  tool_buffer_free(ctx->expected, 0);
}

/* nccl-tests' getMemString: B, KB, MB or GB (powers of 1024), 2 decimals under 10, 1 under
 * 100. */
static void bench_memory_text(double bytes, char *out, size_t len) {
  const char *unit = " B";
  if (fabs(bytes) >= 1024.0 * 1024 * 1024)
    unit = " GB", bytes /= 1024.0 * 1024 * 1024;
  else if (fabs(bytes) >= 1024.0 * 1024)
    unit = " MB", bytes /= 1024.0 * 1024;
  else if (fabs(bytes) >= 1024.0)
    unit = " KB", bytes /= 1024.0;
  int precision = fabs(bytes) < 10.0 ? 2 : fabs(bytes) < 100.0 ? 1 : 0;
  snprintf(out, len, "%.*f%s", precision, bytes, unit);
}

/* nccl-tests' end lines. memory: -M's three figures (the largest rank's), else NULL. */
static void bench_print_footer(const bench_options *opt, const bench_report *report,
                               const double *memory) {
  const char *min_bw = bench_min_bw_verdict(report);
  printf("# %-20s : %d %s\n", "Out of bounds values", report->errors,
         report->errors ? "FAILED" : "OK");
  printf("# %-20s : %g %s\n", "Avg bus bandwidth", bench_average_busbw(report),
         !strcmp(min_bw, "unchecked") ? ""
         : !strcmp(min_bw, "true")    ? "OK"
                                      : "FAILED");
  printf("#\n");
  printf("# Collective test concluded: %s\n", bench_perf_names[opt->kind]);
  if (memory) {
    char text[3][32], total[32];
    for (int i = 0; i < 3; i++) bench_memory_text(memory[i], text[i], sizeof text[i]);
    bench_memory_text(memory[0] + memory[1] + memory[2], total, sizeof total);
    printf("# %-20s : Initialization %s | User-Allocated %s | Collective %s | Total  %s\n",
           "Host memory usage", text[0], text[1], text[2], total);
  }
  printf("#\n");
  printf("\n"); /* nccl-tests' writeErrors: the blank line when NCCL reported no error */
  fflush(stdout);
}

/* -M: resident memory the communicator, the buffers and the run added, each the largest rank's
 * (nccl-tests reports the GPU's the same three ways). Collective. */
static int bench_memory_usage(const bench_ctx *ctx, double memory[3]) {
  double now = bench_rss_bytes();
  double local[3] = {ctx->rss_joined - ctx->rss_start, ctx->rss_buffers - ctx->rss_joined,
                     now - ctx->rss_buffers};
  for (int i = 0; i < 3; i++)
    if (!(ctx->rss_start > 0 && now > 0) || local[i] < 0) local[i] = 0;
  return strata_allreduce(ctx->comm, local, memory, 3, STRATA_F64, STRATA_MAX);
}

/* What compression saved on rank 0 (every call of the run, checks included). */
static void bench_print_wire(const bench_ctx *ctx) {
  const strata_config *cfg = strata_comm_config(ctx->comm);
  strata_comm_stats st;
  if (cfg->compress == STRATA_COMPRESS_NONE || strata_comm_get_stats(ctx->comm, &st) != STRATA_OK)
    return;
  printf("# Compression %s: rank 0 sent %llu wire bytes for %llu data bytes (%.1f%%, %.2fx less)\n",
         strata_compress_name(cfg->compress), (unsigned long long)st.wire_bytes_sent,
         (unsigned long long)st.data_bytes_sent,
         st.data_bytes_sent ? 100.0 * (double)st.wire_bytes_sent / (double)st.data_bytes_sent : 0,
         st.wire_bytes_sent ? (double)st.data_bytes_sent / (double)st.wire_bytes_sent : 0);
  printf("#\n");
}

/* alltoallv from a matrix file: the matrix covers the ranks and -e holds the busiest rank's
 * bytes (nccl-tests' checks, its words). */
static int bench_alltoallv_preflight(const bench_ctx *ctx) {
  const bench_alltoallv *pattern = &ctx->opt->pattern;
  if (ctx->nranks > pattern->dim) {
    if (ctx->rank == 0)
      fprintf(stderr,
              "Invalid alltoallv traffic matrix, requested nranks (%d) is larger than matrix "
              "size (%d) in file %s.\n",
              ctx->nranks, pattern->dim, pattern->path);
    return BENCH_EXIT_USAGE;
  }
  size_t send = 0, recv = 0;
  bench_alltoallv_max_counts(pattern, 1, ctx->nranks, 0, &send, &recv);
  size_t need = send > recv ? send : recv;
  if (ctx->opt->max_bytes >= need) return BENCH_EXIT_OK;
  if (ctx->rank == 0)
    fprintf(stderr,
            "maxBytes (-e) must be at least %zu bytes as required by traffic matrix file %s (got "
            "%zu). Increase -e.\n",
            need, pattern->path, ctx->opt->max_bytes);
  return BENCH_EXIT_USAGE;
}

/* Runs the benchmark on an initialized communicator. Returns the exit status. */
/* What must hold before anything runs: a root that exists, a -J file rank 0 could create, and
 * buffers that fit. Every rank learns the verdict (so none exits, and gets the others killed,
 * before the one that knows why said it). Returns 0 or the exit status. */
static int bench_preflight(bench_ctx *ctx) {
  const bench_options *opt = ctx->opt;
  int verdict = BENCH_EXIT_OK;
  if (bench_kinds[opt->kind].is_rooted && opt->root >= ctx->nranks) {
    if (ctx->rank == 0)
      fprintf(stderr, "strata bench: -r %d: no such rank (%d ranks)\n", opt->root, ctx->nranks);
    verdict = BENCH_EXIT_USAGE;
  }
  if (!verdict && opt->pattern.bytes) verdict = bench_alltoallv_preflight(ctx);
  if (!verdict && ctx->rank == 0 && opt->json_path && bench_json_open(ctx))
    verdict = BENCH_EXIT_USAGE;
  int memory = bench_check_memory(ctx);
  if (memory < 0) return BENCH_EXIT_FAILED;
  if (memory > 0 && !verdict) verdict = BENCH_EXIT_USAGE;
  int agreed = verdict;
  if (strata_allreduce(ctx->comm, &verdict, &agreed, 1, STRATA_I32, STRATA_MAX))
    return BENCH_EXIT_FAILED;
  return agreed;
}

/* Rank 0 with -J: a run that failed leaves no empty or partial file behind. */
static void bench_json_discard(bench_ctx *ctx) {
  if (!ctx->json) return;
  fclose(ctx->json);
  ctx->json = NULL;
  unlink(ctx->json_path);
}

/* The run on ctx->comm; the rows land in *report, which the caller frees (report->rows). */
static int bench_main(bench_ctx *ctx, bench_report *report) {
  const bench_options *opt = ctx->opt;
  int verdict = bench_preflight(ctx);
  if (verdict) {
    bench_json_discard(ctx);
    return verdict;
  }
  if (ctx->rank == 0) bench_print_header(opt);
  report->keep_rows = opt->run_cycles > 0 || opt->json_path; /* -N 0: an endless run */
  if (!ctx->rss_joined) ctx->rss_joined = bench_rss_bytes();
  int allocated = bench_print_ranks(ctx) == STRATA_OK && !bench_buffers_alloc(ctx);
  ctx->rss_buffers = bench_rss_bytes();
  if (!allocated) {
    strata_comm_abort(ctx->comm);
    bench_buffers_free(ctx);
    bench_json_discard(ctx);
    return BENCH_EXIT_FAILED;
  }
  if (opt->predict)
    ctx->model = bench_predict_setup(ctx->comm, opt->types[0], opt->ops[0], ctx->sendbuf,
                                     ctx->recvbuf, ctx->alloc_bytes);
  if (ctx->rank == 0) bench_print_columns(opt);
  int status = bench_run(ctx, report);
  double memory[3] = {0, 0, 0};
  if (!status && opt->memory_report) status = bench_memory_usage(ctx, memory);
  bench_predict_free(ctx->model);
  bench_buffers_free(ctx);
  int exit_status = BENCH_EXIT_OK;
  if (status) {
    strata_comm_abort(ctx->comm);
    exit_status = BENCH_EXIT_FAILED;
  } else {
    if (ctx->rank == 0) bench_print_wire(ctx);
    if (ctx->rank == 0) bench_print_footer(opt, report, opt->memory_report ? memory : NULL);
    if (report->errors || !strcmp(bench_min_bw_verdict(report), "false"))
      exit_status = BENCH_EXIT_FAILED;
    if (ctx->rank == 0 && opt->json_path && bench_write_json(ctx, report))
      exit_status = BENCH_EXIT_FAILED;
  }
  bench_json_discard(ctx); /* still open: the run failed before writing it */
  return exit_status;
}

/* Joins the job the environment describes; with no launcher at all, runs as one rank (as
 * nccl-tests does without MPI). */
static int bench_comm_init(const bench_options *opt, strata_comm **comm) {
  strata_config cfg;
  char err[256] = "";
  strata_config_init(&cfg);
  int status = strata_config_from_env(&cfg, err, sizeof err);
  if (status) {
    fprintf(stderr, "strata bench: %s\n", err);
    return status;
  }
  if (cfg.rank < 0 && cfg.world_size < 0) {
    cfg.rank = 0;
    cfg.world_size = 1;
  }
  if (opt->compress != STRATA_COMPRESS_DEFAULT) cfg.compress = opt->compress;
  if (opt->timeout_s > 0) { /* -T: a stalled call fails, and so does a silent peer */
    cfg.op_timeout_s = opt->timeout_s;
    if (cfg.timeout_s > opt->timeout_s) cfg.timeout_s = opt->timeout_s;
  }
  return strata_comm_init(&cfg, comm);
}

/* `strata bench --cipher`: GB/s of one core sealing and opening 256 KiB frames (the TCP
 * transport's sealed piece) with each cipher, as the planner's encryption cost assumes. */
static int bench_cipher(void) {
  enum { PIECE = 256 * 1024, BYTES = 1 << 30 };
  strata_cipher_rate rates[STRATA_CIPHER_COUNT];
  if (strata_cipher_measure(PIECE, BYTES, rates) != STRATA_OK) {
    fprintf(stderr, "strata bench --cipher: a cipher did not start or open its own frames\n");
    return BENCH_EXIT_FAILED;
  }
  printf("# cipher speed on one core, %d KiB frames\n", PIECE / 1024);
  for (int i = 0; i < STRATA_CIPHER_COUNT; i++)
    if (!rates[i].available)
      printf("%-18s  not available (no AES-NI)\n", rates[i].name);
    else
      printf("%-18s  seal %.2f GB/s  open %.2f GB/s\n", rates[i].name, rates[i].seal_gbps,
             rates[i].open_gbps);
  return BENCH_EXIT_OK;
}

/* `strata bench --codec`: f32 GB/s of one core encoding and decoding each lossy wire encoding
 * (16 MiB of values, the best of 5 rounds), as the planner's cost of a compressed outer exchange
 * assumes (physics.h, strata_codec_core_gbps). */
static int bench_codec(void) {
  enum { VALUES = 4 << 20, ROUNDS = 5 };
  printf("# wire encodings on one core, %d Mi f32 values, GB/s of f32 data (best of %d)\n",
         VALUES >> 20, ROUNDS);
  for (int c = 0; c < STRATA_COMPRESS_COUNT; c++) {
    if (c == STRATA_COMPRESS_NONE || c == STRATA_COMPRESS_DEFAULT) continue;
    strata_codec_rate rate;
    int status = strata_codec_measure((strata_compress)c, VALUES, ROUNDS, &rate);
    if (status != STRATA_OK) {
      fprintf(stderr, "strata bench --codec: %s: %s\n", strata_compress_name((strata_compress)c),
              strata_strerror(status));
      return BENCH_EXIT_FAILED;
    }
    printf("%-5s  encode %6.2f GB/s  decode %6.2f GB/s\n", strata_compress_name((strata_compress)c),
           rate.encode_gbps, rate.decode_gbps);
  }
  return BENCH_EXIT_OK;
}

/* `strata bench kv` starts its own two processes, so a launcher's ranks would each run it and
 * print a table: rank 0 runs it, the others leave it (a launcher's rank, else every process). */
static int bench_kv(int argc, char **argv) {
  strata_config cfg;
  char err[256];
  strata_config_init(&cfg);
  int in_job = strata_config_from_env(&cfg, err, sizeof err) == STRATA_OK && cfg.rank > 0;
  int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
  if (in_job && !help) {
    fprintf(stderr, "strata bench kv: rank %d leaves the run to rank 0 (it starts its own pair)\n",
            cfg.rank);
    return BENCH_EXIT_OK;
  }
  return strata_kv_bench_main(argc, argv);
}

static int bench_command(const bench_options *opt, int argc, char **argv);

int strata_cmd_bench(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--cipher")) return bench_cipher();
  if (argc == 2 && !strcmp(argv[1], "--codec")) return bench_codec();
  if (argc >= 2 && !strcmp(argv[1], "kv")) return bench_kv(argc - 1, argv + 1);
  bench_options opt;
  int status = bench_options_parse(argc, argv, &opt);
  if (status) {
    bench_options_free(&opt);
    if (status == -1) bench_usage(stdout);
    return status == -1 ? BENCH_EXIT_OK : status;
  }
  int exit_status = bench_command(&opt, argc, argv);
  bench_options_free(&opt);
  return exit_status;
}

/* `strata bench COLL ...` once its options are read: joins the job and runs. */
static int bench_command(const bench_options *opt, int argc, char **argv) {
  int status;
  bench_ctx ctx = {.opt = opt, .rss_start = bench_rss_bytes()};
  status = bench_comm_init(opt, &ctx.comm);
  ctx.rss_joined = bench_rss_bytes();
  if (status) {
    fprintf(stderr,
            "strata bench: cannot join the job: %s\n"
            "  (run every rank under `strata launch -n N --`, mpirun or torchrun, or set "
            "STRATA_RANK, STRATA_WORLD_SIZE and STRATA_ADDR)\n",
            strata_strerror(status));
    return BENCH_EXIT_FAILED;
  }
  ctx.rank = strata_comm_rank(ctx.comm);
  ctx.nranks = strata_comm_size(ctx.comm);
  ctx.argc = argc;
  ctx.argv = argv;
  bench_report report = {0};
  int exit_status = bench_main(&ctx, &report);
  bench_report_free(&report);
  strata_comm_destroy(ctx.comm);
  free(ctx.rank_lines);
  free(ctx.json_path);
  return exit_status;
}

int bench_sweep(strata_comm *comm, int argc, char **argv, bench_sweep_row **rows,
                size_t *rows_count) {
  *rows = NULL;
  *rows_count = 0;
  bench_options opt;
  int status = bench_options_parse(argc, argv, &opt);
  if (status) {
    bench_options_free(&opt);
    return BENCH_EXIT_USAGE; /* --help included: a caller's arguments are fixed */
  }
  bench_ctx ctx = {.opt = &opt, .comm = comm, .argc = argc, .argv = argv};
  ctx.rank = strata_comm_rank(comm);
  ctx.nranks = strata_comm_size(comm);
  bench_report report = {0};
  int exit_status = bench_main(&ctx, &report);
  free(ctx.rank_lines);
  free(ctx.json_path);
  if (report.rows_count && (*rows = calloc(report.rows_count, sizeof **rows))) {
    for (size_t i = 0; i < report.rows_count; i++) {
      const bench_row *row = &report.rows[i];
      (*rows)[i] =
          (bench_sweep_row){row->bytes, row->out_of_place.time_us, row->out_of_place.busbw_gbps,
                            row->predicted_busbw_gbps, row->out_of_place.wrong};
    }
    *rows_count = report.rows_count;
  }
  bench_report_free(&report);
  bench_options_free(&opt);
  return exit_status;
}
