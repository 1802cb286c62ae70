"""`python -m benchmarks serve`: rlx-serve under N concurrent streaming clients, next to
llama.cpp's llama-server when `RLX_LLAMA_SERVER=path/to/llama-server` is set.

    python -m benchmarks serve [--model NAME|PATH] [--clients 1,4,8] [--requests 2]
                               [--max-tokens 64] [--threads 2] [--single] [--out DIR]
                               [--name STEM]

Each server runs as a subprocess on 127.0.0.1 (rlx-serve once for every client count;
llama-server once per count with `-np N -c 16384`). For each N, N client threads each
stream `--requests` `/v1/completions` of `--max-tokens` tokens at temperature 0 (distinct
prompts, `ignore_eos` where the server knows it); reported: aggregate generated tok/s (all
completion tokens / wall time of the whole round) and time to first token p50 / p95 (from
sending a request to its first text chunk). One warm-up request precedes each server's
rounds. rlx-serve runs with `--slots` = the largest client count (batched decoding: one
native call advances every active stream), and with `--slots 1` as well when
`--single` is given (one KV cache: requests one after another, for comparison).

The markdown goes to stdout and `DIR/STEM.md`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOPICS = ["the history of computing", "how bread is made", "the life of bees",
          "a trip to the mountains", "the rules of chess", "ocean tides", "the first railways",
          "growing tomatoes", "the moon landing", "how compilers work"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(command: list[str], port: int, timeout: float = 600) -> subprocess.Popen:
    """Start a server and wait until its /health answers 200."""
    import httpx

    log = tempfile.TemporaryFile("w+")  # a pipe could fill up and stall the server
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, text=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"{command[0]} exited with {process.returncode}: "
                               f"{log.read()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{command[0]} did not become healthy in {timeout} s")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()


def _stream(url: str, prompt: str, max_tokens: int) -> tuple[float, int]:
    """(seconds to the first text chunk, completion tokens) of one streamed completion."""
    import httpx

    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first, tokens, chunks = None, None, 0
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                tokens = data["usage"]["completion_tokens"]
            if data.get("choices") and data["choices"][0].get("text"):
                chunks += 1
                if first is None:
                    first = time.perf_counter() - start
    return (first if first is not None else time.perf_counter() - start,
            tokens if tokens is not None else chunks)


def _round(url: str, clients: int, requests: int, max_tokens: int) -> dict[str, Any]:
    ttfts: list[float] = []
    total = [0]
    lock = threading.Lock()

    def client(index: int) -> None:
        for r in range(requests):
            topic = TOPICS[(index * requests + r) % len(TOPICS)]
            ttft, tokens = _stream(url, f"Client {index}, request {r}: a few words about "
                                        f"{topic}.", max_tokens)
            with lock:
                ttfts.append(ttft)
                total[0] += tokens

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    ttfts.sort()

    def percentile(p: float) -> float:
        return ttfts[min(len(ttfts) - 1, round(p * (len(ttfts) - 1)))]

    return {"clients": clients, "tokens": total[0], "seconds": wall,
            "tok_s": total[0] / wall, "ttft_p50_ms": 1e3 * percentile(0.5),
            "ttft_p95_ms": 1e3 * percentile(0.95)}


def _serve_rlx(model: str, threads: int, counts: list[int], args: Any,
               slots: int) -> list[dict]:
    port = _free_port()
    command = [sys.executable, "-m", "rlx_mlir.tools.rlx_serve", model, "--port", str(port),
               "--threads", str(threads), "--max-seq", "2048", "--max-queue", "256",
               "--slots", str(slots)]
    process = _start(command, port)
    try:
        url = f"http://127.0.0.1:{port}"
        _stream(url, "Warm-up.", 8)
        return [_round(url, n, args.requests, args.max_tokens) for n in counts]
    finally:
        _stop(process)


def _serve_llama(binary: str, path: str, threads: int, counts: list[int],
                 args: Any) -> list[dict]:
    results = []
    for n in counts:
        port = _free_port()
        process = _start([binary, "-m", path, "-np", str(n), "-c", "16384", "-t",
                          str(threads), "--host", "127.0.0.1", "--port", str(port)], port)
        try:
            url = f"http://127.0.0.1:{port}"
            _stream(url, "Warm-up.", 8)
            results.append(_round(url, n, args.requests, args.max_tokens))
        finally:
            _stop(process)
    return results


def _markdown(rows: dict[str, list[dict]], args: Any, path: str) -> str:
    lines = [f"# rlx-serve benchmark ({dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC)", "",
             f"Model `{Path(path).name}`, {args.threads} threads, each client streams "
             f"{args.requests} × {args.max_tokens}-token `/v1/completions` at temperature 0. "
             f"Machine: {os.cpu_count()} cores.", "",
             "| server | clients | generated tokens | seconds | aggregate tok/s | "
             "TTFT p50 ms | TTFT p95 ms |", "|---|---:|---:|---:|---:|---:|---:|"]
    for server, results in rows.items():
        for r in results:
            lines.append(f"| {server} | {r['clients']} | {r['tokens']} | {r['seconds']:.2f} "
                         f"| {r['tok_s']:.1f} | {r['ttft_p50_ms']:.0f} | "
                         f"{r['ttft_p95_ms']:.0f} |")
    lines += ["", "rlx-serve (slots=N) decodes every active stream in one native call "
              "(a decode step of N sequences is N rows through each weight); "
              "rlx-serve (slots=1), when shown, serves one request after another."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks serve",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--clients", default="1,4,8")
    parser.add_argument("--requests", type=int, default=2, help="requests per client")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--name", default=None)
    parser.add_argument("--single", action="store_true",
                        help="also run rlx-serve with --slots 1 (one request at a time)")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.clients.split(",")]
    from rlx_mlir.models.model import _resolve

    path = str(_resolve(args.model))
    slots = max(counts)
    rows = {f"rlx-serve (slots={slots})": _serve_rlx(path, args.threads, counts, args, slots)}
    if args.single:
        rows["rlx-serve (slots=1)"] = _serve_rlx(path, args.threads, counts, args, 1)
    llama = os.environ.get("RLX_LLAMA_SERVER")
    if llama:
        rows["llama-server -np N"] = _serve_llama(llama, path, args.threads, counts, args)
    report = _markdown(rows, args, path)
    print(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or f"serve-{dt.datetime.now():%Y%m%d-%H%M%S}"
    (out / f"{name}.md").write_text(report)


if __name__ == "__main__":
    main()
