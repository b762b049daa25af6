// SPDX-License-Identifier: Apache-2.0
/*
 * strata.h — the one public header of libstrata.
 *
 * strata moves data between ranks (processes, later GPUs) with collective operations over shared
 * memory inside a host and TCP between hosts. A communicator joins `world_size` ranks through a
 * rendezvous store; every collective is a schedule of sends, receives and reductions that the
 * engine runs over the transports.
 *
 * Conventions (after libuv): every name is strata_<noun>_<verb> or strata_<collective>; functions
 * that can fail return an int status, 0 (STRATA_OK) on success or a negative strata_status code;
 * strata_strerror() and strata_err_name() describe any code. Buffers always stay owned by the
 * caller; a buffer handed to a non-blocking call must stay valid and untouched until its request
 * completes. Counts are in elements of the given dtype, never bytes.
 */
#ifndef STRATA_H
#define STRATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 1
#define STRATA_VERSION_PATCH 0
#define STRATA_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, as NCCL_VERSION_CODE: 100 for 0.1.0. Compare it with
 * strata_version_number() to learn whether the library a program runs with is older than the
 * header it was built against. docs/api.md says what each part promises. */
#define STRATA_VERSION_NUMBER \
  (STRATA_VERSION_MAJOR * 10000 + STRATA_VERSION_MINOR * 100 + STRATA_VERSION_PATCH)

/* Every function of this header is exported from libstrata; nothing else is (the library is
 * built with hidden visibility and a version script, so internal symbols never clash with a
 * program's own). */
#if defined(_WIN32)
#define STRATA_API
#else
#define STRATA_API __attribute__((visibility("default")))
#endif

/* The library's version, "MAJOR.MINOR.PATCH": that of the libstrata a program runs with, which
 * may differ from the STRATA_VERSION_STRING it was compiled against. Static. */
STRATA_API const char *strata_version(void);
/* The library's STRATA_VERSION_NUMBER (that of the libstrata a program runs with). */
STRATA_API int strata_version_number(void);

/* The option structs a program fills (strata_config, strata_kv_config, strata_diloco_options,
 * strata_weights_options) begin with three fields, the struct header, set by the struct's _init
 * call (a macro that passes the size the program was compiled with, as NCCL's
 * NCCL_CONFIG_INITIALIZER does): struct_size = sizeof the struct in the program, struct_magic =
 * STRATA_STRUCT_MAGIC, struct_version = the STRATA_VERSION_NUMBER of its header. A call that takes
 * one refuses a struct that did not come from _init (STRATA_ERR_INVALID_ARG) or that is larger than
 * this library knows (a program built against a newer strata: STRATA_ERR_VERSION), and reads a
 * smaller one — from a program built against an older strata of the same major version — with
 * the fields added since at their defaults. Fields are only ever added at the end. A copy of an
 * initialized struct keeps them. Never set them by hand. */
#define STRATA_STRUCT_MAGIC 0x53545241u /* "STRA" */

/* ---------------------------------------------------------------------------------------------
 * Status codes. Every failure is one of these; strata_strerror() names each.
 * ------------------------------------------------------------------------------------------- */
typedef enum strata_status {
  STRATA_OK = 0,
  STRATA_ERR_INVALID_ARG = -1,  /* a NULL pointer, bad rank, bad dtype/op, count overflow ... */
  STRATA_ERR_NO_MEMORY = -2,    /* an allocation failed */
  STRATA_ERR_SYSTEM = -3,       /* an operating-system call failed (the log says which) */
  STRATA_ERR_TIMEOUT = -4,      /* a peer fell silent for STRATA_TIMEOUT, or an operation made no
                                   progress for STRATA_OP_TIMEOUT */
  STRATA_ERR_PEER_LOST = -5,    /* a peer closed its connection or died */
  STRATA_ERR_MISMATCH = -6,     /* ranks called different collectives, counts, types or ops */
  STRATA_ERR_AUTH = -7,         /* the peer does not know the job secret */
  STRATA_ERR_VERSION = -8,      /* the peer speaks another protocol version */
  STRATA_ERR_JOB = -9,          /* the peer belongs to another job */
  STRATA_ERR_PROTOCOL = -10,    /* a malformed or unexpected message arrived */
  STRATA_ERR_ABORTED = -11,     /* the communicator was aborted by an earlier error */
  STRATA_ERR_UNSUPPORTED = -12, /* the combination asked for is not implemented */
  STRATA_ERR_CONFIG = -13,      /* a configuration value or environment variable is invalid */
  STRATA_ERR_PARSE = -14,       /* an input file is malformed */
  STRATA_ERR_NOT_FOUND = -15,   /* a key, file or name does not exist */
  STRATA_ERR_IN_PROGRESS = -16, /* the request has not completed yet (strata_request_test) */
  STRATA_ERR_REVOKED = -17,     /* the communicator was revoked (strata_comm_revoke, here or on a
                                   peer): shrink it to go on */
  STRATA_ERR_EXCLUDED = -18,    /* the survivors agreed on a group without this rank (it was taken
                                   for dead): join again (strata_comm_grow) */
  STRATA_ERR_QUOTA = -19,       /* the store refused a value past its quota (STRATA_STORE_QUOTA) */
  STRATA_STATUS_MIN = -19
} strata_status;

/* A sentence describing `status`, e.g. "peer lost: a peer closed its connection or died".
 * Never NULL; unknown codes give "unknown status". The string is static. */
STRATA_API const char *strata_strerror(int status);
/* The code's name, e.g. "STRATA_ERR_PEER_LOST". Static, never NULL. */
STRATA_API const char *strata_err_name(int status);

/* ---------------------------------------------------------------------------------------------
 * Data types and reduction operators.
 * ------------------------------------------------------------------------------------------- */
typedef enum strata_dtype {
  STRATA_I8 = 0,
  STRATA_U8,
  STRATA_I32,
  STRATA_U32,
  STRATA_I64,
  STRATA_U64,
  STRATA_F16,  /* IEEE 754 binary16 */
  STRATA_BF16, /* bfloat16; reductions round to nearest even */
  STRATA_F32,
  STRATA_F64,
  STRATA_I16, /* appended after F64: existing values never change (ABI) */
  STRATA_U16,
  STRATA_DTYPE_COUNT
} strata_dtype;

typedef enum strata_op {
  STRATA_SUM = 0,
  STRATA_PROD,
  STRATA_MIN,
  STRATA_MAX,
  STRATA_AVG,  /* sum divided by the number of ranks (integer division for integer types) */
  STRATA_BAND, /* bitwise and; the bitwise ops are defined for the integer dtypes only */
  STRATA_BOR,  /* bitwise or */
  STRATA_BXOR, /* bitwise exclusive or */
  STRATA_OP_COUNT
} strata_op;
/* Every op applies to every integer dtype (i8, u8, i16, u16, i32, u32, i64, u64). The float
 * dtypes (f16, bf16, f32, f64) take sum, prod, min, max and avg; a reducing collective given a
 * float dtype and a bitwise op returns STRATA_ERR_INVALID_ARG before anything starts. Integer
 * sum and prod wrap modulo 2^bits, signed types too. */

/* Size of one element in bytes, or 0 for an invalid dtype. */
STRATA_API size_t strata_dtype_size(strata_dtype dtype);
/* "f32", "bf16", "i16", ... ; "?" for an invalid dtype. */
STRATA_API const char *strata_dtype_name(strata_dtype dtype);
/* "sum", "prod", "min", "max", "avg", "band", "bor", "bxor"; "?" for an invalid op. */
STRATA_API const char *strata_op_name(strata_op op);
/* Parse a name as printed above (also nccl-tests' "float", "half", "bfloat16", "int32", ..., and
 * the C spellings "int16", "uint16", "short"). Returns STRATA_OK or STRATA_ERR_INVALID_ARG. */
