/*
 * sites.c — which site every rank of a communicator is in, for the hierarchical collectives.
 *
 * At init every rank publishes its STRATA_SITE (cfg.site, may be empty) in the rendezvous store
 * and reads everyone's. Keys live under "<job>/site/<k>/<rank>", k = how many communicators this
 * rank opened in the job so far (a store counter, as src/net/net.c does for its keys), so two
 * communicators of one job never read each other's answers. Names become indices in order of
 * first appearance (rank 0's site is 0), so every rank computes the same array. Fewer than two
 * distinct names (in particular STRATA_SITE unset everywhere) means no sites: the array stays
 * NULL and every collective is built flat. A rank with an empty name while others have one is
 * in a site of its own name "" (reported in the log).
 *
 * Never blocks longer than cfg.timeout_s per read; on failure the communicator fails to init.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "engine/engine.h"

#define SITE_NAME_BYTES 64

static int site_prefix(strata_comm *comm, char *prefix, size_t len) {
  char key[160];
  snprintf(key, sizeof key, "%s/site/opens/%d", comm->cfg.job_id, comm->rank);
  int64_t opens = 0;
  int status = strata_store_add(comm->store, key, 1, &opens);
  if (status == STRATA_OK)
    snprintf(prefix, len, "%s/site/%lld", comm->cfg.job_id, (long long)(opens - 1));
  return status;
}

static int site_read(strata_comm *comm, const char *prefix, int rank, char *name) {
  char key[224];
  snprintf(key, sizeof key, "%s/%d", prefix, rank);
  void *value = NULL;
  size_t len = 0;
  int status = strata_store_get(comm->store, key, &value, &len, comm->cfg.timeout_s);
  if (status != STRATA_OK) return status;
  snprintf(name, SITE_NAME_BYTES, "%.*s", (int)(len < SITE_NAME_BYTES ? len : SITE_NAME_BYTES - 1),
           (const char *)value);
  free(value);
  return STRATA_OK;
}

static void site_log(const strata_comm *comm, char (*names)[SITE_NAME_BYTES], int nsites) {
  if (strata_log_get_level() < STRATA_LOG_INFO) return;
  char text[512] = "";
  size_t used = 0;
  for (int t = 0; t < nsites && used < sizeof text; t++) {
    int n = 0;
    for (int r = 0; r < comm->nranks; r++) n += comm->site_of_rank[r] == t;
    used += (size_t)snprintf(text + used, sizeof text - used, "%s'%s' (%d ranks)", t ? ", " : "",
                             names[t], n);
  }
  STRATA_LOG(STRATA_LOG_INFO, comm->rank, "%d sites: %s; hierarchical collectives enabled", nsites,
             text);
}

int strata_comm_sites_exchange(strata_comm *comm) {
  if (comm->nranks < 2 || !comm->store) return STRATA_OK;
  char prefix[160], key[224];
  int status = site_prefix(comm, prefix, sizeof prefix);
  snprintf(key, sizeof key, "%s/%d", prefix, comm->rank);
  if (status == STRATA_OK)
    status = strata_store_set(comm->store, key, comm->cfg.site, strlen(comm->cfg.site));
  char(*names)[SITE_NAME_BYTES] = calloc((size_t)comm->nranks, sizeof *names);
  int *site_of_rank = calloc((size_t)comm->nranks, sizeof *site_of_rank);
  if (!names || !site_of_rank) status = STRATA_ERR_NO_MEMORY;
  int nsites = 0;
  char name[SITE_NAME_BYTES];
  for (int r = 0; r < comm->nranks && status == STRATA_OK; r++) {
    status = site_read(comm, prefix, r, name);
    int t = 0;
    while (t < nsites && strcmp(names[t], name) != 0) t++;
    if (t == nsites) memcpy(names[nsites++], name, sizeof name);
    site_of_rank[r] = t;
  }
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, comm->rank, "cannot exchange sites: %s", strata_strerror(status));
  } else if (nsites >= 2) {
    comm->site_of_rank = site_of_rank;
    site_of_rank = NULL;
    site_log(comm, names, nsites);
  }
  free(names);
  free(site_of_rank);
  return status;
}
