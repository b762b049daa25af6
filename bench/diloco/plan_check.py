# SPDX-License-Identifier: Apache-2.0
"""One rank of bench/diloco/plan_check.sh: the outer exchanges of DiLoCo over FSDP2 shards, timed.

Modes:
  --shapes                     print the demonstration model's parameter shapes (train.py's
                               ByteLM, its default size) as strata plan --param-shapes takes them
  --serve-store HOST:PORT      host the rendezvous store (a torch TCPStore) until killed
  --store HOST:PORT --site S --local L --values N ...
                               one rank: a strata communicator with the rank of the same shard
                               index in the other site, a strata.DiLoCo over N f32 values (this
                               rank's shards of the model, the plan's count), then --exchanges
                               outer exchanges (outer_start + outer_finish, as a delay-0 outer
                               step runs them), each timed; the rank's WAN bytes and messages
                               (strata's counters, from after create) and the times go to --out.
Every rank runs its exchange at the same instant as the others (a store barrier, a barrier of the
shard communicator, then a start time on this host's clock that the first rank names), so the
site's ranks share the WAN link as they do in training.
"""
import argparse
import datetime
import json
import os
import sys
import time

import numpy as np


def shapes():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from train import ByteLM  # noqa: E402 - the demonstration's model
    model = ByteLM(192, 4, 6, 64)
    print(",".join("x".join(str(n) for n in p.shape) for p in model.parameters()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", action="store_true")
    ap.add_argument("--serve-store")
    ap.add_argument("--store")
    ap.add_argument("--job", default="plan-check")
    ap.add_argument("--site", type=int)
    ap.add_argument("--local", type=int)
    ap.add_argument("--ranks", type=int, default=4, help="ranks in all (for the barriers)")
    ap.add_argument("--values", type=int)
    ap.add_argument("--compress", default="none")
    ap.add_argument("--exchanges", type=int, default=6)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.shapes:
        return shapes()
    import torch.distributed as dist
    host, port = (a.serve_store or a.store).rsplit(":", 1)
    if a.serve_store:
        server = dist.TCPStore(host, int(port), is_master=True, wait_for_workers=False,
                               timeout=datetime.timedelta(hours=1))
        time.sleep(3600)  # until the script stops it; the store lives as long as `server`
        del server
        return 0
    import strata
    store = dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(minutes=10))
    run = f"{a.job}/{a.compress}"
    comm = strata.Comm(store=dist.PrefixStore(f"{run}/shard{a.local}", store), rank=a.site,
                       world_size=2, job_id=f"{run}-shard{a.local}".replace("/", "-"))
    rng = np.random.default_rng(a.site * 100 + a.local)
    theta = rng.standard_normal(a.values).astype(np.float32)
    d = strata.DiLoCo(comm, [theta], sync_every=1, outer_lr=0.7, outer_momentum=0.6,
                      compress=a.compress)
    before = comm.stats()
    times = []
    for k in range(a.exchanges):
        theta += 0.01 * rng.standard_normal(a.values).astype(np.float32)
        key = f"{run}/barrier{k}"
        store.add(key, 1)
        while int(store.add(key, 0)) < a.ranks:
            time.sleep(0.001)
        # the store is in site 0: its ranks leave that barrier a WAN round trip before site 1's,
        # and a barrier of each shard's communicator lines up its two sites but not a site's
        # ranks with each other. In training they start together (FSDP2's collectives inside the
        # site keep them in step) and share the link, as the plan has them; every rank of this
        # host reads one clock, so all four start at one instant the first rank names
        comm.barrier()
        go = f"{run}/go{k}"
        if a.site == 0 and a.local == 0:
            store.set(go, repr(time.time() + 0.2))
        start = float(store.get(go))
        while time.time() < start:
            time.sleep(min(0.001, max(0.0, start - time.time())))
        t0 = time.perf_counter()
        d.outer_start(0)
        d.outer_finish(0)
        times.append(time.perf_counter() - t0)
    after = comm.stats()
    d.close()
    comm.destroy()
    result = {"site": a.site, "local": a.local, "values": a.values, "compress": a.compress,
              "times_s": times,
              "wan_bytes": after["wan_bytes_sent"] - before["wan_bytes_sent"],
              "messages": after["messages_sent"] - before["messages_sent"],
              "exchanges": a.exchanges}
    with open(a.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
