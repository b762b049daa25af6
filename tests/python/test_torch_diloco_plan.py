# SPDX-License-Identifier: Apache-2.0
"""The planner agrees with a sharded DiLoCo run, byte for byte: 2 sites x 2 ranks.

Usage: test_torch_diloco_plan.py STRATA [LINKS]   (STRATA: the strata command; LINKS: a link
matrix of 2 sites x 2 ranks, default tests/data/links-metro-2-sites.json)

Four forked workers on loopback, two per site (STRATA_SITE), each site's ranks a process group
of their own with the model wrapped by fully_shard over it (uneven dim-0 splits: 97, 61 and 5
rows over 2 ranks), joined across sites by strata.torch.DiLoCo with store=, one strata
communicator per shard index. Streaming DiLoCo, H = 4, P = 2, tau = 1, 9 inner steps (every
fragment exchanged twice and applied), once with f32 outer gradients and once with int8, with a
small STRATA_CHUNK so that the messages are pipelined. Each rank counts its shard
communicator's wan_bytes_sent from after create to the end; `strata plan --workload diloco
--param-shapes ... --chunk ... --json` must predict, exactly, every rank's WAN bytes per outer
step, its shard's values and its messages (strata's messages_sent), and the site's bytes per outer step.
Exits 0 when all held, 77 without torch.
"""
import datetime
import json
import os
import secrets
import signal
import subprocess
import sys
import time

try:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
except ImportError:
    sys.exit(77)

H, P, TAU, STEPS, CHUNK = 4, 2, 1, 9, 4096
SHAPES = [(97, 16), (97,), (61, 97), (61,), (5, 61), (5,)]
WIRES = (("none", 32), ("int8", 8))


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 97), torch.nn.Tanh(), torch.nn.Linear(97, 61),
                               torch.nn.Tanh(), torch.nn.Linear(61, 5))


def worker(site, local):
    import strata
    import strata.torch
    port, job = int(os.environ["T_PORT"]), os.environ["T_JOB"]
    store = dist.TCPStore("127.0.0.1", port, is_master=False,
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("strata", store=dist.PrefixStore(f"site{site}", store),
                            rank=local, world_size=2)
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("shard",))
    for compress, _ in WIRES:
        model = make_model()
        if [tuple(p.shape) for p in model.parameters()] != SHAPES:
            raise RuntimeError("the model's shapes are not SHAPES")
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        d = strata.torch.DiLoCo(model, opt, sync_every=H, fragments=P, delay=TAU, store=store,
                                site=site, sites=2, job=f"{job}-{compress}", compress=compress)
        # create's broadcast of theta is not counted
        before = d.comm.stats()

        for step in range(1, STEPS + 1):
            g = torch.Generator().manual_seed(1000 * site + 10 * step + local)
            x = torch.randn(4, 16, generator=g)
            d.zero_grad()
            torch.nn.functional.mse_loss(model(x), torch.sin(2 * x[:, :5])).backward()
            d.step()
        after = d.comm.stats()
        values = sum(p.to_local().numel() for p in model.parameters())
        report = {"wan_bytes": after["wan_bytes_sent"] - before["wan_bytes_sent"],
                  "messages": after["messages_sent"] - before["messages_sent"],
                  "fragment_exchanges": d.outer_steps, "values": values}
        store.set(f"report/{compress}/{site}/{local}", json.dumps(report))
        d.close()
    dist.destroy_process_group()
    return 0


