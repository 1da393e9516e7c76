"""Loading a config from YAML files and `a.b=1` overrides, the syntax of Model Garden's `--config_file` and
`--params_override`, with every key and type checked against the config's dataclasses before any value is set.

Example:

>>> from kbert.training.config import PretrainingConfig
>>> cfg = load_config(PretrainingConfig, ["configs/experiments/bert_tiny_cpu.yaml"], "train.total_steps=40")
>>> cfg.train.total_steps
40
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Sequence
from typing import Any, Union

import tensorflow as tf
import yaml
from official.modeling.hyperparams import base_config

from kbert.errors import ConfigError, first_line


def _section_class(annotation: Any) -> type | None:
    """The Config class a field holds (through `Optional[...]`), or None for a leaf."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, base_config.Config):
            return candidate
    return None


def _list_item_class(annotation: Any) -> type | None:
    """For `List[SomeConfig]` (possibly Optional): SomeConfig; else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is list:
            return _section_class(typing.get_args(candidate)[0])
    return None


def _leaf_kind(annotation: Any) -> str:
    """'float', 'int', 'bool' or 'str' for a leaf of that one type (or Optional of it); '' (anything goes) for
    any other annotation: a union of several kinds (`Union[bool, str]`) is checked by its section's `check`."""
    kinds = (
        [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) in (Union, types.UnionType)  # Optional[float] or float | None
        else [annotation]
    )
    return kinds[0].__name__ if len(kinds) == 1 and kinds[0] in (float, int, bool, str) else ""


def _coerce(value: Any, kind: str, path: str, source: str) -> Any:
    """YAML reads `1e-4` as a string and users write `1` for `1.0`: convert, or name the key and the type."""
    if value is None or kind == "" or isinstance(value, (dict, list, tuple)):
        return value
    try:
        if kind == "float" and not isinstance(value, bool):
            return float(value)
        if kind == "int" and not isinstance(value, bool) and float(value) == int(float(value)):
            return int(float(value))
        if kind == "bool" and isinstance(value, bool):
            return value
        if kind == "str":
            return str(value)
    except (TypeError, ValueError, OverflowError):
        pass
    raise ConfigError(f"{source}: config key '{path}' must be of type {kind}, got {value!r}.")


def _extra_sections(config_class: type) -> dict[str, type]:
    """The sections `config_class` holds besides its fields (`Section.extra_sections`)."""
    extra = getattr(config_class, "extra_sections", None)
    return extra() if extra else {}


def _unknown_key(config_class: type, key: Any, known: list[str], prefix: str, source: str) -> ConfigError:
    moved = getattr(config_class, "moved_key", lambda key: [])(str(key))
    if moved:
        places = [f"{prefix}{place}" for place in moved]
        also = f" (and {', '.join(places[1:])})" if len(places) > 1 else ""
        return ConfigError(
            f"{source}: {prefix}{key} moved to {places[0]}{also}; set it there, under the section of the "
            f"{prefix.rstrip('.') or 'config'} it is for."
        )
    hint = difflib.get_close_matches(str(key), known, n=1)
    did_you_mean = f" Did you mean '{prefix}{hint[0]}'?" if hint else ""
    where = f" under {prefix.rstrip('.')}" if prefix else ""
    return ConfigError(
        f"{source}: unknown config key '{prefix}{key}'.{did_you_mean} Known keys{where}: {', '.join(known)}."
    )


def check_values(config_class: type, values: dict, source: str, prefix: str = "") -> dict:
    """`values` with leaf types fixed, checked against `config_class`'s fields all the way down: optional
    sections (`mslt`, None by default) and lists of sections (`mslt.stages`) included.

    Raises:
      ConfigError: naming the first unknown key (with a "did you mean") or ill-typed value, and `source`.
    """
    if not isinstance(values, dict):
        raise ConfigError(
            f"{source}: '{prefix.rstrip('.') or 'the config'}' must be a mapping of keys, got {values!r}."
        )
    hints = typing.get_type_hints(config_class)
    extra = _extra_sections(config_class)
    known = sorted([f.name for f in dataclasses.fields(config_class)] + list(extra))
    checked = {}
    for key, value in values.items():
        if key not in known:
            raise _unknown_key(config_class, key, known, prefix, source)
        path = f"{prefix}{key}"
        if key in extra:
            item, section = None, extra[key]
        else:
            item, section = _list_item_class(hints[key]), _section_class(hints[key])
        if item is not None:
            if isinstance(value, (list, tuple)):
                value = [check_values(item, v, source, f"{path}[{i}].") for i, v in enumerate(value)]
            checked[key] = value
        elif section is not None and value is not None:
            checked[key] = check_values(section, value, source, f"{path}.")
        else:
            checked[key] = _coerce(value, _leaf_kind(hints[key]), path, source)
    return checked


