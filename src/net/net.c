// SPDX-License-Identifier: Apache-2.0
/*
 * net.c — connecting a communicator: TCP to the peers it talks to (tcp_mesh.c connects each pair
 * on demand), shared memory to the peers on our host, and the choice of transport per peer.
 *
 * The TCP transport is always opened (for nranks > 1): it listens, publishes its address and
 * connects this rank's first pair before open returns; every other pair it connects when first
 * used, and a peer whose data goes through shared memory only if something asks (shm watches its
 * peers' processes itself). Locality is decided from host identities every rank publishes in the
 * store under "<job>/net/<k>" (k counting this rank's opens in the job, so two communicators of
 * one job never mix) before it opens TCP, filed by host so that a rank reads only its own host's
 * (read_identities). The identity is the
 * hostname, the boot id and the inodes of the network, mount and pid namespaces: two containers
 * on one machine are NOT local (their /dev/shm and pids are not shared), two ranks on one host
 * are. Shared memory is used with a peer only when both sides enabled it, so the decision is the
 * same on both ends of every pair — a one-sided choice would leave one side waiting forever.
 *
 * With STRATA_LOG=info each rank prints one line per peer, like NCCL_DEBUG=INFO:
 *     rank 0 -> rank 1 via shm
 *     rank 0 -> rank 2 via tcp (4 streams, 10.0.0.2:40123)
 *     rank 0 -> rank 5 via tcp (4 streams, connected when first used)
 */
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "core/store.h"
#include "net/net.h"
#include "net/shm.h"
#include "net/tcp.h"

enum { NET_IDENTITY_BYTES = 512 };

static unsigned long long namespace_inode(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

int strata_net_host_identity(char *out, size_t len) {
  char host[256] = "?", boot[64] = "?";
  if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "?");
  host[sizeof host - 1] = '\0';
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) strcpy(boot, "?");
    boot[strcspn(boot, "\n")] = '\0';
    fclose(f);
  }
  snprintf(out, len, "%s|%s|net:%llu|mnt:%llu|pid:%llu", host, boot,
           namespace_inode("/proc/self/ns/net"), namespace_inode("/proc/self/ns/mnt"),
           namespace_inode("/proc/self/ns/pid"));
  return STRATA_OK;
}

static int net_error(char *err, size_t err_len, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int net_error(char *err, size_t err_len, int status, const char *fmt, ...) {
  if (err && err_len) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(err, err_len, fmt, args);
    va_end(args);
  }
  return status;
}

/* "<job>/net/<k>": k = how many times this rank opened a communicator's network in this job. */
static int choose_prefix(const strata_config *cfg, int rank, strata_store *store, char *prefix,
                         size_t len, char *err, size_t err_len) {
  char key[128];
  snprintf(key, sizeof key, "%s/net/opens/%d", cfg->job_id, rank);
  int64_t opens = 0;
  int status = strata_store_add(store, key, 1, &opens);
  if (status != STRATA_OK)
    return net_error(err, err_len, status, "rank %d: the rendezvous store failed: %s", rank,
                     strata_strerror(status));
  snprintf(prefix, len, "%s/net/%lld", cfg->job_id, (long long)(opens - 1));
  return STRATA_OK;
}

/* Locality costs each rank O(ranks on its host) store requests, not one per rank of the job: a
 * rank files its identity under its host's key, "<prefix>/hosts/<h>/<i>" = "<rank> shm=<0|1>
 * <identity>" (h a hash of the identity, i its place among that host's ranks from an add on
 * "<prefix>/hosts/<h>"), and later counts itself in "<prefix>/joined" (wait_joined). Once every
 * rank has (one wait on that counter), only its own host's ranks are read (read_identities); a rank
 * filed elsewhere is not local. The whole identity travels in the entry, so two hosts whose hashes
 * met would still differ. */
typedef struct net_locality {
  char prefix[128];
  char identity[NET_IDENTITY_BYTES]; /* "shm=<0|1> <identity>" */
  char host_key[192];
  int64_t place; /* 1-based, among this host's ranks */
} net_locality;

