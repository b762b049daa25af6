// SPDX-License-Identifier: Apache-2.0
/*
 * env.c — strata_config from defaults and the environment of whatever launched us.
 *
 * A program must run unchanged under `strata launch`, mpirun, srun and torchrun, so the rank,
 * the world size and the store address are read from each launcher's own variables, overlaid in
 * increasing priority: Slurm, then OpenMPI, then torchrun, then strata's own STRATA_* (which
 * always win). docs/config.md is the one table of every variable read here; keep them in step.
 *
 * Two conventions need more than copying:
 *  - torchrun: MASTER_ADDR:MASTER_PORT is torchrun's own TCPStore (PyTorch's agent listens
 *    there), so our store goes one port above it, MASTER_ADDR:(MASTER_PORT+1).
 *  - mpirun / srun give no address at all. When every rank is on one host (OpenMPI:
 *    OMPI_COMM_WORLD_LOCAL_SIZE == OMPI_COMM_WORLD_SIZE; Slurm: one node in the step) the store
 *    goes to 127.0.0.1 on a port in 20000..29999 hashed from the launcher's job id, and the job
 *    id is derived from it too, so two jobs on one host do not meet. Across hosts we cannot
 *    guess which host rank 0 is on, so store_addr stays empty and strata_comm_init asks for
 *    STRATA_ADDR.
 *
 * Invariants: a variable that is set but empty counts as unset; every value that is set is
 * checked, even when a higher-priority variable overrides it, and a bad one gives
 * STRATA_ERR_CONFIG with "NAME=VALUE: expected ..." in err. Must never: guess silently, or read
 * any state other than the environment (no sockets, and no file but STRATA_SECRET_FILE's, so that
 * a secret can stay out of the environment that `ps e` and /proc show).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "boot/store.h"
#include "strata.h"

extern char **environ;

/* Derived store ports: 20000 + hash % 10000, clear of torchrun's default 29500 only by luck,
 * which is why STRATA_ADDR always overrides. */
#define ENV_DERIVED_PORT_BASE 20000
#define ENV_DERIVED_PORT_SPAN 10000

typedef enum env_launcher { ENV_NONE = 0, ENV_SLURM, ENV_OMPI, ENV_TORCHRUN } env_launcher;

typedef struct env_reader {
  char *err;
  size_t err_len;
  /* strata_config_set: the one variable to read, its value, and whether a reader asked for it;
   * NULL reads the environment. */
  const char *only_name, *only_value;
  int only_seen;
  env_launcher launcher; /* the highest-priority launcher whose rank variable is set */
  const char *rank_var, *world_size_var;
} env_reader;

void strata_config_init(strata_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->rank = -1;
  cfg->world_size = -1;
  cfg->local_rank = -1;
  cfg->store_external = 0;
  snprintf(cfg->job_id, sizeof cfg->job_id, "strata");
  cfg->shm_enabled = 1;
  cfg->shm_cma = 1;
  /* one count serves the whole mesh: 8 fill a fat long link better, but overrun the queue of a
   * thin one (docs/wan.md) */
  cfg->tcp_streams = 4;
  cfg->tcp_buffer_bytes = 0; /* auto: from the measured RTT (src/net/tcp_mesh.c) */
  cfg->tcp_govern = 1;       /* acts on WAN pairs only (tcp.c), lets go where it costs */
  cfg->chunk_bytes = 0;      /* the schedule builder's default */
  cfg->timeout_s = 30.0;
  cfg->encrypt = STRATA_ENCRYPT_AUTO;
  cfg->algo = STRATA_ALGO_AUTO;
  cfg->compress = STRATA_COMPRESS_NONE;
  cfg->log_level = STRATA_LOG_WARN;
}

/* ---- reading one variable ---- */

static const char *env_get(const char *name) {
  const char *value = getenv(name);
  return value && *value ? value : NULL;
}

/* The value of `name` for this reader: the environment, or strata_config_set's one setting. */
static const char *reader_get(env_reader *r, const char *name) {
  if (!r->only_name) return env_get(name);
  if (strcmp(name, r->only_name) != 0) return NULL;
  r->only_seen = 1;
  return r->only_value && *r->only_value ? r->only_value : NULL;
}

