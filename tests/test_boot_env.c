// SPDX-License-Identifier: Apache-2.0
/*
 * test_boot_env.c — strata_config_from_env: defaults, each launcher's convention (Slurm, OpenMPI,
 * torchrun, strata, PMIx), their precedence, the derived single-host store address and job id, and
 * a clear STRATA_ERR_CONFIG naming the variable for every bad value.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot/pmix.h"
#include "helpers/check.h"
#include "strata.h"

static const char *const all_vars[] = {"SLURM_PROCID",
                                       "SLURM_NTASKS",
                                       "SLURM_LOCALID",
                                       "SLURM_JOB_ID",
                                       "SLURM_STEP_ID",
                                       "SLURM_NNODES",
                                       "SLURM_JOB_NUM_NODES",
                                       "SLURM_STEP_NUM_NODES",
                                       "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "OMPI_COMM_WORLD_LOCAL_SIZE",
                                       "OMPI_MCA_ess_base_jobid",
                                       "OMPI_MCA_orte_hnp_uri",
                                       "PMIX_NAMESPACE",
                                       "PMIX_RANK",
                                       "RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "TORCHELASTIC_RUN_ID",
                                       "STRATA_RANK",
                                       "STRATA_WORLD_SIZE",
                                       "STRATA_LOCAL_RANK",
                                       "STRATA_ADDR",
                                       "STRATA_STORE_EXTERNAL",
                                       "STRATA_HOST",
                                       "STRATA_JOB_ID",
                                       "STRATA_SECRET",
                                       "STRATA_SHM",
                                       "STRATA_TCP_STREAMS",
                                       "STRATA_TCP_BUFFER",
                                       "STRATA_TCP_GOVERN",
                                       "STRATA_CHUNK",
                                       "STRATA_TIMEOUT",
                                       "STRATA_ALGO",
                                       "STRATA_LOG",
                                       "STRATA_SITE"};

static void clear_env(void) {
  for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
}

static char err[512];

static int load(strata_config *cfg) {
  strata_config_init(cfg);
  return strata_config_from_env(cfg, err, sizeof err);
}

static void test_defaults(void) {
  clear_env();
  strata_config cfg;
  CHECK(load(&cfg) == STRATA_OK);
  CHECK(cfg.rank == -1 && cfg.world_size == -1 && cfg.local_rank == -1);
  CHECK(cfg.shm_enabled == 1 && cfg.tcp_streams == 4 && cfg.tcp_buffer_bytes == 0 &&
        cfg.tcp_govern == 1);
  CHECK(cfg.chunk_bytes == 0 && cfg.timeout_s == 30.0 && cfg.algo == STRATA_ALGO_AUTO);
  CHECK(cfg.log_level == STRATA_LOG_WARN && !strcmp(cfg.job_id, "strata"));
  CHECK(cfg.store_external == 0 && cfg.store_addr[0] == '\0' && cfg.secret[0] == '\0');
  CHECK(err[0] == '\0');
}

static void test_slurm(void) {
  clear_env();
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_JOB_ID", "4242", 1);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_NNODES", "2", 1);
  strata_config cfg;
  CHECK(load(&cfg) == STRATA_OK);
  CHECK(cfg.rank == 3 && cfg.world_size == 8 && cfg.local_rank == 1);
  CHECK(!strcmp(cfg.job_id, "slurm-4242.0"));
  CHECK(cfg.store_addr[0] == '\0'); /* two nodes: no guess */
  setenv("SLURM_NNODES", "1", 1);
  CHECK(load(&cfg) == STRATA_OK);
  CHECK(!strncmp(cfg.store_addr, "127.0.0.1:", 10));
  int port = atoi(cfg.store_addr + 10);
  CHECK(port >= 20000 && port <= 29999);
  char first[256];
  snprintf(first, sizeof first, "%s", cfg.store_addr);
  CHECK(load(&cfg) == STRATA_OK && !strcmp(first, cfg.store_addr)); /* deterministic */
  setenv("SLURM_STEP_ID", "1", 1);
  CHECK(load(&cfg) == STRATA_OK && strcmp(cfg.job_id, "slurm-4242.0") != 0);
  unsetenv("SLURM_NNODES");
  setenv("SLURM_JOB_NUM_NODES", "1", 1);
  CHECK(load(&cfg) == STRATA_OK && cfg.store_addr[0] != '\0');
}

