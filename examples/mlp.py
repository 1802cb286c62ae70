"""A small MLP classifier built with the rlx-mlir Python API, written as MLIR.

    python examples/mlp.py            # writes examples/mlp.mlir
"""

from __future__ import annotations

from pathlib import Path

import rlx_mlir as rlx


def build_mlp(batch: int = 4, d_in: int = 64, d_hidden: int = 128, n_classes: int = 10) -> rlx.Graph:
    """x -> linear+gelu -> linear(+bias) -> softmax."""
    g = rlx.Graph("mlp")
    x = g.input("x", (batch, d_in))
    w1 = g.param("w1", (d_in, d_hidden))
    b1 = g.param("b1", (d_hidden,))
    w2 = g.param("w2", (d_hidden, n_classes))
    b2 = g.param("b2", (n_classes,))
    h = g.linear(x, w1, b1, activation="gelu")
    g.output(g.softmax(h @ w2 + b2))
    return g


if __name__ == "__main__":
    out = Path(__file__).with_name("mlp.mlir")
    out.write_text(build_mlp().to_mlir())
    print(f"wrote {out}")
