/*
 * store_server.c — the rendezvous store's server: one thread, one poll() over every client.
 *
 * A job of N ranks opens N connections at once, and most of them immediately ask for keys that
 * do not exist yet. Nothing here may block on one client: every socket is non-blocking, input is
 * buffered until a whole frame (store_wire.h) arrived, output is buffered until the socket takes
 * it. A GET or WAIT whose keys are missing becomes a *waiter* kept by the server and answered by
 * the SET or ADD that completes it, or with STRATA_ERR_TIMEOUT when its deadline passes, so a
 * client never polls.
 *
 * A job's store (strata_store_server_start_job) is the one rank 0 of a communicator serves for
 * that communicator alone: it answers a HELLO (store_wire.h) by admitting each rank of its job and
 * size once, and tells any other caller to wait for it to close, which is how the job's next
 * communicator at the same address never mixes with this one.
 *
 * Invariants:
 *  - only the server thread touches the table, the connections and the waiters; stop() talks to
 *    it through a pipe and joins it, so no lock is needed;
 *  - a waiter points to a live connection: a connection is freed only after its waiters are;
 *  - the thread blocks every signal: process signals belong to the program that embeds us
 *    (`strata launch` forwards them, `strata store` waits for them in strata_store_server_run).
 * Must never: block in a read or write, trust a length field before checking it, or crash on a
 * malformed frame (the offending connection is closed, the others carry on).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "boot/store.h"
#include "boot/store_net.h"
#include "boot/store_wire.h"
#include "core/core.h"

typedef struct store_entry {
  struct store_entry *next;
  char *key;
  uint8_t *value;
  size_t len;
} store_entry;

typedef struct store_conn {
  int fd;
  int dead;
  uint8_t *in;
  size_t in_len, in_cap;
  uint8_t *out;
  size_t out_off, out_len, out_cap;
} store_conn;

typedef struct store_waiter {
  struct store_waiter *next;
  store_conn *conn;
  uint32_t request_id;
  uint8_t op; /* STORE_WIRE_GET or STORE_WIRE_WAIT */
  uint32_t nkeys;
  uint32_t next_missing; /* keys[0 .. next_missing) exist (keys are never deleted) */
  char **keys;
  double deadline_s;
} store_waiter;

struct strata_store_server {
  int listen_fd;
  int wake_fds[2]; /* stop() writes to [1]; the thread polls [0] */
  int port;
  pthread_t thread;
  int thread_started;
  atomic_int running; /* 1 while the thread serves; 0 once it returned */
  store_entry **buckets;
  size_t nbuckets, nentries;
  store_conn **conns;
  size_t nconns, conns_cap;
  struct pollfd *pfds;
  size_t pfds_cap;
  store_waiter *waiters;
  /* a job's store: the job and size it serves, and a bit per rank already admitted */
  char *job_id;
  uint32_t nranks;
  uint8_t *admitted;
};

/* ---- the key table: chained hash, doubled when the load reaches 1 ---- */

static uint64_t key_hash(const char *key) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const unsigned char *c = (const unsigned char *)key; *c; c++)
    h = (h ^ *c) * 1099511628211ull;
  return h;
}

static store_entry *table_find(strata_store_server *srv, const char *key) {
  for (store_entry *e = srv->buckets[key_hash(key) & (srv->nbuckets - 1)]; e; e = e->next)
    if (!strcmp(e->key, key)) return e;
  return NULL;
}

static int table_grow(strata_store_server *srv) {
  size_t n = srv->nbuckets * 2;
  store_entry **buckets = calloc(n, sizeof *buckets);
  if (!buckets) return STRATA_ERR_NO_MEMORY;
  for (size_t i = 0; i < srv->nbuckets; i++) {
    for (store_entry *e = srv->buckets[i], *next; e; e = next) {
      next = e->next;
      store_entry **slot = &buckets[key_hash(e->key) & (n - 1)];
      e->next = *slot;
      *slot = e;
    }
  }
  free(srv->buckets);
  srv->buckets = buckets;
  srv->nbuckets = n;
  return STRATA_OK;
}

