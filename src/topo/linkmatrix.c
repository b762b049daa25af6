// SPDX-License-Identifier: Apache-2.0
/*
 * linkmatrix.c — the link-matrix file: one tree, two spellings (JSON and YAML).
 *
 * Reading goes through the YAML tree of topo_yaml.c for both spellings: JSON is YAML flow style,
 * so one parser gives file:line:col positions for every error in either. Writing builds one
 * jansson tree (topo/json.h) and prints it in either spelling, numbers with 17 significant
 * digits so that a matrix written and read back is bit-identical.
 *
 * The loader is strict: an unknown key, a row of the wrong length, a latency or bandwidth outside
 * what a network can have (linkmatrix.h), a figure on the diagonal or one-way latencies that
 * disagree between the two directions is an error naming its position, because a silently wrong
 * matrix makes the placer optimize the wrong thing (or sum infinities). The diagonal is 0 or
 * null.
 * Nothing here knows how the numbers were measured (tools/probe.c) or used (src/plan/place.c).
 */
#include "topo/linkmatrix.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "strata.h"
#include "topo/json.h"
#include "topo/json_grid.h"
#include "topo/topo_internal.h"

#define LINKMATRIX_FORMAT_NAME "strata-link-matrix"
#define LINKMATRIX_VERSION 1
/* 4,096 ranks x 4,096 x 2 grids at up to ~20 bytes a cell, with room. */
#define LINKMATRIX_MAX_FILE_BYTES (1u << 30)

int strata_link_matrix_alloc(strata_link_matrix *m, int nranks) {
  memset(m, 0, sizeof *m);
  if (nranks < 1 || nranks > STRATA_LINKMATRIX_MAX_RANKS) return STRATA_ERR_INVALID_ARG;
  size_t n = (size_t)nranks;
  m->host = calloc(n, sizeof *m->host);
  m->site = calloc(n, sizeof *m->site);
  m->latency_us = calloc(n * n, sizeof *m->latency_us);
  m->bandwidth_gbps = calloc(n * n, sizeof *m->bandwidth_gbps);
  m->nranks = nranks;
  if (!m->host || !m->site || !m->latency_us || !m->bandwidth_gbps) {
    strata_link_matrix_free(m);
    return STRATA_ERR_NO_MEMORY;
  }
  return STRATA_OK;
}

void strata_link_matrix_free(strata_link_matrix *m) {
  if (m == NULL) return;
  free(m->host);
  free(m->site);
  free(m->latency_us);
  free(m->bandwidth_gbps);
  memset(m, 0, sizeof *m);
}

double strata_link_matrix_send_us(const strata_link_matrix *m, int i, int j, double bytes) {
  if (i == j) return 0.0;
  /* GB/s = 1e3 bytes per µs */
  return strata_link_matrix_latency_us(m, i, j) +
         bytes / (strata_link_matrix_bandwidth_gbps(m, i, j) * 1e3);
}

/* Why a pair's figures are refused, or NULL: shared by the loader (which names file:line:col)
 * and strata_link_matrix_validate (which names the cell). */
static const char *latency_problem(double lat) {
  if (!isfinite(lat) || lat < 0 || lat > STRATA_LINKMATRIX_MAX_LATENCY_US)
    return "expected a latency from 0 to 1e7 us (10 s one way)";
  return NULL;
}

static const char *bandwidth_problem(double bw) {
  if (!isfinite(bw) || bw < STRATA_LINKMATRIX_MIN_GBPS || bw > STRATA_LINKMATRIX_MAX_GBPS)
    return "expected a bandwidth from 1e-6 to 1e6 GB/s";
  return NULL;
}

/* Both directions halve the same round trip; beyond jitter they disagree only by mistake (a
 * round trip written in one cell, a typo), and the placer would optimize for the mistake. */
static int latencies_disagree(double a, double b) {
  return fabs(a - b) > STRATA_LINKMATRIX_LATENCY_ASYMMETRY * fmax(a, b);
}

