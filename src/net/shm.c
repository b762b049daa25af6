/*
 * shm.c — the shared-memory transport between ranks of one host.
 *
 * What it is for. Ranks that share a host exchange messages through memory instead of the
 * loopback TCP stack: a few microseconds for a tiny message, and close to memcpy bandwidth for a
 * large one, with the receive-side reduction fused into the read of the peer's data.
 *
 * Segments. Every rank creates one shared-memory segment that holds, for each local peer p, the
 * INBOUND channel from p: a control block and a single-producer / single-consumer byte ring
 * (1 MiB; smaller with many local peers, so a segment stays near 16 MiB). p writes, the owner
 * reads. The control block keeps what the producer writes (head, abort word) and what the
 * consumer writes (tail, count of large messages read) on separate cache lines, so the two sides
 * never write the same line. The segment is a memfd, not a shm_open name: it never appears in
 * /dev/shm, so no crash at any moment (not even a rank killed while it waits in open for a peer
 * that never comes, which is how `strata launch` stops a failed job) can leave it behind, and a
 * container's small /dev/shm does not limit it. We publish "<pid> <fd>" in the store; each peer
 * opens /proc/<pid>/fd/<fd> (same user and pid namespace, which net.c's locality test implies),
 * maps it, probes cross-memory attach (below) and sets its "ready" key; once the ready keys of
 * all its local peers are set, a rank closes its fd and the memory lives exactly as long as the
 * mappings. Store keys are "<job>/shm/<k>/<rank>/segment|ready", where k counts this rank's opens
 * with this same local group ("<job>/shm/opens/<rank>/<hash of the group>"), so several
 * communicators of one job never read each other's keys.
 *
 * Messages. The k-th message from p to us is the k-th record in p's ring in our segment. A record
 * is one 64-byte cache line {tag, bytes, seq, kind, ...}, 64-byte aligned, followed by its payload
 * padded to 64 bytes. Two kinds:
 *  - INLINE (bytes < SHM_INLINE_MAX_BYTES, and every message when CMA is off): the payload follows
 *    in the ring. A payload larger than the free space is streamed: the producer publishes head
 *    every SHM_PUBLISH_BYTES and the consumer frees space as it copies out, so no message has to
 *    fit in the ring.
 *  - CMA (large): the record carries the address of the sender's buffer; the receiver pulls it
 *    with process_vm_readv straight into its destination (one copy instead of two), or, for a
 *    fused reduction, in L2-sized blocks into a bounce buffer and then reduce_dst = reduce_src OP
 *    block, so the peer's bytes are read exactly once. When reduce_dst does not overlap
 *    reduce_src (out of place), a block is pulled straight into reduce_dst and reduced there
 *    (reduce.c allows dst == b): the kernel's copy writes dst without first reading it, which
 *    saves the read-for-ownership of every dst line (measured ~10% faster per fused pull on the
 *    2-core build box, 8 MiB, both cores busy). When done it bumps cma_acked in the
 *    channel; the send completes when cma_acked reaches the record's number. A pull moves at
 *    most SHM_CMA_SLICE_BYTES per progress() call, so other peers (and the other direction of a
 *    simultaneous exchange) keep moving.
 *  - CMA from registered memory: when the sender's buffer lies in memory from strata_mem_alloc
 *    (core/mem.c: a memfd mapped MAP_SHARED), the record also names that memfd, the region's id
 *    and the offset; the receiver maps the region read-only through /proc/<pid>/fd/<fd> (once;
 *    SHM_MAP_CACHE regions per peer, least recently used unmapped first) and copies or reduces
 *    straight from the sender's pages, with no system call and no page pinning per message:
 *    16 MiB allreduce, 2 ranks, in place, 2174 -> 1326 us on the build box (session 4). If the
 *    mapping fails, it pulls by CMA as for any buffer, and never tries that peer's memory again.
 * At open each receiver probes process_vm_readv against a canary word in each peer's private
 * memory and publishes the result in the channel; a sender uses CMA towards a peer only if that
 * peer could read it. Yama ptrace_scope, seccomp or containers can forbid it, and then everything
 * goes INLINE. cfg->shm_cma = 0 (STRATA_SHM_CMA=0) forces INLINE.
 *
 * Matching. Receives from a peer are served strictly in posting order: the head receive takes the
 * next record. A record whose tag or byte count differs completes the receive with
 * STRATA_ERR_MISMATCH, writing nothing; its payload is skipped (INLINE) or acknowledged unread
 * (CMA), so the stream stays in step. With no receive posted, a record stays in the ring:
 * back-pressure, never an unbounded queue.
 *
 * Waiting. wait() spins for ~2 µs (a partner on the other core answers in well under that), then
 * calls sched_yield() in a loop, then sleeps. Yielding early matters: when two ranks share a core
 * (4 ranks on 2 cores, or the scheduler placing both on one), a long spin burns the very time
 * slice the partner needs — a 20 µs spin measured 45 µs per 8-byte round trip instead of ~1.2.
 * For the same reason wait(0), the engine's idle poll when TCP peers must be watched too, yields
 * once when there is nothing to do (0.2 µs when the core is otherwise idle).
 *
 * Liveness and aborts. A peer we are blocked on is checked at most every SHM_LIVENESS_PERIOD_S
 * through a pidfd (immune to pid reuse and to the dead peer lingering as a zombie; kill(pid, 0)
 * where pidfds do not exist). Death completes its transfers with STRATA_ERR_PEER_LOST.
 * send_abort writes the abort word of our channel in the peer's segment at once (it overtakes
 * everything the aborting rank had not yet put in a ring); progress() records the first abort it
 * sees in remote_abort_status / remote_abort_peer, but only once the inline data that peer had
 * already written and that our posted receives will take has been consumed, so an operation
 * whose bytes all arrived still completes. A CMA pull never starts from an aborted peer: its
 * buffers may already be freed.
 *
 * Invariants. head and tail only grow (uint64 byte counts; ring position = count & mask); the
 * producer never lets head - tail exceed the ring size; a record header never wraps (records are
 * 64-byte aligned, the ring a multiple of 64). Each side keeps a private copy of the counter it
 * owns and a cached copy of the other side's, reloaded (acquire) only when the cache says it is
 * blocked. done() callbacks run only inside progress(), after the transfer left every queue, so a
 * callback may post new transfers.
 *
 * Must never: write past a receive's buffer, block (wait() is the only sleeping call), trust a
 * record without checking its sequence number, or give a segment a name in the file system.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
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
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "net/shm.h"

#define SHM_MAGIC 0x5354524154415348ull /* "STRATASH" */
#define SHM_VERSION 1u
#define SHM_LINE 64u
#define SHM_PAGE 4096u
#define SHM_RING_BYTES (1u << 20) /* per peer, while the segment stays within the budget: */
#define SHM_SEGMENT_BUDGET_BYTES (16u << 20) /* many local peers get smaller rings, */
#define SHM_RING_MIN_BYTES (128u << 10)      /* down to this */
/* From this size on, messages go by CMA. Measured on the 2-core build box (test_net_shm with
 * STRATA_SHM_BENCH=1, quiet machine), GB/s per direction, CMA vs inline:
 *   32 KiB: one way 9.3 vs 16.9, both ways 9.9 vs 7.0;  64 KiB: 14.4 vs 16.5, 14.1 vs 7.7;
 *   16 MiB: one way 8.3 vs 11.6, both ways 8.1 vs 5.7.
 * One way, inline streaming uses both cores (sender and receiver copy in parallel) and never
 * waits for an ack; both ways (each core sending and receiving, as in ring collectives) CMA's
 * single copy wins from 32 KiB on. */
