# SPDX-License-Identifier: Apache-2.0
# bench_table.sh — sourced by the `strata bench` tests: check_table FILE NAME ROWS checks the
# nccl-tests table shape (nccl-tests 2.19.6's spacing: column header, units, rank line, the closing lines), ROWS rows and
# every #wrong 0; a miss calls the test's fail().
check_table() {
  local file=$1 name=$2 rows=$3
  grep -q '^#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong $' "$file" ||
    fail "$name: no nccl-tests column header"
  grep -q '^#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)' "$file" ||
    fail "$name: no units line"
  grep -q '^#  Rank  0 Group  0 Pid .* on .* device  0 \[cpu\]' "$file" || fail "$name: no rank line"
  grep -q '^# Out of bounds values : 0 OK$' "$file" || fail "$name: no '# Out of bounds values : 0 OK'"
  grep -Eq '^# Avg bus bandwidth    : [0-9.e+-]+ ?$' "$file" || fail "$name: no Avg bus bandwidth line"
  local got
  got=$(awk '!/^#/ && NF == 13' "$file" | wc -l)
  [ "$got" = "$rows" ] || fail "$name: $got rows, want $rows"
  local bad
  bad=$(awk '!/^#/ && NF == 13 && ($9 != "0" || ($13 != "0" && $13 != "N/A"))' "$file")
  [ -z "$bad" ] || fail "$name: rows with #wrong != 0: $bad"
}
