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
from strata import serve, tinylm

SECRET, JOB = "test-serve-pipeline", "pipeline"
failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
        print(f"FAILED {what}", flush=True)


def start_server(store_addr, name, span, token_ms=0):
    return subprocess.Popen([sys.executable, "-m", "strata.serve", "server", "--store", store_addr,
                             "--secret", SECRET, "--job", JOB, "--name", name, "--span", span,
                             "--token-ms", str(token_ms), "--timeout", "5"])


def main():
    store_server = kv.StoreServer("127.0.0.1:0", secret=SECRET, job_id=JOB)
    addr = f"127.0.0.1:{store_server.port}"
    procs = {"A": start_server(addr, "A", "0:4"), "B": start_server(addr, "B", "4:8"),
             "C": start_server(addr, "C", "0:8", token_ms=40)}
    client = None
    try:
        store = kv.Store(addr, SECRET, JOB)
        deadline = time.monotonic() + 60
        while store.add(f"serve/{JOB}/count", 0) < 3:  # every server has announced itself
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs.values()):
                check(False, "the servers did not all start")
                return
            time.sleep(0.2)
        cfg = tinylm.Config()
        client = serve.PipelineClient(addr, SECRET, JOB, cfg, timeout=5)
        client.discover()
        routes = []

        def on_step(k, token):
            if not routes or routes[-1] != client.route:
                routes.append(list(client.route))
            victim = {5: "B", 13: "A"}.get(k)
            if victim:
                procs[victim].send_signal(signal.SIGKILL)
                procs[victim].wait()

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
                (["server", "--store", addr, "--name", "x", "--span", "5:3"], 2, "--span"),
                (["generate", "--store", addr, "--secret", SECRET, "--job", JOB, "--expect", "3"],
                 1, "span servers answer, not 3")):
            r = subprocess.run([sys.executable, "-m", "strata.serve"] + args, capture_output=True,
                               text=True, timeout=60)
            check(r.returncode == code and words in r.stderr and "Traceback" not in r.stderr,
                  f"{args}: status {r.returncode}, stderr {r.stderr[-300:]!r}")
    finally:
        if client:
            client.close()
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        store_server.stop()


if __name__ == "__main__":
    main()
    print("ok" if not failed else f"{len(failed)} checks failed", flush=True)
    sys.exit(0 if not failed else 1)
