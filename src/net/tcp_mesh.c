// SPDX-License-Identifier: Apache-2.0
/*
 * tcp_mesh.c — connecting every pair of ranks with `streams` data connections and one control
 * connection, each authenticated by the handshake (handshake.c).
 *
 * Rank p listens on its advertised host (port 0), publishes "<job>/addr/<p>" = "host:port" in the
 * store, dials every rank q < p (streams + 1 connections, the stream index travels in the HELLO)
 * and accepts from every q > p. Publishing happens before any dialing and addresses are only read
 * for lower ranks, so no rank waits on one that waits on it.
 *
 * One poll loop drives everything at once: non-blocking connects (retried while the peer is not
 * listening yet), the accept queue and every handshake. A connection that sends garbage is
 * refused and dropped; one that says nothing just occupies a slot until the deadline — neither
 * can stall the others. A handshake that fails on a check (version, job, secret, world size)
 * fails the whole open at once with the handshake's sentence, because the job is misconfigured
 * and waiting would only turn a clear message into a timeout. A dialed connection that the peer
 * merely closed is a weaker signal (the peer may itself have just failed on another connection
 * with the precise reason), so it is reported only if nothing more precise arrives within
 * MESH_SOFT_ERROR_GRACE_S.
 *
 * Strangers. Anyone who can reach the listening port can connect, and until a connection proves
 * the job secret it is a stranger. Strangers are bounded the way the store bounds them
 * (store_server.c): at most unproven_cap at once (MESH_MAX_UNPROVEN, less when the descriptor
 * limit leaves less room after the job's own connections and MESH_FD_SLACK for the rest of the
 * process) and MESH_MAX_UNPROVEN_PER_SOURCE from one address; each has MESH_HANDSHAKE_DEADLINE_S
 * to prove itself. When they are all there, a new connection replaces the one that looks least
 * like a peer: one being refused, then one that has sent nothing, oldest first (a peer sends its
 * HELLO as soon as its connect completes), then a talking one that had MESH_EVICT_AGE_S. So a
 * crowd of idle connections is drained as fast as it queues and never holds the accept queue
 * shut, while descriptors stay for the real peers (and for the /proc reads of tcp_tune.c). When
 * accept() still runs out of descriptors the listener is left alone for MESH_ACCEPT_BACKOFF_S
 * rather than polled again at once. A peer's connection dropped that way before it proved itself
 * is dialed again (MESH_REDIALS times): a peer that is really gone refuses the new one.
 *
 * Must never: block past cfg->timeout_s, or leak a socket on any path.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "net/handshake.h"
#include "net/tcp_mesh.h"
#include "net/tcp_tune.h"

static const double MESH_CONNECT_RETRY_S = 0.05;
static const double MESH_SOFT_ERROR_GRACE_S = 0.5;
static const int MESH_POLL_SLICE_MS = 100;
static const double MESH_FAILURE_CHECK_S = 0.2;
enum { MESH_DROPS_WARNED = 3 };
static const double MESH_HANDSHAKE_DEADLINE_S = 3.0; /* a stranger's time to prove the secret */
static const double MESH_EVICT_AGE_S = 0.25;         /* a talking stranger this old may make room */
static const double MESH_ACCEPT_BACKOFF_S = 0.1;     /* out of descriptors: listener left alone */
enum {
  MESH_MAX_UNPROVEN = 512,
  MESH_MIN_UNPROVEN = 16,
  MESH_MAX_UNPROVEN_PER_SOURCE = 128, /* a host of many ranks dials with (streams + 1) each */
  MESH_FD_SLACK = 64,                 /* the store, shm segments, the application's files */
  MESH_ACCEPTS_PER_ROUND = 256,       /* then the handshakes in flight get their turn */
  MESH_REDIALS = 8
};

enum { CONN_RETRY_WAIT, CONN_CONNECTING, CONN_HANDSHAKE, CONN_FINISHED };

typedef struct mesh_conn {
  int fd;
  int dialing; /* 1: we connect to (peer, stream); 0: accepted, learned from the HELLO */
  int peer, stream;
  int phase;
  int last_errno; /* of the last failed connect attempt */
  int redials;    /* dialed again after the peer dropped it before the handshake ended */
  double retry_at_s;
  double accepted_s;
  struct sockaddr_storage addr;
  socklen_t addr_len;
  char addr_text[300];
  char lost[400]; /* why a connection that was dialed again had been dropped */
  strata_handshake hs;
} mesh_conn;

