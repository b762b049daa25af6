// SPDX-License-Identifier: Apache-2.0
/*
 * json_lite.h — a small JSON reader for the answers of etcd's gateway (store_etcd.c). The rank
 * side must not link the planner's JSON (topo/json.c), and the etcd store reads a handful of
 * fields only, so this splits a document into tokens, jsmn-style, without copying or decoding:
 * strings stay as they were on the wire (the fields read are base64 and decimal digits, which
 * need no unescaping). Bounded: nesting deeper than JSON_LITE_MAX_DEPTH, malformed text or a
 * document of more tokens than the caller allows is refused, never a crash.
 */
#ifndef STRATA_BOOT_JSON_LITE_H
#define STRATA_BOOT_JSON_LITE_H

#include <stddef.h>
#include <stdint.h>

#define JSON_LITE_MAX_DEPTH 32

typedef enum {
  JSON_LITE_OBJECT,
  JSON_LITE_ARRAY,
  JSON_LITE_STRING,
  JSON_LITE_PRIMITIVE
} json_lite_type;

typedef struct json_lite_token {
  json_lite_type type;
  size_t start, end; /* the text of a string without its quotes; of a primitive; of a container */
  int after;         /* the index of the first token after this one's subtree */
  int count;         /* containers: members (an object's pairs count twice: name and value) */
} json_lite_token;

typedef struct json_lite_doc {
  const char *text;
  json_lite_token *tokens; /* malloc'd; json_lite_free */
  int ntokens;
} json_lite_doc;

/* Splits text (len bytes) into doc's tokens; at most max_tokens. STRATA_OK, STRATA_ERR_PROTOCOL
 * (not JSON, too deep, too many tokens) or STRATA_ERR_NO_MEMORY. */
int json_lite_parse(const char *text, size_t len, int max_tokens, json_lite_doc *doc);
void json_lite_free(json_lite_doc *doc);
/* The value of member `name` of object token `object`; -1 when absent or not an object. */
int json_lite_member(const json_lite_doc *doc, int object, const char *name);
/* The i-th element of array token `array`; -1 when out of range or not an array. */
int json_lite_element(const json_lite_doc *doc, int array, int i);
/* An integer (a number, or a string of digits as protobuf writes int64); 0 on success, -1 if not
 * one or out of range. */
int json_lite_int64(const json_lite_doc *doc, int token, int64_t *out);
/* 1 for the literal true, else 0 (also for a missing token, -1). */
int json_lite_true(const json_lite_doc *doc, int token);

#endif
