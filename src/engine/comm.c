// SPDX-License-Identifier: Apache-2.0
/*
 * comm.c — creating and destroying communicators.
 *
 * Init is the only place that blocks on other ranks outside a collective: rank 0 (or a standalone
 * `strata store`) serves the rendezvous store, every rank connects to it, then src/net builds the
 * authenticated mesh. Under a PMIx launcher with nothing configured, rank 0 publishes the store's
 * address through PMIx first (boot/pmix.c). Every step is bounded by the configured timeout. A
 * communicator of one rank needs no store and no network.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/pmix.h"
#include "boot/settings.h"
#include "core/core.h"
#include "engine/chunk.h"
#include "engine/engine.h"
#include "engine/query.h"
#include "net/net.h"

/* Pipelining pays where a transfer keeps the wire busy while the CPU reduces (TCP). Between
 * ranks of one host every transfer is a memory copy by a rank's own core (single-copy pulls
 * with the reduction fused in), so cutting a message finer only adds per-message costs: there
 * the chunk is large enough that most messages go in one round.
 *
 * Over sockets to other hosts the chunk is small: 64 KiB, one piece on one stream (tcp.c stripes
 * only from STRATA_TCP_STRIPE_MIN_BYTES), so the ring's window of chunks spreads over the
 * streams, and every chunk's staging and partial sums stay in L2 from the socket copy to the
 * reduction; a larger chunk is cut into stripes, one per stream, and loses both. When some peers
 * share the host (a multi-host job), the shared-memory part would pay for the fine cut, so the
 * chunk stays 1 MiB.
 *
 * Sockets between ranks of one host (STRATA_SHM=0, or shared memory refused) are loopback, not
 * a wire: nothing overlaps a transfer but the kernel's copies on the same cores, and each chunk
 * costs a wake-up and a syscall per side, which with ranks sharing cores is a context switch.
 * There 1 MiB chunks keep those costs small against the copies. Ranks in other network
 * namespaces are other hosts here (net.c, the identity), so they keep the 64 KiB of a wire.
 *
 * WAN peers get larger chunks (RTT measured at connect) so the ring keeps several
 * bandwidth-delay products in flight (src/engine/chunk.c). This is one rank's proposal: the
 * communicator takes the largest of all ranks' (strata_comm_agree, sites.c). `strata bench`
 * with STRATA_CHUNK set to each candidate measures the choice on a given cluster. */
static uint64_t default_chunk_bytes(const strata_comm *comm) {
  enum { TCP_LAN_CHUNK_BYTES = 64 << 10, MIXED_CHUNK_BYTES = 1 << 20, SHM_CHUNK_BYTES = 16 << 20 };
  const strata_net *net = &comm->net;
  if (!net->socket_data_peers) return SHM_CHUNK_BYTES;
  uint64_t lan = net->socket_data_peers == comm->nranks - 1 && net->socket_remote_peers > 0
                     ? TCP_LAN_CHUNK_BYTES
                     : MIXED_CHUNK_BYTES;
  return strata_chunk_for_path(strata_net_data_rtt_us(net), comm->cfg.tcp_link_gbps, lan);
}

static int fail_init(strata_comm *comm, int status) {
  strata_comm_destroy(comm);
  return status;
}

