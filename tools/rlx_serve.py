"""rlx-serve: an OpenAI-compatible HTTP server for a GGUF language model.

    rlx-serve smollm2-135m-instruct                  # http://127.0.0.1:8080/v1
    rlx-serve model.gguf --port 9000 --api-key KEY --alias my-model

Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health
(503 until the model is loaded), GET /metrics (Prometheus text). FastAPI on uvicorn; the
model runs on the scheduler's worker thread (`rlx_mlir.serving`), never on the event loop.
`create_app(model, ...)` is the ASGI app for running it under another server.
"""

import argparse
import asyncio
import hmac
import json
import math
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from rlx_mlir.core.errors import RlxError
from rlx_mlir.models.model import LanguageModel
from rlx_mlir.serving import (
    Delta,
    Engine,
    Finished,
    QueueFull,
    Request,
    Scheduler,
    TokenLogprob,
    engine_for,
)
from rlx_mlir.tools.exit_status import run_tool
from rlx_mlir.tools.rlx_generate import _number, _OneLineErrors

MAX_BODY_BYTES = 1 << 20
"""Request bodies over 1 MB are a 413."""
MAX_STOP = 4
UNSUPPORTED = ("tools", "tool_choice", "functions", "function_call", "suffix")
"""Parameters that are a 400 when given (not supported yet)."""


class APIError(Exception):
    """An OpenAI-shaped error response."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = (
            status, message, param, code, kind)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


def _bad(param: str, message: str) -> APIError:
    return APIError(400, f"{param}: {message}", param=param)


# --- parameters ---------------------------------------------------------------------------


def _get(body: dict, name: str, kind: type | tuple, default: Any = None) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise _bad(name, f"expected {_kind_name(kind)}, got {json.dumps(value)}")
    if not isinstance(value, kind):
        raise _bad(name, f"expected {_kind_name(kind)}, got {json.dumps(value)[:80]}")
    return value


def _kind_name(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "an integer", float: "a number", str: "a string", bool: "a boolean",
             list: "an array", dict: "an object"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _number_in(body: dict, name: str, default: float, low: float, high: float,
               low_open: bool = False) -> float:
    value = float(_get(body, name, (int, float), default))
    if not math.isfinite(value) or value < low or value > high or (low_open and value == low):
        bound = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        raise _bad(name, f"expected a number in {bound}, got {body.get(name)}")
    return value


def _int_at_least(body: dict, name: str, default: int | None, low: int) -> int | None:
    value = _get(body, name, int, default)
    if value is not None and value < low:
        raise _bad(name, f"expected an integer >= {low}, got {value}")
    return value


def _common(body: dict, context: int, max_seq: int, default_max: int | None) -> dict[str, Any]:
    """The sampling and limit parameters shared by both endpoints, checked."""
    for name in UNSUPPORTED:
        if body.get(name) is not None:
            raise _bad(name, "is not supported yet")
    if _get(body, "n", int, 1) != 1:
        raise _bad("n", f"only n = 1 is supported, got {body['n']}")
    if _get(body, "best_of", int, 1) != 1:
        raise _bad("best_of", f"only best_of = 1 is supported, got {body['best_of']}")
    response_format = _get(body, "response_format", dict)
    if response_format is not None and response_format.get("type") != "text":
        raise _bad("response_format", "structured output is not supported yet (only "
                   "{\"type\": \"text\"})")
    for name in ("presence_penalty", "frequency_penalty"):
        if _get(body, name, (int, float), 0) != 0:
            raise _bad(name, "only 0 is supported")
    if _get(body, "logit_bias", dict):
        raise _bad("logit_bias", "is not supported yet")
    max_tokens = _int_at_least(body, "max_completion_tokens", None, 1)
    if max_tokens is None:
        max_tokens = _int_at_least(body, "max_tokens", None, 1)
    if max_tokens is None:
        max_tokens = default_max if default_max is not None else max(max_seq - context, 1)
    total = context + max_tokens
    if total > max_seq:
        raise APIError(400, f"this model's maximum context length is {max_seq} tokens; the "
                       f"prompt has {context} and max_tokens is {max_tokens} ({total} in "
                       f"all)", param="max_tokens", code="context_length_exceeded")
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) \
                or len(stops) > MAX_STOP:
            raise _bad("stop", f"expected a string or an array of at most {MAX_STOP} strings")
        stop = [s for s in stops if s] or None
    seed = _int_at_least(body, "seed", None, 0)
    if seed is not None and seed >= 2**63:
        raise _bad("seed", f"expected an integer in [0, 2^63), got {seed}")
    return dict(max_tokens=max_tokens, temperature=_number_in(body, "temperature", 1.0, 0, 2),
                top_p=_number_in(body, "top_p", 1.0, 0, 1, low_open=True),
                top_k=_int_at_least(body, "top_k", 0, 0), seed=seed, stop=stop)


def _stream_options(body: dict) -> tuple[bool, bool]:
    stream = _get(body, "stream", bool, False)
    options = _get(body, "stream_options", dict, {})
    return stream, bool(options.get("include_usage", False))


# --- the app ------------------------------------------------------------------------------


class _Metrics:
    """The server's Prometheus metrics, in a registry of its own."""

    def __init__(self, state: "_State"):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = registry = CollectorRegistry()
        self.requests = Counter("rlx_requests", "HTTP requests by endpoint and status",
                                ["endpoint", "status"], registry=registry)
        self.prompt_tokens = Counter("rlx_prompt_tokens", "Prompt tokens processed",
                                     registry=registry)
        self.generated_tokens = Counter("rlx_generated_tokens", "Tokens generated",
                                        registry=registry)
        self.finished = Counter("rlx_finished_requests", "Generations by finish reason",
                                ["finish_reason"], registry=registry)
        self.ttft = Histogram("rlx_time_to_first_token_seconds", "Time to first token",
                              registry=registry, buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5,
                                                          5, 10, 30))
        queue = Gauge("rlx_queue_depth", "Requests waiting for a slot", registry=registry)
        queue.set_function(lambda: state.scheduler.queue_depth if state.scheduler else 0)
        active = Gauge("rlx_active_sequences", "Sequences being generated", registry=registry)
        active.set_function(lambda: state.scheduler.active if state.scheduler else 0)

    def finished_request(self, request: Request) -> None:
        self.prompt_tokens.inc(request.usage.prompt_tokens)
        self.generated_tokens.inc(request.usage.completion_tokens)
        self.finished.labels(request.finish_reason).inc()
        if request.time_to_first_token is not None:
            self.ttft.observe(request.time_to_first_token)


