"""A scheduler of generation requests over an `Engine`, on a worker thread.

```python
scheduler = Scheduler(LanguageModelEngine(lm), max_queue=64).start()
request = scheduler.submit(Request(lm.tokenizer.encode("Hello"), max_tokens=16))
for event in request:                 # Delta(text, tokens, logprobs) ..., then Finished
    ...
request.result().text, request.finish_reason, request.usage   # or: await request.wait()
scheduler.close()
```

Requests wait in a bounded queue (`QueueFull` beyond `max_queue`) and join the engine at
step boundaries when it has a free slot; every step advances each active request by one
token; a request leaves when it ends (`stop`: an end-of-generation token or a stop string;
`length`: `max_tokens` or the engine's `max_seq`) or is cancelled (`request.cancel()`,
e.g. a disconnected client): its slot is freed before the next step. With
`LanguageModelEngine` (one KV cache, slots = 1) requests therefore run one after another;
a batched engine runs up to `slots` of them in each step.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlx_mlir.core.errors import ArgumentError, RlxError
from rlx_mlir.models.model import StopText, check_stop
from rlx_mlir.models.sampling import SamplingParams
from rlx_mlir.serving.engine import MAX_TOP_LOGPROBS, Engine, EngineSequence, StepOutput


class QueueFull(RlxError):
    """The scheduler's queue holds `max_queue` waiting requests already."""


@dataclass
class TokenLogprob:
    """A generated token's log-probability and the most likely alternatives."""

    token: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass
class Delta:
    """New text (possibly empty: held back as the start of a stop string) and the tokens
    generated since the last Delta."""

    text: str
    tokens: list[int]
    logprobs: list[TokenLogprob] | None = None


@dataclass
class Finished:
    """The last event of a request."""

    finish_reason: str
    """"stop", "length", "cancelled" or "error"."""
    usage: Usage
    error: str | None = None


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens whose KV rows came from the cache (prompt caching)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


Event = Delta | Finished

_REQUEST_IDS = itertools.count(1)


