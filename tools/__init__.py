"""Command-line tools: rlx-opt."""
