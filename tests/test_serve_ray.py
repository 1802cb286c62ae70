"""rlx-serve's app as a Ray Serve deployment (tools/ray_serve.py), on a local Ray
instance: a replica loads a tiny GGUF, /health turns 200, and the `openai` client gets
through Ray's proxy what the model gives alone (greedy), concurrent and streamed.

Ray runs in a child process (its own workers, proxy and controller), so that nothing of
it stays in the test process.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

pytest.importorskip("ray.serve")
pytest.importorskip("openai")

from gguf_models import write_tiny_model  # noqa: E402

from rlx_mlir.models import load_gguf  # noqa: E402

MAX_SEQ = 64
PROMPTS = ["hello the cat", "the mat on the", "world sat"]

CLIENT = """
import json, threading
import openai, ray
from ray import serve
from rlx_mlir.tools.ray_serve import rlx_deployment, wait_until_healthy

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
try:
    serve.start(http_options={{"host": "127.0.0.1", "port": {port}}})
    serve.run(rlx_deployment({model!r}, alias="tiny", slots=2, threads=1, max_seq={max_seq}),
              route_prefix="/")
    url = "http://127.0.0.1:{port}"
    wait_until_healthy(url, timeout=300)
    api = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    texts = {{}}

    def complete(prompt):
        reply = api.completions.create(model="tiny", prompt=prompt, max_tokens=8,
                                       temperature=0)
        texts[prompt] = reply.choices[0].text

    threads = [threading.Thread(target=complete, args=(p,)) for p in {prompts!r}]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stream = api.completions.create(model="tiny", prompt={prompts!r}[0], max_tokens=8,
                                    temperature=0, stream=True)
    streamed = "".join(c.choices[0].text for c in stream if c.choices)
    models = [m.id for m in api.models.list()]
    print("RESULT " + json.dumps({{"texts": texts, "streamed": streamed, "models": models}}))
finally:
    serve.shutdown()
    ray.shutdown()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_serve_deployment_answers_like_the_model(tmp_path):
    path = write_tiny_model(tmp_path / "tiny.gguf", "llama", seed=7)
    script = CLIENT.format(port=free_port(), model=str(path),
                           max_seq=MAX_SEQ, prompts=PROMPTS)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, f"exit {run.returncode}\n{run.stderr[-3000:]}"
    result = json.loads(lines[0].removeprefix("RESULT "))
    alone = load_gguf(path, max_seq=MAX_SEQ)
    expected = {p: alone.generate(p, max_new_tokens=8) for p in PROMPTS}
    assert result["texts"] == expected
    assert result["streamed"] == expected[PROMPTS[0]]
    assert result["models"] == ["tiny"]
