// SPDX-License-Identifier: Apache-2.0
/*
 * nodes.h — which site of a topology holds a node named by its host name.
 *
 * The topology format describes nodes as groups of N identical nodes (topo.h), never one object
 * per node, so a node has no name of its own. A host is found by its group's name instead:
 *
 *   - "GROUP"          the group named GROUP (a group of one node, typically);
 *   - "GROUP<digits>", "GROUP-<digits>", "GROUP_<digits>", "GROUP.<digits>"
 *                      a numbered node of the group named GROUP (dgx7, dgx-007, cpu_3). Sites
 *                      number their hosts from 0 or from 1, with or without zero padding, so a
 *                      group of count N holds the numbers 0..N; a number past that still
 *                      matches (hosts numbered by rack, gpu101..gpu116), but only where no
 *                      group that can hold it matches;
 *   - "SITE/NAME"      NAME as above, looked up in site SITE only (two sites of one file may
 *                      both call their nodes "dgx", as the presets do).
 * So a node finds its own group: an exact group name first, then a group that can hold its
 * number, then one that cannot. A name matching groups of two different sites at the same level
 * is ambiguous (an error naming both; qualify it as SITE/NAME) unless a label of its domain is
 * one of those sites' names: host "dgx12.metro-b.example.com" is node dgx12 of site metro-b.
 * When NAME is not found and holds a '.', its short form (up to the first '.') is tried: a host
 * "gpu3.dc.example.com" is node "gpu3" of the file.
 *
 * Pure lookups on a loaded topology: no I/O, no allocation, thread-safe.
 */
#ifndef STRATA_TOPO_NODES_H
#define STRATA_TOPO_NODES_H

#include <stddef.h>

#include "topo/topo.h"

/* Finds the site holding `node`: *site is an index into topo->sites. Returns STRATA_OK,
 * STRATA_ERR_NOT_FOUND (no such node or site: err lists the names the file has),
 * STRATA_ERR_INVALID_ARG (NULL arguments, an empty name, or a name matching nodes of two sites:
 * err says which). err (err_len bytes, may be 0) gets one line without a trailing newline. */
int strata_topo_node_site(const strata_topo *topo, const char *node, int *site, char *err,
                          size_t err_len);

/* This host's node name: STRATA_NODE when set, else the hostname. STRATA_OK, or
 * STRATA_ERR_SYSTEM when neither can be read. */
int strata_topo_this_node(char *node, size_t len);

/* The name of the site holding `node` in the topology `source`: a topology file or
 * "preset:NAME". What `strata site` prints and `strata launch --topology` sets as STRATA_SITE.
 * Returns the loader's status (err says file:line and what was expected) or
 * strata_topo_node_site's. */
int strata_topo_site_of_node(const char *source, const char *node, char *site, size_t site_len,
                             char *err, size_t err_len);

#endif
