// SPDX-License-Identifier: Apache-2.0
/*
 * shm_setup.c — the life of the shared-memory transport: creating and mapping the segments,
 * meeting the local peers through the store, watching them for death and aborts, and tearing
 * everything down.
 *
 * Segments. Every rank creates one segment (layout in shm_wire.h) holding the inbound channel
 * from each local peer, with rings of SHM_RING_BYTES (smaller with many local peers, so a segment
 * stays near SHM_SEGMENT_BUDGET_BYTES). The segment is a memfd, not a shm_open name: it never
 * appears in /dev/shm, so no crash at any moment (not even a rank killed while it waits in open
 * for a peer that never comes, which is how `strata launch` stops a failed job) can leave it
 * behind, and a container's small /dev/shm does not limit it.
 *
 * Rendezvous. We publish "<pid> <fd>" in the store; each peer opens /proc/<pid>/fd/<fd> (same
 * user and pid namespace, which net.c's locality test implies), maps it, probes cross-memory
 * attach against a canary word of ours and sets its "ready" key; once the ready keys of all its
 * local peers are set, a rank closes its fd and the memory lives exactly as long as the
 * mappings. Store keys are "<job>/shm/<k>/<rank>/segment|ready", where k counts this rank's opens
 * with this same local group ("<job>/shm/opens/<rank>/<hash of the group>"), so several
 * communicators of one job never read each other's keys.
 *
 * Liveness and aborts. A peer we are blocked on is checked at most every SHM_LIVENESS_PERIOD_S
 * through a pidfd (immune to pid reuse and to the dead peer lingering as a zombie; kill(pid, 0)
 * where pidfds do not exist). Death completes its transfers with STRATA_ERR_PEER_LOST.
 * send_abort writes the abort word of our channel in the peer's segment at once (it overtakes
 * everything the aborting rank had not yet put in a ring); progress() records the first abort it
 * sees in remote_abort_status / remote_abort_peer, but only once the inline data that peer had
 * already written and that our posted receives will take has been consumed, so an operation
 * whose bytes all arrived still completes.
 *
 * Must never: give a segment a name in the file system, or trust a peer's segment before its
 * magic, version, owner and channel bounds check out.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/core.h"
#include "net/shm_internal.h"

/* ---- liveness and failure ---- */

static int shm_pidfd_open(int pid) {
#ifdef SYS_pidfd_open
  return (int)syscall(SYS_pidfd_open, pid, 0);
#else
  (void)pid;
  return -1;
#endif
}

static int shm_peer_alive(const shm_peer *p) {
  if (!p->pid_visible) return 1; /* another pid namespace: the TCP mesh notices deaths */
  if (p->pidfd >= 0) {
    struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
    return poll(&pfd, 1, 0) == 0;
  }
  return !(kill(p->pid, 0) != 0 && errno == ESRCH);
}

static void shm_fail_queue(shm_transport *t, shm_queue *q, int status) {
  strata_xfer *x;
  while ((x = shm_queue_pop(q))) shm_complete(t, x, status);
}

void shm_peer_fail(shm_transport *t, shm_peer *p, int status) {
  if (p->lost) return;
  p->lost = status;
  shm_fail_queue(t, &p->sends, status);
  shm_fail_queue(t, &p->acks, status);
  shm_fail_queue(t, &p->recvs, status);
  STRATA_LOG(STRATA_LOG_WARN, t->rank, "shm: peer %d %s", p->rank,
             status == STRATA_ERR_PEER_LOST ? "died" : strata_strerror(status));
}

