// SPDX-License-Identifier: Apache-2.0
/*
 * kv_ucx.c — the UCX backend of the KV agent (docs/kv.md, "UCX"): one UCP worker per agent,
 * driven by one thread, carrying READ and WRITE slices as active messages.
 *
 * Why active messages and not ucp_put/ucp_get with rkeys. With one-sided put/get the target's
 * CPU never sees the access, so what enforces its regions is whatever enforces the rkey: an
 * HCA's memory key on RDMA, but on UCX's tcp transport UCX's own emulation and on cma the
 * initiator's process itself. Here every slice is a request that the target checks with
 * kv_region_acquire, exactly as on TCP, and the bytes travel in the request (WRITE) or in its
 * reply (READ): eager, or from a size by rendezvous (by_rendezvous). A rendezvous is an
 * offer, not a write: the receiver's callback sees the header and the length first and then
 * names the one buffer UCX may fill (ucp_am_recv_data_nbx) — the target a range of its region
 * it checked and pinned, the initiator its own slice's buffer, checked at post — or drops the
 * offer. So the target touches a region only
 *   - inside its receive callback (an eager WRITE: one copy, the region pinned for it),
 *   - while a rendezvous receive it started is in flight (pinned until it completes), or
 *   - while its own READ reply is in flight (pinned until that send completes),
 * and anything in flight longer than the agent's timeout force-closes its endpoint, which ends
 * it (a receive, which UCX cannot cancel by itself, with its endpoint's requests), so
 * strata_kv_deregister waits at most about the timeout, whatever the peer does.
 *
 * Authentication. UCX does not authenticate peers and a worker address is no secret, so the
 * right to send requests is a random 16-byte token the target issues on the peer's first bulk
 * TCP connection, after strata's handshake (kv_ucx_grant); it is revoked when that connection
 * ends. A request with any other token is refused and counted. Replies travel on an endpoint the
 * target opens to the worker address the peer gave on that same connection; they carry a token
 * the initiator chose and name the slice by a cookie (slot and generation in the op table)
 * that the initiator checks, so a reply completes only the slice it answers, with the length
 * that slice has. Notifications and the lane stay on the TCP connections.
 *
 * Threads. Only the worker thread calls UCP (the worker is single-threaded). Other threads hand
 * it work through lists under u->lock, wake it through an eventfd, and wait on u->cond. The
 * UCP callbacks run on the worker thread; they take u->lock and, apart from it, the agent's lock
 * (the region table); u->lock is never held while the agent's lock is taken.
 *
 * Lifetimes. A link (one endpoint) belongs to its owner — a peer (initiator side) or a responder
 * connection (target side) — until kv_ucx_link_release; the worker thread frees it once its
 * endpoint is closed and no slice or reply refers to it. An op (a slice in flight) lives on
 * its stream thread's stack until the worker completes it: with the target's reply (and the
 * rendezvous receive of a READ's bytes into it) and its own send all done, or with the link's
 * failure — never while UCX may still write into its buffer.
 *
 * Endpoints of a rendezvous. Its bytes come over the endpoint UCX names as the message's reply
 * endpoint (senders set UCP_AM_SEND_FLAG_REPLY), usually the link's own, since UCX pairs the
 * endpoints two workers create towards each other; when it is not, ending the receive means
 * failing the link that owns that endpoint, or force-closing it when no link does.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "boot/settings.h"
#include "core/core.h"
#include "serve/kv_internal.h"

int kv_ucx_rdma_present(void) {
  DIR *d = opendir("/sys/class/infiniband");
  if (!d) return 0;
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d)))
    if (e->d_name[0] != '.') found = 1;
  closedir(d);
  return found;
}

#ifndef STRATA_HAVE_UCX

int kv_ucx_built(void) {
  return 0;
}
int kv_ucx_start(strata_kv_agent *a) {
  (void)a;
  return STRATA_ERR_UNSUPPORTED;
}
void kv_ucx_stop(strata_kv_agent *a) {
  (void)a;
}
void kv_ucx_address(strata_kv_agent *a, const void **address, size_t *bytes) {
  (void)a;
  *address = NULL;
  *bytes = 0;
}
int kv_ucx_link_open(strata_kv_agent *a, kv_peer *p, const kv_ucx_hello *hello, char *err,
                     size_t err_len) {
  (void)a, (void)p, (void)hello;
  snprintf(err, err_len, "built without UCX");
  return STRATA_ERR_UNSUPPORTED;
}
int kv_ucx_grant(strata_kv_agent *a, const char *from, const void *address, size_t address_bytes,
                 const uint8_t reply_token[KV_UCX_TOKEN_BYTES], uint8_t token[KV_UCX_TOKEN_BYTES],
                 kv_ucx_link **out) {
  (void)a, (void)from, (void)address, (void)address_bytes, (void)reply_token, (void)token;
  *out = NULL;
  return STRATA_ERR_UNSUPPORTED;
}
void kv_ucx_link_fail(kv_ucx_link *l, int status) {
  (void)l, (void)status;
}
void kv_ucx_link_release(kv_ucx_link *l) {
  (void)l;
}
#ifdef STRATA_TEST_HOOKS
void kv_ucx_forge_token_for_test(kv_ucx_link *l) {
  (void)l;
}
size_t kv_ucx_receiving_for_test(strata_kv_agent *a) {
  (void)a;
  return 0;
}
#endif
int kv_ucx_batch(kv_peer *p, kv_conn *c, const strata_kv_xfer *x, size_t first, size_t n,
                 int *refused, size_t *refused_slice, char *why, size_t why_len) {
  (void)p, (void)c, (void)x, (void)first, (void)n, (void)refused, (void)refused_slice, (void)why,
      (void)why_len;
  return STRATA_ERR_UNSUPPORTED;
}

#else

#include <ucp/api/ucp.h>
#include <dlfcn.h>

/* libucp is opened when an agent first needs UCX, not linked: libucm, which comes with it,
 * replaces mmap, munmap and madvise for the whole process, and that should happen only in a
 * process that uses this backend, never in every program that links libstrata. */
/* clang-format off */
#define KV_UCP_FUNCTIONS(X)                                                            \
  X(ucp_am_recv_data_nbx) X(ucp_am_send_nbx) X(ucp_cleanup) X(ucp_config_read)         \
  X(ucp_config_modify) X(ucp_config_release) X(ucp_ep_close_nbx) X(ucp_ep_create)      \
  X(ucp_init_version)                                                                  \
  X(ucp_request_check_status) X(ucp_request_free) X(ucp_worker_arm)                    \
  X(ucp_worker_create) X(ucp_worker_destroy)                                           \
  X(ucp_worker_get_address) X(ucp_worker_get_efd) X(ucp_worker_progress)               \
  X(ucp_worker_release_address) X(ucp_worker_set_am_recv_handler)
/* clang-format on */

