"""A small JIT for kernel tests: llvm.funcs built by a kernel builder, compiled in one
module through the backend's own LLVM path (shared by the kernel test files)."""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvmb
from xdsl.dialects.builtin import ModuleOp

from rlx_mlir.backend import optimize
from rlx_mlir.core.target import Target, host_target, vector_width_for


def compile_functions(functions, cpu: str | None = None):
    """(optimized LLVM module, MCJIT engine, target machine) of `functions`, for the host or
    for the named CPU. The engine owns its target machine, so every module gets a fresh one."""
    module = ModuleOp(list(functions))
    module.verify()
    target = host_target()
    if cpu is not None:
        target = Target(cpu, "", target.triple, vector_width_for(cpu, ""))
    parsed = optimize(module, target)
    machine = target.machine()
    engine = llvmb.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    return parsed, engine, machine


class Jitted:
    """llvm.funcs compiled for the host in one module (kept alive here)."""

    def __init__(self, functions, asm=False):
        self.module, self.engine, self.machine = compile_functions(functions)
        self.asm = self.machine.emit_assembly(self.module) if asm else None

    def function(self, name, n_args, restype=None):
        address = self.engine.get_function_address(name)
        return ctypes.CFUNCTYPE(restype, *[ctypes.c_void_p] * n_args)(address)