STRATA_API int strata_dtype_parse(const char *name, strata_dtype *out);
STRATA_API int strata_op_parse(const char *name, strata_op *out);
/* Parse a byte count the way every strata setting and command reads one (STRATA_TCP_BUFFER,
 * STRATA_CHUNK, `strata bench -b/-e/-i`, netem's queue=): a decimal number, a fraction allowed,
 * then optionally K, M, G or T (powers of 1024, as nccl-tests), an optional "i" and an optional
 * "B", in any case: "65536", "512K", "4MiB", "1.5G". A fraction of a byte is dropped. Returns
 * STRATA_OK, or STRATA_ERR_INVALID_ARG (nothing written) for anything else: empty, a sign, a
 * stray character, more than 2^64 - 1. */
STRATA_API int strata_size_parse(const char *text, uint64_t *bytes);

/* ---------------------------------------------------------------------------------------------
 * Collectives and algorithms.
 * ------------------------------------------------------------------------------------------- */
typedef enum strata_coll {
  STRATA_COLL_ALLREDUCE = 0,
  STRATA_COLL_REDUCE_SCATTER,
  STRATA_COLL_ALLGATHER,
  STRATA_COLL_BROADCAST,
  STRATA_COLL_REDUCE,
  STRATA_COLL_GATHER,
  STRATA_COLL_SCATTER,
  STRATA_COLL_ALLTOALL,
  STRATA_COLL_BARRIER,
  STRATA_COLL_SEND,
  STRATA_COLL_RECV,
  STRATA_COLL_COUNT
} strata_coll;

typedef enum strata_algo {
  STRATA_ALGO_AUTO = 0, /* chosen by size and rank count */
  STRATA_ALGO_RING,     /* pipelined ring */
  STRATA_ALGO_RHD,      /* recursive halving-doubling (Rabenseifner) / recursive doubling */
  STRATA_ALGO_TREE,     /* binomial trees */
  STRATA_ALGO_DIRECT,   /* every rank talks to every rank (pairwise exchange) */
  STRATA_ALGO_HIER,     /* site-aware: inside sites, then across sites (src/coll/hier.c) */
  STRATA_ALGO_COUNT
} strata_algo;

STRATA_API const char *strata_coll_name(strata_coll coll); /* "allreduce", "reduce_scatter", ... */
STRATA_API const char *strata_algo_name(
    strata_algo algo); /* "auto", "ring", "rhd", "tree", "direct" */
STRATA_API int strata_coll_parse(const char *name, strata_coll *out);
STRATA_API int strata_algo_parse(const char *name, strata_algo *out);

/* Compression on the wire (docs/compression.md). A compressed call sends every message of its
 * schedule in a smaller encoding and decodes it on arrival; reductions are carried out in f32 at
 * every hop, and every rank of an allreduce ends with the same bytes (a sender keeps what it
 * sent). For f32 data only. Lossy: the error bounds are in docs/compression.md. */
typedef enum strata_compress {
  STRATA_COMPRESS_DEFAULT = 0, /* the communicator's choice (STRATA_COMPRESS; none by default) */
  STRATA_COMPRESS_NONE,        /* exact: the data as it is */
  STRATA_COMPRESS_BF16,        /* 2 bytes per value, f32's range, 8 significant bits, RNE */
  STRATA_COMPRESS_F16,         /* 2 bytes per value, 11 significant bits, overflows past 65504 */
  STRATA_COMPRESS_INT8,        /* 1 byte per value + per block of 256 values its min and step */
  STRATA_COMPRESS_FP8,         /* 1 byte per value (e4m3) + per block of 256 values a scale */
  STRATA_COMPRESS_INT4,        /* 4 bits per value + per block of 256 values its min and step */
  STRATA_COMPRESS_COUNT
} strata_compress;

STRATA_API const char *strata_compress_name(strata_compress c); /* "default", "none", "bf16", ... */
STRATA_API int strata_compress_parse(const char *name, strata_compress *out);
/* The largest error one encode + decode of `c` can make on a value of magnitude <= m in a block
 * whose values lie within [-m, m] (docs/compression.md). A collective that passes a value
 * through k quantizations of partial sums of magnitude <= m errs by at most k times it. 0 for
 * NONE and DEFAULT. */
STRATA_API double strata_compress_error_bound(strata_compress c, double m);

/* Half-precision conversions, as the reductions and wire encodings use them: f32 -> f16/bf16
 * rounds to nearest even, NaN stays NaN, f16 overflows to infinity past 65504. */
STRATA_API float strata_f16_to_f32(uint16_t h);
STRATA_API uint16_t strata_f32_to_f16(float f);
STRATA_API float strata_bf16_to_f32(uint16_t h);
STRATA_API uint16_t strata_f32_to_bf16(float f);

/* ---------------------------------------------------------------------------------------------
 * Configuration. Every environment variable a rank reads is a field here, a row of one table
 * (src/boot/settings.c) that docs/config.md is generated from. strata_config_init() fills
 * defaults; strata_config_from_env() overlays the environment. A caller may then change any
 * field before strata_comm_init().
 * ------------------------------------------------------------------------------------------- */
typedef enum strata_log_level {
  STRATA_LOG_OFF = 0,
  STRATA_LOG_ERROR = 1,
  STRATA_LOG_WARN = 2,
  STRATA_LOG_INFO = 3,
  STRATA_LOG_DEBUG = 4,
  STRATA_LOG_TRACE = 5
} strata_log_level;

/* STRATA_ENCRYPT=off|on|auto. AUTO seals every TCP pair whose ends are on different hosts and
 * leaves loopback (same-host) pairs in clear; a pair is sealed when either end asks for it. */
typedef enum strata_encrypt_mode {
  STRATA_ENCRYPT_OFF = 0,
  STRATA_ENCRYPT_ON = 1,
  STRATA_ENCRYPT_AUTO = 2
} strata_encrypt_mode;