static struct {
#define KV_UCP_POINTER(name) __typeof__(&name) name;
  KV_UCP_FUNCTIONS(KV_UCP_POINTER)
#undef KV_UCP_POINTER
} api;
static int api_loaded; /* 1 loaded, -1 not */
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void api_load(void) {
  void *library = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
  int ok = library != NULL;
#define KV_UCP_SYMBOL(name) \
  if (ok && !(api.name = (__typeof__(api.name))dlsym(library, #name))) ok = 0;
  KV_UCP_FUNCTIONS(KV_UCP_SYMBOL)
#undef KV_UCP_SYMBOL
  api_loaded = ok ? 1 : -1;
  if (!ok)
    STRATA_LOG(STRATA_LOG_INFO, -1, "kv: no UCX backend: %s",
               library ? "libucp.so.0 lacks a function it needs" : dlerror());
}

#define KV_UCX_MAX_OPS (KV_MAX_PEERS * STRATA_KV_MAX_STREAMS * KV_BATCH_SLICES)
enum { KV_UCX_IDLE_WAIT_MS = 100 }; /* the longest the worker sleeps: timeouts are checked */
/* The worker polls UCP without sleeping while a slice, a reply or a rendezvous receive of its
 * own is in flight, and for this long after it last found work (a target between a sender's
 * requests): STRATA_KV_UCX_POLL_US, 1000 by default (boot/settings.c), 0 never polls (sleeps
 * whenever idle). A sleeping worker is woken through its event fd for every burst of bytes, which
 * costs the sending side a wakeup of it and this side a context switch: polling through a transfer
 * removes both, as ucx_perftest does. Not over UCX's shared-memory transports alone (once a link of
 * the agent had to do without the peer-failure mode, the agent stops polling): there the work is
 * copies, not wakeups, and a polling worker takes a core from them. */
#define KV_UCX_POLL_IN_FLIGHT_S 0.01 /* with work in flight, polls on this long without any */
/* Slices go eager (UCX's buffer, then one copy) unless STRATA_KV_UCX_RNDV_BYTES names a size from
 * which they go by rendezvous (the receiver's buffer, one transfer by the transport). Eager is
 * the default: over UCX's tcp transport rendezvous gains nothing measurable, over shared memory
 * its cma transfer (one process_vm_readv, pinning the sender's pages each time) moves a large
 * region at about half eager's rate, and on RDMA a rendezvous hands the peer a memory key to
 * whole registered pages, which UCX's registration cache keeps after the transfer: past the
 * checked range and past deregistration, for a peer that speaks to the fabric directly. Nor is it
 * used by an agent whose endpoints cannot report a peer's failure (UCX's shared-memory
 * transports alone): a receive in flight is ended by force-closing its endpoint, which UCX
 * guarantees only in that mode. The sender decides; a receiver takes either, where allowed. */
static pthread_once_t rndv_once = PTHREAD_ONCE_INIT;
static size_t rndv_min_bytes = SIZE_MAX;

static void rndv_read(void) {
  uint64_t n = strata_setting_u64("STRATA_KV_UCX_RNDV_BYTES");
  rndv_min_bytes = n == 0 || n > SIZE_MAX ? SIZE_MAX : (size_t)n;
}

typedef struct kv_ucx_op {
  kv_ucx_link *link;
  struct kv_ucx_op *next; /* the submit list */
  uint64_t cookie;
  int type; /* KV_READ or KV_WRITE */
  uint8_t *local;
  uint64_t bytes;
  kv_ucx_request wire; /* as sent: alive until the send completes */
  int send_done, reply_done, completed;
  int receiving; /* a READ's bytes are coming into local by rendezvous */
  int status;    /* the link's failure, or OK */
  int verdict;   /* the target's answer */
  char why[KV_UCX_REASON_BYTES + 1];
  size_t *pending;            /* the batch's count of ops not completed */
  pthread_cond_t *batch_done; /* signalled when that count reaches 0 */
} kv_ucx_op;

typedef struct kv_ucx_job { /* a reply the target owes */
  struct kv_ucx_job *next, *prev;
  kv_ucx_link *link;
  kv_ucx_reply wire;
  const void *data;
  size_t data_bytes;
  uint32_t region; /* pinned for data, when pinned */
  int pinned;
  int rendezvous; /* a READ's bytes, offered by rendezvous */
  double sent_s;
  char why[KV_UCX_REASON_BYTES + 1];
} kv_ucx_job;

/* A rendezvous receive in flight: UCX moves a slice's bytes into the buffer this side chose. */
typedef struct kv_ucx_recv {
  struct kv_ucx_recv *next, *prev; /* u->receiving */
  kv_ucx *u;
  kv_ucx_link *link; /* target: the requester's; initiator: the slice's */
  ucp_ep_h ep;       /* the endpoint the bytes come over */
  uint64_t bytes;
  double started_s;
  kv_ucx_job *job; /* target: the WRITE's reply, sent once the bytes are in */
  uint32_t region; /* target: pinned until then */
  kv_ucx_op *op;   /* initiator: the READ slice whose buffer it fills */
  int expired;     /* its endpoint has been failed: once is enough */
} kv_ucx_recv;

/* An endpoint no link owns, force-closed to end the receives on it. */
typedef struct kv_ucx_stray {
  struct kv_ucx_stray *next;
  ucp_ep_h ep;
  void *close_request;
  int closing;
} kv_ucx_stray;

struct kv_ucx_link {
  kv_ucx *u;
  kv_ucx_link *next; /* u->links */
  int target_side;
  ucp_ep_h ep;
  uint8_t *address; /* the remote worker's, until the endpoint is made */
  size_t address_bytes;
  uint8_t token[KV_UCX_TOKEN_BYTES];       /* requests carry it */
  uint8_t reply_token[KV_UCX_TOKEN_BYTES]; /* replies carry it */
  char from[STRATA_KV_NAME_BYTES];         /* target side: the peer, for refusals */
  int opened;                              /* 0 opening, 1 open, < 0 could not open */
  int failure;                             /* nonzero: closing; every slice fails with it */
  int closed;                              /* the endpoint is closed (or never was) */
  void *close_request;
  int released;
  size_t ops, jobs; /* slices and replies referring to it */
};

struct kv_ucx {
  strata_kv_agent *agent;
  ucp_context_h context;
  ucp_worker_h worker;
  ucp_address_t *address;
  size_t address_bytes;
  int efd;          /* the worker's event fd, -1 when UCX gives none (then it polls) */
  double poll_s;    /* how long the worker polls on after its last work (STRATA_KV_UCX_POLL_US) */
  int no_peer_mode; /* the transports cannot do UCP_ERR_HANDLING_MODE_PEER */
  int wake_fd;      /* an eventfd: work was queued */
  pthread_t thread;
  int thread_started;
  atomic_int stop;

  pthread_mutex_t lock;
  pthread_cond_t cond;
  kv_ucx_link *links;
  int links_changed;
  kv_ucx_op *submit_head, *submit_tail;
  kv_ucx_job *job_head, *job_tail; /* replies to send */
  kv_ucx_job *inflight;            /* replies sent, not completed */
  kv_ucx_recv *receiving;          /* rendezvous receives in flight */
  kv_ucx_stray *strays;
  kv_ucx_op **ops; /* by slot: the ops in flight */
  uint32_t *generations;
  uint32_t *free_slots;
  size_t nfree;
};

/* Whether this agent sends (from rndv_min_bytes) and takes rendezvous at all. */
static int rendezvous_allowed(const kv_ucx *u) {
  pthread_once(&rndv_once, rndv_read);
  return rndv_min_bytes != SIZE_MAX && !u->no_peer_mode;
}

static int by_rendezvous(const kv_ucx *u, uint64_t bytes) {
  return rendezvous_allowed(u) && bytes >= rndv_min_bytes;
}

int kv_ucx_built(void) {
  pthread_once(&api_once, api_load);
  return api_loaded == 1;
}

static void wake(kv_ucx *u) {
  uint64_t one = 1;
  ssize_t n = write(u->wake_fd, &one, sizeof one);
  (void)n;
}

/* UCX's failures of an endpoint (reset, unreachable, its keepalive's "endpoint timeout") all
 * mean the peer is gone; a peer that is there but silent is the batch's deadline's to name. */
static int from_ucs(ucs_status_t s) {
  switch (s) {
    case UCS_OK:
      return STRATA_OK;
    case UCS_ERR_NO_MEMORY:
      return STRATA_ERR_NO_MEMORY;
    default:
      return STRATA_ERR_PEER_LOST;
  }
}

/* ---- ops (initiator) ---- */

/* Lock held. */
static void op_complete(kv_ucx *u, kv_ucx_op *op) {
  if (op->completed || !op->send_done || !op->reply_done || op->receiving) return;
  op->completed = 1;
  uint32_t slot = (uint32_t)op->cookie;
  u->ops[slot] = NULL;
  u->generations[slot]++;
  u->free_slots[u->nfree++] = slot;
  op->link->ops--;
  if (--*op->pending == 0) pthread_cond_signal(op->batch_done); /* its stream thread only */
}

/* Lock held: the op ends with status unless the target's answer is already in. */
static void op_fail(kv_ucx *u, kv_ucx_op *op, int status) {
  if (!op->reply_done) {
    op->status = status;
    op->reply_done = 1;
  }
  op_complete(u, op);
}

static void op_sent(void *request, ucs_status_t status, void *user_data) {
  kv_ucx_op *op = user_data;
  kv_ucx *u = op->link->u;
  pthread_mutex_lock(&u->lock);
  op->send_done = 1;
  if (status != UCS_OK)
    op_fail(u, op, op->link->failure ? op->link->failure : from_ucs(status));
  else
    op_complete(u, op);
  pthread_mutex_unlock(&u->lock);
  api.ucp_request_free(request);
}

/* ---- rendezvous receives ---- */

/* A reply the target owes, queued for the worker to send. */
static void job_queue(kv_ucx *u, kv_ucx_job *job) {
  kv_ucx_reply_encode(&job->wire);
  pthread_mutex_lock(&u->lock);
  if (u->job_tail)
    u->job_tail->next = job;
  else
    u->job_head = job;
  u->job_tail = job;
  pthread_mutex_unlock(&u->lock);
}

/* The receive ended (its bytes are in, or it failed or its endpoint was closed): the target
 * unpins the region and answers the WRITE; the initiator's slice may complete. */
static void recv_finish(kv_ucx *u, kv_ucx_recv *rv, ucs_status_t status, size_t bytes) {
  int ok = status == UCS_OK && bytes == rv->bytes;
  pthread_mutex_lock(&u->lock);
  if (rv->prev)
    rv->prev->next = rv->next;
  else
    u->receiving = rv->next;
  if (rv->next) rv->next->prev = rv->prev;
  if (!ok && !rv->link->failure) { /* whatever broke it, this link is not in step any more */
    rv->link->failure = status == UCS_OK ? STRATA_ERR_PROTOCOL : from_ucs(status);
    u->links_changed = 1;
  }
  kv_ucx_op *op = rv->op;
  if (op) {
    op->receiving = 0;
    if (!op->reply_done) {
      op->reply_done = 1;
      if (ok)
        op->verdict = STRATA_OK;
      else
        op->status = rv->link->failure;
    }
    op_complete(u, op);
  }
  pthread_mutex_unlock(&u->lock);
  kv_ucx_job *job = rv->job;
  if (job) {
    kv_region_release(u->agent, rv->region);
    if (!ok) {
      job->wire.status = STRATA_ERR_PEER_LOST;
      snprintf(job->why, sizeof job->why, "the WRITE's bytes did not arrive (UCX status %d)",
               (int)status);
      job->data = job->why;
      job->data_bytes = strnlen(job->why, KV_UCX_REASON_BYTES);
    }
    job->wire.bytes = job->data_bytes;
    job_queue(u, job);
  }
  free(rv);
}

static void recv_done(void *request, ucs_status_t status, size_t bytes, void *user_data) {
  kv_ucx_recv *rv = user_data;
  recv_finish(rv->u, rv, status, bytes);
  api.ucp_request_free(request);
}

/* From an active message's callback: the bytes it offers go to buffer, and nowhere else. The
 * return value is the callback's. */
static ucs_status_t recv_start(kv_ucx *u, kv_ucx_recv *rv, void *descriptor, void *buffer) {
  rv->u = u;
  rv->started_s = strata_now_s();
  pthread_mutex_lock(&u->lock);
  rv->prev = NULL;
  rv->next = u->receiving;
  if (u->receiving) u->receiving->prev = rv;
  u->receiving = rv;
  pthread_mutex_unlock(&u->lock);
  ucp_request_param_t param = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
      .cb.recv_am = recv_done,
      .user_data = rv};
  ucs_status_ptr_t r = api.ucp_am_recv_data_nbx(u->worker, descriptor, buffer, rv->bytes, &param);
  if (UCS_PTR_IS_PTR(r)) return UCS_INPROGRESS; /* recv_done follows (or ran already) */
  recv_finish(u, rv, UCS_PTR_STATUS(r), rv->bytes);
  return UCS_OK;
}

/* Lock held. Ends every receive coming over ep: the link owning it fails (its endpoint is then
 * force-closed; one already closed by its link is not closed again), or, when no link owns it,
 * it is force-closed on its own. -1: no memory. */
static int endpoint_fail(kv_ucx *u, ucp_ep_h ep, int status) {
  u->links_changed = 1;
  for (kv_ucx_link *l = u->links; l; l = l->next)
    if (l->ep == ep) {
      if (!l->closed && !l->failure) l->failure = status;
      return 0;
    }
  for (kv_ucx_stray *s = u->strays; s; s = s->next)
    if (s->ep == ep) return 0;
  kv_ucx_stray *s = calloc(1, sizeof *s);
  if (!s) return -1;
  s->ep = ep;
  s->next = u->strays;
  u->strays = s;
  return 0;
}

/* The target's answer to one of our slices. */
static ucs_status_t on_reply(void *arg, const void *header, size_t header_bytes, void *data,
                             size_t bytes, const ucp_am_recv_param_t *param) {
  kv_ucx *u = arg;
  kv_ucx_reply h;
  int rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  if (kv_ucx_reply_decode(header, header_bytes, bytes, rendezvous, &h) != 0) {
    STRATA_LOG(STRATA_LOG_WARN, -1, "kv agent %s: dropped a malformed UCX reply", u->agent->name);
    return UCS_OK;
  }
  uint32_t slot = (uint32_t)h.cookie, generation = (uint32_t)(h.cookie >> 32);
  pthread_mutex_lock(&u->lock);
  kv_ucx_op *op = slot < KV_UCX_MAX_OPS ? u->ops[slot] : NULL;
  if (!op || u->generations[slot] != generation || op->reply_done || op->receiving ||
      sodium_memcmp(op->link->reply_token, h.reply_token, KV_UCX_TOKEN_BYTES) != 0) {
    /* late (the slice already failed), forged, or a second answer to a slice whose first is
     * still arriving: dropped, its bytes (a rendezvous' offer) never fetched */
    pthread_mutex_unlock(&u->lock);
    return UCS_OK;
  }
  /* a rendezvous this agent does not take counts as malformed: the slice fails, unfetched */
  int ep_known = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep &&
                 (!rendezvous || rendezvous_allowed(u));
  kv_ucx_recv *rv = rendezvous && ep_known ? calloc(1, sizeof *rv) : NULL;
  if ((h.status == STRATA_OK && h.bytes != (op->type == KV_READ ? op->bytes : 0)) ||
      (rendezvous && !rv)) {
    int failure = rendezvous && ep_known ? STRATA_ERR_NO_MEMORY : STRATA_ERR_PROTOCOL;
    op->link->failure = op->link->failure ? op->link->failure : failure;
    u->links_changed = 1;
    op_fail(u, op, failure);
    pthread_mutex_unlock(&u->lock);
    return UCS_OK; /* a rendezvous dropped: nothing is written */
  }
  if (rendezvous) { /* the READ's bytes, into the slice's own buffer only */
    op->receiving = 1;
    rv->op = op;
    rv->link = op->link;
    rv->ep = param->reply_ep;
    rv->bytes = h.bytes;
    pthread_mutex_unlock(&u->lock);
    return recv_start(u, rv, data, op->local);
  }
  pthread_mutex_unlock(&u->lock);
  /* Only this thread completes ops, so op stays while the lock is down for the copy. */
  if (h.status == STRATA_OK && h.bytes) memcpy(op->local, data, h.bytes);
  if (h.status != STRATA_OK) {
    if (h.bytes) memcpy(op->why, data, h.bytes);
    op->why[h.bytes] = '\0';
  }
  pthread_mutex_lock(&u->lock);
  op->verdict = h.status;
  op->reply_done = 1;
  op_complete(u, op);
  pthread_mutex_unlock(&u->lock);
  return UCS_OK;
}

static void send_op(kv_ucx *u, kv_ucx_op *op) {
  kv_ucx_link *l = op->link;
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                               UCP_OP_ATTR_FIELD_USER_DATA |
                                               UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = UCP_AM_SEND_FLAG_EAGER,
                               .cb.send = op_sent,
                               .user_data = op};
  int write = op->type == KV_WRITE;
  if (write && by_rendezvous(u, op->bytes)) /* the target says where the bytes go */
    param.flags = UCP_AM_SEND_FLAG_RNDV | UCP_AM_SEND_FLAG_REPLY;
  ucs_status_ptr_t r = api.ucp_am_send_nbx(l->ep, KV_UCX_AM_REQUEST, &op->wire, sizeof op->wire,
                                           write ? op->local : NULL, write ? op->bytes : 0, &param);
  if (UCS_PTR_IS_PTR(r)) return; /* op_sent follows */
  pthread_mutex_lock(&u->lock);
  op->send_done = 1;
  if (UCS_PTR_IS_ERR(r))
    op_fail(u, op, from_ucs(UCS_PTR_STATUS(r)));
  else
    op_complete(u, op);
  pthread_mutex_unlock(&u->lock);
}

/* ---- jobs (target) ---- */

static void job_finish(kv_ucx *u, kv_ucx_job *job) {
  if (job->pinned) kv_region_release(u->agent, job->region);
  pthread_mutex_lock(&u->lock);
  job->link->jobs--;
  pthread_mutex_unlock(&u->lock);
  free(job);
}

/* Takes a reply off the in-flight list and finishes it. */
static void job_done(kv_ucx *u, kv_ucx_job *job) {
  pthread_mutex_lock(&u->lock);
  if (job->prev)
    job->prev->next = job->next;
  else
    u->inflight = job->next;
  if (job->next) job->next->prev = job->prev;
  pthread_mutex_unlock(&u->lock);
  job_finish(u, job);
}

static void job_sent(void *request, ucs_status_t status, void *user_data) {
  kv_ucx_job *job = user_data;
  kv_ucx *u = job->link->u;
  (void)status; /* a reply that did not go: the initiator's slice times out or its link failed */
  job_done(u, job);
  api.ucp_request_free(request);
}

static void send_job(kv_ucx *u, kv_ucx_job *job) {
  kv_ucx_link *l = job->link;
  pthread_mutex_lock(&u->lock);
  int failed = l->failure != 0 || !l->ep;
  pthread_mutex_unlock(&u->lock);
  if (failed) {
    job_finish(u, job);
    return;
  }
  ucp_request_param_t param = {
      .op_attr_mask =
          UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
      .flags =
          job->rendezvous ? UCP_AM_SEND_FLAG_RNDV | UCP_AM_SEND_FLAG_REPLY : UCP_AM_SEND_FLAG_EAGER,
      .cb.send = job_sent,
      .user_data = job};
  job->sent_s = strata_now_s();
  pthread_mutex_lock(&u->lock); /* in the list before job_sent can look for it */
  job->prev = NULL;
  job->next = u->inflight;
  if (u->inflight) u->inflight->prev = job;
  u->inflight = job;
  pthread_mutex_unlock(&u->lock);
  ucs_status_ptr_t r = api.ucp_am_send_nbx(l->ep, KV_UCX_AM_REPLY, &job->wire, sizeof job->wire,
                                           job->data, job->data_bytes, &param);
  if (UCS_PTR_IS_PTR(r)) return;
  job_done(u, job);
}

/* Lock held. The link whose token this is, if a live one. */
static kv_ucx_link *link_by_token(kv_ucx *u, const uint8_t token[KV_UCX_TOKEN_BYTES]) {
  for (kv_ucx_link *l = u->links; l; l = l->next)
    if (l->target_side && l->opened == 1 && !l->failure &&
        sodium_memcmp(l->token, token, KV_UCX_TOKEN_BYTES) == 0)
      return l;
  return NULL;
}

/* A peer's request: the same checks and copies as serve_slice (kv_responder.c). */
static ucs_status_t on_request(void *arg, const void *header, size_t header_bytes, void *data,
                               size_t bytes, const ucp_am_recv_param_t *param) {
  kv_ucx *u = arg;
  strata_kv_agent *a = u->agent;
  kv_ucx_request h;
  int rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  int malformed =
      kv_ucx_request_decode(header, header_bytes, bytes, rendezvous, &h) != 0 ||
      (rendezvous && !((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep));
  pthread_mutex_lock(&u->lock);
  kv_ucx_link *l = header_bytes == sizeof h ? link_by_token(u, h.token) : NULL;
  if (l && malformed) { /* a peer of the job that breaks the protocol loses its endpoint */
    l->failure = STRATA_ERR_PROTOCOL;
    u->links_changed = 1;
  }
  if (l && !malformed) l->jobs++;
  pthread_mutex_unlock(&u->lock);
  if (!l) { /* UCS_OK drops a rendezvous' offer: its bytes are never fetched */
    kv_refusal(a, "a UCX sender", "its request carries no token this agent issued");
    return UCS_OK;
  }
  if (malformed) {
    STRATA_LOG(STRATA_LOG_WARN, -1, "kv agent %s: closed the UCX endpoint of %s: malformed request",
               a->name, l->from);
    return UCS_OK;
  }
  kv_ucx_job *job = calloc(1, sizeof *job);
  if (!job) {
    pthread_mutex_lock(&u->lock);
    l->jobs--;
    l->failure = STRATA_ERR_NO_MEMORY;
    u->links_changed = 1;
    pthread_mutex_unlock(&u->lock);
    return UCS_OK;
  }
  job->link = l;
  memcpy(job->wire.reply_token, l->reply_token, KV_UCX_TOKEN_BYTES);
  job->wire.cookie = h.cookie;
  void *ptr = NULL;
  int status = STRATA_OK;
  if (rendezvous && !rendezvous_allowed(u)) { /* its offer is dropped: bytes never fetched */
    status = STRATA_ERR_UNSUPPORTED;
    snprintf(job->why, sizeof job->why,
             "agent %s takes no rendezvous (STRATA_KV_UCX_RNDV_BYTES unset here, or its UCX "
             "transports cannot report a peer's failure)",
             a->name);
  } else {
    status = kv_region_acquire(a, h.region, h.addr, h.bytes, &ptr, job->why, sizeof job->why);
  }
  if (status != STRATA_OK) {
    kv_refusal(a, l->from, job->why);
    job->data = job->why;
    job->data_bytes = strnlen(job->why, KV_UCX_REASON_BYTES);
  } else if (h.type == KV_WRITE && rendezvous) {
    /* UCX fetches the bytes into exactly the range just checked, pinned until it is done;
     * the reply leaves then (recv_finish) */
    kv_ucx_recv *rv = calloc(1, sizeof *rv);
    if (rv) {
      job->wire.status = STRATA_OK;
      rv->job = job;
      rv->region = h.region;
      rv->link = l;
      rv->ep = param->reply_ep;
      rv->bytes = h.bytes;
      return recv_start(u, rv, data, ptr);
    }
    kv_region_release(a, h.region);
    status = STRATA_ERR_NO_MEMORY;
    snprintf(job->why, sizeof job->why, "agent %s is out of memory", a->name);
    job->data = job->why;
    job->data_bytes = strnlen(job->why, KV_UCX_REASON_BYTES);
  } else if (h.type == KV_WRITE) {
    if (h.bytes) memcpy(ptr, data, h.bytes);
    kv_region_release(a, h.region);
  } else {
    job->data = ptr;
    job->data_bytes = h.bytes;
    job->region = h.region;
    job->pinned = 1; /* until the reply's send completes, or the endpoint closes */
    job->rendezvous = by_rendezvous(u, h.bytes); /* the initiator says where they go */
  }
  job->wire.status = status;
  job->wire.bytes = job->data_bytes;
  job_queue(u, job);
  return UCS_OK; /* a refused rendezvous' offer is dropped: its bytes are never fetched */
}

/* ---- links ---- */

static void on_endpoint_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
  kv_ucx_link *l = arg;
  kv_ucx *u = l->u;
  (void)ep;
  pthread_mutex_lock(&u->lock);
  if (!l->failure) l->failure = from_ucs(status);
  u->links_changed = 1;
  pthread_mutex_unlock(&u->lock);
}

/* The endpoint reports its peer's failure (UCP_ERR_HANDLING_MODE_PEER) where the transports
 * can: tcp can, UCX's shared-memory transports (posix, sysv) cannot, and with them alone an
 * endpoint in that mode has no transport at all. There it is made without: a dead or silent
 * peer is still found, by its TCP connection closing and by the batch's deadline, and the
 * endpoint is then force-closed all the same. */
static void link_open(kv_ucx *u, kv_ucx_link *l) {
  ucp_ep_params_t params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                          UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                          UCP_EP_PARAM_FIELD_ERR_HANDLER,
                            .address = (const ucp_address_t *)l->address,
                            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                            .err_handler = {.cb = on_endpoint_error, .arg = l}};
  ucp_ep_h ep = NULL;
  ucs_status_t s = UCS_ERR_UNREACHABLE;
  if (!u->no_peer_mode) s = api.ucp_ep_create(u->worker, &params, &ep);
  if (s == UCS_ERR_UNREACHABLE) {
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    s = api.ucp_ep_create(u->worker, &params, &ep);
    if (s == UCS_OK && !u->no_peer_mode) /* UCX said why, once: the next links go straight here */
      STRATA_LOG(STRATA_LOG_INFO, -1,
                 "kv agent %s: UCX's transports here cannot report a peer's failure; a dead "
                 "peer is found by its TCP connection and the timeout",
                 u->agent->name);
    u->no_peer_mode = s == UCS_OK;
  }
  pthread_mutex_lock(&u->lock);
  free(l->address);
  l->address = NULL;
  if (s == UCS_OK) {
    l->ep = ep;
    l->opened = 1;
  } else {
    l->opened = from_ucs(s);
    l->closed = 1;
    if (!l->failure) l->failure = l->opened;
  }
  pthread_cond_broadcast(&u->cond);
  pthread_mutex_unlock(&u->lock);
}

