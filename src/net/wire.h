// SPDX-License-Identifier: Apache-2.0
/*
 * wire.h — every byte strata's TCP transport puts on the wire, in one place.
 *
 * A connection between two ranks carries, in order:
 *
 *   1. the handshake (handshake.c): each side sends HELLO, then AUTH, then a verdict (ACCEPT or
 *      REJECT). All four are the same fixed-size strata_wire_handshake record.
 *   2. frames (tcp.c): a strata_wire_frame header, followed for DATA by `stripe_bytes` bytes of
 *      payload. On a sealed connection (seal.h) the header travels as 48 bytes of ciphertext and
 *      a 16-byte tag, and a non-empty payload as `stripe_bytes` bytes of ciphertext and a 16-byte
 *      tag (STRATA_WIRE_SEALED_HEADER_BYTES, STRATA_SEAL_TAG_BYTES).
 *
 * Each peer pair has `streams` data connections (stream index 0 .. streams-1) and one control
 * connection (stream index == streams) that carries only ABORT, CLOSE and HEARTBEAT frames, so a
 * control message never waits behind data the receiver has not asked for yet.
 *
 * Compatibility rules, frozen across protocol versions so a mismatch is always diagnosable rather
 * than garbage: the handshake record keeps its size, the magic stays at offset 0 and the version
 * at offset 4, and REJECT keeps its meaning. Everything else may change with
 * STRATA_WIRE_VERSION.
 *
 * Byte order is little-endian for every integer; the encode/decode helpers below convert, so the
 * structs are the on-wire layout and host code never reads a raw field.
 */
#ifndef STRATA_NET_WIRE_H
#define STRATA_NET_WIRE_H

#include <assert.h>
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define STRATA_WIRE_VERSION                                                                   \
  5u /* 5: connections on demand (either rank dials, REJECT_CROSSED); 4: the initiator proves \
        first, ephemeral X25519 keys, sealed frames */
#define STRATA_WIRE_MAGIC "STRT" /* 4 bytes, no NUL on the wire */

#define STRATA_WIRE_JOB_ID_BYTES 64
#define STRATA_WIRE_NONCE_BYTES 32 /* HELLO: the sender's ephemeral X25519 public key */
#define STRATA_WIRE_MAC_BYTES 32   /* BLAKE2b-256 keyed with the job key */
#define STRATA_WIRE_KEY_BYTES 32   /* the job key: core/secret.c */

/* ---- handshake ---- */

typedef enum strata_wire_handshake_kind {
  STRATA_WIRE_HELLO = 1,  /* identity + a fresh ephemeral public key; `reason` holds flags */
  STRATA_WIRE_AUTH = 2,   /* MAC over both HELLOs and the responder's published address */
  STRATA_WIRE_ACCEPT = 3, /* verdict: every check passed */
  STRATA_WIRE_REJECT = 4  /* verdict: `reason` says which check failed; the sender then closes */
} strata_wire_handshake_kind;

/* HELLO flags (in `reason`) */
enum {
  STRATA_WIRE_FLAG_ENCRYPT = 1u, /* the sender wants this connection's frames sealed */
  STRATA_WIRE_FLAG_AES = 2u      /* the sender can run AES-256-GCM (else ChaCha20-Poly1305) */
};

typedef enum strata_wire_reject_reason {
  STRATA_WIRE_REJECT_PROTOCOL = 1, /* malformed or unexpected record */
  STRATA_WIRE_REJECT_VERSION = 2,  /* another protocol version */
  STRATA_WIRE_REJECT_JOB = 3,      /* another job id */
  STRATA_WIRE_REJECT_AUTH = 4,     /* authenticator did not verify: another secret */
  STRATA_WIRE_REJECT_CONFIG = 5,   /* world size or stream count differs */
  STRATA_WIRE_REJECT_RANK = 6,     /* a rank or stream index this side does not expect */
  STRATA_WIRE_REJECT_CROSSED = 7   /* both ranks dialed each other at once: the lower rank's
                                      connections stand, the higher rank's dial steps back */
} strata_wire_reject_reason;