typedef struct mesh {
  const strata_config *cfg;
  strata_seal_keys *keys; /* [nranks * (streams + 1)] what each connection's handshake agreed */
  int rank, nranks, streams;
  strata_handshake_params params;
  int *fds;
  int connected, expected;
  int listen_fd;
  mesh_conn *conns;
  size_t nconns, conns_cap;
  struct pollfd *pollfds;
  double deadline_s;
  int hard_status;   /* first check that failed: ends the open at once */
  char refused[400]; /* why the last connection we accepted was dropped (for a timeout's message) */
  int dropped;       /* connections we accepted and dropped: only the first few are warned of */
  int soft_status;   /* a dialed connection was closed: ends it after the grace */
  double soft_deadline_s;
  int trouble_seen; /* a connect was refused or a handshake broke: a peer may have failed */
  double next_failure_check_s;
  size_t unproven, unproven_cap; /* accepted connections still in their handshake */
  unsigned long evicted;         /* strangers dropped to make room for newer ones */
  double listen_paused_until_s;
  double last_accept_error_log_s;
  strata_store *store;
  char prefix[128]; /* "<job>/tcp/<k>" */
  char *addresses;  /* [nranks][STRATA_TCP_ADDRESS_BYTES] */
  char *err;
  size_t err_len;
} mesh;

static int mesh_error(mesh *m, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int mesh_error(mesh *m, int status, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  if (m->err && m->err_len) vsnprintf(m->err, m->err_len, fmt, args);
  va_end(args);
  return status;
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---- listening and publishing ---- */

static int listen_on(mesh *m, const char *host, char *published, size_t published_len) {
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  int gai = getaddrinfo(host, "0", &hints, &ai);
  if (gai != 0)
    return mesh_error(m, STRATA_ERR_CONFIG, "rank %d: cannot resolve advertised host \"%s\": %s",
                      m->rank, host, gai_strerror(gai));
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    return mesh_error(m, STRATA_ERR_SYSTEM, "rank %d: socket: %s", m->rank, strerror(errno));
  }
  strata_tcp_tune_before_connect(m->cfg, fd); /* accepted sockets inherit it */
  int bound = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
  if (!bound && errno == EADDRNOTAVAIL) {
    /* advertised address is not ours (NAT, port forwarding): listen on every interface */
    struct sockaddr_storage any = {.ss_family = (sa_family_t)ai->ai_family};
    socklen_t len =
        ai->ai_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    bound = bind(fd, (struct sockaddr *)&any, len) == 0;
  }
  freeaddrinfo(ai);
  if (!bound || listen(fd, SOMAXCONN) != 0) {
    int saved = errno;
    close(fd);
    return mesh_error(m, STRATA_ERR_SYSTEM, "rank %d: cannot listen on %s: %s", m->rank, host,
                      strerror(saved));
  }
  struct sockaddr_storage local;
  socklen_t local_len = sizeof local;
  getsockname(fd, (struct sockaddr *)&local, &local_len);
  int port = local.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&local)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&local)->sin_port);
  snprintf(published, published_len, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
  snprintf(m->params.address, sizeof m->params.address, "%s", published);
  m->listen_fd = fd;
  return STRATA_OK;
}

static int publish_address(mesh *m, strata_store *store) {
  char host[256];
  if (m->cfg->advertise_host[0]) {
    snprintf(host, sizeof host, "%s", m->cfg->advertise_host);
  } else if (strata_store_local_host(store, host, sizeof host) != STRATA_OK) {
    snprintf(host, sizeof host, "127.0.0.1");
  }
  char address[300];
  int status = listen_on(m, host, address, sizeof address);
  if (status != STRATA_OK) return status;
  char key[192];
  snprintf(key, sizeof key, "%s/addr/%d", m->prefix, m->rank);
  status = strata_store_set(store, key, address, strlen(address));
  if (status != STRATA_OK)
    return mesh_error(m, status, "rank %d: cannot publish its address in the store: %s", m->rank,
                      strata_strerror(status));
  STRATA_LOG(STRATA_LOG_DEBUG, m->rank, "listening on %s", address);
  return STRATA_OK;
}

/* ---- dialing ---- */

static mesh_conn *conn_add(mesh *m) {
  if (m->nconns == m->conns_cap) {
    size_t cap = m->conns_cap ? 2 * m->conns_cap : 16;
    mesh_conn *conns = realloc(m->conns, cap * sizeof *conns);
    struct pollfd *pollfds = realloc(m->pollfds, (cap + 1) * sizeof *pollfds);
    if (conns) m->conns = conns;
    if (pollfds) m->pollfds = pollfds;
    if (!conns || !pollfds) return NULL;
    m->conns_cap = cap;
  }
  mesh_conn *c = &m->conns[m->nconns++];
  memset(c, 0, sizeof *c);
  c->fd = -1;
  return c;
}

