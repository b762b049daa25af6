// SPDX-License-Identifier: Apache-2.0
/*
 * presets.c — the built-in topologies, kept as YAML text and parsed by the same parser as a file,
 * so every preset is also a parser test (tests/test_topo_parse.c loads each one).
 *
 * The node presets (dgx-a100, dgx-h100, hgx-b200, gb200-nvl72) double as node templates:
 * `nodes: {count: 12500, template: dgx-h100}`. Each number in a comment names its source. A
 * preset must stay valid and lint-clean; change one only together with the tests that read it.
 */
#include <string.h>

#include "topo/topo_internal.h"

typedef struct preset {
  const char *name;
  const char *description;
  const char *yaml;
} preset;

static const char yaml_dgx_a100[] =
    "# One NVIDIA DGX A100: 8 A100 80GB joined by NVLink3 through NVSwitch (600 GB/s per GPU,\n"
    "# NVIDIA NVLink page), 8 HDR InfiniBand ports for the compute fabric, 2 Ethernet ports for "
    "storage.\n"
    "name: dgx-a100\n"
    "description: one DGX A100 - 8x A100 80GB, NVLink3 + NVSwitch, 8x HDR InfiniBand\n"
    "sites:\n"
    "  - name: dc\n"
    "    nodes:\n"
    "      name: dgx-a100\n"
    "      count: 1\n"
    "      gpu: a100\n"
    "      gpus: 8\n"
    "      gpu_memory_gb: 80\n"
    "      intra: {kind: nvlink, nvlink: 3, nvswitch_domain: 8, pcie: 4}\n"
    "      nics:\n"
    "        - {kind: infiniband, speed: hdr, count: 8, gpudirect_rdma: true}\n"
    "        - {kind: ethernet, role: storage, count: 2, gbps: 200}\n";

static const char yaml_dgx_h100[] =
    "# One NVIDIA DGX H100: 8 H100 80GB on NVLink4 through NVSwitch (900 GB/s per GPU,\n"
    "# NVIDIA/nccl#1442), 8 NDR InfiniBand ports (ConnectX-7, 400 Gb/s each), 2 storage ports.\n"
    "name: dgx-h100\n"
    "description: one DGX H100 - 8x H100 80GB, NVLink4 + NVSwitch, 8x NDR InfiniBand\n"
    "sites:\n"
    "  - name: dc\n"
    "    nodes:\n"
    "      name: dgx-h100\n"
    "      count: 1\n"
    "      gpu: h100\n"
    "      gpus: 8\n"
    "      gpu_memory_gb: 80\n"
    "      intra: {kind: nvlink, nvlink: 4, nvswitch_domain: 8, pcie: 5}\n"
    "      nics:\n"
    "        - {kind: infiniband, speed: ndr, count: 8, gpudirect_rdma: true}\n"
    "        - {kind: ethernet, role: storage, count: 2, gbps: 400}\n";

static const char yaml_hgx_b200[] =
    "# One HGX B200 server: 8 B200 on NVLink5 through NVSwitch (1.8 TB/s per GPU,\n"
    "# NVIDIA GPU Operator docs, dra-cds), 8 NDR InfiniBand ports.\n"
    "name: hgx-b200\n"
    "description: one HGX B200 - 8x B200, NVLink5 + NVSwitch, 8x NDR InfiniBand\n"
    "sites:\n"
    "  - name: dc\n"
    "    nodes:\n"
    "      name: hgx-b200\n"
    "      count: 1\n"
    "      gpu: b200\n"
    "      gpus: 8\n"
    "      gpu_memory_gb: 180\n"
    "      intra: {kind: nvlink, nvlink: 5, nvswitch_domain: 8, pcie: 5}\n"
    "      nics:\n"
    "        - {kind: infiniband, speed: ndr, count: 8, gpudirect_rdma: true}\n"
    "        - {kind: ethernet, role: storage, count: 2, gbps: 400}\n";

