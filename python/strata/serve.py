# SPDX-License-Identifier: Apache-2.0
"""strata.serve: serving a model across sites, on strata's low-latency lane (strata.kv).

Two modes, after the seed's layer 4 for inference (docs/serving.md):

* **Cross-site pipeline** (Petals-like, arXiv 2209.01188): span servers each hold a range of the
  model's blocks and the KV caches of the generations passing through them. A client holds the
  embedding and the head, picks the route over (server, blocks) hops that covers every block at
  the least predicted per-token latency (each hop: the measured lane round trip to the server
  plus the server's measured compute time per block), and sends each step's activations along
  it. When a server fails mid-generation, the client bans it, routes again, and replays the
  generation's past inputs to the new hops to rebuild their caches; the tokens are the same.
* **Region replicas** (SkyServe-like): full replicas; a router sends each request to the healthy
  replica with the least predicted latency, RTT + in-flight requests x measured service time,
  checks health in the background, and retries a request whose replica failed elsewhere.

Everything goes over strata.kv agents (authenticated, one lane connection per peer); servers
announce themselves in strata's rendezvous store under serve/<job>/. The model is
strata.tinylm (weights from a seed on every process). Run `python3 -m strata.serve -h`.

Wire: a lane message is a 4-byte little-endian header length, a JSON header, then float32 rows.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import heapq
import json
import os
import random
import signal
import struct
import sys
import threading
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, Hashable, List, Optional, Sequence, Set,
                    Tuple, TypedDict, Union)

import numpy as np
import torch

from . import AbortedError, Error, MismatchError, PeerLostError
from . import TimeoutError as StrataTimeoutError
from . import kv, tinylm

TAG_PING, TAG_FORWARD, TAG_REPLAY, TAG_END, TAG_GENERATE = 1, 2, 3, 4, 5
# A replay carries several steps' rows in one lane message, and returns as many: keep each
# message under the lane's limit with room for the header.
_REPLAY_BYTES = kv.LANE_MAX_BYTES - 4096
# What a dead or unreachable server looks like to a caller.
_LOST = (PeerLostError, StrataTimeoutError, AbortedError)


if TYPE_CHECKING:
    from typing_extensions import TypeAlias

    #: A message's JSON header.
    Header: TypeAlias = Dict[str, Any]
    #: A hop of a route: (server name, first block, end block).
    Hop: TypeAlias = Tuple[str, int, int]
    #: What a store holds: kv.Store's set, get and add.
    _History: TypeAlias = Dict[int, List[torch.Tensor]]


# The examples of the classes' docstrings (help() shows them; tests/python/test_docstrings.py
# runs them).
_PIPELINE_EXAMPLE = """
    Two span servers and a client, in one process here (each is normally a process of its own,
    anywhere):

    >>> from strata import kv, serve, tinylm
    >>> store = kv.StoreServer(secret="s3cret", job_id="demo")
    >>> addr, cfg = f"127.0.0.1:{store.port}", tinylm.Config(blocks=4)
    >>> spans = [serve.SpanServer(f"span{a}", addr, "s3cret", "demo", cfg, a, a + 2)
    ...          for a in (0, 2)]
    >>> client = serve.PipelineClient(addr, "s3cret", "demo", cfg)
    >>> tokens, latencies_ms = client.generate(list(b"hello"), 4)
    >>> tokens == tinylm.generate_local(cfg, list(b"hello"), 4), client.route
    (True, [('span0', 0, 2), ('span2', 2, 4)])
    >>> client.close()
    >>> for server in spans:
    ...     server.close()
    >>> store.stop()
"""
_REPLICA_EXAMPLE = """
    A replica and a router, in one process here (each is normally a process of its own):

    >>> from strata import kv, serve, tinylm
    >>> store = kv.StoreServer(secret="s3cret", job_id="demo")
    >>> addr, cfg = f"127.0.0.1:{store.port}", tinylm.Config(blocks=2)
    >>> replica = serve.ReplicaServer("replica0", addr, "s3cret", "demo", cfg)
    >>> router = serve.Router(addr, "s3cret", "demo")
    >>> tokens, name, attempts = router.submit(list(b"hi"), 3)
    >>> name, attempts, tokens == tinylm.generate_local(cfg, list(b"hi"), 3)
    ('replica0', 1, True)
    >>> router.close()
    >>> replica.close()
    >>> store.stop()
