#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# demo_plan.sh BUILD_DIR — the planner in one screen: plan the metro-2-sites preset (two
# datacenters 30 km apart on MetroX) in text, and draw its map to BUILD_DIR/demo-map.svg.
set -euo pipefail
build=${1:-build}
bin="$build/strata"
"$bin" plan --preset metro-2-sites --svg "$build/demo-map.svg"
echo
echo "map: $build/demo-map.svg (sites, nodes, links coloured by layer)"
