"""Typed containers and file formats: Molecule (RDKit, SMILES, SDF, XYZ) and ProteinStructure (PDB, mmCIF)."""