/* Lock held, worker thread: the strays are force-closed and, once closed, forgotten. */
static void strays_tend(kv_ucx *u) {
  for (kv_ucx_stray **next = &u->strays; *next;) {
    kv_ucx_stray *s = *next;
    if (!s->closing) {
      s->closing = 1;
      pthread_mutex_unlock(&u->lock);
      ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                   .flags = UCP_EP_CLOSE_FLAG_FORCE};
      ucs_status_ptr_t r = api.ucp_ep_close_nbx(s->ep, &param);
      pthread_mutex_lock(&u->lock);
      if (UCS_PTR_IS_PTR(r)) s->close_request = r;
    }
    if (s->close_request && api.ucp_request_check_status(s->close_request) != UCS_INPROGRESS) {
      api.ucp_request_free(s->close_request);
      s->close_request = NULL;
    }
    if (!s->close_request) { /* closed: found again from the head, the list may have grown */
      for (next = &u->strays; *next != s;) next = &(*next)->next;
      *next = s->next;
      free(s);
      continue;
    }
    next = &s->next;
  }
}

/* Worker thread: every failed link's endpoint is closed (force: its sends complete, cancelled)
 * and its slices and replies end; released idle links are freed. */
static void links_tend(kv_ucx *u) {
  pthread_mutex_lock(&u->lock);
  u->links_changed = 0;
  for (kv_ucx_link **link = &u->links; *link;) {
    kv_ucx_link *l = *link;
    if (l->opened == 0) {
      pthread_mutex_unlock(&u->lock);
      link_open(u, l);
      pthread_mutex_lock(&u->lock);
    }
    if (l->failure && !l->closed) {
      l->closed = 1;
      ucp_ep_h ep = l->ep;
      pthread_mutex_unlock(&u->lock);
      ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                   .flags = UCP_EP_CLOSE_FLAG_FORCE};
      ucs_status_ptr_t r = ep ? api.ucp_ep_close_nbx(ep, &param) : NULL;
      pthread_mutex_lock(&u->lock);
      if (UCS_PTR_IS_PTR(r)) l->close_request = r;
      /* slices awaiting a reply that will not come now */
      for (size_t slot = 0; slot < KV_UCX_MAX_OPS && l->ops; slot++)
        if (u->ops[slot] && u->ops[slot]->link == l) op_fail(u, u->ops[slot], l->failure);
      /* receives over this endpoint end with its close; those of this link's slices coming
       * over another endpoint end with that one */
      for (kv_ucx_recv *rv = u->receiving; rv; rv = rv->next)
        if (rv->ep == ep)
          rv->expired = 1;
        else if (rv->link == l)
          rv->expired = endpoint_fail(u, rv->ep, l->failure) == 0;
    }
    if (l->close_request && api.ucp_request_check_status(l->close_request) != UCS_INPROGRESS) {
      api.ucp_request_free(l->close_request);
      l->close_request = NULL;
    }
    if (l->released && l->closed && !l->close_request && !l->ops && !l->jobs) {
      /* found again from the head: others may have added links while the lock was down */
      for (link = &u->links; *link != l;) link = &(*link)->next;
      *link = l->next;
      free(l->address);
      sodium_memzero(l, sizeof *l);
      free(l);
      pthread_cond_broadcast(&u->cond);
      continue;
    }
    link = &l->next;
  }
  strays_tend(u);
  pthread_mutex_unlock(&u->lock);
}

