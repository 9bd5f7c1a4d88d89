"""convert_fla.py: a random checkpoint in flash-linear-attention's Gated DeltaNet, DeltaNet, GLA,
RetNet or Mamba-2 layout (fla_authors.py, an independent transcription of their models at bc3b101) converts into a model
directory whose logits, from our reference in both its parallel and its recurrent form, equal
fla's model's within 1e-12 of the largest logit for a 300-token prompt (both in float64 from the
same stored weights), with the same recurrent state ([v, k] in fla's layout for Gated DeltaNet and
GLA, [k, v] in ours; RetNet's in the last token's frame in ours, R_−t times fla's);
every option the mapping reads changes the result as theirs does; greedy decoding picks the same
64 tokens, and the C++ CPU backend (linserve-generate, with --generate-bin) writes the same
text; every refusal names its key.

    test_convert_fla.py [--generate-bin PATH/linserve-generate] [unittest args]
"""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import convert_fla  # noqa: E402
import fla_authors  # noqa: E402
import generate  # noqa: E402
from linserve_ref import checkpoint, corpus, export  # noqa: E402
from linserve_ref.sampling import SamplingParams  # noqa: E402
from linserve_ref.text_tokenizer import load_tokenizer  # noqa: E402

TOLERANCE = 1e-12
TOKENS = 300
TOKENIZER_DIR = os.path.join(corpus.REPO_ROOT, "models", "shakespeare-linear")
GENERATE_BIN = None


def run_main(args):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = convert_fla.main(args)
    return rc, err.getvalue()


