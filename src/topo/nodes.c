// SPDX-License-Identifier: Apache-2.0
/* nodes.c — node name -> site of a topology; the rules are in nodes.h. */
#include "topo/nodes.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <stdlib.h>

/* From worst to best. A number the group cannot hold (past its count, from 0 or from 1) still
 * matches, since some sites number hosts by rack (gpu101..gpu116), but any group that can hold
 * the node is its own group before one that cannot. */
enum { MATCH_NONE = 0, MATCH_NUMBERED_BEYOND = 1, MATCH_NUMBERED = 2, MATCH_EXACT = 3 };

/* How `node` (len bytes, not NUL-terminated) names a node of `group`. */
static int match_group(const strata_topo_node_group *group, const char *node, size_t len) {
  size_t glen = strlen(group->name);
  if (!glen || glen > len || strncmp(group->name, node, glen) != 0) return MATCH_NONE;
  if (glen == len) return MATCH_EXACT;
  size_t i = glen;
  if (strchr("-_.", node[i])) i++;
  if (i == len) return MATCH_NONE;
  int64_t number = 0;
  for (; i < len; i++) {
    if (!isdigit((unsigned char)node[i])) return MATCH_NONE;
    if (number <= group->count) number = number * 10 + (node[i] - '0');
  }
  return number <= group->count ? MATCH_NUMBERED : MATCH_NUMBERED_BEYOND;
}

typedef struct node_search {
  int best;      /* MATCH_* of the best groups found so far */
  int site;      /* the site of the first group at that level */
  int other;     /* another site at that level, -1 none: ambiguous */
  int group;     /* the first such group */
  int group_two; /* a group of `other` */
} node_search;

/* Looks `node` (len bytes) up among the groups of site `only` (-1: every site). */
static node_search search_groups(const strata_topo *topo, int only, const char *node, size_t len) {
  node_search s = {.best = MATCH_NONE, .site = -1, .other = -1, .group = -1, .group_two = -1};
  for (int g = 0; g < topo->group_count; g++) {
    const strata_topo_node_group *group = &topo->groups[g];
    if (only >= 0 && group->site != only) continue;
    int level = match_group(group, node, len);
    if (level == MATCH_NONE || level < s.best) continue;
    if (level > s.best) {
      s = (node_search){
          .best = level, .site = group->site, .other = -1, .group = g, .group_two = -1};
    } else if (group->site != s.site && s.other < 0) {
      s.other = group->site, s.group_two = g;
    }
  }
  return s;
}

/* The full name first, then its short form. */
static node_search search_name(const strata_topo *topo, int only, const char *name) {
  size_t len = strlen(name);
  node_search s = search_groups(topo, only, name, len);
  const char *dot = strchr(name, '.');
  if (s.best == MATCH_NONE && dot && dot > name)
    s = search_groups(topo, only, name, (size_t)(dot - name));
  return s;
}

/* A name matching groups of two sites whose domain names one of them — host
 * "dgx12.metro-b.example.com" where both sites call their nodes dgx — is that site's node: the
 * first label after the host's own that is a site's name decides, as SITE/NAME would. */
static node_search search_domain(const strata_topo *topo, const char *name, node_search s) {
  const char *label = strchr(name, '.');
  char site_name[STRATA_TOPO_NAME_MAX];
  while (label) {
    label++;
    const char *end = strchr(label, '.');
    size_t len = end ? (size_t)(end - label) : strlen(label);
    if (len && len < sizeof site_name) {
      memcpy(site_name, label, len);
      site_name[len] = '\0';
      int site = strata_topo_site_index(topo, site_name);
      if (site >= 0) {
        node_search in_site = search_name(topo, site, name);
        if (in_site.best == s.best) return in_site;
      }
    }
    label = end;
  }
  return s;
}

