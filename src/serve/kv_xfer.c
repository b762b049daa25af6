// SPDX-License-Identifier: Apache-2.0
/*
 * kv_xfer.c — the initiator side: a loaded peer's connections, the threads that move a
 * transfer's slices over them, and the lane's calls.
 *
 * A transfer is cut into slices of at most slice_bytes (one descriptor pair each, or part of
 * one) and queued on its peer; each of the peer's stream threads takes the next slices of the
 * oldest transfer (one, or a batch of small ones), sends them, and reads the target's verdicts,
 * so a transfer is striped over every stream and transfers run in posting order. The thread that
 * brings back a transfer's last slice sends its notification (after every byte is in place at the
 * target) and finishes it. A stream that breaks marks the peer dead: its other streams are shut
 * down, every slice from then on fails with the same status without I/O, and posting to it fails at
 * once — no waiter outlives the agent's timeout.
 *
 * Over SHM the slices carry no bytes: the target copies between its region and the addresses
 * named here (which post checked lie in this agent's registered regions), a stream's batch of
 * slices asked for in one frame and answered in one. Over UCX a stream
 * thread hands its batch to the agent's UCP worker (kv_ucx.c) instead of its socket, and keeps
 * the socket for the transfer's notification: the same queue, striping, verdicts and deaths.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <sodium.h>

#include "core/core.h"
#include "serve/kv_internal.h"

/* Copy text, cut to fit (messages only). */
static void copy_text(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

typedef struct stream_arg {
  kv_peer *peer;
  int index;
} stream_arg;

static int tcp_connect(const char *address, double timeout_s, int *out, char *err, size_t len) {
  char host[STRATA_HANDSHAKE_ADDRESS_BYTES];
  snprintf(host, sizeof host, "%s", address);
  char *colon = strrchr(host, ':');
  struct sockaddr_in sa = {.sin_family = AF_INET};
  long port = colon ? strtol(colon + 1, NULL, 10) : 0;
  if (colon) *colon = '\0';
  if (!colon || port <= 0 || port > 65535 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
    snprintf(err, len, "address '%s' is not host:port", address);
    return STRATA_ERR_PARSE;
  }
  sa.sin_port = htons((uint16_t)port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return STRATA_ERR_SYSTEM;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int status = STRATA_OK;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    if (errno != EINPROGRESS) {
      status = STRATA_ERR_PEER_LOST;
    } else {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      int n = poll(&pfd, 1, (int)(timeout_s * 1000));
      int so_error = 0;
      socklen_t so_len = sizeof so_error;
      if (n == 0)
        status = STRATA_ERR_TIMEOUT;
      else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &so_len) != 0 || so_error)
        status = STRATA_ERR_PEER_LOST;
    }
  }
  if (status != STRATA_OK) {
    snprintf(err, len, "cannot connect to %s: %s", address, strata_strerror(status));
    close(fd);
    return status;
  }
  *out = fd;
  return STRATA_OK;
}

/* Cores this process may run on. With one, a real-time caller polling for its reply would keep
 * the handler of a target on the same host (as real-time as it) off the core: no polling. */
static int usable_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