def spawn(site, local, env):
    pid = os.fork()
    if pid:
        return pid
    rc = 1
    try:
        os.environ.update(env)
        os.environ["STRATA_SITE"] = f"site{site}"
        os.environ["STRATA_CHUNK"] = str(CHUNK)
        rc = worker(site, local)
    except BaseException:  # noqa: BLE001 - reported, and the status says it failed
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def wait(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"


def plan(strata_cli, links, bits):
    shapes = ",".join("x".join(str(n) for n in s) for s in SHAPES)
    out = subprocess.run([strata_cli, "plan", "--links", links, "--workload", "diloco",
                          "--param-shapes", shapes, "--sync-every", str(H), "--fragments", str(P),
                          "--delay", str(TAU), "--wire-bits", str(bits), "--chunk", str(CHUNK),
                          "--json"], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)["diloco"]["sharded"]


def main():
    import socket

    here = os.path.dirname(os.path.abspath(__file__))
    strata_cli = sys.argv[1]
    links = sys.argv[2] if len(sys.argv) > 2 else \
        os.path.join(here, "..", "data", "links-metro-2-sites.json")
    import strata.torch  # noqa: F401 - imported once, before the workers are forked
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"T_PORT": str(port), "T_JOB": f"plan-{secrets.token_hex(4)}"}
    sys.stdout.flush()
    sys.stderr.flush()
    pids = {(site, local): spawn(site, local, env) for site in (0, 1) for local in (0, 1)}
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    ok = True
    for key, pid in pids.items():
        rc = wait(pid, 180)
        if rc != 0:
            print(f"worker site {key[0]} rank {key[1]}: {rc}", file=sys.stderr)
            ok = False
    if not ok:
        print("FAILED")
        return 1
    print(f"{'wire':5} {'site':>4} {'rank':>4} {'values':>7} {'measured B/outer':>17} "
          f"{'planned':>8}")
    for compress, bits in WIRES:
        sharded = plan(strata_cli, links, bits)
        for site in (0, 1):
            site_bytes = 0
            for local in (0, 1):
                r = json.loads(store.get(f"report/{compress}/{site}/{local}"))
                outer = r["fragment_exchanges"] / P  # outer steps: every fragment once
                if outer != STEPS // H:
                    print(f"{compress} site {site} rank {local}: {r['fragment_exchanges']} "
                          f"fragment exchanges, want {P * (STEPS // H)}", file=sys.stderr)
                    ok = False
                    continue
                measured = r["wan_bytes"] / outer
                site_bytes += measured
                group = [g for g in sharded["ranks"] if g["first"] <= local <= g["last"]][0]
                print(f"{compress:5} {site:4} {local:4} {r['values']:7} {measured:17.1f} "
                      f"{group['wan_bytes_per_outer_step']:8.0f}")
                if r["values"] != group["values"]:
                    print(f"{compress} site {site} rank {local}: shards of {r['values']} values, "
                          f"the plan says {group['values']}", file=sys.stderr)
                    ok = False
                if r["messages"] / outer != group["messages_per_outer_step"]:
                    print(f"{compress} site {site} rank {local}: {r['messages'] / outer} "
                          f"messages per outer step, the plan says "
                          f"{group['messages_per_outer_step']}", file=sys.stderr)
                    ok = False
                if measured != group["wan_bytes_per_outer_step"]:
                    print(f"{compress} site {site} rank {local}: {measured} WAN bytes per outer "
                          f"step, the plan says {group['wan_bytes_per_outer_step']}",
                          file=sys.stderr)
                    ok = False
            print(f"{compress:5} {site:4}  all {'':7} {site_bytes:17.1f} "
                  f"{sharded['wan_bytes_per_outer_step_max']:8.0f}")
            if not sharded["wan_bytes_per_outer_step_min"] <= site_bytes <= \
                    sharded["wan_bytes_per_outer_step_max"] or \
                    (site == 0 and site_bytes != sharded["wan_bytes_per_outer_step"]):
                print(f"{compress} site {site}: {site_bytes} WAN bytes per outer step, the plan "
                      f"says {sharded['wan_bytes_per_outer_step']}", file=sys.stderr)
                ok = False
        if sharded["uneven_parameters"] != 6:
            print(f"the plan counts {sharded['uneven_parameters']} uneven splits, want 6",
                  file=sys.stderr)
            ok = False
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
