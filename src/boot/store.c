// SPDX-License-Identifier: Apache-2.0
/*
 * store.c — the rendezvous store's client: connect, set, get, wait, add over one TCP connection.
 *
 * Every call sends one request frame (store_wire.h) and reads frames until the reply with its
 * request id arrives or its deadline passes. The deadline is enforced here, with poll(), so a
 * silent or stuck server gives STRATA_ERR_TIMEOUT; the server also knows the timeout of a
 * GET/WAIT and drops its waiter, so abandoned waits do not pile up there. A reply that arrives
 * after its call gave up is discarded by id, which keeps the connection usable after a timeout.
 * Input is buffered across calls, so a timeout in the middle of a frame loses nothing.
 *
 * A store can also be the caller's (strata_store_from_ops: torch's c10d::Store behind callbacks);
 * then every call goes to its callbacks, and the address peers reach us at comes from this host's
 * route towards the job's rendezvous host instead of the connection's own local address.
 *
 * A rank whose rank 0 serves the store connects with strata_store_connect_job: its HELLO
 * (store_wire.h) makes sure the store it talks to is its own communicator's. A store that
 * refuses it belongs to an earlier communicator of the job (or another job) and is about to
 * close; the client waits for exactly that close, then connects again and finds the new one.
 *
 * Every connection first proves the job key (store_wire.h: AUTH) and checks the store's proof in
 * turn, so a rank never publishes its address to, or takes a peer's from, a stranger posing as
 * the store. The key is derived before connecting (Argon2id is slow on purpose, and the server
 * gives a stranger only STORE_SERVER_AUTH_TIMEOUT_S to answer). A refusal is final: retrying with
 * the same key cannot succeed. A connection closed before the exchange completes (a store that
 * is going away, or one that evicted us among a flood of strangers) is retried until the
 * deadline.
 *
 * A closed or reset connection gives STRATA_ERR_PEER_LOST and every later call on the handle
 * fails the same way. One mutex makes a handle safe to share between threads (calls serialize).
 * Must never: block without a deadline, or raise SIGPIPE (sends use MSG_NOSIGNAL).
 */
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "boot/store.h"
#include "boot/store_net.h"
#include "boot/store_wire.h"
#include "core/core.h"
#include "core/store.h"

/* Both stores of this file (a client of the server, and the caller's callbacks) are this struct
 * behind one implementation table (core/store.h), `impl` below. */
static const strata_store_impl impl;

struct strata_store {
  strata_store_head head; /* first: core/store.c dispatches through it */
  int has_ops;            /* the caller's store: ops and local_host below, no socket */
  strata_store_ops ops;
  char local_host[64];
  int fd;
  int broken; /* STRATA_OK, or the error every later call returns */
  pthread_mutex_t lock;
  uint32_t next_request_id;
  double op_timeout_s; /* for SET and ADD, which the server answers at once */
  uint8_t *in;
  size_t in_len, in_cap;
};

/* ---- reaching the server's port ---- */

/* One non-blocking connect attempt to ai, bounded by deadline_s. Returns the fd or -1 (errno). */
static int connect_once(const struct addrinfo *ai, double deadline_s) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) goto fail;
  struct pollfd pfd = {.fd = fd, .events = POLLOUT};
  int ready;
  do ready = poll(&pfd, 1, store_net_poll_ms(deadline_s));
  while (ready < 0 && errno == EINTR);
  if (ready == 0) errno = ETIMEDOUT;
  if (ready <= 0) goto fail;
  int so_error = 0;
  socklen_t len = sizeof so_error;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) goto fail;
  if (so_error == 0) return fd;
  errno = so_error;
fail:;
  int saved = errno;
  close(fd);
  errno = saved;
  return -1;
}