#define SHM_INLINE_MAX_BYTES (32u << 10)
#define SHM_PUBLISH_BYTES (64u << 10)       /* streaming granularity of INLINE payloads */
#define SHM_CMA_SLICE_BYTES (1u << 20)      /* most bytes one xfer pulls per progress() call */
#define SHM_REDUCE_BLOCK_BYTES (256u << 10) /* bounce block of a fused reduce: fits in L2 */
#define SHM_MAX_ELEM_BYTES 64u
#define SHM_MAP_CACHE 8 /* regions of one peer's strata_mem_alloc memory we keep mapped */
#define SHM_LIVENESS_PERIOD_S 0.010
#define SHM_WAIT_SPIN_S \
  2e-6 /* wait(): spin this long (a partner on another core answers in <1 µs), */
#define SHM_WAIT_YIELD_S 2e-3   /* then sched_yield() until this, */
#define SHM_WAIT_SLEEP_NS 50000 /* then sleep in steps of this */
#define SHM_WAIT_MAX_S 0.010    /* and return at least this often (liveness checks) */
#define SHM_ABORT_ORDER_S 1.0   /* longest an abort waits for the data sent before it */

enum { SHM_KIND_INLINE = 1, SHM_KIND_CMA = 2 };
enum { SEND_FRESH = 0, SEND_STREAMING };
enum { RECV_WAITING = 0, RECV_INLINE, RECV_CMA, RECV_MAPPED };

/* ---- shared layout (both processes see these) ---- */

