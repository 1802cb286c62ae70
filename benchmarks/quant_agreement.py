"""How far rlx-mlir and llama.cpp each are from Hugging Face transformers on the same GGUF.

A measuring tool of issue 21 (benchmarks/results/issue21-quant-agreement.md), NOT part of the
product or the test suite. It needs the `[parity]` extra (torch, transformers) and llama.cpp:
a shared-library build (`libllama.so`, `-DBUILD_SHARED_LIBS=ON`) and the ctypes bindings of
llama-cpp-python (its sdist's `llama_cpp/` package directory; only `llama_cpp/llama_cpp.py`
and `_ctypes_extensions.py` are used, so the high-level `Llama` class and its dependencies
are not needed).

    LLAMA_CPP_LIB_PATH=/path/to/build/bin \\
    python -m benchmarks.quant_agreement --bindings /path/to/llama_cpp_python-0.3.36 \\
        [--models DIR] [--kinds Q2_K-pure,IQ4_XS,...] [--threads 2]

For each `SmolLM2-135M-Instruct.{kind}.gguf` in `--models` (made by `llama-quantize`, see
tests/test_parity_hf.py REQUANTIZED), teacher-forced over the paragraph of
tests/test_parity_hf.py (the same token ids for every model, from our tokenizer), it takes
the logits of every position from
- transformers loading the GGUF (dequantized to float32): the reference;
- llama.cpp (one `llama_decode` of the whole sequence with `logits` on every token; default
  context parameters, so an f16 KV cache and flash attention in f16; and again with an f32
  KV cache and no flash attention, so that only its q8 activations differ from f32);
- rlx-mlir with q8 activations (the default, llama.cpp's int8 form) and with f32
  activations (`exact_dequant=True`),
and prints the SPEC's measures against HF (mean and max KL(HF || x) per position, and the
same top-1 at the positions where HF's top-two margin is >= 0.25); then the same measures
against llama.cpp (f32 KV, one batch) of rlx q8 and of llama.cpp itself decoding one token
per `llama_decode` (the spread llama.cpp has between its own batch sizes).
llama.cpp runs in a subprocess (`--llama-worker`), so its OpenMP runtime and ours never
share a process.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

# The paragraph of tests/test_parity_hf.py (kept identical so the numbers compare with it).
PARAGRAPH = (
    "The history of compilers begins in the early 1950s, when programmers wrote machine code "
    "by hand. Grace Hopper's A-0 system translated symbolic code into machine instructions, "
    "and in 1957 the first FORTRAN compiler showed that a program written in a high-level "
    "language could run almost as fast as hand-written assembly. Since then, compilers have "
    "grown into large systems that parse, analyze and optimize programs in many stages."
)
MARGIN = 0.25
KINDS = ("Q4_1", "Q2_K-pure", "IQ4_XS", "Q2_K", "Q3_K-pure", "Q3_K_M", "IQ4_NL")
GGML_TYPE_F32 = 0


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def kl_per_position(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    """KL(softmax(p) || softmax(q)) at each position."""
    p_log, q_log = log_softmax(p_logits), log_softmax(q_logits)
    return (np.exp(p_log) * (p_log - q_log)).sum(axis=-1)


def agreement(theirs: np.ndarray, ours: np.ndarray) -> dict[str, float]:
    """The SPEC's measures of `ours` against the reference `theirs`."""
    kl = kl_per_position(theirs, ours)
    top2 = np.sort(theirs, axis=-1)[:, -2:]
    decisive = top2[:, 1] - top2[:, 0] >= MARGIN
    same = theirs.argmax(-1) == ours.argmax(-1)
    return {"mean_kl": float(kl.mean()), "max_kl": float(kl.max()),
            "same_decisive": int(same[decisive].sum()), "decisive": int(decisive.sum()),
            "same_all": int(same.sum()), "positions": len(same)}


# ------------------------------------------------------------------ llama.cpp (subprocess)

def _llama_module(bindings: Path) -> types.ModuleType:
    """`llama_cpp.llama_cpp` (the ctypes API) without running the package's __init__, which
    imports the high-level Llama class and its optional dependencies."""
    package = types.ModuleType("llama_cpp")
    package.__path__ = [str(bindings / "llama_cpp")]
    sys.modules["llama_cpp"] = package
    return importlib.import_module("llama_cpp.llama_cpp")


def llama_cpp_logits(bindings: Path, model: Path, ids: list[int], threads: int,
                     f32_cache: bool, repack: bool = True, ubatch: int = 0) -> np.ndarray:
    """llama.cpp's logits at every position of `ids`, from position 0, decoded in batches of
    `ubatch` tokens (0: the whole sequence as one batch)."""
    lib = _llama_module(bindings)
    lib.llama_backend_init()
    mparams = lib.llama_model_default_params()
    mparams.use_extra_bufts = repack  # llama-bench's --repack
    handle = lib.llama_model_load_from_file(str(model).encode(), mparams)
    if not handle:
        raise RuntimeError(f"llama.cpp could not load {model}")
    step = ubatch or len(ids)
    cparams = lib.llama_context_default_params()
    cparams.n_ctx = cparams.n_batch = max(64, len(ids))
    cparams.n_ubatch = step
    cparams.n_threads = cparams.n_threads_batch = threads
    if f32_cache:  # flash attention would cast an f32 cache to f16 (llama-graph.cpp)
        cparams.type_k = cparams.type_v = GGML_TYPE_F32
        cparams.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = lib.llama_init_from_model(handle, cparams)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(handle))
    rows = []
    for start in range(0, len(ids), step):
        chunk = ids[start:start + step]
        batch = lib.llama_batch_init(len(chunk), 0, 1)
        for i, token in enumerate(chunk):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, 1
        batch.n_tokens = len(chunk)
        if lib.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        flat = np.ctypeslib.as_array(lib.llama_get_logits(ctx), shape=(len(chunk) * n_vocab,))
        rows.append(flat.reshape(len(chunk), n_vocab).copy())
        lib.llama_batch_free(batch)
    lib.llama_free(ctx)
    lib.llama_model_free(handle)
    return np.concatenate(rows)


