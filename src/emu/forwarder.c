// SPDX-License-Identifier: Apache-2.0
/* forwarder.c — one thread that moves packets between the sites' TUN devices on time.
 *
 * Shape of the loop: epoll watches every TUN fd, one timerfd and one signalfd. A readable TUN is
 * drained (up to FWD_READ_BATCH packets, so one busy site cannot starve the others) straight into
 * slots of a preallocated packet pool; each packet gets its verdict and due time from its link
 * (link.c) and, if it survives, goes into a min-heap ordered by (due time, arrival sequence).
 * Whatever is due is written to the destination TUN; the timerfd is armed, with absolute
 * CLOCK_MONOTONIC time and 1 ns timer slack, for the earliest next due time, so a packet leaves
 * within the wake-up latency of an hrtimer (tens of µs) of when it should.
 *
 * Offload (config->vnet_hdr, site.h). A site's TCP may hand us a super-packet of up to 64 KiB
 * (TSO) behind a virtio_net_hdr. The link model still sees every segment: each is admitted on
 * its own (its own queue check, serialization time, loss and jitter draw). If all of them
 * survive in order the super-packet travels whole and leaves when its last segment is due (its
 * first segments are late by at most the serialization of the rest, ~0.5 ms at 1 Gbit/s; TCP's
 * TSO autosizing keeps super-packets to about 1 ms of the sender's pacing rate). Otherwise it is
 * cut in software into the surviving segments (headers rebuilt, checksums computed), each
 * leaving at its own due time: the model with offload is the model without, up to that bunching.
 * What offload buys: one read and one write, and one pass through each site's stack, per ~44
 * segments; without it the forwarder's per-packet CPU cost, not the modeled link, caps the rate
 * on a small host.
 *
 * Invariants: no allocation per packet (the pool and the heap are sized once; a full pool drops
 * the packet and counts it as dropped_pool); equal due times leave in arrival order, so a link
 * without reordering is FIFO end to end; a packet is written at most once and its slot returned
 * right after. Only IPv4 packets to 10.77.K.x with K a site are forwarded (the rest, e.g. IPv6
 * router solicitations, are counted as unroutable and dropped).
 * Must never: block (all fds are non-blocking), touch any interface but the TUN fds it is given,
 * or run without a bound when asked for one (lifetime_s).
 */
#include "emu/forwarder.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/virtio_net.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define FWD_READ_BATCH 32
#define FWD_DEFAULT_POOL_PACKETS 65536u
#define FWD_EARLY_NS 2000ull /* a packet this close to due is sent now rather than slept for */
#define FWD_STATS_PERIOD_NS 1000000000ull
#define FWD_TAG_TIMER 0xfffffff0u
#define FWD_TAG_SIGNAL 0xfffffff1u
#define FWD_GSO_MAX_BYTES 65536u /* a TUN's default gso_max_size */
#define FWD_MAX_SEGS 2048u       /* 64 KiB of the kernel's smallest MSS (48) */

typedef struct fwd_entry {
  uint64_t due_ns;
  uint64_t seq;
  uint32_t slot;
} fwd_entry;

typedef struct fwd_state {
  const strata_emu_forwarder_config *config;
  strata_emu_link *links; /* [src * nsites + dst] */
  unsigned char *pool;    /* pool_packets slots of slot_bytes */
  size_t pool_bytes;
  uint32_t slot_bytes;
  uint32_t hdr_bytes;  /* virtio_net_hdr in front of every packet, or 0 */
  uint32_t *slot_len;  /* bytes to write (header included) */
  uint32_t *slot_wire; /* IP bytes on the emulated wire (every segment's headers counted) */
  uint16_t *slot_segs; /* segments the slot carries */
  uint16_t *slot_link;
  uint32_t *free_slots;
  uint32_t free_count;
  fwd_entry *heap;
  uint32_t heap_count;
  uint64_t seq;
  uint64_t unroutable, write_errors, started_ns;
  uint64_t late_sum_ns, late_count, late_max_ns; /* how late packets left (release precision) */
  int epoll_fd, timer_fd, signal_fd;
  uint64_t armed_ns;
  unsigned char *scratch; /* slot_bytes: where packets go when the pool is full */
  uint64_t seg_due[FWD_MAX_SEGS];
  unsigned char seg_fate[FWD_MAX_SEGS]; /* per segment of a super-packet: 0 lost, 1 in order,
                                           2 reordered */
} fwd_state;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- min-heap on (due_ns, seq) ---- */

