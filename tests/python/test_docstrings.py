# SPDX-License-Identifier: Apache-2.0
"""Every public class of the package shows a runnable example in help(), and the examples run.

Runs the doctest examples (>>> lines) of the public classes of strata, strata.torch, strata.kv,
strata.weights, strata.serve and strata.tinylm, and of strata.tinylm's module docstring, in this
one process with no launcher (strata.Comm() is then a world of one), and fails for a class on the
list that has none. strata.torch.DiLoCo's runs only when torch is there; without numpy the
script exits 77 (skipped). Also: `import strata.torch` works as a program's first import of
torch. Exits 0 when every example gave its output.
"""
import doctest
import importlib.util
import os
import sys

if importlib.util.find_spec("numpy") is None:
    print("skipped: python3 has no numpy")
    sys.exit(77)

# no launcher: the examples' communicators are worlds of one
for key in list(os.environ):
    if key.startswith(("STRATA_", "OMPI_", "PMI", "SLURM_")) or key in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        del os.environ[key]

have_torch = importlib.util.find_spec("torch") is not None
if have_torch:
    # strata.torch before torch, as docs/diloco.md's example does: torch then calls the
    # backend's entry point while strata.torch is still loading, which must not fail
    import strata.torch  # noqa: F401

import strata
import strata.kv
import strata.weights

objects = [strata.Comm, strata.Request, strata.DiLoCo, strata.Error, strata.TimeoutError,
           strata.kv.Agent, strata.weights.Publisher, strata.weights.Subscriber]
if have_torch:
    import strata.serve
    import strata.tinylm
    import strata.torch
    objects += [strata.torch.DiLoCo, strata.serve.SpanServer, strata.serve.ReplicaServer,
                strata.serve.PipelineClient, strata.serve.Router, strata.serve.NoRouteError,
                strata.tinylm, strata.tinylm.Config, strata.tinylm.Blocks, strata.tinylm.Head]
else:
    print("no torch here: strata.torch, strata.serve and strata.tinylm are not run")

finder = doctest.DocTestFinder(recurse=False)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
failures = []
for obj in objects:
    name = f"{obj.__module__}.{obj.__qualname__}" if isinstance(obj, type) else obj.__name__
    tests = [t for t in finder.find(obj, name, globs={}) if t.examples]
    if not tests:
        failures.append(f"{name}: help() shows no runnable example")
        continue
    for test in tests:
        result = runner.run(test)
        print(f"{name}: {len(test.examples)} examples, {result.failed} failed",
              flush=True)
        if result.failed:
            failures.append(f"{name}: {result.failed} of {result.attempted} examples failed")
for failure in failures:
    print(f"FAILED {failure}")
sys.exit(1 if failures else 0)
