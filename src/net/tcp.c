// SPDX-License-Identifier: Apache-2.0
/*
 * tcp.c — the TCP transport's data path: messages striped over S streams per peer, matched by
 * sequence number, read straight into the posted buffer.
 *
 * Connections. tcp_mesh.c hands us, per peer, S data streams and one control connection (all
 * authenticated), the first time a transfer with that peer is posted (or the peer dials us):
 * until then the peer is up but not linked, its sends wait in its pending queue and its receives
 * in its slots, and nothing is read, written or beaten for it. Data streams carry only DATA
 * frames (wire.h); the control connection carries only ABORT, CLOSE and HEARTBEAT, so a control
 * frame never queues behind data the receiver is not reading yet (back-pressure below would
 * otherwise hide an abort for as long as the data waits). An abort sent while a peer was not
 * linked reaches it on the control connection the moment it links.
 *
 * Sending. The k-th send to a peer gets msg_seq k. A message smaller than
 * STRATA_TCP_STRIPE_MIN_BYTES is one piece; a larger one is cut into pieces of
 * min(bytes / S, TCP_PIECE_MAX_BYTES). Sends wait, in post order, in the peer's pending queue,
 * and a stream takes the next piece only when its own FIFO is empty, i.e. when its socket has
 * accepted everything it was given. So pieces go to whichever connection drains, not round
 * robin: on a long fat pipe the S connections never run at one rate (each congestion controller
 * finds its own share, one stream recovers from a loss while the others do not), and a fixed
 * 1/S stripe per stream would make every message wait for the slowest one, capping the pair at
 * S x the slowest rate. On a WAN socket tcp_tune.c sets TCP_NOTSENT_LOWAT, so "accepted" means
 * "about to be sent", not "parked in a deep send buffer". Many streams are what make a long fat
 * pipe pay off (PCCL, arXiv 2505.14065: 1 connection 3.7 Gb/s vs 64 connections 45 Gb/s); a
 * small message still costs one frame and one write. Which free stream takes a piece: on a LAN
 * the next in turn; on a WAN the lowest-numbered one, given pieces until its socket holds
 * TCP_NOTSENT_LOWAT unsent, then the next. bbr learns a stream's rate from its own deliveries,
 * and a burst that starts from idle and is smaller than the path's bandwidth-delay product
 * cannot show more than its bytes per round trip (every sample counts from the burst's first
 * byte); the stream then paces its next burst at about that rate. A message spread over streams
 * each idle in turn pays that at every burst, up to most of a round trip more than its bytes
 * need (docs/wan.md has the figures); filled lowest first, a message far below the BDP goes on
 * as few streams as their sockets take at once, the same ones message after message, and each
 * sees the biggest bursts. A large message still reaches every stream, because each socket
 * refuses more once it holds its allowance. A WAN stream quiet for a round trip is offered to
 * tcp_tune.c before its next piece, which starts its bbr afresh while it is still in startup
 * (pacing from its window, not from the small bursts it saw). post_send feeds at once (latency),
 * progress() feeds and writes the rest with one sendmsg per stream gathering many frames. A send
 * completes when its last piece is in the kernel.
 *
 * Receiving. Posted receives of a peer sit in a ring indexed by msg_seq (the k-th receive posted
 * pairs with the k-th message sent, as transport.h requires). A stream reads a header, finds the
 * receive with that msg_seq and reads the payload straight into buf + stripe_offset (zero copy;
 * a 16 KiB bounce buffer per stream batches small frames and the next header into one read).
 * Pieces of one message may come on any streams in any order, but on each stream messages come
 * in msg_seq order (the sender hands pieces out in post order), so in-order reassembly needs no
 * reorder buffer: a receive completes when all its bytes arrived. A header whose message is not
 * posted yet stays parked and its payload stays in the kernel: back-pressure, never an unbounded
 * queue. Streams are read only while a receive is posted or a frame is half read, so an idle
 * progress() costs no syscalls beyond the control check. Tag or size disagreement completes the
 * receive with STRATA_ERR_MISMATCH without touching its buffer; the rest of that message's
 * pieces are then read and discarded (counted in bytes). A receive with a match callback
 * (transport.h) learns its tag, size and buffer from the message's first frame instead.
 * ops->probe reads the header of the first message no posted receive takes and parks it as
 * above, for the engine's receives from any source; wait() then watches the probed streams.
 *
 * Sealing. When the handshake agreed it (STRATA_ENCRYPT, seal.h), every frame header is sealed on
 * its own and every non-empty payload whole: a piece is encrypted into one of the stream's two
 * ciphertext buffers when the stream takes it (a sealed data stream holds up to two pieces, so the
 * next one is sealed while the socket still takes the last, and the buffers are used in turn;
 * pieces are at most TCP_SEALED_PIECE_MAX_BYTES), and opened in place in the
 * receive buffer once its tag arrived, before the receive can complete. A header that does not
 * open is acted on in no way; a payload that does not open fails the peer. Both ends count the
 * frames of each direction of each connection, and that count is the nonce, so the sender seals
 * in queue order, which is wire order.
 *
 * Failure. EOF, a reset or a protocol violation on any connection of a peer fails that peer:
 * every transfer with it completes with STRATA_ERR_PEER_LOST (or the violation) and progress()
 * returns the error once with *failed_peer. Control connections are read at least every
 * TCP_CONTROL_CHECK_S, so a dead rank is noticed within milliseconds by the ranks linked with it.
 * A pair that cannot be made (the peer's listener refuses, or it does not answer within
 * STRATA_TIMEOUT) fails the peer the same way. destroy() sends CLOSE first, so a peer that leaves
 * in order is not reported as lost unless something was still pending with it.
 *
 * Liveness. A process that is frozen (SIGSTOP, a hung host, a partition that drops packets
 * without a reset) keeps its connections open, so EOF never comes. Every peer therefore gets a
 * HEARTBEAT on the control connection every heartbeat_interval() while the communicator lives —
 * the engine drives progress() while idle too — and a peer we have heard nothing from on its
 * control connection for STRATA_TIMEOUT fails with STRATA_ERR_TIMEOUT. Only linked peers beat,
 * so the beats of a round job-wide are twice the pairs in use (2N for a ring, N log2 N for
 * recursive halving-doubling), not N (N - 1); and every rank is linked from init with rank ^ 1
 * (tcp_mesh.h), so every rank is watched by at least one other, whose failure then reaches the
 * rest as an abort. Liveness comes from the heartbeat, not from progress: a live peer that is
 * simply late to a collective (a checkpoint, an evaluation) keeps beating and is waited for (the
 * engine's STRATA_OP_TIMEOUT bounds that).
 *
 * Must never: interleave two frames' bytes on a stream, write outside a receive's buffer, call
 * done() outside progress(), raise SIGPIPE (MSG_NOSIGNAL), or block.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/core.h"
#include "net/seal.h"
#include "net/tcp.h"
#include "net/tcp_govern.h"
#include "net/tcp_mesh.h"
#include "net/tcp_tune.h"
#include "net/wire.h"

enum {
  TCP_MAX_STREAMS = 64,         /* one bit per stream in a uint64_t mask */
  TCP_BOUNCE_BYTES = 16 * 1024, /* per-stream read batching */
  TCP_MAX_IOV = 64,             /* iovecs per sendmsg */
  TCP_RX_READS_PER_PASS = 8,    /* reads per stream per progress(): other streams, peers and our
                                   own sends get their turn even while data pours in */
  TCP_SEALED_PIECE_MAX_BYTES = 256 * 1024, /* on a sealed connection a piece is encrypted whole
                                              before its first byte leaves and decrypted once its
                                              last arrives: small enough that the copy stays in
                                              cache and the pipe does not wait for the cipher */
  TCP_PIECE_MAX_BYTES = 128 * 1024 /* the unit a stream takes from the pending queue: about 1 ms
                                      of a 1 Gbit/s link, so a stalled stream (a loss being
                                      repaired) holds back little of a message. Larger pieces
                                      (512 KiB) gain nothing on the emulated WAN link of
                                      docs/wan.md, and lose with 4 MiB chunks */
};
enum { TCP_XFER_MATCHED = 1 }; /* strata_xfer.state of a receive */
static const double TCP_CONTROL_CHECK_S = 0.01;
/* Heartbeats per STRATA_TIMEOUT: enough that a late beat (a busy core, a lost segment being
 * retransmitted on a WAN) is not taken for silence, few enough to cost nothing. Bounded below so
 * a tiny timeout does not turn into a flood, above so a long one still finds a dead path soon. */
