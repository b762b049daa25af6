// SPDX-License-Identifier: Apache-2.0
/*
 * measured.c — a measured link matrix as the planner's figures for inter-site links
 * (`strata plan --links MATRIX`, docs/plan.md "Measured links").
 *
 * The matrix (src/topo/linkmatrix.h, written by `strata probe`) knows ranks; the topology knows
 * sites and links. The bridge is: group the matrix's ranks into sites exactly as `strata place`
 * and `strata launch --sites` do (strata_place_sites: labels when every rank has one, else
 * latency clustering), map those sites to the topology's (by name; else by order when the counts
 * agree and no label names a topology site — a partial name match is refused, since pairing
 * "paris" with the topology's second site by position would silently swap figures), then for
 * every topology link take the medians over the ordered rank pairs crossing between its two
 * sites. A median, not a mean: one slow or congested pair must not move a site link's figure.
 *
 * Invariants: every strata_plan_measured_link has pairs >= 1, latency_us >= 0 and gbps > 0 (the
 * matrix loader already refused anything else off the diagonal); a topology link whose sites
 * did not both appear in the matrix is simply absent and keeps its modeled figures.
 *
 * What it must never do: change the topology, or guess a mapping the user did not make
 * evident. Nothing here is per GPU; memory is O(ranks + crossing pairs of one link).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/place.h"
#include "core/core.h"
#include "core/text.h"
#include "plan/plan.h"

void strata_plan_measured_free(strata_plan_measured *measured) {
  if (!measured) return;
  free(measured->site_name);
  free(measured->site_ranks);
  free(measured->topo_site);
  free(measured->links);
  memset(measured, 0, sizeof *measured);
}

const strata_plan_measured_link *strata_plan_measured_find(const strata_plan_measured *measured,
                                                           int link) {
  for (int i = 0; measured && i < measured->link_count; i++)
    if (measured->links[i].link == link) return &measured->links[i];
  return NULL;
}

/* Groups the matrix's ranks into sites and names them; fills site_of (per rank) and the
 * per-site arrays of *out. */
static int group_sites(const strata_link_matrix *m, int *site_of, strata_plan_measured *out) {
  int rc = strata_place_sites(m, site_of, &out->matrix_sites, &out->from_labels);
  if (rc != STRATA_OK) return rc;
  size_t k = (size_t)out->matrix_sites;
  out->site_name = calloc(k, sizeof *out->site_name);
  out->site_ranks = calloc(k, sizeof *out->site_ranks);
  out->topo_site = calloc(k, sizeof *out->topo_site);
  if (!out->site_name || !out->site_ranks || !out->topo_site) return STRATA_ERR_NO_MEMORY;
  for (int i = 0; i < m->nranks; i++) {
    if (out->site_ranks[site_of[i]]++ == 0)
      strata_place_site_name(m, site_of, out->from_labels, i, out->site_name[site_of[i]],
                             sizeof out->site_name[0]);
  }
  return STRATA_OK;
}

static void append(char *buf, size_t len, const char *text) {
  size_t used = strlen(buf);
  if (used < len) snprintf(buf + used, len - used, "%s", text);
}

static void list_topo_sites(const strata_topo *topo, char *buf, size_t len) {
  for (int s = 0; s < topo->site_count; s++) {
    if (s) append(buf, len, ", ");
    append(buf, len, topo->sites[s].name);
  }
}

/* Matrix sites -> topology sites: by name, else by order. */
static int map_sites(const strata_topo *topo, const char *source, strata_plan_measured *out,
                     char *err, size_t err_len) {
  int matched = 0;
  for (int s = 0; s < out->matrix_sites; s++) {
    out->topo_site[s] = strata_topo_site_index(topo, out->site_name[s]);
    matched += out->topo_site[s] >= 0;
  }
  if (matched == out->matrix_sites) return STRATA_OK;
  if (matched == 0 && out->matrix_sites == topo->site_count) {
    out->by_order = 1;
    for (int s = 0; s < out->matrix_sites; s++) out->topo_site[s] = s;
    return STRATA_OK;
  }
  char unmatched[512] = "", sites[512] = "";
  for (int s = 0; s < out->matrix_sites; s++)
    if (out->topo_site[s] < 0) {
      if (unmatched[0]) append(unmatched, sizeof unmatched, ", ");
      append(unmatched, sizeof unmatched, out->site_name[s]);
    }
  list_topo_sites(topo, sites, sizeof sites);
  if (err && err_len)
    snprintf(err, err_len,
             "%s: matrix site%s %s (%s) %s not name a site of %s (sites: %s), and %s: label "
             "every rank with the topology's site names (STRATA_SITE when probing, or \"sites\" "
             "in the matrix)",
             source, out->matrix_sites - matched == 1 ? "" : "s", unmatched,
             out->from_labels ? "from the matrix's labels" : "found by latency clustering",
             out->matrix_sites - matched == 1 ? "does" : "do", topo->source, sites,
             matched > 0 ? "the others do (a partial match is not mapped by order)"
                         : "the counts differ, so they cannot be mapped by order");
  if (err && err_len && matched == 0) {
    char counts[96];
    snprintf(counts, sizeof counts, " [matrix: %d site%s, topology: %d]", out->matrix_sites,
             out->matrix_sites == 1 ? "" : "s", topo->site_count);
    append(err, err_len, counts);
  }
  return STRATA_ERR_INVALID_ARG;
}

