#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""report.py — the text report of bench/run.sh: per-size tables of strata, OpenMPI and Gloo,
ratios, physical limits, and the issue's targets marked PASS or FAIL.

usage: report.py RAW_DIR [--strata PATH]

RAW_DIR holds what run.sh wrote: {shm2,shm2r,shm4,tcp2}_{strata,mpi,gloo}_<phase>_r<round>.json (the
JSON of `strata bench -J`, bench/mpi_allreduce and bench/gloo_allreduce.py, one file per phase of
sizes and round), membw_r<round>.json and iperf_*_r<round>.json. Where a size was measured in
several rounds, the fastest round counts, for every library alike. Every comparison uses the in-place figures: the one mode all three
share (Gloo's allreduce always reduces the tensor in place, as DDP does with its buckets).
Ratios are strata/peer of bus bandwidth, which at one size is peer time / strata time.
"""
import glob
import json
import os
import platform
import re
import subprocess
import sys

MIB = 1 << 20
LIBS = [("strata", "strata"), ("mpi", "OpenMPI"), ("gloo", "Gloo")]
CONFIGS = [("shm2", "one host, shared memory, 2 ranks"),
           ("shm2r", "one host, shared memory, 2 ranks, registered buffers"),
           ("shm4", "one host, shared memory, 4 ranks"),
           ("tcp2", "TCP only, 2 ranks in two network namespaces over a veth pair")]
PEER_NOTES = {
    "shm": "OpenMPI: MPI_Allreduce over vader (shared memory); Gloo: loopback TCP "
           "(Gloo has no shared-memory transport)",
    "tcp": "OpenMPI: --mca pml ob1 --mca btl tcp,self; Gloo: TCP; strata: STRATA_SHM=0",
    "shm2r": "strata bench -R 1 (buffers from strata_mem_alloc: the peer reads them directly); "
             "OpenMPI: buffers from MPI_Alloc_mem, vader; Gloo has no registered buffers",
}


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def canonical(fig):
    """One row's figures in one spelling: strata bench -J writes nccl-tests' keys (time in us,
    bus_bw, nwrong), the peers' drivers (mpi_allreduce.c, gloo_allreduce.py) their own."""
    if fig is None or "time_us" in fig:
        return fig
    return {"time_us": fig["time"], "algbw_gbps": fig.get("alg_bw", 0),
            "busbw_gbps": fig["bus_bw"], "wrong": int(fig.get("nwrong") or 0)}


def load_runs(raw, config, lib):
    """size -> in-place figures, merged over phases and repetitions (the fastest repetition of
    each size wins); plus the number of wrong elements over every run."""
    rows, wrong = {}, 0
    for path in sorted(glob.glob(os.path.join(raw, "%s_%s_*.json" % (config, lib)))):
        data = load_json(path)
        if not data:
            continue
        for row in data.get("results", []):
            fig = canonical(row.get("in_place"))
            if not fig:
                continue
            size = row["size_bytes"] if "size_bytes" in row else row["size"]
            if size not in rows or fig["time_us"] < rows[size]["time_us"]:
                rows[size] = fig
            for key in ("in_place", "out_of_place"):
                other = canonical(row.get(key))
                if other and (other.get("wrong") or 0) > 0:
                    wrong += other["wrong"]
    return rows, wrong


def iperf_per_direction_gbps(raw):
    """GB/s each direction carries while both run at once: the best of --bidir and of two
    independent pairs, over every round."""
    best, how = 0.0, None
    for path in sorted(glob.glob(os.path.join(raw, "iperf_bidir*.json"))):
        bidir = load_json(path)
        if not bidir or "end" not in bidir:
            continue
        end = bidir["end"]
        fwd = end.get("sum_received", {}).get("bits_per_second", 0)
        rev = end.get("sum_received_bidir_reverse", {}).get("bits_per_second", 0)
        if fwd and rev and (fwd + rev) / 2 / 8e9 > best:
            best, how = (fwd + rev) / 2 / 8e9, "iperf3 --bidir: %.2f + %.2f GB/s" % (
                fwd / 8e9, rev / 8e9)
    for path in sorted(glob.glob(os.path.join(raw, "iperf_pair_ab*.json"))):
        ab = load_json(path)
        ba = load_json(path.replace("iperf_pair_ab", "iperf_pair_ba"))
        if not (ab and ba and "end" in ab and "end" in ba):
            continue
        fwd = ab["end"].get("sum_received", {}).get("bits_per_second", 0)
        rev = ba["end"].get("sum_received", {}).get("bits_per_second", 0)
        if fwd and rev and (fwd + rev) / 2 / 8e9 > best:
            best, how = (fwd + rev) / 2 / 8e9, "two iperf3 pairs at once: %.2f + %.2f GB/s" % (
                fwd / 8e9, rev / 8e9)
    return best, how


def membw_gbps(raw):
    """Best memcpy figures over every round: (one thread, all threads)."""
    one, every = 0.0, 0.0
    for path in glob.glob(os.path.join(raw, "membw*.json")):
        data = load_json(path) or {}
        one = max(one, data.get("memcpy_1thread_gbps", 0))
        every = max(every, data.get("memcpy_all_threads_gbps", 0))
    return one, every


def size_text(size):
    for unit, name in ((1 << 30, "GiB"), (MIB, "MiB"), (1024, "KiB")):
        if size >= unit and size % unit == 0:
            return "%d %s" % (size // unit, name)
    return "%d B" % size


def ratio_text(a, b):
    return "%6.2fx" % (a / b) if a and b else "%7s" % "-"


def fig_text(fig):
    if not fig:
        return "%9s %7s" % ("-", "-")
    us = fig["time_us"]
    time = "%9.0f" % us if us >= 10000 else "%9.1f" % us if us >= 100 else "%9.2f" % us
    return "%s %7.3f" % (time, fig["busbw_gbps"])


def print_table(config, title, data, limit_gbps, limit_name):
    print("== %s ==" % title)
    print("   %s" % PEER_NOTES.get(config, PEER_NOTES[config[:3]]))
    print("   limit: %s" % limit_name)
    print("   time in us, busbw in GB/s (in place); ratios = strata busbw / peer busbw")
    print("%10s | %9s %7s | %9s %7s | %9s %7s | %7s %7s | %7s" % (
        "size", "strata us", "busbw", "MPI us", "busbw", "Gloo us", "busbw",
        "s/MPI", "s/Gloo", "s/limit"))
    sizes = sorted(set().union(*[set(data[lib][0]) for lib, _ in LIBS]))
    for size in sizes:
        s, m, g = (data[lib][0].get(size) for lib, _ in LIBS)
        st = s["time_us"] if s else 0
        limit = "%6.0f%%" % (100 * s["busbw_gbps"] / limit_gbps) if s and limit_gbps else "-"
        print("%10s | %s | %s | %s | %s %s | %7s" % (
            size_text(size), fig_text(s), fig_text(m), fig_text(g),
            ratio_text(m["time_us"] if m else 0, st), ratio_text(g["time_us"] if g else 0, st),
            limit))
    for lib, name in LIBS:
        if not data[lib][0] and (lib, config) != ("gloo", "shm2r"):
            print("   (no %s results: see its log in the raw directory)" % name)
        if data[lib][1]:
            print("   WARNING: %s returned %d wrong elements" % (name, data[lib][1]))
    print()


def ratio_target(data, peer, min_size, want):
    """Min over sizes >= min_size of strata busbw / peer busbw."""
    s_rows, p_rows = data["strata"][0], data[peer][0]
    pairs = [(size, p_rows[size]["time_us"] / s_rows[size]["time_us"])
             for size in sorted(s_rows) if size >= min_size and size in p_rows
             and s_rows[size]["time_us"] > 0]
    if not pairs:
        return False, "no data"
    worst = min(pairs, key=lambda p: p[1])
    detail = ", ".join("%s %.2fx" % (size_text(size), r) for size, r in pairs)
    return worst[1] >= want, "min %.2fx at %s (%s)" % (worst[1], size_text(worst[0]), detail)


def limit_target(data, min_size, limit_gbps, want):
    rows = data["strata"][0]
    pairs = [(size, rows[size]["busbw_gbps"] / limit_gbps) for size in sorted(rows)
             if size >= min_size] if limit_gbps else []
    if not pairs:
        return False, "no data"
    worst = min(pairs, key=lambda p: p[1])
    return worst[1] >= want, "min %.0f%% at %s of %.3f GB/s per direction" % (
        100 * worst[1], size_text(worst[0]), limit_gbps)


def latency_target(data, size, want):
    s, m = data["strata"][0].get(size), data["mpi"][0].get(size)
    if not s or not m:
        return False, "no data"
    r = s["time_us"] / m["time_us"]
    return r <= want, "strata %.2f us, OpenMPI %.2f us: %.2fx" % (s["time_us"], m["time_us"], r)


def command_output(args):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def print_header(raw, strata):
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            cpu = m.group(1) if m else cpu
    except OSError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    commit = command_output(["git", "-C", here, "rev-parse", "--short", "HEAD"])
    mpi = command_output(["mpirun", "--version"]).split("\n")[0]
    print("strata bench/run.sh — allreduce, float32, sum; %s" % os.path.basename(raw))
    print("host: %s, %s, %d cpus, Linux %s" % (platform.node(), cpu, os.cpu_count(),
                                               platform.release()))
    print("strata: %s (commit %s); %s; torch %s (Gloo); %s" % (
        command_output([strata, "version"]) if strata else "?", commit or "?", mpi,
        _torch_version(), command_output(["iperf3", "--version"]).split("\n")[0]))
    print("method: per size, one untimed call, barrier, N timed calls, mean per rank, max over "
          "ranks;\n        busbw = size / time x 2(n-1)/n (nccl-tests); results checked "
          "after timing.")
    rounds = {m.group(1) for m in (re.search(r"_r(\d+)\.json$", p)
                                   for p in glob.glob(os.path.join(raw, "*_r*.json"))) if m}
    print("rounds: %d, libraries interleaved phase by phase; each library's fastest round per "
          "size is shown" % len(rounds))
    try:
        with open(os.path.join(raw, "loadavg.txt")) as f:
            loads = [line.split()[1:4] for line in f if len(line.split()) > 3]
        if loads:
            print("load average (1, 5, 15 min) at start %s, at end %s (%d cpus): figures need a "
                  "quiet machine" % (" ".join(loads[0]), " ".join(loads[-1]) if len(loads) > 1
                                     else "?", os.cpu_count()))
    except OSError:
        pass
    print()


def _torch_version():
    try:
        import torch
        return torch.__version__
    except ImportError:
        return "?"


def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: report.py RAW_DIR [--strata PATH]\n")
        return 2
    raw = sys.argv[1]
    strata = sys.argv[sys.argv.index("--strata") + 1] if "--strata" in sys.argv else None
    print_header(raw, strata)
    mem1, memall = membw_gbps(raw)
    duplex, duplex_how = iperf_per_direction_gbps(raw)
    all_data = {}
    for config, title in CONFIGS:
        data = {lib: load_runs(raw, config, lib) for lib, _ in LIBS}
        all_data[config] = data
        if not any(data[lib][0] for lib, _ in LIBS):
            continue
        if config.startswith("shm"):
            limit, name = mem1, "memcpy %.2f GB/s one thread, %.2f GB/s all threads " \
                "(bench/membw.c); s/limit = strata busbw / one-thread memcpy" % (mem1, memall)
        else:
            limit, name = duplex, "%.3f GB/s per direction with both directions loaded (%s)" % (
                duplex, duplex_how or "iperf3 did not run")
        print_table(config, title, data, limit, name)

    big = 16 * MIB
    shm2, shm4, tcp2 = all_data["shm2"], all_data["shm4"], all_data["tcp2"]
    shm2r = all_data["shm2r"]
    targets = [
        ("shm 2 ranks >= 16 MiB: strata >= 2x Gloo", ratio_target(shm2, "gloo", big, 2.0)),
        ("shm 2 ranks >= 16 MiB: strata >= 1.5x OpenMPI", ratio_target(shm2, "mpi", big, 1.5)),
        ("shm 2 ranks >= 16 MiB, registered: strata >= 1.5x OpenMPI",
         ratio_target(shm2r, "mpi", big, 1.5)),
        ("TCP 2 ranks >= 16 MiB: strata >= 1.5x OpenMPI tcp", ratio_target(tcp2, "mpi", big, 1.5)),
        ("TCP 2 ranks >= 16 MiB: strata >= 1.2x Gloo", ratio_target(tcp2, "gloo", big, 1.2)),
        ("TCP 2 ranks >= 16 MiB: strata busbw >= 75% of duplex iperf3",
         limit_target(tcp2, big, duplex, 0.75)),
        ("8 B allreduce, shm 2 ranks: strata time <= 3x OpenMPI", latency_target(shm2, 8, 3.0)),
        ("8 B allreduce, shm 4 ranks: strata time <= 3x OpenMPI", latency_target(shm4, 8, 3.0)),
        ("8 B allreduce, TCP 2 ranks: strata time <= 3x OpenMPI", latency_target(tcp2, 8, 3.0)),
    ]
    wrong = sum(all_data[c][lib][1] for c, _ in CONFIGS for lib, _ in LIBS)
    checked = any(all_data[c]["strata"][0] for c, _ in CONFIGS)
    targets.append(("every result checked: #wrong 0", (checked and wrong == 0,
                                                        "%d wrong elements" % wrong)))
    print("== targets ==")
    for name, (ok, detail) in targets:
        print("%-4s  %-62s %s" % ("PASS" if ok else "FAIL", name, detail))
    return 0


if __name__ == "__main__":
    sys.exit(main())