"""


class SpanInfo(TypedDict):
    """A span server as a PipelineClient knows it."""
    peer: kv.Peer
    start: int
    end: int
    rtt_ms: float
    compute_ms_per_block: float


class ReplicaInfo(TypedDict):
    """A replica as a Router knows it."""
    peer: kv.Peer
    check_peer: kv.Peer
    rtt_ms: float
    service_ms: float
    inflight: int
    healthy: bool


def pack(header: Header, rows: Optional[torch.Tensor] = None) -> bytes:
    """A lane message: the header's length (4 bytes, little-endian), the JSON header, then the
    rows as float32."""
    h = json.dumps(header, separators=(",", ":")).encode()
    body = b"" if rows is None else rows.detach().to(torch.float32).contiguous().numpy().tobytes()
    return struct.pack("<I", len(h)) + h + body


def unpack(msg: bytes, d_model: Optional[int] = None) -> Tuple[Header, Optional[torch.Tensor]]:
    """(header, rows) of a lane message; rows is None when it carries none, else [-1, d_model]
    (flat without d_model)."""
    if not msg:
        return {}, None  # a handler that answered None
    n = struct.unpack_from("<I", msg)[0]
    header: Header = json.loads(msg[4:4 + n])
    body = msg[4 + n:]
    if not body:
        return header, None
    rows = torch.from_numpy(np.frombuffer(body, np.float32).copy())
    return header, rows.reshape(-1, d_model) if d_model else rows


# ---- announcements in the store ----

def announce(store: kv.Store, job: str, record: Header) -> None:
    """Append a record to serve/<job>/: a counter gives it a slot, then the slot is set."""
    slot = store.add(f"serve/{job}/count", 1) - 1
    store.set(f"serve/{job}/{slot}", json.dumps(record).encode())


def announcements(store: kv.Store, job: str, since: int = 0) -> Tuple[List[Header], int]:
    """The records from slot `since` on, and the next slot to read."""
    count = store.add(f"serve/{job}/count", 0)
    return [json.loads(store.get(f"serve/{job}/{i}", 5.0)) for i in range(since, count)], count


# ---- servers ----

class _Server:
    """Common to span servers and replicas: an agent whose lane handler answers requests."""

    def __init__(self, name: str, store_addr: str, secret: str, job: str,
                 listen_host: Optional[str], timeout: float) -> None:
        self.lock = threading.Lock()  # one model, many lane threads (one per client)
        self.agent = kv.Agent(name, secret=secret, job_id=job, backend="tcp",
                              listen_host=listen_host, timeout=timeout)
        self.store_addr, self.job, self.name = store_addr, job, name
        self.store = kv.Store(store_addr, secret, job)

    def handle(self, sender: str, tag: int, request: bytes) -> Optional[bytes]:
        raise NotImplementedError

    def start(self, record: Header) -> None:
        self.agent.set_handler(self.handle)
        self.agent.publish(self.store_addr)
        announce(self.store, self.job, record)

    def close(self) -> None:
        """Stop serving: the agent and the store connection."""
        self.agent.close()
        self.store.close()

    def serve_forever(self) -> None:
        """Serve until SIGINT or SIGTERM, then close the agent."""
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(1.0):
            pass
        self.agent.close()


class SpanServer(_Server):
    __doc__ = """Blocks [start, end) of the model; a KV cache per (client, generation, sub-span).

    It announces itself in the store at once and serves on its agent's threads until close()
    (or serve_forever()).