/* Ranks grouped: the ranks of group g are rank[begin[g] .. begin[g+1]). Built by counting, so
 * that a link costs the pairs that cross it, never a scan of the whole matrix. */
typedef struct members {
  int *rank;
  int *begin; /* groups + 1 entries */
} members;

static void members_free(members *mb) {
  free(mb->rank);
  free(mb->begin);
}

static int members_build(const int *group_of, int nranks, int groups, members *mb) {
  mb->rank = malloc((size_t)nranks * sizeof *mb->rank);
  mb->begin = calloc((size_t)groups + 1, sizeof *mb->begin);
  if (!mb->rank || !mb->begin) return STRATA_ERR_NO_MEMORY;
  for (int i = 0; i < nranks; i++) mb->begin[group_of[i] + 1]++;
  for (int g = 0; g < groups; g++) mb->begin[g + 1] += mb->begin[g];
  int *next = malloc((size_t)groups * sizeof *next);
  if (!next) return STRATA_ERR_NO_MEMORY;
  memcpy(next, mb->begin, (size_t)groups * sizeof *next);
  for (int i = 0; i < nranks; i++) mb->rank[next[group_of[i]]++] = i;
  free(next);
  return STRATA_OK;
}

static size_t group_size(const members *mb, int g) {
  return (size_t)(mb->begin[g + 1] - mb->begin[g]);
}

/* Ordered pairs between groups a and b (both directions), or inside a when a == b. */
static size_t pair_count(const members *mb, int a, int b) {
  size_t na = group_size(mb, a), nb = group_size(mb, b);
  return a == b ? na * (na ? na - 1 : 0) : 2 * na * nb;
}

/* Appends the latencies and bandwidths of those pairs at lat + *k, bw + *k. */
static void collect_pairs(const strata_link_matrix *m, const members *mb, int a, int b, double *lat,
                          double *bw, size_t *k) {
  for (int x = mb->begin[a]; x < mb->begin[a + 1]; x++)
    for (int y = mb->begin[b]; y < mb->begin[b + 1]; y++) {
      int i = mb->rank[x], j = mb->rank[y];
      if (i == j) continue;
      lat[*k] = strata_link_matrix_latency_us(m, i, j);
      bw[(*k)++] = strata_link_matrix_bandwidth_gbps(m, i, j);
      if (a == b) continue; /* (j, i) comes in its own turn */
      lat[*k] = strata_link_matrix_latency_us(m, j, i);
      bw[(*k)++] = strata_link_matrix_bandwidth_gbps(m, j, i);
    }
}

static int clamp_pairs(size_t count) {
  return count > (size_t)2147483647 ? 2147483647 : (int)count;
}

/* Medians of latency and bandwidth over the pairs between groups a and b, or, with a < 0, over
 * the pairs inside each of the `groups` groups together. *pairs = 0 when there are none. */
static int pairs_median(const strata_link_matrix *m, const members *mb, int groups, int a, int b,
                        double *latency_us, double *gbps, int *pairs) {
  size_t count = 0, k = 0;
  if (a >= 0)
    count = pair_count(mb, a, b);
  else
    for (int s = 0; s < groups; s++) count += pair_count(mb, s, s);
  *pairs = 0;
  if (count == 0) return STRATA_OK;
  double *lat = malloc(count * sizeof *lat), *bw = malloc(count * sizeof *bw);
  int rc = lat && bw ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (rc == STRATA_OK) {
    if (a >= 0)
      collect_pairs(m, mb, a, b, lat, bw, &k);
    else
      for (int s = 0; s < groups; s++) collect_pairs(m, mb, s, s, lat, bw, &k);
    *latency_us = strata_median(lat, k);
    *gbps = strata_median(bw, k);
    *pairs = clamp_pairs(k);
  }
  free(lat);
  free(bw);
  return rc;
}

static int measure_links(const strata_topo *topo, const strata_link_matrix *m, const members *mb,
                         strata_plan_measured *out) {
  if (topo->link_count > 0) {
    out->links = calloc((size_t)topo->link_count, sizeof *out->links);
    if (!out->links) return STRATA_ERR_NO_MEMORY;
  }
  for (int l = 0; l < topo->link_count; l++) {
    strata_plan_measured_link *ml = &out->links[out->link_count];
    int rc = pairs_median(m, mb, topo->site_count, topo->links[l].site_a, topo->links[l].site_b,
                          &ml->latency_us, &ml->gbps, &ml->pairs);
    if (rc != STRATA_OK) return rc;
    if (ml->pairs == 0) continue; /* a site without ranks: the link stays modeled */
    ml->link = l;
    out->link_count++;
  }
  return STRATA_OK;
}

