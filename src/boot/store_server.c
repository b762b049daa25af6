// SPDX-License-Identifier: Apache-2.0
/*
 * store_server.c — the rendezvous store's server: one thread, one epoll set over every client.
 *
 * A job of N ranks opens N connections at once, and most of them immediately ask for keys that
 * do not exist yet. Nothing here may block on one client: every socket is non-blocking, input is
 * buffered until a whole frame (store_wire.h) arrived, output is buffered until the socket takes
 * it. A GET or WAIT whose keys are missing becomes a *waiter* kept by the server and answered by
 * the SET or ADD that completes it, or with STRATA_ERR_TIMEOUT when its deadline passes, so a
 * client never polls.
 *
 * The loop waits in epoll, level-triggered, and visits only what changed: the connections epoll
 * reports and those something marked (a reply queued, a refusal, frames left for a turn:
 * conn_mark, conns_settle), so ten thousand idle clients cost nothing per wake-up. Level, not
 * edge: the server leaves bytes unread on purpose (a paused connection, one whose turn is over, a
 * stranger read one AUTH frame at a time), and with level triggering the kernel keeps reporting
 * them once they are watched again, where edge triggering would need a list of our own of sockets
 * with bytes left; a connection's interest changes (conn_watch) only when it pauses, resumes or
 * has replies to send.
 *
 * A job's store (strata_store_server_start_job) is the one rank 0 of a communicator serves for
 * that communicator alone: it answers a HELLO (store_wire.h) by admitting each rank of its job and
 * size once, and tells any other caller to wait for it to close, which is how the job's next
 * communicator at the same address never mixes with this one.
 *
 * Anyone who can reach the port can connect, so a connection starts as a stranger: the server
 * sends it a challenge and it must prove the job key first (store_wire.h: AUTH), within
 * STORE_SERVER_AUTH_TIMEOUT_S, in one frame of at most STORE_WIRE_MAX_AUTH_FRAME_BYTES. A stranger
 * thus costs one small buffer and one MAC check, and cannot set, read or wait on anything. At most
 * STORE_SERVER_MAX_STRANGERS strangers are held; when they are all there, a new connection evicts
 * the oldest one that has had STORE_SERVER_EVICT_AGE_S to prove itself (a rank proves itself within
 * one round trip of connecting, so a flood of idle strangers delays a rank by about that age, never
 * by the timeout). Authenticated connections are ranks holding their store for the whole job: they
 * never time out, but each is bounded: frames by STORE_WIRE_MAX_FRAME_BYTES (checked on the length
 * word, before any buffering), values by STORE_WIRE_MAX_VALUE_BYTES, waiting requests by
 * STORE_SERVER_MAX_WAITERS_PER_CONN, and unread replies by STORE_SERVER_MAX_BACKLOG_BYTES: past
 * it, the server reads nothing more from that connection until its client reads. A connection
 * with many requests buffered is answered in turns (STORE_SERVER_TURN_*), the others served
 * between them, so one greedy client does not hold up the rest. What the table holds is bounded
 * too, as etcd's backend quota bounds its database: keys and values (plus STORE_ENTRY_OVERHEAD
 * each) at most the quota in total (STRATA_STORE_QUOTA; by default an eighth of the memory,
 * within STORE_SERVER_QUOTA_MIN/MAX) and a quarter of it from one connection; a set past either
 * is refused with STRATA_ERR_QUOTA and a log line, and the table is left as it was. When accept()
 * runs out of descriptors the oldest stranger that had STORE_SERVER_EVICT_AGE_S makes room (so
 * idle strangers at a low descriptor limit delay a rank by about that age per limit's worth of
 * them, never keep it out); when none had, the listener is left alone until one has, rather than
 * polled again at once (a level-triggered listener with a waiting client would spin).
 *
 * Invariants:
 *  - only the server thread touches the table, the connections and the waiters; stop() talks to
 *    it through a pipe and joins it, so no lock is needed;
 *  - a waiter points to a live connection: a connection is freed only after its waiters are;
 *  - the thread blocks every signal: process signals belong to the program that embeds us
 *    (`strata launch` forwards them, `strata store` waits for them in strata_store_server_run).
 * Must never: block in a read or write, trust a length field before checking it, act on a request
 * of a connection that has not proven the job key, or crash on a malformed frame (the offending
 * connection is closed and logged, the others carry on).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "boot/store.h"
#include "boot/store_net.h"
#include "boot/store_wire.h"
#include "core/core.h"

#define STORE_SERVER_MAX_CONNS 16384      /* authenticated ones: a rank each */
#define STORE_SERVER_MAX_STRANGERS 1024   /* connections that have not proven the key yet */
#define STORE_SERVER_AUTH_TIMEOUT_S 5.0   /* a stranger's time to prove the key */
#define STORE_SERVER_EVICT_AGE_S 0.25     /* a stranger this old may make room for a new one */
#define STORE_SERVER_ACCEPT_BACKOFF_S 0.1 /* out of descriptors: listener left alone this long */
#define STORE_SERVER_MAX_WAITERS_PER_CONN 256      /* a rank waits on one or two at once */
#define STORE_SERVER_MAX_BACKLOG_BYTES (32u << 20) /* unread replies that stop reading */
#define STORE_SERVER_READ_AHEAD_BYTES 65536u       /* beyond the frame being read */
/* one connection's turn: then the others' (a client that sends many requests at once must not
 * hold up everyone else while the server answers them all) */
#define STORE_SERVER_TURN_FRAMES 64
#define STORE_SERVER_TURN_REPLY_BYTES (4u << 20)
#define STORE_ENTRY_OVERHEAD 64 /* bytes an entry costs beyond its key and value */
#define STORE_SERVER_QUOTA_MIN ((size_t)256 << 20)
#define STORE_SERVER_QUOTA_MAX ((size_t)8 << 30)
#define STORE_SERVER_CONN_QUOTA_SHARE 4 /* one connection stores at most quota / this */

typedef struct store_entry {
  struct store_entry *next;
  char *key;
  uint8_t *value;
  size_t len;
} store_entry;

