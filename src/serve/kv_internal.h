// SPDX-License-Identifier: Apache-2.0
/*
 * kv_internal.h — the agent of strata_kv.h, shared by serve/kv_*.c:
 *   kv_conn.c       framed, optionally sealed, deadline-bounded I/O and the dialing side of a
 *                   connection (handshake + HELLO)
 *   kv_agent.c      the agent, its regions, metadata blobs, notifications, the store
 *   kv_responder.c  the target: accepting, authenticating and serving connections
 *   kv_xfer.c       the initiator: peers, their stream threads, transfers, the lane's calls
 *   kv_ucx.c        the UCX backend: the agent's UCP worker, its thread, slices as active
 *                   messages on both sides
 *
 * Locking: one mutex per agent (agent->lock) guards regions, peers, queues, transfers and
 * notifications; agent->cond is broadcast on every change anyone may wait for. No I/O is done
 * with the lock held. The UCX backend has its own lock (kv_ucx.c), taken after the agent's when
 * both are held, never before.
 */
#ifndef STRATA_SERVE_KV_INTERNAL_H
#define STRATA_SERVE_KV_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "net/handshake.h"
#include "net/seal.h"
#include "serve/kv_wire.h"
#include "strata_kv.h"

#define KV_MAX_PEERS 64
#define KV_MAX_RESPONDER_CONNS 256
#define KV_HANDSHAKE_STREAMS 64 /* announced by both sides; stream 63 is the lane */
#define KV_LANE_STREAM 63
#define KV_IDENTITY_BYTES 512
#define KV_BLOB_UCX_RDMA 1u /* blob flag: the agent runs UCX on a host with an RDMA device */
/* A stream sends a batch of at most this many consecutive slices before reading their replies
 * (kv_xfer.c; over SHM, KV_WIRE_MAX_SHM_SLICES); the UCX backend sizes its table of slices in
 * flight by it. */
#define KV_BATCH_SLICES 16
/* Over UCX a batch may carry this many slices' worth of bytes (a stream's bytes in flight). */
#define KV_UCX_BATCH_SLICES_OF_BYTES 4
/* Over SHM a batch is one frame of at most KV_WIRE_MAX_SHM_SLICES slices (kv_wire.h) and this
 * many slices' worth of bytes, which the target copies with as few system calls as it can. */
#define KV_SHM_BATCH_SLICES_OF_BYTES 4
/* While the agent's lane is in use, the most bytes one bulk send, recv or cross-memory copy
 * moves. On a kernel without full preemption (PREEMPT_NONE or VOLUNTARY, the usual server
 * build) the copy inside one such call runs to its end on its core, and over loopback a send
 * also delivers its segments to the receiving socket from within the same call: a lane thread
 * woken on that core waits for all of it, whatever its priority. Cut calls bound that wait but
 * cost bulk CPU time (more, smaller calls), so they are cut only for KV_LANE_HOT_NS after the
 * agent last carried a lane call, as initiator or target; otherwise a call moves what it is given
 * (a slice, or an SHM batch of slices at most). The size is STRATA_KV_SYSCALL_BYTES, 64 KiB by
 * default (boot/settings.c; tuning). */
#define KV_LANE_HOT_NS 1000000000LL
/* A lane caller waits for its reply by polling its socket for up to this long before it sleeps:
 * a reply that comes back within it needs no wakeup of the caller's thread (a wakeup costs a
 * virtual CPU's exit from idle, or a wait for a core a bulk thread holds in the kernel). */
#define KV_LANE_SPIN_US 200
size_t kv_syscall_bytes(void);

typedef struct kv_conn {
  int fd;
  int sealed;
  strata_seal tx, rx;
  uint8_t *scratch; /* sealing buffer for outgoing parts */
  size_t scratch_cap;
  double timeout_s;
  const atomic_int *stop;       /* nonzero: give up waiting (agent destroyed, peer forgotten) */
  const atomic_llong *lane_hot; /* the agent's lane_hot_until (NULL: calls are never cut) */
  int spin_us; /* a wait for bytes mid-frame first polls the socket this long (the lane's caller) */
} kv_conn;