static int entry_before(const fwd_entry *a, const fwd_entry *b) {
  return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

static void heap_push(fwd_state *s, fwd_entry e) {
  uint32_t i = s->heap_count++;
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (!entry_before(&e, &s->heap[parent])) break;
    s->heap[i] = s->heap[parent];
    i = parent;
  }
  s->heap[i] = e;
}

static fwd_entry heap_pop(fwd_state *s) {
  fwd_entry top = s->heap[0];
  fwd_entry last = s->heap[--s->heap_count];
  uint32_t i = 0, n = s->heap_count;
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && entry_before(&s->heap[child + 1], &s->heap[child])) child++;
    if (!entry_before(&s->heap[child], &last)) break;
    s->heap[i] = s->heap[child];
    i = child;
  }
  if (n) s->heap[i] = last;
  return top;
}

/* ---- setup ---- */

static int fwd_alloc(fwd_state *s) {
  const strata_emu_forwarder_config *c = s->config;
  uint32_t count = c->pool_packets ? c->pool_packets : FWD_DEFAULT_POOL_PACKETS;
  s->hdr_bytes = c->vnet_hdr ? (uint32_t)sizeof(struct virtio_net_hdr) : 0;
  s->slot_bytes = ((c->vnet_hdr ? s->hdr_bytes + FWD_GSO_MAX_BYTES : c->mtu) + 63u) & ~63u;
  s->pool_bytes = (size_t)count * s->slot_bytes;
  /* Reserved, not committed: pages are touched only as packets actually queue up. */
  s->pool = mmap(NULL, s->pool_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s->pool == MAP_FAILED) {
    s->pool = NULL;
    return -1;
  }
  s->slot_len = calloc(count, sizeof *s->slot_len);
  s->slot_wire = calloc(count, sizeof *s->slot_wire);
  s->slot_segs = calloc(count, sizeof *s->slot_segs);
  s->scratch = malloc(s->slot_bytes);
  s->slot_link = calloc(count, sizeof *s->slot_link);
  s->free_slots = calloc(count, sizeof *s->free_slots);
  s->heap = calloc(count, sizeof *s->heap);
  s->links = calloc((size_t)c->nsites * c->nsites, sizeof *s->links);
  if (!s->slot_len || !s->slot_wire || !s->slot_segs || !s->scratch || !s->slot_link ||
      !s->free_slots || !s->heap || !s->links)
    return -1;
  for (uint32_t i = 0; i < count; i++) s->free_slots[i] = count - 1 - i;
  s->free_count = count;
  for (int src = 0; src < c->nsites; src++)
    for (int dst = 0; dst < c->nsites; dst++)
      strata_emu_link_init(&s->links[src * c->nsites + dst], &c->links[src][dst],
                           c->seed * 1000003ull + (uint64_t)(src * STRATA_EMU_MAX_SITES + dst));
  return 0;
}

static void fwd_free(fwd_state *s) {
  if (s->pool) munmap(s->pool, s->pool_bytes);
  free(s->slot_len);
  free(s->slot_wire);
  free(s->slot_segs);
  free(s->scratch);
  free(s->slot_link);
  free(s->free_slots);
  free(s->heap);
  free(s->links);
  if (s->epoll_fd >= 0) close(s->epoll_fd);
  if (s->timer_fd >= 0) close(s->timer_fd);
  if (s->signal_fd >= 0) close(s->signal_fd);
}

