"""Serving: a scheduler of generation requests over an engine (`rlx-serve` runs it).

See docs/serving.md: `Scheduler` (bounded queue, requests join and leave at step
boundaries, cancellation, streaming events), `Engine` (what the scheduler drives) and
`LanguageModelEngine` (one sequence per native call on a `LanguageModel`, slots = 1),
`BatchedEngine` (up to `slots` sequences per native call on a model loaded with slots > 1),
both with prompt caching; `engine_for(lm)` picks.
"""

from rlx_mlir.serving.engine import (
    BatchedEngine,
    Engine,
    EngineSequence,
    LanguageModelEngine,
    StepOutput,
    engine_for,
    log_softmax,
)
from rlx_mlir.serving.scheduler import (
    Delta,
    Event,
    Finished,
    QueueFull,
    Request,
    Scheduler,
    TokenLogprob,
    Usage,
)

__all__ = ["BatchedEngine", "Delta", "Engine", "EngineSequence", "Event", "Finished", "LanguageModelEngine",
           "QueueFull", "Request", "Scheduler", "StepOutput", "TokenLogprob", "Usage",
           "engine_for", "log_softmax"]