typedef struct strata_config {
  size_t struct_size;      /* the struct header: strata_config_init sets it */
  uint32_t struct_magic;   /* STRATA_STRUCT_MAGIC */
  uint32_t struct_version; /* STRATA_VERSION_NUMBER of the header it was built with */
  int rank;                /* STRATA_RANK, RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID; -1 unset */
  int world_size;          /* STRATA_WORLD_SIZE, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS */
  int local_rank;          /* STRATA_LOCAL_RANK, LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, ... */
  char store_addr[256];    /* STRATA_ADDR host:port; MASTER_ADDR:MASTER_PORT for torchrun */
  int store_external; /* 1: a standalone `strata store` serves the store (STRATA_STORE_EXTERNAL);
                         0: rank 0 serves it on store_addr */
  char advertise_host[256];    /* STRATA_HOST: address peers use to reach this rank; "" = the local
                                  address of the connection to the store */
  char job_id[64];             /* STRATA_JOB_ID; default "strata" */
  char secret[256];            /* STRATA_SECRET; "" = no authentication secret (still checked: all
                                  ranks must agree) */
  int shm_enabled;             /* STRATA_SHM (1/0): shared memory between ranks of one host */
  int shm_cma;                 /* STRATA_SHM_CMA (1/0): large shm messages by single-copy
                                  process_vm_readv (1, default) or through the rings only (0) */
  int tcp_streams;             /* STRATA_TCP_STREAMS: TCP connections per peer pair, 1..64 */
  size_t tcp_buffer_bytes;     /* STRATA_TCP_BUFFER: SO_SNDBUF/SO_RCVBUF per stream; 0 (default) =
                                  auto: sized from the measured RTT (docs/config.md) */
  char tcp_congestion[16];     /* STRATA_TCP_CC: TCP_CONGESTION of every data socket ("bbr",
                                  "cubic"); "" = the system default */
  double tcp_link_gbps;        /* STRATA_TCP_LINK_GBPS: bandwidth hint for auto buffers; 0 = 10 */
  size_t chunk_bytes;          /* STRATA_CHUNK: pipelining chunk size of ring algorithms */
  double timeout_s;            /* STRATA_TIMEOUT: seconds of silence (no heartbeat, no byte) after
                                  which a peer is taken for dead or frozen, and the bound of
                                  rendezvous and connection steps (30) */
  strata_algo algo;            /* STRATA_ALGO: force an algorithm for every collective */
  strata_log_level log_level;  /* STRATA_LOG: off|error|warn|info|debug|trace */
  char site[64];               /* STRATA_SITE: the site this rank is in (hierarchical collectives;
                                  `strata launch --topology|--sites` and `strata site` set it) */
  strata_compress compress;    /* STRATA_COMPRESS: wire encoding of f32 calls that ask for the
                                  default (none, bf16, f16, int8, fp8); NONE by default */
  int tcp_govern;              /* STRATA_TCP_GOVERN (1/0): on WAN pairs, hold the bytes in flight
                                  to 1.3 x the bandwidth-delay product the receiver measures
                                  (src/net/tcp_govern.c, docs/wan.md item 7); 1 by default (it acts
                                  on WAN pairs only), 0 turns it off; off whenever
                                  STRATA_TCP_BUFFER fixes the buffers */
  double op_timeout_s;         /* STRATA_OP_TIMEOUT: seconds an operation may go without progress
                                  while every peer is alive (one is late: a checkpoint, an eval);
                                  0 (default, or "off") = no limit: only a dead or frozen peer
                                  fails it, after STRATA_TIMEOUT */
  int elastic;                 /* STRATA_ELASTIC (1/0): an in-place reduction keeps a copy of its
                                  input while it runs, so a failure leaves the input as it was and
                                  a shrink undoes one that finished here but not on another
                                  survivor: the retry is exact (docs/elastic.md). Costs a copy */
  int join;                    /* STRATA_JOIN (1/0): strata_comm_init joins a running job at its
                                  members' next strata_comm_grow instead of starting one; rank and
                                  world_size are then assigned, not read */
  strata_encrypt_mode encrypt; /* STRATA_ENCRYPT: TCP frames sealed with
                                 AES-256-GCM or ChaCha20-Poly1305 under keys agreed per connection
                                 (docs/security.md). Default AUTO */
  char store_url[512];         /* STRATA_STORE: "etcd://HOST:PORT[,HOST:PORT...]" keeps the store
                                  in an etcd cluster that outlives any rank (docs/elastic.md);
                                  "" (default) = strata's own store at store_addr */
} strata_config;

/* The longest STRATA_TIMEOUT honoured (about 11.6 days): longer values are clamped to it. */
#define STRATA_TIMEOUT_MAX_S 1000000.0

/* Fill `cfg` with defaults (rank -1, world_size -1, shm on, 4 TCP streams, 30 s timeout, ...) and
 * its struct header. strata_config_init is a macro: strata_config_init_sized is what it calls. */
STRATA_API void strata_config_init_sized(strata_config *cfg, size_t struct_size,
                                         int header_version);
#define strata_config_init(cfg) \
  strata_config_init_sized((cfg), sizeof(strata_config), STRATA_VERSION_NUMBER)
/* Overlay the environment onto `cfg` (strata's own variables win over torchrun's, which win
 * over OpenMPI's and Slurm's). Returns STRATA_ERR_CONFIG naming the variable in `err` (may be
 * NULL; at least 256 bytes) when a value does not parse. */
STRATA_API int strata_config_from_env(strata_config *cfg, char *err, size_t err_len);
/* Sets one field by the name of its variable: "timeout" (or "STRATA_TIMEOUT"), "tcp_streams",
 * "secret", "addr", "site", ... — every STRATA_* variable of docs/config.md without its prefix,
 * any case, with the value written as in the environment ("600", "16M", "bf16", "1"). So a
 * binding sets fields without knowing the struct's layout. The value is checked as
 * strata_config_from_env checks it; on error cfg is unchanged, err (err_len bytes, may be NULL)
 * says why. Returns STRATA_OK, STRATA_ERR_CONFIG (unknown name, bad value) or
 * STRATA_ERR_INVALID_ARG (NULL arguments). An empty value leaves the field as it is. */
STRATA_API int strata_config_set(strata_config *cfg, const char *name, const char *value, char *err,
                                 size_t err_len);

/* ---------------------------------------------------------------------------------------------
 * Communicator.
 * ------------------------------------------------------------------------------------------- */
typedef struct strata_comm strata_comm;
typedef struct strata_request strata_request;

/* Join the job described by `cfg`: rendezvous through the store, connect to every peer (shared
 * memory on the same host, TCP otherwise), authenticate. Blocks until all ranks joined or the
 * timeout passed. On success *out owns a communicator that strata_comm_destroy() frees. */
STRATA_API int strata_comm_init(const strata_config *cfg, strata_comm **out);
/* strata_config_init + strata_config_from_env + strata_comm_init. */
STRATA_API int strata_comm_init_env(strata_comm **out);

/* A rendezvous store the caller already runs (torch.distributed's c10d::Store, say), used
 * instead of strata's own: no address, no port, no server. Keys are byte strings strata
 * namespaces under cfg->job_id. Each callback returns STRATA_OK or a negative strata_status
 * (STRATA_ERR_TIMEOUT when `get` gave up); strata calls them from the thread that calls
 * strata_comm_init_store or strata_comm_split, never concurrently for one communicator. */
typedef struct strata_store_ops {
  void *context; /* passed back to every callback */
  /* Sets key to value (len bytes). */
  int (*set)(void *context, const char *key, const void *value, size_t len);
  /* Waits until key exists (at most timeout_s), then *value = a copy from malloc that strata
   * frees with free(), *len its bytes. */
  int (*get)(void *context, const char *key, void **value, size_t *len, double timeout_s);
  /* Atomically adds delta to the integer at key (missing = 0); *result = the new value. */
  int (*add)(void *context, const char *key, int64_t delta, int64_t *result);
  /* Optional (NULL: elastic agreements fall back to a scheme that a rank dying at one precise
   * moment can stall): atomically sets key to value if it has no value; *was_set = 1 if this
   * call set it (c10d's compare_set with an empty expected value). */
  int (*set_if_absent)(void *context, const char *key, const void *value, size_t len, int *was_set);
} strata_store_ops;

/* strata_comm_init with the caller's store: cfg's store_addr and store_external are ignored.
 * The ops (copied) and their context must stay valid until the communicator and every
 * communicator split from it are destroyed. The address peers reach this rank at is
 * cfg->advertise_host, else the address of this host's route towards cfg->store_addr's host
 * when it is set, else this host's first non-loopback address (127.0.0.1 when all ranks are
 * local). */
STRATA_API int strata_comm_init_store(const strata_config *cfg, const strata_store_ops *store,
                                      strata_comm **out);

/* Splits a communicator, as MPI_Comm_split: collective over every rank of `comm`; the ranks
 * that give the same color >= 0 form a new communicator, numbered by key, ties broken by their
 * rank in `comm`. A rank giving STRATA_UNDEFINED gets *out = NULL and takes part in no new
 * communicator. The new communicators share `comm`'s store, secret and configuration, are
 * independent of it afterwards (either may be destroyed first, but the store `comm` uses must
 * outlive them: with a store served by rank 0, rank 0's `comm` must), and run their collectives
 * concurrently with it. Every rank must call it in the same order. */
#define STRATA_UNDEFINED (-1)
STRATA_API int strata_comm_split(strata_comm *comm, int color, int key, strata_comm **out);
/* ---- Elastic communicators (docs/elastic.md) ----
 * For jobs that go on when ranks die, freeze, or join. They need a rendezvous store that outlives
 * any member: `strata store` (STRATA_STORE_EXTERNAL=1), torchrun's, or a rank 0 that survives.
 *
 * Revoke: every pending and future operation on `comm` fails with STRATA_ERR_REVOKED, here and
 * on every live peer (the revocation travels to them, idle or not). Non-blocking, idempotent,
 * callable from any thread, also while another thread is blocked in a call on `comm`. */
