"""Config files: YAML with `include`, strict pydantic models, validation errors as one line.

Shared by every file evalsuite reads (run configs, gate rules, claims), so each says a bad key the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Tag, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from evalsuite.core.errors import ConfigError
from evalsuite.core.files import UniqueKeyLoader, decode_utf8, nesting_depth, read_regular
from evalsuite.core.rundir import SAFE_NAME_RULE, is_safe_name

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Unknown keys are refused, so a typo never silently falls back to a default."""

    model_config = ConfigDict(extra="forbid")


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


MAX_DEPTH = 32  # far beyond any real config; deeper input is refused before it reaches recursive code


MAX_BYTES = 4 << 20  # a config is a few kB; a larger "config" is a wrong file (or /dev/zero)


def _read_text(path: Path, quiet: bool = False) -> str:
    """The file's text, read only from a regular file of at most MAX_BYTES: a FIFO would block, a
    device never end."""
    return decode_utf8(path, read_regular(path, MAX_BYTES, "YAML file"), quiet)


def _read_yaml(path: Path, included: bool = False) -> dict:
    """A YAML mapping. Where the file is included (`included`), an error names the file and where in
    it, never its text: an include may name any file, secrets too."""
    text = _read_text(path, quiet=included)
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        said = "(an included file: its text is not shown)" if included else problem
        raise ConfigError(f"{path}:{where} invalid YAML: {said}") from None
    except RecursionError:
        # PyYAML composes nodes recursively, so very deep nesting exhausts the stack before any check
        raise ConfigError(f"{path}: invalid YAML: nested too deeply (at most {MAX_DEPTH} levels)") from None
    if nesting_depth(data, MAX_DEPTH + 1) > MAX_DEPTH:
        raise ConfigError(f"{path}: nested more than {MAX_DEPTH} levels deep or too large (YAML aliases?); "
                          "no evalsuite setting needs that")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return data


# An include bomb (files that each include the next several times) would read exponentially many
# files: at most this many reads for one config, and includes at most this deep.
MAX_INCLUDES = 64
MAX_INCLUDE_DEPTH = 8


def load_raw(path: Path, rebase: Callable[[dict, Path], None] | None = None,
             _seen: tuple[Path, ...] = (), included: dict[tuple, Path] | None = None,
             _reads: list[int] | None = None) -> dict:
    """Read a YAML file and the files it includes; later files override earlier ones.

    An include path is taken as written (no `~` or `$VAR` expansion), relative to the including file.
    `rebase(data, folder)` is called on each included file's data, so that the relative paths it
    holds can be made absolute against its own folder rather than the including file's.
    `included` collects the key paths whose values came from included files, each with the file it
    came from: an error message names those keys and the file but never shows their values, nor an
    unknown key's name."""
    path = path.resolve()
    reads = _reads if _reads is not None else [0]
    reads[0] += 1
    if path in _seen:
        raise ConfigError(f"{path}: include: cycle through {' -> '.join(p.name for p in _seen + (path,))}")
    if reads[0] > MAX_INCLUDES or len(_seen) > MAX_INCLUDE_DEPTH:
        raise ConfigError(f"{_seen[0]}: include: more than {MAX_INCLUDES} files read, or includes more than "
                          f"{MAX_INCLUDE_DEPTH} deep (allowed: at most {MAX_INCLUDES} reads in all, "
                          f"{MAX_INCLUDE_DEPTH} levels)")
    data = _read_yaml(path, included=bool(_seen))
    includes = data.pop("include", None) or []
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise ConfigError(f"{path}: include: must be a file path or a list of paths, got a {type(includes).__name__}")
    merged: dict = {}
    origin: dict[tuple, Path] = {}
    for inc in includes:
        inc_path = (path.parent / inc).resolve()
        if not inc_path.exists():
            shown = f"{inc!r}: no such file ({inc_path})" if not _seen else "a file that does not exist"
            raise ConfigError(f"{path}: include: {shown}; {_include_hint(path, inc_path)}")
        deeper: dict[tuple, Path] = {}
        inc_data = load_raw(inc_path, rebase, _seen + (path,), deeper, reads)
        if rebase is not None:
            rebase(inc_data, inc_path.parent)
        origin.update({p: deeper.get(p, inc_path) for p in _leaf_paths(inc_data)})
        merged = deep_merge(merged, inc_data)
    if included is not None and merged:  # nothing included: no key's value came from elsewhere
        own = _leaf_paths(data) if data else set()  # a file of only `include:` owns no key
        included.update({p: f for p, f in origin.items() if not any(p[:len(q)] == q for q in own)})
    return deep_merge(merged, data)


