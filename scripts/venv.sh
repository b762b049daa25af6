#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python environment of the suite and the benchmarks: a venv (default build-venv) holding
# torch 2.13.0 (CPU build), numpy and mypy, made once and remade when this list changes. The
# Python tests, the benchmarks and test_pip run with its interpreter (STRATA_PYTHON).
# Usage: venv.sh [DIR]; prints nothing when the venv is already right.
set -euo pipefail
dir=${1:-build-venv}
packages="torch==2.13.0 numpy==2.4.6 mypy==2.4.1"
stamp=$dir/.strata-packages
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages" ] && [ -x "$dir/bin/python" ] && exit 0
python=${PYTHON:-python3}
if ! "$python" -m venv --help >/dev/null 2>&1 || ! "$python" -c 'import ensurepip' 2>/dev/null; then
  scripts/deps.sh venv
fi
echo "venv: $dir with $packages"
rm -rf "$dir"
"$python" -m venv "$dir"
# shellcheck disable=SC2086
"$dir/bin/pip" install -q --disable-pip-version-check $packages 2>&1 | grep -v '^WARNING: Location' || true
"$dir/bin/python" -c 'import torch, numpy, mypy' || { echo "venv: $dir is not usable"; exit 1; }
echo "$packages" >"$stamp"