static int epoll_add(int epoll_fd, int fd, uint32_t tag) {
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = tag};
  return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
}

static int fwd_open_fds(fwd_state *s) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  sigaddset(&mask, SIGUSR1);
  if (sigprocmask(SIG_BLOCK, &mask, NULL)) return -1;
  s->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (s->signal_fd < 0 || s->timer_fd < 0 || s->epoll_fd < 0) return -1;
  if (epoll_add(s->epoll_fd, s->signal_fd, FWD_TAG_SIGNAL) ||
      epoll_add(s->epoll_fd, s->timer_fd, FWD_TAG_TIMER))
    return -1;
  for (int k = 0; k < s->config->nsites; k++)
    if (epoll_add(s->epoll_fd, s->config->tun_fds[k], (uint32_t)k)) return -1;
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  if (s->config->realtime_priority > 0) {
    /* The forwarder is the wire: on a busy host a runnable-but-waiting forwarder would add the
     * scheduler's latency (tens of ms) to every packet. It sleeps between due times, so a
     * real-time class costs little; the kernel's RT throttling still bounds a runaway loop. */
    struct sched_param sp = {.sched_priority = s->config->realtime_priority};
    if (sched_setscheduler(0, SCHED_FIFO, &sp))
      fprintf(stderr,
              "netem forwarder: no real-time scheduling (%s); timing may suffer under load\n",
              strerror(errno));
  }
  return 0;
}

/* ---- the packet path ---- */

/* Destination site of an IPv4 packet, or -1. */
static int packet_site(const unsigned char *pkt, uint32_t len, int nsites) {
  if (len < 20 || (pkt[0] >> 4) != 4) return -1;
  if (pkt[16] != STRATA_EMU_NET_OCTET_A || pkt[17] != STRATA_EMU_NET_OCTET_B) return -1;
  return pkt[18] < nsites ? pkt[18] : -1;
}

static void fwd_send(fwd_state *s, uint32_t slot) {
  strata_emu_link *link = &s->links[s->slot_link[slot]];
  int dst = s->slot_link[slot] % s->config->nsites;
  uint32_t len = s->slot_len[slot];
  ssize_t n = write(s->config->tun_fds[dst], s->pool + (size_t)slot * s->slot_bytes, len);
  if (n == (ssize_t)len) {
    link->stats.packets_out += s->slot_segs[slot];
    link->stats.bytes_out += s->slot_wire[slot];
  } else {
    s->write_errors++;
  }
  s->free_slots[s->free_count++] = slot;
}

static void fwd_release_due(fwd_state *s) {
  if (!s->heap_count) return;
  uint64_t now = now_ns(), limit = now + FWD_EARLY_NS;
  while (s->heap_count && s->heap[0].due_ns <= limit) {
    fwd_entry e = heap_pop(s);
    uint64_t late_ns = now > e.due_ns ? now - e.due_ns : 0;
    s->late_sum_ns += late_ns;
    s->late_count++;
    if (late_ns > s->late_max_ns) s->late_max_ns = late_ns;
    fwd_send(s, e.slot);
  }
}

static uint32_t get16(const unsigned char *p) {
  return (uint32_t)p[0] << 8 | p[1];
}

static void put16(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 8);
  p[1] = (unsigned char)v;
}

/* One's-complement sum of big-endian 16-bit words (RFC 1071), not yet folded. */
static uint64_t csum_add(uint64_t sum, const unsigned char *p, uint32_t len) {
  for (; len > 1; p += 2, len -= 2) sum += get16(p);
  if (len) sum += (uint32_t)p[0] << 8;
  return sum;
}

static uint32_t csum_fold(uint64_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return (uint32_t)~sum & 0xffff;
}

/* A TCP/IPv4 super-packet: header bytes (IP + TCP) and segment size. */
typedef struct fwd_gso {
  uint32_t ip_hdr, hdr, mss, payload, segs;
} fwd_gso;

