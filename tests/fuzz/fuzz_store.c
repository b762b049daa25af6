// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_store.c — libFuzzer harness for the rendezvous store's server (src/boot/store_server.c):
 * the input is what one client sends on one connection. Byte 0 chooses whether the connection
 * starts as a stranger (bit 0 clear: it must open with an AUTH frame proving the no-secret key
 * over a challenge of zeros, store_wire.h) or as already authenticated (bit 0 set: every request
 * reaches its handler). Every frame is parsed and handled as the server would, replies included;
 * the server may keep the connection or close it, nothing else — libFuzzer with ASan/UBSan
 * reports a crash, an out-of-bounds access, a leak or a hang.
 *
 * Build and run: tests/fuzz/README.md (`make fuzz`); seeds in tests/fuzz/corpus/store/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "boot/store.h"
#include "core/core.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* every refused input logs why; a line per execution would drown the fuzzer's own output */
  strata_log_set_level(STRATA_LOG_OFF);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int status = strata_store_server_feed(data + 1, size - 1, data[0] & 1);
  if (status != STRATA_OK && status != STRATA_ERR_PROTOCOL && status != STRATA_ERR_NO_MEMORY)
    abort();
  return 0;
}
