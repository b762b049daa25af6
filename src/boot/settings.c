// SPDX-License-Identifier: Apache-2.0
/*
 * settings.c — the table of every environment variable (settings.h) and its parsers.
 *
 * One row per variable; each parser checks the whole value and fails with "NAME=VALUE:
 * expected ..." rather than guess. A row's `value` is its default written as the variable would
 * be: strata_config_init parses the CONFIG rows' through the same parsers (without their range
 * checks, so rank can default to -1), and docs/config.md prints it.
 */
#include "boot/settings.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CFG(f) #f, offsetof(strata_config, f), sizeof(((strata_config *)0)->f)
#define KVF(f) #f, offsetof(strata_kv_config, f), sizeof(((strata_kv_config *)0)->f)
#define NOF "", 0, 0
#define C STRATA_SETTING_CONFIG
#define K STRATA_SETTING_KV
#define L STRATA_SETTING_LAUNCHER
#define X STRATA_SETTING_COMMAND
#define F STRATA_SETTING_FOREIGN
#define RANKS (1LL << 30)

/* clang-format off */
static const strata_setting settings[] = {
  {"STRATA_RANK", CFG(rank), C, STRATA_SETTING_INT, 0, RANKS, "-1",
   "this process's rank, 0..world_size-1; -1 = unset"},
  {"STRATA_WORLD_SIZE", CFG(world_size), C, STRATA_SETTING_INT, 1, RANKS, "-1",
   "number of ranks, >= 1; -1 = unset"},
  {"STRATA_LOCAL_RANK", CFG(local_rank), C, STRATA_SETTING_INT, 0, RANKS, "-1",
   "rank among the ranks on this host; -1 = unset"},
  {"STRATA_ADDR", CFG(store_addr), C, STRATA_SETTING_ADDR, 0, 0, NULL,
   "rendezvous store, `HOST:PORT` (IPv6: `[ADDR]:PORT`), port 1..65535; unset: derived from the "
   "launcher (see Launchers)"},
  {"STRATA_STORE_EXTERNAL", CFG(store_external), C, STRATA_SETTING_BOOL, 0, 0, "0",
   "1: a standalone store (`strata store`, `strata launch`) serves `STRATA_ADDR`; 0: rank 0 serves "
   "it"},
  {"STRATA_STORE", CFG(store_url), C, STRATA_SETTING_WORD, 0, 0, NULL,
   "`etcd://HOST:PORT[,HOST:PORT...]`: keep the rendezvous store in an etcd cluster (its v3 "
   "gateway, members tried in turn) so that agreement, shrink and grow outlive any host of the "
   "job; values are sealed with the job secret; \"\" = strata's own store at `STRATA_ADDR` "
   "([elastic.md](elastic.md))"},
  {"STRATA_HOST", CFG(advertise_host), C, STRATA_SETTING_WORD, 0, 0, NULL,
   "address peers use to reach this rank; \"\" = the local address of the connection to the store "
   "(behind NAT or with several NICs, set it)"},
  {"STRATA_JOB_ID", CFG(job_id), C, STRATA_SETTING_WORD, 0, 0, "strata",
   "name of the job (or derived from the launcher); peers of another job are refused; <= 63 "
   "characters, no spaces"},
  {"STRATA_SECRET", CFG(secret), C, STRATA_SETTING_SECRET, 0, 0, NULL,
   "shared job secret authenticating peers and the rendezvous store (`strata store` reads it too, "
   "with `STRATA_JOB_ID`); <= 255 characters; all ranks must agree; never printed"},
  {"STRATA_SECRET_FILE", CFG(secret), C, STRATA_SETTING_SECRET_FILE, 0, 0, NULL,
   "a file holding the secret (trailing newline stripped), which keeps it out of the environment "
   "`ps e` and `/proc` show; setting it and `STRATA_SECRET` is an error"},
  {"STRATA_SHM", CFG(shm_enabled), C, STRATA_SETTING_BOOL, 0, 0, "1",
   "shared memory between ranks of one host"},
  {"STRATA_SHM_CMA", CFG(shm_cma), C, STRATA_SETTING_BOOL, 0, 0, "1",
   "large shared-memory messages (>= 32 KiB) by single-copy `process_vm_readv` with the reduction "
   "fused in; 0 = through the rings only (where ptrace rules forbid it, strata falls back itself)"},
  {"STRATA_TCP_STREAMS", CFG(tcp_streams), C, STRATA_SETTING_INT, 1, 64, "4",
   "TCP connections per pair of ranks, 1..64"},
  {"STRATA_TCP_BUFFER", CFG(tcp_buffer_bytes), C, STRATA_SETTING_SIZE, 0, 0, "0",
   "`SO_SNDBUF`/`SO_RCVBUF` per data stream; 0 = auto: sized from the measured RTT (see TCP on "
   "long links)"},
  {"STRATA_TCP_CC", CFG(tcp_congestion), C, STRATA_SETTING_WORD, 0, 0, NULL,
   "congestion control of every TCP socket (`bbr`, `cubic`, ...); \"\" = the system's, except "
   "that where that is bbr a socket starts with cubic and only a WAN connection (handshake RTT >= "
   "1 ms) goes back to bbr; a name the kernel refuses fails the communicator with the reason"},
  {"STRATA_TCP_LINK_GBPS", CFG(tcp_link_gbps), C, STRATA_SETTING_GBPS, 0, 0, "0",
   "link rate hint (Gb/s) for auto buffers (0 = 10), for the LAN chunk (raised to cover its "
   "bandwidth-delay product, <= 4 MiB), and on a WAN for the chunk and the window governor in "
   "place of the 1 Gb/s guess"},
  {"STRATA_TCP_GOVERN", CFG(tcp_govern), C, STRATA_SETTING_BOOL, 0, 0, "1",
   "on WAN pairs, hold the bytes in flight to 1.3 x the bandwidth-delay product the receiver "
   "measures (`TCP_WINDOW_CLAMP`), letting go for good where holding costs (losses, a rate well "
   "below the hold's); 0 = off; off when `STRATA_TCP_BUFFER` fixes the buffers ([wan.md](wan.md))"},
  {"STRATA_CHUNK", CFG(chunk_bytes), C, STRATA_SETTING_SIZE, 0, 0, "0",
   "pipelining chunk of ring algorithms; 0 = chosen at init from the transports (64 KiB on a LAN, "
   "1 MiB over loopback TCP or mixed shm/TCP, from the RTT on a WAN, 16 MiB all-shm), the largest "
   "any rank proposes; `strata_comm_config()` shows the value in use"},
  {"STRATA_TIMEOUT", CFG(timeout_s), C, STRATA_SETTING_SECONDS, 0, 0, "30",
   "seconds of silence from a peer (no heartbeat: dead, frozen, unreachable) before its "
   "operations fail with `STRATA_ERR_TIMEOUT`; also bounds rendezvous and connection steps; > 0, "
   "fractions allowed, at most 1000000"},
  {"STRATA_OP_TIMEOUT", CFG(op_timeout_s), C, STRATA_SETTING_SECONDS_OFF, 0, 0, "off",
   "seconds an operation may go without progress while its peers are alive; 0 or `off` = no "
   "limit (torch's process-group `timeout` sets it); the error names the peer waited for"},
  {"STRATA_ELASTIC", CFG(elastic), C, STRATA_SETTING_BOOL, 0, 0, "0",
   "an in-place reduction keeps a copy of its input while it runs, so a failure leaves the input "
   "as it was and a retry after a shrink is exact; costs a copy ([elastic.md](elastic.md))"},
  {"STRATA_JOIN", CFG(join), C, STRATA_SETTING_BOOL, 0, 0, "0",
   "`strata_comm_init` joins a running job at its members' next `strata_comm_grow` instead of "
   "starting one; rank and world size are then assigned ([elastic.md](elastic.md))"},
  {"STRATA_ENCRYPT", CFG(encrypt), C, STRATA_SETTING_ENCRYPT, 0, 0, "auto",
   "`auto`, `on` or `off`: seal TCP frames (AES-256-GCM, else ChaCha20-Poly1305) under keys each "
   "connection agrees; `auto` seals pairs on different hosts; over WireGuard set `off` "
   "([security.md](security.md))"},
  {"STRATA_ALGO", CFG(algo), C, STRATA_SETTING_ALGO, 0, 0, "auto",
   "force one algorithm for every collective: `auto`, `ring`, `rhd`, `tree`, `direct`, `hier`"},
  {"STRATA_LOG", CFG(log_level), C, STRATA_SETTING_LOG, 0, 0, "warn",
   "`off`, `error`, `warn`, `info`, `debug`, `trace`, or `0`..`5`"},
  {"STRATA_SITE", CFG(site), C, STRATA_SETTING_WORD, 0, 0, NULL,
   "the site this rank is in, for hierarchical collectives; <= 63 characters; `strata launch "
   "--sites|--topology` sets it, `strata site FILE` prints it ([hier.md](hier.md))"},
  {"STRATA_COMPRESS", CFG(compress), C, STRATA_SETTING_COMPRESS, 0, 0, "none",
   "wire encoding of f32 calls that leave `compress` at `STRATA_COMPRESS_DEFAULT`: `none`, "
   "`bf16`, `f16`, `int8`, `fp8`, `int4` ([compression.md](compression.md))"},
  {"STRATA_STORE_QUOTA", NOF, C, STRATA_SETTING_TEXT, 0, 0, NULL,
   "read by the rendezvous store (rank 0's or `strata store`): the bytes it holds in all, a byte "
   "count such as `512M` or `4G`; one connection may use a quarter; a set past either is refused "
   "with `STRATA_ERR_QUOTA`; unset = an eighth of the memory, within 256 MiB..8 GiB "
   "([security.md](security.md))"},
  {"STRATA_TOPOLOGY", NOF, C, STRATA_SETTING_TOPOLOGY, 0, 0, NULL,
   "not read by ranks: `strata launch --topology FILE` turns it into `STRATA_SITE`; a rank that "
   "finds it set without `STRATA_SITE` fails init with `STRATA_ERR_CONFIG` saying so"},
  {"STRATA_KV_BACKEND", KVF(backend), K, STRATA_SETTING_KV_BACKEND, 0, 0, "auto",
   "backend of a KV agent whose config leaves it at `AUTO`: `auto`, `tcp`, `shm`, `ucx` "
   "([kv.md](kv.md))"},
  {"STRATA_KV_SYSCALL_BYTES", NOF, K, STRATA_SETTING_U64, 4096, 64LL << 20, "65536",
   "the largest send or receive a KV connection makes while the lane is busy, 4096..67108864 "
   "bytes (the process's agents)"},
  {"STRATA_KV_UCX_RNDV_BYTES", NOF, K, STRATA_SETTING_U64, 0, (long long)(~0ULL >> 1), "0",
   "UCX backend: slices from this many bytes go by rendezvous; 0 = never, all eager (the "
   "process's agents)"},
  {"STRATA_KV_UCX_POLL_US", NOF, K, STRATA_SETTING_U64, 0, 1000000, "1000",
   "UCX backend: microseconds a worker keeps polling after it last found work, 0..1000000; 0 = "
   "sleep whenever idle (the process's agents)"},
  {"UCX_TLS", NOF, F, STRATA_SETTING_TEXT, 0, 0, NULL,
   "UCX's transports for the KV UCX backend, as UCX reads it; where it allows tcp strata sets "
   "`RX_SEG_SIZE` to 256k"},
  {"UCX_TCP_RX_SEG_SIZE", NOF, F, STRATA_SETTING_TEXT, 0, 0, NULL,
   "UCX's own; when set, strata leaves UCX's tcp segment size to it"},
  {"RANK, WORLD_SIZE, LOCAL_RANK", "rank, world_size, local_rank", 0, 0, L, STRATA_SETTING_TEXT,
   0, 0, NULL, "set by torchrun"},
  {"MASTER_ADDR, MASTER_PORT", "store_addr", 0, 0, L, STRATA_SETTING_TEXT, 0, 0, NULL,
   "set by torchrun; both or neither; the store goes to `MASTER_ADDR:(MASTER_PORT+1)`"},
  {"TORCHELASTIC_RUN_ID", "job_id", 0, 0, L, STRATA_SETTING_TEXT, 0, 0, NULL,
   "set by torchrun; job id `torchrun-<id>`"},
  {"OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK",
   "rank, world_size, local_rank", 0, 0, L,
   STRATA_SETTING_TEXT, 0, 0, NULL, "set by OpenMPI's `mpirun`"},
  {"OMPI_COMM_WORLD_LOCAL_SIZE, PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid, OMPI_MCA_orte_hnp_uri",
   "store_addr, job_id", 0, 0, L, STRATA_SETTING_TEXT, 0, 0, NULL,
   "set by OpenMPI; in a build without PMIx, a one-host job's store address and job id are "
   "derived from them"},
  {"PMIX_RANK, PMIX_NAMESPACE", "rank, world_size, job_id, store_addr, secret", 0, 0, L,
   STRATA_SETTING_TEXT, 0, 0, NULL,
   "set by PMIx launchers (`mpirun`, `srun --mpi=pmix`); unless `STRATA_RANK`, `STRATA_ADDR`, "
   "`RANK` or `MASTER_ADDR` is set, the rank and world size come from the PMIx server, the job id "
   "is `pmix-<namespace>`, and rank 0's store address and a secret it draws (unless "
   "`STRATA_SECRET` is set) reach every rank through PMIx ([launchers](#launchers))"},
  {"SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID", "rank, world_size, local_rank", 0, 0, L,
   STRATA_SETTING_TEXT, 0, 0, NULL, "set by `srun`"},
  {"SLURM_JOB_ID, SLURM_STEP_ID, SLURM_STEP_NUM_NODES, SLURM_NNODES, SLURM_JOB_NUM_NODES",
   "store_addr, job_id", 0, 0, L, STRATA_SETTING_TEXT, 0, 0, NULL,
   "set by Slurm; without PMIx (`srun --mpi=none`, or a build without it), a one-node step's store "
   "address and job id are derived from them"},
  {"STRATA_NODE", NOF, X, STRATA_SETTING_TEXT, 0, 0, NULL,
   "`strata site` and `strata launch --topology`: this host's node in the topology file "
   "(`GROUP`, `GROUP<n>`, `SITE/GROUP<n>`); unset = the hostname ([hier.md](hier.md))"},
  {"STRATA_DOCTOR_ROOT", NOF, X, STRATA_SETTING_TEXT, 0, 0, NULL,
   "`strata doctor`: the directory its checks read `/proc` and `/sys` under, as `--root`; unset = "
   "`/` ([doctor.md](doctor.md))"},
  {"STRATA_NETEM_SITE", NOF, X, STRATA_SETTING_TEXT, 0, 0, NULL,
   "set by `strata netem exec SITE`: the emulated site the command runs in ([netem.md](netem.md))"},
  {"STRATA_NETEM_ADDR", NOF, X, STRATA_SETTING_TEXT, 0, 0, NULL,
   "set by `strata netem exec SITE`: that site's address (also `STRATA_HOST` unless set)"},
  {"NCCL_TESTS_MIN_BW", NOF, X, STRATA_SETTING_TEXT, 0, 0, NULL,
   "`strata bench`, as nccl-tests reads it: GB/s; an average bus bandwidth below 90% of it marks "
   "the run FAILED ([bench.md](bench.md))"},
  {"NCCL_TESTS_ALLTOALLV_SPREAD, NCCL_TESTS_ALLTOALLV_MATRIX_FILE, "
   "NCCL_TESTS_ALLTOALLV_MATRIX_SCALE, NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY", NOF, X,
   STRATA_SETTING_TEXT, 0, 0, NULL,
   "`strata bench alltoallv`, as nccl-tests reads them: the uneven shares ([bench.md](bench.md))"},
};
/* clang-format on */