static int publish_identity(const strata_config *cfg, int rank, strata_store *store,
                            net_locality *loc, char *err, size_t err_len) {
  char mine[NET_IDENTITY_BYTES - 8];
  strata_net_host_identity(mine, sizeof mine);
  snprintf(loc->identity, sizeof loc->identity, "shm=%d %s", cfg->shm_enabled ? 1 : 0, mine);
  unsigned char hash[16];
  char hex[sizeof hash * 2 + 1];
  if (sodium_init() < 0)
    return net_error(err, err_len, STRATA_ERR_SYSTEM, "rank %d: libsodium failed to start", rank);
  crypto_generichash(hash, sizeof hash, (const unsigned char *)mine, strlen(mine), NULL, 0);
  sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
  snprintf(loc->host_key, sizeof loc->host_key, "%s/hosts/%s", loc->prefix, hex);
  int status = strata_store_add(store, loc->host_key, 1, &loc->place);
  if (status == STRATA_OK) {
    char key[240], entry[NET_IDENTITY_BYTES + 16];
    snprintf(key, sizeof key, "%s/%lld", loc->host_key, (long long)loc->place - 1);
    snprintf(entry, sizeof entry, "%d %s", rank, loc->identity);
    status = strata_store_set(store, key, entry, strlen(entry));
  }
  if (status != STRATA_OK)
    return net_error(err, err_len, status, "rank %d: cannot publish its host identity: %s", rank,
                     strata_strerror(status));
  return STRATA_OK;
}

/* Counts this rank in "<prefix>/joined" once its host identity is filed and its TCP address
 * published (TCP is open), then waits for every rank to be: so the host entries are all there,
 * and a peer's address is in the store the first time it is looked up after open (a lookup that
 * missed would be repeated while the peer starts). The wait comes after TCP is open, so a rank's
 * listener takes connections while slower ranks start. */
static int wait_joined(const strata_config *cfg, const strata_net *net, strata_store *store,
                       const net_locality *loc, char *err, size_t err_len) {
  char key[192];
  snprintf(key, sizeof key, "%s/joined", loc->prefix);
  int status = strata_store_add(store, key, 1, NULL);
  if (status == STRATA_OK)
    status = strata_store_wait_count(store, key, net->nranks, NULL, cfg->timeout_s);
  if (status != STRATA_OK)
    return net_error(err, err_len, status,
                     "rank %d: not every rank published its host identity within %.1f s: %s",
                     net->rank, cfg->timeout_s, strata_strerror(status));
  return STRATA_OK;
}

/* The ranks of this host, "<rank>:<shm> ..." (shm 0 or 1), into is_local / shm_with. */
static int host_ranks_parse(const strata_config *cfg, strata_net *net, const char *text,
                            int *shm_with) {
  const char *p = text;
  while (*p) {
    char *end = NULL;
    long q = strtol(p, &end, 10);
    if (end == p || *end != ':' || (end[1] != '0' && end[1] != '1') || q < 0 || q >= net->nranks)
      return STRATA_ERR_PROTOCOL;
    if (q != net->rank) {
      net->is_local[q] = 1;
      shm_with[q] = cfg->shm_enabled && end[1] == '1';
    }
    p = end + 2;
    while (*p == ' ') p++;
  }
  return STRATA_OK;
}

/* The first rank filed under this host (place 1) reads the host's entries and publishes the
 * list of its ranks at "<host key>/all"; the others read that one value. So each rank costs the
 * store O(1) requests and the host's first O(ranks on the host). Every rank's entry is filed
 * before anyone reads (wait_joined). */
