// SPDX-License-Identifier: Apache-2.0
/*
 * strata_kv.h — one-sided transfer of registered memory between processes (KV caches from
 * prefill to decode workers), and a low-latency message lane beside it. docs/kv.md maps every
 * name here to NIXL's.
 *
 * An agent per process registers memory regions, exports its metadata (a blob: its name, where
 * it listens, its regions) and loads its peers' metadata. It then posts READs (remote -> local)
 * and WRITEs (local -> remote) of many {address, length} descriptors at once; a transfer runs in
 * the background and is polled, waited for or cancelled. A WRITE may carry a notification, a
 * short message the target collects with strata_kv_notifs_get once every byte is in place.
 *
 * The target is the authority on its memory: every remote descriptor is checked there against
 * the regions it has registered at that moment (region id, bounds, overflow-safe), and a
 * descriptor that is outside one, or names a region since deregistered, is refused at the target
 * (counted and logged) and fails the initiator's transfer with STRATA_ERR_INVALID_ARG. After
 * strata_kv_deregister returns, no transfer touches that region.
 *
 * Backends (strata_kv_backend): TCP, with each transfer sliced and striped over several
 * authenticated (and, between hosts, sealed) connections; SHM between processes of one host,
 * where the target copies between its region and the initiator's memory with cross-memory
 * attach after checking the descriptor; and UCX (when built with libucx), where the slices
 * travel as UCP active messages that the target checks the same way. Every call that waits takes
 * or inherits a timeout; a peer that dies or falls silent fails its transfers with
 * STRATA_ERR_PEER_LOST or STRATA_ERR_TIMEOUT.
 *
 * Errors are strata_status codes (strata.h). The agent is thread-safe.
 */
#ifndef STRATA_KV_H
#define STRATA_KV_H

#include <stddef.h>
#include <stdint.h>

#include "strata.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_kv_agent strata_kv_agent;
typedef struct strata_kv_xfer strata_kv_xfer;

/* AUTO: SHM towards an agent of this host when cross-memory attach works; towards another host,
 * UCX when both agents have UCX and an RDMA device (/sys/class/infiniband), else TCP. UCX is
 * never chosen automatically over its tcp or shm transports, which strata's own TCP and SHM
 * backends outrun (docs/kv.md). The environment variable STRATA_KV_BACKEND (auto, tcp, shm,
 * ucx) sets the backend of an agent whose config leaves it at AUTO. */
typedef enum strata_kv_backend {
  STRATA_KV_BACKEND_AUTO = 0,
  STRATA_KV_BACKEND_TCP = 1,
  STRATA_KV_BACKEND_SHM = 2,
  STRATA_KV_BACKEND_UCX = 3 /* UCP active messages (libucx); STRATA_ERR_UNSUPPORTED without it */
} strata_kv_backend;

typedef enum strata_kv_op {
  STRATA_KV_READ = 0, /* remote -> local */
  STRATA_KV_WRITE = 1 /* local -> remote */
} strata_kv_op;

/* strata_kv_config.seal: whether connections are sealed (AEAD, as STRATA_ENCRYPT). */
typedef enum strata_kv_seal {
  STRATA_KV_SEAL_AUTO = 0, /* between hosts, not within one (as STRATA_ENCRYPT=auto) */
  STRATA_KV_SEAL_ON = 1,   /* always */
  STRATA_KV_SEAL_OFF = -1  /* never */
} strata_kv_seal;

/* strata_kv_config.lane_realtime: how the lane's threads are scheduled. */
typedef enum strata_kv_lane_sched {
  STRATA_KV_LANE_REALTIME = 0, /* SCHED_FIFO priority 1 where the process may (the default; 1
                                  means the same) */
  STRATA_KV_LANE_PLAIN = -1    /* never: ordinary threads */
} strata_kv_lane_sched;

#define STRATA_KV_NAME_BYTES 64        /* an agent's name, NUL included */
#define STRATA_KV_NOTIF_MAX_BYTES 1024 /* a notification's message */
#define STRATA_KV_LANE_MAX_BYTES 65536 /* a lane request or reply */
#define STRATA_KV_MAX_STREAMS 16       /* connections per peer for bulk bytes */

