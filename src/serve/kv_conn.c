// SPDX-License-Identifier: Apache-2.0
/*
 * kv_conn.c — moving the parts of a KV frame over one connection: every wait is a poll bounded
 * by the connection's timeout (counted from the last byte that moved, so a slow but live peer
 * is not cut off), and every part is one AEAD operation when the handshake agreed sealing.
 * A server connection between requests waits without a deadline (idle), woken by the agent's
 * stop flag through a shutdown of the socket.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>

#include "boot/settings.h"
#include "core/core.h"
#include "serve/kv_internal.h"

enum { KV_POLL_SLICE_MS = 100 }; /* how often a wait looks at the stop flag */

static pthread_once_t syscall_bytes_once = PTHREAD_ONCE_INIT;
static size_t syscall_bytes;

static void syscall_bytes_read(void) {
  syscall_bytes = (size_t)strata_setting_u64("STRATA_KV_SYSCALL_BYTES");
}

size_t kv_syscall_bytes(void) {
  pthread_once(&syscall_bytes_once, syscall_bytes_read);
  return syscall_bytes;
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

size_t kv_conn_call_bytes(const kv_conn *c) {
  if (!c->lane_hot || now_ns() >= atomic_load_explicit(c->lane_hot, memory_order_relaxed))
    return SIZE_MAX;
  return kv_syscall_bytes();
}

void kv_lane_hot(strata_kv_agent *a) {
  atomic_store_explicit(&a->lane_hot_until, now_ns() + KV_LANE_HOT_NS, memory_order_relaxed);
}

void kv_conn_init(kv_conn *c, int fd, double timeout_s, const atomic_int *stop) {
  memset(c, 0, sizeof *c);
  c->fd = fd;
  c->timeout_s = timeout_s;
  c->stop = stop;
}

int kv_conn_keys(kv_conn *c, const strata_seal_keys *keys) {
  c->sealed = keys->encrypt != 0;
  if (!c->sealed) return STRATA_OK;
  int status = strata_seal_init(&c->tx, 1, keys->cipher, keys->tx);
  if (status == STRATA_OK) status = strata_seal_init(&c->rx, 1, keys->cipher, keys->rx);
  return status;
}

void kv_conn_close(kv_conn *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  if (c->sealed) {
    strata_seal_free(&c->tx);
    strata_seal_free(&c->rx);
    c->sealed = 0;
  }
  free(c->scratch);
  c->scratch = NULL;
  c->scratch_cap = 0;
}

/* Wait for `events`; idle waits have no deadline. */
static int wait_fd(kv_conn *c, short events, double *deadline, int idle) {
  for (;;) {
    if (c->stop && atomic_load_explicit(c->stop, memory_order_relaxed)) return STRATA_ERR_ABORTED;
    double now = strata_now_s();
    if (!idle && now >= *deadline) return STRATA_ERR_TIMEOUT;
    int wait_ms = KV_POLL_SLICE_MS;
    if (!idle && (*deadline - now) * 1000.0 < wait_ms)
      wait_ms = (int)((*deadline - now) * 1000.0) + 1;
    struct pollfd pfd = {.fd = c->fd, .events = events};
    int n = poll(&pfd, 1, wait_ms);
    if (n < 0 && errno != EINTR) return STRATA_ERR_SYSTEM;
    if (n > 0) return STRATA_OK;
  }
}

static int send_raw(kv_conn *c, const void *buf, size_t len) {
  const uint8_t *p = buf;
  double deadline = strata_now_s() + c->timeout_s;
  while (len > 0) {
    size_t most = kv_conn_call_bytes(c);
    ssize_t n = send(c->fd, p, len < most ? len : most, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      deadline = strata_now_s() + c->timeout_s;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int status = wait_fd(c, POLLOUT, &deadline, 0);
      if (status != STRATA_OK) return status;
      continue;
    }
    return STRATA_ERR_PEER_LOST;
  }
  return STRATA_OK;
}

static int recv_raw(kv_conn *c, void *buf, size_t len, int idle) {
  uint8_t *p = buf;
  double deadline = strata_now_s() + c->timeout_s;
  long long spin_until = 0; /* set at the first wait */
  while (len > 0) {
    size_t most = kv_conn_call_bytes(c);
    ssize_t n = recv(c->fd, p, len < most ? len : most, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      idle = 0;
      deadline = strata_now_s() + c->timeout_s;
      continue;
    }
    if (n == 0) return STRATA_ERR_PEER_LOST;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (c->spin_us > 0 && !idle) {
        long long now = now_ns();
        if (!spin_until) spin_until = now + (long long)c->spin_us * 1000;
        if (now < spin_until) continue;
      }
      int status = wait_fd(c, POLLIN, &deadline, idle);
      if (status != STRATA_OK) return status;
      continue;
    }
    return STRATA_ERR_PEER_LOST;
  }
  return STRATA_OK;
}

