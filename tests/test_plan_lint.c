// SPDX-License-Identifier: Apache-2.0
/* test_plan_lint.c — every lint of the catalog is tripped by a topology in tests/data (the file
 * names the lint and the workload in its header), and no preset trips any lint with the workload
 * `strata plan` picks for it.
 *
 * Headers of tests/data/lint-*.yaml and clean-*.yaml:
 *   # lint: ID            the plan must have this finding (every lint-*.yaml has one)
 *   # not-lint: ID        the plan must not (clean-*.yaml: a design that only looks like a mistake)
 *   # ruled-out: OPTION   the option is shown, not possible, with the lint's id as ruled_out_by
 *                         and in its note, and is not the decision (the lint is an error)
 *   # workload: KIND --flag value ... */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "topo/topo.h"

static int failures;

static const char *data_dir(void) {
  static char dir[1024];
  const char *src = getenv("STRATA_SOURCE_DIR");
  snprintf(dir, sizeof dir, "%s/tests/data", src ? src : ".");
  return dir;
}

/* "# workload: KIND --flag value ..." → a workload (only the flags the data files use). */
static int parse_workload(const char *line, strata_workload *w) {
  char buf[256], *save = NULL;
  snprintf(buf, sizeof buf, "%s", line);
  char *tok = strtok_r(buf, " \t\n", &save);
  strata_workload_kind kind;
  if (!tok || strata_workload_kind_parse(tok, &kind) != STRATA_OK) return -1;
  strata_workload_defaults(w, kind);
  while ((tok = strtok_r(NULL, " \t\n", &save))) {
    if (!strcmp(tok, "--cross-site-pipeline")) {
      w->cross_site_pipeline = 1;
      continue;
    }
    char *val = strtok_r(NULL, " \t\n", &save);
    if (!val) return -1;
    if (!strcmp(tok, "--inner-steps"))
      w->inner_steps = atoi(val);
    else if (!strcmp(tok, "--update-fraction"))
      w->update_fraction = atof(val);
    else if (!strcmp(tok, "--replicas-per-site"))
      w->replicas_per_site = atoi(val);
    else if (!strcmp(tok, "--token-ms"))
      w->token_ms = atof(val);
    else if (!strcmp(tok, "--streams"))
      w->wan_streams = atoi(val);
    else if (!strcmp(tok, "--params"))
      w->params = atof(val);
    else if (!strcmp(tok, "--sync-every"))
      w->sync_every = atoi(val);
    else if (!strcmp(tok, "--rl-sync")) {
      if (strata_rl_sync_parse(val, &w->rl_sync) != STRATA_OK) return -1;
    } else
      return -1;
  }
  return 0;
}

static int has_finding(const strata_plan *p, const char *id) {
  for (int i = 0; i < p->finding_count; i++)
    if (!strcmp(p->findings[i].id, id)) return 1;
  return 0;
}

static const strata_finding *find_finding(const strata_plan *p, const char *id) {
  for (int i = 0; i < p->finding_count; i++)
    if (!strcmp(p->findings[i].id, id)) return &p->findings[i];
  return NULL;
}

/* The file's `# ruled-out: OPTION` holds: the option is there, not possible because of the
 * error finding `id`, and not chosen. */
static int check_ruled_out(const char *path, const strata_plan *p, const char *option,
                           const char *id) {
  const strata_finding *fd = find_finding(p, id);
  const strata_plan_option *o = NULL;
  for (int i = 0; i < p->option_count; i++)
    if (!strcmp(p->options[i].name, option)) o = &p->options[i];
  int rc = 0;
  if (!fd || fd->severity != STRATA_SEVERITY_ERROR) {
    printf("FAIL %s: %s rules %s out only as an error finding\n", path, id, option);
    rc = -1;
  }
  if (!o) {
    printf("FAIL %s: no option %s to show as not possible\n", path, option);
    return -1;
  }
  if (o->available || strcmp(o->ruled_out_by, id) || !strstr(o->note, id)) {
    printf(
        "FAIL %s: option %s available=%d ruled_out_by='%s' note='%s', expected not possible "
        "by %s\n",
        path, option, o->available, o->ruled_out_by, o->note, id);
    rc = -1;
  }
  if (!strcmp(p->decision, option)) {
    printf("FAIL %s: the decision is %s although %s rules it out\n", path, option, id);
    rc = -1;
  }
  return rc;
}

#define MAX_NOT_LINTS 4