const strata_setting *strata_settings(size_t *count) {
  *count = sizeof settings / sizeof settings[0];
  return settings;
}

const strata_setting *strata_setting_find(const char *name) {
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
    if (settings[i].scope != STRATA_SETTING_LAUNCHER && !strcmp(settings[i].name, name))
      return &settings[i];
  return NULL;
}

/* ---- the parsers ---- */

int strata_setting_error(const char *name, const char *value, const char *expected, char *err,
                         size_t err_len) {
  if (err && err_len) snprintf(err, err_len, "%s=%s: expected %s", name, value, expected);
  return STRATA_ERR_CONFIG;
}

static int parse_long_long(const char *value, long long min, long long max, int strict,
                           long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(value, &end, 10);
  if (errno || end == value || *end || (strict && (v < min || v > max))) return -1;
  *out = v;
  return 0;
}

int strata_setting_parse_int(const char *name, const char *value, long min, long max, int *out,
                             char *err, size_t err_len) {
  long long v;
  if (parse_long_long(value, min, max, 1, &v) == 0) return *out = (int)v, STRATA_OK;
  char expected[96];
  snprintf(expected, sizeof expected, "an integer from %ld to %ld", min, max);
  return strata_setting_error(name, value, expected, err, err_len);
}

/* A byte count as strata_size_parse reads it ("4194304", "4M", "512K", "1G"). */
static int parse_size_bytes(const char *text, size_t *out) {
  uint64_t bytes = 0;
  if (strata_size_parse(text, &bytes) != STRATA_OK || bytes > SIZE_MAX) return -1;
  *out = (size_t)bytes;
  return 0;
}