def upgrade_values(config_class: type, values: Any) -> Any:
    """A saved config's values (a run directory's JSON) in the present layout: each section's `upgrade`, all the
    way down; what is not a mapping is left for `check_values` to refuse."""
    if not isinstance(values, dict):
        return values
    upgrade = getattr(config_class, "upgrade", None)
    values = upgrade(values) if upgrade else values
    hints, extra = typing.get_type_hints(config_class), _extra_sections(config_class)
    upgraded = {}
    for key, value in values.items():
        section = extra.get(key) or (_section_class(hints[key]) if key in hints else None)
        item = _list_item_class(hints[key]) if key in hints else None
        if item is not None and isinstance(value, (list, tuple)):
            value = [upgrade_values(item, v) for v in value]
        elif section is not None:
            value = upgrade_values(section, value)
        upgraded[key] = value
    return upgraded


def _apply(config: base_config.Config, values: Any, source: str) -> None:
    if values is None:
        return
    values = check_values(type(config), values, source)
    try:
        config.override(values, is_strict=True)
    except (KeyError, ValueError, TypeError) as e:
        raise ConfigError(f"{source}: {e}") from None


def read_yaml(path: str) -> Any:
    """The YAML file's plain data (safe loader: a `!!python/...` tag is an error, never an object)."""
    try:
        with tf.io.gfile.GFile(path) as f:
            return yaml.safe_load(f)
    except (tf.errors.OpError, OSError, yaml.YAMLError) as e:
        raise ConfigError(
            f"--config_file={path}: cannot read it as plain YAML ({first_line(e, limit=None)}); fix the file or "
            "the path (tags such as !!python/... are not allowed)."
        ) from None


# `key.path=` at the start or after a comma: where one override of 'a.b=1,c.d=x,y' ends and the next begins.
_ASSIGNMENT = re.compile(r"(?:^|,)\s*([A-Za-z_][\w.]*)\s*=")


def _assignments(text: str, params_override: str) -> dict:
    """'a.b=1,c.d=x,y' -> {'a': {'b': 1}, 'c': {'d': 'x,y'}}: a comma starts a new override only when a key and
    '=' follow it, so comma lists (`data.train_files=a,b`) and YAML flow values (`[1, 2]`) stay whole."""
    values: dict = {}
    matches = list(_ASSIGNMENT.finditer(text))
    for match, following in zip(matches, matches[1:] + [None]):
        raw = text[match.end() : following.start() if following else len(text)].strip()
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw  # a plain string such as a glob with YAML-special characters
        *sections, leaf = match.group(1).split(".")
        node = values
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--params_override={params_override!r}: '{match.group(1)}' is set twice.")
        node[leaf] = value
    return values


def parse_override(params_override: str) -> dict:
    """'a.b=1,c.d=x' (or a YAML/JSON mapping) -> nested dict, the syntax of Model Garden's `--params_override`."""
    text = params_override.strip()
    if _ASSIGNMENT.match(text):
        return _assignments(text, params_override)
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--params_override={params_override!r} is not 'a.b=1,c.d=x' nor YAML: {e}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--params_override={params_override!r} must look like 'train.total_steps=100,data.x=y'.")
    return values


def load_config(config_class: type, config_files: Sequence[str] = (), params_override: str = "") -> Any:
    """`config_class()` defaults, then each YAML file in order, then `params_override`; then validated (every
    section by its own `check`, `kbert.config.Section`).

    Raises:
      ConfigError: an unknown key (named, with the file or flag), a bad value, or an unreadable file.
    """
    config = config_class()
    for path in config_files:
        _apply(config, read_yaml(path), f"--config_file={path}")
    if params_override:
        _apply(config, parse_override(params_override), f"--params_override={params_override!r}")
    config.validate()
    return config


def load_saved_config(config_class: type, path: str) -> Any:
    """The config a run saved (JSON or YAML at `path`), written in this or an older layout (`upgrade_values`),
    validated as `load_config`'s.

    Raises:
      ConfigError: an unreadable file, or values that are not (or no longer) a valid config.
    """
    config = config_class()
    _apply(config, upgrade_values(config_class, read_yaml(path)), f"{path} (a saved config)")
    config.validate()
    return config
