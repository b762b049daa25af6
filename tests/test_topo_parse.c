// SPDX-License-Identifier: Apache-2.0
/*
 * test_topo_parse.c — the topology format: every preset and example loads with the values it
 * says; every malformed input in the table fails with its exact "file:line:col: expected ..."
 * prefix; validation, lookups and file loading behave.
 */
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topo/topo.h"
#include "helpers/check.h"

static strata_topo *load_preset(const char *name) {
  char err[512];
  strata_topo *topo = NULL;
  int status = strata_topo_preset(name, &topo, err, sizeof err);
  if (status != STRATA_OK) {
    fprintf(stderr, "preset %s: %d %s\n", name, status, err);
    failures++;
  }
  return topo;
}

static strata_topo *load_text(const char *yaml) {
  char err[512];
  strata_topo *topo = NULL;
  int status = strata_topo_load_string("t.yaml", yaml, strlen(yaml), &topo, err, sizeof err);
  if (status != STRATA_OK) {
    fprintf(stderr, "load: %d %s\n--- input:\n%s\n", status, err, yaml);
    failures++;
  }
  return topo;
}

static void test_preset_list(void) {
  static const char *const expected[] = {
      "dgx-a100",     "dgx-h100",           "hgx-b200",      "gb200-nvl72", "ib-cluster",
      "roce-cluster", "campus-2-buildings", "metro-2-sites", "regions-2",   "multicloud-wireguard"};
  size_t count = sizeof expected / sizeof expected[0];
  CHECK(strata_topo_preset_count() >= count);
  for (size_t i = 0; i < count; i++) CHECK(strata_topo_preset_yaml(expected[i]) != NULL);
  for (size_t i = 0; i < strata_topo_preset_count(); i++) {
    CHECK(strata_topo_preset_name(i) != NULL);
    CHECK(strata_topo_preset_description(i) != NULL && strata_topo_preset_description(i)[0]);
    strata_topo *topo = load_preset(strata_topo_preset_name(i));
    if (topo == NULL) continue;
    CHECK(strcmp(topo->name, strata_topo_preset_name(i)) == 0);
    CHECK(strata_topo_gpus(topo) > 0);
    CHECK(strata_topo_validate(topo, NULL, 0) == STRATA_OK);
    strata_topo_free(topo);
  }
  CHECK(strata_topo_preset_name(strata_topo_preset_count()) == NULL);
  char err[512];
  strata_topo *topo = (strata_topo *)&err; /* must be reset to NULL */
  CHECK(strata_topo_preset("dgx-z9", &topo, err, sizeof err) == STRATA_ERR_NOT_FOUND);
  CHECK(topo == NULL);
  CHECK(strstr(err, "expected one of dgx-a100, dgx-h100") != NULL);
}

static void test_node_presets(void) {
  strata_topo *topo = load_preset("dgx-h100");
  if (topo != NULL) {
    CHECK(topo->site_count == 1 && topo->group_count == 1 && topo->link_count == 0);
    const strata_topo_node_spec *spec = &topo->groups[0].spec;
    CHECK(spec->gpu == STRATA_GPU_H100 && spec->gpus == 8);
    CHECK(spec->intra == STRATA_INTRA_NVLINK && spec->nvlink == STRATA_NVLINK_4);
    CHECK(spec->nvswitch_domain_gpus == 8 && spec->pcie == STRATA_PCIE_5);
    CHECK(!spec->intra_defaulted && !strata_topo_is_set(spec->intra_gbps));
    CHECK(spec->nic_count == 2);
    CHECK(spec->nics[0].kind == STRATA_NIC_INFINIBAND && spec->nics[0].ib_speed == STRATA_IB_NDR);
    CHECK(spec->nics[0].count == 8 && spec->nics[0].gpudirect_rdma == 1);
    CHECK(!strata_topo_is_set(spec->nics[0].gbps)); /* the model derives 400G from NDR */
    CHECK(spec->nics[0].pfc == STRATA_TOPO_UNKNOWN);
    CHECK(spec->nics[1].role == STRATA_NIC_ROLE_STORAGE && spec->nics[1].gbps == 400);
    CHECK(topo->sites[0].fabric.kind == STRATA_FABRIC_NONE);
    CHECK(strcmp(topo->source, "preset:dgx-h100") == 0);
    strata_topo_free(topo);
  }
  topo = load_preset("dgx-a100");
  if (topo != NULL) {
    CHECK(topo->groups[0].spec.nvlink == STRATA_NVLINK_3 && topo->groups[0].spec.pcie == 4);
    CHECK(topo->groups[0].spec.nics[0].ib_speed == STRATA_IB_HDR);
    strata_topo_free(topo);
  }
  topo = load_preset("hgx-b200");
  if (topo != NULL) {
    CHECK(topo->groups[0].spec.gpu == STRATA_GPU_B200 && topo->groups[0].spec.nvlink == 5);
    strata_topo_free(topo);
  }
  topo = load_preset("gb200-nvl72");
  if (topo != NULL) {
    CHECK(topo->rack_count == 1 && strcmp(topo->racks[0].name, "nvl72") == 0);
    CHECK(topo->groups[0].rack == 0 && topo->groups[0].count == 18);
    CHECK(topo->groups[0].spec.gpus == 4 && topo->groups[0].spec.nvswitch_domain_gpus == 72);
    CHECK(strata_topo_gpus(topo) == 72 && strata_topo_nodes(topo) == 18);
    CHECK(topo->sites[0].fabric.sharp == 1);
    strata_topo_free(topo);
  }
}

