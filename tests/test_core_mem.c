// SPDX-License-Identifier: Apache-2.0
/*
 * test_core_mem.c — strata_mem_alloc / strata_mem_free and the registry shm.c asks
 * (strata_mem_lookup): bad arguments get a status and touch nothing, memory is zeroed and
 * writable, lookups find exactly the bytes inside one region, ids are never reused.
 * Reading a region from a peer is tested in test_net_shm (registered scenarios) and through the
 * engine in test_bench_cli.sh (strata bench -R).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "helpers/check.h"

int main(void) {
  void *p = (void *)1;
  CHECK(strata_mem_alloc(0, &p) == STRATA_ERR_INVALID_ARG && p == NULL, "0 bytes");
  CHECK(strata_mem_alloc(64, NULL) == STRATA_ERR_INVALID_ARG, "NULL out");
  CHECK(strata_mem_alloc(SIZE_MAX, &p) != STRATA_OK && p == NULL, "SIZE_MAX bytes");
  CHECK(strata_mem_free(NULL) == STRATA_OK, "free(NULL)");

  size_t bytes = (3u << 20) + 5;
  uint8_t *a = NULL, *b = NULL;
  CHECK(strata_mem_alloc(bytes, (void **)&a) == STRATA_OK && a, "alloc a");
  CHECK(strata_mem_alloc(100, (void **)&b) == STRATA_OK && b, "alloc b");
  if (!a || !b) return 1;
  CHECK(((uintptr_t)a & 4095u) == 0, "page aligned");
  size_t zero = 0;
  for (size_t i = 0; i < bytes; i++) zero += a[i] == 0;
  CHECK(zero == bytes, "zero filled: %zu of %zu", zero, bytes);
  memset(a, 0x5a, bytes);
  CHECK(a[bytes - 1] == 0x5a, "writable");

  strata_mem_ref ra, rb, r;
  CHECK(strata_mem_lookup(a, bytes, &ra) == 1 && ra.offset == 0 && ra.fd >= 0, "lookup a");
  CHECK(strata_mem_lookup(b, 100, &rb) == 1 && rb.id != ra.id, "lookup b: ids differ");
  CHECK(strata_mem_lookup(a + 4096, 10, &r) == 1 && r.offset == 4096 && r.id == ra.id, "inside a");
  CHECK(strata_mem_lookup(a + 1, ra.region_bytes, &r) == 0, "past a's end");
  CHECK(strata_mem_lookup(a - 1, 2, &r) == 0, "before a");
  uint8_t *heap = malloc(64);
  CHECK(heap && strata_mem_lookup(heap, 64, &r) == 0, "malloc'd memory is not registered");
  CHECK(strata_mem_free(heap) == STRATA_ERR_INVALID_ARG, "free of malloc'd memory refused");
  free(heap);
  CHECK(strata_mem_free(a + 64) == STRATA_ERR_INVALID_ARG, "free of an inner pointer refused");

  CHECK(strata_mem_free(a) == STRATA_OK, "free a");
  CHECK(strata_mem_free(a) == STRATA_ERR_INVALID_ARG, "double free refused");
  CHECK(strata_mem_lookup(b, 100, &r) == 1 && r.id == rb.id, "b still registered");
  uint8_t *c = NULL;
  CHECK(strata_mem_alloc(bytes, (void **)&c) == STRATA_OK && c, "alloc c");
  CHECK(c && strata_mem_lookup(c, 1, &r) == 1 && r.id != ra.id && r.id != rb.id,
        "a new region gets a new id (even where a's fd number is reused)");
  CHECK(strata_mem_free(c) == STRATA_OK && strata_mem_free(b) == STRATA_OK, "free b, c");
  CHECK(strata_mem_lookup(b, 1, &r) == 0, "nothing left registered");
  printf("test_core_mem: %s\n", failures ? "FAILED" : "ok");
  return failures != 0;
}
