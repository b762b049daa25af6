// SPDX-License-Identifier: Apache-2.0
/*
 * plugin.c — NCCL's network, on strata's wire.
 *
 * NCCL asks a network for one-directional connections: the receiver listens and hands NCCL a
 * handle, NCCL carries the handle to the sender, the sender connects, the receiver accepts. Each
 * connection here is a two-rank strata TCP transport (src/net/tcp.c) whose sender is rank 1 and
 * receiver rank 0: STRATA_TCP_STREAMS data streams and one control connection, each opened with
 * strata's authenticated handshake (src/net/handshake.c, the job key of STRATA_SECRET and
 * STRATA_JOB_ID), frames sealed as STRATA_ENCRYPT says, buffers, congestion control and the window
 * governor as on any strata WAN pair. A connection that does not prove the secret is dropped
 * during the handshake: no byte of it reaches a request.
 *
 * Messages. NCCL matches a send to a receive by tag, and a receive may group up to
 * STRATA_NN_MAX_RECVS buffers with their own tags and sizes, the sends to it arriving in any
 * order, each at most as large as its buffer. Each NCCL send is one strata message carrying NCCL's
 * tag; an irecv of n buffers posts n strata receives at once (the k-th message on a connection
 * belongs to the k-th receive posted: NCCL's sender fills a grouped receive before the next),
 * and each takes its buffer when its message's first frame arrives with the tag and the size
 * (strata_xfer.match, src/net/transport.h): the first unfilled buffer of its request with that
 * tag. The payload is read straight into that buffer, and every receive NCCL posted is posted on
 * the wire at once, so no stream waits for another to learn where its bytes go. A message whose
 * tag no buffer of its receive waits for, or larger than its buffer, fails the connection (NCCL
 * calls it a collective mismatch) and tells the peer with an ABORT.
 *
 * Progress. Nothing runs behind NCCL's back: isend, irecv and test move whatever bytes the
 * sockets take (strata_transport progress), so a connection moves while its proxy thread polls it.
 * A connection is driven by one thread at a time, as NCCL's proxy does; the process-wide state is
 * written once (pthread_once) and only read after.
 *
 * Failure. A peer that dies (EOF, reset, the kernel's keepalive or user timeout after
 * STRATA_TIMEOUT) fails the connection: every request pending on it, and every later one, returns
 * an error from test — none waits forever.
 *
 * Must never: block, write outside a posted buffer, trust a handle's stage pointer that this
 * process did not make, or let an unauthenticated connection reach a comm.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "ncclnet/plugin.h"
#include "net/handshake.h"
#include "net/tcp.h"
#include "net/tcp_tune.h"

enum {
  NN_MAX_STREAMS = 64,
  NN_MAX_CONNS = NN_MAX_STREAMS + 1, /* data streams and the control connection */
  NN_MAX_PENDING = 128,              /* handshakes a listener runs at once (strangers included) */
  NN_HANDLE_VERSION = 1,
};
static const uint32_t NN_HANDLE_MAGIC = 0x4c434e53u; /* "SNCL" */
static const uint64_t NN_LISTEN_MAGIC = 0x6e6e2d6c69737465ull;
static const uint64_t NN_CONNECT_MAGIC = 0x6e6e2d636f6e6e65ull;
static const uint64_t NN_COMM_MAGIC = 0x6e6e2d636f6d6d21ull;
static const uint32_t NN_REQUEST_MAGIC = 0x7165526eu;
static const double NN_RETRY_S = 0.05;

/* What NCCL carries from the listener to the connector (<= NCCL_NET_HANDLE_MAXSIZE bytes). The
 * connector keeps its in-progress connect in `stage`: NCCL passes the same handle to every
 * connect() call of one connection. */
