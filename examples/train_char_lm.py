"""Train a small character-level transformer with rlx-mlir: one compiled step does the
forward pass, the backward pass (`rlx.grad_values`) and an AdamW update written with the
builder, and the same model trained in torch from the same initialization follows the
same loss curve.

    python examples/train_char_lm.py                  # 50 steps, prints both loss curves
    python examples/train_char_lm.py --steps 200 --layers 2 --threads 2

The text is examples/data/tiny.txt (eight of Shakespeare's sonnets, public domain).

How the step is built (`build_train_step`):
- the weights, AdamW's moments m and v and the step counter are states declared with
  `g.state(..., rollback=False)` (a call pays no snapshot copy of them, `reset()` keeps
  them); `rlx.jit(step, state=init)` gives the weights their initial values;
- the loss is the mean cross-entropy of the next character, written with the builder
  (log-softmax as `x - max - log(sum(exp(x - max)))`);
- `rlx.grad_values(g, loss, wrt)` appends the backward pass to the graph, the AdamW
  update (torch.optim.AdamW's formulas, bias corrections from the step counter) is built
  on the gradients, and `g.assign` writes every weight, moment and the counter in place.
  A call returns the loss of the batch it trained on.

The model uses only ops whose VJPs are the core autodiff rules (matmul, elementwise,
reductions, softmax, reshape, transpose): the embedding is a one-hot matmul, attention is
written with matmuls, a causal mask and softmax, and the norms are RMS norms written with
the builder, so no gather, attention or norm VJP is needed.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import rlx_mlir as rlx

TEXT = Path(__file__).with_name("data") / "tiny.txt"


@dataclass(frozen=True)
class Config:
    """The model, the batches and AdamW's hyperparameters."""

    vocab: int = 55
    dim: int = 64
    heads: int = 4
    context: int = 32
    batch: int = 16
    layers: int = 1
    ffn: int = 4
    """The hidden width of the MLP, in multiples of `dim`."""
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.01
    norm_eps: float = 1e-5
    seed: int = 0


# ----------------------------------------------------------------------------- data


def load_text(path: Path = TEXT) -> tuple[np.ndarray, list[str]]:
    """The text as character ids, and the characters (sorted) the ids stand for."""
    text = path.read_text()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return np.array([index[c] for c in text], dtype=np.int64), chars


