"""Code generation of lir kernels as llvm-dialect functions (used by convert-lir-to-llvm)."""
