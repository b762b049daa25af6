/* preset.h — a built-in topology for the planner tests; a preset that fails to load is a counted
 * failure (the including test defines `failures`, e.g. through check.h) and NULL. */
#ifndef STRATA_TESTS_PRESET_H
#define STRATA_TESTS_PRESET_H

#include <stdio.h>

#include "topo/topo.h"

static strata_topo *preset(const char *name) {
  char err[512];
  strata_topo *t = NULL;
  if (strata_topo_preset(name, &t, err, sizeof err) != STRATA_OK) {
    printf("FAIL preset %s: %s\n", name, err);
    failures++;
  }
  return t;
}

#endif