""" + _PIPELINE_EXAMPLE

    def __init__(self, name: str, store_addr: str, secret: str, job: str, cfg: tinylm.Config,
                 start: int, end: int, listen_host: Optional[str] = None, token_ms: float = 0.0,
                 timeout: float = 10.0) -> None:
        super().__init__(name, store_addr, secret, job, listen_host, timeout)
        self.cfg, self.blocks, self.token_ms = cfg, tinylm.Blocks(cfg, start, end), token_ms
        self.compute_ms = self._measure()
        self.start({"kind": "span", "name": name, "start": start, "end": end,
                    "compute_ms_per_block": self.compute_ms})

    def _measure(self) -> float:
        """Milliseconds one decode step spends per block (median of a few, padded to token_ms)."""
        x = torch.zeros(1, self.cfg.d_model)
        times = []
        for i in range(9):
            t0 = time.perf_counter()
            self.blocks.forward(("measure", i), x)
            times.append(time.perf_counter() - t0)
            self.blocks.drop(("measure", i))
        per_step = max(sorted(times)[len(times) // 2] * 1e3, self.token_ms)
        return per_step / (self.blocks.end - self.blocks.start)

    def _run(self, key: Hashable, x: torch.Tensor, a: int, b: int) -> torch.Tensor:
        t0 = time.perf_counter()
        y = self.blocks.forward(key, x, a, b)
        pad = self.token_ms * (b - a) / (self.blocks.end - self.blocks.start)
        left = pad / 1e3 - (time.perf_counter() - t0)
        if left > 0:
            time.sleep(left)  # an emulated slower accelerator: time per step, not per row
        return y

    def handle(self, sender: str, tag: int, request: bytes) -> Optional[bytes]:
        header, rows = unpack(request, self.cfg.d_model)
        with self.lock:
            if tag == TAG_PING:
                return pack({"start": self.blocks.start, "end": self.blocks.end,
                             "compute_ms_per_block": self.compute_ms})
            key = (sender, header["gen"], header["start"], header["end"])
            if tag == TAG_END:
                self.blocks.drop(key)
                return None
            a, b = header["start"], header["end"]
            if tag == TAG_FORWARD:
                if header["pos"] != self.blocks.length(key):
                    raise MismatchError(-6, "STRATA_ERR_MISMATCH",
                                        f"the cache holds {self.blocks.length(key)} positions, "
                                        f"the step starts at {header['pos']}")
                assert rows is not None, "a step without rows"  # the caller gets AbortedError
                return pack({}, self._run(key, rows, a, b))
            if tag == TAG_REPLAY:
                if header["reset"]:
                    self.blocks.drop(key)
                if header["pos"] != self.blocks.length(key):
                    raise MismatchError(-6, "STRATA_ERR_MISMATCH", "replay out of order")
                out, at = [], 0
                for n in header["rows"]:
                    assert rows is not None, "steps without rows"  # the caller: AbortedError
                    out.append(self.blocks.forward(key, rows[at:at + n], a, b))
                    at += n
                return pack({}, torch.cat(out)) if out else pack({})
        raise ValueError(f"unknown tag {tag}")


class ReplicaServer(_Server):
    __doc__ = """The whole model; each GENERATE request is one greedy generation, served in turn.

    It announces itself in the store at once and serves until close() (or serve_forever()); a
    Router sends it requests.
""" + _REPLICA_EXAMPLE

    def __init__(self, name: str, store_addr: str, secret: str, job: str, cfg: tinylm.Config,
                 listen_host: Optional[str] = None, token_ms: float = 0.0,
                 timeout: float = 10.0) -> None:
        super().__init__(name, store_addr, secret, job, listen_host, timeout)
        weights = tinylm.make_weights(cfg)
        self.cfg, self.token_ms = cfg, token_ms
        self.head, self.blocks = tinylm.Head(cfg, weights), tinylm.Blocks(cfg, 0, cfg.blocks,
                                                                           weights)
        self.served = 0
        self.start({"kind": "replica", "name": name})

    def handle(self, sender: str, tag: int, request: bytes) -> Optional[bytes]:
        header, _ = unpack(request)
        if tag == TAG_PING:
            return pack({"served": self.served})
        if tag != TAG_GENERATE:
            raise ValueError(f"unknown tag {tag}")
        with self.lock:
            t0 = time.perf_counter()
            tokens: List[int] = list(header["prompt"])
            out: List[int] = []
            key = (sender, header["id"])
            x = self.head.inputs(tokens, 0)
            try:
                for i in range(header["tokens"]):
                    step0 = time.perf_counter()
                    token = self.head.next_token(self.blocks.forward(key, x))
                    left = self.token_ms / 1e3 - (time.perf_counter() - step0)
                    if left > 0:
                        time.sleep(left)
                    out.append(token)
                    x = self.head.inputs([token], len(tokens))
                    tokens.append(token)
            finally:
                self.blocks.drop(key)
            self.served += 1
            return pack({"tokens": out, "service_ms": (time.perf_counter() - t0) * 1e3})


# ---- the pipeline client ----

class NoRouteError(RuntimeError):
    """No set of live servers covers every block (PipelineClient), or no healthy replica is
    left (Router).

    >>> from strata import serve
    >>> try:
    ...     raise serve.NoRouteError("no live servers cover blocks 0:8")
    ... except RuntimeError as e:
    ...     print(e)
    no live servers cover blocks 0:8
    """


class _HopFailed(Exception):
    def __init__(self, server: str, error: Exception) -> None:
        super().__init__(f"{server}: {error}")
        self.server, self.error = server, error


class PipelineClient:
    __doc__ = """Generates through span servers: routes, sends activations, fails over with replay.

    discover() connects to the announced span servers, plan() picks the route, generate() runs
    a generation (discovering first if it knows no server).