typedef struct shm_channel {
  /* written by the producer (the peer that sends to this segment's owner) */
  _Alignas(64) _Atomic uint64_t head;
  _Atomic int32_t abort_status;
  _Atomic uint64_t abort_sent;   /* messages the producer had written to us when it aborted */
  _Atomic uint64_t abort_op_seq; /* the first operation its abort concerns */
  /* written by the consumer (the segment's owner) */
  _Alignas(64) _Atomic uint64_t tail;
  _Atomic uint64_t cma_acked;
  /* written once by the owner before the ready barrier */
  _Alignas(64) uint32_t cma_readable; /* the owner can process_vm_readv the producer */
  int32_t producer_rank;
  uint64_t ring_offset; /* from the segment's start */
  uint64_t ring_bytes;
} shm_channel;

typedef struct shm_header {
  uint64_t magic;
  uint32_t version;
  int32_t owner_rank;
  int32_t nranks;
  int32_t owner_pid;
  uint64_t canary_addr; /* a word in the owner's private memory: the CMA probe */
  uint64_t canary_value;
  uint64_t segment_bytes;
  uint64_t channel_offset[]; /* [nranks]: channel from that rank, 0 = none */
} shm_header;

typedef struct shm_record {
  uint64_t tag;
  uint64_t bytes;
  uint64_t seq;        /* message number from this producer, from 0 */
  uint64_t src_addr;   /* CMA: the payload's address in the producer */
  uint64_t cma_number; /* CMA: 1-based; the send completes when cma_acked reaches it */
  uint32_t kind;
  int32_t mem_fd;      /* CMA from strata_mem_alloc memory: the region's memfd in the producer, */
  uint64_t mem_id;     /* its id there (0 = not such memory), */
  uint64_t mem_offset; /* and the payload's offset in it */
} shm_record;
_Static_assert(sizeof(shm_record) == SHM_LINE, "a record is one cache line");

/* ---- private state ---- */

typedef struct shm_queue {
  strata_xfer *head, *tail;
} shm_queue;

/* A region of a peer's strata_mem_alloc memory, mapped read-only here. */
typedef struct shm_region_map {
  uint64_t id; /* the peer's region id, 0 = empty slot */
  const uint8_t *base;
  size_t bytes;
  uint64_t last_use;
} shm_region_map;

typedef struct shm_peer {
  int rank;
  int pid;
  int pidfd;
  int lost; /* 0 or the status that broke this peer */
  int abort_seen;
  double abort_noticed_s; /* when we first saw the abort word (0 = not yet) */
  int use_cma;            /* the peer can read our memory: large sends go CMA */
  int pid_visible;        /* its pid means something here (same pid namespace) */
  double next_liveness_s;
  void *map; /* the peer's segment */
  size_t map_bytes;
  /* sending: our channel in the peer's segment */
  shm_channel *out;
  uint8_t *out_ring;
  uint64_t out_mask; /* ring bytes - 1 */
  uint64_t out_head, out_tail_cached, send_seq, cma_sent;
  shm_queue sends, acks; /* being written; CMA records waiting for their ack */
  /* receiving: the peer's channel in our segment */
  shm_channel *in;
  uint8_t *in_ring;
  uint64_t in_mask;
  uint64_t in_tail, in_head_cached, recv_seq, cma_done, discard_bytes;
  shm_queue recvs;
  shm_region_map regions[SHM_MAP_CACHE];
  uint64_t region_uses;
  int regions_refused; /* mapping its memory failed once: pull by CMA from then on */
} shm_peer;

typedef struct shm_transport {
  strata_transport base;
  int rank, nranks;
  int npeers;
  shm_peer *peers;
  int *peer_index; /* [nranks] -> index into peers, or -1 */
  void *own_map;
  size_t own_map_bytes;
  uint64_t ring_bytes; /* of the rings in our segment */
  uint8_t *bounce;     /* fused-reduce block, allocated on first use */
  shm_queue completed;
  uint64_t events; /* bumped whenever anything moves: progress() tells "blocked" from it */
  int more_work;   /* the last progress() stopped a stream on its budget, not on a full ring */
  int own_fd;      /* our segment's memfd, open only during strata_shm_open */
  uint64_t mapped_bytes; /* received by reading a peer's strata_mem_alloc memory directly */
  volatile uint64_t canary;
} shm_transport;

/* ---- small helpers ---- */

static inline void shm_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static inline uint64_t shm_align_line(uint64_t v) {
  return (v + SHM_LINE - 1) & ~(uint64_t)(SHM_LINE - 1);
}

static void shm_queue_push(shm_queue *q, strata_xfer *x) {
  x->next = NULL;
  if (q->tail)
    q->tail->next = x;
  else
    q->head = x;
  q->tail = x;
}

static strata_xfer *shm_queue_pop(shm_queue *q) {
  strata_xfer *x = q->head;
  if (x) {
    q->head = x->next;
    if (!q->head) q->tail = NULL;
    x->next = NULL;
  }
  return x;
}

