// SPDX-License-Identifier: Apache-2.0
/*
 * test_core_names.c — status strings and the name/parse tables of dtypes, ops, collectives and
 * algorithms: every code has a distinct name and message, every name parses back to its value,
 * other tools' spellings parse, and bad names are rejected without touching the output.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "helpers/check.h"

static void check_statuses(void) {
  for (int a = STRATA_STATUS_MIN; a <= 0; a++) {
    const char *name = strata_err_name(a), *message = strata_strerror(a);
    CHECK(name && strncmp(name, "STRATA_", 7) == 0, "status %d has name %s", a, name);
    CHECK(message && strcmp(message, "unknown status") != 0 && strlen(message) > 10,
          "status %d has message '%s'", a, message);
    CHECK(strchr(message, ':') != NULL, "status %d message '%s' lacks 'short: sentence' form", a,
          message);
    for (int b = STRATA_STATUS_MIN; b < a; b++) {
      CHECK(strcmp(name, strata_err_name(b)) != 0, "statuses %d and %d share a name", a, b);
      CHECK(strcmp(message, strata_strerror(b)) != 0, "statuses %d and %d share a message", a, b);
    }
  }
  CHECK(strcmp(strata_err_name(STRATA_ERR_PEER_LOST), "STRATA_ERR_PEER_LOST") == 0,
        "name of PEER_LOST");
  CHECK(strcmp(strata_strerror(STRATA_ERR_PEER_LOST),
               "peer lost: a peer closed its connection or died") == 0,
        "message of PEER_LOST: %s", strata_strerror(STRATA_ERR_PEER_LOST));
  int unknown[] = {1, 42, STRATA_STATUS_MIN - 1, -1000, -2147483647 - 1};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    CHECK(strcmp(strata_strerror(unknown[i]), "unknown status") == 0, "strerror(%d) = %s",
          unknown[i], strata_strerror(unknown[i]));
    CHECK(strata_err_name(unknown[i]) != NULL, "err_name(%d) is NULL", unknown[i]);
  }
}

/* A parse function and a name function for one enum, seen through ints. */
typedef struct name_table {
  const char *what;
  int count;
  const char *(*name)(int);
  int (*parse)(const char *, int *);
} name_table;

#define WRAP(kind)                                       \
  static const char *kind##_name_int(int v) {            \
    return strata_##kind##_name((strata_##kind)v);       \
  }                                                      \
  static int kind##_parse_int(const char *s, int *out) { \
    strata_##kind value = (strata_##kind) - 7;           \
    int rc = strata_##kind##_parse(s, &value);           \
    *out = (int)value;                                   \
    return rc;                                           \
  }
WRAP(dtype)
WRAP(op)
WRAP(coll)
WRAP(algo)

static const name_table tables[] = {
    {"dtype", STRATA_DTYPE_COUNT, dtype_name_int, dtype_parse_int},
    {"op", STRATA_OP_COUNT, op_name_int, op_parse_int},
    {"coll", STRATA_COLL_COUNT, coll_name_int, coll_parse_int},
    {"algo", STRATA_ALGO_COUNT, algo_name_int, algo_parse_int},
};

static void check_round_trips(const name_table *t) {
  for (int v = 0; v < t->count; v++) {
    const char *name = t->name(v);
    int back = -1;
    CHECK(name && strcmp(name, "?") != 0, "%s %d has no name", t->what, v);
    CHECK(t->parse(name, &back) == STRATA_OK && back == v, "%s '%s' parses to %d, want %d", t->what,
          name, back, v);
    for (int w = 0; w < v; w++)
      CHECK(strcmp(name, t->name(w)) != 0, "%s %d and %d share the name %s", t->what, v, w, name);
  }
  CHECK(strcmp(t->name(t->count), "?") == 0, "%s name of count is not '?'", t->what);
  CHECK(strcmp(t->name(-1), "?") == 0, "%s name of -1 is not '?'", t->what);
  static const char *const bad[] = {"",      " ",        "SUM",        "f32 ", "float128",
                                    "bogus", "sendrecv", "all-reduce", "ring2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int value = 0;
    CHECK(t->parse(bad[i], &value) == STRATA_ERR_INVALID_ARG, "%s accepted bad name '%s'", t->what,
          bad[i]);
    CHECK(value == -7, "%s parse of bad name '%s' wrote its output", t->what, bad[i]);
  }
  int value = 0;
  CHECK(t->parse(NULL, &value) == STRATA_ERR_INVALID_ARG, "%s accepted NULL", t->what);
}

static void expect_dtype(const char *name, strata_dtype want) {
  strata_dtype got = STRATA_DTYPE_COUNT;
  CHECK(strata_dtype_parse(name, &got) == STRATA_OK && got == want, "dtype '%s' -> %d, want %d",
        name, (int)got, (int)want);
}

static void expect_coll(const char *name, strata_coll want) {
  strata_coll got = STRATA_COLL_COUNT;
  CHECK(strata_coll_parse(name, &got) == STRATA_OK && got == want, "coll '%s' -> %d, want %d", name,
        (int)got, (int)want);
}

