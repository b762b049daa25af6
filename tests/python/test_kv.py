# SPDX-License-Identifier: Apache-2.0
"""strata.kv from Python: two processes on loopback (this script starts the second one).

For each backend (tcp, then auto: shm where this host allows cross-memory attach):
1. the target publishes its metadata through an authenticated store; the initiator fetches it,
   and later loads it again as bytes (carried by the lane), which replaces the peer in place;
2. a READ of the target's numpy region (16 descriptors, scattered) lands bit for bit, also into a
   CPU torch tensor when torch is there; a WRITE with a notification reaches the target, which
   checks its bytes when the notification arrives;
3. descriptors outside the target's region, naming a region it never had, or one it has since
   deregistered raise strata.InvalidArgError (a strata.Error) and are counted at the target; a
   local descriptor outside the initiator's regions raises before anything is sent;
4. the lane: a round trip; a handler that raises ValueError gives the caller AbortedError; one
   that raises strata.NotFoundError gives NotFoundError; a reply above 64 KiB is an error; the
   lane still answers afterwards; the target counts three handler errors;
5. a cancelled transfer ends (ABORTED, or OK if it finished first) and releases;
6. once the target has exited, a lane call raises PeerLostError or TimeoutError, never hangs;
7. closing an agent while another thread waits in it (the GIL released) ends that wait.
Exits 0 when all held, 77 without numpy.
"""
import os
import subprocess
import sys
import threading
import time

try:
    import numpy as np
except ImportError:
    print("skipped: python3 has no numpy")
    sys.exit(77)

import strata
import strata.kv as kv

SECRET = "test-kv-secret"
N = 1 << 16  # float32 elements in the target's first region
failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
        print(f"FAILED {what}", flush=True)


def pattern():
    return np.arange(N, dtype=np.float32) * 0.5 + 1


