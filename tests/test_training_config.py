"""The experiment config: YAML files merged in order, overrides, unknown keys named with their source."""

import pytest
import tensorflow as tf

from kbert.config import parse_override
from kbert.errors import ConfigError, StrategyError
from kbert.experiment import ExperimentConfig, load_experiment, stages_of
from kbert.runtime.strategy import make_strategy


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_files_merge_in_order_then_override(tmp_path):
    first = _write(tmp_path, "a.yaml", "train:\n  total_steps: 50\n  global_batch_size: 64\n")
    second = _write(tmp_path, "b.yaml", "train:\n  global_batch_size: 32\noptimizer:\n  type: lars\n")
    config = load_experiment([first, second], "train.total_steps=20,model.overrides.num_hidden_layers=1")
    assert (config.train.total_steps, config.train.global_batch_size, config.optimizer.type) == (20, 32, "lars")
    assert config.model.bert_config().num_hidden_layers == 1
    assert config.model.bert_config().hidden_size == 128  # the rest of bert_tiny is kept


def test_unknown_key_in_file_is_named_with_the_file(tmp_path):
    path = _write(tmp_path, "typo.yaml", "train:\n  global_batchsize: 64\n")
    with pytest.raises(ConfigError) as error:
        load_experiment([path])
    message = str(error.value)
    assert "'train.global_batchsize'" in message and path in message and "train.global_batch_size" in message


@pytest.mark.parametrize(
    "override, key",
    [
        ("optimzer.type=lamb", "'optimzer'"),
        ("model.overrides.hiden_size=64", "'model.overrides.hiden_size'"),
        ("schedule.warmup=10", "'schedule.warmup'"),
    ],
)
def test_unknown_key_in_override_is_named_with_the_flag(override, key):
    with pytest.raises(ConfigError, match="--params_override") as error:
        load_experiment([], override)
    assert key in str(error.value)


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("optimizer.type=sgd", "optimizer.type='sgd'"),
        ("train.mixed_precision=fp8", "train.mixed_precision"),
        ("train.global_batch_size=10,train.gradient_accumulation_steps=4", "gradient_accumulation_steps (4)"),
        ("schedule.peak_learning_rate=1e39", "schedule.peak_learning_rate=1e+39 is not a finite float32 number"),
        ("optimizer.lamb.beta_1=1.5", "optimizer.lamb.beta_1=1.5 must be in [0, 1)"),
        ("optimizer.lamb.epsilon=0", "optimizer.lamb.epsilon=0.0 must be positive"),
        ("optimizer.weight_decay=-1", "optimizer.weight_decay=-1.0 must be >= 0"),
        ("schedule.decay_steps=-5", "schedule.decay_steps=-5 must be positive"),
        ("schedule.power=-1", "schedule.power=-1.0 must be >= 0"),
        ("schedule.warmup_steps=2000", "schedule.warmup_steps=2000 must be >= 0 and no longer than the training"),
        ("train.total_steps=1e30", "train.total_steps=1000000000000000019884624838656 is more than 2147483647 steps"),
        (
            "optimizer.exclude_from_weight_decay=['(bias']",
            "optimizer.exclude_from_weight_decay: '(bias' is not a regular",
        ),
        ("eval.global_batch_size=0", "eval.global_batch_size must be positive"),
        ("train.steps_per_loop=3,train.checkpoint_interval=10", "train.checkpoint_interval=10"),
        ("data.seq_length=1024", "max_position_embeddings"),
        ("model.bert=bert_gigantic", "bert_gigantic"),
    ],
)
def test_bad_values_are_named(override, fragment):
    with pytest.raises(ConfigError) as error:
        load_experiment([], override)
    assert fragment in str(error.value)


def test_the_optional_mslt_section_is_checked_like_the_others(tmp_path):
    assert ExperimentConfig().mslt is None
    path = _write(tmp_path, "mslt.yaml", "mslt:\n  stages: [2, 4]\n")
    with pytest.raises(ConfigError, match=r"mslt.yaml: 'mslt.stages\[0\]' must be a mapping of keys, got 2"):
        load_experiment([path])


def test_yaml_tags_are_refused_not_run(tmp_path):
    path = _write(tmp_path, "evil.yaml", "train:\n  seed: !!python/object/apply:os.getpid []\n")
    with pytest.raises(ConfigError, match=r"evil.yaml: cannot read it as plain YAML .*tags such as"):
        load_experiment([path])


def test_override_syntax():
    assert parse_override("a.b=1,c.d=x") == {"a": {"b": 1}, "c": {"d": "x"}}
    assert parse_override("data.train_files=a-*.tfrecord,b/*.tfrecord,train.seed=3") == {
        "data": {"train_files": "a-*.tfrecord,b/*.tfrecord"},
        "train": {"seed": 3},
    }
    assert parse_override("mslt.stages=[{num_layers: 2, steps: 5}],x.y=true") == {
        "mslt": {"stages": [{"num_layers": 2, "steps": 5}]},
        "x": {"y": True},
    }
    assert load_experiment([], "data.train_files=a,b").data.train_files == "a,b"
    with pytest.raises(ConfigError, match="params_override"):
        parse_override("just words")


def test_unreadable_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="missing.yaml"):
        load_experiment([str(tmp_path / "missing.yaml")])


