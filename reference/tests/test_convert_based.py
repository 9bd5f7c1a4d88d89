"""convert_based.py: a random checkpoint in the Based authors' layout (based_authors.py, an
independent transcription of their parallel forward) converts into a model directory whose
logits, from our reference in both its parallel and its recurrent form, equal the authors'
model's within 1e-12 of the largest logit (both in float64 from the same float32 weights); every
option the mapping reads changes the result as theirs does; greedy decoding picks the same 256
tokens; every refusal names its key."""

import contextlib
import copy
import io
import json
import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import based_authors  # noqa: E402
import convert_based  # noqa: E402
from linserve_ref import checkpoint, export, safetensors_io  # noqa: E402

TOLERANCE = 1e-12
TOKENS = 40  # beyond the sliding window (window_size 12 -> a window of 7 tokens)


def write_tokenizer(directory, vocab_size=300, as_tokenizer_json=False):
    """A small GPT-2-format tokenizer: the 256 byte symbols, a few merges, <|endoftext|> last."""
    os.makedirs(directory, exist_ok=True)
    vocab = {chr(0x100 + i): i for i in range(256)}
    merges = []
    for i in range(vocab_size - 257):
        a, b = chr(0x100 + 33 + i // 16), chr(0x100 + 65 + i % 16)
        vocab[a + b] = len(vocab)
        merges.append(f"{a} {b}")
    vocab["<|endoftext|>"] = len(vocab)
    if as_tokenizer_json:
        data = {"model": {"type": "BPE", "vocab": vocab, "merges": merges},
                "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>"}]}
        with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(data, f)
    else:
        with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f)
        with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    return vocab["<|endoftext|>"]


def run_main(args):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = convert_based.main(args)
    return rc, err.getvalue()


