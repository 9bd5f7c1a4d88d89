"""Corpus split, tokenizer training, and train.py: schedule, batches, validation loss, resume."""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import evaluate  # noqa: E402
import train  # noqa: E402
import train_tokenizer  # noqa: E402
from linserve_ref import corpus, export, training  # noqa: E402
from linserve_ref.config import normalize_config  # noqa: E402
from linserve_ref.model import LinearTransformer  # noqa: E402
from linserve_ref.text_tokenizer import ByteTokenizer, SentencePieceTokenizer  # noqa: E402


def quiet(fn, *args):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args)


class CorpusTest(unittest.TestCase):
    def test_split_of_the_bundled_corpus(self):
        text = corpus.read_text(corpus.DEFAULT_CORPUS)
        self.assertEqual(len(text), 1115394)
        self.assertTrue(text.startswith("First Citizen:\n"))
        train_text, val = corpus.split(text)
        self.assertEqual(len(train_text), 1003854)
        self.assertEqual(train_text + val, text)
        self.assertEqual(corpus.split("abcdefghijk"), ("abcdefghi", "jk"))


class TokenizerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.train_text, cls.val = corpus.split(corpus.read_text(corpus.DEFAULT_CORPUS))
        cls.model_bytes = train_tokenizer.train(cls.train_text, 1500)
        cls.dir = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls.dir.name, "t.model")
        with open(cls.path, "wb") as f:
            f.write(cls.model_bytes)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_deterministic(self):
        self.assertEqual(train_tokenizer.train(self.train_text, 1500), self.model_bytes)

    def test_round_trips_text_and_bytes(self):
        tok = SentencePieceTokenizer(self.path)
        self.assertEqual(tok.vocab_size, 1500)
        self.assertEqual((tok.processor.bos_id(), tok.processor.eos_id()), (1, 2))
        for text in (self.val, "  two spaces\n\n\nnewlines", "unseen: é ☃ 日本"):
            ids = tok.encode(text)
            self.assertEqual(tok.decode(ids), text)
            self.assertEqual(b"".join(tok.token_bytes(i) for i in ids), text.encode())
        self.assertIn("\n", [tok.processor.id_to_piece(i) for i in tok.encode("a\nb")])

    def test_vocab_size_bounds(self):
        with self.assertRaisesRegex(ValueError, r"--vocab-size 999 is outside \[1000, 4000\]"):
            train_tokenizer.train(self.train_text, 999)


class ScheduleAndBatchesTest(unittest.TestCase):
    def test_learning_rate(self):
        lr = [training.learning_rate(s, 100, 10, 1.0, 0.1) for s in range(100)]
        self.assertAlmostEqual(lr[0], 0.1)
        self.assertAlmostEqual(lr[9], 1.0)
        self.assertAlmostEqual(lr[10], 1.0)
        self.assertTrue(all(a >= b for a, b in zip(lr[10:], lr[11:])))
        self.assertAlmostEqual(training.learning_rate(100, 100, 10, 1.0, 0.1), 0.1)
        self.assertAlmostEqual(lr[55], 0.1 + 0.9 * 0.5, places=6)  # half way: the mid-point

    def test_batches(self):
        tokens = torch.arange(1000)
        make = lambda: training.BatchSampler(  # noqa: E731
            tokens, 16, 64, torch.Generator().manual_seed(3), bos_id=5000, bos_fraction=0.5,
            max_start_position=1 << 20, zero_start_fraction=0.25)
        inputs, targets, positions = make().next()
        self.assertEqual(tuple(inputs.shape), (64, 16))
        self.assertTrue(torch.equal(inputs[:, 1:], targets[:, :-1]))
        bos_rows = inputs[:, 0] == 5000
        self.assertTrue(0 < bos_rows.sum() < 64)
        self.assertTrue(torch.equal(inputs[~bos_rows, 0] + 1, targets[~bos_rows, 0]))
        self.assertTrue(((positions >= 0) & (positions < 1 << 20)).all())
        self.assertTrue(0 < (positions == 0).sum() < 64)
        self.assertGreater(positions.max(), 1 << 18)
        again = make().next()
        self.assertTrue(all(torch.equal(a, b) for a, b in zip((inputs, targets, positions),
                                                              again)))
        with self.assertRaisesRegex(ValueError, "--context 1000 needs more than 1001"):
            training.BatchSampler(tokens, 1000, 1, torch.Generator(), 0, 0.0, 1, 0.0)