static void test_cluster_presets(void) {
  strata_topo *topo = load_preset("ib-cluster");
  if (topo != NULL) {
    const strata_topo_fabric *fabric = &topo->sites[0].fabric;
    CHECK(fabric->kind == STRATA_FABRIC_INFINIBAND && fabric->ib_speed == STRATA_IB_NDR);
    CHECK(fabric->sharp == 1 && fabric->oversubscription == 1.0 && fabric->rail_optimized == 1);
    CHECK(strcmp(topo->groups[0].template_name, "dgx-h100") == 0);
    CHECK(strata_topo_gpus(topo) == 256);
    strata_topo_free(topo);
  }
  topo = load_preset("roce-cluster");
  if (topo != NULL) {
    const strata_topo_fabric *fabric = &topo->sites[0].fabric;
    CHECK(fabric->kind == STRATA_FABRIC_ROCE && fabric->pfc == 1 && fabric->ecn == 1);
    CHECK(fabric->switch_buffer_mb == 64 && fabric->link_gbps == 400);
    const strata_topo_node_spec *spec = &topo->groups[0].spec;
    CHECK(spec->nics[0].kind == STRATA_NIC_ROCE && spec->nics[0].gbps == 400);
    CHECK(spec->nics[0].pfc == 1 && spec->nics[0].ecn == 1);
    CHECK(spec->nvlink == STRATA_NVLINK_4); /* kept from the template */
    CHECK(strata_topo_gpus(topo) == 512);
    strata_topo_free(topo);
  }
}

static void test_link_presets(void) {
  strata_topo *topo = load_preset("campus-2-buildings");
  if (topo != NULL) {
    CHECK(topo->link_count == 1 && topo->links[0].physical.km == 2);
    CHECK(topo->links[0].physical.kind == STRATA_PHYS_DARK_FIBER);
    CHECK(topo->links[0].extension.kind == STRATA_EXT_METROX);
    CHECK(topo->links[0].overlay.kind == STRATA_OVERLAY_NONE);
    CHECK(strcmp(topo->sites[0].campus, topo->sites[1].campus) == 0);
    strata_topo_free(topo);
  }
  topo = load_preset("metro-2-sites");
  if (topo != NULL) {
    const strata_topo_link *link = &topo->links[0];
    CHECK(link->physical.km == 30 && link->physical.optics == STRATA_OPTICS_400ZR);
    CHECK(link->physical.wavelengths == 16 && link->physical.capacity_gbps == 6400);
    CHECK(link->extension.kind == STRATA_EXT_METROX);
    int found[4];
    CHECK(strata_topo_links_between(topo, 1, 0, found, 4) == 1 && found[0] == 0);
    CHECK(strata_topo_site_gpus(topo, strata_topo_site_index(topo, "metro-b")) == 256);
    CHECK(strata_topo_site_find(topo, "nowhere") == NULL);
    CHECK(!strata_topo_is_set(link->overlay.rtt_ms)); /* the model derives it from km */
    strata_topo_free(topo);
  }
  topo = load_preset("regions-2");
  if (topo != NULL) {
    const strata_topo_link *link = &topo->links[0];
    CHECK(link->physical.km == 800 && link->physical.optics == STRATA_OPTICS_OPENZR_PLUS);
    CHECK(link->physical.kind == STRATA_PHYS_DWDM && link->extension.kind == STRATA_EXT_NONE);
    CHECK(link->overlay.transit == STRATA_TRANSIT_PRIVATE);
    double km = strata_topo_site_distance_km(topo, 0, 1); /* Frankfurt-Paris ~480 km */
    CHECK(km > 440 && km < 520);
    strata_topo_free(topo);
  }
  topo = load_preset("multicloud-wireguard");
  if (topo != NULL) {
    CHECK(topo->site_count == 3 && topo->link_count == 3);
    CHECK(topo->sites[0].provider == STRATA_PROVIDER_AWS);
    CHECK(topo->sites[1].provider == STRATA_PROVIDER_GCP);
    CHECK(topo->sites[2].provider == STRATA_PROVIDER_AZURE);
    int found[2];
    CHECK(strata_topo_links_between(topo, 0, 2, found, 2) == 1);
    const strata_topo_link *link = &topo->links[found[0]];
    CHECK(strcmp(link->name, "aws--azure") == 0);
    CHECK(link->overlay.kind == STRATA_OVERLAY_WIREGUARD);
    CHECK(link->overlay.transit == STRATA_TRANSIT_INTERNET && link->overlay.site_to_site == 0);
    CHECK(link->overlay.rtt_ms == 67 && fabs(link->overlay.bandwidth_gbps - 0.79) < 1e-9);
    CHECK(link->overlay.mtu_bytes == 1420 && link->physical.kind == STRATA_PHYS_INTERNET);
    CHECK(topo->groups[0].spec.nics[0].count == 32); /* override of the template's NICs */
    strata_topo_free(topo);
  }
}

