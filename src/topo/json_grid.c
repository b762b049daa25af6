// SPDX-License-Identifier: Apache-2.0
/* json_grid.c — see json_grid.h. One pass over the text, no recursion, no tree. */
#include "topo/json_grid.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct scan {
  char *text;
  size_t len, pos;
} scan;

static void skip_space(scan *s) {
  while (s->pos < s->len && strchr(" \t\r\n", s->text[s->pos]) && s->text[s->pos]) s->pos++;
}

static int at(const scan *s, char c) {
  return s->pos < s->len && s->text[s->pos] == c;
}

/* A string from its opening quote; *plain says it holds no escape. */
static int skip_string(scan *s, int *plain) {
  if (!at(s, '"')) return 0;
  *plain = 1;
  for (s->pos++; s->pos < s->len; s->pos++) {
    unsigned char c = (unsigned char)s->text[s->pos];
    if (c == '"') {
      s->pos++;
      return 1;
    }
    if (c < 0x20) return 0;
    if (c == '\\') {
      *plain = 0;
      s->pos++;
    }
  }
  return 0;
}

/* Any JSON value, nesting counted rather than recursed; its well-formedness inside is the tree
 * reader's to judge (it reads this text again). */
static int skip_value(scan *s) {
  size_t depth = 0;
  do {
    skip_space(s);
    if (s->pos >= s->len) return 0;
    char c = s->text[s->pos];
    int plain;
    if (c == '"') {
      if (!skip_string(s, &plain)) return 0;
    } else if (c == '[' || c == '{') {
      depth++, s->pos++;
    } else if (c == ']' || c == '}') {
      if (!depth) return 0;
      depth--, s->pos++;
    } else if (c == ',' || c == ':') {
      if (!depth) return 0;
      s->pos++;
    } else {
      size_t start = s->pos;
      while (s->pos < s->len && !strchr(" \t\r\n,:[]{}\"", s->text[s->pos]) && s->text[s->pos])
        s->pos++;
      if (s->pos == start) return 0; /* a byte no value has (a NUL): never loop on it */
    }
  } while (depth);
  return 1;
}

static int digits(scan *s) {
  size_t start = s->pos;
  while (s->pos < s->len && s->text[s->pos] >= '0' && s->text[s->pos] <= '9') s->pos++;
  return s->pos > start;
}

/* m x 10^k computed with one rounding in long double, then rounded to double; 0 when that could
 * differ from strtod's correctly rounded result (then strtod decides). Exact powers of ten in a
 * 64-bit mantissa go to 10^27; the second rounding can only go wrong when the first landed exactly
 * halfway between two doubles. A %.17g number (17 digits) takes this path: strtod's exact
 * big-number arithmetic made it most of the time of reading a 4,096-rank matrix. */
static int scale_exactly(uint64_t m, int k, double *out) {
#if LDBL_MANT_DIG >= 64
  static const long double powers[] = {1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,
                                       1e8L,  1e9L,  1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L,
                                       1e16L, 1e17L, 1e18L, 1e19L, 1e20L, 1e21L, 1e22L, 1e23L,
                                       1e24L, 1e25L, 1e26L, 1e27L}; /* each exact in 64 bits */
  if (k < -27 || k > 27) return 0;
  long double power = powers[k < 0 ? -k : k];
  long double exact = k < 0 ? (long double)m / power : (long double)m * power;
  double rounded = (double)exact;
  if (!isfinite(rounded)) return 0;
  if ((long double)rounded != exact) {
    double other = nextafter(rounded, exact > rounded ? INFINITY : -INFINITY);
    if (((long double)rounded + (long double)other) / 2 == exact) return 0;
  }
  *out = rounded;
  return 1;
#else
  (void)m, (void)k, (void)out;
  return 0;
#endif
}

/* The digits of a number token as a 64-bit mantissa and a power of ten, 0 past 19 digits. */
static int decompose(const char *p, const char *end, uint64_t *m, int *k) {
  uint64_t value = 0;
  int significant = 0, scale = 0, fraction = 0;
  for (; p < end && *p != 'e' && *p != 'E'; p++) {
    if (*p == '.') {
      fraction = 1;
      continue;
    }
    if (value == 0 && *p == '0') {
      scale -= fraction;
      continue;
    }
    if (++significant > 19) return 0;
    value = value * 10 + (uint64_t)(*p - '0');
    scale -= fraction;
  }
  if (p < end) {
    long e = strtol(p + 1, NULL, 10);
    if (e < -400 || e > 400) return 0;
    scale += (int)e;
  }
  *m = value, *k = scale;
  return 1;
}

/* A JSON number or null; NaN for null. Declines what strtod would not read whole and finite,
 * as the tree reader does. */
