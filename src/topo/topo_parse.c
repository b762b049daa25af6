// SPDX-License-Identifier: Apache-2.0
/*
 * topo_parse.c — a YAML tree (topo_yaml.c) to a strata_topo, with a position on every error.
 *
 * The format is documented in docs/topology.md. This file is its grammar: for every mapping the
 * list of keys it accepts (anything else is an error naming the keys expected), for every value
 * its type and range. Keys of one mapping are read in a fixed order, not in file order, so that
 * `templates:` may follow `sites:` and `gpu:` may follow `intra:`.
 *
 * Invariants: the first error stops the parse and is the one reported; a failed parse frees
 * everything it allocated; nothing here knows a speed, a latency or a reach (numbers the file
 * omits stay STRATA_TOPO_UNSET). Templates: a node group may name a template from the file's
 * `templates:` or a built-in node preset (dgx-h100 ...); a preset used as a template is parsed
 * once per load and cached. Presets may not reach further presets (depth guard), so a template
 * chain always ends.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/topo_internal.h"

#define MAX_NODE_COUNT 100000000LL /* nodes in one group entry (1e8) */
#define MAX_RACK_COUNT 1000000LL
#define MAX_GPUS_PER_NODE 4096
#define MAX_NIC_PORTS 1024
#define MAX_TEMPLATES 1024

typedef struct spec_state {
  strata_topo_node_spec spec;
  int gpu_given;
  int gpus_given;
  int intra_given;
} spec_state;

typedef struct template_entry {
  char name[STRATA_TOPO_NAME_MAX];
  spec_state state;
} template_entry;

typedef struct site_name {
  const char *name;
  int index;
} site_name;

typedef struct parser {
  const char *source;
  char *err;
  size_t err_len;
  int preset_depth;
  strata_topo *topo;
  int site_cap, building_cap, rack_cap, group_cap, link_cap;
  template_entry *templates;
  int template_count, template_cap;
  site_name *site_order; /* sorted by name, for resolving link ends */
} parser;

/* ---- errors and small readers ---- */

