#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# place_scale.sh [BUILD_DIR] [N...] — how long `strata place --ring` takes, and how much memory,
# on a probe-like link matrix of N ranks on 4 sites (bench/linkmatrix_gen.c; default 1024 2048
# 4096, the most `strata place` accepts). The claim: under 10 s at 4,096 ranks. A benchmark, not
# a test (tests/test_place_scale.c checks the growth at a small size): it prints the figures and
# exits 1 when the claim fails.
set -uo pipefail
build=${1:-build}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1024 2048 4096)
gen="$build/strata-linkmatrix-gen"
[ -x "$build/strata" ] && [ -x "$gen" ] || { echo "place_scale: build $build first (with tests)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "place_scale: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok=0
printf '%-8s %12s %10s %10s %14s\n' ranks "file (MB)" "wall (s)" "CPU (s)" "max RSS (MB)"
for n in "${sizes[@]}"; do
  "$gen" "$n" 4 "$tmp/m.json" || exit 1
  /usr/bin/time -f "%e %U %S %M" -o "$tmp/time" "$build/strata" place "$tmp/m.json" --ring >"$tmp/out" ||
    { echo "place failed at $n ranks: $(cat "$tmp/out")" >&2; exit 1; }
  read -r wall user sys kb <"$tmp/time"
  printf '%-8s %12.0f %10s %10.2f %14.0f\n' "$n" "$(($(stat -c %s "$tmp/m.json") / 1000000))" "$wall" \
    "$(awk "BEGIN{print $user + $sys}")" "$(awk "BEGIN{print $kb / 1024}")"
  [ "$n" -eq 4096 ] && ! awk "BEGIN{exit !($wall < 10)}" && ok=1
  rm -f "$tmp/m.json"
done
if [ $ok -eq 0 ]; then echo "claim holds (under 10 s at 4,096 ranks where measured)"; else echo "claim FAILS"; fi
exit $ok