static const char yaml_gb200_nvl72[] =
    "# One GB200 NVL72 rack: 18 compute trays of 4 Blackwell GPUs, all 72 in one NVLink5 NVSwitch\n"
    "# domain (72 GPUs per NVL72, NVIDIA docs); each tray has 4 NDR InfiniBand ports for "
    "scale-out.\n"
    "name: gb200-nvl72\n"
    "description: one GB200 NVL72 rack - 18 trays x 4 GPUs in one 72-GPU NVLink5 domain\n"
    "sites:\n"
    "  - name: dc\n"
    "    fabric: {kind: infiniband, speed: ndr, sharp: true, oversubscription: 1}\n"
    "    racks:\n"
    "      - name: nvl72\n"
    "        count: 1\n"
    "        nodes:\n"
    "          name: gb200-tray\n"
    "          count: 18\n"
    "          gpu: gb200\n"
    "          gpus: 4\n"
    "          gpu_memory_gb: 186\n"
    "          intra: {kind: nvlink, nvlink: 5, nvswitch_domain: 72, pcie: 5}\n"
    "          nics:\n"
    "            - {kind: infiniband, speed: ndr, count: 4, gpudirect_rdma: true}\n"
    "            - {kind: ethernet, role: storage, count: 2, gbps: 400}\n";

static const char yaml_ib_cluster[] =
    "# 32 DGX H100 (256 GPUs) on a non-blocking, rail-optimized NDR InfiniBand fat tree whose "
    "switches\n"
    "# can reduce in the network (SHARP).\n"
    "name: ib-cluster\n"
    "description: 32x DGX H100 (256 GPUs) on a non-blocking NDR InfiniBand fat tree with SHARP\n"
    "sites:\n"
    "  - name: dc\n"
    "    fabric: {kind: infiniband, speed: ndr, sharp: true, oversubscription: 1, rail_optimized: "
    "true}\n"
    "    nodes: {name: dgx, count: 32, template: dgx-h100}\n";

static const char yaml_roce_cluster[] =
    "# 64 HGX H100 servers (512 GPUs) on a lossless RoCEv2 fabric: 8x 400G RoCE NICs per server, "
    "PFC\n"
    "# on the RDMA priority and ECN for DCQCN (Cumulus Linux RoCE docs), 64 MB-buffer switches "
    "(Trident4).\n"
    "name: roce-cluster\n"
    "description: 64x HGX H100 (512 GPUs) on a lossless 400G RoCEv2 fabric (PFC + ECN)\n"
    "sites:\n"
    "  - name: dc\n"
    "    fabric: {kind: roce, link_gbps: 400, pfc: true, ecn: true, oversubscription: 1,\n"
    "             switch_buffer_mb: 64, rail_optimized: true}\n"
    "    nodes:\n"
    "      name: hgx-h100\n"
    "      count: 64\n"
    "      template: dgx-h100\n"
    "      nics:\n"
    "        - {kind: roce, count: 8, gbps: 400, gpudirect_rdma: true, pfc: true, ecn: true}\n"
    "        - {kind: ethernet, role: storage, count: 2, gbps: 200}\n";

static const char yaml_campus_2_buildings[] =
    "# Two buildings of one campus, 2 km apart on owned dark fiber, their InfiniBand fabrics "
    "joined into\n"
    "# one by MetroX (MetroX-3 reach 40 km, per trade press) so per-step collectives may cross.\n"
    "name: campus-2-buildings\n"
    "description: two buildings 2 km apart, 16x DGX H100 each, one InfiniBand fabric via MetroX\n"
    "sites:\n"
    "  - name: bldg-a\n"
    "    campus: campus\n"
    "    fabric: {kind: infiniband, speed: ndr, sharp: true, oversubscription: 1}\n"
    "    nodes: {name: dgx, count: 16, template: dgx-h100}\n"
    "  - name: bldg-b\n"
    "    campus: campus\n"
    "    fabric: {kind: infiniband, speed: ndr, sharp: true, oversubscription: 1}\n"
    "    nodes: {name: dgx, count: 16, template: dgx-h100}\n"
    "links:\n"
    "  - name: campus-fiber\n"
    "    between: [bldg-a, bldg-b]\n"
    "    physical: {kind: dark_fiber, km: 2, optics: grey, capacity_gbps: 12800}\n"
    "    extension: {kind: metrox, gbps: 12800}\n"
    "    overlay: none\n";

