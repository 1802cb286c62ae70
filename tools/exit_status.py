"""How the command-line tools end: an `RlxError` is a one-line diagnostic and a status,
never a traceback, and a reader that closes the pipe early (`| head`) ends the tool
quietly."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from rlx_mlir.core.errors import RlxError


def run_tool(prog: str, run: Callable[[], int], error_status: int = 1) -> None:
    """Call `run` and exit with its status; an RlxError prints `<prog>: error: ...` and
    exits with `error_status`, Ctrl-C exits 130."""
    try:
        try:
            status = run()
        except RlxError as err:
            print(f"{prog}: error: {err}", file=sys.stderr)
            status = error_status
        except KeyboardInterrupt:
            print("", file=sys.stderr)
            status = 130
        sys.stdout.flush()  # a closed pipe (`| head`) shows here, not at interpreter exit
    except BrokenPipeError:
        # The reader went away: send the rest of the output nowhere and stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        status = 1
    sys.exit(status)