static int read_cell(scan *s, double *out) {
  size_t start = s->pos;
  if (s->len - s->pos >= 4 && !memcmp(s->text + s->pos, "null", 4)) {
    s->pos += 4;
    *out = NAN;
    return 1;
  }
  if (at(s, '-')) s->pos++;
  if (!digits(s)) return 0;
  if (at(s, '.')) {
    s->pos++;
    if (!digits(s)) return 0;
  }
  if (at(s, 'e') || at(s, 'E')) {
    s->pos++;
    if (at(s, '+') || at(s, '-')) s->pos++;
    if (!digits(s)) return 0;
  }
  if (s->pos >= s->len) return 0; /* strtod needs the closing bracket after the number */
  const char *digits_at = s->text + start + (s->text[start] == '-');
  uint64_t m;
  int k;
  if (decompose(digits_at, s->text + s->pos, &m, &k) && (m == 0 || scale_exactly(m, k, out))) {
    if (m == 0) *out = 0;
    if (s->text[start] == '-') *out = -*out;
    return 1;
  }
  char *end;
  errno = 0;
  double v = strtod(s->text + start, &end);
  if (errno || end != s->text + s->pos || !isfinite(v)) return 0;
  *out = v;
  return 1;
}

static int push_cell(strata_json_grid *g, size_t *cap, size_t used, double v) {
  if (used == *cap) {
    size_t bigger = *cap ? *cap * 2 : 1024;
    double *cells = realloc(g->cells, bigger * sizeof *cells);
    if (!cells) return 0;
    g->cells = cells, *cap = bigger;
  }
  g->cells[used] = v;
  return 1;
}

/* [[cell, ...], ...] with every row as long as the first. */
static int read_grid(scan *s, strata_json_grid *g) {
  size_t cap = 0, used = 0;
  skip_space(s);
  if (!at(s, '[')) return 0;
  s->pos++;
  for (;;) {
    skip_space(s);
    if (!at(s, '[')) return 0;
    s->pos++;
    size_t cols = 0;
    for (;;) {
      double v;
      skip_space(s);
      if (!read_cell(s, &v) || !push_cell(g, &cap, used++, v)) return 0;
      cols++;
      skip_space(s);
      if (at(s, ']')) break;
      if (!at(s, ',')) return 0;
      s->pos++;
    }
    s->pos++;
    if (g->rows == 0) g->cols = cols;
    if (cols != g->cols) return 0;
    g->rows++;
    skip_space(s);
    if (at(s, ']')) break;
    if (!at(s, ',')) return 0;
    s->pos++;
  }
  s->pos++;
  return 1;
}

/* Cuts text[from, to) down to an empty list that spans the same lines and ends in the same
 * column ("[", a newline per line break, spaces, "]"): every line and column after it stays where
 * it was (YAML's marks count "\r\n", "\r" and "\n" as one break each). Returns the bytes removed.
 */
static size_t cut(char *text, size_t len, size_t from, size_t to) {
  size_t breaks = 0, line_start = from + 1; /* the "[" stands for the first column */
  for (size_t i = from; i < to; i++) {
    if (text[i] == '\r' && i + 1 < to && text[i + 1] == '\n') i++;
    if (text[i] == '\r' || text[i] == '\n') breaks++, line_start = i + 1;
  }
  size_t out = from;
  text[out++] = '[';
  memset(text + out, '\n', breaks);
  out += breaks;
  memset(text + out, ' ', to - 1 - line_start);
  out += to - 1 - line_start;
  text[out++] = ']';
  memmove(text + out, text + to, len - to);
  return to - out;
}

/* One "key": value member of the top-level object. */
static int member(scan *s, strata_json_grid *grids, int count) {
  skip_space(s);
  size_t key_start = s->pos + 1;
  int plain;
  if (!skip_string(s, &plain)) return 0;
  size_t key_len = s->pos - 1 - key_start;
  skip_space(s);
  if (!at(s, ':')) return 0;
  s->pos++;
  skip_space(s);
  for (int k = 0; plain && k < count; k++) {
    if (strlen(grids[k].key) != key_len || memcmp(grids[k].key, s->text + key_start, key_len))
      continue;
    if (grids[k].found) return 0; /* twice: the tree reader names the duplicate */
    size_t start = s->pos;
    if (!read_grid(s, &grids[k])) return 0;
    size_t removed = cut(s->text, s->len, start, s->pos);
    s->len -= removed, s->pos -= removed;
    grids[k].found = 1;
    return 1;
  }
  return skip_value(s);
}

void strata_json_grids_free(strata_json_grid *grids, int count) {
  for (int k = 0; k < count; k++) {
    free(grids[k].cells);
    grids[k].cells = NULL;
    grids[k].found = 0;
    grids[k].rows = grids[k].cols = 0;
  }
}

int strata_json_grids_take(char *text, size_t *len, strata_json_grid *grids, int count) {
  for (int k = 0; k < count; k++) {
    grids[k].cells = NULL;
    grids[k].found = 0;
    grids[k].rows = grids[k].cols = 0;
  }
  scan s = {.text = text, .len = *len, .pos = 0};
  skip_space(&s);
  int ok = at(&s, '{');
  if (ok) {
    s.pos++;
    skip_space(&s);
    if (at(&s, '}')) {
      s.pos++;
    } else {
      for (;;) {
        if (!(ok = member(&s, grids, count))) break;
        skip_space(&s);
        if (at(&s, '}')) {
          s.pos++;
          break;
        }
        if (!(ok = at(&s, ','))) break;
        s.pos++;
      }
    }
  }
  if (ok) {
    skip_space(&s);
    ok = s.pos == s.len;
  }
  if (!ok) strata_json_grids_free(grids, count);
  *len = s.len;
  return ok;
}