static int scratch_reserve(kv_conn *c, size_t len) {
  if (c->scratch_cap >= len) return STRATA_OK;
  uint8_t *grown = realloc(c->scratch, len);
  if (!grown) return STRATA_ERR_NO_MEMORY;
  c->scratch = grown;
  c->scratch_cap = len;
  return STRATA_OK;
}

int kv_conn_send(kv_conn *c, const void *buf, size_t len) {
  if (!c->sealed) return send_raw(c, buf, len);
  int status = scratch_reserve(c, len + STRATA_SEAL_TAG_BYTES);
  if (status != STRATA_OK) return status;
  strata_seal_close(&c->tx, c->scratch, buf, len, c->scratch + len);
  return send_raw(c, c->scratch, len + STRATA_SEAL_TAG_BYTES);
}

static int recv_part(kv_conn *c, void *buf, size_t len, int idle) {
  int status = recv_raw(c, buf, len, idle);
  if (status != STRATA_OK || !c->sealed) return status;
  uint8_t tag[STRATA_SEAL_TAG_BYTES];
  status = recv_raw(c, tag, sizeof tag, 0);
  if (status != STRATA_OK) return status;
  return strata_seal_open(&c->rx, buf, buf, len, tag) == 0 ? STRATA_OK : STRATA_ERR_PROTOCOL;
}

int kv_conn_recv(kv_conn *c, void *buf, size_t len) {
  return recv_part(c, buf, len, 0);
}

int kv_conn_discard(kv_conn *c, size_t len) {
  int status = scratch_reserve(c, len ? len : 1);
  if (status != STRATA_OK) return status;
  return recv_part(c, c->scratch, len, 0);
}

int kv_conn_send_header(kv_conn *c, const kv_wire_header *h) {
  kv_wire_header wire = *h;
  wire.magic = KV_WIRE_MAGIC;
  kv_wire_encode(&wire);
  return kv_conn_send(c, &wire, sizeof wire);
}

int kv_conn_send_frame(kv_conn *c, const kv_wire_header *h, const void *aux, size_t aux_bytes) {
  size_t tag = c->sealed ? STRATA_SEAL_TAG_BYTES : 0, header_part = sizeof *h + tag;
  int status = scratch_reserve(c, header_part + aux_bytes + tag);
  if (status != STRATA_OK) return status;
  kv_wire_header wire = *h;
  wire.magic = KV_WIRE_MAGIC;
  kv_wire_encode(&wire);
  uint8_t *out = c->scratch;
  if (c->sealed) {
    status = strata_seal_close(&c->tx, out, (const uint8_t *)&wire, sizeof wire, out + sizeof wire);
    if (status == STRATA_OK)
      status = strata_seal_close(&c->tx, out + header_part, (const uint8_t *)aux, aux_bytes,
                                 out + header_part + aux_bytes);
    if (status != STRATA_OK) return status;
  } else {
    memcpy(out, &wire, sizeof wire);
    memcpy(out + header_part, aux, aux_bytes);
  }
  return send_raw(c, out, header_part + aux_bytes + tag);
}

int kv_conn_recv_header(kv_conn *c, kv_wire_header *h, int idle) {
  int status = recv_part(c, h, sizeof *h, idle);
  if (status != STRATA_OK) return status;
  kv_wire_decode(h);
  if (h->magic == KV_WIRE_MAGIC) return STRATA_OK;
  /* "KSV" and another digit: a peer built from another release, not line noise */
  if ((h->magic & 0x00ffffffu) == (KV_WIRE_MAGIC & 0x00ffffffu))
    STRATA_LOG(STRATA_LOG_WARN, -1,
               "kv: the peer speaks KV wire version %c, this agent %c: run one strata release on "
               "both ends",
               (char)(h->magic >> 24), (char)(KV_WIRE_MAGIC >> 24));
  return STRATA_ERR_PROTOCOL;
}

int kv_conn_handshake(kv_conn *c, strata_handshake *hs, char *err, size_t err_len) {
  double deadline = strata_now_s() + c->timeout_s;
  int status;
  while ((status = strata_handshake_advance(hs)) == STRATA_ERR_IN_PROGRESS) {
    if (c->stop && atomic_load_explicit(c->stop, memory_order_relaxed)) {
      status = STRATA_ERR_ABORTED;
      break;
    }
    double left_ms = (deadline - strata_now_s()) * 1000.0;
    if (left_ms <= 0) {
      strata_handshake_expire(hs);
      status = hs->status;
      break;
    }
    struct pollfd pfd = {.fd = c->fd, .events = strata_handshake_events(hs)};
    int wait_ms = left_ms < KV_POLL_SLICE_MS ? (int)left_ms + 1 : KV_POLL_SLICE_MS;
    if (poll(&pfd, 1, wait_ms) < 0 && errno != EINTR) {
      status = STRATA_ERR_SYSTEM;
      break;
    }
  }
  if (status != STRATA_OK && err && err_len)
    snprintf(err, err_len, "%s", hs->err[0] ? hs->err : strata_strerror(status));
  return status;
}