void kv_conn_init(kv_conn *c, int fd, double timeout_s, const atomic_int *stop);
/* The most bytes the next system call on c may move: kv_syscall_bytes() while the agent's lane is
 * hot, SIZE_MAX otherwise. */
size_t kv_conn_call_bytes(const kv_conn *c);
/* After a successful handshake: switch on sealing as agreed. */
int kv_conn_keys(kv_conn *c, const strata_seal_keys *keys);
void kv_conn_close(kv_conn *c);
/* One part (header, aux or payload) each; STRATA_OK, PEER_LOST, TIMEOUT, PROTOCOL (a sealed part
 * failed to open), NO_MEMORY. */
int kv_conn_send(kv_conn *c, const void *buf, size_t len);
int kv_conn_recv(kv_conn *c, void *buf, size_t len);
int kv_conn_discard(kv_conn *c, size_t len);
/* A header; idle = 1 waits without a deadline for its first byte (a server between requests). */
int kv_conn_send_header(kv_conn *c, const kv_wire_header *h);
int kv_conn_recv_header(kv_conn *c, kv_wire_header *h, int idle);
/* A header and its aux part in one send (the same parts, sealed the same way, as
 * kv_conn_send_header then kv_conn_send): a frame the peer reads without waking twice. */
int kv_conn_send_frame(kv_conn *c, const kv_wire_header *h, const void *aux, size_t aux_bytes);
/* Drive a handshake on c->fd to its end within c->timeout_s. */
int kv_conn_handshake(kv_conn *c, strata_handshake *hs, char *err, size_t err_len);

typedef struct kv_region {
  uint32_t id;
  uint64_t base, bytes;
  int active;
  int users; /* slices copying to or from it now */
} kv_region;

typedef struct kv_notif {
  struct kv_notif *next;
  char from[STRATA_KV_NAME_BYTES];
  size_t bytes;
  uint8_t msg[];
} kv_notif;

typedef struct kv_remote_region {
  uint32_t id;
  uint64_t base, bytes;
} kv_remote_region;

typedef struct kv_slice {
  uint64_t local, remote, bytes;
  uint32_t region;
} kv_slice;

typedef struct kv_peer kv_peer;
typedef struct kv_ucx kv_ucx;
typedef struct kv_ucx_link kv_ucx_link;

struct strata_kv_xfer {
  strata_kv_agent *agent;
  kv_peer *peer;
  int op;
  kv_slice *slices;
  size_t nslices, next, done, inflight;
  uint64_t bytes; /* of all its slices */
  int status;     /* IN_PROGRESS, then the outcome */
  int finished;   /* status final, nothing refers to the peer any more */
  int failure;    /* the first slice failure (the status once every slice is back) */
  int queued;
  strata_kv_xfer *queue_next;
  uint8_t notif[STRATA_KV_NOTIF_MAX_BYTES];
  size_t notif_bytes;
  char error[256];
};

struct kv_peer {
  strata_kv_agent *agent;
  int index;
  char name[STRATA_KV_NAME_BYTES];
  char address[STRATA_HANDSHAKE_ADDRESS_BYTES];
  char identity[KV_IDENTITY_BYTES];
  uint32_t pid;
  kv_remote_region *regions;
  size_t nregions;
  uint32_t blob_flags;  /* KV_BLOB_* */
  uint8_t *ucx_address; /* its UCP worker's, from the blob (NULL: it has no UCX) */
  size_t ucx_address_bytes;
  kv_ucx_link *ucx_link; /* backend UCX: the endpoint the slices travel on */
  int backend;           /* TCP, SHM or UCX */
  int nstreams;
  kv_conn streams[STRATA_KV_MAX_STREAMS];
  pthread_t threads[STRATA_KV_MAX_STREAMS];
  int threads_started;
  atomic_int stopping;
  int ready; /* connected: transfers and calls may use it */
  int users; /* lane calls and notifications using it now (destroy waits for them) */
  int dead;  /* a stream broke: every slice fails with dead_status */
  int dead_status;
  char dead_error[256];
  strata_kv_xfer *queue_head, *queue_tail;
  pthread_mutex_t lane_lock;
  kv_conn lane;
  int lane_broken;
};

