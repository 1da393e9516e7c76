"""Optimizers by name: each registered with its own config section, `optimizer.<name>`, and a builder; the one list
`optimizer.type` accepts. The `optimizer` section's own keys (`OptimizerConfig`: weight_decay,
exclude_from_weight_decay, global_clipnorm) are every optimizer's.

Registering one needs no edit to the factory or the config classes:

```python
@dataclasses.dataclass
class SgdConfig(Section):
    momentum: float = 0.0

def build_sgd(optimizer, own, learning_rate, variables):
    return keras.optimizers.SGD(learning_rate, momentum=own.momentum)

register_optimizer("sgd", SgdConfig, build_sgd)  # then: optimizer: {type: sgd, sgd: {momentum: 0.9}}
```
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

import keras

from kbert.config import Section, need
from kbert.errors import ConfigError
from kbert.optimizers import LAMB, LARS, AdamW
from kbert.optimizers.layerwise import path_matches

# (the `optimizer` section, the optimizer's own section, the learning rate or schedule, the model's variables)
#   -> the optimizer, built in the strategy's scope.
Builder = Callable[[Any, Any, Any, Sequence[keras.Variable]], keras.optimizers.Optimizer]
DEFAULT_EXCLUDE = ("layer_norm", "LayerNorm", "bias")


@dataclasses.dataclass(frozen=True)
class RegisteredOptimizer:
    """An optimizer `optimizer.type` names: its section class (`optimizer.<name>`) and builder."""

    name: str
    section: type[Section]
    build: Builder


_REGISTRY: dict[str, RegisteredOptimizer] = {}


def register_optimizer(name: str, section: type[Section], build: Builder) -> None:
    """Makes `optimizer.type=<name>` build with `build`, its keys read from `optimizer.<name>` (a `section`).

    Raises:
      ValueError: `name` is not a lowercase identifier, is already registered to another builder, or is a key of
        the `optimizer` section itself.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"Optimizer name {name!r} must be a lowercase identifier (it is a config key).")
    if not (isinstance(section, type) and issubclass(section, Section)):
        raise ValueError(f"Optimizer {name!r}: its section must be a kbert.config.Section dataclass, not {section!r}.")
    if name in _field_names(OptimizerConfig):
        raise ValueError(f"Optimizer name {name!r} is a key of the optimizer section itself; choose another name.")
    entry = RegisteredOptimizer(name, section, build)
    if _REGISTRY.get(name, entry) != entry:
        raise ValueError(f"Optimizer {name!r} is already registered (to {_REGISTRY[name].build!r}).")
    _REGISTRY[name] = entry


def unregister_optimizer(name: str) -> None:
    """Removes a registered optimizer (a test's toy); unknown names are ignored."""
    _REGISTRY.pop(name, None)


def registered_optimizers() -> dict[str, RegisteredOptimizer]:
    """The registered optimizers by name, in registration order (lamb, lars, adamw first)."""
    return dict(_REGISTRY)


def registered_optimizer(name: str) -> RegisteredOptimizer:
    """The optimizer `optimizer.type` names.

    Raises:
      ConfigError: `name` is not registered (the registered names listed).
    """
    need(name in _REGISTRY, f"optimizer.type={name!r}: choose one of {', '.join(_REGISTRY)}.")
    return _REGISTRY[name]


@dataclasses.dataclass
class OptimizerConfig(Section):
    """`optimizer`: `type` names a registered optimizer (`registered_optimizers`: lamb, lars, adamw), whose own keys
    are under `optimizer.<type>` (Model Garden's "oneof" layout); the keys here are every optimizer's. Exclusion
    regexes match `variable.path`.

    Example:

    >>> OptimizerConfig(type="lamb").get().beta_2
    0.999
    """

    type: str = "lamb"
    weight_decay: float = 0.01
    # NVLAMB pre-normalisation: gradients divided by max(global_norm / clip_norm, 1) after the all-reduce.
    global_clipnorm: float | None = None
    exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE

    def __post_init__(self, default_params, restrictions):
        # Each registered optimizer's section, a key of this one (before Model Garden applies `default_params`).
        for name, entry in _REGISTRY.items():
            self.__dict__.setdefault(name, entry.section())
        super().__post_init__(default_params, restrictions)

    @classmethod
    def extra_sections(cls) -> dict[str, type[Section]]:
        return {name: entry.section for name, entry in _REGISTRY.items()}

    @classmethod
    def moved_key(cls, key: str) -> list[str]:
        """Where a key of the flat layout (before 2026-12-06: `optimizer.beta_1`) lives now: `lamb.beta_1`, ..."""
        return [f"{name}.{key}" for name, entry in _REGISTRY.items() if key in _field_names(entry.section)]

    @classmethod
    def upgrade(cls, values: dict) -> dict:
        """A saved section of the flat layout in this one: each per-optimizer key under `type`'s section where it
        has that key, the section's keys added since at their defaults (what the run did); the other optimizers'
        keys, which did nothing, dropped."""
        shared = _field_names(cls)
        flat = [k for k in values if k not in shared and k not in _REGISTRY]
        if not flat or values.get("type") not in _REGISTRY:
            return values
        kind = values["type"]
        own = {k: values[k] for k in flat if k in _field_names(_REGISTRY[kind].section)}
        upgraded = {k: v for k, v in values.items() if k not in flat}
        upgraded[kind] = {**_REGISTRY[kind].section().as_dict(), **own, **(values.get(kind) or {})}
        return upgraded

    def get(self) -> Section:
        """The section of the chosen optimizer, `optimizer.<type>`."""
        return self.__dict__[self.type]

    def as_dict(self) -> dict:
        """The shared keys and the chosen optimizer's section (as Model Garden's `OneOfConfig` exports)."""
        return {k: v for k, v in super().as_dict().items() if k not in _REGISTRY or k == self.type}

    def check(self) -> None:
        registered_optimizer(self.type)
        need(self.weight_decay >= 0, f"optimizer.weight_decay={self.weight_decay} must be >= 0.")
        need(
            self.global_clipnorm is None or self.global_clipnorm > 0,
            f"optimizer.global_clipnorm={self.global_clipnorm} must be positive, or unset.",
        )
        _check_regexes("optimizer.exclude_from_weight_decay", self.exclude_from_weight_decay)