class _State:
    """What the endpoints share: the model once loaded, its scheduler, the options."""

    def __init__(self, alias: str, api_key: str | None, max_queue: int):
        self.alias, self.api_key, self.max_queue = alias, api_key, max_queue
        self.model: LanguageModel | None = None
        self.engine: Engine | None = None
        self.scheduler: Scheduler | None = None
        self.load_error: str | None = None
        self.created = int(time.time())
        self.metrics = _Metrics(self)

    def serve(self, model: LanguageModel | Engine) -> None:
        engine = model if isinstance(model, Engine) else engine_for(model)
        self.model = model if isinstance(model, LanguageModel) else getattr(engine, "model",
                                                                            None)
        self.engine = engine
        self.scheduler = Scheduler(engine, self.max_queue,
                                   on_finish=self.metrics.finished_request).start()


def create_app(model: LanguageModel | Engine | Callable[[], LanguageModel | Engine], *,
               alias: str | None = None, api_key: str | None = None,
               max_queue: int = 64) -> Any:
    """The FastAPI app serving `model`: a loaded LanguageModel or Engine, or a function
    that loads one (called on a thread at startup; /health is 503 until it returns)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi import Request as HTTPRequest
    from fastapi.responses import JSONResponse, PlainTextResponse

    if alias is None:
        named = model if isinstance(model, LanguageModel) else getattr(model, "model", None)
        alias = named.path.stem if isinstance(named, LanguageModel) else "rlx-model"
    state = _State(alias, api_key, max_queue)

    def load() -> None:
        try:
            state.serve(model())  # type: ignore[operator]
        except Exception as error:  # reported by /health; the server stays up
            state.load_error = f"{type(error).__name__}: {error}"

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if isinstance(model, LanguageModel | Engine):
            if state.scheduler is None:
                state.serve(model)
        else:
            threading.Thread(target=load, name="rlx-load", daemon=True).start()
        yield
        if state.scheduler is not None:
            state.scheduler.close()

    app = FastAPI(title="rlx-serve", lifespan=lifespan)
    app.state.rlx = state

    @app.exception_handler(APIError)
    async def api_error(_: HTTPRequest, error: APIError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(Exception)
    async def internal_error(_: HTTPRequest, error: Exception) -> JSONResponse:
        failure = APIError(500, f"internal error: {type(error).__name__}: {error}",
                           kind="server_error")
        return JSONResponse(failure.body(), status_code=500)

    @app.middleware("http")
    async def guard(request: HTTPRequest, call_next):
        """Body limit, API key and the per-status request counter."""
        path = request.url.path
        try:
            length = request.headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
                raise APIError(413, f"the request body is over {MAX_BODY_BYTES} bytes",
                               code="request_too_large")
            if state.api_key is not None and path.startswith("/v1/"):
                given = request.headers.get("authorization", "")
                expected = f"Bearer {state.api_key}"
                if not hmac.compare_digest(given.encode(), expected.encode()):
                    raise APIError(401, "invalid or missing API key (Authorization: Bearer "
                                   "KEY)", code="invalid_api_key",
                                   kind="authentication_error")
            response = await call_next(request)
        except APIError as error:
            response = JSONResponse(error.body(), status_code=error.status)
        if path.startswith("/v1/"):
            state.metrics.requests.labels(path, str(response.status_code)).inc()
        return response

    async def read_json(request: HTTPRequest) -> dict:
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            raise APIError(413, f"the request body is over {MAX_BODY_BYTES} bytes",
                           code="request_too_large")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            raise APIError(400, f"the body is not valid JSON: {error}") from error
        if not isinstance(data, dict):
            raise APIError(400, "the body must be a JSON object")
        if state.scheduler is None:
            raise APIError(503, "the model is still loading", kind="server_error",
                           code="model_not_ready")
        name = data.get("model")
        if name is not None and name not in _model_names(state):
            raise APIError(404, f"the model {name!r} does not exist (this server has "
                           f"{state.alias!r})", param="model", code="model_not_found")
        return data

    @app.get("/health")
    async def health() -> JSONResponse:
        if state.scheduler is None:
            detail = state.load_error or "loading"
            return JSONResponse({"status": "error" if state.load_error else "loading",
                                 "detail": detail}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return PlainTextResponse(generate_latest(state.metrics.registry),
                                 media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": [
            {"id": state.alias, "object": "model", "created": state.created,
             "owned_by": "rlx-mlir"}]})

    @app.post("/v1/completions")
    async def completions(http: HTTPRequest):
        body = await read_json(http)
        ids = _completion_prompt(body, state)
        logprobs = _int_at_least(body, "logprobs", None, 0)
        if logprobs is not None and logprobs > 5:
            raise _bad("logprobs", f"expected an integer in [0, 5], got {logprobs}")
        if _get(body, "echo", bool, False):
            raise _bad("echo", "is not supported yet")
        request = _submit(state, ids, body, 16, logprobs)
        return await _respond(http, state, request, body, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HTTPRequest):
        body = await read_json(http)
        ids = _chat_prompt(body, state)
        top = None
        if _get(body, "logprobs", bool, False):
            top = _int_at_least(body, "top_logprobs", 0, 0)
            if top > 20:
                raise _bad("top_logprobs", f"expected an integer in [0, 20], got {top}")
        elif body.get("top_logprobs") is not None:
            raise _bad("top_logprobs", "needs logprobs: true")
        request = _submit(state, ids, body, None, top)
        return await _respond(http, state, request, body, chat=True)

    return app


def _model_names(state: _State) -> set[str]:
    names = {state.alias}
    if state.model is not None:
        names |= {state.model.path.name, state.model.path.stem, str(state.model.path)}
    return names


def _completion_prompt(body: dict, state: _State) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    tokenizer = state.engine.tokenizer
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
    elif isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids = prompt
        bad = [t for t in ids if not 0 <= t < len(tokenizer.tokens)]
        if bad:
            raise _bad("prompt", f"token id {bad[0]} is out of range for a vocabulary of "
                       f"{len(tokenizer.tokens)} tokens")
    elif isinstance(prompt, list) and len(prompt) > 1:
        raise _bad("prompt", "only one prompt per request is supported (n = 1, no batches)")
    else:
        raise _bad("prompt", "expected a non-empty string or array of token ids")
    if not ids:
        raise _bad("prompt", "the prompt has no tokens")
    return list(ids)


def _chat_prompt(body: dict, state: _State) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "expected a non-empty array of messages")
    flat = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text"
                       and isinstance(p.get("text"), str) for p in content):
                raise _bad(f"messages[{i}].content", "only text content parts are supported")
            content = "".join(p["text"] for p in content)
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(content, str):
            raise _bad(f"messages[{i}]", "expected an object with a string 'role' and "
                       "'content'")
        flat.append({"role": message["role"], "content": content})
    model = state.model
    if model is None:
        raise APIError(400, "this engine has no chat template", param="messages")
    try:
        text = model.chat_prompt(flat)
    except RlxError as error:
        raise _bad("messages", str(error)) from error
    tok = model.tokenizer
    writes_bos = tok.bos_id is not None and text.startswith(tok.tokens[tok.bos_id])
    return tok.encode(text, special=True, add_bos=False if writes_bos else None)


def _submit(state: _State, ids: list[int], body: dict, default_max: int | None,
            logprobs: int | None) -> Request:
    options = _common(body, len(ids), state.engine.max_seq, default_max)
    try:
        request = Request(ids, logprobs=logprobs, **options)
        return state.scheduler.submit(request)
    except QueueFull as error:
        raise APIError(429, str(error), code="queue_full", kind="rate_limit_error") from error
    except RlxError as error:
        raise APIError(400, str(error)) from error


async def _respond(http: Any, state: _State, request: Request, body: dict, chat: bool):
    from fastapi.responses import JSONResponse, StreamingResponse

    stream, include_usage = _stream_options(body)
    kind = "chatcmpl" if chat else "cmpl"
    meta = {"id": f"{kind}-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
            "model": state.alias}
    tokenizer = state.engine.tokenizer
    if stream:
        return StreamingResponse(_sse(request, meta, chat, include_usage, tokenizer),
                                 media_type="text/event-stream")
    watcher = asyncio.ensure_future(_cancel_on_disconnect(http, request))
    try:
        await request.wait()
    finally:
        watcher.cancel()
        request.cancel()  # a no-op once done; frees the slot if the wait was cancelled
    if request.finish_reason == "error":
        raise APIError(500, f"generation failed: {request.error}", kind="server_error")
    logprobs = _logprobs(request.token_logprobs, tokenizer, chat) \
        if request.logprobs is not None else None
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": request.text},
                  "logprobs": logprobs, "finish_reason": request.finish_reason}
    else:
        choice = {"index": 0, "text": request.text, "logprobs": logprobs,
                  "finish_reason": request.finish_reason}
    return JSONResponse({**meta, "object": "chat.completion" if chat else "text_completion",
                         "choices": [choice], "usage": _usage(request)})


async def _cancel_on_disconnect(http: Any, request: Request) -> None:
    while not request.done:
        if await http.is_disconnected():
            request.cancel()
            return
        await asyncio.sleep(0.1)


async def _sse(request: Request, meta: dict, chat: bool, include_usage: bool,
               tokenizer: Any) -> AsyncIterator[str]:
    """Server-sent events of `request`; closing the stream (a disconnected client)
    cancels it, which frees its slot before the next step."""
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(choice: dict, usage: dict | None = None) -> str:
        data = {**meta, "object": kind, "choices": [choice] if choice else []}
        if include_usage:
            data["usage"] = usage
        return f"data: {json.dumps(data)}\n\n"

    try:
        if chat:
            yield chunk({"index": 0, "delta": {"role": "assistant", "content": ""},
                         "logprobs": None, "finish_reason": None})
        async for event in request:
            if isinstance(event, Delta):
                if not event.text and not event.logprobs:
                    continue
                logprobs = _logprobs(event.logprobs, tokenizer, chat) if event.logprobs \
                    else None
                if chat:
                    yield chunk({"index": 0, "delta": {"content": event.text},
                                 "logprobs": logprobs, "finish_reason": None})
                else:
                    yield chunk({"index": 0, "text": event.text, "logprobs": logprobs,
                                 "finish_reason": None})
            elif isinstance(event, Finished):
                if event.finish_reason == "error":
                    error = APIError(500, f"generation failed: {event.error}",
                                     kind="server_error")
                    yield f"data: {json.dumps(error.body())}\n\n"
                    break
                final = {"index": 0, "finish_reason": event.finish_reason, "logprobs": None}
                final.update({"delta": {}} if chat else {"text": ""})
                yield chunk(final)
                if include_usage:
                    yield chunk({}, _usage(request))
        yield "data: [DONE]\n\n"
    finally:
        request.cancel()  # a no-op once finished


def _usage(request: Request) -> dict[str, Any]:
    usage = request.usage
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}}


def _logprobs(entries: Sequence[TokenLogprob], tokenizer: Any, chat: bool) -> dict[str, Any]:
    """OpenAI's logprobs object: chat's `content` list, or the completions' columns."""

    def piece(token: int) -> str:
        return tokenizer.decode([token]) if token not in tokenizer.eog_ids else ""

    if chat:
        def item(token: int, logprob: float) -> dict[str, Any]:
            text = piece(token)
            return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

        return {"content": [{**item(e.token, e.logprob),
                             "top_logprobs": [item(t, v) for t, v in e.top]}
                            for e in entries]}
    offsets, offset = [], 0
    for e in entries:
        offsets.append(offset)
        offset += len(piece(e.token))
    return {"tokens": [piece(e.token) for e in entries],
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{piece(t): v for t, v in e.top} for e in entries],
            "text_offset": offsets}


