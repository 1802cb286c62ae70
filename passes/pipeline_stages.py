"""The stages of the rlx pipeline and the passes that take a module from each to the next.

| stage  | reached after                                               |
|--------|-------------------------------------------------------------|
| `hir`  | the Graph builder (hir blocks and mir primitives on tensors) |
| `mir`  | convert-hir-to-mir, canonicalize, cse, mir-fuse             |
| `lir`  | mir-inline-functions, convert-mir-to-lir, lir-plan-arena,   |
|        | lir-pack-weights                                            |
| `llvm` | lir-parallelize, convert-lir-to-llvm                        |

Shared by the `rlx-lower` pass and `rlx_mlir.pipeline.lower` (which adds timings and
per-stage snapshots): both run the passes of `stage_plan` through xDSL's `PassPipeline`.
`PipelineOptions` holds every option of those passes; `options.pipeline()` writes them as
`rlx-lower{...}` and `PipelineOptions.from_pipeline` reads that back, so
`rlx-opt -p "$(options.pipeline())"` on the hir module reproduces a `jit` build.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass, PassPipeline
from xdsl.transforms import get_all_passes as xdsl_passes
from xdsl.utils.arg_spec import parse_spec
from xdsl.utils.exceptions import ArgSpecParseError

from rlx_mlir.core.errors import OptionError
from rlx_mlir.core.fusion import MIR_FUSE_OPTIONS, FusionPolicy, check_fusion
from rlx_mlir.core.target import parse_target
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.rlx import ArenaStrategy
from rlx_mlir.passes import get_all_passes

STAGES = ("hir", "mir", "lir", "llvm")

STAGE_PASSES: dict[str, tuple[str, ...]] = {
    "mir": ("convert-hir-to-mir", "canonicalize", "cse", "mir-fuse"),
    "lir": ("mir-inline-functions", "convert-mir-to-lir", "lir-plan-arena", "lir-pack-weights"),
    "llvm": ("lir-parallelize", "convert-lir-to-llvm"),
}
"""The passes that produce each stage from the one before."""

VECTOR_WIDTHS = (0, 4, 8, 16)
"""Valid `vector_width` options: f32 lanes per vector, 0 for the target's."""


def check_int_option(name: str, value: object, valid: str, ok: Callable[[int], bool]) -> int:
    """`value` if it is an int (not a bool) for which `ok` holds, else an OptionError
    naming the option and its valid values."""
    if isinstance(value, bool) or not isinstance(value, int) or not ok(value):
        raise OptionError(f"{name}: expected {valid}, got {value!r}")
    return value