static int parse_bool(const char *value, int *out) {
  static const char *const yes[] = {"1", "yes", "true", "on"}, *const no[] = {"0", "no", "false",
                                                                              "off"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(value, yes[i])) return *out = 1, 0;
    if (!strcasecmp(value, no[i])) return *out = 0, 0;
  }
  return -1;
}

static int parse_double(const char *value, double *out) {
  char *end;
  errno = 0;
  double v = strtod(value, &end);
  if (errno || end == value || *end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* STRATA_SECRET_FILE: the secret is the file's contents without its trailing newline(s). The
 * error names the file, never what it holds. */
static const char *read_secret_file(const char *path, char *out, size_t cap, char *why,
                                    size_t why_len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(why, why_len, "a readable file holding the job secret (%s)", strerror(errno));
    return why;
  }
  char text[258];
  size_t len = fread(text, 1, sizeof text - 1, f);
  int failed = ferror(f);
  fclose(f);
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
  const char *wrong = failed                    ? "a readable file holding the job secret"
                      : len == 0                ? "a file holding the job secret (it is empty)"
                      : len >= cap              ? "a secret of at most 255 characters"
                      : memchr(text, '\0', len) ? "a secret without NUL bytes"
                                                : NULL;
  if (!wrong) {
    memcpy(out, text, len);
    out[len] = '\0';
  }
  memset(text, 0, sizeof text);
  return wrong;
}

static int lowercase(const char *value, char *out, size_t cap) {
  size_t n = strlen(value);
  if (n >= cap) return -1;
  for (size_t i = 0; i <= n; i++) out[i] = (char)tolower((unsigned char)value[i]);
  return 0;
}

/* What a value of the row must look like, or NULL when `value` parsed into *field. */
static const char *parse_into(const strata_setting *row, const char *value, char *field, int strict,
                              char *why, size_t why_len) {
  long long n;
  double v;
  int flag;
  char lower[32];
  switch (row->kind) {
    case STRATA_SETTING_INT:
      if (parse_long_long(value, row->min, row->max, strict, &n) != 0) {
        snprintf(why, why_len, "an integer from %lld to %lld", row->min, row->max);
        return why;
      }
      *(int *)field = (int)n;
      return NULL;
    case STRATA_SETTING_U64:
      if (parse_long_long(value, row->min, row->max, 1, &n) != 0 ||
          !isdigit((unsigned char)*value)) {
        snprintf(why, why_len, "an integer from %lld to %lld", row->min, row->max);
        return why;
      }
      return NULL;
    case STRATA_SETTING_BOOL:
      if (parse_bool(value, &flag) != 0) return "1 or 0 (also yes/no, true/false, on/off)";
      *(int *)field = flag;
      return NULL;
    case STRATA_SETTING_SIZE:
      if (parse_size_bytes(value, (size_t *)field) != 0)
        return "a byte count such as 65536, 512K, 4M or 1G";
      return NULL;
    case STRATA_SETTING_WORD:
      if (strlen(value) >= row->size) {
        snprintf(why, why_len, "at most %zu characters", row->size - 1);
        return why;
      }
      for (const char *c = value; *c; c++)
        if (isspace((unsigned char)*c) || iscntrl((unsigned char)*c))
          return "no spaces or control characters";
      snprintf(field, row->size, "%s", value);
      return NULL;
    case STRATA_SETTING_SECRET:
      if (strlen(value) >= row->size) return "at most 255 characters";
      snprintf(field, row->size, "%s", value);
      return NULL;
    case STRATA_SETTING_SECRET_FILE:
      return read_secret_file(value, field, row->size, why, why_len);
    case STRATA_SETTING_ADDR: {
      char host[256], reason[320];
      int port;
      if (strlen(value) >= row->size ||
          strata_store_addr_parse(value, 0, host, sizeof host, &port, reason, sizeof reason) !=
              STRATA_OK ||
          port == 0)
        return "HOST:PORT with a port from 1 to 65535 (IPv6: [ADDR]:PORT)";
      snprintf(field, row->size, "%s", value);
      return NULL;
    }
    case STRATA_SETTING_SECONDS:
      if (parse_double(value, &v) != 0 || !(v > 0))
        return "seconds, a number > 0 such as 30 or 2.5";
      /* a wait this long is "forever"; longer ones would overflow millisecond poll timeouts */
      *(double *)field = v < STRATA_TIMEOUT_MAX_S ? v : STRATA_TIMEOUT_MAX_S;
      return NULL;
    case STRATA_SETTING_SECONDS_OFF:
      if (!strcasecmp(value, "off")) return *(double *)field = 0, NULL;
      if (parse_double(value, &v) != 0 || v < 0)
        return "seconds, a number >= 0 such as 1800 (0 or off: no limit)";
      *(double *)field = v;
      return NULL;
    case STRATA_SETTING_GBPS:
      if (parse_double(value, &v) != 0 || !(v > 0) || v > 100000)
        return "Gb/s, a number > 0 such as 1, 10 or 0.2";
      *(double *)field = v;
      return NULL;
    case STRATA_SETTING_LOG: {
      static const char *const names[] = {"off", "error", "warn", "info", "debug", "trace"};
      for (int i = 0; i < 6; i++) {
        char digit[2] = {(char)('0' + i), '\0'};
        if (!strcasecmp(value, names[i]) || !strcmp(value, digit))
          return *(strata_log_level *)field = (strata_log_level)i, NULL;
      }
      if (!strcasecmp(value, "warning")) return *(strata_log_level *)field = STRATA_LOG_WARN, NULL;
      return "off, error, warn, info, debug, trace or 0..5";
    }
    case STRATA_SETTING_ALGO:
      if (lowercase(value, lower, sizeof lower) == 0 &&
          strata_algo_parse(lower, (strata_algo *)field) == STRATA_OK)
        return NULL;
      return "auto, ring, rhd, tree, direct or hier";
    case STRATA_SETTING_COMPRESS: {
      strata_compress c;
      /* "default" would point the default at itself */
      if (lowercase(value, lower, sizeof lower) == 0 &&
          strata_compress_parse(lower, &c) == STRATA_OK && c != STRATA_COMPRESS_DEFAULT)
        return *(strata_compress *)field = c, NULL;
      return "none, bf16, f16, int8, fp8 or int4";
    }
    case STRATA_SETTING_ENCRYPT:
      if (!strcasecmp(value, "auto"))
        return *(strata_encrypt_mode *)field = STRATA_ENCRYPT_AUTO, NULL;
      if (parse_bool(value, &flag) != 0) return "auto, on or off (also 1/0)";
      *(strata_encrypt_mode *)field = flag ? STRATA_ENCRYPT_ON : STRATA_ENCRYPT_OFF;
      return NULL;
    case STRATA_SETTING_KV_BACKEND: {
      static const char *const names[] = {"auto", "tcp", "shm", "ucx"};
      for (int i = 0; i < 4; i++)
        if (!strcasecmp(value, names[i]))
          return *(strata_kv_backend *)field = (strata_kv_backend)i, NULL;
      return "auto, tcp, shm or ucx";
    }
    case STRATA_SETTING_TOPOLOGY:
    case STRATA_SETTING_TEXT:
      return NULL;
  }
  return "a value this library knows";
}

int strata_setting_parse(const strata_setting *row, const char *value, void *base, char *err,
                         size_t err_len) {
  char why[160], scratch[320];
  char *field = row->size && base ? (char *)base + row->offset : scratch;
  if (!row->size) memset(scratch, 0, sizeof scratch);
  const char *wrong = parse_into(row, value, field, 1, why, sizeof why);
  if (!wrong) return STRATA_OK;
  int hidden = row->kind == STRATA_SETTING_SECRET;
  return strata_setting_error(row->name, hidden ? "(hidden)" : value, wrong, err, err_len);
}

void strata_settings_config_defaults(strata_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  char why[160];
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    const strata_setting *row = &settings[i];
    if (row->scope == STRATA_SETTING_CONFIG && row->size && row->value)
      (void)parse_into(row, row->value, (char *)cfg + row->offset, 0, why, sizeof why);
  }
}

