/*
 * tcp.c — the TCP transport's data path: messages striped over S streams per peer, matched by
 * sequence number, read straight into the posted buffer.
 *
 * Connections. tcp_mesh.c leaves us, per peer, S data streams and one control connection (all
 * authenticated). Data streams carry only DATA frames (wire.h); the control connection carries
 * only ABORT and CLOSE, so a control frame never queues behind data the receiver is not reading
 * yet (back-pressure below would otherwise hide an abort for as long as the data waits).
 *
 * Sending. The k-th send to a peer gets msg_seq k. A message smaller than
 * STRATA_TCP_STRIPE_MIN_BYTES is one frame on stream k % S: consecutive messages (a pipelined
 * ring's chunks) then spread over every connection, which is what makes many streams pay off on a
 * long fat pipe (PCCL, arXiv 2505.14065: 1 connection 3.7 Gb/s vs 64 connections 45 Gb/s), and
 * a small message costs one frame and one write. A larger message is cut into S contiguous
 * stripes, stripe i on stream i. Frames wait in a per-stream FIFO; post_send writes at once when
 * the stream is idle (latency), progress() writes the rest with one sendmsg per stream gathering
 * many frames. A send completes when its last byte is in the kernel.
 *
 * Receiving. Posted receives of a peer sit in a ring indexed by msg_seq (the k-th receive posted
 * pairs with the k-th message sent, as transport.h requires). A stream reads a header, finds the
 * receive with that msg_seq and reads the payload straight into buf + stripe_offset (zero copy;
 * a 16 KiB bounce buffer per stream batches small frames and the next header into one read).
 * A header whose message is not posted yet stays parked and its payload stays in the kernel:
 * back-pressure, never an unbounded queue. A stream is read only when a posted receive expects a
 * frame on it (`expected`) or it is in the middle of one, so an idle progress() costs no
 * syscalls beyond the control check. A receive completes when every stripe has arrived.
 * Tag or size disagreement completes the receive with STRATA_ERR_MISMATCH without touching its
 * buffer; the sender's stripes of that message are then read and discarded.
 *
 * Failure. EOF, a reset or a protocol violation on any connection of a peer fails that peer:
 * every transfer with it completes with STRATA_ERR_PEER_LOST (or the violation) and progress()
 * returns the error once with *failed_peer. Control connections are read at least every
 * TCP_CONTROL_CHECK_S even for peers whose data goes over shared memory, so a dead rank is
 * noticed within milliseconds. destroy() sends CLOSE first, so a peer that leaves in order is not
 * reported as lost unless something was still pending with it.
 *
 * Must never: interleave two frames' bytes on a stream, write outside a receive's buffer, call
 * done() outside progress(), raise SIGPIPE (MSG_NOSIGNAL), or block.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/core.h"
#include "net/tcp.h"
#include "net/tcp_mesh.h"
#include "net/wire.h"

enum {
  TCP_MAX_STREAMS = 64,         /* one bit per stream in a uint64_t mask */
  TCP_BOUNCE_BYTES = 16 * 1024, /* per-stream read batching */
  TCP_MAX_IOV = 64,             /* iovecs per sendmsg */
  TCP_RX_READS_PER_PASS = 8     /* reads per stream per progress(): other streams, peers and our
                                   own sends get their turn even while data pours in */
};
static const double TCP_CONTROL_CHECK_S = 0.01;
/* How long an ABORT may wait for the data its sender posted before it (see abort_publish). */
static const double TCP_ABORT_ORDER_S = 1.0;
/* For a peer whose data goes by another transport (shm), that transport delivers the abort in
 * order with its data; ours is only the backup, used when the peer is gone or after this long. */
static const double TCP_ABORT_BACKUP_S = 1.0;

static unsigned tcp_announced_version = STRATA_WIRE_VERSION;
static const strata_transport_ops tcp_ops;

void strata_tcp_set_announced_version_for_test(unsigned version) {
  tcp_announced_version = version;
}

typedef struct tx_frame {
  strata_xfer *x;           /* NULL for control frames */
  strata_wire_frame header; /* wire order */
  const uint8_t *payload;
  uint64_t payload_bytes;
  uint64_t sent; /* of sizeof header + payload_bytes */
} tx_frame;

typedef struct tcp_stream {
  int fd;
  int index;
  int eof;
  /* send FIFO: frames[head .. head+count) modulo cap */
  tx_frame *frames;
  size_t head, count, cap;
  /* receive */
  uint8_t *bounce;
  size_t start, end; /* unread bytes in bounce[start, end) */
  int have_header, matched;
  strata_wire_frame header; /* host order */
  strata_xfer *x;           /* receive being filled; NULL while discarding */
  uint8_t *dst;
  uint64_t left;     /* payload bytes of the current frame not read yet */
  uint64_t expected; /* frames posted receives still expect to start on this stream */
} tcp_stream;

typedef struct recv_slot {
  strata_xfer *x;
  uint64_t discard_mask; /* after a mismatch: streams whose stripe must still be skipped */
} recv_slot;

