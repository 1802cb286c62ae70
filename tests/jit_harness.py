"""The JIT of the kernel test suites: llvm.funcs built by a kernel builder, compiled in one
module through the backend's own LLVM path (`rlx_mlir.backend.optimize`) for the host or
for the CPU of a vector width, and called through ctypes.

```python
jitted = Jitted([build_gather(op, "gather", 16)], CPUS[16])
status = jitted.function("gather", 3, ctypes.c_int32)(x.ctypes.data, ids.ctypes.data, out.ctypes.data)
jitted.call("kernel", [x, out])                 # void kernel(ptr...) on numpy arrays
jitted.call_part("kernel", [x, out], 1, 2)      # a partitioned kernel's part 1 of 2
jitted.asm                                      # the module's assembly
```
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

import llvmlite.binding as llvmb
import numpy as np
from xdsl.dialects.builtin import ModuleOp

from rlx_mlir.backend import optimize
from rlx_mlir.core.target import Target, host_target, vector_width_for

CPUS: dict[int, str | None] = {16: None, 8: "haswell", 4: "x86-64", 1: "x86-64"}
"""The CPU each vector width is compiled for: the host (AVX-512 where the tests run), AVX2
(16 ymm), SSE2 without FMA; 1 stands for scalar code only, on SSE2."""


def target_for(cpu: str | None = None) -> Target:
    """The host target, or the named CPU with its default features (and vector width)."""
    target = host_target()
    if cpu is None:
        return target
    return Target(cpu, "", target.triple, vector_width_for(cpu, ""))


def has_avx512() -> bool:
    """Whether the host runs AVX-512F code (the W=16 asm tests need it)."""
    return "+avx512f" in llvmb.get_host_cpu_features().flatten().split(",")


def compile_functions(functions: Sequence[Any], cpu: str | None = None, *, verify: bool = True):
    """(optimized LLVM module, MCJIT engine, target machine) of `functions`, for the host or
    for the named CPU. The engine owns its target machine, so every module gets a fresh
    one. `verify` runs xDSL's verifier first (LLVM verifies anyway; slow on big modules)."""
    module = ModuleOp(list(functions))
    if verify:
        module.verify()
    target = target_for(cpu)
    parsed = optimize(module, target)
    machine = target.machine()
    engine = llvmb.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    return parsed, engine, machine


class Jitted:
    """llvm.funcs compiled in one module for the host or `cpu` (the engine is kept alive here)."""

    def __init__(self, functions: Sequence[Any], cpu: str | None = None, *, verify: bool = True):
        self.module, self.engine, self.machine = compile_functions(functions, cpu, verify=verify)

    def address(self, name: str) -> int:
        address = self.engine.get_function_address(name)
        assert address, f"no function @{name} in the compiled module"
        return address

    def function(self, name: str, n_ptrs: int, restype: Any = None, extra: Sequence[Any] = ()):
        """@name as a ctypes function of `n_ptrs` pointers then the `extra` ctypes types."""
        return ctypes.CFUNCTYPE(restype, *[ctypes.c_void_p] * n_ptrs, *extra)(self.address(name))

    def call(self, name: str, arrays: Sequence[np.ndarray]) -> None:
        """`void name(ptr...)` on the arrays' data (C-contiguous)."""
        for a in arrays:
            assert a.flags.c_contiguous
        self.function(name, len(arrays))(*(a.ctypes.data for a in arrays))

    def call_part(self, name: str, arrays: Sequence[np.ndarray], part: int, parts: int) -> None:
        """A partitioned kernel `void name(ptr..., i64 part, i64 parts)`: part `part` of `parts`."""
        fn = self.function(name, len(arrays), extra=(ctypes.c_int64, ctypes.c_int64))
        fn(*(a.ctypes.data for a in arrays), part, parts)

    @functools.cached_property
    def asm(self) -> str:
        """The assembly of the whole module."""
        return self.machine.emit_assembly(self.module)

    def function_asm(self, name: str) -> str:
        """The assembly of @name alone."""
        return self.asm.split(f"\n{name}:")[1].split(".Lfunc_end")[0]
