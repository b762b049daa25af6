# SPDX-License-Identifier: Apache-2.0
"""strata.serve's cross-site pipeline on loopback: failover with replay gives the same tokens.

Three span server processes of an 8-block strata.tinylm model: A holds blocks 0:4, B 4:8, C 0:8
but is slow (each step padded to 40 ms, as a weaker accelerator), so the client's route is
A -> B. The client generates 24 tokens greedily; after token 6 the test kills B (SIGKILL): the
client must route A -> C[4:8] and replay the 6 past steps' activations into C; after token 14 it
kills A: the client must route C[0:8] and replay 14 steps. Checked:
1. the tokens equal an unsplit local run's (tinylm.generate_local), all 24 (and that run is
   not one token repeated, so the comparison means something);
2. the routes were A,B then A,C[4:8] then C[0:8]; 2 failovers; 6 + 14 replayed steps;
3. the whole run ends well inside the test's time limit (the lane calls have a 5 s timeout);
4. bad input (an empty span; fewer live servers than asked for, A and B being dead) is a
   message and a non-zero status.
Exits 0 when all held, 77 without torch.
"""
import subprocess
import sys
import time

from serve_harness import Harness

from strata import serve, tinylm


def main(h):
    check = h.check
    h.start("server", "A", "--span", "0:4")
    h.start("server", "B", "--span", "4:8")
    h.start("server", "C", "--span", "0:8", "--token-ms", "40")
    client = None
    try:
        if not h.wait_announced(3, "servers"):
            return
        cfg = tinylm.Config()
        client = serve.PipelineClient(h.addr, h.secret, h.job, cfg, timeout=5)
        client.discover()
        routes = []

        def on_step(k, token):
            if not routes or routes[-1] != client.route:
                routes.append(list(client.route))
            victim = {5: "B", 13: "A"}.get(k)
            if victim:
                h.kill(victim)
        prompt = list(b"strata serves ")
        t0 = time.monotonic()
        out, latencies = client.generate(prompt, 24, on_step=on_step)
        print(f"generated {len(out)} tokens in {time.monotonic() - t0:.2f} s; routes {routes}; "
              f"failovers {client.failovers}, replayed steps {client.replayed_steps}", flush=True)
        want = tinylm.generate_local(cfg, prompt, 24)
        check(len(set(want)) >= 8, f"the reference repeats itself ({want}): a weak comparison")
        check(out == want, f"tokens {out} differ from the unsplit run's {want}")
        check(routes == [[("A", 0, 4), ("B", 4, 8)], [("A", 0, 4), ("C", 4, 8)], [("C", 0, 8)]],
              f"routes {routes}")
        check(client.failovers == 2, f"{client.failovers} failovers, not 2")
        check(client.replayed_steps == 20, f"{client.replayed_steps} replayed steps, not 6 + 14")

        # 4. Bad input: a message and a non-zero status, no traceback.
        for args, code, words in (
                (["server", "--store", h.addr, "--name", "x", "--span", "5:3"], 2, "--span"),
                (["generate", "--store", h.addr, "--secret", h.secret, "--job", h.job, "--expect", "3"],
                 1, "span servers answer, not 3")):
            r = subprocess.run([sys.executable, "-m", "strata.serve"] + args, capture_output=True,
                               text=True, timeout=60)
            check(r.returncode == code and words in r.stderr and "Traceback" not in r.stderr,
                  f"{args}: status {r.returncode}, stderr {r.stderr[-300:]!r}")
    finally:
        if client:
            client.close()


if __name__ == "__main__":
    with Harness("test-serve-pipeline", "pipeline") as harness:
        main(harness)
    harness.exit()
