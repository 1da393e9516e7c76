"""The MSLT stage plan: defaults, global step boundaries, the printed table, and bad plans rejected early."""

import pytest

from kbert.errors import ConfigError, PlanError
from kbert.experiment import load_experiment
from kbert.modeling import BertConfig, BertPretrainer
from kbert.mslt import MsltConfig, build_plan, parameter_counts

BERT = BertConfig(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=6,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=32,
)


def plan_of(values, bert=BERT, **kwargs):
    return build_plan(MsltConfig(values), bert, peak_learning_rate=kwargs.pop("peak", 1e-3), **kwargs)


def stages(*layers, steps=10):
    return [{"num_layers": n, "steps": steps} for n in layers]


def test_defaults_train_new_layers_then_all_layers_for_a_fifth_of_the_steps():
    plan = plan_of({"stages": stages(2, 4, 6, steps=100)}, decay_power=0.5)
    assert [(s.number, s.num_layers, s.trainable_layers) for s in plan.stages] == [
        (1, 2, (0, 1)),
        (2, 4, (2, 3)),
        (3, 6, (4, 5)),
        (4, 6, (0, 1, 2, 3, 4, 5)),
    ]
    assert [(s.start_step, s.end_step) for s in plan.stages] == [(0, 100), (100, 200), (200, 300), (300, 375)]
    assert plan.stages[-1].steps / plan.total_steps == pytest.approx(0.2)
    assert [s.stop_gradient_below for s in plan.stages] == [0, 2, 4, 0]
    assert [s.embeddings_policy for s in plan.stages] == ["all", "word_table", "word_table", "all"]
    assert all(s.train_heads for s in plan.stages)
    assert [s.learning_rate for s in plan.stages] == pytest.approx([1e-3, 1e-3, 1e-3, 1e-4])
    assert [s.warmup_steps for s in plan.stages] == [10, 10, 10, 7]
    assert {s.decay_power for s in plan.stages} == {0.5}


def test_stage_at_follows_the_global_step():
    plan = plan_of({"stages": stages(2, 4, 6, steps=100)})
    assert [plan.stage_at(step).number for step in (0, 99, 100, 250, 299, 300, 374, 375, 999)] == [
        1,
        1,
        2,
        3,
        3,
        4,
        4,
        4,
        4,
    ]


def test_stacking_trains_every_layer_and_copies_cyclically():
    plan = plan_of({"mode": "stacking", "stages": stages(3, 6)})
    assert [s.trainable_layers for s in plan.stages] == [(0, 1, 2), tuple(range(6))]
    assert all(s.embeddings_policy == "all" and s.train_heads for s in plan.stages)
    assert [plan.stages[1].source_layer(j) for j in range(3, 6)] == [0, 1, 2]


def test_copy_takes_the_top_layers_of_the_previous_stage():
    plan = plan_of({"stages": stages(2, 3, 6), "final_stage": {"steps": 0}})
    assert plan.stages[1].source_layer(2) == 1  # 2 -> 3: copies the top layer
    assert [plan.stages[2].source_layer(j) for j in range(3, 6)] == [0, 1, 2]  # 3 -> 6: the whole stack
    assert len(plan.stages) == 3


def test_policies_and_per_stage_overrides():
    plan = plan_of(
        {
            "embeddings": "freeze_after_first_stage",
            "heads": "freeze_after_first_stage",
            "stages": stages(2, 4)
            + [
                {
                    "num_layers": 6,
                    "steps": 5,
                    "trainable_layers": [3, 5],
                    "train_heads": True,
                    "learning_rate": 5e-4,
                    "warmup_steps": 0,
                }
            ],
            "final_stage": {"steps": 3, "learning_rate": 2e-4},
        }
    )
    s = plan.stages
    assert [x.embeddings_policy for x in s] == ["all", "frozen", "frozen", "all"]
    assert [x.train_heads for x in s] == [True, False, True, True]
    assert s[2].trainable_layers == (3, 5) and s[2].stop_gradient_below == 3
    assert (s[2].learning_rate, s[2].warmup_steps, s[3].learning_rate, s[3].steps) == (5e-4, 0, 2e-4, 3)


def test_trainable_parameter_counts_match_the_model():
    model = BertPretrainer(BERT)
    assert parameter_counts(BERT)["total"] == sum(int(v.numpy().size) for v in model.weights)
    plan = plan_of({"stages": stages(3, 6)})
    counts = parameter_counts(BERT)
    assert plan.stages[1].trainable_parameters(BERT) == 3 * counts["block"] + counts["word_table"] + counts["heads"]