def _include_hint(including: Path, missing: Path) -> str:
    """What is allowed, and the YAML files in the folder the missing one was looked for in, where that
    is the including file's folder or below it (a listing of any other folder is not the config's to show)."""
    folder = missing.parent
    readable = folder.is_dir() and folder.is_relative_to(including.parent) and os.access(folder, os.R_OK | os.X_OK)
    near = sorted(p.name for p in folder.iterdir() if p.suffix in (".yaml", ".yml")) if readable else []
    shown = f"; in {folder}: {', '.join(near[:8])}{', ...' if len(near) > 8 else ''}" if near else ""
    return f"allowed: a YAML file relative to {including.parent}, or an absolute path{shown}"


def _leaf_paths(data: Any, prefix: tuple = ()) -> set[tuple]:
    if isinstance(data, dict) and data:
        return {p for k, v in data.items() for p in _leaf_paths(v, prefix + (k,))}
    return {prefix}


def load_model(path: str | Path, model: type[M]) -> M:
    """A YAML file (with its includes) validated as `model`; a bad file is one ConfigError line."""
    path = Path(path)
    included: dict[tuple, Path] = {}
    raw = load_raw(path, included=included)
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{path}: {format_validation_error(e, model, included)}") from None


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str] | None:
    """The keys allowed where an unknown key sits: the fields of the model at `loc`, and their aliases."""
    found = _model_at(model, loc[:-1])
    return _keys(found) if found is not None else None


def _model_at(ann: Any, loc: tuple) -> type[BaseModel] | None:
    """Follow an error's `loc` through the annotations: a field name into a model, an index into a
    list, a key into a dict, a tag (or class name) into a union."""
    origin, args = get_origin(ann), get_args(ann)
    if origin is Annotated:
        return _model_at(args[0], loc)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        if not loc:
            return ann
        field = _field(ann, loc[0])
        return _model_at(field.annotation, loc[1:]) if field is not None else None
    if origin in (Union, UnionType):
        members = [a for a in args if a is not type(None)]
        tagged = next((a for a in members if loc and _tag(a) == loc[0]), None)
        if tagged is not None:  # a discriminated union puts the member's tag in loc
            return _model_at(tagged, loc[1:])
        # `X | None`, or a union pydantic reports without a tag: the one member that leads somewhere
        found = {m for m in (_model_at(a, loc) for a in members) if m is not None}
        return found.pop() if len(found) == 1 else None
    if not loc:
        return None
    if origin in (list, tuple, set, frozenset):
        return _model_at(args[0], loc[1:]) if isinstance(loc[0], int) and args else None
    if origin is dict:
        return _model_at(args[1], loc[1:]) if len(args) == 2 else None
    return None


def _tag(ann: Any) -> str | None:
    """The name pydantic puts in `loc` for a union member: its Tag, else a model's class name."""
    if get_origin(ann) is Annotated:
        tag = next((m.tag for m in get_args(ann)[1:] if isinstance(m, Tag)), None)
        return tag or _tag(get_args(ann)[0])
    return ann.__name__ if isinstance(ann, type) else None


