"""Based-shaped layer lists for the tests and the golden data: the authors' pattern of short
convolutions with a Taylor linear-attention layer and a sliding-window layer every five."""


def conv(d_inner=32, kernel_size=3, **params):
    return {"kind": "short_conv", "d_inner": d_inner, "kernel_size": kernel_size, **params}


def taylor(n_heads=2, feature_dim=4, head_dim=8, **params):
    return {"kind": "taylor_linear_attention", "n_heads": n_heads, "feature_dim": feature_dim,
            "head_dim": head_dim, **params}


def swa(n_heads=2, head_dim=8, window=5, **params):
    return {"kind": "sliding_window_attention", "n_heads": n_heads, "head_dim": head_dim,
            "window": window, **params}


def layer(mixer, d_ff=24, activation="silu", mlp_bias=False, eps=1e-5):
    return {"mixer": mixer, "norm": {"kind": "rms_norm", "eps": eps},
            "mlp": {"kind": "gated_mlp", "d_ff": d_ff, "activation": activation,
                    "bias": mlp_bias}}


def based_config(mixers, vocab_size=300, d_model=16, **fields):
    """A pre-norm, position-free, tied model of the given mixers (rms_norm, gated_mlp silu)."""
    return {"vocab_size": vocab_size, "d_model": d_model, "norm": "pre", "position": "none",
            "tie_embeddings": True, "layers": [layer(m) for m in mixers],
            "final_norm": {"kind": "rms_norm", "eps": 1e-5}, **fields}


def based_pattern(n_layers=6, window=5):
    """The authors' layout scaled down: layer 1 (mod 5) Taylor, layer 2 (mod 5) sliding window,
    the rest short convolutions."""
    mixers = []
    for i in range(n_layers):
        if i % 5 == 1:
            mixers.append(taylor())
        elif i % 5 == 2:
            mixers.append(swa(window=window))
        else:
            mixers.append(conv())
    return mixers
