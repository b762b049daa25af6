# SPDX-License-Identifier: Apache-2.0
"""Names the Python API shares with the C library, in one process:

1. errors: every C status but STRATA_OK has its class, named after it (STRATA_ERR_PEER_LOST:
   PeerLostError), a strata.Error the C layers raise for that status; a class whose name is a
   built-in exception's (TimeoutError, SystemError) subclasses that built-in and stays out of
   `from strata import *`, so a star import hides no built-in; a real timeout from the C library
   (a store get of a key nobody sets) is caught by `except TimeoutError` (the built-in);
2. enums: the dtype, op, collective, algorithm and compression names are the C library's (its
   name functions), the element sizes its strata_dtype_size; the spellings the API took before
   still parse ("float32", "f32", "float", "half", "bfloat16", "product", "mean", None for
   algo and compress, any case); an unknown one is a ValueError listing the C names;
3. strata.kv's backends are strata_kv.h's, "ucx" among them: with UCX in this libstrata an agent
   pair moves a region over it (the peer reports "ucx"); without, asking for it raises
   UnsupportedError naming UCX; an unknown backend is a ValueError listing the four.
Exits 0 when all held, 77 without numpy.
"""
import builtins
import sys

try:
    import numpy as np
except ImportError:
    print("skipped: python3 has no numpy")
    sys.exit(77)

import strata
import strata.kv as kv
from strata import _kv, _strata

failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
        print(f"FAILED {what}", flush=True)


def raises(exc, fn, text=""):
    try:
        fn()
    except exc as e:
        return text in str(e)
    return False


# 1. errors
names = _strata.status_names()
check(len(names) >= 19 and names[0] == "STRATA_OK", f"status names {names}")
star = {}
exec("from strata import *", star)
for status, name in names.items():
    if status == 0:
        continue
    cls_name = "".join(w.capitalize() for w in name[len("STRATA_ERR_"):].lower().split("_"))
    cls_name += "Error"
    cls = getattr(strata, cls_name, None)
    check(isinstance(cls, type) and issubclass(cls, strata.Error),
          f"{name}: strata.{cls_name} is {cls!r}")
    check(strata._errors.get(status) is cls,
          f"{name}: the C layers raise {strata._errors.get(status)}")
    builtin = getattr(builtins, cls_name, None)
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        check(issubclass(cls, builtin), f"strata.{cls_name} does not subclass the built-in")
        check(cls_name not in strata.__all__ and star.get(cls_name) is not cls,
              f"from strata import * replaces the built-in {cls_name}")
    else:
        check(star.get(cls_name) is cls, f"from strata import * lacks {cls_name}")
check(issubclass(strata.TimeoutError, builtins.TimeoutError)
      and issubclass(strata.SystemError, builtins.SystemError), "the built-in-named classes")
e = strata.TimeoutError(-4, "STRATA_ERR_TIMEOUT", "no progress")
check((e.status, e.name, e.message, str(e)) == (-4, "STRATA_ERR_TIMEOUT", "no progress",
                                                 "STRATA_ERR_TIMEOUT: no progress"),
      f"TimeoutError's fields: {e.status} {e.name} {e.message} {e}")
server = kv.StoreServer(secret="names", job_id="names")
store = kv.Store(f"127.0.0.1:{server.port}", "names", "names")
try:
    store.get("nobody-sets-this", 0.2)
    check(False, "a store get of a missing key returned")
except TimeoutError as e:  # the built-in
    check(isinstance(e, strata.TimeoutError) and e.name == "STRATA_ERR_TIMEOUT",
          f"the store's timeout is {type(e)} {e}")
store.close()
server.stop()

# 2. enums
for kind in ("dtype", "op", "coll", "algo", "compress"):
    got = _strata.enum_names(kind)
    check(len(got) > 0 and "?" not in got, f"{kind} names {got}")
    for value, name in enumerate(got):
        check(_strata.enum_parse(kind, name) == value, f"{kind} {name} parses to "
              f"{_strata.enum_parse(kind, name)}")