static void test_ompi(void) {
  clear_env();
  /* as `mpirun -np 2 env` shows on this machine (OpenMPI 4.1, PMIx 4) */
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  setenv("OMPI_MCA_ess_base_jobid", "1967718401", 1);
  setenv("PMIX_NAMESPACE", "1967718401", 1);
  strata_config cfg;
  CHECK(load(&cfg) == STRATA_OK);
  CHECK(cfg.rank == 1 && cfg.world_size == 2 && cfg.local_rank == 1);
  CHECK(!strcmp(cfg.job_id, "ompi-1967718401"));
  CHECK(!strncmp(cfg.store_addr, "127.0.0.1:", 10));
  char first[256];
  snprintf(first, sizeof first, "%s", cfg.store_addr);
  setenv("PMIX_NAMESPACE", "1967718402", 1); /* another job: another port and id */
  CHECK(load(&cfg) == STRATA_OK && strcmp(first, cfg.store_addr) != 0);
  CHECK(!strcmp(cfg.job_id, "ompi-1967718402"));
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1); /* spread over hosts */
  CHECK(load(&cfg) == STRATA_OK && cfg.store_addr[0] == '\0');
  /* OpenMPI beats Slurm (mpirun inside an allocation) */
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "1", 1);
  CHECK(load(&cfg) == STRATA_OK && cfg.rank == 1 && cfg.world_size == 2);
  /* an explicit address is never replaced */
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  setenv("STRATA_ADDR", "node7:1234", 1);
  CHECK(load(&cfg) == STRATA_OK && !strcmp(cfg.store_addr, "node7:1234"));
}

/* mpirun and srun --mpi=pmix: the rank from PMIX_RANK, the job from the namespace, and no store
 * address (rank 0 publishes it through PMIx at init) — unless the job names its store itself. */
static void test_pmix(void) {
  clear_env();
  setenv("PMIX_RANK", "2", 1);
  setenv("PMIX_NAMESPACE", "slurm.pmix.77.0", 1);
  strata_config cfg;
  CHECK(load(&cfg) == STRATA_OK);
#ifdef STRATA_HAVE_PMIX
  CHECK(strata_pmix_launched());
  CHECK(cfg.rank == 2 && cfg.world_size == -1); /* the size comes from the PMIx server */
  CHECK(!strcmp(cfg.job_id, "pmix-slurm.pmix.77.0") && cfg.store_addr[0] == '\0');
  /* mpirun on one host: OpenMPI's variables agree, and no port is guessed */
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  CHECK(load(&cfg) == STRATA_OK && cfg.rank == 2 && cfg.world_size == 4);
  CHECK(!strcmp(cfg.job_id, "pmix-slurm.pmix.77.0") && cfg.store_addr[0] == '\0');
  setenv("STRATA_JOB_ID", "mine", 1);
  CHECK(load(&cfg) == STRATA_OK && !strcmp(cfg.job_id, "mine"));
  unsetenv("STRATA_JOB_ID");
#else
  CHECK(!strata_pmix_launched());
#endif
  /* strata launch, an explicit store and torchrun (under srun) each name the job themselves */
  const char *named[][2] = {
      {"STRATA_RANK", "2"}, {"STRATA_ADDR", "node7:1234"}, {"RANK", "2"}, {"MASTER_ADDR", "n1"}};
  for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
    setenv(named[i][0], named[i][1], 1);
    CHECK(!strata_pmix_launched());
    unsetenv(named[i][0]);
  }
  setenv("STRATA_ADDR", "node7:1234", 1);
  CHECK(load(&cfg) == STRATA_OK && !strcmp(cfg.store_addr, "node7:1234"));
  CHECK(strncmp(cfg.job_id, "pmix-", 5) != 0);
  unsetenv("PMIX_NAMESPACE"); /* PMIX_RANK alone is not a PMIx launch */
  unsetenv("STRATA_ADDR");
  CHECK(!strata_pmix_launched());
}

