"""`Section`: a config section (a Model Garden `hyperparams` dataclass) that validates itself, and `need`.

Invariant: `validate()` on the root checks every section below it, each by its own `check`, before the root's
`check` relates sections to one another; so a key means the same, and is checked the same, in every command
whose config holds its section. Every float is finite in float32 (a rate of 1e39 is inf on the device).

Example:

>>> @dataclasses.dataclass
... class Rate(Section):
...     peak: float = 1e-4
...     def check(self) -> None:
...         need(self.peak > 0, f"rate.peak={self.peak} must be positive.")
>>> Rate(peak=-1.0).validate()
Traceback (most recent call last):
...
kbert.errors.ConfigError: rate.peak=-1.0 must be positive.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

from official.modeling.hyperparams import base_config

from kbert.errors import ConfigError

# The largest float32: a rate or a norm beyond it is inf on the device.
FLOAT32_MAX = 3.4028234663852886e38
# Step counts travel as int32 into the training graph.
MAX_STEPS = 2**31 - 1


def need(ok: bool, message: str, error: type[ConfigError] = ConfigError) -> None:
    """Raises `error(message)` unless `ok`; the message names the key and the fix."""
    if not ok:
        raise error(message)


def _subsections(section: base_config.Config) -> Iterator[tuple[str, Section]]:
    """`(key, section)` for every section directly below `section`, list items (`mslt.stages[0]`) and
    `extra_sections` included."""
    extra = section.extra_sections() if isinstance(section, Section) else {}
    for name in [field.name for field in dataclasses.fields(section)] + list(extra):
        value = getattr(section, name)
        items = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
        for index, item in items:
            if isinstance(item, Section):
                yield (name if index is None else f"{name}[{index}]"), item


class Section(base_config.Config):
    """A config section that checks its own values (`check`) and, through `validate`, those of its sections."""

    def check(self) -> None:
        """This section's own rules; raises ConfigError naming the key. Sections without rules keep this."""

    @classmethod
    def extra_sections(cls) -> dict[str, type[Section]]:
        """Sections this one holds as keys besides its dataclass fields, by key (the optimizer section's
        per-optimizer sections, from a registry); none by default."""
        return {}

    @classmethod
    def moved_key(cls, key: str) -> list[str]:
        """Where an unknown `key` of an older layout lives now, relative to this section (`lamb.beta_1`); the
        loader names them instead of refusing the key as a typo. None moved by default."""
        return []

    @classmethod
    def upgrade(cls, values: dict) -> dict:
        """A saved config's values of this section (a run directory's) in the present layout; as they are by
        default. User files are never upgraded: their old keys are refused, naming `moved_key`'s places."""
        return values

    def validate(self, prefix: str = "") -> None:
        """Checks every section below this one, then this one: floats finite, then each `check`."""
        for key, section in _subsections(self):
            section.validate(f"{prefix}{key}.")
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            need(
                not isinstance(value, float) or (math.isfinite(value) and abs(value) <= FLOAT32_MAX),
                f"{prefix}{field.name}={value} is not a finite float32 number.",
            )
        self.check()
