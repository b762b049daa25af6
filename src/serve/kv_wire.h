// SPDX-License-Identifier: Apache-2.0
/*
 * kv_wire.h — the frames of KV-transfer connections (serve/kv_*.c), after the strata handshake
 * (net/handshake.c) has authenticated the connection and agreed whether it is sealed.
 *
 * Every frame is one fixed 64-byte header, then `aux_bytes` of message (an agent name, a
 * notification, a lane request or reply), then, for a READ reply or a WRITE request over TCP,
 * `bytes` of payload. On a sealed connection each of those parts is one AEAD operation followed
 * by its 16-byte tag, so both ends count the same operations in the same order. Integers are
 * little-endian on the wire (kv_wire_encode/decode).
 *
 *   initiator -> target                          target -> initiator
 *   HELLO  kind (bulk/lane), pid, canary addr,   HELLO_OK status (SHM probe result, or
 *          canary value; aux = agent name;                UCX granted); UCX: aux = token
 *          UCX: bytes = worker address length,
 *          then reply token + worker address
 *   READ   region, addr, bytes                   DONE status[, OK: payload]
 *   WRITE  region, addr, bytes, payload          DONE status
 *   READ/WRITE flagged SHM: value = n,           DONE status; not OK: value = the first
 *          aux = n kv_wire_slice, no payload              failed slice, aux = its reason
 *   NOTIF  aux = message                         DONE status
 *   LANE   tag, aux = request                    LANE_REPLY status, aux = reply
 *
 * The target checks a header before it reads anything that follows: the type, aux_bytes against
 * its limit and, for READ and WRITE, bytes against the largest slice (a larger one closes the
 * connection) and then the descriptor against its regions (a refused WRITE's payload is read and
 * discarded so the stream stays in step). An SHM frame carries no payload but a batch of slices,
 * each one checked as a lone slice would be; the target copies those it accepted and answers
 * the batch with one verdict, naming the first slice that failed.
 *
 * The UCX backend (kv_ucx.c) carries slices as UCP active messages instead, each one header
 * below plus its data: KV_UCX_AM_REQUEST (initiator -> target; WRITE: data = the slice's bytes)
 * and KV_UCX_AM_REPLY (target -> initiator; data = a READ's bytes, or a refusal's reason). A
 * request proves the right to ask with the token the target gave on the authenticated HELLO; a
 * reply names the slice by the initiator's cookie and carries the initiator's reply token. Data
 * comes eager (inside the message) or, for a WRITE's or a granted READ's bytes only, by
 * rendezvous: the receiver then names the buffer the bytes go to, after these checks. The
 * decoders below check everything a header says against what arrived before anything is used.
 */
#ifndef STRATA_SERVE_KV_WIRE_H
#define STRATA_SERVE_KV_WIRE_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KV_WIRE_MAGIC 0x3256534bu /* "KSV2": SHM frames carry batches of slices */
#define KV_WIRE_MAX_SLICE_BYTES (64u << 20)
#define KV_WIRE_MAX_AUX_BYTES 65536u

enum kv_wire_type {
  KV_HELLO = 1,
  KV_HELLO_OK,
  KV_READ,
  KV_WRITE,
  KV_NOTIF,
  KV_DONE,
  KV_LANE,
  KV_LANE_REPLY
};

enum kv_wire_flags { KV_FLAG_SHM = 1, KV_FLAG_LANE = 2, KV_FLAG_UCX = 4 };

typedef struct kv_wire_header {
  uint32_t magic;
  uint16_t type;
  uint16_t flags;
  uint32_t region;
  int32_t status;
  uint64_t addr;       /* target address (READ/WRITE); HELLO: the initiator's pid */
  uint64_t bytes;      /* slice length */
  uint64_t local_addr; /* HELLO: the canary's address */
  uint64_t value;      /* HELLO: the canary's value; SHM: slices in the batch, or the failed one */
  uint32_t aux_bytes;
  uint32_t tag; /* LANE */
  uint64_t reserved;
} kv_wire_header;

_Static_assert(sizeof(kv_wire_header) == 64, "KV frame header is 64 bytes");

/* One slice of an SHM batch: where in the target (region, addr), how long, and where in the
 * initiator (local_addr). */
#define KV_WIRE_MAX_SHM_SLICES 256u
typedef struct kv_wire_slice {
  uint64_t addr, bytes, local_addr;
  uint32_t region, reserved;
} kv_wire_slice;

_Static_assert(sizeof(kv_wire_slice) == 32, "an SHM batch slice is 32 bytes");

static inline void kv_wire_encode(kv_wire_header *h) {
  h->magic = htole32(h->magic);
  h->type = htole16(h->type);
  h->flags = htole16(h->flags);
  h->region = htole32(h->region);
  h->status = (int32_t)htole32((uint32_t)h->status);
  h->addr = htole64(h->addr);
  h->bytes = htole64(h->bytes);
  h->local_addr = htole64(h->local_addr);
  h->value = htole64(h->value);
  h->aux_bytes = htole32(h->aux_bytes);
  h->tag = htole32(h->tag);
}

