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
 *   HELLO  kind (bulk/lane), pid, canary addr,   HELLO_OK status (SHM probe result)
 *          canary value; aux = agent name
 *   READ   region, addr, bytes[, shm: local]     DONE status[, tcp + OK: payload]
 *   WRITE  region, addr, bytes[, tcp: payload]   DONE status
 *   NOTIF  aux = message                         DONE status
 *   LANE   tag, aux = request                    LANE_REPLY status, aux = reply
 *
 * The target checks a header before it reads anything that follows: the type, aux_bytes against
 * its limit and, for READ and WRITE, bytes against the largest slice (a larger one closes the
 * connection) and then the descriptor against its regions (a refused WRITE's payload is read and
 * discarded so the stream stays in step).
 */
#ifndef STRATA_SERVE_KV_WIRE_H
#define STRATA_SERVE_KV_WIRE_H

#include <endian.h>
#include <stdint.h>

#define KV_WIRE_MAGIC 0x3156534bu /* "KSV1" */
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

enum kv_wire_flags { KV_FLAG_SHM = 1, KV_FLAG_LANE = 2 };

typedef struct kv_wire_header {
  uint32_t magic;
  uint16_t type;
  uint16_t flags;
  uint32_t region;
  int32_t status;
  uint64_t addr;       /* target address (READ/WRITE); HELLO: the initiator's pid */
  uint64_t bytes;      /* slice length */
  uint64_t local_addr; /* SHM: the initiator's address; HELLO: the canary's address */
  uint64_t value;      /* HELLO: the canary's value */
  uint32_t aux_bytes;
  uint32_t tag; /* LANE */
  uint64_t reserved;
} kv_wire_header;

_Static_assert(sizeof(kv_wire_header) == 64, "KV frame header is 64 bytes");

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

#endif