int kv_dial(strata_kv_agent *a, kv_peer *p, int stream, int flags, kv_conn *c, int *shm_granted,
            kv_ucx_hello *ucx, char *err, size_t err_len) {
  if ((flags & KV_FLAG_UCX) && !ucx) return STRATA_ERR_INVALID_ARG;
  int fd;
  int status = tcp_connect(p->address, a->timeout_s, &fd, err, err_len);
  if (status != STRATA_OK) return status;
  kv_conn_init(c, fd, a->timeout_s, &p->stopping);
  c->lane_hot = &a->lane_hot_until;
  if ((flags & KV_FLAG_LANE) && usable_cpus() > 1) c->spin_us = KV_LANE_SPIN_US;
  strata_handshake hs;
  strata_handshake_start(&hs, &a->initiator_params, fd, 0, stream, p->address);
  status = kv_conn_handshake(c, &hs, err, err_len);
  if (status == STRATA_OK) status = kv_conn_keys(c, &hs.keys);
  sodium_memzero(&hs, sizeof hs);
  kv_wire_header h = {.type = KV_HELLO,
                      .flags = (uint16_t)flags,
                      .addr = (uint64_t)getpid(),
                      .local_addr = (uint64_t)(uintptr_t)&a->canary,
                      .value = a->canary,
                      .aux_bytes = (uint32_t)strlen(a->name)};
  if (flags & KV_FLAG_UCX) h.bytes = ucx->address_bytes;
  if (status == STRATA_OK) status = kv_conn_send_header(c, &h);
  if (status == STRATA_OK) status = kv_conn_send(c, a->name, strlen(a->name));
  if (status == STRATA_OK && (flags & KV_FLAG_UCX)) {
    /* one part: the token replies must carry, then where replies go */
    uint8_t *part = malloc(KV_UCX_TOKEN_BYTES + ucx->address_bytes);
    if (!part) status = STRATA_ERR_NO_MEMORY;
    if (part) {
      memcpy(part, ucx->reply_token, KV_UCX_TOKEN_BYTES);
      memcpy(part + KV_UCX_TOKEN_BYTES, ucx->address, ucx->address_bytes);
      status = kv_conn_send(c, part, KV_UCX_TOKEN_BYTES + ucx->address_bytes);
      free(part);
    }
  }
  kv_wire_header reply;
  if (status == STRATA_OK) status = kv_conn_recv_header(c, &reply, 0);
  if (status == STRATA_OK && reply.type != KV_HELLO_OK) status = STRATA_ERR_PROTOCOL;
  if (status == STRATA_OK) {
    int asked = flags & (KV_FLAG_SHM | KV_FLAG_UCX);
    int ucx_granted = (flags & KV_FLAG_UCX) && reply.status == STRATA_OK;
    *shm_granted = (flags & KV_FLAG_SHM) && reply.status == STRATA_OK;
    if ((!asked && reply.status != STRATA_OK) || reply.status > 0 ||
        reply.aux_bytes != (ucx_granted ? KV_UCX_TOKEN_BYTES : 0u))
      status = STRATA_ERR_PROTOCOL;
    if (status == STRATA_OK && ucx_granted) {
      status = kv_conn_recv(c, ucx->token, KV_UCX_TOKEN_BYTES);
      ucx->granted = status == STRATA_OK;
    }
  }
  if (status != STRATA_OK) {
    if (!err[0]) snprintf(err, err_len, "%s", strata_strerror(status));
    kv_conn_close(c);
  }
  return status;
}

/* ---- moving slices ---- */

static void mark_dead(kv_peer *p, int status, const char *why) {
  if (p->dead) return;
  p->dead = 1;
  p->dead_status = status;
  size_t n = (size_t)snprintf(p->dead_error, sizeof p->dead_error, "peer %s: ", p->name);
  if (n < sizeof p->dead_error) copy_text(p->dead_error + n, sizeof p->dead_error - n, why);
  for (int i = 0; i < p->nstreams; i++)
    if (p->streams[i].fd >= 0) shutdown(p->streams[i].fd, SHUT_RDWR);
  if (p->ucx_link) kv_ucx_link_fail(p->ucx_link, status); /* its batches end at once */
}

static void dequeue(kv_peer *p, strata_kv_xfer *x) {
  strata_kv_xfer **link = &p->queue_head;
  while (*link && *link != x) link = &(*link)->queue_next;
  if (!*link) return;
  *link = x->queue_next;
  if (p->queue_tail == x) {
    p->queue_tail = NULL;
    for (strata_kv_xfer *q = p->queue_head; q; q = q->queue_next) p->queue_tail = q;
  }
  x->queued = 0;
}

static void fail(strata_kv_xfer *x, int status, const char *why) {
  if (x->failure != STRATA_OK) return;
  x->failure = status;
  copy_text(x->error, sizeof x->error, why);
}

/* Take the transfer's slices not yet handed out away with the failure already recorded; finish
 * it when none is on the wire (else the stream thread bringing the last one back does). */
static void drop_remaining(strata_kv_xfer *x) {
  if (x->queued) dequeue(x->peer, x);
  x->done += x->nslices - x->next;
  x->next = x->nslices;
  if (!x->finished && x->done == x->nslices && !x->inflight) {
    x->status = x->failure;
    x->finished = 1;
  }
}

/* One TCP slice on connection c. Returns the connection's state. */
static int send_request(kv_conn *c, const strata_kv_xfer *x, size_t i) {
  const kv_slice *s = &x->slices[i];
  kv_wire_header h = {.type = x->op == STRATA_KV_READ ? KV_READ : KV_WRITE,
                      .region = s->region,
                      .addr = s->remote,
                      .bytes = s->bytes};
  int status = kv_conn_send_header(c, &h);
  if (status == STRATA_OK && x->op == STRATA_KV_WRITE)
    status = kv_conn_send(c, (const void *)(uintptr_t)s->local, s->bytes);
  return status;
}