typedef struct store_conn {
  struct strata_store_server *srv;
  int fd;
  int dead;
  int authenticated;
  int closing; /* refused: nothing more is read; closed once the refusal is sent */
  uint8_t challenge[STORE_WIRE_AUTH_BYTES];
  double accepted_s;
  struct store_conn *stranger_prev, *stranger_next; /* the strangers, oldest first */
  uint32_t nwaiters;
  size_t stored_bytes; /* what its sets added to the table, against its share of the quota */
  int more;            /* complete frames wait in `in` for its next turn */
  int dirty;           /* listed in srv->dirty: settled (reaped or re-watched) next iteration */
  uint32_t events;     /* what epoll watches it for (conn_watch) */
  size_t slot;         /* its index in srv->conns */
  char peer[64];       /* "host:port" for the log */
  uint8_t *in;
  size_t in_len, in_cap;
  uint8_t *out;
  size_t out_off, out_len, out_cap;
} store_conn;

typedef struct store_waiter {
  struct store_waiter *next;
  store_conn *conn;
  uint32_t request_id;
  uint8_t op;     /* STORE_WIRE_GET, STORE_WIRE_WAIT or STORE_WIRE_WAIT_COUNT */
  int64_t target; /* WAIT_COUNT: the value its counter must reach */
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
  size_t stored_bytes, quota_bytes; /* the table's keys, values and overhead; its quota */
  double last_quota_log_s;
  store_conn **conns;
  size_t nconns, conns_cap;
  int epoll_fd;
  uint32_t listen_events; /* what epoll watches the listener for: EPOLLIN, or 0 while paused */
  /* connections something happened to since they were last settled (conn_mark); both arrays
   * have room for every connection, and a connection is listed at most once */
  store_conn **dirty, **settling;
  size_t ndirty;
  store_waiter *waiters;
  uint8_t key[32]; /* the job key every connection proves (store_wire.h: AUTH) */
  store_conn *strangers_oldest, *strangers_newest;
  size_t nstrangers;
  double listen_paused_until_s; /* the listener is not polled before then */
  double last_refusal_log_s, last_accept_error_log_s;
  unsigned long refusals_unlogged;
  /* requests handled, by op (0: any other op); logged when the server stops */
  uint64_t requests[STORE_WIRE_OPS];
  atomic_uint_fast64_t requests_total; /* the same, summed: read from other threads */
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

/* STRATA_OK when c may grow the table by `grow` bytes, else STRATA_ERR_QUOTA (logged). */
static int quota_check(strata_store_server *srv, const store_conn *c, const char *key,
                       size_t grow) {
  size_t conn_quota = srv->quota_bytes / STORE_SERVER_CONN_QUOTA_SHARE;
  int total_full = srv->stored_bytes + grow > srv->quota_bytes;
  int conn_full = c && c->stored_bytes + grow > conn_quota;
  if (!total_full && !conn_full) return STRATA_OK;
  double now_s = store_net_now_s();
  if (now_s - srv->last_quota_log_s >= 1.0) {
    srv->last_quota_log_s = now_s;
    if (total_full)
      STRATA_LOG(STRATA_LOG_WARN, -1,
                 "store: refused '%s' from %s: the store would hold %zu bytes, past its quota of "
                 "%zu (STRATA_STORE_QUOTA)",
                 key, c ? c->peer : "?", srv->stored_bytes + grow, srv->quota_bytes);
    else
      STRATA_LOG(STRATA_LOG_WARN, -1,
                 "store: refused '%s' from %s: that connection would hold %zu bytes, past its "
                 "share of %zu (a quarter of STRATA_STORE_QUOTA)",
                 key, c->peer, c->stored_bytes + grow, conn_quota);
  }
  return STRATA_ERR_QUOTA;
}

/* An entry of old_bytes became new_bytes: the table's count, and what c is charged (a
 * connection that shrinks a value someone else stored is credited at most what it holds). */
static void charge(strata_store_server *srv, store_conn *c, size_t old_bytes, size_t new_bytes) {
  if (new_bytes >= old_bytes) {
    srv->stored_bytes += new_bytes - old_bytes;
    if (c) c->stored_bytes += new_bytes - old_bytes;
    return;
  }
  size_t freed = old_bytes - new_bytes;
  srv->stored_bytes -= freed;
  if (c) c->stored_bytes -= freed < c->stored_bytes ? freed : c->stored_bytes;
}

/* Stores a copy of value under key, replacing any old value; c (NULL: the server itself) is
 * charged for what the table grows by. */
static int table_set(strata_store_server *srv, store_conn *c, const char *key, const void *value,
                     size_t len) {
  store_entry *e = table_find(srv, key);
  size_t old_bytes = e ? strlen(key) + e->len + STORE_ENTRY_OVERHEAD : 0;
  size_t new_bytes = strlen(key) + len + STORE_ENTRY_OVERHEAD;
  if (new_bytes > old_bytes && quota_check(srv, c, key, new_bytes - old_bytes) != STRATA_OK)
    return STRATA_ERR_QUOTA;
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy) return STRATA_ERR_NO_MEMORY;
  if (len) memcpy(copy, value, len);
  if (e) {
    free(e->value);
    e->value = copy;
    e->len = len;
    charge(srv, c, old_bytes, new_bytes);
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
  charge(srv, c, 0, new_bytes);
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

/* Something happened to c that the event loop must look at: it may have died or been refused,
 * have replies to send, or frames left for another turn (conns_settle). Never fails: the list
 * has room for every connection, and lists each at most once. */
static void conn_mark(store_conn *c) {
  if (c->dirty || !c->srv->dirty) return;
  c->dirty = 1;
  c->srv->dirty[c->srv->ndirty++] = c;
}

static int conn_reserve_out(store_conn *c, size_t extra) {
  if (c->out_len + extra <= c->out_cap) return 0;
  if (c->out_off > 0) { /* what was sent makes room before the buffer grows: it stays within
                         * twice the backlog, and each byte moves at most once per doubling */
    memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
    c->out_len -= c->out_off;
    c->out_off = 0;
    if (c->out_len + extra <= c->out_cap) return 0;
  }
  size_t cap = c->out_cap ? c->out_cap : 256;
  while (cap < c->out_len + extra) cap *= 2;
  uint8_t *out = realloc(c->out, cap);
  if (!out) return -1;
  c->out = out;
  c->out_cap = cap;
  return 0;
}

/* Room for a reply frame with body_len bytes of body, its header written: where the body goes,
 * or NULL (nothing to send: a refused connection, or out of memory, which kills the connection so
 * that its client sees STRATA_ERR_PEER_LOST rather than a reply that never comes). */
static uint8_t *conn_reply_begin(store_conn *c, uint32_t request_id, int status, size_t body_len) {
  size_t frame = 4 + STORE_WIRE_REPLY_HEADER_BYTES + body_len;
  if (c->closing) return NULL; /* refused: its waiters are dropped with it */
  conn_mark(c);
  if (c->dead || conn_reserve_out(c, frame) != 0) {
    c->dead = 1;
    return NULL;
  }
  uint8_t *p = c->out + c->out_len;
  store_wire_put_u32(p, (uint32_t)(frame - 4));
  store_wire_put_u16(p + 4, STORE_WIRE_MAGIC);
  p[6] = STORE_WIRE_VERSION;
  p[7] = 0;
  store_wire_put_u32(p + 8, request_id);
  store_wire_put_u32(p + 12, (uint32_t)status);
  c->out_len += frame;
  return p + 16;
}

/* Queues a reply frame; body may be NULL with body_len 0. */
static void conn_reply(store_conn *c, uint32_t request_id, int status, const void *body,
                       size_t body_len) {
  uint8_t *to = conn_reply_begin(c, request_id, status, body_len);
  if (to && body_len) memcpy(to, body, body_len);
}

static void conn_reply_value(store_conn *c, uint32_t request_id, const store_entry *e) {
  uint8_t *to = conn_reply_begin(c, request_id, STRATA_OK, 4 + e->len);
  if (!to) return;
  store_wire_put_u32(to, (uint32_t)e->len);
  if (e->len) memcpy(to + 4, e->value, e->len);
}

static size_t conn_backlog(const store_conn *c) {
  return c->out_len - c->out_off;
}

/* Writes what the socket takes now. A connection without a socket (the fuzzing entry point,
 * strata_store_server_feed) keeps its replies. */
static void conn_flush(store_conn *c) {
  while (!c->dead && c->fd >= 0 && c->out_off < c->out_len) {
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
  w->conn->nwaiters--;
  for (uint32_t i = 0; i < w->nkeys; i++) free(w->keys[i]);
  free(w->keys);
  free(w);
}

static int parse_int64(const store_entry *e, int64_t *out);

/* The counter at key: 0 when missing; -1 when the key holds something else. */
static int counter_read(strata_store_server *srv, const char *key, int64_t *value) {
  const store_entry *e = table_find(srv, key);
  *value = 0;
  return e ? parse_int64(e, value) : 0;
}

/* A WAIT_COUNT waiter: answered once its counter reached the target (or holds no counter). */
static int waiter_try_count(strata_store_server *srv, store_waiter *w) {
  int64_t value;
  if (counter_read(srv, w->keys[0], &value) != 0) {
    conn_reply(w->conn, w->request_id, STRATA_ERR_INVALID_ARG, NULL, 0);
    return 1;
  }
  if (value < w->target) return 0;
  uint8_t body[8];
  store_wire_put_u64(body, (uint64_t)value);
  conn_reply(w->conn, w->request_id, STRATA_OK, body, sizeof body);
  return 1;
}

/* True when every key of w exists (a WAIT_COUNT: its counter reached the target); answers it
 * then. */
static int waiter_try_answer(strata_store_server *srv, store_waiter *w) {
  if (w->op == STORE_WIRE_WAIT_COUNT) return waiter_try_count(srv, w);
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

/* What handling a frame did to its connection: anything but FRAME_OK closes it. */
typedef enum frame_result {
  FRAME_OK = 0,
  FRAME_MALFORMED = -1,
  FRAME_OVER_LIMIT = -2, /* a value, or requests waiting at once, over the server's limits */
  FRAME_UNAUTH = -3,     /* a request before AUTH */
  FRAME_REFUSED = -4,    /* an AUTH that does not prove the key */
} frame_result;

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
    return FRAME_MALFORMED;
  }
  if (len > STORE_WIRE_MAX_VALUE_BYTES) {
    free(key);
    return FRAME_OVER_LIMIT;
  }
  int status = table_set(srv, c, key, r->p, len);
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
    return FRAME_MALFORMED;
  }
  if (len > STORE_WIRE_MAX_VALUE_BYTES) {
    free(key);
    return FRAME_OVER_LIMIT;
  }
  uint8_t set = table_find(srv, key) == NULL;
  int status = set ? table_set(srv, c, key, r->p, len) : STRATA_OK;
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
    status = table_set(srv, c, key, text, (size_t)n);
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
  uint32_t nkeys = op == STORE_WIRE_WAIT ? read_u32(r) : 1;
  if (r->bad || nkeys == 0 || nkeys > STORE_WIRE_MAX_WAIT_KEYS || nkeys > r->left / 5) return -1;
  if (c->nwaiters >= STORE_SERVER_MAX_WAITERS_PER_CONN) return FRAME_OVER_LIMIT;
  store_waiter *w = calloc(1, sizeof *w);
  if (!w || !(w->keys = calloc(nkeys, sizeof *w->keys))) {
    free(w);
    return -1;
  }
  c->nwaiters++;
  w->conn = c;
  w->request_id = id;
  w->op = op;
  for (; w->nkeys < nkeys; w->nkeys++) {
    w->keys[w->nkeys] = read_key(r);
    if (r->bad) break;
  }
  if (!r->bad && op == STORE_WIRE_WAIT_COUNT) {
    if (r->left == 8) w->target = (int64_t)store_wire_get_u64(r->p);
    r->left = r->left == 8 ? 0 : 1;
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

/* COUNTS: n counters in one reply, none created. */
static int handle_counts(store_conn *c, strata_store_server *srv, uint32_t id, frame_reader *r) {
  uint32_t nkeys = read_u32(r);
  if (r->bad || nkeys == 0 || nkeys > STORE_WIRE_MAX_WAIT_KEYS || nkeys > r->left / 5)
    return FRAME_MALFORMED;
  uint8_t *body = malloc((size_t)nkeys * 8);
  if (!body) return FRAME_MALFORMED;
  int status = STRATA_OK;
  for (uint32_t i = 0; i < nkeys && !r->bad; i++) {
    char *key = read_key(r);
    int64_t value = 0;
    if (key && counter_read(srv, key, &value) != 0) status = STRATA_ERR_INVALID_ARG;
    store_wire_put_u64(body + 8 * (size_t)i, (uint64_t)value);
    free(key);
  }
  if (r->bad || r->left != 0) {
    free(body);
    return FRAME_MALFORMED;
  }
  conn_reply(c, id, status, body, status == STRATA_OK ? (size_t)nkeys * 8 : 0);
  free(body);
  return FRAME_OK;
}

/* ---- strangers: connections that have not proven the job key ---- */

static void stranger_unlink(strata_store_server *srv, store_conn *c) {
  if (c->authenticated) return;
  if (c->stranger_prev)
    c->stranger_prev->stranger_next = c->stranger_next;
  else if (srv->strangers_oldest == c)
    srv->strangers_oldest = c->stranger_next;
  else
    return; /* not listed (already unlinked) */
  if (c->stranger_next)
    c->stranger_next->stranger_prev = c->stranger_prev;
  else
    srv->strangers_newest = c->stranger_prev;
  c->stranger_prev = c->stranger_next = NULL;
  srv->nstrangers--;
}

static void stranger_append(strata_store_server *srv, store_conn *c) {
  c->stranger_prev = srv->strangers_newest;
  c->stranger_next = NULL;
  if (srv->strangers_newest)
    srv->strangers_newest->stranger_next = c;
  else
    srv->strangers_oldest = c;
  srv->strangers_newest = c;
  srv->nstrangers++;
}

/* Closes c (at the next reap) and says why in the log. Strangers can make this happen at will, so
 * the log gets at most one line a second, with a count of those it left out. */
static void conn_refuse(strata_store_server *srv, store_conn *c, const char *fmt, ...) {
  stranger_unlink(srv, c);
  c->closing = 1;
  conn_mark(c);
  double now_s = store_net_now_s();
  if (now_s - srv->last_refusal_log_s < 1.0) {
    srv->refusals_unlogged++;
    return;
  }
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (srv->refusals_unlogged)
    STRATA_LOG(STRATA_LOG_WARN, -1,
               "store: closing the connection from %s: %s (and %lu more "
               "connections closed in the last second)",
               c->peer, why, srv->refusals_unlogged);
  else
    STRATA_LOG(STRATA_LOG_WARN, -1, "store: closing the connection from %s: %s", c->peer, why);
  srv->last_refusal_log_s = now_s;
  srv->refusals_unlogged = 0;
}

/* AUTH: the client proves the job key over our challenge and its nonce; only then do we prove it
 * in turn (store_wire.h). */
static int handle_auth(strata_store_server *srv, store_conn *c, uint32_t id, frame_reader *r) {
  if (r->left != 2 * STORE_WIRE_AUTH_BYTES) return FRAME_MALFORMED;
  const uint8_t *nonce = r->p, *client_mac = r->p + STORE_WIRE_AUTH_BYTES;
  uint8_t expected[32];
  store_net_auth_mac(srv->key, STORE_NET_CLIENT_DOMAIN, c->challenge, nonce, expected);
  if (sodium_memcmp(expected, client_mac, sizeof expected) != 0) {
    conn_reply(c, id, STRATA_ERR_AUTH, NULL, 0);
    return FRAME_REFUSED;
  }
  stranger_unlink(srv, c);
  c->authenticated = 1;
  uint8_t server_mac[32];
  store_net_auth_mac(srv->key, STORE_NET_SERVER_DOMAIN, c->challenge, nonce, server_mac);
  conn_reply(c, id, STRATA_OK, server_mac, sizeof server_mac);
  return FRAME_OK;
}

/* One whole request frame (after the length word): a frame_result. */
static int handle_frame(strata_store_server *srv, store_conn *c, const uint8_t *p, size_t len) {
  if (len < STORE_WIRE_REQUEST_HEADER_BYTES || store_wire_get_u16(p) != STORE_WIRE_MAGIC ||
      p[2] != STORE_WIRE_VERSION)
    return FRAME_MALFORMED;
  uint8_t op = p[3];
  uint32_t id = store_wire_get_u32(p + 4), timeout_ms = store_wire_get_u32(p + 8);
  frame_reader r = {p + STORE_WIRE_REQUEST_HEADER_BYTES, len - STORE_WIRE_REQUEST_HEADER_BYTES, 0};
  if (!c->authenticated) return op == STORE_WIRE_AUTH ? handle_auth(srv, c, id, &r) : FRAME_UNAUTH;
  srv->requests[op < STORE_WIRE_OPS ? op : 0]++;
  atomic_fetch_add_explicit(&srv->requests_total, 1, memory_order_relaxed);
  switch (op) {
    case STORE_WIRE_SET:
      return handle_set(srv, c, id, &r);
    case STORE_WIRE_ADD:
      return handle_add(srv, c, id, &r);
    case STORE_WIRE_GET:
    case STORE_WIRE_WAIT:
    case STORE_WIRE_WAIT_COUNT:
      return handle_wait(srv, c, op, id, timeout_ms, &r);
    case STORE_WIRE_COUNTS:
      return handle_counts(c, srv, id, &r);
    case STORE_WIRE_HELLO:
      return handle_hello(srv, c, id, &r);
    case STORE_WIRE_SET_IF_ABSENT:
      return handle_set_if_absent(srv, c, id, &r);
    default:
      return FRAME_MALFORMED;
  }
}

/* The longest frame c may send now: a stranger only its AUTH. */
static size_t conn_max_frame(const store_conn *c) {
  return c->authenticated ? STORE_WIRE_MAX_FRAME_BYTES : STORE_WIRE_MAX_AUTH_FRAME_BYTES;
}

/* c reads nothing more while its client leaves this many replies unread, or once refused. */
static int conn_paused(const store_conn *c) {
  return c->dead || c->closing || conn_backlog(c) >= STORE_SERVER_MAX_BACKLOG_BYTES;
}

/* Handles the complete frames buffered in c, until c pauses or its turn is over (c->more); returns
 * how many. */
static size_t conn_process_some(strata_store_server *srv, store_conn *c) {
  size_t off = 0, handled = 0, backlog_before = conn_backlog(c);
  c->more = 0;
  while (!conn_paused(c) && c->in_len - off >= 4) {
    if (handled >= STORE_SERVER_TURN_FRAMES ||
        conn_backlog(c) >= backlog_before + STORE_SERVER_TURN_REPLY_BYTES) {
      c->more = 1;
      break;
    }
    uint32_t len = store_wire_get_u32(c->in + off);
    if (len > conn_max_frame(c)) {
      conn_refuse(srv, c,
                  c->authenticated ? "a frame of %u bytes (at most %u)"
                                   : "a first frame of %u bytes (an AUTH has %u)",
                  len, (unsigned)conn_max_frame(c));
      break;
    }
    if (c->in_len - off - 4 < len) break;
    int result = handle_frame(srv, c, c->in + off + 4, len);
    off += 4 + (size_t)len;
    handled++;
    if (result == FRAME_MALFORMED) conn_refuse(srv, c, "a malformed request");
    if (result == FRAME_OVER_LIMIT)
      conn_refuse(srv, c,
                  "a request over the store's limits (a value over %u bytes, or %u "
                  "requests waiting at once)",
                  STORE_WIRE_MAX_VALUE_BYTES, STORE_SERVER_MAX_WAITERS_PER_CONN);
    if (result == FRAME_UNAUTH) conn_refuse(srv, c, "a request before proving the job secret");
    if (result == FRAME_REFUSED)
      conn_refuse(srv, c,
                  "it does not know the job secret (is its STRATA_SECRET or "
                  "STRATA_JOB_ID another job's?)");
  }
  if (off > 0) {
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
  }
  return handled;
}

/* Handles what c buffered and sends the replies, again while sending unpauses it: once a frame
 * is in our buffer the kernel will not report it again. */
static void conn_process(strata_store_server *srv, store_conn *c) {
  while (conn_process_some(srv, c) > 0) {
    conn_flush(c);
    if (conn_paused(c) || c->more) return;
  }
  conn_flush(c);
}

/* Room to read into: the frame being read plus a little read-ahead, never more. */
static int conn_reserve_in(store_conn *c) {
  size_t need = c->in_len + 4096;
  if (c->in_len >= 4) {
    size_t frame = 4 + (size_t)store_wire_get_u32(c->in);
    if (frame > need && frame <= 4 + conn_max_frame(c)) need = frame;
  }
  if (need <= c->in_cap) return 0;
  size_t cap = c->in_cap ? c->in_cap : 512;
  while (cap < need) cap *= 2;
  size_t most = 4 + conn_max_frame(c) + STORE_SERVER_READ_AHEAD_BYTES;
  if (cap > most) cap = most > need ? most : need;
  uint8_t *in = realloc(c->in, cap);
  if (!in) return -1;
  c->in = in;
  c->in_cap = cap;
  return 0;
}

/* Reads what arrived and handles every complete frame. */
static void conn_read(strata_store_server *srv, store_conn *c) {
  while (!conn_paused(c) && !c->more) { /* what is buffered is handled before more is read */
    if (conn_reserve_in(c) != 0) {
      c->dead = 1;
      return;
    }
    size_t room = c->in_cap - c->in_len;
    if (!c->authenticated && room > STORE_WIRE_MAX_AUTH_FRAME_BYTES + 4)
      room = STORE_WIRE_MAX_AUTH_FRAME_BYTES + 4;
    ssize_t n = recv(c->fd, c->in + c->in_len, room, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      c->dead = 1; /* closed by the client, or reset */
      return;
    }
    c->in_len += (size_t)n;
    conn_process(srv, c);
  }
  conn_flush(c);
}

/* ---- connections ---- */

static void conn_free(store_conn *c) {
  if (c->fd >= 0) close(c->fd);
  free(c->in);
  free(c->out);
  free(c);
}

/* Makes room for one more stranger: evicts the oldest if it had its chance. Returns 0 when there
 * is room, else the time at which there will be. */
static double strangers_make_room(strata_store_server *srv, double now_s) {
  if (srv->nstrangers < STORE_SERVER_MAX_STRANGERS) return 0;
  store_conn *oldest = srv->strangers_oldest;
  if (now_s - oldest->accepted_s < STORE_SERVER_EVICT_AGE_S)
    return oldest->accepted_s + STORE_SERVER_EVICT_AGE_S;
  conn_refuse(srv, oldest, "%d connections had not proven the job secret; it was the oldest",
              STORE_SERVER_MAX_STRANGERS);
  return 0;
}

static int conns_reserve(strata_store_server *srv) {
  if (srv->nconns < srv->conns_cap) return 0;
  size_t cap = srv->conns_cap ? srv->conns_cap * 2 : 64;
  store_conn **lists[3] = {srv->conns, srv->dirty, srv->settling};
  for (int i = 0; i < 3; i++) {
    store_conn **grown = realloc(lists[i], cap * sizeof *grown);
    if (!grown) return -1; /* those grown already keep their room, and their contents */
    lists[i] = grown;
    if (i == 0) srv->conns = grown;
    if (i == 1) srv->dirty = grown;
    if (i == 2) srv->settling = grown;
  }
  srv->conns_cap = cap;
  return 0;
}

/* A new connection: a stranger until it proves the key; the challenge goes out at once. */
static void conn_add(strata_store_server *srv, int fd, const struct sockaddr_storage *from,
                     double now_s) {
  store_conn *c = conns_reserve(srv) == 0 ? calloc(1, sizeof *c) : NULL;
  if (!c) {
    close(fd);
    return;
  }
  c->srv = srv;
  c->fd = fd;
  c->accepted_s = now_s;
  c->events = EPOLLIN;
  struct epoll_event watch = {.events = c->events, .data.ptr = c};
  if (epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, fd, &watch) != 0) {
    close(fd);
    free(c);
    return;
  }
  char host[INET6_ADDRSTRLEN + 2] = "?";
  store_net_format_host(from, host, sizeof host);
  snprintf(c->peer, sizeof c->peer, "%s:%u", host,
           ntohs(((const struct sockaddr_in *)from)->sin_port)); /* same offset for v6 */
  randombytes_buf(c->challenge, sizeof c->challenge);
  c->slot = srv->nconns;
  srv->conns[srv->nconns++] = c;
  stranger_append(srv, c);
  conn_reply(c, STORE_WIRE_CHALLENGE_ID, STRATA_OK, c->challenge, sizeof c->challenge);
  conn_flush(c);
}

/* accept() ran out of descriptors with a client queued. A stranger that had its chance makes
 * room (it is closed before the listener is polled again); without one, the listener rests until
 * one has, or this loop would wake for the queued client at once, forever. */
static void accept_out_of_descriptors(strata_store_server *srv, double now_s) {
  int e = errno;
  if (now_s - srv->last_accept_error_log_s >= 1.0) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "store: cannot accept a connection: %s (%zu connections open, %zu of them not "
               "proven); making room from those",
               strerror(e), srv->nconns, srv->nstrangers);
    srv->last_accept_error_log_s = now_s;
  }
  store_conn *oldest = srv->strangers_oldest;
  if (oldest && now_s - oldest->accepted_s >= STORE_SERVER_EVICT_AGE_S) {
    conn_refuse(srv, oldest, "out of descriptors, and it had not proven the job secret");
    return;
  }
  srv->listen_paused_until_s = oldest ? oldest->accepted_s + STORE_SERVER_EVICT_AGE_S
                                      : now_s + STORE_SERVER_ACCEPT_BACKOFF_S;
}

