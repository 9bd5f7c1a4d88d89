"""The "none" MLP: a layer without an MLP and without its second norm (Mamba's block), as
model/layers/none.h defines it: pre-norm y = x + mixer(norm1(x)), post-norm y = norm1(x +
mixer(x)). model.py's Layer makes neither ln2 nor a feed-forward for it."""

from linserve_ref.kind import Kind

KIND = Kind(role="mlp", name="none", params=(), make=lambda d, p: None)