static const char yaml_metro_2_sites[] =
    "# Two datacenters of one metro, 30 km of dark fiber lit with 400ZR (reach ~120 km per\n"
    "# Juniper's coherent-optics docs), InfiniBand extended across by MetroX (MetroX-3 reach\n"
    "# 40 km per trade press).\n"
    "name: metro-2-sites\n"
    "description: two datacenters 30 km apart, 32x DGX H100 each, DWDM 400ZR + MetroX\n"
    "sites:\n"
    "  - name: metro-a\n"
    "    region: metro west\n"
    "    fabric: {kind: infiniband, speed: ndr, sharp: true, oversubscription: 1}\n"
    "    nodes: {name: dgx, count: 32, template: dgx-h100}\n"
    "  - name: metro-b\n"
    "    region: metro east\n"
    "    fabric: {kind: infiniband, speed: ndr, sharp: true, oversubscription: 1}\n"
    "    nodes: {name: dgx, count: 32, template: dgx-h100}\n"
    "links:\n"
    "  - name: metro-fiber\n"
    "    between: [metro-a, metro-b]\n"
    "    physical: {kind: dark_fiber, km: 30, optics: 400zr, capacity_gbps: 6400, wavelengths: "
    "16}\n"
    "    extension: {kind: metrox, gbps: 6400}\n"
    "    overlay: none\n";

static const char yaml_regions_2[] =
    "# Two regions 800 km apart on a leased DWDM wave with OpenZR+ optics (~450-1000+ km per\n"
    "# Juniper's docs). Too far for fabric extension: the link is routed IP on owned capacity,\n"
    "# no overlay needed since the path is private end to end.\n"
    "name: regions-2\n"
    "description: two regions 800 km apart, 64x DGX H100 each, DWDM OpenZR+, routed IP (no "
    "extension)\n"
    "sites:\n"
    "  - name: region-a\n"
    "    region: Frankfurt\n"
    "    location: {lat: 50.11, lon: 8.68}\n"
    "    fabric: {kind: infiniband, speed: ndr, sharp: true, oversubscription: 1}\n"
    "    nodes: {name: dgx, count: 64, template: dgx-h100}\n"
    "  - name: region-b\n"
    "    region: Paris\n"
    "    location: {lat: 48.86, lon: 2.35}\n"
    "    fabric: {kind: infiniband, speed: ndr, sharp: true, oversubscription: 1}\n"
    "    nodes: {name: dgx, count: 64, template: dgx-h100}\n"
    "links:\n"
    "  - name: long-haul\n"
    "    between: [region-a, region-b]\n"
    "    physical: {kind: dwdm, km: 800, optics: openzr+, capacity_gbps: 1600, wavelengths: 4}\n"
    "    extension: none\n"
    "    overlay: {kind: none, transit: private}\n";

static const char yaml_multicloud_wireguard[] =
    "# Three clouds joined by WireGuard over the public internet (nobody owns the path end to "
    "end).\n"
    "# RTT and single-flow bandwidth are the measured AWS region pairs of the DS3Lab/DT-FM\n"
    "# scheduler config (Virginia-Ohio 11 ms / 1.12 Gb/s, Oregon-Virginia 67 ms / 0.79 Gb/s); the\n"
    "# third pair is an estimate between them. MTU 1420 = 1500 - 80 B WireGuard over IPv6\n"
    "# (Donenfeld, WireGuard mailing list, 2017).\n"
    "name: multicloud-wireguard\n"
    "description: three clouds (AWS, GCP, Azure) joined by WireGuard over the internet\n"
    "sites:\n"
    "  - name: aws\n"
    "    provider: aws\n"
    "    region: us-east-1 (Virginia)\n"
    "    fabric: {kind: ethernet, link_gbps: 400}\n"
    "    nodes: {name: p5, count: 4, template: dgx-h100,\n"
    "            nics: [{kind: ethernet, count: 32, gbps: 100, gpudirect_rdma: true}]}\n"
    "  - name: gcp\n"
    "    provider: gcp\n"
    "    region: us-east5 (Ohio)\n"
    "    fabric: {kind: ethernet, link_gbps: 200}\n"
    "    nodes: {name: a3, count: 4, template: dgx-h100,\n"
    "            nics: [{kind: ethernet, count: 8, gbps: 200, gpudirect_rdma: true}]}\n"
    "  - name: azure\n"
    "    provider: azure\n"
    "    region: westus2 (Washington)\n"
    "    fabric: {kind: infiniband, speed: ndr, oversubscription: 1}\n"
    "    nodes: {name: nd-h100-v5, count: 4, template: dgx-h100}\n"
    "links:\n"
    "  - between: [aws, gcp]\n"
    "    physical: internet\n"
    "    overlay: {kind: wireguard, transit: internet, site_to_site: false, rtt_ms: 11,\n"
    "              bandwidth_gbps: 1.12, mtu_bytes: 1420}\n"
    "  - between: [aws, azure]\n"
    "    physical: internet\n"
    "    overlay: {kind: wireguard, transit: internet, site_to_site: false, rtt_ms: 67,\n"
    "              bandwidth_gbps: 0.79, mtu_bytes: 1420}\n"
    "  - between: [gcp, azure]\n"
    "    physical: internet\n"
    "    overlay: {kind: wireguard, transit: internet, site_to_site: false, rtt_ms: 60,\n"
    "              bandwidth_gbps: 0.9, mtu_bytes: 1420}\n";

