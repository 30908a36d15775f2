"""genmol: molecular data tooling, metrics and 3-D molecule generation on gencore's flow-matching math.

Containers (:class:`Molecule`, :class:`ProteinStructure`), readers and writers with a bad-record
policy, QM9 / NCI / conformer data sets, the metric suite, EGNN and transformer backbones, and
SE(3) strategies including quotient-space flow matching (Xu et al., ICLR 2026).
"""

from genmol.chem.io import BadRecord, ReadReport, read_sdf, read_smiles, read_xyz, write_sdf, write_xyz
from genmol.chem.molecule import Molecule
from genmol.chem.protein import ProteinStructure
from genmol.metrics.stability import stability

__version__ = "0.1.0"

__all__ = [
    "BadRecord",
    "Molecule",
    "ProteinStructure",
    "ReadReport",
    "__version__",
    "read_sdf",
    "read_smiles",
    "read_xyz",
    "stability",
    "write_sdf",
    "write_xyz",
]
