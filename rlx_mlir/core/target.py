"""The CPU rlx-mlir compiles for: LLVM CPU name, features, triple and SIMD vector width.

The host is used unless `RLX_TARGET_CPU` names another CPU (e.g. `haswell` for AVX2,
`x86-64` for SSE only), so the AVX2 and SSE code paths can be compiled and tested on an
AVX-512 machine. `RLX_TARGET_CPU=name:+feat,-feat` also sets the feature string.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import llvmlite.binding as llvm

from rlx_mlir.core.errors import RlxError

TARGET_ENV = "RLX_TARGET_CPU"

_AVX512_CPUS = (
    "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
    "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids",
    "graniterapids", "graniterapids-d", "diamondrapids", "znver4", "znver5", "knl", "knm",
)
_AVX2_CPUS = (
    "haswell", "broadwell", "skylake", "kabylake", "coffeelake", "cometlake", "alderlake",
    "raptorlake", "meteorlake", "arrowlake", "lunarlake", "gracemont", "znver1", "znver2",
    "znver3", "bdver4", "sierraforest", "grandridge", "core-avx2", "x86-64-v3",
)
_SSE_CPUS = (
    "x86-64", "x86-64-v2", "generic", "core2", "penryn", "nehalem", "westmere", "sandybridge",
    "ivybridge", "silvermont", "goldmont", "btver2", "bdver1", "bdver2", "bdver3",
)
KNOWN_CPUS = _AVX512_CPUS + ("x86-64-v4",) + _AVX2_CPUS + _SSE_CPUS
"""CPU names RLX_TARGET_CPU accepts (LLVM only warns about unknown names, so check here)."""


@dataclass(frozen=True)
class Target:
    """An LLVM target machine description plus the f32 vector width kernels use."""

    cpu: str
    features: str
    triple: str
    vector_width: int

    @property
    def key(self) -> str:
        """Identifies the code this target produces (part of the compile-cache key)."""
        return f"{self.triple}|{self.cpu}|{self.features}|w{self.vector_width}"

    def machine(self, opt_level: int = 3) -> llvm.TargetMachine:
        _initialize()
        return llvm.Target.from_triple(self.triple).create_target_machine(
            cpu=self.cpu, features=self.features, opt=opt_level, jit=True, codemodel="jitdefault",
        )


@functools.cache
def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()  # the barrier's inline assembly needs it


def vector_width_for(cpu: str, features: str) -> int:
    """16 lanes with AVX-512F, 8 with AVX/AVX2, else 4 (SSE)."""
    flags = set(features.split(","))
    if "+avx512f" in flags or (cpu in (*_AVX512_CPUS, "x86-64-v4") and "-avx512f" not in flags):
        return 16
    if {"+avx2", "+avx"} & flags or (cpu in _AVX2_CPUS and "-avx2" not in flags):
        return 8
    return 4


def host_target() -> Target:
    """The machine this process runs on, or the CPU named by RLX_TARGET_CPU."""
    _initialize()
    triple = llvm.get_process_triple()
    override = os.environ.get(TARGET_ENV, "").strip()
    if override:
        cpu, _, features = override.partition(":")
        if cpu not in KNOWN_CPUS:
            raise RlxError(
                f"{TARGET_ENV}: expected one of {', '.join(KNOWN_CPUS)} (optionally "
                f"followed by ':+feature,-feature'), got {cpu!r}"
            )
        return Target(cpu, features, triple, vector_width_for(cpu, features))
    cpu = llvm.get_host_cpu_name()
    # prefer-256-bit would make LLVM's own vectorizer pick ymm for scalar loops.
    features = llvm.get_host_cpu_features().flatten() + ",-prefer-256-bit"
    return Target(cpu, features, triple, vector_width_for(cpu, features))


def host_supports(target: Target) -> bool:
    """Whether code for `target` can run here (never load AVX-512 code on a host without it)."""
    host = set(llvm.get_host_cpu_features().flatten().split(","))
    if target.vector_width == 16:
        return "+avx512f" in host
    if target.vector_width == 8:
        return "+avx2" in host or "+avx" in host
    return True