class ConvertTest(unittest.TestCase):
    def setUp(self):
        torch.set_num_threads(1)
        self.tmp = tempfile.TemporaryDirectory()
        self.tokenizer = os.path.join(self.tmp.name, "gpt2")
        self.eos = write_tokenizer(self.tokenizer)

    def tearDown(self):
        self.tmp.cleanup()

    def convert(self, config=None, name="ckpt", **kwargs):
        src = os.path.join(self.tmp.name, name)
        dst = os.path.join(self.tmp.name, name + "-linserve")
        based_authors.make_checkpoint(src, config, **kwargs)
        rc, err = run_main(["--checkpoint", src, "--out", dst, "--tokenizer", self.tokenizer])
        self.assertEqual(rc, 0, err)
        return src, dst, err

    def authors_logits(self, src, config, ids):
        """Their model in float64 from the weights as stored."""
        model = based_authors.AuthorsBased(config).double()
        files = [f for f in os.listdir(src) if f in checkpoint.WEIGHT_FILES]
        path = os.path.join(src, files[0])
        if files[0] == "model.safetensors":
            state, _ = safetensors_io.load_file(path)
        else:
            state = torch.load(path)
        # inv_freq stays the exact one computed at construction (the file rounds it; the
        # converter checks it against the exact one).
        state = {k.removeprefix("model."): v.double() for k, v in state.items()
                 if "metrics" not in k and k != "transformer.decay.decay"
                 and not k.endswith("inv_freq")}
        model.load_state_dict(state, strict=False)
        with torch.no_grad():
            return model(ids)[..., :config["vocab_size"]]

    def assert_same_logits(self, src, dst, config):
        ids = torch.randint(0, config["vocab_size"], (2, TOKENS),
                            generator=torch.Generator().manual_seed(7))
        expected = self.authors_logits(src, config, ids)
        ours = export.load_model_dir(dst, dtype=torch.float64)
        with torch.no_grad():
            parallel, _ = ours(ids, chunk_size=9)
            state = ours.init_state(2)
            steps = []
            for t in range(TOKENS):
                logits, state = ours.step(ids[:, t], state)
                steps.append(logits)
        scale = expected.abs().max().item()
        for name, got in (("parallel", parallel), ("recurrent", torch.stack(steps, dim=1))):
            error = (got - expected).abs().max().item() / scale
            self.assertLess(error, TOLERANCE, f"{name} form: relative error {error:.2e}")
        return ours

    def test_based_360m_shape_scaled_down(self):
        config = based_authors.small_config()
        src, dst, _ = self.convert(config)
        ours = self.assert_same_logits(src, dst, config)
        cfg = ours.config
        self.assertEqual([layer["mixer"]["kind"] for layer in cfg["layers"]],
                         ["short_conv", "taylor_linear_attention", "sliding_window_attention",
                          "short_conv", "taylor_linear_attention", "sliding_window_attention"])
        swa = cfg["layers"][2]["mixer"]
        self.assertEqual((swa["window"], swa["rotary_dim"], swa["n_heads"]), (7, 16, 4))
        conv = cfg["layers"][0]["mixer"]
        self.assertEqual((conv["d_inner"], conv["kernel_size"], conv["conv_bias"]),
                         (128, 3, False))
        self.assertEqual(cfg["layers"][1]["mixer"]["eps"], 1e-12)
        self.assertEqual(cfg["layers"][0]["mlp"], {"kind": "gated_mlp", "d_ff": 256,
                                                   "activation": "silu", "bias": False})
        self.assertEqual((cfg["vocab_size"], cfg["tokenizer"], cfg["eos_token_id"]),
                         (300, "gpt2_bpe", self.eos))
        self.assertEqual(sorted(os.listdir(dst)),
                         ["config.json", "merges.txt", "model.safetensors", "vocab.json"])
        weights, _ = safetensors_io.load_file(os.path.join(dst, "model.safetensors"))
        self.assertEqual(tuple(weights["embed.weight"].shape), (300, 64))
        self.assertEqual({w.dtype for w in weights.values()}, {torch.float32})

    def test_greedy_tokens_identical_for_256_steps(self):
        """Our recurrent greedy decoding; the authors' parallel forward over the result (one pass
        gives every prefix's logits, the model being causal) picks the same token at each step."""
        config = based_authors.small_config()

        def flatter(state):  # a small tied embedding: logits less peaked, greedy keeps moving
            state["transformer.embeddings.word_embeddings.weight"] *= 0.05
            state["lm_head.weight"] = state["transformer.embeddings.word_embeddings.weight"]

        src, dst, _ = self.convert(config, edit=flatter)
        ours = export.load_model_dir(dst, dtype=torch.float64)
        prompt = torch.randint(0, 300, (1, 8), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            logits, state = ours(prompt)
            token = logits[:, -1].argmax(-1)
            generated = [token]
            for _ in range(255):
                logits, state = ours.step(token, state)
                token = logits.argmax(-1)
                generated.append(token)
        sequence = torch.cat([prompt, torch.stack(generated, dim=1)], dim=1)
        theirs = self.authors_logits(src, config, sequence[:, :-1])[0, 7:].argmax(-1)
        self.assertEqual(theirs.tolist(), sequence[0, 8:].tolist())
        self.assertGreater(len(set(sequence[0, 8:].tolist())), 50)  # not a short cycle

    def test_variants(self):
        base = based_authors.small_config()
        variants = {
            "layer_norm_and_biases": dict(rms_norm=False, qkv_proj_bias=True,
                                          out_proj_bias=True, mlp_fc1_bias=True,
                                          mlp_fc2_bias=True),
            "glu_untied_partial_rotary": dict(activation_function="glu",
                                              tie_word_embeddings=False,
                                              rotary_emb_fraction=0.5, rotary_emb_base=500.0),
            "geglu_conv_bias_kernel_4": dict(
                activation_function="geglu", n_inner=300,
                mixer={**base["mixer"], "use_cuda": True, "kernel_size": 4, "expand_proj": 2}),
            "odd_window_and_head_dim": dict(
                alt_mixer_2={**base["alt_mixer_2"], "window_size": 5},
                alt_mixer={**base["alt_mixer"], "head_dim": 8, "feature_dim": 3,
                           "feature_map": {"_target_": based_authors.TAYLOR, "input_dim": 3},
                           "eps": 1e-4}),
        }
        for name, overrides in variants.items():
            with self.subTest(variant=name):
                config = {**copy.deepcopy(base), **overrides}
                src, dst, _ = self.convert(config, name=name)
                self.assert_same_logits(src, dst, config)

    def test_file_layouts_and_dtypes(self):
        config = based_authors.small_config()

        def hf_prefix(state):
            for k in list(state):
                state["model." + k] = state.pop(k)
            state["train_metrics.num-tokens.count"] = torch.zeros(1)

        def head_only(state):  # a safetensors conversion keeps one name of the shared tensor
            del state["transformer.embeddings.word_embeddings.weight"]

        for name, kwargs in {
            "safetensors_bf16": dict(weights="model.safetensors", dtype=torch.bfloat16),
            "safetensors_head_only": dict(weights="model.safetensors", edit=head_only),
            "no_inv_freq_hf_prefix": dict(inv_freq=False, edit=hf_prefix),
        }.items():
            with self.subTest(layout=name):
                src, dst, _ = self.convert(config, name=name, **kwargs)
                self.assert_same_logits(src, dst, config)
                weights, _ = safetensors_io.load_file(os.path.join(dst, "model.safetensors"))
                expected = torch.bfloat16 if "bf16" in name else torch.float32
                self.assertEqual({w.dtype for w in weights.values()}, {expected})

    def test_fla_eps_and_fixed_decay(self):
        base = based_authors.small_config()
        config = {**base, "fixed_decay": True,
                  "alt_mixer": {**base["alt_mixer"], "parallel_implementation": "fla_parallel"}}

        def decay(state):
            state["transformer.decay.decay"] = torch.zeros(4)

        _, dst, err = self.convert(config, edit=decay)
        self.assertIn("fixed_decay", err)
        self.assertEqual(export.load_config(dst)["layers"][1]["mixer"]["eps"], 1e-6)

    def test_without_rotary_emb_fraction_no_rotary_and_a_note(self):
        config = based_authors.small_config()
        del config["rotary_emb_fraction"]
        src, dst, err = self.convert(config)
        self.assertIn("no rotary_emb_fraction", err)
        self.assertEqual(export.load_config(dst)["layers"][2]["mixer"]["rotary_dim"], 0)
        self.assert_same_logits(src, dst, config)

    def test_tokenizer_json(self):
        write_tokenizer(os.path.join(self.tmp.name, "tj"), as_tokenizer_json=True)
        src = os.path.join(self.tmp.name, "ckpt")
        based_authors.make_checkpoint(src)
        dst = os.path.join(self.tmp.name, "out")
        rc, err = run_main(["--checkpoint", src, "--out", dst, "--tokenizer",
                            os.path.join(self.tmp.name, "tj")])
        self.assertEqual(rc, 0, err)
        self.assertIn("tokenizer.json", os.listdir(dst))
        self.assertEqual(export.load_config(dst)["eos_token_id"], self.eos)


class RefusalTest(unittest.TestCase):
    """Each refusal, through convert() (the mapping) or main() (the files)."""

    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        model = based_authors.AuthorsBased(based_authors.small_config())
        cls.tensors = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def refuse(self, pattern, config_overrides=None, edit=None):
        config = {**based_authors.small_config(), **(config_overrides or {})}
        tensors = dict(self.tensors)
        if edit is not None:
            edit(tensors)
        with self.assertRaisesRegex(convert_based.ConvertError, pattern):
            convert_based.convert(config, tensors)

    def test_the_original_converts(self):
        cfg, out = convert_based.convert(based_authors.small_config(), dict(self.tensors))
        self.assertEqual(cfg["n_layers"], 6)
        self.assertIn("layers.2.attn.v_proj.weight", out)

    def test_config_refusals(self):
        base = based_authors.small_config()
        cases = [
            ({"alt_mixer": {**base["alt_mixer"], "parallel_implementation": "tk"}},
             "'alt_mixer.parallel_implementation' = 'tk'"),
            ({"rotary_emb_interleaved": True}, "'rotary_emb_interleaved'"),
            ({"rotary_emb_scale_base": 512}, "'rotary_emb_scale_base'"),
            ({"scale_attn_weights": False}, "'scale_attn_weights'"),
            ({"scale_attn_by_inverse_layer_idx": True}, "'scale_attn_by_inverse_layer_idx'"),
            ({"n_head_kv": 2}, "'n_head_kv'"),
            ({"prenorm": False}, "'prenorm'"),
            ({"parallel_block": True}, "'parallel_block'"),
            ({"fused_mlp": True}, "'fused_mlp'"),
            ({"mlp_type": "alt"}, "'mlp_type'"),
            ({"qkv_proj_bias": True}, "'qkv_proj_bias'"),
            ({"mlp_fc1_bias": True}, "'mlp_fc1_bias'"),
            ({"activation_function": "gelu_new"}, "'activation_function'"),
            ({"max_position_embeddings": 2048}, "'max_position_embeddings'"),
            ({"mixer": {**base["mixer"], "_target_": "based.models.mixers.hyena.Hyena"}},
             "'mixer._target_'"),
            ({"alt_mixer_2": {**base["alt_mixer_2"], "_target_": "flash_attn.MHA"}},
             "'alt_mixer_2._target_'"),
            ({"alt_mixer": {**base["alt_mixer"], "feature_map": {"_target_": "x.PosELU"}}},
             "'alt_mixer.feature_map'"),
            ({"alt_mixer": {**base["alt_mixer"], "feature_map": {
                "_target_": based_authors.TAYLOR, "input_dim": 8}}},
             "'alt_mixer.feature_map.input_dim'"),
            ({"alt_mixer": {**base["alt_mixer"], "decay": True}}, "'alt_mixer.decay'"),
            ({"rotary_emb_fraction": 0.3125}, "'rotary_emb_fraction'"),
            ({"mystery_option": 1}, "unknown key 'mystery_option'"),
            ({"head_dim": 8}, "'head_dim' = 8"),
            ({"_target_": "other.Config"}, "'_target_'"),
        ]
        for overrides, pattern in cases:
            with self.subTest(pattern=pattern):
                self.refuse(pattern, overrides)
        config = based_authors.small_config()
        del config["max_position_embeddings"]  # n_positions (2048) then decides
        with self.assertRaisesRegex(convert_based.ConvertError, "'n_positions'\\) = 2048"):
            convert_based.convert(config, dict(self.tensors))
        config = based_authors.small_config()
        del config["n_embd"]
        with self.assertRaisesRegex(convert_based.ConvertError, "missing key 'n_embd'"):
            convert_based.convert(config, dict(self.tensors))

    def test_tensor_refusals(self):
        def extra(t):
            t["transformer.layers.0.mixer.extra.weight"] = torch.zeros(1)

        def missing(t):
            del t["transformer.layers.3.mlp.fc2.weight"]

        def shape(t):
            t["transformer.layers.1.mixer.proj_q.weight"] = torch.zeros(32, 64)

        def untied(t):
            t["lm_head.weight"] = t["lm_head.weight"] + 1.0

        def inv_freq(t):
            t["transformer.layers.2.mixer.rotary_emb.inv_freq"] = \
                t["transformer.layers.2.mixer.rotary_emb.inv_freq"] * 1.01

        for edit, pattern in ((extra, "'transformer.layers.0.mixer.extra.weight' is not"),
                              (missing, "missing tensor 'transformer.layers.3.mlp.fc2.weight'"),
                              (shape, "'transformer.layers.1.mixer.proj_q.weight' has shape"),
                              (untied, "'lm_head.weight' differs"),
                              (inv_freq, "'transformer.layers.2.mixer.rotary_emb.inv_freq'")):
            with self.subTest(pattern=pattern):
                self.refuse(pattern, edit=edit)

    def test_file_refusals(self):
        with tempfile.TemporaryDirectory() as tmp:
            src, tok = os.path.join(tmp, "src"), os.path.join(tmp, "tok")
            based_authors.make_checkpoint(src)
            rc, err = run_main(["--checkpoint", src, "--out", os.path.join(tmp, "o")])
            self.assertEqual(rc, 1)
            self.assertIn("--tokenizer DIR is required", err)
            os.makedirs(tok)
            rc, err = run_main(["--checkpoint", src, "--out", os.path.join(tmp, "o"),
                                "--tokenizer", tok])
            self.assertIn("neither vocab.json + merges.txt nor tokenizer.json", err)
            write_tokenizer(tok, vocab_size=400)
            rc, err = run_main(["--checkpoint", src, "--out", os.path.join(tmp, "o"),
                                "--tokenizer", tok])
            self.assertIn("beyond the model's vocab_size 300", err)
            write_tokenizer(tok)
            os.remove(os.path.join(src, "pytorch_model.bin"))
            rc, err = run_main(["--checkpoint", src, "--out", os.path.join(tmp, "o"),
                                "--tokenizer", tok])
            self.assertEqual(rc, 1)
            self.assertIn("neither model.safetensors nor pytorch_model.bin", err)
            self.assertFalse(os.path.exists(os.path.join(tmp, "o")))


if __name__ == "__main__":
    unittest.main()