/* Split "host:port" or "[v6]:port". */
static int parse_address(const char *text, char *host, size_t host_len, char *port,
                         size_t port_len) {
  const char *colon;
  if (text[0] == '[') {
    const char *close = strchr(text, ']');
    if (!close || close[1] != ':') return -1;
    snprintf(host, host_len, "%.*s", (int)(close - text - 1), text + 1);
    colon = close + 1;
  } else {
    colon = strrchr(text, ':');
    if (!colon) return -1;
    snprintf(host, host_len, "%.*s", (int)(colon - text), text);
  }
  snprintf(port, port_len, "%s", colon + 1);
  return host[0] && port[0] ? 0 : -1;
}

static int peer_sockaddr(mesh *m, strata_store *store, int peer, struct sockaddr_storage *addr,
                         socklen_t *addr_len, char *text, size_t text_len) {
  char key[192];
  snprintf(key, sizeof key, "%s/addr/%d", m->prefix, peer);
  void *value = NULL;
  size_t len = 0;
  double left = m->deadline_s - strata_now_s();
  int status = strata_store_get(store, key, &value, &len, left > 0 ? left : 0);
  if (status != STRATA_OK)
    return mesh_error(m, status, "rank %d: rank %d never published its address (%s): %s", m->rank,
                      peer, key, strata_strerror(status));
  snprintf(text, text_len, "%.*s", (int)(len < text_len ? len : text_len - 1), (char *)value);
  free(value);
  char host[256], port[32];
  if (parse_address(text, host, sizeof host, port, sizeof port) != 0)
    return mesh_error(m, STRATA_ERR_PROTOCOL, "rank %d: rank %d published a bad address \"%s\"",
                      m->rank, peer, text);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  int gai = getaddrinfo(host, port, &hints, &ai);
  if (gai != 0)
    return mesh_error(m, STRATA_ERR_CONFIG, "rank %d: cannot resolve rank %d's address %s: %s",
                      m->rank, peer, text, gai_strerror(gai));
  memcpy(addr, ai->ai_addr, ai->ai_addrlen);
  *addr_len = ai->ai_addrlen;
  freeaddrinfo(ai);
  return STRATA_OK;
}

static void conn_close(mesh_conn *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

/* A dialed connection the peer had dropped, dialed again and refused: the peer is gone, report
 * the drop as the lost connection it was (after the grace, as any lost connection). */
static void conn_lost_again(mesh *m, mesh_conn *c) {
  if (m->soft_status || m->hard_status) return;
  m->soft_status = STRATA_ERR_PEER_LOST;
  m->soft_deadline_s = strata_now_s() + MESH_SOFT_ERROR_GRACE_S;
  mesh_error(m, STRATA_ERR_PEER_LOST, "%s", c->lost);
}

/* One connect attempt; on an immediate failure schedule a retry. */
static void conn_dial(mesh *m, mesh_conn *c) {
  conn_close(c);
  c->fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd >= 0) {
    strata_tcp_tune_before_connect(m->cfg, c->fd); /* before connect: window scaling */
    set_nodelay(c->fd);
    if (connect(c->fd, (struct sockaddr *)&c->addr, c->addr_len) == 0 || errno == EINPROGRESS) {
      c->phase = CONN_CONNECTING;
      return;
    }
  }
  c->last_errno = errno;
  if (errno == ECONNREFUSED) m->trouble_seen = 1;
  if (errno == ECONNREFUSED && c->redials) conn_lost_again(m, c);
  conn_close(c);
  c->phase = CONN_RETRY_WAIT;
  c->retry_at_s = strata_now_s() + MESH_CONNECT_RETRY_S;
}

/* Every lower rank's address first, then every connection at once: a connection dialed before
 * this rank waits on the store for the next address would sit silent at its peer, which drops
 * connections that do not prove themselves in time. */
static int dial_lower_ranks(mesh *m, strata_store *store) {
  struct sockaddr_storage *addrs = calloc((size_t)(m->rank > 0 ? m->rank : 1), sizeof *addrs);
  socklen_t *addr_lens = calloc((size_t)(m->rank > 0 ? m->rank : 1), sizeof *addr_lens);
  int status = addrs && addr_lens ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  for (int peer = 0; status == STRATA_OK && peer < m->rank; peer++)
    status = peer_sockaddr(m, store, peer, &addrs[peer], &addr_lens[peer],
                           m->addresses + (size_t)peer * STRATA_TCP_ADDRESS_BYTES,
                           STRATA_TCP_ADDRESS_BYTES);
  if (status == STRATA_ERR_NO_MEMORY) mesh_error(m, status, "rank %d: out of memory", m->rank);
  for (int peer = 0; status == STRATA_OK && peer < m->rank; peer++) {
    const struct sockaddr_storage addr = addrs[peer];
    socklen_t addr_len = addr_lens[peer];
    const char *text = m->addresses + (size_t)peer * STRATA_TCP_ADDRESS_BYTES;
    for (int stream = 0; stream <= m->streams; stream++) {
      mesh_conn *c = conn_add(m);
      if (!c) {
        status = mesh_error(m, STRATA_ERR_NO_MEMORY, "rank %d: out of memory", m->rank);
        break;
      }
      c->dialing = 1;
      c->peer = peer;
      c->stream = stream;
      c->addr = addr;
      c->addr_len = addr_len;
      snprintf(c->addr_text, sizeof c->addr_text, "%s", text);
      conn_dial(m, c);
    }
  }
  free(addrs);
  free(addr_lens);
  return status;
}