/* 1 if the packet behind the virtio header is a super-packet of more than one segment. */
static int fwd_gso_parse(const unsigned char *buf, uint32_t hdr_bytes, uint32_t ip_len,
                         fwd_gso *g) {
  struct virtio_net_hdr vh;
  memcpy(&vh, buf, sizeof vh);
  if ((vh.gso_type & ~VIRTIO_NET_HDR_GSO_ECN) != VIRTIO_NET_HDR_GSO_TCPV4 || vh.gso_size == 0)
    return 0;
  const unsigned char *ip = buf + hdr_bytes;
  if (ip_len < 40 || ip[9] != 6) return 0;
  g->ip_hdr = (ip[0] & 15u) * 4u;
  if (g->ip_hdr < 20 || g->ip_hdr + 20 > ip_len) return 0;
  g->hdr = g->ip_hdr + (ip[g->ip_hdr + 12] >> 4) * 4u;
  if (g->hdr >= ip_len) return 0;
  g->mss = vh.gso_size;
  g->payload = ip_len - g->hdr;
  g->segs = (g->payload + g->mss - 1) / g->mss;
  return g->segs > 1 && g->segs <= FWD_MAX_SEGS;
}

/* Writes segment i of the super-packet `pkt` into slot `out` as a plain packet (no offload). */
static void fwd_gso_segment(fwd_state *s, const unsigned char *pkt, const fwd_gso *g, uint32_t i,
                            uint32_t out) {
  unsigned char *o = s->pool + (size_t)out * s->slot_bytes;
  memset(o, 0, s->hdr_bytes); /* flags 0, GSO_NONE: checksums are complete */
  unsigned char *ip = o + s->hdr_bytes, *tcp = ip + g->ip_hdr;
  uint32_t first = i * g->mss, len = g->payload - first < g->mss ? g->payload - first : g->mss;
  memcpy(ip, pkt, g->hdr);
  memcpy(ip + g->hdr, pkt + g->hdr + first, len);
  uint32_t total = g->hdr + len;
  put16(ip + 2, total);
  put16(ip + 4, (get16(pkt + 4) + i) & 0xffff); /* IP id: one per segment, as TSO does */
  put16(ip + 10, 0);
  put16(ip + 10, csum_fold(csum_add(0, ip, g->ip_hdr)));
  uint32_t seq = ((uint32_t)get16(tcp + 4) << 16 | get16(tcp + 6)) + first;
  put16(tcp + 4, seq >> 16);
  put16(tcp + 6, seq & 0xffff);
  if (i + 1 < g->segs) tcp[13] &= (unsigned char)~0x09; /* FIN and PSH only on the last */
  if (i > 0) tcp[13] &= (unsigned char)~0x80;           /* CWR only on the first */
  put16(tcp + 16, 0);
  uint64_t sum = csum_add(0, ip + 12, 8); /* pseudo header: addresses, protocol, TCP length */
  sum += 6u + (total - g->ip_hdr);
  put16(tcp + 16, csum_fold(csum_add(sum, tcp, total - g->ip_hdr)));
  s->slot_len[out] = s->hdr_bytes + total;
  s->slot_wire[out] = total;
  s->slot_segs[out] = 1;
}

/* flip_at_bytes: count the packet's TCP payload and flip one bit once the offset is reached. The
 * checksum is fixed (or left to the receiver when the virtio header says it is still to be
 * computed), so the receiving TCP accepts the altered byte as an attacker's would be. */