/* See shm_internal.h. */
void *shm_map_proc_fd(int pid, int fd, int writable, size_t min_bytes, size_t *bytes, int *opened,
                      char *name, size_t name_len) {
  snprintf(name, name_len, "/proc/%d/fd/%d", pid, fd);
  int own = open(name, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  *opened = own >= 0;
  if (own < 0) return MAP_FAILED;
  struct stat st;
  void *map = MAP_FAILED;
  if (fstat(own, &st) == 0) {
    if (st.st_size <= 0 || (size_t)st.st_size < min_bytes)
      errno = EINVAL;
    else
      map = mmap(NULL, (size_t)st.st_size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                 writable ? MAP_SHARED | MAP_POPULATE : MAP_SHARED, own, 0);
  }
  int err = errno;
  close(own);
  errno = err;
  if (map != MAP_FAILED) *bytes = (size_t)st.st_size;
  return map;
}

/* Is inline data that a posted receive will consume already in p's ring? (An abort from p waits
 * for it: what p sent before aborting arrives before the abort, as on a TCP stream.) */
static int shm_abort_must_wait(shm_peer *p) {
  strata_xfer *x = p->recvs.head;
  if (!x || x->state == RECV_CMA) return 0; /* never pull from an aborted peer's memory */
  uint64_t head = atomic_load_explicit(&p->in->head, memory_order_acquire);
  if (p->discard_bytes) return head > p->in_tail;
  if (x->state == RECV_INLINE) return head - p->in_tail >= (x->reduce ? x->elem_size : 1);
  uint64_t pos = shm_align_line(p->in_tail);
  if (head < pos + SHM_LINE) return 0;
  const shm_record *r = (const shm_record *)(p->in_ring + (pos & p->in_mask));
  return r->kind == SHM_KIND_INLINE;
}

/* An abort becomes visible once every message the peer wrote before it has been received here
 * (so an operation the aborting rank had finished finishes here too), or after SHM_ABORT_ORDER_S
 * when our side never asks for that data. */
void shm_check_abort(shm_transport *t, shm_peer *p) {
  if (p->abort_seen) return;
  int status = atomic_load_explicit(&p->in->abort_status, memory_order_acquire);
  if (!status) return;
  if (!p->lost) {
    double now = strata_now_s();
    if (p->abort_noticed_s == 0) p->abort_noticed_s = now;
    uint64_t owed = atomic_load_explicit(&p->in->abort_sent, memory_order_relaxed);
    int data_owed = p->recv_seq < owed || shm_abort_must_wait(p);
    if (data_owed && now - p->abort_noticed_s < SHM_ABORT_ORDER_S) return;
  }
  p->abort_seen = 1;
  STRATA_LOG(STRATA_LOG_INFO, t->rank, "shm: peer %d aborted (%s)", p->rank,
             strata_err_name(status));
  if (!t->base.remote_abort_status) {
    t->base.remote_abort_status = status;
    t->base.remote_abort_peer = p->rank;
    t->base.remote_abort_op_seq = atomic_load_explicit(&p->in->abort_op_seq, memory_order_relaxed);
  }
}

/* A peer we are blocked on is checked for death at most every SHM_LIVENESS_PERIOD_S. */
int shm_peer_found_dead(shm_peer *p, double *now) {
  if (*now == 0) *now = strata_now_s();
  if (*now < p->next_liveness_s) return 0;
  p->next_liveness_s = *now + SHM_LIVENESS_PERIOD_S;
  /* a peer that aborted may exit at once; its abort (published in order with the data it left
   * in our ring, see shm_check_abort) says more than its death */
  if (atomic_load_explicit(&p->in->abort_status, memory_order_acquire)) return 0;
  return !shm_peer_alive(p);
}

static void shm_send_abort(strata_transport *base, int peer, int status, uint64_t op_seq) {
  shm_transport *t = (shm_transport *)base;
  shm_peer *p = shm_peer_of(t, peer);
  if (!p || !status) return;
  atomic_store_explicit(&p->out->abort_sent, p->send_seq, memory_order_relaxed);
  atomic_store_explicit(&p->out->abort_op_seq, op_seq, memory_order_relaxed);
  atomic_store_explicit(&p->out->abort_status, status, memory_order_release);
}

static void shm_destroy(strata_transport *base) {
  shm_transport *t = (shm_transport *)base;
  if (!t) return;
  for (int i = 0; t->peers && i < t->npeers; i++) {
    shm_peer *p = &t->peers[i];
    if (p->map) munmap(p->map, p->map_bytes);
    if (p->pidfd >= 0) close(p->pidfd);
    for (int k = 0; k < SHM_MAP_CACHE; k++)
      if (p->regions[k].id) munmap((void *)p->regions[k].base, p->regions[k].bytes);
  }
  if (t->own_map) munmap(t->own_map, t->own_map_bytes);
  if (t->own_fd >= 0) close(t->own_fd);
  free(t->bounce);
  free(t->peers);
  free(t->peer_index);
  free(t);
}

static int shm_query(const strata_transport *base, strata_transport_query what, int peer,
                     uint64_t *value) {
  const shm_transport *t = (const shm_transport *)base;
  *value = 0;
  if (what == STRATA_TRANSPORT_DATA_RTT_US) return STRATA_OK; /* memory: no round trip */
  if (what == STRATA_TRANSPORT_MAPPED_BYTES) {
    *value = t->mapped_bytes;
    return STRATA_OK;
  }
  if (what == STRATA_TRANSPORT_SINGLE_COPY) {
    if (peer < 0 || peer >= t->nranks || t->peer_index[peer] < 0) return STRATA_ERR_INVALID_ARG;
    *value = (uint64_t)t->peers[t->peer_index[peer]].use_cma;
    return STRATA_OK;
  }
  return STRATA_ERR_INVALID_ARG;
}

static const strata_transport_ops shm_ops = {
    .name = "shm",
    .post_send = shm_post_send,
    .post_recv = shm_post_recv,
    .progress = shm_progress,
    .send_abort = shm_send_abort,
    .wait = shm_wait,
    .destroy = shm_destroy,
    .query = shm_query,
    .probe = shm_probe,
};

/* ---- open: segments, rendezvous, CMA probe ---- */

typedef struct shm_open_ctx {
  const strata_config *cfg;
  strata_store *store;
  shm_transport *t;
  double timeout_s;
  int64_t generation;
  char *err;
  size_t err_len;
} shm_open_ctx;

static int shm_fail(shm_open_ctx *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int shm_fail(shm_open_ctx *c, int status, const char *fmt, ...) {
  if (c->err && c->err_len) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(c->err, c->err_len, fmt, args);
    va_end(args);
  }
  return status;
}

static void shm_key(const shm_open_ctx *c, int rank, const char *what, char *key, size_t len) {
  snprintf(key, len, "%s/shm/%lld/%d/%s", c->cfg->job_id, (long long)c->generation, rank, what);
}

/* Lay out our segment: header, then per local peer a channel page and its ring. */
static void shm_segment_init(shm_transport *t, uint64_t canary, size_t bytes) {
  shm_header *h = t->own_map;
  h->version = SHM_VERSION;
  h->owner_rank = t->rank;
  h->nranks = t->nranks;
  h->owner_pid = (int32_t)getpid();
  h->canary_addr = (uint64_t)(uintptr_t)&t->canary;
  h->canary_value = canary;
  h->segment_bytes = bytes;
  uint64_t offset = shm_header_bytes(t->nranks);
  for (int i = 0; i < t->npeers; i++) {
    shm_peer *p = &t->peers[i];
    h->channel_offset[p->rank] = offset;
    shm_channel *ch = shm_channel_at(t->own_map, offset);
    ch->producer_rank = p->rank;
    ch->ring_offset = offset + SHM_PAGE;
    ch->ring_bytes = t->ring_bytes;
    p->in = ch;
    p->in_ring = (uint8_t *)t->own_map + ch->ring_offset;
    p->in_mask = t->ring_bytes - 1;
    offset += SHM_PAGE + t->ring_bytes;
  }
  atomic_thread_fence(memory_order_release);
  h->magic = SHM_MAGIC;
}

/* Read one byte of every page of [p, p + bytes). Under some hypervisors (Firecracker, for one)
 * the first access to each page of a fresh shared mapping traps to the host even after
 * MAP_POPULATE or MADV_POPULATE_WRITE, so the first pass of small messages through a ring would
 * run many times slower than every later one. The rings are touched once at open instead, where
 * the cost is part of setting up (and nothing where pages are really populated), not of the first
 * calls a benchmark or a calibration times. */
static void shm_touch_pages(const void *p, size_t bytes) {
  const volatile uint8_t *b = p;
  for (size_t i = 0; i < bytes; i += 4096) (void)b[i];
}

/* Our segment is a memfd: it has no name anywhere, so nothing can be left behind, ever. Peers
 * open it through /proc/<pid>/fd/<fd> while we hold the fd (until the ready barrier). */
static int shm_create_own(shm_open_ctx *c) {
  shm_transport *t = c->t;
  size_t bytes = shm_header_bytes(t->nranks) + (size_t)t->npeers * (SHM_PAGE + t->ring_bytes);
  char name[96];
  snprintf(name, sizeof name, "strata-%.60s-%d", c->cfg->job_id, t->rank);
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return shm_fail(c, STRATA_ERR_SYSTEM, "shm: memfd_create: %s", strerror(errno));
  t->own_fd = fd;
  /* Allocate the pages now: running out of memory must be an error here, not a SIGBUS later. */
  int e = ftruncate(fd, (off_t)bytes) != 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
  if (e != 0)
    return shm_fail(c, STRATA_ERR_SYSTEM, "shm: allocating a %zu-byte segment: %s", bytes,
                    strerror(e));
  void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (map == MAP_FAILED)
    return shm_fail(c, STRATA_ERR_SYSTEM, "shm: mapping our segment: %s", strerror(errno));
  t->own_map = map;
  t->own_map_bytes = bytes;
  uint64_t canary = 0;
  if (getrandom(&canary, sizeof canary, 0) != (ssize_t)sizeof canary) canary = 0x5eed5eedull;
  canary |= 1; /* never 0, so a zero-filled read cannot pass */
  t->canary = canary;
  shm_segment_init(t, canary, bytes);
  shm_touch_pages(map, bytes); /* the rings we consume */
  return STRATA_OK;
}

/* Can we process_vm_readv this peer? Reads its canary word and compares. */
static int shm_cma_probe(const shm_header *h) {
  uint64_t value = 0;
  struct iovec l = {.iov_base = &value, .iov_len = sizeof value};
  struct iovec r = {.iov_base = (void *)(uintptr_t)h->canary_addr, .iov_len = sizeof value};
  return process_vm_readv(h->owner_pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof value &&
         value == h->canary_value;
}

/* Map peer p's segment and find our channel in it. */
static int shm_map_peer(shm_open_ctx *c, shm_peer *p, int cma_enabled) {
  shm_transport *t = c->t;
  char key[256];
  shm_key(c, p->rank, "segment", key, sizeof key);
  void *value = NULL;
  size_t len = 0;
  int rc = strata_store_get(c->store, key, &value, &len, c->timeout_s);
  if (rc != STRATA_OK)
    return shm_fail(c, rc, "shm: rank %d never published its segment (%s): %s", p->rank, key,
                    strata_strerror(rc));
  char text[64], name[96];
  snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text ? len : sizeof text - 1),
           (const char *)value);
  free(value);
  int owner_pid = 0, owner_fd = -1;
  if (sscanf(text, "%d %d", &owner_pid, &owner_fd) != 2 || owner_pid <= 0 || owner_fd < 0)
    return shm_fail(c, STRATA_ERR_PROTOCOL, "shm: rank %d published a bad segment \"%s\"", p->rank,
                    text);
  size_t map_bytes = 0;
  int opened;
  void *map = shm_map_proc_fd(owner_pid, owner_fd, 1, shm_header_bytes(t->nranks), &map_bytes,
                              &opened, name, sizeof name);
  if (!opened)
    return shm_fail(c, STRATA_ERR_SYSTEM,
                    "shm: cannot open rank %d's segment %s: %s (a peer must run as the same "
                    "user, be dumpable and share our pid namespace; STRATA_SHM=0 uses TCP)",
                    p->rank, name, strerror(errno));
  if (map == MAP_FAILED)
    return shm_fail(c, STRATA_ERR_SYSTEM, "shm: mapping rank %d's segment %s failed", p->rank,
                    name);
  p->map = map;
  p->map_bytes = map_bytes;
  const shm_header *h = map;
  uint64_t offset = h->nranks == t->nranks && t->rank < h->nranks ? h->channel_offset[t->rank] : 0;
  if (h->magic != SHM_MAGIC || h->version != SHM_VERSION || h->owner_rank != p->rank || !offset ||
      offset + SHM_PAGE > p->map_bytes)
    return shm_fail(c, STRATA_ERR_PROTOCOL, "shm: peer segment %s has an unexpected layout", name);
  p->out = shm_channel_at(map, offset);
  uint64_t ring = p->out->ring_bytes;
  if (ring < SHM_PAGE || (ring & (ring - 1)) || p->out->ring_offset % SHM_PAGE ||
      p->out->ring_offset > p->map_bytes || ring > p->map_bytes - p->out->ring_offset ||
      p->out->producer_rank != t->rank)
    return shm_fail(c, STRATA_ERR_PROTOCOL, "shm: peer segment %s has an unexpected ring", name);
  p->out_ring = (uint8_t *)map + p->out->ring_offset;
  p->out_mask = ring - 1;
  shm_touch_pages(p->out_ring, ring); /* the ring we produce into */
  p->pid = h->owner_pid;
  p->pidfd = shm_pidfd_open(p->pid);
  p->pid_visible = p->pidfd >= 0 || kill(p->pid, 0) == 0 || errno == EPERM;
  p->in->cma_readable = cma_enabled && shm_cma_probe(h);
  return STRATA_OK;
}