/* ---- the loop ---- */

static void handshake_finished(mesh *m, mesh_conn *c, int status);

static int same_source(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family) return 0;
  if (a->ss_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
           ((const struct sockaddr_in *)b)->sin_addr.s_addr;
  if (a->ss_family == AF_INET6)
    return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                   &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
  return 1;
}

static int is_stranger(const mesh_conn *c) {
  return !c->dialing && c->phase == CONN_HANDSHAKE;
}

/* Strangers (from `source` only, when given): how many, and the one to drop first for a new
 * connection (NULL when none may go before *room_at_s). */
static size_t strangers_scan(mesh *m, const struct sockaddr_storage *source, double now_s,
                             mesh_conn **victim, double *room_at_s) {
  size_t count = 0;
  int victim_rank = -1;
  *victim = NULL;
  for (size_t i = 0; i < m->nconns; i++) {
    mesh_conn *c = &m->conns[i];
    if (!is_stranger(c) || (source && !same_source(&c->addr, source))) continue;
    count++;
    int rank = strata_handshake_evictable(&c->hs);
    if (rank > victim_rank || (rank == victim_rank && c->accepted_s < (*victim)->accepted_s)) {
      *victim = c;
      victim_rank = rank;
    }
  }
  if (*victim && victim_rank == 0 && now_s - (*victim)->accepted_s < MESH_EVICT_AGE_S) {
    *room_at_s = (*victim)->accepted_s + MESH_EVICT_AGE_S;
    *victim = NULL;
  }
  return count;
}

static void stranger_drop(mesh *m, mesh_conn *c, const char *why) {
  if (m->evicted++ == 0)
    STRATA_LOG(STRATA_LOG_WARN, m->rank,
               "dropping connections that have not proven the job secret (%s): is something "
               "other than the job's ranks connecting to %s?",
               why, m->params.address);
  sodium_memzero(&c->hs.keys, sizeof c->hs.keys);
  conn_close(c);
  c->phase = CONN_FINISHED;
  m->unproven--;
}

/* Drops one stranger (of `source`, when given) to make room; 0 when none may go yet (the
 * listener then rests until one may). */
static int strangers_make_room(mesh *m, const struct sockaddr_storage *source, double now_s,
                               const char *why) {
  mesh_conn *victim = NULL;
  double room_at_s = now_s + MESH_ACCEPT_BACKOFF_S;
  strangers_scan(m, source, now_s, &victim, &room_at_s);
  if (!victim) {
    m->listen_paused_until_s = room_at_s;
    return 0;
  }
  stranger_drop(m, victim, why);
  return 1;
}

static void accept_error(mesh *m, double now_s) {
  int e = errno;
  if (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM) return; /* EAGAIN and the like */
  /* a level-triggered listener with a connection queued would wake us at once, forever: free a
   * descriptor held by a stranger, else leave the listener alone for a moment */
  if (m->unproven > 0 && strangers_make_room(m, NULL, now_s, "out of descriptors")) return;
  m->listen_paused_until_s = now_s + MESH_ACCEPT_BACKOFF_S;
  if (now_s - m->last_accept_error_log_s >= 1.0) {
    m->last_accept_error_log_s = now_s;
    STRATA_LOG(STRATA_LOG_WARN, m->rank,
               "cannot accept a connection: %s (%zu connections in their handshake); retrying "
               "every %.0f ms",
               strerror(e), m->unproven, MESH_ACCEPT_BACKOFF_S * 1000);
  }
}

