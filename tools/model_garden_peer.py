"""The two training steps benchmarks put side by side: Model Garden's BERT pretraining (tf_keras `MaskedLMTask`)
and kbert's bare `BertPretrainer` step, plus the synthetic batch they share (their FLOPs: kbert.runtime.flops);
and Model Garden's whole recipe (its task, its LAMB and its warmup and decay) trained on kbert's records and
evaluated on kbert's held-out sample schedule, for time to accuracy, from its own draw or from a Google-format
checkpoint (`train.init_checkpoint`), as every kbert run can start.

Not part of kbert: `tools/bench_*.py` import it to run the peer's step beside kbert's in one process. Whole
runs go in a process each, as kbert-pretrain's do: `python tools/model_garden_peer.py CONFIG.yaml SUMMARY.json`.
"""

from __future__ import annotations

import json
import sys

import keras
import numpy as np
import tensorflow as tf
import tf_keras
from official.modeling import optimization
from official.nlp.configs import bert as mg_bert
from official.nlp.configs import encoders as mg_encoders
from official.nlp.data import pretrain_dataloader
from official.nlp.tasks import masked_lm

from kbert.bench.bare_step import bare_train_step
from kbert.bench.scheduled_training import train_on_schedule
from kbert.data import schema
from kbert.errors import CheckpointMismatchError
from kbert.experiment import load_experiment
from kbert.modeling import BertConfig, BertPretrainer
from kbert.runtime.strategy import make_strategy
from kbert.tasks.bert import BertPretrainingTask, dataset_fn
from kbert.training.config import PretrainingConfig
from kbert.training.eval_schedule import EvalSchedule
from kbert.training.loop import evaluator

# kbert's `hidden_act` names that Model Garden spells otherwise: its "gelu" is the tanh approximation
# (`official.modeling.activations.gelu`), which kbert calls "gelu_approximate"; kbert's "gelu" is the exact erf form,
# which Model Garden's recipe replaces with its own.
_MODEL_GARDEN_ACTIVATIONS = {"gelu_approximate": "gelu", "gelu_new": "gelu"}


def model_garden_task(config: BertConfig) -> masked_lm.MaskedLMTask:
    encoder = mg_encoders.EncoderConfig(
        type="bert",
        bert=mg_encoders.BertEncoderConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            intermediate_size=config.intermediate_size,
            hidden_activation=_MODEL_GARDEN_ACTIVATIONS.get(config.hidden_act, config.hidden_act),
            dropout_rate=config.hidden_dropout_prob,
            attention_dropout_rate=config.attention_probs_dropout_prob,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            initializer_range=config.initializer_range,
        ),
    )
    model_config = mg_bert.PretrainerConfig(
        encoder=encoder,
        cls_heads=[
            mg_bert.ClsHeadConfig(
                inner_dim=config.hidden_size,
                num_classes=2,
                dropout_rate=config.hidden_dropout_prob,
                name="next_sentence",
            )
        ],
    )
    data = pretrain_dataloader.BertPretrainDataConfig(use_next_sentence_label=True)
    return masked_lm.MaskedLMTask(masked_lm.MaskedLMConfig(model=model_config, train_data=data))


# Model Garden's sentence head has a pooler of its own, besides the encoder's (unused there); both get Google's.
_HEAD_POOLER = "bert/next_sentence/pooler_dense"


def _google_names(num_layers: int) -> dict[str, tuple[str, bool]]:
    """Model Garden's pretrainer variable -> (google-research/bert's name, stored transposed?), from the names
    kbert's parts declare (`BertPretrainer.weight_names`). Its attention kernels are [hidden, heads, head size] and
    [heads, head size, hidden], Google's the same numbers as [hidden, hidden]. The names depend on the depth alone,
    so the declaring model is two units wide."""
    narrow = BertConfig(
        vocab_size=2,
        hidden_size=2,
        num_hidden_layers=num_layers,
        num_attention_heads=1,
        intermediate_size=2,
        max_position_embeddings=2,
    )
    names = {n.model_garden: (n.google, n.transposed) for n in BertPretrainer(narrow).weight_names()}
    for part in ("kernel", "bias"):
        names[f"{_HEAD_POOLER}/{part}"] = names[f"pooler_transform/{part}"]
    return names


