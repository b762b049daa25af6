# SPDX-License-Identifier: Apache-2.0
"""A site leaves and a site returns: DiLoCo over FSDP2 shards, 2 sites x 2 ranks.

The script starts everything itself on loopback: a TCPStore every site reaches, and per site two
ranks with a process group of their own (FSDP2 inside the site), joined across sites by one
strata communicator per shard index (strata.torch.DiLoCo with store=, site=, sites=). Streaming
DiLoCo with H = 4, P = 2, tau = 1.

- Site 1's two ranks are SIGKILLed after inner step 6 (their exchange of fragment 1 in flight);
  site 0 reaches that exchange only once they are dead. Site 0 finishes its outer exchanges over
  the survivors (each shard's communicator shrunk) within 2 x the communicators' timeout, with no
  outer step lost or applied twice (the count of applied fragments is the schedule's).
  With --freeze the site is SIGSTOPped instead (as a host that hangs): no connection closes,
  and the survivors find it dead by its heartbeats' silence after the timeout.
- Two new processes start site 1 again (join=True), asking to join after site 0's step 10:
  site 0 admits them at the end of the next outer step (after inner step 13), and they get
  theta_global, the outer momentum, the step counts and site 0's theta_local shards over strata
  (shared state, digests checked), no file: their parameters and outer state equal site 0's when
  they start, and both sites' outer states are equal at the end.
Exits 0 when all held, 77 without torch.
"""
import datetime
import hashlib
import os
import secrets
import signal
import sys
import time

try:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
except ImportError:
    sys.exit(77)

H, P, TAU, STEPS, KILL_AFTER, JOIN_AT, TIMEOUT = 4, 2, 1, 20, 6, 13, 3.0
# fragment applies after steps 3, 5, 7, ..., 19 (fragment p after steps with (s - tau) % H == p*H/P)
APPLIES = [s for s in range(1, STEPS + 1) if (s - TAU) >= 1 and (s - TAU) % (H // P) == 0]


def params_digest(model):
    h = hashlib.blake2b(digest_size=16)
    for p in model.parameters():
        h.update(p.to_local().detach().numpy().tobytes())
    return h.hexdigest()


def worker(site, local, gen):
    import strata
    import strata.torch
    port, job = int(os.environ["T_PORT"]), os.environ["T_JOB"]
    store = dist.TCPStore("127.0.0.1", port, is_master=False,
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("strata", store=dist.PrefixStore(f"site{site}/gen{gen}", store),
                            rank=local, world_size=2)
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("shard",))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.Tanh(), torch.nn.Linear(24, 5))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    joiner = gen > 0
    if joiner:  # started early (imports are slow); asks to join once site 0 ran alone a while
        store.wait(["let_join"])
    else:  # the timeout also bounds how far apart the sites may connect: start them together
        store.add("ready", 1)
        while int(store.add("ready", 0)) < 4:
            time.sleep(0.01)
    d = strata.torch.DiLoCo(model, opt, sync_every=H, fragments=P, delay=TAU, store=store,
                            site=site, sites=2, job=job, timeout=TIMEOUT, join=joiner)
    ok = True

    def fail(text):
        nonlocal ok
        print(f"site {site} rank {local} gen {gen}: {text}", file=sys.stderr)
        ok = False

    first = d.inner_steps + 1
    if joiner:
        if d.inner_steps != JOIN_AT or d.comm.size != 2:
            fail(f"joined at inner step {d.inner_steps} into {d.comm.size} sites, want "
                 f"{JOIN_AT} and 2")
        store.set(f"joined/{local}/params", params_digest(model))
        store.set(f"joined/{local}/outer", d.digest())
        if store.get(f"member/{local}/params").decode() != params_digest(model):
            fail("theta_local after joining is not site 0's")
        if store.get(f"member/{local}/outer").decode() != d.digest():
            fail("the outer state after joining is not site 0's")
    slowest = 0.0
    for step in range(first, STEPS + 1):
        g = torch.Generator().manual_seed(1000 * site + 10 * step + local)
        x = torch.randn(4, 16, generator=g)
        d.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), torch.sin(2 * x[:, :5]))
        loss.backward()
        if not torch.isfinite(loss):
            fail(f"loss {loss.item()} at step {step}")
        if site == 1 and gen == 0 and step == KILL_AFTER + 1:
            store.set(f"dying/{local}", "1")
            time.sleep(120)  # SIGKILLed here
        if site == 0 and step == KILL_AFTER:  # site 1 started fragment 1's exchange, then died
            store.wait(["killed"])
        if site == 0 and local == 0 and step == KILL_AFTER + 4:
            store.set("let_join", "1")
        if site == 0 and step == JOIN_AT - 1:
            while int(store.add(f"{job}/waiting", 0)) < 2:  # the new site's ranks wait to join
                time.sleep(0.01)
        began = time.monotonic()
        d.step()
        took = time.monotonic() - began
        if site == 0 and os.environ.get("T_DEBUG"):
            print(f"site 0 rank {local} step {step}: {took:.3f} s, shard communicator epoch "
                  f"{d.comm.epoch} of {d.comm.size} sites", file=sys.stderr)
        if site == 0 and KILL_AFTER <= step < JOIN_AT:
            slowest = max(slowest, took)
        if site == 0 and step == JOIN_AT:
            if d.comm.size != 2:
                fail(f"site 1 was not admitted after step {step} ({d.comm.size} sites)")
            store.set(f"member/{local}/params", params_digest(model))
            store.set(f"member/{local}/outer", d.digest())
    want = len(APPLIES)  # each application is one fragment, counted once
    if d.outer_steps != want:
        fail(f"{d.outer_steps} fragment applications, the schedule has {want}")
    if site == 0:
        if d.comm.epoch < 2:
            fail(f"shard communicator at epoch {d.comm.epoch}: no shrink and grow")
        print(f"site 0 rank {local}: slowest outer step while site 1 was dead: {slowest:.3f} s "
              f"(timeout {TIMEOUT} s)")
        if not slowest < 2 * TIMEOUT:
            fail(f"an outer step took {slowest:.3f} s without the dead site, over 2 x {TIMEOUT} s")
    store.set(f"final/{site}/{local}", d.digest())
    other = store.get(f"final/{1 - site}/{local}").decode()
    if other != d.digest():
        fail("the sites' outer states differ at the end")
    d.close()
    dist.destroy_process_group()
    print(f"site {site} rank {local} gen {gen}: {'ok' if ok else 'FAILED'} "
          f"({d.inner_steps} inner steps)")
    return 0 if ok else 1


