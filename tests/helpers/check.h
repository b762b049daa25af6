// SPDX-License-Identifier: Apache-2.0
/* check.h — the one assertion helper of the C tests. A failed check prints where and why on
 * stdout (stderr may be the subject of the test: test_core_log redirects it) and counts in
 * `failures`; the test goes on and main returns failures != 0. One test file is one translation
 * unit, so the static counter is that test's own. Only the first CHECK_PRINT_LIMIT failures are
 * printed: a wrong kernel fails thousands of elements, and the first ones tell the story.
 *
 *   CHECK(cond)                     CHECK(cond, "format", args...)
 *   CHECK_STATUS(expr, want)        a strata status, both printed by name
 *   CHECK_NEAR(what, got, want, tol)   |got - want| <= tol
 *   CHECK_REL(what, got, want, rel)    |got - want| <= rel * |want|
 *   CHECK_OR_RETURN(cond, ...)      as CHECK, then `return 1` from the calling function: for
 *                                   the rank bodies and steps that cannot go on after a failure
 */
#ifndef STRATA_TESTS_CHECK_H
#define STRATA_TESTS_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "strata.h"

#define CHECK_PRINT_LIMIT 30

static int failures;

__attribute__((format(printf, 4, 5))) static inline void check_failed(const char *file, int line,
                                                                      const char *what,
                                                                      const char *format, ...) {
  if (failures++ >= CHECK_PRINT_LIMIT) return;
  printf("%s:%d: FAILED %s:", file, line, what);
  va_list args;
  va_start(args, format);
  vprintf(format, args);
  va_end(args);
  putchar('\n');
  if (failures == CHECK_PRINT_LIMIT) printf("(further failures are counted, not printed)\n");
  fflush(stdout);
}

/* The message is optional: " " __VA_ARGS__ is " " alone without one, and glues onto a format
 * literal with one. */
#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) check_failed(__FILE__, __LINE__, #cond, " " __VA_ARGS__); \
  } while (0)

#define CHECK_OR_RETURN(cond, ...)                              \
  do {                                                          \
    if (!(cond)) {                                              \
      check_failed(__FILE__, __LINE__, #cond, " " __VA_ARGS__); \
      return 1;                                                 \
    }                                                           \
  } while (0)

#define CHECK_STATUS(expr, want)                                                           \
  do {                                                                                     \
    int check_got_ = (expr), check_want_ = (want);                                         \
    if (check_got_ != check_want_)                                                         \
      check_failed(__FILE__, __LINE__, #expr, " %s, want %s", strata_err_name(check_got_), \
                   strata_err_name(check_want_));                                          \
  } while (0)

#define CHECK_NEAR(what, got, want, tol)                                                       \
  do {                                                                                         \
    double check_got_ = (got), check_want_ = (want), check_tol_ = (tol);                       \
    if (!(fabs(check_got_ - check_want_) <= check_tol_))                                       \
      check_failed(__FILE__, __LINE__, what, " got %g, want %g ± %g", check_got_, check_want_, \
                   check_tol_);                                                                \
  } while (0)

#define CHECK_REL(what, got, want, rel)                                                     \
  do {                                                                                      \
    double check_got_ = (got), check_want_ = (want), check_rel_ = (rel);                    \
    if (!(fabs(check_got_ - check_want_) <= check_rel_ * fabs(check_want_) + 1e-9))         \
      check_failed(__FILE__, __LINE__, what, " got %.6g, want %.6g (rel %.3g)", check_got_, \
                   check_want_, check_rel_);                                                \
  } while (0)

#endif