def _aliases(name: str, field: FieldInfo) -> list[str]:
    """Every key a field is read from: its own name, or each of its validation aliases."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [c for c in alias.choices if isinstance(c, str)]
    return [alias if isinstance(alias, str) else field.alias or name]


def _field(model: type[BaseModel], key: Any) -> FieldInfo | None:
    return next((f for n, f in model.model_fields.items() if key in _aliases(n, f)), None)


def _keys(model: type[BaseModel]) -> list[str] | None:
    keys = sorted({a for n, f in model.model_fields.items() for a in _aliases(n, f)})
    return keys or None


def unsafe_name(what: str, name: Any) -> None:
    """Refuse, inside a pydantic validator, a name that cannot be a plain folder or file name."""
    if not is_safe_name(name):
        raise PydanticCustomError(UNSAFE_NAME, "{shown} is not a safe {what} ({rule})",
                                  {"shown": repr(name), "what": what, "rule": SAFE_NAME_RULE})


def not_allowed(message: str, without_values: str = "") -> PydanticCustomError:
    """For a validator to raise where its message quotes the bad value itself, and what is allowed:
    the one line then adds no `got ...` after the list of allowed values. `without_values` is said
    instead where the value came from an included file (keys only, never what they hold)."""
    return PydanticCustomError(VALUE_SHOWN, "{message}", {"message": message, "without_values": without_values})


UNSAFE_NAME = "unsafe_name"
VALUE_SHOWN = "value_shown"
# Tags of discriminated unions that no user writes (a task type defined after import is `defined`):
# left out of an error's key, so it reads as the config does
HIDDEN_TAGS: set[str] = set()
MAX_SHOWN = 3  # errors named in one line; the rest are counted


def format_validation_error(e: ValidationError, model: type[BaseModel], included: Mapping[tuple, Path] = {}) -> str:
    """One line: per wrong key (up to three) its path, bad value and what is allowed; the value, and an
    unknown key's own name, are left out where they came from an included file, which is named."""
    errors, seen = [], set()
    for err in e.errors():
        loc = tuple(err["loc"])
        if loc not in seen:  # a union reports each of its members' complaints at the same key
            seen.add(loc)
            errors.append(err)
    said = [_format_one(err, model, from_include(tuple(err["loc"]), included)) for err in errors]
    counts = {m: said.count(m) for m in said}  # keys left unnamed read alike: one message, counted
    return join_errors([m if n == 1 else m.replace("an unknown key", f"{n} unknown keys").replace(
        "its name is", "their names are") for m, n in counts.items()])


def from_include(loc: tuple, included: Mapping[tuple, Path]) -> Path | None:
    """The included file the value at `loc` (or a value below it) came from; None for the config's own."""
    return next((f for p, f in included.items() if p[:len(loc)] == loc or loc[:len(p)] == p), None)


def join_errors(messages: list[str]) -> str:
    shown = "; ".join(messages[:MAX_SHOWN])
    rest = len(messages) - MAX_SHOWN
    return shown + (f" (and {rest} more error{'s' if rest > 1 else ''})" if rest > 0 else "")


def _format_one(err: dict, model: type[BaseModel], included: Path | None = None) -> str:
    loc = tuple(err["loc"])
    key = ".".join(str(p) for p in loc if p not in HIDDEN_TAGS) or "(top level)"
    value = err.get("input")
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    typ = err["type"]
    if typ == "extra_forbidden":
        allowed = _allowed_keys(model, loc)
        hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
        if included is not None:  # a key's name is the included file's text too
            where = ".".join(str(p) for p in loc[:-1] if p not in HIDDEN_TAGS) or "(top level)"
            return f"{where}: an unknown key from included file {included} (its name is not shown){hint}"
        return f"{key}: unknown key{hint}"
    if typ == "missing":
        return f"{key}: required key is missing"
    echoes = typ in ("union_tag_invalid", UNSAFE_NAME, VALUE_SHOWN)  # messages that quote the value itself
    msg = err["msg"].replace("Value error, ", "")
    if included is not None:
        said = (err.get("ctx") or {}).get("without_values") or ("not valid here" if echoes else msg)
        return f"{key}: {said} (its value, from included file {included}, is not shown)"
    if echoes or _mapping(value):  # a whole mapping says nothing; its validator's message names what is wrong
        return f"{key}: {msg}"
    return f"{key}: {msg}, got {shown}"


def _mapping(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict) for v in value))
