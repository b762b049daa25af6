#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_probe.sh BUILD_DIR — `strata probe` over loopback under `strata launch` writes a
# well-formed link matrix (JSON and YAML, shm and tcp) that `strata place` reads; the order
# `strata place -q` prints is accepted by `strata launch --order`; bad input fails cleanly.
# The emulated-site checks (RTT within 10%, rate within 15%) are in test_probe_netem.sh.
set -u
build=${1:?usage: test_probe.sh BUILD_DIR}
strata=$build/strata
[ -x "$strata" ] || { echo "test_probe: $strata is missing"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
bounded() { timeout -k 2 60 "$@"; }
py=${STRATA_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3

# check_matrix FILE N: latencies > 0 and symmetric, bandwidth > 0 and within 200x both ways (loopback under load is noisy).
check_matrix() {
  "$py" - "$1" "$2" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
text = open(path).read()
if path.endswith(".json"):
    m = json.loads(text)
else:
    import re
    rows = lambda key: [[float(x) for x in r.split(",")] for r in
                        re.findall(r"- \[([^\]]*)\]", text.split('"%s":' % key)[1])][:n]
    m = {"ranks": int(re.search(r'"ranks": (\d+)', text).group(1)),
         "latency_us": rows("latency_us"), "bandwidth_gbps": rows("bandwidth_gbps"),
         "latency": "one-way", "hosts": ["?"] * n}
assert m["ranks"] == n, "ranks %s != %d" % (m["ranks"], n)
assert m["latency"] == "one-way"
assert len(m["hosts"]) == n
lat, bw = m["latency_us"], m["bandwidth_gbps"]
for i in range(n):
    for j in range(n):
        if i == j:
            continue
        assert lat[i][j] > 0, "latency[%d][%d] = %g" % (i, j, lat[i][j])
        assert lat[i][j] == lat[j][i], "latency not symmetric at %d,%d" % (i, j)
        assert bw[i][j] > 0, "bandwidth[%d][%d] = %g" % (i, j, bw[i][j])
        r = bw[i][j] / bw[j][i]
        assert 1 / 200 < r < 200, "bandwidth %d,%d very asymmetric: %g vs %g" % (i, j, bw[i][j], bw[j][i])
print("matrix %s: %d ranks, latency %.1f..%.1f us, bandwidth %.2f..%.2f GB/s" % (
    path.split("/")[-1], n, min(lat[i][j] for i in range(n) for j in range(n) if i != j),
    max(max(r) for r in lat), min(bw[i][j] for i in range(n) for j in range(n) if i != j),
    max(max(r) for r in bw)))
PY
}

# 1. three ranks over shared memory, JSON, quick; nothing on stderr (not a terminal)
start=$(date +%s.%N)
bounded "$strata" launch -n 3 -- "$strata" probe --quick --out "$work/shm.json" 2>"$work/err" ||
  fail "probe -n 3 (shm) failed: $(cat "$work/err")"
echo "probe -n 3 --quick (shm): $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s"
[ -s "$work/err" ] && fail "probe wrote to stderr without a terminal: $(cat "$work/err")"
check_matrix "$work/shm.json" 3 || fail "shm matrix malformed"
grep -q '"measured": "20' "$work/shm.json" || fail "no timestamp"
grep -q 'transport shm' "$work/shm.json" || fail "method does not name the transport"

# 2. four ranks over TCP loopback, YAML
STRATA_SHM=0 bounded "$strata" launch -n 4 -- "$strata" probe --quick --out "$work/tcp.yaml" ||
  fail "probe -n 4 (tcp) failed"
check_matrix "$work/tcp.yaml" 4 || fail "tcp matrix malformed"
grep -q 'transport tcp' "$work/tcp.yaml" || fail "method does not name tcp"

# 3. strata place reads both; -q prints a permutation that launch accepts
for f in shm.json tcp.yaml; do
  out=$(bounded "$strata" place "$work/$f") || fail "place $f failed"
  echo "$out" | grep -q '^order: ' || fail "place $f printed no order: $out"
done
bounded "$strata" place "$work/tcp.yaml" --json | "$py" -c 'import json,sys; d=json.load(sys.stdin); assert sorted(d["order"]) == [0,1,2,3], d' ||
  fail "place --json"
order=$(bounded "$strata" place -q "$work/tcp.yaml")
echo "$order" | grep -Eq '^[0-3](,[0-3]){3}$' || fail "place -q printed '$order'"
bounded "$strata" launch -n 4 --order "$order" -- true || fail "launch rejected --order $order"
for mode in --sites "--pipeline 2 --params 1M --activation-bytes 1M" "--pipeline 4"; do
  bounded "$strata" place "$work/tcp.yaml" $mode >/dev/null || fail "place $mode"
done

# 4. progress bar only when asked (or on a terminal)
bounded "$strata" launch -n 2 -- "$strata" probe --quick --progress --out "$work/p.json" 2>"$work/err" ||
  fail "probe --progress"
grep -q 'round 1/1' "$work/err" || fail "no progress bar with --progress: $(cat "$work/err")"

# 4b. with site labels, pairs crossing between the same two sites never share a round:
# 4 ranks in 2 sites (s0 = 0,2; s1 = 1,3) have 4 crossing pairs, one per round, and the pair
# (0,2) fits beside none of them: 5 rounds instead of the tournament's 3
bounded "$strata" launch -n 4 -- sh -c 'STRATA_SITE=s$((STRATA_RANK % 2)) exec "$0" probe --quick --progress --out "$1"' \
  "$strata" "$work/sites.json" 2>"$work/err" || fail "probe with sites"
grep -q 'round 5/5' "$work/err" || fail "site-aware schedule: $(tr '\r' '\n' <"$work/err" | tail -1)"
grep -q '"sites": \["s0", "s1", "s0", "s1"\]' "$work/sites.json" || fail "site labels: $(grep sites "$work/sites.json")"
bounded "$strata" place "$work/sites.json" --sites | grep -q 'sites: 2 (from labels)' || fail "place --sites on labels"

# 5. one rank: a 1x1 matrix
bounded "$strata" launch -n 1 -- "$strata" probe --quick --out "$work/one.json" || fail "probe -n 1"
grep -q '"ranks": 1' "$work/one.json" || fail "1-rank matrix"

# 6. bad input: clear message, status 2 (1 for a probe outside any job), never a hang
bounded "$strata" place "$work/missing.json" 2>"$work/err"; [ $? -eq 2 ] || fail "place on a missing file"
printf '{"latency_us": [[0, 1], [1]], "bandwidth_gbps": [[0, 1], [1, 0]]}\n' >"$work/bad.json"
bounded "$strata" place "$work/bad.json" 2>"$work/err"; [ $? -eq 2 ] || fail "place on a bad file"
grep -q 'bad.json:1:25: latency_us: expected 2 rows' "$work/err" || fail "bad file message: $(cat "$work/err")"
bounded "$strata" place "$work/shm.json" --pipeline 2 2>"$work/err"; [ $? -eq 2 ] || fail "pipeline 2 on 3 ranks"
bounded "$strata" place "$work/shm.json" --bogus 2>/dev/null; [ $? -eq 2 ] || fail "place --bogus"
bounded "$strata" probe --bogus 2>/dev/null; [ $? -eq 2 ] || fail "probe --bogus"
env -u STRATA_RANK -u STRATA_WORLD_SIZE -u RANK -u WORLD_SIZE STRATA_TIMEOUT=3 \
  timeout -k 2 20 "$strata" probe --quick --out "$work/x.json" 2>"$work/err"
rc=$?
[ $rc -eq 1 ] || fail "probe outside a job: status $rc ($(cat "$work/err"))"

[ "$failures" -eq 0 ] && echo "test_probe: ok" || echo "test_probe: $failures failure(s)"
[ "$failures" -eq 0 ]