class ValidationLossTest(unittest.TestCase):
    def test_window_losses_match_a_token_by_token_computation(self):
        torch.manual_seed(0)
        model = LinearTransformer(dict(vocab_size=258, d_model=16, n_layers=2, n_heads=2,
                                       head_dim=8, d_ff=32, bos_token_id=256)).double()
        tokens = torch.randint(0, 256, (23,))
        losses = training.window_losses(model, tokens, window=10, bos_id=256,
                                        start_position=7, chunk_size=3, batch_size=2)
        expected = []
        with torch.no_grad():
            for begin in range(0, 23, 10):
                state = model.init_state(1, position=7)
                previous = 256
                for t in tokens[begin:begin + 10].tolist():
                    logits, state = model.step(torch.tensor([previous]), state)
                    expected.append(-F.log_softmax(logits[0].float(), -1)[t].item())
                    previous = t
        torch.testing.assert_close(losses, torch.tensor(expected, dtype=torch.float64))

    def test_nats_per_char_divides_by_characters(self):
        torch.manual_seed(0)
        model = LinearTransformer(dict(vocab_size=258, d_model=8, n_layers=1, n_heads=1,
                                       head_dim=8, d_ff=8, bos_token_id=256))
        text = "héllo wörld"
        npc, losses = training.nats_per_char(model, ByteTokenizer(258), text, 4, 256)
        self.assertEqual(losses.numel(), len(text.encode()))
        self.assertAlmostEqual(npc, losses.sum().item() / len(text))


class TrainScriptTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.corpus = os.path.join(self.dir.name, "corpus.txt")
        with open(self.corpus, "w", encoding="utf-8") as f:
            f.write(corpus.read_text(corpus.DEFAULT_CORPUS)[:6000])

    def tearDown(self):
        self.dir.cleanup()

    def args(self, out, *extra, single_block=True):
        block = ["--n-layers", "2", "--n-heads", "2", "--d-ff", "32"] if single_block else []
        return ["--corpus", self.corpus, "--out", out, "--d-model", "16", *block,
                "--context", "24", "--batch-size", "3", "--chunk-size", "7", "--steps", "6",
                "--warmup", "2", "--eval-every", "3", "--eval-chars", "200", "--log-every", "2",
                "--threads", "1", "--seed", "5", *extra]

    def read(self, out):
        with open(os.path.join(out, "model.safetensors"), "rb") as f:
            return f.read()

    def test_writes_a_model_directory_and_resume_is_exact(self):
        straight = os.path.join(self.dir.name, "straight")
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            train.main(self.args(straight))
        self.assertRegex(log.getvalue(), r"step 4/6 \| loss \d+\.\d+ .* tok/s \| elapsed .* "
                                         r"\| left ")
        self.assertIn("step 6: validation", log.getvalue())
        model = export.load_model_dir(straight)
        self.assertEqual(model.config["tokenizer"], "byte")
        self.assertEqual(model.config["norm"], "pre")
        self.assertEqual((model.config["bos_token_id"], model.config["eos_token_id"]),
                         (256, 257))

        resumed = os.path.join(self.dir.name, "resumed")
        ckpt = os.path.join(self.dir.name, "ckpt.pt")
        quiet(train.main, self.args(resumed, "--checkpoint", ckpt, "--stop-after", "3"))
        self.assertFalse(os.path.exists(resumed))
        quiet(train.main, self.args(resumed, "--checkpoint", ckpt, "--resume"))
        self.assertEqual(self.read(resumed), self.read(straight))

        other = os.path.join(self.dir.name, "other")
        quiet(train.main, self.args(other, "--seed", "6"))
        self.assertNotEqual(self.read(other), self.read(straight))

    def test_export_checkpoint_writes_the_model_of_a_run_cut_short(self):
        out = os.path.join(self.dir.name, "cut")
        ckpt = os.path.join(self.dir.name, "ckpt.pt")
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            train.main(self.args(out, "--checkpoint", ckpt, "--export-checkpoint"))
        quiet(train.main, self.args(out, "--checkpoint", ckpt, "--stop-after", "3"))
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            train.main(self.args(out, "--checkpoint", ckpt, "--export-checkpoint"))
        self.assertIn("from step 3/6", log.getvalue())
        saved = torch.load(ckpt)["model"]
        model = export.load_model_dir(out)
        self.assertEqual(set(model.state_dict()), set(saved))
        for name, tensor in model.state_dict().items():
            self.assertTrue(torch.equal(tensor, saved[name]), name)
        with self.assertRaisesRegex(SystemExit, "different arguments: --lr"):
            quiet(train.main, self.args(out, "--checkpoint", ckpt, "--export-checkpoint",
                                        "--lr", "0.1"))

    def test_resume_refuses_different_arguments(self):
        out = os.path.join(self.dir.name, "m")
        ckpt = os.path.join(self.dir.name, "ckpt.pt")
        quiet(train.main, self.args(out, "--checkpoint", ckpt, "--stop-after", "2"))
        with self.assertRaisesRegex(SystemExit, "different arguments: --lr"):
            quiet(train.main, self.args(out, "--checkpoint", ckpt, "--resume", "--lr", "0.1"))

    def test_sentencepiece_tokenizer(self):
        tokenizer = os.path.join(self.dir.name, "t.model")
        quiet(train_tokenizer.main, ["--out", tokenizer, "--vocab-size", "1000"])
        out = os.path.join(self.dir.name, "sp")
        quiet(train.main, self.args(out, "--tokenizer", tokenizer, "--steps", "2",
                                    "--weights-dtype", "bfloat16", "--position", "sinusoidal",
                                    "--max-start-position", "5000"))
        model = export.load_model_dir(out)
        self.assertEqual(model.config["tokenizer"], "sentencepiece")
        self.assertEqual(model.config["position"], "sinusoidal")
        self.assertEqual(model.config["vocab_size"], 1000)
        with open(os.path.join(out, "tokenizer.model"), "rb") as a, open(tokenizer, "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_layers_config(self):
        layers = os.path.join(self.dir.name, "layers.json")
        norm = {"kind": "rms_norm", "eps": 1e-5}
        mlp = {"kind": "gated_mlp", "d_ff": 24}
        mixers = [{"kind": "short_conv", "d_inner": 16},
                  {"kind": "taylor_linear_attention", "n_heads": 2, "feature_dim": 4,
                   "head_dim": 8},
                  {"kind": "sliding_window_attention", "n_heads": 2, "head_dim": 8, "window": 5}]
        with open(layers, "w") as f:
            json.dump({"layers": [{"mixer": m, "norm": norm, "mlp": mlp} for m in mixers],
                       "final_norm": norm}, f)
        out = os.path.join(self.dir.name, "layered")
        base = self.args(out, "--steps", "2", "--layers-config", layers, single_block=False)
        quiet(train.main, base)
        model = export.load_model_dir(out)
        self.assertEqual([layer["mixer"]["kind"] for layer in model.config["layers"]],
                         [m["kind"] for m in mixers])
        self.assertEqual(model.config["final_norm"]["kind"], "rms_norm")
        self.assertEqual(model.config["n_layers"], 3)
        with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit):
            train.main(base + ["--d-ff", "32"])
        self.assertIn("--layers-config replaces --d-ff", err.getvalue())
        with open(layers, "w") as f:
            json.dump({"layers": [], "extra": 1}, f)
        with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit):
            train.main(base)
        self.assertIn("unknown field(s) ['extra']", err.getvalue())

    def test_default_model_is_the_bundled_recipe(self):
        args = train.parse_args(["--out", "x"])
        cfg = train.model_config(args, 2048, "sentencepiece", 1, 2)
        with open(os.path.join(corpus.REPO_ROOT, "models", "shakespeare-linear",
                               "config.json")) as f:
            self.assertEqual(normalize_config(cfg), json.load(f))

    def test_bad_arguments(self):
        with contextlib.redirect_stderr(io.StringIO()):
            bad = [["--d-model", "15"], ["--steps", "0"], ["--resume"]]
            if not torch.cuda.is_available():
                bad.append(["--device", "cuda"])
            for extra in bad:
                with self.subTest(extra=extra), self.assertRaises(SystemExit):
                    train.main(self.args(os.path.join(self.dir.name, "x"), *extra))