static void sleep_s(double s) {
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Resolves and connects, retrying refused/unreachable attempts with backoff until deadline_s.
 * Returns an fd, or a negative status (*last_errno: why the last attempt failed, 0 if none
 * was made). */
static int connect_retrying(const char *addr, const char *host, const char *port, double deadline_s,
                            int *last_errno) {
  double backoff_s = 0.01;
  for (;;) {
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *list = NULL;
    int gai = getaddrinfo(host, port, &hints, &list);
    if (gai != 0 && gai != EAI_AGAIN) {
      STRATA_LOG(STRATA_LOG_ERROR, -1, "store: cannot resolve host '%s' of %s: %s", host, addr,
                 gai_strerror(gai));
      return STRATA_ERR_NOT_FOUND;
    }
    for (struct addrinfo *ai = list; ai; ai = ai->ai_next) {
      int fd = connect_once(ai, deadline_s);
      if (fd >= 0) {
        freeaddrinfo(list);
        return fd;
      }
      *last_errno = errno;
    }
    if (list) freeaddrinfo(list);
    double left_s = deadline_s - store_net_now_s();
    if (left_s <= 0) return STRATA_ERR_TIMEOUT;
    sleep_s(backoff_s < left_s ? backoff_s : left_s);
    if (backoff_s < 0.5) backoff_s *= 2;
  }
}

static void store_close(strata_store *s) {
  if (!s) return;
  if (s->has_ops) {
    free(s);
    return;
  }
  if (s->fd >= 0) close(s->fd);
  pthread_mutex_destroy(&s->lock);
  free(s->in);
  free(s);
}

static int store_local_host(const strata_store *s, char *host, size_t len) {
  if (!s || !host || len == 0) return STRATA_ERR_INVALID_ARG;
  if (s->has_ops) {
    snprintf(host, len, "%s", s->local_host);
    return STRATA_OK;
  }
  struct sockaddr_storage local;
  socklen_t local_len = sizeof local;
  if (getsockname(s->fd, (struct sockaddr *)&local, &local_len) != 0) return STRATA_ERR_SYSTEM;
  store_net_format_host(&local, host, len);
  return strcmp(host, "?") ? STRATA_OK : STRATA_ERR_SYSTEM;
}

/* ---- one request, one reply ---- */

/* Sends all of buf by deadline_s. A partial send leaves the stream torn: the handle breaks. */
static int send_all(strata_store *s, const uint8_t *buf, size_t len, double deadline_s) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = send(s->fd, buf + off, len - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return s->broken = STRATA_ERR_PEER_LOST;
    struct pollfd pfd = {.fd = s->fd, .events = POLLOUT};
    int ready = poll(&pfd, 1, store_net_poll_ms(deadline_s));
    if (ready == 0) {
      if (off > 0) s->broken = STRATA_ERR_PEER_LOST;
      return STRATA_ERR_TIMEOUT;
    }
    if (ready < 0 && errno != EINTR) return s->broken = STRATA_ERR_SYSTEM;
  }
  return STRATA_OK;
}

/* Reads more input (waiting until deadline_s). */
static int receive_some(strata_store *s, double deadline_s) {
  if (s->in_cap - s->in_len < 4096) {
    size_t cap = s->in_cap ? s->in_cap * 2 : 8192;
    uint8_t *in = realloc(s->in, cap);
    if (!in) return STRATA_ERR_NO_MEMORY;
    s->in = in;
    s->in_cap = cap;
  }
  for (;;) {
    ssize_t n = recv(s->fd, s->in + s->in_len, s->in_cap - s->in_len, 0);
    if (n > 0) {
      s->in_len += (size_t)n;
      return STRATA_OK;
    }
    if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
      return s->broken = STRATA_ERR_PEER_LOST;
    if (errno == EINTR) continue;
    struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
    int ready = poll(&pfd, 1, store_net_poll_ms(deadline_s));
    if (ready == 0) return STRATA_ERR_TIMEOUT;
    if (ready < 0 && errno != EINTR) return s->broken = STRATA_ERR_SYSTEM;
  }
}

/* Waits for the reply to request_id. On STRATA_OK from the server, *body (malloc'd, may be NULL
 * when empty) and *body_len hold its body. Returns the server's status or a local error. */
static int receive_reply(strata_store *s, uint32_t request_id, double deadline_s, uint8_t **body,
                         size_t *body_len) {
  for (;;) {
    while (s->in_len >= 4) {
      uint32_t len = store_wire_get_u32(s->in);
      if (len < STORE_WIRE_REPLY_HEADER_BYTES || len > STORE_WIRE_MAX_FRAME_BYTES)
        return s->broken = STRATA_ERR_PROTOCOL;
      if (s->in_len - 4 < len) break;
      const uint8_t *p = s->in + 4;
      if (store_wire_get_u16(p) != STORE_WIRE_MAGIC) return s->broken = STRATA_ERR_PROTOCOL;
      if (p[2] != STORE_WIRE_VERSION) return s->broken = STRATA_ERR_VERSION;
      uint32_t id = store_wire_get_u32(p + 4);
      int status = (int32_t)store_wire_get_u32(p + 8);
      size_t n = len - STORE_WIRE_REPLY_HEADER_BYTES;
      int mine = id == request_id;
      if (mine && n > 0) {
        if (!(*body = malloc(n))) return STRATA_ERR_NO_MEMORY;
        memcpy(*body, p + STORE_WIRE_REPLY_HEADER_BYTES, n);
      }
      if (mine) *body_len = n;
      memmove(s->in, s->in + 4 + len, s->in_len - 4 - len);
      s->in_len -= 4 + (size_t)len;
      if (mine) return status; /* other ids: late replies of calls that gave up */
    }
    int status = receive_some(s, deadline_s);
    if (status != STRATA_OK) return status;
  }
}

