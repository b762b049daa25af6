// SPDX-License-Identifier: Apache-2.0
/*
 * topo_internal.h — what the files of src/topo share and nobody else sees: a small YAML tree
 * (built from libyaml events, with 1-based positions), error formatting, and the preset table.
 */
#ifndef STRATA_TOPO_TOPO_INTERNAL_H
#define STRATA_TOPO_TOPO_INTERNAL_H

#include <stddef.h>

#include "topo/topo.h"

#define STRATA_YTREE_MAX_DEPTH 64

typedef enum strata_ynode_kind {
  STRATA_YNODE_SCALAR = 0,
  STRATA_YNODE_SEQUENCE,
  STRATA_YNODE_MAPPING
} strata_ynode_kind;

/* A node of a parsed YAML document. A mapping's items alternate key, value (items[2i] is a key,
 * always a scalar; items[2i+1] its value). Scalars are NUL-terminated; `length` excludes the NUL
 * and may be shorter than strlen would say if the text held an escaped NUL. */
typedef struct strata_ynode {
  strata_ynode_kind kind;
  char *text;    /* scalars only */
  size_t length; /* scalars: bytes; sequences: items; mappings: 2 x pairs */
  int plain;     /* scalar was written without quotes */
  struct strata_ynode **items;
  size_t capacity;
  strata_topo_mark mark;
} strata_ynode;

typedef struct strata_ytree {
  strata_ynode *root; /* NULL for an empty document */
  strata_ynode **all; /* every node, for freeing */
  size_t count, capacity;
} strata_ytree;

/* Parses `len` bytes of YAML into a tree. Aliases, anchors, several documents and nesting deeper
 * than STRATA_YTREE_MAX_DEPTH are errors. Returns STRATA_OK, STRATA_ERR_PARSE (err holds
 * "source:line:col: expected ...") or STRATA_ERR_NO_MEMORY. On failure the tree is empty. */
int strata_ytree_parse(strata_ytree *tree, const char *source, const char *yaml, size_t len,
                       char *err, size_t err_len);
void strata_ytree_free(strata_ytree *tree);

/* Writes "source:line:col: " (or "source: " when mark.line is 0) and the formatted rest. */
void strata_topo_errorf(char *err, size_t err_len, const char *source, strata_topo_mark mark,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Enum name tables: primary names first spelled as the format writes them, then aliases. */
typedef struct strata_topo_enum_entry {
  const char *name;
  int value;
  int alias; /* 1: accepted on input, never printed or listed */
} strata_topo_enum_entry;

extern const strata_topo_enum_entry strata_topo_gpu_table[];
extern const strata_topo_enum_entry strata_topo_intra_table[];
extern const strata_topo_enum_entry strata_topo_nic_kind_table[];
extern const strata_topo_enum_entry strata_topo_nic_role_table[];
extern const strata_topo_enum_entry strata_topo_ib_speed_table[];
extern const strata_topo_enum_entry strata_topo_fabric_table[];
extern const strata_topo_enum_entry strata_topo_provider_table[];
extern const strata_topo_enum_entry strata_topo_phys_table[];
extern const strata_topo_enum_entry strata_topo_optics_table[];
extern const strata_topo_enum_entry strata_topo_extension_table[];
extern const strata_topo_enum_entry strata_topo_overlay_table[];
extern const strata_topo_enum_entry strata_topo_transit_table[];

/* Case-insensitive, '-' == '_'. STRATA_OK or STRATA_ERR_INVALID_ARG. */
int strata_topo_enum_lookup(const strata_topo_enum_entry *table, const char *text, int *out);
const char *strata_topo_enum_name(const strata_topo_enum_entry *table, int value); /* "?" */
/* "a100, h100, ..." (primary names) into buf. */
void strata_topo_enum_list(const strata_topo_enum_entry *table, char *buf, size_t len);

/* Parses a topology from a tree (topo_parse.c). preset_depth guards template recursion. */
int strata_topo_from_tree(const strata_ytree *tree, const char *source, int preset_depth,
                          strata_topo **out, char *err, size_t err_len);
int strata_topo_load_string_depth(const char *source, const char *yaml, size_t len,
                                  int preset_depth, strata_topo **out, char *err, size_t err_len);

#endif
