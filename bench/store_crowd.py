#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/store_crowd.py — what a crowd of idle clients costs `strata store`.

Starts `strata store` (each binary given), opens CONNS authenticated connections to it and holds
them idle, then measures the store process's CPU (utime + stime from /proc) over an idle window,
and the store's CPU per request while one more client makes REQUESTS sequential ADD round trips
among the crowd, and the same with no crowd. Run by bench/store_crowd.sh; prints one table row per
binary.

usage: store_crowd.py CONNS REQUESTS IDLE_S STRATA_BIN [STRATA_BIN...]
"""
import hashlib
import os
import resource
import socket
import struct
import subprocess
import sys
import time

MAGIC, VERSION = 0x5354, 2
AUTH, ADD = 7, 4
KEY = hashlib.blake2b(b"strata-store-no-secret-v2", digest_size=32).digest()


def frame(op, request_id, body):
    head = struct.pack(">HBBII", MAGIC, VERSION, op, request_id, 1000)
    return struct.pack(">I", len(head) + len(body)) + head + body


def read_reply(sock):
    def exact(n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("store closed the connection")
            data += chunk
        return data

    (length,) = struct.unpack(">I", exact(4))
    payload = exact(length)
    _, _, _, request_id, status = struct.unpack(">HBBIi", payload[:12])
    return request_id, status, payload[12:]


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _, _, challenge = read_reply(sock)
    nonce = os.urandom(32)
    mac = hashlib.blake2b(b"strata-store-client-v2\0" + challenge + nonce, key=KEY,
                          digest_size=32).digest()
    sock.sendall(frame(AUTH, 1, nonce + mac))
    _, status, _ = read_reply(sock)
    if status != 0:
        raise RuntimeError(f"AUTH refused: status {status}")
    return sock


def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def per_request_us(pid, port, requests):
    sock = connect(port)
    key = b"bench/adds"
    body = struct.pack(">I", len(key)) + key + struct.pack(">q", 1)
    before, t0 = cpu_s(pid), time.monotonic()
    for i in range(requests):
        sock.sendall(frame(ADD, 2 + i, body))
        _, status, _ = read_reply(sock)
        assert status == 0
    wall = time.monotonic() - t0
    used = cpu_s(pid) - before
    sock.close()
    return used / requests * 1e6, wall / requests * 1e6


def run(binary, conns, requests, idle_s):
    env = dict(os.environ)
    for name in ("STRATA_SECRET", "STRATA_SECRET_FILE", "STRATA_JOB_ID"):
        env.pop(name, None)
    store = subprocess.Popen([binary, "store", "--addr", "127.0.0.1:0"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        port = int(store.stdout.readline().rsplit(":", 1)[1])
        alone_cpu_us, alone_wall_us = per_request_us(store.pid, port, requests)
        t0 = time.monotonic()
        crowd = [connect(port) for _ in range(conns)]
        connect_s = time.monotonic() - t0
        time.sleep(1.0)  # the accepts settle
        before = cpu_s(store.pid)
        time.sleep(idle_s)
        idle_pct = (cpu_s(store.pid) - before) / idle_s * 100
        crowd_cpu_us, crowd_wall_us = per_request_us(store.pid, port, requests)
        for sock in crowd:
            sock.close()
        return (f"| {binary} | {conns} | {connect_s:.2f} s | {idle_pct:.2f} % | "
                f"{alone_cpu_us:.1f} / {alone_wall_us:.1f} us | "
                f"{crowd_cpu_us:.1f} / {crowd_wall_us:.1f} us |")
    finally:
        store.terminate()
        store.wait()


def main():
    conns, requests, idle_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < conns + 64:
        sys.exit(f"store_crowd.py: the hard descriptor limit {hard} is below {conns + 64}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print("| store binary | idle connections | to connect them | store CPU while idle | "
          "store CPU / wall per ADD, no crowd | the same among the crowd |")
    print("|---|---|---|---|---|---|")
    for binary in sys.argv[4:]:
        print(run(binary, conns, requests, idle_s), flush=True)


if __name__ == "__main__":
    main()