static const char *source_dir(void) {
  const char *dir = getenv("STRATA_SOURCE_DIR");
  if (dir != NULL) return dir;
  return access("examples/topologies", F_OK) == 0 ? "." : "..";
}

static strata_topo *load_example(const char *file) {
  char path[1024], err[512];
  snprintf(path, sizeof path, "%s/examples/topologies/%s", source_dir(), file);
  strata_topo *topo = NULL;
  int status = strata_topo_load_file(path, &topo, err, sizeof err);
  if (status != STRATA_OK) {
    fprintf(stderr, "%s: %d %s\n", path, status, err);
    failures++;
  }
  return topo;
}

static void test_examples(void) {
  char pattern[1024];
  snprintf(pattern, sizeof pattern, "%s/examples/topologies/*.yaml", source_dir());
  glob_t found;
  CHECK(glob(pattern, 0, NULL, &found) == 0);
  CHECK(found.gl_pathc >= 5);
  for (size_t i = 0; i < found.gl_pathc; i++) {
    char err[512];
    strata_topo *topo = NULL;
    int status = strata_topo_load_file(found.gl_pathv[i], &topo, err, sizeof err);
    if (status != STRATA_OK) fprintf(stderr, "%s: %s\n", found.gl_pathv[i], err);
    CHECK(status == STRATA_OK);
    strata_topo_free(topo);
  }
  globfree(&found);

  strata_topo *topo = load_example("regions-4-100k.yaml");
  if (topo != NULL) {
    CHECK(strata_topo_gpus(topo) == 100000 && topo->group_count == 4);
    CHECK(topo->site_count == 4 && topo->link_count == 4);
    strata_topo_free(topo);
  }
  topo = load_example("campus-halls-racks.yaml");
  if (topo != NULL) {
    CHECK(topo->building_count == 2 && topo->rack_count == 2);
    CHECK(topo->groups[0].count == 8 * 18 && topo->groups[0].building == 0);
    CHECK(topo->groups[0].spec.nvswitch_domain_gpus == 72);
    CHECK(topo->groups[1].spec.nics[0].ib_speed == STRATA_IB_XDR);
    CHECK(topo->groups[1].spec.intra_defaulted && topo->groups[1].spec.nvlink == 5);
    CHECK(strata_topo_gpus(topo) == 8 * 72 + 16 * 4 * 8);
    CHECK(topo->sites[0].fabric.oversubscription == 2.0);
    strata_topo_free(topo);
  }
  topo = load_example("cloud-interconnect-global-reach.yaml");
  if (topo != NULL) {
    const strata_topo_overlay *overlay = &topo->links[0].overlay;
    CHECK(overlay->site_to_site == 1 && strstr(overlay->site_to_site_feature, "Global Reach"));
    CHECK(overlay->transit == STRATA_TRANSIT_CLOUD_INTERCONNECT && overlay->loss_pct == 0.001);
    strata_topo_free(topo);
  }
  topo = load_example("cpu-lab.yaml");
  if (topo != NULL) {
    CHECK(topo->groups[0].spec.gpu == STRATA_GPU_NONE && topo->groups[0].spec.gpus == 0);
    CHECK(topo->groups[0].spec.intra == STRATA_INTRA_NONE);
    CHECK(topo->groups[1].spec.intra == STRATA_INTRA_PCIE && topo->groups[1].spec.pcie == 4);
    CHECK(topo->groups[1].spec.nvlink == STRATA_NVLINK_NONE);
    strata_topo_free(topo);
  }
}