typedef struct nn_handle {
  uint32_t magic;
  uint16_t version;
  uint16_t streams; /* the listener's STRATA_TCP_STREAMS: the connector uses it */
  union {
    struct sockaddr sa;
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
  } addr;
  uint32_t reserved;
  void *stage; /* connector-local; NULL on the wire */
} nn_handle;
_Static_assert(sizeof(nn_handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle must fit NCCL's");

/* ---- process-wide state (written once) ---- */

static pthread_once_t nn_once = PTHREAD_ONCE_INIT;
static ncclResult_t nn_init_status = ncclInternalError;
static ncclDebugLogger_t nn_logger; /* atomic access */
static strata_config nn_cfg;
static strata_handshake_params nn_params; /* job key, flags; rank and address set per use */
static struct sockaddr_storage nn_local;  /* the device's address (port 0) */
static socklen_t nn_local_len;
static char nn_device_name[IF_NAMESIZE + 320];
static int nn_speed_mbps;

static void nn_log(ncclDebugLogLevel level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void nn_log(ncclDebugLogLevel level, const char *fmt, ...) {
  char line[640];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  ncclDebugLogger_t log = __atomic_load_n(&nn_logger, __ATOMIC_ACQUIRE);
  if (log)
    log(level, NCCL_NET, __FILE__, __LINE__, "NET/strata: %s", line);
  else if (level == NCCL_LOG_WARN)
    fprintf(stderr, "NET/strata: %s\n", line);
}

/* The address a device listens on: STRATA_HOST when set, else the first interface that is up
 * and not loopback (IPv4 first), else loopback. Also the device's name and link speed. */
static int nn_pick_address(void) {
  char ifname[IF_NAMESIZE] = "";
  memset(&nn_local, 0, sizeof nn_local);
  if (nn_cfg.advertise_host[0]) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(nn_cfg.advertise_host, NULL, &hints, &ai);
    if (gai != 0) {
      nn_log(NCCL_LOG_WARN, "STRATA_HOST=%s: cannot resolve it: %s", nn_cfg.advertise_host,
             gai_strerror(gai));
      return -1;
    }
    memcpy(&nn_local, ai->ai_addr, ai->ai_addrlen);
    nn_local_len = ai->ai_addrlen;
    freeaddrinfo(ai);
  }
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) == 0) {
    for (int want6 = 0; want6 < 2 && !ifname[0]; want6++) {
      for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
        int family = i->ifa_addr->sa_family;
        if (family != (want6 ? AF_INET6 : AF_INET)) continue;
        socklen_t len =
            family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
        if (nn_local_len) { /* STRATA_HOST given: only name its interface */
          const void *a = family == AF_INET
                              ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                              : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
          const void *b = family == AF_INET
                              ? (const void *)&((struct sockaddr_in *)&nn_local)->sin_addr
                              : (const void *)&((struct sockaddr_in6 *)&nn_local)->sin6_addr;
          if (nn_local.ss_family != family || memcmp(a, b, family == AF_INET ? 4 : 16) != 0)
            continue;
        } else {
          if (i->ifa_flags & IFF_LOOPBACK) continue;
          if (family == AF_INET6 &&
              IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
            continue;
          memcpy(&nn_local, i->ifa_addr, len);
          nn_local_len = len;
        }
        snprintf(ifname, sizeof ifname, "%s", i->ifa_name);
        break;
      }
    }
    freeifaddrs(ifs);
  }
  if (!nn_local_len) {
    struct sockaddr_in *lo = (struct sockaddr_in *)&nn_local;
    lo->sin_family = AF_INET;
    lo->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    nn_local_len = sizeof *lo;
    snprintf(ifname, sizeof ifname, "lo");
  }
  if (nn_local.ss_family == AF_INET) ((struct sockaddr_in *)&nn_local)->sin_port = 0;
  if (nn_local.ss_family == AF_INET6) ((struct sockaddr_in6 *)&nn_local)->sin6_port = 0;
  char host[INET6_ADDRSTRLEN] = "?";
  const void *raw = nn_local.ss_family == AF_INET
                        ? (const void *)&((struct sockaddr_in *)&nn_local)->sin_addr
                        : (const void *)&((struct sockaddr_in6 *)&nn_local)->sin6_addr;
  inet_ntop(nn_local.ss_family, raw, host, sizeof host);
  snprintf(nn_device_name, sizeof nn_device_name, "strata/%s%s%s", ifname[0] ? ifname : host,
           ifname[0] ? ":" : "", ifname[0] ? host : "");
  /* the speed: what the user declared for the link, else what the interface says */
  nn_speed_mbps = 10000;
  if (nn_cfg.tcp_link_gbps > 0) {
    nn_speed_mbps = (int)(nn_cfg.tcp_link_gbps * 1000.0 + 0.5);
  } else if (ifname[0]) {
    char path[64 + IF_NAMESIZE];
    snprintf(path, sizeof path, "/sys/class/net/%s/speed", ifname);
    long speed = strata_tcp_sysctl_long(path, 0);
    if (speed > 0) nn_speed_mbps = (int)speed;
  }
  return 0;
}

