"""Reverse-mode automatic differentiation on mir (SPEC "Automatic differentiation").

The walker is `core`, the rule interface `context`, the rules by family `rules_*`."""
