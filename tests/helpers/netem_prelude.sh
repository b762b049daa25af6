# SPDX-License-Identifier: Apache-2.0
# netem_prelude.sh — what every test that brings up `strata netem` sites starts with. Source it,
# then call
#   netem_prelude TEST PREFIX BUILD_DIR [COMMAND...]
# It sets build, strata (the command under test), name (PREFIX and this shell's pid, so parallel
# runs never share sites) and failures=0; defines fail MESSAGE (counts a failure), bounded CMD
# (CMD under a hard time limit, NETEM_BOUND_S seconds, 40 by default) and netem_down (removes
# this test's sites; the default EXIT trap, which a test with more to clean replaces by its own
# that calls it); and exits 77 (ctest's skip) when the host cannot emulate: not root, no
# /dev/net/tun, no `ip netns`, or a COMMAND the test needs (iperf3, ...) missing.
netem_prelude() {
  local test=$1 prefix=$2 command
  build=${3:?usage: $test.sh BUILD_DIR}
  strata=$build/strata
  [ -x "$strata" ] || { echo "$test: $strata is missing"; exit 1; }
  if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/net/tun ] || ! ip netns list >/dev/null 2>&1; then
    echo "SKIP $test: needs root, /dev/net/tun and ip netns"
    exit 77
  fi
  shift 3
  for command in "$@"; do
    command -v "$command" >/dev/null ||
      { echo "SKIP $test: $command is not installed (scripts/deps.sh test)"; exit 77; }
  done
  name=$prefix$$
  failures=0
  trap netem_down EXIT
}

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
bounded() { timeout -k 2 "${NETEM_BOUND_S:-40}" "$@"; }
netem_down() { "$strata" netem down --name "$name" >/dev/null 2>&1; }