static void accept_clients(strata_store_server *srv) {
  double now_s = store_net_now_s();
  for (;;) {
    double room_at_s = strangers_make_room(srv, now_s);
    if (room_at_s > 0) {
      srv->listen_paused_until_s = room_at_s;
      return;
    }
    struct sockaddr_storage from;
    socklen_t from_len = sizeof from;
    memset(&from, 0, sizeof from);
    int fd =
        accept4(srv->listen_fd, (struct sockaddr *)&from, &from_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_out_of_descriptors(srv, now_s);
      return;
    }
    store_net_set_nodelay(fd);
    if (srv->nconns - srv->nstrangers >= STORE_SERVER_MAX_CONNS) {
      close(fd); /* only ranks that proved the key get this far: a job larger than we serve */
      if (now_s - srv->last_refusal_log_s >= 1.0) {
        STRATA_LOG(STRATA_LOG_ERROR, -1, "store: refusing a connection: %d are open already",
                   STORE_SERVER_MAX_CONNS);
        srv->last_refusal_log_s = now_s;
      }
      continue;
    }
    conn_add(srv, fd, &from, now_s);
  }
}

/* Strangers that did not prove the key in time are refused; returns when the next one expires
 * (0: none left). */
static double strangers_expire(strata_store_server *srv, double now_s) {
  while (srv->strangers_oldest) {
    store_conn *c = srv->strangers_oldest;
    double expires_s = c->accepted_s + STORE_SERVER_AUTH_TIMEOUT_S;
    if (now_s < expires_s) return expires_s;
    conn_refuse(srv, c, "it did not prove the job secret within %.0f s",
                STORE_SERVER_AUTH_TIMEOUT_S);
  }
  return 0;
}