/* The target's answer to TCP slice i: *verdict, and its reason in why. Returns the connection's
 * state. */
static int recv_reply(kv_conn *c, const strata_kv_xfer *x, size_t i, int *verdict, char *why,
                      size_t why_len) {
  const kv_slice *s = &x->slices[i];
  kv_wire_header reply;
  int status = kv_conn_recv_header(c, &reply, 0);
  if (status != STRATA_OK) return status;
  if (reply.type != KV_DONE || reply.status > 0 || reply.aux_bytes >= why_len ||
      (reply.status == STRATA_OK && reply.aux_bytes) ||
      reply.bytes != (reply.status == STRATA_OK && x->op == STRATA_KV_READ ? s->bytes : 0))
    return STRATA_ERR_PROTOCOL;
  *verdict = reply.status;
  if (reply.aux_bytes) {
    status = kv_conn_recv(c, why, reply.aux_bytes);
    why[reply.aux_bytes] = '\0';
  }
  if (status == STRATA_OK && reply.bytes)
    status = kv_conn_recv(c, (void *)(uintptr_t)s->local, s->bytes);
  return status;
}

/* Slices [first, first+n) over SHM as one frame (n <= KV_WIRE_MAX_SHM_SLICES): the target
 * copies them and answers once; a failure comes back as *refused, the slice and its reason.
 * Returns the connection's state. */
static int shm_batch(kv_conn *c, const strata_kv_xfer *x, size_t first, size_t n, int *refused,
                     size_t *refused_slice, char *why, size_t why_len) {
  kv_wire_slice s[KV_WIRE_MAX_SHM_SLICES];
  for (size_t k = 0; k < n; k++) {
    const kv_slice *slice = &x->slices[first + k];
    s[k] = (kv_wire_slice){.addr = slice->remote,
                           .bytes = slice->bytes,
                           .local_addr = slice->local,
                           .region = slice->region};
    kv_wire_slice_encode(&s[k]);
  }
  kv_wire_header h = {.type = x->op == STRATA_KV_READ ? KV_READ : KV_WRITE,
                      .flags = KV_FLAG_SHM,
                      .value = n,
                      .aux_bytes = (uint32_t)(n * sizeof *s)};
  int status = kv_conn_send_frame(c, &h, s, n * sizeof *s);
  kv_wire_header reply;
  if (status == STRATA_OK) status = kv_conn_recv_header(c, &reply, 0);
  if (status != STRATA_OK) return status;
  if (reply.type != KV_DONE || reply.status > 0 || reply.bytes || reply.aux_bytes >= why_len ||
      (reply.status == STRATA_OK && (reply.aux_bytes || reply.value)) || reply.value >= n)
    return STRATA_ERR_PROTOCOL;
  if (reply.status == STRATA_OK) return STRATA_OK;
  *refused = reply.status;
  *refused_slice = first + (size_t)reply.value;
  why[reply.aux_bytes] = '\0';
  return reply.aux_bytes ? kv_conn_recv(c, why, reply.aux_bytes) : STRATA_OK;
}

static int send_notif(kv_conn *c, const void *msg, size_t bytes) {
  kv_wire_header h = {.type = KV_NOTIF, .aux_bytes = (uint32_t)bytes};
  int status = kv_conn_send_header(c, &h);
  if (status == STRATA_OK) status = kv_conn_send(c, msg, bytes);
  kv_wire_header reply;
  if (status == STRATA_OK) status = kv_conn_recv_header(c, &reply, 0);
  if (status == STRATA_OK &&
      (reply.type != KV_DONE || reply.aux_bytes || reply.bytes || reply.status > 0))
    status = STRATA_ERR_PROTOCOL;
  return status == STRATA_OK ? reply.status : status;
}

/* Lock held; may drop it to send the notification. */
static void maybe_finish(kv_peer *p, kv_conn *c, strata_kv_xfer *x) {
  strata_kv_agent *a = p->agent;
  if (x->finished || x->done < x->nslices || x->inflight) return;
  if (x->failure == STRATA_OK && x->notif_bytes) {
    if (p->dead) {
      fail(x, p->dead_status, p->dead_error);
    } else {
      x->inflight++; /* nobody else finishes it meanwhile */
      pthread_mutex_unlock(&a->lock);
      int status = send_notif(c, x->notif, x->notif_bytes);
      pthread_mutex_lock(&a->lock);
      x->inflight--;
      if (status != STRATA_OK) {
        fail(x, status, "the notification was not delivered");
        if (status == STRATA_ERR_PEER_LOST || status == STRATA_ERR_TIMEOUT ||
            status == STRATA_ERR_PROTOCOL)
          mark_dead(p, status, "the connection broke sending a notification");
      }
    }
  }
  x->status = x->failure;
  x->finished = 1;
  pthread_cond_broadcast(&a->cond);
}