/* Stores a copy of value under key, replacing any old value. */
static int table_set(strata_store_server *srv, const char *key, const void *value, size_t len) {
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy) return STRATA_ERR_NO_MEMORY;
  if (len) memcpy(copy, value, len);
  store_entry *e = table_find(srv, key);
  if (e) {
    free(e->value);
    e->value = copy;
    e->len = len;
    return STRATA_OK;
  }
  if (srv->nentries >= srv->nbuckets && table_grow(srv) != STRATA_OK) {
    free(copy);
    return STRATA_ERR_NO_MEMORY;
  }
  e = calloc(1, sizeof *e);
  if (!e || !(e->key = strdup(key))) {
    free(e);
    free(copy);
    return STRATA_ERR_NO_MEMORY;
  }
  e->value = copy;
  e->len = len;
  store_entry **slot = &srv->buckets[key_hash(key) & (srv->nbuckets - 1)];
  e->next = *slot;
  *slot = e;
  srv->nentries++;
  return STRATA_OK;
}

static void table_free(strata_store_server *srv) {
  for (size_t i = 0; srv->buckets && i < srv->nbuckets; i++) {
    for (store_entry *e = srv->buckets[i], *next; e; e = next) {
      next = e->next;
      free(e->key);
      free(e->value);
      free(e);
    }
  }
  free(srv->buckets);
}

/* ---- replies ---- */

static int conn_reserve_out(store_conn *c, size_t extra) {
  if (c->out_off > 0 && c->out_off == c->out_len) c->out_off = c->out_len = 0;
  if (c->out_len + extra <= c->out_cap) return 0;
  size_t cap = c->out_cap ? c->out_cap : 256;
  while (cap < c->out_len + extra) cap *= 2;
  uint8_t *out = realloc(c->out, cap);
  if (!out) return -1;
  c->out = out;
  c->out_cap = cap;
  return 0;
}

/* Queues a reply frame; body may be NULL with body_len 0. Out of memory kills the connection
 * (its client then sees STRATA_ERR_PEER_LOST rather than a reply that never comes). */
static void conn_reply(store_conn *c, uint32_t request_id, int status, const void *body,
                       size_t body_len) {
  size_t frame = 4 + STORE_WIRE_REPLY_HEADER_BYTES + body_len;
  if (c->dead || conn_reserve_out(c, frame) != 0) {
    c->dead = 1;
    return;
  }
  uint8_t *p = c->out + c->out_len;
  store_wire_put_u32(p, (uint32_t)(frame - 4));
  store_wire_put_u16(p + 4, STORE_WIRE_MAGIC);
  p[6] = STORE_WIRE_VERSION;
  p[7] = 0;
  store_wire_put_u32(p + 8, request_id);
  store_wire_put_u32(p + 12, (uint32_t)status);
  if (body_len) memcpy(p + 16, body, body_len);
  c->out_len += frame;
}

static void conn_reply_value(store_conn *c, uint32_t request_id, const store_entry *e) {
  size_t body_len = 4 + e->len;
  uint8_t *body = malloc(body_len);
  if (!body) {
    c->dead = 1;
    return;
  }
  store_wire_put_u32(body, (uint32_t)e->len);
  if (e->len) memcpy(body + 4, e->value, e->len);
  conn_reply(c, request_id, STRATA_OK, body, body_len);
  free(body);
}

/* Writes what the socket takes now. */
static void conn_flush(store_conn *c) {
  while (!c->dead && c->out_off < c->out_len) {
    ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c->out_off += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) c->dead = 1;
      return;
    }
  }
}

/* ---- waiters ---- */

static void waiter_free(store_waiter *w) {
  for (uint32_t i = 0; i < w->nkeys; i++) free(w->keys[i]);
  free(w->keys);
  free(w);
}