int strata_link_matrix_validate(const strata_link_matrix *m, char *err, size_t err_len) {
  if (m->nranks < 1 || m->nranks > STRATA_LINKMATRIX_MAX_RANKS) {
    snprintf(err, err_len, "ranks must be 1..%d, not %d", STRATA_LINKMATRIX_MAX_RANKS, m->nranks);
    return STRATA_ERR_PARSE;
  }
  for (int i = 0; i < m->nranks; i++)
    for (int j = 0; j < m->nranks; j++) {
      double lat = strata_link_matrix_latency_us(m, i, j);
      double bw = strata_link_matrix_bandwidth_gbps(m, i, j);
      const char *problem = NULL;
      if (i == j) {
        if (lat != 0 || bw != 0) {
          snprintf(err, err_len,
                   "latency_us[%d][%d] = %g, bandwidth_gbps[%d][%d] = %g: expected 0 on the "
                   "diagonal (a rank to itself)",
                   i, j, lat, i, j, bw);
          return STRATA_ERR_PARSE;
        }
        continue;
      }
      if ((problem = latency_problem(lat))) {
        snprintf(err, err_len, "latency_us[%d][%d] = %g: %s", i, j, lat, problem);
        return STRATA_ERR_PARSE;
      }
      if ((problem = bandwidth_problem(bw))) {
        snprintf(err, err_len, "bandwidth_gbps[%d][%d] = %g: %s", i, j, bw, problem);
        return STRATA_ERR_PARSE;
      }
      if (j < i && latencies_disagree(lat, strata_link_matrix_latency_us(m, j, i))) {
        snprintf(err, err_len,
                 "latency_us[%d][%d] = %g but latency_us[%d][%d] = %g: expected one-way latencies "
                 "(RTT/2) that agree both ways within 10%%",
                 i, j, lat, j, i, strata_link_matrix_latency_us(m, j, i));
        return STRATA_ERR_PARSE;
      }
    }
  return STRATA_OK;
}

/* ---- reading ---- */

/* The two grids, when strata_json_grids_take() read them (grids[k].found). */
enum { GRID_LATENCY, GRID_BANDWIDTH, GRID_COUNT };
/* A grid read outside the tree that does not fit the file: read the file again as a tree, whose
 * error names the position. Never returned to the caller. */
#define READ_AGAIN_AS_TREE 1

typedef struct reader {
  const char *source;
  char *err;
  size_t err_len;
  strata_json_grid *grids; /* NULL: every matrix is in the tree */
} reader;

static int fail(const reader *r, const strata_ynode *at, const char *what, const char *key) {
  strata_topo_errorf(r->err, r->err_len, r->source, at ? at->mark : (strata_topo_mark){0, 0},
                     "%s%s%s", key ? key : "", key ? ": " : "", what);
  return STRATA_ERR_PARSE;
}

static int scalar_is_null(const strata_ynode *n) {
  return n->kind == STRATA_YNODE_SCALAR && n->plain &&
         (!strcmp(n->text, "null") || !strcmp(n->text, "~") || n->text[0] == '\0');
}

static int read_number(const reader *r, const strata_ynode *n, const char *key, double *out) {
  if (n->kind != STRATA_YNODE_SCALAR || !n->plain) return fail(r, n, "expected a number", key);
  char *end;
  errno = 0;
  double v = strtod(n->text, &end);
  if (errno || end == n->text || *end || !isfinite(v)) return fail(r, n, "expected a number", key);
  *out = v;
  return STRATA_OK;
}

static int read_string(const reader *r, const strata_ynode *n, const char *key, char *out,
                       size_t out_len) {
  if (n->kind != STRATA_YNODE_SCALAR) return fail(r, n, "expected a string", key);
  if (n->length >= out_len) return fail(r, n, "string too long", key);
  memcpy(out, n->text, n->length + 1);
  return STRATA_OK;
}

