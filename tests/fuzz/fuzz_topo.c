// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_topo.c — coverage-guided fuzzing of the topology parser (libFuzzer; AFL++ via its
 * libFuzzer driver). Every input must load or fail with STRATA_ERR_PARSE and a
 * "fuzz:LINE:COL: expected ..." message; anything else aborts so the fuzzer keeps the input.
 *
 * Build and run: tests/fuzz/README.md.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[700] = "";
  strata_topo *topo = NULL;
  int status = strata_topo_load_string("fuzz", (const char *)data, size, &topo, err, sizeof err);
  if (status == STRATA_OK) {
    if (topo == NULL || strata_topo_validate(topo, err, sizeof err) != STRATA_OK) abort();
    (void)strata_topo_gpus(topo);
    strata_topo_free(topo);
    return 0;
  }
  if (status != STRATA_ERR_PARSE || topo != NULL || strncmp(err, "fuzz:", 5) != 0 ||
      strstr(err, ": expected ") == NULL)
    abort();
  return 0;
}

#ifdef STRATA_FUZZ_MAIN
/* Without libFuzzer (-DSTRATA_FUZZ_MAIN): `fuzz_topo FILE...` replays inputs, and
 * `fuzz_topo --write-corpus DIR` writes every preset into DIR as a seed corpus. */
int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) {
    for (size_t i = 0; i < strata_topo_preset_count(); i++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s.yaml", argv[2], strata_topo_preset_name(i));
      FILE *file = fopen(path, "wb");
      if (file == NULL) return 1;
      fputs(strata_topo_preset_yaml(strata_topo_preset_name(i)), file);
      fclose(file);
    }
    return 0;
  }
  for (int i = 1; i < argc; i++) {
    FILE *file = fopen(argv[i], "rb");
    if (file == NULL) return 1;
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, file);
    fclose(file);
    uint8_t *exact = malloc(len ? len : 1);
    memcpy(exact, buf, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    printf("%s: ok\n", argv[i]);
  }
  return 0;
}
#endif
