"""genmol: Molecule, protein, peptide and DNA generation on gencore's flow-matching math."""

__version__ = "0.1.0"
