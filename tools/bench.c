/*
 * bench.c — `strata bench COLL`: nccl-tests for strata.
 *
 * Reads the options of nccl-tests' *_perf binaries (-b -e -f -i -n -w -c -d -o -r -a -z -t -g
 * -m ...) and prints the same table: "#" header lines, one row per size with out-of-place then
 * in-place figures (time, algbw, busbw, #wrong), "# Out of bounds values" and "# Avg bus
 * bandwidth". A script that parses nccl-tests output parses ours. -J FILE adds the same figures as
 * JSON; --predict adds the cost model's busbw beside the measured one.
 *
 * What the numbers mean (as nccl-tests, src/common.cu and src/<coll>.cu; FACTS.md "Collective
 * cost"):
 *   size   bytes of the larger of the send and receive buffers (the total across ranks for
 *          allgather, reduce_scatter, alltoall, gather, scatter);
 *   count  elements passed to the call (per rank for those five);
 *   time   average time of one call on a rank, then combined over ranks by -a: 0 rank 0's,
 *          1 the mean, 2 the min, 3 the max. Our default is 3 (the slowest rank decides when a
 *          collective is done); nccl-tests' default is 1;
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
 * avg is exact too), for prod the values are 1 or 2, for min/max 1..97. In-place sendrecv has
 * no defined result and prints N/A, as nccl-tests does.
 *
 * Invariants: every rank runs the same sequence of collectives (sizes, types and ops are computed
 * from the options alone, which all ranks share); only rank 0 prints or writes files; buffers
 * are allocated once for the largest size. Exit status: 0 all good, 1 a failed collective or any
 * #wrong > 0, 2 bad usage. This file must never print a row before its figures are final, and
 * must never leave a peer blocked on a failure: a failing rank aborts the communicator.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_predict.h"
#include "commands.h"
#include "core/compress.h"
#include "core/core.h"
#include "strata.h"

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
    [BENCH_SENDRECV] = {"sendrecv", "send_recv", 0, 0, 0, 0},
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
          "        (nccl-tests' names all_reduce, all_gather, ..._perf are accepted too)\n"
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
          "  -a, --average 0|1|2|3    time over ranks: rank 0, mean, min, max (default 3)\n"
          "  -z, --blocking 0|1       barrier after every call (default 0)\n"
          "  -C, --report_cputime 0|1 accepted (CPU ranks: the same as time)\n"
          "  -t, --nthreads 1         -g, --ngpus 1   accepted; strata ranks are processes\n"
          "  -J, --json FILE          also write every result as JSON (rank 0)\n"
          "  -R, --local_register 0|1|2  1 or 2: buffers from strata_mem_alloc, which ranks of\n"
          "                           one host read directly (default 0: malloc)\n"
          "      --predict            print the cost model's busbw beside the measured one\n"
          "      --compress C         wire encoding of float calls: none bf16 f16 int8 fp8\n"
          "                           (lossy: #wrong then allows the encoding's error)\n"
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
  /* nccl-tests' defaults (src/common.cu), except -a (see the top of this file). */
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
  opt->average = 3;
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
      if (bench_parse_int(arg, 0, 1L << 20, &value)) BENCH_BAD("-c '%s': want 0 or 1", arg);
      opt->check = value > 0;
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
        BENCH_BAD("--compress '%s': want none, bf16, f16, int8 or fp8", arg);
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
static int bench_sendrecv(const bench_ctx *ctx, const void *in, void *out, size_t count,
                          strata_dtype dtype) {
  int to = (ctx->rank + 1) % ctx->nranks, from = (ctx->rank - 1 + ctx->nranks) % ctx->nranks;
  strata_request *recv_req = NULL, *send_req = NULL;
  int status = strata_irecv(ctx->comm, out, count, dtype, from, &recv_req);
  if (status) return status;
  status = strata_isend(ctx->comm, in, count, dtype, to, &send_req);
  int recv_status = strata_request_wait(recv_req);
  int send_status = status ? status : strata_request_wait(send_req);
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
  double start_s = strata_now_s();
  for (long i = 0; i < calls && !status; i++) {
    status = bench_call(ctx, c);
    if (!status && opt->blocking) status = strata_barrier(ctx->comm);
  }
  double seconds = (strata_now_s() - start_s) / (double)calls;
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
static int bench_print_ranks(const bench_ctx *ctx) {
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
  }
  free(lines);
  return status;
}