static void nn_init_once(void) {
  char err[512] = "";
  strata_config_init(&nn_cfg);
  if (strata_config_from_env(&nn_cfg, err, sizeof err) != STRATA_OK) {
    nn_log(NCCL_LOG_WARN, "%s", err);
    nn_init_status = ncclInvalidArgument;
    return;
  }
  strata_log_set_level(nn_cfg.log_level);
  if (nn_cfg.tcp_streams < 1 || nn_cfg.tcp_streams > NN_MAX_STREAMS) {
    nn_log(NCCL_LOG_WARN, "STRATA_TCP_STREAMS=%d is not in 1..%d", nn_cfg.tcp_streams,
           NN_MAX_STREAMS);
    nn_init_status = ncclInvalidArgument;
    return;
  }
  if (strata_tcp_tune_check(&nn_cfg, err, sizeof err) != STRATA_OK) {
    nn_log(NCCL_LOG_WARN, "%s", err);
    nn_init_status = ncclInvalidArgument;
    return;
  }
  int status = strata_handshake_params_init(&nn_params, nn_cfg.job_id, nn_cfg.secret, 0, 2,
                                            nn_cfg.tcp_streams);
  if (status != STRATA_OK) {
    nn_log(NCCL_LOG_WARN, "cannot derive the job key: %s", strata_strerror(status));
    nn_init_status = ncclSystemError;
    return;
  }
  nn_params.encrypt = nn_cfg.encrypt;
  strata_secret_warn_once(nn_cfg.secret, -1);
  if (nn_pick_address() != 0) {
    nn_init_status = ncclInvalidArgument;
    return;
  }
  nn_init_status = ncclSuccess;
  nn_log(NCCL_LOG_INFO, "device %s, %d stream(s) per connection, frames %s, %d Mbit/s",
         nn_device_name, nn_cfg.tcp_streams,
         nn_cfg.encrypt == STRATA_ENCRYPT_ON    ? "sealed"
         : nn_cfg.encrypt == STRATA_ENCRYPT_OFF ? "in clear"
                                                : "sealed between hosts",
         nn_speed_mbps);
}

ncclResult_t strata_nn_init(ncclDebugLogger_t log) {
  if (log) __atomic_store_n(&nn_logger, log, __ATOMIC_RELEASE);
  pthread_once(&nn_once, nn_init_once);
  return nn_init_status;
}

static int nn_ready(void) {
  pthread_once(&nn_once, nn_init_once);
  return nn_init_status == ncclSuccess;
}

ncclResult_t strata_nn_devices(int *ndev) {
  if (!ndev) return ncclInvalidArgument;
  *ndev = nn_ready() ? 1 : 0;
  return nn_ready() ? ncclSuccess : nn_init_status;
}

ncclResult_t strata_nn_properties(int dev, strata_nn_props *props) {
  if (!props || dev != 0) return ncclInvalidArgument;
  if (!nn_ready()) return nn_init_status;
  props->name = nn_device_name;
  props->speed_mbps = nn_speed_mbps;
  props->latency_us = 0;
  props->max_recvs = STRATA_NN_MAX_RECVS;
  props->max_comms = 65536;
  props->max_bytes = (size_t)NCCL_MAX_NET_SIZE_BYTES;
  return ncclSuccess;
}

/* "host:port" of a handle's address: what the listener binds its handshakes to, and what the
 * connector says it dialed (both MACs cover it, handshake.c). */
static void nn_address_text(const struct sockaddr *sa, char *out, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
    snprintf(out, len, "%s:%d", host, port);
  } else {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    snprintf(out, len, "[%s]:%d", host, port);
  }
}

static void nn_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---- comms and requests ---- */

typedef struct nn_comm nn_comm;

typedef struct nn_slot {
  uint8_t *data;
  size_t size; /* posted */
  size_t got;  /* what the send that filled it carried */
  int tag;
  int matched; /* a message took it */
  int done;
} nn_slot;

/* One request: a send (one strata message) or a receive of n buffers (n strata receives posted
 * at once, each taking whichever buffer its message's tag names when the message's first frame
 * arrives: strata_xfer.match). */
typedef struct nn_request {
  uint32_t magic;
  int used;
  int recv;
  int n;
  int left; /* strata messages not yet complete */
  nn_comm *comm;
  nn_slot slots[STRATA_NN_MAX_RECVS];  /* a send uses slots[0] */
  strata_xfer xs[STRATA_NN_MAX_RECVS]; /* a send uses xs[0] */
  int slot_of[STRATA_NN_MAX_RECVS];    /* receive: the buffer xs[i] filled */
} nn_request;

struct nn_comm {
  uint64_t magic;
  int recv;
  strata_transport *t;
  int failed; /* strata status that ended the connection (0 = up) */
  char why[320];
  char refused[200]; /* why a message was refused (a tag no buffer waits for, too large) */
  nn_request reqs[NCCL_NET_MAX_REQUESTS];
};

static ncclResult_t nn_result(int status) {
  switch (status) {
    case STRATA_OK:
      return ncclSuccess;
    case STRATA_ERR_INVALID_ARG:
      return ncclInvalidArgument;
    case STRATA_ERR_NO_MEMORY:
    case STRATA_ERR_SYSTEM:
      return ncclSystemError;
    case STRATA_ERR_MISMATCH:
      return ncclInvalidUsage;
    default: /* a lost, timed-out, refused or misbehaving peer */
      return ncclRemoteError;
  }
}

