# SPDX-License-Identifier: Apache-2.0
"""A small decoder-only transformer to serve (strata.serve): CPU, weights from a seed.

Nothing is downloaded and nothing is trained: every process that holds part of the model makes
the whole parameter set from the same seed, in the same order, and keeps what it needs. The
tokens are bytes (vocabulary 256); greedy decoding of random weights is deterministic, which is
what serving tests need (the same tokens whichever servers computed them).

The model is cut into `blocks` (one transformer layer each). Embedding and the output head stay
with the client (as Petals does): servers only ever see activations. A block keeps a KV cache per
generation; `Blocks.forward(gen, x, pos)` runs a span of blocks on x (rows = new positions) and
appends to that generation's cache.

Numerics: the computation of one step depends only on the step's input rows and the cache, with
the same tensor shapes wherever it runs, and torch runs one thread (set_num_threads(1)): so a
span computed on another process, or rebuilt by replaying the same steps, gives the same bits.

>>> from strata import tinylm
>>> cfg = tinylm.Config(blocks=4)
>>> weights = tinylm.make_weights(cfg)
>>> head, blocks = tinylm.Head(cfg, weights), tinylm.Blocks(cfg, 0, cfg.blocks, weights)
>>> token = head.next_token(blocks.forward(0, head.inputs(list(b"hi"), 0)))
>>> [token] == tinylm.generate_local(cfg, list(b"hi"), 1)
True
"""
from __future__ import annotations

import math
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

import torch

torch.set_num_threads(1)


class Config:
    """The model's shape and the seed of its weights.

    >>> from strata import tinylm
    >>> tinylm.Config(blocks=2).as_dict()["blocks"]
    2
    """

    def __init__(self, vocab: int = 256, d_model: int = 64, heads: int = 4, blocks: int = 8,
                 d_ff: int = 256, max_len: int = 1024, seed: int = 1) -> None:
        self.vocab, self.d_model, self.heads, self.blocks = vocab, d_model, heads, blocks
        self.d_ff, self.max_len, self.seed = d_ff, max_len, seed

    def as_dict(self) -> Dict[str, int]:
        return dict(vocab=self.vocab, d_model=self.d_model, heads=self.heads, blocks=self.blocks,
                    d_ff=self.d_ff, max_len=self.max_len, seed=self.seed)


def make_weights(cfg: Config) -> Dict[str, torch.Tensor]:
    """Every parameter, drawn from cfg.seed in a fixed order (all processes agree)."""
    g = torch.Generator().manual_seed(cfg.seed)
    d, f = cfg.d_model, cfg.d_ff

    def randn(*shape: int, scale: float) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    w = {"embed": randn(cfg.vocab, d, scale=1.0), "pos": randn(cfg.max_len, d, scale=0.1)}
    for i in range(cfg.blocks):
        w[f"{i}.qkv"] = randn(d, 3 * d, scale=1 / math.sqrt(d))
        w[f"{i}.proj"] = randn(d, d, scale=1 / math.sqrt(d))
        w[f"{i}.fc1"] = randn(d, f, scale=1 / math.sqrt(d))
        w[f"{i}.fc2"] = randn(f, d, scale=1 / math.sqrt(f))
        w[f"{i}.ln1"] = 1 + randn(d, scale=0.1)
        w[f"{i}.ln2"] = 1 + randn(d, scale=0.1)
    w["ln_f"] = 1 + randn(d, scale=0.1)
    # An output head of its own: tied to the embedding, random weights make every token predict
    # itself, and a generation that repeats one token would prove little about serving.
    w["head"] = randn(d, cfg.vocab, scale=1 / math.sqrt(d))
    return w


def _norm(x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],)) * gain


# A block's KV cache: (keys, values), each [heads, positions, head_dim].
_Cache = Dict[int, Tuple[torch.Tensor, torch.Tensor]]