/* FNV-1a over the local group (nranks and its ranks): the members of one group count their opens
 * on the same key, so groups of different shapes never pair up. */
static uint64_t shm_group_hash(const shm_transport *t) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int r = 0; r < t->nranks; r++)
    if (r == t->rank || t->peer_index[r] >= 0) h = (h ^ (uint64_t)(uint32_t)r) * 0x100000001b3ull;
  return (h ^ (uint64_t)(uint32_t)t->nranks) * 0x100000001b3ull;
}

static int shm_rendezvous(shm_open_ctx *c) {
  shm_transport *t = c->t;
  char key[256];
  snprintf(key, sizeof key, "%s/shm/opens/%d/%016llx", c->cfg->job_id, t->rank,
           (unsigned long long)shm_group_hash(t));
  int rc = strata_store_add(c->store, key, 1, &c->generation);
  if (rc != STRATA_OK) return shm_fail(c, rc, "shm: store add failed (%s)", key);
  char segment[64];
  snprintf(segment, sizeof segment, "%d %d", (int)getpid(), t->own_fd);
  shm_key(c, t->rank, "segment", key, sizeof key);
  rc = strata_store_set(c->store, key, segment, strlen(segment));
  if (rc != STRATA_OK) return shm_fail(c, rc, "shm: store set failed (%s)", key);
  int cma_enabled = c->cfg->shm_cma;
  for (int i = 0; i < t->npeers; i++) {
    rc = shm_map_peer(c, &t->peers[i], cma_enabled);
    if (rc != STRATA_OK) return rc;
  }
  shm_key(c, t->rank, "ready", key, sizeof key);
  rc = strata_store_set(c->store, key, "1", 1);
  if (rc != STRATA_OK) return shm_fail(c, rc, "shm: store set failed (%s)", key);
  for (int i = 0; i < t->npeers; i++) {
    shm_key(c, t->peers[i].rank, "ready", key, sizeof key);
    const char *keys[1] = {key};
    rc = strata_store_wait(c->store, keys, 1, c->timeout_s);
    if (rc != STRATA_OK)
      return shm_fail(c, rc, "shm: a local peer never mapped its segments (%s)", key);
  }
  return STRATA_OK;
}

