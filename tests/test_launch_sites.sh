#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_launch_sites.sh BUILD_DIR — sites from a probed link matrix (docs/hier.md): `strata launch
# --sites MATRIX` gives child i STRATA_SITE = the site of matrix row i (latency clusters, or the
# matrix's labels), also with --order (the site stays with the slot, the rank moves); `strata
# place --env` prints the same grouping; bad matrices are usage errors (exit 2) with a message;
# and a real job launched with --sites runs its collectives on 2 sites. Loopback only, every
# command bounded.
set -u
build=${1:?usage: test_launch_sites.sh BUILD_DIR}
strata=$build/strata
[ -x "$strata" ] || { echo "test_launch_sites: $strata is missing"; exit 1; }
work=$(mktemp -d)
failures=0
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
bounded() { timeout -k 2 30 "$@"; }

# Rows 0 and 2 share a site (3-4 us apart), rows 1 and 3 the other; ~5 ms between the two.
cat >"$work/m.json" <<'EOF'
{
  "ranks": 4,
  "latency_us": [
    [0, 5000, 3, 5100],
    [5000, 0, 5050, 4],
    [3, 5050, 0, 5020],
    [5100, 4, 5020, 0]
  ],
  "bandwidth_gbps": [
    [0, 0.0125, 5, 0.0125],
    [0.0125, 0, 0.0125, 5],
    [5, 0.0125, 0, 0.0125],
    [0.0125, 5, 0.0125, 0]
  ]
}
EOF
# The same links with site labels, in YAML.
cat >"$work/labels.yaml" <<'EOF'
ranks: 4
sites: [paris, tokyo, paris, tokyo]
latency_us:
  - [0, 5000, 3, 5100]
  - [5000, 0, 5050, 4]
  - [3, 5050, 0, 5020]
  - [5100, 4, 5020, 0]
bandwidth_gbps:
  - [0, 0.0125, 5, 0.0125]
  - [0.0125, 0, 0.0125, 5]
  - [5, 0.0125, 0, 0.0125]
  - [0.0125, 5, 0.0125, 0]
EOF

sites_of() { # ARGS...: "rank site" lines of a launch, sorted by rank, on one line
  bounded "$strata" launch -n 4 "$@" -- sh -c 'echo $STRATA_RANK $STRATA_SITE' | sort -n | tr '\n' ' '
}

# --- 1. latency clusters, with and without --order; a caller's STRATA_SITE is replaced ---
got=$(STRATA_SITE=elsewhere sites_of --sites "$work/m.json")
[ "$got" = "0 site0 1 site1 2 site0 3 site1 " ] || fail "clusters: '$got'"
# child i gets rank order[i] and the site of row i: ranks 3,2,1,0 in sites 0,1,0,1
got=$(sites_of --order 3,2,1,0 --sites "$work/m.json")
[ "$got" = "0 site1 1 site0 2 site1 3 site0 " ] || fail "clusters with --order: '$got'"
got=$(sites_of --sites="$work/m.json" --order=1,0,3,2)
[ "$got" = "0 site1 1 site0 2 site1 3 site0 " ] || fail "--sites=, --order=: '$got'"

# --- 2. labels win over clustering ---
got=$(sites_of --sites "$work/labels.yaml")
[ "$got" = "0 paris 1 tokyo 2 paris 3 tokyo " ] || fail "labels: '$got'"

# --- 3. strata place --env prints the same grouping, one line per row ---
got=$(bounded "$strata" place "$work/m.json" --sites --env | tr '\n' ' ')
[ "$got" = "STRATA_SITE=site0 STRATA_SITE=site1 STRATA_SITE=site0 STRATA_SITE=site1 " ] ||
  fail "place --env: '$got'"
got=$(bounded "$strata" place "$work/labels.yaml" --env | tr '\n' ' ')
[ "$got" = "STRATA_SITE=paris STRATA_SITE=tokyo STRATA_SITE=paris STRATA_SITE=tokyo " ] ||
  fail "place --env with labels: '$got'"
# the placed order keeps each site contiguous: ranks 0,1 in one site, 2,3 in the other
order=$(bounded "$strata" place -q --sites "$work/m.json")
got=$(sites_of --order "$order" --sites "$work/m.json")
a=$(echo "$got" | cut -d' ' -f2) b=$(echo "$got" | cut -d' ' -f4) c=$(echo "$got" | cut -d' ' -f6)
[ "$a" = "$b" ] && [ "$a" != "$c" ] || fail "placed order $order: '$got'"

# --- 4. one cluster: a warning, every child in site0 ---
cat >"$work/one.json" <<'EOF'
{"latency_us": [[0, 3], [3, 0]], "bandwidth_gbps": [[0, 5], [5, 0]]}
EOF
got=$(bounded "$strata" launch -n 2 --sites "$work/one.json" -- sh -c 'echo $STRATA_SITE' 2>"$work/one.err" | sort -u)
[ "$got" = site0 ] || fail "one site: '$got'"
grep -q "one site; collectives stay flat" "$work/one.err" || fail "one site warning: $(cat "$work/one.err")"

# --- 5. bad input: exit 2, a message, no child started ---
expect_usage_error() { # WHAT PATTERN ARGS...
  local what=$1 pattern=$2
  shift 2
  bounded "$strata" launch "$@" -- sh -c 'echo started' >"$work/out" 2>"$work/err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$what: exit $rc, expected 2"
  grep -q "$pattern" "$work/err" || fail "$what: message '$(cat "$work/err")' lacks '$pattern'"
  [ ! -s "$work/out" ] || fail "$what: a child ran"
}
expect_usage_error "wrong row count" "the matrix has 4 rows, -n is 3" -n 3 --sites "$work/m.json"
expect_usage_error "missing matrix" "nope.json" -n 2 --sites "$work/nope.json"
echo '{"latency_us": [[0, 1]], "bandwidth_gbps": [[0, 1]]}' >"$work/bad.json"
expect_usage_error "malformed matrix" "bad.json" -n 1 --sites "$work/bad.json"
sed 's/paris/"pa ris"/g' "$work/labels.yaml" >"$work/space.yaml"
expect_usage_error "label with a space" "not a valid STRATA_SITE" -n 4 --sites "$work/space.yaml"
bounded "$strata" place "$work/space.yaml" --env >"$work/out" 2>"$work/err"
[ $? -eq 2 ] && [ ! -s "$work/out" ] || fail "place --env with a bad label: '$(cat "$work/out")'"

# --- 6. a real job on the sites: the ranks find 2 sites and enable the hierarchical path ---
STRATA_LOG=info STRATA_SHM=0 bounded "$strata" launch -n 4 --order 3,2,1,0 --sites "$work/m.json" \
  -- "$strata" bench allreduce -b 4M -e 4M -n 2 -w 1 -c 1 >"$work/bench.out" 2>"$work/bench.err"
rc=$?
[ $rc -eq 0 ] || fail "bench under --sites exited $rc: $(tail -5 "$work/bench.err")"
n=$(grep -c "2 sites: 'site1' (2 ranks), 'site0' (2 ranks); hierarchical collectives enabled" "$work/bench.err")
[ "$n" = 4 ] || fail "ranks reporting 2 sites: $n of 4: $(grep -i site "$work/bench.err" | head -3)"
n=$(grep "allreduce count 1048576 f32" "$work/bench.err" | grep -c "algorithm hier")
[ "$n" -ge 4 ] || fail "allreduce of 4 MiB not hierarchical: $(grep "allreduce count" "$work/bench.err" | head -2)"

[ $failures -eq 0 ] && echo PASS || echo "FAIL ($failures)"
[ $failures -eq 0 ]