class Blocks:
    """Blocks [start, end) of the model and the KV caches of the generations using them.

    A generation is any hashable key; forward() appends its new positions to its caches.

    >>> import torch
    >>> from strata import tinylm
    >>> cfg = tinylm.Config(blocks=4)
    >>> blocks = tinylm.Blocks(cfg, 0, 2)
    >>> y = blocks.forward("gen", torch.zeros(3, cfg.d_model))
    >>> tuple(y.shape), blocks.length("gen")
    ((3, 64), 3)
    """

    def __init__(self, cfg: Config, start: int, end: int,
                 weights: Optional[Dict[str, torch.Tensor]] = None) -> None:
        if not 0 <= start < end <= cfg.blocks:
            raise ValueError(f"blocks {start}:{end} are not inside 0:{cfg.blocks}")
        self.cfg, self.start, self.end = cfg, start, end
        w = weights if weights is not None else make_weights(cfg)
        self.w = {k: v for k, v in w.items() if k.split(".")[0].isdigit()
                  and start <= int(k.split(".")[0]) < end}
        self.caches: Dict[Hashable, _Cache] = {}  # gen -> {block: (k, v)}

    def length(self, gen: Hashable) -> int:
        """Positions cached for a generation (0 for one never seen)."""
        cache = self.caches.get(gen)
        if not cache:
            return 0
        return next(iter(cache.values()))[0].shape[1]

    def drop(self, gen: Hashable) -> None:
        """Forget a generation's caches."""
        self.caches.pop(gen, None)

    @torch.no_grad()
    def forward(self, gen: Hashable, x: torch.Tensor, start: Optional[int] = None,
                end: Optional[int] = None) -> torch.Tensor:
        """Run blocks [start, end) (default: all held) on x [rows, d] for generation gen: rows
        are the next positions after what its cache holds."""
        start = self.start if start is None else start
        end = self.end if end is None else end
        if not self.start <= start < end <= self.end:
            raise ValueError(f"blocks {start}:{end} are not inside {self.start}:{self.end}")
        cache = self.caches.setdefault(gen, {})
        for i in range(start, end):
            x = self._block(i, x, cache)
        return x

    def _block(self, i: int, x: torch.Tensor, cache: _Cache) -> torch.Tensor:
        cfg, w = self.cfg, self.w
        rows, d, h = x.shape[0], cfg.d_model, cfg.heads
        hd = d // h
        q, k, v = torch.split(_norm(x, w[f"{i}.ln1"]) @ w[f"{i}.qkv"], d, dim=1)
        q, k, v = (t.reshape(rows, h, hd).transpose(0, 1) for t in (q, k, v))
        if i in cache:
            k = torch.cat([cache[i][0], k], dim=1)
            v = torch.cat([cache[i][1], v], dim=1)
        cache[i] = (k, v)
        past = k.shape[1] - rows
        scores = q @ k.transpose(1, 2) / math.sqrt(hd)  # [h, rows, past + rows]
        mask = torch.ones(rows, past + rows, dtype=torch.bool).triu(past + 1)
        scores = scores.masked_fill(mask, float("-inf"))
        att = (scores.softmax(-1) @ v).transpose(0, 1).reshape(rows, d)
        x = x + att @ w[f"{i}.proj"]
        return x + torch.nn.functional.gelu(_norm(x, w[f"{i}.ln2"]) @ w[f"{i}.fc1"]) @ w[f"{i}.fc2"]


class Head:
    """The client's part: embedding in, final norm and output head out.

    >>> from strata import tinylm
    >>> head = tinylm.Head(tinylm.Config())
    >>> tuple(head.inputs([104, 105], 0).shape)
    (2, 64)
    """

    def __init__(self, cfg: Config, weights: Optional[Dict[str, torch.Tensor]] = None) -> None:
        w = weights if weights is not None else make_weights(cfg)
        self.cfg, self.embed, self.pos, self.ln_f = cfg, w["embed"], w["pos"], w["ln_f"]
        self.head = w["head"]

    def inputs(self, tokens: Sequence[int], position: int) -> torch.Tensor:
        """Activations entering block 0 for tokens placed from `position` on."""
        if position + len(tokens) > self.cfg.max_len:
            raise ValueError(f"the generation is longer than {self.cfg.max_len} positions")
        ids = torch.tensor(tokens, dtype=torch.long)
        return self.embed[ids] + self.pos[position:position + len(tokens)]

    @torch.no_grad()
    def next_token(self, hidden: torch.Tensor) -> int:
        """Greedy: the most likely token after the last row."""
        return int((_norm(hidden[-1], self.ln_f) @ self.head).argmax())


def generate_local(cfg: Config, prompt: Sequence[int], new_tokens: int) -> List[int]:
    """The unsplit reference: every block in this process, the same steps as a served run."""
    weights = make_weights(cfg)
    head, blocks = Head(cfg, weights), Blocks(cfg, 0, cfg.blocks, weights)
    tokens = list(prompt)
    x = head.inputs(tokens, 0)
    out = []
    for _ in range(new_tokens):
        token = head.next_token(blocks.forward(0, x))
        out.append(token)
        x = head.inputs([token], len(tokens))
        tokens.append(token)
    return out