/* "a (site x), b (site y), ..." for an error message. */
static void list_groups(const strata_topo *topo, int only, char *text, size_t cap) {
  size_t used = 0;
  int listed = 0;
  text[0] = '\0';
  for (int g = 0; g < topo->group_count && used < cap; g++) {
    const strata_topo_node_group *group = &topo->groups[g];
    if ((only >= 0 && group->site != only) || !group->name[0]) continue;
    if (listed == 8) {
      snprintf(text + used, cap - used, ", ...");
      return;
    }
    int n = snprintf(text + used, cap - used, "%s%s (site %s)", listed ? ", " : "", group->name,
                     topo->sites[group->site].name);
    if (n < 0) return;
    used += (size_t)n;
    listed++;
  }
  if (!listed) snprintf(text, cap, "none: give node groups a name:");
}

static int set_error(char *err, size_t err_len, int status, const char *fmt, const char *a,
                     const char *b, const char *c) {
  if (err && err_len) snprintf(err, err_len, fmt, a, b, c);
  return status;
}

int strata_topo_node_site(const strata_topo *topo, const char *node, int *site, char *err,
                          size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (!topo || !node || !site || !node[0])
    return set_error(err, err_len, STRATA_ERR_INVALID_ARG, "%s%s%s", "no node name", "", "");
  int only = -1;
  const char *name = node;
  char site_name[STRATA_TOPO_NAME_MAX];
  const char *slash = strchr(node, '/');
  if (slash) {
    snprintf(site_name, sizeof site_name, "%.*s", (int)(slash - node), node);
    only = strata_topo_site_index(topo, site_name);
    if (only < 0 || (size_t)(slash - node) >= sizeof site_name)
      return set_error(err, err_len, STRATA_ERR_NOT_FOUND, "node '%s': no site '%s'%s", node,
                       site_name, " in the topology");
    name = slash + 1;
  }
  node_search s = search_name(topo, only, name);
  if (s.other >= 0 && only < 0) s = search_domain(topo, name, s);
  char groups[512];
  if (s.best == MATCH_NONE) {
    list_groups(topo, only, groups, sizeof groups);
    return set_error(err, err_len, STRATA_ERR_NOT_FOUND,
                     "node '%s' is in no node group of the topology (a node is GROUP, GROUP<n>, "
                     "GROUP-<n> or SITE/GROUP<n>; groups: %s%s)",
                     node, groups, "");
  }
  if (s.other >= 0) {
    char both[320];
    snprintf(both, sizeof both, "'%s' of site %s and '%s' of site %s", topo->groups[s.group].name,
             topo->sites[s.site].name, topo->groups[s.group_two].name, topo->sites[s.other].name);
    return set_error(err, err_len, STRATA_ERR_INVALID_ARG,
                     "node '%s' is ambiguous: it matches node groups %s; name it SITE/%s", node,
                     both, name);
  }
  *site = s.site;
  return STRATA_OK;
}

int strata_topo_this_node(char *node, size_t len) {
  const char *named = getenv("STRATA_NODE");
  if (!node || len < 2) return STRATA_ERR_INVALID_ARG;
  if (named && *named) {
    snprintf(node, len, "%s", named);
    return STRATA_OK;
  }
  if (gethostname(node, len - 1) != 0) return STRATA_ERR_SYSTEM;
  node[len - 1] = '\0';
  return STRATA_OK;
}

int strata_topo_site_of_node(const char *source, const char *node, char *site, size_t site_len,
                             char *err, size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (!source || !node || !site || !site_len) return STRATA_ERR_INVALID_ARG;
  static const char preset[] = "preset:";
  strata_topo *topo = NULL;
  int status = !strncmp(source, preset, sizeof preset - 1)
                   ? strata_topo_preset(source + sizeof preset - 1, &topo, err, err_len)
                   : strata_topo_load_file(source, &topo, err, err_len);
  if (status != STRATA_OK) return status;
  int index = -1;
  status = strata_topo_node_site(topo, node, &index, err, err_len);
  if (status == STRATA_OK) snprintf(site, site_len, "%s", topo->sites[index].name);
  strata_topo_free(topo);
  return status;
}
