// SPDX-License-Identifier: Apache-2.0
/*
 * tcp_mesh.c — connecting pairs of ranks on demand: `streams` data connections and one control
 * connection per pair, each authenticated by the handshake (handshake.c), made the first time
 * either rank of the pair asks for them (tcp.c asks when a transfer to an unconnected peer is
 * posted).
 *
 * Rank p listens on its advertised host (port 0) and publishes "<job>/addr/<p>" = "host:port" in
 * the store before anything else. A peer's address is read from the store only when this rank
 * dials it, so joining costs a rank O(1) store requests plus one per peer it talks to — a ring
 * two, recursive halving log2(N) — not one per rank of the job; the same goes for sockets and
 * handshakes. Open waits for one pair only (tcp_mesh.h says which and why).
 *
 * Who dials. Whichever rank of a pair asks first dials: a rank that must wait for its peer to
 * dial would hold its sends until the peer happens to post something to it, turning an eager
 * small send into a rendezvous and deadlocking code that relied on it. Both may ask at once, so
 * both may dial: then the lower rank's connections stand and the higher rank's step back. The
 * choice is made on each accepted connection once its dialer proved the secret and before we
 * prove ourselves (handshake.h, admit), i.e. before the dialer can consider it open and send on
 * it; so no frame is ever sent on a connection that is then closed. With L < H:
 *   - L, asked to take a connection from H while L's own dial to H is under way (or done), refuses
 *     it with REJECT_CROSSED; H, refused so, drops its dial and waits for L's;
 *   - H, asked to take a connection from L while its own dial to L is under way, takes it and
 *     drops its own dial;
 *   - a rank that took any connection of a peer's dial never dials that peer itself: it waits for
 *     the rest of that dial.
 * L refuses every connection of H's from the moment L dials, and takes any only while it is not
 * dialing (after which it never dials), so H's dial either completes whole or is refused whole:
 * every pair ends with one set of connections, all dialed by the same rank.
 * Crossings are the rule rather than the exception (a send is posted as its receive is), and each
 * costs the loser's streams + 1 handshakes, so the higher rank, outside open, waits
 * MESH_HIGHER_DIAL_DELAY_S before dialing: the lower rank's dial usually arrives first.
 *
 * One poll loop (strata_tcp_mesh_step, without blocking; open's wait, with) drives everything:
 * non-blocking connects, the accept queue and every handshake. A connection that sends garbage is
 * refused and dropped; one that says nothing just occupies a slot until its deadline — neither can
 * stall the others. A dialed connection that fails a check (version, job, secret, world size)
 * fails the pair at once with the handshake's sentence, because the job is misconfigured and
 * waiting would only turn a clear message into a timeout; the sentence is also published so the
 * ranks waiting in open adopt it. A peer that refuses connections (ECONNREFUSED on the address it
 * published, for MESH_SOFT_ERROR_GRACE_S) is gone; one that does not complete a pair within
 * cfg->timeout_s of our asking is reported as timed out.
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
 * Must never: block past cfg->timeout_s (open) or a few milliseconds (step), or leak a socket on
 * any path.
 */
#include <dirent.h>
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
/* How long one store read waits for an address not published yet (then retried): a step must
 * not hold the thread that beats to the connected peers. */
static const double MESH_ADDRESS_WAIT_S = 0.005;
/* While open waits for its first pair nothing else is due, so a missing address is waited for in
 * the store (which answers the moment it is set) this long per request: a peer that starts
 * seconds late costs a few requests a second, not one per retry. */
static const double MESH_OPEN_ADDRESS_WAIT_S = 0.25;
/* How long the higher rank of a pair waits for the lower one's dial before dialing itself: a few
 * of the lower rank's progress passes (its engine polls every millisecond while busy, every 10 ms
 * while idle). */
static const double MESH_HIGHER_DIAL_DELAY_S = 0.02;
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
  strata_handshake hs;
} mesh_conn;

/* A pair, from this rank's side. */
enum {
  LINK_IDLE,    /* nobody asked */
  LINK_ADDRESS, /* asked for: reading the peer's address from the store */
  LINK_DIALING, /* our connections are on their way */
  LINK_AWAIT,   /* the peer's dial is on its way (we took part of it, or ours crossed it) */
  LINK_UP,      /* handed to the owner */
  LINK_FAILED
};