static const strata_ynode *find_key(const strata_ynode *map, const char *key) {
  for (size_t k = 0; k + 1 < map->length; k += 2)
    if (!strcmp(map->items[k]->text, key)) return map->items[k + 1];
  return NULL;
}

static int read_labels(const reader *r, const strata_ynode *n, const char *key, int nranks,
                       char (*out)[STRATA_LINKMATRIX_LABEL_BYTES]) {
  if (n->kind != STRATA_YNODE_SEQUENCE || n->length != (size_t)nranks) {
    char what[96];
    snprintf(what, sizeof what, "expected a list of %d strings (one per rank)", nranks);
    return fail(r, n, what, key);
  }
  for (int i = 0; i < nranks; i++) {
    int rc = read_string(r, n->items[i], key, out[i], STRATA_LINKMATRIX_LABEL_BYTES);
    if (rc) return rc;
  }
  return STRATA_OK;
}

static int read_square(const reader *r, const strata_ynode *n, const char *key, int nranks,
                       double *out) {
  char what[96];
  snprintf(what, sizeof what, "expected %d rows of %d numbers", nranks, nranks);
  if (n->kind != STRATA_YNODE_SEQUENCE || n->length != (size_t)nranks) return fail(r, n, what, key);
  for (int i = 0; i < nranks; i++) {
    const strata_ynode *row = n->items[i];
    if (row->kind != STRATA_YNODE_SEQUENCE || row->length != (size_t)nranks)
      return fail(r, row, what, key);
    for (int j = 0; j < nranks; j++) {
      const strata_ynode *cell = row->items[j];
      double v = 0;
      int latency = !strcmp(key, "latency_us");
      if (i == j && scalar_is_null(cell))
        v = 0;
      else if (read_number(r, cell, key, &v))
        return STRATA_ERR_PARSE;
      /* A figure on the diagonal says the file is not what it claims (shifted rows, a matrix of
       * something else): refused rather than ignored. */
      if (i == j && v != 0)
        return fail(r, cell, "expected 0 or null on the diagonal (a rank to itself)", key);
      const char *problem = i == j ? NULL : latency ? latency_problem(v) : bandwidth_problem(v);
      if (problem) return fail(r, cell, problem, key);
      if (latency && j < i && latencies_disagree(v, out[(size_t)j * (size_t)nranks + (size_t)i])) {
        char both[160];
        snprintf(both, sizeof both,
                 "expected the one-way latency (RTT/2) of [%d][%d], %g, within 10%%; got %g", j, i,
                 out[(size_t)j * (size_t)nranks + (size_t)i], v);
        return fail(r, cell, both, key);
      }
      /* -0 becomes 0, the number the writer spells for both, so that a matrix read back is the
       * one written. */
      out[(size_t)i * (size_t)nranks + (size_t)j] = v == 0 ? 0 : v;
    }
  }
  return STRATA_OK;
}

static const char *const known_keys[] = {"format", "version",    "ranks",          "measured",
                                         "method", "latency",    "streams",        "hosts",
                                         "sites",  "latency_us", "bandwidth_gbps", NULL};

static int check_keys(const reader *r, const strata_ynode *root) {
  for (size_t k = 0; k + 1 < root->length; k += 2) {
    const strata_ynode *key = root->items[k];
    int known = 0;
    for (int i = 0; known_keys[i]; i++) known |= !strcmp(key->text, known_keys[i]);
    if (!known)
      return fail(r, key,
                  "unknown key (expected format, version, ranks, measured, method, latency, "
                  "streams, hosts, sites, latency_us, bandwidth_gbps)",
                  key->text);
    for (size_t k2 = 0; k2 < k; k2 += 2)
      if (!strcmp(root->items[k2]->text, key->text))
        return fail(r, key, "duplicate key", key->text);
  }
  return STRATA_OK;
}