typedef struct kv_server_conn {
  struct kv_server_conn *next;
  strata_kv_agent *agent;
  pthread_t thread;
  kv_conn conn;
  int finished;
  int admitted; /* passed the handshake and HELLO: a peer of the job */
  int evicted;  /* shut down to make room for a newer stranger */
  int shm;      /* the peer passed the cross-memory probe: pid is its process */
  uint32_t pid;
  kv_ucx_link *ucx_link; /* the peer was granted UCX on this connection: its token's link */
  char from[STRATA_KV_NAME_BYTES];
} kv_server_conn;

struct strata_kv_agent {
  char name[STRATA_KV_NAME_BYTES];
  char job_id[STRATA_WIRE_JOB_ID_BYTES];
  char *secret;
  int streams;
  size_t slice_bytes;
  double timeout_s;
  int backend;
  int bulk_nice;
  int lane_realtime;
  atomic_int realtime_denied;  /* the kernel refused SCHED_FIFO once: not asked again */
  atomic_llong lane_hot_until; /* CLOCK_MONOTONIC ns: bulk system calls are cut until then */
  strata_handshake_params responder_params, initiator_params;
  char listen_host[256];
  int listen_port;
  char address[STRATA_HANDSHAKE_ADDRESS_BYTES]; /* "host:port" as published */
  char identity[KV_IDENTITY_BYTES];
  volatile uint64_t canary; /* what a SHM target reads from us to prove it reaches our memory */
  int cma_allowed;          /* 0: never grant SHM (the fuzz harness serves frames in-process) */
  kv_ucx *ucx;              /* the UCP worker, when this agent runs UCX */
  int ucx_rdma;             /* and this host has an RDMA device: AUTO may pick UCX */
  int listen_fd;
  int wake_pipe[2];
  pthread_t listener;
  int listener_started;
  atomic_int stopping;

  pthread_mutex_t lock;
  pthread_cond_t cond;
  kv_region *regions;
  size_t nregions, regions_cap;
  uint32_t next_region_id;
  kv_peer *peers[KV_MAX_PEERS];
  kv_notif *notif_head, *notif_tail;
  kv_server_conn *server_conns;
  int nserver_conns;
  uint64_t refusals;
  char last_refusal[256];
  strata_kv_lane_handler lane_handler;
  void *lane_ctx;
};

/* kv_agent.c */
/* Check [addr, addr+bytes) against the agent's active region `region_id` and pin the region
 * (users++). STRATA_OK with *ptr, or INVALID_ARG with why in err. */
int kv_region_acquire(strata_kv_agent *a, uint32_t region_id, uint64_t addr, uint64_t bytes,
                      void **ptr, char *err, size_t err_len);
void kv_region_release(strata_kv_agent *a, uint32_t region_id);
/* 1 when [addr, addr+bytes) lies inside one active local region. Lock held. */
int kv_local_covered(strata_kv_agent *a, uint64_t addr, uint64_t bytes);
void kv_refusal(strata_kv_agent *a, const char *from, const char *err);
int kv_notif_push(strata_kv_agent *a, const char *from, const void *msg, size_t bytes);
void kv_thread_nice(int nice);
/* A thread's scheduling before kv_thread_realtime raised it. */
typedef struct kv_sched_saved {
  int raised, policy, priority;
} kv_sched_saved;
/* When the agent's lane runs real-time (cfg.lane_realtime): SCHED_FIFO priority 1 for the calling
 * thread if it is an ordinary one and the process may (CAP_SYS_NICE or RLIMIT_RTPRIO >= 1); its
 * previous policy goes into *saved (NULL: raised for good, a target's lane thread). 1 when
 * raised; 0, quietly, otherwise. */