def load_google_checkpoint_into_model_garden(model: tf_keras.Model, path: str) -> None:
    """Assigns every weight of Model Garden's `BertPretrainerV2` from the google-research/bert checkpoint at `path`
    (what `train.init_checkpoint` loads into a kbert run), so both sides start from the same weights.

    Raises:
      CheckpointMismatchError: naming every variable the checkpoint lacks or holds in another size; nothing is
        assigned then.
    """
    model(model.inputs)  # builds the heads, which Model Garden builds at their first call
    reader = tf.train.load_checkpoint(path)
    stored = reader.get_variable_to_shape_map()
    google_names = _google_names(model.encoder_network.get_config()["num_layers"])
    values, problems = {}, []
    for variable in model.weights:
        name = variable.name.split(":")[0]
        if name not in google_names:
            raise ValueError(f"No google-research/bert name for Model Garden's variable {name!r}.")
        google, transposed = google_names[name]
        if google not in stored:
            problems.append(f"{google} is missing")
        elif np.prod(stored[google]) != np.prod(variable.shape):
            problems.append(f"{google} is {stored[google]}, Model Garden's {variable.name} {variable.shape}")
        else:
            value = reader.get_tensor(google)
            values[variable.name] = value.T if transposed else value
    if problems:
        raise CheckpointMismatchError(f"{path}: does not fit Model Garden's model ({'; '.join(problems)}).")
    for variable in model.weights:
        variable.assign(np.reshape(values[variable.name], variable.shape))


def model_garden_batch(batch: dict) -> dict:
    return {schema.file_name(k, use_v2_feature_names=True): v for k, v in batch.items()}


def model_garden_train_step(config: BertConfig, learning_rate: float = 1e-4, jit_compile: bool = False):
    """(step function over a kbert batch dict, model) using Model Garden's own `MaskedLMTask.train_step`."""
    task = model_garden_task(config)
    model = task.build_model()
    metrics = task.build_metrics()
    optimizer = tf_keras.optimizers.Adam(learning_rate)

    @tf.function(jit_compile=jit_compile)
    def step(batch):
        return task.train_step(model_garden_batch(batch), model, optimizer, metrics)["loss"]

    return step, model


def model_garden_optimizer(config: PretrainingConfig) -> tf_keras.optimizers.Optimizer:
    """Model Garden's LAMB with its polynomial warmup and decay, built by its `OptimizerFactory` from kbert's
    `optimizer` and `schedule` sections: the rate kbert's `PolynomialWarmup` gives at every step after the first
    (Model Garden warms up from step 1), the same decay and exclusions."""
    o, s = config.optimizer, config.schedule
    lamb = o.lamb
    if o.type != "lamb" or s.step_offset:
        raise ValueError(
            f"Model Garden's recipe here is LAMB from step 0, not optimizer.type={o.type!r} with "
            f"schedule.step_offset={s.step_offset}."
        )
    # Model Garden's decay counts from step 0, so it is offset by the warmup, as kbert's decay starts after it.
    decay_steps = s.decay_steps or max(config.train.total_steps - s.warmup_steps, 1)
    factory = optimization.OptimizerFactory(
        optimization.OptimizationConfig(
            {
                "optimizer": {
                    "type": "lamb",
                    "lamb": {
                        "weight_decay_rate": o.weight_decay,
                        "beta_1": lamb.beta_1,
                        "beta_2": lamb.beta_2,
                        "epsilon": lamb.epsilon,
                        "exclude_from_weight_decay": list(o.exclude_from_weight_decay),
                        "exclude_from_layer_adaptation": list(lamb.exclude_from_layer_adaptation),
                        "global_clipnorm": o.global_clipnorm,
                    },
                },
                "learning_rate": {
                    "type": "polynomial",
                    "polynomial": {
                        "initial_learning_rate": s.peak_learning_rate,
                        "decay_steps": decay_steps,
                        "end_learning_rate": s.end_learning_rate,
                        "power": s.power,
                        "offset": s.warmup_steps,
                    },
                },
                "warmup": {"type": "polynomial", "polynomial": {"warmup_steps": s.warmup_steps, "power": 1.0}},
            }
        )
    )
    return factory.build_optimizer(factory.build_learning_rate())


class KbertOutputs:
    """Model Garden's pretrainer as kbert's evaluator calls a model: kbert's batch in, kbert's output names out,
    and the `config` whose vocabulary the records are checked against."""

    def __init__(self, model: tf_keras.Model, config: BertConfig):
        self.model, self.config = model, config

    def __call__(self, batch: dict, training: bool = False) -> dict:
        outputs = self.model(model_garden_batch(batch), training=training)
        return {"mlm_logits": outputs["mlm_logits"], "nsp_logits": outputs["next_sentence"]}


