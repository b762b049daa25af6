#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh — build the libFuzzer harnesses (tests/fuzz/fuzz_*.c) with clang and run each in turn.
#
#   tests/fuzz/run.sh [--build DIR] [--seconds N] [--fresh] [--build-only | --no-build] [NAME...]
#
# NAME is a harness (fuzz_topo or topo); none means every harness. For each harness fuzz_X:
#   1. every file in tests/fuzz/regressions/X/ (inputs that once crashed, hung or leaked) is
#      run once and must pass;
#   2. the fuzzer runs for N seconds (default 60) on a working copy of the seed corpus
#      tests/fuzz/corpus/X/ kept in DIR/corpus/X, which grows from run to run (--fresh: a copy
#      of the seeds alone in DIR/fresh-corpus/X, made again each time, as the suite wants), with
#      tests/fuzz/X.dict when there is one. New inputs stay in the build directory, never in
#      the repository's corpus.
# Anything libFuzzer saves (crash-, leak-, timeout-, oom-) goes to DIR/artifacts/X/ and fails
# the run; so does a harness that did not compile. Exit status: 0 only when every harness named
# was built, replayed and fuzzed with no finding.
#
# DIR defaults to build-fuzz. `make fuzz FUZZ_SECONDS=N` calls this; the suite calls it through
# ctest (CMakeLists.txt, "Fuzzing").
set -uo pipefail
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
build=$source_dir/build-fuzz
seconds=60
fresh=0
do_build=1
do_run=1
names=()
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --fresh) fresh=1 ;;
    --build-only) do_run=0 ;;
    --no-build) do_build=0 ;;
    -h | --help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) names+=("${1#fuzz_}") ;;
  esac
  shift
done
case $build in /*) ;; *) build=$PWD/$build ;; esac

if [ ${#names[@]} -eq 0 ]; then
  for harness in "$source_dir"/tests/fuzz/fuzz_*.c; do
    [ -e "$harness" ] && names+=("$(basename "$harness" .c | sed 's/^fuzz_//')")
  done
fi

status=0
if [ $do_build -eq 1 ]; then
  if ! command -v clang >/dev/null; then
    echo "fuzz: clang is missing (apt-get install clang libfuzzer-14-dev; make fuzz does it)" >&2
    exit 1
  fi
  # A generator of our choosing so that -k (keep going) below means what it says: one harness
  # that does not compile must not stop the others from being built and run.
  cmake -S "$source_dir" -B "$build" -G "Unix Makefiles" -DCMAKE_C_COMPILER=clang \
    -DCMAKE_BUILD_TYPE=Debug -DSTRATA_FUZZ=ON -DSTRATA_PYTHON=OFF -DSTRATA_WERROR=ON \
    >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
  if ! cmake --build "$build" --target fuzz_all -j"$(nproc)" -- -k >"$build.build.log" 2>&1; then
    grep -E "error:|undefined reference" "$build.build.log" | head -30 >&2
    echo "fuzz: some harnesses did not build (full log: $build.build.log)" >&2
    status=1
  fi
fi
[ $do_run -eq 1 ] || exit $status

for name in "${names[@]}"; do
  binary=$build/fuzz/fuzz_$name
  if [ ! -x "$binary" ]; then
    echo "fuzz_$name: FAILED: not built (tests/fuzz/fuzz_$name.c; see $build.build.log)" >&2
    status=1
    continue
  fi
  # -timeout: one input running this long is a hang; -rss_limit_mb also caps any one malloc.
  options=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
  [ -f "$source_dir/tests/fuzz/$name.dict" ] && options+=("-dict=$source_dir/tests/fuzz/$name.dict")
  artifacts=$build/artifacts/$name
  mkdir -p "$artifacts"
  options+=("-artifact_prefix=$artifacts/")
  before=$(find "$artifacts" -type f | wc -l)

  regressions=("$source_dir"/tests/fuzz/regressions/"$name"/*)
  if [ -e "${regressions[0]}" ]; then
    if ! "$binary" "${options[@]}" "${regressions[@]}" >"$build/fuzz_$name.replay.log" 2>&1; then
      tail -40 "$build/fuzz_$name.replay.log" >&2
      echo "fuzz_$name: FAILED: a regression input fails again (tests/fuzz/regressions/$name)" >&2
      status=1
      continue
    fi
    echo "fuzz_$name: ${#regressions[@]} regression inputs pass"
  fi

  corpus=$build/corpus/$name
  if [ $fresh -eq 1 ]; then
    corpus=$build/fresh-corpus/$name
    rm -rf "$corpus"
  fi
  mkdir -p "$corpus"
  if [ -d "$source_dir/tests/fuzz/corpus/$name" ]; then
    cp -p "$source_dir/tests/fuzz/corpus/$name"/* "$corpus"/ 2>/dev/null
  else
    echo "fuzz_$name: no seed corpus (tests/fuzz/corpus/$name): starting from nothing"
  fi
  log=$build/fuzz_$name.log
  "$binary" "${options[@]}" -max_total_time="$seconds" "$corpus" >"$log" 2>&1
  rc=$?
  after=$(find "$artifacts" -type f | wc -l)
  # The last status line: "#RUNS DONE cov: C ft: F corp: ..." and the executions it did.
  summary=$(grep -E '^#[0-9]+' "$log" | tail -1)
  if [ $rc -ne 0 ] || [ "$after" -ne "$before" ]; then
    tail -60 "$log" >&2
    echo "fuzz_$name: FAILED after ${seconds}s: input kept in $artifacts (log: $log)" >&2
    status=1
  else
    echo "fuzz_$name: ${seconds}s, no findings: $summary"
  fi
done
exit $status
