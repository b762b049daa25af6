#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_plan_startup.sh BUILD_DIR — `strata plan` reports what starting the job costs (the
# start-up section of docs/scale.md): in text and in JSON, for a small preset and for the
# 100,000-GPU topology of bench/plan_scale.yaml, the full mesh beside connections on demand,
# and the counts of src/model/startup.c (a ring leaves 2 peers per rank; the mesh N - 1).
set -u
build=${1:?usage: test_plan_startup.sh BUILD_DIR}
strata="$build/strata"
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3; [ -x "$py" ] || py=python3
fail=0

for args in "--preset dgx-h100" "$src/bench/plan_scale.yaml"; do
  # shellcheck disable=SC2086
  if ! "$strata" plan $args >"$tmp/text" 2>"$tmp/err"; then
    echo "FAIL plan $args: $(cat "$tmp/err")"; fail=1; continue
  fi
  grep -q "^start-up (" "$tmp/text" || { echo "FAIL plan $args: no start-up section"; fail=1; }
  # shellcheck disable=SC2086
  "$strata" plan $args --json >"$tmp/json" 2>"$tmp/err" || { echo "FAIL plan $args --json"; fail=1; continue; }
  "$py" - "$tmp/json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
s = d["startup"]
n = s["ranks"]
assert n == d["topology"]["gpus"], (n, d["topology"]["gpus"])
e, l = s["eager"], s["lazy"]
assert e["peers_per_rank"] == n - 1, e
assert l["peers_per_rank"] == min(2, n - 1), l
# a rank's descriptors: (streams + 1) per peer, plus the same few of its own in both schemes
assert e["fds_per_rank"] - (n - 1) * (s["streams"] + 1) == l["fds_per_rank"] - l["peers_per_rank"] * (s["streams"] + 1) > 0
assert e["requests_total"] == n * (2 * n + 5) + n * (n - 1) / 2, e["requests_total"]
for k in ("requests_total", "store_bytes_total", "fds_per_rank", "connections_total", "init_s"):
    assert l[k] < e[k], (k, l[k], e[k])
PY
done
# a link matrix alone plans one CPU node per rank: the job has a rank per node, not one
if ! "$strata" plan --links "$src/tests/data/links-metro-2-sites.json" >"$tmp/text" 2>"$tmp/err"; then
  echo "FAIL plan --links: $(cat "$tmp/err")"; fail=1
elif ! grep -q "^start-up (4 ranks, one per node," "$tmp/text"; then
  echo "FAIL plan --links: $(grep '^start-up' "$tmp/text") (want 4 ranks, one per node)"; fail=1
fi
[ $fail -eq 0 ] && echo "test_plan_startup: ok"
exit $fail