static void fwd_tamper(fwd_state *s, strata_emu_link *link, unsigned char *buf, uint32_t ip_len) {
  uint64_t at = link->params.flip_at_bytes;
  if (!at || link->stats.flipped) return;
  unsigned char *ip = buf + s->hdr_bytes;
  if (ip_len < 40 || (ip[0] >> 4) != 4 || ip[9] != 6) return;
  uint32_t ip_hdr = (ip[0] & 15u) * 4u, total = get16(ip + 2);
  if (total > ip_len) total = ip_len;
  if (ip_hdr < 20 || ip_hdr + 20 > total) return;
  uint32_t hdr = ip_hdr + (ip[ip_hdr + 12] >> 4) * 4u;
  if (hdr >= total) return;
  uint32_t payload = total - hdr;
  uint64_t before = link->stats.tcp_payload_bytes;
  link->stats.tcp_payload_bytes += payload;
  if (before + payload <= at) return;
  ip[hdr + (uint32_t)(at - before)] ^= 0x01;
  link->stats.flipped = 1;
  if (s->hdr_bytes) {
    struct virtio_net_hdr vh;
    memcpy(&vh, buf, sizeof vh);
    if (vh.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) return; /* the checksum is computed later */
  }
  unsigned char *tcp = ip + ip_hdr;
  put16(tcp + 16, 0);
  uint64_t sum = csum_add(0, ip + 12, 8); /* pseudo header: addresses, protocol, TCP length */
  sum += 6u + (total - ip_hdr);
  put16(tcp + 16, csum_fold(csum_add(sum, tcp, total - ip_hdr)));
}

/* Every packet queued here is delivered (the link admitted it), so a tampered one arrives. */
static void fwd_queue(fwd_state *s, uint32_t slot, uint16_t link, uint64_t due) {
  fwd_tamper(s, &s->links[link], s->pool + (size_t)slot * s->slot_bytes,
             s->slot_len[slot] - s->hdr_bytes);
  s->slot_link[slot] = link;
  heap_push(s, (fwd_entry){.due_ns = due, .seq = s->seq++, .slot = slot});
}

/* Every segment of a super-packet through the link; whole if all arrive in order, else cut. */
static void fwd_admit_gso(fwd_state *s, uint32_t slot, uint16_t index, const fwd_gso *g,
                          uint64_t arrival_ns) {
  strata_emu_link *link = &s->links[index];
  int whole = 1;
  uint64_t last_due = 0;
  for (uint32_t i = 0; i < g->segs; i++) {
    uint32_t len = g->payload - i * g->mss < g->mss ? g->payload - i * g->mss : g->mss;
    int reordered = 0;
    s->seg_fate[i] = strata_emu_link_admit(link, arrival_ns, g->hdr + len, &s->seg_due[i],
                                           &reordered) == STRATA_EMU_DELIVER
                         ? (unsigned char)(reordered ? 2 : 1)
                         : 0;
    if (s->seg_fate[i] != 1) whole = 0;
    if (s->seg_due[i] > last_due) last_due = s->seg_due[i];
  }
  if (whole) {
    s->slot_segs[slot] = (uint16_t)g->segs;
    s->slot_wire[slot] = g->payload + g->segs * g->hdr;
    fwd_queue(s, slot, index, last_due);
    return;
  }
  const unsigned char *pkt = s->pool + (size_t)slot * s->slot_bytes + s->hdr_bytes;
  for (uint32_t i = 0; i < g->segs; i++) {
    if (!s->seg_fate[i]) continue;
    if (!s->free_count) {
      link->stats.dropped_pool++;
      continue;
    }
    uint32_t out = s->free_slots[--s->free_count];
    fwd_gso_segment(s, pkt, g, i, out);
    fwd_queue(s, out, index, s->seg_due[i]);
  }
  s->free_slots[s->free_count++] = slot;
}