static void comm_fail(nn_comm *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void comm_fail(nn_comm *c, int status, const char *fmt, ...) {
  if (c->failed) return;
  c->failed = status;
  va_list args;
  va_start(args, fmt);
  vsnprintf(c->why, sizeof c->why, fmt, args);
  va_end(args);
  nn_log(NCCL_LOG_WARN, "%s connection failed: %s (%s)", c->recv ? "receive" : "send", c->why,
         strata_err_name(status));
  /* a mismatch is ours to report: the peer's sends would otherwise complete into its kernel */
  if (status == STRATA_ERR_MISMATCH || status == STRATA_ERR_PROTOCOL)
    c->t->ops->send_abort(c->t, c->recv ? 1 : 0, status, 0);
}

static void comm_progress(nn_comm *c) {
  if (c->failed) return;
  int failed_peer = -1;
  int status = c->t->ops->progress(c->t, &failed_peer);
  if (status != STRATA_OK)
    comm_fail(c, status, "the peer was lost");
  else if (c->t->remote_abort_status && !c->failed)
    comm_fail(c, c->t->remote_abort_status, "the peer aborted the connection");
}

static void send_done(strata_xfer *x) {
  nn_request *r = x->user;
  if (x->status != STRATA_OK)
    comm_fail(r->comm, x->status, "a send of %zu bytes (tag %d) did not go out", r->slots[0].size,
              r->slots[0].tag);
  else
    r->left--;
}

/* The first frame of the message for xs[i] arrived: it fills the receive's first unfilled buffer
 * with its tag (the k-th message sent on a connection belongs to the k-th receive posted, as
 * NCCL's sender sends to a grouped receive's buffers before the next receive's). */
static int recv_match(strata_xfer *x, uint64_t tag, uint64_t bytes) {
  nn_request *r = x->user;
  nn_comm *c = r->comm;
  for (int i = 0; i < r->n; i++) {
    nn_slot *s = &r->slots[i];
    if (s->matched || (uint64_t)(uint32_t)s->tag != tag) continue;
    if (bytes > s->size) {
      snprintf(c->refused, sizeof c->refused,
               "a send of %llu bytes (tag %d) is larger than the %zu-byte receive posted for it",
               (unsigned long long)bytes, s->tag, s->size);
      return -1;
    }
    s->matched = 1;
    s->got = (size_t)bytes;
    r->slot_of[x - r->xs] = i;
    x->tag = tag;
    x->bytes = bytes;
    x->buf = s->data;
    return 0;
  }
  snprintf(c->refused, sizeof c->refused,
           "a send with tag %d reached a receive with no buffer waiting for that tag", (int)tag);
  return -1;
}

static void recv_done(strata_xfer *x) {
  nn_request *r = x->user;
  nn_comm *c = r->comm;
  if (x->status == STRATA_ERR_MISMATCH && c->refused[0])
    comm_fail(c, x->status, "%s", c->refused);
  else if (x->status != STRATA_OK)
    comm_fail(c, x->status, "a message did not arrive");
  else
    r->slots[r->slot_of[x - r->xs]].done = 1, r->left--;
}

static nn_comm *comm_of(void *p, int recv) {
  nn_comm *c = p;
  if (!c || c->magic != NN_COMM_MAGIC || c->recv != recv) return NULL;
  return c;
}

static nn_request *request_take(nn_comm *c) {
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    nn_request *r = &c->reqs[i];
    if (!r->used) {
      memset(r, 0, sizeof *r);
      r->magic = NN_REQUEST_MAGIC;
      r->used = 1;
      r->comm = c;
      r->recv = c->recv;
      return r;
    }
  }
  return NULL;
}

static void request_release(nn_request *r) {
  r->used = 0;
}

static nn_comm *comm_new(int recv, strata_transport *t) {
  nn_comm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->magic = NN_COMM_MAGIC;
  c->recv = recv;
  c->t = t;
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) c->reqs[i].magic = NN_REQUEST_MAGIC;
  return c;
}

static ncclResult_t comm_close(void *p, int recv) {
  nn_comm *c = comm_of(p, recv);
  if (!c) return ncclInvalidArgument;
  c->t->ops->destroy(c->t);
  c->magic = 0;
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) c->reqs[i].magic = 0;
  free(c);
  return ncclSuccess;
}

ncclResult_t strata_nn_close_send(void *send_comm) {
  return comm_close(send_comm, 0);
}

ncclResult_t strata_nn_close_recv(void *recv_comm) {
  return comm_close(recv_comm, 1);
}

