"""linserve_ref: the PyTorch reference of linserve's model (docs/architecture.md §4), and tools."""