/* Frames body as a request, sends it and waits for the reply (see receive_reply). */
static int call(strata_store *s, uint8_t op, const uint8_t *body, size_t len, double timeout_s,
                uint8_t **reply, size_t *reply_len) {
  *reply = NULL;
  *reply_len = 0;
  if (4 + STORE_WIRE_REQUEST_HEADER_BYTES + len > STORE_WIRE_MAX_FRAME_BYTES)
    return STRATA_ERR_INVALID_ARG;
  double deadline_s = store_net_now_s() + timeout_s;
  double timeout_ms = timeout_s * 1000.0;
  uint32_t wire_timeout_ms = timeout_ms >= 4e9 ? 4000000000u : (uint32_t)(timeout_ms + 0.999);
  uint8_t *frame = malloc(4 + STORE_WIRE_REQUEST_HEADER_BYTES + len);
  if (!frame) return STRATA_ERR_NO_MEMORY;
  pthread_mutex_lock(&s->lock);
  int status = s->broken;
  if (status == STRATA_OK) {
    if (s->next_request_id == STORE_WIRE_CHALLENGE_ID) s->next_request_id++;
    uint32_t id = s->next_request_id++;
    store_wire_put_u32(frame, (uint32_t)(STORE_WIRE_REQUEST_HEADER_BYTES + len));
    store_wire_put_u16(frame + 4, STORE_WIRE_MAGIC);
    frame[6] = STORE_WIRE_VERSION;
    frame[7] = op;
    store_wire_put_u32(frame + 8, id);
    store_wire_put_u32(frame + 12, wire_timeout_ms);
    if (len) memcpy(frame + 4 + STORE_WIRE_REQUEST_HEADER_BYTES, body, len);
    status = send_all(s, frame, 4 + STORE_WIRE_REQUEST_HEADER_BYTES + len, deadline_s);
    if (status == STRATA_OK) status = receive_reply(s, id, deadline_s, reply, reply_len);
  }
  pthread_mutex_unlock(&s->lock);
  free(frame);
  return status;
}

/* Appends a u32-length-prefixed string or byte run at *p. */
static uint8_t *put_bytes(uint8_t *p, const void *bytes, size_t len) {
  store_wire_put_u32(p, (uint32_t)len);
  if (len) memcpy(p + 4, bytes, len);
  return p + 4 + len;
}

/* ---- connecting, as anyone or as a rank of a job ---- */

/* Drops the connection so the handle can connect again. */
static void disconnect(strata_store *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  s->broken = STRATA_OK;
  s->in_len = 0;
}

/* Waits until the server closes fd (what a store that refused our HELLO does when its
 * communicator goes away). Anything it still sends is discarded. */
