"""Configs as frozen dataclasses, loadable from YAML and overridable from the command line.

``load_config(ToyConfig, "run.yaml", {"steps": 500})`` reads the file, checks every key
against the dataclass's fields (an unknown key or a value of the wrong type is a
:class:`~gencore.errors.ConfigError` naming the file and the field), then applies the
overrides. YAML is read with ``yaml.safe_load`` only.

A command line gives its flags the dataclass's field names (``dest``) and ``None`` defaults, then calls
``config_from_flags(Cfg, args)``: a flag the user left out keeps the YAML file's value (or the field's
default), a flag given overrides it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gencore.errors import ConfigError

C = TypeVar("C")


def _coerce(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for opt in options:
            if opt is type(None):
                continue
            try:
                return _coerce(value, opt, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where} has value {value!r}, which is not a valid {hint}.")
    if origin is tuple:
        (inner, *_) = typing.get_args(hint) or (Any,)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]  # "a, b" as the command line reads it
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}.")
        return tuple(_coerce(v, inner, where) for v in value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be true or false, got {value!r}.")
    if hint in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where} must be a number, got {value!r}.")
        try:
            out = hint(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
            raise ConfigError(
                f"{where} must be {'an integer' if hint is int else 'a number'}, got {value!r}."
            ) from None
        if hint is int and isinstance(value, float) and value != out:
            raise ConfigError(f"{where} must be an integer, got {value!r}.")
        return out
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}.")
        return value
    return value


def build_config(cls: type[C], values: Mapping[str, Any], source: str = "config") -> C:
    """Instantiate dataclass ``cls`` from ``values`` with type checks and clear errors."""
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(str(k) for k in set(values) - fields)  # a YAML key may be a number or a bool (`1:`, `off:`)
    if unknown:
        raise ConfigError(
            f"{source}: unknown field(s) {', '.join(unknown)}; expected some of: {', '.join(sorted(fields))}."
        )
    kwargs = {k: _coerce(v, hints[k], f"{source}: field {k!r}") for k, v in values.items()}
    return cls(**kwargs)


def load_config(cls: type[C], path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None) -> C:
    """Read ``cls`` from a YAML file (optional), then apply ``overrides`` (None values are skipped)."""
    values: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {str(p)!r} does not exist.") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {str(p)!r} is a folder, not a YAML file.") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config file {str(p)!r} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {str(p)!r} is not valid YAML ({str(exc).splitlines()[0]}).") from None
        except OSError as exc:  # below a file, permission denied, ...
            raise ConfigError(f"config file {str(p)!r} cannot be read ({exc.strerror or exc}).") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {str(p)!r} must hold a mapping of field: value.")
        values.update(loaded)
        source = str(p)
    else:
        source = "config"
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return build_config(cls, values, source)


def config_from_flags(cls: type[C], args: argparse.Namespace, **extra: Any) -> C:
    """``load_config(cls, args.config, overrides)`` where the overrides are the attributes of ``args`` named
    like fields of ``cls`` (``None``: the flag was not given), ``progress=False`` when ``args.no_progress`` is
    set and ``cls`` has a ``progress`` field, and then ``extra``."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    overrides = {k: getattr(args, k) for k in names if hasattr(args, k)}
    if "progress" in names and getattr(args, "no_progress", False):
        overrides["progress"] = False
    return load_config(cls, getattr(args, "config", None), overrides | extra)