STRATA_API int strata_comm_revoke(strata_comm *comm);
/* Shrink: collective over the live ranks of `comm` (after a failure, a revocation, or any time):
 * they agree on who is alive — a rank that died, or has been silent for STRATA_TIMEOUT (frozen),
 * is left out; a live rank is waited for (up to STRATA_OP_TIMEOUT when set) — and get *out, a
 * communicator of the next epoch over those ranks, numbered 0..k-1 in their order in `comm`.
 * `comm` is revoked by it and is destroyed by the caller. A rank the others left out (it came
 * after they decided, or they took it for dead) gets STRATA_ERR_EXCLUDED and *out = NULL, and so
 * does every later shrink or agree on `comm`. A shrink or agree that fails once this rank has
 * taken part (STRATA_ERR_TIMEOUT, a store that did not answer) leaves its part in place: the next
 * shrink or agree on `comm` finishes that same agreement, and so joins the group the others
 * formed (or learns it was left out) instead of deciding another. When the decided group's
 * communicator fails to come up (a member died meanwhile), shrinking `comm` again agrees anew. */
STRATA_API int strata_comm_shrink(strata_comm *comm, strata_comm **out);
/* Agree: collective over the live ranks of `comm`, healthy or failed: *flag becomes the AND of
 * every live rank's *flag, the same on all of them, and the ranks that did not take part (dead
 * or frozen) become the failed set strata_comm_failed_ranks reports. Through the store: a few
 * round trips to it, not a data-path collective. STRATA_ERR_EXCLUDED, and a call that failed
 * once this rank took part, as for shrink: the next call gives the flag of the agreement the
 * failed one had joined (what this rank contributed then counts). A rank that calls
 * strata_comm_shrink meanwhile counts as false (the others then shrink too: after a failure,
 * ranks whose last call failed at different points still meet). */
STRATA_API int strata_comm_agree(strata_comm *comm, int *flag);
/* After strata_comm_shrink(comm, ...) found that the last collective finished on this rank but
 * failed on another survivor (a rank died just after sending this one its last bytes): with
 * STRATA_ELASTIC, if it was an in-place reduction, writes its input back into its buffer — which
 * must still be the caller's — so the survivors retry it from the same inputs. Returns 1 if it
 * did, 0 when there was nothing to undo. (A failed call needs no undo: STRATA_ELASTIC leaves its
 * input as it was; out of place, inputs are never written.) */
STRATA_API int strata_comm_undo(strata_comm *comm);
/* The failed set of the last strata_comm_agree or strata_comm_shrink on `comm`: the first
 * `capacity` ranks into `ranks` (ascending), and returns how many there are (negative status on
 * bad arguments). */
STRATA_API int strata_comm_failed_ranks(const strata_comm *comm, int *ranks, int capacity);
/* Grow: collective over the members of a healthy `comm`. Every process that called
 * strata_comm_init with cfg->join = 1 (STRATA_JOIN=1; the job's store address, job id and secret)
 * since the last grow is admitted: *out is a communicator of the next epoch, members keep their
 * ranks, joiners follow in the order they arrived, and the joiners' strata_comm_init returns
 * theirs. With nobody waiting, *out = NULL: go on with `comm`. A joiner waits for a grow for as
 * long as STRATA_OP_TIMEOUT allows (no limit by default). */
STRATA_API int strata_comm_grow(strata_comm *comm, strata_comm **out);
/* 0 for a communicator from strata_comm_init, one more for each shrink or grow that led to it.
 * Communicators of different epochs never exchange a byte: each epoch has its own job id. */
STRATA_API uint64_t strata_comm_epoch(const strata_comm *comm);

/* Close the connections, stop the progress thread and free the communicator; NULL is accepted.
 * Returns STRATA_OK. Operations still pending are not waited for (a peer that never joins them
 * would hold destroy for as long as it lives): they fail with STRATA_ERR_ABORTED at once, and the
 * peers are told, as by strata_comm_abort. Their requests stay valid: strata_request_wait or
 * strata_request_test returns STRATA_ERR_ABORTED (or the status of an operation that had
 * finished) and frees each, as before destroy; what they need of the communicator lives until
 * the last is completed. Wait for requests before destroy to have them finish. Not concurrently
 * with any other call on `comm`, completing its requests included. */
STRATA_API int strata_comm_destroy(strata_comm *comm);
/* Fail every pending and future call with STRATA_ERR_ABORTED and tell the peers. */
STRATA_API int strata_comm_abort(strata_comm *comm);
STRATA_API int strata_comm_rank(const strata_comm *comm);
STRATA_API int strata_comm_size(const strata_comm *comm);
/* The communicator's configuration as resolved at init (read only). */
STRATA_API const strata_config *strata_comm_config(const strata_comm *comm);
/* Name of the transport used to reach `peer` ("self", "shm", "tcp"). */
STRATA_API const char *strata_comm_transport_name(const strata_comm *comm, int peer);
/* The site `rank` is in (STRATA_SITE, agreed at init): an index 0..strata_comm_sites()-1 in order
 * of first appearance by rank (rank 0's site is 0). Every rank is in site 0 of a communicator
 * that spans fewer than two sites. STRATA_ERR_INVALID_ARG for a NULL communicator or a rank
 * outside it. */
STRATA_API int strata_comm_site(const strata_comm *comm, int rank);
/* How many sites the communicator's ranks are in: 1 when fewer than two distinct STRATA_SITE
 * names (hierarchical collectives then run flat); STRATA_ERR_INVALID_ARG for NULL. */
STRATA_API int strata_comm_sites(const strata_comm *comm);
/* First error that broke the communicator, or STRATA_OK. */
STRATA_API int strata_comm_error(const strata_comm *comm);

/* What this rank has sent since init: messages, bytes of data the schedules moved, and bytes
 * handed to the transports after compression (equal to data_bytes when nothing is compressed). */
typedef struct strata_comm_stats {
  uint64_t messages_sent;
  uint64_t data_bytes_sent;
  uint64_t wire_bytes_sent;
  uint64_t wan_bytes_sent; /* the part of wire_bytes_sent that went to peers of another site */
} strata_comm_stats;
STRATA_API int strata_comm_get_stats(strata_comm *comm, strata_comm_stats *out);

/* ---------------------------------------------------------------------------------------------
 * The general entry point: every collective below is a wrapper around strata_collective().
 * ------------------------------------------------------------------------------------------- */
typedef struct strata_coll_args {
  strata_coll coll;
  const void *sendbuf; /* see each collective; may equal recvbuf for in-place */
  void *recvbuf;
  size_t count; /* elements; meaning depends on the collective (see wrappers) */
  strata_dtype dtype;
  strata_op op;             /* reductions only; a bitwise op needs an integer dtype */
  int root;                 /* rooted collectives; peer for send/recv (STRATA_ANY_SOURCE) */
  strata_algo algo;         /* STRATA_ALGO_AUTO = the communicator's choice */
  strata_compress compress; /* STRATA_COMPRESS_DEFAULT = the communicator's choice; another
                               encoding than NONE needs dtype F32 (else STRATA_ERR_UNSUPPORTED) */
} strata_coll_args;

/* Start a collective. With req == NULL it blocks until done and returns its status; otherwise it
 * returns at once and *req is a request to pass to strata_request_wait/test. */
STRATA_API int strata_collective(strata_comm *comm, const strata_coll_args *args,
                                 strata_request **req);

/* The algorithm a call with these arguments runs on this communicator (what STRATA_LOG=info
 * prints for it), without running anything. STRATA_ALGO_AUTO if the arguments are invalid. */