static int wait_closed(int fd, double deadline_s) {
  uint8_t sink[256];
  for (;;) {
    ssize_t n = recv(fd, sink, sizeof sink, 0);
    if (n == 0) return STRATA_OK;
    if (n > 0 || errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return STRATA_OK; /* reset: closed too */
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int ready = poll(&pfd, 1, store_net_poll_ms(deadline_s));
    if (ready == 0) return STRATA_ERR_TIMEOUT;
    if (ready < 0 && errno != EINTR) return STRATA_ERR_SYSTEM;
  }
}

/* How long a connected store has to send its challenge before we connect again. */
static const double STORE_CHALLENGE_S = 1.0;

/* What store_connect knows of the last store it reached, besides a store_wire_verdict. */
enum {
  NO_VERDICT = -1,
  HELLO_UNANSWERED = -2,
  AUTH_UNANSWERED = -3,
  AUTH_REFUSED = -4,
  AUTH_UNPROVEN = -5
};

/* The exchange that opens every connection (store_wire.h: AUTH): the store's challenge, our
 * proof, its proof. *verdict says which step failed, for the log. */
static int authenticate(strata_store *s, const uint8_t key[32], double deadline_s, int *verdict) {
  uint8_t *challenge = NULL, *reply = NULL;
  size_t challenge_len = 0, reply_len = 0;
  *verdict = AUTH_UNANSWERED;
  /* a live store sends its challenge as it accepts: one that does not within STORE_CHALLENGE_S
   * is going away (its listening socket took us into its backlog), so we connect again rather
   * than wait out the whole timeout on it */
  double challenge_by_s = store_net_now_s() + STORE_CHALLENGE_S;
  if (challenge_by_s > deadline_s) challenge_by_s = deadline_s;
  pthread_mutex_lock(&s->lock);
  int status =
      receive_reply(s, STORE_WIRE_CHALLENGE_ID, challenge_by_s, &challenge, &challenge_len);
  if (status == STRATA_ERR_TIMEOUT && challenge_by_s < deadline_s) status = STRATA_ERR_PEER_LOST;
  pthread_mutex_unlock(&s->lock);
  if (status == STRATA_OK && challenge_len != STORE_WIRE_AUTH_BYTES) status = STRATA_ERR_PROTOCOL;
  uint8_t body[2 * STORE_WIRE_AUTH_BYTES];
  if (status == STRATA_OK) {
    randombytes_buf(body, STORE_WIRE_AUTH_BYTES);
    store_net_auth_mac(key, STORE_NET_CLIENT_DOMAIN, challenge, body, body + STORE_WIRE_AUTH_BYTES);
    double left_s = deadline_s - store_net_now_s();
    status = left_s > 0 ? call(s, STORE_WIRE_AUTH, body, sizeof body, left_s, &reply, &reply_len)
                        : STRATA_ERR_TIMEOUT;
    if (status == STRATA_ERR_AUTH) *verdict = AUTH_REFUSED;
  }
  if (status == STRATA_OK) {
    uint8_t expected[32];
    store_net_auth_mac(key, STORE_NET_SERVER_DOMAIN, challenge, body, expected);
    if (reply_len != sizeof expected || sodium_memcmp(reply, expected, sizeof expected) != 0) {
      *verdict = AUTH_UNPROVEN;
      status = STRATA_ERR_AUTH;
    }
  }
  if (status == STRATA_OK) *verdict = NO_VERDICT;
  free(challenge);
  free(reply);
  return status;
}

/* Says who we are; *verdict gets the store's answer (store_wire_verdict). */
static int say_hello(strata_store *s, const char *job_id, int rank, int nranks, double deadline_s,
                     int *verdict) {
  size_t job_len = strlen(job_id);
  uint8_t body[4 + STORE_WIRE_MAX_KEY_BYTES + 8];
  uint8_t *p = put_bytes(body, job_id, job_len);
  store_wire_put_u32(p, (uint32_t)rank);
  store_wire_put_u32(p + 4, (uint32_t)nranks);
  double left_s = deadline_s - store_net_now_s();
  if (left_s <= 0) return STRATA_ERR_TIMEOUT;
  uint8_t *reply;
  size_t reply_len;
  int status = call(s, STORE_WIRE_HELLO, body, 4 + job_len + 8, left_s, &reply, &reply_len);
  if (status == STRATA_OK && (reply_len != 1 || reply[0] > STORE_WIRE_OTHER_JOB))
    status = STRATA_ERR_PROTOCOL;
  if (status == STRATA_OK) *verdict = reply[0];
  free(reply);
  return status;
}

static void log_connect_failure(const char *addr, double timeout_s, int status, int last_errno,
                                int verdict, const char *job_id, int rank, int nranks) {
  if (verdict == AUTH_REFUSED) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "store: the store at %s refused us: we do not know its job secret (do this rank "
               "and the store have the same STRATA_SECRET and STRATA_JOB_ID?)",
               addr);
  } else if (verdict == AUTH_UNPROVEN) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "store: the server at %s did not prove it knows the job secret: it is not this "
               "job's store (or its STRATA_SECRET or STRATA_JOB_ID differs)",
               addr);
  } else if (status == STRATA_ERR_VERSION) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "store: the store at %s speaks another version of the store protocol (this is "
               "version %u): run the same strata on every rank and the store",
               addr, STORE_WIRE_VERSION);
  } else if (status != STRATA_ERR_TIMEOUT) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "store: cannot connect to %s: %s", addr,
               strata_strerror(status));
  } else if (verdict == STORE_WIRE_EARLIER) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "store: within %.1f s the store at %s kept serving an earlier communicator of job "
               "'%s' (an address serves one communicator at a time: is the earlier one still "
               "alive on rank 0?)",
               timeout_s, addr, job_id);
  } else if (verdict == STORE_WIRE_OTHER_JOB) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "store: within %.1f s the store at %s kept serving a communicator other than "
               "job '%s' of %d ranks (rank %d here): do all ranks have the same job id and world "
               "size?",
               timeout_s, addr, job_id, nranks, rank);
  } else {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "store: no store answered at %s within %.1f s (%s)", addr,
               timeout_s,
               verdict == HELLO_UNANSWERED ? "a server accepted the connection, then fell silent"
               : verdict == AUTH_UNANSWERED
                   ? "a server accepted the connection but did not complete the store's "
                     "authentication (an older strata store, or not a store?)"
               : last_errno ? strerror(last_errno)
                            : "name lookup kept failing");
  }
}

