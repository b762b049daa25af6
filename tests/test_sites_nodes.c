// SPDX-License-Identifier: Apache-2.0
/*
 * test_sites_nodes.c — the node name -> site lookup of src/topo/nodes.c (exact and numbered
 * group names, the host's short form, SITE/NAME, ambiguity, names the file lacks), and the
 * STRATA_TOPOLOGY / STRATA_NODE variables of src/boot/env.c.
 */
#include <stdlib.h>
#include <string.h>

#include "helpers/check.h"
#include "topo/nodes.h"
#include "topo/topo.h"

static const char yaml[] =
    "sites:\n"
    "  - name: east\n"
    "    nodes:\n"
    "      - {name: gpu, count: 4, gpu: none}\n"
    "      - {name: login, count: 1, gpu: none}\n"
    "      - {count: 2, gpu: none}\n"
    "  - name: west\n"
    "    racks:\n"
    "      - {name: r, count: 2, nodes: {name: gpu, count: 2, gpu: none}}\n"
    "    nodes: {name: gpu7, count: 1, gpu: none}\n"
    "  - name: north\n"
    "    nodes: {name: cpu-a, count: 3, gpu: none}\n";

/* The site of `node`, "" when not found (err in *status). */
static const char *site_of(const strata_topo *topo, const char *node, int *status, char *err,
                           size_t len) {
  int site = -1;
  *status = strata_topo_node_site(topo, node, &site, err, len);
  return *status == STRATA_OK ? topo->sites[site].name : "";
}

static void expect_site(const strata_topo *topo, const char *node, const char *want) {
  int status;
  char err[512];
  const char *got = site_of(topo, node, &status, err, sizeof err);
  CHECK(!strcmp(got, want), "node '%s': site '%s' (%s), expected '%s'", node, got,
        status ? err : "ok", want);
}

static void expect_error(const strata_topo *topo, const char *node, int want_status,
                         const char *want_text) {
  int status;
  char err[512];
  site_of(topo, node, &status, err, sizeof err);
  CHECK(status == want_status, "node '%s': status %s, expected %s", node, strata_err_name(status),
        strata_err_name(want_status));
  CHECK(strstr(err, want_text) != NULL, "node '%s': error '%s' lacks '%s'", node, err, want_text);
}

static void test_lookup(void) {
  strata_topo *topo = NULL;
  char err[512];
  int status = strata_topo_load_string("t.yaml", yaml, strlen(yaml), &topo, err, sizeof err);
  CHECK(status == STRATA_OK, "load: %s", err);
  if (!topo) return;
  expect_site(topo, "login", "east");
  expect_site(topo, "login.dc.example.com", "east"); /* short form */
  expect_site(topo, "north/cpu-a", "north");
  expect_site(topo, "cpu-a2", "north");
  expect_site(topo, "cpu-a-02", "north");
  expect_site(topo, "cpu-a_1.lab", "north");
  expect_site(topo, "gpu7", "west");       /* an exact name beats gpu + 7 of east */
  expect_site(topo, "east/gpu7", "east");  /* ... unless the site is named */
  expect_site(topo, "west/gpu-1", "west"); /* a group inside a rack */
  expect_site(topo, "east/gpu.0", "east");
  expect_error(topo, "gpu3", STRATA_ERR_INVALID_ARG, "SITE/gpu3"); /* east and west */
  expect_error(topo, "gpu3", STRATA_ERR_INVALID_ARG, "site east");
  expect_error(topo, "cpu-b1", STRATA_ERR_NOT_FOUND, "groups: gpu (site east), login");
  expect_error(topo, "login-", STRATA_ERR_NOT_FOUND, "'login-'");
  expect_error(topo, "logins", STRATA_ERR_NOT_FOUND, "'logins'");
  expect_error(topo, "cpu-a-x", STRATA_ERR_NOT_FOUND, "cpu-a-x");
  expect_error(topo, "south/gpu1", STRATA_ERR_NOT_FOUND, "no site 'south'");
  expect_error(topo, "north/login", STRATA_ERR_NOT_FOUND, "groups: cpu-a (site north))");
  expect_error(topo, "", STRATA_ERR_INVALID_ARG, "no node name");
  expect_error(topo, ".x", STRATA_ERR_NOT_FOUND, "'.x'");
  int site = 0;
  CHECK(strata_topo_node_site(NULL, "x", &site, NULL, 0) == STRATA_ERR_INVALID_ARG, "NULL topo");
  CHECK(strata_topo_node_site(topo, "login", &site, NULL, 0) == STRATA_OK, "no err buffer");
  strata_topo_free(topo);

  /* the presets call the nodes of both sites "dgx" */
  status = strata_topo_preset("metro-2-sites", &topo, err, sizeof err);
  CHECK(status == STRATA_OK, "preset: %s", err);
  if (!topo) return;
  expect_site(topo, "metro-b/dgx12", "metro-b");
  expect_error(topo, "dgx12", STRATA_ERR_INVALID_ARG, "ambiguous");
  /* ... and a host's domain may name its site */
  expect_site(topo, "dgx12.metro-b.example.com", "metro-b");
  expect_site(topo, "dgx12.metro-a", "metro-a");
  expect_error(topo, "dgx12.example.com", STRATA_ERR_INVALID_ARG, "ambiguous");
  strata_topo_free(topo);
}