typedef struct strata_kv_config {
  size_t struct_size;    /* the struct header (strata.h: STRATA_STRUCT_MAGIC): strata_kv_config_init
                            sets it */
  uint32_t struct_magic; /* STRATA_STRUCT_MAGIC */
  uint32_t struct_version;   /* STRATA_VERSION_NUMBER of the header it was built with */
  const char *name;          /* unique among the agents that talk to each other; required */
  const char *secret;        /* the job secret every connection proves (NULL = "": a warning) */
  const char *job_id;        /* with the secret, names the key (NULL = "strata-kv") */
  const char *listen_host;   /* where the responder listens (NULL = "127.0.0.1") */
  int listen_port;           /* 0 = any free port */
  int streams;               /* connections per peer for bulk bytes (0 = 4) */
  size_t slice_bytes;        /* a descriptor is cut into slices this large (0 = 1 MiB) */
  double timeout_s;          /* the longest a peer may stay silent mid-operation (0 = 10 s) */
  strata_kv_backend backend; /* towards every peer (AUTO by default; STRATA_KV_BACKEND then) */
  int bulk_nice;             /* niceness added to bulk threads so the lane runs first (0 = 5;
                                negative = leave them alone) */
  strata_kv_lane_sched lane_realtime; /* REALTIME (default): the lane runs SCHED_FIFO priority 1
                              where the process may (CAP_SYS_NICE, or RLIMIT_RTPRIO >= 1) — the
                              target's serving thread for good, a caller's thread for the duration
                              of its strata_kv_lane_call (an ordinary thread only; its policy is put
                              back) — and quietly at the process's niceness otherwise; so bulk
                              threads and a loaded host do not delay replies. The handler runs
                              real-time too: a slow one delays the host's ordinary threads, and
                              threads it starts inherit SCHED_FIFO. PLAIN: never */
  strata_kv_seal seal;                /* AUTO (default): sealed between hosts, clear within one (as
                                         STRATA_ENCRYPT=auto); ON: always sealed; OFF: never */
} strata_kv_config;

/* Zeroes *cfg (every field at its default) and sets its struct header; a macro over
 * strata_kv_config_init_sized. */
STRATA_API void strata_kv_config_init_sized(strata_kv_config *cfg, size_t struct_size,
                                            int header_version);
#define strata_kv_config_init(cfg) \
  strata_kv_config_init_sized((cfg), sizeof(strata_kv_config), STRATA_VERSION_NUMBER)
/* 1 when this libstrata has the backend (AUTO, TCP and SHM always; UCX when it was built with
 * libucx-dev and libucp.so.0 loads, which it is then, once), 0 otherwise. */
STRATA_API int strata_kv_backend_supported(int backend);

/* Create an agent: binds its responder's listening socket and starts serving (and, for backend
 * UCX, its UCP worker). STRATA_OK, STRATA_ERR_INVALID_ARG (no name, name too long, streams out
 * of 1..STRATA_KV_MAX_STREAMS), STRATA_ERR_CONFIG (STRATA_KV_BACKEND names no backend),
 * STRATA_ERR_UNSUPPORTED (backend UCX in a build without it, or UCX cannot start),
 * STRATA_ERR_SYSTEM (cannot listen), STRATA_ERR_NO_MEMORY. */
STRATA_API int strata_kv_agent_create(const strata_kv_config *cfg, strata_kv_agent **out);
/* Stop serving, close every connection and free the agent. Release its transfers first
 * (strata_kv_xfer_release cancels and waits): a transfer refers to its agent. */
STRATA_API void strata_kv_agent_destroy(strata_kv_agent *agent);
STRATA_API const char *strata_kv_agent_name(const strata_kv_agent *agent);

/* ---- memory ---- */
/* Make [addr, addr+bytes) reachable by peers and usable as local memory of transfers; *region_id
 * gets its id (never 0, never reused by this agent). The caller keeps ownership of the memory
 * and must keep it mapped until strata_kv_deregister returns. Regions may overlap. */
