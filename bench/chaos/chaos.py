#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""chaos.py — the elastic communicators under churn, in one bounded command (issue 28, 5 and 8).

    bench/chaos/chaos.py --duration 60 --ranks 4 --transport shm|tcp|sites [--seed S]

Starts a standalone store (`strata store`: an elastic job's store must outlive any member), N
workers (bench/chaos/worker.c) with persistent ids, then every 0.5-2 s (seeded) either SIGKILLs a
random worker, starts a new one that joins (STRATA_JOIN=1), or, now and then, SIGSTOPs a member
for longer than STRATA_TIMEOUT. A frozen member is thawed (SIGCONT) after the others have gone on
without it: it must get STRATA_ERR_EXCLUDED and exit cleanly (status 3), never slip back in.
The number of running workers stays between 2 and N+1.

At the end every worker is stopped (SIGTERM), and the report says: collectives completed, kills,
freezes and joins survived, wrong results, hangs (a call longer than STRATA_TIMEOUT + 5 s, as the
workers log it, or a worker that does not stop), the time from a kill (freeze) to the first
failure a survivor saw (detection) and to the survivors' next successful collective (recovery),
and what dead communicators left behind: fds, threads and strata segments in each worker after
each membership change and once it has destroyed its last communicator, and /dev/shm entries.
The exit status is non-zero when a target is missed.

--transport sites runs the store and the workers in two `strata netem` sites (root,
/dev/net/tun); the emulation is always taken down at the end.
"""
import argparse
import bisect
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
EXIT_EXCLUDED = 3


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=60, help="seconds of churn (default 60)")
    p.add_argument("--ranks", type=int, default=4, help="workers at the start (default 4)")
    p.add_argument("--transport", choices=["shm", "tcp", "sites"], default="shm")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1.0, help="STRATA_TIMEOUT (default 1 s)")
    p.add_argument("--count", type=int, default=16384, help="f32 elements per allreduce")
    p.add_argument("--grow-every", type=int, default=10, help="steps between grows")
    p.add_argument("--interval", type=float, nargs=2, default=[0.5, 2.0], metavar=("MIN", "MAX"),
                   help="seconds between two actions, drawn uniformly (default 0.5 2)")
    p.add_argument("--freeze-probability", type=float, default=0.1,
                   help="share of actions that freeze a member instead (default 0.1)")
    p.add_argument("--min-members", type=int, default=1,
                   help="members the driver never kills below (default 1)")
    p.add_argument("--sites-link", default="0-1:rate=1gbit",
                   help="strata netem --link spec for --transport sites")
    p.add_argument("--build", default=os.path.join(SOURCE, "build"), help="build directory")
    p.add_argument("--out", help="directory for the logs (default: a new temporary one)")
    p.add_argument("--json", help="also write the report here as JSON")
    p.add_argument("--quiet", action="store_true", help="no line per action")
    p.add_argument("--analyze", metavar="DIR",
                   help="run nothing: report again on the logs a run left in DIR (its --out); "
                        "give the run's --transport, --timeout, --duration, --seed, --ranks")
    return p.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_worker(build, out):
    for path in (os.path.join(build, "strata-chaos-worker"),
                 os.path.join(build, "bench", "chaos", "strata-chaos-worker")):
        if os.access(path, os.X_OK):
            return path
    # Not built by CMake (the target is only in test builds): compile it against the library.
    path = os.path.join(out, "strata-chaos-worker")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not os.path.exists(os.path.join(build, "libstrata.so")):
        return None
    subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-I", os.path.join(SOURCE, "include"),
                    os.path.join(HERE, "worker.c"), "-o", path, "-L", build, "-lstrata",
                    "-Wl,-rpath," + os.path.abspath(build), "-lpthread"], check=True)
    return path


class Worker:
    def __init__(self, wid, proc, log_path, joiner, site):
        self.id, self.proc, self.log_path, self.joiner, self.site = wid, proc, log_path, joiner, site
        self.frozen_until = None  # SIGSTOPped until then
        self.thawed_at = None     # SIGCONTed then; must exit EXCLUDED
        self.member = False       # has been in a group (logged "members")
        self.read_at = 0

    def returncode(self):
        return self.proc.returncode

    def refresh(self):
        """Catch up on the worker's log: is it a member yet?"""
        try:
            with open(self.log_path) as f:
                f.seek(self.read_at)
                text = f.read()
        except FileNotFoundError:
            return
        cut = text.rfind("\n") + 1
        self.read_at += cut
        if '"ev":"members"' in text[:cut]:
            self.member = True


class Chaos:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.out = args.out or tempfile.mkdtemp(prefix="strata-chaos-")
        os.makedirs(self.out, exist_ok=True)
        self.strata = os.path.join(args.build, "strata")
        self.job = "chaos-%d-%d" % (os.getpid(), args.seed)
        self.netem = "chx%d" % (os.getpid() % 100000)
        self.workers = {}
        self.next_id = 0
        self.actions = []  # what the driver did, with its own clock
        self.store = None
        self.netem_up = False
        self.shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()

    def say(self, text):
        if not self.args.quiet:
            print("[%7.2f] %s" % (time.time() - self.t_start, text), flush=True)

    # ---- processes ----
    def in_site(self, site, cmd):
        if self.args.transport != "sites":
            return cmd
        return [self.strata, "netem", "exec", "--name", self.netem, str(site), "--"] + cmd

    def start_store(self):
        port = free_port()
        host = "10.77.0.1" if self.args.transport == "sites" else "127.0.0.1"
        self.store_addr = "%s:%d" % (host, port)
        with open(os.path.join(self.out, "store.log"), "w") as log:
            # the store admits only connections that prove the workers' secret
            env = dict(os.environ, STRATA_JOB_ID=self.job, STRATA_SECRET=self.secret)
            self.store = subprocess.Popen(
                self.in_site(0, [self.strata, "store", "--addr", self.store_addr]),
                stdout=log, stderr=subprocess.STDOUT, env=env)
        log_path = os.path.join(self.out, "store.log")
        for _ in range(200):  # until it says it listens (its address may be another site's)
            with open(log_path) as log:
                if "listening" in log.read():
                    return True
            if self.store.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def start_worker(self, joiner):
        wid = self.next_id
        self.next_id += 1
        site = wid % 2
        env = dict(os.environ)
        env.update({
            "CHAOS_ID": str(wid), "CHAOS_LOG": os.path.join(self.out, "w%d.jsonl" % wid),
            "CHAOS_COUNT": str(self.args.count), "CHAOS_GROW_EVERY": str(self.args.grow_every),
            "CHAOS_MAX_S": str(self.args.duration + 120),
            "STRATA_ADDR": self.store_addr, "STRATA_STORE_EXTERNAL": "1",
            "STRATA_JOB_ID": self.job, "STRATA_SECRET": self.secret,
            "STRATA_TIMEOUT": str(self.args.timeout),
            "STRATA_SHM": "0" if self.args.transport == "tcp" else "1",
        })
        for name in ("STRATA_RANK", "STRATA_WORLD_SIZE", "STRATA_JOIN", "STRATA_LOCAL_RANK"):
            env.pop(name, None)
        if joiner:
            env["STRATA_JOIN"] = "1"
        else:
            env.update({"STRATA_RANK": str(wid), "STRATA_WORLD_SIZE": str(self.args.ranks)})
        if self.args.transport == "sites":
            env["STRATA_SITE"] = "site%d" % site
        err = open(os.path.join(self.out, "w%d.stderr" % wid), "w")
        proc = subprocess.Popen(self.in_site(site, [self.worker_path]), env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
        err.close()
        self.workers[wid] = Worker(wid, proc, env["CHAOS_LOG"], joiner, site)
        return wid

    def running(self):
        return [w for w in self.workers.values() if w.proc.poll() is None]

    def active(self):
        return [w for w in self.running() if w.frozen_until is None and w.thawed_at is None]

    # ---- actions ----
    def record(self, action):
        self.actions.append(action)
        with open(os.path.join(self.out, "actions.jsonl"), "a") as f:
            f.write(json.dumps(action) + "\n")

    def act(self):
        active = self.active()
        for w in active:
            w.refresh()
        members = [w for w in active if w.member]
        # The last --min-members members are never killed: the group always has someone to
        # admit the joiners.
        victims = (active if len(members) > self.args.min_members
                   else [w for w in active if not w.member])
        frozen = any(w.frozen_until for w in self.workers.values())
        n = len(active)
        r = self.rng.random()
        if n <= 2 or not victims:
            choice = "start"
        elif n >= self.args.ranks + 1:
            choice = "kill"
        elif r < self.args.freeze_probability and not frozen and len(members) > 2:
            choice = "freeze"
        else:
            choice = "kill" if r < 0.55 else "start"
        now = time.time()
        if choice == "start":
            wid = self.start_worker(joiner=True)
            self.record({"t": now, "action": "start", "id": wid})
            self.say("start worker %d (joins)" % wid)
        elif choice == "kill":
            victim = self.rng.choice(victims)
            now = time.time()
            victim.proc.send_signal(signal.SIGKILL)
            self.record({"t": now, "action": "kill", "id": victim.id, "member": victim.member})
            self.say("SIGKILL worker %d%s" % (victim.id, "" if victim.member else " (not yet in)"))
        else:
            victim = self.rng.choice(members)
            hold = self.rng.uniform(2.5, 3.5) * self.args.timeout
            victim.proc.send_signal(signal.SIGSTOP)
            victim.frozen_until = now + hold
            self.record({"t": now, "action": "freeze", "id": victim.id, "member": True,
                         "hold_s": hold})
            self.say("SIGSTOP worker %d for %.1f s" % (victim.id, hold))

    def tend(self):
        """Thaw frozen workers when due; a thawed one that does not leave in time is a failure."""
        now = time.time()
        for w in self.workers.values():
            if w.frozen_until and now >= w.frozen_until:
                w.proc.send_signal(signal.SIGCONT)
                w.frozen_until, w.thawed_at = None, now
                self.say("SIGCONT worker %d: it must leave, excluded" % w.id)
            if w.thawed_at and w.proc.poll() is None and \
                    now - w.thawed_at > self.args.timeout + 5:
                w.proc.send_signal(signal.SIGKILL)
                self.record({"t": now, "action": "thaw_overstayed", "id": w.id})
                self.say("worker %d still runs %.0f s after its thaw: killed" %
                         (w.id, now - w.thawed_at))

    def run(self):
        self.t_start = time.time()
        self.secret = secrets.token_hex(16)
        if self.args.transport == "sites":
            per_site = (self.args.ranks + 2) // 2
            up = subprocess.run([self.strata, "netem", "up", "--name", self.netem, "--sites", "2",
                                 "--ranks-per-site", str(per_site), "--link", self.args.sites_link,
                                 "--lifetime", str(int(self.args.duration + 300))],
                                capture_output=True, text=True)
            if up.returncode != 0:
                print("netem up failed: %s" % up.stderr.strip(), file=sys.stderr)
                return None
            self.netem_up = True
        self.worker_path = find_worker(self.args.build, self.out)
        if not self.worker_path:
            print("no worker binary and no compiler/library to build one", file=sys.stderr)
            return None
        if not self.start_store():
            print("the store did not start (%s)" % self.store_addr, file=sys.stderr)
            return None
        for _ in range(self.args.ranks):
            self.start_worker(joiner=False)
        self.say("%d workers over %s, store %s, logs in %s" %
                 (self.args.ranks, self.args.transport, self.store_addr, self.out))
        # The churn starts once the first group exists: a kill during the first init (a loaded
        # host can take longer than STRATA_TIMEOUT to start them all) fails every init, and a run
        # with no group tests nothing. Bounded: a group that never forms is the run's finding.
        first = list(self.workers.values())
        formed_by = time.time() + 30 + 10 * self.args.timeout
        while time.time() < formed_by and not all(w.member for w in first) and \
                any(w.proc.poll() is None for w in first):
            time.sleep(0.05)
            for w in first:
                w.refresh()
        end = time.time() + self.args.duration
        next_action = time.time() + self.rng.uniform(*self.args.interval)
        while time.time() < end:
            time.sleep(0.05)
            self.tend()
            if time.time() >= next_action:
                self.act()
                next_action = time.time() + self.rng.uniform(*self.args.interval)
        return self.stop()

    def stop(self):
        # Let frozen workers go (they must leave excluded), then stop everyone.
        deadline = time.time() + self.args.timeout * 3.5 + self.args.timeout + 5
        while any(w.frozen_until or (w.thawed_at and w.proc.poll() is None)
                  for w in self.workers.values()) and time.time() < deadline:
            time.sleep(0.05)
            self.tend()
        self.t_stop = time.time()
        for w in self.running():
            w.proc.send_signal(signal.SIGTERM)
        stuck = []
        grace = time.time() + self.args.timeout + 5 + 2
        while self.running() and time.time() < grace:
            time.sleep(0.05)
        for w in self.running():
            w.refresh()
            # a joiner nobody admitted yet waits in its init by design; anyone else is stuck
            if w.member:
                stuck.append(w.id)
                self.dump_stacks(w)
            w.proc.send_signal(signal.SIGKILL)
            w.proc.wait()
        for w in self.workers.values():
            w.proc.wait()
        return stuck

    def dump_stacks(self, w):
        """Where a stuck worker is, for the report (gdb, when there is one)."""
        if not shutil.which("gdb"):
            return
        with open(os.path.join(self.out, "w%d.stacks" % w.id), "w") as f:
            # the executable named through /proc: a rebuild may have replaced the file
            subprocess.run(["gdb", "/proc/%d/exe" % w.proc.pid, "-p", str(w.proc.pid), "-batch",
                            "-ex",
                            "thread apply all bt"], stdout=f, stderr=subprocess.STDOUT,
                           timeout=60)

    def cleanup(self):
        for w in self.workers.values():
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGCONT)
                w.proc.kill()
                w.proc.wait()
        if self.store and self.store.poll() is None:
            self.store.terminate()
            try:
                self.store.wait(5)
            except subprocess.TimeoutExpired:
                self.store.kill()
        if self.netem_up:
            subprocess.run([self.strata, "netem", "down", "--name", self.netem],
                           capture_output=True)
            self.netem_up = False


def load_events(chaos):
    events = []
    for w in chaos.workers.values():
        try:
            with open(w.log_path) as f:
                for line in f:
                    try:
                        events.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass  # a line cut short by SIGKILL
        except FileNotFoundError:
            pass
    events.sort(key=lambda e: e["t"])
    return events


def write_timeline(chaos, events):
    """Every worker's events but its routine ones, and the driver's actions, on one clock."""
    routine = {"op", "resources", "recovered", "start"}
    rows = [(a["t"], "driver", a["action"], {k: v for k, v in a.items() if k not in ("t", "action")})
            for a in chaos.actions]
    rows += [(e["t"], "w%d" % e["id"], e["ev"],
              {k: v for k, v in e.items() if k not in ("t", "id", "ev")})
             for e in events if e["ev"] not in routine]
    rows.sort(key=lambda r: r[0])
    with open(os.path.join(chaos.out, "timeline.txt"), "w") as f:
        for t, who, what, fields in rows:
            f.write("%8.3f %-6s %-16s %s\n" % (t - chaos.t_start, who, what, json.dumps(fields)))


def percentile_summary(values):
    if not values:
        return None
    return {"n": len(values), "median_s": statistics.median(values), "worst_s": max(values)}


def report(chaos, stuck):
    args = chaos.args
    events = load_events(chaos)
    write_timeline(chaos, events)
    # one pass sorts the events by kind (a long run logs millions), and each action's search
    # starts at its own time by bisection rather than at the start of the run
    by_kind = {}
    for e in events:
        by_kind.setdefault(e["ev"], []).append(e)
    by = lambda name: by_kind.get(name, [])
    members_of = {}  # (worker id, epoch) -> the ids in its group
    for e in by("members"):
        members_of[(e["id"], e["epoch"])] = set(e["ids"])
    ops = by("op")  # in time order, as events are
    op_times = [e["t"] for e in ops]
    steps = {(e["epoch"], e["step"]) for e in ops}
    fails = sorted((e["detected_t"], e["id"]) for e in by("fail") if "detected_t" in e)
    fail_times = [f[0] for f in fails]

    def recovery(action):
        """Detection: the first failure a survivor logs after the action; recovery: the first
        collective completed by a group that no longer holds the victim."""
        t, victim = action["t"], action["id"]
        detected = next((d for d, wid in fails[bisect.bisect_right(fail_times, t):]
                         if wid != victim), None)
        recovered = None
        for i in range(bisect.bisect_right(op_times, t), len(ops)):
            e = ops[i]
            if e["id"] != victim and victim not in members_of.get((e["id"], e["epoch"]), {victim}):
                recovered = e["t"]
                break
        return (None if detected is None else detected - t,
                None if recovered is None else recovered - t)

    kills = [a for a in chaos.actions if a["action"] == "kill"]
    freezes = [a for a in chaos.actions if a["action"] == "freeze"]
    figures = {"kill": {"detect": [], "recover": [], "unrecovered": []},
               "freeze": {"detect": [], "recover": [], "unrecovered": []}}
    for action in [a for a in kills if a["member"]] + freezes:
        kind = figures[action["action"]]
        detect, recover = recovery(action)
        if detect is not None:
            kind["detect"].append(detect)
        if recover is not None:
            kind["recover"].append(recover)
        elif action["t"] < chaos.t_stop - 3 * args.timeout - 2:
            kind["unrecovered"].append(action["id"])

    hangs = [e for e in by("hang")]
    wrong = by("wrong")
    thaws = {a["id"] for a in freezes}
    thaw_results = {}
    for wid in thaws:
        w = chaos.workers[wid]
        thaw_results[wid] = w.returncode()
    thaw_bad = [wid for wid, rc in thaw_results.items() if rc != EXIT_EXCLUDED]
    # a worker excluded that nobody froze: the others took a live worker for dead
    excluded_live = sorted({e["id"] for e in by("excluded")} - thaws)

    # leaks: in-run (segments of an older epoch still mapped, fds or threads growing at equal
    # group size) and at the end (with no communicator left, back to the start's counts)
    leaks = []
    at_size = {}
    for e in by("resources"):
        if e["stale_fds"] or e["stale_maps"]:
            leaks.append("worker %d epoch %d: %d fds, %d mappings of older epochs' segments" %
                         (e["id"], e["epoch"], e["stale_fds"], e["stale_maps"]))
        at_size.setdefault((e["id"], e["size"]), []).append(e)
    # Growth at equal group size: a report can catch a dead peer's connections not yet closed or a
    # thread not yet joined, so one report against another proves nothing; a leak grows with every
    # epoch, so the least count of the later reports exceeds the least of the earlier ones.
    for (wid, size), reports in sorted(at_size.items()):
        if len(reports) < 4:
            continue  # too few to tell growth from a transient; the final report still checks
        half = len(reports) // 2
        early, late = reports[:half], reports[half:]
        fds0, fds1 = min(r["fds"] for r in early), min(r["fds"] for r in late)
        thr0, thr1 = min(r["threads"] for r in early), min(r["threads"] for r in late)
        if fds1 > fds0 + 2 or thr1 > thr0:
            leaks.append("worker %d at size %d: at least %d fds %d threads in its later %d "
                         "reports, %d and %d in its earlier %d" %
                         (wid, size, fds1, thr1, len(late), fds0, thr0, len(early)))
    finals = by("final")
    for e in finals:
        if e["leaked_fds"] > 0 or e["leaked_threads"] > 0 or e["memfd_maps"] or e["memfd_fds"]:
            leaks.append("worker %d after its last destroy: %d fds, %d threads, %d segments "
                         "more than before its first init" %
                         (e["id"], e["leaked_fds"], e["leaked_threads"], e["memfd_maps"]))
    shm_left = sorted(n for n in set(os.listdir("/dev/shm")) - chaos.shm_before
                      if "strata" in n or chaos.job in n) if os.path.isdir("/dev/shm") else []
    if shm_left:
        leaks.append("/dev/shm: %s" % ", ".join(shm_left))

    # one group at the end: the last membership of every worker that stopped cleanly
    last_group = {}
    for e in by("members"):
        last_group[e["id"]] = (e["epoch"], tuple(e["ids"]))
    clean_stop = {e["id"] for e in finals if e["rc"] == 0}
    groups = {last_group[i] for i in clean_stop if i in last_group}

    kill_member = [a for a in kills if a["member"]]
    r = {
        "transport": args.transport, "ranks": args.ranks, "duration_s": args.duration,
        "seed": args.seed, "timeout_s": args.timeout, "count": args.count,
        "collectives_completed": len(steps), "rank_ops_completed": len(ops),
        "kills": len(kills), "kills_of_members": len(kill_member),
        "kills_of_waiting_joiners": len(kills) - len(kill_member),
        "kills_survived": len(kill_member) - len(figures["kill"]["unrecovered"]),
        "freezes": len(freezes), "freezes_survived": len(freezes) - len(figures["freeze"]["unrecovered"]),
        "thawed_excluded": len(thaws) - len(thaw_bad), "thawed_not_excluded": thaw_bad,
        "starts": sum(1 for a in chaos.actions if a["action"] == "start"),
        "joins": len(by("joined")), "grows": len({(e["epoch"]) for e in by("grow")}),
        "shrinks": len({e["epoch"] for e in by("shrink")}),
        "wrong_results": len(wrong), "hangs": len(hangs) + len(stuck),
        "hang_events": hangs[:20], "stuck_at_stop": stuck,
        "excluded_while_live": excluded_live,
        "join_failures": len(by("init_failed")), "rejoins": len(by("rejoin")),
        "lone_survivor_could_not_grow": sorted({e["id"] for e in by("grow_unsupported")}), "gave_up": [e["id"] for e in by("gave_up")],
        "kill_detect": percentile_summary(figures["kill"]["detect"]),
        "kill_recover": percentile_summary(figures["kill"]["recover"]),
        "freeze_detect": percentile_summary(figures["freeze"]["detect"]),
        "freeze_recover": percentile_summary(figures["freeze"]["recover"]),
        "unrecovered": figures["kill"]["unrecovered"] + figures["freeze"]["unrecovered"],
        "leaks": leaks, "groups_at_end": len(groups),
        "leak_checks": {"resource_reports": len(by("resources")), "final_reports": len(finals)},
        "logs": chaos.out,
    }
    targets = {
        "wrong results = 0": r["wrong_results"] == 0,
        "hangs = 0": r["hangs"] == 0,
        "leaks = 0": not leaks,
        "collectives completed > 0": r["collectives_completed"] > 0,
        "every kill and freeze recovered from": not r["unrecovered"] and not r["gave_up"],
        "thawed workers excluded": not thaw_bad,
        "one group at the end": len(groups) <= 1,
        "kill recovery median < 2 x STRATA_TIMEOUT":
            r["kill_recover"] is None or r["kill_recover"]["median_s"] < 2 * args.timeout,
        "freeze recovery median < 2 x STRATA_TIMEOUT":
            r["freeze_recover"] is None or r["freeze_recover"]["median_s"] < 2 * args.timeout,
    }
    r["targets"] = targets
    return r


def print_report(r):
    def fig(s):
        return "-" if not s else "median %.3f s, worst %.3f s (n=%d)" % (
            s["median_s"], s["worst_s"], s["n"])
    print("chaos %s: %d ranks, %.0f s, seed %d, STRATA_TIMEOUT %.1f s, %d f32 per allreduce" %
          (r["transport"], r["ranks"], r["duration_s"], r["seed"], r["timeout_s"], r["count"]))
    print("  collectives completed   %d (%d rank-operations)" %
          (r["collectives_completed"], r["rank_ops_completed"]))
    print("  kills                   %d of members (%d survived), %d of joiners still waiting" %
          (r["kills_of_members"], r["kills_survived"], r["kills_of_waiting_joiners"]))
    print("  freezes                 %d (%d survived; %d thawed workers left excluded)" %
          (r["freezes"], r["freezes_survived"], r["thawed_excluded"]))
    print("  joins                   %d of %d started; %d grows, %d shrinks; %d admissions "
          "failed or dropped, joined again" %
          (r["joins"], r["starts"], r["grows"], r["shrinks"], r["join_failures"] + r["rejoins"]))
    print("  wrong results           %d" % r["wrong_results"])
    print("  hangs                   %d" % r["hangs"])
    print("  kill -> detection       %s" % fig(r["kill_detect"]))
    print("  kill -> next collective %s" % fig(r["kill_recover"]))
    print("  freeze -> detection     %s" % fig(r["freeze_detect"]))
    print("  freeze -> next coll.    %s" % fig(r["freeze_recover"]))
    if r["lone_survivor_could_not_grow"]:
        print("  a group of one could not grow (STRATA_ERR_UNSUPPORTED): workers %s" %
              r["lone_survivor_could_not_grow"])
    if r["excluded_while_live"]:
        print("  live workers excluded   %s (taken for dead)" % r["excluded_while_live"])
    print("  leaks                   %d (%d resource reports, %d final reports)" %
          (len(r["leaks"]), r["leak_checks"]["resource_reports"],
           r["leak_checks"]["final_reports"]))
    for line in r["leaks"][:10]:
        print("    " + line)
    for e in r["hang_events"][:5]:
        print("    hang: %s" % json.dumps(e))
    if r["stuck_at_stop"]:
        print("    did not stop: workers %s" % r["stuck_at_stop"])
    print("  logs                    %s" % r["logs"])
    for name, ok in r["targets"].items():
        print("  %s %s" % ("PASS" if ok else "FAIL", name))


class Analyzed:
    """What report() needs of a run, read back from the directory it left (--analyze)."""

    class Worker:
        def __init__(self, wid, log_path):
            self.id, self.log_path = wid, log_path
            self.excluded = False

        def returncode(self):
            return EXIT_EXCLUDED if self.excluded else 0

    def __init__(self, args):
        self.args, self.out = args, args.analyze
        with open(os.path.join(self.out, "actions.jsonl")) as f:
            self.actions = [json.loads(line) for line in f if line.strip()]
        self.t_start = self.actions[0]["t"] if self.actions else 0
        self.t_stop = self.t_start + args.duration
        self.shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
        self.job = "chaos-"
        self.workers = {}
        for name in os.listdir(self.out):
            m = re.fullmatch(r"w(\d+)\.jsonl", name)
            if m:
                self.workers[int(m.group(1))] = self.Worker(int(m.group(1)),
                                                            os.path.join(self.out, name))
        # a thawed worker that left with STRATA_ERR_EXCLUDED logged it
        for w in self.workers.values():
            with open(w.log_path) as f:
                w.excluded = any('"excluded"' in line for line in f)
        self.stuck = sorted(int(n[1:-7]) for n in os.listdir(self.out) if n.endswith(".stacks"))


def main():
    args = parse_args()
    if args.analyze:
        chaos = Analyzed(args)
        r = report(chaos, chaos.stuck)
        print_report(r)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(r, f, indent=1)
        return 0 if all(r["targets"].values()) else 1
    if args.transport == "sites" and (os.geteuid() != 0 or not os.path.exists("/dev/net/tun")):
        print("--transport sites needs root and /dev/net/tun", file=sys.stderr)
        return 77
    chaos = Chaos(args)

    def on_signal(sig, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        stuck = chaos.run()
    except KeyboardInterrupt:
        chaos.cleanup()
        return 130
    finally:
        chaos.cleanup()
    if stuck is None:
        return 77 if args.transport == "sites" else 2
    r = report(chaos, stuck)
    print_report(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0 if all(r["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
