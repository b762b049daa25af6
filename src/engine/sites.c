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
 * At init every rank publishes its chunk and site in the rendezvous store; rank 0 reads everyone's
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

/* Every rank's site and chunk travel as counters of the store (an add each), which rank 0 reads
 * many at once (strata_store_read_counts: one request per SITE_COUNTS_PER_REQUEST ranks with
 * strata's store); a site's name is published once under its hash. The hash has 48 bits, so
 * the few names of a job never meet (and a counter holds it exactly). */
enum { SITE_COUNTS_PER_REQUEST = 8192 };

static uint64_t site_hash(const char *name) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 1099511628211ull;
  return h & ((1ull << 48) - 1);
}

static int site_publish(strata_comm *comm, const char *prefix) {
  char key[240];
  uint64_t h = site_hash(comm->cfg.site);
  snprintf(key, sizeof key, "%s/name/%llx", prefix, (unsigned long long)h);
  int status = strata_store_set(comm->store, key, comm->cfg.site, strlen(comm->cfg.site));
  if (status == STRATA_OK) {
    snprintf(key, sizeof key, "%s/of/%d", prefix, comm->rank);
    status = strata_store_add(comm->store, key, (int64_t)h + 1, NULL);
  }
  if (status == STRATA_OK) {
    snprintf(key, sizeof key, "%s/chunk/%d", prefix, comm->rank);
    status = strata_store_add(comm->store, key, (int64_t)comm->cfg.chunk_bytes, NULL);
  }
  if (status == STRATA_OK) {
    snprintf(key, sizeof key, "%s/published", prefix);
    status = strata_store_add(comm->store, key, 1, NULL);
  }
  return status;
}

/* Rank 0: every rank's site into site_of_rank / names (indices in order of first appearance,
 * rank 0's site is 0) and the largest chunk proposed into *chunk. */
static int site_read_all(strata_comm *comm, const char *prefix, char (*names)[SITE_NAME_BYTES],
                         int *site_of_rank, int *nsites, uint64_t *chunk) {
  char key[240];
  snprintf(key, sizeof key, "%s/published", prefix);
  int status = strata_store_wait_count(comm->store, key, comm->nranks, NULL, comm->cfg.timeout_s);
  if (status != STRATA_OK) return status;
  int batch = comm->nranks < SITE_COUNTS_PER_REQUEST ? comm->nranks : SITE_COUNTS_PER_REQUEST;
  char **keys = calloc(2 * (size_t)batch, sizeof *keys);
  int64_t *values = calloc(2 * (size_t)batch, sizeof *values);
  uint64_t *hashes = calloc((size_t)comm->nranks, sizeof *hashes);
  if (!keys || !values || !hashes) status = STRATA_ERR_NO_MEMORY;
  for (int i = 0; status == STRATA_OK && i < 2 * batch; i++)
    if (!(keys[i] = malloc(sizeof key))) status = STRATA_ERR_NO_MEMORY;
  *nsites = 0;
  *chunk = 0;
  for (int base = 0; status == STRATA_OK && base < comm->nranks; base += batch) {
    int n = comm->nranks - base < batch ? comm->nranks - base : batch;
    for (int i = 0; i < n; i++) {
      snprintf(keys[i], sizeof key, "%s/of/%d", prefix, base + i);
      snprintf(keys[n + i], sizeof key, "%s/chunk/%d", prefix, base + i);
    }
    status =
        strata_store_read_counts(comm->store, (const char *const *)keys, 2 * (size_t)n, values);
    for (int i = 0; status == STRATA_OK && i < n; i++) {
      if (values[i] < 1 || values[i] > (int64_t)1 << 48 || values[n + i] < 1) {
        status = STRATA_ERR_PROTOCOL;
        break;
      }
      uint64_t h = (uint64_t)values[i] - 1;
      if ((uint64_t)values[n + i] > *chunk) *chunk = (uint64_t)values[n + i];
      int t = 0;
      while (t < *nsites && hashes[t] != h) t++;
      if (t == *nsites) { /* a site not seen yet: its name */
        void *value = NULL;
        size_t len = 0;
        snprintf(key, sizeof key, "%s/name/%llx", prefix, (unsigned long long)h);
        status = strata_store_get(comm->store, key, &value, &len, comm->cfg.timeout_s);
        if (status != STRATA_OK) break;
        snprintf(names[t], SITE_NAME_BYTES, "%.*s",
                 (int)(len < SITE_NAME_BYTES ? len : SITE_NAME_BYTES - 1), (const char *)value);
        free(value);
        hashes[(*nsites)++] = h;
      }
      site_of_rank[base + i] = t;
    }
  }
  for (int i = 0; keys && i < 2 * batch; i++) free(keys[i]);
  free(keys);
  free(values);
  free(hashes);
  return status;
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

/* Every rank publishes its site and chunk (site_publish); rank 0 reads them all, a batch of ranks
 * per request, and publishes the answer every other rank reads once: O(1) store requests per
 * rank, where every rank reading every other's cost the store N^2 as the job grows. */
int strata_comm_agree_sites(strata_comm *comm) {
  if (comm->nranks < 2 || !comm->store) return STRATA_OK;
  char prefix[160];
  int status = site_prefix(comm, prefix, sizeof prefix);
  if (status == STRATA_OK) status = site_publish(comm, prefix);
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