static void shm_log_paths(shm_transport *t, int cma_enabled) {
  int cma = 0;
  for (int i = 0; i < t->npeers; i++) cma += t->peers[i].use_cma;
  unsigned long long ring_kib = (unsigned long long)(t->ring_bytes >> 10);
  if (t->npeers == 0)
    STRATA_LOG(STRATA_LOG_DEBUG, t->rank, "shm: no local peers");
  else if (cma == t->npeers)
    STRATA_LOG(STRATA_LOG_INFO, t->rank,
               "shm: %d local peers, %llu KiB rings; messages >= %u KiB go by CMA "
               "(process_vm_readv)",
               t->npeers, ring_kib, SHM_INLINE_MAX_BYTES >> 10);
  else if (cma == 0)
    STRATA_LOG(
        STRATA_LOG_INFO, t->rank,
        "shm: %d local peers, %llu KiB rings; every message streams inline (%s)", t->npeers,
        ring_kib,
        cma_enabled ? "process_vm_readv not permitted: ptrace restrictions?" : "STRATA_SHM_CMA=0");
  else
    STRATA_LOG(STRATA_LOG_INFO, t->rank,
               "shm: %d local peers, %llu KiB rings; CMA towards %d of them, inline to the rest "
               "(process_vm_readv not permitted there)",
               t->npeers, ring_kib, cma);
}

