"""The MSLT stage plan: the `mslt` config section, its validation, and the resolved list of stages.

MSLT (multi-stage layerwise training, "Progressively Stacking 2.0") grows BERT from the top: each stage adds
layers and trains only those (the lower ones run forward only), then a final stage trains every layer briefly
with a small rate. `mode: stacking` is Progressive Stacking 1.0 (every layer trains at every stage).

Example:

>>> mslt = MsltConfig({"stages": [{"num_layers": 3, "steps": 1000}, {"num_layers": 6, "steps": 1000}]})
>>> plan = build_plan(mslt, BertConfig.load("bert_tiny").replace(num_hidden_layers=6), peak_learning_rate=1e-3)
>>> [(s.number, s.num_layers, s.trainable_layers, s.start_step, s.end_step) for s in plan.stages]
[(1, 3, (0, 1, 2), 0, 1000), (2, 6, (3, 4, 5), 1000, 2000), (3, 6, (0, 1, 2, 3, 4, 5), 2000, 2500)]
>>> print(plan.describe())
MSLT plan: mode mslt, new layers copy, 6 layers, 2500 steps, 5.23M parameters, frozen blocks without dropout
stage  layers  trains     embeddings heads              steps   peak lr warmup power    trainable params
    1       3  0-2        all        train       0-1000 (1000)  1.00e-03    100  1.00       4.63M ( 89%)
    2       6  3-5        word_table train    1000-2000 (1000)  1.00e-03    100  1.00       4.57M ( 87%)
    3       6  0-5        all        train    2000-2500 ( 500)  1.00e-04     50  1.00       5.23M (100%)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kbert.config import Section, need
from kbert.errors import PlanError
from kbert.modeling import BertConfig, BertEncoder, MaskedLMHead, NextSentenceHead

MODES = ("mslt", "stacking")
NEW_LAYER_INITS = ("copy", "random")
POLICIES = ("train", "freeze_after_first_stage")
# The final all-layer stage defaults to 20% of the total steps (a quarter of the growth stages' steps) ...
FINAL_STAGE_SHARE_OF_GROWTH = 0.25
# ... at a tenth of the growth stages' default peak rate: every layer has been trained once already.
FINAL_RATE_SCALE = 0.1


@dataclasses.dataclass
class MsltStageConfig(Section):
    """One stage of `mslt.stages` (or `mslt.final_stage`). `None` takes the default described per field.

    num_layers: depth of the model in this stage; strictly increasing over the stages, the last one equal to
        the model's `num_hidden_layers`. (Final stage: the model's depth.)
    steps: optimizer steps of this stage (> 0). (Final stage: default 20% of the total; 0 skips it.)
    trainable_layers: block indices trained in this stage. Default: the layers new in this stage (mslt mode)
        or all of them (stacking mode, final stage).
    learning_rate: peak rate of the stage's warmup + polynomial decay. Default `schedule.peak_learning_rate`
        (final stage: a tenth of it).
    warmup_steps: default `mslt.warmup_fraction` of the stage's steps.
    decay_power: default `schedule.power`.
    end_learning_rate: default `schedule.end_learning_rate`.
    train_embeddings, train_heads: override `mslt.embeddings` / `mslt.heads` for this stage.
    """

    num_layers: int | None = None
    steps: int | None = None
    trainable_layers: list[int] | None = None
    learning_rate: float | None = None
    warmup_steps: int | None = None
    decay_power: float | None = None
    end_learning_rate: float | None = None
    train_embeddings: bool | None = None
    train_heads: bool | None = None


@dataclasses.dataclass
class MsltConfig(Section):
    """The `mslt` section of an experiment config.

    mode: `mslt` (train the new layers, then all layers) or `stacking` (Progressive Stacking 1.0: all layers
        at every stage, no final stage by default).
    new_layer_init: `copy` — new layer j of a stage growing from L_old by n layers copies old layer
        (j - n) mod L_old, i.e. the top n layers of the previous stage in order (for doubling this is
        progressive stacking's j mod L_old); `random` — fresh truncated-normal weights.
    embeddings, heads: `train` (default) or `freeze_after_first_stage` (stages may override). Heads are the
        pooler and the MLM/NSP heads. With frozen lower blocks, trained embeddings can only learn through the tied
        MLM output, so only the word-embedding table trains then; freezing it after stage 1 freezes the MLM
        output too, which stalls the held-out loss (docs/mslt.md).
    frozen_dropout: whether the frozen blocks below a stage's trained ones (and the embeddings under them) apply
        dropout. false (default) runs them as at inference: no dropout masks to draw, so cheaper growth stages,
        and the trained blocks learn on clean features (docs/results/mslt.md has the benchmark that compares both).
    build_ahead: build the next stage's model, optimizer and training graph on a thread while the current stage
        trains (its weights are carried over when the stage starts), so a stage starts without graph building.
        Used with one device and MirroredStrategy; TPU and multi-worker runs build each stage when it starts.
    init_layers: the depth of `train.init_checkpoint`'s model, which the first stage grows from (continuing a
        pretrained model: 6 -> 12 layers trains only the new ones first); 0: the first stage starts fresh.
    warmup_fraction: default warmup of a stage, as a fraction of its steps.
    stages: the growth stages, in order. final_stage: the all-layer stage.
    """

    mode: str = "mslt"
    new_layer_init: str = "copy"
    embeddings: str = "train"
    heads: str = "train"
    frozen_dropout: bool = False
    build_ahead: bool = True
    init_layers: int = 0
    warmup_fraction: float = 0.1
    stages: list[MsltStageConfig] = dataclasses.field(default_factory=list)
    final_stage: MsltStageConfig = dataclasses.field(default_factory=MsltStageConfig)


@dataclasses.dataclass(frozen=True)
class MsltStage:
    """One resolved stage: global steps [start_step, end_step), depth, what trains, and its learning rate."""

    number: int
    num_layers: int
    previous_layers: int
    trainable_layers: tuple[int, ...]
    train_embeddings: bool
    train_heads: bool
    start_step: int
    end_step: int
    learning_rate: float
    warmup_steps: int
    decay_power: float
    end_learning_rate: float
    is_final: bool = False

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step

    @property
    def stop_gradient_below(self) -> int:
        """The lowest trained block: the backward pass is cut at its input."""
        return min(self.trainable_layers)

    @property
    def embeddings_policy(self) -> str:
        """`all` (no cut below), `word_table` (learns through the tied MLM output only) or `frozen`."""
        if not self.train_embeddings:
            return "frozen"
        return "all" if self.stop_gradient_below == 0 else "word_table"

    def source_layer(self, layer: int) -> int:
        """For a `copy` init: the previous stage's block that new block `layer` starts from."""
        return (layer - (self.num_layers - self.previous_layers)) % self.previous_layers

    def trainable_parameters(self, bert: BertConfig) -> int:
        counts = parameter_counts(bert)
        embeddings = {"all": counts["embeddings"], "word_table": counts["word_table"], "frozen": 0}
        return (
            sum(counts["blocks"][layer] for layer in self.trainable_layers)
            + embeddings[self.embeddings_policy]
            + (counts["heads"] if self.train_heads else 0)
        )