static int read_header(const reader *r, const strata_ynode *root, int *nranks) {
  const strata_ynode *n = find_key(root, "format");
  if (n && (n->kind != STRATA_YNODE_SCALAR || strcmp(n->text, LINKMATRIX_FORMAT_NAME)))
    return fail(r, n, "expected \"" LINKMATRIX_FORMAT_NAME "\"", "format");
  double v;
  if ((n = find_key(root, "version"))) {
    if (read_number(r, n, "version", &v)) return STRATA_ERR_PARSE;
    if (v != LINKMATRIX_VERSION) return fail(r, n, "only version 1 is known", "version");
  }
  n = find_key(root, "latency");
  if (n && (n->kind != STRATA_YNODE_SCALAR || strcmp(n->text, "one-way")))
    return fail(r, n, "expected \"one-way\" (latency_us holds RTT/2)", "latency");
  const strata_ynode *lat = find_key(root, "latency_us");
  if (!lat) return fail(r, root, "missing key latency_us", NULL);
  if (!find_key(root, "bandwidth_gbps")) return fail(r, root, "missing key bandwidth_gbps", NULL);
  if ((n = find_key(root, "ranks"))) {
    if (read_number(r, n, "ranks", &v)) return STRATA_ERR_PARSE;
    if (v != floor(v) || v < 1 || v > STRATA_LINKMATRIX_MAX_RANKS)
      return fail(r, n, "expected a whole number of ranks from 1 to 4096", "ranks");
    *nranks = (int)v;
  } else if (r->grids && r->grids[GRID_LATENCY].found) {
    size_t rows = r->grids[GRID_LATENCY].rows;
    if (rows > STRATA_LINKMATRIX_MAX_RANKS) return READ_AGAIN_AS_TREE;
    *nranks = (int)rows;
  } else {
    if (lat->kind != STRATA_YNODE_SEQUENCE || lat->length < 1 ||
        lat->length > STRATA_LINKMATRIX_MAX_RANKS)
      return fail(r, lat, "expected a square list of rows", "latency_us");
    *nranks = (int)lat->length;
  }
  return STRATA_OK;
}

/* A grid read outside the tree, judged cell by cell as read_square judges the tree's; anything
 * read_square would refuse sends the file back to it, for the message with a position. The cells
 * move into *out (the grid's array replaces the one allocated). */
static int take_grid(strata_json_grid *g, int latency, int nranks, double **out) {
  size_t n = (size_t)nranks;
  if (g->rows != n || g->cols != n) return READ_AGAIN_AS_TREE;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      double *cell = &g->cells[i * n + j];
      if (i == j && isnan(*cell)) *cell = 0;
      double v = *cell;
      if (isnan(v) || (i == j && v != 0)) return READ_AGAIN_AS_TREE;
      if (i != j && (latency ? latency_problem(v) : bandwidth_problem(v)))
        return READ_AGAIN_AS_TREE;
      if (latency && j < i && latencies_disagree(v, g->cells[j * n + i])) return READ_AGAIN_AS_TREE;
      *cell = v == 0 ? 0 : v; /* -0 as read_square stores it */
    }
  free(*out);
  *out = g->cells;
  g->cells = NULL;
  return STRATA_OK;
}

static int read_matrix(const reader *r, const strata_ynode *root, int which, int nranks,
                       double **out) {
  const char *key = which == GRID_LATENCY ? "latency_us" : "bandwidth_gbps";
  if (r->grids && r->grids[which].found)
    return take_grid(&r->grids[which], which == GRID_LATENCY, nranks, out);
  return read_square(r, find_key(root, key), key, nranks, *out);
}