typedef struct strata_wire_handshake {
  uint8_t magic[4]; /* STRATA_WIRE_MAGIC (frozen at offset 0) */
  uint32_t version; /* the sender's protocol version (frozen at offset 4) */
  uint32_t kind;    /* strata_wire_handshake_kind */
  uint32_t reason;  /* REJECT: strata_wire_reject_reason; HELLO: STRATA_WIRE_FLAG_*; else 0 */
  uint32_t rank;    /* the sender's rank */
  uint32_t nranks;  /* the sender's world size */
  uint32_t streams; /* data streams per peer pair the sender uses */
  uint32_t stream;  /* this connection's index: 0..streams-1 data, == streams control */
  char job_id[STRATA_WIRE_JOB_ID_BYTES];  /* NUL-padded */
  uint8_t nonce[STRATA_WIRE_NONCE_BYTES]; /* HELLO: ephemeral X25519 public key */
  uint8_t mac[STRATA_WIRE_MAC_BYTES];     /* AUTH: see handshake.c */
} strata_wire_handshake;

static_assert(sizeof(strata_wire_handshake) == 160, "handshake record size is frozen");
static_assert(offsetof(strata_wire_handshake, version) == 4, "version offset is frozen");

/* ---- frames ---- */

typedef enum strata_wire_frame_type {
  STRATA_WIRE_DATA = 1,     /* one piece of a message (any stream, any order); payload follows */
  STRATA_WIRE_ABORT = 2,    /* control: the sender's communicator aborts; tag = (int64) status,
                               msg_seq = messages the sender had posted to us before it */
  STRATA_WIRE_CLOSE = 3,    /* control: orderly shutdown, the EOF that follows is not a failure;
                               tag = 0, or the (int64) abort status that made the sender leave */
  STRATA_WIRE_HEARTBEAT = 4 /* control: the sender is alive (sent while idle too); no payload */
} strata_wire_frame_type;

typedef struct strata_wire_frame {
  uint32_t type;          /* strata_wire_frame_type */
  uint32_t reserved;      /* 0 */
  uint64_t tag;           /* DATA: the engine's message tag; ABORT, CLOSE: a status code */
  uint64_t msg_seq;       /* DATA: per ordered pair, 0, 1, 2 ... in post order */
  uint64_t msg_bytes;     /* DATA: size of the whole message */
  uint64_t stripe_offset; /* DATA: where this stripe lands inside the message */
  uint64_t stripe_bytes;  /* DATA: payload bytes that follow this header */
} strata_wire_frame;

static_assert(sizeof(strata_wire_frame) == 48, "frame header is 48 bytes");
#define STRATA_WIRE_SEALED_HEADER_BYTES (48 + 16)

/* Host order -> wire order, in place (a no-op on little-endian hosts). */
static inline void strata_wire_frame_encode(strata_wire_frame *f) {
  f->type = htole32(f->type);
  f->reserved = htole32(f->reserved);
  f->tag = htole64(f->tag);
  f->msg_seq = htole64(f->msg_seq);
  f->msg_bytes = htole64(f->msg_bytes);
  f->stripe_offset = htole64(f->stripe_offset);
  f->stripe_bytes = htole64(f->stripe_bytes);
}

static inline void strata_wire_frame_decode(strata_wire_frame *f) {
  f->type = le32toh(f->type);
  f->reserved = le32toh(f->reserved);
  f->tag = le64toh(f->tag);
  f->msg_seq = le64toh(f->msg_seq);
  f->msg_bytes = le64toh(f->msg_bytes);
  f->stripe_offset = le64toh(f->stripe_offset);
  f->stripe_bytes = le64toh(f->stripe_bytes);
}

static inline void strata_wire_handshake_encode(strata_wire_handshake *h) {
  h->version = htole32(h->version);
  h->kind = htole32(h->kind);
  h->reason = htole32(h->reason);
  h->rank = htole32(h->rank);
  h->nranks = htole32(h->nranks);
  h->streams = htole32(h->streams);
  h->stream = htole32(h->stream);
}

static inline void strata_wire_handshake_decode(strata_wire_handshake *h) {
  h->version = le32toh(h->version);
  h->kind = le32toh(h->kind);
  h->reason = le32toh(h->reason);
  h->rank = le32toh(h->rank);
  h->nranks = le32toh(h->nranks);
  h->streams = le32toh(h->streams);
  h->stream = le32toh(h->stream);
}

#endif