static int env_error(env_reader *r, const char *name, const char *value, const char *expected) {
  if (r->err && r->err_len)
    snprintf(r->err, r->err_len, "%s=%s: expected %s", name, value, expected);
  return STRATA_ERR_CONFIG;
}

/* Sets *out when name is set to an integer in [min, max]; *found (may be NULL) says whether. */
static int env_int(env_reader *r, const char *name, long min, long max, int *out, int *found) {
  const char *value = reader_get(r, name);
  if (found) *found = value != NULL;
  if (!value) return STRATA_OK;
  char *end;
  errno = 0;
  long v = strtol(value, &end, 10);
  if (errno || end == value || *end || v < min || v > max) {
    char expected[96];
    snprintf(expected, sizeof expected, "an integer from %ld to %ld", min, max);
    return env_error(r, name, value, expected);
  }
  *out = (int)v;
  return STRATA_OK;
}

/* "4194304", "4M", "4MiB", "512k", "1G": binary multiples, case-insensitive (store.h). */
int strata_bytes_parse(const char *text, size_t *out) {
  char *end;
  if (!isdigit((unsigned char)text[0])) return -1;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno) return -1;
  unsigned shift = 0;
  switch (tolower((unsigned char)*end)) {
    case 'k':
      shift = 10;
      break;
    case 'm':
      shift = 20;
      break;
    case 'g':
      shift = 30;
      break;
    case 't':
      shift = 40;
      break;
    default:
      break;
  }
  if (shift) {
    end++;
    if (tolower((unsigned char)*end) == 'i') end++;
  }
  if (tolower((unsigned char)*end) == 'b') end++;
  if (*end) return -1;
  if (shift && v > (SIZE_MAX >> shift)) return -1;
  if (v > SIZE_MAX) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

static int env_size(env_reader *r, const char *name, size_t *out) {
  const char *value = reader_get(r, name);
  if (value && strata_bytes_parse(value, out) != 0)
    return env_error(r, name, value, "a byte count such as 65536, 512K, 4M or 1G");
  return STRATA_OK;
}

static int env_bool(env_reader *r, const char *name, int *out) {
  const char *value = reader_get(r, name);
  if (!value) return STRATA_OK;
  static const char *const yes[] = {"1", "yes", "true", "on"}, *const no[] = {"0", "no", "false",
                                                                              "off"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(value, yes[i])) return *out = 1, STRATA_OK;
    if (!strcasecmp(value, no[i])) return *out = 0, STRATA_OK;
  }
  return env_error(r, name, value, "1 or 0 (also yes/no, true/false, on/off)");
}

/* A string without whitespace that fits in cap bytes (NUL included). */
static int env_word(env_reader *r, const char *name, char *out, size_t cap) {
  const char *value = reader_get(r, name);
  if (!value) return STRATA_OK;
  if (strlen(value) >= cap) {
    char expected[64];
    snprintf(expected, sizeof expected, "at most %zu characters", cap - 1);
    return env_error(r, name, value, expected);
  }
  for (const char *c = value; *c; c++)
    if (isspace((unsigned char)*c) || iscntrl((unsigned char)*c))
      return env_error(r, name, value, "no spaces or control characters");
  snprintf(out, cap, "%s", value);
  return STRATA_OK;
}

/* STRATA_SECRET_FILE: the secret is the file's contents without its trailing newline(s). The
 * error names the file, never what it holds. */
static int env_secret_file(env_reader *r, const char *path, char *out, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    char expected[160];
    snprintf(expected, sizeof expected, "a readable file holding the job secret (%s)",
             strerror(errno));
    return env_error(r, "STRATA_SECRET_FILE", path, expected);
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
  return wrong ? env_error(r, "STRATA_SECRET_FILE", path, wrong) : STRATA_OK;
}

