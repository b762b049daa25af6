# SPDX-License-Identifier: Apache-2.0
"""The package's types: `mypy --strict python/strata` finds nothing (the stubs of the C
extensions included). Usage: test_mypy.py BUILD_DIR (mypy's cache lives there, so a second run
takes about a second). Exits 77 (skipped) when the interpreter has no mypy, or lacks numpy or
torch, whose types strata's own refer to.
"""
import importlib.util
import os
import subprocess
import sys

missing = [m for m in ("mypy", "numpy", "torch") if importlib.util.find_spec(m) is None]
if missing:
    print(f"skipped: {sys.executable} has no {', '.join(missing)} (pip install mypy numpy torch)")
    sys.exit(77)
build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
package = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "strata")
cmd = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", os.path.join(build, "mypy-cache"),
       os.path.normpath(package)]
print(" ".join(cmd), flush=True)
env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
sys.exit(subprocess.run(cmd, env=env).returncode)