static void fwd_admit(fwd_state *s, int src, uint32_t slot, uint32_t len, uint64_t arrival_ns) {
  int nsites = s->config->nsites;
  const unsigned char *buf = s->pool + (size_t)slot * s->slot_bytes;
  uint32_t ip_len = len > s->hdr_bytes ? len - s->hdr_bytes : 0;
  int dst = packet_site(buf + s->hdr_bytes, ip_len, nsites);
  if (dst < 0 || dst == src) {
    s->unroutable++;
    s->free_slots[s->free_count++] = slot;
    return;
  }
  uint16_t index = (uint16_t)(src * nsites + dst);
  s->slot_len[slot] = len;
  fwd_gso g;
  if (s->hdr_bytes && fwd_gso_parse(buf, s->hdr_bytes, ip_len, &g)) {
    fwd_admit_gso(s, slot, index, &g, arrival_ns);
    return;
  }
  uint64_t due;
  int reordered;
  if (strata_emu_link_admit(&s->links[index], arrival_ns, ip_len, &due, &reordered) !=
      STRATA_EMU_DELIVER) {
    s->free_slots[s->free_count++] = slot;
    return;
  }
  s->slot_wire[slot] = ip_len;
  s->slot_segs[slot] = 1;
  fwd_queue(s, slot, index, due);
}

/* Drains up to FWD_READ_BATCH packets from one site's TUN. */
static void fwd_read_site(fwd_state *s, int src) {
  int fd = s->config->tun_fds[src];
  for (int i = 0; i < FWD_READ_BATCH; i++) {
    if (!s->free_count) {
      /* Pool exhausted: read and drop, counted against the packet's link. */
      ssize_t n = read(fd, s->scratch, s->slot_bytes);
      if (n <= (ssize_t)s->hdr_bytes) return;
      int dst =
          packet_site(s->scratch + s->hdr_bytes, (uint32_t)n - s->hdr_bytes, s->config->nsites);
      if (dst >= 0 && dst != src)
        s->links[src * s->config->nsites + dst].stats.dropped_pool++;
      else
        s->unroutable++;
      continue;
    }
    uint32_t slot = s->free_slots[--s->free_count];
    ssize_t n = read(fd, s->pool + (size_t)slot * s->slot_bytes, s->slot_bytes);
    if (n <= 0) {
      s->free_slots[s->free_count++] = slot;
      return;
    }
    fwd_admit(s, src, slot, (uint32_t)n, now_ns());
  }
}

/* ---- statistics ---- */

static void fwd_write_stats(fwd_state *s, int final) {
  const strata_emu_forwarder_config *c = s->config;
  if (!c->stats_path) return;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", c->stats_path);
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f,
          "forwarder uptime_s=%.1f running=%d queued=%u unroutable=%llu write_errors=%llu "
          "late_us_avg=%.1f late_us_max=%.1f\n",
          (double)(now_ns() - s->started_ns) / 1e9, !final, s->heap_count,
          (unsigned long long)s->unroutable, (unsigned long long)s->write_errors,
          s->late_count ? (double)s->late_sum_ns / (double)s->late_count / 1e3 : 0.0,
          (double)s->late_max_ns / 1e3);
  for (int src = 0; src < c->nsites; src++) {
    for (int dst = 0; dst < c->nsites; dst++) {
      if (src == dst) continue;
      const strata_emu_link_stats *st = &s->links[src * c->nsites + dst].stats;
      if (!st->packets_in) continue; /* quiet pairs: K sites make K(K-1) lines otherwise */
      fprintf(f,
              "link %d>%d packets_in=%llu bytes_in=%llu packets_out=%llu bytes_out=%llu "
              "dropped_queue=%llu dropped_loss=%llu dropped_pool=%llu reordered=%llu "
              "flipped=%llu\n",
              src, dst, (unsigned long long)st->packets_in, (unsigned long long)st->bytes_in,
              (unsigned long long)st->packets_out, (unsigned long long)st->bytes_out,
              (unsigned long long)st->dropped_queue, (unsigned long long)st->dropped_loss,
              (unsigned long long)st->dropped_pool, (unsigned long long)st->reordered,
              (unsigned long long)st->flipped);
    }
  }
  if (fclose(f) == 0) rename(tmp, c->stats_path);
}

/* ---- the loop ---- */