static const preset presets[] = {
    {"dgx-a100", "one DGX A100 - 8x A100 80GB, NVLink3 + NVSwitch, 8x HDR InfiniBand",
     yaml_dgx_a100},
    {"dgx-h100", "one DGX H100 - 8x H100 80GB, NVLink4 + NVSwitch, 8x NDR InfiniBand",
     yaml_dgx_h100},
    {"hgx-b200", "one HGX B200 - 8x B200, NVLink5 + NVSwitch, 8x NDR InfiniBand", yaml_hgx_b200},
    {"gb200-nvl72", "one GB200 NVL72 rack - 18 trays x 4 GPUs in one 72-GPU NVLink5 domain",
     yaml_gb200_nvl72},
    {"ib-cluster", "32x DGX H100 (256 GPUs) on a non-blocking NDR InfiniBand fat tree with SHARP",
     yaml_ib_cluster},
    {"roce-cluster", "64x HGX H100 (512 GPUs) on a lossless 400G RoCEv2 fabric (PFC + ECN)",
     yaml_roce_cluster},
    {"campus-2-buildings",
     "two buildings 2 km apart, 16x DGX H100 each, one InfiniBand fabric via MetroX",
     yaml_campus_2_buildings},
    {"metro-2-sites", "two datacenters 30 km apart, 32x DGX H100 each, DWDM 400ZR + MetroX",
     yaml_metro_2_sites},
    {"regions-2",
     "two regions 800 km apart, 64x DGX H100 each, DWDM OpenZR+, routed IP (no extension)",
     yaml_regions_2},
    {"multicloud-wireguard", "three clouds (AWS, GCP, Azure) joined by WireGuard over the internet",
     yaml_multicloud_wireguard},
};

#define PRESET_COUNT (sizeof presets / sizeof presets[0])

size_t strata_topo_preset_count(void) {
  return PRESET_COUNT;
}

const char *strata_topo_preset_name(size_t index) {
  return index < PRESET_COUNT ? presets[index].name : NULL;
}

const char *strata_topo_preset_description(size_t index) {
  return index < PRESET_COUNT ? presets[index].description : NULL;
}

const char *strata_topo_preset_yaml(const char *name) {
  for (size_t i = 0; name != NULL && i < PRESET_COUNT; i++)
    if (strcmp(presets[i].name, name) == 0) return presets[i].yaml;
  return NULL;
}

int strata_topo_preset(const char *name, strata_topo **out, char *err, size_t err_len) {
  if (out != NULL) *out = NULL;
  if (err != NULL && err_len > 0) err[0] = '\0';
  if (name == NULL || out == NULL) return STRATA_ERR_INVALID_ARG;
  const char *yaml = strata_topo_preset_yaml(name);
  if (yaml == NULL) {
    char list[400] = "";
    size_t used = 0;
    for (size_t i = 0; i < PRESET_COUNT; i++) {
      size_t len = strlen(presets[i].name);
      if (used + len + 3 >= sizeof list) break;
      if (used) {
        memcpy(list + used, ", ", 2);
        used += 2;
      }
      memcpy(list + used, presets[i].name, len + 1);
      used += len;
    }
    strata_topo_errorf(err, err_len, "preset", (strata_topo_mark){0, 0},
                       "expected one of %s, got '%.64s'", list, name);
    return STRATA_ERR_NOT_FOUND;
  }
  char source[STRATA_TOPO_NAME_MAX + 8];
  size_t len = strlen(name);
  memcpy(source, "preset:", 7);
  memcpy(source + 7, name, len + 1);
  return strata_topo_load_string_depth(source, yaml, strlen(yaml), 0, out, err, err_len);
}