static double earliest_s(double a, double b) {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return a < b ? a : b;
}

/* Closes c and forgets it: its waiters go first (a waiter never outlives its connection). */
static void conn_remove(strata_store_server *srv, store_conn *c) {
  stranger_unlink(srv, c);
  if (c->nwaiters) waiters_drop_conn(srv, c);
  store_conn *last = srv->conns[--srv->nconns];
  srv->conns[c->slot] = last;
  last->slot = c->slot;
  /* Out of the epoll set before the close: epoll watches the open socket, not the descriptor,
   * and a process that forks while we serve (the launcher starting a rank) holds a copy of every
   * descriptor until it execs, so a close alone could leave the socket watched and report it
   * again with a pointer to the freed connection. */
  if (c->fd >= 0) epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
  conn_free(c);
}

/* What epoll watches c for: input unless it is paused or has frames left for a turn, output
 * while replies wait. Level-triggered, so a change is one epoll_ctl here and nothing else. */
static void conn_watch(strata_store_server *srv, store_conn *c) {
  uint32_t want =
      (conn_paused(c) || c->more ? 0u : (uint32_t)EPOLLIN) | (conn_backlog(c) ? EPOLLOUT : 0u);
  if (want == c->events || c->fd < 0) return;
  struct epoll_event watch = {.events = want, .data.ptr = c};
  if (epoll_ctl(srv->epoll_fd, EPOLL_CTL_MOD, c->fd, &watch) == 0) {
    c->events = want;
  } else {
    c->dead = 1; /* cannot be watched: reaped at the next settle */
    conn_mark(c);
  }
}

