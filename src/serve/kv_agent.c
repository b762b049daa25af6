// SPDX-License-Identifier: Apache-2.0
/*
 * kv_agent.c — the agent of strata_kv.h: its regions, its metadata blob, its peers' blobs, its
 * notification queue and the rendezvous store.
 *
 * The metadata blob (little-endian, every length checked before use, so a blob from anywhere
 * parses to a peer or to STRATA_ERR_PARSE):
 *   u32 magic "KVM1", u32 version (2; 1 is still read),
 *   u16 len + name, u16 len + address "host:port", u16 len + host identity, u32 pid,
 *   u32 region count, then per region u32 id, u32 zero, u64 base, u64 bytes,
 *   version 2: u32 flags (KV_BLOB_UCX_RDMA), u32 len + UCP worker address (0: no UCX).
 * The per-region entries serve every backend: UCX moves slices as active messages that name
 * (region, address, length) as TCP frames do, so no rkey travels.
 * A peer's regions are only advice for building descriptors: the target checks every access
 * against its own table at that moment (kv_region_acquire), whatever the blob said.
 */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "boot/settings.h"
#include "boot/store.h"
#include "core/abi.h"
#include "core/core.h"
#include "net/net.h"
#include "serve/kv_internal.h"

#define KV_BLOB_MAGIC 0x314d564bu /* "KVM1" */
#define KV_BLOB_VERSION 2u

void strata_kv_config_init_sized(strata_kv_config *cfg, size_t struct_size, int header_version) {
  strata_kv_config defaults;
  memset(&defaults, 0, sizeof defaults);
  strata_struct_init(cfg, &defaults, sizeof defaults, struct_size, header_version);
}

int strata_kv_backend_supported(int backend) {
  if (backend == STRATA_KV_BACKEND_UCX) return kv_ucx_built();
  return backend >= STRATA_KV_BACKEND_AUTO && backend <= STRATA_KV_BACKEND_SHM;
}

/* The caller's config at this library's size, with the STRATA_KV_* variables (boot/settings.c)
 * checked and filling the fields it leaves at their defaults (the backend at AUTO). */
static int config_import(const strata_kv_config *user, strata_kv_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  int status = strata_struct_import(user, cfg, sizeof *cfg, "strata_kv_config",
                                    "strata_kv_config_init", NULL, 0);
  char err[256];
  if (status == STRATA_OK && (status = strata_settings_kv(cfg, err, sizeof err)) != STRATA_OK)
    STRATA_LOG(STRATA_LOG_ERROR, -1, "kv agent: %s", err);
  return status;
}

void kv_thread_nice(int nice) {
  if (nice <= 0) return;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  errno = 0;
  int now = getpriority(PRIO_PROCESS, (id_t)tid);
  if (errno == 0) (void)setpriority(PRIO_PROCESS, (id_t)tid, now + nice);
}

/* A thread already real-time (FIFO, RR, DEADLINE) is left as it is: the application chose. */
static int realtime_already(int policy) {
  return policy != SCHED_OTHER && policy != SCHED_BATCH && policy != SCHED_IDLE;
}

int kv_thread_realtime(strata_kv_agent *a, kv_sched_saved *saved) {
  if (saved) saved->raised = 0;
  if (!a->lane_realtime || atomic_load_explicit(&a->realtime_denied, memory_order_relaxed))
    return 0;
  int policy;
  struct sched_param param;
  if (pthread_getschedparam(pthread_self(), &policy, &param) != 0 || realtime_already(policy))
    return 0;
  struct sched_param fifo = {.sched_priority = 1};
  int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &fifo);
  if (rc != 0) {
    /* neither CAP_SYS_NICE nor RLIMIT_RTPRIO: the lane keeps the process's niceness, above the
     * bulk threads' (cfg.bulk_nice); not asked again by this agent */
    if (!atomic_exchange(&a->realtime_denied, 1))
      STRATA_LOG(STRATA_LOG_DEBUG, -1, "kv agent %s: lane threads stay SCHED_OTHER (%s)", a->name,
                 strerror(rc));
    return 0;
  }
  if (saved) {
    saved->raised = 1;
    saved->policy = policy;
    saved->priority = param.sched_priority;
  }
  return 1;
}