ncclResult_t strata_nn_isend(void *send_comm, void *data, size_t size, int tag, void **request) {
  nn_comm *c = comm_of(send_comm, 0);
  if (!c || !request || (size && !data)) return ncclInvalidArgument;
  *request = NULL;
  if (c->failed) return nn_result(c->failed);
  nn_request *r = request_take(c);
  if (!r) return ncclSuccess; /* NCCL_NET_MAX_REQUESTS in flight: NCCL tries again */
  r->n = 1;
  r->left = 1;
  r->slots[0].size = size;
  r->slots[0].tag = tag;
  r->xs[0] = (strata_xfer){.peer = 0,
                           .tag = (uint32_t)tag,
                           .bytes = size,
                           .buf = size ? data : (void *)r,
                           .done = send_done,
                           .user = r};
  int status = c->t->ops->post_send(c->t, &r->xs[0]);
  if (status != STRATA_OK) {
    request_release(r);
    comm_fail(c, status, "cannot post a send");
    return nn_result(status);
  }
  *request = r;
  return ncclSuccess;
}

ncclResult_t strata_nn_irecv(void *recv_comm, int n, void **data, const size_t *sizes,
                             const int *tags, void **request) {
  nn_comm *c = comm_of(recv_comm, 1);
  if (!c || !request || n < 1 || n > STRATA_NN_MAX_RECVS || !data || !sizes || !tags)
    return ncclInvalidArgument;
  *request = NULL;
  for (int i = 0; i < n; i++)
    if (sizes[i] && !data[i]) return ncclInvalidArgument;
  if (c->failed) return nn_result(c->failed);
  nn_request *r = request_take(c);
  if (!r) return ncclSuccess;
  r->n = n;
  size_t largest = 0;
  for (int i = 0; i < n; i++) {
    r->slots[i] = (nn_slot){.data = data[i], .size = sizes[i], .tag = tags[i]};
    if (sizes[i] > largest) largest = sizes[i];
  }
  for (int i = 0; i < n; i++) {
    /* tag, size and buffer come with the message (recv_match); until then, the bound */
    r->xs[i] = (strata_xfer){
        .peer = 1, .bytes = largest, .buf = r, .done = recv_done, .user = r, .match = recv_match};
    int status = c->t->ops->post_recv(c->t, &r->xs[i]);
    if (status != STRATA_OK) {
      /* the ones posted stay with the transport: the request stays taken until close */
      comm_fail(c, status, "cannot post a receive");
      return nn_result(status);
    }
    r->left++;
  }
  *request = r;
  return ncclSuccess;
}

static int request_complete(const nn_request *r) {
  return r->left == 0;
}

ncclResult_t strata_nn_test(void *request, int *done, int *sizes) {
  nn_request *r = request;
  if (!r || !done || r->magic != NN_REQUEST_MAGIC || !r->used) return ncclInvalidArgument;
  nn_comm *c = r->comm;
  *done = 0;
  if (!request_complete(r)) comm_progress(c);
  if (request_complete(r)) {
    for (int i = 0; sizes && i < r->n; i++)
      sizes[i] = (int)(r->recv ? r->slots[i].got : r->slots[i].size);
    *done = 1;
    request_release(r);
    return ncclSuccess;
  }
  if (c->failed) {
    /* a failed connection takes no new request, so this slot is never reused while the
     * transport may still hold one of its transfers (after a mismatch or an abort the data path
     * stays up until close) */
    *done = 1;
    request_release(r);
    return nn_result(c->failed);
  }
  return ncclSuccess;
}

ncclResult_t strata_nn_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  (void)data, (void)size;
  nn_comm *c = comm;
  if (!c || c->magic != NN_COMM_MAGIC || !mhandle) return ncclInvalidArgument;
  if (type != NCCL_PTR_HOST) {
    nn_log(NCCL_LOG_WARN, "memory of type %d cannot be registered: host memory only", type);
    return ncclInternalError;
  }
  *mhandle = c; /* nothing to pin: the kernel copies from and to host memory */
  return ncclSuccess;
}

ncclResult_t strata_nn_dereg_mr(void *comm, void *mhandle) {
  nn_comm *c = comm;
  if (!c || c->magic != NN_COMM_MAGIC || mhandle != c) return ncclInvalidArgument;
  return ncclSuccess;
}

/* ---- listening and accepting ---- */

typedef struct nn_pending {
  int fd;
  double deadline_s;
  strata_handshake hs;
} nn_pending;

typedef struct nn_listen {
  uint64_t magic;
  int fd;
  int streams;
  strata_handshake_params params;
  nn_pending pending[NN_MAX_PENDING];
  int npending;
  int fds[NN_MAX_CONNS]; /* authenticated connections by stream index */
  strata_seal_keys keys[NN_MAX_CONNS];
  int got;
  int dropped;
} nn_listen;