/* True when every key of w exists; answers it then. */
static int waiter_try_answer(strata_store_server *srv, store_waiter *w) {
  while (w->next_missing < w->nkeys && table_find(srv, w->keys[w->next_missing])) w->next_missing++;
  if (w->next_missing < w->nkeys) return 0;
  if (w->op == STORE_WIRE_GET)
    conn_reply_value(w->conn, w->request_id, table_find(srv, w->keys[0]));
  else
    conn_reply(w->conn, w->request_id, STRATA_OK, NULL, 0);
  return 1;
}

/* Answers the waiters a change of `key` completes (key NULL: those past their deadline). */
static void waiters_update(strata_store_server *srv, const char *key, double now_s) {
  for (store_waiter **link = &srv->waiters; *link;) {
    store_waiter *w = *link;
    int done = 0;
    if (key) {
      /* only the key it is blocked on can release it: O(1) per waiter per set, so a thousand
       * ranks each waiting for a thousand keys stay cheap */
      if (!strcmp(w->keys[w->next_missing], key)) done = waiter_try_answer(srv, w);
    } else if (now_s >= w->deadline_s) {
      conn_reply(w->conn, w->request_id, STRATA_ERR_TIMEOUT, NULL, 0);
      done = 1;
    }
    if (done) {
      conn_flush(w->conn);
      *link = w->next;
      waiter_free(w);
    } else {
      link = &w->next;
    }
  }
}

static void waiters_drop_conn(strata_store_server *srv, const store_conn *c) {
  for (store_waiter **link = &srv->waiters; *link;) {
    store_waiter *w = *link;
    if (w->conn == c) {
      *link = w->next;
      waiter_free(w);
    } else {
      link = &w->next;
    }
  }
}

static double waiters_next_deadline_s(const strata_store_server *srv) {
  double next = -1;
  for (const store_waiter *w = srv->waiters; w; w = w->next)
    if (next < 0 || w->deadline_s < next) next = w->deadline_s;
  return next;
}

/* ---- requests ---- */

typedef struct frame_reader {
  const uint8_t *p;
  size_t left;
  int bad;
} frame_reader;

static uint32_t read_u32(frame_reader *r) {
  if (r->left < 4) {
    r->bad = 1;
    return 0;
  }
  uint32_t v = store_wire_get_u32(r->p);
  r->p += 4;
  r->left -= 4;
  return v;
}

/* A malloc'd NUL-terminated key; NULL (and r->bad) when malformed. */
static char *read_key(frame_reader *r) {
  uint32_t n = read_u32(r);
  if (r->bad || n == 0 || n > STORE_WIRE_MAX_KEY_BYTES || n > r->left || memchr(r->p, 0, n)) {
    r->bad = 1;
    return NULL;
  }
  char *key = malloc(n + 1);
  if (!key) {
    r->bad = 1;
    return NULL;
  }
  memcpy(key, r->p, n);
  key[n] = '\0';
  r->p += n;
  r->left -= n;
  return key;
}

static int handle_set(strata_store_server *srv, store_conn *c, uint32_t id, frame_reader *r) {
  char *key = read_key(r);
  uint32_t len = read_u32(r);
  if (r->bad || len != r->left) {
    free(key);
    return -1;
  }
  int status = table_set(srv, key, r->p, len);
  conn_reply(c, id, status, NULL, 0);
  if (status == STRATA_OK) waiters_update(srv, key, 0);
  free(key);
  return 0;
}

/* SET_IF_ABSENT: the first writer of a key wins; the others learn they were not first. What
 * survivors of a failure agree on is written this way (engine/elastic.c): one atomic step, so a
 * writer that dies right after it leaves its decision in place. */
static int handle_set_if_absent(strata_store_server *srv, store_conn *c, uint32_t id,
                                frame_reader *r) {
  char *key = read_key(r);
  uint32_t len = read_u32(r);
  if (r->bad || len != r->left) {
    free(key);
    return -1;
  }
  uint8_t set = table_find(srv, key) == NULL;
  int status = set ? table_set(srv, key, r->p, len) : STRATA_OK;
  conn_reply(c, id, status, &set, 1);
  if (status == STRATA_OK && set) waiters_update(srv, key, 0);
  free(key);
  return 0;
}

