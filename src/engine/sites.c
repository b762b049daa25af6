// SPDX-License-Identifier: Apache-2.0
/*
 * sites.c — what the ranks of a communicator agree on at init: which site every rank is in (for
 * the hierarchical collectives) and the pipelining chunk.
 *
 * A rank's site is cfg.site (STRATA_SITE), or none (""). The launcher decides it, never the
 * rank: `strata launch --sites MATRIX` from a probed link matrix, `strata launch --topology FILE`
 * from a topology file, and `strata site FILE` prints it for other launchers (docs/hier.md). So a
 * rank never parses a topology: the runtime does not link the planner side.
 *
 * The chunk. Every schedule is cut by cfg.chunk_bytes, so ranks that disagree on it build
 * different schedules and fail the first large collective with STRATA_ERR_MISMATCH. A rank's own
 * choice (comm.c) depends on what it measured and saw: the largest RTT to its peers (>= 1 ms
 * makes it a WAN chunk, and a rank on a loaded host can measure that even over loopback), and
 * whether all its peers are over TCP (in a multi-host job the
 * ranks that share a host see fewer). So every rank publishes its proposal with its site and the
 * communicator takes the largest: the WAN or mixed choice wins, as it must for the path that
 * needs it. A proposal another rank changed is logged at INFO.
 *
 * At init every rank publishes "<chunk> <site>" in the rendezvous store and reads everyone's. Keys
 * live under "<job>/site/<k>/<rank>", k = how many communicators this rank opened in the job so far
 * (a store counter, as src/net/net.c does for its keys), so two communicators of one job never read
 * each other's answers. Names become indices in order of first appearance (rank 0's site is 0),
 * so every rank computes the same array. Fewer than two distinct names (in particular no source
 * anywhere) means no sites: the array stays NULL and every collective is built flat. A rank with
 * an empty name while others have one is in a site of its own name "" (reported in the log).
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

/* Reads rank `rank`'s "<chunk> <site>"; a value without the chunk is a protocol error. */
static int site_read(strata_comm *comm, const char *prefix, int rank, char *name, uint64_t *chunk) {
  char key[224];
  snprintf(key, sizeof key, "%s/%d", prefix, rank);
  void *value = NULL;
  size_t len = 0;
  int status = strata_store_get(comm->store, key, &value, &len, comm->cfg.timeout_s);
  if (status != STRATA_OK) return status;
  const char *text = value, *space = memchr(text, ' ', len);
  char digits[24] = "";
  size_t ndigits = space ? (size_t)(space - text) : 0;
  if (ndigits == 0 || ndigits >= sizeof digits) {
    free(value);
    return STRATA_ERR_PROTOCOL;
  }
  memcpy(digits, text, ndigits);
  char *end = NULL;
  *chunk = strtoull(digits, &end, 10);
  size_t rest = len - ndigits - 1;
  snprintf(name, SITE_NAME_BYTES, "%.*s",
           (int)(rest < SITE_NAME_BYTES ? rest : SITE_NAME_BYTES - 1), space + 1);
  free(value);
  return *end == '\0' && *chunk > 0 ? STRATA_OK : STRATA_ERR_PROTOCOL;
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

/* ---- the exchange ---- */

/* Reads every rank's site into site_of_rank / names and the largest chunk proposed into *chunk. */
static int site_read_all(strata_comm *comm, const char *prefix, char (*names)[SITE_NAME_BYTES],
                         int *site_of_rank, int *nsites, uint64_t *chunk) {
  char name[SITE_NAME_BYTES];
  *nsites = 0;
  *chunk = 0;
  for (int r = 0; r < comm->nranks; r++) {
    uint64_t proposed = 0;
    int status = site_read(comm, prefix, r, name, &proposed);
    if (status != STRATA_OK) return status;
    if (proposed > *chunk) *chunk = proposed;
    int t = 0;
    while (t < *nsites && strcmp(names[t], name) != 0) t++;
    if (t == *nsites) memcpy(names[(*nsites)++], name, sizeof name);
    site_of_rank[r] = t;
  }
  return STRATA_OK;
}

int strata_comm_agree_sites(strata_comm *comm) {
  if (comm->nranks < 2 || !comm->store) return STRATA_OK;
  char prefix[160], key[224], published[24 + sizeof comm->cfg.site];
  int status = site_prefix(comm, prefix, sizeof prefix);
  snprintf(key, sizeof key, "%s/%d", prefix, comm->rank);
  int n = snprintf(published, sizeof published, "%llu %s",
                   (unsigned long long)comm->cfg.chunk_bytes, comm->cfg.site);
  if (status == STRATA_OK) status = strata_store_set(comm->store, key, published, (size_t)n);
  char(*names)[SITE_NAME_BYTES] = calloc((size_t)comm->nranks, sizeof *names);
  int *site_of_rank = calloc((size_t)comm->nranks, sizeof *site_of_rank);
  if (!names || !site_of_rank) status = STRATA_ERR_NO_MEMORY;
  int nsites = 0;
  uint64_t chunk = 0;
  if (status == STRATA_OK)
    status = site_read_all(comm, prefix, names, site_of_rank, &nsites, &chunk);
  if (status == STRATA_OK && chunk != comm->cfg.chunk_bytes) {
    STRATA_LOG(STRATA_LOG_INFO, comm->rank,
               "chunk %llu B (another rank proposed it; this rank's own choice was %llu B)",
               (unsigned long long)chunk, (unsigned long long)comm->cfg.chunk_bytes);
    comm->cfg.chunk_bytes = chunk;
  }
  if (status != STRATA_OK) {
    STRATA_LOG(STRATA_LOG_ERROR, comm->rank, "cannot exchange sites and chunks: %s",
               strata_strerror(status));
  } else if (nsites >= 2) {
    comm->site_of_rank = site_of_rank;
    site_of_rank = NULL;
    site_log(comm, names, nsites);
  }
  free(names);
  free(site_of_rank);
  return status;
}

int strata_comm_site(const strata_comm *comm, int rank) {
  if (!comm || rank < 0 || rank >= comm->nranks) return STRATA_ERR_INVALID_ARG;
  return comm->site_of_rank ? comm->site_of_rank[rank] : 0;
}

int strata_comm_sites(const strata_comm *comm) {
  if (!comm) return STRATA_ERR_INVALID_ARG;
  int sites = 1; /* indices are dense, in order of first appearance */
  for (int r = 0; comm->site_of_rank && r < comm->nranks; r++)
    if (comm->site_of_rank[r] >= sites) sites = comm->site_of_rank[r] + 1;
  return sites;
}
