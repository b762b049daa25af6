// SPDX-License-Identifier: Apache-2.0
/*
 * shm_pull.c — single-copy receives of the shared-memory transport: a CMA record names the
 * payload in the sender's memory, and the receiver reads it from there straight into its
 * destination (one copy instead of the two of a trip through the ring).
 *
 * Two ways to reach the sender's bytes:
 *  - process_vm_readv (cross-memory attach) of the record's address. At open each receiver probes
 *    it against a canary word in each peer's private memory (shm_setup.c) and publishes the
 *    result in the channel; a sender uses CMA towards a peer only if that peer could read it.
 *    Yama ptrace_scope, seccomp or containers can forbid it, and then everything goes INLINE;
 *    cfg->shm_cma = 0 (STRATA_SHM_CMA=0) forces INLINE.
 *  - a mapping of registered memory: when the sender's buffer lies in memory from
 *    strata_mem_alloc (core/mem.c: a memfd mapped MAP_SHARED), the record also names that memfd,
 *    the region's id and the offset; the receiver maps the region read-only through
 *    /proc/<pid>/fd/<fd> (once; SHM_MAP_CACHE regions per peer, least recently used unmapped
 *    first) and copies or reduces straight from the sender's pages, with no system call and no
 *    page pinning per message. If the mapping fails, it pulls by process_vm_readv as for any
 *    buffer, and never tries that peer's memory again.
 *
 * Fused reduction. A receive with a reduce computes reduce_dst = reduce_src OP payload while it
 * reads the payload, so the peer's bytes are read exactly once. Through process_vm_readv the
 * payload lands in L2-sized blocks (SHM_REDUCE_BLOCK_BYTES) in a bounce buffer and is reduced
 * from there while still in cache. When reduce_dst does not overlap reduce_src (out of place), a
 * block is pulled straight into reduce_dst and reduced there (reduce.c allows dst == b): the
 * kernel's copy writes dst without first reading it, which saves the read-for-ownership of every
 * destination line that a write into the bounce buffer and then into dst would cost.
 *
 * A pull moves at most SHM_CMA_SLICE_BYTES per progress() call, so other peers and the other
 * direction of an exchange keep moving; the ring (shm_ring.c) acknowledges the record when the
 * last slice is in. It never starts from an aborted peer: its buffers may already be freed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "core/core.h"
#include "net/shm_internal.h"

/* The payload of record r read through our mapping of the peer's strata_mem_alloc region (mapped
 * on first use, the least recently used mapping dropped when all SHM_MAP_CACHE are taken), or
 * NULL: then the caller pulls it by CMA. The record's fd is open in the peer while this send is
 * pending (the region cannot be freed under a pending send), and the region's id is never
 * reused, so a cached mapping is always of the region the record names. */
const uint8_t *shm_region_payload(shm_transport *t, shm_peer *p, const shm_record *r) {
  if (r->mem_id == 0 || p->regions_refused || !p->pid_visible) return NULL;
  shm_region_map *m = NULL, *victim = &p->regions[0];
  for (int i = 0; i < SHM_MAP_CACHE && !m; i++) {
    if (p->regions[i].id == r->mem_id) m = &p->regions[i];
    if (p->regions[i].last_use < victim->last_use) victim = &p->regions[i];
  }
  if (!m) {
    char name[64];
    size_t bytes = 0;
    int opened;
    void *map = shm_map_proc_fd(p->pid, r->mem_fd, 0, 1, &bytes, &opened, name, sizeof name);
    if (map == MAP_FAILED) {
      STRATA_LOG(STRATA_LOG_INFO, t->rank,
                 "shm: cannot map peer %d's registered memory %s (%s): pulling it by CMA", p->rank,
                 name, strerror(errno));
      p->regions_refused = 1;
      return NULL;
    }
    if (victim->id) munmap((void *)victim->base, victim->bytes);
    m = victim;
    *m = (shm_region_map){.id = r->mem_id, .base = map, .bytes = bytes};
  }
  m->last_use = ++p->region_uses;
  if (r->mem_offset > m->bytes || r->bytes > m->bytes - r->mem_offset) return NULL;
  return m->base + r->mem_offset;
}

/* process_vm_readv all of [remote, remote+n) into local. Returns 0 or a status. */
static int shm_cma_read(shm_transport *t, shm_peer *p, void *local, uint64_t remote, size_t n) {
  while (n > 0) {
    struct iovec l = {.iov_base = local, .iov_len = n};
    struct iovec r = {.iov_base = (void *)(uintptr_t)remote, .iov_len = n};
    ssize_t got = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      int e = got < 0 ? errno : EFAULT;
      STRATA_LOG(STRATA_LOG_ERROR, t->rank, "shm: process_vm_readv from peer %d: %s", p->rank,
                 strerror(e));
      return e == ESRCH ? STRATA_ERR_PEER_LOST : STRATA_ERR_SYSTEM;
    }
    local = (uint8_t *)local + got;
    remote += (uint64_t)got;
    n -= (size_t)got;
  }
  return STRATA_OK;
}

/* Pull one slice of a CMA message. Returns STRATA_OK or the status that broke the peer. */
int shm_recv_cma_slice(shm_transport *t, shm_peer *p, strata_xfer *x) {
  uint64_t slice = SHM_CMA_SLICE_BYTES;
  if (x->reduce) slice -= slice % x->elem_size; /* never split an element */
  uint64_t end = x->bytes - x->offset > slice ? x->offset + slice : x->bytes;
  if (x->state == RECV_MAPPED) { /* the peer's pages are mapped here: read them directly */
    const uint8_t *src = (const uint8_t *)(uintptr_t)x->aux + x->offset;
    if (!x->reduce)
      memcpy((uint8_t *)x->buf + x->offset, src, (size_t)(end - x->offset));
    else
      x->reduce((uint8_t *)x->reduce_dst + x->offset, (const uint8_t *)x->reduce_src + x->offset,
                src, (size_t)((end - x->offset) / x->elem_size));
    t->mapped_bytes += end - x->offset;
    x->offset = end;
    t->events++;
    return STRATA_OK;
  }
  if (!x->reduce) {
    int rc = shm_cma_read(t, p, (uint8_t *)x->buf + x->offset, x->aux + x->offset,
                          (size_t)(end - x->offset));
    if (rc == STRATA_OK) x->offset = end;
    t->events++;
    return rc;
  }
  uintptr_t src = (uintptr_t)x->reduce_src, dst = (uintptr_t)x->reduce_dst;
  int direct = dst + x->bytes <= src || src + x->bytes <= dst; /* see "Fused reduction" above */
  if (!direct && !t->bounce && !(t->bounce = aligned_alloc(SHM_PAGE, SHM_REDUCE_BLOCK_BYTES)))
    return STRATA_ERR_NO_MEMORY;
  uint64_t block = SHM_REDUCE_BLOCK_BYTES - SHM_REDUCE_BLOCK_BYTES % x->elem_size;
  while (x->offset < end) {
    uint64_t n = end - x->offset < block ? end - x->offset : block;
    uint8_t *land = direct ? (uint8_t *)x->reduce_dst + x->offset : t->bounce;
    int rc = shm_cma_read(t, p, land, x->aux + x->offset, (size_t)n);
    if (rc != STRATA_OK) return rc;
    x->reduce((uint8_t *)x->reduce_dst + x->offset, (const uint8_t *)x->reduce_src + x->offset,
              land, (size_t)(n / x->elem_size));
    x->offset += n;
    t->events++;
  }
  return STRATA_OK;
}