static void shm_complete(shm_transport *t, strata_xfer *x, int status) {
  x->status = status;
  t->events++;
  shm_queue_push(&t->completed, x);
}

static shm_peer *shm_peer_of(shm_transport *t, int rank) {
  if (rank < 0 || rank >= t->nranks || t->peer_index[rank] < 0) return NULL;
  return &t->peers[t->peer_index[rank]];
}

/* Copy into / out of a ring at byte count `pos`, wrapping as needed. */
static void shm_ring_write(uint8_t *ring, uint64_t mask, uint64_t pos, const void *src, size_t n) {
  size_t at = (size_t)(pos & mask), first = mask + 1 - at;
  if (first >= n) {
    memcpy(ring + at, src, n);
  } else {
    memcpy(ring + at, src, first);
    memcpy(ring, (const uint8_t *)src + first, n - first);
  }
}

static void shm_ring_read(const uint8_t *ring, uint64_t mask, uint64_t pos, void *dst, size_t n) {
  size_t at = (size_t)(pos & mask), first = mask + 1 - at;
  if (first >= n) {
    memcpy(dst, ring + at, n);
  } else {
    memcpy(dst, ring + at, first);
    memcpy((uint8_t *)dst + first, ring, n - first);
  }
}

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

/* Break the peer: every queued transfer completes with `status`; later posts are refused. */
static void shm_peer_fail(shm_transport *t, shm_peer *p, int status) {
  if (p->lost) return;
  p->lost = status;
  shm_fail_queue(t, &p->sends, status);
  shm_fail_queue(t, &p->acks, status);
  shm_fail_queue(t, &p->recvs, status);
  STRATA_LOG(STRATA_LOG_WARN, t->rank, "shm: peer %d %s", p->rank,
             status == STRATA_ERR_PEER_LOST ? "died" : strata_strerror(status));
}

/* ---- sending ---- */

/* Free bytes in the peer's ring, reloading its tail only when the cached one says < want. */
static uint64_t shm_out_space(shm_peer *p, uint64_t want) {
  uint64_t ring = p->out_mask + 1;
  uint64_t free_bytes = ring - (p->out_head - p->out_tail_cached);
  if (free_bytes < want) {
    p->out_tail_cached = atomic_load_explicit(&p->out->tail, memory_order_acquire);
    free_bytes = ring - (p->out_head - p->out_tail_cached);
  }
  return free_bytes;
}

static void shm_publish_head(shm_peer *p) {
  atomic_store_explicit(&p->out->head, p->out_head, memory_order_release);
}

static void shm_write_record(shm_peer *p, strata_xfer *x, uint32_t kind) {
  shm_record r;
  memset(&r, 0, sizeof r);
  r.tag = x->tag;
  r.bytes = x->bytes;
  r.seq = p->send_seq++;
  r.kind = kind;
  if (kind == SHM_KIND_CMA) {
    r.src_addr = (uint64_t)(uintptr_t)x->buf;
    r.cma_number = ++p->cma_sent;
    x->aux = r.cma_number;
    strata_mem_ref ref;
    if (strata_mem_lookup(x->buf, (size_t)x->bytes, &ref)) {
      r.mem_fd = ref.fd;
      r.mem_id = ref.id;
      r.mem_offset = ref.offset;
    }
  }
  memcpy(p->out_ring + (p->out_head & p->out_mask), &r, sizeof r);
  p->out_head += sizeof r;
}

/* Stream the payload of an INLINE send; returns 1 when the message (with padding) is written.
 * At most SHM_CMA_SLICE_BYTES per call (then *more is set), so one stream cannot starve the
 * other peers. */
static int shm_send_stream(shm_peer *p, strata_xfer *x, int *more) {
  uint64_t budget = SHM_CMA_SLICE_BYTES;
  while (x->offset < x->bytes) {
    if (budget == 0) {
      *more = 1;
      return 0;
    }
    uint64_t free_bytes = shm_out_space(p, 1);
    if (free_bytes == 0) return 0;
    uint64_t n = x->bytes - x->offset;
    if (n > free_bytes) n = free_bytes;
    if (n > SHM_PUBLISH_BYTES) n = SHM_PUBLISH_BYTES;
    budget -= n < budget ? n : budget;
    shm_ring_write(p->out_ring, p->out_mask, p->out_head, (const uint8_t *)x->buf + x->offset,
                   (size_t)n);
    p->out_head += n;
    x->offset += n;
    if (x->offset < x->bytes) shm_publish_head(p); /* let the consumer start on it */
  }
  uint64_t pad = shm_align_line(p->out_head) - p->out_head;
  if (pad && shm_out_space(p, pad) < pad) return 0;
  p->out_head += pad;
  return 1;
}

