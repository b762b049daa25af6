# SPDX-License-Identifier: Apache-2.0
"""strata.torch.DiLoCo against DiLoCo written out in torch, and its other modes.

Run as every rank of a job (strata launch -n 2 or 3). The default process group is "strata";
DiLoCo(comm=None) makes its own communicator through that group's store. Checks:
  - textbook: fragments=1, delay=0, compress="none", H=3, inner SGD: after every inner step the
    parameters equal, within f32 rounding, those of the algorithm written here with torch's
    SGD(lr=0.7, momentum=0.9, nesterov=True) as the outer optimizer over the global
    parameters, its gradient the all-reduced average of (global - local); and they are bitwise
    equal on every rank after each outer step;
  - streaming: fragments=2, delay=1: the fragments apply on the header's schedule, each
    fragment equal on every rank when it is applied with alpha=0, and alpha=0.5 runs;
  - int8: the outer gradient sent as int8 stays close to the exact run, equal on every rank;
  - checkpoints: state_dict, more training, load_state_dict, the same training again ends
    bitwise where the first did (inner AdamW), with and without fragments in flight;
  - a bfloat16 model runs, equal on every rank after each outer step;
  - device parameters' host mirrors (forced on CPU parameters here): the same training through
    the mirrors ends bitwise where the direct run does, with and without fragments and delay;
  - strata.DiLoCo over numpy float32 and torch bfloat16 buffers, one outer step worked by hand;
  - bad input (a non-contiguous, a float64 and a meta parameter, a bad option) raises.
Exits 0 when all held, 1 otherwise, 77 without torch or strata.torch.
"""
import copy
import datetime
import sys

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import strata
    import strata.torch
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

dist.init_process_group("strata", timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)
failures = []


def say(line):
    sys.stdout.write(line + "\n")  # one write a line: the ranks share the terminal
    sys.stdout.flush()


def check(ok, what):
    say(f"rank {rank}: {'PASS' if ok else 'FAIL'}: {what}")
    if not ok:
        failures.append(what)


def make_model(seed):
    torch.manual_seed(seed)  # different on each rank: DiLoCo starts every rank from rank 0's
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def make_batches(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) for _ in range(n)]


def inner_step(model, opt, batch):
    x, y = batch
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()


def flat(params):
    return torch.cat([p.detach().reshape(-1).float() for p in params])


def same_on_all_ranks(t):
    gathered = [torch.empty_like(t) for _ in range(size)]
    dist.all_gather(gathered, t)
    return all(torch.equal(g, gathered[0]) for g in gathered)


class Textbook:
    """DiLoCo with one fragment and no delay, as the paper writes it, in torch."""

    def __init__(self, model, outer_lr=0.7, outer_momentum=0.9, nesterov=True):
        self.params = list(model.parameters())
        with torch.no_grad():
            for p in self.params:
                dist.broadcast(p, 0)  # theta_global starts as rank 0's parameters
        self.glob = [p.detach().clone() for p in self.params]
        self.outer = torch.optim.SGD(self.glob, lr=outer_lr, momentum=outer_momentum,
                                     nesterov=nesterov)

    def outer_step(self):
        for g, p in zip(self.glob, self.params):
            delta = g - p.detach()
            dist.all_reduce(delta)
            g.grad = delta / size
        self.outer.step()
        with torch.no_grad():
            for g, p in zip(self.glob, self.params):
                p.copy_(g)