void kv_thread_restore(const kv_sched_saved *saved) {
  if (!saved->raised) return;
  /* the kernel keeps the thread's niceness across the change */
  struct sched_param param = {.sched_priority = saved->priority};
  (void)pthread_setschedparam(pthread_self(), saved->policy, &param);
}

int strata_kv_agent_create(const strata_kv_config *user_cfg, strata_kv_agent **out) {
  if (!user_cfg || !out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  strata_kv_config full;
  int env_status = config_import(user_cfg, &full);
  if (env_status != STRATA_OK) return env_status;
  const strata_kv_config *cfg = &full;
  if (!cfg->name || !cfg->name[0] || strlen(cfg->name) >= STRATA_KV_NAME_BYTES ||
      cfg->streams < 0 || cfg->streams > STRATA_KV_MAX_STREAMS || cfg->timeout_s < 0 ||
      cfg->slice_bytes > KV_WIRE_MAX_SLICE_BYTES || cfg->backend < 0 ||
      cfg->backend > STRATA_KV_BACKEND_UCX)
    return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  int backend = cfg->backend;
  if (!strata_kv_backend_supported(backend)) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "kv agent %s: backend UCX asked, but this libstrata was built without UCX "
               "(libucx-dev) or libucp.so.0 does not load",
               cfg->name);
    return STRATA_ERR_UNSUPPORTED;
  }
  strata_kv_agent *a = calloc(1, sizeof *a);
  if (!a) return STRATA_ERR_NO_MEMORY;
  strcpy(a->name, cfg->name);
  const char *job = cfg->job_id && cfg->job_id[0] ? cfg->job_id : "strata-kv";
  if (strlen(job) >= sizeof a->job_id) {
    free(a);
    return STRATA_ERR_INVALID_ARG;
  }
  strcpy(a->job_id, job);
  const char *host = cfg->listen_host && cfg->listen_host[0] ? cfg->listen_host : "127.0.0.1";
  if (strlen(host) >= sizeof a->listen_host || cfg->listen_port < 0 || cfg->listen_port > 65535) {
    free(a);
    return STRATA_ERR_INVALID_ARG;
  }
  strcpy(a->listen_host, host);
  a->listen_port = cfg->listen_port;
  a->secret = strdup(cfg->secret ? cfg->secret : "");
  a->streams = cfg->streams ? cfg->streams : 4;
  a->slice_bytes = cfg->slice_bytes ? cfg->slice_bytes : (1u << 20);
  a->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 10.0;
  a->backend = backend;
  a->cma_allowed = 1;
  a->bulk_nice = cfg->bulk_nice == 0 ? 5 : cfg->bulk_nice;
  a->lane_realtime = cfg->lane_realtime >= 0;
  a->next_region_id = 1;
  a->listen_fd = -1;
  a->wake_pipe[0] = a->wake_pipe[1] = -1;
  randombytes_buf((void *)&a->canary, sizeof a->canary);
  /* Priority inheritance: a real-time lane thread that finds the lock held by a bulk thread
   * (niced, and perhaps preempted while holding it) lends it its priority instead of waiting
   * for the scheduler to come back to it. */
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setprotocol(&attr, PTHREAD_PRIO_INHERIT);
  pthread_mutex_init(&a->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  pthread_cond_init(&a->cond, NULL);
  strata_net_host_identity(a->identity, sizeof a->identity);
  int status = a->secret ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (status == STRATA_OK)
    status = strata_handshake_params_init(&a->responder_params, a->job_id, a->secret, 0, 2,
                                          KV_HANDSHAKE_STREAMS);
  if (status == STRATA_OK)
    status = strata_handshake_params_init(&a->initiator_params, a->job_id, a->secret, 1, 2,
                                          KV_HANDSHAKE_STREAMS);
  if (status == STRATA_OK) {
    int mode = cfg->seal > 0   ? STRATA_ENCRYPT_ON
               : cfg->seal < 0 ? STRATA_ENCRYPT_OFF
                               : STRATA_ENCRYPT_AUTO;
    a->responder_params.encrypt = mode;
    a->initiator_params.encrypt = mode;
    strata_secret_warn_once(a->secret, -1);
    status = kv_responder_start(a);
  }
  /* UCX runs when asked, or under AUTO where it may be chosen: towards another host with an
   * RDMA device on both sides. Under AUTO a UCX that does not start leaves TCP and SHM. */
  int rdma = kv_ucx_rdma_present() && kv_ucx_built(); /* libucp is loaded only if needed */
  if (status == STRATA_OK &&
      (a->backend == STRATA_KV_BACKEND_UCX || (a->backend == STRATA_KV_BACKEND_AUTO && rdma))) {
    int started = kv_ucx_start(a);
    if (started == STRATA_OK)
      a->ucx_rdma = rdma;
    else if (a->backend == STRATA_KV_BACKEND_UCX)
      status = started;
  }
  if (status != STRATA_OK) {
    strata_kv_agent_destroy(a);
    return status;
  }
  *out = a;
  return STRATA_OK;
}