static int shm_alloc(int rank, int nranks, const int *is_local, shm_transport **out) {
  shm_transport *t = calloc(1, sizeof *t);
  if (!t) return STRATA_ERR_NO_MEMORY;
  t->base.ops = &shm_ops;
  t->base.fuses_reduce = 1;
  t->rank = rank;
  t->nranks = nranks;
  t->ring_bytes = SHM_RING_BYTES;
  t->own_fd = -1;
  t->peer_index = malloc((size_t)nranks * sizeof *t->peer_index);
  for (int q = 0; t->peer_index && q < nranks; q++) {
    t->peer_index[q] = -1;
    if (q != rank && is_local[q]) t->peer_index[q] = t->npeers++;
  }
  while (t->ring_bytes > SHM_RING_MIN_BYTES &&
         (uint64_t)t->npeers * t->ring_bytes > SHM_SEGMENT_BUDGET_BYTES)
    t->ring_bytes >>= 1;
  t->peers = calloc(t->npeers ? (size_t)t->npeers : 1, sizeof *t->peers);
  if (!t->peer_index || !t->peers) {
    shm_destroy(&t->base);
    return STRATA_ERR_NO_MEMORY;
  }
  for (int q = 0; q < nranks; q++) {
    if (t->peer_index[q] < 0) continue;
    shm_peer *p = &t->peers[t->peer_index[q]];
    p->rank = q;
    p->pidfd = -1;
  }
  *out = t;
  return STRATA_OK;
}

