// SPDX-License-Identifier: Apache-2.0
/*
 * env.c — strata_config from defaults and the environment of whatever launched us.
 *
 * A program must run unchanged under `strata launch`, mpirun, srun and torchrun, so the rank,
 * the world size and the store address are read from each launcher's own variables, overlaid in
 * increasing priority: Slurm, then OpenMPI, then torchrun, then strata's own STRATA_* (which
 * always win). Strata's own are the rows of one table (boot/settings.c), which docs/config.md is
 * generated from.
 *
 * Two conventions need more than copying:
 *  - torchrun: MASTER_ADDR:MASTER_PORT is torchrun's own TCPStore (PyTorch's agent listens
 *    there), so our store goes one port above it, MASTER_ADDR:(MASTER_PORT+1).
 *  - PMIx launchers (mpirun, srun --mpi=pmix) set PMIX_RANK and PMIX_NAMESPACE: the job id is
 *    "pmix-<namespace>", and the store address and secret stay unset here — strata_comm_init
 *    gets them from rank 0 through PMIx (boot/pmix.c). A build without PMIx, and a job that
 *    sets STRATA_RANK or STRATA_ADDR, falls back to the conventions below.
 *  - mpirun / srun without PMIx give no address at all. When every rank is on one host (OpenMPI:
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

#include "boot/pmix.h"
#include "boot/settings.h"
#include "boot/store.h"
#include "core/abi.h"
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

void strata_config_init_sized(strata_config *cfg, size_t struct_size, int header_version) {
  strata_config defaults;
  strata_settings_config_defaults(&defaults);
  strata_struct_init(cfg, &defaults, sizeof defaults, struct_size, header_version);
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
  return strata_setting_error(name, value, expected, r->err, r->err_len);
}

/* Sets *out when name is set to an integer in [min, max]; *found (may be NULL) says whether. */
static int env_int(env_reader *r, const char *name, long min, long max, int *out, int *found) {
  const char *value = reader_get(r, name);
  if (found) *found = value != NULL;
  if (!value) return STRATA_OK;
  return strata_setting_parse_int(name, value, min, max, out, r->err, r->err_len);
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
  if (strata_setting_parse(strata_setting_find("STRATA_ADDR"), addr, cfg, NULL, 0) != STRATA_OK)
    return env_error(r, "MASTER_ADDR", addr,
                     "HOST:PORT with a port from 1 to 65535 (IPv6: [ADDR]:PORT)");
  return STRATA_OK;
}

/* Every CONFIG row of the table (boot/settings.c), in its order. */
static int overlay_strata(env_reader *r, strata_config *cfg) {
  size_t count;
  const strata_setting *rows = strata_settings(&count);
  const char *secret = NULL, *secret_file = NULL, *topology = NULL;
  for (size_t i = 0; i < count; i++) {
    const strata_setting *row = &rows[i];
    if (row->scope != STRATA_SETTING_CONFIG) continue;
    const char *value = reader_get(r, row->name);
    if (!value) continue;
    if (row->kind == STRATA_SETTING_SECRET) secret = value;
    if (row->kind == STRATA_SETTING_SECRET_FILE) secret_file = value;
    if (row->kind == STRATA_SETTING_TOPOLOGY) topology = value;
    if (secret_file && secret)
      return env_error(r, "STRATA_SECRET_FILE", secret_file,
                       "STRATA_SECRET unset (set one of STRATA_SECRET and STRATA_SECRET_FILE)");
    TRY(strata_setting_parse(row, value, cfg, r->err, r->err_len));
    if (row->offset == offsetof(strata_config, rank) && row->size) r->rank_var = row->name;
    if (row->offset == offsetof(strata_config, world_size) && row->size)
      r->world_size_var = row->name;
  }
  /* A rank never reads a topology file (the runtime does not link the planner): the launcher
   * turns it into STRATA_SITE. A job that still sets only STRATA_TOPOLOGY would silently run
   * flat, so it is refused with the way to say it. */
  if (topology && !cfg->site[0])
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
  int one_host = 0;
  if (strata_pmix_launched()) /* the store and the secret come through PMIx (boot/pmix.c) */
    snprintf(key, sizeof key, "pmix-%s", strata_pmix_namespace());
  else if (!launcher_job(r->launcher, key, sizeof key, &one_host))
    return;
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

int strata_config_import(const strata_config *cfg, strata_config *full, char *err, size_t err_len) {
  strata_settings_config_defaults(full);
  return strata_struct_import(cfg, full, sizeof *full, "strata_config", "strata_config_init", err,
                              err_len);
}

static int overlay_environment(env_reader *r, strata_config *cfg) {
  if (strata_pmix_launched()) /* the world size, which no PMIx variable gives, comes at init */
    TRY(env_int(r, "PMIX_RANK", 0, 1 << 30, &cfg->rank, NULL));
  TRY(overlay_ranks(r, cfg, ENV_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"));
  TRY(overlay_ranks(r, cfg, ENV_OMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                    "OMPI_COMM_WORLD_LOCAL_RANK"));
  TRY(overlay_ranks(r, cfg, ENV_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK"));
  TRY(overlay_torchrun_addr(r, cfg));
  TRY(overlay_strata(r, cfg));
  derive_defaults(r, cfg);
  return check_consistent(r, cfg);
}

int strata_config_from_env(strata_config *cfg, char *err, size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (!cfg) return STRATA_ERR_INVALID_ARG;
  strata_config full;
  TRY(strata_config_import(cfg, &full, err, err_len));
  env_reader r = {.err = err, .err_len = err_len};
  int status = overlay_environment(&r, &full);
  if (full.rank <= 0) strata_env_warn_unknown(environ); /* rank 0 (or no rank) says it */
  /* as before: what was read up to a bad value stays read */
  strata_struct_export(cfg, &full);
  return status;
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
  strata_config copy;
  TRY(strata_config_import(cfg, &copy, err, err_len));
  int status = overlay_strata(&r, &copy);
  if (!r.only_seen) goto unknown;
  if (status == STRATA_OK) status = check_consistent(&r, &copy);
  if (status == STRATA_OK) strata_struct_export(cfg, &copy);
  return status;
unknown:
  if (err && err_len)
    snprintf(err, err_len,
             "%s: no such setting (docs/config.md lists them: rank, world_size, "
             "addr, secret, timeout, tcp_streams, ...)",
             name);
  return STRATA_ERR_CONFIG;
}