def relative(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def turn_rows(s, m, base=10000.0):
    """RetNet's state s [..., K, V] turned by RoPE's R_m on its rows: pairs (c, c + K/2) by
    m · base^(−2c/K)."""
    k = s.shape[-2]
    angle = m * base ** (-2.0 * torch.arange(k // 2, dtype=torch.float64) / k)
    cos, sin = angle.cos()[:, None], angle.sin()[:, None]
    a, b = s[..., :k // 2, :], s[..., k // 2:, :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-2)


class ConvertFlaTest(unittest.TestCase):
    def setUp(self):
        torch.set_num_threads(2)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def convert(self, config, seed=1, **kwargs):
        """(fla's model, our model from the converted directory, its path)."""
        src = os.path.join(self.tmp.name, f"src{seed}")
        dst = os.path.join(self.tmp.name, f"dst{seed}")
        theirs = fla_authors.make_checkpoint(src, config, seed, **kwargs)
        rc, err = run_main(["--checkpoint", src, "--out", dst, "--tokenizer", TOKENIZER_DIR])
        self.assertEqual(rc, 0, err)
        ours = export.load_model_dir(dst, dtype=torch.float64)
        return theirs.eval(), ours.eval(), dst

    def check_parity(self, config, seed=1, chunk_size=64, **kwargs):
        theirs, ours, _ = self.convert(config, seed, **kwargs)
        tokens = torch.randint(0, config["vocab_size"], (1, TOKENS),
                               generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            expected, fla_states = theirs(tokens)
            parallel, state = ours(tokens, chunk_size=chunk_size)
            recurrent = []
            step_state = ours.init_state(1)
            for t in range(TOKENS):
                logits, step_state = ours.step(tokens[:, t], step_state)
                recurrent.append(logits)
        self.assertLessEqual(relative(parallel, expected), TOLERANCE)
        self.assertLessEqual(relative(torch.stack(recurrent, dim=1), expected), TOLERANCE)
        v_first = config["model_type"] in ("gated_deltanet", "gla")  # fla's state_v_first
        for layer, fla_state in enumerate(fla_states):
            s = state.layers[layer][0]  # [B, HV, K, V]
            expected_s = fla_state.transpose(-1, -2) if v_first else fla_state
            if config["model_type"] == "retnet":  # ours is turned back to the last token's frame
                expected_s = turn_rows(expected_s, -(TOKENS - 1))
            if config["model_type"] == "mamba2":  # fla's [head_dim, state_size], ours [N, P]
                expected_s = fla_state.transpose(-1, -2)
            self.assertLessEqual(relative(s, expected_s), TOLERANCE, layer)
        return theirs, ours

    def test_logits_and_state_equal_fla(self):
        self.check_parity(fla_authors.small_config())

    def test_every_option_the_mapping_reads(self):
        variants = [
            dict(num_v_heads=4),  # value heads sharing q/k heads
            dict(use_gate=False, allow_neg_eigval=True),
            dict(tie_word_embeddings=True, intermediate_size=96, hidden_act="silu"),
            dict(conv_size=2, expand_v=1.5, norm_eps=1e-5, hidden_ratio=2),
        ]
        for i, overrides in enumerate(variants):
            with self.subTest(**overrides):
                self.check_parity(fla_authors.small_config(**overrides), seed=10 + i,
                                  chunk_size=7)

    def test_delta_net_logits_and_state_equal_fla(self):
        variants = [
            {},
            dict(use_beta=False, use_gate=True, allow_neg_eigval=True),
            dict(expand_k=0.5, expand_v=2, conv_size=2, tie_word_embeddings=True,
                 use_output_norm=False),
        ]
        for i, overrides in enumerate(variants):
            with self.subTest(**overrides):
                self.check_parity(fla_authors.small_delta_net_config(**overrides), seed=30 + i,
                                  chunk_size=16)

    def test_gla_logits_and_state_equal_fla(self):
        variants = [
            {},
            dict(use_short_conv=True, conv_size=3, clamp_min=-0.02),
            dict(use_output_gate=False, expand_k=1, expand_v=2, norm_eps=1e-5),
            dict(fuse_norm=False, hidden_act="silu", elementwise_affine=False,
                 tie_word_embeddings=True, clamp_min=-1e5, use_gk=False),
        ]
        for i, overrides in enumerate(variants):
            with self.subTest(**overrides):
                self.check_parity(fla_authors.small_gla_config(**overrides), seed=40 + i,
                                  chunk_size=16)

    def test_retnet_logits_and_state_equal_fla(self):
        variants = [
            {},
            dict(use_output_gate=False, expand_k=0.5, norm_eps=1e-5, hidden_ratio=4),
            dict(fuse_norm=False, hidden_act="silu", elementwise_affine=False,
                 tie_word_embeddings=True, use_short_conv=True),
        ]
        for i, overrides in enumerate(variants):
            with self.subTest(**overrides):
                self.check_parity(fla_authors.small_retnet_config(**overrides), seed=50 + i,
                                  chunk_size=64 if i == 0 else 9)

    def test_the_retnet_checks_see_every_option(self):
        """As below for retention: its RoPE base, output gate and norm eps, set otherwise on the
        same tensors, move the logits away from fla's."""
        base = fla_authors.small_retnet_config()
        theirs, ours, dst = self.convert(base, seed=7)
        tokens = torch.randint(0, base["vocab_size"], (1, 40),
                               generator=torch.Generator().manual_seed(7))
        with open(os.path.join(dst, "config.json"), encoding="utf-8") as f:
            converted = json.load(f)
        with torch.no_grad():
            expected, _ = theirs(tokens)
        for key, value in [("rope_base", 500.0), ("use_output_gate", False), ("norm_eps", 1e-2)]:
            with self.subTest(key=key):
                cfg = json.loads(json.dumps(converted))
                cfg["layers"][0]["mixer"][key] = value
                state = dict(ours.state_dict())
                if key == "use_output_gate":
                    state = {k: v for k, v in state.items() if "layers.0.attn.g_proj" not in k}
                wrong = ours.__class__(cfg).double()
                wrong.load_state_dict(state)
                with torch.no_grad():
                    got, _ = wrong(tokens, chunk_size=16)
                self.assertGreater(relative(got, expected), 1e-3)

    def test_retnet_refusals(self):
        base = fla_authors.small_retnet_config(num_hidden_layers=1)
        for overrides, pattern in [
            (dict(feature_map="relu"), "'feature_map' = 'relu' is not supported"),
            (dict(num_kv_heads=2), "'num_kv_heads' = 2 is not supported"),
            (dict(expand_k=0.3), "'expand_k' = 0.3 times hidden_size 64 is not a whole"),
            (dict(num_heads=64, expand_v=1), "head_k_dim 1 that 'expand_k' and 'num_heads' give "
                                             "is odd"),
            (dict(clamp_min=-1.0), "unknown key 'clamp_min'"),  # GLA's, not RetNet's
        ]:
            with self.subTest(**{k: str(v) for k, v in overrides.items()}):
                self.refused({**base, **overrides}, pattern, model=base)
        self.refused(base, "missing tensor 'model.layers.0.attn.g_proj.weight'",
                     lambda t: t.pop("model.layers.0.attn.g_proj.weight"), model=base)

    def test_mamba2_logits_and_state_equal_fla(self):
        variants = [
            {},
            dict(n_groups=1, D_has_hdim=True, norm_before_gate=True, dt_limit=[0.01, 0.5],
                 chunk_size=32, conv_kernel=3),
            dict(rmsnorm=False, use_bias=True, use_conv_bias=False, tie_word_embeddings=True,
                 n_groups=4, norm_eps=1e-3),
        ]
        for i, overrides in enumerate(variants):
            with self.subTest(**{k: str(v) for k, v in overrides.items()}):
                self.check_parity(fla_authors.small_mamba2_config(**overrides), seed=60 + i,
                                  chunk_size=64 if i == 0 else 11)

    def test_the_mamba2_checks_see_every_option(self):
        """As below for mamba2: the norm on the other side of the gate, the dt ceiling, one group
        instead of two and the norm's eps, set otherwise on the same tensors, move the logits away
        from fla's."""
        base = fla_authors.small_mamba2_config(dt_limit=[0.0, 0.5])
        theirs, ours, dst = self.convert(base, seed=8)
        tokens = torch.randint(0, base["vocab_size"], (1, 40),
                               generator=torch.Generator().manual_seed(8))
        with open(os.path.join(dst, "config.json"), encoding="utf-8") as f:
            converted = json.load(f)
        with torch.no_grad():
            expected, _ = theirs(tokens)
        for key, value in [("norm_before_gate", True), ("dt_limit_max", 1e30), ("norm_eps", 1e-2),
                           ("n_groups", 1)]:
            with self.subTest(key=key):
                cfg = json.loads(json.dumps(converted))
                cfg["layers"][0]["mixer"][key] = value
                state = dict(ours.state_dict())
                if key == "n_groups":  # B and C of both groups read as one group's: 2 × wider
                    cfg["layers"][0]["mixer"]["state_size"] = 32
                wrong = ours.__class__(cfg).double()
                wrong.load_state_dict(state)
                with torch.no_grad():
                    got, _ = wrong(tokens, chunk_size=16)
                self.assertGreater(relative(got, expected), 1e-3)

    def test_mamba2_refusals(self):
        base = fla_authors.small_mamba2_config(num_hidden_layers=1)
        for overrides, pattern in [
            (dict(hidden_act="gelu"), "'hidden_act' = 'gelu' is not supported"),
            (dict(dt_limit=[0.5, 0.1]), "'dt_limit' = \\[0.5, 0.1\\] must be \\[min, max\\]"),
            (dict(dt_limit=[float("-inf"), 1.0]), "'dt_limit' = \\[-inf, 1.0\\] must be"),
            (dict(num_heads=4), "'num_heads' = 4 is not expand · hidden_size / head_dim = 8"),
            (dict(n_groups=3), "'n_groups' = 3 does not divide the 8 heads"),
            (dict(head_dim=24), "'head_dim' = 24 does not divide the 128 channels"),
            (dict(use_gate=True), "unknown key 'use_gate'"),
        ]:
            with self.subTest(**{k: str(v) for k, v in overrides.items()}):
                self.refused({**base, **overrides}, pattern, model=base)
        for edit, pattern in [
            (lambda t: t["backbone.layers.0.mixer.A_log"].__setitem__(2, float("nan")),
             "tensor 'backbone.layers.0.mixer.A_log' holds nan at \\[2\\]; the decay and the "
             "skip must be finite"),
            (lambda t: t.pop("backbone.layers.0.mixer.norm.weight"),
             "missing tensor 'backbone.layers.0.mixer.norm.weight'"),
            (lambda t: t.update({"backbone.layers.0.mlp.up_proj.weight": torch.zeros(8, 64)}),
             "tensor 'backbone.layers.0.mlp.up_proj.weight' is not understood"),
        ]:
            with self.subTest(pattern=pattern):
                self.refused(base, pattern, edit, model=base)

    def test_the_gla_checks_see_every_option(self):
        """As below for gated_linear_attention: each option the mapping reads, set otherwise on
        the same tensors, moves the logits away from fla's."""
        base = fla_authors.small_gla_config(use_short_conv=True, clamp_min=-0.02)
        theirs, ours, dst = self.convert(base, seed=5)
        tokens = torch.randint(0, base["vocab_size"], (1, 40),
                               generator=torch.Generator().manual_seed(5))
        with open(os.path.join(dst, "config.json"), encoding="utf-8") as f:
            converted = json.load(f)
        with torch.no_grad():
            expected, _ = theirs(tokens)
        for key, value in [("gate_logit_normalizer", 1.0), ("clamp_min", -1e4),
                           ("use_output_gate", False), ("norm_eps", 1e-2), ("conv_size", 3)]:
            with self.subTest(key=key):
                cfg = json.loads(json.dumps(converted))
                cfg["layers"][0]["mixer"][key] = value
                state = dict(ours.state_dict())
                if key == "use_output_gate":
                    state = {k: v for k, v in state.items() if "layers.0.attn.g_proj" not in k}
                if key == "conv_size":  # the same taps, a shorter window (the first three)
                    for conv in "qkv":
                        name = f"layers.0.attn.{conv}_conv1d.weight"
                        state[name] = state[name][:, 1:]
                wrong = ours.__class__(cfg).double()
                wrong.load_state_dict(state)
                with torch.no_grad():
                    got, _ = wrong(tokens, chunk_size=16)
                self.assertGreater(relative(got, expected), 1e-3)

    def test_gla_refusals(self):
        base = fla_authors.small_gla_config(num_hidden_layers=1)
        for overrides, pattern in [
            (dict(feature_map="relu"), "'feature_map' = 'relu' is not supported"),
            (dict(num_kv_heads=2), "'num_kv_heads' = 2 is not supported"),
            (dict(clamp_min=0.5), "'clamp_min' = 0.5 must be a number <= 0 or null"),
            (dict(clamp_min="-1"), "'clamp_min' = '-1' must be a number"),
            (dict(expand_k=0.3), "'expand_k' = 0.3 times hidden_size 64 is not a whole"),
            (dict(num_heads=3), "'num_heads' = 3 does not divide the 32 channels"),
            (dict(hidden_act="gelu"), "'hidden_act' = 'gelu' is not swish"),
            (dict(gate_logit_normalizer=8), "unknown key 'gate_logit_normalizer'"),
            (dict(head_dim=16), "unknown key 'head_dim'"),  # Gated DeltaNet's, not GLA's
        ]:
            with self.subTest(**{k: str(v) for k, v in overrides.items()}):
                self.refused({**base, **overrides}, pattern, model=base)
        for edit, pattern in [
            (lambda t: t["model.layers.0.attn.gk_proj.1.bias"].__setitem__(3, float("nan")),
             "tensor 'model.layers.0.attn.gk_proj.1.bias' holds nan at \\[3\\]; the key gate "
             "must be finite"),
            (lambda t: t.pop("model.layers.0.attn.g_norm_swish_gate.weight"),
             "missing tensor 'model.layers.0.attn.g_norm_swish_gate.weight'"),
            (lambda t: t.update({"model.layers.0.attn.q_conv1d.weight": torch.zeros(32, 1, 4)}),
             "tensor 'model.layers.0.attn.q_conv1d.weight' is not understood"),
            (lambda t: t.update({"model.layers.0.attn.gk_proj.0.weight": torch.zeros(8, 64)}),
             "'model.layers.0.attn.gk_proj.0.weight' has shape \\[8, 64\\], the config implies "
             "\\[16, 64\\]"),
        ]:
            with self.subTest(pattern=pattern):
                self.refused(base, pattern, edit, model=base)

    def test_the_checks_see_every_option(self):
        """The parity check can fail: a model converted from one config but run as another
        differs from fla's, for each option the mapping reads."""
        base = fla_authors.small_config(num_v_heads=4)
        theirs, ours, dst = self.convert(base, seed=3)
        tokens = torch.randint(0, base["vocab_size"], (1, 40),
                               generator=torch.Generator().manual_seed(3))
        with open(os.path.join(dst, "config.json"), encoding="utf-8") as f:
            converted = json.load(f)
        for key, value in [("allow_neg_eigval", True), ("use_gate", False),
                           ("norm_eps", 1e-2), ("n_heads", 4)]:
            with self.subTest(key=key):
                cfg = json.loads(json.dumps(converted))
                mixer = cfg["layers"][0]["mixer"]
                mixer[key] = value
                if key == "n_heads":  # the same tensors, q and k cut into other heads
                    mixer["head_k_dim"] = 8
                wrong = ours.__class__(cfg).double()
                state = {k: v for k, v in ours.state_dict().items()}
                if key == "use_gate":
                    state = {k: v for k, v in state.items() if "layers.0.attn.g_proj" not in k}
                wrong.load_state_dict(state)
                with torch.no_grad():
                    expected, _ = theirs(tokens)
                    got, _ = wrong(tokens, chunk_size=16)
                self.assertGreater(relative(got, expected), 1e-3)

    def test_file_layouts_and_dtypes(self):
        for weights, dtype in [("pytorch_model.bin", torch.float32),
                               ("model.safetensors", torch.bfloat16)]:
            with self.subTest(weights=weights, dtype=dtype):
                config = fla_authors.small_config(num_hidden_layers=1)
                self.check_parity(config, seed=20, weights=weights, dtype=dtype)

    def test_greedy_tokens_equal_for_64_steps_and_linserve_generate_writes_them(self):
        for config in (fla_authors.small_config(), fla_authors.small_gla_config(),
                       fla_authors.small_retnet_config(), fla_authors.small_mamba2_config()):
            with self.subTest(model_type=config["model_type"]):
                self.check_greedy(config)

    def check_greedy(self, config):
        theirs, ours, dst = self.convert(config, seed=6)
        tokenizer = load_tokenizer(ours.config, dst)
        prompt = "ROMEO:\nBut soft, what light through yonder window breaks?\n"
        ids = [ours.config["bos_token_id"]] + tokenizer.encode(prompt)
        fla_tokens, gap = fla_authors.greedy(theirs, ids, 64)
        self.assertGreater(gap, 1e-4)  # no near tie that fp32 rounding could flip
        params = SamplingParams(seed=0, temperature=0)
        ours_float = export.load_model_dir(dst).eval()
        got, text = generate.generate(ours_float, tokenizer, prompt, params, max_new_tokens=64,
                                      stop_at_eos=False)
        self.assertEqual(got, fla_tokens)
        if GENERATE_BIN is None:
            self.skipTest("no --generate-bin given: the C++ comparison is skipped")
        cmd = [GENERATE_BIN, f"--model={dst}", f"--prompt={prompt}", "--temperature=0",
               "--max_new_tokens=64", "--stop_at_eos=false", "--threads=1"]
        out = subprocess.run(cmd, capture_output=True, check=True).stdout
        self.assertEqual(out.decode("utf-8"), text)

    def test_gpt2_format_tokenizer(self):
        src = os.path.join(self.tmp.name, "src")
        fla_authors.make_checkpoint(src, fla_authors.small_config(num_hidden_layers=1), 1)
        vocab = {chr(0x100 + i): i for i in range(256)}
        with open(os.path.join(src, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f)
        with open(os.path.join(src, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n")
        dst = os.path.join(self.tmp.name, "dst")
        rc, err = run_main(["--checkpoint", src, "--out", dst])  # the checkpoint's own files
        self.assertEqual(rc, 0, err)
        with open(os.path.join(dst, "config.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["tokenizer"], "gpt2_bpe")
        self.assertTrue(os.path.exists(os.path.join(dst, "merges.txt")))

    def refused(self, config, pattern, edit=None, model=None):
        """convert_fla.py refuses, matching `pattern`, a checkpoint of `model` (default: a
        one-layer Gated DeltaNet) whose config.json is `config` and whose tensors `edit` changed."""
        src = os.path.join(self.tmp.name, "bad")
        fla_authors.make_checkpoint(
            src, model if model is not None else fla_authors.small_config(num_hidden_layers=1), 1)
        with open(os.path.join(src, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
        if edit is not None:
            path = os.path.join(src, "model.safetensors")
            from linserve_ref import safetensors_io  # noqa: PLC0415
            tensors, _ = safetensors_io.load_file(path)
            edit(tensors)
            safetensors_io.save_file(tensors, path)
        rc, err = run_main(["--checkpoint", src, "--out", os.path.join(self.tmp.name, "o"),
                            "--tokenizer", TOKENIZER_DIR])
        self.assertEqual(rc, 1)
        self.assertRegex(err, pattern)

    def test_config_refusals(self):
        base = fla_authors.small_config(num_hidden_layers=1)
        for overrides, pattern in [
            (dict(model_type="llama"), "'model_type' = 'llama' is not an fla family"),
            (dict(use_short_conv=False), "'use_short_conv' = False is not supported"),
            (dict(attn={"layers": [0], "num_heads": 2}), "'attn' = .*\\(hybrid models"),
            (dict(attnres_block_size=2), "'attnres_block_size' = 2"),
            (dict(hidden_act="gelu"), "'hidden_act' = 'gelu' is not swish"),
            (dict(num_v_heads=3), "'num_v_heads' = 3 is not a multiple of num_heads = 2"),
            (dict(expand_v=1.1), "'expand_v' = 1.1 times head_dim 16 is not a whole"),
            (dict(conv_bias=True), "unknown key 'conv_bias'"),
            (dict(vocab_size=100), "'model.embeddings.weight' has shape \\[2048, 64\\], the "
                                   "config implies \\[100, 64\\]"),
            (dict(dt_limit=[0.0, float("inf")]), "unknown key 'dt_limit'"),
            (dict(expand_k=1), "unknown key 'expand_k'"),  # DeltaNet's, not Gated DeltaNet's
        ]:
            with self.subTest(**{k: str(v) for k, v in overrides.items()}):
                self.refused({**base, **overrides}, pattern)

    def test_the_delta_net_checks_see_every_option(self):
        """As above for delta_net: each option the mapping reads, set otherwise on the same
        tensors, moves the logits away from fla's."""
        base = fla_authors.small_delta_net_config(expand_k=0.5)
        theirs, ours, dst = self.convert(base, seed=4)
        tokens = torch.randint(0, base["vocab_size"], (1, 40),
                               generator=torch.Generator().manual_seed(4))
        with open(os.path.join(dst, "config.json"), encoding="utf-8") as f:
            converted = json.load(f)
        with torch.no_grad():
            expected, _ = theirs(tokens)
        for key, value in [("allow_neg_eigval", True), ("use_beta", False), ("norm_eps", 1e-2),
                           ("n_heads", 2)]:
            with self.subTest(key=key):
                cfg = json.loads(json.dumps(converted))
                mixer = cfg["layers"][0]["mixer"]
                mixer[key] = value
                state = dict(ours.state_dict())
                if key == "use_beta":
                    state = {k: v for k, v in state.items() if "layers.0.attn.b_proj" not in k}
                if key == "n_heads":  # the same q/k/v widths cut into 2 heads instead of 4
                    mixer["head_k_dim"], mixer["head_v_dim"] = 16, 32
                    state = {k: v for k, v in state.items()
                             if not k.startswith(("layers.0.attn.b_proj", "layers.0.attn.o_norm"))}
                    state["layers.0.attn.b_proj.weight"] = torch.zeros(2, 64, dtype=torch.float64)
                    state["layers.0.attn.o_norm.weight"] = torch.ones(32, dtype=torch.float64)
                wrong = ours.__class__(cfg).double()
                wrong.load_state_dict(state)
                with torch.no_grad():
                    got, _ = wrong(tokens, chunk_size=16)
                self.assertGreater(relative(got, expected), 1e-3)

    def test_delta_net_config_refusals(self):
        base = fla_authors.small_delta_net_config(num_hidden_layers=1)
        for overrides, pattern in [
            (dict(qk_activation="relu"), "'qk_activation' = 'relu' is not supported"),
            (dict(qk_norm="sum"), "'qk_norm' = 'sum' is not supported"),
            (dict(expand_k=0.3), "'expand_k' = 0.3 times hidden_size 64 is not a whole"),
            (dict(num_heads=3), "'num_heads' = 3 does not divide the 64 channels that "
                                "'expand_k' gives"),
            (dict(expand_v=float("inf")), "'expand_v' = inf must be a finite number > 0"),
            (dict(hidden_ratio="4"), "'hidden_ratio' = '4' must be a finite number > 0"),
            (dict(num_v_heads=4), "unknown key 'num_v_heads'"),
            (dict(use_short_conv=False), "'use_short_conv' = False is not supported"),
        ]:
            with self.subTest(**{k: str(v) for k, v in overrides.items()}):
                self.refused({**base, **overrides}, pattern, model=base)

    def test_tensor_refusals(self):
        base = fla_authors.small_config(num_hidden_layers=1)
        for edit, pattern in [
            (lambda t: t.pop("model.layers.0.attn.A_log"),
             "missing tensor 'model.layers.0.attn.A_log'"),
            (lambda t: t.pop("model.layers.0.attn.g_proj.weight"),
             "missing tensor 'model.layers.0.attn.g_proj.weight'"),
            (lambda t: t.update({"model.layers.0.attn.q_conv1d.bias": torch.zeros(32)}),
             "tensor 'model.layers.0.attn.q_conv1d.bias' is not understood"),
            (lambda t: t["model.layers.0.attn.A_log"].__setitem__(1, float("nan")),
             "tensor 'model.layers.0.attn.A_log' holds nan at \\[1\\]; the decay must be finite"),
            (lambda t: t["model.layers.0.attn.dt_bias"].__setitem__(0, float("inf")),
             "tensor 'model.layers.0.attn.dt_bias' holds inf at \\[0\\]"),
            (lambda t: t.update({"model.layers.0.attn.k_conv1d.weight": torch.zeros(32, 4)}),
             "'model.layers.0.attn.k_conv1d.weight' has shape \\[32, 4\\], the config implies "
             "\\[32, 1, 4\\]"),
        ]:
            with self.subTest(pattern=pattern):
                self.refused(base, pattern, edit)
        tied = {**base, "tie_word_embeddings": True}

        def different_head(t):
            t["lm_head.weight"] = t["model.embeddings.weight"] + 1

        self.refused(tied, "'lm_head.weight' differs from the embedding", different_head)

    def test_a_checkpoint_without_a_tokenizer_serves_token_ids(self):
        src = os.path.join(self.tmp.name, "src")
        dst = os.path.join(self.tmp.name, "o")
        config = fla_authors.small_config(num_hidden_layers=1)
        theirs = fla_authors.make_checkpoint(src, config, 1).eval()
        rc, err = run_main(["--checkpoint", src, "--out", dst])
        self.assertEqual(rc, 0, err)
        self.assertIn("tokenizer \"none\"", err)
        with open(os.path.join(dst, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        self.assertEqual(cfg["tokenizer"], "none")
        self.assertEqual(sorted(os.listdir(dst)), ["config.json", "model.safetensors"])
        # An explicit --tokenizer that holds none is still an error.
        rc, err = run_main(["--checkpoint", src, "--out", dst, "--tokenizer", src])
        self.assertEqual(rc, 1)
        self.assertIn("--tokenizer " + src + ": holds no tokenizer", err)
        self.assertIsInstance(checkpoint.ConvertError("x"), ValueError)
        # linserve-generate takes the prompt as ids and writes fla's greedy ids.
        prompt = [5, 17, 300, 2]
        fla_tokens, gap = fla_authors.greedy(theirs, [cfg["bos_token_id"]] + prompt, 16)
        self.assertGreater(gap, 1e-4)  # no near tie that fp32 rounding could flip
        if GENERATE_BIN is None:
            self.skipTest("no --generate-bin given: the C++ comparison is skipped")
        cmd = [GENERATE_BIN, f"--model={dst}", f"--token_ids={','.join(map(str, prompt))}",
               "--temperature=0", "--max_new_tokens=16", "--stop_at_eos=false", "--threads=1"]
        out = subprocess.run(cmd, capture_output=True, check=True, text=True).stdout
        self.assertEqual([int(t) for t in out.split()], fla_tokens)
        text = subprocess.run(cmd[:2] + ["--prompt=hi"], capture_output=True, text=True)
        self.assertEqual(text.returncode, 1)
        self.assertIn("--prompt: this model has no tokenizer", text.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--generate-bin", default=None)
    known, rest = parser.parse_known_args()
    GENERATE_BIN = known.generate_bin
    unittest.main(argv=[sys.argv[0]] + rest)