STRATA_API strata_algo strata_comm_algorithm(const strata_comm *comm, const strata_coll_args *args);
/* The bytes each buffer of `args` must hold on this rank, as strata.h defines each collective's
 * count (0 = the buffer is not used here, e.g. a non-root's receive buffer of a reduce): what a
 * binding checks its buffers against before a call. STRATA_ERR_INVALID_ARG for NULL arguments,
 * an unknown collective or dtype, or a size that overflows. */
STRATA_API int strata_coll_buffer_bytes(const strata_comm *comm, const strata_coll_args *args,
                                        uint64_t *send_bytes, uint64_t *recv_bytes);
/* Wait for `req`, free it and return the operation's status. A request outlives its
 * communicator: after strata_comm_destroy it returns at once, STRATA_ERR_ABORTED if destroy cut
 * its operation short. */
STRATA_API int strata_request_wait(strata_request *req);
/* Non-blocking check. Returns STRATA_ERR_IN_PROGRESS if not done (req stays valid); otherwise
 * frees `req` and returns the operation's status (after strata_comm_destroy every request is
 * done, see strata_request_wait). */
STRATA_API int strata_request_test(strata_request *req);

/* Every rank contributes `count` elements of sendbuf; every recvbuf receives the reduction. */
STRATA_API int strata_allreduce(strata_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                strata_dtype dtype, strata_op op);
STRATA_API int strata_iallreduce(strata_comm *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, strata_dtype dtype, strata_op op,
                                 strata_request **req);
/* sendbuf has world_size*recvcount elements; rank r receives block r of the reduction.
 * In place when recvbuf == sendbuf + rank*recvcount elements (as NCCL) or recvbuf == sendbuf. */
STRATA_API int strata_reduce_scatter(strata_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t recvcount, strata_dtype dtype, strata_op op);
STRATA_API int strata_ireduce_scatter(strata_comm *comm, const void *sendbuf, void *recvbuf,
                                      size_t recvcount, strata_dtype dtype, strata_op op,
                                      strata_request **req);
/* Each rank sends `sendcount` elements; recvbuf (world_size*sendcount) holds block r from rank r.
 * In place when sendbuf == recvbuf + rank*sendcount elements. */
STRATA_API int strata_allgather(strata_comm *comm, const void *sendbuf, void *recvbuf,
                                size_t sendcount, strata_dtype dtype);
STRATA_API int strata_iallgather(strata_comm *comm, const void *sendbuf, void *recvbuf,
                                 size_t sendcount, strata_dtype dtype, strata_request **req);
/* root's sendbuf (count elements) is copied to every rank's recvbuf. */
STRATA_API int strata_broadcast(strata_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                strata_dtype dtype, int root);
STRATA_API int strata_ibroadcast(strata_comm *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, strata_dtype dtype, int root, strata_request **req);
/* The reduction of every sendbuf lands in root's recvbuf (others' recvbuf is untouched). */
STRATA_API int strata_reduce(strata_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                             strata_dtype dtype, strata_op op, int root);
STRATA_API int strata_ireduce(strata_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                              strata_dtype dtype, strata_op op, int root, strata_request **req);
/* root's recvbuf (world_size*sendcount) holds block r from rank r. */
STRATA_API int strata_gather(strata_comm *comm, const void *sendbuf, void *recvbuf,
                             size_t sendcount, strata_dtype dtype, int root);
STRATA_API int strata_igather(strata_comm *comm, const void *sendbuf, void *recvbuf,
                              size_t sendcount, strata_dtype dtype, int root, strata_request **req);
/* Block r (recvcount elements) of root's sendbuf goes to rank r's recvbuf. */
STRATA_API int strata_scatter(strata_comm *comm, const void *sendbuf, void *recvbuf,
                              size_t recvcount, strata_dtype dtype, int root);
STRATA_API int strata_iscatter(strata_comm *comm, const void *sendbuf, void *recvbuf,
                               size_t recvcount, strata_dtype dtype, int root,
                               strata_request **req);
/* Block j (count elements) of rank i's sendbuf goes to block i of rank j's recvbuf. */
STRATA_API int strata_alltoall(strata_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                               strata_dtype dtype);
STRATA_API int strata_ialltoall(strata_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                strata_dtype dtype, strata_request **req);
STRATA_API int strata_barrier(strata_comm *comm);
STRATA_API int strata_ibarrier(strata_comm *comm, strata_request **req);
/* Point to point; messages between a pair arrive in the order they were sent. */
STRATA_API int strata_send(strata_comm *comm, const void *buf, size_t count, strata_dtype dtype,
                           int peer);
STRATA_API int strata_isend(strata_comm *comm, const void *buf, size_t count, strata_dtype dtype,
                            int peer, strata_request **req);
STRATA_API int strata_recv(strata_comm *comm, void *buf, size_t count, strata_dtype dtype,
                           int peer);
STRATA_API int strata_irecv(strata_comm *comm, void *buf, size_t count, strata_dtype dtype,
                            int peer, strata_request **req);
/* The peer of a receive from any source: strata_coll_args.root of a STRATA_COLL_RECV (which then
 * does not report the sender; strata_irecv_any does). */
#define STRATA_ANY_SOURCE (-1)
/* Receive from any source: the next message a strata_send of any rank sends this one (a
 * collective's messages are never taken), into buf. On success *source (may be NULL; the
 * caller's until the call or its request completes) is the sender's rank; it is
 * STRATA_ANY_SOURCE until then. The count and dtype must be the sender's, as for strata_recv
 * (else STRATA_ERR_MISMATCH); STRATA_ERR_INVALID_ARG in a communicator of one rank.
 * Order, as MPI's non-overtaking rule: a message goes to the earliest posted receive that can
 * take it, so a receive from any source posted before a strata_recv from rank p takes p's next
 * message first (unless another rank's came first), and a rank's messages are taken in the
 * order it sent them. Until it has its message, point-to-point receives posted after it wait
 * for it (it may take their message); collectives go on. With no message it fails after
 * STRATA_OP_TIMEOUT, as strata_recv does. */
STRATA_API int strata_recv_any(strata_comm *comm, void *buf, size_t count, strata_dtype dtype,
                               int *source);
STRATA_API int strata_irecv_any(strata_comm *comm, void *buf, size_t count, strata_dtype dtype,
                                int *source, strata_request **req);

/* ---------------------------------------------------------------------------------------------
 * The rendezvous store. Rank 0 of a job serves it from a thread unless store_external is set;
 * a launcher (`strata launch`, `strata store`) or a program that starts ranks itself can serve it
 * with these, and every rank then connects to it (STRATA_ADDR, STRATA_STORE_EXTERNAL=1).
 * ------------------------------------------------------------------------------------------- */
typedef struct strata_store_server strata_store_server;
/* Serve on `addr` ("host:port", "[v6addr]:port" or ":port" for every interface; port 0 picks a
 * free one) from a background thread. STRATA_ERR_INVALID_ARG for a malformed address,
 * STRATA_ERR_SYSTEM when it cannot bind. */
STRATA_API int strata_store_server_start(const char *addr, strata_store_server **out);
/* As strata_store_server_start, for a job with a secret: every connection must prove, before any
 * other request, that it knows the key derived from `secret` (STRATA_SECRET) and `job_id`
 * (STRATA_JOB_ID) as the job's ranks derive it; others are refused and logged. With an empty or
 * NULL secret the job id is ignored and it is strata_store_server_start. The secret is not kept
 * (only the derived key). STRATA_ERR_NO_MEMORY when the key derivation cannot allocate. */
STRATA_API int strata_store_server_start_auth(const char *addr, const char *secret,
                                              const char *job_id, strata_store_server **out);
/* The port actually bound. */
STRATA_API int strata_store_server_port(const strata_store_server *server);
/* How many requests the server has answered since it started, counting only connections that
 * proved the job key: the load a job puts on its store (bench/agree.sh). Safe to call while it
 * serves. */
