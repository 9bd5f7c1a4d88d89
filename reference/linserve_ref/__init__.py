"""linserve_ref: the PyTorch reference of linserve's model (DESIGN.md §4) and its tooling."""
