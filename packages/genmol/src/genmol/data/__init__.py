"""Data sets: QM9 (qm9pack files), RDKit's NCI 5K, MOSES files, ETKDG+MMFF conformers; padded tensors."""