static int check_config(const strata_config *cfg, int has_store_ops) {
  if (cfg->world_size < 1) {
    STRATA_LOG(STRATA_LOG_ERROR, -1,
               "world size unknown: set STRATA_WORLD_SIZE (or run under strata launch, "
               "torchrun, mpirun or srun)");
    return STRATA_ERR_CONFIG;
  }
  if (cfg->rank < 0 || cfg->rank >= cfg->world_size) {
    STRATA_LOG(STRATA_LOG_ERROR, -1, "rank %d is not in 0..%d: set STRATA_RANK", cfg->rank,
               cfg->world_size - 1);
    return STRATA_ERR_CONFIG;
  }
  if (cfg->store_url[0] && !strata_store_is_etcd_url(cfg->store_url)) {
    STRATA_LOG(STRATA_LOG_ERROR, cfg->rank,
               "STRATA_STORE=%.200s: expected etcd://HOST:PORT[,HOST:PORT...] (or unset: strata's "
               "own store at STRATA_ADDR)",
               cfg->store_url);
    return STRATA_ERR_CONFIG;
  }
  if (cfg->world_size > 1 && !cfg->store_addr[0] && !cfg->store_url[0] && !has_store_ops) {
    STRATA_LOG(STRATA_LOG_ERROR, cfg->rank,
               "no rendezvous address: set STRATA_ADDR=host:port (or MASTER_ADDR/MASTER_PORT)");
    return STRATA_ERR_CONFIG;
  }
  if (cfg->tcp_streams < 1 || cfg->tcp_streams > 64) {
    STRATA_LOG(STRATA_LOG_ERROR, cfg->rank, "tcp_streams %d is not in 1..64", cfg->tcp_streams);
    return STRATA_ERR_CONFIG;
  }
  if (!(cfg->timeout_s > 0)) {
    STRATA_LOG(STRATA_LOG_ERROR, cfg->rank, "timeout must be positive seconds");
    return STRATA_ERR_CONFIG;
  }
  if ((unsigned)cfg->algo >= STRATA_ALGO_COUNT) return STRATA_ERR_CONFIG;
  return STRATA_OK;
}

/* store_addr with its port replaced by `port` (the address rank 0's store actually bound). */
static void rebind_store_port(strata_config *cfg, int port) {
  char *colon = strrchr(cfg->store_addr, ':');
  if (!colon || port <= 0) return;
  size_t host_len = (size_t)(colon - cfg->store_addr);
  char addr[sizeof cfg->store_addr];
  snprintf(addr, sizeof addr, "%.*s:%d", (int)host_len, cfg->store_addr, port);
  memcpy(cfg->store_addr, addr, sizeof addr);
}

/* With sites, a rank's chunk proposal saw only the pairs connected at init (rank^1, usually in its
 * own site: pairs connect on first use). A job across sites must pipeline its WAN transfers with
 * the WAN chunk, so once the communicator runs, one small allreduce connects pairs across the
 * sites (any allreduce must cross them), and the proposals, made again, are agreed (the largest
 * wins, as at init). Only multi-site jobs pay it: two allreduces of 8 bytes. */
static int agree_wan_chunk(strata_comm *comm) {
  if (!comm->site_of_rank) return STRATA_OK; /* the same on every rank: all call, or none */
  uint64_t probe = 0, mine = 0, agreed = 0;
  int status = strata_allreduce(comm, &probe, &probe, 1, STRATA_U64, STRATA_SUM);
  if (status == STRATA_OK) {
    /* a rank that was given its chunk keeps proposing it */
    mine = comm->chunk_bytes_asked ? comm->cfg.chunk_bytes : default_chunk_bytes(comm);
    status = strata_allreduce(comm, &mine, &agreed, 1, STRATA_U64, STRATA_MAX);
  }
  if (status == STRATA_OK && agreed > comm->cfg.chunk_bytes) {
    STRATA_LOG(STRATA_LOG_INFO, comm->rank,
               "chunk %llu B: a pair across sites measured a WAN round trip (it was %llu B)",
               (unsigned long long)agreed, (unsigned long long)comm->cfg.chunk_bytes);
    comm->cfg.chunk_bytes = agreed;
  }
  return status;
}

static int connect_world(strata_comm *comm) {
  const strata_config *cfg = &comm->cfg;
  int status;
  if (comm->has_store_ops) {
    char host[256] = "", err[320];
    int port;
    if (cfg->store_addr[0] &&
        strata_store_addr_parse(cfg->store_addr, 1, host, sizeof host, &port, err, sizeof err))
      host[0] = '\0';
    status = strata_store_from_ops(&comm->store_ops, host, &comm->store);
    if (status != STRATA_OK) return status;
    goto open_net;
  }
  /* A store rank 0 serves lives only as long as this communicator, and the job's next one serves
   * another at the same address: ranks connect as members of this job so that a rank done early
   * never talks to the store that is going away (store_wire.h: HELLO). */
  if (!cfg->store_external && !cfg->store_url[0] && comm->rank == 0 && !comm->store_server) {
    status = strata_store_server_start_job_auth(cfg->store_addr, cfg->secret, cfg->job_id,
                                                comm->nranks, &comm->store_server);
    if (status != STRATA_OK) {
      STRATA_LOG(STRATA_LOG_ERROR, comm->rank, "cannot serve the rendezvous store on %s: %s",
                 cfg->store_addr, strata_strerror(status));
      return status;
    }
    if (comm->nranks == 1) /* a world of one may serve on port 0: connect to the port it got */
      rebind_store_port(&comm->cfg, strata_store_server_port(comm->store_server));
  }
  /* an etcd cluster (STRATA_STORE) outlives every rank: nobody serves it, nobody says hello */
  status =
      cfg->store_external || cfg->store_url[0]
          ? strata_store_connect_auth(strata_store_address(cfg), cfg->secret, cfg->job_id,
                                      cfg->timeout_s, &comm->store)
          : strata_store_connect_job_auth(cfg->store_addr, cfg->secret, cfg->job_id, comm->rank,
                                          comm->nranks, cfg->timeout_s, &comm->store);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, comm->rank, "cannot reach the rendezvous store at %s: %s",
               strata_store_address(cfg), strata_strerror(status));
    return status;
  }
