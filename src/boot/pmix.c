// SPDX-License-Identifier: Apache-2.0
/*
 * pmix.c — the rendezvous of a job that a PMIx launcher started, with nothing configured.
 *
 * mpirun and srun give every process PMIX_RANK and PMIX_NAMESPACE and run a PMIx server beside
 * it, but no address for strata's store. Through that server the job settles what it lacks in
 * one round: rank 0 starts the store (the same store a STRATA_ADDR job uses: it also serves
 * agreement, shrink and grow, and the atomic counters PMIx has no counterpart for) on a port the
 * kernel picks, puts "<host>:<port>" and, when no STRATA_SECRET was given, a secret it draws
 * (32 random bytes) under one key, commits, and every process fences (collecting the data); the
 * others then get the key from rank 0. The rest of init is the usual one: every rank connects to
 * the store and the data connections are made and authenticated with that secret, as always.
 *
 * Trust: the PMIx namespace is the resource manager's trust domain — its servers hand a process
 * only the data of its own job — so the secret travels no wider than the job. A peer that does
 * not know it is still refused on every connection, to the store and between ranks.
 *
 * The library is opened (dlopen of libpmix.so.2, the soname of PMIx 2 to 5) the first time a
 * rank needs it, never by the planner or the `strata` command that does not start a rank, and
 * the build needs only PMIx's headers. PMIx_Init is called once per process and PMIx_Finalize at
 * exit: mpirun takes a process that initialized PMIx and leaves without finalizing for a failed
 * one, and re-initializing costs a new registration with the server. Each later world
 * communicator (an init after a destroy) uses a new key ("strata.boot.<n>", n counting them),
 * since every process creates its world communicators in the same order.
 *
 * Must never: fence when only some processes of the namespace will (a split or an elastic epoch
 * reuses its parent's store and never comes here), or wait without the configured bound.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot/pmix.h"
#include "boot/store.h"
#include "core/core.h"
#include "core/store.h"

static const char *env_value(const char *name) {
  const char *value = getenv(name);
  return value && *value ? value : NULL;
}

const char *strata_pmix_namespace(void) {
  return env_value("PMIX_NAMESPACE");
}

int strata_pmix_launched(void) {
#ifdef STRATA_HAVE_PMIX
  static const char *const named_elsewhere[] = {"STRATA_RANK", "STRATA_ADDR", "RANK",
                                                "MASTER_ADDR"};
  if (!env_value("PMIX_RANK") || !env_value("PMIX_NAMESPACE")) return 0;
  for (size_t i = 0; i < sizeof named_elsewhere / sizeof named_elsewhere[0]; i++)
    if (env_value(named_elsewhere[i])) return 0;
  return 1;
#else
  return 0;
#endif
}

#ifndef STRATA_HAVE_PMIX

int strata_pmix_rendezvous(strata_config *cfg, strata_store_server **server, unsigned *round) {
  (void)cfg;
  *server = NULL;
  *round = 0;
  return STRATA_ERR_UNSUPPORTED;
}

int strata_pmix_address_book(strata_store *inner, int rank, unsigned round, strata_store **out) {
  (void)inner;
  (void)rank;
  (void)round;
  *out = NULL;
  return STRATA_ERR_UNSUPPORTED;
}

#else

#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <math.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pmix.h>
#include <pthread.h>
#include <sodium.h>
#include <unistd.h>

/* clang-format off */
#define STRATA_PMIX_FUNCTIONS(X) \
  X(PMIx_Init) X(PMIx_Finalize) X(PMIx_Get) X(PMIx_Put) X(PMIx_Commit) X(PMIx_Fence) \
  X(PMIx_Error_string) X(PMIx_Info_load) X(PMIx_Value_load) X(PMIx_Value_destruct)
/* clang-format on */

static struct {
#define STRATA_PMIX_POINTER(name) __typeof__(&name) name;
  STRATA_PMIX_FUNCTIONS(STRATA_PMIX_POINTER)
#undef STRATA_PMIX_POINTER
} api;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_status;
static pmix_proc_t self;
static pthread_mutex_t generation_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned generation;

static pid_t init_pid;

/* Only the process that initialized: a child it forked shares its connection to the server, and
 * a finalize from there would tell the server that this rank is done. */
static void finalize_at_exit(void) {
  if (getpid() == init_pid) api.PMIx_Finalize(NULL, 0);
}

/* How to start without PMIx, for the errors that leave a rank unable to use it. */
#define STRATA_PMIX_WITHOUT \
  "; to rendezvous without PMIx set STRATA_ADDR, STRATA_RANK and STRATA_WORLD_SIZE"