static int env_timeout(env_reader *r, const char *name, double *out) {
  const char *value = reader_get(r, name);
  if (!value) return STRATA_OK;
  char *end;
  errno = 0;
  double v = strtod(value, &end);
  if (errno || end == value || *end || !isfinite(v) || !(v > 0))
    return env_error(r, name, value, "seconds, a number > 0 such as 30 or 2.5");
  /* a wait this long is "forever"; longer ones would overflow millisecond poll timeouts */
  *out = v < STRATA_TIMEOUT_MAX_S ? v : STRATA_TIMEOUT_MAX_S;
  return STRATA_OK;
}

/* STRATA_ENCRYPT: off, on or auto. */
static int env_encrypt(env_reader *r, const char *name, int *out) {
  const char *value = reader_get(r, name);
  if (!value) return STRATA_OK;
  if (!strcasecmp(value, "auto")) return *out = STRATA_ENCRYPT_AUTO, STRATA_OK;
  int on = 0;
  int status = env_bool(r, name, &on);
  if (status != STRATA_OK) return env_error(r, name, value, "auto, on or off (also 1/0)");
  *out = on ? STRATA_ENCRYPT_ON : STRATA_ENCRYPT_OFF;
  return STRATA_OK;
}

/* STRATA_OP_TIMEOUT: seconds > 0, or 0 / "off" for no limit. */
static int env_op_timeout(env_reader *r, const char *name, double *out) {
  const char *value = reader_get(r, name);
  if (!value) return STRATA_OK;
  if (!strcasecmp(value, "off")) {
    *out = 0;
    return STRATA_OK;
  }
  char *end;
  errno = 0;
  double v = strtod(value, &end);
  if (errno || end == value || *end || !isfinite(v) || v < 0)
    return env_error(r, name, value, "seconds, a number >= 0 such as 1800 (0 or off: no limit)");
  *out = v;
  return STRATA_OK;
}

/* A link rate in Gb/s: a number > 0 and at most 100000 (100 Tb/s). */
static int env_gbps(env_reader *r, const char *name, double *out) {
  const char *value = reader_get(r, name);
  if (!value) return STRATA_OK;
  char *end;
  errno = 0;
  double v = strtod(value, &end);
  if (errno || end == value || *end || !isfinite(v) || !(v > 0) || v > 100000)
    return env_error(r, name, value, "Gb/s, a number > 0 such as 1, 10 or 0.2");
  *out = v;
  return STRATA_OK;
}

static int env_log_level(env_reader *r, const char *name, strata_log_level *out) {
  const char *value = reader_get(r, name);
  if (!value) return STRATA_OK;
  static const char *const names[] = {"off", "error", "warn", "info", "debug", "trace"};
  for (int i = 0; i < 6; i++) {
    char digit[2] = {(char)('0' + i), '\0'};
    if (!strcasecmp(value, names[i]) || !strcmp(value, digit))
      return *out = (strata_log_level)i, STRATA_OK;
  }
  if (!strcasecmp(value, "warning")) return *out = STRATA_LOG_WARN, STRATA_OK;
  return env_error(r, name, value, "off, error, warn, info, debug, trace or 0..5");
}

static int env_algo(env_reader *r, const char *name, strata_algo *out) {
  const char *value = reader_get(r, name);
  if (!value) return STRATA_OK;
  char lower[32];
  size_t n = strlen(value);
  if (n < sizeof lower) {
    for (size_t i = 0; i <= n; i++) lower[i] = (char)tolower((unsigned char)value[i]);
    if (strata_algo_parse(lower, out) == STRATA_OK) return STRATA_OK;
  }
  return env_error(r, name, value, "auto, ring, rhd, tree or direct");
}

static int env_compress(env_reader *r, const char *name, strata_compress *out) {
  const char *value = reader_get(r, name);
  if (!value) return STRATA_OK;
  char lower[32];
  size_t n = strlen(value);
  strata_compress c;
  if (n < sizeof lower) {
    for (size_t i = 0; i <= n; i++) lower[i] = (char)tolower((unsigned char)value[i]);
    /* "default" would point the default at itself */
    if (strata_compress_parse(lower, &c) == STRATA_OK && c != STRATA_COMPRESS_DEFAULT)
      return *out = c, STRATA_OK;
  }
  return env_error(r, name, value, "none, bf16, f16, int8, fp8 or int4");
}