/* Returns the lint id the file trips (into `id`, "" for a clean-*.yaml), 0 on success. */
static int check_file(const char *path, char *id, size_t id_len) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512], workload[256] = "", ruled_out[64] = "", not_lint[MAX_NOT_LINTS][64];
  int not_lints = 0;
  id[0] = 0;
  while (fgets(line, sizeof line, f) && line[0] == '#') {
    if (!strncmp(line, "# lint: ", 8))
      snprintf(id, id_len, "%.*s", (int)strcspn(line + 8, "\n"), line + 8);
    if (!strncmp(line, "# not-lint: ", 12) && not_lints < MAX_NOT_LINTS)
      snprintf(not_lint[not_lints++], sizeof not_lint[0], "%.*s", (int)strcspn(line + 12, "\n"),
               line + 12);
    if (!strncmp(line, "# ruled-out: ", 13))
      snprintf(ruled_out, sizeof ruled_out, "%.*s", (int)strcspn(line + 13, "\n"), line + 13);
    if (!strncmp(line, "# workload: ", 12))
      snprintf(workload, sizeof workload, "%.200s", line + 12);
  }
  fclose(f);
  strata_workload w;
  if ((!id[0] && !not_lints) || parse_workload(workload, &w) != 0 || (ruled_out[0] && !id[0])) {
    printf("FAIL %s: header needs '# lint: ID' or '# not-lint: ID', and '# workload: KIND ...'\n",
           path);
    return -1;
  }
  char err[512];
  strata_topo *topo = NULL;
  if (strata_topo_load_file(path, &topo, err, sizeof err) != STRATA_OK) {
    printf("FAIL %s does not load: %s\n", path, err);
    return -1;
  }
  strata_plan plan;
  int rc = strata_plan_build(topo, &w, &plan, err, sizeof err);
  if (rc != STRATA_OK) {
    printf("FAIL %s: plan: %s\n", path, err);
  } else {
    for (int i = 0; i < not_lints; i++)
      if (has_finding(&plan, not_lint[i])) {
        printf("FAIL %s trips %s: %s\n", path, not_lint[i],
               find_finding(&plan, not_lint[i])->message);
        rc = -1;
      }
    if (ruled_out[0] && check_ruled_out(path, &plan, ruled_out, id) != 0) rc = -1;
    if (id[0] && !has_finding(&plan, id)) {
      printf("FAIL %s does not trip %s (found:", path, id);
      for (int i = 0; i < plan.finding_count; i++) printf(" %s", plan.findings[i].id);
      printf(")\n");
      rc = -1;
    }
    for (int i = 0; i < plan.finding_count; i++) {
      const strata_finding *fd = &plan.findings[i];
      if (!fd->message[0] || !fd->fix[0] || fd->layer < 1 || fd->layer > 4) {
        printf("FAIL %s: finding %s lacks message, fix or layer\n", path, fd->id);
        rc = -1;
      }
    }
    strata_plan_free(&plan);
  }
  strata_topo_free(topo);
  return rc;
}

static void test_data_files(void) {
  size_t n = strata_lint_count();
  int *covered = calloc(n, sizeof *covered);
  DIR *d = opendir(data_dir());
  if (!d || !covered) {
    printf("FAIL cannot open %s\n", data_dir());
    failures++;
    free(covered);
    if (d) closedir(d);
    return;
  }
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if ((strncmp(e->d_name, "lint-", 5) && strncmp(e->d_name, "clean-", 6)) || len < 6 ||
        strcmp(e->d_name + len - 5, ".yaml"))
      continue;
    char path[2048], id[64];
    snprintf(path, sizeof path, "%s/%s", data_dir(), e->d_name);
    files++;
    if (check_file(path, id, sizeof id) != 0) {
      failures++;
      continue;
    }
    for (size_t i = 0; i < n; i++)
      if (!strcmp(strata_lint_get(i)->id, id)) covered[i] = 1;
  }
  closedir(d);
  for (size_t i = 0; i < n; i++)
    if (!covered[i]) {
      printf("FAIL lint %s has no tests/data/lint-*.yaml that trips it\n", strata_lint_get(i)->id);
      failures++;
    }
  printf("%d lint files, %zu lints\n", files, n);
  free(covered);
}

static void test_presets_clean(void) {
  for (size_t i = 0; i < strata_topo_preset_count(); i++) {
    const char *name = strata_topo_preset_name(i);
    char err[512];
    strata_topo *topo = NULL;
    if (strata_topo_preset(name, &topo, err, sizeof err) != STRATA_OK) {
      printf("FAIL preset %s: %s\n", name, err);
      failures++;
      continue;
    }
    strata_workload w;
    strata_workload_defaults(&w, strata_workload_auto(topo));
    strata_plan plan;
    if (strata_plan_build(topo, &w, &plan, err, sizeof err) != STRATA_OK) {
      printf("FAIL preset %s: plan: %s\n", name, err);
      failures++;
    } else {
      for (int f = 0; f < plan.finding_count; f++) {
        printf("FAIL preset %s trips %s: %s\n", name, plan.findings[f].id,
               plan.findings[f].message);
        failures++;
      }
      strata_plan_free(&plan);
    }
    strata_topo_free(topo);
  }
}

static void test_catalog(void) {
  for (size_t i = 0; i < strata_lint_count(); i++) {
    const strata_lint_info *a = strata_lint_get(i);
    for (size_t j = i + 1; j < strata_lint_count(); j++)
      if (!strcmp(a->id, strata_lint_get(j)->id)) {
        printf("FAIL duplicate lint id %s\n", a->id);
        failures++;
      }
    if (a->layer < 1 || a->layer > 4 || !a->summary[0]) {
      printf("FAIL lint %s malformed\n", a->id);
      failures++;
    }
  }
  if (strata_lint_get(strata_lint_count()) != NULL) {
    printf("FAIL catalog bounds\n");
    failures++;
  }
}

int main(void) {
  test_catalog();
  test_data_files();
  test_presets_clean();
  if (failures) return 1;
  printf("ok\n");
  return 0;
}