/* Connects, proving the key of (secret, key_job); with a job_id, to the store of that job's
 * current communicator only (HELLO). */
static int store_connect(const char *addr, const char *secret, const char *key_job,
                         const char *job_id, int rank, int nranks, double timeout_s,
                         strata_store **out) {
  if (!out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  if (job_id && (rank < 0 || rank >= nranks || strlen(job_id) > STORE_WIRE_MAX_KEY_BYTES))
    return STRATA_ERR_INVALID_ARG;
  char host[256], err[320], port_text[16];
  int port;
  int status = strata_store_addr_parse(addr, 0, host, sizeof host, &port, err, sizeof err);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "store: %s", err);
    return status;
  }
  if (port == 0 || !(timeout_s > 0)) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "store: cannot connect to %s: %s", addr,
               port == 0 ? "port 0 is not a server's port" : "the timeout must be > 0");
    return STRATA_ERR_INVALID_ARG;
  }
  snprintf(port_text, sizeof port_text, "%d", port);
  uint8_t key[32];
  status = store_net_auth_key(secret, key_job, key);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "store: cannot derive the job key: %s",
               strata_strerror(status));
    return status;
  }
  strata_store *s = calloc(1, sizeof *s);
  if (s) s->head.impl = &impl;
  if (!s) return STRATA_ERR_NO_MEMORY;
  s->fd = -1;
  s->op_timeout_s = timeout_s;
  s->next_request_id = 1;
  pthread_mutex_init(&s->lock, NULL);
  double deadline_s = store_net_now_s() + timeout_s, backoff_s = 0.01;
  int last_errno = 0, verdict = NO_VERDICT; /* the last store's answer to HELLO */
  for (;;) {
    int fd = connect_retrying(addr, host, port_text, deadline_s, &last_errno);
    if (fd < 0) {
      status = fd;
      break;
    }
    store_net_set_nodelay(fd);
    s->fd = fd;
    status = authenticate(s, key, deadline_s, &verdict);
    if (status == STRATA_OK && !job_id) break;
    if (status == STRATA_OK) {
      status = say_hello(s, job_id, rank, nranks, deadline_s, &verdict);
      if (status == STRATA_OK && verdict == STORE_WIRE_WELCOME) break;
      if (status == STRATA_ERR_TIMEOUT) verdict = HELLO_UNANSWERED;
    }
    if (status == STRATA_OK) {
      STRATA_LOG(STRATA_LOG_DEBUG, -1, "store: %s serves %s; waiting for it to close", addr,
                 verdict == STORE_WIRE_EARLIER ? "an earlier communicator" : "another job");
      status = wait_closed(fd, deadline_s);
    } else if (status == STRATA_ERR_PEER_LOST) {
      /* closed before answering: a store going away (or one that knows no HELLO) */
      double left_s = deadline_s - store_net_now_s();
      status = left_s > 0 ? STRATA_OK : STRATA_ERR_TIMEOUT;
      if (left_s > 0) sleep_s(backoff_s < left_s ? backoff_s : left_s);
      if (backoff_s < 0.5) backoff_s *= 2;
    }
    if (status != STRATA_OK) break;
    disconnect(s);
  }
  sodium_memzero(key, sizeof key);
  if (status != STRATA_OK) {
    if (status != STRATA_ERR_NOT_FOUND) /* a name that does not resolve is logged where it fails */
      log_connect_failure(addr, timeout_s, status, last_errno, verdict, job_id, rank, nranks);
    strata_store_close(s);
    return status;
  }
  *out = s;
  return STRATA_OK;
}