/* The connections marked since the last call: reaps those that died or whose refusal went out
 * (or was left unread past its stranger's deadline) and re-watches the rest. Those that still
 * need the loop stay marked: a lingering refusal (*wake_s is when it is dropped) and a connection
 * with frames left for its turn (returns 1: the loop must not sleep). Costs what changed, not
 * what is open: thousands of idle connections are never visited. */
static int conns_settle(strata_store_server *srv, double now_s, double *wake_s) {
  store_conn **list = srv->dirty;
  size_t n = srv->ndirty;
  srv->dirty = srv->settling;
  srv->settling = list;
  srv->ndirty = 0;
  int turns_left = 0;
  for (size_t i = 0; i < n; i++) {
    store_conn *c = list[i];
    c->dirty = 0;
    double drop_s = c->accepted_s + STORE_SERVER_AUTH_TIMEOUT_S;
    if (c->closing && (c->fd < 0 || conn_backlog(c) == 0 || drop_s < now_s)) c->dead = 1;
    if (c->dead) {
      conn_remove(srv, c);
      continue;
    }
    conn_watch(srv, c);
    if (c->closing) {
      conn_mark(c);
      *wake_s = earliest_s(*wake_s, drop_s);
    } else if (c->more && !conn_paused(c)) {
      conn_mark(c);
      turns_left = 1;
    }
  }
  return turns_left;
}