enum { PEER_UP = 0, PEER_GONE };

typedef struct tcp_peer {
  int rank;
  int state;
  int closing; /* the peer sent CLOSE: its EOFs are orderly */
  int report;  /* progress() must still return lost_status for this peer */
  int lost_status;
  tcp_stream *streams; /* [S] */
  tcp_stream control;
  uint64_t send_seq;
  recv_slot *slots; /* ring indexed by msg_seq % slots_cap */
  size_t slots_cap;
  uint64_t base_seq, next_seq; /* posted receives: [base_seq, next_seq) */
  int control_only;            /* the peer's data goes by another transport (net.c says so) */
  int abort_status;            /* an ABORT arrived (0 = none) ... */
  int abort_published;         /* ... and is visible in remote_abort_status */
  uint64_t abort_seq;          /* messages the peer had posted to us before aborting */
  uint64_t abort_op_seq;       /* the first operation its abort concerns */
  double abort_deadline_s;
} tcp_peer;

typedef struct tcp_transport {
  strata_transport base;
  int rank, nranks, streams;
  tcp_peer *peers;
  strata_xfer *done_head, *done_tail;
  double next_control_check_s;
  int mismatch_seen;     /* a receive failed with MISMATCH in this progress() call: end the call */
  int sent_abort_status; /* the first status we sent in an ABORT (0 = none) */
  uint64_t sent_abort_op_seq; /* ... and its operation number (CLOSE repeats both) */
  int sent_abort_op_seq_set;
  int rx_reads_left;     /* budget of the stream being read (TCP_RX_READS_PER_PASS) */
  struct pollfd *pollfds;
  size_t pollfds_cap;
  char *addresses; /* [nranks][STRATA_TCP_ADDRESS_BYTES] from tcp_mesh.c */
} tcp_transport;

/* ---- stripes ---- */

static unsigned stripe_count(const tcp_transport *t, uint64_t bytes) {
  return bytes >= STRATA_TCP_STRIPE_MIN_BYTES ? (unsigned)t->streams : 1u;
}

static uint64_t bit(int stream) {
  return (uint64_t)1 << stream;
}

/* Streams that carry message `seq` of `bytes`. */
static uint64_t stripe_mask(const tcp_transport *t, uint64_t seq, uint64_t bytes) {
  if (stripe_count(t, bytes) == 1) return bit((int)(seq % (uint64_t)t->streams));
  return t->streams == TCP_MAX_STREAMS ? ~(uint64_t)0 : bit(t->streams) - 1;
}

/* Stripe on `stream` of a message of `bytes` striped over every stream: even split. */
static void stripe_range(const tcp_transport *t, uint64_t bytes, int stream, uint64_t *offset,
                         uint64_t *len) {
  uint64_t n = (uint64_t)t->streams, base = bytes / n, extra = bytes % n, s = (uint64_t)stream;
  *offset = s * base + (s < extra ? s : extra);
  *len = base + (s < extra ? 1 : 0);
}

/* ---- completions: done() runs only from progress() ---- */

static void complete(tcp_transport *t, strata_xfer *x, int status) {
  x->status = status;
  x->next = NULL;
  if (t->done_tail)
    t->done_tail->next = x;
  else
    t->done_head = x;
  t->done_tail = x;
}

static void deliver_completions(tcp_transport *t) {
  while (t->done_head) {
    strata_xfer *x = t->done_head;
    t->done_head = t->done_tail = NULL;
    while (x) {
      strata_xfer *next = x->next; /* done() may repost x */
      if (x->done) x->done(x);
      x = next;
    }
  }
}

/* ---- losing a peer ---- */

static void stream_close(tcp_stream *st) {
  if (st->fd >= 0) close(st->fd);
  st->fd = -1;
  st->count = st->head = 0;
  st->have_header = st->matched = 0;
  st->x = NULL;
  st->dst = NULL;
  st->left = st->expected = 0;
  st->start = st->end = 0;
}

/* Make the peer's ABORT visible to the engine (first abort wins). */
static void abort_publish(tcp_transport *t, tcp_peer *p) {
  if (p->abort_published) return;
  p->abort_published = 1;
  if (!t->base.remote_abort_status) {
    t->base.remote_abort_status = p->abort_status;
    t->base.remote_abort_peer = p->rank;
    t->base.remote_abort_op_seq = p->abort_op_seq;
  }
}

/* Fail every transfer of the peer's send queue `st`. */
static int fail_sends(tcp_transport *t, tcp_stream *st, int status) {
  int failed = 0;
  for (size_t i = 0; i < st->count; i++) {
    strata_xfer *x = st->frames[(st->head + i) % st->cap].x;
    if (x && x->aux) {
      x->aux = 0; /* a striped send sits on several queues: complete it once */
      complete(t, x, status);
      failed++;
    }
  }
  return failed;
}

/* The peer is gone: complete everything with `status`, close its sockets, and report it from
 * progress() if it left without CLOSE or something was still pending. */