static void bench_print_header(const bench_options *opt) {
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

static void bench_json_figures(FILE *out, const char *name, const bench_figures *fig) {
  fprintf(out, "\"%s\": {\"time_us\": %.3f, \"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, ", name,
          fig->time_us, fig->algbw_gbps, fig->busbw_gbps);
  if (fig->wrong < 0)
    fprintf(out, "\"wrong\": null}");
  else
    fprintf(out, "\"wrong\": %ld}", fig->wrong);
}

static int bench_write_json(const bench_ctx *ctx, const bench_report *report) {
  const bench_options *opt = ctx->opt;
  FILE *out = fopen(opt->json_path, "w");
  if (!out) {
    fprintf(stderr, "strata bench: cannot write %s: %s\n", opt->json_path, strerror(errno));
    return -1;
  }
  fprintf(
      out,
      "{\n  \"tool\": \"strata bench\",\n  \"version\": \"%s\",\n  \"collective\": \"%s\",\n"
      "  \"nranks\": %d,\n  \"transport\": \"%s\",\n  \"minbytes\": %zu,\n  \"maxbytes\": %zu,\n"
      "  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"agg_iters\": %d,\n  \"check\": %d,\n"
      "  \"average\": %d,\n  \"blocking\": %d,\n  \"compress\": \"%s\",\n  \"results\": [",
      STRATA_VERSION_STRING, bench_kinds[opt->kind].name, ctx->nranks,
      strata_comm_transport_name(ctx->comm, (ctx->rank + 1) % ctx->nranks), opt->min_bytes,
      opt->max_bytes, opt->iters, opt->warmup_iters, opt->agg_iters, opt->check, opt->average,
      opt->blocking, strata_compress_name(strata_comm_config(ctx->comm)->compress));
  for (size_t i = 0; i < report->rows_count; i++) {
    const bench_row *row = &report->rows[i];
    fprintf(out,
            "%s\n    {\"size_bytes\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
            "\"root\": %d, ",
            i ? "," : "", row->bytes, row->count, bench_type_names[row->dtype], row->redop,
            row->root);
    bench_json_figures(out, "out_of_place", &row->out_of_place);
    fprintf(out, ", ");
    bench_json_figures(out, "in_place", &row->in_place);
    if (!isnan(row->predicted_busbw_gbps))
      fprintf(out, ", \"predicted_busbw_gbps\": %.6f", row->predicted_busbw_gbps);
    fprintf(out, "}");
  }
  double avg = report->busbw_count ? report->busbw_sum / report->busbw_count : 0.0;
  fprintf(out, "\n  ],\n  \"out_of_bounds\": %d,\n  \"avg_busbw_gbps\": %.6f\n}\n", report->errors,
          avg);
  if (fclose(out) != 0) {
    fprintf(stderr, "strata bench: writing %s failed: %s\n", opt->json_path, strerror(errno));
    return -1;
  }
  return 0;
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
  c.in_place = 1;
  if (!status) status = bench_time(ctx, &c, &row.in_place);
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

static int bench_buffers_alloc(bench_ctx *ctx) {
  ctx->buffer_bytes = ctx->opt->max_bytes + 64;
  size_t bytes = (ctx->buffer_bytes + 63) / 64 * 64;
  /* --predict calibrates on these very buffers (bench_model_setup), which must hold its largest
   * point */
  if (ctx->opt->predict && bytes < bench_predict_buffer_bytes())
    bytes = bench_predict_buffer_bytes();
  ctx->alloc_bytes = bytes;
  ctx->sendbuf = strata_mem_buffer(bytes, ctx->opt->registered);
  ctx->recvbuf = strata_mem_buffer(bytes, ctx->opt->registered);
  ctx->expected = strata_mem_buffer(bytes, 0); /* private: no peer reads it */
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
  strata_mem_buffer_free(ctx->sendbuf, ctx->opt->registered);
  strata_mem_buffer_free(ctx->recvbuf, ctx->opt->registered);
  strata_mem_buffer_free(ctx->expected, 0);
}

static void bench_print_footer(const bench_report *report) {
  double avg = report->busbw_count ? report->busbw_sum / report->busbw_count : 0.0;
  printf("# Out of bounds values : %d %s\n", report->errors, report->errors ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n", avg);
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
static int bench_main(bench_ctx *ctx) {
  const bench_options *opt = ctx->opt;
  if (bench_kinds[opt->kind].is_rooted && opt->root >= ctx->nranks) {
    if (ctx->rank == 0)
      fprintf(stderr, "strata bench: -r %d: no such rank (%d ranks)\n", opt->root, ctx->nranks);
    strata_barrier(
        ctx->comm); /* no rank exits (and gets the others killed) before rank 0 said why */
    return BENCH_EXIT_USAGE;
  }
  if (ctx->rank == 0) bench_print_header(opt);
  if (bench_print_ranks(ctx) != STRATA_OK) return BENCH_EXIT_FAILED;
  if (bench_buffers_alloc(ctx)) {
    strata_comm_abort(ctx->comm);
    bench_buffers_free(ctx);
    return BENCH_EXIT_FAILED;
  }
  if (opt->predict)
    ctx->model = bench_predict_setup(ctx->comm, opt->types[0], opt->ops[0], ctx->sendbuf,
                                     ctx->recvbuf, ctx->alloc_bytes);
  if (ctx->rank == 0) bench_print_columns(opt->report_cputime ? "cputime" : "time", opt->predict);
  bench_report report = {0};
  int status = bench_run(ctx, &report);
  bench_predict_free(ctx->model);
  bench_buffers_free(ctx);
  int exit_status = BENCH_EXIT_OK;
  if (status) {
    strata_comm_abort(ctx->comm);
    exit_status = BENCH_EXIT_FAILED;
  } else {
    if (ctx->rank == 0) bench_print_footer(&report);
    if (ctx->rank == 0) bench_print_wire(ctx);
    if (report.errors) exit_status = BENCH_EXIT_FAILED;
    if (ctx->rank == 0 && opt->json_path && bench_write_json(ctx, &report))
      exit_status = BENCH_EXIT_FAILED;
  }
  free(report.rows);
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

int strata_cmd_bench(int argc, char **argv) {
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
  int exit_status = bench_main(&ctx);
  strata_comm_destroy(ctx.comm);
  return exit_status;
}