STRATA_API uint64_t strata_store_server_requests(const strata_store_server *server);
/* Serve in the calling thread until the process receives SIGINT, SIGTERM or SIGHUP. */
STRATA_API int strata_store_server_run(strata_store_server *server);
/* Stops serving and frees the server; NULL is a no-op. */
STRATA_API void strata_store_server_stop(strata_store_server *server);
/* Splits "host:port" (also "[v6addr]:port") into host and port (0..65535). An empty host ("" or
 * ":port") is accepted only when allow_empty_host (a server: every interface). Returns
 * STRATA_ERR_INVALID_ARG with a sentence naming the address and what was expected in err (may be
 * NULL). */
STRATA_API int strata_store_addr_parse(const char *addr, int allow_empty_host, char *host,
                                       size_t host_len, int *port, char *err, size_t err_len);

/* A client of the store: what a program beside the job uses to meet its ranks (the KV agent's
 * metadata, a serving fleet's addresses). Values are byte strings. get and wait take a timeout;
 * set, set_if_absent and add are bounded by the connection's (connect's timeout_s); each returns
 * STRATA_ERR_TIMEOUT rather than hang. The connection proves the job key of
 * (secret, job_id) first, as the ranks do (NULL or "" for a store started without a secret): a
 * store that refuses the proof, or cannot prove its own, gives STRATA_ERR_AUTH at once. */
typedef struct strata_store strata_store;
/* Connect, retrying until timeout_s (the server may not be up yet). An addr of the form
 * "etcd://HOST:PORT[,HOST:PORT...]" is an etcd cluster instead (STRATA_STORE): its members are
 * tried in turn, and values are sealed with the job key (docs/elastic.md). */
STRATA_API int strata_store_connect_auth(const char *addr, const char *secret, const char *job_id,
                                         double timeout_s, strata_store **out);
STRATA_API int strata_store_set(strata_store *s, const char *key, const void *value, size_t len);
/* Wait until `key` exists (or timeout), then return a malloc'd copy in *value (caller frees). */
STRATA_API int strata_store_get(strata_store *s, const char *key, void **value, size_t *len,
                                double timeout_s);
/* Wait until every key exists. */
STRATA_API int strata_store_wait(strata_store *s, const char *const *keys, size_t nkeys,
                                 double timeout_s);
/* Sets key to value only if it has none; *was_set = 1 if this call set it. */
STRATA_API int strata_store_set_if_absent(strata_store *s, const char *key, const void *value,
                                          size_t len, int *was_set);
/* Atomically add delta to the integer at key (missing = 0); *result gets the new value. */
STRATA_API int strata_store_add(strata_store *s, const char *key, int64_t delta, int64_t *result);
/* Closes the connection and frees the client; NULL is a no-op. */
STRATA_API void strata_store_close(strata_store *s);

/* Memory the ranks of one host can read from each other directly. Every call takes any buffer;
 * a large transfer between two ranks of one host whose source lies in memory from
 * strata_mem_alloc skips the kernel copy (process_vm_readv) and is read straight from the
 * sender's pages (as NCCL's registered buffers are). Page-aligned, zero-filled, shared with no
 * one until a peer reads a message from it. A peer keeps its mapping of a region (at most a few
 * per peer, the oldest unmapped first) until the communicator is destroyed, so the pages of a
 * freed region may live on that long. Returns STRATA_ERR_INVALID_ARG for 0 bytes,
 * STRATA_ERR_NO_MEMORY or STRATA_ERR_SYSTEM. strata_mem_free(NULL) is a no-op; any pointer not
 * from strata_mem_alloc gets STRATA_ERR_INVALID_ARG and is left alone. */
STRATA_API int strata_mem_alloc(size_t bytes, void **out);
STRATA_API int strata_mem_free(void *ptr);

/* ---------------------------------------------------------------------------------------------
 * DiLoCo (arXiv 2311.08105) and Streaming DiLoCo (arXiv 2501.18512): data-parallel training
 * that synchronises every H inner steps instead of every step (docs/diloco.md).
 *
 * Each worker trains its own copy of the parameters (theta_local, the caller's buffers) with its
 * own inner optimizer. strata keeps theta_global (f32) and the outer optimizer's momentum. An
 * outer step of a fragment computes the outer gradient delta = theta_global - theta_local, averages
 * it over the communicator's ranks (in the options' wire encoding; hierarchical when the ranks
 * span sites, one WAN crossing per site, except that a compressed average runs over the ring
 * unless the sites are equal and both their count and size are powers of two: every rank must
 * keep the same bytes), applies SGD with (Nesterov) momentum to theta_global and sets
 * theta_local <- theta_global. The parameters are split into `fragments` pieces of about
 * equal bytes (contiguous ranges of whole buffers, at least one each, balanced by elements: a
 * buffer is never split, so P <= nparams); fragment p starts its exchange after inner steps s
 * with s mod H == p*H/P (s counted from 1: the first exchange of fragment 0 follows inner step
 * H when P == 1), and is applied `delay` inner steps later, merging
 * theta_local <- alpha*theta_local + (1-alpha)*theta_global; with delay 0 the merge is
 * theta_local <- theta_global (the textbook algorithm; alpha is not used).
 * ------------------------------------------------------------------------------------------- */
typedef struct strata_diloco strata_diloco;

typedef struct strata_diloco_param {
  void *data;         /* theta_local, read and written in place; must outlive the state */
  size_t count;       /* elements */
  strata_dtype dtype; /* STRATA_F32 or STRATA_BF16 */
} strata_diloco_param;

typedef struct strata_diloco_options {
  size_t struct_size;       /* the struct header: strata_diloco_options_init sets it */
  uint32_t struct_magic;    /* STRATA_STRUCT_MAGIC */
  uint32_t struct_version;  /* STRATA_VERSION_NUMBER of the header it was built with */
  int sync_every;           /* H: inner steps between two exchanges of a fragment (default 100) */
  double outer_lr;          /* default 0.7 */
  double outer_momentum;    /* default 0.9 */
  int nesterov;             /* default 1 */
  int fragments;            /* P, 1..H and at most nparams (default 1) */
  int delay;                /* tau: inner steps between a fragment's start and its apply, at most
                               H/P - 1 so no two exchanges of one fragment overlap (default 0) */
  double alpha;             /* merge factor when delay > 0 (default 0.5) */
  strata_compress compress; /* the outer gradient's wire encoding (DEFAULT = the communicator's) */
} strata_diloco_options;

/* Fills the defaults above and the struct header (a macro over strata_diloco_options_init_sized).
 */
STRATA_API void strata_diloco_options_init_sized(strata_diloco_options *opt, size_t struct_size,
                                                 int header_version);
#define strata_diloco_options_init(opt) \
  strata_diloco_options_init_sized((opt), sizeof(strata_diloco_options), STRATA_VERSION_NUMBER)
/* A DiLoCo state over `nparams` parameter buffers (collective: every rank of `comm` calls it with
 * buffers of the same counts and dtypes and the same options, else STRATA_ERR_MISMATCH on every
 * rank). theta_global starts as rank 0's parameters, broadcast into every rank's buffers.
 * comm = NULL makes a state of this process alone, for a worker that joins a running job: it
 * exchanges nothing until strata_diloco_sync gives it the members' state.
 * STRATA_ERR_INVALID_ARG for a bad option or buffer, STRATA_ERR_UNSUPPORTED for another dtype. */
STRATA_API int strata_diloco_create(strata_comm *comm, const strata_diloco_param *params,
                                    size_t nparams, const strata_diloco_options *opt,
                                    strata_diloco **out);
/* Call after every inner optimizer step: counts it, starts the exchanges that are due
 * (asynchronously) and applies those whose delay has passed. *applied (may be NULL) gets the
 * number of fragments applied by this call. A failed exchange (a dead peer, a timeout) returns
 * its error with theta_local, theta_global and the momentum as they were before that fragment's
 * exchange began; the inner step count is not advanced, so the call can be repeated (after
 * strata_diloco_set_comm with a working communicator). */