static void peer_fail(tcp_transport *t, tcp_peer *p, int status, const char *why) {
  if (p->state == PEER_GONE) return;
  int failed = 0;
  for (int s = 0; s < t->streams; s++) failed += fail_sends(t, &p->streams[s], status);
  failed += fail_sends(t, &p->control, status);
  for (uint64_t seq = p->base_seq; seq < p->next_seq; seq++) {
    recv_slot *slot = &p->slots[seq % p->slots_cap];
    if (slot->x) complete(t, slot->x, status), failed++;
    slot->x = NULL;
    slot->discard_mask = 0;
  }
  p->base_seq = p->next_seq;
  for (int s = 0; s < t->streams; s++) stream_close(&p->streams[s]);
  stream_close(&p->control);
  p->state = PEER_GONE;
  p->lost_status = status;
  p->report = failed > 0 || !p->closing || status != STRATA_ERR_PEER_LOST;
  if (p->abort_status) {
    /* it told us it was aborting: its departure is the abort, not a loss. For a peer whose data
     * goes over shm, that transport publishes the abort in order with the data still in its
     * ring; ours stays the backup (abort_publish_ready, after TCP_ABORT_BACKUP_S). */
    p->report = 0;
    if (!p->control_only) abort_publish(t, p);
  }
  if (p->report)
    STRATA_LOG(STRATA_LOG_WARN, t->rank, "tcp: rank %d lost: %s", p->rank, why);
  else
    STRATA_LOG(STRATA_LOG_DEBUG, t->rank, "tcp: rank %d closed its connections", p->rank);
}

static void control_receive(tcp_transport *t, tcp_peer *p);

static void peer_fail_errno(tcp_transport *t, tcp_peer *p, const tcp_stream *st, int err) {
  /* a data stream broke: the control connection may hold the reason (CLOSE, ABORT) */
  if (st != &p->control) control_receive(t, p);
  if (p->state != PEER_UP) return;
  char why[160];
  const char *which = st == &p->control ? "control connection" : "data stream";
  if (err == 0)
    snprintf(why, sizeof why, "%s %d closed%s", which, st->index,
             p->closing ? " with transfers pending" : " (the rank exited or died)");
  else
    snprintf(why, sizeof why, "%s %d: %s", which, st->index, strerror(err));
  peer_fail(t, p, STRATA_ERR_PEER_LOST, why);
}

/* ---- sending ---- */

static int tx_push(tcp_stream *st, const tx_frame *frame) {
  if (st->count == st->cap) {
    size_t cap = st->cap ? 2 * st->cap : 16;
    tx_frame *frames = malloc(cap * sizeof *frames);
    if (!frames) return STRATA_ERR_NO_MEMORY;
    for (size_t i = 0; i < st->count; i++) frames[i] = st->frames[(st->head + i) % st->cap];
    free(st->frames);
    st->frames = frames;
    st->head = 0;
    st->cap = cap;
  }
  st->frames[(st->head + st->count++) % st->cap] = *frame;
  return STRATA_OK;
}

static void frame_sent(tcp_transport *t, tcp_stream *st, const tx_frame *f) {
  strata_xfer *x = f->x;
  if (!x || !x->aux) return;
  x->aux &= ~bit(st->index);
  if (!x->aux) complete(t, x, STRATA_OK);
}

/* Gather queued frames into iov; returns the count. */
static int tx_gather(const tcp_stream *st, struct iovec *iov) {
  int n = 0;
  for (size_t i = 0; i < st->count && n + 2 <= TCP_MAX_IOV; i++) {
    const tx_frame *f = &st->frames[(st->head + i) % st->cap];
    uint64_t sent = f->sent;
    if (sent < sizeof f->header) {
      iov[n++] = (struct iovec){(uint8_t *)&f->header + sent, sizeof f->header - sent};
      sent = 0;
    } else {
      sent -= sizeof f->header;
    }
    if (f->payload_bytes > sent)
      iov[n++] = (struct iovec){(uint8_t *)f->payload + sent, f->payload_bytes - sent};
  }
  return n;
}

/* Account `bytes` written from the head of the queue. */
static void tx_advance(tcp_transport *t, tcp_stream *st, size_t bytes) {
  while (bytes > 0 && st->count > 0) {
    tx_frame *f = &st->frames[st->head];
    uint64_t total = sizeof f->header + f->payload_bytes, step = total - f->sent;
    if (bytes < step) {
      f->sent += bytes;
      return;
    }
    bytes -= step;
    tx_frame done = *f;
    st->head = (st->head + 1) % st->cap;
    st->count--;
    frame_sent(t, st, &done);
  }
}

/* Write as much of the queue as the socket takes. Fails the peer on error. */
static void stream_flush(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  while (st->count > 0 && st->fd >= 0) {
    struct iovec iov[TCP_MAX_IOV];
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)tx_gather(st, iov)};
    ssize_t n = sendmsg(st->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      peer_fail_errno(t, p, st, errno);
      return;
    }
    tx_advance(t, st, (size_t)n);
  }
}