void strata_kv_agent_destroy(strata_kv_agent *a) {
  if (!a) return;
  atomic_store(&a->stopping, 1);
  for (int i = 0; i < KV_MAX_PEERS; i++) {
    pthread_mutex_lock(&a->lock);
    kv_peer *p = a->peers[i];
    a->peers[i] = NULL;
    pthread_mutex_unlock(&a->lock);
    if (p) kv_peer_destroy(p);
  }
  kv_responder_stop(a);
  kv_ucx_stop(a); /* after every link's owner let go; before the regions go */
  while (a->notif_head) {
    kv_notif *n = a->notif_head;
    a->notif_head = n->next;
    free(n);
  }
  free(a->regions);
  if (a->secret) sodium_memzero(a->secret, strlen(a->secret));
  free(a->secret);
  sodium_memzero(&a->responder_params, sizeof a->responder_params);
  sodium_memzero(&a->initiator_params, sizeof a->initiator_params);
  pthread_mutex_destroy(&a->lock);
  pthread_cond_destroy(&a->cond);
  free(a);
}

const char *strata_kv_agent_name(const strata_kv_agent *a) {
  return a ? a->name : "";
}

/* ---- regions ---- */

int strata_kv_register(strata_kv_agent *a, void *addr, size_t bytes, uint32_t *region_id) {
  if (!a || !addr || !bytes || !region_id || (uint64_t)(uintptr_t)addr > UINT64_MAX - bytes)
    return STRATA_ERR_INVALID_ARG;
  pthread_mutex_lock(&a->lock);
  if (a->nregions == a->regions_cap) {
    size_t cap = a->regions_cap ? 2 * a->regions_cap : 16;
    kv_region *grown = realloc(a->regions, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&a->lock);
      return STRATA_ERR_NO_MEMORY;
    }
    a->regions = grown;
    a->regions_cap = cap;
  }
  if (a->next_region_id == 0) { /* 2^32 - 1 registrations: ids would repeat */
    pthread_mutex_unlock(&a->lock);
    return STRATA_ERR_NO_MEMORY;
  }
  kv_region *r = &a->regions[a->nregions++];
  r->id = a->next_region_id++;
  r->base = (uint64_t)(uintptr_t)addr;
  r->bytes = bytes;
  r->active = 1;
  r->users = 0;
  *region_id = r->id;
  pthread_mutex_unlock(&a->lock);
  return STRATA_OK;
}

static kv_region *region_find(strata_kv_agent *a, uint32_t id) {
  for (size_t i = 0; i < a->nregions; i++)
    if (a->regions[i].id == id) return &a->regions[i];
  return NULL;
}

int strata_kv_deregister(strata_kv_agent *a, uint32_t region_id) {
  if (!a) return STRATA_ERR_INVALID_ARG;
  pthread_mutex_lock(&a->lock);
  kv_region *r = region_find(a, region_id);
  if (!r || !r->active) {
    pthread_mutex_unlock(&a->lock);
    return STRATA_ERR_NOT_FOUND;
  }
  r->active = 0; /* no new access from here */
  while ((r = region_find(a, region_id)) && r->users > 0) pthread_cond_wait(&a->cond, &a->lock);
  r = region_find(a, region_id);
  *r = a->regions[--a->nregions];
  pthread_mutex_unlock(&a->lock);
  return STRATA_OK;
}

