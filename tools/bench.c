// SPDX-License-Identifier: Apache-2.0
/*
 * bench.c — `strata bench COLL`: nccl-tests for strata.
 *
 * Reads the options of nccl-tests' *_perf binaries (-b -e -f -i -n -w -c -d -o -r -a -z -t -g
 * -m ...) with their defaults and prints what they print: the version and "Collective test
 * starting" lines, the "#" header, one row per size with out-of-place then in-place figures
 * (time, algbw, busbw, #wrong), "# Out of bounds values", "# Avg bus bandwidth" and "Collective
 * test concluded". -J FILE writes nccl-tests' JSON (the same keys and nesting, with a "strata"
 * object added). Called through a link named after a nccl-tests binary (all_reduce_perf,
 * all_gather_perf, ...; tools/main.c), the command is that test. A script written for nccl-tests
 * runs unchanged. --predict adds the cost model's busbw beside the measured one.
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
};

/* nccl-tests' binary of each collective: the name of a link that runs it (tools/main.c), and
 * the name its start and end lines print. */
static const char *const bench_perf_names[BENCH_KIND_COUNT] = {
    [BENCH_ALLREDUCE] = "all_reduce_perf", [BENCH_REDUCE_SCATTER] = "reduce_scatter_perf",
    [BENCH_ALLGATHER] = "all_gather_perf", [BENCH_BROADCAST] = "broadcast_perf",
    [BENCH_REDUCE] = "reduce_perf",        [BENCH_GATHER] = "gather_perf",
    [BENCH_SCATTER] = "scatter_perf",      [BENCH_ALLTOALL] = "alltoall_perf",
    [BENCH_SENDRECV] = "sendrecv_perf",
};

/* nccl-tests' -d names (src/common.cu test_typenames), indexed by strata_dtype. */
static const char *const bench_type_names[STRATA_DTYPE_COUNT] = {
    [STRATA_I8] = "int8",    [STRATA_U8] = "uint8",      [STRATA_I32] = "int32",
    [STRATA_U32] = "uint32", [STRATA_I64] = "int64",     [STRATA_U64] = "uint64",
    [STRATA_F16] = "half",   [STRATA_BF16] = "bfloat16", [STRATA_F32] = "float",
    [STRATA_F64] = "double",
};

/* nccl-tests' "-d all" order: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16. */
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