/* A node is found in its own group: one that can hold its number before one that cannot. */
static const char sizes_yaml[] =
    "sites:\n"
    "  - name: small\n"
    "    nodes: {name: gpu, count: 4, gpu: none}\n"
    "  - name: large\n"
    "    nodes: {name: gpu, count: 16, gpu: none}\n"
    "  - name: lab\n"
    "    nodes: {name: cpu, count: 2, gpu: none}\n";

static void test_own_group(void) {
  strata_topo *topo = NULL;
  char err[512];
  int status =
      strata_topo_load_string("sizes.yaml", sizes_yaml, strlen(sizes_yaml), &topo, err, sizeof err);
  CHECK(status == STRATA_OK, "load: %s", err);
  if (!topo) return;
  expect_site(topo, "gpu12", "large");  /* small has gpu0..gpu3 (or gpu1..gpu4) */
  expect_site(topo, "gpu-15", "large"); /* from 0 */
  expect_site(topo, "gpu16", "large");  /* from 1 */
  expect_error(topo, "gpu017", STRATA_ERR_INVALID_ARG, "ambiguous"); /* beyond both */
  expect_error(topo, "gpu3", STRATA_ERR_INVALID_ARG, "ambiguous");   /* both can hold it */
  expect_site(topo, "cpu101", "lab"); /* numbered by rack: the only group of that name */
  expect_site(topo, "large/gpu3", "large");
  strata_topo_free(topo);
}

/* Ranks never read a topology file: STRATA_TOPOLOGY alone is refused with the way to set the
 * site, and beside STRATA_SITE it is ignored. */
static void test_env(void) {
  strata_config cfg;
  char err[512] = "";
  strata_config_init(&cfg);
  unsetenv("STRATA_SITE");
  setenv("STRATA_TOPOLOGY", "/tmp/my cluster.yaml", 1);
  CHECK(strata_config_from_env(&cfg, err, sizeof err) == STRATA_ERR_CONFIG, "topology alone");
  CHECK(strstr(err, "STRATA_TOPOLOGY") && strstr(err, "STRATA_SITE") && strstr(err, "strata site"),
        "message '%s'", err);
  strata_config_init(&cfg);
  setenv("STRATA_SITE", "east", 1);
  CHECK(strata_config_from_env(&cfg, err, sizeof err) == STRATA_OK, "with a site: %s", err);
  CHECK(!strcmp(cfg.site, "east"), "site '%s'", cfg.site);
  unsetenv("STRATA_SITE");
  unsetenv("STRATA_TOPOLOGY");
}

static void test_site_of_node(void) {
  char site[64], err[512];
  CHECK(strata_topo_site_of_node("preset:metro-2-sites", "metro-b/dgx12", site, sizeof site, err,
                                 sizeof err) == STRATA_OK,
        "preset: %s", err);
  CHECK(!strcmp(site, "metro-b"), "site '%s'", site);
  CHECK(strata_topo_site_of_node("preset:metro-2-sites", "nowhere", site, sizeof site, err,
                                 sizeof err) == STRATA_ERR_NOT_FOUND,
        "missing node");
  CHECK(strata_topo_site_of_node("/nonexistent/cluster.yaml", "dgx1", site, sizeof site, err,
                                 sizeof err) != STRATA_OK,
        "missing file");
}

int main(void) {
  test_lookup();
  test_own_group();
  test_env();
  test_site_of_node();
  printf("%s\n", failures ? "FAIL" : "PASS");
  return failures != 0;
}