/* A stream sends a batch of consecutive slices of one transfer (KV_BATCH_SLICES at most) before
 * reading their replies, so small blocks do not cost a round trip each. A batch moves bulk bytes
 * one way only (a WRITE batch's replies are headers and at most a refusal's reason each, a few
 * KiB in all; a READ batch's requests are headers), so the side that is not reading never has
 * more than a few KiB to send: neither blocks on a full socket while the other waits for it.
 * Over SHM a batch is one frame both ways (shm_batch): one wake-up of each side and one or a few
 * copy calls at the target however many slices it holds. */

static void *stream_loop(void *arg) {
  stream_arg *sa = arg;
  kv_peer *p = sa->peer;
  int index = sa->index;
  kv_conn *c = &p->streams[index];
  free(sa);
  strata_kv_agent *a = p->agent;
  kv_thread_nice(a->bulk_nice);
  pthread_mutex_lock(&a->lock);
  for (;;) {
    while (!p->stopping && !p->queue_head) pthread_cond_wait(&a->cond, &a->lock);
    if (p->stopping) break;
    strata_kv_xfer *x = p->queue_head;
    size_t first = x->next, n = 0;
    /* Over UCX and SHM no socket carries the bytes, so a batch may hold more of them: fewer
     * hand-offs to the worker thread, fewer frames and copy calls per transfer. */
    uint64_t batch_bytes = 0, batch_cap = a->slice_bytes;
    size_t batch_slices = KV_BATCH_SLICES;
    if (p->backend == STRATA_KV_BACKEND_UCX) batch_cap *= KV_UCX_BATCH_SLICES_OF_BYTES;
    if (p->backend == STRATA_KV_BACKEND_SHM) {
      /* but never so many that a transfer no longer spreads over every stream: the target's
       * threads copy a stream's batch alone */
      uint64_t share = x->bytes / (uint64_t)p->nstreams;
      batch_cap *= KV_SHM_BATCH_SLICES_OF_BYTES;
      if (share < batch_cap) batch_cap = share;
      batch_slices = KV_WIRE_MAX_SHM_SLICES;
    }
    while (x->next < x->nslices && n < batch_slices &&
           (n == 0 || batch_bytes + x->slices[x->next].bytes <= batch_cap)) {
      batch_bytes += x->slices[x->next].bytes;
      x->next++;
      n++;
    }
    if (x->next == x->nslices) dequeue(p, x);
    x->inflight += n;
    int dead = p->dead;
    pthread_mutex_unlock(&a->lock);
    int status = STRATA_OK, refused = STRATA_OK;
    size_t refused_slice = 0, sent = 0;
    char why[256] = "";
    int ucx = p->backend == STRATA_KV_BACKEND_UCX;
    int shm = p->backend == STRATA_KV_BACKEND_SHM; /* the loops below then do nothing */
    if (!dead && ucx)
      status = kv_ucx_batch(p, c, x, first, n, &refused, &refused_slice, why, sizeof why);
    if (!dead && shm) status = shm_batch(c, x, first, n, &refused, &refused_slice, why, sizeof why);
    for (; !dead && !ucx && !shm && status == STRATA_OK && sent < n; sent++)
      status = send_request(c, x, first + sent);
    for (size_t k = 0; !dead && status == STRATA_OK && k < sent; k++) {
      int verdict = STRATA_OK;
      char reason[256] = "";
      status = recv_reply(c, x, first + k, &verdict, reason, sizeof reason);
      if (status == STRATA_OK && verdict != STRATA_OK && refused == STRATA_OK) {
        refused = verdict;
        refused_slice = first + k;
        memcpy(why, reason, sizeof why);
      }
    }
    pthread_mutex_lock(&a->lock);
    x->inflight -= n;
    x->done += n;
    if (dead || p->dead) {
      fail(x, p->dead ? p->dead_status : STRATA_ERR_PEER_LOST, p->dead_error);
    } else if (status != STRATA_OK) {
      char line[512];
      if (ucx)
        snprintf(line, sizeof line, "UCX slices of stream %d to %s failed: %s", index, p->address,
                 strata_strerror(status));
      else
        snprintf(line, sizeof line, "stream %d to %s broke: %s", index, p->address,
                 strata_strerror(status));
      mark_dead(p, status == STRATA_ERR_ABORTED ? STRATA_ERR_PEER_LOST : status, line);
      fail(x, p->dead_status, p->dead_error);
    } else if (refused != STRATA_OK) {
      char line[512];
      snprintf(line, sizeof line, "peer %s refused slice %zu: %s", p->name, refused_slice,
               why[0] ? why : strata_strerror(refused));
      fail(x, refused, line);
    }
    maybe_finish(p, c, x);
    pthread_cond_broadcast(&a->cond);
  }
  pthread_mutex_unlock(&a->lock);
  return NULL;
}