static void accept_all(mesh *m, double now_s) {
  for (int round = 0; round < MESH_ACCEPTS_PER_ROUND; round++) {
    if (m->unproven >= m->unproven_cap && !strangers_make_room(m, NULL, now_s, "too many at once"))
      return;
    struct sockaddr_storage from;
    socklen_t from_len = sizeof from;
    memset(&from, 0, sizeof from);
    int fd =
        accept4(m->listen_fd, (struct sockaddr *)&from, &from_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      accept_error(m, now_s);
      return;
    }
    if (m->unproven >= MESH_MAX_UNPROVEN_PER_SOURCE) {
      mesh_conn *victim = NULL;
      double room_at_s = 0;
      if (strangers_scan(m, &from, now_s, &victim, &room_at_s) >= MESH_MAX_UNPROVEN_PER_SOURCE) {
        if (!victim) {
          close(fd); /* a crowded source whose connections all talk: this one waits its turn */
          continue;
        }
        stranger_drop(m, victim, "too many from one address");
      }
    }
    mesh_conn *c = conn_add(m);
    if (!c) {
      close(fd);
      return;
    }
    set_nodelay(fd);
    c->fd = fd;
    c->peer = c->stream = -1;
    c->phase = CONN_HANDSHAKE;
    c->addr = from;
    c->addr_len = from_len;
    c->accepted_s = now_s;
    m->unproven++;
    strata_handshake_start(&c->hs, &m->params, fd, -1, -1, NULL);
  }
}

/* Strangers whose handshake deadline passed are dropped like any that failed a check. */
static void strangers_expire(mesh *m, double now_s) {
  for (size_t i = 0; i < m->nconns; i++) {
    mesh_conn *c = &m->conns[i];
    if (!is_stranger(c) || now_s - c->accepted_s < MESH_HANDSHAKE_DEADLINE_S) continue;
    strata_handshake_expire(&c->hs);
    handshake_finished(m, c, c->hs.status);
  }
}

/* How many descriptors strangers may hold: what the limit leaves after the ones open now, the
 * job's own connections and MESH_FD_SLACK. */
static void size_unproven(mesh *m) {
  size_t open_now = 0;
  DIR *dir = opendir("/proc/self/fd");
  if (dir) {
    while (readdir(dir)) open_now++;
    closedir(dir);
  }
  struct rlimit limit;
  size_t room = MESH_MAX_UNPROVEN;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    size_t reserve = open_now + (size_t)m->expected + MESH_FD_SLACK;
    room = limit.rlim_cur > reserve ? (size_t)limit.rlim_cur - reserve : 0;
  }
  m->unproven_cap = room > MESH_MAX_UNPROVEN   ? MESH_MAX_UNPROVEN
                    : room < MESH_MIN_UNPROVEN ? MESH_MIN_UNPROVEN
                                               : room;
}

static int is_check_failure(int status) {
  /* the failures a rank publishes for the others: a misconfiguration, never a lost peer */
  return status == STRATA_ERR_VERSION || status == STRATA_ERR_JOB || status == STRATA_ERR_AUTH ||
         status == STRATA_ERR_CONFIG || status == STRATA_ERR_SYSTEM;
}

/* A connection we accepted is from anyone until it proves itself: whatever it does — another
 * version, job or world size, a bad AUTH, a REJECT, garbage — it is dropped and logged, never
 * fatal, so nobody can end a job by talking to a listening port. A connection we dialed reached
 * the address a job member published in the (authenticated) store, so its verdict is believed
 * and a failed check ends the open at once with the precise reason. */
static void handshake_finished(mesh *m, mesh_conn *c, int status) {
  c->phase = CONN_FINISHED;
  if (!c->dialing) m->unproven--;
  if (c->dialing && status == STRATA_ERR_PEER_LOST && c->redials < MESH_REDIALS) {
    /* perhaps a listener crowded by strangers dropped it before it proved itself: dial again;
     * a peer that is really gone refuses the new connection (conn_lost_again) */
    c->redials++;
    snprintf(c->lost, sizeof c->lost, "%s", c->hs.err);
    sodium_memzero(&c->hs.keys, sizeof c->hs.keys);
    conn_close(c);
    c->phase = CONN_RETRY_WAIT;
    c->retry_at_s = strata_now_s() + MESH_CONNECT_RETRY_S;
    return;
  }
  if (status == STRATA_OK) {
    size_t index = (size_t)c->hs.peer_rank * (size_t)(m->streams + 1) + (size_t)c->hs.stream;
    int *slot = &m->fds[index];
    if (*slot < 0) {
      strata_tcp_tune_established(m->cfg, c->fd, m->rank, c->hs.peer_rank, c->hs.stream);
      *slot = c->fd;
      if (m->keys) m->keys[index] = c->hs.keys;
      sodium_memzero(&c->hs.keys, sizeof c->hs.keys);
      c->fd = -1;
      m->connected++;
      return;
    }
    STRATA_LOG(STRATA_LOG_WARN, m->rank, "rank %d opened stream %d twice; closing the second",
               c->hs.peer_rank, c->hs.stream);
  } else if (!c->dialing) {
    /* strangers can open connections as fast as they like: their log lines cannot */
    strata_log_level level = ++m->dropped <= MESH_DROPS_WARNED ? STRATA_LOG_WARN : STRATA_LOG_DEBUG;
    STRATA_LOG(level, m->rank, "dropped an unauthenticated connection: %s", c->hs.err);
    snprintf(m->refused, sizeof m->refused, "%s", c->hs.err);
    m->trouble_seen = 1; /* perhaps a peer that gave up: look for a published cause */
  } else if (status != STRATA_ERR_PEER_LOST) {
    if (!m->hard_status) {
      m->hard_status = status;
      mesh_error(m, status, "%s", c->hs.err);
    }
  } else {
    if (!m->soft_status && !m->hard_status) {
      m->soft_status = status;
      m->soft_deadline_s = strata_now_s() + MESH_SOFT_ERROR_GRACE_S;
      mesh_error(m, status, "%s", c->hs.err);
    }
  }
  sodium_memzero(&c->hs.keys, sizeof c->hs.keys);
  conn_close(c);
}

