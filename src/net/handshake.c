// SPDX-License-Identifier: Apache-2.0
/*
 * handshake.c — proving, on every TCP connection, that the other end is a rank of the same job,
 * speaking the same protocol, holding the same secret; and agreeing the connection's keys.
 *
 * The dialing side is the initiator I, the accepting side the responder R:
 *
 *     I -> R  HELLO   magic, version, job id, rank, world size, streams, stream index, flags,
 *                     an ephemeral X25519 public key
 *     R -> I  HELLO   the same about R (R answers only a HELLO that passed its checks)
 *     I -> R  AUTH    MAC(K, "I" | transcript)
 *     R -> I  AUTH    MAC(K, "R" | transcript), sent only once I's AUTH verified
 *     I -> R  ACCEPT
 *
 * where K is the job key (core/secret.c: Argon2id of the secret, salted with the job id), MAC is
 * BLAKE2b-256 keyed with K and the transcript is both HELLO records as sent plus the address R
 * published in the store (R knows what it published; I knows what it dialed). So:
 *  - R proves nothing to anyone who has not proven first: a stranger that connects to a
 *    listening port gets a HELLO (public data and a fresh key) and never a MAC to test guesses
 *    of the secret against;
 *  - both MACs cover both ephemeral keys and both identities: a replayed or reflected record
 *    fails (fresh keys per connection, the roles differ), and so does a relay that forwards the
 *    records between I and an R that published another address than the one I dialed;
 *  - the session keys are BLAKE2b(K, X25519(ephemeral keys) | transcript), one per direction, as
 *    WireGuard mixes its pre-shared key into an ephemeral exchange: someone who learns K later
 *    still cannot read a recorded session, and someone who sees the traffic cannot forge frames.
 * Whether frames are sealed (seal.h) is agreed from the HELLO flags: a side that wants it
 * (STRATA_ENCRYPT=on, or auto between two hosts) gets it; AES-256-GCM when both CPUs have
 * AES-NI, ChaCha20-Poly1305 otherwise.
 *
 * Each side checks the peer's HELLO in a fixed order — magic, version, job id, world size and
 * stream count, rank and stream, and that its ephemeral key is not one an earlier HELLO to this
 * process carried (HANDSHAKE_SEEN_KEYS remembered: a fresh key per connection never repeats, so a
 * repeat is recorded traffic sent again, and is refused and logged as a replay rather than failing
 * later as a wrong secret) — then the peer's AUTH (constant-time compare). The first failed
 * check is sent to the peer as REJECT(reason) in place of the next record, so both ends can say
 * which check failed. What the caller makes of a failure depends on the side (tcp_mesh.c): a
 * connection we accepted that fails proved nothing and is dropped; one we dialed reached the
 * address a job member published, so its verdict is believed.
 *
 * After sending a REJECT the refuser shuts down its write side and drains what the peer still
 * sends for a short linger, so closing never turns into a RST that could destroy the REJECT
 * before the peer reads it.
 *
 * Invariants: a record is read with exactly the bytes it has left, never more, so the first data
 * frame after the handshake is untouched; nothing here blocks — the caller polls with
 * strata_handshake_events() and enforces the deadline with strata_handshake_expire().
 * Must never: trust a length or index from the peer before checking it, compare secrets with
 * memcmp, or send a MAC before the peer's verified (responder).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "net/handshake.h"
#include "net/seal.h"

enum {
  STAGE_HELLO = 0, /* waiting for the peer's HELLO */
  STAGE_AUTH,      /* waiting for the peer's AUTH */
  STAGE_VERDICT,   /* waiting for the peer's ACCEPT */
  STAGE_FINAL,     /* sending our ACCEPT, the last record (initiator) */
  STAGE_REJECTING, /* sending our REJECT */
  STAGE_LINGER,    /* REJECT sent, write side shut; draining until EOF or the linger ends */
  STAGE_DONE
};

static const double HANDSHAKE_LINGER_S = 0.25;
enum { HANDSHAKE_SEEN_KEYS = 4096 };