/* The backend rule (strata_kv.h, STRATA_KV_BACKEND_AUTO): SHM within a host, UCX between hosts
 * that both have it over RDMA, else TCP; an explicit choice that cannot be met fails. */
static int choose_backend(strata_kv_agent *a, kv_peer *p, int same_host, char *err,
                          size_t err_len) {
  switch (a->backend) {
    case STRATA_KV_BACKEND_SHM:
      if (same_host) return STRATA_KV_BACKEND_SHM;
      snprintf(err, err_len, "backend SHM asked, but peer %s is on another host", p->name);
      return STRATA_ERR_UNSUPPORTED;
    case STRATA_KV_BACKEND_UCX:
      if (a->ucx && p->ucx_address) return STRATA_KV_BACKEND_UCX;
      snprintf(err, err_len, "backend UCX asked, but peer %s %s", p->name,
               a->ucx ? "published no UCX worker address" : "cannot be reached: UCX is not up");
      return STRATA_ERR_UNSUPPORTED;
    case STRATA_KV_BACKEND_TCP:
      return STRATA_KV_BACKEND_TCP;
    default:
      if (same_host) return STRATA_KV_BACKEND_SHM;
      if (a->ucx && a->ucx_rdma && p->ucx_address && (p->blob_flags & KV_BLOB_UCX_RDMA))
        return STRATA_KV_BACKEND_UCX;
      return STRATA_KV_BACKEND_TCP;
  }
}

int kv_peer_connect(strata_kv_agent *a, kv_peer *p, char *err, size_t err_len) {
  int same_host = !strcmp(p->identity, a->identity);
  int chosen = choose_backend(a, p, same_host, err, err_len);
  if (chosen < 0) return chosen;
  int want_shm = chosen == STRATA_KV_BACKEND_SHM;
  int want_ucx = chosen == STRATA_KV_BACKEND_UCX;
  kv_ucx_hello hello = {0};
  if (want_ucx) {
    kv_ucx_address(a, &hello.address, &hello.address_bytes);
    randombytes_buf(hello.reply_token, sizeof hello.reply_token);
  }
  p->nstreams = a->streams;
  int status = STRATA_OK;
  for (int i = 0; i < p->nstreams && status == STRATA_OK; i++) {
    int granted = 0;
    /* UCX is asked for once, on the first bulk connection: the token it brings is revoked when
     * that connection ends */
    int flags = want_shm ? KV_FLAG_SHM : want_ucx && i == 0 ? KV_FLAG_UCX : 0;
    status =
        kv_dial(a, p, i, flags, &p->streams[i], &granted, want_ucx ? &hello : NULL, err, err_len);
    if (status == STRATA_OK && want_ucx && i == 0) {
      if (hello.granted)
        status = kv_ucx_link_open(a, p, &hello, err, err_len);
      else if (a->backend == STRATA_KV_BACKEND_UCX) {
        snprintf(err, err_len, "peer %s did not grant UCX (it runs no UCP worker)", p->name);
        status = STRATA_ERR_UNSUPPORTED;
      } else
        want_ucx = 0;
    }
    if (status == STRATA_OK && want_shm && !granted) {
      if (a->backend == STRATA_KV_BACKEND_SHM) {
        snprintf(err, err_len, "peer %s cannot reach this process's memory (ptrace rules?)",
                 p->name);
        status = STRATA_ERR_UNSUPPORTED;
      }
      want_shm = 0; /* AUTO: this connection serves TCP as it is */
    }
  }
  sodium_memzero(&hello, sizeof hello);
  p->backend = want_shm   ? STRATA_KV_BACKEND_SHM
               : want_ucx ? STRATA_KV_BACKEND_UCX
                          : STRATA_KV_BACKEND_TCP;
  int unused;
  if (status == STRATA_OK)
    status = kv_dial(a, p, KV_LANE_STREAM, KV_FLAG_LANE, &p->lane, &unused, NULL, err, err_len);
  for (int i = 0; i < p->nstreams && status == STRATA_OK; i++) {
    stream_arg *sa = malloc(sizeof *sa);
    if (!sa) {
      status = STRATA_ERR_NO_MEMORY;
      break;
    }
    sa->peer = p;
    sa->index = i;
    if (pthread_create(&p->threads[i], NULL, stream_loop, sa) != 0) {
      free(sa);
      status = STRATA_ERR_SYSTEM;
      break;
    }
    p->threads_started = i + 1;
  }
  return status;
}