ncclResult_t strata_nn_listen(int dev, void *handle, void **listen_comm) {
  if (!handle || !listen_comm || dev != 0) return ncclInvalidArgument;
  *listen_comm = NULL;
  if (!nn_ready()) return nn_init_status;
  nn_listen *l = calloc(1, sizeof *l);
  if (!l) return ncclSystemError;
  l->fd = socket(nn_local.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l->fd < 0) {
    nn_log(NCCL_LOG_WARN, "socket: %s", strerror(errno));
    free(l);
    return ncclSystemError;
  }
  strata_tcp_tune_before_connect(&nn_cfg, l->fd); /* accepted sockets inherit it */
  struct sockaddr_storage bound;
  socklen_t bound_len = sizeof bound;
  if (bind(l->fd, (const struct sockaddr *)&nn_local, nn_local_len) != 0 ||
      listen(l->fd, SOMAXCONN) != 0 ||
      getsockname(l->fd, (struct sockaddr *)&bound, &bound_len) != 0) {
    nn_log(NCCL_LOG_WARN, "cannot listen on %s: %s", nn_device_name, strerror(errno));
    close(l->fd);
    free(l);
    return ncclSystemError;
  }
  l->magic = NN_LISTEN_MAGIC;
  l->streams = nn_cfg.tcp_streams;
  l->params = nn_params;
  l->params.rank = 0;
  nn_address_text((struct sockaddr *)&bound, l->params.address, sizeof l->params.address);
  for (int i = 0; i < NN_MAX_CONNS; i++) l->fds[i] = -1;
  nn_handle h;
  memset(&h, 0, sizeof h);
  h.magic = NN_HANDLE_MAGIC;
  h.version = NN_HANDLE_VERSION;
  h.streams = (uint16_t)l->streams;
  memcpy(&h.addr, &bound, bound_len < sizeof h.addr ? bound_len : sizeof h.addr);
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof h);
  *listen_comm = l;
  nn_log(NCCL_LOG_INFO, "listening on %s", l->params.address);
  return ncclSuccess;
}

static void pending_drop(nn_listen *l, int i) {
  if (l->pending[i].fd >= 0) close(l->pending[i].fd);
  sodium_memzero(&l->pending[i].hs, sizeof l->pending[i].hs);
  l->pending[i] = l->pending[--l->npending];
}

/* A connection that fails its handshake proved nothing: drop it, whatever it did, so nobody can
 * end a connection by talking to the listening port. */
static void pending_finished(nn_listen *l, int i, int status) {
  nn_pending *p = &l->pending[i];
  if (status == STRATA_OK) {
    int stream = p->hs.stream;
    if (stream >= 0 && stream <= l->streams && l->fds[stream] < 0) {
      strata_tcp_tune_established(&nn_cfg, p->fd, 0, 1, stream);
      l->fds[stream] = p->fd;
      l->keys[stream] = p->hs.keys;
      p->fd = -1;
      l->got++;
    } else {
      nn_log(NCCL_LOG_WARN, "stream %d opened twice on %s; closing the second", stream,
             l->params.address);
    }
  } else if (l->dropped++ < 3) {
    nn_log(NCCL_LOG_WARN, "dropped an unauthenticated connection on %s: %s", l->params.address,
           p->hs.err);
  }
  pending_drop(l, i);
}

ncclResult_t strata_nn_accept(void *listen_comm, void **recv_comm) {
  nn_listen *l = listen_comm;
  if (!l || !recv_comm || l->magic != NN_LISTEN_MAGIC) return ncclInvalidArgument;
  *recv_comm = NULL;
  for (;;) { /* the accept queue */
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    if (l->npending == NN_MAX_PENDING) {
      /* full: the oldest handshake goes. A peer's own connections finish within a round trip
       * or two, so only a flood of silent strangers is evicted, never the peer they crowd */
      int oldest = 0;
      for (int i = 1; i < l->npending; i++)
        if (l->pending[i].deadline_s < l->pending[oldest].deadline_s) oldest = i;
      if (l->dropped++ < 3)
        nn_log(NCCL_LOG_WARN, "%d handshakes pending on %s: dropping the oldest", NN_MAX_PENDING,
               l->params.address);
      pending_drop(l, oldest);
    }
    nn_nodelay(fd);
    nn_pending *p = &l->pending[l->npending++];
    p->fd = fd;
    p->deadline_s = strata_now_s() + nn_cfg.timeout_s;
    strata_handshake_start(&p->hs, &l->params, fd, -1, -1, NULL);
  }
  double now = strata_now_s();
  for (int i = l->npending - 1; i >= 0; i--) {
    nn_pending *p = &l->pending[i];
    int status = strata_handshake_advance(&p->hs);
    if (status == STRATA_ERR_IN_PROGRESS && now > p->deadline_s) {
      strata_handshake_expire(&p->hs);
      status = p->hs.status;
    }
    if (status != STRATA_ERR_IN_PROGRESS) pending_finished(l, i, status);
  }
  if (l->got < l->streams + 1) return ncclSuccess;
  strata_transport *t = NULL;
  int status = strata_tcp_adopt(&nn_cfg, 0, l->streams, l->fds, l->keys, &t);
  sodium_memzero(l->keys, sizeof l->keys);
  for (int i = 0; i < NN_MAX_CONNS; i++) l->fds[i] = -1;
  l->got = 0;
  if (status != STRATA_OK) {
    nn_log(NCCL_LOG_WARN, "cannot set up the connection: %s", strata_strerror(status));
    return nn_result(status);
  }
  nn_comm *c = comm_new(1, t);
  if (!c) {
    t->ops->destroy(t);
    return ncclSystemError;
  }
  *recv_comm = c;
  nn_log(NCCL_LOG_INFO, "accepted a connection on %s (%d streams)", l->params.address, l->streams);
  return ncclSuccess;
}