open_net:;
  if (comm->pmix_world) {
    status = strata_pmix_address_book(comm->store, comm->rank, comm->pmix_round, &comm->addr_store);
    if (status != STRATA_OK) return status;
  }
  char err[512] = "";
  status = strata_net_open(cfg, comm->rank, comm->nranks,
                           comm->addr_store ? comm->addr_store : comm->store, &comm->net, err,
                           sizeof err);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, comm->rank, "%s", err[0] ? err : strata_strerror(status));
    return status;
  }
  comm->have_net = 1;
  int local_ranks = 1;
  for (int peer = 0; peer < comm->nranks; peer++)
    if (peer != comm->rank) local_ranks += comm->net.is_local && comm->net.is_local[peer];
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  comm->oversubscribed = cores > 0 && local_ranks > cores;
  return STRATA_OK;
}

static int comm_init(const strata_config *cfg, const strata_store_ops *store_ops,
                     strata_comm **out) {
  if (!cfg || !out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  strata_log_set_level(cfg->log_level);
  if (store_ops && (!store_ops->set || !store_ops->get || !store_ops->add)) {
    STRATA_LOG(STRATA_LOG_ERROR, cfg->rank, "a store needs set, get and add callbacks");
    return STRATA_ERR_INVALID_ARG;
  }
  /* Started by mpirun or srun with nothing configured: PMIx names the rank, the world size and
   * rank 0's store (boot/pmix.c), which rank 0 starts there. */
  strata_config pmix_cfg;
  strata_store_server *pmix_store = NULL;
  unsigned pmix_round = 0;
  int status = STRATA_OK;
  if (!store_ops && !cfg->store_addr[0] && !cfg->join && strata_pmix_launched()) {
    pmix_cfg = *cfg;
    status = strata_pmix_rendezvous(&pmix_cfg, &pmix_store, &pmix_round);
    if (status != STRATA_OK) return status;
    cfg = &pmix_cfg;
  }
  status = check_config(cfg, store_ops != NULL);
  strata_comm *comm = status == STRATA_OK ? calloc(1, sizeof *comm) : NULL;
  if (!comm) {
    strata_store_server_stop(pmix_store);
    return status == STRATA_OK ? STRATA_ERR_NO_MEMORY : status;
  }
  comm->store_server = pmix_store;
  comm->pmix_world = cfg == &pmix_cfg;
  comm->pmix_round = pmix_round;
  comm->cfg = *cfg;
  snprintf(comm->base_job, sizeof comm->base_job, "%s", cfg->job_id); /* epoch 0 */
  comm->chunk_bytes_asked = cfg->chunk_bytes;
  if (store_ops) {
    comm->has_store_ops = 1;
    comm->store_ops = *store_ops;
  }
  comm->rank = cfg->rank;
  comm->nranks = cfg->world_size;
  pthread_mutex_init(&comm->lock, NULL);
  pthread_mutex_init(&comm->scratch_lock, NULL);
  pthread_cond_init(&comm->cond, NULL);
  size_t n = (size_t)comm->nranks;
  comm->p2p_send_seq = calloc(n, sizeof(uint64_t));
  comm->p2p_recv_seq = calloc(n, sizeof(uint64_t));
  comm->send_queues = calloc(n, sizeof(strata_post_queue));
  comm->recv_queues = calloc(n, sizeof(strata_post_queue));
  if (!comm->p2p_send_seq || !comm->p2p_recv_seq || !comm->send_queues || !comm->recv_queues)
    return fail_init(comm, STRATA_ERR_NO_MEMORY);
  if (comm->nranks > 1) status = connect_world(comm);
  if (status == STRATA_OK && !comm->cfg.chunk_bytes)
    comm->cfg.chunk_bytes = default_chunk_bytes(comm);
  if (status == STRATA_OK) status = strata_comm_agree_sites(comm); /* the chunk too: sites.c */
  if (status != STRATA_OK) return fail_init(comm, status);
  if (pthread_create(&comm->progress_thread, NULL, strata_engine_thread_main, comm) != 0)
    return fail_init(comm, STRATA_ERR_SYSTEM);
  comm->thread_started = 1;
  status = agree_wan_chunk(comm);
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, comm->rank, "cannot agree the chunk across sites: %s",
               strata_strerror(status));
    strata_comm_destroy(comm);
    return status;
  }
  STRATA_LOG(STRATA_LOG_INFO, comm->rank, "rank %d of %d ready (job %s)", comm->rank, comm->nranks,
             cfg->job_id);
  *out = comm;
  return STRATA_OK;
}