def test_describe_lists_every_stage():
    text = plan_of({"stages": stages(2, 4, 6, steps=100)}).describe()
    lines = text.splitlines()
    assert "375 steps" in lines[0] and len(lines) == 2 + 4
    assert "4-5" in lines[4] and "200-300" in lines[4] and "word_table" in lines[4]
    assert "frozen blocks without dropout" in lines[0]
    assert "with dropout" in plan_of({"stages": stages(2, 6), "frozen_dropout": True}).describe()


@pytest.mark.parametrize(
    "values, message",
    [
        ({"stages": stages(2, 2, 6)}, r"mslt.stages\[1\] \(stage 2\).num_layers=2: must be greater than the previous"),
        ({"stages": stages(3, 8)}, r"stages\[1\] \(stage 2\).num_layers=8: the model has only 6 layers"),
        ({"stages": stages(2, 4)}, r"stages\[1\] \(stage 2\).num_layers=4: the last stage must reach the model's 6"),
        (
            {"stages": [{"num_layers": 2, "steps": 0}] + stages(6)},
            r"stages\[0\] \(stage 1\).steps=0: must be a positive number",
        ),
        ({"stages": [{"num_layers": 2}] + stages(6)}, r"stages\[0\] \(stage 1\).steps=None"),
        (
            {"stages": stages(2) + [{"num_layers": 6, "steps": 5, "trainable_layers": [1, 6]}]},
            r"stages\[1\] \(stage 2\).trainable_layers=\[1, 6\]: indices \[6\] are outside this stage's blocks 0..5",
        ),
        ({"stages": stages(2) + [{"num_layers": 6, "steps": 5, "trainable_layers": []}]}, r"trainable_layers=\[\]"),
        ({"stages": stages(2, 6), "final_stage": {"steps": -1}}, r"mslt.final_stage.steps=-1"),
        ({"stages": stages(2, 6), "final_stage": {"num_layers": 4}}, r"mslt.final_stage.num_layers=4"),
        (
            {"stages": [{"num_layers": 6, "steps": 5, "warmup_steps": 5}]},
            r"stage 1\).warmup_steps=5: must be in \[0, steps=5\)",
        ),
        ({"stages": stages(6), "new_layer_init": "zeros"}, r"mslt.new_layer_init='zeros': choose one of copy, random"),
        ({"stages": []}, r"mslt.stages is empty"),
        ({"stages": stages(6), "frozen_dropout": 0}, r"mslt.frozen_dropout=0: must be true or false"),
    ],
)
def test_bad_plans_are_rejected_naming_stage_and_field(values, message):
    with pytest.raises(PlanError, match=message):
        plan_of(values)


def test_experiment_config_holds_the_mslt_section(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(
        "model: {bert: bert_tiny}\nmslt:\n  stages: [{num_layers: 1, steps: 4}, {num_layers: 2, steps: 4}]\n"
    )
    config = load_experiment([str(path)], "mslt.final_stage.steps=2")
    assert [s.num_layers for s in config.mslt.stages] == [1, 2] and config.mslt.final_stage.steps == 2
    assert load_experiment([]).mslt is None
    with pytest.raises(ConfigError, match="mslt.final_stag"):
        load_experiment([str(path)], "mslt.final_stag.steps=2")


@pytest.mark.parametrize(
    "mslt, message",
    [
        (
            "{stages: [{num_layers: 4, step: 5}]}",
            r"unknown config key 'mslt.stages\[0\].step'. Did you mean "
            r"'mslt.stages\[0\].steps'",
        ),
        (
            "{stages: [{num_layers: 4, steps: 5}], embedings: train}",
            r"unknown config key 'mslt.embedings'. Did you mean 'mslt.embeddings'",
        ),
        ("{stages: [{num_layers: two, steps: 5}]}", r"'mslt.stages\[0\].num_layers' must be of type int"),
        ("{stages: [{num_layers: 2, steps: 5}]}", r"mslt.stages\[0\] \(stage 1\).num_layers=2: the last stage must"),
    ],
)
def test_the_mslt_section_is_checked_at_load(mslt, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment([], f"{{model: {{overrides: {{num_hidden_layers: 4}}}}, mslt: {mslt}}}")
