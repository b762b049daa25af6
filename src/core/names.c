// SPDX-License-Identifier: Apache-2.0
/*
 * names.c — printable names of dtypes, reduction ops, collectives and algorithms, and their
 * parsers.
 *
 * Each enum has one table of canonical names (what strata prints) and, where other tools spell
 * things differently, a table of aliases the parsers also accept: nccl-tests' dtype names
 * ("float", "half", "bfloat16", "int32", ...) and the underscore variants of collective names.
 * Parsing is exact and case-sensitive after these tables; anything else is STRATA_ERR_INVALID_ARG.
 * Name functions return "?" for an out-of-range value and never NULL. strata_size_parse, the one
 * reader of byte counts, lives here too.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strata.h"

typedef struct name_alias {
  const char *name;
  int value;
} name_alias;

static const char *const dtype_names[STRATA_DTYPE_COUNT] = {
    [STRATA_I8] = "i8",   [STRATA_U8] = "u8",   [STRATA_I32] = "i32", [STRATA_U32] = "u32",
    [STRATA_I64] = "i64", [STRATA_U64] = "u64", [STRATA_F16] = "f16", [STRATA_BF16] = "bf16",
    [STRATA_F32] = "f32", [STRATA_F64] = "f64", [STRATA_I16] = "i16", [STRATA_U16] = "u16",
};

static const size_t dtype_sizes[STRATA_DTYPE_COUNT] = {
    [STRATA_I8] = 1,  [STRATA_U8] = 1,  [STRATA_I32] = 4, [STRATA_U32] = 4,
    [STRATA_I64] = 8, [STRATA_U64] = 8, [STRATA_F16] = 2, [STRATA_BF16] = 2,
    [STRATA_F32] = 4, [STRATA_F64] = 8, [STRATA_I16] = 2, [STRATA_U16] = 2,
};

/* nccl-tests' -d names (src/common.cu test_typenames) and their C spellings; nccl-tests has no
 * 16-bit integers, so "int16"/"uint16" follow the pattern of its other integer names. */
static const name_alias dtype_aliases[] = {
    {"int8", STRATA_I8},     {"char", STRATA_I8},     {"uint8", STRATA_U8},
    {"int32", STRATA_I32},   {"int", STRATA_I32},     {"uint32", STRATA_U32},
    {"int64", STRATA_I64},   {"uint64", STRATA_U64},  {"half", STRATA_F16},
    {"float16", STRATA_F16}, {"float32", STRATA_F32}, {"float", STRATA_F32},
    {"double", STRATA_F64},  {"float64", STRATA_F64}, {"bfloat16", STRATA_BF16},
    {"int16", STRATA_I16},   {"short", STRATA_I16},   {"uint16", STRATA_U16},
};

static const char *const op_names[STRATA_OP_COUNT] = {
    [STRATA_SUM] = "sum", [STRATA_PROD] = "prod", [STRATA_MIN] = "min", [STRATA_MAX] = "max",
    [STRATA_AVG] = "avg", [STRATA_BAND] = "band", [STRATA_BOR] = "bor", [STRATA_BXOR] = "bxor",
};