int kv_thread_realtime(strata_kv_agent *a, kv_sched_saved *saved);
/* Back to the policy *saved holds, if kv_thread_realtime raised the thread. */
void kv_thread_restore(const kv_sched_saved *saved);
/* A lane call is starting (initiator) or being served (target): cut bulk calls for a while. */
void kv_lane_hot(strata_kv_agent *a);

/* kv_responder.c */
int kv_responder_start(strata_kv_agent *a);
void kv_responder_stop(strata_kv_agent *a);

/* Test hooks (tests/fuzz/fuzz_kv.c): parse a blob as strata_kv_peer_load does, and serve the
 * frames of one authenticated connection (HELLO first) read from `data`, replies discarded. */
int kv_blob_parse_for_test(const void *blob, size_t bytes);
void kv_responder_frames_for_test(const uint8_t *data, size_t size);

/* kv_xfer.c */
int kv_peer_connect(strata_kv_agent *a, kv_peer *p, char *err, size_t err_len);
void kv_peer_destroy(kv_peer *p);

/* What a HELLO asking for UCX carries (ours) and brings back (the target's token). */
typedef struct kv_ucx_hello {
  const void *address; /* this agent's UCP worker address */
  size_t address_bytes;
  uint8_t reply_token[KV_UCX_TOKEN_BYTES];
  int granted;
  uint8_t token[KV_UCX_TOKEN_BYTES];
} kv_ucx_hello;

/* Open one connection of p: kind KV_FLAG_LANE or 0; KV_FLAG_SHM asks for the cross-memory path
 * (*shm_granted says whether the target granted it); KV_FLAG_UCX (with ucx) asks for UCX. */
int kv_dial(strata_kv_agent *a, kv_peer *p, int stream, int flags, kv_conn *c, int *shm_granted,
            kv_ucx_hello *ucx, char *err, size_t err_len);

/* kv_ucx.c — every function exists in a build without UCX: start says UNSUPPORTED, the rest are
 * never reached (no agent has a->ucx). kv_ucx_built: built with UCX and libucp.so.0 loads. */
int kv_ucx_built(void);
int kv_ucx_rdma_present(void);
int kv_ucx_start(strata_kv_agent *a);
/* After the peers and the responder: closes every endpoint, waits for the replies in flight. */
void kv_ucx_stop(strata_kv_agent *a);
void kv_ucx_address(strata_kv_agent *a, const void **address, size_t *bytes);
/* Initiator: an endpoint to the peer's worker, with the target's token. */
int kv_ucx_link_open(strata_kv_agent *a, kv_peer *p, const kv_ucx_hello *hello, char *err,
                     size_t err_len);
/* Target: the token for a peer that proved itself on an authenticated connection, and an
 * endpoint back to its worker for the replies. */
int kv_ucx_grant(strata_kv_agent *a, const char *from, const void *address, size_t address_bytes,
                 const uint8_t reply_token[KV_UCX_TOKEN_BYTES], uint8_t token[KV_UCX_TOKEN_BYTES],
                 kv_ucx_link **out);
/* Close the link's endpoint (every slice on it fails with status); nonblocking. */
void kv_ucx_link_fail(kv_ucx_link *l, int status);
/* The owner lets go: freed by the worker thread once closed and idle. Fails it first. */
void kv_ucx_link_release(kv_ucx_link *l);
/* Move slices [first, first+n) of x on p's link, n <= KV_BATCH_SLICES; waits for them (each
 * bounded by the agent's timeout since the batch last moved). Returns the link's state (OK,
 * PEER_LOST, TIMEOUT, PROTOCOL); the target's refusals in *refused, its slice and reason. */
int kv_ucx_batch(kv_peer *p, kv_conn *c, const strata_kv_xfer *x, size_t first, size_t n,
                 int *refused, size_t *refused_slice, char *why, size_t why_len);
/* Test hook (tests/test_kv_safety.c): change one bit of the token the link's requests carry. */
void kv_ucx_forge_token_for_test(kv_ucx_link *l);
/* Rendezvous receives in flight at this agent (tests: one stalled by its sender). */
size_t kv_ucx_receiving_for_test(strata_kv_agent *a);

#endif