static void pmix_open(void) {
  init_status = STRATA_ERR_CONFIG;
  void *library = dlopen("libpmix.so.2", RTLD_NOW | RTLD_LOCAL);
  int ok = library != NULL;
#define STRATA_PMIX_SYMBOL(name) \
  if (ok && !(api.name = (__typeof__(api.name))dlsym(library, #name))) ok = 0;
  STRATA_PMIX_FUNCTIONS(STRATA_PMIX_SYMBOL)
#undef STRATA_PMIX_SYMBOL
  if (!ok) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "PMIx: the launcher set PMIX_RANK, but libpmix.so.2 cannot be used (%s): install "
               "libpmix2" STRATA_PMIX_WITHOUT,
               library ? "it lacks a function strata calls" : dlerror());
    return;
  }
  pmix_status_t rc = api.PMIx_Init(&self, NULL, 0);
  if (rc != PMIX_SUCCESS) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "PMIx: PMIX_RANK and PMIX_NAMESPACE are set, but PMIx_Init failed: %s (the "
               "launcher's PMIx server is not reachable from here)" STRATA_PMIX_WITHOUT,
               api.PMIx_Error_string(rc));
    return;
  }
  init_pid = getpid();
  atexit(finalize_at_exit);
  init_status = STRATA_OK;
}

/* A job-level count (PMIX_JOB_SIZE, ...) of our namespace; -1 when the server has none. */
static long job_value(const char *key) {
  pmix_proc_t job;
  memset(&job, 0, sizeof job);
  memcpy(job.nspace, self.nspace, sizeof job.nspace);
  job.rank = PMIX_RANK_WILDCARD;
  pmix_value_t *value = NULL;
  if (api.PMIx_Get(&job, key, NULL, 0, &value) != PMIX_SUCCESS || !value) return -1;
  long out = -1;
  switch (value->type) {
    case PMIX_UINT32:
      out = (long)value->data.uint32;
      break;
    case PMIX_UINT64:
      out = (long)value->data.uint64;
      break;
    case PMIX_INT:
      out = value->data.integer;
      break;
    case PMIX_UINT:
      out = (long)value->data.uint;
      break;
    default:
      break;
  }
  api.PMIx_Value_destruct(value);
  free(value);
  return out;
}

/* An address of this host that other hosts reach: the hostname's first non-loopback IPv4, else
 * the first non-loopback IPv4 interface that is up. */
static int routable_host(char *host, size_t len) {
  char name[256];
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *list = NULL;
  if (gethostname(name, sizeof name - 1) == 0 && getaddrinfo(name, NULL, &hints, &list) == 0) {
    for (struct addrinfo *ai = list; ai; ai = ai->ai_next) {
      const struct sockaddr_in *in = (const struct sockaddr_in *)ai->ai_addr;
      if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
      inet_ntop(AF_INET, &in->sin_addr, host, (socklen_t)len);
      freeaddrinfo(list);
      return STRATA_OK;
    }
    freeaddrinfo(list);
  }
  struct ifaddrs *interfaces = NULL;
  if (getifaddrs(&interfaces) != 0) return STRATA_ERR_SYSTEM;
  int status = STRATA_ERR_CONFIG;
  for (struct ifaddrs *i = interfaces; i && status != STRATA_OK; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
        (i->ifa_flags & IFF_LOOPBACK))
      continue;
    inet_ntop(AF_INET, &((const struct sockaddr_in *)i->ifa_addr)->sin_addr, host, (socklen_t)len);
    status = STRATA_OK;
  }
  freeifaddrs(interfaces);
  return status;
}

/* Rank 0: the store on a port the kernel picks, at an address every rank reaches; "host:port
 * \n secret" (the secret only when this rank drew it) in `published`. */
static int serve_store(strata_config *cfg, int nodes, strata_store_server **server, char *published,
                       size_t len) {
  char host[256] = "127.0.0.1", addr[300];
  int drew_secret = !cfg->secret[0];
  if (cfg->advertise_host[0])
    snprintf(host, sizeof host, "%s", cfg->advertise_host);
  else if (nodes != 1 && routable_host(host, sizeof host) != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, 0,
               "PMIx: the job spans %d nodes and this host has no address other hosts reach: "
               "set STRATA_HOST",
               nodes);
    return STRATA_ERR_CONFIG;
  }
  if (drew_secret) {
    unsigned char bytes[32];
    if (sodium_init() < 0) return STRATA_ERR_SYSTEM;
    randombytes_buf(bytes, sizeof bytes);
    sodium_bin2hex(cfg->secret, sizeof cfg->secret, bytes, sizeof bytes);
  }
  snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:0" : "%s:0", host);
  int status =
      strata_store_server_start_job_auth(addr, cfg->secret, cfg->job_id, cfg->world_size, server);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, 0, "PMIx: cannot serve the rendezvous store on %s: %s", addr,
               strata_strerror(status));
    return status;
  }
  snprintf(cfg->store_addr, sizeof cfg->store_addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
           strata_store_server_port(*server));
  snprintf(published, len, "%s\n%s", cfg->store_addr, drew_secret ? cfg->secret : "");
  return STRATA_OK;
}