/* Every complete YAML example in docs/topology.md (a block with a top-level sites:) loads. */
static void test_docs_examples(void) {
  char path[1024];
  snprintf(path, sizeof path, "%s/docs/topology.md", source_dir());
  FILE *file = fopen(path, "rb");
  CHECK(file != NULL);
  if (file == NULL) return;
  static char doc[1 << 17];
  size_t len = fread(doc, 1, sizeof doc - 1, file);
  fclose(file);
  doc[len] = '\0';
  int complete = 0;
  for (char *block = strstr(doc, "```yaml\n"); block != NULL; block = strstr(block, "```yaml\n")) {
    block += 8;
    char *end = strstr(block, "```");
    if (end == NULL) break;
    *end = '\0';
    if (strncmp(block, "sites:", 6) == 0 || strstr(block, "\nsites:") != NULL) {
      char err[512];
      strata_topo *topo = NULL;
      int status =
          strata_topo_load_string("docs/topology.md", block, strlen(block), &topo, err, sizeof err);
      if (status != STRATA_OK) fprintf(stderr, "docs example: %s\n", err);
      CHECK(status == STRATA_OK);
      strata_topo_free(topo);
      complete++;
    }
    block = end + 3;
  }
  CHECK(complete >= 2);
}

static void test_compact_and_overrides(void) {
  strata_topo *topo =
      load_text("sites:\n  - name: big\n    nodes: {count: 12500, template: dgx-h100}\n");
  if (topo != NULL) {
    CHECK(strata_topo_gpus(topo) == 100000 && topo->group_count == 1);
    strata_topo_free(topo);
  }
  /* A GPU override without intra: takes the catalog for the new GPU only when the template's
   * own intra was a default; a file template without intra: is such a default. */
  topo = load_text(
      "templates:\n  t: {gpu: h100, gpus: 8}\n"
      "sites:\n  - name: s\n    nodes:\n      - {count: 2, template: t, gpu: b200}\n"
      "      - {count: 1, gpu: h200, gpus: 8, intra: nvlink}\n"
      "      - {count: 1, gpu: rubin, gpus: 4, intra: {nvlink: 6, nvswitch_domain: 72, gbps: "
      "3600}}\n");
  if (topo != NULL) {
    CHECK(topo->groups[0].spec.gpu == STRATA_GPU_B200 && topo->groups[0].spec.nvlink == 5);
    CHECK(topo->groups[1].spec.nvlink == 4 && topo->groups[1].spec.nvswitch_domain_gpus == 8);
    CHECK(!topo->groups[1].spec.intra_defaulted);
    CHECK(topo->groups[2].spec.intra_gbps == 3600 && topo->groups[2].spec.pcie == 6);
    strata_topo_free(topo);
  }
  /* Aliases of kind names, "x:1" ratios and case are accepted. */
  topo = load_text(
      "sites:\n  - {name: a, fabric: {kind: IB, speed: NDR, oversubscription: \"3:1\"}}\n"
      "  - {name: b, fabric: RoCEv2}\nlinks:\n"
      "  - {between: [a, b], physical: {kind: fiber, optics: ZR}, extension: atsw, overlay: wg}\n");
  if (topo != NULL) {
    CHECK(topo->sites[0].fabric.kind == STRATA_FABRIC_INFINIBAND);
    CHECK(topo->sites[0].fabric.oversubscription == 3.0);
    CHECK(topo->sites[1].fabric.kind == STRATA_FABRIC_ROCE);
    CHECK(topo->links[0].physical.optics == STRATA_OPTICS_400ZR);
    CHECK(topo->links[0].extension.kind == STRATA_EXT_ROCE_AGGREGATION);
    CHECK(topo->links[0].overlay.kind == STRATA_OVERLAY_WIREGUARD);
    strata_topo_free(topo);
  }
}

