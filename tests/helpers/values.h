// SPDX-License-Identifier: Apache-2.0
/* values.h — typed element access and exactly representable test patterns for every dtype. */
#ifndef STRATA_TESTS_VALUES_H
#define STRATA_TESTS_VALUES_H

#include <stddef.h>
#include <stdint.h>

#include "strata.h"

/* Store v (an integer-valued double, or any double for float types) as element idx of buf.
 * Integer types wrap like the reduction kernels (two's complement truncation). */
void strata_test_put(strata_dtype dtype, void *buf, size_t idx, double v);
double strata_test_get(strata_dtype dtype, const void *buf, size_t idx);
/* The reference reduction of `nranks` contributions, already cast to the dtype (so integer
 * wrap-around and half-precision rounding match what a correct library produces). */
double strata_test_cast(strata_dtype dtype, double v);
/* Pattern for reductions: exact in every dtype for up to 8 ranks (sums stay <= 72, products
 * are powers of two <= 256). */
double strata_test_reduce_value(strata_op op, int rank, size_t idx);
/* Pattern for data movement: integers 0..100, exact in every dtype. */
double strata_test_move_value(int rank, size_t idx);
/* Expected result of reducing strata_test_reduce_value over ranks 0..nranks-1 at idx. */
double strata_test_reduce_expected(strata_dtype dtype, strata_op op, int nranks, size_t idx);
/* Whether got matches want for this dtype/op (AVG on floats allows rounding). */
int strata_test_equal(strata_dtype dtype, strata_op op, double got, double want);

#endif