class ModelGardenPretraining:
    """Model Garden's recipe on kbert's records: `MaskedLMTask`'s model and `train_step` with its LAMB and schedule
    (float32), seeded with `train.seed` or started from the Google-format `train.init_checkpoint`, fed the batches
    a kbert-pretrain run of `config` reads (the same files, shuffle seed and batch), in Model Garden's own loop form
    (a `tf.range` of `strategy.run` in one tf.function).
    `evaluate` is kbert's evaluator over the same held-out records, so both sides are scored by one piece of code.
    """

    def __init__(self, config: PretrainingConfig, strategy: tf.distribute.Strategy):
        if config.train.gradient_accumulation_steps != 1:
            raise ValueError("Model Garden's train_step applies every batch: give train.gradient_accumulation_steps=1.")
        bert = config.model.bert_config()
        self.batch_size, self.samples = config.train.global_batch_size, 0
        tf_keras.utils.set_random_seed(config.train.seed)
        with strategy.scope():
            task = model_garden_task(bert)
            model = task.build_model()
            metrics = task.build_metrics()
            optimizer = model_garden_optimizer(config)
            if config.train.init_checkpoint:  # in the scope: the heads it builds need their slots there
                load_google_checkpoint_into_model_garden(model, config.train.init_checkpoint)
        make = dataset_fn(config, True, bert.vocab_size)
        batches = iter(
            strategy.distribute_datasets_from_function(lambda context: make(context).map(model_garden_batch))
        )

        @tf.function
        def loop(steps: tf.Tensor) -> None:
            for _ in tf.range(steps):
                strategy.run(lambda batch: task.train_step(batch, model, optimizer, metrics), (next(batches),))

        self._loop = loop
        self.evaluate = evaluator(config, strategy, BertPretrainingTask(bert), KbertOutputs(model, bert))

    def train(self, steps: int) -> int:
        """Trains `steps` optimizer steps; returns the samples trained so far."""
        self._loop(tf.constant(steps))
        self.samples += steps * self.batch_size
        return self.samples


def train_model_garden(config: PretrainingConfig, strategy: tf.distribute.Strategy, print_fn=print) -> dict:
    """Model Garden's recipe trained for `train.total_steps`, evaluated every `eval.interval_samples` as a
    kbert-pretrain run of `config` is (seconds from the schedule's start, after the model is built); returns what
    kbert-pretrain's summary.json would hold: `evaluations`, `time_to_target` (with `eval.target_mlm_accuracy`), ..."""
    peer = ModelGardenPretraining(config, strategy)
    schedule = EvalSchedule(config.eval.interval_samples, config.eval.target_mlm_accuracy, peer.evaluate, print_fn)
    return train_on_schedule(
        peer.train, until_step=config.train.total_steps, steps_per_loop=config.train.steps_per_loop, schedule=schedule
    )


def kbert_train_step(config: BertConfig, jit_compile: bool = False, policy: str = "float32"):
    """kbert's `BertPretrainer` trained with Keras Adam in one tf.function: forward, backward, update."""
    model = BertPretrainer(config, dtype=policy)
    return bare_train_step(model, keras.optimizers.Adam(1e-4), BertPretrainingTask(config), jit_compile)


def synthetic_batch(config: BertConfig, batch_size: int, seq_length: int, max_predictions: int, seed: int = 0):
    """A full-length batch of random ids in kbert's batch layout (int32, weights float32)."""
    rng = np.random.default_rng(seed)
    positions = np.sort(
        np.stack([rng.choice(np.arange(1, seq_length), max_predictions, replace=False) for _ in range(batch_size)]),
        axis=1,
    )
    return {
        "input_ids": tf.constant(rng.integers(1000, config.vocab_size, (batch_size, seq_length)), tf.int32),
        "input_mask": tf.ones((batch_size, seq_length), tf.int32),
        "segment_ids": tf.constant(
            np.repeat([[0] * (seq_length // 2) + [1] * (seq_length - seq_length // 2)], batch_size, 0), tf.int32
        ),
        "masked_lm_positions": tf.constant(positions, tf.int32),
        "masked_lm_ids": tf.constant(rng.integers(1000, config.vocab_size, (batch_size, max_predictions)), tf.int32),
        "masked_lm_weights": tf.ones((batch_size, max_predictions), tf.float32),
        "next_sentence_labels": tf.constant(rng.integers(0, 2, (batch_size, 1)), tf.int32),
    }


def main(argv: list[str]) -> None:
    """Model Garden's recipe of the kbert config CONFIG.yaml on one device, its summary written to SUMMARY.json.

    A run a process, as kbert-pretrain's: in a process that has trained one run, a second sometimes waits 36-55 s
    before its first evaluation (docs/results/time_to_accuracy.md, "A process each")."""
    if len(argv) != 3:
        raise SystemExit(f"usage: python {argv[0]} CONFIG.yaml SUMMARY.json")
    summary = train_model_garden(load_experiment([argv[1]]), make_strategy("one_device"))
    with open(argv[2], "w") as f:
        json.dump(summary, f, indent=1, default=float)


if __name__ == "__main__":
    main(sys.argv)
