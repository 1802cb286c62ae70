"""A small JIT for kernel tests: llvm.funcs built by a kernel builder, compiled in one
module with llvmlite's MCJIT (shared by the kernel test files)."""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvmb
from xdsl.backend.llvm.convert import convert_module
from xdsl.dialects.builtin import ModuleOp


class Jitted:
    """llvm.funcs compiled in one module with llvmlite's MCJIT (kept alive here).

    The engine owns its target machine, so every module gets a fresh one."""

    def __init__(self, functions, asm=False):
        module = ModuleOp(list(functions))
        module.verify()
        self.machine = new_machine()
        ir = convert_module(module, fallback_target_triple=self.machine.triple,
                            data_layout=str(self.machine.target_data))
        self.module = llvmb.parse_assembly(str(ir))
        self.module.verify()
        tuning = llvmb.PipelineTuningOptions(speed_level=3)
        passes = llvmb.create_pass_builder(self.machine, tuning)
        passes.getModulePassManager().run(self.module, passes)
        self.asm = self.machine.emit_assembly(self.module) if asm else None
        self.engine = llvmb.create_mcjit_compiler(self.module, self.machine)
        self.engine.finalize_object()

    def function(self, name, n_args, restype=None):
        address = self.engine.get_function_address(name)
        return ctypes.CFUNCTYPE(restype, *[ctypes.c_void_p] * n_args)(address)


def new_machine():
    llvmb.initialize_native_target()
    llvmb.initialize_native_asmprinter()
    target = llvmb.Target.from_triple(llvmb.get_process_triple())
    return target.create_target_machine(
        cpu=llvmb.get_host_cpu_name(),
        features=llvmb.get_host_cpu_features().flatten() + ",-prefer-256-bit",
        opt=3, jit=True)