def run_against_textbook(compress, steps, H, rtol, atol, label, moved_fraction=None):
    """rtol/atol bound the distance to the textbook after every inner step; with
    moved_fraction, the distance at the end is bounded instead by that fraction of how far the
    textbook's parameters moved from the start (for a lossy wire encoding)."""
    model = make_model(rank)
    reference = copy.deepcopy(model)
    data = make_batches(steps, 1000 + rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    diloco = strata.torch.DiLoCo(model, opt, sync_every=H, outer_lr=0.7, outer_momentum=0.9,
                                 nesterov=True, fragments=1, delay=0, compress=compress)
    textbook = Textbook(reference)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    check(torch.equal(flat(model.parameters()), flat(reference.parameters())),
          f"{label}: every rank starts from rank 0's parameters")
    start = flat(reference.parameters())
    worst, equal_ranks, counts = 0.0, True, True
    for s, batch in enumerate(data, 1):
        inner_step(model, diloco, batch)
        inner_step(reference, ref_opt, batch)
        if s % H == 0:
            textbook.outer_step()
            equal_ranks = equal_ranks and same_on_all_ranks(flat(model.parameters()))
        counts = counts and diloco.inner_steps == s and diloco.outer_steps == s // H \
            and diloco.last_applied == (1 if s % H == 0 else 0)
        got, want = flat(model.parameters()), flat(reference.parameters())
        worst = max(worst, (got - want).abs().max().item())
        if moved_fraction is None and not torch.allclose(got, want, rtol=rtol, atol=atol):
            check(False, f"{label}: after inner step {s} the parameters are {worst:.3g} from "
                         f"the textbook's (rtol {rtol}, atol {atol})")
            break
    else:
        if moved_fraction is None:
            check(True, f"{label}: {steps} inner steps, H={H}, {diloco.outer_steps} outer "
                        f"steps: within {worst:.3g} of the textbook (rtol {rtol}, atol {atol})")
        else:
            moved = (flat(reference.parameters()) - start).abs().max().item()
            check(worst <= moved_fraction * moved,
                  f"{label}: {steps} inner steps, H={H}: at most {worst:.3g} from the exact "
                  f"run, whose parameters moved by up to {moved:.3g} (bound: {moved_fraction} "
                  "of that)")
    check(counts, f"{label}: inner_steps, outer_steps and the fragments applied per step")
    check(equal_ranks, f"{label}: bitwise equal parameters on every rank after each outer step")
    stats = diloco.comm.stats()
    check("wan_bytes_sent" in stats and stats["wire_bytes_sent"] > 0,
          f"{label}: the communicator's stats ({stats})")
    diloco.close()


def applies_at(s, H, P, delay):
    """The fragments whose exchange, started after inner step s - delay, applies at step s."""
    start = s - delay
    return [p for p in range(P) if start >= 1 and start % H == p * H // P]


def run_streaming(alpha, steps=11, H=4, P=2, delay=1):
    label = f"fragments={P}, delay={delay}, alpha={alpha}"
    model = make_model(rank)
    params = list(model.parameters())
    data = make_batches(steps, 2000 + rank)
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    diloco = strata.torch.DiLoCo(model, opt, sync_every=H, fragments=P, delay=delay, alpha=alpha)
    covers = [diloco._state.fragment(p) for p in range(P)]
    check(covers[0][0] == 0 and sum(n for _, n in covers) == len(params)
          and all(covers[p][0] + covers[p][1] == covers[p + 1][0] for p in range(P - 1)),
          f"{label}: the fragments {covers} cover the {len(params)} parameters in order")
    schedule, equal_ranks, outer = True, True, 0
    for s, batch in enumerate(data, 1):
        inner_step(model, diloco, batch)
        due = applies_at(s, H, P, delay)
        outer += len(due)
        schedule = schedule and diloco.last_applied == len(due) and diloco.outer_steps == outer
        if alpha == 0.0:
            for p in due:
                first, n = covers[p]
                equal_ranks = equal_ranks and same_on_all_ranks(flat(params[first:first + n]))
    check(schedule and outer > 0,
          f"{label}: {steps} inner steps applied {outer} fragments, each on the header's schedule")
    if alpha == 0.0:
        check(equal_ranks, f"{label}: each fragment bitwise equal on every rank when applied")
    check(bool(torch.isfinite(flat(params)).all()), f"{label}: the parameters stay finite")
    diloco.close()


def run_bf16(steps=6, H=2):
    """A bfloat16 model: strata keeps theta_global in f32 and writes bf16 back to every rank."""
    model = make_model(rank).to(torch.bfloat16)
    data = make_batches(steps, 4000 + rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    diloco = strata.torch.DiLoCo(model, opt, sync_every=H)
    equal_ranks = True
    for s, (x, y) in enumerate(data, 1):
        x, y = x.to(torch.bfloat16), y.to(torch.bfloat16)
        diloco.zero_grad()
        ((model(x) - y) ** 2).mean().backward()  # torch 1.13 has no bf16 mse_loss on CPU
        diloco.step()
        if s % H == 0:
            equal_ranks = equal_ranks and same_on_all_ranks(flat(model.parameters()))
    check(equal_ranks and diloco.outer_steps == steps // H
          and all(p.dtype == torch.bfloat16 for p in model.parameters()),
          f"bfloat16 model: {diloco.outer_steps} outer steps, equal on every rank after each")
    diloco.close()


def run_checkpoint(fragments, delay, H, first, then):
    label = f"checkpoint (fragments={fragments}, delay={delay}, saved after {first} steps)"
    model = make_model(rank)
    data = make_batches(first + then, 3000 + rank)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    diloco = strata.torch.DiLoCo(model, opt, sync_every=H, fragments=fragments, delay=delay)
    for batch in data[:first]:
        inner_step(model, diloco, batch)
    saved_model = copy.deepcopy(model.state_dict())
    saved = copy.deepcopy(diloco.state_dict())
    check(saved["inner_steps"] == first and isinstance(saved["diloco"], bytes),
          f"{label}: state_dict holds the counters and strata's state as bytes")
    for batch in data[first:]:
        inner_step(model, diloco, batch)
    uninterrupted = flat(model.parameters()).clone()
    counters = (diloco.inner_steps, diloco.outer_steps)
    model.load_state_dict(saved_model)
    diloco.load_state_dict(saved)
    restored = (diloco.inner_steps, diloco.outer_steps)
    check(restored == (saved["inner_steps"], saved["outer_steps"]),
          f"{label}: load_state_dict restores the counters ({restored})")
    for batch in data[first:]:
        inner_step(model, diloco, batch)
    check(torch.equal(flat(model.parameters()), uninterrupted)
          and (diloco.inner_steps, diloco.outer_steps) == counters,
          f"{label}: after {then} more steps, bitwise where the uninterrupted run ended")
    diloco.close()


def run_mirrored(fragments, delay, H, steps):
    """The path of GPU parameters (host mirrors copied down before a fragment's exchange starts
    or applies, back up once applied), forced on CPU parameters: bitwise the direct run."""
    label = f"host mirrors (fragments={fragments}, delay={delay}, H={H})"
    ends = []
    for mirror in (False, True):
        model = make_model(rank)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        diloco = strata.torch.DiLoCo(model, opt, sync_every=H, fragments=fragments, delay=delay,
                                     _mirror_all=mirror)
        for batch in make_batches(steps, 5000 + rank):
            inner_step(model, diloco, batch)
        ends.append((flat(model.parameters()).clone(), diloco.outer_steps))
        diloco.close()
    check(torch.equal(ends[0][0], ends[1][0]) and ends[0][1] == ends[1][1] > 0,
          f"{label}: {ends[1][1]} outer steps, bitwise the direct run")


def bf16_bits(value):
    return torch.tensor(float(value), dtype=torch.bfloat16).view(torch.int16).item() & 0xFFFF


def run_buffers():
    """strata.DiLoCo itself: numpy float32, torch bfloat16 and bf16 bits in a numpy uint16
    array, one outer step with lr 1 and no momentum: global - avg(global - local) =
    avg(local)."""
    comm = strata.torch._diloco_comm()
    a = np.full(300, 10.0 * (rank + 1), np.float32)
    b = torch.full((7, 5), float(rank + 1), dtype=torch.bfloat16)
    c = np.full(10, bf16_bits(rank + 1), np.uint16)
    with strata.DiLoCo(comm, [a, b, (c, "bf16")], sync_every=1, outer_lr=1.0, outer_momentum=0.0,
                       nesterov=False, compress="none") as state:
        ok = bool((a == 10.0).all()) and bool((b == 1.0).all()) \
            and bool((c == bf16_bits(1)).all())
        check(ok, "strata.DiLoCo: rank 0's parameters broadcast into every rank's buffers")
        a[:] = 10.0 * (rank + 1)  # an inner step
        b.fill_(float(rank + 1))
        c[:] = bf16_bits(rank + 1)
        applied = state.step()
        mean = (size + 1) / 2  # 1.5 or 2: exact in bf16
        check(applied == 1 and state.outer_steps == 1 and bool((a == 10.0 * mean).all())
              and bool((b == mean).all()) and bool((c == bf16_bits(mean)).all()),
              f"strata.DiLoCo: one outer step gives the average of the ranks' parameters "
              f"({a[0]}, {b[0, 0].item()})")
        blob = state.save()
        state.load(blob)
        try:
            state.load(blob[:-1])
            check(False, "strata.DiLoCo: loading a cut blob raises")
        except strata.Error as e:
            check(e.name in ("STRATA_ERR_PROTOCOL", "STRATA_ERR_MISMATCH"),
                  f"strata.DiLoCo: loading a cut blob raises {type(e).__name__}")
    check(state.closed, "strata.DiLoCo: closed by its with block")
    try:
        state.step()
        check(False, "strata.DiLoCo: step() after close raises")
    except ValueError:
        check(True, "strata.DiLoCo: step() after close raises ValueError")
    comm.destroy()
    check(strata._code("compress", "int4") == 6, "compress name int4")


class Transposed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 3).t())  # a non-contiguous view


def expect_raise(exc, what, make):
    try:
        make()
    except exc as e:
        check(True, f"{what} raises {type(e).__name__}: {e}")
        return
    except Exception as e:  # noqa: BLE001  (the wrong exception is a failure, not a crash)
        check(False, f"{what} raises {type(e).__name__} instead of {exc.__name__}: {e}")
        return
    check(False, f"{what} does not raise")


def run_bad_input():
    opt = lambda m: torch.optim.SGD(m.parameters(), lr=0.1)  # noqa: E731
    m = Transposed()
    expect_raise(ValueError, "a non-contiguous parameter",
                 lambda: strata.torch.DiLoCo(m, opt(m), sync_every=3))
    m = torch.nn.Linear(3, 3).double()
    expect_raise(TypeError, "a float64 parameter",
                 lambda: strata.torch.DiLoCo(m, opt(m), sync_every=3))
    m = torch.nn.Linear(3, 3, device="meta")
    expect_raise(TypeError, "a parameter on the meta device",
                 lambda: strata.torch.DiLoCo(m, opt(m), sync_every=3))
    m = torch.nn.Linear(3, 3)
    expect_raise(ValueError, "an unknown compress name",
                 lambda: strata.torch.DiLoCo(m, opt(m), sync_every=3, compress="int3"))
    # every rank gives the same bad option: each raises strata's INVALID_ARG
    expect_raise(strata.InvalidArgError, "fragments > sync_every",
                 lambda: strata.torch.DiLoCo(m, opt(m), sync_every=3, fragments=4))


run_against_textbook("none", steps=12, H=3, rtol=1e-6, atol=1e-6, label="textbook")
run_against_textbook("int8", steps=12, H=3, rtol=0, atol=0, label="int8 vs exact",
                     moved_fraction=0.05)
run_streaming(alpha=0.0)
run_streaming(alpha=0.5)
run_bf16()
run_checkpoint(fragments=1, delay=0, H=3, first=4, then=5)
run_checkpoint(fragments=2, delay=1, H=4, first=5, then=6)
run_mirrored(fragments=1, delay=0, H=3, steps=7)
run_mirrored(fragments=2, delay=1, H=4, steps=11)
run_buffers()
run_bad_input()

dist.barrier()
dist.destroy_process_group()
say(f"rank {rank}: {'FAIL: ' + '; '.join(failures) if failures else 'all PASS'}")
sys.exit(1 if failures else 0)