@dataclasses.dataclass(frozen=True)
class MsltPlan:
    """The validated stages of an MSLT run; stage boundaries are global steps."""

    mode: str
    new_layer_init: str
    bert: BertConfig
    stages: tuple[MsltStage, ...]
    frozen_dropout: bool = False

    @property
    def total_steps(self) -> int:
        return self.stages[-1].end_step

    def stage_at(self, step: int) -> MsltStage:
        """The stage that trains global step `step` (0-based); the last stage for `step >= total_steps`."""
        for stage in self.stages:
            if step < stage.end_step:
                return stage
        return self.stages[-1]

    def describe(self) -> str:
        """The plan as a table: printed at the start of a run."""
        total_params = parameter_counts(self.bert)["total"]
        rows = [
            f"MSLT plan: mode {self.mode}, new layers {self.new_layer_init}, {self.bert.num_hidden_layers} "
            f"layers, {self.total_steps} steps, {total_params / 1e6:.2f}M parameters, frozen blocks "
            f"{'with' if self.frozen_dropout else 'without'} dropout",
            f"{'stage':>5}  {'layers':>6}  {'trains':<10} {'embeddings':<10} {'heads':<6} {'steps':>17}  "
            f"{'peak lr':>8} {'warmup':>6} {'power':>5}  {'trainable params':>18}",
        ]
        for s in self.stages:
            params = s.trainable_parameters(self.bert)
            rows.append(
                f"{s.number:>5}  {s.num_layers:>6}  {_ranges(s.trainable_layers):<10} {s.embeddings_policy:<10} "
                f"{'train' if s.train_heads else 'frozen':<6} {f'{s.start_step}-{s.end_step}':>11} "
                f"({s.steps:>4})  {s.learning_rate:>8.2e} {s.warmup_steps:>6} {s.decay_power:>5.2f}  "
                f"{params / 1e6:>9.2f}M ({100 * params / total_params:>3.0f}%)"
            )
        return "\n".join(rows)