/* Parses the decimal integer an ADD key holds; -1 when it is not one. */
static int parse_int64(const store_entry *e, int64_t *out) {
  char text[32];
  if (e->len == 0 || e->len >= sizeof text) return -1;
  memcpy(text, e->value, e->len);
  text[e->len] = '\0';
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || *end) return -1;
  *out = v;
  return 0;
}

static int handle_add(strata_store_server *srv, store_conn *c, uint32_t id, frame_reader *r) {
  char *key = read_key(r);
  if (r->bad || r->left != 8) {
    free(key);
    return -1;
  }
  int64_t delta = (int64_t)store_wire_get_u64(r->p), value = 0;
  store_entry *e = table_find(srv, key);
  int status = STRATA_OK;
  if (e && parse_int64(e, &value) != 0) status = STRATA_ERR_INVALID_ARG;
  if (status == STRATA_OK && __builtin_add_overflow(value, delta, &value))
    status = STRATA_ERR_INVALID_ARG;
  if (status == STRATA_OK) {
    char text[32];
    int n = snprintf(text, sizeof text, "%lld", (long long)value);
    status = table_set(srv, key, text, (size_t)n);
  }
  uint8_t body[8];
  store_wire_put_u64(body, (uint64_t)value);
  conn_reply(c, id, status, body, status == STRATA_OK ? 8 : 0);
  if (status == STRATA_OK) waiters_update(srv, key, 0);
  free(key);
  return 0;
}

/* Whom a job's store admits: each rank of its own job and size, once. */
static uint8_t hello_verdict(strata_store_server *srv, const uint8_t *job, size_t job_len,
                             uint32_t rank, uint32_t nranks) {
  if (!srv->job_id) return STORE_WIRE_WELCOME;
  if (job_len != strlen(srv->job_id) || memcmp(job, srv->job_id, job_len) ||
      nranks != srv->nranks || rank >= nranks) {
    STRATA_LOG(STRATA_LOG_DEBUG, -1,
               "store: a rank %u of %u ranks of job '%.*s' asked this store of job '%s' (%u ranks)",
               rank, nranks, (int)job_len, (const char *)job, srv->job_id, srv->nranks);
    return STORE_WIRE_OTHER_JOB;
  }
  uint8_t bit = (uint8_t)(1u << (rank & 7));
  if (srv->admitted[rank >> 3] & bit) return STORE_WIRE_EARLIER;
  srv->admitted[rank >> 3] |= bit;
  return STORE_WIRE_WELCOME;
}

static int handle_hello(strata_store_server *srv, store_conn *c, uint32_t id, frame_reader *r) {
  uint32_t job_len = read_u32(r);
  if (r->bad || job_len > STORE_WIRE_MAX_KEY_BYTES || r->left != (size_t)job_len + 8) return -1;
  const uint8_t *job = r->p;
  uint32_t rank = store_wire_get_u32(r->p + job_len),
           nranks = store_wire_get_u32(r->p + job_len + 4);
  uint8_t verdict = hello_verdict(srv, job, job_len, rank, nranks);
  conn_reply(c, id, STRATA_OK, &verdict, 1);
  return 0;
}

/* GET (one key) and WAIT (n keys): answer now, or keep a waiter until the keys exist. */
static int handle_wait(strata_store_server *srv, store_conn *c, uint8_t op, uint32_t id,
                       uint32_t timeout_ms, frame_reader *r) {
  uint32_t nkeys = op == STORE_WIRE_GET ? 1 : read_u32(r);
  if (r->bad || nkeys == 0 || nkeys > STORE_WIRE_MAX_WAIT_KEYS || nkeys > r->left / 5) return -1;
  store_waiter *w = calloc(1, sizeof *w);
  if (!w || !(w->keys = calloc(nkeys, sizeof *w->keys))) {
    free(w);
    return -1;
  }
  w->conn = c;
  w->request_id = id;
  w->op = op;
  for (; w->nkeys < nkeys; w->nkeys++) {
    w->keys[w->nkeys] = read_key(r);
    if (r->bad) break;
  }
  if (r->bad || r->left != 0) {
    waiter_free(w);
    return -1;
  }
  if (waiter_try_answer(srv, w)) {
    waiter_free(w);
  } else if (timeout_ms == 0) {
    conn_reply(c, id, STRATA_ERR_TIMEOUT, NULL, 0);
    waiter_free(w);
  } else {
    w->deadline_s = store_net_now_s() + timeout_ms / 1000.0;
    w->next = srv->waiters;
    srv->waiters = w;
  }
  return 0;
}

