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
 * At init every rank publishes "<chunk> <site>" in the rendezvous store; rank 0 reads everyone's
 * and publishes the answer, which the others read (strata_comm_agree_sites). Keys
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

/* Rank 0's answer, "<chunk> <nsites> <nranks>\n" then each name as "<length> <bytes>\n" then the
 * site index of every rank as runs "<site>x<ranks>", space-separated; or "! <status>" when rank 0
 * could not read them. */
static char *summary_write(const strata_comm *comm, char (*names)[SITE_NAME_BYTES], int nsites,
                           const int *site_of_rank, uint64_t chunk, size_t *len) {
  size_t cap = 64 + (size_t)nsites * (SITE_NAME_BYTES + 8) + (size_t)comm->nranks * 24;
  char *text = malloc(cap);
  if (!text) return NULL;
  size_t used =
      (size_t)snprintf(text, cap, "%llu %d %d\n", (unsigned long long)chunk, nsites, comm->nranks);
  for (int t = 0; t < nsites; t++)
    used += (size_t)snprintf(text + used, cap - used, "%zu %s\n", strlen(names[t]), names[t]);
  /* runs of ranks in one site, "<site>x<count>": a site's ranks are usually consecutive, so the
   * answer every rank reads is a few bytes per site, not per rank of the job */
  for (int r = 0; r < comm->nranks;) {
    int run = 1;
    while (r + run < comm->nranks && site_of_rank[r + run] == site_of_rank[r]) run++;
    used += (size_t)snprintf(text + used, cap - used, r ? " %dx%d" : "%dx%d", site_of_rank[r], run);
    r += run;
  }
  *len = used;
  return text;
}

/* Parses rank 0's answer into names / site_of_rank / *nsites / *chunk. */
static int summary_read(const strata_comm *comm, const char *text, size_t len,
                        char (*names)[SITE_NAME_BYTES], int *site_of_rank, int *nsites,
                        uint64_t *chunk) {
  char *copy = malloc(len + 1);
  if (!copy) return STRATA_ERR_NO_MEMORY;
  memcpy(copy, text, len);
  copy[len] = '\0';
  int status = STRATA_ERR_PROTOCOL, failed = 0, nranks = 0, used = 0;
  unsigned long long proposed = 0;
  char *p = copy;
  if (sscanf(p, "! %d", &failed) == 1) {
    status = failed < 0 ? failed : STRATA_ERR_PROTOCOL;
    goto out;
  }
  if (sscanf(p, "%llu %d %d\n%n", &proposed, nsites, &nranks, &used) != 3 || proposed == 0 ||
      nranks != comm->nranks || *nsites < 1 || *nsites > comm->nranks)
    goto out;
  p += used;
  for (int t = 0; t < *nsites; t++) {
    char *end = NULL;
    unsigned long n = strtoul(p, &end, 10);
    if (end == p || *end != ' ' || n >= SITE_NAME_BYTES || (size_t)(end + 1 + n - copy) >= len ||
        end[1 + n] != '\n')
      goto out;
    memcpy(names[t], end + 1, n);
    names[t][n] = '\0';
    p = end + 2 + n;
  }
  for (int r = 0; r < comm->nranks;) {
    char *end = NULL, *count_end = NULL;
    long t = strtol(p, &end, 10);
    if (end == p || *end != 'x' || t < 0 || t >= *nsites) goto out;
    long run = strtol(end + 1, &count_end, 10);
    if (count_end == end + 1 || run < 1 || run > comm->nranks - r) goto out;
    for (long i = 0; i < run; i++) site_of_rank[r + i] = (int)t;
    r += (int)run;
    p = count_end;
  }
  *chunk = proposed;
  status = *p == '\0' ? STRATA_OK : STRATA_ERR_PROTOCOL;
out:
  free(copy);
  return status;
}

/* Every rank publishes its "<chunk> <site>"; rank 0 reads them all and publishes the answer every
 * other rank reads once: O(1) store requests per rank but rank 0's N, O(N) for the job, where
 * every rank reading every other's costs the store N^2 as the job grows. */
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
  char all_key[240];
  snprintf(all_key, sizeof all_key, "%s/all", prefix);
  if (comm->rank == 0) {
    if (status == STRATA_OK)
      status = site_read_all(comm, prefix, names, site_of_rank, &nsites, &chunk);
    size_t len = 0;
    char failed[32];
    char *summary =
        status == STRATA_OK ? summary_write(comm, names, nsites, site_of_rank, chunk, &len) : NULL;
    if (status == STRATA_OK && !summary) status = STRATA_ERR_NO_MEMORY;
    if (!summary) len = (size_t)snprintf(failed, sizeof failed, "! %d", status);
    /* published even when it failed, so the others fail at once rather than at the timeout */
    int set = strata_store_set(comm->store, all_key, summary ? summary : failed, len);
    if (status == STRATA_OK) status = set;
    free(summary);
  } else if (status == STRATA_OK) {
    void *value = NULL;
    size_t len = 0;
    status = strata_store_get(comm->store, all_key, &value, &len, comm->cfg.timeout_s);
    if (status == STRATA_OK)
      status = summary_read(comm, value, len, names, site_of_rank, &nsites, &chunk);
    free(value);
  }
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