static int tcp_post_send(strata_transport *base, strata_xfer *x) {
  tcp_transport *t = (tcp_transport *)base;
  if (!x || x->peer < 0 || x->peer >= t->nranks || x->peer == t->rank || (x->bytes && !x->buf))
    return STRATA_ERR_INVALID_ARG;
  tcp_peer *p = &t->peers[x->peer];
  if (p->state != PEER_UP) return p->lost_status;
  if (p->closing) return STRATA_ERR_PEER_LOST;
  uint64_t seq = p->send_seq++;
  uint64_t mask = stripe_mask(t, seq, x->bytes);
  x->status = STRATA_OK;
  x->aux = mask;
  for (int s = 0; s < t->streams; s++) {
    if (!(mask & bit(s))) continue;
    uint64_t offset = 0, len = x->bytes;
    if (stripe_count(t, x->bytes) > 1) stripe_range(t, x->bytes, s, &offset, &len);
    tx_frame f = {.x = x, .payload = (const uint8_t *)x->buf + offset, .payload_bytes = len};
    f.header = (strata_wire_frame){.type = STRATA_WIRE_DATA,
                                   .tag = x->tag,
                                   .msg_seq = seq,
                                   .msg_bytes = x->bytes,
                                   .stripe_offset = offset,
                                   .stripe_bytes = len};
    strata_wire_frame_encode(&f.header);
    if (tx_push(&p->streams[s], &f) != STRATA_OK) {
      peer_fail(t, p, STRATA_ERR_NO_MEMORY, "out of memory queueing a send");
      return STRATA_OK; /* x is queued on a failed peer: it completes in progress() */
    }
  }
  for (int s = 0; s < t->streams && p->state == PEER_UP; s++)
    if (mask & bit(s)) stream_flush(t, p, &p->streams[s]);
  return STRATA_OK;
}

/* ---- receiving ---- */

static recv_slot *slot_of(tcp_peer *p, uint64_t seq) {
  return &p->slots[seq % p->slots_cap];
}

static int slots_grow(tcp_peer *p) {
  size_t cap = p->slots_cap ? 2 * p->slots_cap : 64;
  recv_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) return STRATA_ERR_NO_MEMORY;
  for (uint64_t seq = p->base_seq; seq < p->next_seq; seq++) slots[seq % cap] = *slot_of(p, seq);
  free(p->slots);
  p->slots = slots;
  p->slots_cap = cap;
  return STRATA_OK;
}

static void expect_streams(tcp_peer *p, uint64_t mask, int delta) {
  for (int s = 0; mask; s++, mask >>= 1)
    if (mask & 1) p->streams[s].expected += (uint64_t)(int64_t)delta;
}

static int tcp_post_recv(strata_transport *base, strata_xfer *x) {
  tcp_transport *t = (tcp_transport *)base;
  if (!x || x->peer < 0 || x->peer >= t->nranks || x->peer == t->rank || (x->bytes && !x->buf))
    return STRATA_ERR_INVALID_ARG;
  tcp_peer *p = &t->peers[x->peer];
  if (p->state != PEER_UP) return p->lost_status;
  if (p->next_seq - p->base_seq == p->slots_cap && slots_grow(p) != STRATA_OK)
    return STRATA_ERR_NO_MEMORY;
  uint64_t seq = p->next_seq++;
  uint64_t mask = stripe_mask(t, seq, x->bytes);
  x->status = STRATA_OK;
  x->offset = mask; /* streams whose frame has not started yet */
  x->aux = mask;    /* streams whose frame has not finished yet */
  *slot_of(p, seq) = (recv_slot){.x = x};
  expect_streams(p, mask, +1);
  return STRATA_OK;
}

static void slots_retire(tcp_peer *p) {
  while (p->base_seq < p->next_seq) {
    recv_slot *slot = slot_of(p, p->base_seq);
    if (slot->x || slot->discard_mask) return;
    p->base_seq++;
  }
}

static int protocol_error(tcp_transport *t, tcp_peer *p, const tcp_stream *st, const char *what) {
  char why[200];
  snprintf(why, sizeof why, "protocol error on stream %d: %s (msg_seq %llu)", st->index, what,
           (unsigned long long)st->header.msg_seq);
  peer_fail(t, p, STRATA_ERR_PROTOCOL, why);
  return -1;
}

/* Does the header describe a stripe the sender could have sent on this stream? */
static int header_layout_ok(const tcp_transport *t, const tcp_stream *st) {
  const strata_wire_frame *h = &st->header;
  if (!(stripe_mask(t, h->msg_seq, h->msg_bytes) & bit(st->index))) return 0;
  if (stripe_count(t, h->msg_bytes) == 1)
    return h->stripe_offset == 0 && h->stripe_bytes == h->msg_bytes;
  uint64_t offset, len;
  stripe_range(t, h->msg_bytes, st->index, &offset, &len);
  return h->stripe_offset == offset && h->stripe_bytes == len;
}