void kv_ucx_link_fail(kv_ucx_link *l, int status) {
  if (!l) return;
  kv_ucx *u = l->u;
  pthread_mutex_lock(&u->lock);
  if (!l->failure) l->failure = status ? status : STRATA_ERR_PEER_LOST;
  u->links_changed = 1;
  pthread_mutex_unlock(&u->lock);
  wake(u);
}

void kv_ucx_link_release(kv_ucx_link *l) {
  if (!l) return;
  kv_ucx *u = l->u;
  pthread_mutex_lock(&u->lock);
  if (!l->failure) l->failure = STRATA_ERR_PEER_LOST;
  l->released = 1;
  u->links_changed = 1;
  pthread_mutex_unlock(&u->lock);
  wake(u);
}

#ifdef STRATA_TEST_HOOKS
void kv_ucx_forge_token_for_test(kv_ucx_link *l) {
  pthread_mutex_lock(&l->u->lock);
  l->token[3] ^= 0x40;
  pthread_mutex_unlock(&l->u->lock);
}

size_t kv_ucx_receiving_for_test(strata_kv_agent *a) {
  kv_ucx *u = a->ucx;
  size_t n = 0;
  if (!u) return 0;
  pthread_mutex_lock(&u->lock);
  for (kv_ucx_recv *rv = u->receiving; rv; rv = rv->next) n++;
  pthread_mutex_unlock(&u->lock);
  return n;
}
#endif