static void check_aliases_and_sizes(void) {
  /* nccl-tests -d names */
  expect_dtype("int8", STRATA_I8);
  expect_dtype("char", STRATA_I8);
  expect_dtype("uint8", STRATA_U8);
  expect_dtype("int32", STRATA_I32);
  expect_dtype("int", STRATA_I32);
  expect_dtype("uint32", STRATA_U32);
  expect_dtype("int64", STRATA_I64);
  expect_dtype("uint64", STRATA_U64);
  expect_dtype("half", STRATA_F16);
  expect_dtype("float16", STRATA_F16);
  expect_dtype("float32", STRATA_F32);
  expect_dtype("float", STRATA_F32);
  expect_dtype("double", STRATA_F64);
  expect_dtype("float64", STRATA_F64);
  expect_dtype("bfloat16", STRATA_BF16);
  /* 16-bit integers: strata's names and the C spellings */
  expect_dtype("i16", STRATA_I16);
  expect_dtype("u16", STRATA_U16);
  expect_dtype("int16", STRATA_I16);
  expect_dtype("short", STRATA_I16);
  expect_dtype("uint16", STRATA_U16);
  expect_coll("all_reduce", STRATA_COLL_ALLREDUCE);
  expect_coll("reducescatter", STRATA_COLL_REDUCE_SCATTER);
  expect_coll("all_gather", STRATA_COLL_ALLGATHER);
  expect_coll("alltoall", STRATA_COLL_ALLTOALL);
  expect_coll("reduce_scatter", STRATA_COLL_REDUCE_SCATTER);
  static const size_t sizes[STRATA_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 2, 2};
  for (int d = 0; d < STRATA_DTYPE_COUNT; d++)
    CHECK(strata_dtype_size((strata_dtype)d) == sizes[d], "size of %s", strata_dtype_name(d));
  CHECK(strata_dtype_size(STRATA_DTYPE_COUNT) == 0, "size of an invalid dtype");
  CHECK(strata_dtype_size((strata_dtype)-1) == 0, "size of dtype -1");
  strata_op op;
  CHECK(strata_op_parse("avg", &op) == STRATA_OK && op == STRATA_AVG, "avg parses");
  CHECK(strata_op_parse("band", &op) == STRATA_OK && op == STRATA_BAND, "band parses");
  CHECK(strata_op_parse("bor", &op) == STRATA_OK && op == STRATA_BOR, "bor parses");
  CHECK(strata_op_parse("bxor", &op) == STRATA_OK && op == STRATA_BXOR, "bxor parses");
  CHECK(strcmp(strata_dtype_name(STRATA_I16), "i16") == 0 &&
            strcmp(strata_dtype_name(STRATA_U16), "u16") == 0,
        "16-bit integer names");
  /* the values are ABI: the new members come after the old ones */
  CHECK(STRATA_F64 == 9 && STRATA_I16 == 10 && STRATA_U16 == 11, "dtype values moved");
  CHECK(STRATA_AVG == 4 && STRATA_BAND == 5 && STRATA_BOR == 6 && STRATA_BXOR == 7,
        "op values moved");
  CHECK(strata_dtype_parse("f32", NULL) == STRATA_ERR_INVALID_ARG, "NULL output accepted");
}

/* strata_size_parse: the one reader of byte counts (environment, bench, netem, probe, place). */
static void check_sizes(void) {
  static const struct {
    const char *text;
    uint64_t bytes;
  } good[] = {{"0", 0},           {"65536", 65536},      {"512K", 512 << 10}, {"512k", 512 << 10},
              {"4M", 4 << 20},    {"4MiB", 4 << 20},     {"4mb", 4 << 20},    {"1G", 1u << 30},
              {"2T", 2ull << 40}, {"1.5K", 1536},        {"8B", 8},           {"0.5", 0},
              {"1e3", 1000},      {"16GiB", 16ull << 30}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    uint64_t bytes = 7;
    CHECK(strata_size_parse(good[i].text, &bytes) == STRATA_OK && bytes == good[i].bytes,
          "size '%s' parsed to %llu, want %llu", good[i].text, (unsigned long long)bytes,
          (unsigned long long)good[i].bytes);
  }
  static const char *const bad[] = {"",    "K",     "-1",   "+4",  " 4",  "4 M",  "4X",
                                    "4MM", "4Mib2", "0x10", "inf", "nan", "1e30", "4MiBB"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t bytes = 7;
    CHECK(strata_size_parse(bad[i], &bytes) == STRATA_ERR_INVALID_ARG && bytes == 7,
          "bad size '%s' accepted (%llu)", bad[i], (unsigned long long)bytes);
  }
  CHECK(strata_size_parse(NULL, NULL) == STRATA_ERR_INVALID_ARG, "NULL size accepted");
}

static void check_log(void) {
  strata_log_level saved = strata_log_get_level();
  strata_log_set_level(STRATA_LOG_DEBUG);
  CHECK(strata_log_get_level() == STRATA_LOG_DEBUG, "log level did not stick");
  strata_log_set_level((strata_log_level)99);
  CHECK(strata_log_get_level() == STRATA_LOG_TRACE, "log level is not clamped");
  strata_log_set_level(saved);
  double t0 = strata_now_s(), t1 = strata_now_s();
  CHECK(t0 > 0 && t1 >= t0, "monotonic clock went backwards: %f %f", t0, t1);
}

int main(void) {
  check_statuses();
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) check_round_trips(&tables[i]);
  check_aliases_and_sizes();
  check_sizes();
  check_log();
  if (failures) {
    fprintf(stderr, "test_core_names: %d failures\n", failures);
    return 1;
  }
  printf("test_core_names: ok\n");
  return 0;
}