static int fail(parser *p, const strata_ynode *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(parser *p, const strata_ynode *at, const char *fmt, ...) {
  char message[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  strata_topo_mark mark = at ? at->mark : (strata_topo_mark){0, 0};
  strata_topo_errorf(p->err, p->err_len, p->source, mark, "%s", message);
  return STRATA_ERR_PARSE;
}

/* "a mapping", "a sequence", "nothing" or the scalar quoted, shortened and made printable. */
static const char *describe(const strata_ynode *node, char *buf, size_t len) {
  if (node->kind == STRATA_YNODE_MAPPING) return "a mapping";
  if (node->kind == STRATA_YNODE_SEQUENCE) return "a sequence";
  if (node->length == 0) return node->plain ? "nothing" : "''";
  size_t out = 0;
  buf[out++] = '\'';
  for (size_t i = 0; i < node->length && out + 5 < len; i++) {
    unsigned char c = (unsigned char)node->text[i];
    if (i == 40) {
      memcpy(buf + out, "...", 3);
      out += 3;
      break;
    }
    buf[out++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  buf[out++] = '\'';
  buf[out] = '\0';
  return buf;
}

static int expect_kind(parser *p, const strata_ynode *node, strata_ynode_kind kind,
                       const char *what) {
  if (node->kind == kind) return STRATA_OK;
  static const char *const kinds[] = {"text", "a sequence", "a mapping"};
  char buf[64];
  return fail(p, node, "expected %s (%s), got %s", kinds[kind], what,
              describe(node, buf, sizeof buf));
}

static const strata_ynode *map_get(const strata_ynode *map, const char *key) {
  if (map == NULL || map->kind != STRATA_YNODE_MAPPING) return NULL;
  for (size_t i = 0; i + 1 < map->length; i += 2)
    if (strcmp(map->items[i]->text, key) == 0) return map->items[i + 1];
  return NULL;
}

static int check_keys(parser *p, const strata_ynode *map, const char *const *allowed,
                      const char *what) {
  for (size_t i = 0; i + 1 < map->length; i += 2) {
    const strata_ynode *key = map->items[i];
    int known = 0;
    for (size_t k = 0; allowed[k] != NULL && !known; k++)
      known = strcmp(key->text, allowed[k]) == 0;
    if (!known) {
      char list[400] = "";
      size_t used = 0;
      for (size_t k = 0; allowed[k] != NULL; k++) {
        int n = snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "", allowed[k]);
        if (n < 0 || (size_t)n >= sizeof list - used) break;
        used += (size_t)n;
      }
      char buf[64];
      return fail(p, key, "expected one of %s (keys of %s), got %s", list, what,
                  describe(key, buf, sizeof buf));
    }
    for (size_t j = 0; j < i; j += 2)
      if (strcmp(map->items[j]->text, key->text) == 0)
        return fail(p, key, "expected each key once in %s, got a second '%s'", what, key->text);
  }
  return STRATA_OK;
}

static int scalar_text(parser *p, const strata_ynode *node, const char *what) {
  int status = expect_kind(p, node, STRATA_YNODE_SCALAR, what);
  if (status != STRATA_OK) return status;
  if (strlen(node->text) != node->length)
    return fail(p, node, "expected %s without NUL bytes", what);
  return STRATA_OK;
}

static int read_int(parser *p, const strata_ynode *node, long long min, long long max,
                    const char *what, long long *out) {
  int status = scalar_text(p, node, what);
  if (status != STRATA_OK) return status;
  char *end = NULL;
  errno = 0;
  long long value = strtoll(node->text, &end, 10);
  char buf[64];
  if (node->length == 0 || *end != '\0' || errno != 0 || value < min || value > max)
    return fail(p, node, "expected an integer from %lld to %lld (%s), got %s", min, max, what,
                describe(node, buf, sizeof buf));
  *out = value;
  return STRATA_OK;
}

static int read_int32(parser *p, const strata_ynode *node, int min, int max, const char *what,
                      int *out) {
  long long value = 0;
  int status = read_int(p, node, min, max, what, &value);
  if (status == STRATA_OK) *out = (int)value;
  return status;
}

static int parse_double(const char *text, double *out) {
  char *end = NULL;
  errno = 0;
  double value = strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !isfinite(value)) return -1;
  *out = value;
  return 0;
}

static int read_number(parser *p, const strata_ynode *node, double min, double max,
                       const char *what, double *out) {
  int status = scalar_text(p, node, what);
  if (status != STRATA_OK) return status;
  double value = 0;
  char buf[64];
  if (node->length == 0 || parse_double(node->text, &value) != 0 || value < min || value > max)
    return fail(p, node, "expected a number from %g to %g (%s), got %s", min, max, what,
                describe(node, buf, sizeof buf));
  *out = value;
  return STRATA_OK;
}

/* A rate, size or time the model divides by or scales with: 0 would be planned with as if it
 * were absent (or divide by zero), so it is refused rather than read. */
static int read_positive(parser *p, const strata_ynode *node, double max, const char *what,
                         double *out) {
  int status = scalar_text(p, node, what);
  if (status != STRATA_OK) return status;
  double value = 0;
  char buf[64];
  if (node->length == 0 || parse_double(node->text, &value) != 0 || !(value > 0) || value > max)
    return fail(p, node, "expected a number above 0 and at most %g (%s), got %s", max, what,
                describe(node, buf, sizeof buf));
  *out = value;
  return STRATA_OK;
}

/* A measured loss rate: a path that loses every packet carries nothing and is no link. */
static int read_loss(parser *p, const strata_ynode *node, const char *what, double *out) {
  int status = scalar_text(p, node, what);
  if (status != STRATA_OK) return status;
  double value = 0;
  char buf[64];
  if (node->length == 0 || parse_double(node->text, &value) != 0 || value < 0 || !(value < 100))
    return fail(p, node,
                "expected a percentage from 0 to below 100 (%s: a path losing every packet "
                "carries nothing), got %s",
                what, describe(node, buf, sizeof buf));
  *out = value;
  return STRATA_OK;
}

/* A ratio x:1 written as a number (3) or as text ("3:1"). */
static int read_ratio(parser *p, const strata_ynode *node, const char *what, double *out) {
  int status = scalar_text(p, node, what);
  if (status != STRATA_OK) return status;
  const char *colon = strchr(node->text, ':');
  double value = 0, left = 0, right = 0;
  int ok = 0;
  if (colon == NULL) {
    ok = parse_double(node->text, &value) == 0;
  } else {
    char head[64];
    size_t head_len = (size_t)(colon - node->text);
    if (head_len < sizeof head) {
      memcpy(head, node->text, head_len);
      head[head_len] = '\0';
      ok = parse_double(head, &left) == 0 && parse_double(colon + 1, &right) == 0 && right > 0;
      if (ok) value = left / right;
    }
  }
  char buf[64];
  if (!ok || !(value >= 1.0) || value > 1000.0)
    return fail(p, node, "expected a ratio from 1 to 1000 like 3 or \"3:1\" (%s), got %s", what,
                describe(node, buf, sizeof buf));
  *out = value;
  return STRATA_OK;
}

static int text_is(const char *text, const char *const *words) {
  for (size_t i = 0; words[i] != NULL; i++)
    if (strcasecmp(text, words[i]) == 0) return 1;
  return 0;
}

static int read_bool(parser *p, const strata_ynode *node, const char *what, int *out) {
  static const char *const yes[] = {"true", "yes", "on", NULL};
  static const char *const no[] = {"false", "no", "off", NULL};
  int status = scalar_text(p, node, what);
  if (status != STRATA_OK) return status;
  char buf[64];
  if (text_is(node->text, yes))
    *out = 1;
  else if (text_is(node->text, no))
    *out = 0;
  else
    return fail(p, node, "expected true or false (%s), got %s", what,
                describe(node, buf, sizeof buf));
  return STRATA_OK;
}

static int read_enum(parser *p, const strata_ynode *node, const strata_topo_enum_entry *table,
                     const char *what, int *out) {
  int status = scalar_text(p, node, what);
  if (status != STRATA_OK) return status;
  if (strata_topo_enum_lookup(table, node->text, out) == STRATA_OK) return STRATA_OK;
  char list[300], buf[64];
  strata_topo_enum_list(table, list, sizeof list);
  return fail(p, node, "expected one of %s (%s), got %s", list, what,
              describe(node, buf, sizeof buf));
}

static int read_text(parser *p, const strata_ynode *node, size_t cap, const char *what, char *out) {
  int status = scalar_text(p, node, what);
  if (status != STRATA_OK) return status;
  if (node->length + 1 > cap)
    return fail(p, node, "expected %s of at most %zu characters, got %zu", what, cap - 1,
                node->length);
  for (size_t i = 0; i < node->length; i++)
    if ((unsigned char)node->text[i] < 0x20)
      return fail(p, node, "expected %s without control characters", what);
  memcpy(out, node->text, node->length + 1);
  return STRATA_OK;
}

static int read_name(parser *p, const strata_ynode *node, const char *what, char *out) {
  int status = read_text(p, node, STRATA_TOPO_NAME_MAX, what, out);
  if (status == STRATA_OK && out[0] == '\0') return fail(p, node, "expected a non-empty %s", what);
  return status;
}

/* Optional-key readers: do nothing when the key is absent. */
#define OPTIONAL(call_with_node, map, key)              \
  do {                                                  \
    const strata_ynode *value_ = map_get((map), (key)); \
    if (value_ != NULL) {                               \
      const strata_ynode *node_ = value_;               \
      int status_ = call_with_node;                     \
      if (status_ != STRATA_OK) return status_;         \
    }                                                   \
  } while (0)

#define OPT_NUMBER(map, key, min, max, dst) \
  OPTIONAL(read_number(p, node_, min, max, key, dst), map, key)
#define OPT_POSITIVE(map, key, max, dst) OPTIONAL(read_positive(p, node_, max, key, dst), map, key)
#define OPT_INT(map, key, min, max, dst) \
  OPTIONAL(read_int32(p, node_, min, max, key, dst), map, key)
#define OPT_BOOL(map, key, dst) OPTIONAL(read_bool(p, node_, key, dst), map, key)
#define OPT_ENUM(map, key, table, dst) \
  OPTIONAL(read_enum(p, node_, table, key, (int *)(dst)), map, key)
#define OPT_NAME(map, key, dst) OPTIONAL(read_name(p, node_, key, dst), map, key)
#define OPT_TEXT(map, key, dst) OPTIONAL(read_text(p, node_, sizeof(dst), key, dst), map, key)

/* ---- growing the topology's arrays ---- */

static int grow(void **array, int *cap, int count, size_t elem) {
  if (count < *cap) return STRATA_OK;
  int new_cap = *cap ? *cap * 2 : 8;
  void *grown = realloc(*array, (size_t)new_cap * elem);
  if (grown == NULL) return STRATA_ERR_NO_MEMORY;
  memset((char *)grown + (size_t)*cap * elem, 0, (size_t)(new_cap - *cap) * elem);
  *array = grown;
  *cap = new_cap;
  return STRATA_OK;
}

#define GROW(p, field, cap, count) \
  grow((void **)&(p)->topo->field, &(p)->cap, (p)->topo->count, sizeof *(p)->topo->field)

/* ---- layer 1: the node ---- */

static const char *const intra_keys[] = {"kind", "nvlink", "nvswitch_domain", "pcie", "gbps", NULL};
static const char *const nic_keys[] = {"kind",           "role", "speed", "count", "gbps",
                                       "gpudirect_rdma", "pfc",  "ecn",   NULL};
static const char *const spec_keys[] = {"gpu", "gpus", "gpu_memory_gb", "intra", "nics", NULL};
static const char *const group_keys[] = {"name",          "count", "template", "gpu", "gpus",
                                         "gpu_memory_gb", "intra", "nics",     NULL};

static int parse_intra(parser *p, const strata_ynode *node, strata_topo_node_spec *spec) {
  strata_topo_node_spec catalog;
  memset(&catalog, 0, sizeof catalog);
  strata_topo_gpu_defaults(spec->gpu, &catalog);
  spec->intra_gbps = STRATA_TOPO_UNSET;
  spec->intra_defaulted = 0;
  if (node->kind == STRATA_YNODE_SCALAR) { /* shorthand: intra: nvlink | pcie | none */
    int kind = 0;
    int status = read_enum(p, node, strata_topo_intra_table, "intra kind", &kind);
    if (status != STRATA_OK) return status;
    spec->intra = (strata_intra_kind)kind;
    spec->nvlink = kind == STRATA_INTRA_NVLINK ? catalog.nvlink : STRATA_NVLINK_NONE;
    spec->nvswitch_domain_gpus = kind == STRATA_INTRA_NVLINK ? catalog.nvswitch_domain_gpus : 0;
    spec->pcie = catalog.pcie;
    if (kind == STRATA_INTRA_NVLINK && spec->nvlink == STRATA_NVLINK_NONE)
      return fail(p, node,
                  "expected intra: {kind: nvlink, nvlink: <3..6>} (gpu %s has no NVLink "
                  "in the catalog)",
                  strata_gpu_model_name(spec->gpu));
    return STRATA_OK;
  }
  int status = expect_kind(p, node, STRATA_YNODE_MAPPING, "the fabric inside a node");
  if (status == STRATA_OK) status = check_keys(p, node, intra_keys, "intra");
  if (status != STRATA_OK) return status;
  const strata_ynode *kind_node = map_get(node, "kind");
  int kind = -1;
  if (kind_node != NULL) {
    status = read_enum(p, kind_node, strata_topo_intra_table, "intra kind", &kind);
    if (status != STRATA_OK) return status;
  } else if (map_get(node, "nvlink") || map_get(node, "nvswitch_domain")) {
    kind = STRATA_INTRA_NVLINK;
  } else if (map_get(node, "pcie")) {
    kind = STRATA_INTRA_PCIE;
  } else {
    return fail(p, node, "expected kind: nvlink, pcie or none in intra");
  }
  spec->intra = (strata_intra_kind)kind;
  if (kind != STRATA_INTRA_NVLINK) {
    const strata_ynode *bad =
        map_get(node, "nvlink") ? map_get(node, "nvlink") : map_get(node, "nvswitch_domain");
    if (bad != NULL)
      return fail(p, bad, "expected no nvlink or nvswitch_domain with intra kind %s",
                  strata_intra_kind_name(spec->intra));
  }
  spec->nvlink = kind == STRATA_INTRA_NVLINK ? catalog.nvlink : STRATA_NVLINK_NONE;
  spec->nvswitch_domain_gpus = kind == STRATA_INTRA_NVLINK ? catalog.nvswitch_domain_gpus : 0;
  spec->pcie = catalog.pcie;
  int gen = spec->nvlink;
  OPT_INT(node, "nvlink", 3, 6, &gen);
  spec->nvlink = (strata_nvlink_gen)gen;
  if (kind == STRATA_INTRA_NVLINK && spec->nvlink == STRATA_NVLINK_NONE)
    return fail(p, node, "expected nvlink: <3..6> (gpu %s has no NVLink in the catalog)",
                strata_gpu_model_name(spec->gpu));
  OPT_INT(node, "nvswitch_domain", 0, 100000, &spec->nvswitch_domain_gpus);
  int pcie = spec->pcie;
  OPT_INT(node, "pcie", 3, 6, &pcie);
  spec->pcie = (strata_pcie_gen)pcie;
  OPT_POSITIVE(node, "gbps", 1e9, &spec->intra_gbps);
  return STRATA_OK;
}

static int parse_nic(parser *p, const strata_ynode *node, strata_topo_nic *nic) {
  int status = expect_kind(p, node, STRATA_YNODE_MAPPING, "a NIC");
  if (status == STRATA_OK) status = check_keys(p, node, nic_keys, "a NIC");
  if (status != STRATA_OK) return status;
  memset(nic, 0, sizeof *nic);
  nic->mark = node->mark;
  nic->count = 1;
  nic->gbps = STRATA_TOPO_UNSET;
  nic->gpudirect_rdma = nic->pfc = nic->ecn = STRATA_TOPO_UNKNOWN;
  const strata_ynode *kind = map_get(node, "kind");
  if (kind == NULL) return fail(p, node, "expected kind: infiniband, roce or ethernet in a NIC");
  int value = 0;
  status = read_enum(p, kind, strata_topo_nic_kind_table, "NIC kind", &value);
  if (status != STRATA_OK) return status;
  nic->kind = (strata_nic_kind)value;
  OPT_ENUM(node, "role", strata_topo_nic_role_table, &nic->role);
  OPT_ENUM(node, "speed", strata_topo_ib_speed_table, &nic->ib_speed);
  OPT_INT(node, "count", 1, MAX_NIC_PORTS, &nic->count);
  OPT_POSITIVE(node, "gbps", 1e7, &nic->gbps);
  OPT_BOOL(node, "gpudirect_rdma", &nic->gpudirect_rdma);
  OPT_BOOL(node, "pfc", &nic->pfc);
  OPT_BOOL(node, "ecn", &nic->ecn);
  if (nic->kind != STRATA_NIC_INFINIBAND && map_get(node, "speed"))
    return fail(p, map_get(node, "speed"),
                "expected speed (hdr, ndr, xdr) only on an infiniband "
                "NIC; give gbps for %s",
                strata_nic_kind_name(nic->kind));
  if (nic->kind == STRATA_NIC_INFINIBAND && (map_get(node, "pfc") || map_get(node, "ecn")))
    return fail(p, map_get(node, "pfc") ? map_get(node, "pfc") : map_get(node, "ecn"),
                "expected pfc and ecn only on a roce or ethernet NIC (infiniband is lossless "
                "by credit)");
  return STRATA_OK;
}

static int parse_nics(parser *p, const strata_ynode *node, strata_topo_node_spec *spec) {
  spec->nic_count = 0;
  if (node->kind == STRATA_YNODE_MAPPING) {
    spec->nic_count = 1;
    return parse_nic(p, node, &spec->nics[0]);
  }
  int status = expect_kind(p, node, STRATA_YNODE_SEQUENCE, "a list of NICs");
  if (status != STRATA_OK) return status;
  if (node->length > STRATA_TOPO_MAX_NICS)
    return fail(p, node->items[STRATA_TOPO_MAX_NICS], "expected at most %d NIC entries per node",
                STRATA_TOPO_MAX_NICS);
  for (size_t i = 0; i < node->length; i++) {
    status = parse_nic(p, node->items[i], &spec->nics[i]);
    if (status != STRATA_OK) return status;
    spec->nic_count++;
  }
  return STRATA_OK;
}

/* The node keys common to templates and groups, read in dependency order. */
static int parse_spec_keys(parser *p, const strata_ynode *map, spec_state *s) {
  const strata_ynode *gpu = map_get(map, "gpu");
  if (gpu != NULL) {
    int value = 0;
    int status = read_enum(p, gpu, strata_topo_gpu_table, "gpu", &value);
    if (status != STRATA_OK) return status;
    s->spec.gpu = (strata_gpu_model)value;
    s->gpu_given = 1;
  }
  const strata_ynode *gpus = map_get(map, "gpus");
  if (gpus != NULL) {
    int status = read_int32(p, gpus, 0, MAX_GPUS_PER_NODE, "gpus per node", &s->spec.gpus);
    if (status != STRATA_OK) return status;
    s->gpus_given = 1;
  }
  OPT_POSITIVE(map, "gpu_memory_gb", 1e6, &s->spec.gpu_memory_gb);
  const strata_ynode *intra = map_get(map, "intra");
  if (intra != NULL) {
    int status = parse_intra(p, intra, &s->spec);
    if (status != STRATA_OK) return status;
    s->intra_given = 1;
  }
  OPTIONAL(parse_nics(p, node_, &s->spec), map, "nics");
  return STRATA_OK;
}

static void spec_state_init(spec_state *s) {
  memset(s, 0, sizeof *s);
  s->spec.gpu_memory_gb = STRATA_TOPO_UNSET;
  s->spec.intra_gbps = STRATA_TOPO_UNSET;
}

static int finish_spec(parser *p, const strata_ynode *at, spec_state *s, const char *what) {
  char list[300];
  if (!s->gpu_given) {
    strata_topo_enum_list(strata_topo_gpu_table, list, sizeof list);
    return fail(p, at, "expected gpu: (one of %s) or template: in %s", list, what);
  }
  if (!s->gpus_given) {
    if (s->spec.gpu != STRATA_GPU_NONE)
      return fail(p, at, "expected gpus: (GPUs per node) in %s", what);
    s->spec.gpus = 0;
  }
  if (!s->intra_given) {
    strata_topo_gpu_defaults(s->spec.gpu, &s->spec);
    s->spec.intra_gbps = STRATA_TOPO_UNSET;
    s->spec.intra_defaulted = 1;
  }
  return STRATA_OK;
}

static int parse_templates(parser *p, const strata_ynode *node) {
  int status = expect_kind(p, node, STRATA_YNODE_MAPPING, "templates: name -> node");
  if (status != STRATA_OK) return status;
  for (size_t i = 0; i + 1 < node->length; i += 2) {
    const strata_ynode *key = node->items[i], *value = node->items[i + 1];
    template_entry entry;
    memset(&entry, 0, sizeof entry);
    status = read_name(p, key, "template name", entry.name);
    for (int t = 0; status == STRATA_OK && t < p->template_count; t++)
      if (strcmp(p->templates[t].name, entry.name) == 0)
        status = fail(p, key, "expected each template name once, got a second '%s'", entry.name);
    if (status == STRATA_OK && p->template_count >= MAX_TEMPLATES)
      status = fail(p, key, "expected at most %d templates", MAX_TEMPLATES);
    if (status == STRATA_OK)
      status = expect_kind(p, value, STRATA_YNODE_MAPPING, "a node template");
    if (status == STRATA_OK) status = check_keys(p, value, spec_keys, "a node template");
    if (status != STRATA_OK) return status;
    spec_state_init(&entry.state);
    status = parse_spec_keys(p, value, &entry.state);
    if (status == STRATA_OK) status = finish_spec(p, value, &entry.state, "a node template");
    if (status == STRATA_OK)
      status = grow((void **)&p->templates, &p->template_cap, p->template_count, sizeof entry);
    if (status != STRATA_OK) return status;
    p->templates[p->template_count++] = entry;
  }
  return STRATA_OK;
}

/* A built-in node preset used as a template: parsed once, then cached beside the file's own. */
static int template_from_preset(parser *p, const strata_ynode *at, const char *name,
                                const template_entry **out) {
  if (p->preset_depth >= 2 || strata_topo_preset_yaml(name) == NULL) return STRATA_ERR_NOT_FOUND;
  const char *yaml = strata_topo_preset_yaml(name);
  strata_topo *preset = NULL;
  char inner[256];
  int status = strata_topo_load_string_depth(name, yaml, strlen(yaml), p->preset_depth + 1, &preset,
                                             inner, sizeof inner);
  if (status != STRATA_OK) return fail(p, at, "expected a usable preset '%s': %s", name, inner);
  if (preset->group_count != 1) {
    strata_topo_free(preset);
    return fail(p, at, "expected a node preset (one kind of node) as template, got '%s'", name);
  }
  template_entry entry;
  memset(&entry, 0, sizeof entry);
  snprintf(entry.name, sizeof entry.name, "%s", name);
  entry.state.spec = preset->groups[0].spec;
  entry.state.gpu_given = entry.state.gpus_given = 1;
  entry.state.intra_given = !preset->groups[0].spec.intra_defaulted;
  strata_topo_free(preset);
  status = grow((void **)&p->templates, &p->template_cap, p->template_count, sizeof entry);
  if (status != STRATA_OK) return status;
  p->templates[p->template_count] = entry;
  *out = &p->templates[p->template_count++];
  return STRATA_OK;
}

static int find_template(parser *p, const strata_ynode *node, const template_entry **out) {
  char name[STRATA_TOPO_NAME_MAX];
  int status = read_name(p, node, "template name", name);
  if (status != STRATA_OK) return status;
  for (int t = 0; t < p->template_count; t++)
    if (strcmp(p->templates[t].name, name) == 0) {
      *out = &p->templates[t];
      return STRATA_OK;
    }
  status = template_from_preset(p, node, name, out);
  if (status != STRATA_ERR_NOT_FOUND) return status;
  char list[600] = "";
  size_t used = 0;
  for (int t = 0; t < p->template_count; t++) {
    int n = snprintf(list + used, sizeof list - used, "%s, ", p->templates[t].name);
    if (n < 0 || (size_t)n >= sizeof list - used) break;
    used += (size_t)n;
  }
  char buf[64];
  return fail(p, node,
              "expected a template from templates: %sor a node preset (dgx-a100, "
              "dgx-h100, hgx-b200, gb200-nvl72), got %s",
              list, describe(node, buf, sizeof buf));
}

static int parse_group(parser *p, const strata_ynode *node, int site, int building, int rack,
                       long long multiplier) {
  int status = expect_kind(p, node, STRATA_YNODE_MAPPING, "a node group");
  if (status == STRATA_OK) status = check_keys(p, node, group_keys, "a node group");
  if (status == STRATA_OK) status = GROW(p, groups, group_cap, group_count);
  if (status != STRATA_OK) return status;
  strata_topo_node_group group;
  memset(&group, 0, sizeof group);
  group.site = site;
  group.building = building;
  group.rack = rack;
  group.mark = node->mark;
  OPT_NAME(node, "name", group.name);
  long long count = 1;
  const strata_ynode *count_node = map_get(node, "count");
  if (count_node == NULL) return fail(p, node, "expected count: (nodes in this group)");
  status = read_int(p, count_node, 1, MAX_NODE_COUNT, "count of nodes", &count);
  if (status != STRATA_OK) return status;
  group.count = count * multiplier;
  spec_state state;
  spec_state_init(&state);
  const strata_ynode *template_node = map_get(node, "template");
  if (template_node != NULL) {
    const template_entry *entry = NULL;
    status = find_template(p, template_node, &entry);
    if (status != STRATA_OK) return status;
    state = entry->state;
    snprintf(group.template_name, sizeof group.template_name, "%s", entry->name);
  }
  status = parse_spec_keys(p, node, &state);
  if (status == STRATA_OK) status = finish_spec(p, node, &state, "a node group");
  if (status != STRATA_OK) return status;
  group.spec = state.spec;
  p->topo->groups[p->topo->group_count++] = group;
  return STRATA_OK;
}

/* nodes: one group (a mapping) or a list of groups. */
static int parse_groups(parser *p, const strata_ynode *node, int site, int building, int rack,
                        long long multiplier) {
  if (node->kind == STRATA_YNODE_MAPPING)
    return parse_group(p, node, site, building, rack, multiplier);
  int status = expect_kind(p, node, STRATA_YNODE_SEQUENCE, "a list of node groups");
  for (size_t i = 0; status == STRATA_OK && i < node->length; i++)
    status = parse_group(p, node->items[i], site, building, rack, multiplier);
  return status;
}

/* ---- layer 2 and the site ---- */

static const char *const fabric_keys[] = {
    "kind", "speed", "link_gbps",        "oversubscription", "sharp",
    "pfc",  "ecn",   "switch_buffer_mb", "rail_optimized",   NULL};
static const char *const rack_keys[] = {"name", "count", "nodes", NULL};
static const char *const building_keys[] = {"name", "racks", "nodes", NULL};
static const char *const location_keys[] = {"lat", "lon", NULL};
static const char *const site_keys[] = {"name",   "region",    "campus", "provider", "location",
                                        "fabric", "buildings", "racks",  "nodes",    NULL};

static int parse_fabric(parser *p, const strata_ynode *node, strata_topo_fabric *fabric) {
  fabric->mark = node->mark;
  if (node->kind == STRATA_YNODE_SCALAR)
    return read_enum(p, node, strata_topo_fabric_table, "fabric kind", (int *)&fabric->kind);
  int status = expect_kind(p, node, STRATA_YNODE_MAPPING, "the cluster fabric");
  if (status == STRATA_OK) status = check_keys(p, node, fabric_keys, "fabric");
  if (status != STRATA_OK) return status;
  const strata_ynode *kind = map_get(node, "kind");
  if (kind == NULL)
    return fail(p, node, "expected kind: infiniband, roce, ethernet or none in fabric");
  status = read_enum(p, kind, strata_topo_fabric_table, "fabric kind", (int *)&fabric->kind);
  if (status != STRATA_OK) return status;
  OPT_ENUM(node, "speed", strata_topo_ib_speed_table, &fabric->ib_speed);
  OPT_POSITIVE(node, "link_gbps", 1e7, &fabric->link_gbps);
  OPTIONAL(read_ratio(p, node_, "oversubscription", &fabric->oversubscription), node,
           "oversubscription");
  OPT_BOOL(node, "sharp", &fabric->sharp);
  OPT_BOOL(node, "pfc", &fabric->pfc);
  OPT_BOOL(node, "ecn", &fabric->ecn);
  OPT_POSITIVE(node, "switch_buffer_mb", 1e6, &fabric->switch_buffer_mb);
  OPT_BOOL(node, "rail_optimized", &fabric->rail_optimized);
  if (fabric->kind != STRATA_FABRIC_INFINIBAND && map_get(node, "speed"))
    return fail(p, map_get(node, "speed"),
                "expected speed (hdr, ndr, xdr) only in an infiniband "
                "fabric; give link_gbps for %s",
                strata_fabric_kind_name(fabric->kind));
  if (fabric->kind == STRATA_FABRIC_INFINIBAND && (map_get(node, "pfc") || map_get(node, "ecn")))
    return fail(p, map_get(node, "pfc") ? map_get(node, "pfc") : map_get(node, "ecn"),
                "expected pfc and ecn only in a roce or ethernet fabric");
  return STRATA_OK;
}

static int parse_racks(parser *p, const strata_ynode *node, int site, int building) {
  int status = expect_kind(p, node, STRATA_YNODE_SEQUENCE, "a list of racks");
  for (size_t i = 0; status == STRATA_OK && i < node->length; i++) {
    const strata_ynode *item = node->items[i];
    status = expect_kind(p, item, STRATA_YNODE_MAPPING, "a rack");
    if (status == STRATA_OK) status = check_keys(p, item, rack_keys, "a rack");
    if (status == STRATA_OK) status = GROW(p, racks, rack_cap, rack_count);
    if (status != STRATA_OK) return status;
    int index = p->topo->rack_count++;
    strata_topo_rack *rack = &p->topo->racks[index];
    rack->site = site;
    rack->building = building;
    rack->mark = item->mark;
    rack->count = 1;
    const strata_ynode *name = map_get(item, "name");
    if (name == NULL) return fail(p, item, "expected name: in a rack");
    status = read_name(p, name, "rack name", rack->name);
    if (status != STRATA_OK) return status;
    long long count = 1;
    OPTIONAL(read_int(p, node_, 1, MAX_RACK_COUNT, "count of racks", &count), item, "count");
    rack->count = count;
    OPTIONAL(parse_groups(p, node_, site, building, index, count), item, "nodes");
  }
  return status;
}

static int parse_buildings(parser *p, const strata_ynode *node, int site) {
  int status = expect_kind(p, node, STRATA_YNODE_SEQUENCE, "a list of buildings");
  for (size_t i = 0; status == STRATA_OK && i < node->length; i++) {
    const strata_ynode *item = node->items[i];
    status = expect_kind(p, item, STRATA_YNODE_MAPPING, "a building");
    if (status == STRATA_OK) status = check_keys(p, item, building_keys, "a building");
    if (status == STRATA_OK) status = GROW(p, buildings, building_cap, building_count);
    if (status != STRATA_OK) return status;
    int index = p->topo->building_count++;
    strata_topo_building *building = &p->topo->buildings[index];
    building->site = site;
    building->mark = item->mark;
    const strata_ynode *name = map_get(item, "name");
    if (name == NULL) return fail(p, item, "expected name: in a building");
    status = read_name(p, name, "building name", building->name);
    if (status != STRATA_OK) return status;
    OPTIONAL(parse_racks(p, node_, site, index), item, "racks");
    OPTIONAL(parse_groups(p, node_, site, index, -1, 1), item, "nodes");
  }
  return status;
}

static int parse_location(parser *p, const strata_ynode *node, strata_topo_site *site) {
  int status = expect_kind(p, node, STRATA_YNODE_MAPPING, "a location {lat, lon}");
  if (status == STRATA_OK) status = check_keys(p, node, location_keys, "location");
  if (status != STRATA_OK) return status;
  const strata_ynode *lat = map_get(node, "lat"), *lon = map_get(node, "lon");
  if (lat == NULL || lon == NULL) return fail(p, node, "expected both lat: and lon: in location");
  status = read_number(p, lat, -90, 90, "latitude in degrees", &site->lat_deg);
  if (status == STRATA_OK)
    status = read_number(p, lon, -180, 180, "longitude in degrees", &site->lon_deg);
  site->has_location = status == STRATA_OK;
  return status;
}

static void fabric_init(strata_topo_fabric *fabric) {
  memset(fabric, 0, sizeof *fabric);
  fabric->link_gbps = fabric->oversubscription = fabric->switch_buffer_mb = STRATA_TOPO_UNSET;
  fabric->sharp = fabric->pfc = fabric->ecn = fabric->rail_optimized = STRATA_TOPO_UNKNOWN;
}

static int parse_site(parser *p, const strata_ynode *node) {
  int status = expect_kind(p, node, STRATA_YNODE_MAPPING, "a site");
  if (status == STRATA_OK) status = check_keys(p, node, site_keys, "a site");
  if (status == STRATA_OK) status = GROW(p, sites, site_cap, site_count);
  if (status != STRATA_OK) return status;
  int index = p->topo->site_count++;
  strata_topo_site *site = &p->topo->sites[index]; /* stable: sites only grow between sites */
  site->mark = node->mark;
  site->group_begin = p->topo->group_count;
  fabric_init(&site->fabric);
  site->fabric.mark = node->mark;
  const strata_ynode *name = map_get(node, "name");
  if (name == NULL) return fail(p, node, "expected name: in a site");
  status = read_name(p, name, "site name", site->name);
  if (status != STRATA_OK) return status;
  OPT_TEXT(node, "region", site->region);
  OPT_NAME(node, "campus", site->campus);
  OPT_ENUM(node, "provider", strata_topo_provider_table, &site->provider);
  OPTIONAL(parse_location(p, node_, site), node, "location");
  OPTIONAL(parse_fabric(p, node_, &site->fabric), node, "fabric");
  OPTIONAL(parse_buildings(p, node_, index), node, "buildings");
  OPTIONAL(parse_racks(p, node_, index, -1), node, "racks");
  OPTIONAL(parse_groups(p, node_, index, -1, -1, 1), node, "nodes");
  p->topo->sites[index].group_count = p->topo->group_count - p->topo->sites[index].group_begin;
  return STRATA_OK;
}

/* ---- layer 3: links ---- */

static const char *const link_keys[] = {"name",      "between", "physical",
                                        "extension", "overlay", NULL};
static const char *const physical_keys[] = {"kind",          "km",          "optics",
                                            "capacity_gbps", "wavelengths", NULL};
static const char *const extension_keys[] = {"kind", "gbps", "oversubscription", "pfc", NULL};
static const char *const overlay_keys[] = {
    "kind",   "transit",        "site_to_site", "site_to_site_feature",
    "rtt_ms", "bandwidth_gbps", "loss_pct",     "mtu_bytes",
    NULL};

static int section_kind(parser *p, const strata_ynode *node, const char *const *keys,
                        const char *what, const strata_topo_enum_entry *table, int required,
                        int *kind) {
  if (node->kind == STRATA_YNODE_SCALAR) return read_enum(p, node, table, what, kind);
  int status = expect_kind(p, node, STRATA_YNODE_MAPPING, what);
  if (status == STRATA_OK) status = check_keys(p, node, keys, what);
  if (status != STRATA_OK) return status;
  const strata_ynode *kind_node = map_get(node, "kind");
  if (kind_node == NULL) {
    if (!required) return STRATA_OK;
    char list[300];
    strata_topo_enum_list(table, list, sizeof list);
    return fail(p, node, "expected kind: (one of %s) in %s", list, what);
  }
  return read_enum(p, kind_node, table, what, kind);
}

static int parse_physical(parser *p, const strata_ynode *node, strata_topo_physical *phys) {
  phys->mark = node->mark;
  int kind = 0;
  int status =
      section_kind(p, node, physical_keys, "physical link", strata_topo_phys_table, 0, &kind);
  if (status != STRATA_OK || node->kind == STRATA_YNODE_SCALAR) {
    phys->kind = (strata_phys_kind)kind;
    return status;
  }
  phys->kind = (strata_phys_kind)kind;
  OPT_NUMBER(node, "km", 0, 40075, &phys->km);
  OPT_ENUM(node, "optics", strata_topo_optics_table, &phys->optics);
  OPT_POSITIVE(node, "capacity_gbps", 1e9, &phys->capacity_gbps);
  OPT_INT(node, "wavelengths", 1, 10000, &phys->wavelengths);
  return STRATA_OK;
}

static int parse_extension(parser *p, const strata_ynode *node, strata_topo_extension *ext) {
  ext->mark = node->mark;
  int kind = 0;
  int status = section_kind(p, node, extension_keys, "fabric extension",
                            strata_topo_extension_table, 1, &kind);
  ext->kind = (strata_extension_kind)kind;
  if (status != STRATA_OK || node->kind == STRATA_YNODE_SCALAR) return status;
  OPT_POSITIVE(node, "gbps", 1e9, &ext->gbps);
  OPTIONAL(read_ratio(p, node_, "oversubscription", &ext->oversubscription), node,
           "oversubscription");
  OPT_BOOL(node, "pfc", &ext->pfc);
  if (ext->pfc != STRATA_TOPO_UNKNOWN && ext->kind != STRATA_EXT_ROCE_AGGREGATION)
    return fail(p, map_get(node, "pfc"),
                "expected pfc only on a roce_aggregation extension (lossless RoCE across the "
                "link)");
  return STRATA_OK;
}

/* site_to_site: true | false | "ExpressRoute Global Reach" (a feature name means true). */
static int parse_site_to_site(parser *p, const strata_ynode *node, strata_topo_overlay *overlay) {
  int status = scalar_text(p, node, "site_to_site");
  if (status != STRATA_OK) return status;
  static const char *const words[] = {"true", "yes", "on", "false", "no", "off", NULL};
  if (text_is(node->text, words)) return read_bool(p, node, "site_to_site", &overlay->site_to_site);
  if (strcasecmp(node->text, "none") == 0) {
    overlay->site_to_site = 0;
    return STRATA_OK;
  }
  status = read_text(p, node, sizeof overlay->site_to_site_feature, "site_to_site feature",
                     overlay->site_to_site_feature);
  if (status == STRATA_OK && node->length == 0)
    return fail(p, node, "expected true, false or a feature name (site_to_site), got nothing");
  overlay->site_to_site = 1;
  return status;
}

static int parse_overlay(parser *p, const strata_ynode *node, strata_topo_overlay *overlay) {
  overlay->mark = node->mark;
  int kind = 0;
  int status = section_kind(p, node, overlay_keys, "overlay", strata_topo_overlay_table, 0, &kind);
  overlay->kind = (strata_overlay_kind)kind;
  if (status != STRATA_OK || node->kind == STRATA_YNODE_SCALAR) return status;
  OPT_ENUM(node, "transit", strata_topo_transit_table, &overlay->transit);
  OPTIONAL(parse_site_to_site(p, node_, overlay), node, "site_to_site");
  OPT_TEXT(node, "site_to_site_feature", overlay->site_to_site_feature);
  if (map_get(node, "site_to_site_feature") && overlay->site_to_site == STRATA_TOPO_UNKNOWN)
    overlay->site_to_site = overlay->site_to_site_feature[0] != '\0';
  OPT_POSITIVE(node, "rtt_ms", 1e5, &overlay->rtt_ms);
  OPT_POSITIVE(node, "bandwidth_gbps", 1e9, &overlay->bandwidth_gbps);
  OPTIONAL(read_loss(p, node_, "loss_pct", &overlay->loss_pct), node, "loss_pct");
  OPT_NUMBER(node, "mtu_bytes", 68, 1e6, &overlay->mtu_bytes);
  return STRATA_OK;
}

static int site_order_compare(const void *a, const void *b) {
  return strcmp(((const site_name *)a)->name, ((const site_name *)b)->name);
}

static int sort_sites(parser *p) {
  int count = p->topo->site_count;
  p->site_order = malloc((size_t)count * sizeof *p->site_order);
  if (p->site_order == NULL) return STRATA_ERR_NO_MEMORY;
  for (int s = 0; s < count; s++) {
    p->site_order[s].name = p->topo->sites[s].name;
    p->site_order[s].index = s;
  }
  qsort(p->site_order, (size_t)count, sizeof *p->site_order, site_order_compare);
  return STRATA_OK;
}

static int find_site(const parser *p, const char *name) {
  site_name key = {name, -1};
  const site_name *found = bsearch(&key, p->site_order, (size_t)p->topo->site_count,
                                   sizeof *p->site_order, site_order_compare);
  return found ? found->index : -1;
}

static int resolve_site(parser *p, const strata_ynode *node, int *out) {
  char name[STRATA_TOPO_NAME_MAX];
  int status = read_name(p, node, "site name", name);
  if (status != STRATA_OK) return status;
  *out = find_site(p, name);
  if (*out >= 0) return STRATA_OK;
  char list[400] = "";
  size_t used = 0;
  for (int s = 0; s < p->topo->site_count; s++) {
    int n =
        snprintf(list + used, sizeof list - used, "%s%s", s ? ", " : "", p->topo->sites[s].name);
    if (n < 0 || (size_t)n >= sizeof list - used) break;
    used += (size_t)n;
  }
  return fail(p, node, "expected a site defined under sites: (%s), got '%s'", list, name);
}

static void link_init(strata_topo_link *link, const strata_ynode *node) {
  memset(link, 0, sizeof *link);
  link->mark = node->mark;
  link->physical.km = link->physical.capacity_gbps = STRATA_TOPO_UNSET;
  link->extension.gbps = link->extension.oversubscription = STRATA_TOPO_UNSET;
  link->extension.pfc = STRATA_TOPO_UNKNOWN;
  link->overlay.site_to_site = STRATA_TOPO_UNKNOWN;
  link->overlay.rtt_ms = link->overlay.bandwidth_gbps = STRATA_TOPO_UNSET;
  link->overlay.loss_pct = link->overlay.mtu_bytes = STRATA_TOPO_UNSET;
}

static int parse_link(parser *p, const strata_ynode *node) {
  int status = expect_kind(p, node, STRATA_YNODE_MAPPING, "a link");
  if (status == STRATA_OK) status = check_keys(p, node, link_keys, "a link");
  if (status == STRATA_OK) status = GROW(p, links, link_cap, link_count);
  if (status != STRATA_OK) return status;
  strata_topo_link *link = &p->topo->links[p->topo->link_count];
  link_init(link, node);
  const strata_ynode *between = map_get(node, "between");
  if (between == NULL) return fail(p, node, "expected between: [site, site] in a link");
  status = expect_kind(p, between, STRATA_YNODE_SEQUENCE, "between: [site, site]");
  if (status != STRATA_OK) return status;
  if (between->length != 2)
    return fail(p, between, "expected exactly 2 sites in between:, got %zu", between->length);
  status = resolve_site(p, between->items[0], &link->site_a);
  if (status == STRATA_OK) status = resolve_site(p, between->items[1], &link->site_b);
  if (status != STRATA_OK) return status;
  if (link->site_a == link->site_b)
    return fail(p, between->items[1], "expected two different sites in between:, got '%s' twice",
                p->topo->sites[link->site_a].name);
  snprintf(link->name, sizeof link->name, "%.30s--%.30s", p->topo->sites[link->site_a].name,
           p->topo->sites[link->site_b].name);
  OPT_NAME(node, "name", link->name);
  OPTIONAL(parse_physical(p, node_, &link->physical), node, "physical");
  OPTIONAL(parse_extension(p, node_, &link->extension), node, "extension");
  OPTIONAL(parse_overlay(p, node_, &link->overlay), node, "overlay");
  p->topo->link_count++;
  return STRATA_OK;
}

/* ---- the document ---- */

static const char *const top_keys[] = {"name", "description", "templates", "sites", "links", NULL};

static int parse_document(parser *p, const strata_ynode *root) {
  if (root == NULL) {
    strata_topo_mark start = {1, 1};
    strata_topo_errorf(p->err, p->err_len, p->source, start,
                       "expected a topology (a mapping with sites:), got an empty document");
    return STRATA_ERR_PARSE;
  }
  int status = expect_kind(p, root, STRATA_YNODE_MAPPING, "a topology with sites:");
  if (status == STRATA_OK) status = check_keys(p, root, top_keys, "a topology");
  if (status != STRATA_OK) return status;
  OPT_NAME(root, "name", p->topo->name);
  OPT_TEXT(root, "description", p->topo->description);
  OPTIONAL(parse_templates(p, node_), root, "templates");
  const strata_ynode *sites = map_get(root, "sites");
  if (sites == NULL) return fail(p, root, "expected sites: (a list of sites) in a topology");
  status = expect_kind(p, sites, STRATA_YNODE_SEQUENCE, "a list of sites");
  if (status == STRATA_OK && sites->length == 0)
    return fail(p, sites, "expected at least one site in sites:");
  for (size_t i = 0; status == STRATA_OK && i < sites->length; i++)
    status = parse_site(p, sites->items[i]);
  if (status != STRATA_OK) return status;
  const strata_ynode *links = map_get(root, "links");
  if (links != NULL) {
    status = sort_sites(p);
    if (status != STRATA_OK) return status;
    status = expect_kind(p, links, STRATA_YNODE_SEQUENCE, "a list of links");
    for (size_t i = 0; status == STRATA_OK && i < links->length; i++)
      status = parse_link(p, links->items[i]);
  }
  return status;
}

int strata_topo_from_tree(const strata_ytree *tree, const char *source, int preset_depth,
                          strata_topo **out, char *err, size_t err_len) {
  *out = NULL;
  strata_topo *topo = calloc(1, sizeof *topo);
  if (topo == NULL) return STRATA_ERR_NO_MEMORY;
  snprintf(topo->source, sizeof topo->source, "%s", source);
  parser p = {
      .source = source, .err = err, .err_len = err_len, .preset_depth = preset_depth, .topo = topo};
  int status = parse_document(&p, tree->root);
  if (status == STRATA_OK) status = strata_topo_validate(topo, err, err_len);
  free(p.templates);
  free(p.site_order);
  if (status != STRATA_OK) {
    if (status == STRATA_ERR_NO_MEMORY && err != NULL && err_len > 0)
      snprintf(err, err_len, "%s: out of memory", source);
    strata_topo_free(topo);
    return status;
  }
  *out = topo;
  return STRATA_OK;
}
