// SPDX-License-Identifier: Apache-2.0
/* preset.h — a built-in topology for the planner tests; a preset that fails to load is a counted
 * failure (check.h) and NULL. */
#ifndef STRATA_TESTS_PRESET_H
#define STRATA_TESTS_PRESET_H

#include "helpers/check.h"
#include "topo/topo.h"

static strata_topo *preset(const char *name) {
  char err[512];
  strata_topo *t = NULL;
  int status = strata_topo_preset(name, &t, err, sizeof err);
  CHECK(status == STRATA_OK, "preset %s: %s", name, err);
  return t;
}

#endif