/* What rank 0 published, into cfg: its store address, and its secret unless we have one. */
static int adopt(strata_config *cfg, const char *published) {
  if (!*published) {
    STRATA_LOG(STRATA_LOG_ERROR, cfg->rank,
               "PMIx: rank 0 could not serve the rendezvous store (its log says why)");
    return STRATA_ERR_PEER_LOST;
  }
  const char *newline = strchr(published, '\n');
  size_t addr_len = newline ? (size_t)(newline - published) : 0;
  if (!newline || !addr_len || addr_len >= sizeof cfg->store_addr) {
    STRATA_LOG(STRATA_LOG_ERROR, cfg->rank, "PMIx: rank 0 published a bad store address");
    return STRATA_ERR_PROTOCOL;
  }
  memcpy(cfg->store_addr, published, addr_len);
  cfg->store_addr[addr_len] = '\0';
  const char *secret = newline + 1;
  if (cfg->secret[0]) return STRATA_OK; /* STRATA_SECRET: the same on every rank, or refused */
  if (!*secret || strlen(secret) >= sizeof cfg->secret) {
    STRATA_LOG(STRATA_LOG_ERROR, cfg->rank,
               "PMIx: rank 0 has STRATA_SECRET (or STRATA_SECRET_FILE) set and this rank has not: "
               "give every rank the same one, or none");
    return STRATA_ERR_CONFIG;
  }
  snprintf(cfg->secret, sizeof cfg->secret, "%s", secret);
  return STRATA_OK;
}

static int pmix_error(int rank, const char *call, pmix_status_t rc, int status) {
  STRATA_LOG(STRATA_LOG_ERROR, rank, "PMIx: %s failed: %s", call, api.PMIx_Error_string(rc));
  return status;
}

