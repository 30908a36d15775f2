"""Few-step flow maps in Euclidean space: MeanFlow (JVP and finite-difference targets), Consistency
Mid-Training (CMT) and pi-Flow policies, with an analytic Gaussian flow map for tests.

A flow map ``X_{s,t}(x) = x + (t - s) u(x, s, t)`` sends a point at time ``s`` to time ``t`` along the
probability-flow ODE (``t = 0`` noise, ``t = 1`` data); ``gencore flowmap compare`` trains and scores them.
"""

from __future__ import annotations

from gencore.flowmaps.cmt import TrajectoryData, mid_training_loss, pair_mid_training_loss, teacher_trajectories
from gencore.flowmaps.meanflow import (
    DERIVATIVES,
    MeanFlow,
    flow_map,
    gaussian_average_velocity,
    gaussian_flow_map,
    gaussian_velocity,
    meanflow_target,
    sample_flow_map,
    total_derivative,
)
from gencore.flowmaps.network import TwoTimeMLP
from gencore.flowmaps.piflow import (
    GaussianMixture,
    PiFlow,
    PolicyNet,
    gmm_velocity_reference,
    policy_rollout,
    policy_velocity,
    sample_policy,
)

__all__ = [
    "DERIVATIVES",
    "GaussianMixture",
    "MeanFlow",
    "PiFlow",
    "PolicyNet",
    "TrajectoryData",
    "TwoTimeMLP",
    "flow_map",
    "gaussian_average_velocity",
    "gaussian_flow_map",
    "gaussian_velocity",
    "gmm_velocity_reference",
    "meanflow_target",
    "mid_training_loss",
    "pair_mid_training_loss",
    "policy_rollout",
    "policy_velocity",
    "sample_flow_map",
    "sample_policy",
    "teacher_trajectories",
    "total_derivative",
]