/* The listener is watched unless accept() ran out of descriptors and it rests (accept_clients). */
static void listener_watch(strata_store_server *srv, double now_s, double *wake_s) {
  uint32_t want = now_s >= srv->listen_paused_until_s ? (uint32_t)EPOLLIN : 0u;
  if (!want) *wake_s = earliest_s(*wake_s, srv->listen_paused_until_s);
  if (want == srv->listen_events) return;
  struct epoll_event watch = {.events = want, .data.ptr = &srv->listen_fd};
  if (epoll_ctl(srv->epoll_fd, EPOLL_CTL_MOD, srv->listen_fd, &watch) == 0)
    srv->listen_events = want;
}

/* What epoll reported for c. */
static void conn_event(strata_store_server *srv, store_conn *c, uint32_t events) {
  conn_mark(c);
  int flushed = (events & EPOLLOUT) != 0;
  if (flushed) conn_flush(c);
  /* frames that wait for their turn, or for the client to read our replies: the kernel will
   * not report them again, they are in our buffer already */
  if (!conn_paused(c) && (c->more || (flushed && c->in_len >= 4))) conn_process(srv, c);
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    if (!conn_paused(c))
      conn_read(srv, c);
    else if (events & (EPOLLHUP | EPOLLERR))
      c->dead = 1;
  }
}