static void shm_send_advance(shm_transport *t, shm_peer *p) {
  uint64_t head_before = p->out_head;
  strata_xfer *x;
  while ((x = p->sends.head)) {
    if (x->state == SEND_FRESH) {
      if (shm_out_space(p, SHM_LINE) < SHM_LINE) break;
      if (p->use_cma && x->bytes >= SHM_INLINE_MAX_BYTES) {
        shm_write_record(p, x, SHM_KIND_CMA);
        shm_queue_pop(&p->sends);
        shm_queue_push(&p->acks, x);
        continue;
      }
      shm_write_record(p, x, SHM_KIND_INLINE);
      x->state = SEND_STREAMING;
      x->offset = 0;
    }
    if (!shm_send_stream(p, x, &t->more_work)) break;
    shm_queue_pop(&p->sends);
    shm_complete(t, x, STRATA_OK);
  }
  if (p->out_head != head_before) shm_publish_head(p);
}

/* CMA sends complete, in order, when the receiver's ack count reaches their number. */
static void shm_ack_advance(shm_transport *t, shm_peer *p) {
  if (!p->acks.head) return;
  uint64_t acked = atomic_load_explicit(&p->out->cma_acked, memory_order_acquire);
  while (p->acks.head && p->acks.head->aux <= acked)
    shm_complete(t, shm_queue_pop(&p->acks), STRATA_OK);
}

/* ---- receiving ---- */

static uint64_t shm_in_available(shm_peer *p, uint64_t want_pos) {
  if (p->in_head_cached < want_pos)
    p->in_head_cached = atomic_load_explicit(&p->in->head, memory_order_acquire);
  return p->in_head_cached > p->in_tail ? p->in_head_cached - p->in_tail : 0;
}

static void shm_publish_tail(shm_peer *p) {
  atomic_store_explicit(&p->in->tail, p->in_tail, memory_order_release);
}

static void shm_cma_ack(shm_peer *p) {
  p->cma_done++;
  atomic_store_explicit(&p->in->cma_acked, p->cma_done, memory_order_release);
}

/* Skip the payload of a mismatched INLINE message. Returns 1 when nothing is left to skip. */
static int shm_discard_advance(shm_peer *p) {
  while (p->discard_bytes) {
    uint64_t avail = shm_in_available(p, p->in_tail + 1);
    if (!avail) return 0;
    uint64_t n = avail < p->discard_bytes ? avail : p->discard_bytes;
    p->in_tail += n;
    p->discard_bytes -= n;
    shm_publish_tail(p);
  }
  return 1;
}

/* Map the whole memfd a local peer holds as `fd` through /proc/<pid>/fd/<fd> (the path goes to
 * name[]): read-write with MAP_POPULATE (a segment) or read-only (registered memory). Returns
 * MAP_FAILED with errno set, *opened = 0 when even the open failed; a file smaller than
 * min_bytes is refused (EINVAL). */