def run_llama_worker(args: argparse.Namespace, model: Path, ids: list[int],
                     f32_cache: bool, ubatch: int = 0) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        ids_path, out_path = Path(tmp) / "ids.json", Path(tmp) / "logits.npy"
        ids_path.write_text(json.dumps(ids))
        cmd = [sys.executable, "-m", "benchmarks.quant_agreement", "--llama-worker",
               "--bindings", str(args.bindings), "--threads", str(args.threads),
               "--worker-model", str(model), "--worker-ids", str(ids_path),
               "--worker-out", str(out_path)] + (["--f32-cache"] if f32_cache else []) \
            + (["--no-repack"] if args.no_repack else []) + ["--ubatch", str(ubatch)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the llama.cpp worker failed ({done.returncode}):\n"
                               f"{done.stderr[-2000:]}")
        return np.load(out_path)


# ------------------------------------------------------------------ the comparison

def hf_logits(path: Path, ids: list[int]) -> np.ndarray:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


RLX_Q8, RLX_F32 = "rlx q8 activations", "rlx f32 activations"


def _key(name: str) -> str:
    return name.replace(" ", "_").replace(",", "").replace("/", "_per_")


def compare(args: argparse.Namespace, path: Path, ids: list[int]) -> dict[str, dict]:
    saved = Path(args.save) / f"{path.stem}.npz" if args.save else None
    if args.reuse and saved is not None and saved.exists():  # HF's and rlx's logits kept
        with np.load(saved) as old:
            hf, ours = old["hf"], {name: old[_key(name)] for name in (RLX_Q8, RLX_F32)}
    else:
        from rlx_mlir.models import load_gguf

        hf = hf_logits(path, ids)
        ours = {RLX_Q8: load_gguf(path, max_seq=256).logits(ids),
                RLX_F32: load_gguf(path, max_seq=256, exact_dequant=True).logits(ids)}
    logits = {
        "llama.cpp (f16 KV, FA)": run_llama_worker(args, path, ids, f32_cache=False),
        "llama.cpp (f32 KV, no FA)": run_llama_worker(args, path, ids, f32_cache=True),
        "llama.cpp (f32 KV, no FA, 1 token/decode)": run_llama_worker(args, path, ids,
                                                                      f32_cache=True, ubatch=1),
        **ours,
    }
    rows = {name: agreement(hf, x) for name, x in logits.items()}
    batch = logits["llama.cpp (f32 KV, no FA)"]  # against llama.cpp itself, not HF:
    rows["vs llama.cpp: rlx q8 activations"] = agreement(batch, logits[RLX_Q8])
    rows["vs llama.cpp: llama.cpp 1 token/decode"] = agreement(
        batch, logits["llama.cpp (f32 KV, no FA, 1 token/decode)"])
    if saved is not None:
        np.savez(saved, hf=hf, ids=np.array(ids), **{_key(k): v for k, v in logits.items()})
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.quant_agreement",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--bindings", type=Path, required=True,
                   help="the llama-cpp-python source folder that holds llama_cpp/")
    p.add_argument("--models", type=Path, default=Path.home() / ".cache/rlx-mlir/models")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--save", default="", help="folder to keep every model's logits (.npz)")
    p.add_argument("--reuse", action="store_true",
                   help="take HF's and rlx's logits from --save's .npz where present")
    p.add_argument("--out", default="", help="write the results as JSON here")
    p.add_argument("--no-repack", action="store_true",
                   help="llama.cpp without weight repacking (llama-bench --repack 0)")
    p.add_argument("--llama-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--f32-cache", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ubatch", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--worker-model", help=argparse.SUPPRESS)
    p.add_argument("--worker-ids", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.llama_worker:
        ids = json.loads(Path(args.worker_ids).read_text())
        np.save(args.worker_out, llama_cpp_logits(args.bindings, Path(args.worker_model), ids,
                                                  args.threads, args.f32_cache,
                                                  not args.no_repack, args.ubatch))
        return

    from rlx_mlir.models import Tokenizer

    base = args.models / "SmolLM2-135M-Instruct.Q4_1.gguf"
    ids = Tokenizer.from_gguf(base).encode(PARAGRAPH)
    results = {}
    for kind in args.kinds.split(","):
        path = args.models / f"SmolLM2-135M-Instruct.{kind}.gguf"
        if not path.exists():
            print(f"{kind}: {path} is absent, skipped", file=sys.stderr)
            continue
        results[kind] = compare(args, path, ids)
        for name, r in results[kind].items():
            print(f"{kind:10s} {name:42s} mean KL {r['mean_kl']:.2e}  max KL {r['max_kl']:.2e}  "
                  f"top-1 {r['same_decisive']}/{r['decisive']} decisive, "
                  f"{r['same_all']}/{r['positions']} all", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"positions": len(ids), "results": results},
                                             indent=1))


if __name__ == "__main__":
    main()