check(strata._DTYPES == _strata.enum_names("dtype") and "i16" in strata._DTYPES
      and "u16" in strata._DTYPES, f"dtypes {strata._DTYPES}")
check(strata._ELEMENT_BYTES == [np.dtype(n).itemsize for n in
                                ("i1", "u1", "i4", "u4", "i8", "u8", "f2", "u2", "f4", "f8",
                                 "i2", "u2")], f"element sizes {strata._ELEMENT_BYTES}")
check(sorted(strata._COLL) == sorted(["allreduce", "reduce_scatter", "allgather", "broadcast",
                                      "reduce", "gather", "scatter", "alltoall", "barrier",
                                      "send", "recv"]), f"collectives {strata._COLL}")
f32 = strata._DTYPE["f32"]
for alias in ("float32", "f32", "float", "FLOAT32", "F32"):
    check(strata._code("dtype", alias) == f32, f"dtype {alias!r}")
check(strata._code("dtype", "half") == strata._DTYPE["f16"], "dtype 'half'")
check(strata._code("dtype", "bfloat16") == strata._DTYPE["bf16"], "dtype 'bfloat16'")
check(strata._code("dtype", "int16") == strata._DTYPE["i16"], "dtype 'int16'")
check(strata._code("op", "product") == strata._code("op", "prod"), "op 'product'")
check(strata._code("op", "mean") == strata._code("op", "avg"), "op 'mean'")
check(strata._code("op", "BXOR") == _strata.enum_names("op").index("bxor"), "op 'BXOR'")
check(strata._code("algo", None) == strata._code("algo", "auto") == 0, "algo None")
check(strata._code("compress", None) == strata._code("compress", "default") == 0, "compress None")
check(raises(ValueError, lambda: strata._code("op", "median"), "band, bor, bxor"),
      "an unknown op lists the C names")
check(raises(ValueError, lambda: strata._code("dtype", "complex64"), "f32"),
      "an unknown dtype lists the C names")
with strata.Comm() as comm:  # the names reach C: a world of one, bitwise and bf16 by name
    x = np.array([6, 3], np.int16)
    comm.allreduce(x, op="bxor")
    check(list(x) == [6, 3], f"a bxor allreduce of one rank gave {x}")
    bits = np.array([0x3F80, 0x4000], np.uint16)  # bf16 1.0 and 2.0
    comm.allreduce(bits, dtype="bfloat16", op="max", algo="ring")
    check(list(bits) == [0x3F80, 0x4000], f"a bf16 allreduce of one rank gave {bits}")

# 3. kv backends
backends = _kv.backends()
check(backends == {"auto": 0, "tcp": 1, "shm": 2, "ucx": 3}, f"kv backends {backends}")
check(raises(ValueError, lambda: kv.Agent("x", backend="rdma"), "auto, tcp, shm, ucx"),
      "an unknown backend lists the four")
if kv.backend_supported("ucx"):
    with kv.Agent("ucx-a", secret="names", backend="ucx", timeout=10) as a, \
            kv.Agent("ucx-b", secret="names", backend="UCX", timeout=10) as b:
        src = np.arange(1 << 16, dtype=np.float32)
        a.register(src)
        peer = b.load(a.metadata())
        dst = b.register(np.zeros(1 << 16, np.float32))
        check(b.read(peer, [dst], [peer.regions[0]]).wait(timeout=10), "the UCX READ finished")
        check(peer.backend == "ucx", f"the peer is reached over {peer.backend}")
        check(np.array_equal(dst.obj, src), "the UCX READ's bytes differ")
    print("ucx: a region moved over UCX")
else:
    check(raises(strata.UnsupportedError, lambda: kv.Agent("x", backend="ucx"), "UCX"),
          "backend='ucx' without UCX raises UnsupportedError naming it")
    print("ucx: this libstrata has no UCX; asking for it raises UnsupportedError")

print("PASS" if not failed else f"FAIL: {len(failed)} checks")
sys.exit(1 if failed else 0)
