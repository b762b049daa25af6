#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pip.sh BUILD_DIR — the package as pip builds and installs it (pyproject.toml,
# scikit-build-core driving this project's CMake build):
#  1. `pip wheel` of the source tree with the suite's interpreter (STRATA_PYTHON, torch 2.13)
#     gives a wheel with libstrata beside the extensions and the torch backend built against
#     that torch (the strata command is left out here: it adds minutes and nothing pip-specific);
#  2. the wheel installs into a fresh venv without torch: strata imports, strata.Comm() with no
#     launcher is a world of one, strata.torch says torch is missing;
#  3. the same venv given torch: init_process_group("strata") with no strata import (torch's
#     "torch.backends" entry point), an all_reduce, one libstrata mapped;
#  4. configured for an interpreter without torch, the build says it leaves the backend out.
# Skipped (77) when STRATA_PYTHON has no torch or pip cannot reach scikit-build-core.
set -uo pipefail
source_dir=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
py=${STRATA_PYTHON:-}
[ -n "$py" ] && "$py" -c 'import torch' 2>/dev/null ||
  { echo "SKIP test_pip: STRATA_PYTHON (${py:-unset}) has no torch"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. the wheel
"$py" -m pip download -q --no-deps -d "$work/probe" scikit-build-core >/dev/null 2>&1 ||
  { echo "SKIP test_pip: pip cannot fetch scikit-build-core"; exit 77; }
"$py" -m pip wheel -q --no-deps --disable-pip-version-check -w "$work/wheels" "$source_dir" \
  -Cbuild-dir="$work/build" -Ccmake.define.STRATA_WHEEL_CLI=OFF \
  "-Cbuild.targets=strata_python;strata_kv_python;strata_torch" >"$work/wheel.log" 2>&1 ||
  { tail -30 "$work/wheel.log"; fail "pip wheel"; }
wheel=$(ls "$work"/wheels/*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || fail "no wheel"
listing=$("$py" -m zipfile -l "$wheel")
for f in strata/libstrata.so.0 strata/_torch.cpython strata/_strata.cpython strata/_kv.cpython \
  strata/torch.py strata/py.typed strata/_strata.pyi strata/_kv.pyi strata/_torch.pyi \
  strata/LICENSE entry_points.txt; do
  grep -q "$f" <<<"$listing" || fail "the wheel has no $f"
done

# 2. a fresh venv without torch
base=$("$py" -c 'import sys; print(sys.base_prefix)')/bin/python3
"$base" -m venv "$work/venv" || fail "python -m venv"
"$work/venv/bin/pip" install -q --no-deps --disable-pip-version-check "$wheel" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "pip install of the wheel"; }
(cd "$work" && env -u STRATA_RANK -u STRATA_WORLD_SIZE -u STRATA_ADDR -u RANK -u WORLD_SIZE \
  "$work/venv/bin/python" - <<'PY') || fail "the wheel without torch"
import strata
with strata.Comm() as comm:
    assert (comm.rank, comm.size) == (0, 1), (comm.rank, comm.size)
try:
    import strata.torch
except ImportError as error:
    assert "torch" in str(error), error
else:
    raise AssertionError("strata.torch imported without torch")
print("without torch: strata imports, a world of one runs, strata.torch says torch is missing")
PY

# 3. the same venv with the suite's torch on its path: torch loads the backend itself
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
venv_site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" >"$venv_site/suite-torch.pth"
(cd "$work" && env -u STRATA_RANK -u STRATA_WORLD_SIZE -u STRATA_ADDR -u RANK -u WORLD_SIZE \
  "$work/venv/bin/python" - <<'PY') || fail "the wheel with torch"
import sys
import torch
import torch.distributed as dist
# nothing here imports strata: torch's "torch.backends" entry point did, at import torch
assert "strata.torch" in sys.modules, "torch did not load the strata backend"
dist.init_process_group("strata", rank=0, world_size=1, store=dist.HashStore())
t = torch.arange(6, dtype=torch.float32)
dist.all_reduce(t)
assert torch.equal(t, torch.arange(6, dtype=torch.float32)), t
assert dist.get_backend() == "strata"
mapped = {l.split()[-1] for l in open("/proc/self/maps") if "libstrata" in l}
assert len(mapped) == 1 and "site-packages/strata/" in next(iter(mapped)), mapped
dist.destroy_process_group()
print("with torch: init_process_group('strata') with no strata import, one libstrata:", *mapped)
PY

# 4. an interpreter without torch: the configuration says the backend is left out
cmake -S "$source_dir" -B "$work/notorch" -DPython3_EXECUTABLE="$base" >"$work/notorch.log" 2>&1 ||
  { tail -20 "$work/notorch.log"; fail "configure without torch"; }
grep -q "strata.torch not built" "$work/notorch.log" || fail "configure without torch says nothing"
echo "test_pip: ok"