def target(store_addr, backend):
    """The second process: regions, a lane handler, and checks of what it received."""
    agent = kv.Agent(f"target-{backend}", secret=SECRET, backend=backend, timeout=5)
    cache = pattern()
    spare = np.zeros(4096, np.uint8)
    agent.register(cache)
    doomed = agent.register(spare)
    # set once the notified WRITE's bytes were compared: the initiator asks (tag 7) before it
    # writes into the same region again, so a slow target never compares later bytes
    compared = threading.Event()

    def handler(sender, tag, request):
        if tag == 7:
            return b"compared" if compared.wait(30) else b"not yet"
        if tag == 1:
            return request[::-1]
        if tag == 2:
            raise ValueError("the handler failed on purpose")
        if tag == 3:
            raise strata.NotFoundError(-15, "STRATA_ERR_NOT_FOUND", "no such generation")
        if tag == 4:
            return bytes(kv.LANE_MAX_BYTES + 1)
        if tag == 5:
            doomed.deregister()
            return b"gone"
        if tag == 6:
            return agent.metadata()
        return None

    agent.set_handler(handler)
    agent.publish(store_addr)
    ok = True
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = agent.get_notif(timeout=1.0)
        if got is None:
            continue
        sender, msg = got
        if msg == b"written":
            want = pattern()
            want[N // 2:] = -want[N // 2:]
            if sender != "initiator" or not np.array_equal(cache, want):
                print(f"target: the WRITE's bytes differ (from {sender!r})", flush=True)
                ok = False
            compared.set()
        elif msg == b"bye":
            break
    # The initiator closes our stdin once its notify returned: closing the agent before that
    # could cut the notification's acknowledgement off the wire.
    sys.stdin.read()
    refused, last = agent.refusals()
    errors, last_error = agent.handler_errors()
    if refused < 3 or errors != 3:
        print(f"target: refusals {refused} ({last!r}), handler errors {errors} ({last_error!r})",
              flush=True)
        ok = False
    agent.close()
    sys.exit(0 if ok else 1)


def initiator(store_addr, backend):
    child = subprocess.Popen([sys.executable, __file__, "--target", store_addr, backend],
                             stdin=subprocess.PIPE)
    try:
        run_initiator(store_addr, backend, child)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def raises(fn, classes, what):
    try:
        fn()
    except classes as e:
        check(isinstance(e, strata.Error), f"{what}: {type(e).__name__} is not a strata.Error")
        return e
    except Exception as e:  # noqa: BLE001 - the check reports which class came instead
        check(False, f"{what}: raised {type(e).__name__}: {e}")
        return None
    check(False, f"{what}: did not raise")
    return None


def run_initiator(store_addr, backend, child):
    with kv.Agent("initiator", secret=SECRET, backend=backend, timeout=5) as agent:
        peer = agent.fetch(store_addr, f"target-{backend}", timeout=30)
        print(f"{backend}: connected to {peer}", flush=True)
        check(len(peer.regions) == 2, f"{backend}: the target describes {len(peer.regions)} regions")
        remote, spare = peer.regions[0], peer.regions[1]
        check(remote.nbytes == N * 4, f"{backend}: region 0 has {remote.nbytes} bytes")

        # 2. READ in 16 scattered descriptors: block i of the remote into block 15 - i locally.
        local = np.zeros(N, np.float32)
        region = agent.register(local)
        block = N * 4 // 16
        t = agent.read(peer, [(region, (15 - i) * block, block) for i in range(16)],
                       [(remote, i * block, block) for i in range(16)])
        check(t.wait() is True and t.status == "STRATA_OK", f"{backend}: READ status {t.status}")
        t.release()
        want = pattern().reshape(16, -1)[::-1].reshape(-1)
        check(np.array_equal(local, want), f"{backend}: the READ's bytes differ")
        try:
            import torch
            tensor = torch.zeros(N, dtype=torch.float32)
            tregion = agent.register(tensor)
            agent.read(peer, [tregion], [remote]).wait()
            check(np.array_equal(tensor.numpy(), pattern()), f"{backend}: the tensor READ differs")
            tregion.deregister()
            # a GPU tensor's path (a host copy the READ fills, wait() copies to the tensor),
            # forced on a CPU tensor: the tensor itself must end with the bytes
            kv._staged_device = lambda t: True
            staged = torch.zeros(N, dtype=torch.float32)
            sregion = agent.register(staged)
            kv._staged_device = lambda t: t.device.type != "cpu"
            check(sregion.host is not None and sregion.addr != staged.data_ptr(),
                  f"{backend}: a staged tensor is registered through a host copy")
            agent.read(peer, [sregion], [remote]).wait()
            check(np.array_equal(staged.numpy(), pattern()),
                  f"{backend}: a staged READ did not reach the tensor")
            sregion.deregister()
        except ImportError:
            pass

        # WRITE the negated second half, with a notification the target checks.
        local[:] = -pattern()
        half = N * 2
        agent.write(peer, [(region, half, half)], [(remote, half, half)], notif=b"written").wait()

        # 3. Refusals: past the end, an unknown region, a deregistered one, a bad local one.
        raises(lambda: agent.read(peer, [(region, 0, 16)], [(remote, remote.nbytes - 8, 16)])
               .wait(), strata.InvalidArgError, f"{backend}: READ past the region's end")
        raises(lambda: agent.write(peer, [(region, 0, 16)], [kv.Desc(remote.addr, 16, 999)])
               .wait(), strata.InvalidArgError, f"{backend}: WRITE into an unknown region")
        check(agent.call(peer, 5, b"") == b"gone", f"{backend}: tag 5 reply")
        # The metadata as bytes (here carried by the lane): loading it replaces the peer in place,
        # and the new description no longer lists the deregistered region.
        reloaded = agent.load(agent.call(peer, 6))
        check(reloaded.name == f"target-{backend}" and len(reloaded.regions) == 1,
              f"{backend}: the reloaded peer {reloaded} describes {reloaded.regions}")
        peer = reloaded
        e = raises(lambda: agent.read(peer, [(region, 0, 16)], [(spare, 0, 16)]).wait(),
                   strata.InvalidArgError, f"{backend}: READ of a deregistered region")
        if e is not None:
            print(f"{backend}: refused as expected: {e}", flush=True)
        raises(lambda: agent.write(peer, [kv.Desc(12345, 16)], [(remote, 0, 16)]),
               strata.InvalidArgError, f"{backend}: a local descriptor outside every region")

        # 4. The lane.
        check(agent.call(peer, 1, b"abcdef") == b"fedcba", f"{backend}: lane round trip")
        raises(lambda: agent.call(peer, 2, b"x"), strata.AbortedError,
               f"{backend}: a handler raising ValueError")
        raises(lambda: agent.call(peer, 3, b"x"), strata.NotFoundError,
               f"{backend}: a handler raising strata.NotFoundError")
        raises(lambda: agent.call(peer, 4, b"x"), strata.Error,
               f"{backend}: a reply above the lane's limit")
        big = os.urandom(kv.LANE_MAX_BYTES)
        check(agent.call(peer, 1, big) == big[::-1], f"{backend}: a 64 KiB round trip after errors")
        raises(lambda: agent.call(peer, 1, bytes(kv.LANE_MAX_BYTES + 1)), strata.InvalidArgError,
               f"{backend}: a request above the lane's limit")

        # 5. Cancel (a WRITE over the region the target compared: once it has).
        check(agent.call(peer, 7, b"", timeout=40) == b"compared",
              f"{backend}: the target compared the notified WRITE")
        t = agent.write(peer, [region] * 8, [remote] * 8)
        t.cancel()
        try:
            t.wait(timeout=30)
            outcome = "STRATA_OK"
        except strata.AbortedError:
            outcome = "STRATA_ERR_ABORTED"
        check(t.done() and t.status == outcome, f"{backend}: cancelled transfer ended {t.status}")
        t.release()

        # 6. The target leaves.
        check(child.poll() is None, f"{backend}: the target exited early ({child.poll()})")
        agent.notify(peer, b"bye")
        child.stdin.close()
        code = child.wait(timeout=30)
        check(code == 0, f"{backend}: the target process exited {code}")
        raises(lambda: agent.call(peer, 1, b"ping", timeout=5),
               (strata.PeerLostError, strata.TimeoutError), f"{backend}: a call to an exited target")


def close_under_waiters():
    """close() from one thread while another waits without the GIL in the same agent: the close
    waits for that call (bounded by its timeout), which then returns; nothing crashes."""
    agent = kv.Agent("closing", secret=SECRET, timeout=5)
    got = []
    waiter = threading.Thread(target=lambda: got.append(agent.get_notif(timeout=1.0)))
    waiter.start()
    time.sleep(0.2)  # let it enter the wait; the check does not depend on it
    agent.close()
    waiter.join(timeout=10)
    check(not waiter.is_alive() and got == [None], f"a wait during close ended with {got}")
    raises(lambda: agent.get_notif(0), strata.InvalidArgError, "a call on a closed agent")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--target":
        target(sys.argv[2], sys.argv[3])
    server = kv.StoreServer("127.0.0.1:0", secret=SECRET)
    addr = f"127.0.0.1:{server.port}"
    for backend in ("tcp", "auto"):
        initiator(addr, backend)
    close_under_waiters()
    server.stop()
    print("ok" if not failed else f"{len(failed)} checks failed", flush=True)
    sys.exit(0 if not failed else 1)