# --- the command --------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineErrors(prog="rlx-serve", description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a .gguf file or a known model name "
                                      "(e.g. smollm2-135m-instruct)")
    parser.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    parser.add_argument("--port", type=_number(int, 0, 65535), default=8080,
                        help="port (default 8080)")
    parser.add_argument("--slots", type=_number(int, 1), default=8,
                        help="sequences decoded together, each with its own KV rows "
                             "(default 8; qwen35 models use 1)")
    parser.add_argument("--max-seq", type=_number(int, 1), default=4096,
                        help="KV cache rows: prompt + max_tokens (default 4096)")
    parser.add_argument("--threads", type=_number(int, 1), default=None,
                        help="threads (default: all cores, capped by RLX_NUM_THREADS)")
    parser.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY")
    parser.add_argument("--alias", default=None, help="the model's name in the API "
                                                       "(default: the file's name)")
    parser.add_argument("--max-queue", type=_number(int, 1), default=64,
                        help="requests waiting beyond the active ones (default 64; "
                             "more is a 429)")
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import uvicorn

    from rlx_mlir.models import load_gguf
    from rlx_mlir.models.errors import BatchingUnsupported

    def load() -> LanguageModel:
        try:
            return load_gguf(args.model, max_seq=args.max_seq, threads=args.threads,
                             slots=args.slots)
        except BatchingUnsupported as error:
            print(f"rlx-serve: {error}; serving one sequence at a time", file=sys.stderr)
            return load_gguf(args.model, max_seq=args.max_seq, threads=args.threads)

    alias = args.alias or _default_alias(args.model)
    app = create_app(load, alias=alias, api_key=args.api_key, max_queue=args.max_queue)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def _default_alias(model: str) -> str:
    from pathlib import Path

    from rlx_mlir.models.fetch import KNOWN_MODELS

    return model if model in KNOWN_MODELS else Path(model).stem


def main() -> None:
    run_tool("rlx-serve", run, 2)


if __name__ == "__main__":
    main()
