"""Multi-stage layerwise training (MSLT, Progressively Stacking 2.0) and progressive stacking.

`kbert.mslt.runner.run_mslt` (what `kbert-pretrain` runs for a config with an `mslt` section) imports the
training loop, so it is not re-exported here: `kbert.training.config` imports this package for `MsltConfig`.
"""

from kbert.mslt.grow import build_stage_model, carry_over, freeze, grow, load_stage_export
from kbert.mslt.plan import MsltConfig, PlanError, Stage, StageConfig, StagePlan, build_plan, parameter_counts

__all__ = ["MsltConfig", "PlanError", "Stage", "StageConfig", "StagePlan", "build_plan", "build_stage_model",
           "carry_over", "freeze", "grow", "load_stage_export", "parameter_counts"]
