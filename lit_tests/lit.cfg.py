# lit configuration of rlx-mlir: FileCheck tests of the dialects, passes and tools.
# ruff: noqa: F821  (lit injects `config` and `lit_config`)
import os
import shutil
import sys

import lit.formats

config.name = "rlx-mlir"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py"]

# The tools live beside the Python that runs lit (a venv's bin/) or on PATH.
bin_dirs = [os.path.dirname(sys.executable)]
config.environment["PATH"] = os.pathsep.join(bin_dirs + [os.environ.get("PATH", "")])
for var in ("HOME", "RLX_CACHE_DIR", "RLX_TARGET_CPU", "RLX_NUM_THREADS"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

for tool in ("rlx-opt", "filecheck"):
    if shutil.which(tool, path=config.environment["PATH"]) is None:
        lit_config.fatal(f"{tool} not found: install rlx-mlir with its [test] extra")

# Custom syntax -> print -> parse must give the same text, and generic -> custom too.
config.substitutions.append(
    ("%roundtrip", "rlx-opt %s --split-input-file | rlx-opt --split-input-file")
)
config.substitutions.append(
    (
        "%generic_roundtrip",
        "rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file",
    )
)