/* A new link, opened by the worker thread; waits for the endpoint. */
static int link_add(kv_ucx *u, kv_ucx_link *l, double timeout_s) {
  pthread_mutex_lock(&u->lock);
  l->next = u->links;
  u->links = l;
  u->links_changed = 1;
  pthread_mutex_unlock(&u->lock);
  wake(u);
  double deadline = strata_now_s() + timeout_s;
  pthread_mutex_lock(&u->lock);
  while (l->opened == 0 && strata_now_s() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&u->cond, &u->lock, &ts);
  }
  int status = l->opened == 1 ? STRATA_OK : l->opened < 0 ? l->opened : STRATA_ERR_TIMEOUT;
  pthread_mutex_unlock(&u->lock);
  return status;
}

static kv_ucx_link *link_new(kv_ucx *u, const void *address, size_t bytes, int target_side) {
  kv_ucx_link *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  l->address = malloc(bytes);
  if (!l->address) {
    free(l);
    return NULL;
  }
  memcpy(l->address, address, bytes);
  l->address_bytes = bytes;
  l->u = u;
  l->target_side = target_side;
  return l;
}

int kv_ucx_link_open(strata_kv_agent *a, kv_peer *p, const kv_ucx_hello *hello, char *err,
                     size_t err_len) {
  kv_ucx *u = a->ucx;
  kv_ucx_link *l = link_new(u, p->ucx_address, p->ucx_address_bytes, 0);
  if (!l) return STRATA_ERR_NO_MEMORY;
  memcpy(l->token, hello->token, KV_UCX_TOKEN_BYTES);
  memcpy(l->reply_token, hello->reply_token, KV_UCX_TOKEN_BYTES);
  snprintf(l->from, sizeof l->from, "%s", p->name);
  int status = link_add(u, l, a->timeout_s);
  if (status != STRATA_OK) {
    snprintf(err, err_len, "no UCX endpoint to peer %s: %s", p->name, strata_strerror(status));
    kv_ucx_link_release(l);
    return status == STRATA_ERR_TIMEOUT ? status : STRATA_ERR_PEER_LOST;
  }
  p->ucx_link = l;
  return STRATA_OK;
}