def _field_names(section: type) -> set[str]:
    return {f.name for f in dataclasses.fields(section)}


def _check_regexes(key: str, patterns: Sequence[str]) -> None:
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(f"{key}: {pattern!r} is not a regular expression ({e}).") from None


def _check_unit_interval(prefix: str, section: Section, keys: Sequence[str]) -> None:
    for key in keys:
        need(0 <= getattr(section, key) < 1, f"{prefix}{key}={getattr(section, key)} must be in [0, 1).")


@dataclasses.dataclass
class LambConfig(Section):
    """`optimizer.lamb`: Adam's moments and which variables keep trust ratio 1 (regexes on `variable.path`)."""

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    exclude_from_layer_adaptation: Sequence[str] = DEFAULT_EXCLUDE

    def check(self) -> None:
        _check_unit_interval("optimizer.lamb.", self, ("beta_1", "beta_2"))
        need(
            self.epsilon > 0,
            f"optimizer.lamb.epsilon={self.epsilon} must be positive (it keeps a division finite).",
        )
        _check_regexes("optimizer.lamb.exclude_from_layer_adaptation", self.exclude_from_layer_adaptation)


@dataclasses.dataclass
class LarsConfig(Section):
    """`optimizer.lars`: momentum, trust coefficient `eeta` and which variables keep trust ratio 1."""

    momentum: float = 0.9
    eeta: float = 0.001
    nesterov: bool = False
    exclude_from_layer_adaptation: Sequence[str] = DEFAULT_EXCLUDE

    def check(self) -> None:
        _check_unit_interval("optimizer.lars.", self, ("momentum",))
        need(self.eeta > 0, f"optimizer.lars.eeta={self.eeta} must be positive.")
        _check_regexes("optimizer.lars.exclude_from_layer_adaptation", self.exclude_from_layer_adaptation)


@dataclasses.dataclass
class AdamWConfig(Section):
    """`optimizer.adamw`: Adam's moments; `update_ratios` records each variable's ‖Δw‖ / ‖w‖ as LAMB's trust
    ratios are (TensorBoard `trust_ratio/...`), at the cost of an optimizer variable and a copy of each weight."""

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    update_ratios: bool = False

    def check(self) -> None:
        _check_unit_interval("optimizer.adamw.", self, ("beta_1", "beta_2"))
        need(
            self.epsilon > 0,
            f"optimizer.adamw.epsilon={self.epsilon} must be positive (it keeps a division finite).",
        )


def _layerwise(optimizer, own: LambConfig | LarsConfig) -> dict[str, Any]:
    """The keyword arguments LAMB and LARS share: decay, both exclusion lists, clipping."""
    return dict(
        weight_decay=optimizer.weight_decay,
        exclude_from_weight_decay=list(optimizer.exclude_from_weight_decay),
        exclude_from_layer_adaptation=list(own.exclude_from_layer_adaptation),
        global_clipnorm=optimizer.global_clipnorm,
    )


def _build_lamb(optimizer, own: LambConfig, learning_rate, variables) -> LAMB:
    return LAMB(learning_rate, beta_1=own.beta_1, beta_2=own.beta_2, epsilon=own.epsilon, **_layerwise(optimizer, own))


def _build_lars(optimizer, own: LarsConfig, learning_rate, variables) -> LARS:
    shared = _layerwise(optimizer, own)
    return LARS(learning_rate, momentum=own.momentum, nesterov=own.nesterov, eeta=own.eeta, **shared)


def _build_adamw(optimizer, own: AdamWConfig, learning_rate, variables) -> AdamW:
    """Keras's AdamW (kbert's subclass: clipping after the all-reduce). Keras matches its exclusions against
    `variable.name` only ('gamma', not 'layer_norm'): kbert applies the `variable.path` regexes here."""
    built = AdamW(
        learning_rate,
        weight_decay=optimizer.weight_decay,
        beta_1=own.beta_1,
        beta_2=own.beta_2,
        epsilon=own.epsilon,
        global_clipnorm=optimizer.global_clipnorm,
        update_ratios=own.update_ratios,
    )
    built.exclude_from_weight_decay(
        var_list=[v for v in variables if path_matches(optimizer.exclude_from_weight_decay, v.path)]
    )
    return built


register_optimizer("lamb", LambConfig, _build_lamb)
register_optimizer("lars", LarsConfig, _build_lars)
register_optimizer("adamw", AdamWConfig, _build_adamw)