static void conn_connected(mesh *m, mesh_conn *c) {
  int so_error = 0;
  socklen_t len = sizeof so_error;
  getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
  if (so_error != 0) {
    c->last_errno = so_error;
    if (so_error == ECONNREFUSED) m->trouble_seen = 1;
    if (so_error == ECONNREFUSED && c->redials) conn_lost_again(m, c);
    conn_close(c);
    c->phase = CONN_RETRY_WAIT;
    c->retry_at_s = strata_now_s() + MESH_CONNECT_RETRY_S;
    return;
  }
  c->phase = CONN_HANDSHAKE;
  strata_handshake_start(&c->hs, &m->params, c->fd, c->peer, c->stream, c->addr_text);
}

static void conn_step(mesh *m, mesh_conn *c, short revents, double now) {
  if (c->phase == CONN_RETRY_WAIT) {
    if (now >= c->retry_at_s) conn_dial(m, c);
    return;
  }
  if (c->phase == CONN_CONNECTING) {
    if (revents) conn_connected(m, c);
    if (c->phase != CONN_HANDSHAKE) return;
  }
  int status = strata_handshake_advance(&c->hs);
  if (status != STRATA_ERR_IN_PROGRESS) handshake_finished(m, c, status);
}

static short conn_events(const mesh_conn *c) {
  if (c->phase == CONN_CONNECTING) return POLLOUT;
  if (c->phase == CONN_HANDSHAKE) return strata_handshake_events(&c->hs);
  return 0;
}

static void conns_compact(mesh *m) {
  size_t kept = 0;
  for (size_t i = 0; i < m->nconns; i++)
    if (m->conns[i].phase != CONN_FINISHED) m->conns[kept++] = m->conns[i];
  m->nconns = kept;
}

static int poll_once(mesh *m) {
  double now = strata_now_s();
  double wake_s = m->deadline_s;
  if (m->soft_status && m->soft_deadline_s < wake_s) wake_s = m->soft_deadline_s;
  int listening = now >= m->listen_paused_until_s;
  if (!listening && m->listen_paused_until_s < wake_s) wake_s = m->listen_paused_until_s;
  m->pollfds[0] = (struct pollfd){.fd = listening ? m->listen_fd : -1, .events = POLLIN};
  for (size_t i = 0; i < m->nconns; i++) {
    mesh_conn *c = &m->conns[i];
    m->pollfds[i + 1] = (struct pollfd){.fd = c->fd, .events = conn_events(c)};
    if (c->phase == CONN_RETRY_WAIT && c->retry_at_s < wake_s) wake_s = c->retry_at_s;
  }
  /* in double until clamped: a deadline days away does not fit an int of milliseconds */
  double wait_ms = (wake_s - now) * 1000 + 1;
  int timeout_ms = wait_ms > MESH_POLL_SLICE_MS ? MESH_POLL_SLICE_MS
                   : wait_ms < 0                ? 0
                                                : (int)wait_ms;
  int ready = poll(m->pollfds, m->nconns + 1, timeout_ms);
  if (ready < 0 && errno != EINTR)
    return mesh_error(m, STRATA_ERR_SYSTEM, "rank %d: poll: %s", m->rank, strerror(errno));
  now = strata_now_s();
  size_t nconns = m->nconns; /* accept_all may append; those are polled next round */
  if (ready > 0 && (m->pollfds[0].revents & POLLIN)) accept_all(m, now);
  for (size_t i = 0; i < nconns; i++) {
    short revents = ready > 0 ? m->pollfds[i + 1].revents : 0;
    mesh_conn *c = &m->conns[i];
    if (c->phase == CONN_FINISHED) continue; /* dropped by accept_all to make room */
    if (c->phase == CONN_RETRY_WAIT || revents) conn_step(m, c, revents, now);
  }
  /* accepted connections that already sent their HELLO before we polled them */
  for (size_t i = nconns; i < m->nconns; i++)
    if (m->conns[i].phase != CONN_FINISHED) conn_step(m, &m->conns[i], POLLIN, now);
  strangers_expire(m, now);
  conns_compact(m);
  return STRATA_OK;
}

