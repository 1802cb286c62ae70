"""LLVM: llvm-dialect module -> llvmlite O3 for the target CPU -> object code -> MCJIT.

Object code is cached twice: in this process (the same module compiled twice is
compiled once) and on disk under `$RLX_CACHE_DIR` (default `~/.cache/rlx-mlir`;
`RLX_CACHE_DIR=off` disables it), keyed by what determines the code: the source text,
the rlx-mlir and llvmlite versions, and the target CPU name, features and vector width.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
from xdsl.backend.llvm.convert import convert_module
from xdsl.dialects.builtin import ModuleOp

from rlx_mlir.core.abi import EntryABI
from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.target import Target, host_supports
from rlx_mlir.pipeline import Timings, source_folders

CACHE_ENV = "RLX_CACHE_DIR"
VERSION = "0.1.0"
"""Part of every cache key: bump it when generated code changes meaning."""


def cache_dir() -> Path | None:
    """The on-disk cache folder, or None when RLX_CACHE_DIR=off."""
    value = os.environ.get(CACHE_ENV, "")
    if value.lower() in ("off", "0", "none", "false"):
        return None
    return Path(value) if value else Path.home() / ".cache" / "rlx-mlir"


def cache_key(source: str, target: Target, opt_level: int, extra: str = "") -> str:
    text = "\n".join([VERSION, code_fingerprint(), llvmlite.__version__, target.key,
                      f"O{opt_level}", extra, source])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@functools.cache
def code_fingerprint() -> str:
    """A hash of the compiler's own source, so a changed kernel never loads stale code."""
    digest = hashlib.sha256()
    for folder in source_folders():
        for path in sorted(folder.rglob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass
class Executable:
    """Loaded machine code: function addresses of an MCJIT engine kept alive with it."""

    engine: llvm.ExecutionEngine
    target: Target
    llvm_ir: str | None = None
    asm: str | None = None
    abi: EntryABI | None = None
    """The graph entry's ABI (None for helper modules without one)."""
    from_disk: bool = False
    """Whether the code was loaded from the disk cache (not compiled in this process)."""

    def address(self, name: str) -> int:
        address = self.engine.get_function_address(name)
        if not address:
            raise RlxError(f"compiled code has no function @{name}")
        return address


_MEMORY: dict[str, Executable] = {}
_LOCK = threading.Lock()


def compile_module(module: ModuleOp, target: Target, *, key: str, opt_level: int = 3,
                   abi: EntryABI | None = None,
                   timings: Timings | None = None) -> Executable:
    """Compile an llvm-dialect module to machine code (or take it from a cache)."""
    with _LOCK:
        if key in _MEMORY:
            return _MEMORY[key]
        parsed = optimize(module, target, opt_level, timings)
        llvm_ir = str(parsed)  # before codegen, which runs passes of its own on `parsed`
        machine = target.machine(opt_level)
        start = time.perf_counter()
        obj = machine.emit_object(parsed)
        _time(timings, "llvm: codegen", start)
        executable = _load(obj, target, abi)
        executable.llvm_ir = llvm_ir
        _store(key, obj, abi)
        _MEMORY[key] = executable
        return executable


def optimize(module: ModuleOp, target: Target, opt_level: int = 3,
             timings: Timings | None = None) -> llvm.ModuleRef:
    """Translate an llvm-dialect module to LLVM IR and run LLVM's O-level pipeline on it."""
    start = time.perf_counter()
    llvm_ir = str(convert_module(module, fallback_target_triple=target.triple,
                                 data_layout=str(target.machine().target_data)))
    _time(timings, "llvm: translate", start)
    start = time.perf_counter()
    parsed = llvm.parse_assembly(llvm_ir)
    parsed.verify()
    machine = target.machine(opt_level)
    builder = llvm.create_pass_builder(machine, llvm.PipelineTuningOptions(speed_level=opt_level))
    builder.getModulePassManager().run(parsed, builder)
    _time(timings, f"llvm: O{opt_level}", start)
    return parsed


def load_cached(key: str, target: Target) -> Executable | None:
    """The executable of `key` from memory or disk, or None on a miss."""
    with _LOCK:
        if key in _MEMORY:
            return _MEMORY[key]
        folder = cache_dir()
        if folder is None:
            return None
        obj_path, abi_path = folder / f"{key}.o", folder / f"{key}.json"
        if not (obj_path.exists() and abi_path.exists()):
            return None
        try:
            text = abi_path.read_text()
            abi = None if json.loads(text) is None else EntryABI.from_json(text)
            executable = _load(obj_path.read_bytes(), target, abi)
        except (OSError, ValueError, RuntimeError):
            return None  # a damaged cache entry is a miss, not an error
        executable.from_disk = True
        _MEMORY[key] = executable
        return executable


def _load(obj: bytes, target: Target, abi: EntryABI | None) -> Executable:
    if not host_supports(target):
        raise RlxError(
            f"code compiled for {target.cpu} (vector width {target.vector_width}) cannot run on "
            f"this host; unset RLX_TARGET_CPU or pick a CPU this host supports"
        )
    machine = target.machine()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return Executable(engine, target, abi=abi)


def _store(key: str, obj: bytes, abi: EntryABI | None) -> None:
    """The object code and the entry's ABI (JSON, `null` without one), under `key`."""
    folder = cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        abi_text = abi.to_json() if abi is not None else "null"
        for suffix, data in ((".o", obj), (".json", abi_text.encode())):
            tmp = folder / f"{key}{suffix}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            tmp.replace(folder / f"{key}{suffix}")  # atomic: readers never see half a file
    except OSError:
        pass  # a read-only or full disk only costs the next process a compile


def assembly(llvm_ir: str, target: Target, opt_level: int = 3) -> str:
    """The target assembly of (already optimized) LLVM IR text."""
    return target.machine(opt_level).emit_assembly(llvm.parse_assembly(llvm_ir))


def _time(timings: Timings | None, name: str, start: float) -> None:
    if timings is not None:
        timings.add(name, time.perf_counter() - start)