/* One whole request frame (after the length word). Returns -1 when malformed. */
static int handle_frame(strata_store_server *srv, store_conn *c, const uint8_t *p, size_t len) {
  if (len < STORE_WIRE_REQUEST_HEADER_BYTES || store_wire_get_u16(p) != STORE_WIRE_MAGIC ||
      p[2] != STORE_WIRE_VERSION)
    return -1;
  uint8_t op = p[3];
  uint32_t id = store_wire_get_u32(p + 4), timeout_ms = store_wire_get_u32(p + 8);
  frame_reader r = {p + STORE_WIRE_REQUEST_HEADER_BYTES, len - STORE_WIRE_REQUEST_HEADER_BYTES, 0};
  switch (op) {
    case STORE_WIRE_SET:
      return handle_set(srv, c, id, &r);
    case STORE_WIRE_ADD:
      return handle_add(srv, c, id, &r);
    case STORE_WIRE_GET:
    case STORE_WIRE_WAIT:
      return handle_wait(srv, c, op, id, timeout_ms, &r);
    case STORE_WIRE_HELLO:
      return handle_hello(srv, c, id, &r);
    case STORE_WIRE_SET_IF_ABSENT:
      return handle_set_if_absent(srv, c, id, &r);
    default:
      return -1;
  }
}

/* Reads what arrived and handles every complete frame. */
static void conn_read(strata_store_server *srv, store_conn *c) {
  for (;;) {
    if (c->in_cap - c->in_len < 4096) {
      size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
      uint8_t *in = realloc(c->in, cap);
      if (!in) {
        c->dead = 1;
        return;
      }
      c->in = in;
      c->in_cap = cap;
    }
    ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      c->dead = 1; /* closed by the client, or reset */
      return;
    }
    c->in_len += (size_t)n;
    size_t off = 0;
    while (c->in_len - off >= 4) {
      uint32_t len = store_wire_get_u32(c->in + off);
      if (len > STORE_WIRE_MAX_FRAME_BYTES) {
        c->dead = 1;
        return;
      }
      if (c->in_len - off - 4 < len) break;
      if (handle_frame(srv, c, c->in + off + 4, len) != 0) {
        STRATA_LOG(STRATA_LOG_WARN, -1, "store: malformed request, closing that connection");
        c->dead = 1;
        return;
      }
      off += 4 + (size_t)len;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
  }
  conn_flush(c);
}

/* ---- connections ---- */

static void conn_free(store_conn *c) {
  close(c->fd);
  free(c->in);
  free(c->out);
  free(c);
}

static void accept_clients(strata_store_server *srv) {
  for (;;) {
    int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE)
        STRATA_LOG(STRATA_LOG_ERROR, -1, "store: out of file descriptors, a client waits");
      return;
    }
    store_net_set_nodelay(fd);
    if (srv->nconns == srv->conns_cap) {
      size_t cap = srv->conns_cap ? srv->conns_cap * 2 : 64;
      store_conn **conns = realloc(srv->conns, cap * sizeof *conns);
      if (!conns) {
        close(fd);
        return;
      }
      srv->conns = conns;
      srv->conns_cap = cap;
    }
    store_conn *c = calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      return;
    }
    c->fd = fd;
    srv->conns[srv->nconns++] = c;
  }
}