ncclResult_t strata_nn_close_listen(void *listen_comm) {
  nn_listen *l = listen_comm;
  if (!l || l->magic != NN_LISTEN_MAGIC) return ncclInvalidArgument;
  while (l->npending) pending_drop(l, l->npending - 1);
  for (int i = 0; i < NN_MAX_CONNS; i++)
    if (l->fds[i] >= 0) close(l->fds[i]);
  close(l->fd);
  sodium_memzero(l, sizeof *l);
  free(l);
  return ncclSuccess;
}

/* ---- connecting ---- */

enum { DIAL_WAIT, DIAL_CONNECTING, DIAL_HANDSHAKE, DIAL_DONE };

typedef struct nn_dial {
  int fd;
  int phase;
  double retry_s;
  strata_handshake hs;
} nn_dial;

typedef struct nn_connect {
  uint64_t magic;
  int streams;
  struct sockaddr_storage addr;
  socklen_t addr_len;
  strata_handshake_params params;
  char address[STRATA_HANDSHAKE_ADDRESS_BYTES];
  double deadline_s;
  nn_dial dials[NN_MAX_CONNS];
  int done;
  struct nn_connect *next; /* the registry */
} nn_connect;

/* Connects in progress in this process: a handle's stage pointer is used only if it is here. */
static pthread_mutex_t nn_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static nn_connect *nn_registry;

static int registry_has(const void *stage) {
  pthread_mutex_lock(&nn_registry_lock);
  nn_connect *k = nn_registry;
  while (k && (const void *)k != stage) k = k->next;
  pthread_mutex_unlock(&nn_registry_lock);
  return k != NULL;
}

static void registry_add(nn_connect *k) {
  pthread_mutex_lock(&nn_registry_lock);
  k->next = nn_registry;
  nn_registry = k;
  pthread_mutex_unlock(&nn_registry_lock);
}

static void registry_remove(nn_connect *k) {
  pthread_mutex_lock(&nn_registry_lock);
  for (nn_connect **p = &nn_registry; *p; p = &(*p)->next)
    if (*p == k) {
      *p = k->next;
      break;
    }
  pthread_mutex_unlock(&nn_registry_lock);
}

static void connect_free(nn_connect *k) {
  registry_remove(k);
  for (int s = 0; s <= k->streams; s++)
    if (k->dials[s].fd >= 0) close(k->dials[s].fd);
  sodium_memzero(k, sizeof *k);
  free(k);
}