static const double TCP_BEATS_PER_TIMEOUT = 5.0;
static const double TCP_BEAT_MIN_S = 0.02;
static const double TCP_BEAT_MAX_S = 2.0;
/* How long an ABORT may wait for the data its sender posted before it (see abort_publish). */
static const double TCP_ABORT_ORDER_S = 1.0;
/* For a peer whose data goes by another transport (shm), that transport delivers the abort in
 * order with its data; ours is only the backup, used when the peer is gone or after this long. */
static const double TCP_ABORT_BACKUP_S = 1.0;
/* How long destroy waits for a peer we failed over a bad frame to take our CLOSE (control_linger).
 */
static const double TCP_TOLD_LINGER_S = 0.25;

static unsigned tcp_announced_version = STRATA_WIRE_VERSION;
static const strata_transport_ops tcp_ops;

#ifdef STRATA_TEST_HOOKS
void strata_tcp_set_announced_version_for_test(unsigned version) {
  tcp_announced_version = version;
}
#endif

typedef struct tx_frame {
  strata_xfer *x;                                /* NULL for control frames */
  uint8_t head[STRATA_WIRE_SEALED_HEADER_BYTES]; /* the header as sent: wire order, or sealed */
  uint32_t head_bytes;
  const uint8_t *payload; /* the caller's bytes, or the stream's ciphertext buffer */
  uint64_t payload_bytes; /* on the wire (a sealed payload's tag included) */
  uint64_t sent;          /* of head_bytes + payload_bytes */
} tx_frame;

typedef struct tcp_stream {
  int fd;
  int index;
  int eof;
  /* send FIFO: frames[head .. head+count) modulo cap */
  tx_frame *frames;
  size_t head, count, cap;
  double fed_s; /* when it was last given a piece (WAN pairs) */
  /* receive */
  uint8_t *bounce;
  size_t start, end; /* unread bytes in bounce[start, end) */
  int have_header, matched;
  strata_wire_frame header; /* host order */
  strata_xfer *x;           /* receive being filled; NULL while discarding */
  uint8_t *dst;
  uint64_t left; /* payload bytes of the current frame not read yet */
  /* sealing (seal.h): tx seals what we send, rx opens what we read; both off in clear */
  strata_seal tx, rx;
  uint8_t *cipher[2]; /* ciphertext of the (at most two) pieces queued, used in turn: the one
                         to fill is never the one the socket may still be taking */
  size_t cipher_cap[2];
  int cipher_next;
  uint8_t *payload_start; /* where the current sealed payload lands (NULL while discarding) */
  uint8_t tag[STRATA_SEAL_TAG_BYTES];
  size_t tag_left; /* tag bytes of the current frame not read yet */
} tcp_stream;

/* A receive: x->offset counts the bytes of frames matched so far, x->aux the bytes not yet
 * arrived. After a mismatch the slot has no x and `discarding` until the rest is skipped. */
typedef struct recv_slot {
  strata_xfer *x;
  int discarding;
  uint64_t discard_left; /* payload bytes of the mismatched message still to skip */
} recv_slot;

/* A send not yet fully handed to streams; x->aux counts its pieces not yet in the kernel. */
typedef struct tx_pending {
  strata_xfer *x;
  uint64_t seq;
  uint64_t assigned; /* bytes handed to streams */
  uint64_t piece_bytes;
} tx_pending;

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
  tx_pending *pend; /* FIFO pend[pend_head .. +pend_count) modulo pend_cap */
  size_t pend_head, pend_count, pend_cap;
  int feed_next;    /* stream the next feeding pass starts at */
  recv_slot *slots; /* ring indexed by msg_seq % slots_cap */
  size_t slots_cap;
  uint64_t base_seq, next_seq; /* posted receives: [base_seq, next_seq) */
  int control_only;            /* the peer's data goes by another transport (net.c says so) */
  int probed;                  /* ops->probe asked about it since the last wait(): wait for a
                                  header on its streams too */
  unsigned rtt_us;             /* the kernel's RTT of data stream 0 after the handshake */
  int governed;                /* a WAN pair whose receive windows tcp_govern.c holds */
  strata_tcp_governor gov;
  int abort_status;      /* an ABORT arrived (0 = none) ... */
  int abort_published;   /* ... and is visible in remote_abort_status */
  uint64_t abort_seq;    /* messages the peer had posted to us before aborting */
  uint64_t abort_op_seq; /* the first operation its abort concerns */
  double abort_deadline_s;
  int told_close;     /* we failed it over a bad frame and sent it CLOSE(status): destroy lingers */
  double heard_s;     /* when its control connection last gave us bytes (or we connected) */
  double next_beat_s; /* when we send it the next HEARTBEAT */
  int linked;         /* its connections are here (tcp_mesh.c makes them on demand) */
} tcp_peer;

typedef struct tcp_transport {
  strata_transport base;
  int rank, nranks, streams;
  int govern;       /* cfg->tcp_govern and buffers not fixed by STRATA_TCP_BUFFER */
  double link_gbps; /* STRATA_TCP_LINK_GBPS (0: not given) */
  tcp_peer *peers;
  strata_xfer *done_head, *done_tail;
  double next_control_check_s;
  double timeout_s;      /* STRATA_TIMEOUT: the silence after which a peer is taken for dead */
  double beat_s;         /* the interval between our heartbeats */
  int mismatch_seen;     /* a receive failed with MISMATCH in this progress() call: end the call */
  int sent_abort_status; /* the first status we sent in an ABORT (0 = none) */
  uint64_t sent_abort_op_seq; /* ... and its operation number (CLOSE repeats both) */
  int sent_abort_op_seq_set;
  int rx_reads_left; /* budget of the stream being read (TCP_RX_READS_PER_PASS) */
  int leaving;       /* destroy() runs: a peer that is gone already is no news */
  struct pollfd *pollfds;
  size_t pollfds_cap;
  strata_tcp_mesh *mesh; /* connects pairs on demand; NULL for an adopted pair */
  int linked_peers;      /* peers whose connections are here */
} tcp_transport;

/* ---- pieces ---- */

/* Piece size of a message of `bytes` to `p` (never 0): one per stream on a LAN (fewest frames and
 * syscalls); on a WAN (handshake RTT >= 1 ms) at most TCP_PIECE_MAX_BYTES, for balance. */
static uint64_t piece_bytes(const tcp_transport *t, const tcp_peer *p, uint64_t bytes) {
  if (bytes < STRATA_TCP_STRIPE_MIN_BYTES) return bytes ? bytes : 1;
  if (!p->linked) return bytes; /* sealing and RTT unknown yet: peer_link sizes it again */
  uint64_t piece = (bytes + (uint64_t)t->streams - 1) / (uint64_t)t->streams;
  if (p->streams[0].tx.on && piece > TCP_SEALED_PIECE_MAX_BYTES) piece = TCP_SEALED_PIECE_MAX_BYTES;
  if (strata_tcp_tune_notsent_lowat_bytes(p->rtt_us) == 0) return piece; /* not a WAN */
  return piece < TCP_PIECE_MAX_BYTES ? piece : TCP_PIECE_MAX_BYTES;
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
  st->left = 0;
  st->start = st->end = 0;
}

/* Make the peer's ABORT visible to the engine (first abort wins). */
static void stream_free(tcp_stream *st) {
  free(st->frames);
  free(st->bounce);
  free(st->cipher[0]);
  free(st->cipher[1]);
  strata_seal_free(&st->tx);
  strata_seal_free(&st->rx);
}

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
      x->aux = 0; /* a send's pieces sit on several queues: complete it once */
      complete(t, x, status);
      failed++;
    }
  }
  return failed;
}

/* Fail every send not yet fully handed to a stream. */
static int fail_pending(tcp_transport *t, tcp_peer *p, int status) {
  int failed = 0;
  for (size_t i = 0; i < p->pend_count; i++) {
    strata_xfer *x = p->pend[(p->pend_head + i) % p->pend_cap].x;
    if (x->aux) {
      x->aux = 0;
      complete(t, x, status);
      failed++;
    }
  }
  p->pend_head = p->pend_count = 0;
  return failed;
}

/* The peer is gone: complete everything with `status`, close its sockets, and report it from
 * progress() if it left without CLOSE or something was still pending. */
static int control_queue(tcp_transport *t, tcp_peer *p, uint32_t type, uint64_t tag,
                         uint64_t op_seq);