/* A store address a client can connect to: HOST:PORT with a host and a port 1..65535. */
static int check_store_addr(env_reader *r, const char *name, const char *value) {
  char host[256], why[320];
  int port;
  if (strata_store_addr_parse(value, 0, host, sizeof host, &port, why, sizeof why) != STRATA_OK ||
      port == 0)
    return env_error(r, name, value, "HOST:PORT with a port from 1 to 65535 (IPv6: [ADDR]:PORT)");
  return STRATA_OK;
}

/* ---- the launchers, lowest priority first ---- */

#define TRY(expr)                             \
  do {                                        \
    int status_ = (expr);                     \
    if (status_ != STRATA_OK) return status_; \
  } while (0)

/* Reads the rank / world size / local rank triple of one launcher. */
static int overlay_ranks(env_reader *r, strata_config *cfg, env_launcher launcher,
                         const char *rank_var, const char *size_var, const char *local_var) {
  int found_rank = 0, found_size = 0;
  TRY(env_int(r, rank_var, 0, 1 << 30, &cfg->rank, &found_rank));
  TRY(env_int(r, size_var, 1, 1 << 30, &cfg->world_size, &found_size));
  TRY(env_int(r, local_var, 0, 1 << 30, &cfg->local_rank, NULL));
  if (found_rank) {
    r->launcher = launcher;
    r->rank_var = rank_var;
  }
  if (found_size) r->world_size_var = size_var;
  return STRATA_OK;
}

static int overlay_torchrun_addr(env_reader *r, strata_config *cfg) {
  const char *host = reader_get(r, "MASTER_ADDR"), *port_text = reader_get(r, "MASTER_PORT");
  int port = 0;
  TRY(env_int(r, "MASTER_PORT", 1, 65534, &port, NULL));
  if (!host && !port_text) return STRATA_OK;
  if (!host) return env_error(r, "MASTER_ADDR", "", "a host name when MASTER_PORT is set");
  if (!port_text)
    return env_error(r, "MASTER_PORT", "", "a port when MASTER_ADDR is set (torchrun sets both)");
  char addr[sizeof cfg->store_addr];
  int n = strchr(host, ':') ? snprintf(addr, sizeof addr, "[%s]:%d", host, port + 1)
                            : snprintf(addr, sizeof addr, "%s:%d", host, port + 1);
  if (n < 0 || (size_t)n >= sizeof addr)
    return env_error(r, "MASTER_ADDR", host, "a shorter host name");
  TRY(check_store_addr(r, "MASTER_ADDR", addr));
  memcpy(cfg->store_addr, addr, sizeof addr);
  return STRATA_OK;
}

