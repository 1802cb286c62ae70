"""rlx-opt: xDSL's opt driver with the rlx dialects and passes registered.

Unlike a bare `xdsl-opt`, every failure (parse error, verifier error, unknown pass,
unreadable file) is a one-paragraph diagnostic on stderr and exit status 1, never a
Python traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from io import BytesIO
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects import register_all_dialects
from rlx_mlir.passes import get_all_passes


class RlxOptMain(xDSLOptMain):
    """The rlx-opt command line tool."""

    version_format = "rlx-opt (xDSL {xdsl_version})"

    def register_all_dialects(self):
        register_all_dialects(self.ctx)

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
        except (ValueError, ArgSpecParseError) as err:
            # ArgSpecParseError (a pipeline syntax error) derives from BaseException.
            known = ", ".join(sorted(self.available_passes))
            raise PipelineError(
                f"invalid pass pipeline {self.args.passes!r}: {err}\nknown passes: {known}"
            ) from err

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        data = chunk.read()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as err:
            line_start = data.rfind(b"\n", 0, err.start) + 1
            line = data.count(b"\n", 0, err.start) + 1 + start_offset
            col = err.start - line_start + 1
            raise InputError(
                f"{self.get_input_name()}:{line}:{col}: expected UTF-8 text, "
                f"got byte 0x{data[err.start]:02x}"
            ) from err
        try:
            return super().parse_chunk(BytesIO(data), file_extension, start_offset)
        except ParseError as err:
            err.msg = _explain_parse_error(err)
            raise


def _explain_parse_error(err: ParseError) -> str:
    """Reword xDSL's parse errors that name neither what was expected nor what was got."""
    content = err.span.input.content
    if err.span.start >= len(content.rstrip()):
        got = "end of input" + (" (the input is empty)" if not content.strip() else "")
    else:
        got = repr(err.span.text)
    msg = err.msg.strip()
    if msg == "in block definition":
        return f"expected an operation or '}}' closing the region, got {got}"
    if msg == "Could not parse entire input!":
        return f"expected an operation, got {got}"
    return err.msg


class PipelineError(Exception):
    """A -p pipeline names an unknown pass or option, or is not valid pipeline syntax."""


class InputError(Exception):
    """The input is not text the parser can read (e.g. not UTF-8)."""


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
    except (PipelineError, InputError, RlxError) as err:
        return _report(str(err))
    except OSError as err:
        return _report(f"cannot read or write {err.filename!r}: {err.strerror}")
    except (ValueError, TypeError, AssertionError, KeyError, NotImplementedError) as err:
        # xDSL raises these for malformed IR it does not diagnose itself.
        return _report(f"{type(err).__name__}: {err}")
    except KeyboardInterrupt:
        return 130
    except SystemExit as err:
        # argparse (--help, --version, usage errors) and --shrink exit through SystemExit.
        if err.code is None or isinstance(err.code, int):
            return err.code or 0
        print(err.code, file=sys.stderr)
        return 1
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":  # pragma: no cover
    main()

__all__ = ["RlxOptMain", "main", "run"]