/* Each malformed input and the exact start of its error. */
static const struct {
  const char *yaml;
  const char *expected;
} malformed[] = {
    {"", "t.yaml:1:1: expected a topology (a mapping with sites:), got an empty document"},
    {"- a\n- b\n", "t.yaml:1:1: expected a mapping (a topology with sites:), got a sequence"},
    {"sites: []\n", "t.yaml:1:8: expected at least one site in sites:"},
    {"name: x\n", "t.yaml:1:1: expected sites: (a list of sites) in a topology"},
    {"sitez: []\n",
     "t.yaml:1:1: expected one of name, description, templates, sites, links "
     "(keys of a topology), got 'sitez'"},
    {"sites:\n  - name: a\n    foo: 1\n",
     "t.yaml:3:5: expected one of name, region, campus, provider, location, fabric, buildings, "
     "racks, nodes (keys of a site), got 'foo'"},
    {"sites:\n  - name: a\n    nodes: {count: 0, gpu: h100, gpus: 8}\n",
     "t.yaml:3:20: expected an integer from 1 to 100000000 (count of nodes), got '0'"},
    {"sites:\n  - name: a\n    nodes: {count: 2, gpu: h900, gpus: 8}\n",
     "t.yaml:3:28: expected one of none, a100, h100, h200, b200, gb200, rubin (gpu), got 'h900'"},
    {"sites:\n  - name: a\n    nodes: {count: 2, gpus: 8}\n",
     "t.yaml:3:12: expected gpu: (one of none, a100"},
    {"sites:\n  - name: a\n    nodes: {count: 2, gpu: h100}\n",
     "t.yaml:3:12: expected gpus: (GPUs per node) in a node group"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, c]\n",
     "t.yaml:5:18: expected a site defined under sites: (a, b), got 'c'"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, b]\n"
     "    physical: {kind: dark_fiber, km: -3}\n",
     "t.yaml:6:38: expected a number from 0 to 40075 (km), got '-3'"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, a]\n",
     "t.yaml:5:18: expected two different sites in between:, got 'a' twice"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a]\n",
     "t.yaml:5:14: expected exactly 2 sites in between:, got 1"},
    {"sites:\n  - name: a\n  - name: a\n",
     "t.yaml:3:5: expected a unique site name, got a second 'a'"},
    {"sites:\n  - name: a\n    name: b\n",
     "t.yaml:3:5: expected each key once in a site, got a second 'name'"},
    {"sites:\n  - name: a\n    fabric: {kind: infiniband, speed: qdr}\n",
     "t.yaml:3:39: expected one of hdr, ndr, xdr (speed), got 'qdr'"},
    {"sites:\n  - name: a\n    fabric: {kind: roce, speed: ndr}\n",
     "t.yaml:3:33: expected speed (hdr, ndr, xdr) only in an infiniband fabric"},
    {"sites:\n  - name: a\n    fabric: {kind: roce, oversubscription: \"1:3\"}\n",
     "t.yaml:3:44: expected a ratio from 1 to 1000 like 3 or \"3:1\" (oversubscription), got "
     "'1:3'"},
    {"sites:\n  - name: a\n    nodes: {count: 1, template: dgx-h999}\n",
     "t.yaml:3:33: expected a template from templates: or a node preset (dgx-a100, dgx-h100, "
     "hgx-b200, gb200-nvl72), got 'dgx-h999'"},
    {"sites:\n  - name: a\n    nodes: {count: 1, gpu: h100, gpus: 8, intra: {kind: pcie, nvlink: "
     "4}}\n",
     "t.yaml:3:71: expected no nvlink or nvswitch_domain with intra kind pcie"},
    {"sites:\n  - name: a\n    nodes: {count: 1, gpu: h100, gpus: 8, intra: {nvswitch_domain: "
     "12}}\n",
     "t.yaml:3:12: expected nvswitch_domain to be a multiple of the node's 8 GPUs, got 12"},
    {"sites:\n  - name: a\n    nodes: {count: 1, gpu: h100, gpus: 8, "
     "nics: [{kind: ib, speed: ndr, pfc: true}]}\n",
     "t.yaml:3:78: expected pfc and ecn only on a roce or ethernet NIC"},
    {"sites:\n  - name: a\n    nodes: {count: 1, gpu: h100, gpus: 8, nics: [{speed: ndr}]}\n",
     "t.yaml:3:50: expected kind: infiniband, roce or ethernet in a NIC"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, b]\n"
     "    overlay: {kind: wireguard, loss_pct: 101}\n",
     "t.yaml:6:42: expected a percentage from 0 to below 100 (loss_pct: a path losing every "
     "packet carries nothing), got '101'"},
    /* zero rates and a total loss: planned with as if absent before, now refused where they are */
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, b]\n"
     "    overlay: {kind: wireguard, loss_pct: 100}\n",
     "t.yaml:6:42: expected a percentage from 0 to below 100 (loss_pct"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, b]\n"
     "    overlay: {kind: wireguard, bandwidth_gbps: 0}\n",
     "t.yaml:6:48: expected a number above 0 and at most 1e+09 (bandwidth_gbps), got '0'"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, b]\n"
     "    overlay: {kind: wireguard, rtt_ms: 0}\n",
     "t.yaml:6:40: expected a number above 0 and at most 100000 (rtt_ms), got '0'"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, b]\n"
     "    physical: {kind: dark_fiber, km: 10, capacity_gbps: 0}\n",
     "t.yaml:6:57: expected a number above 0 and at most 1e+09 (capacity_gbps), got '0'"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, b]\n"
     "    extension: {kind: metrox, gbps: 0}\n",
     "t.yaml:6:37: expected a number above 0 and at most 1e+09 (gbps), got '0'"},
    {"sites:\n  - name: a\n    nodes: {count: 2, gpu: h100, gpus: 8, intra: {kind: nvlink, gbps: "
     "0}}\n",
     "t.yaml:3:71: expected a number above 0 and at most 1e+09 (gbps), got '0'"},
    {"sites:\n  - name: a\n    nodes: {count: 2, gpu: h100, gpus: 8, nics: [{kind: ib, gbps: "
     "0}]}\n",
     "t.yaml:3:67: expected a number above 0 and at most 1e+07 (gbps), got '0'"},
    {"sites:\n  - name: a\n    fabric: {kind: roce, link_gbps: 0, switch_buffer_mb: 64}\n",
     "t.yaml:3:37: expected a number above 0 and at most 1e+07 (link_gbps), got '0'"},
    {"sites:\n  - name: a\n    fabric: {kind: roce, switch_buffer_mb: 0}\n",
     "t.yaml:3:44: expected a number above 0 and at most 1e+06 (switch_buffer_mb), got '0'"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, b]\n    extension: {gbps: 10}\n",
     "t.yaml:6:16: expected kind: (one of none, metrox, ib_router, roce_aggregation) in fabric "
     "extension"},
    {"sites:\n  - name: a\n  - name: b\nlinks:\n  - between: [a, b]\n    overlay: ipsec\n",
     "t.yaml:6:14: expected one of none, wireguard (overlay), got 'ipsec'"},
    {"sites:\n  - &x {name: a}\n  - *x\n",
     "t.yaml:2:5: expected a value, got an anchor (anchors and aliases are not supported)"},
    {"sites:\n  - {name: a}\n  - *x\n",
     "t.yaml:3:5: expected a value, got an alias (anchors and aliases are not supported)"},
    {"sites: [\n", "t.yaml:2:1: expected valid YAML: "},
    {"sites:\n  - name: a\n   bad: 1\n", "t.yaml:3:4: expected valid YAML: "},
    {"sites:\n  - name: a\n---\nsites: []\n", "t.yaml:3:1: expected a single YAML document"},
    {"sites:\n  - name: a\n    location: {lat: 91, lon: 0}\n",
     "t.yaml:3:21: expected a number from -90 to 90 (latitude in degrees), got '91'"},
    {"sites:\n  - name: a\n    nodes: {count: 1, gpu: none, gpus: 2}\n",
     "t.yaml:3:12: expected gpus: 0 with gpu: none, got 2"},
    {"sites:\n  - name: a\n    racks: [{name: r, count: 0}]\n",
     "t.yaml:3:30: expected an integer from 1 to 1000000 (count of racks), got '0'"},
    {"sites:\n  - name: a\n    buildings: [{name: b}, {name: b}]\n",
     "t.yaml:3:28: expected a unique building name in site 'a', got a second 'b'"},
    {"sites:\n  - name: a\n    nodes: {count: 1, gpu: a100, gpus: 8, "
     "nics: [{kind: ib}, {kind: ib}, {kind: ib}, {kind: ib}, {kind: ib}]}\n",
     "t.yaml:3:98: expected at most 4 NIC entries per node"},
    {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n",
     "t.yaml:1:65: expected nesting at most 64 levels deep"},
    {"sites:\n  - name: \"a\\0b\"\n", "t.yaml:2:11: expected site name without NUL bytes"},
    {"sites:\n  - name: a\n    nodes:\n"
     "      - {count: 100000000, gpu: h100, gpus: 4096, intra: pcie}\n"
     "      - {count: 100000000, gpu: h100, gpus: 4096, intra: pcie}\n"
     "      - {count: 100000000, gpu: h100, gpus: 4096, intra: pcie}\n",
     "t.yaml:6:9: expected at most 10^12 GPUs in all"},
    {"sites:\n  - name: a\n    fabric: {kind: ethernet, sharp: maybe}\n",
     "t.yaml:3:37: expected true or false (sharp), got 'maybe'"},
    {"templates: {t: {gpu: h100, gpus: 8, count: 3}}\nsites: [{name: a}]\n",
     "t.yaml:1:37: expected one of gpu, gpus, gpu_memory_gb, intra, nics (keys of a node "
     "template), got 'count'"},
    {"sites:\n  - name: a\n    nodes: [1]\n",
     "t.yaml:3:13: expected a mapping (a node group), got '1'"},
    {"sites:\n  - name: a\n    region: [x]\n",
     "t.yaml:3:13: expected text (region), got a sequence"},
    {"sites:\n  - ? [a]\n    : 1\n", "t.yaml:2:7: expected a plain key (text), got a collection"},
    {"sites:\n  - name: a\n    nodes: {count: 1, template: ib-cluster, gpu: a100, intra: {nvlink: "
     "9}}\n",
     "t.yaml:3:72: expected an integer from 3 to 6 (nvlink), got '9'"},
    {"sites:\n  - name: a\n    nodes: {count: 1, gpu: none, intra: nvlink}\n",
     "t.yaml:3:41: expected intra: {kind: nvlink, nvlink: <3..6>} (gpu none has no NVLink"},
    {"sites:\n  - name: a\nlinks:\n  - {between: [a, b], overlay: {kind: wireguard, rtt_ms: "
     "fast}}\n",
     "t.yaml:4:19: expected a site defined under sites: (a), got 'b'"},
    {"sites:\n  - {name: a}\n  - {name: b}\nlinks:\n"
     "  - {between: [a, b], overlay: {kind: wireguard, rtt_ms: fast}}\n",
     "t.yaml:5:58: expected a number above 0 and at most 100000 (rtt_ms), got 'fast'"},
    {"sites:\n  - {name: a}\n  - {name: b}\nlinks:\n"
     "  - {name: l, between: [a, b]}\n  - {name: l, between: [b, a]}\n",
     "t.yaml:6:5: expected a unique link name, got a second 'l'"},
    {"sites:\n  - name: a\n    nodes: {count: 1, template: metro-2-sites}\n",
     "t.yaml:3:33: expected a node preset (one kind of node) as template, got 'metro-2-sites'"},
    {"sites:\n  - {name: a, provider: ibm}\n",
     "t.yaml:2:25: expected one of own, aws, azure, gcp, oci, other_cloud (provider), got 'ibm'"},
    {"sites:\n  - {name: a}\n  - {name: b}\nlinks:\n"
     "  - {between: [a, b], physical: {kind: dwdm, optics: 800zr}}\n",
     "t.yaml:5:54: expected one of grey, 400zr, openzr+, unspecified (optics), got '800zr'"},
    {"sites:\n  - name: a\n    fabric: {kind: infiniband, pfc: true}\n",
     "t.yaml:3:37: expected pfc and ecn only in a roce or ethernet fabric"},
    {"sites: \xc3\x28\n", "t.yaml:1:9: expected UTF-8 text"},
};