static void test_torchrun(void) {
  clear_env();
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("MASTER_ADDR", "10.0.0.5", 1);
  setenv("MASTER_PORT", "29500", 1);
  setenv("TORCHELASTIC_RUN_ID", "abc", 1);
  setenv("OMPI_COMM_WORLD_RANK", "0", 1); /* lower priority */
  setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
  strata_config cfg;
  CHECK(load(&cfg) == STRATA_OK);
  CHECK(cfg.rank == 2 && cfg.world_size == 4 && cfg.local_rank == 0);
  CHECK(!strcmp(cfg.store_addr, "10.0.0.5:29501")); /* one above torchrun's own TCPStore */
  CHECK(!strcmp(cfg.job_id, "torchrun-abc"));
  setenv("MASTER_ADDR", "fd00::1", 1);
  CHECK(load(&cfg) == STRATA_OK && !strcmp(cfg.store_addr, "[fd00::1]:29501"));
  setenv("MASTER_PORT", "65535", 1);
  CHECK(load(&cfg) == STRATA_ERR_CONFIG && strstr(err, "MASTER_PORT=65535"));
  unsetenv("MASTER_PORT");
  CHECK(load(&cfg) == STRATA_ERR_CONFIG && strstr(err, "MASTER_PORT"));
}

static void test_strata_wins(void) {
  clear_env();
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("MASTER_ADDR", "10.0.0.5", 1);
  setenv("MASTER_PORT", "29500", 1);
  setenv("STRATA_RANK", "5", 1);
  setenv("STRATA_WORLD_SIZE", "6", 1);
  setenv("STRATA_LOCAL_RANK", "2", 1);
  setenv("STRATA_ADDR", "store.example:7000", 1);
  setenv("STRATA_STORE_EXTERNAL", "1", 1);
  setenv("STRATA_HOST", "192.168.1.9", 1);
  setenv("STRATA_JOB_ID", "exp-17", 1);
  setenv("STRATA_SECRET", "s3cret", 1);
  setenv("STRATA_SHM", "off", 1);
  setenv("STRATA_TCP_STREAMS", "16", 1);
  setenv("STRATA_TCP_BUFFER", "512K", 1);
  setenv("STRATA_TCP_GOVERN", "0", 1);
  setenv("STRATA_CHUNK", "1MiB", 1);
  setenv("STRATA_TIMEOUT", "2.5", 1);
  setenv("STRATA_ALGO", "RHD", 1);
  setenv("STRATA_LOG", "debug", 1);
  setenv("STRATA_SITE", "eu-west", 1);
  strata_config cfg;
  CHECK(load(&cfg) == STRATA_OK);
  CHECK(cfg.rank == 5 && cfg.world_size == 6 && cfg.local_rank == 2);
  CHECK(!strcmp(cfg.store_addr, "store.example:7000") && cfg.store_external == 1);
  CHECK(!strcmp(cfg.advertise_host, "192.168.1.9") && !strcmp(cfg.job_id, "exp-17"));
  CHECK(!strcmp(cfg.secret, "s3cret") && cfg.shm_enabled == 0 && cfg.tcp_streams == 16);
  CHECK(cfg.tcp_buffer_bytes == 512u << 10 && cfg.chunk_bytes == 1u << 20);
  CHECK(cfg.tcp_govern == 0);
  CHECK(cfg.timeout_s == 2.5 && cfg.algo == STRATA_ALGO_RHD);
  CHECK(cfg.log_level == STRATA_LOG_DEBUG && !strcmp(cfg.site, "eu-west"));
  setenv("STRATA_LOG", "5", 1);
  setenv("STRATA_TCP_BUFFER", "0", 1);
  setenv("STRATA_CHUNK", "65536", 1);
  setenv("STRATA_ALGO", "tree", 1);
  CHECK(load(&cfg) == STRATA_OK && cfg.log_level == STRATA_LOG_TRACE);
  CHECK(cfg.tcp_buffer_bytes == 0 && cfg.chunk_bytes == 65536 && cfg.algo == STRATA_ALGO_TREE);
  setenv("STRATA_JOB_ID", "", 1); /* empty counts as unset */
  CHECK(load(&cfg) == STRATA_OK && !strcmp(cfg.job_id, "strata"));
}

