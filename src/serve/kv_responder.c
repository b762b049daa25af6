// SPDX-License-Identifier: Apache-2.0
/*
 * kv_responder.c — the target side of an agent: one listening socket, one thread per accepted
 * connection, and the only code that touches this process's registered memory on a peer's
 * behalf.
 *
 * A connection is served only after the strata handshake proved the peer knows the job secret
 * and a HELLO named the peer agent and the connection's kind. A stranger is dropped after at
 * most the agent's timeout; past KV_MAX_RESPONDER_CONNS connections the oldest one still
 * proving itself is dropped for the newcomer (accept_one), so a flood of silent strangers costs
 * bounded threads and never locks a real peer out.
 *
 * Every READ and WRITE names (region id, address, length) in this process; kv_region_acquire
 * checks it against the region table as it is now and pins the region for the copy, so a
 * descriptor outside a region or of a withdrawn region is refused (and counted in
 * strata_kv_agent_refusals) whatever the peer believes, and deregistration waits for the copies
 * in flight. Over SHM the copy is ours too: process_vm_readv/writev between the pinned region and
 * the initiator's memory, the initiator's process having been identified by reading a canary
 * word it published (only a process that can read the initiator's memory passes, and only the
 * initiator knows the value). An SHM frame asks for a batch of slices: each is checked and
 * pinned alone, and those accepted are copied together, in one call as a rule. A peer
 * that sends a malformed frame loses its connection; its other connections and every other peer go
 * on. A peer that asks for UCX in its HELLO gets a token for its active messages (kv_ucx.c), valid
 * while this connection lasts.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#include <stdio.h>
#include <sodium.h>

#include "core/core.h"
#include "serve/kv_internal.h"

/* The HELLO's canary probe: one small copy. */
static int cma_copy(uint32_t pid, int to_peer, void *local, uint64_t remote, uint64_t bytes) {
  uint64_t done = 0;
  while (done < bytes) {
    struct iovec mine = {(uint8_t *)local + done, bytes - done};
    struct iovec theirs = {(void *)(uintptr_t)(remote + done), bytes - done};
    ssize_t n = to_peer ? process_vm_writev((pid_t)pid, &mine, 1, &theirs, 1, 0)
                        : process_vm_readv((pid_t)pid, &mine, 1, &theirs, 1, 0);
    if (n > 0) {
      done += (uint64_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || errno == EFAULT) return STRATA_ERR_INVALID_ARG;
    if (errno == ESRCH) return STRATA_ERR_PEER_LOST;
    return STRATA_ERR_SYSTEM;
  }
  return STRATA_OK;
}

/* The kernel pins and copies one iovec's pages (up to 4 MiB of them) in a stretch where a kernel
 * that does not preempt itself never lets another thread have the CPU; slices go to it in
 * pieces no larger than this, so a bulk copy holds a core from the lane's threads for the time
 * of one piece, not of a slice. */
#define KV_CMA_PIECE_BYTES (256u << 10)

/* The copies of an SHM batch: every slice i with ptr[i] set, between ptr[i] and the peer's
 * s[i].local_addr, in as few system calls as the kernel takes (its pieces as iovecs, the same on
 * each side, UIO_MAXIOV at most a call, and no more bytes than kv_conn_call_bytes(c) allows while
 * the lane is in use). A call that stops short resumes where it stopped; one that fails fails the
 * slice it stopped in (status[i]) and the copies go on from the next, so a slice's fate never
 * depends on its neighbours. Only the peer's end stops them all (PEER_LOST). */
static void cma_copy_batch(const kv_conn *c, uint32_t pid, int to_peer, const kv_wire_slice *s,
                           void *const *ptr, size_t n, int *status) {
  enum { IOVECS = 1024 }; /* the kernel's UIO_MAXIOV */
  struct iovec mine[IOVECS], theirs[IOVECS];
  size_t i = 0;
  uint64_t offset = 0; /* into slice i */
  for (;;) {
    while (i < n && (!ptr[i] || offset == s[i].bytes)) i++, offset = 0;
    if (i == n) return;
    int count = 0;
    uint64_t first_offset = offset, room = kv_conn_call_bytes(c);
    for (size_t k = i; k < n && count < IOVECS && room; k++) {
      if (!ptr[k]) continue;
      for (uint64_t at = k == i ? first_offset : 0; at < s[k].bytes && count < IOVECS && room;) {
        uint64_t piece = s[k].bytes - at;
        if (piece > KV_CMA_PIECE_BYTES) piece = KV_CMA_PIECE_BYTES;
        if (piece > room) piece = room;
        mine[count] = (struct iovec){(uint8_t *)ptr[k] + at, piece};
        theirs[count++] = (struct iovec){(void *)(uintptr_t)(s[k].local_addr + at), piece};
        at += piece;
        room -= piece;
      }
    }
    ssize_t moved = to_peer ? process_vm_writev((pid_t)pid, mine, count, theirs, count, 0)
                            : process_vm_readv((pid_t)pid, mine, count, theirs, count, 0);
    if (moved > 0) {
      uint64_t left = (uint64_t)moved;
      while (left > 0 && i < n) { /* through the slices that were in the call */
        uint64_t here = s[i].bytes - offset;
        if (left < here) {
          offset += left;
          left = 0;
        } else {
          left -= here;
          offset = s[i].bytes;
          do i++, offset = 0;
          while (i < n && (!ptr[i] || s[i].bytes == 0));
        }
      }
      continue;
    }
    if (moved < 0 && errno == EINTR) continue;
    if (moved < 0 && errno == ESRCH) {
      for (; i < n; i++)
        if (ptr[i]) status[i] = STRATA_ERR_PEER_LOST;
      return;
    }
    status[i] = moved == 0 || errno == EFAULT ? STRATA_ERR_INVALID_ARG : STRATA_ERR_SYSTEM;
    offset = s[i].bytes; /* go on with the next slice */
  }
}

/* One TCP READ or WRITE slice. Returns a connection-level failure, or STRATA_OK when the stream
 * is still in step (the slice itself may have been refused: that travels in the reply). */
static int serve_slice(kv_server_conn *sc, const kv_wire_header *h) {
  strata_kv_agent *a = sc->agent;
  if (h->aux_bytes != 0 || h->bytes > KV_WIRE_MAX_SLICE_BYTES || h->flags)
    return STRATA_ERR_PROTOCOL;
  void *ptr = NULL;
  char err[256] = "";
  int status = kv_region_acquire(a, h->region, h->addr, h->bytes, &ptr, err, sizeof err);
  if (status != STRATA_OK) kv_refusal(a, sc->from, err);
  int wire = STRATA_OK;
  if (h->type == KV_WRITE)
    wire = status == STRATA_OK ? kv_conn_recv(&sc->conn, ptr, h->bytes)
                               : kv_conn_discard(&sc->conn, h->bytes);
  /* The reason travels back (aux), so the initiator's error says what the target saw. */
  size_t err_bytes = status == STRATA_OK ? 0 : strlen(err);
  kv_wire_header reply = {.type = KV_DONE, .status = status, .aux_bytes = (uint32_t)err_bytes};
  int send_payload = wire == STRATA_OK && status == STRATA_OK && h->type == KV_READ;
  if (send_payload) reply.bytes = h->bytes;
  if (wire == STRATA_OK) wire = kv_conn_send_header(&sc->conn, &reply);
  if (wire == STRATA_OK && err_bytes) wire = kv_conn_send(&sc->conn, err, err_bytes);
  if (wire == STRATA_OK && send_payload) wire = kv_conn_send(&sc->conn, ptr, h->bytes);
  if (ptr) kv_region_release(a, h->region);
  return wire;
}

/* An SHM batch: every slice is checked and pinned as a TCP slice is (a refusal counted for each
 * one refused), those accepted are copied, and one reply names the first slice that failed. */
static int serve_shm_batch(kv_server_conn *sc, const kv_wire_header *h) {
  strata_kv_agent *a = sc->agent;
  if (!sc->shm || h->flags != KV_FLAG_SHM || h->bytes || h->value == 0 ||
      h->value > KV_WIRE_MAX_SHM_SLICES || h->aux_bytes != h->value * sizeof(kv_wire_slice))
    return STRATA_ERR_PROTOCOL;
  size_t n = (size_t)h->value;
  kv_wire_slice s[KV_WIRE_MAX_SHM_SLICES];
  void *ptr[KV_WIRE_MAX_SHM_SLICES];
  int status[KV_WIRE_MAX_SHM_SLICES];
  int wire = kv_conn_recv(&sc->conn, s, h->aux_bytes);
  if (wire != STRATA_OK) return wire;
  for (size_t i = 0; i < n; i++) {
    kv_wire_slice_decode(&s[i]);
    if (s[i].bytes > KV_WIRE_MAX_SLICE_BYTES) return STRATA_ERR_PROTOCOL;
  }
  char err[256] = "";
  size_t refused = n; /* the first slice the region table refused: err says why */
  for (size_t i = 0; i < n; i++) {
    char why[256];
    ptr[i] = NULL;
    status[i] = kv_region_acquire(a, s[i].region, s[i].addr, s[i].bytes, &ptr[i], why, sizeof why);
    if (status[i] == STRATA_OK) continue;
    kv_refusal(a, sc->from, why);
    if (refused == n) {
      refused = i;
      snprintf(err, sizeof err, "%s", why);
    }
  }
  cma_copy_batch(&sc->conn, sc->pid, h->type == KV_READ, s, ptr, n, status);
  size_t failed = 0;
  while (failed < n && status[failed] == STRATA_OK) failed++;
  for (size_t i = 0; i < n; i++)
    if (ptr[i]) kv_region_release(a, s[i].region);
  kv_wire_header reply = {.type = KV_DONE};
  if (failed < n) {
    if (failed != refused)
      snprintf(err, sizeof err, "cross-memory copy at agent %s failed: %s", a->name,
               strata_strerror(status[failed]));
    reply.status = status[failed];
    reply.value = failed;
    reply.aux_bytes = (uint32_t)strlen(err);
  }
  wire = kv_conn_send_header(&sc->conn, &reply);
  if (wire == STRATA_OK && reply.aux_bytes) wire = kv_conn_send(&sc->conn, err, reply.aux_bytes);
  return wire;
}

static int serve_notif(kv_server_conn *sc, const kv_wire_header *h) {
  if (h->aux_bytes > STRATA_KV_NOTIF_MAX_BYTES) return STRATA_ERR_PROTOCOL;
  uint8_t msg[STRATA_KV_NOTIF_MAX_BYTES];
  int status = kv_conn_recv(&sc->conn, msg, h->aux_bytes);
  if (status != STRATA_OK) return status;
  kv_wire_header reply = {.type = KV_DONE,
                          .status = kv_notif_push(sc->agent, sc->from, msg, h->aux_bytes)};
  return kv_conn_send_header(&sc->conn, &reply);
}

static int serve_lane(kv_server_conn *sc, const kv_wire_header *h, uint8_t *request,
                      uint8_t *reply) {
  strata_kv_agent *a = sc->agent;
  if (h->aux_bytes > STRATA_KV_LANE_MAX_BYTES) return STRATA_ERR_PROTOCOL;
  kv_lane_hot(a); /* the reply must not wait behind this agent's bulk calls either */
  int status = kv_conn_recv(&sc->conn, request, h->aux_bytes);
  if (status != STRATA_OK) return status;
  pthread_mutex_lock(&a->lock);
  strata_kv_lane_handler handler = a->lane_handler;
  void *ctx = a->lane_ctx;
  pthread_mutex_unlock(&a->lock);
  size_t reply_bytes = 0;
  int result = STRATA_ERR_UNSUPPORTED;
  if (handler)
    result = handler(ctx, sc->from, h->tag, request, h->aux_bytes, reply, STRATA_KV_LANE_MAX_BYTES,
                     &reply_bytes);
  if (result == STRATA_OK && reply_bytes > STRATA_KV_LANE_MAX_BYTES)
    result = STRATA_ERR_INVALID_ARG; /* a handler that claims more than it was given room for */
  if (result > 0) result = STRATA_ERR_PROTOCOL; /* statuses are negative; keep the wire's rule */
  if (result != STRATA_OK) reply_bytes = 0;
  kv_wire_header out = {
      .type = KV_LANE_REPLY, .status = result, .tag = h->tag, .aux_bytes = (uint32_t)reply_bytes};
  status = kv_conn_send_header(&sc->conn, &out);
  if (status == STRATA_OK) status = kv_conn_send(&sc->conn, reply, reply_bytes);
  return status;
}

/* A HELLO asking for UCX: its reply token and worker address follow the name. The token for
 * its requests goes into `token` when granted. */
static int hello_ucx(kv_server_conn *sc, const kv_wire_header *h, int *granted,
                     uint8_t token[KV_UCX_TOKEN_BYTES]) {
  if (h->bytes == 0 || h->bytes > KV_UCX_MAX_ADDRESS_BYTES) return STRATA_ERR_PROTOCOL;
  uint8_t *part = malloc(KV_UCX_TOKEN_BYTES + h->bytes);
  if (!part) return STRATA_ERR_NO_MEMORY;
  int status = kv_conn_recv(&sc->conn, part, KV_UCX_TOKEN_BYTES + h->bytes);
  *granted = STRATA_ERR_UNSUPPORTED;
  if (status == STRATA_OK && sc->agent->ucx)
    *granted = kv_ucx_grant(sc->agent, sc->from, part + KV_UCX_TOKEN_BYTES, h->bytes, part, token,
                            &sc->ucx_link);
  if (*granted != STRATA_OK) *granted = STRATA_ERR_UNSUPPORTED;
  free(part);
  return status;
}

/* HELLO: who the peer is, what the connection carries, and for SHM the canary probe. */
static int serve_hello(kv_server_conn *sc, int *lane) {
  kv_wire_header h;
  int status = kv_conn_recv_header(&sc->conn, &h, 0);
  if (status != STRATA_OK) return status;
  if (h.type != KV_HELLO || h.aux_bytes == 0 || h.aux_bytes >= STRATA_KV_NAME_BYTES ||
      (h.flags & ~(KV_FLAG_SHM | KV_FLAG_LANE | KV_FLAG_UCX)) ||
      ((h.flags & KV_FLAG_SHM) && (h.flags & KV_FLAG_UCX)))
    return STRATA_ERR_PROTOCOL;
  status = kv_conn_recv(&sc->conn, sc->from, h.aux_bytes);
  if (status != STRATA_OK) return status;
  sc->from[h.aux_bytes] = '\0';
  if (strlen(sc->from) != h.aux_bytes) return STRATA_ERR_PROTOCOL;
  *lane = (h.flags & KV_FLAG_LANE) != 0;
  int granted = STRATA_OK;
  uint8_t token[KV_UCX_TOKEN_BYTES];
  if (h.flags & KV_FLAG_UCX) {
    status = hello_ucx(sc, &h, &granted, token);
    if (status != STRATA_OK) return status;
    kv_wire_header reply = {.type = KV_HELLO_OK,
                            .status = granted,
                            .aux_bytes = granted == STRATA_OK ? KV_UCX_TOKEN_BYTES : 0};
    status = kv_conn_send_header(&sc->conn, &reply);
    if (status == STRATA_OK && granted == STRATA_OK)
      status = kv_conn_send(&sc->conn, token, KV_UCX_TOKEN_BYTES);
    sodium_memzero(token, sizeof token);
    return status;
  }
  if (h.flags & KV_FLAG_SHM) {
    uint64_t seen = 0;
    granted = sc->agent->cma_allowed && h.addr > 0 && h.addr < INT32_MAX
                  ? cma_copy((uint32_t)h.addr, 0, &seen, h.local_addr, sizeof seen)
                  : STRATA_ERR_INVALID_ARG;
    if (granted == STRATA_OK && seen != h.value) granted = STRATA_ERR_AUTH;
    if (granted != STRATA_OK) granted = STRATA_ERR_UNSUPPORTED;
    sc->shm = granted == STRATA_OK;
    sc->pid = (uint32_t)h.addr;
  }
  kv_wire_header reply = {.type = KV_HELLO_OK, .status = granted};
  return kv_conn_send_header(&sc->conn, &reply);
}

/* Everything after the handshake: the HELLO, then requests until the connection ends. */
static int serve_authenticated(kv_server_conn *sc) {
  strata_kv_agent *a = sc->agent;
  int lane = 0;
  int status = serve_hello(sc, &lane);
  uint8_t *request = NULL, *reply = NULL;
  pthread_mutex_lock(&a->lock);
  sc->admitted = status == STRATA_OK;
  pthread_mutex_unlock(&a->lock);
  if (status == STRATA_OK && !lane) kv_thread_nice(a->bulk_nice);
  if (status == STRATA_OK && lane) kv_thread_realtime(a, NULL);
  while (status == STRATA_OK) {
    kv_wire_header h;
    status = kv_conn_recv_header(&sc->conn, &h, 1);
    if (status != STRATA_OK) break;
    switch (h.type) {
      case KV_READ:
      case KV_WRITE:
        status = h.flags & KV_FLAG_SHM ? serve_shm_batch(sc, &h) : serve_slice(sc, &h);
        break;
      case KV_NOTIF:
        status = serve_notif(sc, &h);
        break;
      case KV_LANE:
        if (!request) request = malloc(STRATA_KV_LANE_MAX_BYTES);
        if (!reply) reply = malloc(STRATA_KV_LANE_MAX_BYTES);
        status = request && reply ? serve_lane(sc, &h, request, reply) : STRATA_ERR_NO_MEMORY;
        break;
      default:
        status = STRATA_ERR_PROTOCOL;
    }
  }
  free(request);
  free(reply);
  if (sc->ucx_link) { /* the token dies with the connection that earned it */
    kv_ucx_link_release(sc->ucx_link);
    sc->ucx_link = NULL;
  }
  return status;
}

static void *serve_connection(void *arg) {
  kv_server_conn *sc = arg;
  strata_kv_agent *a = sc->agent;
  strata_handshake hs;
  strata_handshake_start(&hs, &a->responder_params, sc->conn.fd, -1, -1, NULL);
  char err[400] = "";
  int status = kv_conn_handshake(&sc->conn, &hs, err, sizeof err);
  if (status == STRATA_OK) status = kv_conn_keys(&sc->conn, &hs.keys);
  sodium_memzero(&hs, sizeof hs);
  if (status == STRATA_OK) status = serve_authenticated(sc);
  if (status == STRATA_ERR_PROTOCOL)
    STRATA_LOG(STRATA_LOG_WARN, -1, "kv agent %s: dropped a connection of %s: malformed frame",
               a->name, sc->from[0] ? sc->from : "an unauthenticated peer");
  else if (status != STRATA_ERR_PEER_LOST && status != STRATA_ERR_ABORTED)
    STRATA_LOG(STRATA_LOG_INFO, -1, "kv agent %s: connection of %s ended: %s", a->name,
               sc->from[0] ? sc->from : "an unauthenticated peer",
               err[0] ? err : strata_strerror(status));
  shutdown(sc->conn.fd, SHUT_RDWR);
  pthread_mutex_lock(&a->lock);
  sc->finished = 1;
  pthread_mutex_unlock(&a->lock);
  return NULL;
}

/* Join and free the connections whose threads ended. Lock held. */
static void reap(strata_kv_agent *a, int all) {
  kv_server_conn **link = &a->server_conns;
  while (*link) {
    kv_server_conn *sc = *link;
    if (!all && !sc->finished) {
      link = &sc->next;
      continue;
    }
    *link = sc->next;
    a->nserver_conns--;
    pthread_mutex_unlock(&a->lock);
    shutdown(sc->conn.fd, SHUT_RDWR);
    pthread_join(sc->thread, NULL);
    kv_conn_close(&sc->conn);
    free(sc);
    pthread_mutex_lock(&a->lock);
  }
}

static void accept_one(strata_kv_agent *a) {
  int fd = accept4(a->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  pthread_mutex_lock(&a->lock);
  reap(a, 0);
  /* At the limit, the oldest connection still proving itself makes room: a crowd of silent
   * strangers then delays a real peer by at most one poll slice, never locks it out. Evicted
   * threads end within that slice; the hard cap bounds threads while they do. */
  int room = a->nserver_conns < KV_MAX_RESPONDER_CONNS;
  if (!room && a->nserver_conns < 2 * KV_MAX_RESPONDER_CONNS) {
    kv_server_conn *oldest = NULL;
    for (kv_server_conn *c = a->server_conns; c; c = c->next)
      if (!c->admitted && !c->finished && !c->evicted) oldest = c;
    if (oldest) {
      oldest->evicted = 1;
      shutdown(oldest->conn.fd, SHUT_RDWR);
      room = 1;
    }
  }
  kv_server_conn *sc = NULL;
  if (room) sc = calloc(1, sizeof *sc);
  if (sc) {
    sc->agent = a;
    kv_conn_init(&sc->conn, fd, a->timeout_s, &a->stopping);
    sc->conn.lane_hot = &a->lane_hot_until;
    if (pthread_create(&sc->thread, NULL, serve_connection, sc) == 0) {
      sc->next = a->server_conns;
      a->server_conns = sc;
      a->nserver_conns++;
      fd = -1;
    } else {
      free(sc);
    }
  }
  pthread_mutex_unlock(&a->lock);
  if (fd >= 0) close(fd); /* over the limit: refused before it costs a thread */
}

static void *listen_loop(void *arg) {
  strata_kv_agent *a = arg;
  while (!atomic_load(&a->stopping)) {
    struct pollfd pfd[2] = {{.fd = a->listen_fd, .events = POLLIN},
                            {.fd = a->wake_pipe[0], .events = POLLIN}};
    if (poll(pfd, 2, -1) < 0 && errno != EINTR) break;
    if (pfd[1].revents) break;
    if (pfd[0].revents & POLLIN) accept_one(a);
  }
  return NULL;
}

int kv_responder_start(strata_kv_agent *a) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)a->listen_port)};
  if (inet_pton(AF_INET, a->listen_host, &sa.sin_addr) != 1) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "kv agent %s: listen host '%s' is not an IPv4 address",
               a->name, a->listen_host);
    return STRATA_ERR_INVALID_ARG;
  }
  if (pipe2(a->wake_pipe, O_CLOEXEC) != 0) return STRATA_ERR_SYSTEM;
  a->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  socklen_t len = sizeof sa;
  if (a->listen_fd < 0 ||
      setsockopt(a->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(a->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(a->listen_fd, 128) != 0 ||
      getsockname(a->listen_fd, (struct sockaddr *)&sa, &len) != 0) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "kv agent %s: cannot listen on %s:%d: %s", a->name,
               a->listen_host, a->listen_port, strerror(errno));
    return STRATA_ERR_SYSTEM;
  }
  snprintf(a->address, sizeof a->address, "%s:%u", a->listen_host, ntohs(sa.sin_port));
  memcpy(a->responder_params.address, a->address, sizeof a->address);
  if (pthread_create(&a->listener, NULL, listen_loop, a) != 0) return STRATA_ERR_SYSTEM;
  a->listener_started = 1;
  return STRATA_OK;
}

