// SPDX-License-Identifier: Apache-2.0
/*
 * mem.c — memory that local peers can map: strata_mem_alloc / strata_mem_free, and the registry
 * the shared-memory transport asks whether a buffer lies in such memory.
 *
 * Why. A large message between two ranks of one host is otherwise pulled with process_vm_readv,
 * which pins the sender's pages on every call; a plain memcpy from a shared mapping of the same
 * memory skips the pinning and runs close to a private memcpy. Memory from strata_mem_alloc is a
 * memfd mapped MAP_SHARED; shm.c puts the memfd's number, the region's id and the offset in the
 * message record, the receiver maps the region once (through /proc/<pid>/fd/<fd>, as it maps the
 * peer's segment) and reads it directly from then on, the reduction fused into that read.
 *
 * Ids. Every region gets a process-unique id (never reused), so a receiver's cached mapping of a
 * freed region is never taken for a new one that happens to get the same fd number.
 *
 * Invariants. A region is in the registry from its allocation until strata_mem_free; lookups and
 * changes hold one mutex (the lookup runs once per large send, a few tens of ns). The fd stays
 * open as long as the region exists, so a peer can open it while a send from it is pending.
 * Must never: hand out a region id twice, or free memory that strata_mem_alloc did not return.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"

typedef struct mem_region {
  uint8_t *base;
  size_t bytes; /* mapped (whole pages) */
  int fd;
  uint64_t id;
} mem_region;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_region *mem_regions;
static size_t mem_count, mem_cap;
static uint64_t mem_next_id = 1;

int strata_mem_alloc(size_t bytes, void **out) {
  if (!out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  long page = sysconf(_SC_PAGESIZE);
  size_t pg = page > 0 ? (size_t)page : 4096u;
  if (bytes == 0 || bytes > SIZE_MAX - pg) return STRATA_ERR_INVALID_ARG;
  size_t len = (bytes + pg - 1) / pg * pg;
  int fd = memfd_create("strata-mem", MFD_CLOEXEC);
  if (fd < 0) return STRATA_ERR_SYSTEM;
  if (ftruncate(fd, (off_t)len) != 0) {
    close(fd);
    return errno == ENOMEM || errno == ENOSPC || errno == EFBIG ? STRATA_ERR_NO_MEMORY
                                                                : STRATA_ERR_SYSTEM;
  }
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return STRATA_ERR_NO_MEMORY;
  }
  pthread_mutex_lock(&mem_lock);
  if (mem_count == mem_cap) {
    size_t cap = mem_cap ? mem_cap * 2 : 8;
    mem_region *r = realloc(mem_regions, cap * sizeof *r);
    if (!r) {
      pthread_mutex_unlock(&mem_lock);
      munmap(p, len);
      close(fd);
      return STRATA_ERR_NO_MEMORY;
    }
    mem_regions = r;
    mem_cap = cap;
  }
  mem_regions[mem_count++] = (mem_region){.base = p, .bytes = len, .fd = fd, .id = mem_next_id++};
  pthread_mutex_unlock(&mem_lock);
  *out = p;
  return STRATA_OK;
}

int strata_mem_free(void *ptr) {
  if (!ptr) return STRATA_OK;
  pthread_mutex_lock(&mem_lock);
  for (size_t i = 0; i < mem_count; i++) {
    if (mem_regions[i].base != ptr) continue;
    mem_region r = mem_regions[i];
    mem_regions[i] = mem_regions[--mem_count];
    if (mem_count == 0) {
      free(mem_regions);
      mem_regions = NULL;
      mem_cap = 0;
    }
    pthread_mutex_unlock(&mem_lock);
    munmap(r.base, r.bytes);
    close(r.fd);
    return STRATA_OK;
  }
  pthread_mutex_unlock(&mem_lock);
  return STRATA_ERR_INVALID_ARG; /* not ours (or freed twice): touch nothing */
}

int strata_mem_lookup(const void *ptr, size_t bytes, strata_mem_ref *out) {
  uintptr_t p = (uintptr_t)ptr;
  int found = 0;
  pthread_mutex_lock(&mem_lock);
  for (size_t i = 0; i < mem_count && !found; i++) {
    uintptr_t b = (uintptr_t)mem_regions[i].base;
    if (p < b || p - b > mem_regions[i].bytes || bytes > mem_regions[i].bytes - (p - b)) continue;
    out->fd = mem_regions[i].fd;
    out->id = mem_regions[i].id;
    out->offset = p - b;
    out->region_bytes = mem_regions[i].bytes;
    found = 1;
  }
  pthread_mutex_unlock(&mem_lock);
  return found;
}

void *strata_mem_buffer(size_t bytes, int registered) {
  void *p = NULL;
  if (registered) return strata_mem_alloc(bytes, &p) == STRATA_OK ? p : NULL;
  return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}

void strata_mem_buffer_free(void *ptr, int registered) {
  if (registered)
    strata_mem_free(ptr);
  else
    free(ptr);
}
