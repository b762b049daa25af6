/*
 * handshake.c — proving, on every TCP connection, that the other end is a rank of the same job,
 * speaking the same protocol, holding the same secret.
 *
 * The protocol is symmetric; both ends run the same three steps without waiting for each other:
 *
 *     HELLO   magic, version, job id, rank, world size, streams, stream index, a fresh nonce
 *     AUTH    HMAC-SHA256(key = SHA-256(secret), "strata-auth-v1" | verifier's nonce |
 *             prover's nonce | prover rank | verifier rank | stream | world size | streams |
 *             version | job id)
 *     verdict ACCEPT, or REJECT with a reason code
 *
 * Each side checks the peer's HELLO in a fixed order — magic, version, job id, world size and
 * stream count, rank and stream — then the peer's AUTH against its own nonce (constant-time
 * compare). The first failed check is sent to the peer as REJECT(reason) in place of the next
 * record, so BOTH ends can say which check failed: the refuser reports its own finding and the
 * refused side reports the REJECT it read. Binding both nonces and both ranks into the MAC stops
 * replay (fresh nonces) and reflection (prover and verifier ranks differ).
 *
 * After sending a REJECT the refuser shuts down its write side and drains what the peer still
 * sends for a short linger, so closing never turns into a RST that could destroy the REJECT
 * before the peer reads it.
 *
 * Invariants: a record is read with exactly the bytes it has left, never more, so the first data
 * frame after the handshake is untouched; nothing here blocks — the caller polls with
 * strata_handshake_events() and enforces the deadline with strata_handshake_expire().
 * Must never: trust a length or index from the peer before checking it, or compare secrets with
 * memcmp.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "net/handshake.h"

enum {
  STAGE_HELLO = 0, /* waiting for the peer's HELLO */
  STAGE_AUTH,      /* waiting for the peer's AUTH */
  STAGE_VERDICT,   /* waiting for the peer's ACCEPT */
  STAGE_REJECTING, /* sending our REJECT */
  STAGE_LINGER,    /* REJECT sent, write side shut; draining until EOF or the linger ends */
  STAGE_DONE
};

static const double HANDSHAKE_LINGER_S = 0.25;
static const char MAC_DOMAIN[] = "strata-auth-v1";

int strata_handshake_params_init(strata_handshake_params *params, const char *job_id,
                                 const char *secret, int rank, int nranks, int streams) {
  if (sodium_init() < 0) return STRATA_ERR_SYSTEM;
  memset(params, 0, sizeof *params);
  if (strlen(job_id) >= sizeof params->job_id) return STRATA_ERR_INVALID_ARG;
  strncpy(params->job_id, job_id, sizeof params->job_id - 1);
  crypto_hash_sha256(params->key, (const unsigned char *)secret, strlen(secret));
  params->version = STRATA_WIRE_VERSION;
  params->rank = rank;
  params->nranks = nranks;
  params->streams = streams;
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

/* MAC proving knowledge of the key, bound to both nonces and the connection's identity. */
static void compute_mac(uint8_t mac[STRATA_WIRE_MAC_BYTES], const strata_handshake_params *p,
                        const uint8_t *verifier_nonce, const uint8_t *prover_nonce,
                        uint32_t prover_rank, uint32_t verifier_rank, uint32_t stream) {
  uint32_t fields[6] = {
      htole32(prover_rank),         htole32(verifier_rank),        htole32(stream),
      htole32((uint32_t)p->nranks), htole32((uint32_t)p->streams), htole32(p->version)};
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, p->key, sizeof p->key);
  crypto_auth_hmacsha256_update(&state, (const unsigned char *)MAC_DOMAIN, sizeof MAC_DOMAIN);
  crypto_auth_hmacsha256_update(&state, verifier_nonce, STRATA_WIRE_NONCE_BYTES);
  crypto_auth_hmacsha256_update(&state, prover_nonce, STRATA_WIRE_NONCE_BYTES);
  crypto_auth_hmacsha256_update(&state, (const unsigned char *)fields, sizeof fields);
  crypto_auth_hmacsha256_update(&state, (const unsigned char *)p->job_id, sizeof p->job_id);
  crypto_auth_hmacsha256_final(&state, mac);
  sodium_memzero(&state, sizeof state);
}

