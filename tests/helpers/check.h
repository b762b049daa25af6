/* check.h — the counting assertion of the single-process tests: a failed CHECK prints where and
 * why, counts in `failures`, and the test goes on (main returns failures != 0). One test file is
 * one translation unit, so the static counter is that test's own. */
#ifndef STRATA_TESTS_CHECK_H
#define STRATA_TESTS_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                     \
      fputc('\n', stderr);                                              \
      failures++;                                                       \
    }                                                                   \
  } while (0)

#endif