int kv_ucx_grant(strata_kv_agent *a, const char *from, const void *address, size_t address_bytes,
                 const uint8_t reply_token[KV_UCX_TOKEN_BYTES], uint8_t token[KV_UCX_TOKEN_BYTES],
                 kv_ucx_link **out) {
  kv_ucx *u = a->ucx;
  *out = NULL;
  kv_ucx_link *l = link_new(u, address, address_bytes, 1);
  if (!l) return STRATA_ERR_NO_MEMORY;
  randombytes_buf(l->token, KV_UCX_TOKEN_BYTES);
  memcpy(token, l->token, KV_UCX_TOKEN_BYTES);
  memcpy(l->reply_token, reply_token, KV_UCX_TOKEN_BYTES);
  snprintf(l->from, sizeof l->from, "%s", from);
  int status = link_add(u, l, a->timeout_s);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_WARN, -1, "kv agent %s: no UCX endpoint back to %s: %s", a->name, from,
               strata_strerror(status));
    kv_ucx_link_release(l);
    return status;
  }
  *out = l;
  return STRATA_OK;
}

/* ---- the worker thread ---- */

/* Hand the queued slices and replies to UCP. Returns whether there was any. */
static int drain_queues(kv_ucx *u) {
  pthread_mutex_lock(&u->lock);
  kv_ucx_op *ops = u->submit_head;
  kv_ucx_job *jobs = u->job_head;
  u->submit_head = u->submit_tail = NULL;
  u->job_head = u->job_tail = NULL;
  pthread_mutex_unlock(&u->lock);
  int any = ops || jobs;
  while (ops) {
    kv_ucx_op *op = ops;
    ops = op->next;
    pthread_mutex_lock(&u->lock);
    int failure = op->link->failure ? op->link->failure : op->link->ep ? 0 : STRATA_ERR_PEER_LOST;
    if (failure) {
      op->send_done = 1;
      op_fail(u, op, failure);
    }
    pthread_mutex_unlock(&u->lock);
    if (!failure) send_op(u, op);
  }
  while (jobs) {
    kv_ucx_job *job = jobs;
    jobs = job->next;
    send_job(u, job);
  }
  return any;
}

/* A reply in flight longer than the timeout means an initiator that stopped reading, a
 * rendezvous receive as old a sender that stopped sending: the endpoint closes, which ends the
 * send or the receive and unpins the region. */
static void expire(kv_ucx *u) {
  double now = strata_now_s();
  int replies = 0, receives = 0;
  pthread_mutex_lock(&u->lock);
  for (kv_ucx_job *job = u->inflight; job; job = job->next)
    if (now - job->sent_s > u->agent->timeout_s && !job->link->failure) {
      job->link->failure = STRATA_ERR_TIMEOUT;
      replies = 1;
    }
  for (kv_ucx_recv *rv = u->receiving; rv; rv = rv->next)
    if (now - rv->started_s > u->agent->timeout_s && !rv->expired) {
      if (!rv->link->failure) rv->link->failure = STRATA_ERR_TIMEOUT;
      rv->expired = endpoint_fail(u, rv->ep, STRATA_ERR_TIMEOUT) == 0; /* else: next check */
      receives = 1;
    }
  if (replies) u->links_changed = 1;
  pthread_mutex_unlock(&u->lock);
  if (replies || receives)
    STRATA_LOG(STRATA_LOG_WARN, -1,
               "kv agent %s: a UCX peer did not %s within %.1f s: endpoint closed", u->agent->name,
               replies ? "take a READ reply" : "deliver a rendezvous' bytes", u->agent->timeout_s);
}