/* Inside sites: the pairs of ranks of the same matrix site, all sites together. */
static int measure_inside(const strata_link_matrix *m, const members *mb,
                          strata_plan_measured *out) {
  return pairs_median(m, mb, out->matrix_sites, -1, -1, &out->inside_latency_us, &out->inside_gbps,
                      &out->inside_pairs);
}

int strata_plan_measured_from_matrix(const strata_topo *topo, const strata_link_matrix *m,
                                     const char *source, strata_plan_measured *out, char *err,
                                     size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (!out) return STRATA_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  if (!topo || !m || m->nranks < 1) return STRATA_ERR_INVALID_ARG;
  if (!source) source = "link matrix";
  snprintf(out->source, sizeof out->source, "%s", source);
  snprintf(out->when, sizeof out->when, "%s", m->measured);
  snprintf(out->method, sizeof out->method, "%s", m->method);
  out->ranks = m->nranks;
  out->streams = m->streams;
  int *site_of = malloc((size_t)m->nranks * sizeof *site_of);
  int *rank_site = malloc((size_t)m->nranks * sizeof *rank_site);
  int rc = site_of && rank_site ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  if (rc == STRATA_OK) rc = group_sites(m, site_of, out);
  if (rc == STRATA_OK) rc = map_sites(topo, source, out, err, err_len);
  members by_topo = {0}, by_matrix = {0};
  if (rc == STRATA_OK) {
    for (int i = 0; i < m->nranks; i++) rank_site[i] = out->topo_site[site_of[i]];
    rc = members_build(rank_site, m->nranks, topo->site_count, &by_topo);
  }
  if (rc == STRATA_OK) rc = measure_links(topo, m, &by_topo, out);
  if (rc == STRATA_OK) rc = members_build(site_of, m->nranks, out->matrix_sites, &by_matrix);
  if (rc == STRATA_OK) rc = measure_inside(m, &by_matrix, out);
  members_free(&by_topo);
  members_free(&by_matrix);
  free(site_of);
  free(rank_site);
  if (rc == STRATA_ERR_NO_MEMORY && err && err_len && !err[0])
    snprintf(err, err_len, "%s: out of memory", source);
  if (rc != STRATA_OK) strata_plan_measured_free(out);
  return rc;
}

/* ---- a topology from the matrix alone ---- */

static void write_synthetic_yaml(FILE *f, const strata_link_matrix *m,
                                 const strata_plan_measured *g) {
  fprintf(f, "name: link-matrix\ndescription: ");
  char description[160];
  snprintf(description, sizeof description,
           "from a link matrix: %d rank%s in %d site%s (%s), one CPU node per rank, no GPUs "
           "known",
           m->nranks, m->nranks == 1 ? "" : "s", g->matrix_sites, g->matrix_sites == 1 ? "" : "s",
           g->from_labels ? "site labels" : "latency clusters");
  strata_write_quoted(f, description);
  fprintf(f, "\nsites:\n");
  for (int s = 0; s < g->matrix_sites; s++) {
    fprintf(f, "  - name: ");
    strata_write_quoted(f, g->site_name[s]);
    fprintf(f,
            "\n    fabric: ethernet\n    nodes: {name: ranks, count: %d, gpu: none, nics: "
            "{kind: ethernet}}\n",
            g->site_ranks[s]);
  }
  fprintf(f, "links:%s\n", g->matrix_sites > 1 ? "" : " []");
  for (int a = 0; a < g->matrix_sites; a++)
    for (int b = a + 1; b < g->matrix_sites; b++) {
      fprintf(f, "  - between: [");
      strata_write_quoted(f, g->site_name[a]);
      fprintf(f, ", ");
      strata_write_quoted(f, g->site_name[b]);
      fprintf(f, "]\n");
    }
}

int strata_plan_topo_from_matrix(const strata_link_matrix *m, const char *source, strata_topo **out,
                                 char *err, size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (!out) return STRATA_ERR_INVALID_ARG;
  *out = NULL;
  if (!m || m->nranks < 1) return STRATA_ERR_INVALID_ARG;
  if (!source) source = "link matrix";
  strata_plan_measured groups;
  memset(&groups, 0, sizeof groups);
  int *site_of = malloc((size_t)m->nranks * sizeof *site_of);
  int rc = site_of ? group_sites(m, site_of, &groups) : STRATA_ERR_NO_MEMORY;
  char *yaml = NULL;
  size_t len = 0;
  FILE *f = rc == STRATA_OK ? open_memstream(&yaml, &len) : NULL;
  if (rc == STRATA_OK && !f) rc = STRATA_ERR_NO_MEMORY;
  if (f) {
    write_synthetic_yaml(f, m, &groups);
    if (fclose(f) != 0) rc = STRATA_ERR_NO_MEMORY;
  }
  if (rc == STRATA_OK) rc = strata_topo_load_string(source, yaml, len, out, err, err_len);
  free(yaml);
  free(site_of);
  strata_plan_measured_free(&groups);
  if (rc == STRATA_ERR_NO_MEMORY && err && err_len && !err[0])
    snprintf(err, err_len, "%s: out of memory", source);
  return rc;
}