/* The ephemeral keys of the last HANDSHAKE_SEEN_KEYS HELLOs this process received. */
static struct {
  pthread_mutex_t lock;
  uint8_t keys[HANDSHAKE_SEEN_KEYS][STRATA_WIRE_NONCE_BYTES];
  uint64_t prefixes[HANDSHAKE_SEEN_KEYS]; /* a key's first 8 bytes: the scan compares these */
  size_t next, count;
} seen = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* 1 when `key` came in an earlier HELLO; else remembers it and returns 0. */
static int seen_before(const uint8_t *key) {
  pthread_mutex_lock(&seen.lock);
  uint64_t prefix;
  memcpy(&prefix, key, sizeof prefix);
  int found = 0;
  for (size_t i = 0; i < seen.count && !found; i++)
    found = seen.prefixes[i] == prefix && memcmp(seen.keys[i], key, STRATA_WIRE_NONCE_BYTES) == 0;
  if (!found) {
    seen.prefixes[seen.next] = prefix;
    memcpy(seen.keys[seen.next], key, STRATA_WIRE_NONCE_BYTES);
    seen.next = (seen.next + 1) % HANDSHAKE_SEEN_KEYS;
    if (seen.count < HANDSHAKE_SEEN_KEYS) seen.count++;
  }
  pthread_mutex_unlock(&seen.lock);
  return found;
}
static const char MAC_DOMAIN[] = "strata-auth-v4";
static const char SESSION_DOMAIN[] = "strata-session-v4";

int strata_handshake_params_init(strata_handshake_params *params, const char *job_id,
                                 const char *secret, int rank, int nranks, int streams) {
  if (sodium_init() < 0) return STRATA_ERR_SYSTEM;
  memset(params, 0, sizeof *params);
  if (strlen(job_id) >= sizeof params->job_id) return STRATA_ERR_INVALID_ARG;
  strncpy(params->job_id, job_id, sizeof params->job_id - 1);
  int status = strata_secret_key(secret, job_id, params->key);
  if (status != STRATA_OK) return status;
  params->version = STRATA_WIRE_VERSION;
  params->rank = rank;
  params->nranks = nranks;
  params->streams = streams;
  params->encrypt = STRATA_ENCRYPT_AUTO;
  params->aes = strata_seal_aes_available();
  return STRATA_OK;
}

static void record_init(strata_handshake *hs, uint32_t kind, uint32_t reason) {
  const strata_handshake_params *p = hs->params;
  strata_wire_handshake *r = &hs->out;
  memset(r, 0, sizeof *r);
  memcpy(r->magic, STRATA_WIRE_MAGIC, 4);
  r->version = p->version;
  r->kind = kind;
  r->reason = reason;
  r->rank = (uint32_t)p->rank;
  r->nranks = (uint32_t)p->nranks;
  r->streams = (uint32_t)p->streams;
  r->stream = hs->stream < 0 ? 0 : (uint32_t)hs->stream;
  memcpy(r->job_id, p->job_id, sizeof r->job_id);
  hs->out_sent = 0;
}

static void record_queue(strata_handshake *hs) {
  strata_wire_handshake_encode(&hs->out);
}

