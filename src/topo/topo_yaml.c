// SPDX-License-Identifier: Apache-2.0
/*
 * topo_yaml.c — YAML text to a small tree, through libyaml's event API.
 *
 * Why not libyaml's own document loader: we want an error with a position for things the
 * topology format forbids (an alias, a second document, absurd nesting), and the loader resolves
 * aliases into shared nodes — `&a [*a]` becomes a cycle and `*a` repeated becomes an exponential
 * walk. Building our own tree from events is short and lets us refuse those at the event.
 *
 * Invariants: the builder never recurses (an explicit stack of open collections, bounded by
 * STRATA_YTREE_MAX_DEPTH); every node allocated is in tree->all, so freeing never leaks, even
 * after an error halfway; mapping keys are scalars. This file must never interpret the meaning of
 * a key — that is topo_parse.c's job.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "topo/topo_internal.h"

void strata_topo_errorf(char *err, size_t err_len, const char *source, strata_topo_mark mark,
                        const char *fmt, ...) {
  if (err == NULL || err_len == 0) return;
  int prefix;
  if (mark.line > 0)
    prefix = snprintf(err, err_len, "%s:%d:%d: ", source, mark.line, mark.col);
  else
    prefix = snprintf(err, err_len, "%s: ", source);
  if (prefix < 0 || (size_t)prefix >= err_len) return;
  va_list args;
  va_start(args, fmt);
  vsnprintf(err + prefix, err_len - (size_t)prefix, fmt, args);
  va_end(args);
}

static strata_topo_mark mark_from_yaml(yaml_mark_t m) {
  strata_topo_mark mark = {(int)m.line + 1, (int)m.column + 1};
  return mark;
}

static strata_ynode *node_new(strata_ytree *tree, strata_ynode_kind kind, yaml_mark_t start) {
  if (tree->count == tree->capacity) {
    size_t capacity = tree->capacity ? tree->capacity * 2 : 64;
    strata_ynode **all = realloc(tree->all, capacity * sizeof *all);
    if (all == NULL) return NULL;
    tree->all = all;
    tree->capacity = capacity;
  }
  strata_ynode *node = calloc(1, sizeof *node);
  if (node == NULL) return NULL;
  node->kind = kind;
  node->mark = mark_from_yaml(start);
  tree->all[tree->count++] = node;
  return node;
}

static int node_append(strata_ynode *parent, strata_ynode *child) {
  if (parent->length == parent->capacity) {
    size_t capacity = parent->capacity ? parent->capacity * 2 : 8;
    strata_ynode **items = realloc(parent->items, capacity * sizeof *items);
    if (items == NULL) return STRATA_ERR_NO_MEMORY;
    parent->items = items;
    parent->capacity = capacity;
  }
  parent->items[parent->length++] = child;
  return STRATA_OK;
}

void strata_ytree_free(strata_ytree *tree) {
  if (tree == NULL) return;
  for (size_t i = 0; i < tree->count; i++) {
    free(tree->all[i]->text);
    free(tree->all[i]->items);
    free(tree->all[i]);
  }
  free(tree->all);
  memset(tree, 0, sizeof *tree);
}

typedef struct builder {
  strata_ytree *tree;
  const char *source;
  char *err;
  size_t err_len;
  strata_ynode *stack[STRATA_YTREE_MAX_DEPTH];
  int depth;
  int documents;
  const char *input;
  size_t input_len;
} builder;

static int fail_at(builder *b, yaml_mark_t m, const char *what) {
  strata_topo_errorf(b->err, b->err_len, b->source, mark_from_yaml(m), "%s", what);
  return STRATA_ERR_PARSE;
}

/* Attaches a finished node to the open collection (or makes it the root). A mapping's keys must be
 * scalars: an odd position in a mapping is a key. */
static int attach(builder *b, strata_ynode *node, yaml_mark_t m) {
  if (b->depth == 0) {
    b->tree->root = node;
    return STRATA_OK;
  }
  strata_ynode *parent = b->stack[b->depth - 1];
  if (parent->kind == STRATA_YNODE_MAPPING && parent->length % 2 == 0 &&
      node->kind != STRATA_YNODE_SCALAR)
    return fail_at(b, m, "expected a plain key (text), got a collection used as a key");
  return node_append(parent, node);
}

