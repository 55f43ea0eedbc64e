"""Usage errors (a bad option value, an unknown option or command, a missing argument) as one line and
exit 2, the way every other bad input is said, instead of click's usage block and rich's boxed error."""

from __future__ import annotations

import shlex
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from typer.core import TyperGroup

# Typer 0.29 vendors click as typer._click, earlier versions use click itself: take the exception
# classes from wherever typer's own BadParameter lives, so both raise what is caught here.
_click_errors = sys.modules[typer.BadParameter.__module__]
UsageError = _click_errors.UsageError
BadParameter = _click_errors.BadParameter
MissingParameter = _click_errors.MissingParameter
NoSuchOption = _click_errors.NoSuchOption
NoArgsIsHelpError = _click_errors.NoArgsIsHelpError

_COMMAND = "evalsuite.command"  # ctx.meta key: the command being parsed, for errors that carry no context
_err = Console(stderr=True, emoji=False)  # a usage line quotes values as given


class OneLineUsageGroup(TyperGroup):
    """A command group whose usage errors, its own and its subcommands', are one line and exit 2.
    Parsing happens in make_context (the group's options) and invoke (the subcommand's), so those two
    are where the errors are caught; `--help` and every exit code a command chooses pass unchanged."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except UsageError as e:
            _exit_one_line(e, None)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as e:
            _exit_one_line(e, ctx)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        ctx.meta[_COMMAND] = f"{ctx.command_path} {cmd.name if cmd else name}"
        return name, cmd, rest


def _exit_one_line(e: Any, ctx: Any) -> NoReturn:
    if isinstance(e, NoArgsIsHelpError):  # the help, shown for a bare group: not an error to rephrase
        raise e
    _err.print(f"evalsuite: error: {usage_line(e, ctx)}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def usage_line(e: Any, ctx: Any = None) -> str:
    """`run: --limit: 0 is not allowed (allowed: N >= 1)`: the command, the option or argument, the bad
    value and what is allowed."""
    path = e.ctx.command_path if e.ctx is not None else (ctx.meta.get(_COMMAND) if ctx is not None else None)
    where = " ".join((path or "").split()[1:])  # without the program's name, which the line starts with
    if isinstance(e, NoSuchOption):
        what = _no_such_option(e)
    elif isinstance(e, MissingParameter):
        what = f"{_name(e.param)}: required, not given"
    elif isinstance(e, BadParameter):
        what = _bad_value(e)
    else:
        what = _sentence(e.format_message())
        command = e.ctx.command if e.ctx is not None else None
        if command is not None and hasattr(command, "list_commands"):
            what += f" (allowed: {', '.join(command.list_commands(e.ctx))})"
    return f"{where}: {what}" if where else what


def _no_such_option(e: Any) -> str:
    params = e.ctx.command.params if e.ctx is not None else []
    as_format = [p for p in params if "--format" in getattr(p, "opts", ())
                 and e.option_name.lstrip("-") in (_choices(p) or "").split(", ")]
    if as_format:  # `--json` where a command prints JSON with --format and writes no file
        return f"{e.option_name}: no such option; did you mean --format {e.option_name.lstrip('-')}?"
    close = sorted(e.possibilities or [])
    if close:
        return f"{e.option_name}: no such option; did you mean {' or '.join(close)}?"
    allowed = [p.opts[0] for p in params if getattr(p, "param_type_name", "") == "option" and not p.hidden]
    return f"{e.option_name}: no such option" + (f" (allowed: {', '.join(allowed)})" if allowed else "")


def _bad_value(e: Any) -> str:
    """Typer checks a value with pydantic and keeps its error as the cause: that holds the value given."""
    cause = e.__cause__
    errors = cause.errors() if hasattr(cause, "errors") else []
    if not errors:
        return f"{_name(e.param)}: {_sentence(e.message)}"
    given = errors[0]["input"]
    allowed = _range(e.param) if errors[0]["type"].startswith(("greater_than", "less_than")) else _choices(e.param)
    rule = allowed or _sentence(errors[0]["msg"]).replace("input should be", "should be", 1)
    return f"{_name(e.param)}: {shlex.quote(str(given))} is not allowed ({'allowed: ' if allowed else ''}{rule})"


def _range(param: Any) -> str | None:
    lo, hi = getattr(param, "min", None), getattr(param, "max", None)
    name = getattr(param, "metavar", None) or "value"
    if lo is not None and hi is not None:
        return f"{lo:g} <= {name} <= {hi:g}"
    if lo is not None:
        return f"{name} >= {lo:g}"
    return f"{name} <= {hi:g}" if hi is not None else None


def _choices(param: Any) -> str | None:
    """An option limited to a few values (an Enum): those values, as typed on the command line."""
    desc = getattr(param, "type_descriptor", None)
    choices = getattr(desc, "choices", None) if desc is not None else None
    return ", ".join(str(getattr(c, "value", c)) for c in choices) if choices else None


def _name(param: Any) -> str:
    """An option by its long name, an argument by its metavar (what help shows)."""
    if param is None:
        return "value"
    if getattr(param, "param_type_name", "") == "option":
        return max(param.opts, key=len)
    return param.metavar or (param.name or "argument").upper()


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].lower() + text[1:]