void kv_responder_stop(strata_kv_agent *a) {
  atomic_store(&a->stopping, 1);
  if (a->listener_started) {
    ssize_t n = write(a->wake_pipe[1], "x", 1);
    (void)n;
    pthread_join(a->listener, NULL);
    a->listener_started = 0;
  }
  pthread_mutex_lock(&a->lock);
  reap(a, 1);
  pthread_mutex_unlock(&a->lock);
  if (a->listen_fd >= 0) close(a->listen_fd);
  for (int i = 0; i < 2; i++)
    if (a->wake_pipe[i] >= 0) close(a->wake_pipe[i]);
  a->listen_fd = a->wake_pipe[0] = a->wake_pipe[1] = -1;
}

/* ---- the fuzz harness's entry (tests/fuzz/fuzz_kv.c) ---- */
#ifdef STRATA_TEST_HOOKS

typedef struct fuzz_feed {
  int fd;
  const uint8_t *data;
  size_t size;
} fuzz_feed;

/* The peer's side: writes the input and drains the replies at the same time, so neither end
 * blocks on a full socket; ends when the responder closes. */
static void *fuzz_feed_loop(void *arg) {
  fuzz_feed *f = arg;
  size_t offset = 0;
  int write_open = 1;
  uint8_t sink[65536];
  for (;;) {
    if (write_open && offset == f->size) {
      shutdown(f->fd, SHUT_WR);
      write_open = 0;
    }
    struct pollfd pfd = {.fd = f->fd, .events = POLLIN | (write_open ? POLLOUT : 0)};
    if (poll(&pfd, 1, 10000) <= 0) break;
    if (pfd.revents & POLLOUT) {
      ssize_t n = send(f->fd, f->data + offset, f->size - offset, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) offset += (size_t)n;
      if (n < 0 && errno != EAGAIN && errno != EINTR) write_open = 0;
    }
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = recv(f->fd, sink, sizeof sink, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
  }
  return NULL;
}

/* Regions at a fixed address when the kernel allows, so seeds can name bytes inside them. */
#define KV_FUZZ_REGION_ADDRESS 0x3e0000000000ull
#define KV_FUZZ_REGION_BYTES (1u << 20)

void kv_responder_frames_for_test(const uint8_t *data, size_t size) {
  static strata_kv_agent *agent;
  if (!agent) {
    strata_log_set_level(STRATA_LOG_ERROR); /* a refusal per input is the point, not news */
    strata_kv_config cfg;
    strata_kv_config_init(&cfg);
    cfg.name = "fuzz-target";
    cfg.secret = "fuzz";
    cfg.timeout_s = 2;
    cfg.bulk_nice = -1;
    cfg.lane_realtime = STRATA_KV_LANE_PLAIN; /* frames are served on the fuzzer's own thread */
    cfg.backend = STRATA_KV_BACKEND_TCP;
    if (strata_kv_agent_create(&cfg, &agent) != STRATA_OK) abort();
    agent->cma_allowed = 0; /* SHM would copy into this very process at the input's addresses */
    void *region =
        mmap((void *)(uintptr_t)KV_FUZZ_REGION_ADDRESS, 2 * KV_FUZZ_REGION_BYTES,
             PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (region == MAP_FAILED)
      region = mmap(NULL, 2 * KV_FUZZ_REGION_BYTES, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) abort();
    uint32_t id;
    if (strata_kv_register(agent, region, KV_FUZZ_REGION_BYTES, &id) != STRATA_OK ||
        strata_kv_register(agent, (uint8_t *)region + KV_FUZZ_REGION_BYTES, 4096, &id) != STRATA_OK)
      abort();
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) abort();
  kv_server_conn sc;
  memset(&sc, 0, sizeof sc);
  sc.agent = agent;
  kv_conn_init(&sc.conn, sv[0], agent->timeout_s, &agent->stopping);
  fuzz_feed feed = {.fd = sv[1], .data = data, .size = size};
  pthread_t feeder;
  if (pthread_create(&feeder, NULL, fuzz_feed_loop, &feed) != 0) abort();
  (void)serve_authenticated(&sc);
  shutdown(sv[0], SHUT_RDWR);
  pthread_join(feeder, NULL);
  kv_conn_close(&sc.conn);
  close(sv[1]);
  char from[STRATA_KV_NAME_BYTES];
  uint8_t msg[STRATA_KV_NOTIF_MAX_BYTES];
  size_t bytes;
  while (strata_kv_notifs_get(agent, from, msg, sizeof msg, &bytes, 0) == STRATA_OK) continue;
}
#endif /* STRATA_TEST_HOOKS */