static void *worker_loop(void *arg) {
  kv_ucx *u = arg;
  double next_expiry_check = 0, last_work = 0;
  for (;;) {
    int busy = 0;
    while (api.ucp_worker_progress(u->worker)) busy = 1;
    busy |= drain_queues(u);
    pthread_mutex_lock(&u->lock);
    int in_flight = u->nfree < KV_UCX_MAX_OPS || u->inflight || u->receiving;
    int changed = u->links_changed, stopping = atomic_load(&u->stop);
    int waiting_close = u->strays != NULL;
    for (kv_ucx_link *l = u->links; l; l = l->next) waiting_close |= l->close_request != NULL;
    pthread_mutex_unlock(&u->lock);
    if (changed || waiting_close) links_tend(u);
    double now = strata_now_s(); /* once a turn: a polling turn is short */
    if (now >= next_expiry_check) {
      expire(u);
      next_expiry_check = now + 0.05;
    }
    if (stopping) {
      pthread_mutex_lock(&u->lock);
      int empty = !u->links && !u->inflight && !u->job_head && !u->submit_head && !u->receiving &&
                  !u->strays;
      pthread_mutex_unlock(&u->lock);
      if (empty) break;
    }
    if (busy || changed || waiting_close) {
      last_work = now;
      continue;
    }
    /* a peer that stopped answering is the timeouts' to end: the worker sleeps meanwhile */
    double window =
        in_flight && u->poll_s < KV_UCX_POLL_IN_FLIGHT_S ? KV_UCX_POLL_IN_FLIGHT_S : u->poll_s;
    if (u->poll_s > 0 && !u->no_peer_mode && now - last_work < window) continue;
    /* Idle: sleep until the network or a queue has something, or a timeout is due. */
    struct pollfd pfd[2] = {{.fd = u->wake_fd, .events = POLLIN}, {.fd = u->efd, .events = POLLIN}};
    int nfds = 1;
    if (u->efd >= 0) {
      ucs_status_t armed = api.ucp_worker_arm(u->worker);
      if (armed == UCS_ERR_BUSY) continue;
      nfds = armed == UCS_OK ? 2 : 1;
    }
    int wait_ms = nfds == 2 ? KV_UCX_IDLE_WAIT_MS : 1; /* no event fd: poll the worker */
    if (poll(pfd, (nfds_t)nfds, wait_ms) > 0 && (pfd[0].revents & POLLIN)) {
      uint64_t count;
      ssize_t n = read(u->wake_fd, &count, sizeof count);
      (void)n;
    }
  }
  return NULL;
}

void kv_ucx_address(strata_kv_agent *a, const void **address, size_t *bytes) {
  *address = a->ucx ? a->ucx->address : NULL;
  *bytes = a->ucx ? a->ucx->address_bytes : 0;
}

/* UCX's tcp transport receives into segments of UCX_TCP_RX_SEG_SIZE (64 KiB by default), and an
 * active message larger than one travels as fragments of that size: each its own send system
 * call, its own receive and its own step of UCP's reassembly, and that per-fragment cost, more
 * than the bytes, bounds a sender whose core also runs loopback's receive path. So the backend
 * asks for segments of KV_UCX_TCP_SEG unless the environment names a size (every fragment also
 * carries headers, so a 1 MiB slice is four fragments of just under 256 KiB and a fifth of a few
 * bytes). Not larger: a send or a receive moves up to one segment at once, and on a kernel that
 * does not preempt system calls a lane call waits behind the ones in progress, longer the larger
 * they are (docs/kv.md, "Last run", measures both sides of it). "RX_SEG_SIZE" is the tcp
 * transport's key without its prefix (only tcp has one); where the environment's UCX_TLS leaves tcp
 * out it is not set, as UCX would warn that no transport takes it (it still warns where tcp is
 * allowed but no tcp device opens, and a UCX_TLS from UCX's configuration file is not seen here).
 */
#define KV_UCX_TCP_SEG "256k"

static int tls_may_include_tcp(void) {
  const char *tls = getenv("UCX_TLS");
  if (!tls || !tls[0]) return 1;
  int found = strstr(tls, "tcp") != NULL;
  if (tls[0] == '^') return !found; /* a list of transports left out */
  return found || strstr(tls, "all") != NULL;
}

static int worker_create(kv_ucx *u, int wakeup) {
  ucp_config_t *config;
  if (api.ucp_config_read(NULL, NULL, &config) != UCS_OK) return STRATA_ERR_SYSTEM;
  const char *seg = getenv("UCX_TCP_RX_SEG_SIZE");
  if ((!seg || !seg[0]) && tls_may_include_tcp() &&
      api.ucp_config_modify(config, "RX_SEG_SIZE", KV_UCX_TCP_SEG) != UCS_OK)
    STRATA_LOG(STRATA_LOG_DEBUG, -1, "kv: UCX took no TCP_RX_SEG_SIZE: its default stays");
  ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
                         .features = UCP_FEATURE_AM | (wakeup ? UCP_FEATURE_WAKEUP : 0),
                         .name = "strata-kv"};
  ucs_status_t s = api.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &u->context);
  api.ucp_config_release(config);
  if (s != UCS_OK) return STRATA_ERR_UNSUPPORTED;
  ucp_worker_params_t worker_params = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                       .thread_mode = UCS_THREAD_MODE_SINGLE};
  s = api.ucp_worker_create(u->context, &worker_params, &u->worker);
  if (s != UCS_OK) {
    api.ucp_cleanup(u->context);
    u->context = NULL;
    return STRATA_ERR_UNSUPPORTED;
  }
  u->efd = -1;
  if (wakeup && api.ucp_worker_get_efd(u->worker, &u->efd) != UCS_OK) u->efd = -1;
  STRATA_LOG(STRATA_LOG_DEBUG, -1, "kv agent %s: UCP worker up, %s", u->agent->name,
             u->efd >= 0 ? "sleeping on its event fd when idle" : "polling it when idle");
  return STRATA_OK;
}

/* STRATA_KV_UCX_POLL_US (read once per process, as the rendezvous size);
 * none on a single core, where polling would keep the peer's or the lane's threads off it. */
static pthread_once_t poll_once = PTHREAD_ONCE_INIT;
static double poll_us;

static void poll_read(void) {
  poll_us = (double)strata_setting_u64("STRATA_KV_UCX_POLL_US");
}

static double poll_seconds(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2) return 0;
  pthread_once(&poll_once, poll_read);
  return poll_us * 1e-6;
}