int kv_region_acquire(strata_kv_agent *a, uint32_t region_id, uint64_t addr, uint64_t bytes,
                      void **ptr, char *err, size_t err_len) {
  pthread_mutex_lock(&a->lock);
  kv_region *r = region_find(a, region_id);
  int status = STRATA_ERR_INVALID_ARG;
  if (!r || !r->active)
    snprintf(err, err_len, "region %u is not registered at agent %s", region_id, a->name);
  else if (addr < r->base || addr - r->base > r->bytes || bytes > r->bytes - (addr - r->base))
    snprintf(err, err_len, "[0x%llx, +%llu) is outside region %u [0x%llx, +%llu) of agent %s",
             (unsigned long long)addr, (unsigned long long)bytes, region_id,
             (unsigned long long)r->base, (unsigned long long)r->bytes, a->name);
  else {
    r->users++;
    *ptr = (void *)(uintptr_t)addr;
    status = STRATA_OK;
  }
  pthread_mutex_unlock(&a->lock);
  return status;
}

void kv_region_release(strata_kv_agent *a, uint32_t region_id) {
  pthread_mutex_lock(&a->lock);
  kv_region *r = region_find(a, region_id);
  if (r && r->users > 0) r->users--;
  pthread_cond_broadcast(&a->cond);
  pthread_mutex_unlock(&a->lock);
}

int kv_local_covered(strata_kv_agent *a, uint64_t addr, uint64_t bytes) {
  for (size_t i = 0; i < a->nregions; i++) {
    const kv_region *r = &a->regions[i];
    if (r->active && addr >= r->base && addr - r->base <= r->bytes &&
        bytes <= r->bytes - (addr - r->base))
      return 1;
  }
  return 0;
}

void kv_refusal(strata_kv_agent *a, const char *from, const char *err) {
  pthread_mutex_lock(&a->lock);
  a->refusals++;
  snprintf(a->last_refusal, sizeof a->last_refusal, "refused %s: %s", from, err);
  pthread_mutex_unlock(&a->lock);
  STRATA_LOG(STRATA_LOG_WARN, -1, "kv agent %s refused a request of %s: %s", a->name, from, err);
}

uint64_t strata_kv_agent_refusals(strata_kv_agent *a, char *last_error, size_t len) {
  if (!a) return 0;
  pthread_mutex_lock(&a->lock);
  uint64_t n = a->refusals;
  if (last_error && len) snprintf(last_error, len, "%s", a->last_refusal);
  pthread_mutex_unlock(&a->lock);
  return n;
}

/* ---- notifications ---- */

int kv_notif_push(strata_kv_agent *a, const char *from, const void *msg, size_t bytes) {
  kv_notif *n = malloc(sizeof *n + bytes);
  if (!n) return STRATA_ERR_NO_MEMORY;
  n->next = NULL;
  snprintf(n->from, sizeof n->from, "%s", from);
  n->bytes = bytes;
  if (bytes) memcpy(n->msg, msg, bytes);
  pthread_mutex_lock(&a->lock);
  if (a->notif_tail)
    a->notif_tail->next = n;
  else
    a->notif_head = n;
  a->notif_tail = n;
  pthread_cond_broadcast(&a->cond);
  pthread_mutex_unlock(&a->lock);
  return STRATA_OK;
}

static void deadline_timespec(double timeout_s, struct timespec *ts) {
  clock_gettime(CLOCK_REALTIME, ts);
  double whole = (double)ts->tv_sec + ts->tv_nsec * 1e-9 + timeout_s;
  ts->tv_sec = (time_t)whole;
  ts->tv_nsec = (long)((whole - (double)ts->tv_sec) * 1e9);
}

int strata_kv_notifs_get(strata_kv_agent *a, char *from, void *msg, size_t cap, size_t *bytes,
                         double timeout_s) {
  if (!a || !bytes || (cap && !msg)) return STRATA_ERR_INVALID_ARG;
  struct timespec ts;
  deadline_timespec(timeout_s > 0 ? timeout_s : 0, &ts);
  pthread_mutex_lock(&a->lock);
  while (!a->notif_head) {
    if (pthread_cond_timedwait(&a->cond, &a->lock, &ts) == ETIMEDOUT) break;
  }
  kv_notif *n = a->notif_head;
  int status = STRATA_ERR_TIMEOUT;
  if (n) {
    *bytes = n->bytes;
    status = STRATA_ERR_INVALID_ARG;
    if (n->bytes <= cap) {
      a->notif_head = n->next;
      if (!a->notif_head) a->notif_tail = NULL;
      if (n->bytes) memcpy(msg, n->msg, n->bytes);
      if (from) snprintf(from, STRATA_KV_NAME_BYTES, "%s", n->from);
      free(n);
      status = STRATA_OK;
    }
  }
  pthread_mutex_unlock(&a->lock);
  return status;
}