int strata_store_connect(const char *addr, double timeout_s, strata_store **out) {
  if (strata_store_is_etcd_url(addr))
    return strata_store_connect_etcd(addr, "", "", timeout_s, out);
  return store_connect(addr, "", "", NULL, 0, 1, timeout_s, out);
}

int strata_store_connect_auth(const char *addr, const char *secret, const char *job_id,
                              double timeout_s, strata_store **out) {
  if (strata_store_is_etcd_url(addr))
    return strata_store_connect_etcd(addr, secret, job_id, timeout_s, out);
  return store_connect(addr, secret, job_id, NULL, 0, 1, timeout_s, out);
}

int strata_store_connect_job(const char *addr, const char *job_id, int rank, int nranks,
                             double timeout_s, strata_store **out) {
  return strata_store_connect_job_auth(addr, "", job_id, rank, nranks, timeout_s, out);
}

int strata_store_connect_job_auth(const char *addr, const char *secret, const char *job_id,
                                  int rank, int nranks, double timeout_s, strata_store **out) {
  if (!job_id) {
    if (out) *out = NULL;
    return STRATA_ERR_INVALID_ARG;
  }
  return store_connect(addr, secret, job_id, job_id, rank, nranks, timeout_s, out);
}

const char *strata_store_address(const strata_config *cfg) {
  return cfg->store_url[0] ? cfg->store_url : cfg->store_addr;
}

/* ---- the caller's store ---- */

/* A get through the callbacks, which must hand back malloc'd memory even for an empty value
 * (strata frees it; callers of strata_store_get test the pointer). */
/* A callback's status as a strata_status: anything else it returns is a failure of its own. */
static int ops_status(int status) {
  return status == STRATA_OK || (status < 0 && status >= STRATA_STATUS_MIN) ? status
                                                                            : STRATA_ERR_SYSTEM;
}

static int ops_get(strata_store *s, const char *key, void **value, size_t *len, double timeout_s) {
  *value = NULL;
  *len = 0;
  int status = ops_status(s->ops.get(s->ops.context, key, value, len, timeout_s));
  if (status != STRATA_OK) {
    free(*value);
    *value = NULL;
    *len = 0;
    return status;
  }
  if (!*value && *len) { /* a length with no bytes behind it */
    *len = 0;
    return STRATA_ERR_PROTOCOL;
  }
  if (!*value && !(*value = malloc(1))) return STRATA_ERR_NO_MEMORY;
  return STRATA_OK;
}

static int ops_wait(strata_store *s, const char *const *keys, size_t nkeys, double timeout_s) {
  double deadline_s = store_net_now_s() + timeout_s;
  for (size_t i = 0; i < nkeys; i++) {
    double left_s = deadline_s - store_net_now_s();
    void *value = NULL;
    size_t len = 0;
    int status = ops_get(s, keys[i], &value, &len, left_s > 0 ? left_s : 0);
    free(value);
    if (status != STRATA_OK) return status;
  }
  return STRATA_OK;
}

/* The address of this host's route towards `host` (a UDP socket connected there sends nothing),
 * else the first non-loopback IPv4 address that is up, else 127.0.0.1. */
static void route_host(const char *host, char *out, size_t len) {
  snprintf(out, len, "127.0.0.1");
  struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *found = NULL;
  if (host && *host && getaddrinfo(host, "9", &hints, &found) == 0) {
    for (struct addrinfo *ai = found; ai; ai = ai->ai_next) {
      int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      struct sockaddr_storage local;
      socklen_t local_len = sizeof local;
      int ok = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
               getsockname(fd, (struct sockaddr *)&local, &local_len) == 0;
      close(fd);
      if (ok) {
        store_net_format_host(&local, out, len);
        freeaddrinfo(found);
        return;
      }
    }
    freeaddrinfo(found);
  }
  struct ifaddrs *interfaces = NULL;
  if (getifaddrs(&interfaces) != 0) return;
  for (struct ifaddrs *i = interfaces; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) ||
        !(i->ifa_flags & IFF_UP))
      continue;
    store_net_format_host(i->ifa_addr, out, len);
    break;
  }
  freeifaddrs(interfaces);
}