static void reap_dead_conns(strata_store_server *srv) {
  size_t kept = 0;
  for (size_t i = 0; i < srv->nconns; i++) {
    store_conn *c = srv->conns[i];
    if (c->dead) {
      waiters_drop_conn(srv, c);
      conn_free(c);
    } else {
      srv->conns[kept++] = c;
    }
  }
  srv->nconns = kept;
}

/* Builds the poll set: [0] wake pipe, [1] listener, [2 + i] connection i. */
static int build_pollfds(strata_store_server *srv) {
  size_t n = 2 + srv->nconns;
  if (n > srv->pfds_cap) {
    struct pollfd *pfds = realloc(srv->pfds, n * sizeof *pfds);
    if (!pfds) return -1;
    srv->pfds = pfds;
    srv->pfds_cap = n;
  }
  srv->pfds[0] = (struct pollfd){.fd = srv->wake_fds[0], .events = POLLIN};
  srv->pfds[1] = (struct pollfd){.fd = srv->listen_fd, .events = POLLIN};
  for (size_t i = 0; i < srv->nconns; i++) {
    store_conn *c = srv->conns[i];
    short events = POLLIN;
    if (c->out_off < c->out_len) events |= POLLOUT;
    srv->pfds[2 + i] = (struct pollfd){.fd = c->fd, .events = events};
  }
  return 0;
}

static void *server_main(void *arg) {
  strata_store_server *srv = arg;
  for (;;) {
    if (build_pollfds(srv) != 0) break;
    size_t polled = srv->nconns;
    double deadline_s = waiters_next_deadline_s(srv);
    int timeout_ms = deadline_s < 0 ? -1 : store_net_poll_ms(deadline_s);
    int ready = poll(srv->pfds, 2 + polled, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      STRATA_LOG(STRATA_LOG_ERROR, -1, "store: poll failed: %s", strerror(errno));
      break;
    }
    if (ready > 0 && srv->pfds[0].revents) break; /* stop() */
    for (size_t i = 0; ready > 0 && i < polled; i++) {
      store_conn *c = srv->conns[i];
      short revents = srv->pfds[2 + i].revents;
      if (revents & (POLLIN | POLLHUP | POLLERR)) conn_read(srv, c);
      if (revents & POLLOUT) conn_flush(c);
    }
    if (ready > 0 && (srv->pfds[1].revents & POLLIN)) accept_clients(srv);
    waiters_update(srv, NULL, store_net_now_s());
    reap_dead_conns(srv);
  }
  atomic_store(&srv->running, 0);
  return NULL;
}

/* ---- lifecycle ---- */

/* A server holds one descriptor per rank; jobs of thousands of ranks exceed the common soft
 * limit of 1024, so lift the soft limit to the hard one (best effort, process-wide). */
static void raise_fd_limit(void) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
}

static int server_listen(strata_store_server *srv, const char *addr) {
  char host[256], err[320];
  int port;
  int status = strata_store_addr_parse(addr, 1, host, sizeof host, &port, err, sizeof err);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "store: %s", err);
    return status;
  }
  char port_text[16];
  snprintf(port_text, sizeof port_text, "%d", port);
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *list = NULL;
  int gai = getaddrinfo(host[0] ? host : "0.0.0.0", port_text, &hints, &list);
  if (gai != 0) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "store: cannot resolve '%s': %s", host, gai_strerror(gai));
    return STRATA_ERR_NOT_FOUND;
  }
  int saved_errno = 0;
  for (struct addrinfo *ai = list; ai && srv->listen_fd < 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      srv->listen_fd = fd;
    } else {
      saved_errno = errno;
      close(fd);
    }
  }
  freeaddrinfo(list);
  if (srv->listen_fd < 0) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "store: cannot listen on %s: %s", addr, strerror(saved_errno));
    return STRATA_ERR_SYSTEM;
  }
  struct sockaddr_storage bound;
  socklen_t bound_len = sizeof bound;
  if (getsockname(srv->listen_fd, (struct sockaddr *)&bound, &bound_len) != 0)
    return STRATA_ERR_SYSTEM;
  srv->port = ntohs(((struct sockaddr_in *)&bound)->sin_port); /* same offset for v6 */
  return STRATA_OK;
}

