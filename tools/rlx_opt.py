"""rlx-opt: xDSL's opt driver with the rlx dialects and passes registered.

Unlike a bare `xdsl-opt`, every failure (parse error, verifier error, unknown pass,
unreadable file) is a one-paragraph diagnostic on stderr and exit status 1, never a
Python traceback. `--help` lists rlx's passes with their options first; an unknown pass
gets a "did you mean"; pass options may be separated by spaces (xDSL) or by commas
(MLIR): `-p 'lir-plan-arena{alignment=128,strategy=naive}'`.

The target: `--target-cpu haswell` (a spec, or `host`), else `RLX_TARGET_CPU` if set, is
recorded on the input module as `rlx.target`, which convert-lir-to-llvm (and rlx-lower)
read unless given a `target` option; with neither, they lower for the generic x86-64.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
import sys
import textwrap
from collections.abc import Sequence
from io import BytesIO
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.target import TARGET_ENV, host_target, parse_target, record_target
from rlx_mlir.dialects import register_all_dialects
from rlx_mlir.ir import EMPTY_INPUT, is_empty_text
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

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser):
        super().register_all_arguments(arg_parser)
        for action in arg_parser._actions:  # xDSL's -p help lists all ~140 passes in one line
            if "--passes" in action.option_strings:
                action.help = ("comma-separated pass pipeline, options in braces: "
                               "'convert-hir-to-mir,lir-plan-arena{alignment=128 strategy=naive}' "
                               "(commas between options work too); rlx's passes are listed below")
        arg_parser.add_argument(
            "--target-cpu", metavar="SPEC",
            help="the CPU to lower for, recorded on the module as rlx.target: 'host', a CPU "
                 "name (haswell) or 'cpu:+feat,-feat' (default: $RLX_TARGET_CPU if set, else "
                 "the module's rlx.target, else generic x86-64); a pass's target option wins")
        arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
        arg_parser.description = f"{arg_parser.description}\n\n{_rlx_passes_help(self.available_passes)}"
        arg_parser.epilog = _xdsl_passes_help(self.available_passes)

    def get_input_stream(self):
        if self.args.input_file == "-":
            self.args.input_file = None
        return super().get_input_stream()

    def setup_pipeline(self):
        written = self.args.passes
        self.args.passes = mlir_option_commas(written)
        try:
            super().setup_pipeline()
        except (ValueError, ArgSpecParseError) as err:
            # ArgSpecParseError (a pipeline syntax error) derives from BaseException.
            # A bad option value (an OptionError, xDSL's type check) is one line; an
            # unknown pass or bad syntax lists the passes.
            names_passes = isinstance(err, ArgSpecParseError) or "Unrecognized passes" in str(err)
            raise PipelineError(
                f"invalid pass pipeline {written!r}: {err}"
                + (f"\n{_did_you_mean(written, self.available_passes)}"
                   f"{_known_passes(self.available_passes)}" if names_passes else "")
            ) from err

    def apply_passes(self, prog: ModuleOp):
        spec = _target_spec(self.args.target_cpu)
        if spec:
            record_target(prog, spec)
        super().apply_passes(prog)

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


def _target_spec(flag: str | None) -> str:
    """The target the driver records: `--target-cpu` (`host`: RLX_TARGET_CPU or this
    machine), else RLX_TARGET_CPU, else none ("")."""
    if flag == "host":
        return host_target().spec
    if flag:
        return parse_target(flag, source="--target-cpu").spec
    env = os.environ.get(TARGET_ENV, "").strip()
    return parse_target(env, source=TARGET_ENV).spec if env else ""


_OPTION_COMMA = re.compile(r'"(?:\\.|[^"\\])*"|,(?=\s*[A-Za-z_][\w-]*\s*=)')
"""A quoted string (kept whole) or a comma that starts a new `name=value` option (a
comma before a bare value separates the elements of a list option, as in xDSL)."""


def mlir_option_commas(pipeline: str) -> str:
    """Rewrite MLIR's comma-separated pass options (`p{a=1,b=2}`) in xDSL's syntax
    (`p{a=1 b=2}`); commas between passes, inside list values and in quoted strings stay."""
    def options(braces: re.Match[str]) -> str:
        return _OPTION_COMMA.sub(lambda m: m.group(0) if m.group(0) != "," else " ", braces.group(0))

    return re.sub(r'\{(?:"(?:\\.|[^"\\])*"|[^{}"])*\}', options, pipeline)


def _rlx_pass_names() -> list[str]:
    return list(get_all_passes())


def _pass_options(factory) -> str:
    """`{name=default ...}` of a pass's options (its dataclass fields), MLIR-style."""
    try:
        cls = factory()
    except Exception:  # a pass that fails to import is still listed, without options
        return ""
    if not dataclasses.is_dataclass(cls):
        return ""
    options = [
        f"{f.name.replace('_', '-')}={_option_text(f.default)}"
        for f in dataclasses.fields(cls) if f.init and f.default is not dataclasses.MISSING
    ]
    return "{" + " ".join(options) + "}" if options else ""


def _option_text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "(none)"
    return str(value) if value != "" else '""'



def _rlx_passes_help(available) -> str:
    lines = ["rlx passes, with their options and defaults (-p 'name{option=value ...}'):"]
    lines += [f"  {name}{_pass_options(available[name])}" for name in _rlx_pass_names()]
    return "\n".join(lines)


def _xdsl_passes_help(available) -> str:
    others = sorted(set(available) - set(_rlx_pass_names()))
    listing = textwrap.fill(", ".join(others), width=88, initial_indent="  ",
                            subsequent_indent="  ", break_on_hyphens=False)
    return f"xDSL passes ({len(others)}; canonicalize and cse run in rlx's pipeline):\n{listing}"


def _did_you_mean(pipeline: str, available) -> str:
    """`did you mean X?` for each pass name of `pipeline` that is unknown but close to one."""
    hints = []
    for word in re.findall(r"[A-Za-z][\w-]*(?=\s*(?:\{|,|$))", re.sub(r"\{[^{}]*\}", "{}", pipeline)):
        if word not in available:
            close = difflib.get_close_matches(word, list(available), n=3, cutoff=0.6)
            if close:
                hints.append(f"unknown pass {word!r}: did you mean {' or '.join(close)}?\n")
    return "".join(hints)


def _known_passes(available) -> str:
    rlx = _rlx_pass_names()
    others = sorted(set(available) - set(rlx))
    return (f"known passes: {', '.join(rlx)} (rlx); canonicalize, cse and "
            f"{len(others) - 2} more from xDSL (rlx-opt --help lists them all)")


def _explain_parse_error(err: ParseError) -> str:
    """Reword xDSL's parse errors that name neither what was expected nor what was got."""
    content = err.span.input.content
    if err.span.start >= len(content.rstrip()):
        got = "end of input" + (f" ({EMPTY_INPUT})" if is_empty_text(content) else "")
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

__all__ = ["RlxOptMain", "main", "mlir_option_commas", "run"]
