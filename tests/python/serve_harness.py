# SPDX-License-Identifier: Apache-2.0
"""What strata.serve's loopback tests share: a store, serve processes, checks, the tear-down.

A test makes a Harness (it starts a store with the test's secret and job), starts its processes
with start(), waits for them to announce themselves, records checks, and ends in a `with` block
that stops every process it started and the store, whatever failed.
"""
import signal
import subprocess
import sys
import time

try:
    import numpy  # noqa: F401
    import torch  # noqa: F401
except ImportError:
    print("skipped: python3 has no numpy or torch")
    sys.exit(77)

import strata.kv as kv


class Harness:
    def __init__(self, secret, job):
        self.secret, self.job = secret, job
        self.failed = []
        self.procs = {}
        self.store_server = kv.StoreServer("127.0.0.1:0", secret=secret, job_id=job)
        self.addr = f"127.0.0.1:{self.store_server.port}"

    def check(self, cond, what):
        if not cond:
            self.failed.append(what)
            print(f"FAILED {what}", flush=True)

    def start(self, role, name, *args):
        """`python3 -m strata.serve ROLE` for this test's store, secret and job, as procs[name]."""
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "strata.serve", role, "--store", self.addr, "--secret",
             self.secret, "--job", self.job, "--name", name, "--timeout", "5", *args])
        return self.procs[name]

    def wait_announced(self, count, what, timeout_s=60):
        """True once `count` processes have announced themselves in the store; a process that
        exits first or the timeout fails the check."""
        store = kv.Store(self.addr, self.secret, self.job)
        deadline = time.monotonic() + timeout_s
        while store.add(f"serve/{self.job}/count", 0) < count:
            if time.monotonic() > deadline or any(p.poll() is not None
                                                  for p in self.procs.values()):
                self.check(False, f"the {what} did not all start")
                return False
            time.sleep(0.2)
        return True

    def kill(self, name):
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.store_server.stop()
        return False

    def exit(self):
        print("ok" if not self.failed else f"{len(self.failed)} checks failed", flush=True)
        sys.exit(0 if not self.failed else 1)
