"""rlx-serve against a live server on 127.0.0.1 (uvicorn on a thread, port 0) with httpx and
the `openai` client: every endpoint, streaming, each error status, usage / finish_reason,
logprobs against log_softmax of `lm.logits`, cancellation, the queue limit, the API key.

One tiny random llama (tests/gguf_models.py) compiled once for the module; greedy outputs
are compared with the model's own `generate`/`chat`.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from gguf_models import write_tiny_model  # noqa: E402

from rlx_mlir.models import load_gguf  # noqa: E402
from rlx_mlir.serving import (  # noqa: E402
    BatchedEngine,
    LanguageModelEngine,
    Scheduler,
    engine_for,
    log_softmax,
)
from rlx_mlir.tools.rlx_serve import create_app, run  # noqa: E402

MAX_SEQ = 64
PROMPTS = ["hello the cat", "the mat on the", "world sat", "hello world"]
KEY = "secret-key"


class TestEngine(LanguageModelEngine):
    """The real engine with a gate (steps wait while it is clear) and a per-step delay."""

    __test__ = False

    def __init__(self, model):
        super().__init__(model)
        self.gate = threading.Event()
        self.gate.set()
        self.delay = 0.0

    def step(self):
        self.gate.wait()
        time.sleep(self.delay)
        return super().step()


class LiveServer:
    def __init__(self, app):
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def close(self):
        self.client.close()
        self.server.should_exit = True
        self.thread.join()


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("serve") / "tiny.gguf", "llama", seed=7)


@pytest.fixture(scope="module")
def lm(tiny_path):
    return load_gguf(tiny_path, max_seq=MAX_SEQ)


@pytest.fixture(scope="module")
def engine(lm):
    return TestEngine(lm)


@pytest.fixture(scope="module")
def server(engine):
    live = LiveServer(create_app(engine, alias="tiny", max_queue=2))
    yield live
    live.close()


@pytest.fixture
def client(server, engine):
    engine.gate.set()
    engine.delay = 0.0
    return server.client


def scheduler_of(server):
    return server.server.config.app.state.rlx.scheduler


def greedy(prompt: str, **extra) -> dict:
    return {"model": "tiny", "prompt": prompt, "max_tokens": 10, "temperature": 0, **extra}


def sse(lines) -> list:
    """The data of each event of a server-sent event stream, [DONE] last."""
    events = [line[len("data: "):] for line in lines if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


# --- the endpoints --------------------------------------------------------------------------


def test_health_models_and_metrics(client, lm):
    assert client.get("/health").json() == {"status": "ok"}
    models = client.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["tiny"] and models["object"] == "list"
    client.post("/v1/completions", json=greedy(PROMPTS[0]))
    client.post("/v1/completions", json={"prompt": 5})
    text = client.get("/metrics").text
    assert 'rlx_requests_total{endpoint="/v1/completions",status="200"}' in text
    assert 'rlx_requests_total{endpoint="/v1/completions",status="400"}' in text
    for name in ("rlx_prompt_tokens_total", "rlx_generated_tokens_total", "rlx_queue_depth",
                 "rlx_active_sequences", "rlx_time_to_first_token_seconds_bucket"):
        assert name in text


def test_health_is_503_until_loaded(lm):
    from fastapi.testclient import TestClient

    loaded = threading.Event()

    def load():
        loaded.wait(30)
        return LanguageModelEngine(lm)

    with TestClient(create_app(load, alias="tiny")) as client:
        assert client.get("/health").status_code == 503
        assert client.post("/v1/completions", json=greedy("hi")).status_code == 503
        loaded.set()
        deadline = time.monotonic() + 30
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)


def test_completions_equal_generate(client, lm):
    for prompt in PROMPTS[:2]:
        body = client.post("/v1/completions", json=greedy(prompt)).json()
        choice = body["choices"][0]
        assert choice["text"] == lm.generate(prompt, max_new_tokens=10)
        assert choice["finish_reason"] == lm.stats.finish_reason == "length"
        assert body["object"] == "text_completion" and body["model"] == "tiny"
        ids = lm.tokenizer.encode(prompt)
        assert body["usage"]["prompt_tokens"] == len(ids)
        assert body["usage"]["completion_tokens"] == 10
        assert body["usage"]["total_tokens"] == len(ids) + 10
        by_ids = client.post("/v1/completions", json=greedy(ids)).json()
        assert by_ids["choices"][0]["text"] == choice["text"]


def test_stop_and_max_seq_finish_reasons(client, lm):
    text = lm.generate(PROMPTS[0], max_new_tokens=10)
    stop = text[3:5]
    body = client.post("/v1/completions", json=greedy(PROMPTS[0], stop=stop)).json()
    assert body["choices"][0]["text"] == text[:text.find(stop)]
    assert body["choices"][0]["finish_reason"] == "stop"
    messages = [{"role": "user", "content": "hi"}]  # no max_tokens: the rest of the context
    body = client.post("/v1/chat/completions", json={"messages": messages,
                                                     "temperature": 0}).json()
    usage, reason = body["usage"], body["choices"][0]["finish_reason"]
    lm.chat(messages, max_new_tokens=MAX_SEQ - usage["prompt_tokens"])
    assert reason == lm.stats.finish_reason
    assert usage["completion_tokens"] == lm.stats.generated_tokens
    assert usage["total_tokens"] == MAX_SEQ if reason == "length" else usage["total_tokens"] < MAX_SEQ


def test_chat_equals_lm_chat(client, lm):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    body = client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": messages, "max_tokens": 12, "temperature": 0}).json()
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message == {"role": "assistant", "content": lm.chat(messages, max_new_tokens=12)}
    assert body["choices"][0]["finish_reason"] == lm.stats.finish_reason
    assert body["usage"]["completion_tokens"] == lm.stats.generated_tokens
    parts = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
             messages[1]]
    again = client.post("/v1/chat/completions", json={
        "messages": parts, "max_completion_tokens": 12, "temperature": 0}).json()
    assert again["choices"][0]["message"] == message


def test_streaming_equals_the_whole_response(client):
    whole = client.post("/v1/completions", json=greedy(PROMPTS[1])).json()
    with client.stream("POST", "/v1/completions", json=greedy(
            PROMPTS[1], stream=True, stream_options={"include_usage": True})) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = sse(response.iter_lines())
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert text == whole["choices"][0]["text"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage["total_tokens"] == whole["usage"]["total_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1
    chat = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8,
            "temperature": 0}
    whole = client.post("/v1/chat/completions", json=chat).json()
    with client.stream("POST", "/v1/chat/completions", json={**chat, "stream": True}) as r:
        chunks = sse(r.iter_lines())
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]


def test_logprobs_are_log_softmax_of_the_logits(client, lm):
    ids = lm.tokenizer.encode(PROMPTS[2])
    body = client.post("/v1/completions", json=greedy(PROMPTS[2], max_tokens=5,
                                                      logprobs=3)).json()
    new = lm.generate_ids(ids, max_new_tokens=5)
    expected = np.array([log_softmax(r) for r in lm.logits(ids + new[:-1])[len(ids) - 1:]])
    logprobs = body["choices"][0]["logprobs"]
    assert logprobs["tokens"] == [lm.tokenizer.decode([t]) for t in new]
    np.testing.assert_allclose(logprobs["token_logprobs"],
                               expected[np.arange(5), new], atol=1e-4)
    for row, top in zip(expected, logprobs["top_logprobs"], strict=True):
        best = np.argsort(-row, kind="stable")[:3]  # the legacy format keys them by text
        want = {lm.tokenizer.decode([int(t)]): float(row[t]) for t in best}
        assert top.keys() == want.keys()
        np.testing.assert_allclose([top[k] for k in want], list(want.values()), atol=1e-4)
    messages = [{"role": "user", "content": "hello"}]
    body = client.post("/v1/chat/completions", json={
        "messages": messages, "max_tokens": 4, "temperature": 0, "logprobs": True,
        "top_logprobs": 2}).json()
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == body["usage"]["completion_tokens"]
    chat_ids = lm.tokenizer.encode(lm.chat_prompt(messages), special=True)
    new = lm.generate_ids(chat_ids, max_new_tokens=4)
    rows = lm.logits(chat_ids + new[:-1])[len(chat_ids) - 1:]
    for entry, token, row in zip(content, new, rows, strict=False):
        expected = log_softmax(row)
        assert entry["logprob"] == pytest.approx(expected[token], abs=1e-4)
        assert [a["logprob"] for a in entry["top_logprobs"]] == pytest.approx(
            np.sort(expected)[::-1][:2], abs=1e-4)
        assert entry["top_logprobs"][0]["token"] == entry["token"]  # greedy: the argmax
    with client.stream("POST", "/v1/completions", json=greedy(
            PROMPTS[2], max_tokens=5, logprobs=1, stream=True)) as response:
        chunks = sse(response.iter_lines())
    streamed = [lp for c in chunks if c["choices"] and c["choices"][0]["logprobs"]
                for lp in c["choices"][0]["logprobs"]["token_logprobs"]]
    np.testing.assert_allclose(streamed, logprobs["token_logprobs"], atol=1e-5)


def hold_first_step_until_all_queued(engine, count, monkeypatch):
    """Make the engine's first step wait until `count` requests were submitted, so that
    the requests overlap whatever the threads' timing (they are admitted together after
    that step)."""
    queued = threading.Event()
    submitted = []
    submit = Scheduler.submit

    def counting_submit(self, request):
        result = submit(self, request)
        submitted.append(request)
        if len(submitted) >= count:
            queued.set()
        return result

    monkeypatch.setattr(Scheduler, "submit", counting_submit)
    step = engine.step

    def step_once_queued():
        assert queued.wait(timeout=60), f"only {len(submitted)} of {count} requests came"
        return step()

    engine.step = step_once_queued


@pytest.mark.parametrize("slots", [1, 8])
def test_eight_concurrent_clients_get_their_sequential_outputs(lm, tiny_path, slots,
                                                               monkeypatch):
    """With 8 slots the 8 streams are decoded together (one native call a step)."""
    prompts = [f"{p} {w}" for p in PROMPTS[:4] for w in ("cat", "mat")]
    expected = {p: lm.generate(p, max_new_tokens=10) for p in prompts}
    model = lm if slots == 1 else load_gguf(tiny_path, max_seq=MAX_SEQ, slots=slots)
    engine = engine_for(model)
    assert isinstance(engine, BatchedEngine if slots > 1 else LanguageModelEngine)
    batch_sizes = []
    if slots > 1:
        run = engine.runner.run
        engine.runner.run = lambda items, logits=False: (batch_sizes.append(len(items)),
                                                         run(items, logits))[1]
        hold_first_step_until_all_queued(engine, len(prompts), monkeypatch)
    live = LiveServer(create_app(engine, alias="tiny", max_queue=8))
    results: dict[str, str] = {}

    def work(prompt):
        with httpx.Client(base_url=live.url, timeout=60) as own:
            with own.stream("POST", "/v1/completions", json=greedy(prompt, stream=True)) as r:
                chunks = sse(r.iter_lines())
        results[prompt] = "".join(c["choices"][0]["text"] for c in chunks)

    threads = [threading.Thread(target=work, args=(p,)) for p in prompts]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        live.close()
    assert results == expected
    if slots > 1:
        assert max(batch_sizes) > 1  # several streams advanced by one call


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("body, param", [
    ({"prompt": "hi", "temperature": "hot"}, "temperature"),
    ({"prompt": "hi", "temperature": -1}, "temperature"),
    ({"prompt": "hi", "top_p": 0}, "top_p"),
    ({"prompt": "hi", "top_k": -3}, "top_k"),
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "n": 2}, "n"),
    ({"prompt": "hi", "seed": -1}, "seed"),
    ({"prompt": "hi", "stop": [1, 2]}, "stop"),
    ({"prompt": "hi", "stream": "yes"}, "stream"),
    ({"prompt": "hi", "logprobs": 9}, "logprobs"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [1, 10**6]}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({}, "prompt"),
])
def test_bad_completion_parameters_are_400_naming_them(client, body, param):
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and param in error["message"]
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("extra, param", [
    ({"n": 3}, "n"), ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"top_logprobs": 30, "logprobs": True}, "top_logprobs"),
    ({"messages": []}, "messages"), ({"messages": [{"role": "user"}]}, "messages[0]"),
])
def test_bad_chat_parameters_are_400_naming_them(client, extra, param):
    body = {"messages": [{"role": "user", "content": "hi"}], **extra}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400 and response.json()["error"]["param"] == param


def test_error_statuses(client):
    response = client.post("/v1/completions", content=b"{not json",
                           headers={"content-type": "application/json"})
    assert response.status_code == 400 and "JSON" in response.json()["error"]["message"]
    response = client.post("/v1/completions", json=greedy("hello", max_tokens=MAX_SEQ))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    response = client.post("/v1/completions", json={"model": "gpt-4", "prompt": "hi"})
    assert response.status_code == 404 and response.json()["error"]["param"] == "model"
    response = client.post("/v1/completions", content=b" " * ((1 << 20) + 1),
                           headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert client.get("/health").status_code == 200  # still serving


def test_queue_full_is_429(client, server, engine):
    scheduler = scheduler_of(server)
    deadline = time.monotonic() + 30
    while scheduler.active or scheduler.queue_depth:  # the requests of earlier tests end
        assert time.monotonic() < deadline
        time.sleep(0.01)
    engine.gate.clear()
    statuses: list[int] = []

    def work():
        with httpx.Client(base_url=server.url, timeout=60) as own:
            statuses.append(own.post("/v1/completions", json=greedy("hi")).status_code)

    threads = [threading.Thread(target=work) for _ in range(3)]
    try:
        for count, thread in enumerate(threads):
            thread.start()
            deadline = time.monotonic() + 30
            while scheduler.active + scheduler.queue_depth < count + 1:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        response = client.post("/v1/completions", json=greedy("hi"))
        assert response.status_code == 429
        assert response.json()["error"]["type"] == "rate_limit_error"
    finally:
        engine.gate.set()
        for thread in threads:
            thread.join()
    assert statuses == [200, 200, 200]


def test_a_disconnected_stream_frees_its_slot(client, server, engine, lm):
    engine.delay = 0.05
    scheduler = scheduler_of(server)
    finished = []
    scheduler.on_finish, on_finish = (lambda r: (finished.append(r), on_finish(r))), \
        scheduler.on_finish
    other: list[str] = []

    def another_client():  # queued behind the one that leaves; it must go on
        with httpx.Client(base_url=server.url, timeout=60) as own:
            body = own.post("/v1/completions", json=greedy(PROMPTS[1])).json()
        other.append(body["choices"][0]["text"])

    waiting = threading.Thread(target=another_client)
    try:
        with client.stream("POST", "/v1/completions", json=greedy(
                PROMPTS[0], max_tokens=50, stream=True)) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    waiting.start()
                    deadline = time.monotonic() + 30
                    while scheduler.queue_depth == 0:
                        assert time.monotonic() < deadline
                        time.sleep(0.01)
                    break  # the client goes away after the first token
        deadline = time.monotonic() + 30
        while not finished or scheduler.active:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        scheduler.on_finish = on_finish
        engine.delay = 0.0
    waiting.join()
    assert finished[0].finish_reason == "cancelled" and len(finished[0].tokens) < 50
    assert other == [lm.generate(PROMPTS[1], max_new_tokens=10)]
    body = client.post("/v1/completions", json=greedy(PROMPTS[0])).json()
    assert body["choices"][0]["text"] == lm.generate(PROMPTS[0], max_new_tokens=10)


def test_api_key(lm):
    live = LiveServer(create_app(LanguageModelEngine(lm), alias="tiny", api_key=KEY))
    try:
        client = live.client
        assert client.get("/v1/models").status_code == 401
        wrong = client.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["code"] == "invalid_api_key"
        good = client.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        assert good.status_code == 200
        assert client.get("/health").status_code == 200  # probes need no key
    finally:
        live.close()


def test_openai_client(client, server, lm):
    openai = pytest.importorskip("openai")
    api = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    messages = [{"role": "user", "content": "hello"}]
    reply = api.chat.completions.create(model="tiny", messages=messages, max_tokens=8,
                                        temperature=0)
    assert reply.choices[0].message.content == lm.chat(messages, max_new_tokens=8)
    stream = api.completions.create(model="tiny", prompt=PROMPTS[3], max_tokens=8,
                                    temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == lm.generate(
        PROMPTS[3], max_new_tokens=8)
    with pytest.raises(openai.BadRequestError, match="n"):
        api.chat.completions.create(model="tiny", messages=messages, n=2)


def test_cli_rejects_slots_below_one(tiny_path):
    with pytest.raises(SystemExit):
        run([str(tiny_path), "--slots", "0"])


def test_smollm2_end_to_end():
    """The real model behind the real client: `rlx-serve smollm2-135m-instruct` as the README
    runs it (in-process app, same code, batched: 4 slots), 4 concurrent clients each getting
    what the one-sequence model gives it alone."""
    openai = pytest.importorskip("openai")
    from rlx_mlir.models import ModelError, fetch

    try:
        path = fetch("smollm2-135m-instruct", quiet=True)
    except ModelError as error:
        pytest.skip(f"SmolLM2 is not cached and cannot be downloaded: {error}")
    alone = load_gguf(path, max_seq=256)
    prompts = ["The capital of France is", "Water boils at", "The largest planet is",
               "Bread is made from"]
    expected = [alone.generate(p, max_new_tokens=12) for p in prompts]
    live = LiveServer(create_app(lambda: load_gguf(path, max_seq=256, slots=4),
                                 alias="smollm2-135m-instruct"))
    try:
        deadline = time.monotonic() + 600
        while live.client.get("/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        api = openai.OpenAI(base_url=live.url + "/v1", api_key="unused")
        texts: dict[int, str] = {}

        def complete(index: int) -> None:
            reply = api.completions.create(model="smollm2-135m-instruct", max_tokens=12,
                                           prompt=prompts[index], temperature=0)
            texts[index] = reply.choices[0].text

        threads = [threading.Thread(target=complete, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [texts[i] for i in range(4)] == expected
        assert texts[0].startswith(" Paris"), texts[0]
        chat = api.chat.completions.create(
            model="smollm2-135m-instruct", max_tokens=24, temperature=0,
            messages=[{"role": "user", "content": "What is 2 + 2?"}])
        assert "4" in chat.choices[0].message.content
    finally:
        live.close()