int strata_comm_create(const strata_config *cfg, const strata_store_ops *store_ops,
                       strata_comm **out) {
  return comm_init(cfg, store_ops, out);
}

/* The caller's configuration, read at this library's size (boot/settings.h, core/abi.h). */
static int comm_init_user(const strata_config *user, const strata_store_ops *store,
                          strata_comm **out) {
  if (!user || !out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  strata_config cfg;
  int status = strata_config_import(user, &cfg, NULL, 0);
  if (status != STRATA_OK) return status;
  if (cfg.join) return strata_comm_join(&cfg, store, out); /* elastic.c */
  return comm_init(&cfg, store, out);
}

int strata_comm_init(const strata_config *cfg, strata_comm **out) {
  return comm_init_user(cfg, NULL, out);
}

int strata_comm_init_store(const strata_config *cfg, const strata_store_ops *store,
                           strata_comm **out) {
  if (!store) return STRATA_ERR_INVALID_ARG;
  return comm_init_user(cfg, store, out);
}

/* ---- split ---- */

/* The job id of one split's group: every member derives the same, and no two groups or splits
 * of a job share one, so their store keys (all under the job id) and handshakes never mix. */
static void split_job_id(const strata_comm *comm, uint64_t split, int color, char *out,
                         size_t len) {
  uint64_t h = 1469598103934665603ull;
  char text[128];
  int n =
      snprintf(text, sizeof text, "%s/%llu/%d", comm->cfg.job_id, (unsigned long long)split, color);
  for (int i = 0; i < n && i < (int)sizeof text; i++)
    h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
  snprintf(out, len, "%.40s~%016llx", comm->cfg.job_id, (unsigned long long)h);
}

int strata_comm_split(strata_comm *comm, int color, int key, strata_comm **out) {
  if (!comm || !out || color < STRATA_UNDEFINED) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  int n = comm->nranks;
  int32_t mine[2] = {color, key};
  int32_t *all = malloc(sizeof(int32_t) * 2 * (size_t)n);
  if (!all) return STRATA_ERR_NO_MEMORY;
  int status = strata_allgather(comm, mine, all, 2, STRATA_I32);
  uint64_t split = comm->splits++;
  if (status != STRATA_OK || color == STRATA_UNDEFINED) {
    free(all);
    return status;
  }
  /* New rank = members of my color before me in (key, old rank) order. */
  int size = 0, rank = 0;
  for (int r = 0; r < n; r++) {
    if (all[2 * r] != color) continue;
    size++;
    int32_t k = all[2 * r + 1];
    if (k < key || (k == key && r < comm->rank)) rank++;
  }
  free(all);
  strata_config cfg = comm->cfg;
  cfg.rank = rank;
  cfg.world_size = size;
  cfg.chunk_bytes = comm->chunk_bytes_asked;
  split_job_id(comm, split, color, cfg.job_id, sizeof cfg.job_id);
  if (!comm->has_store_ops) cfg.store_external = 1; /* the parent's store serves the split */
  status = comm_init(&cfg, comm->has_store_ops ? &comm->store_ops : NULL, out);
  if (status != STRATA_OK)
    STRATA_LOG(STRATA_LOG_ERROR, comm->rank, "split (color %d): cannot create the group: %s", color,
               strata_strerror(status));
  return status;
}

int strata_comm_init_env(strata_comm **out) {
  if (!out) return STRATA_ERR_INVALID_ARG;
  strata_config cfg;
  strata_config_init(&cfg);
  char err[256] = "";
  int status = strata_config_from_env(&cfg, err, sizeof err);
  if (status != STRATA_OK) {
    fprintf(stderr, "strata: %s\n", err[0] ? err : strata_strerror(status));
    return status;
  }
  return strata_comm_init(&cfg, out);
}

/* Pending operations fail at once instead of being waited for: a peer that is alive but never
 * joins them would hold destroy for as long as it lives. Their peers are told, as by
 * strata_comm_abort, and their requests stay valid, holding the communicator's memory but none
 * of its connections or threads (strata_comm_release). */
int strata_comm_destroy(strata_comm *comm) {
  if (!comm) return STRATA_OK;
  pthread_mutex_lock(&comm->lock);
  if (comm->active_head) {
    STRATA_LOG(STRATA_LOG_WARN, comm->rank,
               "destroyed with %u operations pending: they fail with STRATA_ERR_ABORTED",
               comm->active_count);
    strata_engine_fail(comm, STRATA_ERR_ABORTED, 1);
  }
  comm->thread_stop = 1;
  pthread_cond_broadcast(&comm->cond);
  pthread_mutex_unlock(&comm->lock);
  if (comm->thread_started) pthread_join(comm->progress_thread, NULL);
  if (comm->have_net) strata_net_close(&comm->net);
  if (comm->addr_store) strata_store_close(comm->addr_store);
  if (comm->store) strata_store_close(comm->store);
  if (comm->store_server) strata_store_server_stop(comm->store_server);
  pthread_cond_destroy(&comm->cond);
  pthread_mutex_destroy(&comm->lock);
  free(comm->site_of_rank);
  free(comm->failed_ranks);
  free(comm->last_input);
  free(comm->p2p_send_seq);
  free(comm->p2p_recv_seq);
  free(comm->send_queues);
  free(comm->recv_queues);
  strata_comm_release(comm);
  return STRATA_OK;
}

/* The last hold frees what a request still touches when it is completed: the spare it may
 * become (api.c, operation_retire) and the scratch cache its scratch goes back to. */
void strata_comm_release(strata_comm *comm) {
  if (atomic_fetch_sub(&comm->requests_held, 1) > 0) return;
  strata_spare_release(comm);
  strata_scratch_release(comm);
  pthread_mutex_destroy(&comm->scratch_lock);
  free(comm);
}

int strata_comm_abort(strata_comm *comm) {
  if (!comm) return STRATA_ERR_INVALID_ARG;
  pthread_mutex_lock(&comm->lock);
  strata_engine_fail(comm, STRATA_ERR_ABORTED, 1);
  pthread_mutex_unlock(&comm->lock);
  return STRATA_OK;
}

int strata_comm_rank(const strata_comm *comm) {
  return comm ? comm->rank : -1;
}
int strata_comm_size(const strata_comm *comm) {
  return comm ? comm->nranks : -1;
}
const strata_config *strata_comm_config(const strata_comm *comm) {
  return comm ? &comm->cfg : NULL;
}
int strata_comm_error(const strata_comm *comm) {
  return comm ? atomic_load(&((strata_comm *)comm)->error) : STRATA_ERR_INVALID_ARG;
}

unsigned strata_comm_wan_rtt_us(const strata_comm *comm) {
  unsigned rtt_us = comm && comm->have_net ? strata_net_data_rtt_us(&comm->net) : 0;
  return rtt_us >= STRATA_NET_WAN_RTT_US ? rtt_us : 0;
}

const char *strata_comm_transport_name(const strata_comm *comm, int peer) {
  if (!comm || peer < 0 || peer >= comm->nranks) return "?";
  if (peer == comm->rank) return "self";
  strata_transport *t = comm->have_net ? comm->net.peer[peer] : NULL;
  return t ? t->ops->name : "?";
}