static int read_tree(strata_link_matrix *m, const reader *r, const strata_ynode *root) {
  if (!root || root->kind != STRATA_YNODE_MAPPING)
    return fail(r, root, "expected a mapping with latency_us and bandwidth_gbps", NULL);
  int nranks = 0, rc;
  if ((rc = check_keys(r, root)) || (rc = read_header(r, root, &nranks))) return rc;
  if ((rc = strata_link_matrix_alloc(m, nranks))) return rc;
  const strata_ynode *n;
  if ((rc = read_matrix(r, root, GRID_LATENCY, nranks, &m->latency_us)) ||
      (rc = read_matrix(r, root, GRID_BANDWIDTH, nranks, &m->bandwidth_gbps)))
    return rc;
  if ((n = find_key(root, "hosts")) && (rc = read_labels(r, n, "hosts", nranks, m->host)))
    return rc;
  if ((n = find_key(root, "sites")) && (rc = read_labels(r, n, "sites", nranks, m->site)))
    return rc;
  if ((n = find_key(root, "measured")) &&
      (rc = read_string(r, n, "measured", m->measured, sizeof m->measured)))
    return rc;
  if ((n = find_key(root, "method")) &&
      (rc = read_string(r, n, "method", m->method, sizeof m->method)))
    return rc;
  if ((n = find_key(root, "streams"))) {
    double v;
    if (read_number(r, n, "streams", &v)) return STRATA_ERR_PARSE;
    if (v != floor(v) || v < 0 || v > 65536)
      return fail(r, n, "expected a whole number of streams from 0 (not recorded) to 65536",
                  "streams");
    m->streams = (int)v;
  }
  return STRATA_OK;
}

/* The file as one YAML tree, or (grids given) the tree of the text with its grids cut out. */
static int parse_with(strata_link_matrix *m, const char *source, const char *text, size_t len,
                      strata_json_grid *grids, char *err, size_t err_len) {
  strata_ytree tree;
  int rc = strata_ytree_parse(&tree, source, text, len, err, err_len);
  if (rc != STRATA_OK) return grids ? READ_AGAIN_AS_TREE : rc;
  reader r = {.source = source, .err = err, .err_len = err_len, .grids = grids};
  rc = read_tree(m, &r, tree.root);
  strata_ytree_free(&tree);
  if (rc != STRATA_OK) strata_link_matrix_free(m);
  return rc;
}

/* A JSON matrix with its grids read outside the tree (json_grid.h), or READ_AGAIN_AS_TREE.
 * `text` (len bytes and a NUL) is cut up on the way. */
static int parse_fast(strata_link_matrix *m, const char *source, char *text, size_t len, char *err,
                      size_t err_len) {
  size_t lead = 0;
  while (lead < len && strchr(" \t\r\n", text[lead]) && text[lead]) lead++;
  if (lead == len || text[lead] != '{') return READ_AGAIN_AS_TREE;
  strata_json_grid grids[GRID_COUNT] = {{.key = "latency_us"}, {.key = "bandwidth_gbps"}};
  int rc = READ_AGAIN_AS_TREE;
  if (strata_json_grids_take(text, &len, grids, GRID_COUNT))
    rc = parse_with(m, source, text, len, grids, err, err_len);
  strata_json_grids_free(grids, GRID_COUNT);
  return rc;
}

static int parse_checked(strata_link_matrix *m, const char *source, const char *text, size_t len,
                         int rc, char *err, size_t err_len) {
  if (rc == READ_AGAIN_AS_TREE) {
    memset(m, 0, sizeof *m);
    if (err && err_len) err[0] = '\0';
    rc = parse_with(m, source, text, len, NULL, err, err_len);
  }
  if (rc == STRATA_OK) {
    char why[200];
    rc = strata_link_matrix_validate(m, why, sizeof why);
    if (rc) strata_topo_errorf(err, err_len, source, (strata_topo_mark){0, 0}, "%s", why);
  }
  if (rc != STRATA_OK) strata_link_matrix_free(m);
  return rc;
}

int strata_link_matrix_parse(strata_link_matrix *m, const char *source, const char *text,
                             size_t len, char *err, size_t err_len) {
  memset(m, 0, sizeof *m);
  if (err && err_len) err[0] = '\0';
  char *copy = malloc(len + 1);
  int rc = READ_AGAIN_AS_TREE;
  if (copy) {
    memcpy(copy, text, len);
    copy[len] = '\0';
    rc = parse_fast(m, source, copy, len, err, err_len);
    free(copy);
  }
  return parse_checked(m, source, text, len, rc, err, err_len);
}

