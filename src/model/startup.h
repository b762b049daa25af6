// SPDX-License-Identifier: Apache-2.0
/*
 * startup.h — what it costs a job of N ranks to start: requests to the rendezvous store, bytes,
 * sequential rounds, connections and descriptors per rank, the store's memory, and an estimate
 * of the init time, for two ways of joining:
 *
 *  EAGER (every rank to every rank at init, the full mesh): each rank publishes its host identity,
 *  its address and its site, reads the address of every lower rank it dials, every rank's
 *  identity and every rank's site: 2N + 5 + r requests for rank r, about 2.5 N^2 per job, and
 *  (N - 1)(streams + 1) sockets per rank, N(N - 1)/2 (streams + 1) handshakes per job;
 *
 *  LAZY (connections on demand): each rank files its host record, publishes its address, its site
 *  and its chunk (three opens counters, eight writes), counts itself joined and waits once for
 *  every rank, then reads one list of the ranks on its host and one answer of every rank's site:
 *  14 requests, plus a peer's address when it first dials it (the rank that needs the pair first
 *  dials, so about half the peers its schedules use). Rank 0 also reads every rank's site and
 *  chunk as counters, 8,192 ranks per request, and publishes the answer; a host's first rank
 *  reads that host's records (not modelled: a few per host). A ring leaves 2 peers per rank,
 *  recursive halving-doubling log2 N.
 *
 * The init time is the largest of three bounds, plus the latency of the sequential rounds:
 *  - the store's single event loop serving every request (requests x request_server_us);
 *  - one rank's own work (its requests and its handshakes, done one after another);
 *  - all the CPU work of the job shared by the cores it runs on (one host of few cores: what
 *    bench/scale.sh measures; on a cluster each rank has its own).
 * Per-request and per-connection costs are calibrated on bench/scale.sh's runs (docs/scale.md);
 * everything else is counted, not fitted. Pure functions, O(1): no loop over ranks.
 */
#ifndef STRATA_MODEL_STARTUP_H
#define STRATA_MODEL_STARTUP_H

#include <stdint.h>

typedef enum strata_startup_scheme {
  STRATA_STARTUP_EAGER = 0, /* full mesh at init */
  STRATA_STARTUP_LAZY = 1   /* connections on demand, O(1) store requests per rank */
} strata_startup_scheme;

typedef enum strata_startup_pattern {
  STRATA_STARTUP_RING = 0, /* the first schedule talks to 2 peers */
  STRATA_STARTUP_RHD = 1   /* recursive halving-doubling: log2 N peers */
} strata_startup_pattern;

/* The costs the counts are turned into time and memory with. */
typedef struct strata_startup_costs {
  double request_server_us;    /* store CPU per request (one event loop) */
  double request_client_us;    /* a rank's CPU per request, beyond the round trip */
  double connection_us;        /* CPU per TCP connection, both ends: connect, accept, handshake */
  double process_us;           /* a rank's fixed CPU to join (library, listener, threads) */
  double key_bytes;            /* mean key length */
  double identity_bytes;       /* a host identity value */
  double address_bytes;        /* a "host:port" value */
  double site_bytes;           /* a "<chunk> <site>" value */
  double frame_bytes;          /* the fixed header of one request or reply */
  double entry_overhead_bytes; /* the store's cost of an entry beyond key and value */
  double store_conn_bytes;     /* the store's memory per client connection (buffers, kernel) */
  int base_fds;                /* a rank's descriptors before any peer: stdio, store, listener */
} strata_startup_costs;

typedef struct strata_startup_job {
  int64_t ranks;
  int streams; /* STRATA_TCP_STREAMS: data connections per pair; +1 control */
  strata_startup_pattern pattern;
  double store_rtt_us; /* a rank's round trip to the store */
  double peer_rtt_us;  /* a round trip between two ranks (the allgather's steps) */
  double cores;        /* cores the job's ranks share; 0 = one per rank (a cluster) */
} strata_startup_job;

typedef struct strata_startup {
  strata_startup_scheme scheme;
  int64_t ranks;
  double requests_per_rank; /* mean */
  double requests_max;      /* the busiest rank */
  double requests_total;    /* job-wide */
  double store_bytes_total; /* both ways, headers included */
  double store_rounds;      /* sequential round trips to the store on one rank's path */
  double peer_rounds;       /* sequential exchanges between ranks before init returns */
  double peers_per_rank;    /* ranks a rank holds connections to after the first allreduce */
  double sockets_per_rank;  /* peers x (streams + 1) */
  double fds_per_rank;      /* sockets + base_fds */
  double connections_total; /* TCP connections made job-wide */
  double store_entries;
  double store_memory_bytes; /* table + client connections */
  double store_busy_s;       /* the store's event loop busy time */
  double rank_busy_s;        /* one rank's own sequential work */
  double cpu_bound_s;        /* the job's CPU work over `cores` (0 when one core per rank) */
  double init_s;             /* estimated time for init + first allreduce */
} strata_startup;

/* Costs calibrated on bench/scale.sh (docs/scale.md says which build and how well they fit). */
strata_startup_costs strata_startup_default_costs(void);

/* Fills `out` for `job` under `scheme`. Returns 0, or -1 for a job of fewer than 1 rank or
 * fewer than 1 stream. */
int strata_startup_model(const strata_startup_job *job, strata_startup_scheme scheme,
                         const strata_startup_costs *costs, strata_startup *out);

/* "eager" / "lazy". */
const char *strata_startup_scheme_name(strata_startup_scheme scheme);

#endif