int strata_store_from_ops(const strata_store_ops *ops, const char *rendezvous_host,
                          strata_store **out) {
  if (!out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  if (!ops || !ops->set || !ops->get || !ops->add) return STRATA_ERR_INVALID_ARG;
  strata_store *s = calloc(1, sizeof *s);
  if (s) s->head.impl = &impl;
  if (!s) return STRATA_ERR_NO_MEMORY;
  s->has_ops = 1;
  s->ops = *ops;
  s->fd = -1;
  route_host(rendezvous_host, s->local_host, sizeof s->local_host);
  *out = s;
  return STRATA_OK;
}

static int key_ok(const char *key) {
  size_t n = key ? strlen(key) : 0;
  return n > 0 && n <= STORE_WIRE_MAX_KEY_BYTES;
}

static int store_set(strata_store *s, const char *key, const void *value, size_t len) {
  if (!s || !key_ok(key) || (!value && len) || len > STORE_WIRE_MAX_VALUE_BYTES)
    return STRATA_ERR_INVALID_ARG;
  if (s->has_ops) return ops_status(s->ops.set(s->ops.context, key, value ? value : "", len));
  size_t key_len = strlen(key);
  uint8_t *body = malloc(8 + key_len + len);
  if (!body) return STRATA_ERR_NO_MEMORY;
  put_bytes(put_bytes(body, key, key_len), value, len);
  uint8_t *reply;
  size_t reply_len;
  int status =
      call(s, STORE_WIRE_SET, body, 8 + key_len + len, s->op_timeout_s, &reply, &reply_len);
  free(body);
  free(reply);
  return status;
}

static int store_set_if_absent(strata_store *s, const char *key, const void *value, size_t len,
                               int *was_set) {
  if (!s || !key_ok(key) || (!value && len) || len > STORE_WIRE_MAX_VALUE_BYTES || !was_set)
    return STRATA_ERR_INVALID_ARG;
  *was_set = 0;
  if (s->has_ops) {
    if (!s->ops.set_if_absent) return STRATA_ERR_UNSUPPORTED;
    return ops_status(s->ops.set_if_absent(s->ops.context, key, value ? value : "", len, was_set));
  }
  size_t key_len = strlen(key);
  uint8_t *body = malloc(8 + key_len + len);
  if (!body) return STRATA_ERR_NO_MEMORY;
  put_bytes(put_bytes(body, key, key_len), value, len);
  uint8_t *reply = NULL;
  size_t reply_len = 0;
  int status = call(s, STORE_WIRE_SET_IF_ABSENT, body, 8 + key_len + len, s->op_timeout_s, &reply,
                    &reply_len);
  free(body);
  if (status == STRATA_OK && reply_len != 1) status = STRATA_ERR_PROTOCOL;
  if (status == STRATA_OK) *was_set = reply[0] == 1;
  free(reply);
  return status;
}

static int store_get(strata_store *s, const char *key, void **value, size_t *len,
                     double timeout_s) {
  if (!s || !key_ok(key) || !value || !len || !(timeout_s >= 0)) return STRATA_ERR_INVALID_ARG;
  *value = NULL;
  *len = 0;
  if (s->has_ops) return ops_get(s, key, value, len, timeout_s);
  size_t key_len = strlen(key);
  uint8_t body[4 + STORE_WIRE_MAX_KEY_BYTES];
  put_bytes(body, key, key_len);
  uint8_t *reply;
  size_t reply_len;
  int status = call(s, STORE_WIRE_GET, body, 4 + key_len, timeout_s, &reply, &reply_len);
  if (status == STRATA_OK) {
    if (reply_len < 4 || store_wire_get_u32(reply) != reply_len - 4) {
      status = STRATA_ERR_PROTOCOL;
    } else {
      /* hand back a buffer that starts at the value (and is non-NULL even when empty) */
      uint8_t *copy = malloc(reply_len - 4 ? reply_len - 4 : 1);
      if (!copy) {
        status = STRATA_ERR_NO_MEMORY;
      } else {
        memcpy(copy, reply + 4, reply_len - 4);
        *value = copy;
        *len = reply_len - 4;
      }
    }
  }
  free(reply);
  return status;
}

/* A request whose body is "u32 n, n x str key" (WAIT, COUNTS). */
static int call_keys(strata_store *s, uint8_t op, const char *const *keys, size_t nkeys,
                     double timeout_s, uint8_t **reply, size_t *reply_len) {
  size_t len = 4;
  for (size_t i = 0; i < nkeys; i++) {
    if (!key_ok(keys[i])) return STRATA_ERR_INVALID_ARG;
    len += 4 + strlen(keys[i]);
  }
  uint8_t *body = malloc(len), *p = body + 4;
  if (!body) return STRATA_ERR_NO_MEMORY;
  store_wire_put_u32(body, (uint32_t)nkeys);
  for (size_t i = 0; i < nkeys; i++) p = put_bytes(p, keys[i], strlen(keys[i]));
  int status = call(s, op, body, len, timeout_s, reply, reply_len);
  free(body);
  return status;
}

/* A request whose body is "str key, u64 number" and whose reply is one u64 (ADD, WAIT_COUNT). */
static int call_key_u64(strata_store *s, uint8_t op, const char *key, uint64_t number,
                        double timeout_s, int64_t *answer) {
  size_t key_len = strlen(key);
  uint8_t body[4 + STORE_WIRE_MAX_KEY_BYTES + 8];
  store_wire_put_u64(put_bytes(body, key, key_len), number);
  uint8_t *reply;
  size_t reply_len;
  int status = call(s, op, body, 4 + key_len + 8, timeout_s, &reply, &reply_len);
  if (status == STRATA_OK && reply_len != 8) status = STRATA_ERR_PROTOCOL;
  if (status == STRATA_OK && answer) *answer = (int64_t)store_wire_get_u64(reply);
  free(reply);
  return status;
}

static int store_wait(strata_store *s, const char *const *keys, size_t nkeys, double timeout_s) {
  if (!s || (!keys && nkeys) || nkeys > STORE_WIRE_MAX_WAIT_KEYS || !(timeout_s >= 0))
    return STRATA_ERR_INVALID_ARG;
  if (nkeys == 0) return STRATA_OK;
  if (s->has_ops) return ops_wait(s, keys, nkeys, timeout_s);
  uint8_t *reply = NULL;
  size_t reply_len;
  int status = call_keys(s, STORE_WIRE_WAIT, keys, nkeys, timeout_s, &reply, &reply_len);
  free(reply);
  return status;
}

static int store_add(strata_store *s, const char *key, int64_t delta, int64_t *result) {
  if (!s || !key_ok(key)) return STRATA_ERR_INVALID_ARG;
  if (s->has_ops) {
    int64_t ignored;
    return ops_status(s->ops.add(s->ops.context, key, delta, result ? result : &ignored));
  }
  return call_key_u64(s, STORE_WIRE_ADD, key, (uint64_t)delta, s->op_timeout_s, result);
}

static int store_wait_count(strata_store *s, const char *key, int64_t target, int64_t *value,
                            double timeout_s) {
  if (!key_ok(key)) return STRATA_ERR_INVALID_ARG;
  if (s->has_ops) return STRATA_ERR_UNSUPPORTED; /* core/store.c polls the callbacks' add */
  return call_key_u64(s, STORE_WIRE_WAIT_COUNT, key, (uint64_t)target, timeout_s, value);
}

static int store_read_counts(strata_store *s, const char *const *keys, size_t nkeys,
                             int64_t *values) {
  if (nkeys > STORE_WIRE_MAX_WAIT_KEYS) return STRATA_ERR_INVALID_ARG;
  if (s->has_ops) return STRATA_ERR_UNSUPPORTED; /* core/store.c adds 0 to each */
  uint8_t *reply = NULL;
  size_t reply_len = 0;
  int status = call_keys(s, STORE_WIRE_COUNTS, keys, nkeys, s->op_timeout_s, &reply, &reply_len);
  if (status == STRATA_OK && reply_len != nkeys * 8) status = STRATA_ERR_PROTOCOL;
  for (size_t i = 0; status == STRATA_OK && i < nkeys; i++)
    values[i] = (int64_t)store_wire_get_u64(reply + 8 * i);
  free(reply);
  return status;
}

static const strata_store_impl impl = {.set = store_set,
                                       .wait_count = store_wait_count,
                                       .read_counts = store_read_counts,
                                       .set_if_absent = store_set_if_absent,
                                       .get = store_get,
                                       .wait = store_wait,
                                       .add = store_add,
                                       .local_host = store_local_host,
                                       .close = store_close};
