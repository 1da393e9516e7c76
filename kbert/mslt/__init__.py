"""Multi-stage layerwise training (MSLT, Progressively Stacking 2.0) and progressive stacking.

`kbert.mslt.runner.run_stages` composes the training loop once per stage; `kbert.experiment.run` calls it for a
config with an `mslt` section.
"""

from kbert.mslt.grow import build_stage_model, carry_over, freeze, grow, load_stage_export
from kbert.errors import PlanError
from kbert.mslt.plan import MsltConfig, Stage, StageConfig, StagePlan, build_plan, parameter_counts

__all__ = ["MsltConfig", "PlanError", "Stage", "StageConfig", "StagePlan", "build_plan", "build_stage_model",
           "carry_over", "freeze", "grow", "load_stage_export", "parameter_counts"]