int strata_shm_open(const strata_config *cfg, int rank, int nranks, strata_store *store,
                    const int *is_local, strata_transport **out, char *err, size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (!cfg || !store || !is_local || !out || nranks < 1 || rank < 0 || rank >= nranks) {
    if (err && err_len) snprintf(err, err_len, "strata_shm_open: invalid argument");
    return STRATA_ERR_INVALID_ARG;
  }
  *out = NULL;
  shm_transport *t = NULL;
  int rc = shm_alloc(rank, nranks, is_local, &t);
  if (rc != STRATA_OK) {
    if (err && err_len) snprintf(err, err_len, "strata_shm_open: out of memory");
    return rc;
  }
  shm_open_ctx c = {.cfg = cfg, .store = store, .t = t, .err = err, .err_len = err_len};
  c.timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 30.0;
  if (t->npeers > 0) {
    rc = shm_create_own(&c);
    if (rc == STRATA_OK) rc = shm_rendezvous(&c);
    if (t->own_fd >= 0) close(t->own_fd); /* every peer mapped it (or we give up) */
    t->own_fd = -1;
    if (rc != STRATA_OK) {
      shm_destroy(&t->base);
      return rc;
    }
    int cma_enabled = cfg->shm_cma;
    for (int i = 0; i < t->npeers; i++)
      t->peers[i].use_cma = cma_enabled && t->peers[i].out->cma_readable;
  }
  shm_log_paths(t, cfg->shm_cma);
  *out = &t->base;
  return STRATA_OK;
}

int strata_shm_uses_cma(const strata_transport *base, int peer) {
  if (!base || base->ops != &shm_ops) return 0;
  return (int)strata_transport_ask(base, STRATA_TRANSPORT_SINGLE_COPY, peer);
}

uint64_t strata_shm_mapped_bytes(const strata_transport *base) {
  if (!base || base->ops != &shm_ops) return 0;
  return strata_transport_ask(base, STRATA_TRANSPORT_MAPPED_BYTES, -1);
}