static void peer_fail(tcp_transport *t, tcp_peer *p, int status, const char *why) {
  if (p->state == PEER_GONE) return;
  int failed = 0;
  for (int s = 0; s < t->streams; s++) failed += fail_sends(t, &p->streams[s], status);
  failed += fail_sends(t, &p->control, status);
  failed += fail_pending(t, p, status);
  for (uint64_t seq = p->base_seq; seq < p->next_seq; seq++) {
    recv_slot *slot = &p->slots[seq % p->slots_cap];
    if (slot->x) complete(t, slot->x, status), failed++;
    slot->x = NULL;
    slot->discarding = 0;
  }
  p->base_seq = p->next_seq;
  int told = 0;
  if (status == STRATA_ERR_PROTOCOL && p->control.fd >= 0 && p->control.count == 0 &&
      !p->control.eof) {
    /* we end the pair over what it sent (a frame that failed its check): tell it why on the
     * control connection, so it reports that rather than a vanished peer. Its connections stay
     * open (unread, unpolled) until destroy: an EOF or a reset on a data stream, which it might
     * see before the CLOSE on another connection, would tell it only that we are gone. */
    told = control_queue(t, p, STRATA_WIRE_CLOSE, (uint64_t)(int64_t)status, 0) == STRATA_OK &&
           p->control.count == 0;
    if (told) shutdown(p->control.fd, SHUT_WR);
    p->told_close = told;
  }
  if (!told) {
    for (int s = 0; s < t->streams; s++) stream_close(&p->streams[s]);
    stream_close(&p->control);
  }
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
  if (p->report && !t->leaving)
    STRATA_LOG(STRATA_LOG_WARN, t->rank, "tcp: rank %d lost: %s", p->rank, why);
  else
    STRATA_LOG(STRATA_LOG_INFO, t->rank, "tcp: rank %d is gone after it %s: %s", p->rank,
               p->abort_status ? "aborted" : "said goodbye", why);
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

/* A full FIFO ring of `elem`-byte items (*items)[*head .. *head + count) modulo *cap: doubled
 * (16 to start) and laid out from index 0 again. */
static int fifo_grow(void **items, size_t elem, size_t *head, size_t count, size_t *cap) {
  size_t grown = *cap ? 2 * *cap : 16;
  char *fresh = malloc(grown * elem);
  if (!fresh) return STRATA_ERR_NO_MEMORY;
  for (size_t i = 0; i < count; i++)
    memcpy(fresh + i * elem, (char *)*items + ((*head + i) % *cap) * elem, elem);
  free(*items);
  *items = fresh;
  *head = 0;
  *cap = grown;
  return STRATA_OK;
}

/* The frame's header as it goes on the wire: in clear, or sealed with the stream's next nonce
 * (frames are sealed in the order they are queued, which is the order they are sent). */
static int frame_head(tcp_stream *st, tx_frame *f, strata_wire_frame header) {
  strata_wire_frame_encode(&header);
  if (!st->tx.on) {
    memcpy(f->head, &header, sizeof header);
    f->head_bytes = sizeof header;
    return STRATA_OK;
  }
  f->head_bytes = STRATA_WIRE_SEALED_HEADER_BYTES;
  return strata_seal_close(&st->tx, f->head, (const uint8_t *)&header, sizeof header,
                           f->head + sizeof header);
}

static int tx_push(tcp_stream *st, const tx_frame *frame) {
  if (st->count == st->cap) {
    void *items = st->frames;
    int rc = fifo_grow(&items, sizeof *st->frames, &st->head, st->count, &st->cap);
    st->frames = items;
    if (rc != STRATA_OK) return rc;
  }
  st->frames[(st->head + st->count++) % st->cap] = *frame;
  return STRATA_OK;
}

static void frame_sent(tcp_transport *t, const tx_frame *f) {
  strata_xfer *x = f->x;
  if (!x || !x->aux) return;
  if (--x->aux == 0) complete(t, x, STRATA_OK);
}

/* Gather queued frames into iov; returns the count. */
static int tx_gather(const tcp_stream *st, struct iovec *iov) {
  int n = 0;
  for (size_t i = 0; i < st->count && n + 2 <= TCP_MAX_IOV; i++) {
    const tx_frame *f = &st->frames[(st->head + i) % st->cap];
    uint64_t sent = f->sent;
    if (sent < f->head_bytes) {
      iov[n++] = (struct iovec){(uint8_t *)f->head + sent, f->head_bytes - sent};
      sent = 0;
    } else {
      sent -= f->head_bytes;
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
    uint64_t total = f->head_bytes + f->payload_bytes, step = total - f->sent;
    if (bytes < step) {
      f->sent += bytes;
      return;
    }
    bytes -= step;
    tx_frame done = *f;
    st->head = (st->head + 1) % st->cap;
    st->count--;
    frame_sent(t, &done);
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

static int pend_push(tcp_peer *p, const tx_pending *e) {
  if (p->pend_count == p->pend_cap) {
    void *items = p->pend;
    int rc = fifo_grow(&items, sizeof *p->pend, &p->pend_head, p->pend_count, &p->pend_cap);
    p->pend = items;
    if (rc != STRATA_OK) return rc;
  }
  p->pend[(p->pend_head + p->pend_count++) % p->pend_cap] = *e;
  return STRATA_OK;
}

/* Hand the next piece of the oldest pending send to stream `st`. */
static int feed_piece(tcp_peer *p, tcp_stream *st) {
  tx_pending *e = &p->pend[p->pend_head];
  strata_xfer *x = e->x;
  uint64_t offset = e->assigned, rest = x->bytes - offset;
  uint64_t len = rest < e->piece_bytes ? rest : e->piece_bytes;
  tx_frame f = {.x = x, .payload = (const uint8_t *)x->buf + offset, .payload_bytes = len};
  int b = st->cipher_next;
  if (st->tx.on && len > 0 && st->cipher_cap[b] < len + STRATA_SEAL_TAG_BYTES) {
    uint8_t *grown = realloc(st->cipher[b], len + STRATA_SEAL_TAG_BYTES);
    if (!grown) return STRATA_ERR_NO_MEMORY;
    st->cipher[b] = grown;
    st->cipher_cap[b] = len + STRATA_SEAL_TAG_BYTES;
  }
  int status = frame_head(st, &f,
                          (strata_wire_frame){.type = STRATA_WIRE_DATA,
                                              .tag = x->tag,
                                              .msg_seq = e->seq,
                                              .msg_bytes = x->bytes,
                                              .stripe_offset = offset,
                                              .stripe_bytes = len});
  if (status != STRATA_OK) return status;
  if (st->tx.on && len > 0) {
    status = strata_seal_close(&st->tx, st->cipher[b], f.payload, len, st->cipher[b] + len);
    if (status != STRATA_OK) return status;
    f.payload = st->cipher[b];
    st->cipher_next = !b;
    f.payload_bytes = len + STRATA_SEAL_TAG_BYTES;
  }
  if (tx_push(st, &f) != STRATA_OK) return STRATA_ERR_NO_MEMORY;
  e->assigned += len;
  if (e->assigned >= x->bytes) { /* whole message handed out (a 0-byte one: its one frame) */
    p->pend_head = (p->pend_head + 1) % p->pend_cap;
    p->pend_count--;
  }
  return STRATA_OK;
}

/* A WAN stream about to take a piece: one quiet for a round trip gets bbr afresh while it is
 * still in startup (tcp_tune.c says why). */
static void stream_wake(const tcp_transport *t, const tcp_peer *p, tcp_stream *st) {
  double now = strata_now_s();
  if (st->count == 0 && now - st->fed_s >= p->rtt_us * 1e-6 &&
      strata_tcp_tune_bbr_restart(st->fd) < 0)
    STRATA_LOG(STRATA_LOG_WARN, t->rank,
               "tcp: peer %d stream %d: bbr could not be set again after reno; the stream runs "
               "reno",
               p->rank, st->index);
  st->fed_s = now;
}

/* Give pieces to streams whose FIFO has room, and write them, until the pending queue is empty
 * or no stream takes more. On a LAN one piece per stream per round, starting where the last pass
 * stopped, so ties rotate. On a WAN the lowest-numbered stream first, each given pieces until its
 * socket holds TCP_NOTSENT_LOWAT unsent (the top says why). */
static void peer_feed(tcp_transport *t, tcp_peer *p) {
  int fill = strata_tcp_tune_notsent_lowat_bytes(p->rtt_us) > 0;
  while (p->pend_count && p->state == PEER_UP) {
    int fed = 0;
    for (int i = 0; i < t->streams && p->pend_count && p->state == PEER_UP; i++) {
      int s = fill ? i : (p->feed_next + i) % t->streams;
      tcp_stream *st = &p->streams[s];
      /* sealed: a second piece, so the socket never waits for the cipher (bench/encrypt.sh) */
      unsigned room = st->tx.on ? 2u : 1u;
      do {
        if (st->count >= room || st->fd < 0) break;
        if (fill) stream_wake(t, p, st);
        int status = feed_piece(p, st);
        if (status != STRATA_OK) {
          peer_fail(t, p, status,
                    status == STRATA_ERR_NO_MEMORY ? "out of memory queueing a send"
                                                   : "the cipher failed sealing a send");
          return;
        }
        p->feed_next = (s + 1) % t->streams;
        fed = 1;
        stream_flush(t, p, st);
      } while (fill && p->pend_count && p->state == PEER_UP);
    }
    if (!fed) return;
  }
}

static int tcp_post_send(strata_transport *base, strata_xfer *x) {
  tcp_transport *t = (tcp_transport *)base;
  if (!x || x->peer < 0 || x->peer >= t->nranks || x->peer == t->rank || (x->bytes && !x->buf))
    return STRATA_ERR_INVALID_ARG;
  tcp_peer *p = &t->peers[x->peer];
  if (p->state != PEER_UP) return p->lost_status;
  if (p->closing) return STRATA_ERR_PEER_LOST;
  tx_pending e = {.x = x, .seq = p->send_seq, .piece_bytes = piece_bytes(t, p, x->bytes)};
  x->status = STRATA_OK;
  x->aux = x->bytes ? (x->bytes + e.piece_bytes - 1) / e.piece_bytes : 1; /* pieces to write */
  if (pend_push(p, &e) != STRATA_OK) return STRATA_ERR_NO_MEMORY;
  p->send_seq++;
  if (p->linked)
    peer_feed(t, p);
  else
    strata_tcp_mesh_want(t->mesh, p->rank); /* the send waits in pend for the pair */
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

static int tcp_post_recv(strata_transport *base, strata_xfer *x) {
  tcp_transport *t = (tcp_transport *)base;
  if (!x || x->peer < 0 || x->peer >= t->nranks || x->peer == t->rank || (x->bytes && !x->buf))
    return STRATA_ERR_INVALID_ARG;
  tcp_peer *p = &t->peers[x->peer];
  if (p->state != PEER_UP) return p->lost_status;
  if (p->next_seq - p->base_seq == p->slots_cap && slots_grow(p) != STRATA_OK)
    return STRATA_ERR_NO_MEMORY;
  uint64_t seq = p->next_seq++;
  x->status = STRATA_OK;
  x->offset = 0;     /* bytes of frames matched */
  x->aux = x->bytes; /* bytes not arrived yet */
  x->state = 0;      /* TCP_XFER_MATCHED once x->match took the message */
  *slot_of(p, seq) = (recv_slot){.x = x};
  if (!p->linked) strata_tcp_mesh_want(t->mesh, p->rank);
  return STRATA_OK;
}

static void slots_retire(tcp_peer *p) {
  while (p->base_seq < p->next_seq) {
    recv_slot *slot = slot_of(p, p->base_seq);
    if (slot->x || slot->discarding) return;
    p->base_seq++;
  }
}

/* Bytes of a frame header on this stream's wire. */
static size_t head_bytes(const tcp_stream *st) {
  return st->rx.on ? STRATA_WIRE_SEALED_HEADER_BYTES : sizeof(strata_wire_frame);
}

/* A sealed frame did not open: it was altered, or one was dropped, replayed or reordered (the
 * nonce is the frame's position). Nothing of it reaches the caller. */
static int integrity_error(tcp_transport *t, tcp_peer *p, const tcp_stream *st, const char *what) {
  char why[200];
  snprintf(why, sizeof why,
           "integrity check failed on %s %d: a %s was altered, dropped, replayed or reordered "
           "on the way",
           st == &p->control ? "the control connection" : "stream", st->index, what);
  peer_fail(t, p, STRATA_ERR_PROTOCOL, why);
  return -1;
}

/* A frame that did not open: the peer's (STRATA_ERR_PROTOCOL) or the cipher library's. */
static int open_error(tcp_transport *t, tcp_peer *p, const tcp_stream *st, int status,
                      const char *what) {
  if (status == STRATA_ERR_PROTOCOL) return integrity_error(t, p, st, what);
  peer_fail(t, p, status, "the cipher failed opening a frame");
  return -1;
}

/* Read the current header out of the bounce buffer (enough bytes are there). 0 or -1 failed. */
static int header_take(tcp_transport *t, tcp_peer *p, tcp_stream *st, strata_wire_frame *h) {
  const uint8_t *in = st->bounce + st->start;
  st->start += head_bytes(st);
  if (!st->rx.on) {
    memcpy(h, in, sizeof *h);
  } else {
    int status = strata_seal_open(&st->rx, (uint8_t *)h, in, sizeof *h, in + sizeof *h);
    if (status != STRATA_OK) return open_error(t, p, st, status, "frame header");
  }
  strata_wire_frame_decode(h);
  return 0;
}

static int protocol_error(tcp_transport *t, tcp_peer *p, const tcp_stream *st, const char *what) {
  char why[200];
  snprintf(why, sizeof why, "protocol error on stream %d: %s (msg_seq %llu)", st->index, what,
           (unsigned long long)st->header.msg_seq);
  peer_fail(t, p, STRATA_ERR_PROTOCOL, why);
  return -1;
}

/* Does the header describe a piece inside its message (only a 0-byte message has an empty
 * piece)? */
static int header_layout_ok(const tcp_stream *st) {
  const strata_wire_frame *h = &st->header;
  if (h->stripe_bytes > h->msg_bytes || h->stripe_offset > h->msg_bytes - h->stripe_bytes) return 0;
  return h->stripe_bytes > 0 || h->msg_bytes == 0;
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
  x->got_tag = h->tag;
  slot->x = NULL;
  slot->discarding = 1;
  slot->discard_left = h->msg_bytes - h->stripe_bytes; /* this frame is skipped by the caller */
  if (!slot->discard_left) slot->discarding = 0;
  complete(t, x, STRATA_ERR_MISMATCH);
  t->mismatch_seen = 1;
}

/* Match the stream's header to a posted receive. 1 = payload destination set (or discard),
 * 0 = not posted yet (parked), -1 = the peer failed. */
static int header_match(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  const strata_wire_frame *h = &st->header;
  if (h->type != STRATA_WIRE_DATA) return protocol_error(t, p, st, "control frame on data stream");
  if (!header_layout_ok(st)) return protocol_error(t, p, st, "piece outside its message");
  if (h->msg_seq < p->base_seq) return protocol_error(t, p, st, "message already received");
  if (h->msg_seq >= p->next_seq) return 0;
  recv_slot *slot = slot_of(p, h->msg_seq);
  strata_xfer *x = slot->x;
  st->x = NULL;
  st->dst = NULL;
  st->left = h->stripe_bytes;
  st->tag_left = st->rx.on && h->stripe_bytes ? STRATA_SEAL_TAG_BYTES : 0;
  st->payload_start = NULL;
  st->matched = 1;
  if (!x) {
    if (!slot->discarding || h->stripe_bytes > slot->discard_left || h->stripe_bytes == 0)
      return protocol_error(t, p, st, "more pieces than the message");
    slot->discard_left -= h->stripe_bytes;
    if (!slot->discard_left) slot->discarding = 0;
    return 1;
  }
  if (x->match && !(x->state & TCP_XFER_MATCHED)) { /* the first frame names tag and size */
    uint64_t posted = x->bytes;
    x->state |= TCP_XFER_MATCHED;
    if (x->match(x, h->tag, h->msg_bytes) != 0 || x->bytes > posted || (x->bytes && !x->buf)) {
      recv_mismatch(t, p, st, slot);
      return 1;
    }
    x->aux = x->bytes;
  }
  if (h->tag != x->tag || h->msg_bytes != x->bytes) {
    if (x->offset != 0) return protocol_error(t, p, st, "pieces of one message disagree");
    recv_mismatch(t, p, st, slot);
    return 1;
  }
  if (h->stripe_bytes > x->bytes - x->offset)
    return protocol_error(t, p, st, "more pieces than the message");
  x->offset += h->stripe_bytes;
  st->x = x;
  st->dst = (uint8_t *)x->buf + h->stripe_offset;
  st->payload_start = st->dst;
  return 1;
}

/* The current frame's payload is complete. */
static void frame_received(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  strata_xfer *x = st->x;
  recv_slot *slot = slot_of(p, st->header.msg_seq);
  if (x) {
    x->aux -= st->header.stripe_bytes;
    if (!x->aux && x->offset == x->bytes) {
      slot->x = NULL;
      complete(t, x, STRATA_OK);
    }
  }
  st->have_header = st->matched = 0;
  st->x = NULL;
  st->dst = NULL;
  slots_retire(p);
}

/* EOF on a data stream between two frames. Any stream may be read while a receive is posted,
 * so a peer that finished with us may well have closed this one while the rest of a message is
 * still on its way on another: that is not a failure. The stream is done; the peer fails only
 * when its control connection breaks without CLOSE (control_receive) or when every data stream
 * has ended with receives still posted (the data cannot come any more). 1 = tolerated. */
static int stream_eof_between_frames(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  if (st->have_header || st->end > st->start) return 0; /* a frame was cut short */
  st->eof = 1;
  int open_streams = 0;
  for (int s = 0; s < t->streams; s++) open_streams += !p->streams[s].eof;
  return open_streams > 0 || p->next_seq == p->base_seq;
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
    if (n == 0 && stream_eof_between_frames(t, p, st)) return 0;
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

/* The tag of a sealed payload, then the payload opened in place (a discarded one is only
 * counted). Returns 1 frame complete, 0 EAGAIN, -1 failed. */
static int payload_open(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  while (st->tag_left > 0) {
    size_t avail = st->end - st->start;
    if (avail == 0) {
      ssize_t n = bounce_fill(t, p, st);
      if (n <= 0) return (int)n;
      continue;
    }
    size_t n = avail < st->tag_left ? avail : st->tag_left;
    memcpy(st->tag + STRATA_SEAL_TAG_BYTES - st->tag_left, st->bounce + st->start, n);
    st->start += n;
    st->tag_left -= n;
    if (st->tag_left == 0) {
      int status = st->payload_start
                       ? strata_seal_open(&st->rx, st->payload_start, st->payload_start,
                                          st->header.stripe_bytes, st->tag)
                       : strata_seal_skip(&st->rx);
      if (status != STRATA_OK) return open_error(t, p, st, status, "payload");
    }
  }
  return 1;
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
  return payload_open(t, p, st);
}

/* Does this stream have work the kernel must supply bytes for? Any stream may carry the next
 * piece of a posted receive, so all are read while one is posted. */
static int stream_wants_bytes(const tcp_peer *p, const tcp_stream *st) {
  if (st->fd < 0 || st->eof) return 0;
  if (st->have_header)
    return st->matched && (st->left > 0 || st->tag_left > 0) && st->start == st->end;
  return p->next_seq > p->base_seq && st->end - st->start < head_bytes(st);
}

/* Everything possible without blocking on one data stream. */
static void stream_receive(tcp_transport *t, tcp_peer *p, tcp_stream *st) {
  t->rx_reads_left = TCP_RX_READS_PER_PASS;
  while (p->state == PEER_UP && !t->mismatch_seen) {
    if (!st->have_header) {
      if (st->end - st->start < head_bytes(st)) {
        if (!stream_wants_bytes(p, st) || bounce_fill(t, p, st) <= 0) return;
        continue;
      }
      if (header_take(t, p, st, &st->header) != 0) return;
      st->have_header = 1;
      st->matched = 0;
    }
    if (!st->matched && header_match(t, p, st) <= 0) return;
    if (payload_read(t, p, st) <= 0) return;
    frame_received(t, p, st);
  }
}

/* ops->probe: the header of message next_seq, the first no posted receive takes, read off a
 * data stream that has no frame in hand and parked there as stream_receive parks one (so the
 * receive posted next reads on from it). Streams not connected are not asked. */
static int tcp_probe(strata_transport *base, int peer, uint64_t *tag, uint64_t *bytes) {
  tcp_transport *t = (tcp_transport *)base;
  if (peer < 0 || peer >= t->nranks || peer == t->rank) return 0;
  tcp_peer *p = &t->peers[peer];
  if (p->state != PEER_UP || p->control_only || !p->streams) return 0;
  p->probed = 1;
  for (int s = 0; s < t->streams && p->state == PEER_UP; s++) {
    tcp_stream *st = &p->streams[s];
    if (st->fd < 0) continue;
    if (!st->have_header) {
      t->rx_reads_left = 1;
      if (st->end - st->start < head_bytes(st) && (st->eof || bounce_fill(t, p, st) <= 0)) continue;
      if (st->end - st->start < head_bytes(st)) continue;
      if (header_take(t, p, st, &st->header) != 0) return 0;
      st->have_header = 1;
      st->matched = 0;
    }
    if (!st->matched && st->header.type == STRATA_WIRE_DATA && st->header.msg_seq == p->next_seq) {
      *tag = st->header.tag;
      *bytes = st->header.msg_bytes;
      return 1;
    }
  }
  return 0;
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
  } else if (f->type == STRATA_WIRE_HEARTBEAT) {
    /* heard_s is set by the read that brought it */
  } else {
    peer_fail(t, p, STRATA_ERR_PROTOCOL, "data frame on the control connection");
  }
}

/* Read and handle every control frame that arrived; notice EOF and resets. */
static void control_receive(tcp_transport *t, tcp_peer *p) {
  tcp_stream *st = &p->control;
  while (p->state == PEER_UP && st->fd >= 0 && !st->eof) {
    while (st->end - st->start >= head_bytes(st)) {
      strata_wire_frame f;
      if (header_take(t, p, st, &f) != 0) return;
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
      p->heard_s = strata_now_s();
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

/* Queue one control frame and write what the socket takes. STRATA_OK (also when the pair is no
 * longer up), or STRATA_ERR_SYSTEM when the frame could not be sealed. */
static int control_queue(tcp_transport *t, tcp_peer *p, uint32_t type, uint64_t tag,
                         uint64_t op_seq) {
  if (p->state != PEER_UP || p->control.fd < 0) return STRATA_OK;
  tx_frame f = {.x = NULL};
  strata_wire_frame header = {
      .type = type, .tag = tag, .msg_seq = p->send_seq, .stripe_offset = op_seq};
  if (frame_head(&p->control, &f, header) != STRATA_OK) return STRATA_ERR_SYSTEM;
  if (tx_push(&p->control, &f) == STRATA_OK) stream_flush(t, p, &p->control);
  return STRATA_OK;
}

static void control_send(tcp_transport *t, tcp_peer *p, uint32_t type, uint64_t tag,
                         uint64_t op_seq) {
  if (control_queue(t, p, type, tag, op_seq) != STRATA_OK)
    peer_fail(t, p, STRATA_ERR_SYSTEM, "the cipher failed sealing a control frame");
}

static void tcp_send_abort(strata_transport *base, int peer, int status, uint64_t op_seq) {
  tcp_transport *t = (tcp_transport *)base;
  if (peer < 0 || peer >= t->nranks || peer == t->rank) return;
  if (!t->sent_abort_status) t->sent_abort_status = status;
  if (!t->sent_abort_op_seq_set) t->sent_abort_op_seq = op_seq, t->sent_abort_op_seq_set = 1;
  /* a peer not connected hears of it if it ever connects (peer_link) */
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

/* The pair's data streams' sockets, for tcp_govern.c. */
static void peer_fds(const tcp_transport *t, const tcp_peer *p, int fds[TCP_MAX_STREAMS]) {
  for (int s = 0; s < t->streams; s++) fds[s] = p->streams[s].fd;
}

/* A reading for tcp_govern.c: the pair is busy while a message is arriving, i.e. the oldest
 * posted receive has had its first piece and still misses bytes (messages come in order on each
 * stream, so no later one starts before it). A receive posted for a message not sent yet is not
 * busy: the round trip before a burst, or a sender still computing, says nothing of the path, and
 * counted, a burst far smaller than the path's bandwidth-delay product reads as its bytes over
 * the whole wait — a rate far below the path's, which would then cap the pair. */
static void peer_govern(tcp_transport *t, tcp_peer *p) {
  int fds[TCP_MAX_STREAMS];
  peer_fds(t, p, fds);
  int busy = 0;
  if (p->base_seq < p->next_seq) {
    const recv_slot *slot = slot_of(p, p->base_seq);
    busy = slot->discarding || (slot->x && slot->x->offset > 0);
  }
  strata_tcp_govern(&p->gov, fds, t->streams, busy, p->rtt_us, t->rank, p->rank);
}

/* Beat to `p` when due, and fail it when it has been silent for the timeout. Runs right after its
 * control connection was read, so a beat waiting in our socket buffer is never missed. A peer
 * that sent CLOSE is leaving in order and owes no more beats. */
static void peer_liveness(tcp_transport *t, tcp_peer *p, double now) {
  if (p->state != PEER_UP || p->closing || !p->linked) return;
  if (now >= p->next_beat_s) {
    p->next_beat_s = now + t->beat_s;
    /* a beat still queued means the peer is not reading: a second one would say nothing more */
    if (!p->control.count) control_send(t, p, STRATA_WIRE_HEARTBEAT, 0, 0);
  }
  double silent_s = now - p->heard_s;
  if (silent_s > t->timeout_s) {
    char why[160];
    snprintf(why, sizeof why,
             "stopped answering: nothing on its control connection for %.1f s (STRATA_TIMEOUT; "
             "the process is frozen or the path to it is down)",
             silent_s);
    peer_fail(t, p, STRATA_ERR_TIMEOUT, why);
  }
}

static int tcp_progress(strata_transport *base, int *failed_peer) {
  tcp_transport *t = (tcp_transport *)base;
  double now = strata_now_s();
  abort_publish_ready(t, now);
  int check_control = now >= t->next_control_check_s;
  if (check_control) t->next_control_check_s = now + TCP_CONTROL_CHECK_S;
  /* pairs being connected are driven on every pass; otherwise the listener is looked at with
   * the control connections */
  if (t->mesh && (check_control || strata_tcp_mesh_busy(t->mesh))) strata_tcp_mesh_step(t->mesh);
  t->mismatch_seen = 0;
  for (int q = 0; q < t->nranks && !t->mismatch_seen; q++) {
    tcp_peer *p = &t->peers[q];
    if (q == t->rank || p->state != PEER_UP || !p->linked) continue;
    if (check_control) {
      control_receive(t, p);
      peer_liveness(t, p, now);
    }
    if (p->control.count && p->state == PEER_UP) stream_flush(t, p, &p->control);
    for (int s = 0; s < t->streams && p->state == PEER_UP && !t->mismatch_seen; s++) {
      tcp_stream *st = &p->streams[s];
      if (st->count) stream_flush(t, p, st);
      if (p->state == PEER_UP) stream_receive(t, p, st);
    }
    if (p->pend_count) peer_feed(t, p);
    if (p->governed && p->state == PEER_UP && now >= p->gov.next_s) peer_govern(t, p);
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

/* Room for every connected peer's sockets and the mesh's (its listener and handshakes). */
static int pollfds_reserve(tcp_transport *t, size_t mesh_fds) {
  size_t need = (size_t)t->linked_peers * (size_t)(t->streams + 1) + mesh_fds + 1;
  if (need <= t->pollfds_cap) return 1;
  size_t cap = need * 2;
  struct pollfd *grown = realloc(t->pollfds, cap * sizeof *grown);
  if (!grown) return 0;
  t->pollfds = grown;
  t->pollfds_cap = cap;
  return 1;
}

static void tcp_wait(strata_transport *base, int timeout_ms) {
  tcp_transport *t = (tcp_transport *)base;
  if (t->done_head) return;
  size_t n = 0, mesh_fds = 0;
  if (t->mesh) {
    mesh_fds = strata_tcp_mesh_pollfds(t->mesh, NULL, 0);
    if (!pollfds_reserve(t, mesh_fds)) return;
    n = strata_tcp_mesh_pollfds(t->mesh, t->pollfds, t->pollfds_cap);
  } else if (!pollfds_reserve(t, 0)) {
    return;
  }
  for (int q = 0; q < t->nranks; q++) {
    tcp_peer *p = &t->peers[q];
    if (q == t->rank || p->state != PEER_UP || !p->linked) continue;
    if (p->report) return;
    if (p->abort_status && !p->abort_published && timeout_ms > 1) timeout_ms = 1;
    if (!p->control.eof)
      pollfd_add(t, &n, p->control.fd, POLLIN | POLLRDHUP | (p->control.count ? POLLOUT : 0));
    for (int s = 0; s < t->streams; s++) {
      tcp_stream *st = &p->streams[s];
      int probe_wants =
          p->probed && !st->eof && !st->have_header && st->end - st->start < head_bytes(st);
      short events = (short)((stream_wants_bytes(p, st) || probe_wants ? POLLIN : 0) |
                             (st->count || p->pend_count ? POLLOUT : 0));
      pollfd_add(t, &n, st->fd, events);
    }
    p->probed = 0;
  }
  int ready = poll(t->pollfds, n, timeout_ms);
  if (ready > 0) t->next_control_check_s = 0; /* a hang-up or abort may have arrived */
}

void strata_tcp_abandon(strata_transport *base) {
  tcp_transport *t = (tcp_transport *)base;
  if (!t || base->ops != &tcp_ops) return;
  t->done_head = t->done_tail = NULL;
  strata_tcp_mesh_forget_wants(t->mesh); /* no new pairs: the ones still on their way stop */
  for (int q = 0; q < t->nranks; q++) {
    tcp_peer *p = &t->peers[q];
    if (q == t->rank) continue;
    for (uint64_t seq = p->base_seq; p->slots && seq < p->next_seq; seq++) {
      recv_slot *slot = &p->slots[seq % p->slots_cap];
      slot->x = NULL;
      slot->discarding = 0;
    }
    p->base_seq = p->next_seq;
    p->pend_head = p->pend_count = 0;
    /* A data stream may be in the middle of a frame: it is never read or written again (only
     * keepalive runs from now on), but it stays open until destroy, so the peer does not take an
     * EOF on it for our death while the survivors agree on who is alive. */
    for (int s = 0; p->streams && s < t->streams; s++) {
      tcp_stream *st = &p->streams[s];
      for (size_t i = 0; i < st->count; i++) st->frames[(st->head + i) % st->cap].x = NULL;
      st->count = st->head = 0;
      st->x = NULL;
      st->dst = NULL;
    }
    /* queued control frames carry no transfer; keep them (an ABORT may still be leaving) */
    for (size_t i = 0; i < p->control.count; i++)
      p->control.frames[(p->control.head + i) % p->control.cap].x = NULL;
  }
}

void strata_tcp_keepalive(strata_transport *base) {
  tcp_transport *t = (tcp_transport *)base;
  if (!t || base->ops != &tcp_ops) return;
  double now = strata_now_s();
  if (now < t->next_control_check_s) return;
  t->next_control_check_s = now + TCP_CONTROL_CHECK_S;
  /* a peer that dials us now (it has not heard of the failure) is answered, and hears our abort
   * on the new control connection (peer_link) */
  strata_tcp_mesh_step(t->mesh);
  for (int q = 0; q < t->nranks; q++) {
    tcp_peer *p = &t->peers[q];
    if (q == t->rank || p->state != PEER_UP || !p->linked) continue;
    control_receive(t, p);
    peer_liveness(t, p, now);
    if (p->control.count && p->state == PEER_UP) stream_flush(t, p, &p->control);
  }
  t->done_head = t->done_tail = NULL; /* abandoned: no transfer is left to complete */
  for (int q = 0; q < t->nranks; q++) t->peers[q].report = 0;
}

void strata_tcp_watch(strata_transport *base, int peer) {
  tcp_transport *t = (tcp_transport *)base;
  if (!t || base->ops != &tcp_ops || peer < 0 || peer >= t->nranks || peer == t->rank) return;
  if (!t->peers[peer].linked && t->peers[peer].state == PEER_UP)
    strata_tcp_mesh_want(t->mesh, peer);
}

int strata_tcp_peer_alive(const strata_transport *base, int peer) {
  const tcp_transport *t = (const tcp_transport *)base;
  if (!t || base->ops != &tcp_ops || peer < 0 || peer >= t->nranks) return 0;
  if (peer == t->rank) return 1;
  const tcp_peer *p = &t->peers[peer];
  /* a peer not connected (yet: strata_tcp_watch) counts as alive until its pair fails */
  return p->state == PEER_UP && !p->closing;
}

int strata_tcp_peer_cipher(const strata_transport *base, int peer) {
  const tcp_transport *t = (const tcp_transport *)base;
  if (!t || base->ops != &tcp_ops || peer < 0 || peer >= t->nranks || peer == t->rank) return -1;
  const tcp_stream *st = &t->peers[peer].streams[0];
  return st->tx.on ? st->tx.cipher : -1;
}

const char *strata_tcp_peer_address(const strata_transport *base, int peer) {
  const tcp_transport *t = (const tcp_transport *)base;
  if (!t || base->ops != &tcp_ops || peer < 0 || peer >= t->nranks) return "?";
  return strata_tcp_mesh_address(t->mesh, peer);
}

unsigned strata_tcp_data_rtt_us(const strata_transport *base) {
  const tcp_transport *t = (const tcp_transport *)base;
  unsigned rtt_us = 0;
  for (int q = 0; t && base->ops == &tcp_ops && q < t->nranks; q++) {
    const tcp_peer *p = &t->peers[q];
    if (q != t->rank && p->linked && !p->control_only && p->rtt_us > rtt_us) rtt_us = p->rtt_us;
  }
  return rtt_us;
}

void strata_tcp_set_control_only(strata_transport *base, int peer) {
  tcp_transport *t = (tcp_transport *)base;
  if (t && base->ops == &tcp_ops && peer >= 0 && peer < t->nranks) t->peers[peer].control_only = 1;
}

static int tcp_query(const strata_transport *base, strata_transport_query what, int peer,
                     uint64_t *value) {
  const tcp_transport *t = (const tcp_transport *)base;
  *value = 0;
  if (what == STRATA_TRANSPORT_CONNECTED_PEERS) {
    if (peer < 0) {
      *value = (uint64_t)t->linked_peers;
      return STRATA_OK;
    }
    if (peer >= t->nranks) return STRATA_ERR_INVALID_ARG;
    *value = peer != t->rank && t->peers[peer].linked && t->peers[peer].state == PEER_UP;
    return STRATA_OK;
  }
  if (what == STRATA_TRANSPORT_DATA_RTT_US) {
    *value = strata_tcp_data_rtt_us(base);
    return STRATA_OK;
  }
  if (what == STRATA_TRANSPORT_SINGLE_COPY || what == STRATA_TRANSPORT_MAPPED_BYTES)
    return STRATA_OK; /* every byte crosses the socket: never single-copy, never mapped */
  return STRATA_ERR_INVALID_ARG;
}

/* ---- open and destroy ---- */

/* A peer we told why we end the pair must read that CLOSE before our close can reset the
 * connection (a reset discards what it has not read): read what it still sends until it closes
 * too, for at most TCP_TOLD_LINGER_S. */
static void control_linger(tcp_peer *p) {
  double deadline = strata_now_s() + TCP_TOLD_LINGER_S;
  uint8_t sink[512];
  while (p->control.fd >= 0) {
    ssize_t n = recv(p->control.fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return;
    double left = deadline - strata_now_s();
    if (left <= 0) return;
    struct pollfd pfd = {.fd = p->control.fd, .events = POLLIN};
    poll(&pfd, 1, (int)(left * 1000) + 1);
  }
}

static void tcp_destroy(strata_transport *base) {
  tcp_transport *t = (tcp_transport *)base;
  if (!t) return;
  /* CLOSE carries why we leave: 0, or the abort we sent or received, so a peer still waiting on
   * us reports the abort rather than a lost peer */
  int status = t->sent_abort_status ? t->sent_abort_status : t->base.remote_abort_status;
  uint64_t why = (uint64_t)(int64_t)status;
  uint64_t op_seq = t->sent_abort_op_seq_set ? t->sent_abort_op_seq : t->base.remote_abort_op_seq;
  t->leaving = 1;
  for (int q = 0; q < t->nranks; q++) {
    tcp_peer *p = &t->peers[q];
    if (q == t->rank) continue;
    /* read what the peer sent (heartbeats, its own CLOSE): a socket closed with unread bytes
     * resets the connection, and the peer would take the reset for our death */
    if (p->state == PEER_UP) control_receive(t, p);
    /* orderly goodbye first, so the peer does not report us as lost */
    if (p->state == PEER_UP && p->control.count == 0)
      control_send(t, p, STRATA_WIRE_CLOSE, why, op_seq);
    if (p->told_close) control_linger(p);
    for (int s = 0; p->streams && s < t->streams; s++) {
      stream_close(&p->streams[s]);
      stream_free(&p->streams[s]);
    }
    if (p->control.fd >= 0) shutdown(p->control.fd, SHUT_WR);
    stream_close(&p->control);
    stream_free(&p->control);
    free(p->streams);
    free(p->slots);
    free(p->pend);
  }
  strata_tcp_mesh_close(t->mesh);
  free(t->peers);
  free(t->pollfds);
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
    .query = tcp_query,
    .probe = tcp_probe,
};

static int stream_init(tcp_stream *st, int fd, int index, const strata_seal_keys *keys) {
  memset(st, 0, sizeof *st);
  st->fd = fd;
  st->index = index;
  st->bounce = malloc(TCP_BOUNCE_BYTES);
  if (!st->bounce) return STRATA_ERR_NO_MEMORY;
  int status = strata_seal_init(&st->tx, keys->encrypt, keys->cipher, keys->tx);
  if (status == STRATA_OK)
    status = strata_seal_init(&st->rx, keys->encrypt, keys->cipher, keys->rx);
  return status;
}

/* Sends posted before the pair was connected, sized now that its sealing and RTT are known. */
static void pend_resize(tcp_transport *t, tcp_peer *p) {
  for (size_t i = 0; i < p->pend_count; i++) {
    tx_pending *e = &p->pend[(p->pend_head + i) % p->pend_cap];
    strata_xfer *x = e->x;
    e->piece_bytes = piece_bytes(t, p, x->bytes);
    x->aux = x->bytes ? (x->bytes + e->piece_bytes - 1) / e->piece_bytes : 1;
  }
}

/* The pair with q is connected (tcp_mesh.c, or the adopter): fds[0 .. S-1] data, fds[S] control,
 * all owned by the transport from here on, whatever happens. */
static int peer_link(tcp_transport *t, int q, const int *fds, const strata_seal_keys *keys) {
  tcp_peer *p = &t->peers[q];
  int status = STRATA_OK;
  for (int s = 0; s <= t->streams; s++) {
    tcp_stream *st = s < t->streams ? &p->streams[s] : &p->control;
    int init = stream_init(st, fds[s], s, &keys[s]); /* takes the fd even when it fails */
    if (status == STRATA_OK) status = init;
  }
  p->linked = 1;
  t->linked_peers++;
  p->heard_s = p->next_beat_s = strata_now_s(); /* the handshake just now was a sign of life */
  if (status != STRATA_OK) {
    peer_fail(t, p, status,
              status == STRATA_ERR_NO_MEMORY ? "out of memory" : "the frames' cipher failed");
    return status;
  }
  struct tcp_info info;
  socklen_t len = sizeof info;
  memset(&info, 0, sizeof info);
  if (getsockopt(p->streams[0].fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0)
    p->rtt_us = info.tcpi_rtt;
  p->governed = t->govern && strata_tcp_tune_notsent_lowat_bytes(p->rtt_us) > 0;
  if (p->governed) {
    int stream_fds[TCP_MAX_STREAMS];
    peer_fds(t, p, stream_fds);
    strata_tcp_govern_start(&p->gov, stream_fds, t->streams, t->link_gbps, p->rtt_us, t->rank, q);
  }
  const strata_seal *seal = &p->streams[0].tx;
  STRATA_LOG(STRATA_LOG_INFO, t->rank, "tcp: connected to rank %d (%s), frames %s", q,
             strata_tcp_mesh_address(t->mesh, q),
             !seal->on                                ? "in clear"
             : seal->cipher == STRATA_SEAL_AES256_GCM ? "sealed with AES-256-GCM"
                                                      : "sealed with ChaCha20-Poly1305");
  pend_resize(t, p);
  if (p->state == PEER_UP && t->sent_abort_status) /* it missed our abort: it hears it now */
    control_send(t, p, STRATA_WIRE_ABORT, (uint64_t)(int64_t)t->sent_abort_status,
                 t->sent_abort_op_seq);
  return STRATA_OK;
}

static void on_linked(void *ctx, int peer, const int *fds, const strata_seal_keys *keys) {
  peer_link(ctx, peer, fds, keys);
}

static void on_link_failed(void *ctx, int peer, int status, const char *why) {
  tcp_transport *t = ctx;
  peer_fail(t, &t->peers[peer], status, why);
}

/* The transport of `nranks` ranks, no pair connected yet. NULL when out of memory. */
static tcp_transport *transport_alloc(const strata_config *cfg, int rank, int nranks, int streams) {
  tcp_transport *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->base.ops = &tcp_ops;
  t->rank = rank;
  t->nranks = nranks;
  t->streams = streams;
  t->govern = cfg->tcp_govern && !cfg->tcp_buffer_bytes;
  t->link_gbps = cfg->tcp_link_gbps;
  t->timeout_s = cfg->timeout_s;
  t->beat_s = cfg->timeout_s / TCP_BEATS_PER_TIMEOUT;
  if (t->beat_s < TCP_BEAT_MIN_S) t->beat_s = TCP_BEAT_MIN_S;
  if (t->beat_s > TCP_BEAT_MAX_S) t->beat_s = TCP_BEAT_MAX_S;
  t->peers = calloc((size_t)nranks, sizeof *t->peers);
  int ok = t->peers != NULL;
  for (int q = 0; ok && q < nranks; q++) {
    tcp_peer *p = &t->peers[q];
    p->rank = q;
    p->control.fd = -1;
    if (q == rank) continue;
    p->streams = calloc((size_t)streams, sizeof *p->streams);
    ok = p->streams != NULL;
    for (int s = 0; ok && s < streams; s++) p->streams[s].fd = -1;
  }
  if (ok) {
    t->pollfds_cap = 64;
    t->pollfds = calloc(t->pollfds_cap, sizeof *t->pollfds);
    ok = t->pollfds != NULL;
  }
  if (!ok) {
    tcp_destroy(&t->base);
    return NULL;
  }
  return t;
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
  tcp_transport *t = transport_alloc(cfg, rank, nranks, cfg->tcp_streams);
  if (!t) {
    if (err && err_len)
      snprintf(err, err_len, "rank %d: out of memory opening the tcp transport", rank);
    return STRATA_ERR_NO_MEMORY;
  }
  strata_tcp_mesh_events events = {.ctx = t, .linked = on_linked, .failed = on_link_failed};
  int status = strata_tcp_mesh_open(cfg, rank, nranks, store, tcp_announced_version, &events,
                                    &t->mesh, err, err_len);
  if (status == STRATA_OK) {
    /* a pair connected during open that failed to set up fails open too */
    for (int q = 0; q < nranks; q++) {
      if (!t->peers[q].report) continue;
      status = t->peers[q].lost_status;
      if (err && err_len && !err[0])
        snprintf(err, err_len, "rank %d: setting up the connections with rank %d failed: %s", rank,
                 q, strata_strerror(status));
      break;
    }
  }
  if (status != STRATA_OK) {
    if (status == STRATA_ERR_NO_MEMORY && err && err_len && !err[0])
      snprintf(err, err_len, "rank %d: out of memory opening the tcp transport", rank);
    t->leaving = 1;
    tcp_destroy(&t->base);
    return status;
  }
  *out = &t->base;
  return STRATA_OK;
}

/* Kernel liveness for an adopted pair: keepalive probes after timeout/3 idle, three of them
 * timeout/9 apart, and unacknowledged data for at most the timeout, so a vanished host fails the
 * pair within about STRATA_TIMEOUT though nobody beats. */
static void adopt_keepalive(int fd, double timeout_s) {
  int one = 1, idle = (int)(timeout_s / 3), interval = (int)(timeout_s / 9), count = 3;
  if (idle < 1) idle = 1;
  if (interval < 1) interval = 1;
  unsigned user_timeout_ms = (unsigned)(timeout_s * 1000.0);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

int strata_tcp_adopt(const strata_config *cfg, int rank, int streams, int *fds,
                     const strata_seal_keys *keys, strata_transport **out) {
  if (!cfg || !fds || !keys || !out || (rank != 0 && rank != 1)) return STRATA_ERR_INVALID_ARG;
  if (streams < 1 || streams > TCP_MAX_STREAMS || !(cfg->timeout_s > 0)) return STRATA_ERR_CONFIG;
  *out = NULL;
  int per_peer = streams + 1, peer = 1 - rank;
  tcp_transport *t = transport_alloc(cfg, rank, 2, streams);
  if (!t) {
    for (int s = 0; s < per_peer; s++)
      if (fds[s] >= 0) close(fds[s]), fds[s] = -1;
    return STRATA_ERR_NO_MEMORY;
  }
  t->timeout_s = INFINITY; /* see tcp.h: the kernel judges liveness here */
  t->beat_s = TCP_BEAT_MAX_S;
  int status = peer_link(t, peer, fds, keys); /* the transport owns the fds from here */
  for (int s = 0; s < per_peer; s++) {
    if (status == STRATA_OK) adopt_keepalive(fds[s], cfg->timeout_s);
    fds[s] = -1;
  }
  if (status != STRATA_OK) {
    t->leaving = 1;
    tcp_destroy(&t->base);
    return status;
  }
  *out = &t->base;
  return STRATA_OK;
}

/* ---- fuzzing the frame decoder (tests/fuzz/fuzz_wire.c) ---- */
#ifdef STRATA_TEST_HOOKS

static void fuzz_count_done(strata_xfer *x) {
  ++*(int *)x->user;
}

/* A transport of rank 0 of 2, one data stream, whose peer's data and control connections are
 * the far ends of socketpairs: `data` is what the peer sends on the data stream (the first
 * `control_bytes` of it on the control connection instead), read against three posted receives
 * (tags 1..3 of 0, 100 and 70000 bytes). Sealed with an all-zero key when `sealed`. Whatever the
 * bytes, the transport must end in a completion or a failure, never read or write out of bounds,
 * and leak nothing. */
int strata_tcp_fuzz_frames_for_test(const uint8_t *data, size_t len, size_t control_bytes,
                                    int sealed) {
  int data_sv[2] = {-1, -1}, control_sv[2] = {-1, -1};
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, data_sv) != 0) return -1;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, control_sv) != 0) {
    close(data_sv[0]), close(data_sv[1]);
    return -1;
  }
  if (control_bytes > len) control_bytes = len;
  /* small inputs fit the socket buffers; what does not is cut (the peer then closes) */
  ssize_t sent = send(control_sv[1], data, control_bytes, MSG_NOSIGNAL);
  sent = send(data_sv[1], data + control_bytes, len - control_bytes, MSG_NOSIGNAL);
  (void)sent;
  shutdown(data_sv[1], SHUT_WR);
  shutdown(control_sv[1], SHUT_WR);
  int fds[2] = {data_sv[0], control_sv[0]};
  strata_seal_keys keys[2];
  memset(keys, 0, sizeof keys);
  for (int i = 0; i < 2; i++)
    keys[i].encrypt = sealed, keys[i].cipher = STRATA_SEAL_CHACHA20_POLY1305;
  strata_config cfg;
  memset(&cfg, 0, sizeof cfg); /* no governor, no link hint */
  cfg.timeout_s = 10;
  tcp_transport *t = transport_alloc(&cfg, 0, 2, 1);
  int status = STRATA_ERR_NO_MEMORY;
  if (t) {
    t->beat_s = 2;
    status = peer_link(t, 1, fds, keys); /* takes the fds */
  } else {
    close(fds[0]), close(fds[1]);
  }
  if (status == STRATA_OK) {
    static const uint64_t sizes[3] = {0, 100, 70000};
    uint8_t *bufs[3] = {NULL, malloc(100), malloc(70000)};
    strata_xfer xs[3];
    int done = 0, posted = 0;
    for (int i = 0; i < 3; i++) {
      xs[i] = (strata_xfer){.peer = 1,
                            .tag = (uint64_t)i + 1,
                            .bytes = sizes[i],
                            .buf = bufs[i] ? (void *)bufs[i] : (void *)xs,
                            .done = fuzz_count_done,
                            .user = &done};
      if ((sizes[i] && !bufs[i]) || tcp_post_recv(&t->base, &xs[i]) != STRATA_OK) break;
      posted++;
    }
    for (int pass = 0; pass < 64 && done < posted; pass++) {
      int failed_peer = -1;
      if (tcp_progress(&t->base, &failed_peer) != STRATA_OK) break;
    }
    /* a receive still pending (the bytes ended mid-message) is failed by destroy's peer loss */
    t->leaving = 1;
    peer_fail(t, &t->peers[1], STRATA_ERR_PEER_LOST, "fuzz input ended");
    deliver_completions(t);
    free(bufs[1]);
    free(bufs[2]);
  }
  if (t) tcp_destroy(&t->base);
  close(data_sv[1]);
  close(control_sv[1]);
  return 0;
}
#endif /* STRATA_TEST_HOOKS */