static void *shm_map_proc_fd(int pid, int fd, int writable, size_t min_bytes, size_t *bytes,
                             int *opened, char *name, size_t name_len) {
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

/* The payload of record r read through our mapping of the peer's strata_mem_alloc region (mapped
 * on first use, the least recently used mapping dropped when all SHM_MAP_CACHE are taken), or
 * NULL: then the caller pulls it by CMA. The record's fd is open in the peer while this send is
 * pending (the region cannot be freed under a pending send), and the region's id is never
 * reused, so a cached mapping is always of the region the record names. */
static const uint8_t *shm_region_payload(shm_transport *t, shm_peer *p, const shm_record *r) {
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

/* Take the next record for the head receive x. Returns 1 if x moved on (or completed). */
static int shm_recv_take_record(shm_transport *t, shm_peer *p, strata_xfer *x) {
  uint64_t pos = shm_align_line(p->in_tail);
  if (p->in_head_cached < pos + SHM_LINE)
    p->in_head_cached = atomic_load_explicit(&p->in->head, memory_order_acquire);
  if (p->in_head_cached < pos + SHM_LINE) return 0;
  if (p->in_head_cached - p->in_tail > p->in_mask + 1) {
    STRATA_LOG(STRATA_LOG_ERROR, t->rank, "shm: peer %d moved its ring head out of bounds",
               p->rank);
    shm_peer_fail(t, p, STRATA_ERR_PROTOCOL);
    return 1;
  }
  shm_record r;
  memcpy(&r, p->in_ring + (pos & p->in_mask), sizeof r);
  if (r.seq != p->recv_seq || (r.kind != SHM_KIND_INLINE && r.kind != SHM_KIND_CMA) ||
      (r.kind == SHM_KIND_CMA && r.cma_number != p->cma_done + 1)) {
    STRATA_LOG(STRATA_LOG_ERROR, t->rank,
               "shm: corrupt record from peer %d (seq %llu, expected %llu, kind %u)", p->rank,
               (unsigned long long)r.seq, (unsigned long long)p->recv_seq, r.kind);
    shm_peer_fail(t, p, STRATA_ERR_PROTOCOL);
    return 1;
  }
  p->recv_seq++;
  p->in_tail = pos + SHM_LINE;
  if (r.tag != x->tag || r.bytes != x->bytes) {
    STRATA_LOG(STRATA_LOG_DEBUG, t->rank,
               "shm: mismatch from peer %d: tag %llx bytes %llu, expected tag %llx bytes %llu",
               p->rank, (unsigned long long)r.tag, (unsigned long long)r.bytes,
               (unsigned long long)x->tag, (unsigned long long)x->bytes);
    if (r.kind == SHM_KIND_INLINE)
      p->discard_bytes = r.bytes;
    else
      shm_cma_ack(p);
    shm_queue_pop(&p->recvs);
    shm_complete(t, x, STRATA_ERR_MISMATCH);
    return 1;
  }
  x->offset = 0;
  const uint8_t *mapped;
  if (r.kind == SHM_KIND_CMA && (mapped = shm_region_payload(t, p, &r))) {
    x->state = RECV_MAPPED;
    x->aux = (uint64_t)(uintptr_t)mapped;
  } else if (r.kind == SHM_KIND_CMA) {
    x->state = RECV_CMA;
    x->aux = r.src_addr;
  } else {
    x->state = RECV_INLINE;
  }
  return 1;
}

/* Consume up to `n` ring bytes at in_tail into x (copy or fused reduce). n is whole elements
 * for reduces, except when one element straddles the ring's end (gathered through tmp). */
static void shm_recv_consume(shm_peer *p, strata_xfer *x, uint64_t n) {
  uint64_t mask = p->in_mask;
  if (!x->reduce) {
    shm_ring_read(p->in_ring, mask, p->in_tail, (uint8_t *)x->buf + x->offset, (size_t)n);
  } else {
    uint64_t elem = x->elem_size, at = p->in_tail & mask;
    const uint8_t *src = (const uint8_t *)x->reduce_src + x->offset;
    uint8_t *dst = (uint8_t *)x->reduce_dst + x->offset;
    if (at + n <= mask + 1) {
      x->reduce(dst, src, p->in_ring + at, (size_t)(n / elem));
    } else {
      uint8_t tmp[SHM_MAX_ELEM_BYTES];
      shm_ring_read(p->in_ring, mask, p->in_tail, tmp, (size_t)elem);
      x->reduce(dst, src, tmp, 1);
      n = elem;
    }
  }
  p->in_tail += n;
  x->offset += n;
}

static int shm_recv_inline(shm_peer *p, strata_xfer *x, int *more) {
  uint64_t budget = SHM_CMA_SLICE_BYTES; /* as in shm_send_stream */
  while (x->offset < x->bytes) {
    if (budget == 0) {
      *more = 1;
      break;
    }
    uint64_t want = x->bytes - x->offset;
    uint64_t avail = shm_in_available(p, p->in_tail + want);
    uint64_t n = avail < want ? avail : want;
    if (n > SHM_PUBLISH_BYTES) n = SHM_PUBLISH_BYTES;
    if (x->reduce) { /* whole elements, contiguous, or one element straddling the end */
      uint64_t elem = x->elem_size, to_end = p->in_mask + 1 - (p->in_tail & p->in_mask);
      if (to_end < elem) {
        n = n >= elem ? elem : 0;
      } else {
        if (n > to_end) n = to_end;
        n -= n % elem;
      }
    }
    if (n == 0) break;
    budget -= n < budget ? n : budget;
    shm_recv_consume(p, x, n);
    shm_publish_tail(p);
  }
  return x->offset == x->bytes;
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
static int shm_recv_cma_slice(shm_transport *t, shm_peer *p, strata_xfer *x) {
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
  int direct = dst + x->bytes <= src || src + x->bytes <= dst; /* see the top of the file */
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

static void shm_recv_advance(shm_transport *t, shm_peer *p) {
  uint64_t tail_before = p->in_tail;
  strata_xfer *x;
  while (!p->lost && (x = p->recvs.head)) {
    if (x->state == RECV_WAITING) {
      if (!shm_discard_advance(p) || !shm_recv_take_record(t, p, x)) break;
      if (x != p->recvs.head || p->lost) continue; /* completed with a mismatch */
    }
    if (x->state == RECV_INLINE) {
      if (!shm_recv_inline(p, x, &t->more_work)) break;
    } else {
      /* never pull from an aborted peer: its buffers may be gone already */
      if (atomic_load_explicit(&p->in->abort_status, memory_order_relaxed)) break;
      int rc = shm_recv_cma_slice(t, p, x);
      if (rc != STRATA_OK) {
        shm_peer_fail(t, p, rc);
        break;
      }
      if (x->offset < x->bytes) break; /* bounded work per call: next peer's turn */
      shm_cma_ack(p);
    }
    shm_queue_pop(&p->recvs);
    shm_complete(t, x, STRATA_OK);
    /* A large receive ends this peer's turn: its completion reaches the engine only when
     * progress() returns, and what depends on it (typically the send the peer waits for next)
     * must not wait behind the pull of the following message. */
    if (x->bytes >= SHM_INLINE_MAX_BYTES) break;
  }
  if (p->in_tail != tail_before) shm_publish_tail(p);
}

/* ---- the transport ops ---- */

static int shm_check_xfer(shm_transport *t, const strata_xfer *x, int is_recv, shm_peer **out) {
  if (!x) return STRATA_ERR_INVALID_ARG;
  shm_peer *p = shm_peer_of(t, x->peer);
  if (!p) return STRATA_ERR_INVALID_ARG;
  if (is_recv && x->reduce) {
    if (x->elem_size == 0 || x->elem_size > SHM_MAX_ELEM_BYTES || x->bytes % x->elem_size)
      return STRATA_ERR_INVALID_ARG;
    if (x->bytes && (!x->reduce_src || !x->reduce_dst)) return STRATA_ERR_INVALID_ARG;
  } else if (x->bytes && !x->buf) {
    return STRATA_ERR_INVALID_ARG;
  }
  if (p->lost) return p->lost;
  *out = p;
  return STRATA_OK;
}

static void shm_xfer_reset(strata_xfer *x) {
  x->status = STRATA_OK;
  x->next = NULL;
  x->offset = 0;
  x->aux = 0;
  x->state = 0;
}

static int shm_post_send(strata_transport *base, strata_xfer *x) {
  shm_transport *t = (shm_transport *)base;
  shm_peer *p = NULL;
  int rc = shm_check_xfer(t, x, 0, &p);
  if (rc != STRATA_OK) return rc;
  shm_xfer_reset(x);
  shm_queue_push(&p->sends, x);
  if (p->sends.head == x) shm_send_advance(t, p); /* eager: a small send leaves at once */
  return STRATA_OK;
}

static int shm_post_recv(strata_transport *base, strata_xfer *x) {
  shm_transport *t = (shm_transport *)base;
  shm_peer *p = NULL;
  int rc = shm_check_xfer(t, x, 1, &p);
  if (rc != STRATA_OK) return rc;
  shm_xfer_reset(x);
  shm_queue_push(&p->recvs, x);
  return STRATA_OK;
}

static int shm_peer_busy(const shm_peer *p) {
  return p->sends.head || p->acks.head || p->recvs.head;
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
static void shm_check_abort(shm_transport *t, shm_peer *p) {
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
static void shm_check_liveness(shm_transport *t, shm_peer *p, double *now) {
  if (*now == 0) *now = strata_now_s();
  if (*now < p->next_liveness_s) return;
  p->next_liveness_s = *now + SHM_LIVENESS_PERIOD_S;
  /* a peer that aborted may exit at once; its abort (published in order with the data it left
   * in our ring, see shm_check_abort) says more than its death */
  if (atomic_load_explicit(&p->in->abort_status, memory_order_acquire)) return;
  if (!shm_peer_alive(p)) shm_peer_fail(t, p, STRATA_ERR_PEER_LOST);
}

static int shm_progress(strata_transport *base, int *failed_peer) {
  shm_transport *t = (shm_transport *)base;
  int result = STRATA_OK;
  double now = 0;
  t->more_work = 0;
  for (int i = 0; i < t->npeers; i++) {
    shm_peer *p = &t->peers[i];
    if (p->lost || !shm_peer_busy(p)) {
      shm_check_abort(t, p);
      continue;
    }
    uint64_t events_before = t->events;
    uint64_t out_head = p->out_head, in_tail = p->in_tail;
    shm_send_advance(t, p);
    shm_ack_advance(t, p);
    shm_recv_advance(t, p);
    int moved = t->events != events_before || p->out_head != out_head || p->in_tail != in_tail;
    /* a peer that finished with us and left is no failure: only ask while we still wait on it */
    if (!p->lost && !moved && shm_peer_busy(p)) shm_check_liveness(t, p, &now);
    shm_check_abort(t, p);
    if (p->lost && result == STRATA_OK) {
      result = p->lost;
      if (failed_peer) *failed_peer = p->rank;
    }
  }
  strata_xfer *x;
  while ((x = shm_queue_pop(&t->completed))) {
    if (x->done) x->done(x);
  }
  return result;
}

static void shm_send_abort(strata_transport *base, int peer, int status, uint64_t op_seq) {
  shm_transport *t = (shm_transport *)base;
  shm_peer *p = shm_peer_of(t, peer);
  if (!p || !status) return;
  atomic_store_explicit(&p->out->abort_sent, p->send_seq, memory_order_relaxed);
  atomic_store_explicit(&p->out->abort_op_seq, op_seq, memory_order_relaxed);
  atomic_store_explicit(&p->out->abort_status, status, memory_order_release);
}

/* Is there anything progress() could do now? (cheap loads, no side effects) */
static int shm_has_activity(shm_transport *t) {
  if (t->completed.head || t->more_work) return 1;
  for (int i = 0; i < t->npeers; i++) {
    shm_peer *p = &t->peers[i];
    if (!p->abort_seen && atomic_load_explicit(&p->in->abort_status, memory_order_relaxed))
      return 1;
    if (p->lost) continue;
    strata_xfer *r = p->recvs.head;
    if (r) {
      uint64_t head = atomic_load_explicit(&p->in->head, memory_order_relaxed);
      uint64_t want = r->state == RECV_WAITING && !p->discard_bytes
                          ? shm_align_line(p->in_tail) + SHM_LINE
                          : p->in_tail + 1;
      if (r->state == RECV_CMA || head >= want) return 1;
    }
    if (p->sends.head &&
        atomic_load_explicit(&p->out->tail, memory_order_relaxed) != p->out_tail_cached)
      return 1;
    if (p->acks.head &&
        atomic_load_explicit(&p->out->cma_acked, memory_order_relaxed) >= p->acks.head->aux)
      return 1;
  }
  return 0;
}

/* Spin briefly (a message usually arrives within microseconds), then yield, then sleep: several
 * ranks per core must not starve the one they wait for. */
static void shm_wait(strata_transport *base, int timeout_ms) {
  shm_transport *t = (shm_transport *)base;
  if (shm_has_activity(t)) return;
  if (timeout_ms <= 0) { /* a poll: still let a rank that shares our core run */
    sched_yield();
    return;
  }
  double start = strata_now_s();
  double limit = timeout_ms * 1e-3 < SHM_WAIT_MAX_S ? timeout_ms * 1e-3 : SHM_WAIT_MAX_S;
  for (;;) {
    for (int i = 0; i < 64; i++) shm_cpu_relax();
    if (shm_has_activity(t)) return;
    double waited = strata_now_s() - start;
    if (waited >= limit) return;
    if (waited < SHM_WAIT_SPIN_S) continue;
    if (waited < SHM_WAIT_YIELD_S) {
      sched_yield();
    } else {
      struct timespec ts = {0, SHM_WAIT_SLEEP_NS};
      nanosleep(&ts, NULL);
    }
  }
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

static const strata_transport_ops shm_ops = {
    .name = "shm",
    .post_send = shm_post_send,
    .post_recv = shm_post_recv,
    .progress = shm_progress,
    .send_abort = shm_send_abort,
    .wait = shm_wait,
    .destroy = shm_destroy,
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

static size_t shm_header_bytes(int nranks) {
  size_t bytes = sizeof(shm_header) + (size_t)nranks * sizeof(uint64_t);
  return (bytes + SHM_PAGE - 1) & ~(size_t)(SHM_PAGE - 1);
}

static shm_channel *shm_channel_at(void *map, uint64_t offset) {
  return (shm_channel *)((uint8_t *)map + offset);
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

/* Read one byte of every page of [p, p + bytes). A mapping's first access to a page can cost far
 * more than the page fault MAP_POPULATE saves: on this project's build hosts (Firecracker VMs)
 * ~9 us a page even after MAP_POPULATE or MADV_POPULATE_WRITE, so the first pass of small
 * messages through a 1 MiB ring ran 25x slower than the rest (2 ranks, 16 KiB allreduce: 70-90
 * us a call for the first 64 calls, then 3 us; 4 KiB: the first 256). The rings are touched
 * once at open instead, where the cost (~2 ms per MiB on such a host, nothing elsewhere) is part
 * of setting up, not of the first calls a benchmark or a calibration times. */
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
  shm_transport *t = (shm_transport *)base;
  shm_peer *p = shm_peer_of(t, peer);
  return p ? p->use_cma : 0;
}

uint64_t strata_shm_mapped_bytes(const strata_transport *base) {
  if (!base || base->ops != &shm_ops) return 0;
  return ((const shm_transport *)base)->mapped_bytes;
}
