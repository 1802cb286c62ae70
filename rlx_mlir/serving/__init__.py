"""Serving: a scheduler of generation requests over an engine (`rlx-serve` runs it).

See docs/serving.md: `Scheduler` (bounded queue, requests join and leave at step
boundaries, cancellation, streaming events), `Engine` (what the scheduler drives) and
`LanguageModelEngine` (one sequence per native call on a `LanguageModel`, slots = 1,
with prompt caching).
"""

from rlx_mlir.serving.engine import (
    Engine,
    EngineSequence,
    LanguageModelEngine,
    StepOutput,
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

__all__ = ["Delta", "Engine", "EngineSequence", "Event", "Finished", "LanguageModelEngine",
           "QueueFull", "Request", "Scheduler", "StepOutput", "TokenLogprob", "Usage",
           "log_softmax"]
