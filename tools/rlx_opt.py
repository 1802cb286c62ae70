"""rlx-opt: xDSL's opt driver with the rlx dialects and passes registered.

Unlike a bare `xdsl-opt`, every failure (parse error, verifier error, unknown pass,
unreadable file) is a one-paragraph diagnostic on stderr and exit status 1, never a
Python traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from rlx_mlir.dialects import get_all_dialects
from rlx_mlir.passes import get_all_passes


class RlxOptMain(xDSLOptMain):
    """The rlx-opt command line tool."""

    version_format = "rlx-opt (xDSL {xdsl_version})"

    def register_all_dialects(self):
        super().register_all_dialects()
        for name, factory in get_all_dialects().items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self):
        super().register_all_passes()
        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)

    def get_input_stream(self):
        if self.args.input_file == "-":
            self.args.input_file = None
        return super().get_input_stream()

    def setup_pipeline(self):
        try:
            super().setup_pipeline()
        except ValueError as err:
            known = ", ".join(sorted(self.available_passes))
            raise PipelineError(f"{err}\nknown passes: {known}") from err


class PipelineError(Exception):
    """A -p pipeline names an unknown pass or option."""


def _report(message: str) -> int:
    print(f"rlx-opt: error: {message}", file=sys.stderr)
    return 1


def run(argv: Sequence[str] | None = None) -> int:
    """Run rlx-opt on `argv`; return the exit status instead of raising."""
    try:
        RlxOptMain(description="rlx-mlir modular optimizer driver", args=argv).run()
    except ParseError as err:
        return _report(str(err))
    except DiagnosticException as err:
        notes = "\n".join(getattr(err, "__notes__", []))
        return _report(f"{err}\n{notes}".rstrip())
    except PipelineError as err:
        return _report(str(err))
    except OSError as err:
        return _report(f"cannot read or write {err.filename!r}: {err.strerror}")
    except (ValueError, TypeError, AssertionError, KeyError, NotImplementedError) as err:
        # xDSL raises these for malformed IR it does not diagnose itself.
        return _report(f"{type(err).__name__}: {err}")
    except KeyboardInterrupt:
        return 130
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":  # pragma: no cover
    main()

__all__ = ["RlxOptMain", "main", "run"]
