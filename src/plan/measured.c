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
#include "plan/plan.h"

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n) (n >= 1); sorts v. */
static double median(double *v, size_t n) {
  qsort(v, n, sizeof *v, compare_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

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

/* The medians over ordered pairs (i, j) with i in topology site a and j in b, or the reverse
 * (a == b: inside one site, i != j). Returns the pair count (0: none), -1 out of memory. */
static int pair_medians(const strata_link_matrix *m, const int *rank_site, int a, int b,
                        double *latency_us, double *gbps) {
  size_t count = 0, n = (size_t)m->nranks;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++)
      if (i != j &&
          ((rank_site[i] == a && rank_site[j] == b) || (rank_site[i] == b && rank_site[j] == a)))
        count++;
  if (count == 0) return 0;
  double *lat = malloc(count * sizeof *lat), *bw = malloc(count * sizeof *bw);
  if (!lat || !bw) {
    free(lat);
    free(bw);
    return -1;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++)
      if (i != j &&
          ((rank_site[i] == a && rank_site[j] == b) || (rank_site[i] == b && rank_site[j] == a))) {
        lat[k] = strata_link_matrix_latency_us(m, (int)i, (int)j);
        bw[k++] = strata_link_matrix_bandwidth_gbps(m, (int)i, (int)j);
      }
  *latency_us = median(lat, count);
  *gbps = median(bw, count);
  free(lat);
  free(bw);
  return count > (size_t)2147483647 ? 2147483647 : (int)count;
}

static int measure_links(const strata_topo *topo, const strata_link_matrix *m, const int *rank_site,
                         strata_plan_measured *out) {
  if (topo->link_count > 0) {
    out->links = calloc((size_t)topo->link_count, sizeof *out->links);
    if (!out->links) return STRATA_ERR_NO_MEMORY;
  }
  for (int l = 0; l < topo->link_count; l++) {
    strata_plan_measured_link *ml = &out->links[out->link_count];
    int pairs = pair_medians(m, rank_site, topo->links[l].site_a, topo->links[l].site_b,
                             &ml->latency_us, &ml->gbps);
    if (pairs < 0) return STRATA_ERR_NO_MEMORY;
    if (pairs == 0) continue;
    ml->link = l;
    ml->pairs = pairs;
    out->link_count++;
  }
  return STRATA_OK;
}

/* Inside sites: ranks of the same matrix site (rank_site here is the matrix site). */
static int measure_inside(const strata_link_matrix *m, const int *site_of,
                          strata_plan_measured *out) {
  size_t n = (size_t)m->nranks, count = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) count += i != j && site_of[i] == site_of[j];
  if (count == 0) return STRATA_OK;
  double *lat = malloc(count * sizeof *lat), *bw = malloc(count * sizeof *bw);
  int rc = lat && bw ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  size_t k = 0;
  for (size_t i = 0; rc == STRATA_OK && i < n; i++)
    for (size_t j = 0; j < n; j++)
      if (i != j && site_of[i] == site_of[j]) {
        lat[k] = strata_link_matrix_latency_us(m, (int)i, (int)j);
        bw[k++] = strata_link_matrix_bandwidth_gbps(m, (int)i, (int)j);
      }
  if (rc == STRATA_OK) {
    out->inside_latency_us = median(lat, count);
    out->inside_gbps = median(bw, count);
    out->inside_pairs = count > (size_t)2147483647 ? 2147483647 : (int)count;
  }
  free(lat);
  free(bw);
  return rc;
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
  if (rc == STRATA_OK) {
    for (int i = 0; i < m->nranks; i++) rank_site[i] = out->topo_site[site_of[i]];
    rc = measure_links(topo, m, rank_site, out);
  }
  if (rc == STRATA_OK) rc = measure_inside(m, site_of, out);
  free(site_of);
  free(rank_site);
  if (rc == STRATA_ERR_NO_MEMORY && err && err_len && !err[0])
    snprintf(err, err_len, "%s: out of memory", source);
  if (rc != STRATA_OK) strata_plan_measured_free(out);
  return rc;
}

/* ---- a topology from the matrix alone ---- */

/* A YAML double-quoted scalar. */
static void yaml_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20 || c == 0x7f)
      fprintf(f, "\\x%02x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static void write_synthetic_yaml(FILE *f, const strata_link_matrix *m,
                                 const strata_plan_measured *g) {
  fprintf(f, "name: link-matrix\ndescription: ");
  char description[160];
  snprintf(description, sizeof description,
           "from a link matrix: %d rank%s in %d site%s (%s), one CPU node per rank, no GPUs "
           "known",
           m->nranks, m->nranks == 1 ? "" : "s", g->matrix_sites, g->matrix_sites == 1 ? "" : "s",
           g->from_labels ? "site labels" : "latency clusters");
  yaml_quoted(f, description);
  fprintf(f, "\nsites:\n");
  for (int s = 0; s < g->matrix_sites; s++) {
    fprintf(f, "  - name: ");
    yaml_quoted(f, g->site_name[s]);
    fprintf(f,
            "\n    fabric: ethernet\n    nodes: {name: ranks, count: %d, gpu: none, nics: "
            "{kind: ethernet}}\n",
            g->site_ranks[s]);
  }
  fprintf(f, "links:%s\n", g->matrix_sites > 1 ? "" : " []");
  for (int a = 0; a < g->matrix_sites; a++)
    for (int b = a + 1; b < g->matrix_sites; b++) {
      fprintf(f, "  - between: [");
      yaml_quoted(f, g->site_name[a]);
      fprintf(f, ", ");
      yaml_quoted(f, g->site_name[b]);
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
