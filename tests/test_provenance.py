"""Provenance as MLIR locations (issue 13 item 1).

The builder locates every op (`g.scope` names, else the method and a counter); the
passes derive the new ops' locations (hir expansion `block/op`, fusion a fused location
of the ops replaced, bufferization and the llvm lowering keep them); the compiled model
keeps them through its source text, so a kernel's origin in the profile and the arena
picture is the user's block.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from xdsl.dialects import llvm
from xdsl.dialects.builtin import FusedLoc, NameLoc
from xdsl.printer import Printer

import rlx_mlir as rlx
from rlx_mlir import GraphError
from rlx_mlir.core.locations import name_loc, name_unlocated
from rlx_mlir.dialects import hir, lir, mir
from rlx_mlir.ir import parse_module
from rlx_mlir.passes.provenance import loc_names, origin
from rlx_mlir.pipeline import lower


def _debug_text(module) -> str:
    out = io.StringIO()
    Printer(stream=out, print_debuginfo=True).print_op(module)
    return out.getvalue()


def scoped_graph() -> rlx.Graph:
    g = rlx.Graph("scoped")
    x = g.input("x", (8, 32))
    w, up, down = g.param("w", (32, 32)), g.param("up", (32, 64)), g.param("down", (64, 32))
    with g.scope("layer3"):
        h = g.linear(x, w, activation="gelu")
        with g.scope("ffn"):
            h = g.relu(h @ up) @ down
    g.output(g.softmax(h + x) * 2.0)
    return g


def test_builder_locates_every_op():
    module = scoped_graph().to_module()
    names = [loc_names(op.location) for op in module.walk()
             if isinstance(op, hir.LinearOp | mir.MatmulOp | mir.ReluOp | mir.SoftmaxOp | mir.AddOp)]
    assert names == [["layer3.linear"], ["layer3.ffn.matmul"], ["layer3.ffn.relu"],
                     ["layer3.ffn.matmul#1"], ["add#0"], ["softmax#0"]]


def test_scope_name_is_checked():
    with pytest.raises(GraphError, match="scope"), rlx.Graph("g").scope(""):
        pass


def test_locations_round_trip_as_text():
    text = _debug_text(scoped_graph().to_module())
    assert 'loc("layer3.linear")' in text
    assert _debug_text(parse_module(text)) == text


def test_passes_derive_locations():
    module = scoped_graph().to_module()
    mir_module = lower(module.clone(), "mir")
    fused = next(op for op in mir_module.walk() if isinstance(op, mir.FusedMatmulOp))
    assert isinstance(fused.location, FusedLoc)
    assert origin(fused) == "layer3.linear/matmul + layer3.linear/gelu"
    lir_module = lower(module.clone(), "lir")
    kernels = {origin(op) for op in lir_module.walk() if isinstance(op, lir.KernelOp)}
    assert {"layer3.ffn.matmul + layer3.ffn.relu", "layer3.ffn.matmul#1", "softmax#0"} <= kernels
    llvm_module = lower(module, "llvm")
    calls = [op for op in llvm_module.walk() if isinstance(op, llvm.CallOp)
             and isinstance(op.location, NameLoc | FusedLoc)]
    assert "layer3.ffn.matmul#1" in {origin(c) for c in calls}


def test_hir_expansion_names_the_block():
    g = rlx.Graph("attn")
    q = g.input("q", (4, 16))
    with g.scope("layer0"):
        g.output(g.attention(q, q, q, num_heads=2, head_dim=8, mask_kind="causal"))
    lir_module = lower(g.to_module(), "lir")
    names = [origin(op) for op in lir_module.walk() if isinstance(op, lir.KernelOp)]
    assert names and all(n.startswith("layer0.attention") for n in names)


def test_profile_origin_is_the_users_block():
    g = scoped_graph()
    rng = np.random.default_rng(0)
    params = {n: rng.standard_normal(s).astype(np.float32)
              for n, s in (("w", (32, 32)), ("up", (32, 64)), ("down", (64, 32)))}
    model = rlx.jit(g, params=params)
    assert 'loc("layer3.linear")' in model._source  # the source keeps them for re-lowering
    origins = {row.origin for row in model.profile(x=np.ones((8, 32), np.float32), repeat=1).rows}
    assert {"layer3.linear/matmul + layer3.linear/gelu", "layer3.ffn.matmul#1"} <= origins
    svg = model.arena_svg()
    assert 'data-origin="layer3.ffn.matmul#1"' in svg


def test_to_mlir_prints_every_ops_location():
    """`g.to_mlir()` is MLIR's debug-info form: each op ends in its `loc(...)`, and xDSL
    reads it back unchanged."""
    text = scoped_graph().to_mlir()
    for name in ("layer3.linear", "layer3.ffn.matmul", "layer3.ffn.matmul#1", "add#0", "softmax#0"):
        assert f'loc("{name}")' in text
    assert _debug_text(parse_module(text)) == text.rstrip("\n")


def _profile_origins(tmp_path, text: str, capsys) -> str:
    from rlx_mlir.tools.rlx_run import run

    path = tmp_path / "saved.mlir"
    path.write_text(text)
    assert run([str(path), "--random", "--profile", "--threads", "1"]) == 0
    return capsys.readouterr().out


def test_rlx_run_profile_of_saved_text_shows_the_scopes(tmp_path, capsys):
    out = _profile_origins(tmp_path, scoped_graph().to_mlir(), capsys)
    assert "| layer3.linear/matmul + layer3.linear/gelu |" in out
    assert "| layer3.ffn.matmul#1 |" in out and "| softmax#0 |" in out
    assert "unknown" not in out


def test_text_without_locations_gets_fallback_names(tmp_path, capsys):
    """Hand-written text (no `loc`): every op is named after its method and a counter
    when the pipeline starts, so no kernel's origin is unknown; names the text already
    uses are skipped."""
    g = rlx.Graph("plain")
    x = g.input("x", (4, 16))
    w, v = g.param("w", (16, 16)), g.param("v", (16, 8))
    g.output(g.tanh(x @ w) @ v)
    plain = io.StringIO()
    Printer(stream=plain).print_op(g.to_module())  # no locations at all
    module = parse_module(plain.getvalue())
    second = [op for op in module.walk() if isinstance(op, mir.MatmulOp)][1]
    second.location = name_loc("matmul#0")  # taken: the first matmul is matmul#1
    name_unlocated(module)
    names = [origin(op) for op in module.walk() if isinstance(op, mir.MatmulOp | mir.TanhOp)]
    assert names == ["matmul#1", "tanh#0", "matmul#0"]
    out = _profile_origins(tmp_path, plain.getvalue(), capsys)
    assert "| matmul#0 + tanh#0 |" in out and "| matmul#1 |" in out and "unknown" not in out