/* The whole file into a malloc'd buffer with a NUL after it. */
static int read_whole(const char *path, char **out, size_t *out_len, char *err, size_t err_len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
    return STRATA_ERR_NOT_FOUND;
  }
  size_t cap = 1 << 16, len = 0;
  char *text = malloc(cap);
  int rc = text ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  while (rc == STRATA_OK) {
    if (len + 1 >= cap) {
      char *bigger = cap < LINKMATRIX_MAX_FILE_BYTES ? realloc(text, cap * 2) : NULL;
      if (!bigger) {
        snprintf(err, err_len, "%s: file too large or out of memory", path);
        rc = STRATA_ERR_NO_MEMORY;
        break;
      }
      text = bigger;
      cap *= 2;
    }
    size_t got = fread(text + len, 1, cap - len - 1, f);
    len += got;
    if (got == 0) {
      if (ferror(f)) {
        snprintf(err, err_len, "%s: read error", path);
        rc = STRATA_ERR_PARSE;
      }
      break;
    }
  }
  fclose(f);
  if (rc != STRATA_OK) {
    free(text);
    return rc;
  }
  text[len] = '\0';
  *out = text, *out_len = len;
  return STRATA_OK;
}

/* The file's own buffer is cut up by the fast path; a file it declines is read again. */
int strata_link_matrix_load(strata_link_matrix *m, const char *path, char *err, size_t err_len) {
  memset(m, 0, sizeof *m);
  if (err && err_len) err[0] = '\0';
  char *text;
  size_t len;
  int rc = read_whole(path, &text, &len, err, err_len);
  if (rc != STRATA_OK) return rc;
  rc = parse_fast(m, path, text, len, err, err_len);
  if (rc == READ_AGAIN_AS_TREE) {
    free(text);
    if ((rc = read_whole(path, &text, &len, err, err_len)) != STRATA_OK) return rc;
    rc = READ_AGAIN_AS_TREE;
  }
  rc = parse_checked(m, path, text, len, rc, err, err_len);
  free(text);
  return rc;
}

/* ---- writing ---- */

strata_link_matrix_format strata_link_matrix_format_for_path(const char *path) {
  size_t n = strlen(path);
  if ((n >= 5 && !strcasecmp(path + n - 5, ".yaml")) ||
      (n >= 4 && !strcasecmp(path + n - 4, ".yml")))
    return STRATA_LINKMATRIX_YAML;
  return STRATA_LINKMATRIX_JSON;
}

static json_t *labels_json(const strata_link_matrix *m,
                           char (*labels)[STRATA_LINKMATRIX_LABEL_BYTES]) {
  json_t *list = json_array();
  for (int i = 0; i < m->nranks; i++)
    list = strata_json_append(list, strata_json_string(labels[i]));
  return list;
}

/* The tree both spellings print, keys in the order docs/link-matrix.md lists them. */
static json_t *matrix_json(const strata_link_matrix *m) {
  json_t *doc =
      json_pack("{s:s, s:i, s:i, s:o, s:o, s:s}", "format", LINKMATRIX_FORMAT_NAME, "version",
                LINKMATRIX_VERSION, "ranks", m->nranks, "measured", strata_json_string(m->measured),
                "method", strata_json_string(m->method), "latency", "one-way");
  if (m->streams > 0) doc = strata_json_set(doc, "streams", json_integer(m->streams));
  doc = strata_json_set(doc, "hosts", labels_json(m, m->host));
  return strata_json_set(doc, "sites", labels_json(m, m->site));
}

/* A cell in the fewest digits that read back as the same double (a whole number as an integer,
 * else 15, 16 or 17 significant digits): a probe's latencies are whole nanoseconds halved, and a
 * 4,096-rank matrix in 17 digits everywhere would be twice the size. */
