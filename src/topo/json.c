// SPDX-License-Identifier: Apache-2.0
/*
 * json.c — see json.h.
 */
#include "topo/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

json_t *strata_json_number(double v) {
  if (!isfinite(v)) return json_null();
  if (v == floor(v) && fabs(v) < 9007199254740992.0) return json_integer((json_int_t)v);
  return json_real(v);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when the byte starts none. */
static size_t utf8_sequence_length(const unsigned char *s) {
  size_t n;
  unsigned min;
  unsigned code;
  if (s[0] < 0x80) return 1;
  if (s[0] >= 0xc2 && s[0] <= 0xdf)
    n = 2, min = 0x80, code = s[0] & 0x1f;
  else if (s[0] >= 0xe0 && s[0] <= 0xef)
    n = 3, min = 0x800, code = s[0] & 0x0f;
  else if (s[0] >= 0xf0 && s[0] <= 0xf4)
    n = 4, min = 0x10000, code = s[0] & 0x07;
  else
    return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    code = code << 6 | (s[i] & 0x3f);
  }
  if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return n;
}

json_t *strata_json_string(const char *s) {
  if (!s) return json_null();
  json_t *valid = json_string(s);
  if (valid) return valid;
  size_t len = strlen(s);
  char *copy = malloc(3 * len + 1); /* each bad byte becomes the 3 bytes of U+FFFD */
  if (!copy) return NULL;
  size_t out = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t n = utf8_sequence_length(p);
    if (n == 0) {
      memcpy(copy + out, "\xef\xbf\xbd", 3), out += 3, p++;
    } else {
      memcpy(copy + out, p, n), out += n, p += n;
    }
  }
  copy[out] = '\0';
  json_t *fixed = json_string(copy);
  free(copy);
  return fixed;
}

/* jansson's *_new calls release value on every failure; we release the container too. */
json_t *strata_json_set(json_t *obj, const char *key, json_t *value) {
  if (obj && json_object_set_new(obj, key, value) == 0) return obj;
  if (!obj) json_decref(value);
  json_decref(obj);
  return NULL;
}

json_t *strata_json_append(json_t *array, json_t *value) {
  if (array && json_array_append_new(array, value) == 0) return array;
  if (!array) json_decref(value);
  json_decref(array);
  return NULL;
}

int strata_json_write(FILE *out, json_t *doc, int real_digits) {
  int rc = -1;
  if (doc &&
      json_dumpf(doc, out,
                 JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(real_digits)) == 0 &&
      fputc('\n', out) != EOF && fflush(out) == 0 && !ferror(out))
    rc = 0;
  json_decref(doc);
  return rc;
}
