// SPDX-License-Identifier: Apache-2.0
/* json_lite.c — see json_lite.h. */
#include "boot/json_lite.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "strata.h"

typedef struct parser {
  const char *text;
  size_t len, pos;
  json_lite_doc *doc;
  int max_tokens, cap;
} parser;

static void skip_space(parser *p) {
  while (p->pos < p->len && (p->text[p->pos] == ' ' || p->text[p->pos] == '\t' ||
                             p->text[p->pos] == '\n' || p->text[p->pos] == '\r'))
    p->pos++;
}

static int new_token(parser *p, json_lite_type type) {
  json_lite_doc *d = p->doc;
  if (d->ntokens >= p->max_tokens) return -1;
  if (d->ntokens == p->cap) {
    int cap = p->cap ? p->cap * 2 : 64;
    if (cap > p->max_tokens) cap = p->max_tokens;
    json_lite_token *t = realloc(d->tokens, (size_t)cap * sizeof *t);
    if (!t) return -2;
    d->tokens = t;
    p->cap = cap;
  }
  json_lite_token *t = &d->tokens[d->ntokens];
  memset(t, 0, sizeof *t);
  t->type = type;
  t->start = p->pos;
  return d->ntokens++;
}

/* A string's text (p->pos at its opening quote): escapes are skipped over, not decoded. */
static int parse_string(parser *p, int *index) {
  int i = new_token(p, JSON_LITE_STRING);
  if (i < 0) return i;
  size_t start = ++p->pos;
  while (p->pos < p->len && p->text[p->pos] != '"') {
    unsigned char c = (unsigned char)p->text[p->pos];
    if (c < 0x20) return -1;
    p->pos += c == '\\' ? 2 : 1;
  }
  if (p->pos >= p->len) return -1;
  p->doc->tokens[i].start = start;
  p->doc->tokens[i].end = p->pos++;
  p->doc->tokens[i].after = i + 1;
  *index = i;
  return 0;
}

static int parse_value(parser *p, int depth, int *index);

static int parse_container(parser *p, int depth, int *index) {
  int object = p->text[p->pos] == '{';
  char close = object ? '}' : ']';
  int i = new_token(p, object ? JSON_LITE_OBJECT : JSON_LITE_ARRAY);
  if (i < 0) return i;
  p->pos++;
  skip_space(p);
  int count = 0;
  if (p->pos < p->len && p->text[p->pos] == close) {
    p->pos++;
  } else {
    for (;;) {
      int child, rc;
      skip_space(p);
      if (object) {
        if (p->pos >= p->len || p->text[p->pos] != '"') return -1;
        if ((rc = parse_string(p, &child)) != 0) return rc;
        count++;
        skip_space(p);
        if (p->pos >= p->len || p->text[p->pos] != ':') return -1;
        p->pos++;
      }
      if ((rc = parse_value(p, depth + 1, &child)) != 0) return rc;
      count++;
      skip_space(p);
      if (p->pos >= p->len) return -1;
      char c = p->text[p->pos++];
      if (c == close) break;
      if (c != ',') return -1;
    }
  }
  json_lite_token *t = &p->doc->tokens[i];
  t->end = p->pos;
  t->count = count;
  t->after = p->doc->ntokens;
  *index = i;
  return 0;
}

static int parse_value(parser *p, int depth, int *index) {
  if (depth > JSON_LITE_MAX_DEPTH) return -1;
  skip_space(p);
  if (p->pos >= p->len) return -1;
  char c = p->text[p->pos];
  if (c == '{' || c == '[') return parse_container(p, depth, index);
  if (c == '"') return parse_string(p, index);
  int i = new_token(p, JSON_LITE_PRIMITIVE);
  if (i < 0) return i;
  while (p->pos < p->len && p->text[p->pos] && strchr("+-.0123456789eEtruefalsn", p->text[p->pos]))
    p->pos++;
  json_lite_token *t = &p->doc->tokens[i];
  t->end = p->pos;
  t->after = i + 1;
  if (t->end == t->start) return -1;
  *index = i;
  return 0;
}

int json_lite_parse(const char *text, size_t len, int max_tokens, json_lite_doc *doc) {
  memset(doc, 0, sizeof *doc);
  if (!text || max_tokens < 1) return STRATA_ERR_INVALID_ARG;
  parser p = {.text = text, .len = len, .doc = doc, .max_tokens = max_tokens};
  doc->text = text;
  int root = 0, rc = parse_value(&p, 0, &root);
  if (rc == 0) {
    skip_space(&p);
    if (p.pos != len) rc = -1;
  }
  if (rc != 0) {
    json_lite_free(doc);
    return rc == -2 ? STRATA_ERR_NO_MEMORY : STRATA_ERR_PROTOCOL;
  }
  return STRATA_OK;
}

void json_lite_free(json_lite_doc *doc) {
  free(doc->tokens);
  memset(doc, 0, sizeof *doc);
}

static int valid(const json_lite_doc *doc, int token) {
  return token >= 0 && token < doc->ntokens;
}

int json_lite_member(const json_lite_doc *doc, int object, const char *name) {
  if (!valid(doc, object) || doc->tokens[object].type != JSON_LITE_OBJECT) return -1;
  size_t name_len = strlen(name);
  int i = object + 1;
  for (int k = 0; k + 1 < doc->tokens[object].count; k += 2) {
    const json_lite_token *key = &doc->tokens[i];
    int value = key->after;
    if (key->end - key->start == name_len && !memcmp(doc->text + key->start, name, name_len))
      return value;
    i = doc->tokens[value].after;
  }
  return -1;
}

int json_lite_element(const json_lite_doc *doc, int array, int index) {
  if (!valid(doc, array) || doc->tokens[array].type != JSON_LITE_ARRAY || index < 0 ||
      index >= doc->tokens[array].count)
    return -1;
  int i = array + 1;
  for (int k = 0; k < index; k++) i = doc->tokens[i].after;
  return i;
}

int json_lite_int64(const json_lite_doc *doc, int token, int64_t *out) {
  if (!valid(doc, token)) return -1;
  const json_lite_token *t = &doc->tokens[token];
  if (t->type != JSON_LITE_STRING && t->type != JSON_LITE_PRIMITIVE) return -1;
  size_t n = t->end - t->start;
  char digits[24];
  if (n == 0 || n >= sizeof digits) return -1;
  memcpy(digits, doc->text + t->start, n);
  digits[n] = '\0';
  char *end;
  errno = 0;
  long long v = strtoll(digits, &end, 10);
  if (*end || errno) return -1;
  *out = (int64_t)v;
  return 0;
}

int json_lite_true(const json_lite_doc *doc, int token) {
  if (!valid(doc, token)) return 0;
  const json_lite_token *t = &doc->tokens[token];
  return t->type == JSON_LITE_PRIMITIVE && t->end - t->start == 4 &&
         !memcmp(doc->text + t->start, "true", 4);
}