STRATA_API int strata_diloco_step(strata_diloco *d, int *applied);
/* The two halves of an outer step of one fragment, for callers that keep their own schedule
 * (then never call strata_diloco_step): start computes delta and starts its average; finish
 * waits for it, applies the outer optimizer and merges (with alpha when the options' delay is
 * above 0). Starting a fragment whose exchange is in flight, or finishing one that is not,
 * gives STRATA_ERR_INVALID_ARG. A failed finish leaves the fragment as it was before start. */
STRATA_API int strata_diloco_outer_start(strata_diloco *d, int fragment);
STRATA_API int strata_diloco_outer_finish(strata_diloco *d, int fragment);
/* Inner steps counted so far, and outer steps applied (over all fragments). */
STRATA_API uint64_t strata_diloco_inner_steps(const strata_diloco *d);
STRATA_API uint64_t strata_diloco_outer_steps(const strata_diloco *d);
/* Which parameter buffers fragment p covers ([*first, *first + *n); either may be NULL).
 * Returns the fragment count P (>= 1), or STRATA_ERR_INVALID_ARG for p outside 0..P-1. */
STRATA_API int strata_diloco_fragment(const strata_diloco *d, int fragment, size_t *first,
                                      size_t *n);
/* Checkpoints: the bytes of a saved state, save into a buffer of at least that many bytes, and
 * load a saved state into a state created with the same buffers and options (a blob from
 * another shape gives STRATA_ERR_MISMATCH, a damaged one STRATA_ERR_PROTOCOL; neither changes
 * the state). Waits for exchanges in flight first. The caller saves theta_local itself (its
 * model). */
STRATA_API int strata_diloco_state_bytes(strata_diloco *d, size_t *bytes);
STRATA_API int strata_diloco_save(strata_diloco *d, void *buf, size_t bytes);
STRATA_API int strata_diloco_load(strata_diloco *d, const void *buf, size_t bytes);
/* Moves the state to another communicator of the same workers or of fewer (after a shrink):
 * exchanges in flight are abandoned (their fragments untouched) and restarted by the next step.
 * Abandoning waits for them on the old communicator: a broken one fails them at once, a working
 * one completes them when its peers take part (or fails them after its timeout). */
STRATA_API int strata_diloco_set_comm(strata_diloco *d, strata_comm *comm);
/* Collective over `comm` (after strata_comm_grow, or a shrink): moves the state to `comm` and
 * makes every rank's theta_global, momentum and step counts the members' (strata_shared_sync: the
 * most outer steps win); a rank that pulled them (a joiner, a worker that fell behind) also
 * restarts theta_local from theta_global. A joiner creates its state with comm = NULL (no
 * exchange: only its buffers and options, which must match the members') and calls this once it
 * is in. *pulled (may be NULL) = 1 on the ranks whose state was replaced. */
STRATA_API int strata_diloco_sync(strata_diloco *d, strata_comm *comm, int *pulled);
/* Waits for exchanges in flight (errors ignored) and frees; NULL is accepted. */
STRATA_API void strata_diloco_destroy(strata_diloco *d);

/* ---------------------------------------------------------------------------------------------
 * Shared state (docs/elastic.md): named buffers every member must hold alike — model, optimizer
 * moments, DiLoCo's global parameters — with a revision the caller advances after each update.
 * ------------------------------------------------------------------------------------------- */
typedef struct strata_shared_entry {
  const char *name; /* unique within the state; names and sizes must match on every rank */
  void *data;
  size_t bytes;
} strata_shared_entry;

typedef struct strata_shared_state {
  uint64_t revision; /* the caller's: advance it after every update of the buffers */
  int count;
  strata_shared_entry *entries;
} strata_shared_state;

typedef struct strata_shared_sync_info {
  uint64_t revision;       /* the revision every member holds now */
  int ranks_in_majority;   /* ranks that held the chosen bytes before the sync */
  int pulled;              /* 1 if this rank's bytes were replaced */
  int source;              /* the rank they came from; -1 when not pulled */
  uint64_t bytes_received; /* by this rank */
  uint64_t bytes_sent;     /* by this rank, to ranks that pulled from it */
} strata_shared_sync_info;

/* Collective: afterwards every rank of `comm` holds the same bytes and revision — those of the
 * newest revision any rank has, and among the ranks at that revision the content most of them
 * hold (ties: the lowest rank's). A rank that differs (a joiner at revision 0, a rank that missed
 * a step, a corrupted copy) pulls every buffer from a rank that holds them (several pullers are
 * spread over the holders) and checks them against the chosen BLAKE2b digest. Ranks that already
 * hold them exchange only digests. STRATA_ERR_MISMATCH on every rank when names or sizes differ;
 * STRATA_ERR_INVALID_ARG for NULL or duplicate names. `info` may be NULL. */
STRATA_API int strata_shared_sync(strata_comm *comm, strata_shared_state *state,
                                  strata_shared_sync_info *info);

/* ---------------------------------------------------------------------------------------------
 * RL weight sync (docs/weights.md): a trainer publishes numbered versions of a named set of
 * tensors; rollout workers bring their own copies to the newest version (or a chosen one), bit
 * for bit.
 *
 * A version is stored as a full copy or as a sparse patch — the indices (delta-encoded) and the
 * new values of the elements whose bits changed since the previous version, zstd-compressed —
 * whichever is smaller, and as a full copy (an "anchor") at least every anchor_every versions.
 * Every version carries an xxHash3 digest of each tensor; a subscriber applies versions into a
 * staging copy, checks every digest and only then writes its buffers, so they always hold a
 * complete, checked version.
 *
 * Transport: rank 0 of a communicator is the publisher, every other rank a subscriber. A round
 * is collective over the communicator — the publisher calls strata_weights_serve, every
 * subscriber strata_weights_update — so membership follows the communicator: a subscriber joins
 * by strata_comm_grow, a dead one is dropped by strata_comm_shrink, and each round takes the
 * communicator it runs over. The bytes go down a fan-out tree: a chain of each site's
 * subscribers, host by host, whose head in every other site (STRATA_SITE) receives the site's
 * one copy over the WAN from the head of the publisher's site; the publisher sends one copy,
 * however many subscribers. The stream moves in pipelined chunks that each subscriber forwards
 * while it applies. A failed round (a rank died, the publisher among them) fails on every live
 * rank; subscribers keep their last complete version, and the survivors shrink and repeat the
 * round.
 *
 * Not thread-safe: one thread drives a handle.
 * ------------------------------------------------------------------------------------------- */
typedef struct strata_weights strata_weights;

#define STRATA_WEIGHTS_MAX_DIMS 8
/* The newest version, as a target of strata_weights_update. */
#define STRATA_WEIGHTS_NEWEST 0u

typedef struct strata_weights_tensor {
  const char *name;   /* unique within the set, 1..255 bytes; copied */
  void *data;         /* publisher: read at each publish; subscriber: written by update only
                         (and not by the caller: an update copies in only the tensors a version
                         changed). Caller-owned; must outlive the handle */
  strata_dtype dtype; /* STRATA_BF16, STRATA_F16 or STRATA_F32 */
  int ndim;           /* 0..STRATA_WEIGHTS_MAX_DIMS (0 = a scalar) */
  int64_t shape[STRATA_WEIGHTS_MAX_DIMS]; /* each >= 0; elements = their product */
} strata_weights_tensor;

typedef struct strata_weights_options {
  size_t struct_size;      /* the struct header: strata_weights_options_init sets it */
  uint32_t struct_magic;   /* STRATA_STRUCT_MAGIC */
  uint32_t struct_version; /* STRATA_VERSION_NUMBER of the header it was built with */
  int anchor_every;        /* K: a full copy at least every K versions, >= 1 (default 16) */
  int history;             /* versions the publisher keeps patches of, for subscribers behind, >= 1
                              (default 32); the newest anchor and everything after it are always kept */
  int zstd_level;          /* 1..19 (default 1) */
  size_t chunk_bytes;      /* pipelining unit down the fan-out, >= 4096 (default 8 MiB) */
} strata_weights_options;