def spawn(site, local, gen, env):
    """A worker forked from this process, which has imported torch already (an import per
    worker would cost most of the test's time); it leaves by os._exit, running no destructor
    of what it inherited (the store's server)."""
    pid = os.fork()
    if pid:
        return pid
    rc = 1
    try:
        os.environ.update(env)
        rc = worker(site, local, gen)
    except BaseException:  # noqa: BLE001 - reported, and the status says it failed
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def wait(pid, seconds):
    """The worker's exit status, or "hung" (then killed) after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"


def main():
    import socket

    import strata.torch  # noqa: F401 - imported once, before the workers are forked
    # The workers are forked before the store starts its threads (a child forked while another
    # thread holds a lock could wait for it forever); they retry until the store is up.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"T_PORT": str(port), "T_JOB": f"sites-{secrets.token_hex(4)}"}
    sys.stdout.flush()
    sys.stderr.flush()
    pids = {}
    for site, gen in ((0, 0), (1, 0), (1, 1)):
        for local in (0, 1):
            pids[(site, local, gen)] = spawn(site, local, gen, env)
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    store.wait(["dying/0", "dying/1"], datetime.timedelta(seconds=120))
    freeze = "--freeze" in sys.argv  # SIGSTOP instead: only the heartbeats' silence tells
    for local in (0, 1):
        os.kill(pids[(1, local, 0)], signal.SIGSTOP if freeze else signal.SIGKILL)
        if not freeze:
            os.waitpid(pids[(1, local, 0)], 0)
    store.set("killed", "1")
    ok = True
    for key, pid in pids.items():
        if key[0] == 1 and key[2] == 0:
            continue
        rc = wait(pid, 120)
        if rc != 0:
            print(f"worker site {key[0]} rank {key[1]} gen {key[2]}: {rc}", file=sys.stderr)
            ok = False
    if freeze:
        for local in (0, 1):
            os.kill(pids[(1, local, 0)], signal.SIGKILL)
            os.waitpid(pids[(1, local, 0)], 0)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