typedef struct bad_case {
  const char *name, *value;
} bad_case;

static void test_bad_values(void) {
  static const bad_case cases[] = {
      {"STRATA_RANK", "x"},
      {"STRATA_RANK", "-1"},
      {"STRATA_WORLD_SIZE", "0"},
      {"STRATA_LOCAL_RANK", "1.5"},
      {"STRATA_ADDR", "nohost"},
      {"STRATA_ADDR", "host:0"},
      {"STRATA_ADDR", "host:99999"},
      {"STRATA_STORE_EXTERNAL", "maybe"},
      {"STRATA_HOST", "a b"},
      {"STRATA_SHM", "2"},
      {"STRATA_TCP_STREAMS", "0"},
      {"STRATA_TCP_STREAMS", "65"},
      {"STRATA_TCP_BUFFER", "4X"},
      {"STRATA_TCP_BUFFER", "-1"},
      {"STRATA_TCP_GOVERN", "sometimes"},
      {"STRATA_CHUNK", "1M2"},
      {"STRATA_CHUNK", "99999999999999999999"},
      {"STRATA_TIMEOUT", "0"},
      {"STRATA_TIMEOUT", "-3"},
      {"STRATA_TIMEOUT", "nan"},
      {"STRATA_TIMEOUT", "10s"},
      {"STRATA_ALGO", "bogus"},
      {"STRATA_LOG", "loud"},
      {"STRATA_LOG", "6"},
      {"SLURM_PROCID", "abc"},
      {"OMPI_COMM_WORLD_SIZE", "-2"},
      {"WORLD_SIZE", "many"},
      {"MASTER_PORT", "http"},
      {"STRATA_JOB_ID",
       "a-very-long-job-id-that-goes-on-and-on-"
       "beyond-sixty-three-characters-xx"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    clear_env();
    setenv(cases[i].name, cases[i].value, 1);
    if (!strcmp(cases[i].name, "MASTER_PORT")) setenv("MASTER_ADDR", "h", 1);
    strata_config cfg;
    err[0] = '\0';
    int status = load(&cfg);
    char want[256];
    snprintf(want, sizeof want, "%s=%s", cases[i].name, cases[i].value);
    int ok = status == STRATA_ERR_CONFIG && strstr(err, want) && strstr(err, "expected");
    if (!ok) fprintf(stderr, "%s: got %s, message '%s'\n", want, strata_err_name(status), err);
    CHECK(ok);
  }
  /* a secret is never echoed */
  clear_env();
  char long_secret[300];
  memset(long_secret, 'k', sizeof long_secret - 1);
  long_secret[sizeof long_secret - 1] = '\0';
  setenv("STRATA_SECRET", long_secret, 1);
  strata_config cfg;
  CHECK(load(&cfg) == STRATA_ERR_CONFIG && strstr(err, "STRATA_SECRET") && !strstr(err, "kkk"));
  /* a rank outside the world */
  clear_env();
  setenv("STRATA_RANK", "4", 1);
  setenv("STRATA_WORLD_SIZE", "4", 1);
  CHECK(load(&cfg) == STRATA_ERR_CONFIG && strstr(err, "STRATA_RANK=4") &&
        strstr(err, "STRATA_WORLD_SIZE"));
  CHECK(strata_config_from_env(NULL, NULL, 0) == STRATA_ERR_INVALID_ARG);
}

int main(void) {
  test_defaults();
  test_slurm();
  test_ompi();
  test_pmix();
  test_torchrun();
  test_strata_wins();
  test_bad_values();
  clear_env();
  if (failures) {
    fprintf(stderr, "test_boot_env: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_boot_env: ok\n");
  return 0;
}