/* What one published version cost (strata_weights_version_info). */
typedef struct strata_weights_version_stats {
  uint64_t version;
  int anchor;           /* 1: stored as a full copy (forced, first, or smaller than the patch) */
  uint64_t elements;    /* over all tensors */
  uint64_t changed;     /* elements whose bits changed since the previous version */
  uint64_t full_bytes;  /* a full copy's bytes on the wire */
  uint64_t patch_bytes; /* the compressed patch's bytes on the wire (0 for the first) */
  uint64_t patch_raw_bytes; /* the patch before zstd */
  double encode_s;          /* diff + zstd */
  double hash_s;            /* xxHash3 of every tensor */
} strata_weights_version_stats;

/* What one round did on this rank (strata_weights_serve / strata_weights_update). */
typedef struct strata_weights_round_info {
  uint64_t version;      /* subscriber: the version held after the call; publisher: newest */
  uint64_t stream_bytes; /* bytes every subscriber of the fan-out received this round */
  uint64_t bytes_sent;   /* by this rank: one copy per child in the fan-out tree (the
                            publisher: one, or one per site when no subscriber shares its site) */
  int blobs_applied;     /* subscriber: versions applied (full copies and patches) */
  int full_applied;      /* subscriber: of which full copies */
  int subscribers;       /* subscribers in the round */
  int refused;           /* publisher: subscribers that could not be served (mismatched set,
                            unknown version): each logs why */
  double reached_s;      /* subscriber: seconds from the call until its buffers held the target
                            (0: they did not change); publisher: until its last byte was sent.
                            The rest of the call is the verdict every rank agrees on */
} strata_weights_round_info;

/* Fills the defaults above and the struct header (a macro over strata_weights_options_init_sized).
 */
STRATA_API void strata_weights_options_init_sized(strata_weights_options *opt, size_t struct_size,
                                                  int header_version);
#define strata_weights_options_init(opt) \
  strata_weights_options_init_sized((opt), sizeof(strata_weights_options), STRATA_VERSION_NUMBER)
/* A publisher over `ntensors` caller buffers (opt may be NULL: defaults). Publishes nothing yet.
 * STRATA_ERR_INVALID_ARG for a bad option or tensor (duplicate or empty name, bad shape),
 * STRATA_ERR_UNSUPPORTED for another dtype; strata_weights_error says which. */
STRATA_API int strata_weights_publisher_create(const strata_weights_tensor *tensors,
                                               size_t ntensors, const strata_weights_options *opt,
                                               strata_weights **out);
/* A subscriber over its own buffers, holding version 0 (nothing) until its first update. The set
 * must match the publisher's (names, dtypes, shapes; in any order). */
STRATA_API int strata_weights_subscriber_create(const strata_weights_tensor *tensors,
                                                size_t ntensors, strata_weights **out);
/* Publisher: reads the buffers, encodes them against the previous version and keeps the result;
 * local, no communication. *version (may be NULL) = the new version number (1, 2, ...). */
STRATA_API int strata_weights_publish(strata_weights *w, uint64_t *version);
/* Publisher's side of a round over `comm` (it must be rank 0). Each subscriber gets the
 * cheapest bytes to its target: the chain of patches from the version it holds, or the newest
 * usable anchor and the patches after it. A subscriber that cannot be served (its tensor set
 * differs, it asks for a version not kept) is counted in info->refused and told why; the round
 * still succeeds for the others. Returns a transport error (STRATA_ERR_PEER_LOST, _REVOKED,
 * _TIMEOUT, ...) when the round failed on any rank: shrink and call again. info may be NULL. */
STRATA_API int strata_weights_serve(strata_weights *w, strata_comm *comm,
                                    strata_weights_round_info *info);
/* Subscriber's side of a round over `comm` (a rank other than 0): brings the buffers to version
 * `target` (STRATA_WEIGHTS_NEWEST, or a number) and forwards the round's bytes down the fan-out.
 * The buffers change only after every tensor of the target version matched its digest.
 * Errors, each leaving the buffers and the held version as they were:
 *   STRATA_ERR_MISMATCH  the tensor sets differ (strata_weights_error names the tensor);
 *   STRATA_ERR_PROTOCOL  a version failed its digest check or did not decode (corrupted);
 *   STRATA_ERR_NOT_FOUND the target is not (or no longer) published;
 *   a transport error    the round failed somewhere (a rank died, the publisher among them):
 *                        shrink and call again. The buffers hold a complete version; if this
 *                        rank had already finished, the held version may be the new one. */
STRATA_API int strata_weights_update(strata_weights *w, strata_comm *comm, uint64_t target,
                                     strata_weights_round_info *info);
/* What strata_weights_prepare did on this rank. */
typedef struct strata_weights_prepare_info {
  int parent;                   /* subscriber: the rank its rounds will come from (-1: the
                                   publisher, or a subscriber given no place) */
  int children;                 /* ranks this one will forward to */
  int refused;                  /* publisher: subscribers given no place (each logged) */
  uint64_t warm_bytes_sent;     /* to its children in other sites */
  uint64_t warm_bytes_received; /* from its parent, when that is in another site */
  double seconds;               /* the call, verdict excluded */
} strata_weights_prepare_info;

/* strata_weights_prepare's warm_bytes: twice the bandwidth-delay product of the rank's longest
 * path (the rate STRATA_TCP_LINK_GBPS, 1 Gbit/s when not given; the longest round trip its
 * connections measured at their handshake), nothing when that round trip is below 1 ms. Any
 * warm_bytes is capped at 256 MiB. */
#define STRATA_WEIGHTS_WARM_AUTO UINT64_MAX

/* Optional, collective like a round (the publisher as rank 0, every subscriber), once the handles
 * exist and before the first round — while the trainer computes its first update, say. Checks
 * every subscriber's tensor set against the publisher's now rather than at the first round
 * (STRATA_ERR_MISMATCH on that subscriber, strata_weights_error naming the tensor; the others
 * go on), draws the fan-out tree the first round will use when every subscriber takes part in
 * it, and sends `warm_bytes` (chosen by each sending rank) down each edge of that tree between
 * sites, which the child drops. That opens TCP's congestion windows on the connections the first
 * copy crosses the WAN on: a fresh connection starts at ten segments and about doubles its
 * window per round trip, so it needs several round trips before it fills a long fat path. How
 * long a window stays open over idle time is the kernel's: see docs/weights.md. The bytes count
 * in strata_comm_stats.wan_bytes_sent. A rank that calls it while rank 0 serves a round (or
 * updates while rank 0 prepares) gets STRATA_ERR_INVALID_ARG. Returns a transport error or
 * STRATA_ERR_PEER_LOST when it failed on any rank or a member did not live through it: shrink,
 * then prepare again or go straight to the first round. info may be NULL. */
STRATA_API int strata_weights_prepare(strata_weights *w, strata_comm *comm, uint64_t warm_bytes,
                                      strata_weights_prepare_info *info);
/* The version a subscriber holds (0 = none), or the newest a publisher published. */
STRATA_API uint64_t strata_weights_version(const strata_weights *w);
/* Publisher: what `version` cost. STRATA_ERR_NOT_FOUND when it is not kept any more. */
STRATA_API int strata_weights_version_info(const strata_weights *w, uint64_t version,
                                           strata_weights_version_stats *out);
/* A sentence about the last error on `w` ("" if none). Valid until the next call on `w`. */
STRATA_API const char *strata_weights_error(const strata_weights *w);
/* Frees the handle (never the caller's buffers); NULL is accepted. */
STRATA_API void strata_weights_destroy(strata_weights *w);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_H */