static const char *const coll_names[STRATA_COLL_COUNT] = {
    [STRATA_COLL_ALLREDUCE] = "allreduce", [STRATA_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [STRATA_COLL_ALLGATHER] = "allgather", [STRATA_COLL_BROADCAST] = "broadcast",
    [STRATA_COLL_REDUCE] = "reduce",       [STRATA_COLL_GATHER] = "gather",
    [STRATA_COLL_SCATTER] = "scatter",     [STRATA_COLL_ALLTOALL] = "alltoall",
    [STRATA_COLL_BARRIER] = "barrier",     [STRATA_COLL_SEND] = "send",
    [STRATA_COLL_RECV] = "recv",
};

/* nccl-tests' binary stems (all_reduce_perf, ...) and the unseparated spelling. */
static const name_alias coll_aliases[] = {
    {"all_reduce", STRATA_COLL_ALLREDUCE},
    {"reducescatter", STRATA_COLL_REDUCE_SCATTER},
    {"all_gather", STRATA_COLL_ALLGATHER},
    {"all_to_all", STRATA_COLL_ALLTOALL},
};

static const char *const algo_names[STRATA_ALGO_COUNT] = {
    [STRATA_ALGO_AUTO] = "auto", [STRATA_ALGO_RING] = "ring",     [STRATA_ALGO_RHD] = "rhd",
    [STRATA_ALGO_TREE] = "tree", [STRATA_ALGO_DIRECT] = "direct", [STRATA_ALGO_HIER] = "hier",
};

#define COUNT_OF(array) (sizeof(array) / sizeof((array)[0]))

static const char *name_at(const char *const *names, int count, int value) {
  return value >= 0 && value < count ? names[value] : "?";
}

/* Looks `name` up among the canonical names, then the aliases. Returns -1 if absent. */
static int name_find(const char *name, const char *const *names, int count,
                     const name_alias *aliases, size_t alias_count) {
  if (!name) return -1;
  for (int i = 0; i < count; i++)
    if (strcmp(name, names[i]) == 0) return i;
  for (size_t i = 0; i < alias_count; i++)
    if (strcmp(name, aliases[i].name) == 0) return aliases[i].value;
  return -1;
}

size_t strata_dtype_size(strata_dtype dtype) {
  return (int)dtype >= 0 && dtype < STRATA_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}

const char *strata_dtype_name(strata_dtype dtype) {
  return name_at(dtype_names, STRATA_DTYPE_COUNT, (int)dtype);
}

const char *strata_op_name(strata_op op) {
  return name_at(op_names, STRATA_OP_COUNT, (int)op);
}

const char *strata_coll_name(strata_coll coll) {
  return name_at(coll_names, STRATA_COLL_COUNT, (int)coll);
}

const char *strata_algo_name(strata_algo algo) {
  return name_at(algo_names, STRATA_ALGO_COUNT, (int)algo);
}

int strata_dtype_parse(const char *name, strata_dtype *out) {
  int value =
      name_find(name, dtype_names, STRATA_DTYPE_COUNT, dtype_aliases, COUNT_OF(dtype_aliases));
  if (value < 0 || !out) return STRATA_ERR_INVALID_ARG;
  *out = (strata_dtype)value;
  return STRATA_OK;
}

int strata_op_parse(const char *name, strata_op *out) {
  int value = name_find(name, op_names, STRATA_OP_COUNT, NULL, 0);
  if (value < 0 || !out) return STRATA_ERR_INVALID_ARG;
  *out = (strata_op)value;
  return STRATA_OK;
}

int strata_coll_parse(const char *name, strata_coll *out) {
  int value = name_find(name, coll_names, STRATA_COLL_COUNT, coll_aliases, COUNT_OF(coll_aliases));
  if (value < 0 || !out) return STRATA_ERR_INVALID_ARG;
  *out = (strata_coll)value;
  return STRATA_OK;
}

static const char *const compress_names[STRATA_COMPRESS_COUNT] = {
    [STRATA_COMPRESS_DEFAULT] = "default", [STRATA_COMPRESS_NONE] = "none",
    [STRATA_COMPRESS_BF16] = "bf16",       [STRATA_COMPRESS_F16] = "f16",
    [STRATA_COMPRESS_INT8] = "int8",       [STRATA_COMPRESS_FP8] = "fp8",
    [STRATA_COMPRESS_INT4] = "int4",
};
static const name_alias compress_aliases[] = {{"fp16", STRATA_COMPRESS_F16},
                                              {"half", STRATA_COMPRESS_F16},
                                              {"e4m3", STRATA_COMPRESS_FP8},
                                              {"off", STRATA_COMPRESS_NONE}};

const char *strata_compress_name(strata_compress c) {
  return name_at(compress_names, STRATA_COMPRESS_COUNT, (int)c);
}

int strata_compress_parse(const char *name, strata_compress *out) {
  int value = name_find(name, compress_names, STRATA_COMPRESS_COUNT, compress_aliases,
                        COUNT_OF(compress_aliases));
  if (value < 0 || !out) return STRATA_ERR_INVALID_ARG;
  *out = (strata_compress)value;
  return STRATA_OK;
}

int strata_algo_parse(const char *name, strata_algo *out) {
  int value = name_find(name, algo_names, STRATA_ALGO_COUNT, NULL, 0);
  if (value < 0 || !out) return STRATA_ERR_INVALID_ARG;
  *out = (strata_algo)value;
  return STRATA_OK;
}

/* The one reader of byte counts (strata.h). Digits first: strtod alone would also take spaces,
 * signs, hex, "inf" and "nan". */
int strata_size_parse(const char *text, uint64_t *bytes) {
  if (!text || !bytes || !(isdigit((unsigned char)text[0]) || text[0] == '.'))
    return STRATA_ERR_INVALID_ARG;
  char *end = NULL;
  errno = 0;
  double value = strtod(text, &end);
  if (end == text || errno || !isfinite(value) || (text[0] == '0' && tolower(text[1]) == 'x'))
    return STRATA_ERR_INVALID_ARG;
  static const char units[] = "kmgt";
  const char *unit = *end ? strchr(units, tolower((unsigned char)*end)) : NULL;
  if (unit) {
    value = ldexp(value, 10 * (int)(unit - units + 1));
    end++;
    if (tolower((unsigned char)*end) == 'i') end++;
  }
  if (tolower((unsigned char)*end) == 'b') end++;
  if (*end || value >= 18446744073709551616.0) return STRATA_ERR_INVALID_ARG;
  *bytes = (uint64_t)value;
  return STRATA_OK;
}
