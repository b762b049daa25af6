# SPDX-License-Identifier: Apache-2.0
"""strata.serve's region-replica router on loopback: a replica dies with requests in flight.

Three replica processes of strata.tinylm (each generation step padded to 15 ms); a Router in
this process; 24 requests (8 tokens each, 4 different prompts) from 6 threads at once. While
requests are in flight at R1 (the router says so), the test kills R1 (SIGKILL). Checked:
1. every request returns, with the tokens of an unsplit local run of its prompt: none lost;
2. at least one request was retried on another replica (the ones in flight at R1);
3. the router spread the load (at least two replicas served requests) and its health checks
   marked R1 unhealthy;
4. a request after the kill goes to a live replica at the first attempt;
5. R1 restarted under its name is taken back by the health checks, and the router's request
   connection to it works (a failed call leaves a connection broken: the router reconnects).
Exits 0 when all held, 77 without torch.
"""
import concurrent.futures
import threading
import time

from serve_harness import Harness

import strata
from strata import serve, tinylm

REPLICA = ("--token-ms", "15")


def main(h):
    check = h.check
    for name in ("R0", "R1", "R2"):
        h.start("replica", name, *REPLICA)
    router = None
    try:
        if not h.wait_announced(3, "replicas"):
            return
        router = serve.Router(h.addr, h.secret, h.job, timeout=10, health_s=0.2)
        check(sorted(router.replicas) == ["R0", "R1", "R2"], f"router sees {sorted(router.replicas)}")
        cfg = tinylm.Config()
        prompts = [list(f"request {i}: ".encode()) for i in range(4)]
        want = [tinylm.generate_local(cfg, p, 8) for p in prompts]

        killed = threading.Event()

        def killer():
            end = time.monotonic() + 30
            while time.monotonic() < end and router.inflight("R1") == 0:
                time.sleep(0.005)
            h.kill("R1")
            killed.set()

        threading.Thread(target=killer, daemon=True).start()
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(router.submit, prompts[i % 4], 8) for i in range(24)]
            results = [f.result(timeout=60) for f in futures]
        check(killed.wait(30), "R1 was never seen with requests in flight")
        lost = [i for i, (tokens, _, _) in enumerate(results) if tokens != want[i % 4]]
        check(not lost, f"requests {lost} returned other tokens than the local run")
        served = {name for _, name, _ in results}
        retried = sum(1 for _, _, attempts in results if attempts > 1)
        print(f"served by {sorted(served)}; {retried} requests retried; router retries "
              f"{router.retries}", flush=True)
        check(retried >= 1 and router.retries >= 1, "no request was retried after R1 died")
        check(len(served - {"R1"}) >= 2, f"only {served} served requests")
        # the health checks (every 0.2 s) mark it down: waited for as an event, bounded
        deadline = time.monotonic() + 10
        while router.replicas["R1"]["healthy"] and time.monotonic() < deadline:
            time.sleep(0.05)
        check(not router.replicas["R1"]["healthy"], "the health checks did not mark R1 down")
        tokens, name, attempts = router.submit(prompts[0], 8)
        check(tokens == want[0] and name != "R1" and attempts == 1,
              f"after the kill: {name}, {attempts} attempts")

        # 5. R1 restarted under its name: the health checks connect to it again.
        h.start("replica", "R1", *REPLICA)
        deadline = time.monotonic() + 60
        while not router.replicas["R1"]["healthy"] and time.monotonic() < deadline:
            time.sleep(0.1)
        check(router.replicas["R1"]["healthy"], "the restarted R1 was not taken back")
        try:
            header, _ = serve.unpack(router.agent.call(router.replicas["R1"]["peer"],
                                                       serve.TAG_GENERATE, serve.pack(
                                                           {"id": 1, "prompt": prompts[1],
                                                            "tokens": 8})))
            check(header["tokens"] == want[1], "the restarted R1 generated other tokens")
        except strata.Error as e:
            check(False, f"the router's request connection to the restarted R1 failed: {e}")
    finally:
        if router:
            router.close()


if __name__ == "__main__":
    with Harness("test-serve-router", "router") as harness:
        main(harness)
    harness.exit()