int strata_handshake_same_host(int fd) {
  struct sockaddr_storage mine, peer;
  socklen_t mine_len = sizeof mine, peer_len = sizeof peer;
  if (getsockname(fd, (struct sockaddr *)&mine, &mine_len) != 0 ||
      getpeername(fd, (struct sockaddr *)&peer, &peer_len) != 0)
    return 0;
  if (peer.ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&mine;
    const struct sockaddr_in *b = (const struct sockaddr_in *)&peer;
    if ((ntohl(b->sin_addr.s_addr) >> 24) == 127) return 1;
    return mine.ss_family == AF_INET && a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  if (peer.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&mine;
    const struct sockaddr_in6 *b = (const struct sockaddr_in6 *)&peer;
    if (IN6_IS_ADDR_LOOPBACK(&b->sin6_addr)) return 1;
    if (IN6_IS_ADDR_V4MAPPED(&b->sin6_addr) && b->sin6_addr.s6_addr[12] == 127) return 1;
    return mine.ss_family == AF_INET6 &&
           memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0;
  }
  return peer.ss_family == AF_UNIX;
}

/* The transcript both MACs and the session keys bind: both HELLOs and the responder's address. */
static void transcript_update(crypto_generichash_state *st, const strata_handshake *hs) {
  uint32_t len = htole32((uint32_t)strlen(hs->bound_address));
  crypto_generichash_update(st, hs->hello_initiator, sizeof hs->hello_initiator);
  crypto_generichash_update(st, hs->hello_responder, sizeof hs->hello_responder);
  crypto_generichash_update(st, (const unsigned char *)&len, sizeof len);
  crypto_generichash_update(st, (const unsigned char *)hs->bound_address,
                            strlen(hs->bound_address));
}

/* The MAC of `role` ('I' initiator, 'R' responder) over the transcript. */
static void compute_mac(uint8_t mac[STRATA_WIRE_MAC_BYTES], const strata_handshake *hs, char role) {
  crypto_generichash_state st;
  crypto_generichash_init(&st, hs->params->key, STRATA_WIRE_KEY_BYTES, STRATA_WIRE_MAC_BYTES);
  crypto_generichash_update(&st, (const unsigned char *)MAC_DOMAIN, sizeof MAC_DOMAIN);
  crypto_generichash_update(&st, (const unsigned char *)&role, 1);
  transcript_update(&st, hs);
  crypto_generichash_final(&st, mac, STRATA_WIRE_MAC_BYTES);
  sodium_memzero(&st, sizeof st);
}

/* Agree the connection's keys once both sides proved themselves. -1: the peer's public key is
 * one that makes the exchange worthless (a small-order point). */
static int derive_keys(strata_handshake *hs) {
  const strata_wire_handshake *mine =
      (const strata_wire_handshake *)(hs->accepting ? hs->hello_responder : hs->hello_initiator);
  const strata_wire_handshake *peer =
      (const strata_wire_handshake *)(hs->accepting ? hs->hello_initiator : hs->hello_responder);
  uint8_t shared[crypto_scalarmult_BYTES];
  if (crypto_scalarmult(shared, hs->my_secret, peer->nonce) != 0) return -1;
  uint8_t session[2 * STRATA_SEAL_KEY_BYTES];
  crypto_generichash_state st;
  crypto_generichash_init(&st, hs->params->key, STRATA_WIRE_KEY_BYTES, sizeof session);
  crypto_generichash_update(&st, (const unsigned char *)SESSION_DOMAIN, sizeof SESSION_DOMAIN);
  crypto_generichash_update(&st, shared, sizeof shared);
  transcript_update(&st, hs);
  crypto_generichash_final(&st, session, sizeof session);
  /* the first half seals I -> R, the second R -> I */
  const uint8_t *to_responder = session, *to_initiator = session + STRATA_SEAL_KEY_BYTES;
  memcpy(hs->keys.tx, hs->accepting ? to_initiator : to_responder, STRATA_SEAL_KEY_BYTES);
  memcpy(hs->keys.rx, hs->accepting ? to_responder : to_initiator, STRATA_SEAL_KEY_BYTES);
  uint32_t flags_mine = le32toh(mine->reason), flags_peer = le32toh(peer->reason);
  hs->keys.encrypt = ((flags_mine | flags_peer) & STRATA_WIRE_FLAG_ENCRYPT) != 0;
  hs->keys.cipher = (flags_mine & flags_peer & STRATA_WIRE_FLAG_AES)
                        ? STRATA_SEAL_AES256_GCM
                        : STRATA_SEAL_CHACHA20_POLY1305;
  sodium_memzero(shared, sizeof shared);
  sodium_memzero(session, sizeof session);
  sodium_memzero(&st, sizeof st);
  sodium_memzero(hs->my_secret, sizeof hs->my_secret);
  return 0;
}

/* Our HELLO: identity, flags and a fresh ephemeral public key; remembered for the transcript. */
static void queue_hello(strata_handshake *hs) {
  const strata_handshake_params *p = hs->params;
  int want = p->encrypt == STRATA_ENCRYPT_ON ||
             (p->encrypt == STRATA_ENCRYPT_AUTO && !strata_handshake_same_host(hs->fd));
  uint32_t flags = (want ? STRATA_WIRE_FLAG_ENCRYPT : 0u) | (p->aes ? STRATA_WIRE_FLAG_AES : 0u);
  record_init(hs, STRATA_WIRE_HELLO, flags);
  randombytes_buf(hs->my_secret, sizeof hs->my_secret);
  crypto_scalarmult_base(hs->out.nonce, hs->my_secret);
  record_queue(hs);
  memcpy(hs->accepting ? hs->hello_responder : hs->hello_initiator, &hs->out, sizeof hs->out);
}

void strata_handshake_start(strata_handshake *hs, const strata_handshake_params *params, int fd,
                            int peer_rank, int stream, const char *address) {
  memset(hs, 0, sizeof *hs);
  hs->params = params;
  hs->fd = fd;
  hs->peer_rank = peer_rank;
  hs->stream = stream;
  hs->accepting = peer_rank < 0;
  hs->claimed_rank = -1;
  hs->stage = STAGE_HELLO;
  hs->status = STRATA_ERR_IN_PROGRESS;
  snprintf(hs->bound_address, sizeof hs->bound_address, "%s",
           hs->accepting ? params->address : (address ? address : ""));
  if (hs->accepting)
    hs->out_sent = sizeof hs->out; /* the responder speaks only when spoken to */
  else
    queue_hello(hs);
}

/* "rank 3" or "a connection from 10.0.0.2:41234" when the peer has not said who it is. */
static void describe_peer(const strata_handshake *hs, char *buf, size_t len) {
  if (hs->peer_rank >= 0) {
    snprintf(buf, len, "rank %d", hs->peer_rank);
    return;
  }
  struct sockaddr_storage addr;
  socklen_t addr_len = sizeof addr;
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (getpeername(hs->fd, (struct sockaddr *)&addr, &addr_len) == 0) {
    if (addr.ss_family == AF_INET) {
      const struct sockaddr_in *in4 = (const struct sockaddr_in *)&addr;
      inet_ntop(AF_INET, &in4->sin_addr, host, sizeof host);
      port = ntohs(in4->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&addr;
      inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
      port = ntohs(in6->sin6_port);
    }
  }
  if (hs->claimed_rank >= 0)
    snprintf(buf, len, "rank %d (as it claims, from %s:%d)", hs->claimed_rank, host, port);
  else
    snprintf(buf, len, "a connection from %s:%d", host, port);
}

static int reason_status(uint32_t reason) {
  switch (reason) {
    case STRATA_WIRE_REJECT_VERSION:
      return STRATA_ERR_VERSION;
    case STRATA_WIRE_REJECT_JOB:
      return STRATA_ERR_JOB;
    case STRATA_WIRE_REJECT_AUTH:
      return STRATA_ERR_AUTH;
    case STRATA_WIRE_REJECT_CONFIG:
      return STRATA_ERR_CONFIG;
    case STRATA_WIRE_REJECT_CROSSED:
      return STRATA_ERR_PEER_LOST;
    default:
      return STRATA_ERR_PROTOCOL;
  }
}

static int fail(strata_handshake *hs, int status) {
  hs->status = status;
  hs->stage = STAGE_DONE;
  return status;
}

/* We refuse the peer: write why into hs->err, send REJECT(reason), then linger. */
static int refuse(strata_handshake *hs, uint32_t reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(strata_handshake *hs, uint32_t reason, const char *fmt, ...) {
  char who[96];
  describe_peer(hs, who, sizeof who);
  int n = snprintf(hs->err, sizeof hs->err, "rank %d refused %s: ", hs->params->rank, who);
  va_list args;
  va_start(args, fmt);
  if (n > 0 && (size_t)n < sizeof hs->err) vsnprintf(hs->err + n, sizeof hs->err - n, fmt, args);
  va_end(args);
  hs->reject_status = reason_status(reason);
  record_init(hs, STRATA_WIRE_REJECT, reason);
  record_queue(hs);
  hs->stage = STAGE_REJECTING;
  return STRATA_ERR_IN_PROGRESS;
}

/* The peer refused us: explain its reason from its side. `r` is decoded. */
static int refused(strata_handshake *hs, const strata_wire_handshake *r) {
  const strata_handshake_params *p = hs->params;
  int peer = (int)r->rank;
  const char *why;
  char detail[240];
  switch (r->reason) {
    case STRATA_WIRE_REJECT_VERSION:
      snprintf(detail, sizeof detail,
               "protocol version mismatch (rank %d speaks version %u, this rank version %u)", peer,
               r->version, p->version);
      why = detail;
      break;
    case STRATA_WIRE_REJECT_JOB:
      snprintf(detail, sizeof detail,
               "wrong job id (rank %d is in job \"%.63s\", this rank in job \"%.63s\"; "
               "check STRATA_JOB_ID)",
               peer, r->job_id, p->job_id);
      why = detail;
      break;
    case STRATA_WIRE_REJECT_AUTH:
      why = "wrong job secret (the two ranks do not share STRATA_SECRET)";
      break;
    case STRATA_WIRE_REJECT_CONFIG:
      snprintf(detail, sizeof detail,
               "world size or stream count differs (rank %d: %u ranks, %u streams; this rank: "
               "%d ranks, %d streams)",
               peer, r->nranks, r->streams, p->nranks, p->streams);
      why = detail;
      break;
    case STRATA_WIRE_REJECT_RANK:
      why = "it did not expect this rank or stream index";
      break;
    case STRATA_WIRE_REJECT_CROSSED:
      hs->crossed = 1;
      why = "it is connecting to this rank itself (crossed dials: its connections stand)";
      break;
    default:
      why = "malformed handshake";
      break;
  }
  snprintf(hs->err, sizeof hs->err, "rank %d refused rank %d: %s", peer, p->rank, why);
  return fail(hs, reason_status(r->reason));
}

static int check_hello(strata_handshake *hs, const strata_wire_handshake *r) {
  const strata_handshake_params *p = hs->params;
  if (r->kind != STRATA_WIRE_HELLO)
    return refuse(hs, STRATA_WIRE_REJECT_PROTOCOL, "expected HELLO, got record kind %u", r->kind);
  if (hs->accepting && r->rank < (uint32_t)p->nranks) hs->claimed_rank = (int)r->rank;
  if (r->version != p->version)
    return refuse(hs, STRATA_WIRE_REJECT_VERSION,
                  "protocol version mismatch (this rank speaks version %u, the peer version %u)",
                  p->version, r->version);
  char peer_job[STRATA_WIRE_JOB_ID_BYTES + 1] = {0};
  memcpy(peer_job, r->job_id, STRATA_WIRE_JOB_ID_BYTES);
  if (memcmp(r->job_id, p->job_id, sizeof p->job_id) != 0)
    return refuse(hs, STRATA_WIRE_REJECT_JOB,
                  "wrong job id (this rank is in job \"%s\", the peer in job \"%s\"; check "
                  "STRATA_JOB_ID)",
                  p->job_id, peer_job);
  if (r->nranks != (uint32_t)p->nranks || r->streams != (uint32_t)p->streams)
    return refuse(hs, STRATA_WIRE_REJECT_CONFIG,
                  "world size or stream count differs (peer: %u ranks, %u streams; this rank: "
                  "%d ranks, %d streams; check STRATA_WORLD_SIZE and STRATA_TCP_STREAMS)",
                  r->nranks, r->streams, p->nranks, p->streams);
  /* The dialing side names the stream; the accepting side's HELLO echoes it. */
  int rank_ok, stream_ok = 1;
  if (hs->accepting) {
    rank_ok = (p->admit ? r->rank != (uint32_t)p->rank : r->rank > (uint32_t)p->rank) &&
              r->rank < (uint32_t)p->nranks;
    stream_ok = r->stream <= (uint32_t)p->streams;
  } else {
    rank_ok = r->rank == (uint32_t)hs->peer_rank;
    stream_ok = r->stream == (uint32_t)hs->stream;
  }
  if (!rank_ok || !stream_ok)
    return refuse(hs, STRATA_WIRE_REJECT_RANK,
                  "unexpected rank %u / stream %u (this rank %s; is an old job still running "
                  "with the same address?)",
                  r->rank, r->stream,
                  !hs->accepting ? "dialed"
                  : p->admit     ? "accepts only other ranks"
                                 : "accepts only higher ranks");
  if (seen_before(r->nonce))
    return refuse(hs, STRATA_WIRE_REJECT_AUTH,
                  "a replayed handshake: its HELLO carries the ephemeral key of an earlier "
                  "connection (recorded traffic sent again, not a peer)");
  hs->peer_rank = (int)r->rank;
  if (hs->accepting) {
    hs->stream = (int)r->stream;
    memcpy(hs->hello_initiator, &hs->in, sizeof hs->hello_initiator);
    queue_hello(hs); /* then wait for the initiator's proof */
  } else {
    memcpy(hs->hello_responder, &hs->in, sizeof hs->hello_responder);
    record_init(hs, STRATA_WIRE_AUTH, 0);
    compute_mac(hs->out.mac, hs, 'I');
    record_queue(hs);
  }
  hs->stage = STAGE_AUTH;
  return STRATA_ERR_IN_PROGRESS;
}

static int check_auth(strata_handshake *hs, const strata_wire_handshake *r) {
  if (r->kind != STRATA_WIRE_AUTH)
    return refuse(hs, STRATA_WIRE_REJECT_PROTOCOL, "expected AUTH, got record kind %u", r->kind);
  uint8_t expected[STRATA_WIRE_MAC_BYTES];
  compute_mac(expected, hs, hs->accepting ? 'I' : 'R');
  int ok = sodium_memcmp(expected, r->mac, sizeof expected) == 0;
  sodium_memzero(expected, sizeof expected);
  if (!ok)
    return refuse(hs, STRATA_WIRE_REJECT_AUTH,
                  "wrong job secret (the peer does not know STRATA_SECRET%s)",
                  hs->accepting ? "" : ", or it published another address than the one dialed");
  if (hs->accepting && hs->params->admit &&
      hs->params->admit(hs->params->admit_ctx, hs->peer_rank, hs->stream) != 0) {
    hs->crossed = 1;
    return refuse(hs, STRATA_WIRE_REJECT_CROSSED, "this pair is connected the other way");
  }
  if (derive_keys(hs) != 0)
    return refuse(hs, STRATA_WIRE_REJECT_AUTH, "the peer's ephemeral key is invalid");
  if (hs->accepting) {
    record_init(hs, STRATA_WIRE_AUTH, 0);
    compute_mac(hs->out.mac, hs, 'R');
    record_queue(hs);
    hs->stage = STAGE_VERDICT;
  } else {
    record_init(hs, STRATA_WIRE_ACCEPT, 0);
    record_queue(hs);
    hs->stage = STAGE_FINAL;
  }
  return STRATA_ERR_IN_PROGRESS;
}

/* A complete record arrived: check it for the current stage. */
static int on_record(strata_handshake *hs) {
  strata_wire_handshake r = hs->in;
  strata_wire_handshake_decode(&r);
  hs->in_got = 0;
  if (r.kind == STRATA_WIRE_REJECT) return refused(hs, &r);
  switch (hs->stage) {
    case STAGE_HELLO:
      return check_hello(hs, &r);
    case STAGE_AUTH:
      return check_auth(hs, &r);
    default: /* STAGE_VERDICT: the responder waits for the initiator's ACCEPT */
      if (r.kind != STRATA_WIRE_ACCEPT)
        return refuse(hs, STRATA_WIRE_REJECT_PROTOCOL, "expected a verdict, got record kind %u",
                      r.kind);
      hs->stage = STAGE_DONE;
      hs->status = STRATA_OK;
      return STRATA_OK;
  }
}

static int peer_closed(strata_handshake *hs, int err) {
  char who[96];
  describe_peer(hs, who, sizeof who);
  if (err == 0)
    snprintf(hs->err, sizeof hs->err, "rank %d: %s closed the connection during the handshake",
             hs->params->rank, who);
  else
    snprintf(hs->err, sizeof hs->err, "rank %d: handshake with %s failed: %s", hs->params->rank,
             who, strerror(err));
  return fail(hs, STRATA_ERR_PEER_LOST);
}

/* Send what is left of hs->out. Returns 1 when all sent, 0 on EAGAIN, -1 on error (errno). */
static int flush_out(strata_handshake *hs) {
  const uint8_t *out = (const uint8_t *)&hs->out;
  while (hs->out_sent < sizeof hs->out) {
    ssize_t n = send(hs->fd, out + hs->out_sent, sizeof hs->out - hs->out_sent,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      hs->out_sent += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return 0;
    } else {
      return -1;
    }
  }
  return 1;
}

/* Read towards a complete record. Returns 1 complete, 0 EAGAIN, -1 EOF/error (errno; 0 = EOF). */
static int fill_in(strata_handshake *hs) {
  uint8_t *in = (uint8_t *)&hs->in;
  while (hs->in_got < sizeof hs->in) {
    ssize_t n = recv(hs->fd, in + hs->in_got, sizeof hs->in - hs->in_got, MSG_DONTWAIT);
    if (n > 0) {
      hs->in_got += (size_t)n;
      if (hs->in_got >= 4 && memcmp(in, STRATA_WIRE_MAGIC, 4) != 0) {
        errno = EPROTO;
        return -1;
      }
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return 0;
    } else {
      if (n == 0) errno = 0;
      return -1;
    }
  }
  return 1;
}

/* REJECT is out; drain until the peer closes too or the linger ends, then report. */
static int linger(strata_handshake *hs) {
  uint8_t sink[512];
  for (;;) {
    ssize_t n = recv(hs->fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        strata_now_s() < hs->linger_deadline_s)
      return STRATA_ERR_IN_PROGRESS;
    return fail(hs, hs->reject_status);
  }
}

static int advance_rejecting(strata_handshake *hs) {
  if (hs->stage == STAGE_REJECTING) {
    int sent = flush_out(hs);
    if (sent == 0) {
      if (hs->linger_deadline_s == 0) hs->linger_deadline_s = strata_now_s() + HANDSHAKE_LINGER_S;
      if (strata_now_s() < hs->linger_deadline_s) return STRATA_ERR_IN_PROGRESS;
      return fail(hs, hs->reject_status);
    }
    if (sent < 0) return fail(hs, hs->reject_status);
    shutdown(hs->fd, SHUT_WR);
    hs->stage = STAGE_LINGER;
    hs->linger_deadline_s = strata_now_s() + HANDSHAKE_LINGER_S;
  }
  return linger(hs);
}

int strata_handshake_advance(strata_handshake *hs) {
  for (;;) {
    if (hs->stage == STAGE_DONE) return hs->status;
    if (hs->stage == STAGE_REJECTING || hs->stage == STAGE_LINGER) return advance_rejecting(hs);
    int sent = flush_out(hs);
    if (sent < 0) return peer_closed(hs, errno);
    if (hs->stage == STAGE_FINAL) {
      if (sent == 0) return STRATA_ERR_IN_PROGRESS;
      hs->stage = STAGE_DONE;
      hs->status = STRATA_OK;
      return STRATA_OK;
    }
    int got = fill_in(hs);
    if (got < 0 && errno == EPROTO) {
      hs->in_got = 0;
      refuse(hs, STRATA_WIRE_REJECT_PROTOCOL, "not a strata peer (bad magic)");
      continue;
    }
    if (got < 0) return peer_closed(hs, errno);
    if (got == 0 || sent == 0) return STRATA_ERR_IN_PROGRESS;
    int status = on_record(hs);
    if (status != STRATA_ERR_IN_PROGRESS && hs->stage == STAGE_DONE) return status;
  }
}

void strata_handshake_expire(strata_handshake *hs) {
  if (hs->stage == STAGE_DONE) return;
  if (hs->stage == STAGE_REJECTING || hs->stage == STAGE_LINGER) {
    fail(hs, hs->reject_status);
    return;
  }
  char who[96];
  describe_peer(hs, who, sizeof who);
  static const char *const waiting_for[] = {"HELLO", "AUTH", "verdict", "read of our ACCEPT"};
  snprintf(hs->err, sizeof hs->err,
           "rank %d: %s sent no %s within the timeout (not a strata peer, or stuck)",
           hs->params->rank, who, waiting_for[hs->stage < 4 ? hs->stage : 0]);
  fail(hs, STRATA_ERR_TIMEOUT);
}

int strata_handshake_evictable(const strata_handshake *hs) {
  if (hs->stage == STAGE_REJECTING || hs->stage == STAGE_LINGER) return 2;
  return hs->stage == STAGE_HELLO && hs->in_got == 0 ? 1 : 0;
}

short strata_handshake_events(const strata_handshake *hs) {
  switch (hs->stage) {
    case STAGE_DONE:
      return 0;
    case STAGE_REJECTING:
      return POLLOUT;
    case STAGE_LINGER:
      return POLLIN;
    case STAGE_FINAL:
      return POLLOUT;
    default:
      return (short)(POLLIN | (hs->out_sent < sizeof hs->out ? POLLOUT : 0));
  }
}
