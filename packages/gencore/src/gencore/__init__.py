"""gencore: the shared generative-modelling math of the gen* suite.

Time runs over [0, 1] with ``t = 0`` the source (noise) and ``t = 1`` the data;
networks are called ``model(x_t, t, **cond)``. Sub-packages:

- :mod:`gencore.paths`: schedules, affine Gaussian and Brownian-bridge paths,
  prediction conversions, time samplers.
- :mod:`gencore.couplings`: independent, exact OT, Sinkhorn and semidiscrete OT.
- :mod:`gencore.solvers`: fixed-step and adaptive ODE solvers, Euler-Maruyama, grids.
- :mod:`gencore.likelihood`, :mod:`gencore.guidance`, :mod:`gencore.losses`,
  :mod:`gencore.flow_matching`, :mod:`gencore.metrics`, :mod:`gencore.data`.
"""

__version__ = "0.1.0"

from gencore.couplings import (
    COUPLINGS,
    ExactOTCoupling,
    IndependentCoupling,
    SemidiscreteCoupling,
    SemidiscreteDiagnostics,
    SinkhornCoupling,
    SinkhornResult,
    make_coupling,
    sinkhorn,
)
from gencore.data import DATASETS, TOY_DATASETS, get_dataset, load_digits, toy_dataset
from gencore.errors import ConfigError, ConvergenceError, GenError, InputError, StorageError
from gencore.flow_matching import FlowMatcher
from gencore.guidance import ClassifierFreeGuidance, RewardGuidance
from gencore.likelihood import LikelihoodResult, log_likelihood
from gencore.losses import denoising_score_matching_loss, flow_matching_loss
from gencore.metrics import MMDResult, energy_distance, mmd, sliced_wasserstein, wasserstein2
from gencore.nn import MLPVelocity, SinusoidalTimeEmbedding
from gencore.paths import (
    PREDICTIONS,
    AffineGaussianPath,
    BetaTime,
    BrownianBridgePath,
    CosineSchedule,
    EDMSchedule,
    LinearSchedule,
    LogitNormalTime,
    PathSample,
    ScheduleOutput,
    ShiftedSchedule,
    UniformTime,
    VESchedule,
    VPSchedule,
    convert_prediction,
    time_shift,
)
from gencore.solvers import (
    ODESolution,
    SDESolution,
    dopri5,
    euler_maruyama,
    karras_grid,
    shifted_grid,
    solve_ode,
    uniform_grid,
)

__all__ = [
    "COUPLINGS",
    "DATASETS",
    "PREDICTIONS",
    "TOY_DATASETS",
    "AffineGaussianPath",
    "BetaTime",
    "BrownianBridgePath",
    "ClassifierFreeGuidance",
    "ConfigError",
    "ConvergenceError",
    "CosineSchedule",
    "EDMSchedule",
    "ExactOTCoupling",
    "FlowMatcher",
    "GenError",
    "IndependentCoupling",
    "InputError",
    "LikelihoodResult",
    "LinearSchedule",
    "LogitNormalTime",
    "MLPVelocity",
    "MMDResult",
    "ODESolution",
    "PathSample",
    "RewardGuidance",
    "SDESolution",
    "ScheduleOutput",
    "SemidiscreteCoupling",
    "SemidiscreteDiagnostics",
    "ShiftedSchedule",
    "SinkhornCoupling",
    "SinkhornResult",
    "SinusoidalTimeEmbedding",
    "StorageError",
    "UniformTime",
    "VESchedule",
    "VPSchedule",
    "__version__",
    "convert_prediction",
    "denoising_score_matching_loss",
    "dopri5",
    "energy_distance",
    "euler_maruyama",
    "flow_matching_loss",
    "get_dataset",
    "karras_grid",
    "load_digits",
    "log_likelihood",
    "make_coupling",
    "mmd",
    "shifted_grid",
    "sinkhorn",
    "sliced_wasserstein",
    "solve_ode",
    "time_shift",
    "toy_dataset",
    "uniform_grid",
    "wasserstein2",
]