/* Put (rank 0), commit, fence with the data collected, get rank 0's value (others). */
static int exchange(strata_config *cfg, const char *key, const char *published) {
  pmix_status_t rc;
  if (cfg->rank == 0) {
    pmix_value_t value;
    api.PMIx_Value_load(&value, published, PMIX_STRING);
    rc = api.PMIx_Put(PMIX_GLOBAL, key, &value);
    api.PMIx_Value_destruct(&value);
    if (rc != PMIX_SUCCESS) return pmix_error(0, "PMIx_Put", rc, STRATA_ERR_SYSTEM);
  }
  rc = api.PMIx_Commit();
  if (rc != PMIX_SUCCESS) return pmix_error(cfg->rank, "PMIx_Commit", rc, STRATA_ERR_SYSTEM);
  pmix_proc_t job, root;
  memset(&job, 0, sizeof job);
  memcpy(job.nspace, self.nspace, sizeof job.nspace);
  root = job;
  job.rank = PMIX_RANK_WILDCARD;
  root.rank = 0;
  bool collect = true;
  int timeout_s = (int)fmin(ceil(cfg->timeout_s), 1e6);
  pmix_info_t info[2];
  api.PMIx_Info_load(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  api.PMIx_Info_load(&info[1], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
  rc = api.PMIx_Fence(&job, 1, info, 2);
  if (rc != PMIX_SUCCESS)
    return pmix_error(cfg->rank, "PMIx_Fence (every rank of the job must start)", rc,
                      rc == PMIX_ERR_TIMEOUT ? STRATA_ERR_TIMEOUT : STRATA_ERR_PEER_LOST);
  if (cfg->rank == 0) return STRATA_OK;
  pmix_value_t *value = NULL;
  rc = api.PMIx_Get(&root, key, &info[1], 1, &value);
  if (rc != PMIX_SUCCESS || !value)
    return pmix_error(cfg->rank, "PMIx_Get", rc, STRATA_ERR_PROTOCOL);
  int status = STRATA_ERR_PROTOCOL;
  if (value->type == PMIX_STRING && value->data.string) status = adopt(cfg, value->data.string);
  api.PMIx_Value_destruct(value);
  free(value);
  return status;
}

/* cfg's rank and world size from the server; a value the environment gave must agree. */
static int take_ranks(strata_config *cfg, int *nodes) {
  long size = job_value(PMIX_JOB_SIZE);
  int rank = (int)self.rank;
  if (size < 1 || size > (1 << 30)) {
    STRATA_LOG(STRATA_LOG_ERROR, rank, "PMIx: the server gives no job size");
    return STRATA_ERR_CONFIG;
  }
  if ((cfg->rank >= 0 && cfg->rank != rank) || (cfg->world_size > 0 && cfg->world_size != size)) {
    STRATA_LOG(STRATA_LOG_ERROR, rank,
               "PMIx: rank %d of %ld, but the environment says rank %d of %d: unset the "
               "launcher variables that disagree",
               rank, size, cfg->rank, cfg->world_size);
    return STRATA_ERR_CONFIG;
  }
  cfg->rank = rank;
  cfg->world_size = (int)size;
  long num_nodes = job_value(PMIX_NUM_NODES), local_size = job_value(PMIX_LOCAL_SIZE);
  *nodes = num_nodes > 0 ? (int)num_nodes : local_size == size ? 1 : 0; /* 0: unknown */
  return STRATA_OK;
}

int strata_pmix_rendezvous(strata_config *cfg, strata_store_server **server, unsigned *out_round) {
  *server = NULL;
  *out_round = 0;
  pthread_once(&init_once, pmix_open);
  if (init_status != STRATA_OK) return init_status;
  int nodes = 0, status = take_ranks(cfg, &nodes);
  if (status != STRATA_OK) return status;
  pthread_mutex_lock(&generation_lock);
  unsigned round = generation++;
  pthread_mutex_unlock(&generation_lock);
  *out_round = round;
  char key[PMIX_MAX_KEYLEN + 1], published[sizeof cfg->store_addr + sizeof cfg->secret + 2] = "";
  snprintf(key, sizeof key, "strata.boot.%u", round);
  if (cfg->rank == 0) status = serve_store(cfg, nodes, server, published, sizeof published);
  /* a rank 0 that cannot serve still fences, with an empty value: the others fail at once, saying
   * so, instead of at the fence's timeout */
  int exchanged = exchange(cfg, key, published);
  if (status == STRATA_OK) status = exchanged;
  if (status != STRATA_OK) {
    strata_store_server_stop(*server);
    *server = NULL;
    return status;
  }
  STRATA_LOG(STRATA_LOG_INFO, cfg->rank,
             "PMIx: rank %d of %d (namespace %s): store %s served by rank 0, found through PMIx",
             cfg->rank, cfg->world_size, self.nspace, cfg->store_addr);
  return STRATA_OK;
}

/* The address book (pmix.h). Why both places: PMIx spares the store the N reads of a job's
 * addresses (each rank fetches only the peers it dials, from their own PMIx servers), while the
 * copy in the store keeps a launcher whose server cannot fetch another process's data before a
 * fence working. */
typedef struct pmix_book {
  strata_store_head head;
  strata_store *inner;
  int rank;
  unsigned round;
  unsigned long fetched, fell_back;
} pmix_book;

/* The rank an address key names ("<prefix>/addr/<n>"), or -1 for any other key. */
static int address_rank(const char *key) {
  const char *tag = strstr(key, "/addr/");
  if (!tag) return -1;
  const char *digits = tag + 6;
  char *end = NULL;
  long rank = strtol(digits, &end, 10);
  if (end == digits || *end || rank < 0 || rank > (1L << 30)) return -1;
  return (int)rank;
}

/* The PMIx key of an address: the rendezvous's round and the store key, which names the
 * transport's open within it. */
static int book_key(const pmix_book *b, const char *key, char *out, size_t len) {
  int n = snprintf(out, len, "strata.%u.%s", b->round, key);
  return n > 0 && (size_t)n < len && (size_t)n <= PMIX_MAX_KEYLEN;
}

static int book_set(strata_store *s, const char *key, const void *value, size_t len) {
  pmix_book *b = (pmix_book *)s;
  char pkey[PMIX_MAX_KEYLEN + 8];
  if (address_rank(key) == b->rank && book_key(b, key, pkey, sizeof pkey) && len < 4096 &&
      !memchr(value, '\0', len)) {
    char text[4096];
    memcpy(text, value, len);
    text[len] = '\0';
    pmix_value_t v;
    api.PMIx_Value_load(&v, text, PMIX_STRING);
    pmix_status_t rc = api.PMIx_Put(PMIX_GLOBAL, pkey, &v);
    api.PMIx_Value_destruct(&v);
    if (rc == PMIX_SUCCESS) rc = api.PMIx_Commit();
    if (rc != PMIX_SUCCESS)
      STRATA_LOG(STRATA_LOG_WARN, b->rank, "PMIx: cannot publish %s (%s): peers read the store",
                 key, api.PMIx_Error_string(rc));
  }
  return strata_store_set(b->inner, key, value, len);
}

static int book_get(strata_store *s, const char *key, void **value, size_t *len, double timeout_s) {
  pmix_book *b = (pmix_book *)s;
  int peer = address_rank(key);
  char pkey[PMIX_MAX_KEYLEN + 8];
  if (peer >= 0 && book_key(b, key, pkey, sizeof pkey)) {
    pmix_proc_t proc;
    memset(&proc, 0, sizeof proc);
    memcpy(proc.nspace, self.nspace, sizeof proc.nspace);
    proc.rank = (pmix_rank_t)peer;
    int wait_s = (int)fmax(1.0, fmin(ceil(timeout_s), 1e6));
    pmix_info_t info;
    api.PMIx_Info_load(&info, PMIX_TIMEOUT, &wait_s, PMIX_INT);
    pmix_value_t *v = NULL;
    pmix_status_t rc = api.PMIx_Get(&proc, pkey, &info, 1, &v);
    if (rc == PMIX_SUCCESS && v && v->type == PMIX_STRING && v->data.string) {
      *len = strlen(v->data.string);
      *value = malloc(*len + 1);
      if (*value) memcpy(*value, v->data.string, *len + 1);
      api.PMIx_Value_destruct(v);
      free(v);
      if (!*value) return STRATA_ERR_NO_MEMORY;
      b->fetched++;
      return STRATA_OK;
    }
    if (v) {
      api.PMIx_Value_destruct(v);
      free(v);
    }
    if (!b->fell_back++)
      STRATA_LOG(STRATA_LOG_INFO, b->rank,
                 "PMIx: rank %d's address not fetched through PMIx (%s): read from the store", peer,
                 api.PMIx_Error_string(rc));
  }
  return strata_store_get(b->inner, key, value, len, timeout_s);
}

static int book_set_if_absent(strata_store *s, const char *key, const void *value, size_t len,
                              int *was_set) {
  return strata_store_set_if_absent(((pmix_book *)s)->inner, key, value, len, was_set);
}

static int book_wait(strata_store *s, const char *const *keys, size_t nkeys, double timeout_s) {
  return strata_store_wait(((pmix_book *)s)->inner, keys, nkeys, timeout_s);
}

static int book_add(strata_store *s, const char *key, int64_t delta, int64_t *result) {
  return strata_store_add(((pmix_book *)s)->inner, key, delta, result);
}

static int book_wait_count(strata_store *s, const char *key, int64_t target, int64_t *value,
                           double timeout_s) {
  return strata_store_wait_count(((pmix_book *)s)->inner, key, target, value, timeout_s);
}

static int book_read_counts(strata_store *s, const char *const *keys, size_t nkeys,
                            int64_t *values) {
  return strata_store_read_counts(((pmix_book *)s)->inner, keys, nkeys, values);
}

static int book_local_host(const strata_store *s, char *host, size_t len) {
  return strata_store_local_host(((const pmix_book *)s)->inner, host, len);
}

static void book_close(strata_store *s) {
  pmix_book *b = (pmix_book *)s;
  if (b->fetched || b->fell_back)
    STRATA_LOG(STRATA_LOG_INFO, b->rank,
               "PMIx: %lu peer addresses fetched through PMIx, %lu read from the store", b->fetched,
               b->fell_back);
  free(b);
}

static const strata_store_impl book_impl = {
    .set = book_set,
    .set_if_absent = book_set_if_absent,
    .get = book_get,
    .wait = book_wait,
    .add = book_add,
    .local_host = book_local_host,
    .close = book_close,
    .wait_count = book_wait_count,
    .read_counts = book_read_counts,
};

int strata_pmix_address_book(strata_store *inner, int rank, unsigned round, strata_store **out) {
  *out = NULL;
  if (!inner || rank < 0 || init_status != STRATA_OK) return STRATA_ERR_INVALID_ARG;
  pmix_book *b = calloc(1, sizeof *b);
  if (!b) return STRATA_ERR_NO_MEMORY;
  b->head.impl = &book_impl;
  b->inner = inner;
  b->rank = rank;
  b->round = round;
  *out = (strata_store *)b;
  return STRATA_OK;
}

#endif