static bench_layout bench_layout_for(bench_kind kind, size_t count, int nranks) {
  size_t per_rank = count / (size_t)nranks;
  bench_layout layout = {count, count, count, 0, 0};
  switch (kind) {
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
static void bench_bandwidth(bench_kind kind, size_t param_count, size_t type_bytes, double seconds,
                            int nranks, double *algbw_gbps, double *busbw_gbps) {
  double bytes = (double)param_count * (double)type_bytes;
  if (bench_kinds[kind].is_per_rank) bytes *= nranks;
  double n = nranks;
  double factor = 1.0;
  if (kind == BENCH_ALLREDUCE) factor = 2.0 * (n - 1) / n;
  if (kind == BENCH_REDUCE_SCATTER || kind == BENCH_ALLGATHER || kind == BENCH_ALLTOALL ||
      kind == BENCH_GATHER || kind == BENCH_SCATTER)
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
  int check;
  int types_count;
  strata_dtype types[BENCH_MAX_RUN_LIST];
  int ops_count;
  strata_op ops[BENCH_MAX_RUN_LIST];
  int root;
  int average; /* 0 rank 0, 1 mean, 2 min, 3 max */
  int blocking;
  int report_cputime;
  int predict;
  int registered; /* -R: buffers from strata_mem_alloc (peers of one host read them directly) */
  strata_compress compress; /* --compress; DEFAULT = STRATA_COMPRESS (none) */
  const char *json_path;
} bench_options;

static void bench_usage(FILE *out) {
  fprintf(out,
          "usage: strata bench COLL [options]    (run it on every rank: strata launch -n N -- "
          "strata bench ...)\n"
          "  COLL: allreduce reduce_scatter allgather broadcast reduce gather scatter alltoall "
          "sendrecv\n"
          "        (nccl-tests' names all_reduce, all_gather, ..._perf are accepted too, and\n"
          "        strata run through a link named all_reduce_perf, ... is that test)\n"
          "  strata bench kv [-b -e -f -t -n -w -B tcp,shm,ucx ...]: KV-cache transfer between\n"
          "        two processes of this host (docs/kv.md); no launcher\n"
          "  -b, --minbytes SIZE      smallest size (8, 64K, 1M, 2G; default 32M)\n"
          "  -e, --maxbytes SIZE      largest size (default 32M)\n"
          "  -f, --stepfactor N       multiply the size by N each step (default 1: use -i)\n"
          "  -i, --stepbytes SIZE     add SIZE each step when -f is 1 (default 1M)\n"
          "  -n, --iters N            timed iterations per size (default 20)\n"
          "  -w, --warmup_iters N     warm-up iterations (default 5)\n"
          "  -m, --agg_iters N        calls per timed iteration (default 1)\n"
          "  -c, --check 0|1          check every result (default 1)\n"
          "  -d, --datatype T|all     int8 uint8 int32 uint32 int64 uint64 half float double\n"
          "                           bfloat16 (or i8 ... f32 bf16; default float)\n"
          "  -o, --op OP|all          sum prod min max avg (default sum; reductions only)\n"
          "  -r, --root R             root rank of rooted collectives (default 0)\n"
          "  -a, --average 0|1|2|3    time over ranks: rank 0, mean, min, max (default 1)\n"
          "  -z, --blocking 0|1       barrier after every call (default 0)\n"
          "  -C, --report_cputime 0|1 accepted (CPU ranks: the same as time)\n"
          "  -t, --nthreads 1         -g, --ngpus 1   accepted; strata ranks are processes\n"
          "  -J, --json FILE          also write nccl-tests' JSON (rank 0; FILE.0, FILE.1, ...\n"
          "                           when FILE exists; refused before the run if unwritable)\n"
          "  -R, --local_register 0|1|2  1 or 2: buffers from strata_mem_alloc, which ranks of\n"
          "                           one host read directly (default 0: malloc)\n"
          "      --predict            print the cost model's busbw beside the measured one\n"
          "      --compress C         wire encoding of float calls: none bf16 f16 int8 fp8 int4\n"
          "                           (lossy: #wrong then allows the encoding's error)\n"
          "      --cipher             alone: this core's speed sealing and opening TCP frames\n"
          "                           (AES-256-GCM, ChaCha20-Poly1305), no job needed\n"
          "  -h, --help\n"
          "exit status: 0 ok, 1 a failed run or wrong results, 2 bad usage\n");
}

/* nccl-tests' parsesize: a number with an optional K, M or G (powers of 1024). */
static int bench_parse_size(const char *text, size_t *out) {
  char *end = NULL;
  errno = 0;
  double value = strtod(text, &end);
  if (end == text || errno || !(value >= 0) || value > 1e18) return -1;
  double unit = 1;
  if (*end) {
    switch (*end) {
      case 'k':
      case 'K':
        unit = 1024.0;
        break;
      case 'm':
      case 'M':
        unit = 1024.0 * 1024;
        break;
      case 'g':
      case 'G':
        unit = 1024.0 * 1024 * 1024;
        break;
      default:
        return -1;
    }
    end++;
    if (*end == 'i' && end[1] == 'B')
      end += 2; /* KiB, MiB, GiB */
    else if (*end == 'B')
      end++;
    if (*end) return -1;
  }
  *out = (size_t)(value * unit);
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
  opt->warmup_iters = 5;
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
      if (bench_parse_int(arg, 0, 1, &value)) BENCH_BAD("-c '%s': want 0 or 1", arg);
      opt->check = (int)value;
      return 0;
    case 'd':
      if (bench_parse_types(arg, opt))
        BENCH_BAD(
            "-d '%s': unknown datatype (int8 uint8 int32 uint32 int64 uint64 half float "
            "double bfloat16, or all)",
            arg);
      return 0;
    case 'o':
      if (bench_parse_ops(arg, opt))
        BENCH_BAD("-o '%s': unknown op (sum prod min max avg, or all)", arg);
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
      if (bench_parse_int(arg, 0, 1, &value)) BENCH_BAD("-z '%s': want 0 or 1", arg);
      opt->blocking = (int)value;
      return 0;
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
    case 'y':
    case 'T':
      if (bench_parse_int(arg, 0, 1L << 30, &value))
        BENCH_BAD("-%c '%s': want an integer", letter, arg);
      return 0; /* nccl-tests' parallel_init, stream_null, timeout: nothing to do on CPUs */
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
    case 'P':
      opt->predict = 1;
      return 0;
    case 'K':
      if (strata_compress_parse(arg, &opt->compress) != STRATA_OK ||
          opt->compress == STRATA_COMPRESS_DEFAULT)
        BENCH_BAD("--compress '%s': want none, bf16, f16, int8, fp8 or int4", arg);
      return 0;
    default:
      BENCH_BAD("unknown option (see strata bench --help)");
  }
}

static int bench_options_check(const bench_options *opt) {
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
  static const struct option long_options[] = {{"nthreads", required_argument, 0, 't'},
                                               {"ngpus", required_argument, 0, 'g'},
                                               {"minbytes", required_argument, 0, 'b'},
                                               {"maxbytes", required_argument, 0, 'e'},
                                               {"stepbytes", required_argument, 0, 'i'},
                                               {"stepfactor", required_argument, 0, 'f'},
                                               {"iters", required_argument, 0, 'n'},
                                               {"agg_iters", required_argument, 0, 'm'},
                                               {"warmup_iters", required_argument, 0, 'w'},
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
                                               {"json", required_argument, 0, 'J'},
                                               {"local_register", required_argument, 0, 'R'},
                                               {"predict", no_argument, 0, 'P'},
                                               {"compress", required_argument, 0, 'K'},
                                               {"help", no_argument, 0, 'h'},
                                               {0, 0, 0, 0}};
  bench_options_init(opt);
  const char *kind_name = NULL;
  optind = 0; /* glibc: restart scanning (main may have used getopt) */
  opterr = 0;
  for (;;) {
    int letter = getopt_long(argc, argv, "-t:g:b:e:i:f:n:m:w:p:c:o:d:r:z:y:T:G:C:a:J:R:h",
                             long_options, NULL);
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
        "scatter alltoall sendrecv (see --help)");
  if (bench_parse_kind(kind_name, &opt->kind))
    BENCH_BAD(
        "'%s': unknown collective (allreduce reduce_scatter allgather broadcast reduce "
        "gather scatter alltoall sendrecv)",
        kind_name);
  return bench_options_check(opt);
}

/* ---------------------------------------------------------------------------------------------
 * Data patterns and the expected results. Every value is a small integer, exact in every dtype.
 * ------------------------------------------------------------------------------------------- */
static int bench_is_float(strata_dtype dtype) {
  return dtype == STRATA_F16 || dtype == STRATA_BF16 || dtype == STRATA_F32 || dtype == STRATA_F64;
}

/* Stores an integer: floats convert exactly (|v| <= 256 whenever this is used for bf16),
 * integers keep the low bytes (two's-complement wrap, the same as the reduction kernels). */
static inline void bench_store_int(strata_dtype dtype, void *buf, size_t k, uint64_t v) {
  switch (dtype) {
    case STRATA_I8:
    case STRATA_U8:
      ((uint8_t *)buf)[k] = (uint8_t)v;
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
} bench_ctx;

static char *bench_send_ptr(const bench_ctx *ctx, const bench_case *c) {
  if (!c->in_place) return ctx->sendbuf;
  return ctx->recvbuf + (size_t)ctx->rank * c->layout.send_inplace_offset * c->type_bytes;
}

static char *bench_recv_ptr(const bench_ctx *ctx, const bench_case *c) {
  return ctx->recvbuf +
         (c->in_place ? (size_t)ctx->rank * c->layout.recv_inplace_offset * c->type_bytes : 0);
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
  memset(ctx->recvbuf, 0, span * c->type_bytes);
  char *in = bench_send_ptr(ctx, c);
  size_t offset = (c->kind == BENCH_ALLGATHER || c->kind == BENCH_GATHER)
                      ? (size_t)ctx->rank * l->param_count
                      : 0;
  int reduction = bench_kinds[c->kind].is_reduction;
  for (size_t k = 0; k < l->send_count; k++) {
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

static int bench_call(const bench_ctx *ctx, const bench_case *c) {
  size_t count = c->layout.param_count;
  if (count == 0) return STRATA_OK; /* nccl-tests skips empty calls too */
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

typedef struct bench_figures {
  double time_us, algbw_gbps, busbw_gbps;
  long wrong; /* -1: not checked */
} bench_figures;

/* nccl-tests' BenchTime: one untimed call, barrier, the timed loop, then the check. */
static int bench_time(bench_ctx *ctx, const bench_case *c, bench_figures *fig) {
  const bench_options *opt = ctx->opt;
  if (opt->check) bench_fill_input(ctx, c, 99);
  int status = bench_call(ctx, c);
  if (!status) status = strata_barrier(ctx->comm);
  long calls = (long)opt->iters * opt->agg_iters;
  double start_s = tool_now_s();
  for (long i = 0; i < calls && !status; i++) {
    status = bench_call(ctx, c);
    if (!status && opt->blocking) status = strata_barrier(ctx->comm);
  }
  double seconds = (tool_now_s() - start_s) / (double)calls;
  if (!status) status = bench_combine_time(ctx, &seconds);
  if (status) return status;
  fig->time_us = seconds * 1e6;
  bench_bandwidth(c->kind, c->layout.param_count, c->type_bytes, seconds, ctx->nranks,
                  &fig->algbw_gbps, &fig->busbw_gbps);
  fig->wrong = -1;
  return opt->check ? bench_check(ctx, c, &fig->wrong) : STRATA_OK;
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
  bench_row *rows;
  size_t rows_count, rows_capacity;
  int errors; /* tests with #wrong > 0 (nccl-tests' "Out of bounds values") */
  double busbw_sum;
  int busbw_count;
} bench_report;

static void bench_format_time(double time_us, char *out, size_t len) {
  if (time_us >= 10000.0)
    snprintf(out, len, "%7.0f", time_us);
  else if (time_us >= 100.0)
    snprintf(out, len, "%7.1f", time_us);
  else
    snprintf(out, len, "%7.2f", time_us);
}

static void bench_print_figures(const bench_figures *fig) {
  char time_text[32], wrong_text[32];
  bench_format_time(fig->time_us, time_text, sizeof time_text);
  if (fig->wrong < 0)
    snprintf(wrong_text, sizeof wrong_text, "N/A");
  else
    snprintf(wrong_text, sizeof wrong_text, "%ld", fig->wrong);
  printf("  %7s  %6.2f  %6.2f  %5s", time_text, fig->algbw_gbps, fig->busbw_gbps, wrong_text);
}

static void bench_print_row(const bench_row *row, int predict) {
  printf("%12zu  %12zu  %8s  %6s  %6i", row->bytes, row->count, bench_type_names[row->dtype],
         row->redop, row->root);
  bench_print_figures(&row->out_of_place);
  bench_print_figures(&row->in_place);
  if (predict) {
    if (isnan(row->predicted_busbw_gbps))
      printf("  %7s", "N/A");
    else
      printf("  %7.2f", row->predicted_busbw_gbps);
  }
  printf("\n");
  fflush(stdout);
}

static void bench_print_columns(const char *time_name, int predict) {
  printf("#\n");
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place%s\n",
         "", "", "", "", "", predict ? "          model" : "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s%s\n", "size", "count",
         "type", "redop", "root", time_name, "algbw", "busbw", "#wrong", time_name, "algbw",
         "busbw", "#wrong", predict ? "    busbw" : "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s%s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
         predict ? "   (GB/s)" : "");
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
  printf("# nccl-tests version strata-%s nccl-headers=0 nccl-library=0\n", strata_version());
  printf("# Collective test starting: %s\n", bench_perf_names[opt->kind]);
  printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: %d validation: %d graph: 0\n",
      opt->min_bytes, opt->max_bytes, opt->step_factor > 1 ? opt->step_factor : opt->step_bytes,
      opt->step_factor > 1 ? "factor" : "bytes", opt->warmup_iters, opt->iters, opt->agg_iters,
      opt->check);
  if (opt->blocking)
    printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
  printf("#\n");
}

static double bench_average_busbw(const bench_report *report) {
  return report->busbw_count ? report->busbw_sum / report->busbw_count : 0.0;
}

static int bench_report_add(bench_report *report, const bench_row *row) {
  if (report->rows_count == report->rows_capacity) {
    size_t capacity = report->rows_capacity ? report->rows_capacity * 2 : 64;
    bench_row *rows = realloc(report->rows, capacity * sizeof *rows);
    if (!rows) return STRATA_ERR_NO_MEMORY;
    report->rows = rows;
    report->rows_capacity = capacity;
  }
  report->rows[report->rows_count++] = *row;
  const bench_figures *both[2] = {&row->out_of_place, &row->in_place};
  for (int i = 0; i < 2; i++) {
    if (both[i]->wrong > 0) report->errors++;
    report->busbw_sum += both[i]->busbw_gbps;
    report->busbw_count++;
  }
  return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * -J: nccl-tests' JSON (src/util.cu there): the same keys, nesting and value types, booleans as
 * the strings "true"/"false" and the root as a "%6i" string as it writes them; what only strata
 * knows goes under "strata".
 * ------------------------------------------------------------------------------------------- */
#define BENCH_JSON_FORMAT_VERSION 2 /* nccl-tests' JSON_FILE_VERSION */
#define BENCH_JSON_REAL_DIGITS 9
#define BENCH_JSON_MAX_SUFFIX 1000

static void bench_time_text(char *out, size_t len) {
  time_t now = time(NULL);
  struct tm local;
  if (!localtime_r(&now, &local) || !strftime(out, len, "%Y-%m-%d %H:%M:%S", &local))
    snprintf(out, len, "?");
}

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
  config = strata_json_set(config, "per_iter_timing", json_string("false"));
  config = strata_json_set(config, "parallel_init", json_string("false"));
  return strata_json_set(config, "devices", bench_json_devices(ctx));
}

static json_t *bench_json_figures(const bench_figures *fig) {
  return json_pack("{s:f, s:f, s:f, s:o}", "time", fig->time_us, "alg_bw", fig->algbw_gbps,
                   "bus_bw", fig->busbw_gbps, "nwrong",
                   fig->wrong < 0 ? json_null() : json_real((double)fig->wrong));
}

static json_t *bench_json_row(const bench_ctx *ctx, const bench_row *row) {
  char root[16];
  snprintf(root, sizeof root, "%6i", row->root);
  json_t *json =
      json_pack("{s:I, s:I, s:s, s:s, s:s, s:o, s:o, s:i, s:s}", "size", (json_int_t)row->bytes,
                "count", (json_int_t)row->count, "type", bench_type_names[row->dtype], "redop",
                row->redop, "root", root, "out_of_place", bench_json_figures(&row->out_of_place),
                "in_place", bench_json_figures(&row->in_place), "actual_iterations",
                ctx->opt->iters, "experiment_name", "");
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
      "average_bus_bandwidth", "bandwidth", bench_average_busbw(report), "okay", "unchecked",
      "errors", "strata", strata, "end_time", end_time);
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
    [BENCH_SENDRECV] = STRATA_COLL_SEND,
};

/* The model's busbw for this row (out of place), scored like the measurement. NAN when the
 * model has no answer (sendrecv: not one collective schedule). */
static double bench_predict_busbw(const bench_ctx *ctx, const bench_case *c) {
  size_t count = c->layout.param_count;
  if (!ctx->model || count == 0 || c->kind == BENCH_SENDRECV) return NAN;
  /* per call of the timed loop's calls in a row (bench_time); with -z 1 one call alone */
  uint64_t calls =
      ctx->opt->blocking ? 1 : (uint64_t)ctx->opt->iters * (uint64_t)ctx->opt->agg_iters;
  double time_us = bench_predict_time_us(ctx->model, bench_kind_colls[c->kind], count,
                                         c->type_bytes, c->root < 0 ? 0 : c->root, calls);
  if (!(time_us > 0)) return NAN;
  double algbw = 0, busbw = 0;
  bench_bandwidth(c->kind, count, c->type_bytes, time_us * 1e-6, ctx->nranks, &algbw, &busbw);
  return busbw;
}

/* ---------------------------------------------------------------------------------------------
 * The run: for each type, op and size, out-of-place then in-place.
 * ------------------------------------------------------------------------------------------- */
static bench_case bench_case_for(const bench_ctx *ctx, strata_dtype dtype, strata_op op,
                                 size_t bytes) {
  bench_case c = {.kind = ctx->opt->kind, .dtype = dtype, .op = op, .root = ctx->opt->root};
  c.type_bytes = strata_dtype_size(dtype);
  c.layout = bench_layout_for(c.kind, bytes / c.type_bytes, ctx->nranks);
  if (!bench_kinds[c.kind].is_rooted) c.root = -1;
  return c;
}

static int bench_warmup(bench_ctx *ctx, strata_dtype dtype, strata_op op) {
  const size_t sizes[2] = {ctx->opt->max_bytes, ctx->opt->min_bytes};
  for (int s = 0; s < 2; s++) {
    bench_case c = bench_case_for(ctx, dtype, op, sizes[s]);
    for (int i = 0; i < ctx->opt->warmup_iters; i++) {
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
  row.redop = bench_kinds[c.kind].is_reduction ? strata_op_name(op) : "none";
  row.predicted_busbw_gbps = ctx->opt->predict ? bench_predict_busbw(ctx, &c) : NAN;
  int status = bench_time(ctx, &c, &row.out_of_place);
  if (!status) {
    c.in_place = 1;
    status = bench_time(ctx, &c, &row.in_place);
  }
  if (status) {
    fprintf(stderr, "strata bench: rank %d: %s of %zu bytes (%s) failed: %s\n", ctx->rank,
            bench_kinds[c.kind].name, row.bytes, c.in_place ? "in-place" : "out-of-place",
            strata_strerror(status));
    return status;
  }
  if (ctx->rank == 0) bench_print_row(&row, ctx->opt->predict);
  return bench_report_add(report, &row);
}

static size_t bench_next_size(const bench_options *opt, size_t bytes) {
  size_t next = opt->step_factor > 1 ? bytes * opt->step_factor : bytes + opt->step_bytes;
  return next <= bytes ? opt->max_bytes + 1 : next; /* overflow ends the loop */
}

static int bench_run(bench_ctx *ctx, bench_report *report) {
  const bench_options *opt = ctx->opt;
  int op_count = bench_kinds[opt->kind].is_reduction ? opt->ops_count : 1;
  for (int t = 0; t < opt->types_count; t++) {
    for (int o = 0; o < op_count; o++) {
      int status = bench_warmup(ctx, opt->types[t], opt->ops[o]);
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
  size_t bytes = (opt->max_bytes + 64 + 63) / 64 * 64;
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

/* nccl-tests' end lines. */
static void bench_print_footer(const bench_options *opt, const bench_report *report) {
  printf("# Out of bounds values : %d %s\n", report->errors, report->errors ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n", bench_average_busbw(report));
  printf("#\n");
  printf("# Collective test concluded: %s\n", bench_perf_names[opt->kind]);
  printf("#\n");
  fflush(stdout);
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
  if (bench_print_ranks(ctx) != STRATA_OK || bench_buffers_alloc(ctx)) {
    strata_comm_abort(ctx->comm);
    bench_buffers_free(ctx);
    bench_json_discard(ctx);
    return BENCH_EXIT_FAILED;
  }
  if (opt->predict)
    ctx->model = bench_predict_setup(ctx->comm, opt->types[0], opt->ops[0], ctx->sendbuf,
                                     ctx->recvbuf, ctx->alloc_bytes);
  if (ctx->rank == 0) bench_print_columns(opt->report_cputime ? "cputime" : "time", opt->predict);
  int status = bench_run(ctx, report);
  bench_predict_free(ctx->model);
  bench_buffers_free(ctx);
  int exit_status = BENCH_EXIT_OK;
  if (status) {
    strata_comm_abort(ctx->comm);
    exit_status = BENCH_EXIT_FAILED;
  } else {
    if (ctx->rank == 0) bench_print_wire(ctx);
    if (ctx->rank == 0) bench_print_footer(opt, report);
    if (report->errors) exit_status = BENCH_EXIT_FAILED;
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

int strata_cmd_bench(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--cipher")) return bench_cipher();
  if (argc >= 2 && !strcmp(argv[1], "kv")) return strata_kv_bench_main(argc - 1, argv + 1);
  bench_options opt;
  int status = bench_options_parse(argc, argv, &opt);
  if (status == -1) {
    bench_usage(stdout);
    return BENCH_EXIT_OK;
  }
  if (status) return status;
  bench_ctx ctx = {.opt = &opt};
  status = bench_comm_init(&opt, &ctx.comm);
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
  free(report.rows);
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
  if (status) return BENCH_EXIT_USAGE; /* --help included: a caller's arguments are fixed */
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
  free(report.rows);
  return exit_status;
}