int kv_ucx_start(strata_kv_agent *a) {
  if (!kv_ucx_built()) return STRATA_ERR_UNSUPPORTED;
  kv_ucx *u = calloc(1, sizeof *u);
  if (!u) return STRATA_ERR_NO_MEMORY;
  a->ucx = u; /* kv_ucx_stop undoes whatever part of this succeeds */
  u->agent = a;
  u->poll_s = poll_seconds();
  u->efd = u->wake_fd = -1;
  pthread_mutex_init(&u->lock, NULL);
  pthread_cond_init(&u->cond, NULL);
  u->ops = calloc(KV_UCX_MAX_OPS, sizeof *u->ops);
  u->generations = calloc(KV_UCX_MAX_OPS, sizeof *u->generations);
  u->free_slots = calloc(KV_UCX_MAX_OPS, sizeof *u->free_slots);
  int status = u->ops && u->generations && u->free_slots ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  for (size_t i = 0; status == STRATA_OK && i < KV_UCX_MAX_OPS; i++)
    u->free_slots[u->nfree++] = (uint32_t)(KV_UCX_MAX_OPS - 1 - i);
  /* With wakeup when the transports allow it (the worker then sleeps on its event fd), else
   * without (it polls every millisecond when idle). */
  if (status == STRATA_OK && worker_create(u, 1) != STRATA_OK) status = worker_create(u, 0);
  if (status == STRATA_OK) {
    ucp_am_handler_param_t handler = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = KV_UCX_AM_REQUEST,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = on_request,
        .arg = u};
    if (api.ucp_worker_set_am_recv_handler(u->worker, &handler) != UCS_OK)
      status = STRATA_ERR_SYSTEM;
    handler.id = KV_UCX_AM_REPLY;
    handler.cb = on_reply;
    if (status == STRATA_OK && api.ucp_worker_set_am_recv_handler(u->worker, &handler) != UCS_OK)
      status = STRATA_ERR_SYSTEM;
  }
  if (status == STRATA_OK &&
      api.ucp_worker_get_address(u->worker, &u->address, &u->address_bytes) != UCS_OK)
    status = STRATA_ERR_SYSTEM;
  if (status == STRATA_OK && u->address_bytes > KV_UCX_MAX_ADDRESS_BYTES)
    status = STRATA_ERR_UNSUPPORTED;
  if (status == STRATA_OK) {
    u->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (u->wake_fd < 0) status = STRATA_ERR_SYSTEM;
  }
  if (status == STRATA_OK) {
    if (pthread_create(&u->thread, NULL, worker_loop, u) != 0) status = STRATA_ERR_SYSTEM;
    u->thread_started = status == STRATA_OK;
  }
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_WARN, -1, "kv agent %s: UCX did not start: %s", a->name,
               strata_strerror(status));
    kv_ucx_stop(a);
  }
  return status;
}

void kv_ucx_stop(strata_kv_agent *a) {
  kv_ucx *u = a->ucx;
  if (!u) return;
  /* Every owner has let go by now (peers destroyed, responder connections ended); the loop
   * closes what remains and ends when nothing is in flight. */
  pthread_mutex_lock(&u->lock);
  for (kv_ucx_link *l = u->links; l; l = l->next) {
    if (!l->failure) l->failure = STRATA_ERR_ABORTED;
    l->released = 1;
  }
  u->links_changed = 1;
  pthread_mutex_unlock(&u->lock);
  atomic_store(&u->stop, 1);
  if (u->thread_started) {
    wake(u);
    pthread_join(u->thread, NULL);
  }
  if (u->address) api.ucp_worker_release_address(u->worker, u->address);
  if (u->worker) api.ucp_worker_destroy(u->worker);
  if (u->context) api.ucp_cleanup(u->context);
  if (u->wake_fd >= 0) close(u->wake_fd);
  free(u->ops);
  free(u->generations);
  free(u->free_slots);
  pthread_mutex_destroy(&u->lock);
  pthread_cond_destroy(&u->cond);
  free(u);
  a->ucx = NULL;
}

/* ---- a stream thread's batch ---- */

/* 1 when the peer closed the TCP connection (a dead peer, seen without waiting for UCX). */
static int connection_closed(const kv_conn *c) {
  char byte;
  ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

int kv_ucx_batch(kv_peer *p, kv_conn *c, const strata_kv_xfer *x, size_t first, size_t n,
                 int *refused, size_t *refused_slice, char *why, size_t why_len) {
  strata_kv_agent *a = p->agent;
  kv_ucx *u = a->ucx;
  kv_ucx_link *l = p->ucx_link;
  kv_ucx_op ops[KV_BATCH_SLICES];
  size_t pending = n;
  pthread_cond_t done; /* a batch's own: an op's completion wakes no other stream thread */
  pthread_cond_init(&done, NULL);
  memset(ops, 0, sizeof ops);
  pthread_mutex_lock(&u->lock);
  if (u->nfree < n) { /* cannot happen: the table holds every batch that can exist at once */
    pthread_mutex_unlock(&u->lock);
    pthread_cond_destroy(&done);
    return STRATA_ERR_NO_MEMORY;
  }
  for (size_t i = 0; i < n; i++) {
    const kv_slice *s = &x->slices[first + i];
    kv_ucx_op *op = &ops[i];
    uint32_t slot = u->free_slots[--u->nfree];
    u->ops[slot] = op;
    op->link = l;
    op->cookie = (uint64_t)u->generations[slot] << 32 | slot;
    op->type = x->op == STRATA_KV_READ ? KV_READ : KV_WRITE;
    op->local = (uint8_t *)(uintptr_t)s->local;
    op->bytes = s->bytes;
    op->pending = &pending;
    op->batch_done = &done;
    memcpy(op->wire.token, l->token, KV_UCX_TOKEN_BYTES);
    op->wire.cookie = op->cookie;
    op->wire.type = (uint16_t)op->type;
    op->wire.region = s->region;
    op->wire.addr = s->remote;
    op->wire.bytes = s->bytes;
    kv_ucx_request_encode(&op->wire);
    if (u->submit_tail)
      u->submit_tail->next = op;
    else
      u->submit_head = op;
    u->submit_tail = op;
  }
  l->ops += n;
  pthread_mutex_unlock(&u->lock);
  wake(u);
  /* Wait for every op; the deadline moves whenever one completed (time without progress),
   * checked when the batch ends and every 100 ms. */
  pthread_mutex_lock(&u->lock);
  double deadline = strata_now_s() + a->timeout_s;
  size_t last = pending;
  while (pending) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&done, &u->lock, &ts);
    double now = strata_now_s();
    if (pending < last) {
      last = pending;
      deadline = now + a->timeout_s;
    }
    if (!pending || l->failure) continue; /* a failed link's ops end without us */
    int failure = atomic_load(&p->stopping) ? STRATA_ERR_PEER_LOST
                  : now >= deadline         ? STRATA_ERR_TIMEOUT
                  : connection_closed(c)    ? STRATA_ERR_PEER_LOST
                                            : 0;
    if (failure) {
      l->failure = failure;
      u->links_changed = 1;
      pthread_mutex_unlock(&u->lock);
      wake(u);
      pthread_mutex_lock(&u->lock);
    }
  }
  pthread_mutex_unlock(&u->lock);
  pthread_cond_destroy(&done);
  int status = STRATA_OK;
  for (size_t i = 0; i < n; i++) {
    if (ops[i].status != STRATA_OK && status == STRATA_OK) status = ops[i].status;
    if (ops[i].status == STRATA_OK && ops[i].verdict != STRATA_OK && *refused == STRATA_OK) {
      *refused = ops[i].verdict;
      *refused_slice = first + i;
      snprintf(why, why_len, "%s", ops[i].why);
    }
  }
  return status;
}

#endif