STRATA_API int strata_kv_register(strata_kv_agent *agent, void *addr, size_t bytes,
                                  uint32_t *region_id);
/* Withdraw a region: waits for the transfers touching it at this moment (each slice is bounded
 * by the timeout), then refuses every later access. STRATA_ERR_NOT_FOUND for an unknown id.
 * Peers holding older metadata get STRATA_ERR_INVALID_ARG for it. */
STRATA_API int strata_kv_deregister(strata_kv_agent *agent, uint32_t region_id);

/* ---- metadata ---- */
/* This agent's metadata (name, listening address, host identity, regions and, with UCX, its
 * UCP worker address) as a malloc'd blob
 * the caller frees. Export again after registering more memory. */
STRATA_API int strata_kv_metadata_export(strata_kv_agent *agent, void **blob, size_t *bytes);
/* Load a peer's blob and connect to it (bounded by the timeout). *peer gets a small index for
 * the peer. Loading a blob of a name already loaded replaces that peer (a restarted agent): its
 * old connections close and its pending transfers fail with STRATA_ERR_PEER_LOST.
 * STRATA_ERR_PARSE for a malformed blob, STRATA_ERR_AUTH / _JOB / _VERSION when the handshake
 * fails, STRATA_ERR_PEER_LOST / _TIMEOUT when the peer cannot be reached, STRATA_ERR_UNSUPPORTED
 * when backend SHM was asked and the peer is on another host or cannot reach this process's
 * memory. */
STRATA_API int strata_kv_peer_load(strata_kv_agent *agent, const void *blob, size_t bytes,
                                   int *peer);
/* Close a peer's connections; its pending transfers fail with STRATA_ERR_PEER_LOST. */
STRATA_API int strata_kv_peer_forget(strata_kv_agent *agent, int peer);
/* The backend chosen towards a loaded peer (TCP, SHM or UCX), or a negative status. */
STRATA_API int strata_kv_peer_backend(strata_kv_agent *agent, int peer);
/* The peer's region number `index` (0-based, in its blob's order) as it described it:
 * STRATA_ERR_NOT_FOUND past the last. */
STRATA_API int strata_kv_peer_region(strata_kv_agent *agent, int peer, size_t index,
                                     uint32_t *region_id, uint64_t *addr, uint64_t *bytes);

/* The same through strata's rendezvous store (`strata store`, or any strata_store_server),
 * authenticated with the agent's secret and job id: publish sets "kv/<job id>/<name>"; fetch
 * waits up to timeout_s for a peer's name to appear, then loads it. store_addr may be an etcd
 * cluster, "etcd://HOST:PORT[,HOST:PORT...]" (strata_store_connect_auth). */
STRATA_API int strata_kv_metadata_publish(strata_kv_agent *agent, const char *store_addr,
                                          double timeout_s);
STRATA_API int strata_kv_peer_fetch(strata_kv_agent *agent, const char *store_addr,
                                    const char *peer_name, double timeout_s, int *peer);

/* ---- transfers ---- */
/* A local descriptor: addr is a pointer of this process inside a region this agent registered.
 * A remote descriptor: addr is in the peer's address space, inside its region `region` (the
 * numbers strata_kv_peer_region gives). */
typedef struct strata_kv_desc {
  uint64_t addr;
  uint64_t bytes;
  uint32_t region; /* remote descriptors: the target's region id; ignored for local ones */
  uint32_t reserved;
} strata_kv_desc;

/* Post a transfer of count descriptor pairs: local[i] <-> remote[i] (equal lengths). READ copies
 * remote into local, WRITE local into remote. notif (WRITE only; NULL/0 for none, at most
 * STRATA_KV_NOTIF_MAX_BYTES) reaches the target's notification queue after every byte is in
 * place and before the transfer reports STRATA_OK. Returns STRATA_OK with *xfer running, or
 * STRATA_ERR_INVALID_ARG (lengths differ, a local descriptor outside the local regions,
 * notification too long or on a READ), STRATA_ERR_PEER_LOST (the peer is gone). The
 * descriptors are copied. */