/* Starts the thread with every signal blocked (it inherits the mask). */
static int server_spawn(strata_store_server *srv) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&srv->thread, NULL, server_main, srv);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) return STRATA_ERR_SYSTEM;
  srv->thread_started = 1;
  return STRATA_OK;
}

static void server_free(strata_store_server *srv) {
  /* the listener first: a client still connecting is refused rather than queued unanswered */
  if (srv->listen_fd >= 0) close(srv->listen_fd);
  while (srv->waiters) {
    store_waiter *w = srv->waiters;
    srv->waiters = w->next;
    waiter_free(w);
  }
  for (size_t i = 0; i < srv->nconns; i++) conn_free(srv->conns[i]);
  free(srv->conns);
  free(srv->pfds);
  table_free(srv);
  free(srv->job_id);
  free(srv->admitted);
  if (srv->wake_fds[0] >= 0) close(srv->wake_fds[0]);
  if (srv->wake_fds[1] >= 0) close(srv->wake_fds[1]);
  free(srv);
}

/* job_id NULL: a store for anyone; else a job's store (see the top of this file). */
static int server_start(const char *addr, const char *job_id, int nranks,
                        strata_store_server **out) {
  if (!addr || !out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  strata_store_server *srv = calloc(1, sizeof *srv);
  if (!srv) return STRATA_ERR_NO_MEMORY;
  srv->listen_fd = srv->wake_fds[0] = srv->wake_fds[1] = -1;
  srv->nbuckets = 64;
  srv->buckets = calloc(srv->nbuckets, sizeof *srv->buckets);
  int status = srv->buckets ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (status == STRATA_OK && job_id) {
    srv->nranks = (uint32_t)nranks;
    srv->job_id = strdup(job_id);
    srv->admitted = calloc(((size_t)nranks + 7) / 8, 1);
    if (!srv->job_id || !srv->admitted) status = STRATA_ERR_NO_MEMORY;
  }
  if (status == STRATA_OK && pipe2(srv->wake_fds, O_CLOEXEC | O_NONBLOCK) != 0)
    status = STRATA_ERR_SYSTEM;
  raise_fd_limit();
  if (status == STRATA_OK) status = server_listen(srv, addr);
  atomic_store(&srv->running, 1);
  if (status == STRATA_OK) status = server_spawn(srv);
  if (status != STRATA_OK) {
    server_free(srv);
    return status;
  }
  STRATA_LOG(STRATA_LOG_DEBUG, -1, "store: serving on %s (port %d)", addr, srv->port);
  *out = srv;
  return STRATA_OK;
}

int strata_store_server_start(const char *addr, strata_store_server **out) {
  return server_start(addr, NULL, 0, out);
}

int strata_store_server_start_job(const char *addr, const char *job_id, int nranks,
                                  strata_store_server **out) {
  if (out) *out = NULL;
  if (!job_id || nranks < 1) return STRATA_ERR_INVALID_ARG;
  return server_start(addr, job_id, nranks, out);
}

int strata_store_server_port(const strata_store_server *server) {
  return server ? server->port : -1;
}

int strata_store_server_run(strata_store_server *server) {
  if (!server) return STRATA_ERR_INVALID_ARG;
  sigset_t stop_signals, old;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old);
  int status = STRATA_OK;
  for (;;) {
    struct timespec tick = {.tv_sec = 0, .tv_nsec = 200 * 1000 * 1000};
    int sig = sigtimedwait(&stop_signals, NULL, &tick);
    if (sig > 0) break;
    if (!atomic_load(&server->running)) {
      status = STRATA_ERR_SYSTEM; /* the thread died (the log says why) */
      break;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return status;
}

void strata_store_server_stop(strata_store_server *server) {
  if (!server) return;
  if (server->thread_started) {
    ssize_t n;
    do n = write(server->wake_fds[1], "x", 1);
    while (n < 0 && errno == EINTR);
    pthread_join(server->thread, NULL);
  }
  server_free(server);
}