/* The posted receive and the arriving message disagree: fail the receive, skip the stripes. */
static void recv_mismatch(tcp_transport *t, tcp_peer *p, tcp_stream *st, recv_slot *slot) {
  strata_xfer *x = slot->x;
  const strata_wire_frame *h = &st->header;
  STRATA_LOG(STRATA_LOG_DEBUG, t->rank,
             "tcp: rank %d message %llu: expected tag %016llx, %llu bytes; got tag %016llx, "
             "%llu bytes",
             p->rank, (unsigned long long)h->msg_seq, (unsigned long long)x->tag,
             (unsigned long long)x->bytes, (unsigned long long)h->tag,
             (unsigned long long)h->msg_bytes);
  expect_streams(p, x->offset, -1);
  slot->x = NULL;
  slot->discard_mask = stripe_mask(t, h->msg_seq, h->msg_bytes) & ~bit(st->index);
  expect_streams(p, slot->discard_mask, +1);
  complete(t, x, STRATA_ERR_MISMATCH);
  t->mismatch_seen = 1;
}

/* Match the stream's header to a posted receive. 1 = payload destination set (or discard),
 * 0 = not posted yet (parked), -1 = the peer failed. */
static int header_match(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  const strata_wire_frame *h = &st->header;
  if (h->type != STRATA_WIRE_DATA) return protocol_error(t, p, st, "control frame on data stream");
  if (!header_layout_ok(t, st)) return protocol_error(t, p, st, "stripe layout");
  if (h->msg_seq < p->base_seq) return protocol_error(t, p, st, "message already received");
  if (h->msg_seq >= p->next_seq) return 0;
  recv_slot *slot = slot_of(p, h->msg_seq);
  strata_xfer *x = slot->x;
  st->x = NULL;
  st->dst = NULL;
  st->left = h->stripe_bytes;
  st->matched = 1;
  if (!x) {
    if (!(slot->discard_mask & bit(st->index))) return protocol_error(t, p, st, "duplicate stripe");
    slot->discard_mask &= ~bit(st->index);
    st->expected--;
    return 1;
  }
  if (h->tag != x->tag || h->msg_bytes != x->bytes) {
    if (x->offset != stripe_mask(t, h->msg_seq, x->bytes))
      return protocol_error(t, p, st, "stripes of one message disagree");
    recv_mismatch(t, p, st, slot); /* also un-expects this stream if x counted on it */
    return 1;
  }
  if (!(x->offset & bit(st->index))) return protocol_error(t, p, st, "duplicate stripe");
  x->offset &= ~bit(st->index);
  st->expected--;
  st->x = x;
  st->dst = (uint8_t *)x->buf + h->stripe_offset;
  return 1;
}

/* The current frame's payload is complete. */
static void frame_received(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  strata_xfer *x = st->x;
  recv_slot *slot = slot_of(p, st->header.msg_seq);
  if (x) {
    x->aux &= ~bit(st->index);
    if (!x->aux) {
      slot->x = NULL;
      complete(t, x, STRATA_OK);
    }
  }
  st->have_header = st->matched = 0;
  st->x = NULL;
  st->dst = NULL;
  slots_retire(p);
}

/* Read from the socket. Returns bytes read (>0), 0 on EAGAIN, -1 when the peer failed. */
static ssize_t stream_read(tcp_transport *t, tcp_peer *p, tcp_stream *st, struct iovec *iov,
                           int iovcnt) {
  if (t->rx_reads_left-- <= 0) return 0; /* budget spent: as if the socket were empty */
  for (;;) {
    ssize_t n = readv(st->fd, iov, iovcnt);
    if (n > 0) return n;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    peer_fail_errno(t, p, st, n == 0 ? 0 : errno);
    return -1;
  }
}

/* Fill the bounce buffer (after compacting). Same returns as stream_read. */
static ssize_t bounce_fill(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  if (st->start > 0) {
    memmove(st->bounce, st->bounce + st->start, st->end - st->start);
    st->end -= st->start;
    st->start = 0;
  }
  struct iovec iov = {st->bounce + st->end, TCP_BOUNCE_BYTES - st->end};
  ssize_t n = stream_read(t, p, st, &iov, 1);
  if (n > 0) st->end += (size_t)n;
  return n;
}

/* Move payload bytes of the current frame. Returns 1 frame complete, 0 EAGAIN, -1 failed. */
static int payload_read(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  while (st->left > 0) {
    size_t avail = st->end - st->start;
    if (avail > 0) {
      size_t n = avail < st->left ? avail : (size_t)st->left;
      if (st->dst) memcpy(st->dst, st->bounce + st->start, n), st->dst += n;
      st->start += n;
      st->left -= n;
      continue;
    }
    ssize_t n;
    st->start = st->end = 0;
    if (!st->dst) {
      n = bounce_fill(t, p, st); /* discarding: read into the bounce, drop above */
    } else {
      /* straight into the destination, and the next header into the bounce */
      struct iovec iov[2] = {{st->dst, st->left}, {st->bounce, TCP_BOUNCE_BYTES}};
      n = stream_read(t, p, st, iov, 2);
      if (n > 0) {
        size_t direct = (size_t)n < st->left ? (size_t)n : (size_t)st->left;
        st->dst += direct;
        st->left -= direct;
        st->end = (size_t)n - direct;
      }
    }
    if (n <= 0) return (int)n;
  }
  return 1;
}