/* The deadline passed: name the first connection that is missing, and why. */
static int timeout_error(mesh *m) {
  double waited = m->cfg->timeout_s;
  int silent = 0;
  for (size_t i = 0; i < m->nconns; i++)
    if (!m->conns[i].dialing) silent++;
  for (int peer = 0; peer < m->nranks; peer++) {
    for (int stream = 0; peer != m->rank && stream <= m->streams; stream++) {
      if (m->fds[peer * (m->streams + 1) + stream] >= 0) continue;
      for (size_t i = 0; i < m->nconns; i++) {
        mesh_conn *c = &m->conns[i];
        if (!c->dialing || c->peer != peer || c->stream != stream) continue;
        if (c->phase == CONN_HANDSHAKE) {
          strata_handshake_expire(&c->hs);
          return mesh_error(m, c->hs.status, "%s (%s, after %.1f s)", c->hs.err, c->addr_text,
                            waited);
        }
        return mesh_error(m, STRATA_ERR_TIMEOUT,
                          "rank %d: cannot connect to rank %d at %s within %.1f s: %s", m->rank,
                          peer, c->addr_text, waited,
                          c->last_errno ? strerror(c->last_errno) : "no answer");
      }
      if (m->evicted)
        return mesh_error(m, STRATA_ERR_TIMEOUT,
                          "rank %d: rank %d did not connect within %.1f s; meanwhile %lu "
                          "connections that never proved the job secret were dropped from %s "
                          "(something else is connecting to this port)",
                          m->rank, peer, waited, m->evicted, m->params.address);
      if (m->refused[0])
        return mesh_error(m, STRATA_ERR_TIMEOUT,
                          "rank %d: rank %d did not connect within %.1f s; a connection was "
                          "dropped: %s",
                          m->rank, peer, waited, m->refused);
      return mesh_error(
          m, STRATA_ERR_TIMEOUT,
          "rank %d: rank %d did not connect within %.1f s (is it running, with the "
          "same store and STRATA_JOB_ID?)%s",
          m->rank, peer, waited,
          silent ? "; a connection that never completed its handshake was ignored" : "");
    }
  }
  return mesh_error(m, STRATA_ERR_TIMEOUT, "rank %d: connecting timed out", m->rank);
}

/* ---- sharing the root cause ----
 * A rank that refuses a peer on a check (secret, job, version, world size) publishes its
 * sentence under "<job>/tcp/error". A rank that only sees the consequences — its connections
 * closed or refused because that rank gave up, or a timeout — adopts the published cause, so
 * every rank of a misconfigured job prints the same precise reason. (A stale key from an earlier
 * failed attempt is only ever read after something already went wrong.) */

static void failure_key(const mesh *m, char *key, size_t len) {
  snprintf(key, len, "%s/error", m->prefix);
}

static void publish_failure(mesh *m) {
  if (!is_check_failure(m->hard_status) || m->hard_status == STRATA_ERR_SYSTEM) return;
  char key[192], value[600];
  failure_key(m, key, sizeof key);
  int n = snprintf(value, sizeof value, "%d %s", m->hard_status, m->err ? m->err : "");
  strata_store_set(m->store, key, value, n < (int)sizeof value ? (size_t)n : sizeof value - 1);
}

/* Returns the published status (message into err) or STRATA_OK when none is published. */
static int adopt_failure(mesh *m) {
  char key[192];
  failure_key(m, key, sizeof key);
  void *value = NULL;
  size_t len = 0;
  if (strata_store_get(m->store, key, &value, &len, 0.05) != STRATA_OK) return STRATA_OK;
  char text[600];
  snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text ? len : sizeof text - 1),
           (const char *)value);
  free(value);
  int status = atoi(text);
  const char *message = strchr(text, ' ');
  if (!is_check_failure(status) || !message) return STRATA_OK;
  return mesh_error(m, status, "%s (reported to rank %d by the store)", message + 1, m->rank);
}

static int mesh_loop(mesh *m) {
  while (m->connected < m->expected) {
    if (m->hard_status) {
      publish_failure(m);
      return m->hard_status;
    }
    double now = strata_now_s();
    int trouble = m->soft_status || m->trouble_seen || now >= m->deadline_s;
    if (trouble && (now >= m->next_failure_check_s || now >= m->deadline_s)) {
      m->next_failure_check_s = now + MESH_FAILURE_CHECK_S;
      int adopted = adopt_failure(m);
      if (adopted != STRATA_OK) return adopted;
    }
    if (m->soft_status && now >= m->soft_deadline_s) return m->soft_status;
    if (now >= m->deadline_s) return timeout_error(m);
    int status = poll_once(m);
    if (status != STRATA_OK) return status;
  }
  return STRATA_OK;
}