static void fwd_arm_timer(fwd_state *s, uint64_t deadline_ns) {
  if (deadline_ns == s->armed_ns) return;
  struct itimerspec its = {.it_value = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                                        .tv_nsec = (long)(deadline_ns % 1000000000ull)}};
  if (timerfd_settime(s->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) == 0) s->armed_ns = deadline_ns;
}

static strata_emu_forwarder_end fwd_loop(fwd_state *s) {
  const strata_emu_forwarder_config *c = s->config;
  uint64_t end_ns =
      c->lifetime_s > 0 ? s->started_ns + (uint64_t)(c->lifetime_s * 1e9) : UINT64_MAX;
  uint64_t stats_ns = s->started_ns + FWD_STATS_PERIOD_NS;
  struct epoll_event events[STRATA_EMU_MAX_SITES + 2];
  for (;;) {
    fwd_release_due(s);
    uint64_t now = now_ns();
    if (now >= end_ns) return STRATA_EMU_END_LIFETIME;
    if (now >= stats_ns) {
      fwd_write_stats(s, 0);
      stats_ns = now + FWD_STATS_PERIOD_NS;
    }
    uint64_t deadline = stats_ns < end_ns ? stats_ns : end_ns;
    if (s->heap_count && s->heap[0].due_ns < deadline) deadline = s->heap[0].due_ns;
    /* No early wake-up and spin: a spinning real-time forwarder starves the softirq work of the
     * very packets it sends. Packets leave late by the timer's wake-up latency, which
     * the stats report (late_us_avg, late_us_max). */
    fwd_arm_timer(s, deadline);
    int n = epoll_wait(s->epoll_fd, events, (int)(sizeof events / sizeof events[0]), -1);
    if (n < 0 && errno != EINTR) {
      perror("netem forwarder: epoll_wait");
      return STRATA_EMU_END_ERROR;
    }
    for (int i = 0; i < n; i++) {
      uint32_t tag = events[i].data.u32;
      if (tag == FWD_TAG_SIGNAL) {
        struct signalfd_siginfo info;
        if (read(s->signal_fd, &info, sizeof info) != (ssize_t)sizeof info) continue;
        if (info.ssi_signo != SIGUSR1) return STRATA_EMU_END_SIGNAL;
        fwd_write_stats(s, 0); /* `status` asks for fresh counters */
      } else if (tag == FWD_TAG_TIMER) {
        uint64_t expirations;
        if (read(s->timer_fd, &expirations, sizeof expirations) < 0) (void)0;
        s->armed_ns = 0; /* expired: must be re-armed even for the same deadline */
      } else {
        fwd_read_site(s, (int)tag);
        fwd_release_due(s);
      }
    }
  }
}

strata_emu_forwarder_end strata_emu_forwarder_run(const strata_emu_forwarder_config *config) {
  if (config->nsites < 2 || config->nsites > STRATA_EMU_MAX_SITES ||
      config->mtu < STRATA_EMU_MTU_MIN || config->mtu > STRATA_EMU_MTU_MAX) {
    fprintf(stderr, "netem forwarder: bad configuration (sites %d, mtu %u)\n", config->nsites,
            config->mtu);
    return STRATA_EMU_END_ERROR;
  }
  fwd_state s = {.config = config, .epoll_fd = -1, .timer_fd = -1, .signal_fd = -1};
  strata_emu_forwarder_end end = STRATA_EMU_END_ERROR;
  if (fwd_alloc(&s) || fwd_open_fds(&s)) {
    fprintf(stderr, "netem forwarder: setup failed: %s\n", strerror(errno));
  } else {
    s.started_ns = now_ns();
    if (config->ready_fd >= 0) {
      if (write(config->ready_fd, "r", 1) < 0) (void)0;
      close(config->ready_fd);
    }
    end = fwd_loop(&s);
    fwd_write_stats(&s, 1);
  }
  fwd_free(&s);
  return end;
}