def batches(data: np.ndarray, cfg: Config, steps: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """`steps` batches of (context ids, next ids), each [batch, context], at random
    offsets (seeded by `cfg.seed`: the rlx and torch runs see the same batches)."""
    rng = np.random.default_rng(cfg.seed + 1)
    for _ in range(steps):
        starts = rng.integers(0, len(data) - cfg.context - 1, cfg.batch)
        x = np.stack([data[s : s + cfg.context] for s in starts])
        y = np.stack([data[s + 1 : s + cfg.context + 1] for s in starts])
        yield x, y


def one_hot(ids: np.ndarray, vocab: int) -> np.ndarray:
    """[batch, context] ids -> [batch * context, vocab] f32 rows of 0 and 1."""
    out = np.zeros((ids.size, vocab), np.float32)
    out[np.arange(ids.size), ids.reshape(-1)] = 1.0
    return out


# ----------------------------------------------------------------------------- the model


def param_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Every weight of the model, in order."""
    d, f = cfg.dim, cfg.ffn * cfg.dim
    shapes = {"emb": (cfg.vocab, d), "pos": (cfg.context, d)}
    for i in range(cfg.layers):
        shapes.update({f"l{i}_norm1": (d,), f"l{i}_wq": (d, d), f"l{i}_wk": (d, d),
                       f"l{i}_wv": (d, d), f"l{i}_wo": (d, d), f"l{i}_norm2": (d,),
                       f"l{i}_w1": (d, f), f"l{i}_w2": (f, d)})
    shapes.update({"norm_f": (d,), "head": (d, cfg.vocab)})
    return shapes


def init_params(cfg: Config) -> dict[str, np.ndarray]:
    """The initial weights (seeded): norms at 1, the rest normal / sqrt(fan-in)."""
    rng = np.random.default_rng(cfg.seed)
    params = {}
    for name, shape in param_shapes(cfg).items():
        if "norm" in name:
            params[name] = np.ones(shape, np.float32)
        else:
            scale = 0.5 if name in ("emb", "pos") else 1 / math.sqrt(shape[0])
            params[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
    return params


def causal_mask(context: int) -> np.ndarray:
    """[context, context]: 0 where query i may see key j (j <= i), -1e9 elsewhere."""
    return np.triu(np.full((context, context), -1e9, np.float32), 1)


def rms_norm(g: rlx.Graph, x: rlx.Value, gamma: rlx.Value, eps: float) -> rlx.Value:
    """x / sqrt(mean(x^2, -1) + eps) * gamma, from elementwise ops and a reduction."""
    mean = g.reduce_sum(x * x, -1, keepdim=True) * (1.0 / x.shape[-1])
    return x * g.rsqrt(mean + eps) * gamma


def forward_loss(g: rlx.Graph, cfg: Config, p: dict[str, rlx.Value], x: rlx.Value,
                 y: rlx.Value) -> rlx.Value:
    """The mean cross-entropy of the next character: `x`, `y` are one-hot rows
    [batch * context, vocab] of the context and of the characters that follow."""
    b, t, d, h = cfg.batch, cfg.context, cfg.dim, cfg.heads
    hd = d // h
    mask = g.constant(causal_mask(t))
    hidden = g.reshape(x @ p["emb"], (b, t, d)) + p["pos"]
    for i in range(cfg.layers):
        n = rms_norm(g, hidden, p[f"l{i}_norm1"], cfg.norm_eps)

        def heads(w: rlx.Value, perm: tuple[int, ...], n=n) -> rlx.Value:
            return g.transpose(g.reshape(n @ w, (b, t, h, hd)), perm)

        q = heads(p[f"l{i}_wq"], (0, 2, 1, 3))                  # [b, h, t, hd]
        kt = heads(p[f"l{i}_wk"], (0, 2, 3, 1))                 # [b, h, hd, t]
        v = heads(p[f"l{i}_wv"], (0, 2, 1, 3))
        attn = g.softmax((q @ kt) * (1.0 / math.sqrt(hd)) + mask, -1)
        o = g.reshape(g.transpose(attn @ v, (0, 2, 1, 3)), (b, t, d))
        hidden = hidden + o @ p[f"l{i}_wo"]
        n = rms_norm(g, hidden, p[f"l{i}_norm2"], cfg.norm_eps)
        hidden = hidden + g.silu(n @ p[f"l{i}_w1"]) @ p[f"l{i}_w2"]
    logits = g.reshape(rms_norm(g, hidden, p["norm_f"], cfg.norm_eps) @ p["head"],
                       (b * t, cfg.vocab))
    top = g.reduce_max(logits, -1, keepdim=True)
    shifted = logits - top
    log_probs = shifted - g.log(g.reduce_sum(g.exp(shifted), -1, keepdim=True))
    return g.reduce_sum(y * log_probs, (0, 1)) * (-1.0 / (b * t))


# ----------------------------------------------------------------------------- the step


def adamw(g: rlx.Graph, cfg: Config, params: dict[str, rlx.Value],
          grads: dict[str, rlx.Value]) -> None:
    """torch.optim.AdamW's update of every param, in place (`g.assign`), with its moments
    m, v and the step counter as states (rollback=False, zero at the start)."""
    b1, b2 = cfg.betas
    step = g.state("step", (1,), rollback=False)
    t = step + 1.0
    g.assign(step, t)
    correction1 = 1.0 - g.exp(t * math.log(b1))                 # 1 - b1^t
    step_size = cfg.lr / correction1
    root_correction2 = g.sqrt(1.0 - g.exp(t * math.log(b2)))   # sqrt(1 - b2^t)
    for name, p in params.items():
        grad = grads[name]
        m = g.state(f"{name}__m", p.shape, rollback=False)
        v = g.state(f"{name}__v", p.shape, rollback=False)
        m_new = m * b1 + grad * (1.0 - b1)
        v_new = v * b2 + grad * grad * (1.0 - b2)
        denom = g.sqrt(v_new) / root_correction2 + cfg.eps
        g.assign(p, p * (1.0 - cfg.lr * cfg.weight_decay) - step_size * m_new / denom)
        g.assign(m, m_new)
        g.assign(v, v_new)


def build_train_step(cfg: Config) -> rlx.Graph:
    """One training step: inputs x, y (one-hot [batch * context, vocab]), output the loss
    of the batch; the weights, moments and step counter are updated in place."""
    g = rlx.Graph("train_step")
    x = g.input("x", (cfg.batch * cfg.context, cfg.vocab))
    y = g.input("y", (cfg.batch * cfg.context, cfg.vocab))
    params = {name: g.state(name, shape, rollback=False)
              for name, shape in param_shapes(cfg).items()}
    loss = forward_loss(g, cfg, params, x, y)
    grads = dict(zip(params, rlx.grad_values(g, loss, list(params)), strict=True))
    adamw(g, cfg, params, grads)
    g.output(loss=loss)
    return g


def compile_step(cfg: Config, threads: int | None = None) -> rlx.CompiledGraph:
    """The compiled step, its weights at `init_params(cfg)`."""
    return rlx.jit(build_train_step(cfg), threads=threads, state=init_params(cfg))


def train_rlx(cfg: Config, data: np.ndarray, steps: int,
              threads: int | None = None) -> list[float]:
    """The loss of each step, training with the compiled step."""
    model = compile_step(cfg, threads)
    return [float(model(x=one_hot(x, cfg.vocab), y=one_hot(y, cfg.vocab)))
            for x, y in batches(data, cfg, steps)]


# ----------------------------------------------------------------------------- torch's twin


def torch_model(cfg: Config):
    """The same model in torch (a function of the one-hot batch), its params at
    `init_params(cfg)`, and a torch.optim.AdamW over them with the same hyperparameters."""
    import torch

    params = {k: torch.tensor(v, requires_grad=True) for k, v in init_params(cfg).items()}
    mask = torch.tensor(causal_mask(cfg.context))
    b, t, d, h = cfg.batch, cfg.context, cfg.dim, cfg.heads
    hd = d // h

    def norm(x, gamma):
        return x * torch.rsqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + cfg.norm_eps) * gamma

    def loss_fn(x, y):
        p = params
        hidden = (x @ p["emb"]).reshape(b, t, d) + p["pos"]
        for i in range(cfg.layers):
            n = norm(hidden, p[f"l{i}_norm1"])
            q, k, v = ((n @ p[f"l{i}_{w}"]).reshape(b, t, h, hd).transpose(1, 2)
                       for w in ("wq", "wk", "wv"))
            attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, -1)
            hidden = hidden + (attn @ v).transpose(1, 2).reshape(b, t, d) @ p[f"l{i}_wo"]
            n = norm(hidden, p[f"l{i}_norm2"])
            hidden = hidden + torch.nn.functional.silu(n @ p[f"l{i}_w1"]) @ p[f"l{i}_w2"]
        logits = (norm(hidden, p["norm_f"]) @ p["head"]).reshape(b * t, cfg.vocab)
        return -(y * torch.log_softmax(logits, -1)).sum() / (b * t)

    optimizer = torch.optim.AdamW(list(params.values()), lr=cfg.lr, betas=cfg.betas,
                                  eps=cfg.eps, weight_decay=cfg.weight_decay)
    return loss_fn, optimizer


def train_torch(cfg: Config, data: np.ndarray, steps: int) -> list[float]:
    """The loss of each step, training the torch twin on the same batches."""
    import torch

    loss_fn, optimizer = torch_model(cfg)
    losses = []
    for x, y in batches(data, cfg, steps):
        optimizer.zero_grad()
        loss = loss_fn(torch.from_numpy(one_hot(x, cfg.vocab)),
                       torch.from_numpy(one_hot(y, cfg.vocab)))
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def compare(ours: list[float], theirs: list[float]) -> float:
    """The largest relative difference of two loss curves."""
    return max(abs(a - b) / abs(b) for a, b in zip(ours, theirs, strict=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    data, chars = load_text()
    cfg = replace(Config(), vocab=len(chars), layers=args.layers, dim=args.dim)
    start = time.perf_counter()
    model = compile_step(cfg, args.threads)
    print(f"compiled the step in {time.perf_counter() - start:.1f} s "
          f"({sum(a.size for a in init_params(cfg).values())} weights)")
    start = time.perf_counter()
    ours = [float(model(x=one_hot(x, cfg.vocab), y=one_hot(y, cfg.vocab)))
            for x, y in batches(data, cfg, args.steps)]
    per_step = (time.perf_counter() - start) / args.steps
    try:
        theirs = train_torch(cfg, data, args.steps)
    except ImportError:
        theirs = None
    print(f"{'step':>4}  {'rlx loss':>9}  {'torch loss':>10}")
    for i, loss in enumerate(ours):
        other = f"{theirs[i]:10.5f}" if theirs else "         -"
        print(f"{i:4d}  {loss:9.5f}  {other}")
    print(f"rlx: {per_step * 1e3:.1f} ms per step, arena {model.arena_bytes / 1e6:.2f} MB")
    if theirs:
        print(f"largest relative difference of the loss curves over {args.steps} steps: "
              f"{compare(ours, theirs):.2e}")


if __name__ == "__main__":
    main()
