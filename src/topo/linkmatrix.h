// SPDX-License-Identifier: Apache-2.0
/*
 * linkmatrix.h — a measured link matrix: per ordered pair of ranks, the one-way latency and the
 * bandwidth one rank gets sending to the other. `strata probe` writes it, `strata place` (and
 * the placement solvers in src/plan/place.h) read it. The file format (JSON or YAML, the same
 * tree) is documented in docs/link-matrix.md.
 *
 * Conventions:
 *  - index i is the rank of the job that measured the matrix (with `strata launch` and no
 *    --order: the i-th child); latency_us[i][j] is ONE-WAY, i.e. the median ping-pong round
 *    trip between i and j divided by 2, so latency_us is symmetric when it was measured;
 *  - bandwidth_gbps[i][j] is GIGABYTES per second (1e9 bytes/s, the unit of src/model/cost.h),
 *    sending from i to j; it need not equal bandwidth_gbps[j][i];
 *  - the diagonal is 0 (or null in a file) for both and never used; every off-diagonal latency is
 *    from 0 to STRATA_LINKMATRIX_MAX_LATENCY_US, latency_us[i][j] and [j][i] agree within
 *    STRATA_LINKMATRIX_LATENCY_ASYMMETRY (both are the same RTT halved), and every off-diagonal
 *    bandwidth is from STRATA_LINKMATRIX_MIN_GBPS to STRATA_LINKMATRIX_MAX_GBPS (the loader
 *    refuses anything else, so every send time the placers sum stays finite).
 * Matrices are row-major arrays of nranks*nranks doubles owned by the struct.
 */
#ifndef STRATA_TOPO_LINKMATRIX_H
#define STRATA_TOPO_LINKMATRIX_H

#include <stddef.h>

#define STRATA_LINKMATRIX_MAX_RANKS 4096
#define STRATA_LINKMATRIX_LABEL_BYTES 64
/* Bounds of a figure a network can have: 10 s one way is beyond any path on Earth or to a
 * geostationary satellite (~0.27 s); 1 kB/s to 1 PB/s spans every link a rank can use. */
#define STRATA_LINKMATRIX_MAX_LATENCY_US 1e7
#define STRATA_LINKMATRIX_MIN_GBPS 1e-6
#define STRATA_LINKMATRIX_MAX_GBPS 1e6
/* latency_us[i][j] and [j][i] may differ by this share of the larger (jitter of two medians). */
#define STRATA_LINKMATRIX_LATENCY_ASYMMETRY 0.1

typedef struct strata_link_matrix {
  int nranks;
  char (*host)[STRATA_LINKMATRIX_LABEL_BYTES]; /* per rank; "" = unknown */
  char (*site)[STRATA_LINKMATRIX_LABEL_BYTES]; /* per rank; "" = unknown */
  double *latency_us;                          /* [i*nranks+j], one-way (RTT/2) */
  double *bandwidth_gbps;                      /* [i*nranks+j], GB/s from i to j */
  char measured[64];                           /* ISO 8601 UTC time of the measurement, or "" */
  char method[256];                            /* how it was measured (free text), or "" */
  int streams; /* TCP connections per rank pair the bandwidth was measured with; 0 = not recorded */
} strata_link_matrix;

/* Allocates an nranks x nranks matrix, all zero, labels empty. STRATA_OK,
 * STRATA_ERR_INVALID_ARG (nranks outside 1..STRATA_LINKMATRIX_MAX_RANKS) or NO_MEMORY. */
int strata_link_matrix_alloc(strata_link_matrix *m, int nranks);
/* Frees the arrays (the struct itself is the caller's). NULL and zeroed structs are fine. */
void strata_link_matrix_free(strata_link_matrix *m);

static inline double strata_link_matrix_latency_us(const strata_link_matrix *m, int i, int j) {
  return m->latency_us[(size_t)i * (size_t)m->nranks + (size_t)j];
}
static inline double strata_link_matrix_bandwidth_gbps(const strata_link_matrix *m, int i, int j) {
  return m->bandwidth_gbps[(size_t)i * (size_t)m->nranks + (size_t)j];
}
/* Time in µs to send `bytes` from i to j: latency + bytes / bandwidth. 0 when i == j. */
double strata_link_matrix_send_us(const strata_link_matrix *m, int i, int j, double bytes);

/* Checks the invariants above. STRATA_OK or STRATA_ERR_PARSE with a message in err. */
int strata_link_matrix_validate(const strata_link_matrix *m, char *err, size_t err_len);

/* Parses JSON or YAML text (JSON is read as YAML flow style). `source` names the text in error
 * messages ("file:line:col: expected ..."). On success *m owns a validated matrix. Returns
 * STRATA_OK, STRATA_ERR_PARSE or STRATA_ERR_NO_MEMORY; on failure *m is zeroed. */
int strata_link_matrix_parse(strata_link_matrix *m, const char *source, const char *text,
                             size_t len, char *err, size_t err_len);
/* Reads a file (any extension; the content decides). STRATA_ERR_NOT_FOUND when it cannot be
 * opened, otherwise as strata_link_matrix_parse. */
int strata_link_matrix_load(strata_link_matrix *m, const char *path, char *err, size_t err_len);

typedef enum strata_link_matrix_format {
  STRATA_LINKMATRIX_JSON = 0,
  STRATA_LINKMATRIX_YAML = 1
} strata_link_matrix_format;

/* ".yaml"/".yml" -> YAML, anything else -> JSON. */
strata_link_matrix_format strata_link_matrix_format_for_path(const char *path);
/* Writes the matrix as JSON or YAML text to `out` (a FILE*, typed void* to keep stdio out of
 * this header). Returns STRATA_OK or STRATA_ERR_SYSTEM when the write fails. */
int strata_link_matrix_write(const strata_link_matrix *m, strata_link_matrix_format format,
                             void *out);
/* Writes to `path` ("-" = stdout) in the format its extension names. */
int strata_link_matrix_save(const strata_link_matrix *m, const char *path, char *err,
                            size_t err_len);

#endif
