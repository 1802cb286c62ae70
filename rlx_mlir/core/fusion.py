"""`rlx.FusionPolicy`: which mir-fuse pattern families run.

```python
model = rlx.jit(g, fusion=rlx.FusionPolicy(elementwise=False))   # matmul epilogues only
model = rlx.jit(g, fusion=rlx.FusionPolicy.none())               # no fusion at all
```
It lives in the core so that both the pipeline's options (`PipelineOptions.fusion`, one
layer up in the passes) and the API (`rlx.jit`, `rlx.GraphModule`) can hold one. Each field
is one option of the `mir-fuse` pass (`MIR_FUSE_OPTIONS`); results are equal under every
policy within float32 rounding.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rlx_mlir.core.errors import OptionError


@dataclass(frozen=True)
class FusionPolicy:
    """Which fusions mir-fuse performs (all but `broadcast` on by default)."""

    matmul_epilogue: bool = True
    """Fold a bias add and an activation into the matmul before them (`mir.fused_matmul`)."""
    elementwise: bool = True
    """Fuse trees of single-use elementwise ops into one `mir.fused_elementwise`."""
    broadcast: bool = False
    """Let an elementwise tree take in values of a smaller (broadcast) shape, e.g. a
    per-row rsqrt: one kernel fewer, but the small value is recomputed per element."""
    shared_input: bool = True
    """Merge sibling matmuls that read the same input into one op reading it once."""
    q8_edges: bool = True
    """Fold an rms_norm into the q8 shared-input product that reads it (the kernel
    normalizes each row before quantizing it), a gated linear unit act(gate) * up into
    the q8 gate/up product (computed as its tiles are stored), interleaved ropes and
    KV-cache inserts into the q8 q/k/v product (rotated as stored; the cache rows written
    in place) and a residual add into the q8 dequant_matmul before it (added as the
    product is stored): per llama layer eight small kernels fewer, and the thread
    barriers around them."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, bool):
                raise OptionError(f"FusionPolicy.{field.name}: expected True or False, got {value!r}")

    @classmethod
    def none(cls) -> FusionPolicy:
        """Every fusion off: mir-fuse leaves the module as it is."""
        return cls(matmul_epilogue=False, elementwise=False, broadcast=False, shared_input=False,
                   q8_edges=False)


MIR_FUSE_OPTIONS: dict[str, str] = {
    "matmul_epilogue": "matmul_epilogue",
    "elementwise": "elementwise",
    "fuse_broadcast": "broadcast",
    "shared_input": "shared_input",
    "q8_edges": "q8_edges",
}
"""Field of the mir-fuse pass -> field of `FusionPolicy` it takes its value from."""


def check_fusion(value: object) -> FusionPolicy:
    """`value` if it is a FusionPolicy, else an OptionError saying what was expected."""
    if not isinstance(value, FusionPolicy):
        raise OptionError(f"fusion: expected an rlx.FusionPolicy (e.g. rlx.FusionPolicy.none()), "
                          f"got {type(value).__name__} {value!r}")
    return value


__all__ = ["MIR_FUSE_OPTIONS", "FusionPolicy", "check_fusion"]
