// SPDX-License-Identifier: Apache-2.0
/*
 * json_grid.h — the number grids of a JSON document, read without building a tree.
 *
 * A link matrix of 4,096 ranks is two grids of 16.8 million numbers: as a YAML tree (a node and
 * a string per cell) it takes gigabytes and most of a minute to read. The grids are the only big
 * thing in such a file, so they are read here, straight into arrays of doubles, and cut out of
 * the text (each replaced by "[]", its line breaks, and the spaces that keep the columns of its
 * last line) so that the rest, small, still goes through the YAML tree with every line:column
 * unchanged.
 *
 * This is a fast path, never a second judge: it takes only what the tree reader would read the
 * same way (a JSON number as strtod reads it, finite and without a range error; `null`, kept as
 * NaN) and says "not a grid" for anything else, so that the caller falls back to the tree, whose
 * error names the position. It never fails on bad input, it only declines.
 */
#ifndef STRATA_TOPO_JSON_GRID_H
#define STRATA_TOPO_JSON_GRID_H

#include <stddef.h>

typedef struct strata_json_grid {
  const char *key; /* the top-level key (the caller's string) */
  int found;       /* 1: the key's value was a grid, cut out of the text */
  size_t rows;     /* rows, each of `cols` numbers */
  size_t cols;
  double *cells; /* rows*cols, row-major, NaN for null; malloc'd, the caller's to free */
} strata_json_grid;

/* Looks in the JSON object `text` (*len bytes, modified: grids found are cut out and *len
 * shrinks) for the top-level keys grids[k].key; each whose value is a non-empty list of
 * equal-length lists of numbers or null is parsed into grids[k] and cut out. Returns 1 when the
 * document is a JSON object that was scanned to its end (grids[k].found tells which were taken), 0
 * when it is not (not JSON, a syntax error, a grid with another value in it, a key given twice, out
 * of memory): then nothing is found, cells are freed and the text may be partly blanked (use a
 * copy). */
int strata_json_grids_take(char *text, size_t *len, strata_json_grid *grids, int count);

void strata_json_grids_free(strata_json_grid *grids, int count);

#endif
