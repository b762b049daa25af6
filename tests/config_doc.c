// SPDX-License-Identifier: Apache-2.0
/*
 * config_doc.c — prints the table of every environment variable (src/boot/settings.c):
 *   config_doc --markdown   docs/config.md's generated tables
 *   config_doc --names      one "SCOPE NAME" line per variable (launchers' lists split)
 * tests/test_config_doc.sh compares the first with the page and the second with the names the
 * sources read; scripts/config_doc.sh writes the first into the page.
 */
#include <stdio.h>
#include <string.h>

#include "boot/settings.h"

static const char *const scopes[] = {"config", "kv", "launcher", "command", "foreign"};

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--markdown")) {
    strata_settings_markdown(stdout);
    return 0;
  }
  if (argc == 2 && !strcmp(argv[1], "--names")) {
    size_t count;
    const strata_setting *rows = strata_settings(&count);
    for (size_t i = 0; i < count; i++) {
      char names[256];
      snprintf(names, sizeof names, "%s", rows[i].name);
      for (char *name = strtok(names, ", "); name; name = strtok(NULL, ", "))
        printf("%s %s\n", scopes[rows[i].scope], name);
    }
    return 0;
  }
  fprintf(stderr, "usage: config_doc --markdown | --names\n");
  return 2;
}
