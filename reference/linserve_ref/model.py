"""The decoder of docs/architecture.md §4, executable: the semantics the C++ backends match.

Two forward forms compute the same function:
  * `forward`: chunked parallel from a given state. For linear_attention, within a chunk the
    causal product is a masked matmul (φ(Q)φ(K)ᵀ ⊙ tril) V; across chunks the carried (S, z)
    supplies the past. Each other mixer kind's module gives its own (short_conv.py,
    taylor_linear_attention.py, sliding_window_attention.py).
  * `step`: the recurrence, one token: for linear_attention S += φ(k)vᵀ, z += φ(k),
    o = φ(q)ᵀS / (φ(q)ᵀz + eps).

The recurrent state is kept in float32 whatever the weight dtype, as the C++ backends do;
a model converted to float64 (the golden data) keeps it in float64 so that the reference itself
adds no float32 rounding. Module and buffer names are the tensor names of model.safetensors
(model/format/weights.h), so `state_dict()` is the file's contents. The layers are the config's
layer list (config.layer_list), each component made by its kind (kinds.py).
"""

import dataclasses
import math

import torch
from torch import nn

from linserve_ref import kinds
from linserve_ref.config import final_norm, layer_list, mixer_state_floats, normalize_config


@dataclasses.dataclass
class State:
    """Recurrent state of a batch of sequences.

    layers: per layer, its mixer's state, a tuple of tensors with the batch first (for
    linear_attention: S [B, H, F, Dh] and z [B, H, F]); position: [B] int64, the number of
    tokens each row has consumed (the position index of its next token).
    """
    layers: list
    position: torch.Tensor

    @property
    def batch_size(self):
        return self.position.shape[0]


def sinusoidal_embedding(positions, d_model, dtype):
    """pe[p, 2i] = sin(p / 10000^(2i/d)), pe[p, 2i+1] = cos(p / 10000^(2i/d)), in float64."""
    j = torch.arange(d_model, dtype=torch.float64, device=positions.device)
    denom = torch.pow(torch.tensor(10000.0, dtype=torch.float64), 2.0 * torch.div(
        j, 2, rounding_mode="floor") / d_model)
    angle = positions.to(torch.float64).unsqueeze(-1) / denom
    even = (torch.arange(d_model, device=positions.device) % 2) == 0
    return torch.where(even, torch.sin(angle), torch.cos(angle)).to(dtype)


# A component of `role` with parameters p (config.layer_list's): its kind's module (kinds.py).
# A mixer module has a `prefix` (its tensors' name under "layers.{i}."), init_state(batch,
# dtype, device) -> its state (a tuple of tensors, batch first), forward(x, state, positions,
# chunk_size) (the parallel form, chunk by chunk from the given state), step(x, state,
# positions) (the recurrence), and flatten(state, b) / unflatten(flat): its slice of the C++
# StateBlob layout. An MLP module has a `prefix` too.
def _make(role, d, p):
    return kinds.find(role, p["kind"]).make(d, p)


class Block(nn.Module):
    """One layer: norm1 → mixer → residual, norm2 → mlp → residual (pre- or post-norm). The mixer
    and the MLP are registered under their kind's prefix ("attn", "conv"; "ffn", "mlp"). With the
    MLP kind "none" the layer has neither norm2 nor an MLP: y = h."""

    def __init__(self, cfg, layer):
        super().__init__()
        d = cfg["d_model"]
        self.pre_norm = cfg["norm"] == "pre"
        self.ln1 = _make("norm", d, layer["norm"])
        mixer = _make("mixer", d, layer["mixer"])
        self.mixer_name = mixer.prefix
        self.add_module(mixer.prefix, mixer)
        mlp = _make("mlp", d, layer["mlp"])
        self.mlp_name = None if mlp is None else mlp.prefix
        if mlp is not None:
            self.ln2 = _make("norm", d, layer["norm"])
            self.add_module(mlp.prefix, mlp)

    @property
    def mixer(self):
        return self._modules[self.mixer_name]

    @property
    def feed_forward(self):
        return self._modules[self.mlp_name]

    def _residual(self, x, attend):
        if self.pre_norm:
            a, state = attend(self.ln1(x))
            h = x + a
            if self.mlp_name is None:
                return h, state
            return h + self.feed_forward(self.ln2(h)), state
        a, state = attend(x)
        h = self.ln1(x + a)
        if self.mlp_name is None:
            return h, state
        return self.ln2(h + self.feed_forward(h)), state

    def forward(self, x, state, positions, chunk_size):
        return self._residual(x, lambda u: self.mixer(u, state, positions, chunk_size))

    def step(self, x, state, positions):
        return self._residual(x, lambda u: self.mixer.step(u, state, positions))


