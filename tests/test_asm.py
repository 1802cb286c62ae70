"""The host assembly of compiled models (`rlx.jit(g).asm`): the SIMD width the target asks
for, fused multiply-adds, and no calls into libm for transcendental functions.

Each graph is small and compiled once per target (module-scoped fixtures) into a private
`RLX_CACHE_DIR`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import rlx_mlir as rlx
from rlx_mlir.backend import assembly
from rlx_mlir.core.target import host_target

LIBM = ("expf", "tanhf", "erff", "logf", "powf", "exp", "tanh", "erf", "log", "pow")
"""Scalar libm functions a kernel must not call (the vector math library replaces them)."""

_SYMBOL = re.compile(r"(?<![\w.$])\$?(" + "|".join(LIBM) + r")(@\w+)?(?![\w.])")


def libm_calls(asm: str) -> list[str]:
    """Instructions of `asm` that use a libm function: `call expf@PLT`, a tail `jmp tanhf`,
    or `movabsq $erff, %rax` (then `call *%rax`)."""
    found = []
    for line in asm.splitlines():
        code = line.split("#", 1)[0].strip()
        if not code or code.startswith(".") or code.endswith(":"):
            continue  # blank, comment, directive or label
        if _SYMBOL.search(code):
            found.append(code)
    return found


def packed(asm: str, mnemonic: str, register: str) -> list[str]:
    """Instructions whose mnemonic matches `mnemonic` (a regex) with a `register` operand."""
    pattern = re.compile(rf"^\s*({mnemonic})\s+.*%{register}\d+")
    return [line.strip() for line in asm.splitlines() if pattern.search(line)]


# ----------------------------------------------------------------------------- graphs


def matmul_graph() -> rlx.Graph:
    g = rlx.Graph("mm")
    x = g.input("x", (12, 64))
    w = g.param("w", (64, 48))
    g.output(g.matmul(x, w))
    return g


def elementwise_graph() -> rlx.Graph:
    g = rlx.Graph("ew")
    x, z, w = (g.input(n, (8, 64)) for n in ("x", "z", "w"))
    g.output(g.silu(x) * z + w)
    return g


def _unary(method: str) -> Callable[[], rlx.Graph]:
    def build() -> rlx.Graph:
        g = rlx.Graph(f"g_{method}")
        g.output(getattr(g, method)(g.input("x", (8, 64))))
        return g

    return build


def pow_graph() -> rlx.Graph:
    g = rlx.Graph("g_pow")
    x = g.input("x", (8, 64))
    g.output(g.pow(g.abs(x), g.input("y", (8, 64))))
    return g


def layer_norm_graph() -> rlx.Graph:
    g = rlx.Graph("g_layer_norm")
    x = g.input("x", (8, 64))
    g.output(g.layer_norm(x, g.param("gamma", (64,)), g.param("beta", (64,))))
    return g


def attention_graph() -> rlx.Graph:
    g = rlx.Graph("g_attention")
    q = g.input("q", (2, 8, 64))
    k = g.input("k", (2, 8, 32))
    v = g.input("v", (2, 8, 32))
    g.output(g.attention(q, k, v, num_heads=4, head_dim=16, num_kv_heads=2, mask_kind="causal"))
    return g


TRANSCENDENTAL = {
    "exp": _unary("exp"),
    "log": _unary("log"),
    "tanh": _unary("tanh"),
    "sigmoid": _unary("sigmoid"),
    "gelu": _unary("gelu"),
    "gelu_tanh": _unary("gelu_tanh"),
    "pow": pow_graph,
    "softmax": _unary("softmax"),
    "layer_norm": layer_norm_graph,
    "attention": attention_graph,
}


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("rlx-cache")


@pytest.fixture(scope="module")
def compile_asm(cache_dir) -> Callable[..., str]:
    """`compile_asm(build, target_cpu=None, **jit_options)`: the asm of `rlx.jit(build())`."""
    done: dict[tuple[object, ...], str] = {}

    def get(build: Callable[[], rlx.Graph], target_cpu: str | None = None, **options) -> str:
        key = (build, target_cpu, *sorted(options.items()))
        if key not in done:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("RLX_CACHE_DIR", str(cache_dir))
                if target_cpu is None:
                    mp.delenv("RLX_TARGET_CPU", raising=False)
                else:
                    mp.setenv("RLX_TARGET_CPU", target_cpu)
                done[key] = rlx.jit(build(), **options).asm
        return done[key]

    return get


def _host_width() -> int:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RLX_TARGET_CPU", raising=False)
        return host_target().vector_width


needs_avx512 = pytest.mark.skipif(_host_width() != 16, reason="the host has no AVX-512F")

FMA_GRAPHS = pytest.mark.parametrize("build", [matmul_graph, elementwise_graph], ids=["matmul", "elementwise"])


# ----------------------------------------------------------------------------- tests


def test_libm_call_helper_finds_calls_tail_calls_and_addresses():
    asm = "\n".join([
        "g_exp:                                  # @g_exp",
        "\t.globl\tg_exp",
        "\tvmulps\t%zmm1, %zmm0, %zmm0          # exp(x) polynomial",
        "\tcallq\tg__exp_0@PLT",
        "\tjmp\t.LBB0_3",
    ])
    assert libm_calls(asm) == []
    assert libm_calls(asm + "\n\tcallq\texpf@PLT") == ["callq\texpf@PLT"]
    assert libm_calls(asm + "\n\tjmp\ttanhf                       # TAILCALL") == ["jmp\ttanhf"]
    assert libm_calls("\tmovabsq\t$erff, %rax\n\tcallq\t*%rax") == ["movabsq\t$erff, %rax"]
    assert libm_calls("\tcall\tpowf") == ["call\tpowf"]


def test_libm_call_helper_on_llvm_output():
    """JIT code (large code model) calls libm through a register: `movabsq $expf, %rax`."""
    ir = """
declare float @expf(float)
define float @f(float %x) {
  %y = call float @expf(float %x)
  ret float %y
}
"""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RLX_TARGET_CPU", raising=False)
        asm = assembly(ir, host_target(), 3)
    assert len(libm_calls(asm)) == 1 and "expf" in libm_calls(asm)[0], asm


@needs_avx512
@FMA_GRAPHS
def test_default_target_uses_zmm_fma(compile_asm, build):
    asm = compile_asm(build)
    assert packed(asm, r"vfmadd\w*ps", "zmm"), asm


@FMA_GRAPHS
def test_haswell_uses_ymm_fma_and_no_zmm(compile_asm, build):
    asm = compile_asm(build, "haswell")
    assert packed(asm, r"vfmadd\w*ps", "ymm"), asm
    assert "%zmm" not in asm


@pytest.mark.parametrize("name", TRANSCENDENTAL)
def test_no_libm_calls(compile_asm, name):
    asm = compile_asm(TRANSCENDENTAL[name])
    assert ".text" in asm or "g_" in asm  # the asm of the model, not an empty string
    assert libm_calls(asm) == []


def test_vector_width_4_uses_xmm_vectors(compile_asm):
    asm = compile_asm(elementwise_graph, vector_width=4)
    assert packed(asm, r"v\w+ps", "xmm"), asm
    assert packed(asm, r"vfmadd\w*ps", "xmm"), asm