static const char *env_value(const char *name) {
  const char *value = getenv(name);
  return value && *value ? value : NULL;
}

int strata_settings_kv(strata_kv_config *cfg, char *err, size_t err_len) {
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    const strata_setting *row = &settings[i];
    const char *value = row->scope == STRATA_SETTING_KV ? env_value(row->name) : NULL;
    if (!value) continue;
    strata_kv_config parsed = *cfg;
    int status = strata_setting_parse(row, value, &parsed, err, err_len);
    if (status != STRATA_OK) return status;
    /* the config's own choice wins over the environment's: the field is taken only at its
     * default (zero) */
    char zero[sizeof(strata_kv_config)] = {0};
    if (row->size && !memcmp((char *)cfg + row->offset, zero, row->size))
      memcpy((char *)cfg + row->offset, (char *)&parsed + row->offset, row->size);
  }
  return STRATA_OK;
}

unsigned long long strata_setting_u64(const char *name) {
  const strata_setting *row = strata_setting_find(name);
  if (!row || !row->value) return 0;
  const char *value = env_value(name);
  char err[256];
  if (!value || strata_setting_parse(row, value, NULL, err, sizeof err) != STRATA_OK)
    value = row->value;
  return strtoull(value, NULL, 10);
}

/* ---- docs/config.md ---- */

static const char *const scope_titles[] = {
    [STRATA_SETTING_CONFIG] = "Every rank: `strata_config`",
    [STRATA_SETTING_KV] = "KV transfer agents: `strata_kv_config` and the process's agents",
    [STRATA_SETTING_LAUNCHER] = "Other launchers' variables (lower priority than `STRATA_*`)",
    [STRATA_SETTING_COMMAND] = "The `strata` command's (not read by ranks)",
    [STRATA_SETTING_FOREIGN] = "UCX's, as the KV UCX backend reads them",
};

void strata_settings_markdown(FILE *out) {
  for (int scope = STRATA_SETTING_CONFIG; scope <= STRATA_SETTING_FOREIGN; scope++) {
    fprintf(out, "%s### %s\n\n", scope ? "\n" : "", scope_titles[scope]);
    fprintf(out, "| variable | field | default | meaning |\n|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
      const strata_setting *row = &settings[i];
      if ((int)row->scope != scope) continue;
      fprintf(out, "| `%s` | %s%s%s | %s%s%s | %s |\n", row->name, row->field[0] ? "`" : "—",
              row->field, row->field[0] ? "`" : "", row->value ? "`" : "",
              row->value ? row->value : "", row->value ? "`" : "", row->doc);
    }
  }
}
