// SPDX-License-Identifier: Apache-2.0
/*
 * topo.c — loading entry points, semantic validation, lookups, the kind names and the GPU catalog.
 *
 * Validation works on the finished strata_topo, not on YAML, so a topology built in code (a test,
 * a discovery probe) is held to the same rules as one read from a file; errors carry the element's
 * mark so a file's reader still gets file:line:col.
 *
 * The GPU catalog here is descriptive only — which NVLink generation and NVSwitch domain a model
 * ships with (NVIDIA's NVLink page and docs: NVLink3 A100, NVLink4 H100/H200, NVLink5 B200/GB200,
 * domain 8 on HGX, 72 on NVL72; NVLink6 Rubin from secondary sources only). Bandwidths belong to
 * src/model and must never appear here.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/topo_internal.h"

#define MAX_TOTAL_GPUS 1000000000000LL /* 1e12: far past any cluster, far below int64 overflow */
#define MAX_FILE_BYTES (64u << 20)

/* ---- names ---- */

const strata_topo_enum_entry strata_topo_gpu_table[] = {
    {"none", STRATA_GPU_NONE, 0},   {"a100", STRATA_GPU_A100, 0},
    {"h100", STRATA_GPU_H100, 0},   {"h200", STRATA_GPU_H200, 0},
    {"b200", STRATA_GPU_B200, 0},   {"gb200", STRATA_GPU_GB200, 0},
    {"rubin", STRATA_GPU_RUBIN, 0}, {"cpu", STRATA_GPU_NONE, 1},
    {"vr200", STRATA_GPU_RUBIN, 1}, {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_intra_table[] = {{"none", STRATA_INTRA_NONE, 0},
                                                          {"nvlink", STRATA_INTRA_NVLINK, 0},
                                                          {"pcie", STRATA_INTRA_PCIE, 0},
                                                          {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_nic_kind_table[] = {
    {"infiniband", STRATA_NIC_INFINIBAND, 0},
    {"roce", STRATA_NIC_ROCE, 0},
    {"ethernet", STRATA_NIC_ETHERNET, 0},
    {"ib", STRATA_NIC_INFINIBAND, 1},
    {"rocev2", STRATA_NIC_ROCE, 1},
    {"eth", STRATA_NIC_ETHERNET, 1},
    {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_nic_role_table[] = {
    {"compute", STRATA_NIC_ROLE_COMPUTE, 0},
    {"storage", STRATA_NIC_ROLE_STORAGE, 0},
    {"frontend", STRATA_NIC_ROLE_FRONTEND, 0},
    {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_ib_speed_table[] = {
    {"hdr", STRATA_IB_HDR, 0}, {"ndr", STRATA_IB_NDR, 0}, {"xdr", STRATA_IB_XDR, 0}, {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_fabric_table[] = {
    {"infiniband", STRATA_FABRIC_INFINIBAND, 0}, {"roce", STRATA_FABRIC_ROCE, 0},
    {"ethernet", STRATA_FABRIC_ETHERNET, 0},     {"none", STRATA_FABRIC_NONE, 0},
    {"ib", STRATA_FABRIC_INFINIBAND, 1},         {"rocev2", STRATA_FABRIC_ROCE, 1},
    {"eth", STRATA_FABRIC_ETHERNET, 1},          {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_provider_table[] = {
    {"own", STRATA_PROVIDER_OWN, 0},
    {"aws", STRATA_PROVIDER_AWS, 0},
    {"azure", STRATA_PROVIDER_AZURE, 0},
    {"gcp", STRATA_PROVIDER_GCP, 0},
    {"oci", STRATA_PROVIDER_OCI, 0},
    {"other_cloud", STRATA_PROVIDER_OTHER_CLOUD, 0},
    {"colo", STRATA_PROVIDER_OWN, 1},
    {"google", STRATA_PROVIDER_GCP, 1},
    {"oracle", STRATA_PROVIDER_OCI, 1},
    {"cloud", STRATA_PROVIDER_OTHER_CLOUD, 1},
    {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_phys_table[] = {
    {"dark_fiber", STRATA_PHYS_DARK_FIBER, 0},
    {"dwdm", STRATA_PHYS_DWDM, 0},
    {"private_backbone", STRATA_PHYS_PRIVATE_BACKBONE, 0},
    {"cloud_interconnect", STRATA_PHYS_CLOUD_INTERCONNECT, 0},
    {"internet", STRATA_PHYS_INTERNET, 0},
    {"unspecified", STRATA_PHYS_UNSPECIFIED, 0},
    {"fiber", STRATA_PHYS_DARK_FIBER, 1},
    {"wavelength", STRATA_PHYS_DWDM, 1},
    {"backbone", STRATA_PHYS_PRIVATE_BACKBONE, 1},
    {"interconnect", STRATA_PHYS_CLOUD_INTERCONNECT, 1},
    {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_optics_table[] = {
    {"grey", STRATA_OPTICS_GREY, 0},
    {"400zr", STRATA_OPTICS_400ZR, 0},
    {"openzr+", STRATA_OPTICS_OPENZR_PLUS, 0},
    {"unspecified", STRATA_OPTICS_UNSPECIFIED, 0},
    {"gray", STRATA_OPTICS_GREY, 1},
    {"zr", STRATA_OPTICS_400ZR, 1},
    {"openzr_plus", STRATA_OPTICS_OPENZR_PLUS, 1},
    {"zr+", STRATA_OPTICS_OPENZR_PLUS, 1},
    {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_extension_table[] = {
    {"none", STRATA_EXT_NONE, 0},
    {"metrox", STRATA_EXT_METROX, 0},
    {"ib_router", STRATA_EXT_IB_ROUTER, 0},
    {"roce_aggregation", STRATA_EXT_ROCE_AGGREGATION, 0},
    {"atsw", STRATA_EXT_ROCE_AGGREGATION, 1},
    {"router", STRATA_EXT_IB_ROUTER, 1},
    {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_overlay_table[] = {
    {"none", STRATA_OVERLAY_NONE, 0},
    {"wireguard", STRATA_OVERLAY_WIREGUARD, 0},
    {"wg", STRATA_OVERLAY_WIREGUARD, 1},
    {NULL, 0, 0}};
const strata_topo_enum_entry strata_topo_transit_table[] = {
    {"internet", STRATA_TRANSIT_INTERNET, 0},
    {"cloud_interconnect", STRATA_TRANSIT_CLOUD_INTERCONNECT, 0},
    {"private", STRATA_TRANSIT_PRIVATE, 0},
    {"unspecified", STRATA_TRANSIT_UNSPECIFIED, 0},
    {"interconnect", STRATA_TRANSIT_CLOUD_INTERCONNECT, 1},
    {NULL, 0, 0}};

static int names_match(const char *a, const char *b) {
  for (;; a++, b++) {
    char x = *a == '-' ? '_' : *a, y = *b == '-' ? '_' : *b;
    if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
    if (x != y) return 0;
    if (x == '\0') return 1;
  }
}

int strata_topo_enum_lookup(const strata_topo_enum_entry *table, const char *text, int *out) {
  for (size_t i = 0; table[i].name != NULL; i++)
    if (names_match(table[i].name, text)) {
      *out = table[i].value;
      return STRATA_OK;
    }
  return STRATA_ERR_INVALID_ARG;
}

const char *strata_topo_enum_name(const strata_topo_enum_entry *table, int value) {
  for (size_t i = 0; table[i].name != NULL; i++)
    if (!table[i].alias && table[i].value == value) return table[i].name;
  return "?";
}

void strata_topo_enum_list(const strata_topo_enum_entry *table, char *buf, size_t len) {
  size_t used = 0;
  if (len == 0) return;
  buf[0] = '\0';
  for (size_t i = 0; table[i].name != NULL; i++) {
    if (table[i].alias) continue;
    int n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", table[i].name);
    if (n < 0 || (size_t)n >= len - used) return;
    used += (size_t)n;
  }
}

const char *strata_gpu_model_name(strata_gpu_model v) {
  return strata_topo_enum_name(strata_topo_gpu_table, (int)v);
}
const char *strata_intra_kind_name(strata_intra_kind v) {
  return strata_topo_enum_name(strata_topo_intra_table, (int)v);
}
const char *strata_nic_kind_name(strata_nic_kind v) {
  return strata_topo_enum_name(strata_topo_nic_kind_table, (int)v);
}
const char *strata_nic_role_name(strata_nic_role v) {
  return strata_topo_enum_name(strata_topo_nic_role_table, (int)v);
}
const char *strata_ib_speed_name(strata_ib_speed v) {
  if (v == STRATA_IB_UNSPECIFIED) return "unspecified";
  return strata_topo_enum_name(strata_topo_ib_speed_table, (int)v);
}
const char *strata_fabric_kind_name(strata_fabric_kind v) {
  return strata_topo_enum_name(strata_topo_fabric_table, (int)v);
}
const char *strata_provider_name(strata_provider v) {
  return strata_topo_enum_name(strata_topo_provider_table, (int)v);
}
const char *strata_phys_kind_name(strata_phys_kind v) {
  return strata_topo_enum_name(strata_topo_phys_table, (int)v);
}
const char *strata_optics_name(strata_optics v) {
  return strata_topo_enum_name(strata_topo_optics_table, (int)v);
}
const char *strata_extension_kind_name(strata_extension_kind v) {
  return strata_topo_enum_name(strata_topo_extension_table, (int)v);
}
const char *strata_overlay_kind_name(strata_overlay_kind v) {
  return strata_topo_enum_name(strata_topo_overlay_table, (int)v);
}
const char *strata_transit_kind_name(strata_transit_kind v) {
  return strata_topo_enum_name(strata_topo_transit_table, (int)v);
}

int strata_gpu_model_parse(const char *s, strata_gpu_model *out) {
  int value = 0;
  if (s == NULL || out == NULL) return STRATA_ERR_INVALID_ARG;
  int status = strata_topo_enum_lookup(strata_topo_gpu_table, s, &value);
  if (status == STRATA_OK) *out = (strata_gpu_model)value;
  return status;
}

int strata_fabric_kind_parse(const char *s, strata_fabric_kind *out) {
  int value = 0;
  if (s == NULL || out == NULL) return STRATA_ERR_INVALID_ARG;
  int status = strata_topo_enum_lookup(strata_topo_fabric_table, s, &value);
  if (status == STRATA_OK) *out = (strata_fabric_kind)value;
  return status;
}

/* ---- the GPU catalog (descriptive; sources in the comment at the top of this file) ---- */

void strata_topo_gpu_defaults(strata_gpu_model gpu, strata_topo_node_spec *spec) {
  static const struct {
    strata_nvlink_gen nvlink;
    int domain;
    strata_pcie_gen pcie;
  } catalog[STRATA_GPU_MODEL_COUNT] = {
      [STRATA_GPU_NONE] = {STRATA_NVLINK_NONE, 0, STRATA_PCIE_UNSPECIFIED},
      [STRATA_GPU_A100] = {STRATA_NVLINK_3, 8, STRATA_PCIE_4},   /* HGX A100 */
      [STRATA_GPU_H100] = {STRATA_NVLINK_4, 8, STRATA_PCIE_5},   /* HGX H100 */
      [STRATA_GPU_H200] = {STRATA_NVLINK_4, 8, STRATA_PCIE_5},   /* HGX H200 */
      [STRATA_GPU_B200] = {STRATA_NVLINK_5, 8, STRATA_PCIE_5},   /* HGX B200 */
      [STRATA_GPU_GB200] = {STRATA_NVLINK_5, 72, STRATA_PCIE_5}, /* NVL72 rack */
      [STRATA_GPU_RUBIN] = {STRATA_NVLINK_6, 72, STRATA_PCIE_6}, /* NVL rack */
  };
  if ((unsigned)gpu >= STRATA_GPU_MODEL_COUNT) gpu = STRATA_GPU_NONE;
  spec->nvlink = catalog[gpu].nvlink;
  spec->nvswitch_domain_gpus = catalog[gpu].domain;
  spec->pcie = catalog[gpu].pcie;
  spec->intra = catalog[gpu].nvlink != STRATA_NVLINK_NONE ? STRATA_INTRA_NVLINK : STRATA_INTRA_NONE;
}

/* ---- validation ---- */

typedef struct checker {
  const strata_topo *topo;
  char *err;
  size_t err_len;
} checker;

static int invalid(checker *c, strata_topo_mark mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int invalid(checker *c, strata_topo_mark mark, const char *fmt, ...) {
  char message[400];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  strata_topo_errorf(c->err, c->err_len, c->topo->source, mark, "%s", message);
  return STRATA_ERR_PARSE;
}

static int number_ok(double value) {
  return value == STRATA_TOPO_UNSET || (value >= 0 && isfinite(value));
}
/* A rate, size or time the model divides by: unset, or above 0 (the parser's read_positive). */
static int positive_ok(double value) {
  return value == STRATA_TOPO_UNSET || (value > 0 && isfinite(value));
}
static int flag_ok(int value) {
  return value >= -1 && value <= 1;
}

static int check_nic(checker *c, const strata_topo_nic *nic) {
  if ((unsigned)nic->kind >= STRATA_NIC_KIND_COUNT ||
      (unsigned)nic->role >= STRATA_NIC_ROLE_COUNT ||
      (unsigned)nic->ib_speed >= STRATA_IB_SPEED_COUNT)
    return invalid(c, nic->mark, "expected a known NIC kind, role and speed");
  if (nic->count < 1) return invalid(c, nic->mark, "expected a NIC count >= 1, got %d", nic->count);
  if (!positive_ok(nic->gbps)) return invalid(c, nic->mark, "expected NIC gbps > 0");
  if (!flag_ok(nic->gpudirect_rdma) || !flag_ok(nic->pfc) || !flag_ok(nic->ecn))
    return invalid(c, nic->mark, "expected gpudirect_rdma, pfc, ecn to be -1, 0 or 1");
  if (nic->kind != STRATA_NIC_INFINIBAND && nic->ib_speed != STRATA_IB_UNSPECIFIED)
    return invalid(c, nic->mark, "expected an IB speed only on an infiniband NIC");
  return STRATA_OK;
}

static int check_spec(checker *c, const strata_topo_node_spec *spec, strata_topo_mark mark) {
  if ((unsigned)spec->gpu >= STRATA_GPU_MODEL_COUNT ||
      (unsigned)spec->intra >= STRATA_INTRA_KIND_COUNT)
    return invalid(c, mark, "expected a known gpu and intra kind");
  if (spec->gpu == STRATA_GPU_NONE && spec->gpus != 0)
    return invalid(c, mark, "expected gpus: 0 with gpu: none, got %d", spec->gpus);
  if (spec->gpu != STRATA_GPU_NONE && (spec->gpus < 1 || spec->gpus > 4096))
    return invalid(c, mark, "expected gpus from 1 to 4096 with gpu: %s, got %d",
                   strata_gpu_model_name(spec->gpu), spec->gpus);
  if (spec->intra == STRATA_INTRA_NVLINK && (spec->nvlink < 3 || spec->nvlink > 6))
    return invalid(c, mark, "expected an NVLink generation from 3 to 6 with intra: nvlink");
  if (spec->intra != STRATA_INTRA_NVLINK && (spec->nvlink != 0 || spec->nvswitch_domain_gpus != 0))
    return invalid(c, mark, "expected no NVLink generation or NVSwitch domain with intra: %s",
                   strata_intra_kind_name(spec->intra));
  if (spec->pcie != 0 && (spec->pcie < 3 || spec->pcie > 6))
    return invalid(c, mark, "expected a PCIe generation from 3 to 6");
  int domain = spec->nvswitch_domain_gpus;
  if (domain < 0) return invalid(c, mark, "expected nvswitch_domain >= 0, got %d", domain);
  if (domain > 0 && spec->gpus > 0 && (domain < spec->gpus || domain % spec->gpus != 0))
    return invalid(c, mark,
                   "expected nvswitch_domain to be a multiple of the node's %d GPUs, got %d",
                   spec->gpus, domain);
  if (!positive_ok(spec->gpu_memory_gb) || !positive_ok(spec->intra_gbps))
    return invalid(c, mark, "expected gpu_memory_gb and intra gbps > 0");
  if (spec->nic_count < 0 || spec->nic_count > STRATA_TOPO_MAX_NICS)
    return invalid(c, mark, "expected at most %d NIC entries", STRATA_TOPO_MAX_NICS);
  for (int i = 0; i < spec->nic_count; i++) {
    int status = check_nic(c, &spec->nics[i]);
    if (status != STRATA_OK) return status;
  }
  return STRATA_OK;
}

static int check_fabric(checker *c, const strata_topo_fabric *fabric) {
  if ((unsigned)fabric->kind >= STRATA_FABRIC_KIND_COUNT ||
      (unsigned)fabric->ib_speed >= STRATA_IB_SPEED_COUNT)
    return invalid(c, fabric->mark, "expected a known fabric kind and speed");
  if (fabric->kind != STRATA_FABRIC_INFINIBAND && fabric->ib_speed != STRATA_IB_UNSPECIFIED)
    return invalid(c, fabric->mark, "expected an IB speed only in an infiniband fabric");
  if (!positive_ok(fabric->link_gbps) || !positive_ok(fabric->switch_buffer_mb))
    return invalid(c, fabric->mark, "expected link_gbps and switch_buffer_mb > 0");
  if (fabric->oversubscription != STRATA_TOPO_UNSET && !(fabric->oversubscription >= 1.0))
    return invalid(c, fabric->mark, "expected oversubscription >= 1 (x:1)");
  if (!flag_ok(fabric->sharp) || !flag_ok(fabric->pfc) || !flag_ok(fabric->ecn) ||
      !flag_ok(fabric->rail_optimized))
    return invalid(c, fabric->mark, "expected sharp, pfc, ecn, rail_optimized to be -1, 0 or 1");
  return STRATA_OK;
}

/* Names unique within a scope, in O(n log n): a file may list thousands of racks or links. */
typedef struct named {
  int scope; /* site index, or 0 when names are global */
  int index;
  const char *name;
} named;

static int named_compare(const void *a, const void *b) {
  const named *x = a, *y = b;
  if (x->scope != y->scope) return x->scope < y->scope ? -1 : 1;
  int order = strcmp(x->name, y->name);
  if (order != 0) return order;
  return (x->index > y->index) - (x->index < y->index);
}

/* Returns the index of the later element of a duplicate pair, -1 if all are unique, -2 if out
 * of memory. */
static int find_duplicate(named *items, int count) {
  if (count < 2) return -1;
  qsort(items, (size_t)count, sizeof *items, named_compare);
  int found = -1;
  for (int i = 1; i < count; i++)
    if (items[i].scope == items[i - 1].scope && strcmp(items[i].name, items[i - 1].name) == 0 &&
        (found < 0 || items[i].index < found))
      found = items[i].index;
  return found;
}

/* kind: 0 sites, 1 buildings, 2 racks, 3 links. */
static int duplicate_of(const strata_topo *t, int kind) {
  int count = kind == 0   ? t->site_count
              : kind == 1 ? t->building_count
              : kind == 2 ? t->rack_count
                          : t->link_count;
  if (count < 2) return -1;
  named *items = malloc((size_t)count * sizeof *items);
  if (items == NULL) return -2;
  for (int i = 0; i < count; i++) {
    items[i].index = i;
    items[i].scope = kind == 1 ? t->buildings[i].site : kind == 2 ? t->racks[i].site : 0;
    items[i].name = kind == 0   ? t->sites[i].name
                    : kind == 1 ? t->buildings[i].name
                    : kind == 2 ? t->racks[i].name
                                : t->links[i].name;
  }
  int found = find_duplicate(items, count);
  free(items);
  return found;
}

static int check_unique_names(checker *c) {
  const strata_topo *t = c->topo;
  int found = duplicate_of(t, 0);
  if (found >= 0)
    return invalid(c, t->sites[found].mark, "expected a unique site name, got a second '%s'",
                   t->sites[found].name);
  found = found == -2 ? -2 : duplicate_of(t, 1);
  if (found >= 0)
    return invalid(c, t->buildings[found].mark,
                   "expected a unique building name in site '%s', got a second '%s'",
                   t->sites[t->buildings[found].site].name, t->buildings[found].name);
  found = found == -2 ? -2 : duplicate_of(t, 2);
  if (found >= 0)
    return invalid(c, t->racks[found].mark,
                   "expected a unique rack name in site '%s', got a second '%s'",
                   t->sites[t->racks[found].site].name, t->racks[found].name);
  return found == -2 ? STRATA_ERR_NO_MEMORY : STRATA_OK;
}

static int check_sites(checker *c) {
  const strata_topo *t = c->topo;
  if (t->site_count < 1 || t->sites == NULL)
    return invalid(c, (strata_topo_mark){0, 0}, "expected at least one site");
  for (int s = 0; s < t->site_count; s++) {
    const strata_topo_site *site = &t->sites[s];
    if (site->name[0] == '\0') return invalid(c, site->mark, "expected a site name");
    if ((unsigned)site->provider >= STRATA_PROVIDER_COUNT)
      return invalid(c, site->mark, "expected a known provider");
    if (site->has_location && !(fabs(site->lat_deg) <= 90 && fabs(site->lon_deg) <= 180))
      return invalid(c, site->mark, "expected lat in [-90, 90] and lon in [-180, 180]");
    int status = check_fabric(c, &site->fabric);
    if (status != STRATA_OK) return status;
    if (site->group_begin < 0 || site->group_count < 0 ||
        site->group_begin + site->group_count > t->group_count)
      return invalid(c, site->mark, "expected the site's node groups inside the group array");
  }
  for (int b = 0; b < t->building_count; b++) {
    const strata_topo_building *building = &t->buildings[b];
    if (building->site < 0 || building->site >= t->site_count)
      return invalid(c, building->mark, "expected a building inside a known site");
  }
  for (int r = 0; r < t->rack_count; r++) {
    const strata_topo_rack *rack = &t->racks[r];
    if (rack->site < 0 || rack->site >= t->site_count || rack->building < -1 ||
        rack->building >= t->building_count || rack->count < 1)
      return invalid(c, rack->mark, "expected a rack with count >= 1 inside a known site");
  }
  return check_unique_names(c);
}

static int check_groups(checker *c) {
  const strata_topo *t = c->topo;
  long long total_gpus = 0;
  for (int g = 0; g < t->group_count; g++) {
    const strata_topo_node_group *group = &t->groups[g];
    if (group->site < 0 || group->site >= t->site_count || group->building < -1 ||
        group->building >= t->building_count || group->rack < -1 || group->rack >= t->rack_count)
      return invalid(c, group->mark, "expected a node group inside a known site");
    const strata_topo_site *site = &t->sites[group->site];
    if (g < site->group_begin || g >= site->group_begin + site->group_count)
      return invalid(c, group->mark, "expected node groups stored by site");
    if (group->count < 1)
      return invalid(c, group->mark, "expected count >= 1, got %lld", (long long)group->count);
    int status = check_spec(c, &group->spec, group->mark);
    if (status != STRATA_OK) return status;
    if (group->count > MAX_TOTAL_GPUS / (group->spec.gpus + 1) ||
        total_gpus + group->count * group->spec.gpus > MAX_TOTAL_GPUS)
      return invalid(c, group->mark, "expected at most 10^12 GPUs in all");
    total_gpus += group->count * group->spec.gpus;
  }
  return STRATA_OK;
}

static int check_links(checker *c) {
  const strata_topo *t = c->topo;
  for (int l = 0; l < t->link_count; l++) {
    const strata_topo_link *link = &t->links[l];
    if (link->site_a < 0 || link->site_a >= t->site_count || link->site_b < 0 ||
        link->site_b >= t->site_count)
      return invalid(c, link->mark, "expected a link between known sites");
    if (link->site_a == link->site_b)
      return invalid(c, link->mark, "expected a link between two different sites");
    const strata_topo_physical *phys = &link->physical;
    if ((unsigned)phys->kind >= STRATA_PHYS_KIND_COUNT ||
        (unsigned)phys->optics >= STRATA_OPTICS_COUNT)
      return invalid(c, phys->mark, "expected a known physical kind and optics");
    if (!number_ok(phys->km) || !positive_ok(phys->capacity_gbps) || phys->wavelengths < 0)
      return invalid(c, phys->mark, "expected km >= 0, capacity_gbps > 0 and wavelengths >= 0");
    const strata_topo_extension *ext = &link->extension;
    if ((unsigned)ext->kind >= STRATA_EXT_KIND_COUNT || !positive_ok(ext->gbps) ||
        !flag_ok(ext->pfc) ||
        (ext->oversubscription != STRATA_TOPO_UNSET && !(ext->oversubscription >= 1.0)))
      return invalid(c, ext->mark,
                     "expected a known extension kind, gbps > 0, oversubscription >= 1");
    const strata_topo_overlay *ov = &link->overlay;
    if ((unsigned)ov->kind >= STRATA_OVERLAY_KIND_COUNT ||
        (unsigned)ov->transit >= STRATA_TRANSIT_KIND_COUNT || !flag_ok(ov->site_to_site))
      return invalid(c, ov->mark, "expected a known overlay kind and transit");
    if (!positive_ok(ov->rtt_ms) || !positive_ok(ov->bandwidth_gbps) || !number_ok(ov->loss_pct) ||
        !number_ok(ov->mtu_bytes) || ov->loss_pct >= 100)
      return invalid(
          c, ov->mark,
          "expected rtt_ms, bandwidth_gbps > 0, mtu_bytes >= 0 and loss_pct in [0, 100)");
  }
  int found = duplicate_of(t, 3);
  if (found >= 0)
    return invalid(c, t->links[found].mark, "expected a unique link name, got a second '%s'",
                   t->links[found].name);
  return found == -2 ? STRATA_ERR_NO_MEMORY : STRATA_OK;
}

int strata_topo_validate(const strata_topo *topo, char *err, size_t err_len) {
  if (topo == NULL) return STRATA_ERR_INVALID_ARG;
  checker c = {topo, err, err_len};
  int status = check_sites(&c);
  if (status == STRATA_OK) status = check_groups(&c);
  if (status == STRATA_OK) status = check_links(&c);
  return status;
}

/* ---- loading ---- */

void strata_topo_free(strata_topo *topo) {
  if (topo == NULL) return;
  free(topo->sites);
  free(topo->buildings);
  free(topo->racks);
  free(topo->groups);
  free(topo->links);
  free(topo);
}

int strata_topo_load_string_depth(const char *source, const char *yaml, size_t len,
                                  int preset_depth, strata_topo **out, char *err, size_t err_len) {
  strata_ytree tree;
  int status = strata_ytree_parse(&tree, source, yaml, len, err, err_len);
  if (status == STRATA_ERR_NO_MEMORY && err != NULL && err_len > 0)
    snprintf(err, err_len, "%s: out of memory", source);
  if (status != STRATA_OK) return status;
  status = strata_topo_from_tree(&tree, source, preset_depth, out, err, err_len);
  strata_ytree_free(&tree);
  return status;
}

int strata_topo_load_string(const char *name_for_errors, const char *yaml, size_t len,
                            strata_topo **out, char *err, size_t err_len) {
  if (out != NULL) *out = NULL;
  if (err != NULL && err_len > 0) err[0] = '\0';
  if (yaml == NULL || out == NULL) return STRATA_ERR_INVALID_ARG;
  if (name_for_errors == NULL) name_for_errors = "<string>";
  return strata_topo_load_string_depth(name_for_errors, yaml, len, 0, out, err, err_len);
}

int strata_topo_load_file(const char *path, strata_topo **out, char *err, size_t err_len) {
  if (out != NULL) *out = NULL;
  if (err != NULL && err_len > 0) err[0] = '\0';
  if (path == NULL || out == NULL) return STRATA_ERR_INVALID_ARG;
  FILE *file = fopen(path, "rb");
  if (file == NULL) {
    int code = errno;
    if (err != NULL && err_len > 0)
      snprintf(err, err_len, "%s: expected a readable topology file (%s)", path, strerror(code));
    return code == ENOENT ? STRATA_ERR_NOT_FOUND : STRATA_ERR_SYSTEM;
  }
  size_t capacity = 1 << 16, len = 0;
  char *text = malloc(capacity);
  int status = text ? STRATA_OK : STRATA_ERR_NO_MEMORY;
  while (status == STRATA_OK) {
    if (len == capacity) {
      char *grown = capacity >= MAX_FILE_BYTES ? NULL : realloc(text, capacity * 2);
      if (grown == NULL) {
        if (err != NULL && err_len > 0)
          snprintf(err, err_len, "%s: expected a topology file of at most 64 MiB", path);
        status = STRATA_ERR_PARSE;
        break;
      }
      text = grown;
      capacity *= 2;
    }
    size_t got = fread(text + len, 1, capacity - len, file);
    len += got;
    if (got == 0) {
      if (ferror(file)) {
        if (err != NULL && err_len > 0) snprintf(err, err_len, "%s: read failed", path);
        status = STRATA_ERR_SYSTEM;
      }
      break;
    }
  }
  fclose(file);
  if (status == STRATA_OK) status = strata_topo_load_string(path, text, len, out, err, err_len);
  free(text);
  return status;
}

/* ---- lookups ---- */

int strata_topo_site_index(const strata_topo *topo, const char *name) {
  if (topo == NULL || name == NULL) return -1;
  for (int s = 0; s < topo->site_count; s++)
    if (strcmp(topo->sites[s].name, name) == 0) return s;
  return -1;
}

const strata_topo_site *strata_topo_site_find(const strata_topo *topo, const char *name) {
  int index = strata_topo_site_index(topo, name);
  return index < 0 ? NULL : &topo->sites[index];
}

int strata_topo_links_between(const strata_topo *topo, int site_a, int site_b, int *out, int max) {
  int found = 0;
  if (topo == NULL) return 0;
  for (int l = 0; l < topo->link_count; l++) {
    const strata_topo_link *link = &topo->links[l];
    if ((link->site_a == site_a && link->site_b == site_b) ||
        (link->site_a == site_b && link->site_b == site_a)) {
      if (out != NULL && found < max) out[found] = l;
      found++;
    }
  }
  return found;
}

int64_t strata_topo_site_gpus(const strata_topo *topo, int site) {
  if (topo == NULL || site < 0 || site >= topo->site_count) return 0;
  int64_t total = 0;
  const strata_topo_site *s = &topo->sites[site];
  for (int g = s->group_begin; g < s->group_begin + s->group_count; g++)
    total += topo->groups[g].count * topo->groups[g].spec.gpus;
  return total;
}

int64_t strata_topo_site_nodes(const strata_topo *topo, int site) {
  if (topo == NULL || site < 0 || site >= topo->site_count) return 0;
  int64_t total = 0;
  const strata_topo_site *s = &topo->sites[site];
  for (int g = s->group_begin; g < s->group_begin + s->group_count; g++)
    total += topo->groups[g].count;
  return total;
}

int64_t strata_topo_gpus(const strata_topo *topo) {
  int64_t total = 0;
  for (int s = 0; topo != NULL && s < topo->site_count; s++)
    total += strata_topo_site_gpus(topo, s);
  return total;
}

int64_t strata_topo_nodes(const strata_topo *topo) {
  int64_t total = 0;
  for (int s = 0; topo != NULL && s < topo->site_count; s++)
    total += strata_topo_site_nodes(topo, s);
  return total;
}

double strata_topo_site_distance_km(const strata_topo *topo, int site_a, int site_b) {
  if (topo == NULL || site_a < 0 || site_b < 0 || site_a >= topo->site_count ||
      site_b >= topo->site_count)
    return STRATA_TOPO_UNSET;
  const strata_topo_site *a = &topo->sites[site_a], *b = &topo->sites[site_b];
  if (!a->has_location || !b->has_location) return STRATA_TOPO_UNSET;
  /* Haversine on a sphere of mean Earth radius 6371 km. */
  const double radians = M_PI / 180.0, radius_km = 6371.0;
  double dlat = (b->lat_deg - a->lat_deg) * radians, dlon = (b->lon_deg - a->lon_deg) * radians;
  double h = sin(dlat / 2) * sin(dlat / 2) +
             cos(a->lat_deg * radians) * cos(b->lat_deg * radians) * sin(dlon / 2) * sin(dlon / 2);
  if (h > 1) h = 1;
  return 2 * radius_km * asin(sqrt(h));
}