static void format_cell(double v, char *text, size_t len) {
  if (!isfinite(v)) {
    snprintf(text, len, "null");
    return;
  }
  if (v == floor(v) && fabs(v) < 9007199254740992.0) {
    snprintf(text, len, "%.0f", v == 0 ? 0.0 : v);
    return;
  }
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(text, len, "%.*g", digits, v);
    if (strtod(text, NULL) == v) return;
  }
}

/* A grid written cell by cell, never as a tree: 16.8 million cells at 4,096 ranks. */
static int write_grid(FILE *f, const strata_link_matrix *m, const char *key, const double *cells,
                      int yaml, int last) {
  int rc = fprintf(f, "%s\"%s\":%s", yaml ? "" : "  ", key, yaml ? "\n" : " [\n") < 0;
  char text[40];
  for (int i = 0; i < m->nranks && !rc; i++) {
    rc |= fputs(yaml ? "  - [" : "    [", f) < 0;
    for (int j = 0; j < m->nranks; j++) {
      format_cell(cells[(size_t)i * (size_t)m->nranks + (size_t)j], text, sizeof text);
      rc |= fputs(text, f) < 0 || (j + 1 < m->nranks && fputs(", ", f) < 0);
    }
    rc |= fputs(yaml || i + 1 == m->nranks ? "]\n" : "],\n", f) < 0;
  }
  if (!yaml) rc |= fputs(last ? "  ]\n" : "  ],\n", f) < 0;
  return rc;
}

/* One value as JSON on one line ("[0, 2.5]"), numbers with 17 digits. */
static int write_value(FILE *f, const json_t *value) {
  return json_dumpf(value, f, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
}

/* The layout is ours, the encoding jansson's: one key per line, and a matrix one row per line,
 * so that a person can read a small matrix as the grid it is. In YAML a matrix is a block list
 * of flow rows; everything else is the same text as in JSON, which YAML reads as flow style. */
static int write_matrix_text(FILE *f, json_t *doc, const strata_link_matrix *m, int yaml) {
  const char *key;
  json_t *value;
  int rc = fputs(yaml ? "# strata link matrix (docs/link-matrix.md)\n" : "{\n", f) < 0;
  json_object_foreach(doc, key, value) {
    rc |= fprintf(f, "%s\"%s\": ", yaml ? "" : "  ", key) < 0;
    rc |= write_value(f, value) != 0 || fputs(yaml ? "\n" : ",\n", f) < 0;
  }
  rc |= write_grid(f, m, "latency_us", m->latency_us, yaml, 0);
  rc |= write_grid(f, m, "bandwidth_gbps", m->bandwidth_gbps, yaml, 1);
  if (!yaml) rc |= fputs("}\n", f) < 0;
  return rc;
}

int strata_link_matrix_write(const strata_link_matrix *m, strata_link_matrix_format format,
                             void *out) {
  FILE *f = out;
  json_t *doc = matrix_json(m);
  int rc = doc ? write_matrix_text(f, doc, m, format == STRATA_LINKMATRIX_YAML) : -1;
  json_decref(doc);
  if (fflush(f) != 0 || ferror(f)) rc = -1;
  return rc ? STRATA_ERR_SYSTEM : STRATA_OK;
}

int strata_link_matrix_save(const strata_link_matrix *m, const char *path, char *err,
                            size_t err_len) {
  int to_stdout = !strcmp(path, "-");
  FILE *f = to_stdout ? stdout : fopen(path, "w");
  if (f == NULL) {
    snprintf(err, err_len, "%s: cannot create: %s", path, strerror(errno));
    return STRATA_ERR_SYSTEM;
  }
  int rc = strata_link_matrix_write(m, strata_link_matrix_format_for_path(path), f);
  if (!to_stdout && fclose(f) != 0) rc = STRATA_ERR_SYSTEM;
  if (rc) snprintf(err, err_len, "%s: write failed: %s", path, strerror(errno));
  return rc;
}