""" + _PIPELINE_EXAMPLE

    def __init__(self, store_addr: str, secret: str, job: str, cfg: tinylm.Config,
                 name: Optional[str] = None, timeout: float = 10.0, pings: int = 5) -> None:
        self.cfg, self.store_addr, self.job, self.pings = cfg, store_addr, job, pings
        self.agent = kv.Agent(name or f"client-{os.getpid()}-{random.getrandbits(24)}",
                              secret=secret, job_id=job, backend="tcp", timeout=timeout)
        self.store = kv.Store(store_addr, secret, job)
        self.head = tinylm.Head(cfg)
        self.timeout = timeout
        self.servers: Dict[str, SpanInfo] = {}
        self.banned: Set[str] = set()
        self.slots = 0  # announcements read so far
        self.failovers = self.replayed_steps = 0
        self.route: List[Hop] = []

    def close(self) -> None:
        """Close the agent and the store connection."""
        self.agent.close()
        self.store.close()

    def discover(self) -> None:
        """Connect to every announced span server not known yet; measure its lane RTT."""
        records, self.slots = announcements(self.store, self.job, self.slots)
        for rec in records:
            name = rec["name"]
            if rec["kind"] != "span" or name in self.servers or name in self.banned:
                continue
            try:
                peer = self.agent.fetch(self.store_addr, name, timeout=2.0)
                rtts = []
                for _ in range(self.pings):
                    t0 = time.perf_counter()
                    info, _ = unpack(self.agent.call(peer, TAG_PING, pack({}), self.timeout))
                    rtts.append((time.perf_counter() - t0) * 1e3)
            except _LOST:
                self.banned.add(name)  # announced, but gone
                continue
            self.servers[name] = SpanInfo(peer=peer, start=rec["start"], end=rec["end"],
                                          rtt_ms=sorted(rtts)[len(rtts) // 2],
                                          compute_ms_per_block=info["compute_ms_per_block"])

    def plan(self) -> Tuple[List[Hop], float]:
        """The hops [(server, a, b)] covering blocks 0..L at the least predicted latency: a
        shortest path over block boundaries, a hop costing RTT + compute per block x blocks."""
        L = self.cfg.blocks
        best: Dict[int, float] = {0: 0.0}
        back: Dict[int, Tuple[str, int]] = {}
        heap: List[Tuple[float, int]] = [(0.0, 0)]
        while heap:
            cost, a = heapq.heappop(heap)
            if a == L:
                break
            if cost > best.get(a, float("inf")):
                continue
            for name, s in sorted(self.servers.items()):
                if name in self.banned or not s["start"] <= a < s["end"]:
                    continue
                for b in range(a + 1, s["end"] + 1):
                    c = cost + s["rtt_ms"] + s["compute_ms_per_block"] * (b - a)
                    if c < best.get(b, float("inf")):
                        best[b], back[b] = c, (name, a)
                        heapq.heappush(heap, (c, b))
        if L not in best:
            raise NoRouteError(f"no live servers cover blocks 0:{L} (banned: {sorted(self.banned)})")
        hops: List[Hop] = []
        b = L
        while b:
            name, a = back[b]
            hops.append((name, a, b))
            b = a
        return hops[::-1], best[L]

    def _call(self, server: str, tag: int, header: Header,
              rows: Optional[torch.Tensor] = None) -> Tuple[Header, Optional[torch.Tensor]]:
        try:
            return unpack(self.agent.call(self.servers[server]["peer"], tag, pack(header, rows),
                                          self.timeout), self.cfg.d_model)
        except _LOST as e:
            raise _HopFailed(server, e) from e

    def _replay(self, gen: int, hop: Hop, history: _History, k: int) -> None:
        """Rebuild a hop's cache for steps 0..k-1 from the inputs at its first block."""
        server, a, b = hop
        outs: List[torch.Tensor] = []
        first, pos, i = True, 0, 0
        while i < k or first:
            chunk: List[torch.Tensor] = []
            size = 0
            while i < k and (not chunk or size + history[a][i].numel() * 4 <= _REPLAY_BYTES):
                chunk.append(history[a][i])
                size += history[a][i].numel() * 4
                i += 1
            rows = torch.cat(chunk) if chunk else torch.zeros(0, self.cfg.d_model)
            _, y = self._call(server, TAG_REPLAY, {"gen": gen, "start": a, "end": b,
                                                   "reset": first, "pos": pos,
                                                   "rows": [c.shape[0] for c in chunk]}, rows)
            at = 0
            for c in chunk:
                assert y is not None  # a replay of rows returns as many
                outs.append(y[at:at + c.shape[0]])
                at += c.shape[0]
            pos += size // (4 * self.cfg.d_model)
            first = False
        self.replayed_steps += k
        if len(history.setdefault(b, [])) < k:
            history[b] = outs

    def _hop(self, gen: int, hop: Hop, history: _History, sessions: Dict[Hop, int],
             k: int) -> None:
        server, a, b = hop
        done = sessions.get(hop, 0)
        if done == k + 1:
            return  # this hop already ran step k before another hop failed
        if done != k:
            self._replay(gen, hop, history, k)
        pos = sum(x.shape[0] for x in history[a][:k])
        try:
            _, y = self._call(server, TAG_FORWARD, {"gen": gen, "start": a, "end": b, "pos": pos},
                              history[a][k])
        except MismatchError:
            sessions.pop(hop, None)  # the server lost this cache: replay it on the next try
            raise
        sessions[hop] = k + 1
        assert y is not None  # a forward step returns its rows
        if len(history.setdefault(b, [])) == k:
            history[b].append(y)

    def _step(self, gen: int, history: _History, sessions: Dict[Hop, int], k: int) -> torch.Tensor:
        for _ in range(2 * len(self.servers) + 2):  # each failure bans a server or drops a cache
            self.route, _ = self.plan()
            try:
                for hop in self.route:
                    self._hop(gen, hop, history, sessions, k)
                return history[self.cfg.blocks][k]
            except _HopFailed as e:
                self.banned.add(e.server)
                self.failovers += 1
                for hop in [h for h in sessions if h[0] == e.server]:
                    del sessions[hop]
            except MismatchError:
                self.failovers += 1
        raise NoRouteError("the generation failed over too many times")

    def generate(self, prompt: Sequence[int], new_tokens: int,
                 on_step: Optional[Callable[[int, int], object]] = None
                 ) -> Tuple[List[int], List[float]]:
        """Greedy tokens after prompt (a list of token ids); on_step(k, token) after each.
        Returns (tokens, per-token latencies in ms)."""
        if not self.servers:
            self.discover()
        gen = random.getrandbits(62)
        history: _History = {0: []}
        sessions: Dict[Hop, int] = {}
        tokens = list(prompt)
        out: List[int] = []
        latencies: List[float] = []
        x = self.head.inputs(tokens, 0)
        try:
            for k in range(new_tokens):
                t0 = time.perf_counter()
                history[0].append(x)
                token = self.head.next_token(self._step(gen, history, sessions, k))
                latencies.append((time.perf_counter() - t0) * 1e3)
                out.append(token)
                if on_step:
                    on_step(k, token)
                x = self.head.inputs([token], len(tokens))
                tokens.append(token)
        finally:
            for hop in sessions:
                try:
                    self._call(hop[0], TAG_END, {"gen": gen, "start": hop[1], "end": hop[2]})
                except (_HopFailed, Error):
                    pass  # a server that is gone has freed its caches with itself
        return out, latencies