void strata_kv_lane_set_handler(strata_kv_agent *a, strata_kv_lane_handler handler, void *ctx) {
  if (!a) return;
  pthread_mutex_lock(&a->lock);
  a->lane_handler = handler;
  a->lane_ctx = ctx;
  pthread_mutex_unlock(&a->lock);
}

/* ---- metadata blobs ---- */

typedef struct blob_writer {
  uint8_t *buf;
  size_t len, cap;
  int failed;
} blob_writer;

static void put(blob_writer *w, const void *p, size_t n) {
  if (w->failed) return;
  if (w->len + n > w->cap) {
    size_t cap = (w->cap + n) * 2;
    uint8_t *grown = realloc(w->buf, cap);
    if (!grown) {
      w->failed = 1;
      return;
    }
    w->buf = grown;
    w->cap = cap;
  }
  memcpy(w->buf + w->len, p, n);
  w->len += n;
}
static void put32(blob_writer *w, uint32_t v) {
  v = htole32(v);
  put(w, &v, 4);
}
static void put64(blob_writer *w, uint64_t v) {
  v = htole64(v);
  put(w, &v, 8);
}
static void put_text(blob_writer *w, const char *s) {
  uint16_t n = htole16((uint16_t)strlen(s));
  put(w, &n, 2);
  put(w, s, strlen(s));
}

int strata_kv_metadata_export(strata_kv_agent *a, void **blob, size_t *bytes) {
  if (!a || !blob || !bytes) return STRATA_ERR_INVALID_ARG;
  blob_writer w = {0};
  put32(&w, KV_BLOB_MAGIC);
  put32(&w, KV_BLOB_VERSION);
  put_text(&w, a->name);
  put_text(&w, a->address);
  put_text(&w, a->identity);
  put32(&w, (uint32_t)getpid());
  pthread_mutex_lock(&a->lock);
  uint32_t n = 0;
  for (size_t i = 0; i < a->nregions; i++) n += a->regions[i].active != 0;
  put32(&w, n);
  for (size_t i = 0; i < a->nregions; i++) {
    if (!a->regions[i].active) continue;
    put32(&w, a->regions[i].id);
    put32(&w, 0);
    put64(&w, a->regions[i].base);
    put64(&w, a->regions[i].bytes);
  }
  pthread_mutex_unlock(&a->lock);
  const void *ucx_address = NULL;
  size_t ucx_address_bytes = 0;
  if (a->ucx) kv_ucx_address(a, &ucx_address, &ucx_address_bytes);
  put32(&w, a->ucx && a->ucx_rdma ? KV_BLOB_UCX_RDMA : 0);
  put32(&w, (uint32_t)ucx_address_bytes);
  if (ucx_address_bytes) put(&w, ucx_address, ucx_address_bytes);
  if (w.failed) {
    free(w.buf);
    return STRATA_ERR_NO_MEMORY;
  }
  *blob = w.buf;
  *bytes = w.len;
  return STRATA_OK;
}

typedef struct blob_reader {
  const uint8_t *p;
  size_t left;
} blob_reader;

static int take(blob_reader *r, void *out, size_t n) {
  if (r->left < n) return -1;
  memcpy(out, r->p, n);
  r->p += n;
  r->left -= n;
  return 0;
}
static int take32(blob_reader *r, uint32_t *v) {
  if (take(r, v, 4)) return -1;
  *v = le32toh(*v);
  return 0;
}
static int take64(blob_reader *r, uint64_t *v) {
  if (take(r, v, 8)) return -1;
  *v = le64toh(*v);
  return 0;
}
static int take_text(blob_reader *r, char *out, size_t cap) {
  uint16_t n;
  if (take(r, &n, 2)) return -1;
  n = le16toh(n);
  if (n >= cap || memchr(r->p, 0, n < r->left ? n : r->left)) return -1;
  if (take(r, out, n)) return -1;
  out[n] = '\0';
  return 0;
}