void kv_peer_destroy(kv_peer *p) {
  strata_kv_agent *a = p->agent;
  pthread_mutex_lock(&a->lock);
  atomic_store(&p->stopping, 1);
  mark_dead(p, STRATA_ERR_PEER_LOST, "the peer was forgotten or the agent destroyed");
  while (p->queue_head) {
    strata_kv_xfer *x = p->queue_head;
    fail(x, p->dead_status, p->dead_error);
    drop_remaining(x);
  }
  pthread_cond_broadcast(&a->cond);
  if (p->lane.fd >= 0) shutdown(p->lane.fd, SHUT_RDWR);
  while (p->users > 0) pthread_cond_wait(&a->cond, &a->lock); /* their I/O fails at once now */
  pthread_mutex_unlock(&a->lock);
  /* Each thread brings its slice back (the shutdown and the stop flag end its I/O) and finishes
   * its transfer if that was the last one before it exits. */
  for (int i = 0; i < p->threads_started; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_lock(&p->lane_lock);
  kv_conn_close(&p->lane);
  pthread_mutex_unlock(&p->lane_lock);
  for (int i = 0; i < STRATA_KV_MAX_STREAMS; i++) kv_conn_close(&p->streams[i]);
  if (p->ucx_link) kv_ucx_link_release(p->ucx_link); /* no batch uses it: the threads are gone */
  pthread_mutex_destroy(&p->lane_lock);
  free(p->regions);
  free(p->ucx_address);
  free(p);
}

/* ---- transfers ---- */

int strata_kv_xfer_post(strata_kv_agent *a, strata_kv_op op, int peer, const strata_kv_desc *local,
                        const strata_kv_desc *remote, size_t count, const void *notif,
                        size_t notif_bytes, strata_kv_xfer **out) {
  if (!a || !out || (op != STRATA_KV_READ && op != STRATA_KV_WRITE) ||
      (count && (!local || !remote)) || notif_bytes > STRATA_KV_NOTIF_MAX_BYTES ||
      (notif_bytes && (!notif || op != STRATA_KV_WRITE)))
    return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  size_t nslices = 0;
  for (size_t i = 0; i < count; i++) {
    if (local[i].bytes != remote[i].bytes) return STRATA_ERR_INVALID_ARG;
    uint64_t n = local[i].bytes / a->slice_bytes + (local[i].bytes % a->slice_bytes != 0);
    if (n > SIZE_MAX / sizeof(kv_slice) - nslices) return STRATA_ERR_INVALID_ARG;
    nslices += n;
  }
  strata_kv_xfer *x = calloc(1, sizeof *x);
  kv_slice *slices = calloc(nslices ? nslices : 1, sizeof *slices);
  if (!x || !slices) {
    free(x);
    free(slices);
    return STRATA_ERR_NO_MEMORY;
  }
  x->agent = a;
  x->op = op;
  x->slices = slices;
  x->nslices = nslices;
  x->status = STRATA_ERR_IN_PROGRESS;
  x->notif_bytes = notif_bytes;
  if (notif_bytes) memcpy(x->notif, notif, notif_bytes);
  size_t k = 0;
  for (size_t i = 0; i < count; i++) {
    x->bytes += local[i].bytes;
    for (uint64_t off = 0; off < local[i].bytes; off += a->slice_bytes) {
      uint64_t left = local[i].bytes - off;
      slices[k++] = (kv_slice){.local = local[i].addr + off,
                               .remote = remote[i].addr + off,
                               .bytes = left < a->slice_bytes ? left : a->slice_bytes,
                               .region = remote[i].region};
    }
  }
  pthread_mutex_lock(&a->lock);
  int status = STRATA_OK;
  kv_peer *p = peer >= 0 && peer < KV_MAX_PEERS ? a->peers[peer] : NULL;
  if (!p || p->stopping || !p->ready)
    status = STRATA_ERR_NOT_FOUND;
  else if (p->dead)
    status = p->dead_status;
  for (size_t i = 0; status == STRATA_OK && i < count; i++)
    if (local[i].bytes && !kv_local_covered(a, local[i].addr, local[i].bytes)) {
      status = STRATA_ERR_INVALID_ARG;
      STRATA_LOG(STRATA_LOG_WARN, -1,
                 "kv agent %s: local descriptor %zu [0x%llx, +%llu) is not in a registered region",
                 a->name, i, (unsigned long long)local[i].addr, (unsigned long long)local[i].bytes);
    }
  if (status == STRATA_OK) {
    x->peer = p;
    if (nslices == 0 && notif_bytes == 0) {
      x->status = STRATA_OK;
      x->finished = 1;
    } else if (nslices == 0) {
      /* a notification alone: one slice-less pass through a stream thread */
      x->status = STRATA_ERR_IN_PROGRESS;
    }
    if (!x->finished) {
      if (nslices == 0) {
        /* deliver through the lane below, outside the lock */
      } else {
        x->queued = 1;
        if (p->queue_tail)
          p->queue_tail->queue_next = x;
        else
          p->queue_head = x;
        p->queue_tail = x;
        pthread_cond_broadcast(&a->cond);
      }
    }
  }
  int notif_only = status == STRATA_OK && !x->finished && nslices == 0;
  pthread_mutex_unlock(&a->lock);
  if (status != STRATA_OK) {
    free(slices);
    free(x);
    return status;
  }
  if (notif_only) {
    int sent = strata_kv_notify(a, peer, notif, notif_bytes);
    pthread_mutex_lock(&a->lock);
    x->status = x->failure = sent;
    if (sent != STRATA_OK)
      snprintf(x->error, sizeof x->error, "the notification was not delivered");
    x->finished = 1;
    pthread_mutex_unlock(&a->lock);
  }
  *out = x;
  return STRATA_OK;
}

int strata_kv_xfer_status(strata_kv_xfer *x) {
  if (!x) return STRATA_ERR_INVALID_ARG;
  pthread_mutex_lock(&x->agent->lock);
  int status = x->finished ? x->status : STRATA_ERR_IN_PROGRESS;
  pthread_mutex_unlock(&x->agent->lock);
  return status;
}

int strata_kv_xfer_wait(strata_kv_xfer *x, double timeout_s) {
  if (!x) return STRATA_ERR_INVALID_ARG;
  strata_kv_agent *a = x->agent;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double until = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (timeout_s < 0 ? 1e9 : timeout_s);
  ts.tv_sec = (time_t)until;
  ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
  pthread_mutex_lock(&a->lock);
  while (!x->finished)
    if (pthread_cond_timedwait(&a->cond, &a->lock, &ts) == ETIMEDOUT) break;
  int status = x->finished ? x->status : STRATA_ERR_IN_PROGRESS;
  pthread_mutex_unlock(&a->lock);
  return status;
}

void strata_kv_xfer_cancel(strata_kv_xfer *x) {
  if (!x) return;
  strata_kv_agent *a = x->agent;
  pthread_mutex_lock(&a->lock);
  if (!x->finished) {
    fail(x, STRATA_ERR_ABORTED, "cancelled");
    drop_remaining(x);
    pthread_cond_broadcast(&a->cond);
  }
  pthread_mutex_unlock(&a->lock);
}

void strata_kv_xfer_release(strata_kv_xfer *x) {
  if (!x) return;
  strata_kv_xfer_cancel(x);
  strata_kv_agent *a = x->agent;
  pthread_mutex_lock(&a->lock);
  while (!x->finished) pthread_cond_wait(&a->cond, &a->lock);
  pthread_mutex_unlock(&a->lock);
  free(x->slices);
  free(x);
}

const char *strata_kv_xfer_error(strata_kv_xfer *x) {
  if (!x) return "";
  pthread_mutex_lock(&x->agent->lock);
  const char *e = x->finished && x->status != STRATA_OK ? x->error : "";
  pthread_mutex_unlock(&x->agent->lock);
  return e;
}

/* ---- the lane ---- */

/* The peer, held (users) until lane_done so a concurrent forget waits for the call. */
static kv_peer *lane_peer(strata_kv_agent *a, int peer) {
  pthread_mutex_lock(&a->lock);
  kv_peer *p = peer >= 0 && peer < KV_MAX_PEERS ? a->peers[peer] : NULL;
  if (p && (!p->ready || p->stopping)) p = NULL;
  if (p) p->users++;
  pthread_mutex_unlock(&a->lock);
  return p;
}

static void lane_done(strata_kv_agent *a, kv_peer *p) {
  pthread_mutex_lock(&a->lock);
  /* only kv_peer_destroy waits for the count (after setting stopping); waking every stream
   * thread after each call would cost the lane the cores it needs */
  if (--p->users == 0 && p->stopping) pthread_cond_broadcast(&a->cond);
  pthread_mutex_unlock(&a->lock);
}

static void lane_break(kv_peer *p, int status) {
  if (status == STRATA_ERR_PEER_LOST || status == STRATA_ERR_TIMEOUT ||
      status == STRATA_ERR_PROTOCOL || status == STRATA_ERR_ABORTED) {
    p->lane_broken = 1;
    if (p->lane.fd >= 0) shutdown(p->lane.fd, SHUT_RDWR);
  }
}

int strata_kv_notify(strata_kv_agent *a, int peer, const void *msg, size_t bytes) {
  if (!a || bytes > STRATA_KV_NOTIF_MAX_BYTES || (bytes && !msg)) return STRATA_ERR_INVALID_ARG;
  kv_peer *p = lane_peer(a, peer);
  if (!p) return STRATA_ERR_NOT_FOUND;
  pthread_mutex_lock(&p->lane_lock);
  int status = p->lane_broken ? STRATA_ERR_PEER_LOST : send_notif(&p->lane, msg, bytes);
  lane_break(p, status);
  pthread_mutex_unlock(&p->lane_lock);
  lane_done(a, p);
  return status;
}

int strata_kv_lane_call(strata_kv_agent *a, int peer, uint32_t tag, const void *request,
                        size_t request_bytes, void *reply, size_t reply_cap, size_t *reply_bytes,
                        double timeout_s) {
  if (!a || !reply_bytes || request_bytes > STRATA_KV_LANE_MAX_BYTES ||
      (request_bytes && !request) || (reply_cap && !reply))
    return STRATA_ERR_INVALID_ARG;
  kv_peer *p = lane_peer(a, peer);
  if (!p) return STRATA_ERR_NOT_FOUND;
  pthread_mutex_lock(&p->lane_lock);
  if (p->lane_broken) {
    pthread_mutex_unlock(&p->lane_lock);
    lane_done(a, p);
    return STRATA_ERR_PEER_LOST;
  }
  /* The caller's own thread makes the round trip (no hand-off), real-time for its duration when
   * permitted, so neither the bulk threads nor the host's other ordinary threads delay it. */
  kv_sched_saved saved;
  kv_thread_realtime(a, &saved);
  kv_lane_hot(a);
  kv_conn *c = &p->lane;
  c->timeout_s = timeout_s > 0 ? timeout_s : a->timeout_s;
  kv_wire_header h = {.type = KV_LANE, .tag = tag, .aux_bytes = (uint32_t)request_bytes};
  int status = kv_conn_send_header(c, &h);
  if (status == STRATA_OK) status = kv_conn_send(c, request, request_bytes);
  kv_wire_header r;
  if (status == STRATA_OK) status = kv_conn_recv_header(c, &r, 0);
  if (status == STRATA_OK && (r.type != KV_LANE_REPLY || r.aux_bytes > STRATA_KV_LANE_MAX_BYTES ||
                              r.status > 0 || r.bytes || r.tag != tag))
    status = STRATA_ERR_PROTOCOL;
  int result = STRATA_OK;
  if (status == STRATA_OK) {
    *reply_bytes = r.aux_bytes;
    if (r.aux_bytes > reply_cap) {
      status = kv_conn_discard(c, r.aux_bytes);
      result = STRATA_ERR_INVALID_ARG;
    } else {
      status = kv_conn_recv(c, reply, r.aux_bytes);
      result = r.status;
    }
  }
  lane_break(p, status);
  pthread_mutex_unlock(&p->lane_lock);
  kv_thread_restore(&saved);
  lane_done(a, p);
  return status != STRATA_OK ? status : result;
}