def parameter_counts(bert: BertConfig) -> dict[str, Any]:
    """Parameters of each block (`blocks`, bottom first; `block`: the top one), the embeddings, the word table, the
    heads (pooler, MLM, NSP, and a pre-LayerNorm encoder's final norm, which trains with them) and the total, as
    the parts count them (`BertEncoder.cost`)."""
    costs = BertEncoder.cost(bert, seq_length=1)
    blocks = [cost.parameters for cost in costs["blocks"]]
    embeddings = costs["embeddings"].parameters
    heads = (
        costs["pooler"] + costs["final_norm"] + MaskedLMHead.cost(bert, 1) + NextSentenceHead.cost(bert)
    ).parameters
    return {
        "blocks": blocks,
        "block": blocks[-1],
        "word_table": bert.vocab_size * bert.hidden_size,
        "embeddings": embeddings,
        "heads": heads,
        "total": sum(blocks) + embeddings + heads,
    }


def _ranges(layers: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    parts, start = [], None
    for k, layer in enumerate(layers):
        if start is None:
            start = layer
        if k + 1 == len(layers) or layers[k + 1] != layer + 1:
            parts.append(str(start) if start == layer else f"{start}-{layer}")
            start = None
    return ",".join(parts)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _StageResolver:
    """Turns one MsltStageConfig into a MsltStage, raising PlanError that names `where` and the field."""

    def __init__(
        self,
        mslt: MsltConfig,
        bert: BertConfig,
        peak_learning_rate: float,
        decay_power: float,
        end_learning_rate: float,
    ):
        self.mslt = mslt
        self.bert = bert
        self.defaults = {
            "learning_rate": peak_learning_rate,
            "decay_power": decay_power,
            "end_learning_rate": end_learning_rate,
        }

    def need(self, ok: bool, where: str, field: str, value: Any, fix: str) -> None:
        need(ok, f"{where}.{field}={value!r}: {fix}", PlanError)

    def resolve(
        self,
        cfg: MsltStageConfig,
        where: str,
        number: int,
        previous_layers: int,
        start_step: int,
        steps: int,
        is_final: bool,
        rate_scale: float = 1.0,
    ) -> MsltStage:
        depth = self.bert.num_hidden_layers
        layers = cfg.num_layers if cfg.num_layers is not None else depth
        self.need(_is_int(layers) and layers > 0, where, "num_layers", layers, "must be a positive integer.")
        self.need(
            layers <= depth,
            where,
            "num_layers",
            layers,
            f"the model has only {depth} layers (model.overrides.num_hidden_layers); lower it or deepen the model.",
        )
        grown = "train.init_checkpoint's" if number == 1 else "the previous stage's"
        self.need(
            layers > previous_layers or (is_final and layers == previous_layers),
            where,
            "num_layers",
            layers,
            f"must be greater than {grown} {previous_layers}: each stage grows the model.",
        )
        trains_all = is_final or self.mslt.mode == "stacking"
        default_layers = list(range(layers)) if trains_all else list(range(previous_layers, layers))
        trainable = cfg.trainable_layers if cfg.trainable_layers is not None else default_layers
        self.need(
            isinstance(trainable, (list, tuple)) and len(trainable) > 0 and all(_is_int(i) for i in trainable),
            where,
            "trainable_layers",
            trainable,
            "must be a non-empty list of block indices.",
        )
        bad = [i for i in trainable if not 0 <= i < layers]
        self.need(
            not bad,
            where,
            "trainable_layers",
            list(trainable),
            f"indices {bad} are outside this stage's blocks 0..{layers - 1}.",
        )
        self.need(
            len(set(trainable)) == len(trainable), where, "trainable_layers", list(trainable), "lists a block twice."
        )
        rate = cfg.learning_rate if cfg.learning_rate is not None else self.defaults["learning_rate"] * rate_scale
        self.need(isinstance(rate, (int, float)) and rate > 0, where, "learning_rate", rate, "must be positive.")
        warmup = cfg.warmup_steps if cfg.warmup_steps is not None else int(self.mslt.warmup_fraction * steps)
        self.need(
            _is_int(warmup) and 0 <= warmup < max(steps, 1),
            where,
            "warmup_steps",
            warmup,
            f"must be in [0, steps={steps}).",
        )
        power = cfg.decay_power if cfg.decay_power is not None else self.defaults["decay_power"]
        self.need(isinstance(power, (int, float)) and power >= 0, where, "decay_power", power, "must be >= 0.")
        end = cfg.end_learning_rate if cfg.end_learning_rate is not None else self.defaults["end_learning_rate"]
        self.need(
            isinstance(end, (int, float)) and 0 <= end <= rate,
            where,
            "end_learning_rate",
            end,
            f"must be in [0, learning_rate={rate}].",
        )
        first = previous_layers == 0
        train_embeddings = self.policy(
            cfg.train_embeddings, self.mslt.embeddings, first or trains_all, where, "train_embeddings"
        )
        train_heads = self.policy(cfg.train_heads, self.mslt.heads, first or trains_all, where, "train_heads")
        return MsltStage(
            number=number,
            num_layers=layers,
            previous_layers=previous_layers,
            trainable_layers=tuple(sorted(trainable)),
            train_embeddings=train_embeddings,
            train_heads=train_heads,
            start_step=start_step,
            end_step=start_step + steps,
            learning_rate=float(rate),
            warmup_steps=warmup,
            decay_power=float(power),
            end_learning_rate=float(end),
            is_final=is_final,
        )

    def policy(self, override: bool | None, policy: str, always: bool, where: str, field: str) -> bool:
        if override is not None:
            self.need(isinstance(override, bool), where, field, override, "must be true or false.")
            return override
        return always or policy == "train"


def build_plan(
    mslt: MsltConfig,
    bert: BertConfig,
    *,
    peak_learning_rate: float,
    decay_power: float = 1.0,
    end_learning_rate: float = 0.0,
) -> MsltPlan:
    """Validates `mslt` against the model and resolves every default; nothing is built or trained.

    Args:
        mslt: the `mslt` config section.
        bert: the full-depth model config.
        peak_learning_rate, decay_power, end_learning_rate: defaults of the stages' schedules (the
            experiment's `schedule` section).

    Raises:
        PlanError: naming the stage (`mslt.stages[i]`, `mslt.final_stage`) and the field, with the fix.
    """
    for field, choices in (
        ("mode", MODES),
        ("new_layer_init", NEW_LAYER_INITS),
        ("embeddings", POLICIES),
        ("heads", POLICIES),
    ):
        if getattr(mslt, field) not in choices:
            raise PlanError(f"mslt.{field}={getattr(mslt, field)!r}: choose one of {', '.join(choices)}.")
    for field in ("frozen_dropout", "build_ahead"):
        if not isinstance(getattr(mslt, field), bool):
            raise PlanError(f"mslt.{field}={getattr(mslt, field)!r}: must be true or false.")
    if not (isinstance(mslt.warmup_fraction, (int, float)) and 0 <= mslt.warmup_fraction < 1):
        raise PlanError(f"mslt.warmup_fraction={mslt.warmup_fraction!r}: must be in [0, 1).")
    if not isinstance(mslt.stages, (list, tuple)) or not mslt.stages:
        raise PlanError(
            "mslt.stages is empty: list the growth stages, e.g. "
            "stages: [{num_layers: 3, steps: 1000}, {num_layers: 6, steps: 1000}]."
        )
    if not (_is_int(mslt.init_layers) and 0 <= mslt.init_layers < bert.num_hidden_layers):
        raise PlanError(
            f"mslt.init_layers={mslt.init_layers!r}: must be in [0, the model's {bert.num_hidden_layers} "
            "layers): the depth of train.init_checkpoint's model, which the first stage grows from."
        )
    resolver = _StageResolver(mslt, bert, peak_learning_rate, decay_power, end_learning_rate)
    stages, layers, step = [], mslt.init_layers, 0
    for index, cfg in enumerate(mslt.stages):
        where = f"mslt.stages[{index}] (stage {index + 1})"
        resolver.need(cfg.num_layers is not None, where, "num_layers", None, "is required.")
        resolver.need(
            _is_int(cfg.steps) and cfg.steps > 0,
            where,
            "steps",
            cfg.steps,
            "must be a positive number of optimizer steps.",
        )
        stage = resolver.resolve(cfg, where, index + 1, layers, step, cfg.steps, is_final=False)
        stages.append(stage)
        layers, step = stage.num_layers, stage.end_step
    if layers != bert.num_hidden_layers:
        raise PlanError(
            f"mslt.stages[{len(stages) - 1}] (stage {len(stages)}).num_layers={layers}: the last "
            f"stage must reach the model's {bert.num_hidden_layers} layers; add a stage with "
            f"num_layers: {bert.num_hidden_layers} or set model.overrides.num_hidden_layers={layers}."
        )
    final = mslt.final_stage
    where = "mslt.final_stage"
    default_final = 0 if mslt.mode == "stacking" else round(FINAL_STAGE_SHARE_OF_GROWTH * step)
    final_steps = final.steps if final.steps is not None else default_final
    resolver.need(
        _is_int(final_steps) and final_steps >= 0,
        where,
        "steps",
        final_steps,
        "must be >= 0 (0 skips the all-layer stage).",
    )
    if final_steps:
        stages.append(
            resolver.resolve(
                final, where, len(stages) + 1, layers, step, final_steps, is_final=True, rate_scale=FINAL_RATE_SCALE
            )
        )
    return MsltPlan(
        mode=mslt.mode,
        new_layer_init=mslt.new_layer_init,
        bert=bert,
        stages=tuple(stages),
        frozen_dropout=mslt.frozen_dropout,
    )