static inline void kv_wire_decode(kv_wire_header *h) {
  h->magic = le32toh(h->magic);
  h->type = le16toh(h->type);
  h->flags = le16toh(h->flags);
  h->region = le32toh(h->region);
  h->status = (int32_t)le32toh((uint32_t)h->status);
  h->addr = le64toh(h->addr);
  h->bytes = le64toh(h->bytes);
  h->local_addr = le64toh(h->local_addr);
  h->value = le64toh(h->value);
  h->aux_bytes = le32toh(h->aux_bytes);
  h->tag = le32toh(h->tag);
}

static inline void kv_wire_slice_encode(kv_wire_slice *s) {
  s->addr = htole64(s->addr);
  s->bytes = htole64(s->bytes);
  s->local_addr = htole64(s->local_addr);
  s->region = htole32(s->region);
  s->reserved = 0;
}

static inline void kv_wire_slice_decode(kv_wire_slice *s) {
  s->addr = le64toh(s->addr);
  s->bytes = le64toh(s->bytes);
  s->local_addr = le64toh(s->local_addr);
  s->region = le32toh(s->region);
}

/* ---- UCX active messages ---- */

#define KV_UCX_TOKEN_BYTES 16
#define KV_UCX_MAX_ADDRESS_BYTES 65536u /* a UCP worker address, in a HELLO or a blob */
#define KV_UCX_REASON_BYTES 256u        /* a refusal's reason in a reply, NUL not included */
#define KV_UCX_MAGIC 0x3158434bu        /* "KCX1" */
enum { KV_UCX_AM_REQUEST = 17, KV_UCX_AM_REPLY = 18 };

typedef struct kv_ucx_request {
  uint8_t token[KV_UCX_TOKEN_BYTES];
  uint64_t cookie; /* the initiator's name for the slice, echoed in the reply */
  uint32_t magic;
  uint16_t type; /* KV_READ or KV_WRITE */
  uint16_t flags;
  uint32_t region;
  uint32_t reserved;
  uint64_t addr, bytes;
} kv_ucx_request;

typedef struct kv_ucx_reply {
  uint8_t reply_token[KV_UCX_TOKEN_BYTES];
  uint64_t cookie;
  uint32_t magic;
  int32_t status; /* STRATA_OK, or why the target refused (data: the reason) */
  uint64_t bytes; /* the data that follows */
} kv_ucx_reply;

_Static_assert(sizeof(kv_ucx_request) == 56, "UCX request header is 56 bytes");
_Static_assert(sizeof(kv_ucx_reply) == 40, "UCX reply header is 40 bytes");

static inline void kv_ucx_request_encode(kv_ucx_request *h) {
  h->cookie = htole64(h->cookie);
  h->magic = htole32(KV_UCX_MAGIC);
  h->type = htole16(h->type);
  h->flags = htole16(h->flags);
  h->region = htole32(h->region);
  h->addr = htole64(h->addr);
  h->bytes = htole64(h->bytes);
}

static inline void kv_ucx_reply_encode(kv_ucx_reply *h) {
  h->cookie = htole64(h->cookie);
  h->magic = htole32(KV_UCX_MAGIC);
  h->status = (int32_t)htole32((uint32_t)h->status);
  h->bytes = htole64(h->bytes);
}

/* A request as the target received it: 0 when the header is whole and agrees with its data
 * (a WRITE's data is the slice, eager or by rendezvous; a READ has none), -1 otherwise. */
static inline int kv_ucx_request_decode(const void *header, size_t header_bytes, size_t data_bytes,
                                        int rendezvous, kv_ucx_request *h) {
  if (header_bytes != sizeof *h) return -1;
  memcpy(h, header, sizeof *h);
  h->cookie = le64toh(h->cookie);
  h->magic = le32toh(h->magic);
  h->type = le16toh(h->type);
  h->flags = le16toh(h->flags);
  h->region = le32toh(h->region);
  h->addr = le64toh(h->addr);
  h->bytes = le64toh(h->bytes);
  if (h->magic != KV_UCX_MAGIC || h->flags || h->bytes > KV_WIRE_MAX_SLICE_BYTES) return -1;
  if (h->type == KV_WRITE) return data_bytes == h->bytes ? 0 : -1;
  if (h->type == KV_READ) return data_bytes == 0 && !rendezvous ? 0 : -1;
  return -1;
}

/* A reply as the initiator received it: 0 when whole and consistent (a status is never
 * positive; a refusal's reason is short and eager; data_bytes is what the header says), -1
 * otherwise. Whether it fits the slice it names is the caller's check. */
static inline int kv_ucx_reply_decode(const void *header, size_t header_bytes, size_t data_bytes,
                                      int rendezvous, kv_ucx_reply *h) {
  if (header_bytes != sizeof *h) return -1;
  memcpy(h, header, sizeof *h);
  h->cookie = le64toh(h->cookie);
  h->magic = le32toh(h->magic);
  h->status = (int32_t)le32toh((uint32_t)h->status);
  h->bytes = le64toh(h->bytes);
  if (h->magic != KV_UCX_MAGIC || h->status > 0 || h->bytes != data_bytes ||
      h->bytes > KV_WIRE_MAX_SLICE_BYTES || (rendezvous && h->status != 0))
    return -1;
  return h->status < 0 && h->bytes > KV_UCX_REASON_BYTES ? -1 : 0;
}

#endif