void strata_handshake_start(strata_handshake *hs, const strata_handshake_params *params, int fd,
                            int peer_rank, int stream) {
  memset(hs, 0, sizeof *hs);
  hs->params = params;
  hs->fd = fd;
  hs->peer_rank = peer_rank;
  hs->stream = stream;
  hs->accepting = peer_rank < 0;
  hs->claimed_rank = -1;
  hs->stage = STAGE_HELLO;
  hs->status = STRATA_ERR_IN_PROGRESS;
  randombytes_buf(hs->my_nonce, sizeof hs->my_nonce);
  record_init(hs, STRATA_WIRE_HELLO, 0);
  memcpy(hs->out.nonce, hs->my_nonce, sizeof hs->my_nonce);
  record_queue(hs);
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
  /* The dialing side names the stream; the accepting side's HELLO cannot know it yet (the MAC
   * binds both sides to the dialer's choice). */
  int rank_ok, stream_ok = 1;
  if (hs->accepting) {
    rank_ok = r->rank > (uint32_t)p->rank && r->rank < (uint32_t)p->nranks;
    stream_ok = r->stream <= (uint32_t)p->streams;
  } else {
    rank_ok = r->rank == (uint32_t)hs->peer_rank;
  }
  if (!rank_ok || !stream_ok)
    return refuse(hs, STRATA_WIRE_REJECT_RANK,
                  "unexpected rank %u / stream %u (this rank %s; is an old job still running "
                  "with the same address?)",
                  r->rank, r->stream, hs->accepting ? "accepts only higher ranks" : "dialed");
  hs->peer_rank = (int)r->rank;
  if (hs->accepting) hs->stream = (int)r->stream;
  memcpy(hs->peer_nonce, r->nonce, sizeof hs->peer_nonce);
  record_init(hs, STRATA_WIRE_AUTH, 0);
  compute_mac(hs->out.mac, p, hs->peer_nonce, hs->my_nonce, (uint32_t)p->rank,
              (uint32_t)hs->peer_rank, (uint32_t)hs->stream);
  record_queue(hs);
  hs->stage = STAGE_AUTH;
  return STRATA_ERR_IN_PROGRESS;
}

static int check_auth(strata_handshake *hs, const strata_wire_handshake *r) {
  const strata_handshake_params *p = hs->params;
  if (r->kind != STRATA_WIRE_AUTH)
    return refuse(hs, STRATA_WIRE_REJECT_PROTOCOL, "expected AUTH, got record kind %u", r->kind);
  uint8_t expected[STRATA_WIRE_MAC_BYTES];
  compute_mac(expected, p, hs->my_nonce, hs->peer_nonce, (uint32_t)hs->peer_rank, (uint32_t)p->rank,
              (uint32_t)hs->stream);
  int ok = sodium_memcmp(expected, r->mac, sizeof expected) == 0;
  sodium_memzero(expected, sizeof expected);
  if (!ok)
    return refuse(hs, STRATA_WIRE_REJECT_AUTH,
                  "wrong job secret (the peer does not know STRATA_SECRET)");
  record_init(hs, STRATA_WIRE_ACCEPT, 0);
  record_queue(hs);
  hs->stage = STAGE_VERDICT;
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
    default:
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
  static const char *const waiting_for[] = {"HELLO", "AUTH", "verdict"};
  snprintf(hs->err, sizeof hs->err,
           "rank %d: %s sent no %s within the timeout (not a strata peer, or stuck)",
           hs->params->rank, who, waiting_for[hs->stage < 3 ? hs->stage : 0]);
  fail(hs, STRATA_ERR_TIMEOUT);
}

short strata_handshake_events(const strata_handshake *hs) {
  switch (hs->stage) {
    case STAGE_DONE:
      return 0;
    case STAGE_REJECTING:
      return POLLOUT;
    case STAGE_LINGER:
      return POLLIN;
    default:
      return (short)(POLLIN | (hs->out_sent < sizeof hs->out ? POLLOUT : 0));
  }
}
