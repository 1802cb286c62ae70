"""Build a Llama decoder block with the rlx-mlir Python API and write it as MLIR.

    python examples/llama_block.py                 # writes examples/llama_block.mlir
    python examples/llama_block.py --seq 128 -o /tmp/block.mlir

The shapes default to a small Llama: d_model 512, 8 query heads and 2 kv heads of
64 dims (grouped-query attention), a SwiGLU FFN of 1408, 32 tokens, causal mask.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import rlx_mlir as rlx


def build_llama_block(
    seq: int = 32,
    d_model: int = 512,
    num_heads: int = 8,
    num_kv_heads: int = 2,
    head_dim: int = 64,
    d_ff: int = 1408,
    batch: int | None = None,
) -> rlx.Graph:
    """One pre-norm Llama decoder block: inputs x, cos, sin; weights as params."""
    g = rlx.Graph("llama_block")
    lead = (seq,) if batch is None else (batch, seq)
    x = g.input("x", lead + (d_model,))
    cos = g.input("cos", (seq, head_dim // 2))
    sin = g.input("sin", (seq, head_dim // 2))
    p = {
        "ln1_g": g.param("ln1_g", (d_model,)),
        "q_w": g.param("q_w", (d_model, num_heads * head_dim)),
        "k_w": g.param("k_w", (d_model, num_kv_heads * head_dim)),
        "v_w": g.param("v_w", (d_model, num_kv_heads * head_dim)),
        "o_w": g.param("o_w", (num_heads * head_dim, d_model)),
        "ln2_g": g.param("ln2_g", (d_model,)),
        "gate_w": g.param("gate_w", (d_model, d_ff)),
        "up_w": g.param("up_w", (d_model, d_ff)),
        "down_w": g.param("down_w", (d_ff, d_model)),
    }
    y = g.llama_decoder_block(
        x, p["ln1_g"], None, p["q_w"], p["k_w"], p["v_w"], p["o_w"], p["ln2_g"], None,
        p["gate_w"], p["up_w"], p["down_w"], cos, sin,
        num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads, eps=1e-5,
    )
    g.output(y)
    return g


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("-o", "--output", type=Path,
                        default=Path(__file__).with_name("llama_block.mlir"))
    args = parser.parse_args()
    args.output.write_text(build_llama_block(seq=args.seq).to_mlir())
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