typedef struct mesh_link {
  int state;
  int wanted;
  double deadline_s;       /* asked for: connected by then */
  double address_retry_s;  /* LINK_ADDRESS: next store read */
  double refused_since_s;  /* the peer refused our connects since then (0: it did not) */
  int *fds;                /* [streams + 1] finished connections (-1 none); NULL until needed */
  strata_seal_keys *keys;  /* [streams + 1] what their handshakes agreed */
  unsigned char *admitted; /* [streams + 1] accepted, admitted, finishing their handshake */
  int connected;           /* fds set */
  int status;              /* LINK_FAILED: why */
} mesh_link;

struct strata_tcp_mesh {
  const strata_config *cfg;
  strata_config cfg_copy;
  strata_tcp_mesh_events events;
  int rank, nranks, streams;
  strata_handshake_params params;
  int listen_fd;
  mesh_link *links;
  mesh_conn *conns;
  size_t nconns, conns_cap;
  struct pollfd *pollfds;
  int opening;       /* open's wait runs: failures are kept for it, not reported */
  int hard_status;   /* first check that failed on a dialed connection (published) */
  char refused[400]; /* why the last connection we accepted was dropped (for a timeout's message) */
  int dropped;       /* connections we accepted and dropped: only the first few are warned of */
  int trouble_seen;  /* a connect was refused or a handshake broke: a peer may have failed */
  double next_failure_check_s;
  size_t unproven, unproven_cap; /* accepted connections still in their handshake */
  unsigned long evicted;         /* strangers dropped to make room for newer ones */
  double listen_paused_until_s;
  double last_accept_error_log_s;
  int expected; /* connections this rank may hold: the descriptors strangers must leave */
  strata_store *store;
  char prefix[128]; /* "<job>/tcp/<k>" */
  char *addresses;  /* [nranks][STRATA_TCP_ADDRESS_BYTES] */
  char *err;        /* open's error (a scratch buffer afterwards) */
  size_t err_len;
  char scratch[600];
};

typedef struct strata_tcp_mesh mesh;

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

/* ---- dialing ---- */

static mesh_conn *conn_add(mesh *m) {
  if (m->nconns == m->conns_cap) {
    size_t cap = m->conns_cap ? 2 * m->conns_cap : 16;
    mesh_conn *conns = realloc(m->conns, cap * sizeof *conns);
    if (conns) m->conns = conns;
    struct pollfd *pollfds = realloc(m->pollfds, (cap + 1) * sizeof *pollfds);
    if (pollfds) m->pollfds = pollfds;
    if (!conns || !pollfds) return NULL;
    m->conns_cap = cap;
  }
  mesh_conn *c = &m->conns[m->nconns++];
  memset(c, 0, sizeof *c);
  c->fd = -1;
  return c;
}

