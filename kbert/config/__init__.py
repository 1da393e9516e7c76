"""Configs: sections that validate themselves (`Section`, `need`) and the loader of YAML files and `a.b=1`
overrides (`load_config`). The bottom layer: every command's config is made of these sections and loaded here."""

from kbert.config.loader import check_values, load_config, load_saved_config, parse_override, read_yaml, upgrade_values
from kbert.config.section import FLOAT32_MAX, MAX_STEPS, Section, need

__all__ = [
    "FLOAT32_MAX",
    "MAX_STEPS",
    "Section",
    "check_values",
    "load_config",
    "load_saved_config",
    "need",
    "parse_override",
    "read_yaml",
    "upgrade_values",
]