static int read_identities(const strata_config *cfg, strata_net *net, strata_store *store,
                           const net_locality *loc, int *shm_with, char *err, size_t err_len) {
  char key[240], all_key[240];
  snprintf(all_key, sizeof all_key, "%s/all", loc->host_key);
  int status = STRATA_OK;
  if (loc->place != 1) {
    void *value = NULL;
    size_t len = 0;
    status = strata_store_get(store, all_key, &value, &len, cfg->timeout_s);
    char *text = status == STRATA_OK ? malloc(len + 1) : NULL;
    if (status == STRATA_OK && !text) status = STRATA_ERR_NO_MEMORY;
    if (text) {
      memcpy(text, value, len);
      text[len] = '\0';
      status = text[0] == '!' ? STRATA_ERR_PEER_LOST : host_ranks_parse(cfg, net, text, shm_with);
    }
    free(text);
    free(value);
    if (status != STRATA_OK)
      return net_error(err, err_len, status, "rank %d: cannot read its host's ranks (%s): %s",
                       net->rank, all_key, strata_strerror(status));
    return STRATA_OK;
  }
  const char *host_key = loc->host_key;
  int64_t here = 0;
  status = strata_store_read_counts(store, &host_key, 1, &here);
  size_t cap = 16 + (size_t)(here > 0 && here <= net->nranks ? here : 1) * 16, used = 0;
  char *list = status == STRATA_OK ? malloc(cap) : NULL;
  if (status == STRATA_OK && !list) status = STRATA_ERR_NO_MEMORY;
  if (list) used = (size_t)snprintf(list, cap, "%d:%d", net->rank, cfg->shm_enabled ? 1 : 0);
  const char *my_identity = strchr(loc->identity, ' ') + 1;
  for (int64_t i = 1; status == STRATA_OK && i < here && i <= net->nranks; i++) {
    snprintf(key, sizeof key, "%s/%lld", host_key, (long long)i);
    void *value = NULL;
    size_t len = 0;
    status = strata_store_get(store, key, &value, &len, cfg->timeout_s);
    if (status != STRATA_OK) break;
    char entry[NET_IDENTITY_BYTES + 16];
    snprintf(entry, sizeof entry, "%.*s", (int)(len < sizeof entry ? len : sizeof entry - 1),
             (const char *)value);
    free(value);
    char *end = NULL;
    long q = strtol(entry, &end, 10);
    const char *theirs = end && *end == ' ' ? end + 1 : NULL; /* "shm=<0|1> <identity>" */
    const char *space = theirs ? strchr(theirs, ' ') : NULL;
    if (!space || end == entry || q < 0 || q >= net->nranks || q == net->rank) {
      status = STRATA_ERR_PROTOCOL;
      break;
    }
    if (strcmp(space + 1, my_identity) != 0) continue; /* another host whose hash met ours */
    used += (size_t)snprintf(list + used, cap - used, " %ld:%d", q,
                             strncmp(theirs, "shm=1", 5) == 0 ? 1 : 0);
  }
  if (status == STRATA_OK) status = host_ranks_parse(cfg, net, list, shm_with);
  /* published even when it failed, so the host's other ranks fail at once, not at the timeout */
  const char *published = status == STRATA_OK ? list : "!";
  int set = strata_store_set(store, all_key, published, strlen(published));
  if (status == STRATA_OK) status = set;
  free(list);
  if (status != STRATA_OK)
    return net_error(err, err_len, status, "rank %d: cannot read its host's ranks: %s", net->rank,
                     strata_strerror(status));
  return STRATA_OK;
}

static int log_enabled(const strata_config *cfg) {
  return cfg->log_level >= STRATA_LOG_INFO || strata_log_get_level() >= STRATA_LOG_INFO;
}

static void log_routes(const strata_config *cfg, const strata_net *net) {
  if (!log_enabled(cfg)) return;
  for (int q = 0; q < net->nranks; q++) {
    if (q == net->rank) continue;
    if (net->peer[q] == net->shm) {
      strata_log_write(STRATA_LOG_INFO, net->rank, "rank %d -> rank %d via shm", net->rank, q);
      continue;
    }
    const char *address = strata_tcp_peer_address(net->tcp, q);
    if (!strcmp(address, "?")) address = "connected when first used";
    strata_log_write(STRATA_LOG_INFO, net->rank, "rank %d -> rank %d via tcp (%d stream%s, %s)%s",
                     net->rank, q, cfg->tcp_streams, cfg->tcp_streams == 1 ? "" : "s", address,
                     net->is_local[q] ? " [same host]" : "");
  }
}

/* The transports the engine drives, and how many peers' data crosses a socket. */
static void count_routes(strata_net *net) {
  net->ntransports = 0;
  if (net->tcp) net->all[net->ntransports++] = net->tcp;
  if (net->shm) net->all[net->ntransports++] = net->shm;
  for (int q = 0; q < net->nranks; q++) {
    if (q == net->rank || net->peer[q] != net->tcp) continue;
    net->socket_data_peers++;
    net->socket_remote_peers += !net->is_local[q];
  }
}