STRATA_API int strata_kv_xfer_post(strata_kv_agent *agent, strata_kv_op op, int peer,
                                   const strata_kv_desc *local, const strata_kv_desc *remote,
                                   size_t count, const void *notif, size_t notif_bytes,
                                   strata_kv_xfer **xfer);
/* STRATA_ERR_IN_PROGRESS while running; then STRATA_OK or why it failed: INVALID_ARG (the target
 * refused a descriptor), PEER_LOST, TIMEOUT, ABORTED (cancelled, or the agent destroyed). */
STRATA_API int strata_kv_xfer_status(strata_kv_xfer *xfer);
/* Wait up to timeout_s (< 0: until done, which the agent's timeout per slice bounds): the
 * outcome as strata_kv_xfer_status gives it, STRATA_ERR_IN_PROGRESS if timeout_s passed first. */
STRATA_API int strata_kv_xfer_wait(strata_kv_xfer *xfer, double timeout_s);
/* Stop handing out the transfer's remaining slices; it ends with STRATA_ERR_ABORTED once the
 * slices already on the wire are back. Bytes already moved stay moved. */
STRATA_API void strata_kv_xfer_cancel(strata_kv_xfer *xfer);
/* Cancel if running, wait for the slices on the wire, free. */
STRATA_API void strata_kv_xfer_release(strata_kv_xfer *xfer);
/* One line on why the transfer failed ("" while running or after success). */
STRATA_API const char *strata_kv_xfer_error(strata_kv_xfer *xfer);

/* A notification (a message without a transfer) to a peer; delivered when this returns OK. */
STRATA_API int strata_kv_notify(strata_kv_agent *agent, int peer, const void *msg, size_t bytes);
/* Take the oldest notification received: copies at most cap bytes of it into msg, its length
 * into *bytes and the sender's name into from (STRATA_KV_NAME_BYTES). Waits up to timeout_s.
 * STRATA_ERR_TIMEOUT when none arrived, STRATA_ERR_INVALID_ARG when cap is too small (the
 * notification stays queued). */
STRATA_API int strata_kv_notifs_get(strata_kv_agent *agent, char *from, void *msg, size_t cap,
                                    size_t *bytes, double timeout_s);

/* What the agent's responder refused: descriptors outside its regions or naming a region it
 * does not have. last_error (may be NULL) gets the latest refusal's message. */
STRATA_API uint64_t strata_kv_agent_refusals(strata_kv_agent *agent, char *last_error, size_t len);

/* ---- the low-latency lane ---- */
/* A request/reply lane with its own connection per peer and its own serving thread, so a
 * request never waits behind bulk bytes. The handler runs on that thread; it writes at most
 * reply_cap (STRATA_KV_LANE_MAX_BYTES) bytes into reply and returns STRATA_OK or an error the
 * caller receives. Set it before peers call (NULL = every request fails with UNSUPPORTED). */
typedef int (*strata_kv_lane_handler)(void *ctx, const char *from, uint32_t tag,
                                      const void *request, size_t request_bytes, void *reply,
                                      size_t reply_cap, size_t *reply_bytes);
STRATA_API void strata_kv_lane_set_handler(strata_kv_agent *agent, strata_kv_lane_handler handler,
                                           void *ctx);
/* Send a request (at most STRATA_KV_LANE_MAX_BYTES) and wait for its reply (timeout_s <= 0: the
 * agent's timeout). Calls to one peer are serialized. The handler's status is returned; OK puts
 * the reply into reply (cap bytes; a longer reply is STRATA_ERR_INVALID_ARG). */
STRATA_API int strata_kv_lane_call(strata_kv_agent *agent, int peer, uint32_t tag,
                                   const void *request, size_t request_bytes, void *reply,
                                   size_t reply_cap, size_t *reply_bytes, double timeout_s);

#ifdef __cplusplus
}
#endif

#endif