/* Does this stream have work the kernel must supply bytes for? */
static int stream_wants_bytes(const tcp_stream *st) {
  if (st->fd < 0 || st->eof) return 0;
  if (st->have_header) return st->matched && st->left > 0 && st->start == st->end;
  return st->expected > 0 && st->end - st->start < sizeof(strata_wire_frame);
}

/* Everything possible without blocking on one data stream. */
static void stream_receive(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  t->rx_reads_left = TCP_RX_READS_PER_PASS;
  while (p->state == PEER_UP && !t->mismatch_seen) {
    if (!st->have_header) {
      if (st->end - st->start < sizeof st->header) {
        if (!stream_wants_bytes(st) || bounce_fill(t, p, st) <= 0) return;
        continue;
      }
      memcpy(&st->header, st->bounce + st->start, sizeof st->header);
      strata_wire_frame_decode(&st->header);
      st->start += sizeof st->header;
      st->have_header = 1;
      st->matched = 0;
    }
    if (!st->matched && header_match(t, p, st) <= 0) return;
    if (payload_read(t, p, st) <= 0) return;
    frame_received(t, p, st);
  }
}

/* ---- control connection ---- */

static void control_frame(tcp_transport *t, tcp_peer *p, const strata_wire_frame *f) {
  if (f->type == STRATA_WIRE_ABORT || (f->type == STRATA_WIRE_CLOSE && f->tag)) {
    if (f->type == STRATA_WIRE_CLOSE) p->closing = 1;
    int status = (int)(int64_t)f->tag;
    if (status >= 0 || status < STRATA_STATUS_MIN) status = STRATA_ERR_ABORTED;
    STRATA_LOG(STRATA_LOG_INFO, t->rank, "tcp: rank %d aborted: %s", p->rank,
               strata_err_name(status));
    if (!p->abort_status) {
      p->abort_status = status;
      p->abort_seq = f->msg_seq;
      p->abort_op_seq = f->stripe_offset;
      p->abort_deadline_s =
          strata_now_s() + (p->control_only ? TCP_ABORT_BACKUP_S : TCP_ABORT_ORDER_S);
    }
  } else if (f->type == STRATA_WIRE_CLOSE) {
    p->closing = 1;
  } else {
    peer_fail(t, p, STRATA_ERR_PROTOCOL, "data frame on the control connection");
  }
}

