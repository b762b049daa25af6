// SPDX-License-Identifier: Apache-2.0
/* values.c — see values.h. */
#include "helpers/values.h"

#include <math.h>
#include <string.h>

#include "core/core.h"

void strata_test_put(strata_dtype dtype, void *buf, size_t idx, double v) {
  switch (dtype) {
    case STRATA_I8:
      ((int8_t *)buf)[idx] = (int8_t)(uint8_t)(int64_t)v;
      break;
    case STRATA_U8:
      ((uint8_t *)buf)[idx] = (uint8_t)(int64_t)v;
      break;
    case STRATA_I16:
      ((int16_t *)buf)[idx] = (int16_t)(uint16_t)(int64_t)v;
      break;
    case STRATA_U16:
      ((uint16_t *)buf)[idx] = (uint16_t)(int64_t)v;
      break;
    case STRATA_I32:
      ((int32_t *)buf)[idx] = (int32_t)(uint32_t)(int64_t)v;
      break;
    case STRATA_U32:
      ((uint32_t *)buf)[idx] = (uint32_t)(int64_t)v;
      break;
    case STRATA_I64:
      ((int64_t *)buf)[idx] = (int64_t)v;
      break;
    case STRATA_U64:
      ((uint64_t *)buf)[idx] = (uint64_t)(int64_t)v;
      break;
    case STRATA_F16:
      ((uint16_t *)buf)[idx] = strata_f32_to_f16((float)v);
      break;
    case STRATA_BF16:
      ((uint16_t *)buf)[idx] = strata_f32_to_bf16((float)v);
      break;
    case STRATA_F32:
      ((float *)buf)[idx] = (float)v;
      break;
    case STRATA_F64:
      ((double *)buf)[idx] = v;
      break;
    default:
      break;
  }
}

double strata_test_get(strata_dtype dtype, const void *buf, size_t idx) {
  switch (dtype) {
    case STRATA_I8:
      return ((const int8_t *)buf)[idx];
    case STRATA_U8:
      return ((const uint8_t *)buf)[idx];
    case STRATA_I16:
      return ((const int16_t *)buf)[idx];
    case STRATA_U16:
      return ((const uint16_t *)buf)[idx];
    case STRATA_I32:
      return ((const int32_t *)buf)[idx];
    case STRATA_U32:
      return ((const uint32_t *)buf)[idx];
    case STRATA_I64:
      return (double)((const int64_t *)buf)[idx];
    case STRATA_U64:
      return (double)((const uint64_t *)buf)[idx];
    case STRATA_F16:
      return strata_f16_to_f32(((const uint16_t *)buf)[idx]);
    case STRATA_BF16:
      return strata_bf16_to_f32(((const uint16_t *)buf)[idx]);
    case STRATA_F32:
      return ((const float *)buf)[idx];
    case STRATA_F64:
      return ((const double *)buf)[idx];
    default:
      return NAN;
  }
}

double strata_test_cast(strata_dtype dtype, double v) {
  uint8_t slot[8];
  strata_test_put(dtype, slot, 0, v);
  return strata_test_get(dtype, slot, 0);
}

double strata_test_reduce_value(strata_op op, int rank, size_t idx) {
  if (op == STRATA_PROD) return 1 + (double)((rank + idx) % 2);
  return 1 + (double)((rank * 7 + idx * 3) % 9);
}

double strata_test_move_value(int rank, size_t idx) {
  return (double)((rank * 13 + idx * 7) % 101);
}

static int is_float(strata_dtype dtype) {
  return dtype == STRATA_F16 || dtype == STRATA_BF16 || dtype == STRATA_F32 || dtype == STRATA_F64;
}

double strata_test_reduce_expected(strata_dtype dtype, strata_op op, int nranks, size_t idx) {
  double acc = strata_test_reduce_value(op, 0, idx);
  for (int r = 1; r < nranks; r++) {
    double v = strata_test_reduce_value(op, r, idx);
    switch (op) {
      case STRATA_SUM:
      case STRATA_AVG:
        acc += v;
        break;
      case STRATA_PROD:
        acc *= v;
        break;
      case STRATA_MIN:
        acc = v < acc ? v : acc;
        break;
      case STRATA_MAX:
        acc = v > acc ? v : acc;
        break;
      case STRATA_BAND: /* the patterns are small non-negative integers */
        acc = (double)((int64_t)acc & (int64_t)v);
        break;
      case STRATA_BOR:
        acc = (double)((int64_t)acc | (int64_t)v);
        break;
      case STRATA_BXOR:
        acc = (double)((int64_t)acc ^ (int64_t)v);
        break;
      default:
        break;
    }
  }
  if (op == STRATA_AVG) {
    if (is_float(dtype)) return strata_test_cast(dtype, strata_test_cast(dtype, acc) / nranks);
    return strata_test_cast(dtype, floor(strata_test_cast(dtype, acc) / nranks));
  }
  return strata_test_cast(dtype, acc);
}

int strata_test_equal(strata_dtype dtype, strata_op op, double got, double want) {
  if (op == STRATA_AVG && is_float(dtype)) {
    double tol = dtype == STRATA_F64 ? 1e-12 : dtype == STRATA_F32 ? 1e-6 : 1e-2;
    return fabs(got - want) <= tol * fabs(want) + 1e-30;
  }
  return got == want;
}