static int on_scalar(builder *b, const yaml_event_t *event) {
  strata_ynode *node = node_new(b->tree, STRATA_YNODE_SCALAR, event->start_mark);
  if (node == NULL) return STRATA_ERR_NO_MEMORY;
  size_t length = event->data.scalar.length;
  node->text = malloc(length + 1);
  if (node->text == NULL) return STRATA_ERR_NO_MEMORY;
  memcpy(node->text, event->data.scalar.value, length);
  node->text[length] = '\0';
  node->length = length;
  node->plain = event->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
  return attach(b, node, event->start_mark);
}

static int on_open(builder *b, const yaml_event_t *event, strata_ynode_kind kind) {
  if (b->depth == STRATA_YTREE_MAX_DEPTH)
    return fail_at(b, event->start_mark, "expected nesting at most 64 levels deep");
  strata_ynode *node = node_new(b->tree, kind, event->start_mark);
  if (node == NULL) return STRATA_ERR_NO_MEMORY;
  int status = attach(b, node, event->start_mark);
  if (status != STRATA_OK) return status;
  b->stack[b->depth++] = node;
  return STRATA_OK;
}

static int on_event(builder *b, const yaml_event_t *event) {
  switch (event->type) {
    case YAML_DOCUMENT_START_EVENT:
      if (++b->documents > 1)
        return fail_at(b, event->start_mark, "expected a single YAML document, got a second");
      return STRATA_OK;
    case YAML_ALIAS_EVENT:
      return fail_at(b, event->start_mark,
                     "expected a value, got an alias (anchors and aliases are not supported)");
    case YAML_SCALAR_EVENT:
      if (event->data.scalar.anchor != NULL) break;
      return on_scalar(b, event);
    case YAML_SEQUENCE_START_EVENT:
      if (event->data.sequence_start.anchor != NULL) break;
      return on_open(b, event, STRATA_YNODE_SEQUENCE);
    case YAML_MAPPING_START_EVENT:
      if (event->data.mapping_start.anchor != NULL) break;
      return on_open(b, event, STRATA_YNODE_MAPPING);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
      if (b->depth > 0) b->depth--;
      return STRATA_OK;
    default:
      return STRATA_OK;
  }
  return fail_at(b, event->start_mark,
                 "expected a value, got an anchor (anchors and aliases are not supported)");
}

static int syntax_error(builder *b, const yaml_parser_t *parser) {
  if (parser->error == YAML_MEMORY_ERROR) return STRATA_ERR_NO_MEMORY;
  const char *problem = parser->problem ? parser->problem : "unknown problem";
  yaml_mark_t mark = parser->problem_mark;
  /* libyaml's reader errors carry an offset but no line; the scanner's carry both. */
  strata_topo_mark at = mark_from_yaml(mark);
  if (parser->error == YAML_READER_ERROR) {
    /* The reader knows only a byte offset: count lines and columns up to it ourselves. */
    at.line = 1;
    at.col = 1;
    for (size_t i = 0; i < parser->problem_offset && i < b->input_len; i++) {
      if (b->input[i] == '\n') {
        at.line++;
        at.col = 1;
      } else {
        at.col++;
      }
    }
    strata_topo_errorf(b->err, b->err_len, b->source, at,
                       "expected UTF-8 text, got an invalid byte at offset %zu (%s)",
                       parser->problem_offset, problem);
    return STRATA_ERR_PARSE;
  }
  if (parser->context != NULL)
    strata_topo_errorf(b->err, b->err_len, b->source, at, "expected valid YAML: %s %s",
                       parser->context, problem);
  else
    strata_topo_errorf(b->err, b->err_len, b->source, at, "expected valid YAML: %s", problem);
  return STRATA_ERR_PARSE;
}

int strata_ytree_parse(strata_ytree *tree, const char *source, const char *yaml, size_t len,
                       char *err, size_t err_len) {
  memset(tree, 0, sizeof *tree);
  if (err != NULL && err_len > 0) err[0] = '\0';
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return STRATA_ERR_NO_MEMORY;
  yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
  builder b = {.tree = tree,
               .source = source,
               .err = err,
               .err_len = err_len,
               .input = yaml,
               .input_len = len};
  int status = STRATA_OK;
  for (;;) {
    yaml_event_t event;
    if (!yaml_parser_parse(&parser, &event)) {
      status = syntax_error(&b, &parser);
      break;
    }
    int done = event.type == YAML_STREAM_END_EVENT;
    status = on_event(&b, &event);
    yaml_event_delete(&event);
    if (status != STRATA_OK || done) break;
  }
  yaml_parser_delete(&parser);
  if (status != STRATA_OK) strata_ytree_free(tree);
  return status;
}