/* Read and handle every control frame that arrived; notice EOF and resets. */
static void control_receive(tcp_transport *t, tcp_peer *p) {
  tcp_stream *st = &p->control;
  while (p->state == PEER_UP && st->fd >= 0 && !st->eof) {
    while (st->end - st->start >= sizeof(strata_wire_frame)) {
      strata_wire_frame f;
      memcpy(&f, st->bounce + st->start, sizeof f);
      st->start += sizeof f;
      strata_wire_frame_decode(&f);
      control_frame(t, p, &f);
      if (p->state != PEER_UP) return;
    }
    struct iovec iov = {st->bounce + st->end, TCP_BOUNCE_BYTES - st->end};
    if (st->start > 0) {
      memmove(st->bounce, st->bounce + st->start, st->end - st->start);
      st->end -= st->start;
      st->start = 0;
      iov = (struct iovec){st->bounce + st->end, TCP_BOUNCE_BYTES - st->end};
    }
    ssize_t n = readv(st->fd, &iov, 1);
    if (n > 0) {
      st->end += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else if (n == 0 && p->closing) {
      st->eof = 1; /* orderly: data streams may still hold messages for posted receives */
      return;
    } else {
      peer_fail_errno(t, p, st, n == 0 ? 0 : errno);
      return;
    }
  }
}

static void control_send(tcp_transport *t, tcp_peer *p, uint32_t type, uint64_t tag,
                         uint64_t op_seq) {
  if (p->state != PEER_UP || p->control.fd < 0) return;
  tx_frame f = {.x = NULL};
  f.header = (strata_wire_frame){
      .type = type, .tag = tag, .msg_seq = p->send_seq, .stripe_offset = op_seq};
  strata_wire_frame_encode(&f.header);
  if (tx_push(&p->control, &f) == STRATA_OK) stream_flush(t, p, &p->control);
}

static void tcp_send_abort(strata_transport *base, int peer, int status, uint64_t op_seq) {
  tcp_transport *t = (tcp_transport *)base;
  if (peer < 0 || peer >= t->nranks || peer == t->rank) return;
  if (!t->sent_abort_status) t->sent_abort_status = status;
  if (!t->sent_abort_op_seq_set) t->sent_abort_op_seq = op_seq, t->sent_abort_op_seq_set = 1;
  control_send(t, &t->peers[peer], STRATA_WIRE_ABORT, (uint64_t)(int64_t)status, op_seq);
}

/* ---- progress and wait ---- */

static int take_report(tcp_transport *t, int *failed_peer) {
  /* once an abort is visible the engine aborts everything: lost peers add nothing */
  if (t->base.remote_abort_status) return STRATA_OK;
  for (int q = 0; q < t->nranks; q++) {
    tcp_peer *p = &t->peers[q];
    if (!p->report) continue;
    p->report = 0;
    if (failed_peer) *failed_peer = q;
    return p->lost_status;
  }
  return STRATA_OK;
}

/* An ABORT travels on the control connection and can overtake data its sender posted before it.
 * It becomes visible only once every receive we posted for those earlier messages completed (or
 * TCP_ABORT_ORDER_S passed), and never in the same progress() call that delivered their
 * completions — the engine checks remote_abort_status before it processes completions. So an
 * operation the aborting rank had already fed completes here too, as with an in-band abort. */
static void abort_publish_ready(tcp_transport *t, double now) {
  for (int q = 0; q < t->nranks; q++) {
    tcp_peer *p = &t->peers[q];
    if (!p->abort_status || p->abort_published) continue;
    uint64_t owed = p->abort_seq < p->next_seq ? p->abort_seq : p->next_seq;
    if ((p->base_seq >= owed && !p->control_only) || now >= p->abort_deadline_s)
      abort_publish(t, p);
  }
}

static int tcp_progress(strata_transport *base, int *failed_peer) {
  tcp_transport *t = (tcp_transport *)base;
  double now = strata_now_s();
  abort_publish_ready(t, now);
  int check_control = now >= t->next_control_check_s;
  if (check_control) t->next_control_check_s = now + TCP_CONTROL_CHECK_S;
  t->mismatch_seen = 0;
  for (int q = 0; q < t->nranks && !t->mismatch_seen; q++) {
    tcp_peer *p = &t->peers[q];
    if (q == t->rank || p->state != PEER_UP) continue;
    if (check_control) control_receive(t, p);
    if (p->control.count && p->state == PEER_UP) stream_flush(t, p, &p->control);
    for (int s = 0; s < t->streams && p->state == PEER_UP && !t->mismatch_seen; s++) {
      tcp_stream *st = &p->streams[s];
      if (st->count) stream_flush(t, p, st);
      if (p->state == PEER_UP) stream_receive(t, p, st);
    }
  }
  deliver_completions(t);
  /* after a mismatch the engine must see it before anything that followed on the wire (a peer
   * that then left, say): stop here, report the rest next call */
  if (t->mismatch_seen) return STRATA_OK;
  return take_report(t, failed_peer);
}

static void pollfd_add(tcp_transport *t, size_t *n, int fd, short events) {
  if (fd < 0 || !events || *n >= t->pollfds_cap) return;
  t->pollfds[(*n)++] = (struct pollfd){.fd = fd, .events = events};
}

static void tcp_wait(strata_transport *base, int timeout_ms) {
  tcp_transport *t = (tcp_transport *)base;
  if (t->done_head) return;
  size_t n = 0;
  for (int q = 0; q < t->nranks; q++) {
    tcp_peer *p = &t->peers[q];
    if (q == t->rank || p->state != PEER_UP) continue;
    if (p->report) return;
    if (p->abort_status && !p->abort_published && timeout_ms > 1) timeout_ms = 1;
    if (!p->control.eof)
      pollfd_add(t, &n, p->control.fd, POLLIN | POLLRDHUP | (p->control.count ? POLLOUT : 0));
    for (int s = 0; s < t->streams; s++) {
      tcp_stream *st = &p->streams[s];
      short events = (short)((stream_wants_bytes(st) ? POLLIN : 0) | (st->count ? POLLOUT : 0));
      pollfd_add(t, &n, st->fd, events);
    }
  }
  int ready = poll(t->pollfds, n, timeout_ms);
  if (ready > 0) t->next_control_check_s = 0; /* a hang-up or abort may have arrived */
}

const char *strata_tcp_peer_address(const strata_transport *base, int peer) {
  const tcp_transport *t = (const tcp_transport *)base;
  if (!t || base->ops != &tcp_ops || peer < 0 || peer >= t->nranks || !t->addresses) return "?";
  return t->addresses + (size_t)peer * STRATA_TCP_ADDRESS_BYTES;
}

void strata_tcp_set_control_only(strata_transport *base, int peer) {
  tcp_transport *t = (tcp_transport *)base;
  if (t && base->ops == &tcp_ops && peer >= 0 && peer < t->nranks) t->peers[peer].control_only = 1;
}

/* ---- open and destroy ---- */

static void tcp_destroy(strata_transport *base) {
  tcp_transport *t = (tcp_transport *)base;
  if (!t) return;
  /* CLOSE carries why we leave: 0, or the abort we sent or received, so a peer still waiting on
   * us reports the abort rather than a lost peer */
  int status = t->sent_abort_status ? t->sent_abort_status : t->base.remote_abort_status;
  uint64_t why = (uint64_t)(int64_t)status;
  uint64_t op_seq = t->sent_abort_op_seq_set ? t->sent_abort_op_seq : t->base.remote_abort_op_seq;
  for (int q = 0; q < t->nranks; q++) {
    tcp_peer *p = &t->peers[q];
    if (q == t->rank) continue;
    /* orderly goodbye first, so the peer does not report us as lost */
    if (p->state == PEER_UP && p->control.count == 0) control_send(t, p, STRATA_WIRE_CLOSE, why, op_seq);
    for (int s = 0; p->streams && s < t->streams; s++) {
      stream_close(&p->streams[s]);
      free(p->streams[s].frames);
      free(p->streams[s].bounce);
    }
    if (p->control.fd >= 0) shutdown(p->control.fd, SHUT_WR);
    stream_close(&p->control);
    free(p->control.frames);
    free(p->control.bounce);
    free(p->streams);
    free(p->slots);
  }
  free(t->peers);
  free(t->pollfds);
  free(t->addresses);
  free(t);
}

static const strata_transport_ops tcp_ops = {
    .name = "tcp",
    .post_send = tcp_post_send,
    .post_recv = tcp_post_recv,
    .progress = tcp_progress,
    .send_abort = tcp_send_abort,
    .wait = tcp_wait,
    .destroy = tcp_destroy,
};

static int stream_init(tcp_stream *st, int fd, int index) {
  memset(st, 0, sizeof *st);
  st->fd = fd;
  st->index = index;
  st->bounce = malloc(TCP_BOUNCE_BYTES);
  return st->bounce ? STRATA_OK : STRATA_ERR_NO_MEMORY;
}

static int peers_init(tcp_transport *t, int *fds) {
  int per_peer = t->streams + 1;
  for (int q = 0; q < t->nranks; q++) {
    tcp_peer *p = &t->peers[q];
    p->rank = q;
    p->control.fd = -1;
    if (q == t->rank) continue;
    p->streams = calloc((size_t)t->streams, sizeof *p->streams);
    if (!p->streams) return STRATA_ERR_NO_MEMORY;
    for (int s = 0; s <= t->streams; s++) {
      int *fd = &fds[q * per_peer + s];
      tcp_stream *st = s < t->streams ? &p->streams[s] : &p->control;
      if (stream_init(st, *fd, s) != STRATA_OK) return STRATA_ERR_NO_MEMORY;
      *fd = -1; /* owned by the transport now */
    }
  }
  return STRATA_OK;
}

int strata_tcp_open(const strata_config *cfg, int rank, int nranks, strata_store *store,
                    strata_transport **out, char *err, size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (!cfg || !store || !out || nranks < 1 || rank < 0 || rank >= nranks) {
    if (err && err_len) snprintf(err, err_len, "strata_tcp_open: invalid arguments");
    return STRATA_ERR_INVALID_ARG;
  }
  *out = NULL;
  if (cfg->tcp_streams < 1 || cfg->tcp_streams > TCP_MAX_STREAMS) {
    if (err && err_len)
      snprintf(err, err_len, "STRATA_TCP_STREAMS=%d is not in 1..%d", cfg->tcp_streams,
               TCP_MAX_STREAMS);
    return STRATA_ERR_CONFIG;
  }
  if (!(cfg->timeout_s > 0)) {
    if (err && err_len) snprintf(err, err_len, "STRATA_TIMEOUT must be > 0 seconds");
    return STRATA_ERR_CONFIG;
  }
  int per_peer = cfg->tcp_streams + 1;
  int *fds = malloc((size_t)nranks * (size_t)per_peer * sizeof *fds);
  tcp_transport *t = calloc(1, sizeof *t);
  if (t) t->peers = calloc((size_t)nranks, sizeof *t->peers);
  for (int q = 0; t && t->peers && q < nranks; q++) t->peers[q].control.fd = -1;
  if (t) t->pollfds_cap = (size_t)nranks * (size_t)per_peer;
  if (t) t->pollfds = calloc(t->pollfds_cap + 1, sizeof *t->pollfds);
  if (t) t->addresses = calloc((size_t)nranks, STRATA_TCP_ADDRESS_BYTES);
  int status =
      fds && t && t->peers && t->pollfds && t->addresses ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (status == STRATA_OK)
    status = strata_tcp_mesh_connect(cfg, rank, nranks, store, tcp_announced_version, fds,
                                     t->addresses, err, err_len);
  if (t) {
    t->base.ops = &tcp_ops;
    t->base.fuses_reduce = 0;
    t->rank = rank;
    t->nranks = nranks;
    t->streams = cfg->tcp_streams;
  }
  if (status == STRATA_OK) status = peers_init(t, fds);
  if (status != STRATA_OK) {
    if (status == STRATA_ERR_NO_MEMORY && err && err_len && !err[0])
      snprintf(err, err_len, "rank %d: out of memory opening the tcp transport", rank);
    for (int i = 0; fds && status == STRATA_ERR_NO_MEMORY && i < nranks * per_peer; i++)
      if (fds[i] >= 0) close(fds[i]);
    if (t && t->peers)
      tcp_destroy(&t->base);
    else if (t)
      free(t);
    free(fds);
    return status;
  }
  free(fds);
  *out = &t->base;
  return STRATA_OK;
}