static void test_malformed(void) {
  for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
    char err[600] = "";
    strata_topo *topo = NULL;
    size_t len = strlen(malformed[i].yaml);
    int status = strata_topo_load_string("t.yaml", malformed[i].yaml, len, &topo, err, sizeof err);
    int ok = status == STRATA_ERR_PARSE && topo == NULL &&
             strncmp(err, malformed[i].expected, strlen(malformed[i].expected)) == 0;
    if (!ok) {
      fprintf(stderr, "malformed case %zu: status %d\n  got:      %s\n  expected: %s\n", i, status,
              err, malformed[i].expected);
      failures++;
    }
    strata_topo_free(topo);
  }
}

static void test_files_and_validate(void) {
  char path[] = "/tmp/strata-topo-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  const char *text = "sites:\n  - name: a\n    nodes: {count: 1, gpu: h100, gpus: 8, typo: 1}\n";
  CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
  char err[512], expected[600];
  strata_topo *topo = NULL;
  CHECK(strata_topo_load_file(path, &topo, err, sizeof err) == STRATA_ERR_PARSE && topo == NULL);
  snprintf(expected, sizeof expected, "%s:3:43: expected one of name, count, template", path);
  if (strncmp(err, expected, strlen(expected)) != 0) {
    fprintf(stderr, "file error: got %s\n  expected %s\n", err, expected);
    failures++;
  }
  unlink(path);
  CHECK(strata_topo_load_file(path, &topo, err, sizeof err) == STRATA_ERR_NOT_FOUND);
  CHECK(strstr(err, "expected a readable topology file") != NULL);
  CHECK(strata_topo_load_file(NULL, &topo, err, sizeof err) == STRATA_ERR_INVALID_ARG);

  /* The buffer need not be NUL-terminated (ASan watches the end). */
  const char *yaml = "sites: [{name: a, nodes: {count: 3, template: hgx-b200}}]";
  size_t len = strlen(yaml);
  char *exact = malloc(len);
  memcpy(exact, yaml, len);
  CHECK(strata_topo_load_string("buf", exact, len, &topo, err, sizeof err) == STRATA_OK);
  CHECK(topo != NULL && strata_topo_gpus(topo) == 24);
  strata_topo_free(topo);
  free(exact);

  /* Validation of a topology changed in code still points at the element's line. */
  topo = load_preset("metro-2-sites");
  if (topo != NULL) {
    topo->links[0].physical.km = -5;
    CHECK(strata_topo_validate(topo, err, sizeof err) == STRATA_ERR_PARSE);
    CHECK(strncmp(err, "preset:metro-2-sites:", 21) == 0 && strstr(err, "expected km") != NULL);
    topo->links[0].physical.km = 30;
    topo->groups[1].count = 0;
    CHECK(strata_topo_validate(topo, err, sizeof err) == STRATA_ERR_PARSE);
    CHECK(strstr(err, "expected count >= 1") != NULL);
    topo->groups[1].count = 32;
    topo->links[0].site_b = 7;
    CHECK(strata_topo_validate(topo, err, sizeof err) == STRATA_ERR_PARSE);
    topo->links[0].site_b = 1;
    topo->links[0].physical.capacity_gbps = 0; /* a zero rate set in code is refused too */
    CHECK(strata_topo_validate(topo, err, sizeof err) == STRATA_ERR_PARSE);
    CHECK(strstr(err, "capacity_gbps > 0") != NULL);
    topo->links[0].physical.capacity_gbps = STRATA_TOPO_UNSET;
    topo->links[0].overlay.loss_pct = 100;
    CHECK(strata_topo_validate(topo, err, sizeof err) == STRATA_ERR_PARSE);
    topo->links[0].overlay.loss_pct = STRATA_TOPO_UNSET;
    CHECK(strata_topo_validate(topo, err, sizeof err) == STRATA_OK);
    strata_topo_free(topo);
  }
  strata_topo_free(NULL);
  CHECK(strcmp(strata_gpu_model_name(STRATA_GPU_GB200), "gb200") == 0);
  CHECK(strcmp(strata_optics_name(STRATA_OPTICS_OPENZR_PLUS), "openzr+") == 0);
  CHECK(strcmp(strata_extension_kind_name((strata_extension_kind)99), "?") == 0);
  strata_gpu_model gpu;
  CHECK(strata_gpu_model_parse("H200", &gpu) == STRATA_OK && gpu == STRATA_GPU_H200);
  CHECK(strata_gpu_model_parse("v100", &gpu) == STRATA_ERR_INVALID_ARG);
}

int main(void) {
  test_preset_list();
  test_node_presets();
  test_cluster_presets();
  test_link_presets();
  test_examples();
  test_docs_examples();
  test_compact_and_overrides();
  test_malformed();
  test_files_and_validate();
  if (failures) {
    fprintf(stderr, "test_topo_parse: %d failures\n", failures);
    return 1;
  }
  printf("test_topo_parse: ok\n");
  return 0;
}
