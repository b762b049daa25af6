// SPDX-License-Identifier: Apache-2.0
/*
 * store_wire.h — the bytes the rendezvous store speaks on its TCP connections, in one place.
 *
 * Every integer is big-endian. A connection carries frames; each frame is a 4-byte length (of
 * what follows it, never more than STORE_WIRE_MAX_FRAME_BYTES) and then:
 *
 *   request (client -> server)            reply (server -> client)
 *   u16 magic   STORE_WIRE_MAGIC          u16 magic   STORE_WIRE_MAGIC
 *   u8  version STORE_WIRE_VERSION        u8  version STORE_WIRE_VERSION
 *   u8  op      (store_wire_op)           u8  zero
 *   u32 request id (echoed in the reply)  u32 request id of the request answered
 *   u32 timeout in ms (GET, WAIT)         i32 status (a strata_status)
 *   body, by op:                          body, when status == STRATA_OK, by op:
 *     SET  str key, bytes value             SET   (empty)
 *     GET  str key                          GET   bytes value
 *     WAIT u32 n, n × str key               WAIT  (empty)
 *     ADD  str key, i64 delta               ADD   i64 new value
 *     HELLO str job, u32 rank, u32 ranks    HELLO u8 verdict (store_wire_verdict)
 *     AUTH  32 nonce, 32 mac                AUTH  32 mac
 *     WAIT_COUNT str key, i64 target        WAIT_COUNT i64 value
 *     COUNTS u32 n, n × str key             COUNTS n × i64 value
 *
 * where `str` and `bytes` are a u32 length and that many bytes (keys are not NUL-terminated on
 * the wire and at most STORE_WIRE_MAX_KEY_BYTES long, values at most STORE_WIRE_MAX_VALUE_BYTES; a
 * HELLO's job may be empty).
 *
 * Authentication comes first. On accepting a connection the server sends a CHALLENGE: a reply
 * frame with request id 0 (no client sends id 0) and status STRATA_OK whose body is 32 random
 * bytes. The client's first request must be AUTH: its own 32 random bytes (nonce) and
 *   client mac = BLAKE2b-256 keyed with K over ("strata-store-client-v2\0", challenge, nonce)
 * where K is the job key (core/secret.c: Argon2id of the job secret salted with the job id), or
 * for an empty secret BLAKE2b-256("strata-store-no-secret-v2"), so that stores and ranks without
 * a secret agree whatever their job ids. The server compares in constant time; on a match it
 * answers STRATA_OK with
 *   server mac = BLAKE2b-256 keyed with K over ("strata-store-server-v2\0", challenge, nonce)
 * so the client knows it reached a store of its job, and on a mismatch STRATA_ERR_AUTH, then
 * closes. The server proves nothing before the client has. Anything but AUTH as the first
 * request, or a first frame longer than STORE_WIRE_MAX_AUTH_FRAME_BYTES, closes the connection at
 * once. The MACs authenticate who connects, not the frames after them: an on-path attacker who
 * can rewrite TCP can still rewrite them (what rides on the store is authenticated again end to
 * end where it matters: the data connections' handshakes).
 *
 * HELLO is the first request after AUTH of a rank whose communicator's rank 0 serves the store
 * in-process (a job's store: strata_store_server_start_job). Such a store lives and dies with one
 * communicator, and the job's next communicator serves a fresh one at the same address, so a
 * rank that is done with the old one early could reach it while it goes away and use its keys.
 * A job's store admits each rank of its job and world size once: STORE_WIRE_WELCOME. A rank it
 * admitted before can only be asking for a later communicator (STORE_WIRE_EARLIER), and a rank of
 * another job has its own rank 0 coming to serve this address (STORE_WIRE_OTHER_JOB); either way
 * the store keeps the connection open and the client waits until it closes, then connects again. A
 * store that no communicator owns (`strata store`, `strata launch`) welcomes every HELLO.
 *
 * Replies may arrive out of order: a GET or WAIT waits on the server until its keys exist or its
 * timeout passes (then the reply carries STRATA_ERR_TIMEOUT), while later requests on the same
 * connection are answered at once. A client that gave up on a request discards its late reply by
 * request id. ADD keeps its integer as decimal ASCII, so GET of an ADD key reads "42" (as
 * PyTorch's TCPStore does). A malformed frame makes the server close that connection.
 *
 * WAIT_COUNT and COUNTS read ADD counters (a missing key counts 0; a key that holds something
 * other than a decimal integer gives STRATA_ERR_INVALID_ARG). WAIT_COUNT waits on the server, as
 * GET does, until the counter reaches the target, and answers with its value then. COUNTS reads
 * n counters at once and creates none. They let N ranks meet through the store with O(N)
 * requests in all (engine/elastic.c: one blocking wait and one read of every contribution per
 * rank) where polling each contribution costs O(N) per rank per look.
 */
#ifndef STRATA_BOOT_STORE_WIRE_H
#define STRATA_BOOT_STORE_WIRE_H

#include <stdint.h>

#define STORE_WIRE_MAGIC 0x5354u /* "ST" */
#define STORE_WIRE_VERSION 2u
#define STORE_WIRE_REQUEST_HEADER_BYTES 12u /* after the length word */
#define STORE_WIRE_REPLY_HEADER_BYTES 12u
#define STORE_WIRE_MAX_VALUE_BYTES (16u << 20)
/* a SET of the largest value with the longest key, or a WAIT for many keys; checked on the length
 * word, before anything is buffered */
#define STORE_WIRE_MAX_FRAME_BYTES (STORE_WIRE_MAX_VALUE_BYTES + (1u << 20))
#define STORE_WIRE_AUTH_BYTES 32u /* challenge, nonce and each mac */
/* the whole AUTH frame: header, nonce, mac; a stranger can make the server hold no more */
#define STORE_WIRE_MAX_AUTH_FRAME_BYTES \
  (STORE_WIRE_REQUEST_HEADER_BYTES + 2 * STORE_WIRE_AUTH_BYTES)
#define STORE_WIRE_CHALLENGE_ID 0u
#define STORE_WIRE_MAX_KEY_BYTES 4096u
#define STORE_WIRE_MAX_WAIT_KEYS 65536u

typedef enum store_wire_op {
  STORE_WIRE_SET = 1,
  STORE_WIRE_GET = 2,
  STORE_WIRE_WAIT = 3,
  STORE_WIRE_ADD = 4,
  STORE_WIRE_HELLO = 5,
  STORE_WIRE_SET_IF_ABSENT = 6, /* as SET when the key is missing; the reply's one byte says
                                   whether it was set (1) or held a value already (0) */
  STORE_WIRE_AUTH = 7,          /* the first request of every connection (above) */
  STORE_WIRE_WAIT_COUNT = 8,    /* until a counter reaches a target (above) */
  STORE_WIRE_COUNTS = 9,        /* many counters in one reply (above) */
  STORE_WIRE_OPS                /* one past the last op: the server's request counters */
} store_wire_op;

typedef enum store_wire_verdict {
  STORE_WIRE_WELCOME = 0,
  STORE_WIRE_EARLIER = 1,   /* this store serves an earlier communicator of the rank's job */
  STORE_WIRE_OTHER_JOB = 2, /* this store serves another job */
} store_wire_verdict;

static inline void store_wire_put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}
static inline void store_wire_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static inline void store_wire_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static inline uint16_t store_wire_get_u16(const uint8_t *p) {
  return (uint16_t)((p[0] << 8) | p[1]);
}
static inline uint32_t store_wire_get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = (v << 8) | p[i];
  return v;
}
static inline uint64_t store_wire_get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
  return v;
}

#endif