static int overlay_strata(env_reader *r, strata_config *cfg) {
  int found_rank = 0, found_size = 0;
  TRY(env_int(r, "STRATA_RANK", 0, 1 << 30, &cfg->rank, &found_rank));
  TRY(env_int(r, "STRATA_WORLD_SIZE", 1, 1 << 30, &cfg->world_size, &found_size));
  TRY(env_int(r, "STRATA_LOCAL_RANK", 0, 1 << 30, &cfg->local_rank, NULL));
  if (found_rank) r->rank_var = "STRATA_RANK";
  if (found_size) r->world_size_var = "STRATA_WORLD_SIZE";
  const char *addr = reader_get(r, "STRATA_ADDR");
  if (addr) {
    TRY(check_store_addr(r, "STRATA_ADDR", addr));
    snprintf(cfg->store_addr, sizeof cfg->store_addr, "%s", addr);
  }
  TRY(env_bool(r, "STRATA_STORE_EXTERNAL", &cfg->store_external));
  TRY(env_word(r, "STRATA_HOST", cfg->advertise_host, sizeof cfg->advertise_host));
  TRY(env_word(r, "STRATA_JOB_ID", cfg->job_id, sizeof cfg->job_id));
  const char *secret = reader_get(r, "STRATA_SECRET");
  if (secret && strlen(secret) >= sizeof cfg->secret)
    return env_error(r, "STRATA_SECRET", "(hidden)", "at most 255 characters");
  if (secret) snprintf(cfg->secret, sizeof cfg->secret, "%s", secret);
  const char *secret_file = reader_get(r, "STRATA_SECRET_FILE");
  if (secret_file && secret)
    return env_error(r, "STRATA_SECRET_FILE", secret_file,
                     "STRATA_SECRET unset (set one of STRATA_SECRET and STRATA_SECRET_FILE)");
  if (secret_file) TRY(env_secret_file(r, secret_file, cfg->secret, sizeof cfg->secret));
  TRY(env_bool(r, "STRATA_SHM", &cfg->shm_enabled));
  TRY(env_bool(r, "STRATA_SHM_CMA", &cfg->shm_cma));
  TRY(env_int(r, "STRATA_TCP_STREAMS", 1, 64, &cfg->tcp_streams, NULL));
  TRY(env_size(r, "STRATA_TCP_BUFFER", &cfg->tcp_buffer_bytes));
  TRY(env_word(r, "STRATA_TCP_CC", cfg->tcp_congestion, sizeof cfg->tcp_congestion));
  TRY(env_gbps(r, "STRATA_TCP_LINK_GBPS", &cfg->tcp_link_gbps));
  TRY(env_bool(r, "STRATA_TCP_GOVERN", &cfg->tcp_govern));
  TRY(env_size(r, "STRATA_CHUNK", &cfg->chunk_bytes));
  TRY(env_timeout(r, "STRATA_TIMEOUT", &cfg->timeout_s));
  TRY(env_op_timeout(r, "STRATA_OP_TIMEOUT", &cfg->op_timeout_s));
  TRY(env_bool(r, "STRATA_ELASTIC", &cfg->elastic));
  TRY(env_bool(r, "STRATA_JOIN", &cfg->join));
  TRY(env_encrypt(r, "STRATA_ENCRYPT", &cfg->encrypt));
  TRY(env_algo(r, "STRATA_ALGO", &cfg->algo));
  TRY(env_log_level(r, "STRATA_LOG", &cfg->log_level));
  TRY(env_word(r, "STRATA_SITE", cfg->site, sizeof cfg->site));
  TRY(env_compress(r, "STRATA_COMPRESS", &cfg->compress));
  /* A rank never reads a topology file (the runtime does not link the planner): the launcher
   * turns it into STRATA_SITE. A job that still sets only STRATA_TOPOLOGY would silently run
   * flat, so it is refused with the way to say it. */
  const char *topology = reader_get(r, "STRATA_TOPOLOGY");
  if (topology && topology[0] && !cfg->site[0])
    return env_error(
        r, "STRATA_TOPOLOGY", topology,
        "STRATA_SITE instead: ranks do not read topology files; `strata launch "
        "--topology FILE` sets STRATA_SITE, or export STRATA_SITE=$(strata site FILE)");
  return STRATA_OK;
}

/* ---- defaults derived from the launcher's job ---- */

static uint64_t fnv1a(const char *text) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char *c = (const unsigned char *)text; *c; c++)
    h = (h ^ *c) * 1099511628211ull;
  return h;
}

/* The launcher's identity of this job (same on every rank, different for the next job), and
 * whether all ranks share one host. Returns 0 when the launcher gives no job identity. */