static void dial_start(nn_connect *k, nn_dial *d) {
  if (d->fd >= 0) close(d->fd);
  d->fd = socket(k->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (d->fd >= 0) {
    strata_tcp_tune_before_connect(&nn_cfg, d->fd); /* before connect: window scaling */
    nn_nodelay(d->fd);
    if (connect(d->fd, (struct sockaddr *)&k->addr, k->addr_len) == 0 || errno == EINPROGRESS) {
      d->phase = DIAL_CONNECTING;
      return;
    }
    close(d->fd);
    d->fd = -1;
  }
  d->phase = DIAL_WAIT;
  d->retry_s = strata_now_s() + NN_RETRY_S;
}

/* One step of one connection. STRATA_ERR_IN_PROGRESS, STRATA_OK, or a failure (k->dials' hs.err
 * or errno says why). */
static int dial_advance(nn_connect *k, int stream) {
  nn_dial *d = &k->dials[stream];
  if (d->phase == DIAL_WAIT) {
    if (strata_now_s() < d->retry_s) return STRATA_ERR_IN_PROGRESS;
    dial_start(k, d);
    if (d->phase == DIAL_WAIT) return STRATA_ERR_IN_PROGRESS;
  }
  if (d->phase == DIAL_CONNECTING) {
    struct pollfd pfd = {.fd = d->fd, .events = POLLOUT};
    if (poll(&pfd, 1, 0) <= 0) return STRATA_ERR_IN_PROGRESS;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(d->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) { /* not listening yet, or a transient failure: retry until the deadline */
      close(d->fd);
      d->fd = -1;
      d->phase = DIAL_WAIT;
      d->retry_s = strata_now_s() + NN_RETRY_S;
      snprintf(d->hs.err, sizeof d->hs.err, "cannot connect to %s: %s", k->address, strerror(err));
      return STRATA_ERR_IN_PROGRESS;
    }
    strata_handshake_start(&d->hs, &k->params, d->fd, 0, stream, k->address);
    d->phase = DIAL_HANDSHAKE;
  }
  if (d->phase == DIAL_HANDSHAKE) {
    int status = strata_handshake_advance(&d->hs);
    if (status == STRATA_OK) {
      strata_tcp_tune_established(&nn_cfg, d->fd, 1, 0, stream);
      d->phase = DIAL_DONE;
      k->done++;
    }
    return status;
  }
  return STRATA_OK;
}

static ncclResult_t connect_failed(nn_handle *h, nn_connect *k, int status, const char *why) {
  nn_log(NCCL_LOG_WARN, "connecting to %s failed: %s", k->address, why);
  h->stage = NULL;
  connect_free(k);
  return nn_result(status);
}

ncclResult_t strata_nn_connect(int dev, void *handle, void **send_comm) {
  if (!handle || !send_comm || dev != 0) return ncclInvalidArgument;
  *send_comm = NULL;
  if (!nn_ready()) return nn_init_status;
  nn_handle *h = handle;
  if (h->magic != NN_HANDLE_MAGIC || h->version != NN_HANDLE_VERSION || h->streams < 1 ||
      h->streams > NN_MAX_STREAMS ||
      (h->addr.sa.sa_family != AF_INET && h->addr.sa.sa_family != AF_INET6)) {
    nn_log(NCCL_LOG_WARN,
           "connect: the handle is not one of strata's (another plugin's, or "
           "damaged)");
    return ncclInvalidArgument;
  }
  nn_connect *k = h->stage;
  if (k && !registry_has(k)) {
    nn_log(NCCL_LOG_WARN, "connect: the handle carries a connect this process never started");
    return ncclInvalidArgument;
  }
  if (!k) {
    k = calloc(1, sizeof *k);
    if (!k) return ncclSystemError;
    k->magic = NN_CONNECT_MAGIC;
    k->streams = h->streams;
    k->addr_len =
        h->addr.sa.sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    memcpy(&k->addr, &h->addr, k->addr_len);
    nn_address_text(&h->addr.sa, k->address, sizeof k->address);
    k->params = nn_params;
    k->params.rank = 1;
    k->params.streams = k->streams;
    k->deadline_s = strata_now_s() + nn_cfg.timeout_s;
    for (int s = 0; s <= k->streams; s++) k->dials[s].fd = -1;
    registry_add(k);
    h->stage = k;
    for (int s = 0; s <= k->streams; s++) dial_start(k, &k->dials[s]);
  }
  for (int s = 0; s <= k->streams; s++) {
    if (k->dials[s].phase == DIAL_DONE) continue;
    int status = dial_advance(k, s);
    if (status != STRATA_OK && status != STRATA_ERR_IN_PROGRESS)
      return connect_failed(h, k, status, k->dials[s].hs.err);
  }
  if (k->done < k->streams + 1) {
    if (strata_now_s() <= k->deadline_s) return ncclSuccess;
    const char *why = "no answer within STRATA_TIMEOUT";
    for (int s = 0; s <= k->streams; s++)
      if (k->dials[s].phase != DIAL_DONE && k->dials[s].hs.err[0]) why = k->dials[s].hs.err;
    return connect_failed(h, k, STRATA_ERR_TIMEOUT, why);
  }
  int fds[NN_MAX_CONNS];
  strata_seal_keys keys[NN_MAX_CONNS];
  for (int s = 0; s <= k->streams; s++) {
    fds[s] = k->dials[s].fd;
    keys[s] = k->dials[s].hs.keys;
    k->dials[s].fd = -1;
  }
  strata_transport *t = NULL;
  int status = strata_tcp_adopt(&nn_cfg, 1, k->streams, fds, keys, &t);
  sodium_memzero(keys, sizeof keys);
  if (status != STRATA_OK) return connect_failed(h, k, status, strata_strerror(status));
  nn_comm *c = comm_new(0, t);
  if (!c) {
    t->ops->destroy(t);
    return connect_failed(h, k, STRATA_ERR_NO_MEMORY, "out of memory");
  }
  nn_log(NCCL_LOG_INFO, "connected to %s (%d streams)", k->address, k->streams);
  h->stage = NULL;
  connect_free(k);
  *send_comm = c;
  return ncclSuccess;
}
