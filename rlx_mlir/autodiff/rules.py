"""Every VJP rule, by op name: the union of the rule families (`rules_*`).

The registry record of an op says whether it is differentiable; tests/test_registry.py
checks that every differentiable op has a rule here and that no family names an op twice.
"""

from __future__ import annotations

from rlx_mlir.autodiff import rules_elementwise, rules_linalg, rules_nn, rules_sequence
from rlx_mlir.autodiff.context import VjpRule

FAMILIES = (rules_elementwise, rules_linalg, rules_nn, rules_sequence)

VJP_RULES: dict[str, VjpRule] = {
    name: rule for family in FAMILIES for name, rule in family.RULES.items()
}
"""Op name -> its VJP rule."""