static int launcher_job(env_launcher launcher, char *key, size_t len, int *one_host) {
  const char *id = NULL;
  int nodes = 0, local_size = 0, world_size = 0;
  *one_host = 0;
  if (launcher == ENV_OMPI) {
    if (!(id = env_get("PMIX_NAMESPACE"))) id = env_get("OMPI_MCA_ess_base_jobid");
    if (!id) id = env_get("OMPI_MCA_orte_hnp_uri");
    const char *local = env_get("OMPI_COMM_WORLD_LOCAL_SIZE"),
               *size = env_get("OMPI_COMM_WORLD_SIZE");
    if (local && size) local_size = atoi(local), world_size = atoi(size);
    *one_host = local_size > 0 && local_size == world_size;
    if (id) snprintf(key, len, "ompi-%s", id);
  } else if (launcher == ENV_SLURM) {
    const char *job = env_get("SLURM_JOB_ID"), *step = env_get("SLURM_STEP_ID");
    const char *node_vars[] = {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"};
    for (int i = 0; i < 3 && !nodes; i++)
      if (env_get(node_vars[i])) nodes = atoi(env_get(node_vars[i]));
    *one_host = nodes == 1;
    if (job) snprintf(key, len, "slurm-%s.%s", job, step ? step : "0");
    id = job;
  } else if (launcher == ENV_TORCHRUN) {
    id = env_get("TORCHELASTIC_RUN_ID");
    if (id) snprintf(key, len, "torchrun-%s", id);
  }
  return id != NULL;
}

static void derive_defaults(const env_reader *r, strata_config *cfg) {
  char key[512];
  int one_host;
  if (!launcher_job(r->launcher, key, sizeof key, &one_host)) return;
  uint64_t h = fnv1a(key);
  if (!env_get("STRATA_JOB_ID")) {
    if (strlen(key) < sizeof cfg->job_id)
      memcpy(cfg->job_id, key, strlen(key) + 1);
    else
      snprintf(cfg->job_id, sizeof cfg->job_id, "job-%016llx", (unsigned long long)h);
  }
  if (!cfg->store_addr[0] && one_host && r->launcher != ENV_TORCHRUN)
    snprintf(cfg->store_addr, sizeof cfg->store_addr, "127.0.0.1:%d",
             ENV_DERIVED_PORT_BASE + (int)(h % ENV_DERIVED_PORT_SPAN));
}

static int check_consistent(env_reader *r, const strata_config *cfg) {
  if (cfg->rank >= 0 && cfg->world_size > 0 && cfg->rank >= cfg->world_size) {
    char value[32], expected[128];
    snprintf(value, sizeof value, "%d", cfg->rank);
    snprintf(expected, sizeof expected, "a rank below the world size %d (from %s)", cfg->world_size,
             r->world_size_var ? r->world_size_var : "?");
    return env_error(r, r->rank_var ? r->rank_var : "rank", value, expected);
  }
  return STRATA_OK;
}

int strata_config_from_env(strata_config *cfg, char *err, size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (!cfg) return STRATA_ERR_INVALID_ARG;
  env_reader r = {.err = err, .err_len = err_len};
  TRY(overlay_ranks(&r, cfg, ENV_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"));
  TRY(overlay_ranks(&r, cfg, ENV_OMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                    "OMPI_COMM_WORLD_LOCAL_RANK"));
  TRY(overlay_ranks(&r, cfg, ENV_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK"));
  TRY(overlay_torchrun_addr(&r, cfg));
  TRY(overlay_strata(&r, cfg));
  derive_defaults(&r, cfg);
  if (cfg->rank <= 0) strata_env_warn_unknown(environ); /* rank 0 (or no rank) says it */
  return check_consistent(&r, cfg);
}

int strata_config_set(strata_config *cfg, const char *name, const char *value, char *err,
                      size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (!cfg || !name || !value) return STRATA_ERR_INVALID_ARG;
  /* "timeout", "tcp_streams", "STRATA_TIMEOUT": all name the variable STRATA_TIMEOUT, whose
   * parser (and error message) is the one strata_config_from_env uses. */
  char var[64] = "STRATA_";
  const char *base = strncmp(name, "STRATA_", 7) ? name : name + 7;
  size_t len = strlen(base);
  if (len == 0 || len + 8 > sizeof var) goto unknown;
  for (size_t i = 0; i < len; i++) {
    if (!isalnum((unsigned char)base[i]) && base[i] != '_') goto unknown;
    var[7 + i] = (char)toupper((unsigned char)base[i]);
  }
  var[7 + len] = '\0';
  env_reader r = {.err = err, .err_len = err_len, .only_name = var, .only_value = value};
  strata_config copy = *cfg;
  int status = overlay_strata(&r, &copy);
  if (!r.only_seen) goto unknown;
  if (status == STRATA_OK) status = check_consistent(&r, &copy);
  if (status == STRATA_OK) *cfg = copy;
  return status;
unknown:
  if (err && err_len)
    snprintf(err, err_len,
             "%s: no such setting (docs/config.md lists them: rank, world_size, "
             "addr, secret, timeout, tcp_streams, ...)",
             name);
  return STRATA_ERR_CONFIG;
}