@dataclass(frozen=True)
class PipelineOptions:
    """Options of the passes of the pipeline."""

    alignment: int = 64
    """lir-plan-arena: byte alignment of every arena slot."""
    strategy: str = "greedy-by-size"
    """lir-plan-arena: greedy-by-size (reuse) or naive (no reuse)."""
    vector_width: int = 0
    """convert-lir-to-llvm: f32 lanes per vector, 0 for the target's."""
    packed_params: tuple[str, ...] = ()
    """lir-pack-weights: the params bound at compile time (packed once at bind time)."""
    max_dims: str = ""
    """lir-plan-arena: the symbols' bounds, `S=2048,T=2048` (others: 4096 or a cache's capacity)."""
    profile: bool = False
    """convert-lir-to-llvm: the instrumented build (time stamps around every kernel call)."""
    target: str = ""
    """convert-lir-to-llvm: the target spec (`haswell`, `cpu:+feat,-feat`: see
    `rlx_mlir.core.target`); "" for the module's `rlx.target`, else the generic x86-64.
    The drivers (`rlx.jit`, `compile_mlir`, rlx-run) fill in RLX_TARGET_CPU or the host."""
    fusion: FusionPolicy = FusionPolicy()
    """mir-fuse: which pattern families run (`rlx.FusionPolicy`; its fields are the pass's
    options `matmul-epilogue`, `elementwise`, `fuse-broadcast`, `shared-input`)."""

    def __post_init__(self) -> None:
        """Refuse a bad option up front, with the valid values (not mid-pipeline)."""
        check_int_option("alignment", self.alignment, "a power of two >= 1",
                         lambda a: a >= 1 and not a & (a - 1))
        strategies = [s.value for s in ArenaStrategy]
        if self.strategy not in strategies:
            raise OptionError(f"strategy: expected one of {', '.join(map(repr, strategies))}, "
                              f"got {self.strategy!r}")
        check_int_option("vector_width", self.vector_width, "0 (the target's), 4, 8 or 16",
                         lambda w: w in VECTOR_WIDTHS)
        if not isinstance(self.packed_params, tuple) or not all(
                isinstance(p, str) and p for p in self.packed_params):
            raise OptionError(f"params: expected a tuple of param names, got {self.packed_params!r}")
        if not isinstance(self.max_dims, str) or '"' in self.max_dims:
            raise OptionError(f"max_dims: expected text 'S=2048,T=512', got {self.max_dims!r}")
        if not isinstance(self.profile, bool):
            raise OptionError(f"profile: expected true or false, got {self.profile!r}")
        if not isinstance(self.target, str):
            raise OptionError(f"target: expected a target spec (text), got {self.target!r}")
        if self.target:
            parse_target(self.target)
        check_fusion(self.fusion)

    def pipeline(self) -> str:
        """These options as the `rlx-lower{...}` pass pipeline that applies them (options
        at their default left out); `from_pipeline` reads it back exactly."""
        return str(make_pass("rlx-lower", self).spec())

    @classmethod
    def from_pipeline(cls, text: str) -> PipelineOptions:
        """The options of an `rlx-lower{...}` pass pipeline (as `pipeline()` writes it);
        an OptionError says what is wrong in it."""
        try:
            spec = parse_spec(text)
        except ArgSpecParseError as err:
            raise OptionError(f"expected 'rlx-lower{{option=value ...}}', got {text!r}: "
                              f"{err.args[0] if err.args else err}") from None
        if spec.name != "rlx-lower":
            raise OptionError(f"expected the rlx-lower pass, got {spec.name!r}")
        try:
            lower = available_passes()["rlx-lower"]().from_spec(spec)
        except OptionError:
            raise
        except ValueError as err:  # xDSL: an unknown option or a value of the wrong type
            raise OptionError(f"rlx-lower: {err}") from None
        return lower.options


DEFAULT_OPTIONS = PipelineOptions()
"""Every option at its default."""

FUSION_OPTIONS = {field: f"fusion.{source}" for field, source in MIR_FUSE_OPTIONS.items()}
"""mir-fuse's options -> their paths in `PipelineOptions` (the fields of `fusion`)."""

PASS_OPTIONS: dict[str, dict[str, str]] = {
    "mir-fuse": FUSION_OPTIONS,
    "lir-plan-arena": {"alignment": "alignment", "strategy": "strategy", "max_dims": "max_dims"},
    "lir-pack-weights": {"params": "packed_params", "vector_width": "vector_width",
                         "target": "target"},
    "convert-lir-to-llvm": {"vector_width": "vector_width", "profile": "profile", "target": "target"},
    "rlx-lower": {"alignment": "alignment", "strategy": "strategy",
                  "vector_width": "vector_width", "params": "packed_params",
                  "max_dims": "max_dims", "profile": "profile", "target": "target",
                  **FUSION_OPTIONS},
}
"""Pass name -> {field of the pass: field of `PipelineOptions` it takes its value from;
`fusion.x` is field x of the `fusion` policy}."""


def option_value(options: PipelineOptions, path: str) -> object:
    """The value of a `PASS_OPTIONS` source path (`alignment`, `fusion.elementwise`)."""
    value: object = options
    for part in path.split("."):
        value = getattr(value, part)
    return value


def options_from(values: dict[str, object]) -> PipelineOptions:
    """The `PipelineOptions` of values keyed by source path (the inverse of `option_value`;
    a path left out keeps its default). An OptionError for a bad value."""
    plain = {path: v for path, v in values.items() if "." not in path}
    fusion = {path.split(".", 1)[1]: v for path, v in values.items() if path.startswith("fusion.")}
    return PipelineOptions(**plain, fusion=FusionPolicy(**fusion))  # pyright: ignore[reportArgumentType]


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """xDSL's passes (canonicalize, cse, ...) and the rlx passes, by name (lazy factories)."""
    return {**xdsl_passes(), **get_all_passes()}