static int blob_parse(const void *blob, size_t bytes, kv_peer *p) {
  blob_reader r = {blob, bytes};
  uint32_t magic, version, count;
  if (take32(&r, &magic) || magic != KV_BLOB_MAGIC || take32(&r, &version) || version < 1 ||
      version > KV_BLOB_VERSION || take_text(&r, p->name, sizeof p->name) || !p->name[0] ||
      take_text(&r, p->address, sizeof p->address) ||
      take_text(&r, p->identity, sizeof p->identity) || take32(&r, &p->pid) || take32(&r, &count) ||
      count > r.left / 24)
    return STRATA_ERR_PARSE;
  p->regions = calloc(count ? count : 1, sizeof *p->regions);
  if (!p->regions) return STRATA_ERR_NO_MEMORY;
  for (uint32_t i = 0; i < count; i++) {
    uint32_t zero;
    if (take32(&r, &p->regions[i].id) || take32(&r, &zero) || take64(&r, &p->regions[i].base) ||
        take64(&r, &p->regions[i].bytes))
      return STRATA_ERR_PARSE;
  }
  p->nregions = count;
  if (version >= 2) {
    uint32_t address_bytes;
    if (take32(&r, &p->blob_flags) || (p->blob_flags & ~KV_BLOB_UCX_RDMA) ||
        take32(&r, &address_bytes) || address_bytes > KV_UCX_MAX_ADDRESS_BYTES ||
        address_bytes != r.left)
      return STRATA_ERR_PARSE;
    if (address_bytes) {
      p->ucx_address = malloc(address_bytes);
      if (!p->ucx_address) return STRATA_ERR_NO_MEMORY;
      memcpy(p->ucx_address, r.p, address_bytes);
      p->ucx_address_bytes = address_bytes;
      r.left = 0;
    }
  }
  return r.left == 0 ? STRATA_OK : STRATA_ERR_PARSE;
}

#ifdef STRATA_TEST_HOOKS
int kv_blob_parse_for_test(const void *blob, size_t bytes) {
  kv_peer *p = calloc(1, sizeof *p);
  if (!p) return STRATA_ERR_NO_MEMORY;
  int status = blob_parse(blob, bytes, p);
  /* what a parsed peer promises the rest of the agent */
  if (status == STRATA_OK &&
      (!p->name[0] || strlen(p->name) >= sizeof p->name ||
       strlen(p->address) >= sizeof p->address || strlen(p->identity) >= sizeof p->identity ||
       (p->nregions && !p->regions) || (p->ucx_address_bytes != 0) != (p->ucx_address != NULL)))
    abort();
  free(p->regions);
  free(p->ucx_address);
  free(p);
  return status;
}
#endif

int strata_kv_peer_load(strata_kv_agent *a, const void *blob, size_t bytes, int *peer) {
  if (!a || !blob || !peer) return STRATA_ERR_INVALID_ARG;
  kv_peer *p = calloc(1, sizeof *p);
  if (!p) return STRATA_ERR_NO_MEMORY;
  p->agent = a;
  p->lane.fd = -1;
  for (int i = 0; i < STRATA_KV_MAX_STREAMS; i++) p->streams[i].fd = -1;
  pthread_mutex_init(&p->lane_lock, NULL);
  int status = blob_parse(blob, bytes, p);
  if (status != STRATA_OK) {
    kv_peer_destroy(p);
    return status;
  }
  /* A restarted agent under the same name replaces its predecessor. */
  pthread_mutex_lock(&a->lock);
  int slot = -1;
  kv_peer *old = NULL;
  for (int i = 0; i < KV_MAX_PEERS; i++) {
    if (a->peers[i] && !strcmp(a->peers[i]->name, p->name)) {
      old = a->peers[i];
      a->peers[i] = NULL;
      slot = i;
      break;
    }
  }
  for (int i = 0; slot < 0 && i < KV_MAX_PEERS; i++)
    if (!a->peers[i]) slot = i;
  if (slot >= 0) a->peers[slot] = p; /* reserved; not usable until connected */
  p->index = slot;
  atomic_store(&p->stopping, slot < 0);
  pthread_mutex_unlock(&a->lock);
  if (old) kv_peer_destroy(old);
  if (slot < 0) {
    kv_peer_destroy(p);
    return STRATA_ERR_NO_MEMORY;
  }
  char err[300] = "";
  status = kv_peer_connect(a, p, err, sizeof err);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_WARN, -1, "kv agent %s: cannot reach peer %s at %s: %s", a->name, p->name,
               p->address, err);
    pthread_mutex_lock(&a->lock);
    if (a->peers[slot] == p) a->peers[slot] = NULL;
    pthread_mutex_unlock(&a->lock);
    kv_peer_destroy(p);
    return status;
  }
  pthread_mutex_lock(&a->lock);
  p->ready = 1;
  pthread_mutex_unlock(&a->lock);
  *peer = slot;
  return STRATA_OK;
}