class LinearTransformer(nn.Module):
    """The decoder. `config` is a config.json dict (checked and completed on construction)."""

    def __init__(self, config):
        super().__init__()
        cfg = normalize_config(config)
        self.config = cfg
        self.embed = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        if cfg["position"] == "learned":
            self.pos_embed = nn.Embedding(cfg["max_position"], cfg["d_model"])
        self.layers = nn.ModuleList(Block(cfg, layer) for layer in layer_list(cfg))
        if cfg["norm"] == "pre":
            self.final_norm = _make("norm", cfg["d_model"], final_norm(cfg))
        if not cfg["tie_embeddings"]:
            self.lm_head = nn.Linear(cfg["d_model"], cfg["vocab_size"], bias=False)
        self.reset_parameters()

    def reset_parameters(self):
        """GPT-2 initialisation: N(0, 0.02), residual outputs scaled by 1/sqrt(2 n_layers).
        short_conv's depthwise kernel keeps nn.Conv1d's default, U(−1/√K, 1/√K), as the Based
        authors' BaseConv does (their GPT initialisation touches only linear and embedding
        weights). A mixer module with `reset_kind_parameters()` then sets its own (the delta-rule
        kinds: fla's initialisation of the decay, the convolutions and the output norm)."""
        residual_std = 0.02 / math.sqrt(2 * self.config["n_layers"])
        for name, p in self.named_parameters():
            if name.endswith("conv.weight"):
                bound = 1.0 / math.sqrt(p.shape[1])
                nn.init.uniform_(p, -bound, bound)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            elif ".ln" in name or name.startswith("final_norm"):
                nn.init.ones_(p)
            elif name.endswith(("o_proj.weight", "out_proj.weight", "fc2.weight")):
                nn.init.normal_(p, std=residual_std)
            else:
                nn.init.normal_(p, std=0.02)
        for layer in self.layers:
            mixer = getattr(layer, layer.mixer_name)
            if hasattr(mixer, "reset_kind_parameters"):
                mixer.reset_kind_parameters()

    def num_parameters(self):
        """Parameters and stored buffers: the tensors of model.safetensors."""
        return sum(t.numel() for t in self.state_dict().values())

    @property
    def state_dtype(self):
        """float32, or float64 when the model itself is float64."""
        dtype = self.embed.weight.dtype
        return torch.float64 if dtype == torch.float64 else torch.float32

    def init_state(self, batch_size, position=0):
        """Zeroed state; `position` (int or [B] tensor) is where each row's positions start."""
        dev = self.embed.weight.device
        pos = torch.as_tensor(position, dtype=torch.int64, device=dev)
        return State(layers=[layer.mixer.init_state(batch_size, self.state_dtype, dev)
                             for layer in self.layers],
                     position=pos.expand(batch_size).clone())

    def _embed(self, ids, positions):
        x = self.embed(ids)
        kind = self.config["position"]
        if kind == "learned":
            limit = self.config["max_position"]
            if int(positions.max()) >= limit:
                raise ValueError(
                    f"position {int(positions.max())} is beyond max_position = {limit} of the "
                    f"learned position table")
            x = x + self.pos_embed(positions)
        elif kind == "sinusoidal":
            x = x + sinusoidal_embedding(positions, self.config["d_model"], x.dtype)
        return x

    def _logits(self, h):
        if self.config["norm"] == "pre":
            h = self.final_norm(h)
        head = self.embed.weight if self.config["tie_embeddings"] else self.lm_head.weight
        return torch.matmul(h, head.t())

    def forward(self, ids, state=None, chunk_size=None):
        """ids [B, T] -> (logits [B, T, V], new state). chunk_size None: one chunk of T."""
        b, t = ids.shape
        if state is None:
            state = self.init_state(b)
        chunk = t if chunk_size is None else int(chunk_size)
        if chunk < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        positions = state.position.unsqueeze(1) + torch.arange(t, device=ids.device)
        x = self._embed(ids, positions)
        slices = []
        for layer, mixer_state in zip(self.layers, state.layers):
            x, mixer_state = layer(x, mixer_state, positions, chunk)
            slices.append(mixer_state)
        return self._logits(x), State(slices, state.position + t)

    def step(self, ids, state):
        """ids [B] -> (logits [B, V], new state): the recurrent form, one token per row."""
        x = self._embed(ids, state.position)
        slices = []
        for layer, mixer_state in zip(self.layers, state.layers):
            x, mixer_state = layer.step(x, mixer_state, state.position)
            slices.append(mixer_state)
        return self._logits(x), State(slices, state.position + 1)


def state_to_flat(model, state, b):
    """Row b of `state` in the C++ StateBlob layout: the layers' slices, bottom layer first
    (linear_attention: per head, S (F×Dh) then z (F); the other kinds: their modules' docstrings).

    Returns (float32 1-D tensor, position).
    """
    flat = torch.cat([layer.mixer.flatten(mixer_state, b)
                      for layer, mixer_state in zip(model.layers, state.layers)])
    return flat.to(torch.float32), int(state.position[b])


def state_from_flat(model, flat, position):
    """Inverse of state_to_flat for a batch of one (e.g. a state exported by the server)."""
    mixers = [layer.mixer for layer in model.layers]
    sizes = [mixer_state_floats(layer["mixer"]) for layer in layer_list(model.config)]
    expected = sum(sizes)
    flat = torch.as_tensor(flat)
    if flat.numel() != expected:
        raise ValueError(f"state has {flat.numel()} floats; this model needs {expected}")
    flat = flat.to(model.state_dtype)
    return State([mixer.unflatten(part) for mixer, part in zip(mixers, torch.split(flat, sizes))],
                 torch.tensor([position], dtype=torch.int64))