/* k = how many times this rank opened the tcp transport in this job before. */
static int choose_prefix(mesh *m) {
  char key[192];
  snprintf(key, sizeof key, "%s/tcp/opens/%d", m->cfg->job_id, m->rank);
  int64_t opens = 0;
  int status = strata_store_add(m->store, key, 1, &opens);
  if (status != STRATA_OK)
    return mesh_error(m, status, "rank %d: the rendezvous store failed: %s", m->rank,
                      strata_strerror(status));
  snprintf(m->prefix, sizeof m->prefix, "%s/tcp/%lld", m->cfg->job_id, (long long)(opens - 1));
  return STRATA_OK;
}

/* Higher ranks dialed us, so they published long ago: for the log line only. */
static void read_higher_addresses(mesh *m) {
  if (m->cfg->log_level < STRATA_LOG_INFO && strata_log_get_level() < STRATA_LOG_INFO) return;
  for (int peer = m->rank + 1; peer < m->nranks; peer++) {
    char key[192];
    snprintf(key, sizeof key, "%s/addr/%d", m->prefix, peer);
    void *value = NULL;
    size_t len = 0;
    if (strata_store_get(m->store, key, &value, &len, 1.0) != STRATA_OK) continue;
    snprintf(m->addresses + (size_t)peer * STRATA_TCP_ADDRESS_BYTES, STRATA_TCP_ADDRESS_BYTES,
             "%.*s", (int)(len < STRATA_TCP_ADDRESS_BYTES ? len : STRATA_TCP_ADDRESS_BYTES - 1),
             (const char *)value);
    free(value);
  }
}

static int mesh_run(mesh *m, strata_store *store) {
  m->store = store;
  int status = choose_prefix(m);
  if (status == STRATA_OK) status = publish_address(m, store);
  if (status == STRATA_OK) status = dial_lower_ranks(m, store);
  if (status == STRATA_OK) status = mesh_loop(m);
  if (status == STRATA_OK) read_higher_addresses(m);
  return status;
}

int strata_tcp_mesh_connect(const strata_config *cfg, int rank, int nranks, strata_store *store,
                            unsigned version, int *fds, strata_seal_keys *keys, char *addresses,
                            char *err, size_t err_len) {
  for (int q = 0; q < nranks; q++)
    snprintf(addresses + (size_t)q * STRATA_TCP_ADDRESS_BYTES, STRATA_TCP_ADDRESS_BYTES, "?");
  mesh m = {.addresses = addresses,
            .keys = keys,
            .cfg = cfg,
            .rank = rank,
            .nranks = nranks,
            .streams = cfg->tcp_streams,
            .fds = fds,
            .listen_fd = -1,
            .err = err,
            .err_len = err_len};
  size_t nfds = (size_t)nranks * (size_t)(m.streams + 1);
  for (size_t i = 0; i < nfds; i++) fds[i] = -1;
  m.expected = (nranks - 1) * (m.streams + 1);
  m.deadline_s = strata_now_s() + cfg->timeout_s;
  int status =
      strata_handshake_params_init(&m.params, cfg->job_id, cfg->secret, rank, nranks, m.streams);
  if (status != STRATA_OK) {
    return mesh_error(&m, status, "rank %d: %s", rank,
                      status == STRATA_ERR_SYSTEM      ? "libsodium failed to initialize"
                      : status == STRATA_ERR_NO_MEMORY ? "out of memory deriving the job key"
                                                       : "job id too long");
  }
  m.params.version = version;
  m.params.encrypt = cfg->encrypt;
  strata_secret_warn_once(cfg->secret, rank);
  status = strata_tcp_tune_check(cfg, err, err_len);
  if (status != STRATA_OK) return status;
  size_unproven(&m);
  m.pollfds = malloc(sizeof *m.pollfds);
  status = m.pollfds ? mesh_run(&m, store) : STRATA_ERR_NO_MEMORY;
  for (size_t i = 0; i < m.nconns; i++) conn_close(&m.conns[i]);
  if (m.listen_fd >= 0) close(m.listen_fd);
  free(m.conns);
  free(m.pollfds);
  sodium_memzero(m.params.key, sizeof m.params.key);
  if (status != STRATA_OK) {
    for (size_t i = 0; i < nfds; i++) {
      if (fds[i] >= 0) close(fds[i]);
      fds[i] = -1;
    }
  }
  return status;
}