def make_pass(name: str, options: PipelineOptions = DEFAULT_OPTIONS) -> ModulePass:
    """The pass `name` configured from `options`."""
    cls = available_passes()[name]()
    fields = PASS_OPTIONS.get(name, {})
    return cls(**{field: option_value(options, source) for field, source in fields.items()})


STAGE_ATTR = "rlx.stage"
"""Module attribute `rlx.stage = "mir"` on a tensor-level module the pipeline lowered to
mir (`lower(..., until="mir")`), so that its text round-trips at its stage: without it a
tensor-level module is "hir" (a Graph's `x @ w` is a mir op before any pass ran)."""


def stage_of(module: ModuleOp) -> str:
    """The stage a module is at: "llvm", "lir" (planned or not), "mir" for a tensor-level
    module marked `rlx.stage = "mir"`, else "hir" for any tensor-level module (hir and/or
    mir ops: the tensor passes are idempotent, so an unmarked mir module simply goes
    through them again)."""
    ops = list(module.walk())
    if any(isinstance(op, llvm.FuncOp) for op in ops) and not any(isinstance(op, func.FuncOp) for op in ops):
        return "llvm"
    if any(op.name.startswith("lir.") for op in ops) or any(
        isinstance(op, func.FuncOp) and not op.function_type.outputs.data for op in ops
    ):
        return "lir"
    mark = module.attributes.get(STAGE_ATTR)
    if isinstance(mark, StringAttr) and mark.data == "mir" and not any(
            op.name.startswith("hir.") for op in ops):
        return "mir"
    return "hir"


def mark_stage(module: ModuleOp, stage: str) -> None:
    """Record `stage` on a module the pipeline just lowered: `rlx.stage = "mir"` at mir
    (what `stage_of` cannot tell from the ops), no mark at any other stage."""
    if stage == "mir":
        module.attributes[STAGE_ATTR] = StringAttr("mir")
    else:
        module.attributes.pop(STAGE_ATTR, None)


def is_planned(module: ModuleOp) -> bool:
    """Whether every buffer of an lir module is an arena slot (no `lir.alloc` is left)."""
    return not any(isinstance(op, lir.AllocOp) for op in module.walk())


def stage_plan(module: ModuleOp, until: str = "llvm") -> list[tuple[str, tuple[str, ...]]]:
    """(stage reached, names of the passes that reach it) for each stage from `module`'s
    own to `until`. An lir input is planned first if it needs it, and its bound weights
    packed, before the llvm stage's passes."""
    stage = stage_of(module)
    plan = []
    for target in STAGES[STAGES.index(stage) + 1 : STAGES.index(until) + 1]:
        names = STAGE_PASSES[target]
        if target == "llvm" and stage == "lir":
            names = ("lir-pack-weights", *names)
            if not is_planned(module):
                names = ("lir-plan-arena", *names)
        plan.append((target, names))
    return plan


def stage_passes(module: ModuleOp, until: str = "llvm", options: PipelineOptions = DEFAULT_OPTIONS
                 ) -> list[tuple[str, tuple[ModulePass, ...]]]:
    """`stage_plan` with every pass made and configured from `options`."""
    return [(stage, tuple(make_pass(name, options) for name in names))
            for stage, names in stage_plan(module, until)]


def stage_pipeline(module: ModuleOp, until: str = "llvm", options: PipelineOptions = DEFAULT_OPTIONS,
                   callback: Callable[[ModulePass | None, ModuleOp, ModulePass | None], None] | None = None
                   ) -> PassPipeline:
    """The `PassPipeline` of all the passes that take `module` to `until`."""
    passes = tuple(p for _, stage in stage_passes(module, until, options) for p in stage)
    return PassPipeline(passes, callback)


__all__ = [
    "DEFAULT_OPTIONS",
    "FUSION_OPTIONS",
    "PASS_OPTIONS",
    "STAGE_ATTR",
    "STAGES",
    "STAGE_PASSES",
    "PipelineOptions",
    "available_passes",
    "check_int_option",
    "is_planned",
    "make_pass",
    "mark_stage",
    "option_value",
    "options_from",
    "stage_of",
    "stage_passes",
    "stage_pipeline",
    "stage_plan",
]