enum { STORE_SERVER_EVENTS = 256 }; /* reported per epoll_wait; more wait for the next */

static void *server_main(void *arg) {
  strata_store_server *srv = arg;
  struct epoll_event events[STORE_SERVER_EVENTS];
  for (;;) {
    double now_s = store_net_now_s();
    double wake_s = strangers_expire(srv, now_s);
    int turns_left = conns_settle(srv, now_s, &wake_s);
    size_t marked = srv->ndirty; /* what conns_settle kept: [0, marked) of srv->dirty */
    wake_s = earliest_s(wake_s, waiters_next_deadline_s(srv));
    listener_watch(srv, now_s, &wake_s);
    int timeout_ms = turns_left ? 0 : wake_s <= 0 ? -1 : store_net_poll_ms(wake_s);
    int ready = epoll_wait(srv->epoll_fd, events, STORE_SERVER_EVENTS, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      STRATA_LOG(STRATA_LOG_ERROR, -1, "store: epoll_wait failed: %s", strerror(errno));
      break;
    }
    int stop = 0, accepting = 0;
    for (int i = 0; i < ready && !stop; i++) {
      void *tag = events[i].data.ptr;
      if (tag == &srv->wake_fds[0])
        stop = 1; /* stop() */
      else if (tag == &srv->listen_fd)
        accepting = 1;
      else
        conn_event(srv, tag, events[i].events);
    }
    if (stop) break;
    for (size_t i = 0; i < marked; i++) { /* the next turn of each that has frames left */
      store_conn *c = srv->dirty[i];
      if (c->more && !conn_paused(c)) conn_process(srv, c);
    }
    if (accepting) accept_clients(srv);
    waiters_update(srv, NULL, store_net_now_s());
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

/* The epoll set: the wake pipe and the listener; connections join it as they are accepted. */
static int server_watch(strata_store_server *srv) {
  srv->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (srv->epoll_fd < 0) return STRATA_ERR_SYSTEM;
  struct epoll_event wake = {.events = EPOLLIN, .data.ptr = &srv->wake_fds[0]};
  struct epoll_event listen = {.events = EPOLLIN, .data.ptr = &srv->listen_fd};
  if (epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, srv->wake_fds[0], &wake) != 0 ||
      epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, srv->listen_fd, &listen) != 0)
    return STRATA_ERR_SYSTEM;
  srv->listen_events = EPOLLIN;
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
  free(srv->dirty);
  free(srv->settling);
  if (srv->epoll_fd >= 0) close(srv->epoll_fd);
  table_free(srv);
  free(srv->job_id);
  free(srv->admitted);
  sodium_memzero(srv->key, sizeof srv->key);
  if (srv->wake_fds[0] >= 0) close(srv->wake_fds[0]);
  if (srv->wake_fds[1] >= 0) close(srv->wake_fds[1]);
  free(srv);
}

/* STRATA_STORE_QUOTA, else an eighth of the memory within STORE_SERVER_QUOTA_MIN/MAX. */
static int quota_from_env(size_t *quota_bytes) {
  const char *text = getenv("STRATA_STORE_QUOTA");
  if (text && text[0]) {
    uint64_t bytes = 0;
    if (strata_size_parse(text, &bytes) != STRATA_OK || bytes == 0 || bytes > SIZE_MAX) {
      STRATA_LOG(STRATA_LOG_ERROR, -1,
                 "STRATA_STORE_QUOTA=%s: expected a byte count such as 512M or 4G", text);
      return STRATA_ERR_CONFIG;
    }
    *quota_bytes = (size_t)bytes;
    return STRATA_OK;
  }
  long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGESIZE);
  size_t memory = pages > 0 && page_bytes > 0 ? (size_t)pages * (size_t)page_bytes : 0;
  size_t quota = memory / 8;
  *quota_bytes = quota < STORE_SERVER_QUOTA_MIN   ? STORE_SERVER_QUOTA_MIN
                 : quota > STORE_SERVER_QUOTA_MAX ? STORE_SERVER_QUOTA_MAX
                                                  : quota;
  return STRATA_OK;
}

