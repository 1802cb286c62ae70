"""Contexts and parsing for rlx IR: every rlx dialect plus the upstream ones rlx-opt reads."""

from __future__ import annotations

import io

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.printer import Printer

from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects import register_all_dialects


def make_context() -> Context:
    """A Context that knows hir, mir, lir, rlx and xDSL's dialects (all loaded lazily)."""
    ctx = Context()
    register_all_dialects(ctx)
    return ctx


EMPTY_INPUT = "the input is empty"
"""What both tools say about a file with nothing but blanks and comments."""


def is_empty_text(text: str) -> bool:
    """Whether module text has no operation at all: only whitespace and `//` comments."""
    return all(not line.strip() or line.lstrip().startswith("//") for line in text.splitlines())


def parse_module(text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify module text (raises xDSL's ParseError / VerifyException)."""
    module = Parser(make_context(), text, name).parse_module()
    module.verify()
    return module


def parse_user_module(what: str, text: object) -> ModuleOp:
    """`parse_module` of text a user passed to `what` (an API function): anything but a
    str, or text that does not parse or verify, is an RlxError naming `what`."""
    if not isinstance(text, str):
        raise RlxError(f"{what}: expected module text (str), got {type(text).__name__}")
    try:
        return parse_module(text)
    except Exception as err:  # xDSL's ParseError / VerifyException carry the location
        raise RlxError(f"{what}: the module does not parse or verify:\n{err}") from err


def module_text(module: ModuleOp, debuginfo: bool = False) -> str:
    """The module's text; with `debuginfo`, with the ops' locations (provenance)."""
    out = io.StringIO()
    Printer(stream=out, print_debuginfo=debuginfo).print_op(module)
    return out.getvalue()
