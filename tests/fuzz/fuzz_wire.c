// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_wire.c — libFuzzer harness for the TCP transport's frame decoder (src/net/tcp.c): the
 * input is what a peer sends on one data stream (and its control connection) to a rank with
 * three receives posted. Byte 0 chooses sealed or clear and how many of the following bytes go
 * to the control connection. Any input must end in completions or a clean failure — libFuzzer
 * with ASan/UBSan reports a crash, an out-of-bounds access, a leak or a hang.
 */
#include <stddef.h>
#include <stdint.h>

#include "net/tcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int sealed = data[0] & 1;
  size_t control_bytes = (size_t)(data[0] >> 1) * 8; /* 0 .. 1016: whole frames or not */
  strata_tcp_fuzz_frames_for_test(data + 1, size - 1, control_bytes, sealed);
  return 0;
}