static kv_peer *peer_get(strata_kv_agent *a, int peer) {
  return peer >= 0 && peer < KV_MAX_PEERS ? a->peers[peer] : NULL;
}

int strata_kv_peer_forget(strata_kv_agent *a, int peer) {
  if (!a) return STRATA_ERR_INVALID_ARG;
  pthread_mutex_lock(&a->lock);
  kv_peer *p = peer_get(a, peer);
  if (p) a->peers[peer] = NULL;
  pthread_mutex_unlock(&a->lock);
  if (!p) return STRATA_ERR_NOT_FOUND;
  kv_peer_destroy(p);
  return STRATA_OK;
}

int strata_kv_peer_backend(strata_kv_agent *a, int peer) {
  if (!a) return STRATA_ERR_INVALID_ARG;
  pthread_mutex_lock(&a->lock);
  kv_peer *p = peer_get(a, peer);
  int backend = p ? p->backend : STRATA_ERR_NOT_FOUND;
  pthread_mutex_unlock(&a->lock);
  return backend;
}

int strata_kv_peer_region(strata_kv_agent *a, int peer, size_t index, uint32_t *region_id,
                          uint64_t *addr, uint64_t *bytes) {
  if (!a || !region_id || !addr || !bytes) return STRATA_ERR_INVALID_ARG;
  pthread_mutex_lock(&a->lock);
  kv_peer *p = peer_get(a, peer);
  int status = STRATA_ERR_NOT_FOUND;
  if (p && index < p->nregions) {
    *region_id = p->regions[index].id;
    *addr = p->regions[index].base;
    *bytes = p->regions[index].bytes;
    status = STRATA_OK;
  }
  pthread_mutex_unlock(&a->lock);
  return status;
}

/* ---- through the store ---- */

static void store_key(const strata_kv_agent *a, const char *name, char *key, size_t len) {
  snprintf(key, len, "kv/%s/%s", a->job_id, name);
}

int strata_kv_metadata_publish(strata_kv_agent *a, const char *store_addr, double timeout_s) {
  if (!a || !store_addr) return STRATA_ERR_INVALID_ARG;
  void *blob;
  size_t bytes;
  int status = strata_kv_metadata_export(a, &blob, &bytes);
  if (status != STRATA_OK) return status;
  strata_store *s;
  status = strata_store_connect_auth(store_addr, a->secret, a->job_id, timeout_s, &s);
  if (status == STRATA_OK) {
    char key[160];
    store_key(a, a->name, key, sizeof key);
    status = strata_store_set(s, key, blob, bytes);
    strata_store_close(s);
  }
  free(blob);
  return status;
}

int strata_kv_peer_fetch(strata_kv_agent *a, const char *store_addr, const char *peer_name,
                         double timeout_s, int *peer) {
  if (!a || !store_addr || !peer_name || !peer || strlen(peer_name) >= STRATA_KV_NAME_BYTES)
    return STRATA_ERR_INVALID_ARG;
  strata_store *s;
  int status = strata_store_connect_auth(store_addr, a->secret, a->job_id, timeout_s, &s);
  if (status != STRATA_OK) return status;
  char key[160];
  store_key(a, peer_name, key, sizeof key);
  void *blob = NULL;
  size_t bytes = 0;
  status = strata_store_get(s, key, &blob, &bytes, timeout_s);
  strata_store_close(s);
  if (status == STRATA_OK) status = strata_kv_peer_load(a, blob, bytes, peer);
  free(blob);
  return status;
}