class EvaluateScriptTest(unittest.TestCase):
    def test_reports_every_window_and_start_position(self):
        with tempfile.TemporaryDirectory() as d:
            text_path = os.path.join(d, "corpus.txt")
            with open(text_path, "w", encoding="utf-8") as f:
                f.write(corpus.read_text(corpus.DEFAULT_CORPUS)[:3000])
            torch.manual_seed(0)
            model = LinearTransformer(dict(vocab_size=258, d_model=16, n_layers=1, n_heads=2,
                                           head_dim=8, d_ff=16, bos_token_id=256,
                                           position="sinusoidal"))
            export.save_model_dir(model, os.path.join(d, "m"))
            out = os.path.join(d, "r.json")
            quiet(evaluate.main, ["--model", os.path.join(d, "m"), "--corpus", text_path,
                                  "--context", "8", "--multiples", "1", "4",
                                  "--start-positions", "0", "100", "--slice-start", "10",
                                  "--slice-chars", "90", "--threads", "1", "--json", out])
            with open(out) as f:
                rows = json.load(f)["results"]
            _, val = corpus.split(corpus.read_text(text_path))
            self.assertEqual([(r["window"], r["start_position"]) for r in rows],
                             [(8, 0), (32, 0), (8, 100), (32, 100)])
            expected, losses = training.nats_per_char(
                export.load_model_dir(os.path.join(d, "m")), ByteTokenizer(258), val[10:100],
                32, 256, start_position=100)
            self.assertAlmostEqual(rows[3]["nats_per_char"], expected, places=6)
            self.assertEqual(rows[3]["chars"], 90)
            self.assertAlmostEqual(rows[3]["quarters"][0],
                                   losses[torch.arange(90) % 32 < 8].mean().item(), places=6)
            self.assertNotAlmostEqual(rows[0]["nats_per_char"], rows[2]["nats_per_char"])


if __name__ == "__main__":
    unittest.main()