/* A server with its table and key, neither listening nor running. hello_job NULL: a store that
 * welcomes every HELLO; else a job's store (see the top of this file). */
static int server_new(const char *secret, const char *key_job, const char *hello_job, int nranks,
                      strata_store_server **out) {
  strata_store_server *srv = calloc(1, sizeof *srv);
  if (!srv) return STRATA_ERR_NO_MEMORY;
  srv->listen_fd = srv->wake_fds[0] = srv->wake_fds[1] = srv->epoll_fd = -1;
  srv->nbuckets = 64;
  srv->buckets = calloc(srv->nbuckets, sizeof *srv->buckets);
  int status = srv->buckets ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (status == STRATA_OK && hello_job) {
    srv->nranks = (uint32_t)nranks;
    srv->job_id = strdup(hello_job);
    srv->admitted = calloc(((size_t)nranks + 7) / 8, 1);
    if (!srv->job_id || !srv->admitted) status = STRATA_ERR_NO_MEMORY;
  }
  if (status == STRATA_OK) status = store_net_auth_key(secret, key_job, srv->key);
  if (status == STRATA_OK) status = quota_from_env(&srv->quota_bytes);
  if (status != STRATA_OK) {
    server_free(srv);
    return status;
  }
  *out = srv;
  return STRATA_OK;
}

static int server_start(const char *addr, const char *secret, const char *key_job,
                        const char *hello_job, int nranks, strata_store_server **out) {
  if (!addr || !out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  strata_store_server *srv;
  int status = server_new(secret, key_job, hello_job, nranks, &srv);
  if (status != STRATA_OK) return status;
  if (pipe2(srv->wake_fds, O_CLOEXEC | O_NONBLOCK) != 0) status = STRATA_ERR_SYSTEM;
  raise_fd_limit();
  if (status == STRATA_OK) status = server_listen(srv, addr);
  if (status == STRATA_OK) status = server_watch(srv);
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
  return server_start(addr, "", "", NULL, 0, out);
}

int strata_store_server_start_auth(const char *addr, const char *secret, const char *job_id,
                                   strata_store_server **out) {
  return server_start(addr, secret, job_id, NULL, 0, out);
}

int strata_store_server_start_job(const char *addr, const char *job_id, int nranks,
                                  strata_store_server **out) {
  return strata_store_server_start_job_auth(addr, "", job_id, nranks, out);
}

int strata_store_server_start_job_auth(const char *addr, const char *secret, const char *job_id,
                                       int nranks, strata_store_server **out) {
  if (out) *out = NULL;
  if (!job_id || nranks < 1) return STRATA_ERR_INVALID_ARG;
  return server_start(addr, secret, job_id, job_id, nranks, out);
}

/* One connection's bytes through the request parser, without sockets or a thread (store.h). */
int strata_store_server_feed(const uint8_t *bytes, size_t len, int authenticated) {
  strata_store_server *srv;
  if (server_new("", "", NULL, 0, &srv) != STRATA_OK) return STRATA_ERR_NO_MEMORY;
  store_conn *c = conns_reserve(srv) == 0 ? calloc(1, sizeof *c) : NULL;
  if (!c) {
    server_free(srv);
    return STRATA_ERR_NO_MEMORY;
  }
  c->srv = srv;
  c->fd = -1;
  c->accepted_s = store_net_now_s();
  snprintf(c->peer, sizeof c->peer, "(fed bytes)");
  c->slot = srv->nconns;
  srv->conns[srv->nconns++] = c;
  if (authenticated)
    c->authenticated = 1;
  else
    stranger_append(srv, c);
  /* in pieces as a socket would hand them over; the client reads every reply at once */
  size_t off = 0;
  while (off < len && !c->dead && !c->closing) {
    if (conn_reserve_in(c) != 0) break;
    size_t room = c->in_cap - c->in_len;
    if (!c->authenticated && room > STORE_WIRE_MAX_AUTH_FRAME_BYTES + 4)
      room = STORE_WIRE_MAX_AUTH_FRAME_BYTES + 4;
    size_t n = len - off < room ? len - off : room;
    memcpy(c->in + c->in_len, bytes + off, n);
    c->in_len += n;
    off += n;
    conn_process(srv, c);
    c->out_off = c->out_len = 0;
  }
  while (!c->dead && !c->closing && conn_process_some(srv, c) > 0) c->out_off = c->out_len = 0;
  int status = c->dead || c->closing ? STRATA_ERR_PROTOCOL : STRATA_OK;
  server_free(srv);
  return status;
}

uint64_t strata_store_server_requests(const strata_store_server *server) {
  return server ? atomic_load_explicit(&server->requests_total, memory_order_relaxed) : 0;
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

/* What the server answered, by op: how many requests a job cost its store (bench/agree.sh). */
static void log_requests(const strata_store_server *srv) {
  const uint64_t *n = srv->requests;
  uint64_t total = 0;
  for (int op = 0; op < STORE_WIRE_OPS; op++) total += n[op];
  STRATA_LOG(STRATA_LOG_INFO, -1,
             "store: served %llu requests (set %llu, get %llu, wait %llu, add %llu, hello %llu, "
             "set-if-absent %llu, wait-count %llu, counts %llu)",
             (unsigned long long)total, (unsigned long long)n[STORE_WIRE_SET],
             (unsigned long long)n[STORE_WIRE_GET], (unsigned long long)n[STORE_WIRE_WAIT],
             (unsigned long long)n[STORE_WIRE_ADD], (unsigned long long)n[STORE_WIRE_HELLO],
             (unsigned long long)n[STORE_WIRE_SET_IF_ABSENT],
             (unsigned long long)n[STORE_WIRE_WAIT_COUNT],
             (unsigned long long)n[STORE_WIRE_COUNTS]);
}

void strata_store_server_stop(strata_store_server *server) {
  if (!server) return;
  if (server->thread_started) {
    ssize_t n;
    do n = write(server->wake_fds[1], "x", 1);
    while (n < 0 && errno == EINTR);
    pthread_join(server->thread, NULL);
    log_requests(server);
  }
  server_free(server);
}