def _check_count(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ArgumentError(f"{name}: expected an int >= {minimum}, got {value!r}")


class Request:
    """One generation: prompt ids, sampling, limits; then its events and results.

    Iterate it (`for event in request`, or `async for` in an event loop) to stream its
    events; `on_event(event)` is also called on the scheduler's thread for each one."""

    def __init__(self, prompt: Sequence[int] | np.ndarray, max_tokens: int = 16, *,
                 temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95,
                 seed: int | None = None, stop: str | Sequence[str] | None = None,
                 logprobs: int | None = None,
                 on_event: Callable[[Event], object] | None = None):
        _check_count("max_tokens", max_tokens, 1)
        if logprobs is not None:
            _check_count("logprobs", logprobs, 0)
            if logprobs > MAX_TOP_LOGPROBS:
                raise ArgumentError(f"logprobs: expected at most {MAX_TOP_LOGPROBS} "
                                    f"alternatives, got {logprobs}")
        ids = np.asarray(prompt)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ArgumentError(f"prompt: expected a non-empty list of token ids, got "
                                f"{prompt!r:.80}")
        self.id = next(_REQUEST_IDS)
        self.prompt = ids.astype(np.int32)
        self.max_tokens = max_tokens
        self.sampling = SamplingParams(temperature, top_k, top_p, seed).check().seeded()
        self.stop = check_stop(stop)
        self.logprobs = logprobs
        self.on_event = on_event
        self.tokens: list[int] = []
        self.text = ""
        self.token_logprobs: list[TokenLogprob] = []
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.usage = Usage(prompt_tokens=int(ids.size))
        self.submitted = time.perf_counter()
        self.time_to_first_token: float | None = None
        """Seconds from `submit` to the first generated token."""
        self.cancelled = False
        self._scheduler: Scheduler | None = None
        self._events: list[Event] = []
        self._condition = threading.Condition()
        self._wakers: list[Callable[[], None]] = []
        self._done = threading.Event()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self) -> None:
        """Stop generating: the scheduler frees the request's slot before its next step (or
        drops it from the queue) and ends it with finish_reason "cancelled"."""
        self.cancelled = True
        if self._scheduler is not None:
            self._scheduler.wake()

    def result(self, timeout: float | None = None) -> Request:
        """Wait until the request has ended; itself."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.id} has not finished after {timeout} s")
        return self

    def __iter__(self) -> Iterator[Event]:
        index = 0
        while True:
            with self._condition:
                while index >= len(self._events):
                    self._condition.wait()
                event = self._events[index]
            index += 1
            yield event
            if isinstance(event, Finished):
                return

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._async_events()

    async def _async_events(self) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(ready.set)

        with self._condition:
            self._wakers.append(wake)
        try:
            index = 0
            while True:
                ready.clear()  # before reading: an event emitted after the read sets it
                with self._condition:
                    events = self._events[index:]
                index += len(events)
                for event in events:
                    yield event
                    if isinstance(event, Finished):
                        return
                if not events:
                    await ready.wait()
        finally:
            with self._condition:
                self._wakers.remove(wake)

    async def wait(self) -> Request:
        """Await the end of the request (in an event loop); itself."""
        async for _ in self:
            pass
        return self

    def _emit(self, event: Event) -> None:
        with self._condition:
            self._events.append(event)
            self._condition.notify_all()
            wakers = list(self._wakers)
        for wake in wakers:
            wake()
        if self.on_event is not None:
            self.on_event(event)


@dataclass
class _Active:
    """A request in the engine, with its text cut at stop strings."""

    request: Request
    sequence: EngineSequence
    text: StopText
    pieces: list[str] = field(default_factory=list)
    stopped: bool = False


class Scheduler:
    """Runs requests on `engine` from a worker thread (`start()`; `close()` ends it)."""

    def __init__(self, engine: Engine, max_queue: int = 64,
                 on_finish: Callable[[Request], object] | None = None):
        _check_count("max_queue", max_queue, 1)
        self.engine = engine
        self.max_queue = max_queue
        self.on_finish = on_finish
        """Called on the worker thread with each request that ended (e.g. for metrics)."""
        self._queue: deque[Request] = deque()
        self._active: dict[int, _Active] = {}
        self._condition = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def queue_depth(self) -> int:
        """Requests waiting for a slot."""
        return len(self._queue)

    @property
    def active(self) -> int:
        """Requests in the engine."""
        return len(self._active)

    def start(self) -> Scheduler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rlx-scheduler",
                                            daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Cancel every request and stop the worker thread."""
        with self._condition:
            self._closed = True
            for request in [*self._queue, *(a.request for a in self._active.values())]:
                request.cancelled = True
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def submit(self, request: Request) -> Request:
        """Queue `request`; QueueFull if `max_queue` requests wait already."""
        limit = self.engine.max_seq
        if request.prompt.size > limit:
            raise ArgumentError(f"prompt: {request.prompt.size} tokens but max_seq is {limit}")
        n_vocab = len(self.engine.tokenizer.tokens)
        if request.prompt.min() < 0 or request.prompt.max() >= n_vocab:
            raise ArgumentError(f"prompt: token ids must be in [0, {n_vocab}), got "
                                f"{int(request.prompt.min())}..{int(request.prompt.max())}")
        with self._condition:
            if self._closed:
                raise ArgumentError("the scheduler is closed")
            if len(self._queue) >= self.max_queue:
                raise QueueFull(f"the queue is full: {len(self._queue)} requests wait "
                                f"(max_queue = {self.max_queue})")
            request._scheduler = self
            self._queue.append(request)
            self._condition.notify_all()
        return request

    def wake(self) -> None:
        """Let the worker thread look at its requests again (one was cancelled)."""
        with self._condition:
            self._condition.notify_all()

    # --- the worker thread -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._condition:
                self._drop_cancelled()
                self._admit()
                if self._closed and not self._active:
                    return
                if not self._active:
                    self._condition.wait()
                    continue
            try:
                outputs = self.engine.step()
            except Exception as error:  # the engine failed: end its requests, keep serving
                for active in list(self._active.values()):
                    self._finish(active, "error", f"{type(error).__name__}: {error}")
                continue
            for sequence_id, output in outputs.items():
                active = self._active.get(sequence_id)
                if active is not None:
                    self._advance(active, output)

    def _drop_cancelled(self) -> None:
        for request in [r for r in self._queue if r.cancelled]:
            self._queue.remove(request)
            self._end(request, "cancelled")
        for active in [a for a in self._active.values() if a.request.cancelled]:
            self._finish(active, "cancelled")

    def _admit(self) -> None:
        while self._queue and self.engine.free_slots > 0 and not self._closed:
            request = self._queue.popleft()
            sequence = EngineSequence(request.id, request.prompt, request.sampling,
                                      request.logprobs)
            pieces: list[str] = []
            text = StopText(self.engine.tokenizer, request.stop, pieces.append)
            active = _Active(request, sequence, text, pieces)
            self.engine.add(sequence)
            self._active[request.id] = active

    def _advance(self, active: _Active, output: StepOutput) -> None:
        request = active.request
        if request.time_to_first_token is None:
            request.time_to_first_token = time.perf_counter() - request.submitted
            request.usage.cached_tokens = active.sequence.cached_tokens
        request.tokens.append(output.token)
        request.usage.completion_tokens += 1
        logprob = None
        if request.logprobs is not None:
            logprob = TokenLogprob(output.token, output.logprob, output.top or [])
            request.token_logprobs.append(logprob)
        stopped = active.text.push(output.token)
        delta_text = "".join(active.pieces)
        active.pieces.clear()
        request._emit(Delta(delta_text, [output.token], None if logprob is None
                            else [logprob]))
        n_tokens = request.prompt.size + len(request.tokens)
        if stopped or output.token in self.engine.tokenizer.eog_ids:
            self._finish(active, "stop")
        elif len(request.tokens) >= request.max_tokens or n_tokens - 1 >= self.engine.max_seq:
            self._finish(active, "length")

    def _finish(self, active: _Active, reason: str, error: str | None = None) -> None:
        request = active.request
        self._active.pop(request.id, None)
        self.engine.remove(request.id)
        active.text.finish()
        request.text = "".join(_text_of(request, active))
        if active.pieces:
            request._emit(Delta("".join(active.pieces), [], [] if request.logprobs is not None
                                else None))
        self._end(request, reason, error)

    def _end(self, request: Request, reason: str, error: str | None = None) -> None:
        request.finish_reason, request.error = reason, error
        request._emit(Finished(reason, request.usage, error))
        request._done.set()
        if self.on_finish is not None:
            self.on_finish(request)


def _text_of(request: Request, active: _Active) -> list[str]:
    """Every piece of text the request emitted, and the pending ones."""
    pieces = [e.text for e in request._events if isinstance(e, Delta)]
    return pieces + active.pieces


__all__ = ["Delta", "Event", "Finished", "QueueFull", "Request", "Scheduler", "TokenLogprob",
           "Usage"]
