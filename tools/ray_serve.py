"""rlx-serve's app as a Ray Serve deployment: one replica per machine (or per group of
cores), each loading its own model, behind Ray's HTTP proxy.

    pip install -e '.[serve,ray]'
    python -m rlx_mlir.tools.ray_serve smollm2-135m-instruct --replicas 1 --slots 8

or from Python: `serve.run(rlx_deployment("smollm2-135m-instruct", alias="smollm2"))`,

then point any OpenAI client at http://127.0.0.1:8000/v1 (Ray's proxy). Each replica calls the loader
once at start (`/health` is 503 until the model is compiled and loaded, 200 after); the
app is `rlx_mlir.tools.rlx_serve.create_app`, the same as `rlx-serve` runs. Prompt
caching is per replica. tests/test_serve_ray.py runs this path on a tiny model.
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

from rlx_mlir.models import fetch, load_gguf
from rlx_mlir.tools.rlx_serve import create_app


def rlx_deployment(model: str, *, alias: str, slots: int = 8, threads: int | None = None,
                   max_seq: int | None = None, replicas: int = 1,
                   cpus_per_replica: float = 1.0) -> Any:
    """The bound Ray Serve application serving the GGUF file (or known model name) `model`
    under the name `alias`: `serve.run(rlx_deployment(...))` starts it."""
    from ray import serve

    options = {"slots": slots, "threads": threads}
    if max_seq is not None:
        options["max_seq"] = max_seq
    loader = functools.partial(_load, model, options)

    @serve.deployment(num_replicas=replicas, ray_actor_options={"num_cpus": cpus_per_replica})
    @serve.ingress(create_app(loader, alias=alias))
    class RlxServe:
        """One replica: the ASGI app of `create_app`, its model loaded on a thread."""

    return RlxServe.bind()


def _load(model: str, options: dict[str, Any]) -> Any:
    path = model if model.endswith(".gguf") else fetch(model, quiet=True)
    return load_gguf(path, **options)


def wait_until_healthy(url: str, timeout: float) -> None:
    """Poll `url`/health until it is 200 (the replica's model is loaded)."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}/health: not 200 after {timeout:.0f} s")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a .gguf path or a known model name")
    parser.add_argument("--alias", default=None, help="the model's name in the API")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)

    import ray
    from ray import serve

    ray.init(include_dashboard=False)
    serve.start(http_options={"host": args.host, "port": args.port})
    alias = args.alias or args.model.rsplit("/", 1)[-1].removesuffix(".gguf")
    serve.run(rlx_deployment(args.model, alias=alias, slots=args.slots, threads=args.threads,
                             replicas=args.replicas), route_prefix="/")
    url = f"http://{args.host}:{args.port}"
    wait_until_healthy(url, timeout=1800)
    print(f"serving {alias} at {url}/v1 (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
