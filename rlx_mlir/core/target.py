"""The CPU rlx-mlir compiles for: LLVM CPU name, features, triple and SIMD vector width.

A target is written as a spec string, `cpu` or `cpu:+feat,-feat` (e.g. `haswell` for
AVX2, `x86-64` for SSE only, `skylake-avx512:-avx512vnni`): the `target` option of
`convert-lir-to-llvm` and `rlx-lower`, the `rlx.target` module attribute and the
`RLX_TARGET_CPU` variable all use it (`parse_target`).

Only the drivers read the host (`host_target`: `RLX_TARGET_CPU` if set, else the machine
this process runs on) and hand the result to the passes as a spec; a pass reads its
`target` option, else the module's `rlx.target` (`target_of`), else `GENERIC_TARGET`,
so its output never depends on the machine that runs it.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

import llvmlite.binding as llvm
from xdsl.dialects.builtin import ModuleOp, StringAttr

from rlx_mlir.core.errors import OptionError

TARGET_ENV = "RLX_TARGET_CPU"
"""The variable a driver reads for the target (else it takes the host's)."""

TARGET_ATTR = "rlx.target"
"""Module attribute: the target spec the passes lower for when no `target` option is given."""

GENERIC_TARGET = "x86-64"
"""The target of a pass given neither a `target` option nor an `rlx.target` attribute:
SSE2 (4 f32 lanes), which every x86-64 CPU runs."""

DEFAULT_TRIPLE = "x86_64-unknown-linux-gnu"
"""The triple of a target parsed outside a driver (the passes never need the host's)."""

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
    def spec(self) -> str:
        """The spec string `parse_target` reads back (`cpu`, or `cpu:features`)."""
        return f"{self.cpu}:{self.features}" if self.features else self.cpu

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


def has_avx2(target: Target) -> bool:
    """Whether `target` has AVX2 (its feature string, else its CPU name)."""
    flags = set(target.features.split(","))
    if "-avx2" in flags:
        return False
    return "+avx2" in flags or (not target.features and target.cpu in (
        *_AVX2_CPUS, *_AVX512_CPUS, "x86-64-v4"))


def has_avx512bw(target: Target) -> bool:
    """Whether `target` has AVX512BW (its feature string, else its CPU name)."""
    flags = set(target.features.split(","))
    if "-avx512bw" in flags:
        return False
    return "+avx512bw" in flags or (not target.features and target.cpu in (
        *(c for c in _AVX512_CPUS if c not in ("knl", "knm")), "x86-64-v4"))


_CPU_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_FEATURE = re.compile(r"[+-][a-z0-9][a-z0-9._-]*")


def parse_target(spec: str, triple: str = DEFAULT_TRIPLE, source: str = "target") -> Target:
    """The target a spec names: `cpu` (one of KNOWN_CPUS) or `cpu:+feat,-feat` (any CPU
    name LLVM knows: the features decide the instructions and vector width). Raises an
    OptionError naming `source` (the option or variable the spec came from)."""
    cpu, colon, features = spec.strip().partition(":")
    bad = [f for f in features.split(",") if not _FEATURE.fullmatch(f)] if colon else []
    if bad or (colon and not _CPU_NAME.fullmatch(cpu)):
        raise OptionError(f"{source}: expected 'cpu' or 'cpu:+feature,-feature', got {spec!r}")
    if not colon and cpu not in KNOWN_CPUS:
        raise OptionError(
            f"{source}: expected one of {', '.join(KNOWN_CPUS)} (optionally followed by "
            f"':+feature,-feature'), got {cpu!r}"
        )
    return Target(cpu, features, triple, vector_width_for(cpu, features))


def target_of(module: ModuleOp, option: str = "") -> Target:
    """The target a pass lowers `module` for: its `target` option if given, else the
    module's `rlx.target` attribute, else GENERIC_TARGET (never the host)."""
    if option:
        return parse_target(option)
    recorded = module.attributes.get(TARGET_ATTR)
    if isinstance(recorded, StringAttr):
        return parse_target(recorded.data, source=TARGET_ATTR)
    return parse_target(GENERIC_TARGET)


def record_target(module: ModuleOp, spec: str) -> None:
    """Record a driver's target on `module` (`rlx.target`) for the passes to read."""
    parse_target(spec)  # a bad spec fails here, naming it, not in a pass
    module.attributes[TARGET_ATTR] = StringAttr(spec)


def host_target() -> Target:
    """For drivers only: the CPU named by RLX_TARGET_CPU, else the machine this process
    runs on (its full feature string), with this process's triple."""
    _initialize()
    triple = llvm.get_process_triple()
    override = os.environ.get(TARGET_ENV, "").strip()
    if override:
        return parse_target(override, triple, TARGET_ENV)
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
