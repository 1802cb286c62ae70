"""Benchmark harness: rlx-mlir against numpy, torch eager and onnxruntime (issue 5).

    python -m benchmarks                  # full run: every workload, 1 and 2 threads
    python -m benchmarks --quick          # under two minutes
    python -m benchmarks --only sgemm_1024,llama_32 --threads 2

Prints a markdown table and writes it with a JSON file of every number to
`benchmarks/results/`. See benchmarks/README.md. Not part of the test suite.
"""
