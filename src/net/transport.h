// SPDX-License-Identifier: Apache-2.0
/*
 * transport.h — the small interface every transport (self, shm, tcp; later ucx, nccl) offers the
 * engine. A transport moves opaque byte messages to and from peers; it knows nothing of
 * collectives. Messages between a pair are matched in posting order: the k-th send posted to
 * peer q pairs with the k-th receive q posted from us.
 *
 * Every message carries a 64-bit tag chosen by the engine (operation sequence number and a hash
 * of the call's signature). A receive completes with STRATA_ERR_MISMATCH, without writing past
 * its buffer, when the arriving tag or byte count differs from the posted one; the transport then
 * discards that message's payload. This is how ranks that called different collectives find out.
 *
 * Threading: a transport is driven by one thread at a time (the engine holds its progress lock);
 * callbacks run on that thread, inside progress().
 */
#ifndef STRATA_NET_TRANSPORT_H
#define STRATA_NET_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h" /* strata_reduce_fn */
#include "strata.h"

typedef struct strata_xfer strata_xfer;
typedef struct strata_transport strata_transport;

struct strata_xfer {
  /* set by the engine before posting */
  int peer;
  uint64_t tag;
  uint64_t bytes;
  void *buf;               /* send: source; receive: destination */
  strata_reduce_fn reduce; /* receive only, optional: if set and the transport has
                              `fuses_reduce`, compute reduce_dst = reduce_src OP incoming
                              instead of writing `buf` (buf is then unused) */
  const void *reduce_src;
  void *reduce_dst;
  uint32_t elem_size; /* for fused reductions: never split an element */
  /* receive only, optional, honoured by tcp: called once, from progress(), when the message's
   * first frame arrives, with the sender's tag and size. It sets x->tag and x->bytes to those
   * (x->bytes no larger than posted) and x->buf to where they go, and returns 0; or returns
   * nonzero to refuse the message, which then completes x with STRATA_ERR_MISMATCH. So a receive
   * can be posted before its size and destination are known: the NCCL plugin's tagged, grouped
   * receives (src/ncclnet/plugin.c). */
  int (*match)(strata_xfer *x, uint64_t tag, uint64_t bytes);
  void (*done)(strata_xfer *x); /* called once, from progress(), when complete */
  void *user;
  /* set by the transport */
  int status;       /* STRATA_OK or an error, valid when done() runs */
  uint64_t got_tag; /* STRATA_ERR_MISMATCH: the tag the arriving message carried */
  /* transport-private */
  strata_xfer *next;
  uint64_t offset;
  uint64_t aux;
  int state;
};

/* A data connection whose handshake round trip is at least this is a WAN one (a LAN or loopback
 * RTT is tens of microseconds; a metro link ~1 ms per 100 km of fiber, NetApp MetroCluster ISL
 * docs): what the layers above compare STRATA_TRANSPORT_DATA_RTT_US with. */
#define STRATA_NET_WAN_RTT_US 1000u

/* What a transport can be asked through ops->query: figures the layers above size or report
 * things by, without naming the transport. */
typedef enum strata_transport_query {
  /* The largest round-trip time, in microseconds, to the peers whose data this transport
   * carries; 0 when none or unknown. `peer` is ignored. */
  STRATA_TRANSPORT_DATA_RTT_US = 1,
  /* 1 if large messages to `peer` travel in a single copy (the receiver reads the sender's
   * memory), 0 if they are copied through a buffer or a socket. */
  STRATA_TRANSPORT_SINGLE_COPY,
  /* Bytes received by reading a peer's strata_mem_alloc memory through a mapping. `peer` is
   * ignored. */
  STRATA_TRANSPORT_MAPPED_BYTES,
  /* Transports that connect pairs on demand (tcp): 1 if this transport holds connections with
   * `peer`, else 0; for `peer` -1, with how many peers. */
  STRATA_TRANSPORT_CONNECTED_PEERS,
} strata_transport_query;

typedef struct strata_transport_ops {
  const char *name;
  /* Queue a send or receive; it completes later through x->done. Returns an error only for
   * invalid arguments or a peer known to be lost (then x->done is not called). */
  int (*post_send)(strata_transport *t, strata_xfer *x);
  int (*post_recv)(strata_transport *t, strata_xfer *x);
  /* Advance every queued transfer without blocking. Returns STRATA_OK, or the error of a peer
   * that broke (*failed_peer names it); transfers to a broken peer complete with that error. */
  int (*progress)(strata_transport *t, int *failed_peer);
  /* Best effort: tell `peer` this communicator is aborting with `status`, starting with the
   * collective operation numbered `op_seq` (earlier ones completed here; the engine lets the
   * peer finish them). Delivered in order with the data sent before it. */
  void (*send_abort)(strata_transport *t, int peer, int status, uint64_t op_seq);
  /* Block up to timeout_ms for activity (readable/writable data, or a doorbell). May return
   * early. Transports that cannot wait return at once. */
  void (*wait)(strata_transport *t, int timeout_ms);
  void (*destroy)(strata_transport *t);
  /* Optional (NULL answers nothing): *value = the figure `what` names (about `peer` where it
   * says so). Returns STRATA_OK, or STRATA_ERR_INVALID_ARG when this transport does not know
   * `what` or `peer` (then *value is 0). */
  int (*query)(const strata_transport *t, strata_transport_query what, int peer, uint64_t *value);
  /* Optional (NULL: never answers, so no receive from any source binds to a peer it carries):
   * has the first message from `peer` that no receive posted so far will take begun to arrive?
   * Returns 1 and that message's tag and byte count, 0 when it has not (or when the transport
   * cannot tell yet, e.g. while receives from `peer` are still posted). It consumes nothing and
   * changes nothing a later post_recv gets: the next receive posted from `peer` takes that very
   * message. Asks only peers this transport is connected to; a failure it meets is reported by
   * the next progress(). For the engine's receives from any source (engine.c). */
  int (*probe)(strata_transport *t, int peer, uint64_t *tag, uint64_t *bytes);
} strata_transport_ops;

struct strata_transport {
  const strata_transport_ops *ops;
  int fuses_reduce; /* honours strata_xfer.reduce */
  /* an abort received from a peer: status code (0 = none) and which peer sent it */
  int remote_abort_status;
  int remote_abort_peer;
  uint64_t remote_abort_op_seq; /* the op_seq that peer sent with its abort */
};

/* The answer of t->ops->query, or 0 when t is NULL or does not know `what`. */
static inline uint64_t strata_transport_ask(const strata_transport *t, strata_transport_query what,
                                            int peer) {
  uint64_t value = 0;
  if (!t || !t->ops->query || t->ops->query(t, what, peer, &value) != STRATA_OK) return 0;
  return value;
}

#endif
