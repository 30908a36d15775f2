"""genrl: Offline and online reinforcement learning with generative policies on gencore's flow-matching math.

Datasets in a documented npz + JSON-card layout (:mod:`genrl.dataset`) generated locally
(:mod:`genrl.generate`), a toy MDP with an analytic bimodal return law (:mod:`genrl.toy_mdp`), one agent
contract (:mod:`genrl.agents`) with Flow BC, FQL, C51, IQN, Value Flows and SAC, offline and
offline-to-online loops (:mod:`genrl.training`) and vectorised evaluation (:mod:`genrl.evaluation`).
"""

__version__ = "0.1.0"

from genrl.agents import AGENTS, Agent, EnvSpec, load_agent, make_agent
from genrl.dataset import OfflineDataset, load_dataset, save_dataset
from genrl.evaluation import evaluate
from genrl.generate import make_dataset
from genrl.toy_mdp import BimodalChain
from genrl.training import ReplayBuffer, train_offline, train_online

__all__ = [
    "AGENTS",
    "Agent",
    "BimodalChain",
    "EnvSpec",
    "OfflineDataset",
    "ReplayBuffer",
    "__version__",
    "evaluate",
    "load_agent",
    "load_dataset",
    "make_agent",
    "make_dataset",
    "save_dataset",
    "train_offline",
    "train_online",
]