def test_experiment_files_load():
    import glob
    import os

    root = os.path.join(os.path.dirname(__file__), "..", "configs", "experiments")
    paths = sorted(glob.glob(os.path.join(root, "*.yaml")))
    assert len(paths) >= 8, f"the shipped experiment configs were not found under {root}"
    bases = {"bert_base_fast_phase1.yaml": ["bert_base_lamb_phase1.yaml", "bert_base_mslt.yaml"]}  # not alone
    for path in paths:
        files = [os.path.join(root, base) for base in bases.get(os.path.basename(path), [])] + [path]
        assert load_experiment(files).train.total_steps > 0, path
    # The fast recipes: the bench's fastest levers (bf16, dynamic masking, no dropout, wsd, MSLT whose all-layer
    # stage runs at a growth stage's peak), on CPU as measured (50% masking; the stages after the first at 1e-2,
    # where 1.5e-2 lost held-out accuracy) and at BERT-base size (40%, one peak rate).
    for names, masking, rates in (
        (["bert_tiny_cpu.yaml", "bert_tiny_fast_cpu.yaml"], 0.5, [1.5e-2, 1e-2, 1e-2]),
        (bases["bert_base_fast_phase1.yaml"] + ["bert_base_fast_phase1.yaml"], 0.4, [7.5e-4] * 5),
    ):
        config = load_experiment([os.path.join(root, name) for name in names])
        bert, stages = config.model.bert_config(), stages_of(config)
        assert (
            config.train.mixed_precision,
            config.data.dynamic_masking,
            config.data.masked_lm_prob,
            bert.hidden_dropout_prob,
            bert.attention_probs_dropout_prob,
            config.schedule.shape,
        ) == ("mixed_bfloat16", True, masking, 0.0, 0.0, "wsd"), names
        assert len(stages) >= 3 and stages[-1].num_layers == stages[-2].num_layers == bert.num_hidden_layers
        assert [s.config.schedule.peak_learning_rate for s in stages] == pytest.approx(rates), names
    # The two-phase recipes are layered on their phase-1 files: 90% of the steps at seq 128, then seq 512.
    for overlay, base in (
        ("bert_tiny_two_phase_cpu", "bert_tiny_cpu"),
        ("bert_base_lamb_two_phase", "bert_base_lamb_phase1"),
        ("bert_large_lamb_two_phase", "bert_large_lamb_phase1"),
    ):
        files = [os.path.join(root, f"{name}.yaml") for name in (base, overlay)]
        stages = stages_of(load_experiment(files))
        assert [s.config.data.seq_length for s in stages] == [128, 512], overlay
        assert stages[0].steps == 9 * stages[1].steps or stages[1].end_step == 8599, overlay


def test_tpu_strategy_without_tpu_is_one_clear_error():
    with pytest.raises(StrategyError) as error:
        make_strategy("tpu")
    message = str(error.value)
    assert "--strategy=tpu" in message and "\n" not in message and "--tpu=local" in message


def test_values_are_typed_by_their_field(tmp_path):
    path = _write(
        tmp_path,
        "t.yaml",
        "schedule:\n  peak_learning_rate: 1e-4\n  warmup_steps: 10\noptimizer:\n  global_clipnorm: 1\n",
    )
    config = load_experiment([path], "schedule.end_learning_rate=1e-6,train.total_steps=20")
    assert config.schedule.peak_learning_rate == 1e-4 and config.schedule.end_learning_rate == 1e-6
    assert isinstance(config.optimizer.global_clipnorm, float) and config.train.total_steps == 20
    with pytest.raises(ConfigError, match="'train.total_steps' must be of type int, got 'many'"):
        load_experiment([], "train.total_steps=many")
    assert load_experiment([], "train.jit_compile=step").train.jit_compile == "step"
    with pytest.raises(
        ConfigError,
        match=r"^train.jit_compile='yes please': choose false \(nothing\), true \(the "
        r"forward and backward pass\), step \(the whole replica step",
    ):
        load_experiment([], "train.jit_compile=yes please")


def test_batch_sizes_must_split_over_the_replicas_before_anything_is_built():
    from kbert.training.config import check_batch_sizes

    config = load_experiment([], "train.global_batch_size=12,eval.global_batch_size=9")
    check_batch_sizes(config, 3)
    with pytest.raises(ConfigError, match=r"train.global_batch_size=12 must be a multiple of .* x replicas \(8\)"):
        check_batch_sizes(config, 8)
    with pytest.raises(ConfigError, match=r"eval.global_batch_size=9 must be a multiple of the replicas \(2\)"):
        check_batch_sizes(load_experiment([], "train.global_batch_size=12,eval.global_batch_size=9"), 2)


def test_multi_worker_all_reduce_is_nccl_between_gpus_and_the_ring_otherwise():
    from kbert.runtime.strategy import communication_options

    nccl, ring = (
        tf.distribute.experimental.CommunicationImplementation.NCCL,
        tf.distribute.experimental.CommunicationImplementation.RING,
    )
    assert communication_options("auto", gpus=8).implementation == nccl
    assert communication_options("auto", gpus=0).implementation == ring
    assert communication_options("ring", gpus=8).implementation == ring
    with pytest.raises(StrategyError, match=r"--all_reduce=nccl needs GPUs.*--all_reduce=ring"):
        communication_options("nccl", gpus=0)
    with pytest.raises(StrategyError, match=r"--all_reduce=mpi: choose one of auto, nccl, ring"):
        communication_options("mpi", gpus=8)
