"""Multi-stage layerwise training (MSLT, Progressively Stacking 2.0) and progressive stacking.

The plan (`plan.py`), how a model grows from one stage to the next (`grow.py`), and the plan as the stages of a
pretraining run (`stages.py`), which `kbert.training.engine` trains. No loop lives here.
"""

from kbert.errors import PlanError
from kbert.mslt.grow import build_stage_model, carry_over, freeze, grow, load_stage_export
from kbert.mslt.plan import MsltConfig, MsltPlan, MsltStage, MsltStageConfig, build_plan, parameter_counts
from kbert.mslt.stages import mslt_stages, plan_for

__all__ = [
    "MsltConfig",
    "PlanError",
    "MsltStage",
    "MsltStageConfig",
    "MsltPlan",
    "build_plan",
    "build_stage_model",
    "carry_over",
    "freeze",
    "grow",
    "load_stage_export",
    "mslt_stages",
    "parameter_counts",
    "plan_for",
]