# ---- the region-replica router ----

class Router:
    __doc__ = """Sends each request to the healthy replica minimising RTT + in-flight x service
    time; health checks in the background; a request whose replica fails is retried on another.
""" + _REPLICA_EXAMPLE

    def __init__(self, store_addr: str, secret: str, job: str, name: Optional[str] = None,
                 timeout: float = 30.0, health_s: float = 0.5,
                 health_timeout: float = 2.0) -> None:
        name = name or f"router-{os.getpid()}-{random.getrandbits(24)}"
        self.store_addr, self.job, self.timeout = store_addr, job, timeout
        self.health_s, self.health_timeout = health_s, health_timeout
        # Requests and health checks on separate agents: calls to one peer share its lane
        # connection in turn, and a ping must not wait behind a generation.
        self.agent = kv.Agent(name, secret=secret, job_id=job, backend="tcp", timeout=timeout)
        self.checker = kv.Agent(name + "-health", secret=secret, job_id=job, backend="tcp",
                                timeout=health_timeout)
        self.store = kv.Store(store_addr, secret, job)
        self.lock = threading.Lock()
        self.replicas: Dict[str, ReplicaInfo] = {}
        self.retries = self.requests = 0
        self.slots = 0  # announcements read so far
        self.stop = threading.Event()
        self.refresh()
        self.thread = threading.Thread(target=self._health_loop, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop the health checks; close the agents and the store connection."""
        self.stop.set()
        self.thread.join()
        self.agent.close()
        self.checker.close()
        self.store.close()

    def _ping(self, peer: kv.Peer) -> float:
        t0 = time.perf_counter()
        self.checker.call(peer, TAG_PING, pack({}), self.health_timeout)
        return (time.perf_counter() - t0) * 1e3

    def refresh(self) -> None:
        """Connect to replicas announced since the last refresh."""
        records, self.slots = announcements(self.store, self.job, self.slots)
        for rec in records:
            if rec["kind"] != "replica" or rec["name"] in self.replicas:
                continue
            try:
                peer = self.agent.fetch(self.store_addr, rec["name"], timeout=2.0)
                check_peer = self.checker.fetch(self.store_addr, rec["name"], timeout=2.0)
                rtt = min(self._ping(check_peer) for _ in range(3))
            except _LOST:
                continue
            with self.lock:
                self.replicas[rec["name"]] = ReplicaInfo(peer=peer, check_peer=check_peer,
                                                         rtt_ms=rtt, service_ms=0.0, inflight=0,
                                                         healthy=True)

    def _health_loop(self) -> None:
        while not self.stop.wait(self.health_s):
            for name, r in list(self.replicas.items()):
                try:
                    if not r["healthy"]:
                        # A failed call leaves its connection broken for good: connect both
                        # agents again from the store's blob (a restarted replica's, if any).
                        check_peer = self.checker.fetch(self.store_addr, name, timeout=1.0)
                        self._ping(check_peer)
                        peer = self.agent.fetch(self.store_addr, name, timeout=1.0)
                        with self.lock:
                            r["peer"], r["check_peer"] = peer, check_peer
                    rtt = self._ping(r["check_peer"])
                    with self.lock:
                        r["healthy"] = True
                        r["rtt_ms"] = 0.8 * r["rtt_ms"] + 0.2 * rtt
                except Error:
                    with self.lock:
                        r["healthy"] = False
            try:
                self.refresh()
            except Error:
                pass  # the store is unreachable: keep routing over the replicas known

    def predicted_ms(self, r: ReplicaInfo) -> float:
        """What a request sent to replica r now is predicted to wait: RTT + queue x service."""
        return r["rtt_ms"] + r["inflight"] * r["service_ms"]

    def inflight(self, name: str) -> int:
        """Requests on their way to or served by a replica now."""
        with self.lock:
            return self.replicas[name]["inflight"]

    def submit(self, prompt: Sequence[int], new_tokens: int,
               request_id: Optional[int] = None) -> Tuple[List[int], str, int]:
        """Generate on the best replica; on failure retry on the next best. Returns
        (tokens, replica name, attempts)."""
        request_id = request_id if request_id is not None else random.getrandbits(62)
        tried: Set[str] = set()
        while True:
            with self.lock:
                live = [(self.predicted_ms(r), n) for n, r in self.replicas.items()
                        if r["healthy"] and n not in tried]
                if not live:
                    raise NoRouteError(f"no healthy replica left (tried {sorted(tried)})")
                name = min(live)[1]
                r = self.replicas[name]
                r["inflight"] += 1
                self.requests += 1
            t0 = time.perf_counter()
            try:
                reply = self.agent.call(r["peer"], TAG_GENERATE,
                                        pack({"id": request_id, "prompt": list(prompt),
                                              "tokens": new_tokens}), self.timeout)
            except _LOST:
                with self.lock:
                    r["inflight"] -= 1
                    r["healthy"] = False
                    self.retries += 1
                tried.add(name)
                continue
            header, _ = unpack(reply)
            with self.lock:
                r["inflight"] -= 1
                s = header["service_ms"]  # what one request costs there, without the queue
                r["service_ms"] = s if r["service_ms"] == 0 else 0.8 * r["service_ms"] + 0.2 * s
            return header["tokens"], name, len(tried) + 1


# ---- open-loop load against the router ----

def run_load(router: Router, cfg: tinylm.Config, rate: float, duration: float,
             new_tokens: int = 8, prompts: int = 4, seed: int = 1,
             kill_pid_file: Optional[str] = None, kill_at: Optional[float] = None,
             workers: int = 64) -> Dict[str, Any]:
    """Poisson arrivals at `rate` per second for `duration` seconds, each request submitted at
    its arrival time whatever the earlier ones are doing (open loop: latency counts from the
    scheduled arrival, so a stalled system is not hidden by a slowed client). With kill_pid_file,
    SIGKILL that process at kill_at seconds. Every reply is checked against a local run of its
    prompt: a request that fails or returns other tokens is lost."""
    rng = random.Random(seed)
    texts = [list(f"request {i}: ".encode()) for i in range(prompts)]
    want = [tinylm.generate_local(cfg, t, new_tokens) for t in texts]
    arrivals: List[float] = []
    t = rng.expovariate(rate)
    while t < duration:
        arrivals.append(t)
        t += rng.expovariate(rate)
    # per request: (latency s, ok, replica, attempts, done at s)
    results: List[Optional[Tuple[float, bool, Optional[str], int, float]]] = [None] * len(arrivals)
    start = time.perf_counter() + 0.05

    def one(i: int) -> None:
        name: Optional[str]
        try:
            tokens, name, attempts = router.submit(texts[i % prompts], new_tokens)
            ok = tokens == want[i % prompts]
        except (Error, NoRouteError):
            ok, name, attempts = False, None, 0
        results[i] = (time.perf_counter() - start - arrivals[i], ok, name, attempts,
                      time.perf_counter() - start)

    killed: Optional[int] = None
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for i, at in enumerate(arrivals):
            if kill_pid_file and killed is None and kill_at is not None and at >= kill_at:
                killed = _kill_from(kill_pid_file, start + kill_at)
            delay = start + at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            pool.submit(one, i)
        if kill_pid_file and killed is None and kill_at is not None:
            killed = _kill_from(kill_pid_file, start + kill_at)
    done = [r for r in results if r and r[1]]
    lat = sorted(r[0] * 1e3 for r in done)
    end = max([duration] + [r[4] for r in done])  # arrivals' span, or the last reply's time
    served: Dict[Optional[str], int] = {}
    for r in done:
        served[r[2]] = served.get(r[2], 0) + 1
    return {"rate": rate, "duration_s": duration, "offered": len(arrivals), "completed": len(done),
            "lost": len(arrivals) - len(done), "throughput_rps": len(done) / end,
            "p50_ms": _pct(lat, 0.50), "p99_ms": _pct(lat, 0.99),
            "retried": sum(1 for r in done if r[3] > 1), "served": served, "killed": killed}


def _pct(sorted_values: Sequence[float], q: float) -> Optional[float]:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _kill_from(pid_file: str, when: float) -> int:
    delay = when - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    with open(pid_file) as f:
        pid = int(f.read().split()[0])
    os.kill(pid, signal.SIGKILL)
    return pid


# ---- command line ----

def _config(args: argparse.Namespace) -> tinylm.Config:
    return tinylm.Config(blocks=args.blocks, d_model=args.d_model, seed=args.seed)


def _tokens(text: str) -> List[int]:
    return list(text.encode())


def _span(text: str) -> Tuple[int, int]:
    try:
        a, b = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected blocks A:B, got {text!r}") from None
    if not 0 <= a < b:
        raise argparse.ArgumentTypeError(f"blocks {text} are empty or negative")
    return a, b


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; bad input is a message and status 2 (usage) or 1 (a failed run)."""
    try:
        return _main(argv)
    except (Error, NoRouteError, ValueError, OSError) as e:
        print(f"strata.serve: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def _main(argv: Optional[Sequence[str]]) -> int:
    p = argparse.ArgumentParser(prog="python3 -m strata.serve", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", required=True, help="the rendezvous store, HOST:PORT")
    common.add_argument("--secret", default=os.environ.get("STRATA_SECRET", ""))
    common.add_argument("--job", default="strata-serve", help="job id (store keys, agent keys)")
    common.add_argument("--seed", type=int, default=1, help="the model's weights")
    common.add_argument("--blocks", type=int, default=8, help="the model's blocks (layers)")
    common.add_argument("--d-model", type=int, default=64)
    common.add_argument("--timeout", type=float, default=10.0)
    common.add_argument("--pings", type=int, default=5, help="lane round trips per server")
    s = sub.add_parser("store", help="serve a rendezvous store until interrupted")
    s.add_argument("--addr", default="127.0.0.1:0")
    s.add_argument("--secret", default=os.environ.get("STRATA_SECRET", ""))
    s.add_argument("--job", default="strata-serve")
    for kind in ("server", "replica"):
        s = sub.add_parser(kind, parents=[common],
                           help="host blocks A:B" if kind == "server" else "host the whole model")
        s.add_argument("--name", required=True)
        s.add_argument("--listen-host", default=None)
        s.add_argument("--token-ms", type=float, default=0.0,
                       help="pad each step to this many ms (an emulated accelerator's speed)")
        s.add_argument("--pid-file", default=None, help="write this process's pid there")
        if kind == "server":
            s.add_argument("--span", required=True, type=_span, help="blocks A:B (A inclusive)")
    s = sub.add_parser("generate", parents=[common], help="greedy generation through span servers")
    s.add_argument("--prompt", default="strata serves ")
    s.add_argument("--tokens", type=int, default=32)
    s.add_argument("--check", action="store_true", help="compare with an unsplit local run")
    s.add_argument("--json", default=None, help="append the result as one JSON line here")
    s.add_argument("--expect", type=int, default=0, help="fail unless this many servers answer")
    s.add_argument("--kill-pid-file", default=None, help="SIGKILL the pid in this file ...")
    s.add_argument("--kill-after-tokens", type=int, default=0, help="... after this many tokens")
    s = sub.add_parser("route", parents=[common], help="print the route the client would take")
    s.add_argument("--expect", type=int, default=0, help="fail unless this many servers answer")
    s = sub.add_parser("load", parents=[common], help="open-loop Poisson load through a router")
    s.add_argument("--rate", type=float, required=True, help="requests per second")
    s.add_argument("--duration", type=float, default=10.0, help="seconds of arrivals")
    s.add_argument("--tokens", type=int, default=8, help="tokens per request")
    s.add_argument("--replicas", type=int, default=1, help="wait for this many replicas")
    s.add_argument("--kill-pid-file", default=None, help="SIGKILL the pid in this file ...")
    s.add_argument("--kill-at", type=float, default=None, help="... this many seconds in")
    s.add_argument("--json", default=None, help="append the result as one JSON line here")
    args = p.parse_args(argv)

    if args.cmd == "store":
        server = kv.StoreServer(args.addr, secret=args.secret or None, job_id=args.job)
        print(f"store on port {server.port}", flush=True)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(1.0):
            pass
        server.stop()
        return 0
    cfg = _config(args)
    if getattr(args, "pid_file", None):
        with open(args.pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    if args.cmd == "load":
        router = Router(args.store, args.secret, args.job, timeout=args.timeout)
        try:
            deadline = time.monotonic() + 30
            while len(router.replicas) < args.replicas and time.monotonic() < deadline:
                time.sleep(0.2)
            result = run_load(router, cfg, args.rate, args.duration, args.tokens,
                              seed=args.seed, kill_pid_file=args.kill_pid_file,
                              kill_at=args.kill_at)
            result["replicas"] = {n: round(r["rtt_ms"], 3) for n, r in router.replicas.items()}
        finally:
            router.close()
        line = json.dumps(result)
        print(line, flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(line + "\n")
        return 0 if result["lost"] == 0 else 1
    if args.cmd == "server":
        a, b = args.span
        if b > cfg.blocks:
            p.error(f"--span {a}:{b} goes past the model's {cfg.blocks} blocks")
        srv = SpanServer(args.name, args.store, args.secret, args.job, cfg, a, b,
                         args.listen_host, args.token_ms, args.timeout)
        print(f"{args.name}: blocks {a}:{b}, {srv.compute_ms:.3f} ms/block", flush=True)
        srv.serve_forever()
        return 0
    if args.cmd == "replica":
        replica = ReplicaServer(args.name, args.store, args.secret, args.job, cfg,
                                args.listen_host, args.token_ms, args.timeout)
        print(f"{args.name}: replica", flush=True)
        replica.serve_forever()
        return 0
    client = PipelineClient(args.store, args.secret, args.job, cfg, timeout=args.timeout,
                            pings=args.pings)
    try:
        client.discover()
        if len(client.servers) < args.expect:
            print(f"{len(client.servers)} span servers answer, not {args.expect}", file=sys.stderr)
            return 1
        hops, cost = client.plan()
        print("route: " + " -> ".join(f"{n}[{a}:{b}]" for n, a, b in hops) +
              f"  (predicted {cost:.2f} ms/token)", flush=True)
        if args.cmd == "route":
            return 0
        def on_step(k: int, token: int) -> None:
            if args.kill_pid_file and k + 1 == args.kill_after_tokens:
                _kill_from(args.kill_pid_file, 0.0)

        t0 = time.perf_counter()
        out, lat = client.generate(_tokens(args.prompt), args.tokens, on_step=on_step)
        wall = time.perf_counter() - t0
        decode = sorted(lat[1:]) or lat  # the first step is the prompt's (prefill)
        result = {"tokens": out, "route": [list(h) for h in hops], "predicted_ms": cost,
                  "p50_ms": _pct(decode, 0.50), "p99_ms": _pct(decode, 0.99),
                  "mean_ms": sum(decode) / len(decode), "tokens_per_s": len(out) / wall,
                  "failovers": client.failovers, "replayed_steps": client.replayed_steps,
                  "final_route": [list(h) for h in client.route], "step_ms": lat,
                  "rtt_ms": {n: s["rtt_ms"] for n, s in client.servers.items()}}
        print(f"tokens: {out}")
        print(f"per-token ms: p50 {result['p50_ms']:.2f} p99 {result['p99_ms']:.2f}, "
              f"{result['tokens_per_s']:.1f} tokens/s; failovers {client.failovers}, "
              f"replayed steps {client.replayed_steps}", flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(result) + "\n")
        if args.check:
            same = out == tinylm.generate_local(cfg, _tokens(args.prompt), args.tokens)
            print("equal to the unsplit run" if same else "DIFFERENT from the unsplit run")
            return 0 if same else 1
        return 0
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