static void conn_close(mesh_conn *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

static void conn_finish(mesh_conn *c) {
  sodium_memzero(&c->hs.keys, sizeof c->hs.keys);
  conn_close(c);
  c->phase = CONN_FINISHED;
}

static int link_alloc(mesh *m, mesh_link *l) {
  if (l->fds) return STRATA_OK;
  size_t n = (size_t)m->streams + 1;
  l->fds = malloc(n * sizeof *l->fds);
  l->keys = calloc(n, sizeof *l->keys);
  l->admitted = calloc(n, 1);
  if (!l->fds || !l->keys || !l->admitted) {
    free(l->fds), free(l->keys), free(l->admitted);
    l->fds = NULL, l->keys = NULL, l->admitted = NULL;
    return STRATA_ERR_NO_MEMORY;
  }
  for (size_t i = 0; i < n; i++) l->fds[i] = -1;
  return STRATA_OK;
}

/* Close what a link holds that was not handed over. */
static void link_release(mesh *m, mesh_link *l) {
  if (!l->fds) return;
  for (int s = 0; s <= m->streams; s++) {
    if (l->fds[s] >= 0) close(l->fds[s]);
    l->fds[s] = -1;
  }
  sodium_memzero(l->keys, ((size_t)m->streams + 1) * sizeof *l->keys);
  free(l->fds), free(l->keys), free(l->admitted);
  l->fds = NULL, l->keys = NULL, l->admitted = NULL;
  l->connected = 0;
}

/* Our dial to `peer` steps back: its connections are closed wherever they are. */
static void link_stop_dialing(mesh *m, int peer) {
  for (size_t i = 0; i < m->nconns; i++) {
    mesh_conn *c = &m->conns[i];
    if (c->dialing && c->peer == peer && c->phase != CONN_FINISHED) conn_finish(c);
  }
}

/* The pair cannot be made: report it (open's wait reads the state instead). */
static void link_fail(mesh *m, int peer, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void link_fail(mesh *m, int peer, int status, const char *fmt, ...) {
  mesh_link *l = &m->links[peer];
  if (l->state == LINK_UP || l->state == LINK_FAILED) return;
  link_stop_dialing(m, peer);
  link_release(m, l);
  l->state = LINK_FAILED;
  l->status = status;
  va_list args;
  va_start(args, fmt);
  vsnprintf(m->scratch, sizeof m->scratch, fmt, args);
  va_end(args);
  if (m->opening) {
    if (m->err && m->err_len && !m->err[0]) snprintf(m->err, m->err_len, "%s", m->scratch);
    return;
  }
  if (m->events.failed) m->events.failed(m->events.ctx, peer, status, m->scratch);
}

/* Every connection of the pair is there: hand them over. */
static void link_up(mesh *m, int peer) {
  mesh_link *l = &m->links[peer];
  l->state = LINK_UP;
  if (m->events.linked) m->events.linked(m->events.ctx, peer, l->fds, l->keys);
  for (int s = 0; s <= m->streams; s++) l->fds[s] = -1; /* the owner's now */
  link_release(m, l);
  l->state = LINK_UP;
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
  conn_close(c);
  c->phase = CONN_RETRY_WAIT;
  c->retry_at_s = strata_now_s() + MESH_CONNECT_RETRY_S;
}

/* A connect was refused: the address is one the peer published after it listened, so nobody
 * listens there any more — unless that lasts only a moment (a listener's queue overflowing). */
static void conn_refused(mesh *m, mesh_conn *c, double now) {
  mesh_link *l = &m->links[c->peer];
  m->trouble_seen = 1;
  if (!l->refused_since_s) l->refused_since_s = now;
  if (now - l->refused_since_s >= MESH_SOFT_ERROR_GRACE_S)
    link_fail(m, c->peer, STRATA_ERR_PEER_LOST,
              "rank %d: rank %d refuses connections at %s (it exited, or closed its "
              "communicator)",
              m->rank, c->peer, c->addr_text);
}

/* Read the peer's address from the store; STRATA_OK, or _IN_PROGRESS when not published yet. */
static int link_address(mesh *m, int peer, struct sockaddr_storage *addr, socklen_t *addr_len) {
  char key[192];
  snprintf(key, sizeof key, "%s/addr/%d", m->prefix, peer);
  void *value = NULL;
  size_t len = 0;
  int status = strata_store_get(m->store, key, &value, &len,
                                m->opening ? MESH_OPEN_ADDRESS_WAIT_S : MESH_ADDRESS_WAIT_S);
  if (status == STRATA_ERR_TIMEOUT || status == STRATA_ERR_NOT_FOUND) return STRATA_ERR_IN_PROGRESS;
  if (status != STRATA_OK) {
    link_fail(m, peer, status, "rank %d: cannot read rank %d's address (%s) from the store: %s",
              m->rank, peer, key, strata_strerror(status));
    return status;
  }
  char *text = m->addresses + (size_t)peer * STRATA_TCP_ADDRESS_BYTES;
  snprintf(text, STRATA_TCP_ADDRESS_BYTES, "%.*s",
           (int)(len < STRATA_TCP_ADDRESS_BYTES ? len : STRATA_TCP_ADDRESS_BYTES - 1),
           (char *)value);
  free(value);
  char host[256], port[32];
  if (parse_address(text, host, sizeof host, port, sizeof port) != 0) {
    link_fail(m, peer, STRATA_ERR_PROTOCOL, "rank %d: rank %d published a bad address \"%s\"",
              m->rank, peer, text);
    return STRATA_ERR_PROTOCOL;
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  int gai = getaddrinfo(host, port, &hints, &ai);
  if (gai != 0) {
    link_fail(m, peer, STRATA_ERR_CONFIG, "rank %d: cannot resolve rank %d's address %s: %s",
              m->rank, peer, text, gai_strerror(gai));
    return STRATA_ERR_CONFIG;
  }
  memcpy(addr, ai->ai_addr, ai->ai_addrlen);
  *addr_len = ai->ai_addrlen;
  freeaddrinfo(ai);
  return STRATA_OK;
}

/* The address is known: dial every connection of the pair at once. */
static void link_dial(mesh *m, int peer) {
  mesh_link *l = &m->links[peer];
  struct sockaddr_storage addr;
  socklen_t addr_len = 0;
  int status = link_address(m, peer, &addr, &addr_len);
  if (status == STRATA_ERR_IN_PROGRESS) {
    l->address_retry_s = strata_now_s() + MESH_CONNECT_RETRY_S;
    return;
  }
  if (status != STRATA_OK) return;
  if (link_alloc(m, l) != STRATA_OK) {
    link_fail(m, peer, STRATA_ERR_NO_MEMORY, "rank %d: out of memory dialing rank %d", m->rank,
              peer);
    return;
  }
  l->state = LINK_DIALING;
  for (int stream = 0; stream <= m->streams; stream++) {
    mesh_conn *c = conn_add(m);
    if (!c) {
      link_fail(m, peer, STRATA_ERR_NO_MEMORY, "rank %d: out of memory dialing rank %d", m->rank,
                peer);
      return;
    }
    c->dialing = 1;
    c->peer = peer;
    c->stream = stream;
    c->addr = addr;
    c->addr_len = addr_len;
    snprintf(c->addr_text, sizeof c->addr_text, "%s",
             m->addresses + (size_t)peer * STRATA_TCP_ADDRESS_BYTES);
    conn_dial(m, c);
  }
}

void strata_tcp_mesh_want(strata_tcp_mesh *m, int peer) {
  if (!m || peer < 0 || peer >= m->nranks || peer == m->rank) return;
  mesh_link *l = &m->links[peer];
  if (l->wanted || l->state == LINK_UP || l->state == LINK_FAILED) return;
  double now = strata_now_s();
  l->wanted = 1;
  l->deadline_s = now + m->cfg->timeout_s;
  if (l->state == LINK_IDLE) {
    l->state = LINK_ADDRESS;
    /* both ranks of a pair mostly ask at once (a send meets its receive), and the lower rank's
     * dial wins a crossing: the higher gives it a moment to arrive rather than dial in vain */
    l->address_retry_s = m->rank > peer && !m->opening ? now + MESH_HIGHER_DIAL_DELAY_S : 0;
  }
}

void strata_tcp_mesh_forget_wants(strata_tcp_mesh *m) {
  for (int q = 0; m && q < m->nranks; q++) {
    mesh_link *l = &m->links[q];
    l->wanted = 0;
    if (l->state == LINK_ADDRESS || l->state == LINK_DIALING) {
      link_stop_dialing(m, q);
      link_release(m, l);
      l->state = LINK_IDLE;
    }
  }
}

/* handshake.h's admit: may the peer's dial (`stream` of it) stand? Rules in the essay above. */
static int mesh_admit(void *ctx, int peer, int stream) {
  mesh *m = ctx;
  if (peer < 0 || peer >= m->nranks || peer == m->rank || stream < 0 || stream > m->streams)
    return 1;
  mesh_link *l = &m->links[peer];
  if (l->state == LINK_UP || l->state == LINK_FAILED) return 1;
  if (link_alloc(m, l) != STRATA_OK) return 1;
  if (l->fds[stream] >= 0 || l->admitted[stream]) return 1;
  if (l->state == LINK_DIALING) {
    if (m->rank < peer) return 1; /* ours stands */
    link_stop_dialing(m, peer);
    for (int s = 0; s <= m->streams; s++) /* (none of ours finished: see the essay) */
      if (l->fds[s] >= 0) close(l->fds[s]), l->fds[s] = -1;
    l->connected = 0;
  }
  l->admitted[stream] = 1;
  l->state = LINK_AWAIT;
  return 0;
}

/* ---- the loop ---- */

static void handshake_finished(mesh *m, mesh_conn *c, int status);

static int is_check_failure(int status) {
  /* the failures a rank publishes for the others: a misconfiguration, never a lost peer */
  return status == STRATA_ERR_VERSION || status == STRATA_ERR_JOB || status == STRATA_ERR_AUTH ||
         status == STRATA_ERR_CONFIG || status == STRATA_ERR_SYSTEM;
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
  int n = snprintf(value, sizeof value, "%d %s", m->hard_status, m->scratch);
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

/* A connection of the pair finished its handshake. */
static void link_connection(mesh *m, mesh_conn *c) {
  int peer = c->hs.peer_rank, stream = c->hs.stream;
  mesh_link *l = &m->links[peer];
  if (l->state == LINK_UP || l->state == LINK_FAILED || link_alloc(m, l) != STRATA_OK ||
      l->fds[stream] >= 0) {
    STRATA_LOG(STRATA_LOG_WARN, m->rank, "rank %d opened stream %d twice; closing the second", peer,
               stream);
    conn_finish(c);
    return;
  }
  strata_tcp_tune_established(m->cfg, c->fd, m->rank, peer, stream);
  l->fds[stream] = c->fd;
  l->keys[stream] = c->hs.keys;
  l->admitted[stream] = 0;
  c->fd = -1;
  conn_finish(c);
  if (++l->connected == m->streams + 1) link_up(m, peer);
}

/* An accepted connection that failed. Anyone can connect, so whatever it did — another version,
 * job or world size, a bad AUTH, a REJECT, garbage — it is dropped and logged, never fatal:
 * nobody can end a job by talking to a listening port. */
static void accepted_failed(mesh *m, mesh_conn *c) {
  int claimed = c->hs.claimed_rank;
  mesh_link *l = claimed >= 0 && claimed < m->nranks ? &m->links[claimed] : NULL;
  if (l && l->admitted && c->hs.stream >= 0 && c->hs.stream <= m->streams &&
      c->hs.peer_rank == claimed && l->admitted[c->hs.stream]) {
    /* a dial we took broke before it finished: the peer dials again, or is gone */
    l->admitted[c->hs.stream] = 0;
    int any = l->connected;
    for (int s = 0; s <= m->streams; s++) any += l->admitted[s];
    if (!any && l->state == LINK_AWAIT) l->state = l->wanted ? LINK_ADDRESS : LINK_IDLE;
  }
  /* the dial of a job member that stepped back (crossed dials; closed before it said anything,
   * or after): no news */
  int quiet =
      c->hs.crossed || (c->hs.status == STRATA_ERR_PEER_LOST &&
                        (claimed < 0 || (l && l->state != LINK_IDLE && l->state != LINK_ADDRESS)));
  if (!quiet) {
    /* strangers can open connections as fast as they like: their log lines cannot */
    strata_log_level level = ++m->dropped <= MESH_DROPS_WARNED ? STRATA_LOG_WARN : STRATA_LOG_DEBUG;
    STRATA_LOG(level, m->rank, "dropped an unauthenticated connection: %s", c->hs.err);
    snprintf(m->refused, sizeof m->refused, "%s", c->hs.err);
    m->trouble_seen = 1; /* perhaps a peer that gave up: look for a published cause */
  }
  conn_finish(c);
}

/* A connection we dialed reached the address a job member published in the (authenticated)
 * store, so its verdict is believed: a failed check fails the pair at once with the reason. */
static void dialed_failed(mesh *m, mesh_conn *c, int status) {
  mesh_link *l = &m->links[c->peer];
  if (c->hs.crossed) { /* the lower rank dials us: wait for its connections */
    conn_finish(c);
    link_stop_dialing(m, c->peer);
    if (l->state == LINK_DIALING) l->state = LINK_AWAIT;
    return;
  }
  if (status == STRATA_ERR_PEER_LOST && c->redials < MESH_REDIALS) {
    /* perhaps a listener crowded by strangers dropped it before it proved itself: dial again;
     * a peer that is really gone refuses the new connection (conn_refused) */
    c->redials++;
    sodium_memzero(&c->hs.keys, sizeof c->hs.keys);
    conn_close(c);
    c->phase = CONN_RETRY_WAIT;
    c->retry_at_s = strata_now_s() + MESH_CONNECT_RETRY_S;
    return;
  }
  if (is_check_failure(status) && !m->hard_status) {
    m->hard_status = status;
    snprintf(m->scratch, sizeof m->scratch, "%s", c->hs.err);
    publish_failure(m);
  }
  char why[sizeof c->hs.err];
  snprintf(why, sizeof why, "%s", c->hs.err);
  int peer = c->peer;
  conn_finish(c);
  link_fail(m, peer, status, "%s", why);
}

static void handshake_finished(mesh *m, mesh_conn *c, int status) {
  if (!c->dialing) m->unproven--;
  if (status == STRATA_OK) {
    link_connection(m, c);
  } else if (!c->dialing) {
    accepted_failed(m, c);
  } else {
    dialed_failed(m, c, status);
  }
}

static void conn_connected(mesh *m, mesh_conn *c, double now) {
  int so_error = 0;
  socklen_t len = sizeof so_error;
  getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
  if (so_error != 0) {
    c->last_errno = so_error;
    conn_close(c);
    c->phase = CONN_RETRY_WAIT;
    c->retry_at_s = now + MESH_CONNECT_RETRY_S;
    if (so_error == ECONNREFUSED) conn_refused(m, c, now);
    return;
  }
  m->links[c->peer].refused_since_s = 0;
  c->phase = CONN_HANDSHAKE;
  strata_handshake_start(&c->hs, &m->params, c->fd, c->peer, c->stream, c->addr_text);
}

static void conn_step(mesh *m, mesh_conn *c, short revents, double now) {
  if (c->phase == CONN_RETRY_WAIT) {
    if (now >= c->retry_at_s) {
      conn_dial(m, c);
      if (c->phase == CONN_RETRY_WAIT && c->last_errno == ECONNREFUSED) conn_refused(m, c, now);
    }
    return;
  }
  if (c->phase == CONN_CONNECTING) {
    if (revents) conn_connected(m, c, now);
    if (c->phase != CONN_HANDSHAKE) return;
  }
  int status = strata_handshake_advance(&c->hs);
  if (status != STRATA_ERR_IN_PROGRESS) {
    c->phase = CONN_FINISHED; /* handshake_finished hands its socket on, closes it or redials */
    handshake_finished(m, c, status);
  }
}

static short conn_events(const mesh_conn *c) {
  if (c->phase == CONN_CONNECTING) return POLLOUT;
  if (c->phase == CONN_HANDSHAKE) return strata_handshake_events(&c->hs);
  return 0;
}

static void conns_compact(mesh *m) {
  size_t kept = 0;
  for (size_t i = 0; i < m->nconns; i++) {
    if (m->conns[i].phase == CONN_FINISHED)
      conn_finish(&m->conns[i]); /* (a no-op unless a path forgot: never leak the socket) */
    else
      m->conns[kept++] = m->conns[i];
  }
  m->nconns = kept;
}

/* A pair asked for that is not up by its deadline. */
static void link_timeout(mesh *m, int peer) {
  double waited = m->cfg->timeout_s;
  for (size_t i = 0; i < m->nconns; i++) {
    mesh_conn *c = &m->conns[i];
    if (!c->dialing || c->peer != peer || c->phase == CONN_FINISHED) continue;
    if (c->phase == CONN_HANDSHAKE) {
      strata_handshake_expire(&c->hs);
      link_fail(m, peer, c->hs.status, "%s (%s, after %.1f s)", c->hs.err, c->addr_text, waited);
      return;
    }
    link_fail(m, peer, STRATA_ERR_TIMEOUT,
              "rank %d: cannot connect to rank %d at %s within %.1f s: %s", m->rank, peer,
              c->addr_text, waited, c->last_errno ? strerror(c->last_errno) : "no answer");
    return;
  }
  mesh_link *l = &m->links[peer];
  if (l->state == LINK_ADDRESS)
    link_fail(m, peer, STRATA_ERR_TIMEOUT,
              "rank %d: rank %d never published its address (%s/addr/%d) within %.1f s (is it "
              "running, with the same store and STRATA_JOB_ID?)%s%s",
              m->rank, peer, m->prefix, peer, waited,
              m->refused[0] ? "; a connection was dropped: " : "", m->refused);
  else if (m->evicted)
    link_fail(m, peer, STRATA_ERR_TIMEOUT,
              "rank %d: rank %d did not connect within %.1f s; meanwhile %lu connections that "
              "never proved the job secret were dropped from %s (something else is connecting "
              "to this port)",
              m->rank, peer, waited, m->evicted, m->params.address);
  else if (m->refused[0])
    link_fail(m, peer, STRATA_ERR_TIMEOUT,
              "rank %d: rank %d did not connect within %.1f s; a connection was dropped: %s",
              m->rank, peer, waited, m->refused);
  else
    link_fail(m, peer, STRATA_ERR_TIMEOUT,
              "rank %d: rank %d did not connect within %.1f s (is it running, with the same "
              "store and STRATA_JOB_ID?)",
              m->rank, peer, waited);
}

/* Pairs asked for: read addresses and dial when due, fail the late ones. */
static void links_advance(mesh *m, double now) {
  for (int q = 0; q < m->nranks; q++) {
    mesh_link *l = &m->links[q];
    if (!l->wanted || l->state == LINK_UP || l->state == LINK_FAILED) continue;
    if (now >= l->deadline_s) {
      link_timeout(m, q);
      continue;
    }
    if (l->state == LINK_ADDRESS && now >= l->address_retry_s) link_dial(m, q);
  }
}

static int mesh_busy(const mesh *m) {
  if (m->nconns) return 1;
  for (int q = 0; q < m->nranks; q++) {
    const mesh_link *l = &m->links[q];
    if (l->wanted && l->state != LINK_UP && l->state != LINK_FAILED) return 1;
  }
  return 0;
}

int strata_tcp_mesh_busy(const strata_tcp_mesh *m) {
  return m && mesh_busy(m);
}

/* One round: poll (up to timeout_ms), accept, advance every connection. */
static int poll_once(mesh *m, int timeout_ms) {
  double now = strata_now_s();
  links_advance(m, now);
  int listening = now >= m->listen_paused_until_s;
  m->pollfds[0] = (struct pollfd){.fd = listening ? m->listen_fd : -1, .events = POLLIN};
  double wake_s = now + timeout_ms / 1000.0;
  if (!listening && m->listen_paused_until_s < wake_s) wake_s = m->listen_paused_until_s;
  for (size_t i = 0; i < m->nconns; i++) {
    mesh_conn *c = &m->conns[i];
    m->pollfds[i + 1] = (struct pollfd){.fd = c->fd, .events = conn_events(c)};
    if (c->phase == CONN_RETRY_WAIT && c->retry_at_s < wake_s) wake_s = c->retry_at_s;
  }
  for (int q = 0; q < m->nranks; q++) {
    mesh_link *l = &m->links[q];
    if (l->wanted && l->state == LINK_ADDRESS && l->address_retry_s < wake_s)
      wake_s = l->address_retry_s;
  }
  double wait_ms = (wake_s - now) * 1000 + (timeout_ms > 0 ? 1 : 0);
  int wait = wait_ms > timeout_ms ? timeout_ms : wait_ms < 0 ? 0 : (int)wait_ms;
  int ready = poll(m->pollfds, m->nconns + 1, wait);
  if (ready < 0 && errno != EINTR)
    return mesh_error(m, STRATA_ERR_SYSTEM, "rank %d: poll: %s", m->rank, strerror(errno));
  now = strata_now_s();
  size_t nconns = m->nconns; /* accept_all and dials may append; those are polled next round */
  if (ready > 0 && (m->pollfds[0].revents & POLLIN)) accept_all(m, now);
  for (size_t i = 0; i < nconns; i++) {
    short revents = ready > 0 ? m->pollfds[i + 1].revents : 0;
    mesh_conn *c = &m->conns[i];
    if (c->phase == CONN_FINISHED) continue; /* dropped to make room, or a crossed dial */
    if (c->phase == CONN_RETRY_WAIT || revents) conn_step(m, c, revents, now);
  }
  /* accepted connections that already sent their HELLO before we polled them */
  for (size_t i = nconns; i < m->nconns; i++)
    if (!m->conns[i].dialing && m->conns[i].phase == CONN_HANDSHAKE)
      conn_step(m, &m->conns[i], POLLIN, now);
  strangers_expire(m, now);
  conns_compact(m);
  return STRATA_OK;
}

void strata_tcp_mesh_step(strata_tcp_mesh *m) {
  if (m) poll_once(m, 0);
}

size_t strata_tcp_mesh_pollfds(const strata_tcp_mesh *m, struct pollfd *out, size_t cap) {
  size_t n = 0;
  if (!m) return 0;
  if (!out) return 1 + m->nconns;
  if (n < cap && m->listen_fd >= 0)
    out[n++] = (struct pollfd){.fd = m->listen_fd, .events = POLLIN};
  for (size_t i = 0; i < m->nconns && n < cap; i++) {
    short events = conn_events(&m->conns[i]);
    if (events && m->conns[i].fd >= 0)
      out[n++] = (struct pollfd){.fd = m->conns[i].fd, .events = events};
  }
  return n;
}

const char *strata_tcp_mesh_address(const strata_tcp_mesh *m, int peer) {
  if (!m || peer < 0 || peer >= m->nranks) return "?";
  return m->addresses + (size_t)peer * STRATA_TCP_ADDRESS_BYTES;
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

/* The pairs open waits for (-1: none): rank ^ 1, a pair every algorithm uses first (ring
 * neighbours, the first exchange of recursive halving and doubling, a binomial tree's leaves and
 * their parents). In a job of odd size the last rank has none, so it pairs with the one before,
 * which then waits for both: each side of every pair open makes waits for the other, so open is
 * a meeting point of the two and never returns on one side only. */
static void open_partners(int rank, int nranks, int partners[2]) {
  partners[0] = (rank ^ 1) < nranks ? rank ^ 1 : rank - 1;
  partners[1] = nranks % 2 == 1 && nranks > 1 && rank == nranks - 2 ? nranks - 1 : -1;
}

/* Open's wait: until the partner's pair is up, or why not. A failure the partner's rank (or
 * another) published is adopted, so every rank of a misconfigured job prints the same reason;
 * a merely lost connection is reported only if nothing more precise arrives within
 * MESH_SOFT_ERROR_GRACE_S (the peer may itself have just failed with the reason). */
static int open_wait(mesh *m, int partner) {
  mesh_link *l = &m->links[partner];
  double soft_deadline_s = 0;
  for (;;) {
    if (l->state == LINK_UP) return STRATA_OK;
    double now = strata_now_s();
    if (l->state == LINK_FAILED) {
      if (is_check_failure(l->status) || l->status == STRATA_ERR_NO_MEMORY) return l->status;
      if (!soft_deadline_s) soft_deadline_s = now + MESH_SOFT_ERROR_GRACE_S;
      m->trouble_seen = 1;
    }
    if (m->trouble_seen && now >= m->next_failure_check_s) {
      m->next_failure_check_s = now + MESH_FAILURE_CHECK_S;
      int adopted = adopt_failure(m);
      if (adopted != STRATA_OK) return adopted;
    }
    if (l->state == LINK_FAILED && now >= soft_deadline_s) return l->status;
    int status = poll_once(m, MESH_POLL_SLICE_MS);
    if (status != STRATA_OK) return status;
  }
}

void strata_tcp_mesh_close(strata_tcp_mesh *m) {
  if (!m) return;
  for (size_t i = 0; i < m->nconns; i++) conn_finish(&m->conns[i]);
  for (int q = 0; m->links && q < m->nranks; q++) link_release(m, &m->links[q]);
  if (m->listen_fd >= 0) close(m->listen_fd);
  free(m->conns);
  free(m->pollfds);
  free(m->links);
  free(m->addresses);
  sodium_memzero(m->params.key, sizeof m->params.key);
  sodium_memzero(&m->cfg_copy, sizeof m->cfg_copy);
  free(m);
}

int strata_tcp_mesh_open(const strata_config *cfg, int rank, int nranks, strata_store *store,
                         unsigned version, const strata_tcp_mesh_events *events,
                         strata_tcp_mesh **out, char *err, size_t err_len) {
  *out = NULL;
  if (err && err_len) err[0] = '\0';
  mesh *m = calloc(1, sizeof *m);
  if (!m) {
    if (err && err_len) snprintf(err, err_len, "rank %d: out of memory", rank);
    return STRATA_ERR_NO_MEMORY;
  }
  m->cfg_copy = *cfg;
  m->cfg = &m->cfg_copy;
  if (events) m->events = *events;
  m->rank = rank;
  m->nranks = nranks;
  m->streams = cfg->tcp_streams;
  m->listen_fd = -1;
  m->store = store;
  m->err = err;
  m->err_len = err_len;
  m->opening = 1;
  /* descriptors kept from strangers for the pairs this rank may come to hold: a full mesh's
   * worth in a small job, 64 pairs' (the partners of recursive halving up to 2^64 ranks and then
   * some) in a large one */
  m->expected = (nranks - 1 < 64 ? nranks - 1 : 64) * (m->streams + 1);
  m->links = calloc((size_t)nranks, sizeof *m->links);
  m->addresses = calloc((size_t)nranks, STRATA_TCP_ADDRESS_BYTES);
  m->pollfds = malloc(sizeof *m->pollfds);
  int status = m->links && m->addresses && m->pollfds ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (status != STRATA_OK) mesh_error(m, status, "rank %d: out of memory", rank);
  for (int q = 0; status == STRATA_OK && q < nranks; q++)
    snprintf(m->addresses + (size_t)q * STRATA_TCP_ADDRESS_BYTES, STRATA_TCP_ADDRESS_BYTES, "?");
  if (status == STRATA_OK) {
    status = strata_handshake_params_init(&m->params, cfg->job_id, cfg->secret, rank, nranks,
                                          m->streams);
    if (status != STRATA_OK)
      mesh_error(m, status, "rank %d: %s", rank,
                 status == STRATA_ERR_SYSTEM      ? "libsodium failed to initialize"
                 : status == STRATA_ERR_NO_MEMORY ? "out of memory deriving the job key"
                                                  : "job id too long");
  }
  if (status == STRATA_OK) {
    m->params.version = version;
    m->params.encrypt = cfg->encrypt;
    m->params.admit = mesh_admit;
    m->params.admit_ctx = m;
    strata_secret_warn_once(cfg->secret, rank);
    status = strata_tcp_tune_check(cfg, err, err_len);
  }
  if (status == STRATA_OK) {
    size_unproven(m);
    status = choose_prefix(m);
  }
  if (status == STRATA_OK) status = publish_address(m, store);
  if (status == STRATA_OK && nranks > 1) {
    int partners[2];
    open_partners(rank, nranks, partners);
    for (int i = 0; i < 2; i++) strata_tcp_mesh_want(m, partners[i]);
    for (int i = 0; i < 2 && status == STRATA_OK; i++)
      if (partners[i] >= 0) status = open_wait(m, partners[i]);
  }
  m->opening = 0;
  m->err = m->scratch; /* open's buffer is the caller's: later messages go to the events */
  m->err_len = sizeof m->scratch;
  if (status != STRATA_OK) {
    m->events.linked = NULL; /* links already handed over stay with the owner, who gives up too */
    strata_tcp_mesh_close(m);
    return status;
  }
  *out = m;
  return STRATA_OK;
}
