#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""One rank of the weight-sync benchmark (bench/weights/run.sh starts 1 publisher + 3
subscribers over 2 emulated sites).

The weights are the update sequence sparsity.py measured (SEQ.npz, SEQ.json), tiled until they
hold --params bf16 elements: tile k is the measured model at element offset k*E, starting from
the run's state after step k, and version v applies the run's step k+v-1 to it. So every
version of every tile is one real update (its measured fraction, in its measured places), and no
two tiles of a version carry the same update — identical tiles would let zstd find one in the
other and flatter the patch. The run must have at least tiles + versions - 2 steps.

Before the first version every rank calls prepare() (unless --no-prepare): the sets are checked
and the fan-out's WAN edges carry a few bandwidth-delay products once, so that version 1 does not
pay TCP's start-up. Rank 0 publishes and serves each version; ranks 1.. update to it. --mode patch publishes with
anchors every 16 versions (subscribers receive patches); --mode full makes every version an
anchor and gives every subscriber a fresh handle each round, so each round carries a full copy.
Every rank writes OUT (RANK replaced by its rank): per version the round's start and end on the
monotonic clock (one host: comparable across ranks), when its buffers held the version (a
subscriber; the rest of the call is the round's verdict), bytes in the stream, bytes this rank sent
across sites (strata's wan_bytes_sent), the CPU seconds the process spent in the round (every
thread: what a 2-core host must fit beside the emulator) and a CRC-32 of its weights.
"""
import argparse
import json
import math
import time
import zlib

import numpy as np

import strata
import strata.weights as weights


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", required=True, help="path prefix of sparsity.py's lr<lr>.npz/.json")
    ap.add_argument("--params", type=float, default=100e6)
    ap.add_argument("--versions", type=int, default=10)
    ap.add_argument("--mode", choices=["patch", "full"], default="patch")
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-prepare", action="store_true",
                    help="skip prepare(): the first version pays TCP's start-up on the WAN")
    args = ap.parse_args()

    meta = json.load(open(args.seq + ".json"))
    seq = np.load(args.seq + ".npz")
    per_tile = meta["elements"]
    tiles = max(1, math.ceil(args.params / per_tile))
    versions = args.versions
    if tiles + versions - 2 > len(meta["steps"]):
        raise SystemExit(f"bench.py: {tiles} tiles x {versions} versions need "
                         f"{tiles + versions - 2} measured steps, the run has {len(meta['steps'])}")
    comm = strata.Comm()
    rank = comm.rank
    flat = np.zeros(tiles * per_tile, dtype=np.uint16)
    flat.fill(1)  # resident, as a worker's weights are: a first touch is no part of a round
    flat.fill(0)
    views = [flat[k * per_tile:(k + 1) * per_tile] for k in range(tiles)]
    tensors = [(f"tile{k}", (views[k], "bf16")) for k in range(tiles)]
    rows = []
    if rank == 0:
        state = seq["init"].copy()
        for k, view in enumerate(views):  # tile k starts after step k
            if k > 0:
                state[seq[f"idx{k}"]] = seq[f"val{k}"]
            view[:] = state
        pub = weights.Publisher(tensors, anchor_every=1 if args.mode == "full" else 16,
                                history=4)
    sub = None
    prepared = None
    if not args.no_prepare:
        # once, before the first version, as a rollout pool does while the trainer computes its
        # first update: the sets checked, the fan-out drawn, its WAN edges' windows opened
        wan0 = comm.stats()["wan_bytes_sent"]
        if rank == 0:
            prepared = pub.prepare(comm)
        else:
            sub = weights.Subscriber(tensors)
            prepared = sub.prepare(comm)
        prepared["wan_bytes_sent"] = comm.stats()["wan_bytes_sent"] - wan0
    for v in range(1, versions + 1):
        if rank == 0 and v > 1:
            for k, view in enumerate(views):
                view[seq[f"idx{k + v - 1}"]] = seq[f"val{k + v - 1}"]
        if rank == 0:
            t_publish = time.monotonic()
            pub.publish()
            publish_s = time.monotonic() - t_publish
        elif sub is None or (args.mode == "full" and sub.version > 0):  # full: hold nothing
            if sub is not None:
                sub.close()
            sub = weights.Subscriber(tensors)
        wan0 = comm.stats()["wan_bytes_sent"]
        comm.barrier()  # every rank starts the round together: the time is the round's own
        start, cpu0 = time.monotonic(), time.process_time()
        info = pub.serve(comm) if rank == 0 else sub.update(comm)
        end, cpu_s = time.monotonic(), time.process_time() - cpu0
        row = {"version": v, "start": start, "end": end, "stream_bytes": info["stream_bytes"],
               "bytes_sent": info["bytes_sent"],
               "wan_bytes_sent": comm.stats()["wan_bytes_sent"] - wan0, "cpu_s": cpu_s,
               "reached": start + info.get("reached_s", 0.0),
               "crc32": zlib.crc32(flat)}
        if rank == 0:
            st = pub.version_info(v)
            row.update(publish_s=publish_s, full_bytes=st["full_bytes"],
                       patch_bytes=st["patch_bytes"], changed=st["changed"],
                       elements=st["elements"], encode_s=st["encode_s"], hash_s=st["hash_s"])
        else:
            row.update(blobs_applied=info["blobs_applied"], full_applied=info["full_applied"])
        rows.append(row)
    with open(args.out.replace("RANK", str(rank)), "w") as f:
        json.dump({"rank": rank, "mode": args.mode, "tiles": tiles, "prepare": prepared,
                   "rows": rows}, f)
    comm.destroy()


if __name__ == "__main__":
    main()