static int open_transports(const strata_config *cfg, strata_net *net, strata_store *store,
                           char *err, size_t err_len) {
  net_locality loc;
  memset(&loc, 0, sizeof loc);
  int status = choose_prefix(cfg, net->rank, store, loc.prefix, sizeof loc.prefix, err, err_len);
  if (status == STRATA_OK) status = publish_identity(cfg, net->rank, store, &loc, err, err_len);
  if (status == STRATA_OK)
    status = strata_tcp_open(cfg, net->rank, net->nranks, store, &net->tcp, err, err_len);
  if (status == STRATA_OK) status = wait_joined(cfg, net, store, &loc, err, err_len);
  if (status != STRATA_OK) return status;
  int *shm_with = calloc((size_t)net->nranks, sizeof *shm_with);
  if (!shm_with) return net_error(err, err_len, STRATA_ERR_NO_MEMORY, "out of memory");
  status = read_identities(cfg, net, store, &loc, shm_with, err, err_len);
  int any_shm = 0;
  for (int q = 0; q < net->nranks; q++) any_shm |= shm_with[q];
  if (status == STRATA_OK && any_shm)
    status = strata_shm_open(cfg, net->rank, net->nranks, store, shm_with, &net->shm, err, err_len);
  for (int q = 0; status == STRATA_OK && q < net->nranks; q++) {
    if (q == net->rank) continue;
    net->peer[q] = shm_with[q] && net->shm ? net->shm : net->tcp;
    if (net->peer[q] != net->tcp) strata_tcp_set_control_only(net->tcp, q);
  }
  free(shm_with);
  if (status == STRATA_OK) count_routes(net);
  return status;
}

int strata_net_open(const strata_config *cfg, int rank, int nranks, strata_store *store,
                    strata_net *out, char *err, size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (!out) return STRATA_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  if (!cfg || nranks < 1 || rank < 0 || rank >= nranks || (nranks > 1 && !store))
    return net_error(err, err_len, STRATA_ERR_INVALID_ARG, "strata_net_open: invalid arguments");
  out->rank = rank;
  out->nranks = nranks;
  out->peer = calloc((size_t)nranks, sizeof *out->peer);
  out->is_local = calloc((size_t)nranks, sizeof *out->is_local);
  if (!out->peer || !out->is_local) {
    strata_net_close(out);
    return net_error(err, err_len, STRATA_ERR_NO_MEMORY, "out of memory");
  }
  out->is_local[rank] = 1;
  if (nranks == 1) return STRATA_OK;
  int status = open_transports(cfg, out, store, err, err_len);
  if (status != STRATA_OK) {
    strata_net_close(out);
    return status;
  }
  log_routes(cfg, out);
  return STRATA_OK;
}

unsigned strata_net_data_rtt_us(const strata_net *net) {
  uint64_t rtt_us = 0;
  for (int i = 0; net && i < net->ntransports; i++) {
    uint64_t v = strata_transport_ask(net->all[i], STRATA_TRANSPORT_DATA_RTT_US, -1);
    if (v > rtt_us) rtt_us = v;
  }
  return (unsigned)rtt_us;
}

void strata_net_wait(strata_net *net, int timeout_ms) {
  strata_transport *shm = net->shm, *tcp = net->tcp;
  if (shm && !net->socket_data_peers) {
    shm->ops->wait(shm, timeout_ms);
  } else if (shm) {
    shm->ops->wait(shm, 0);
    tcp->ops->wait(tcp, 0);
  } else if (tcp) {
    tcp->ops->wait(tcp, 1); /* poll() wakes as soon as data arrives */
  }
}

void strata_net_flush(strata_net *net, double seconds) {
  if (!net->tcp) return;
  double until = strata_now_s() + seconds;
  while (strata_now_s() < until) {
    int failed_peer;
    net->tcp->ops->progress(net->tcp, &failed_peer);
    net->tcp->ops->wait(net->tcp, 1);
  }
}

void strata_net_abandon(strata_net *net) {
  if (net && net->tcp) strata_tcp_abandon(net->tcp);
}

void strata_net_keepalive(strata_net *net) {
  if (net && net->tcp) strata_tcp_keepalive(net->tcp);
}

int strata_net_peer_alive_seen(const strata_net *net, int peer) {
  if (!net || peer < 0 || peer >= net->nranks) return 0;
  if (peer == net->rank) return 1;
  return net->tcp && strata_tcp_peer_alive(net->tcp, peer);
}

int strata_net_peer_alive(const strata_net *net, int peer) {
  if (!net || peer < 0 || peer >= net->nranks) return 0;
  if (peer == net->rank) return 1;
  if (!net->tcp) return 0;
  strata_tcp_watch(net->tcp, peer); /* a peer never talked to is connected to be judged */
  return strata_tcp_peer_alive(net->tcp, peer);
}

void strata_net_close(strata_net *net) {
  if (!net) return;
  if (net->shm) net->shm->ops->destroy(net->shm);
  if (net->tcp) net->tcp->ops->destroy(net->tcp);
  free(net->peer);
  free(net->is_local);
  memset(net, 0, sizeof *net);
}
