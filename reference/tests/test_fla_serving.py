"""Every flash-linear-attention family serves through linserve's two APIs once convert_fla.py has
converted it: a random checkpoint of each (fla_authors.py: Gated DeltaNet, DeltaNet, GLA, RetNet,
Mamba-2) converts, a linserve process serves the directory, and a greedy completion of 24 tokens
over the OpenAI-compatible HTTP API (POST /v1/completions) and over gRPC (linserve-cli generate)
is the text of fla's own 24 greedy tokens. A checkpoint converted without a tokenizer serves
token ids: the same completion over both APIs, prompt and answer as ids, is fla's 24 greedy ids.

    test_fla_serving.py --server-bin PATH/linserve --cli-bin PATH/linserve-cli [unittest args]
"""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import convert_fla  # noqa: E402
import fla_authors  # noqa: E402
import generate  # noqa: E402
from linserve_ref import corpus, export  # noqa: E402
from linserve_ref.sampling import SamplingParams  # noqa: E402
from linserve_ref.text_tokenizer import load_tokenizer  # noqa: E402

TOKENIZER_DIR = os.path.join(corpus.REPO_ROOT, "models", "shakespeare-linear")
PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?\n"
NEW_TOKENS = 24
TOKEN = "fla-token"
SERVER_BIN = None
CLI_BIN = None

# One small model of each family (two layers: a layer boundary is crossed).
FAMILIES = {
    "gated_deltanet": fla_authors.small_config(num_hidden_layers=2),
    "delta_net": fla_authors.small_delta_net_config(num_hidden_layers=2),
    "gla": fla_authors.small_gla_config(num_hidden_layers=2),
    "retnet": fla_authors.small_retnet_config(num_hidden_layers=2),
    "mamba2": fla_authors.small_mamba2_config(num_hidden_layers=2),
}


class Server:
    """A linserve process serving `model_dir` on free ports, stopped on exit."""

    def __init__(self, model_dir, work):
        self.work = work
        tokens = os.path.join(work, "tokens")
        with open(tokens, "w", encoding="utf-8") as f:
            f.write(f"alice {TOKEN}\n")
        self.ports_file = os.path.join(work, "ports")
        self.log = open(os.path.join(work, "server.log"), "w", encoding="utf-8")
        self.process = subprocess.Popen(
            [SERVER_BIN, f"--model={model_dir}", "--host=127.0.0.1", "--port=0", "--http_port=0",
             "--metrics_port=0", f"--port_file={self.ports_file}",
             f"--auth_tokens_file={tokens}", "--threads=2"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def __enter__(self):
        for _ in range(600):
            if os.path.exists(self.ports_file) and os.path.getsize(self.ports_file) > 0:
                break
            if self.process.poll() is not None:
                raise AssertionError(f"linserve exited with {self.process.returncode}: "
                                     f"{self.server_log()}")
            time.sleep(0.1)
        ports = {}
        with open(self.ports_file, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                ports[key] = value
        self.grpc = f"127.0.0.1:{ports['grpc_port']}"
        self.http = f"http://127.0.0.1:{ports['http_port']}"
        return self

    def __exit__(self, *exc):
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()

    def server_log(self):
        with open(os.path.join(self.work, "server.log"), encoding="utf-8") as f:
            return f.read()[-3000:]

    def http_json(self, path, body=None):
        request = urllib.request.Request(
            self.http + path, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)


class FlaServingTest(unittest.TestCase):
    def setUp(self):
        torch.set_num_threads(2)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_every_family_serves_fla_greedy_text_over_http_and_grpc(self):
        for model_type, config in FAMILIES.items():
            with self.subTest(model_type=model_type):
                self.check_family(model_type, config)

    def check_family(self, model_type, config):
        src = os.path.join(self.tmp.name, f"{model_type}-src")
        dst = os.path.join(self.tmp.name, model_type)
        theirs = fla_authors.make_checkpoint(src, config, seed=3).eval()
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = convert_fla.main(["--checkpoint", src, "--out", dst, "--tokenizer", TOKENIZER_DIR])
        self.assertEqual(rc, 0, err.getvalue())
        ours = export.load_model_dir(dst).eval()
        tokenizer = load_tokenizer(ours.config, dst)
        # fla's greedy tokens, and the reference's text of them.
        ids = [ours.config["bos_token_id"]] + tokenizer.encode(PROMPT)
        fla_tokens, _ = fla_authors.greedy(theirs, ids, NEW_TOKENS)
        got, text = generate.generate(ours, tokenizer, PROMPT, SamplingParams(seed=0, temperature=0),
                                      max_new_tokens=NEW_TOKENS, stop_at_eos=False)
        self.assertEqual(got, fla_tokens)
        work = os.path.join(self.tmp.name, f"{model_type}-server")
        os.makedirs(work)
        with Server(dst, work) as server:
            model_id = server.http_json("/v1/models")["data"][0]["id"]
            completion = server.http_json("/v1/completions", {
                "model": model_id, "prompt": PROMPT, "max_tokens": NEW_TOKENS,
                "temperature": 0, "ignore_eos": True})
            self.assertEqual(completion["choices"][0]["text"], text, server.server_log())
            cli = subprocess.run(
                [CLI_BIN, f"--target={server.grpc}", f"--token={TOKEN}", "generate",
                 f"--max-new-tokens={NEW_TOKENS}", "--temperature=0", "--ignore-eos", PROMPT],
                capture_output=True, text=True, timeout=120)
            self.assertEqual(cli.returncode, 0, cli.stderr + server.server_log())
            self.assertEqual(cli.stdout, text)

    def test_a_checkpoint_without_a_tokenizer_serves_token_ids(self):
        src = os.path.join(self.tmp.name, "src")
        dst = os.path.join(self.tmp.name, "ids")
        theirs = fla_authors.make_checkpoint(src, FAMILIES["mamba2"], seed=5).eval()
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = convert_fla.main(["--checkpoint", src, "--out", dst])
        self.assertEqual(rc, 0, err.getvalue())
        ours = export.load_model_dir(dst).eval()
        self.assertEqual(ours.config["tokenizer"], "none")
        prompt = [int(i) for i in torch.randint(3, 2048, (40,),
                                                generator=torch.Generator().manual_seed(5))]
        fla_tokens, gap = fla_authors.greedy(
            theirs, [ours.config["bos_token_id"]] + prompt, NEW_TOKENS)
        self.assertGreater(gap, 1e-4)  # no near tie that fp32 rounding could flip
        work = os.path.join(self.tmp.name, "server")
        os.makedirs(work)
        with Server(dst, work) as server:
            model_id = server.http_json("/v1/models")["data"][0]["id"]
            body = {"model": model_id, "prompt": prompt, "max_tokens": NEW_TOKENS,
                    "temperature": 0, "ignore_eos": True}
            completion = server.http_json("/v1/completions", body)
            choice = completion["choices"][0]
            self.assertEqual(choice["text"], "")
            self.assertEqual(choice["prompt_token_ids"], prompt)
            self.assertEqual(choice["token_ids"], fla_tokens, server.server_log())
            with self.assertRaises(urllib.error.HTTPError) as refused:
                server.http_json("/v1/completions", {**body, "prompt": "ROMEO:"})
            self.assertEqual(refused.exception.code, 400)
            self.assertIn("no tokenizer", json.load(refused.exception)["error"]["message"])
            cli = subprocess.run(
                [CLI_BIN, f"--target={server.grpc}", f"--token={TOKEN}", "generate",
                 f"--token-ids={','.join(map(str, prompt))}", f"--max-new-tokens={NEW_TOKENS}",
                 "--temperature=0", "--ignore-eos", "--format=jsonl"],
                capture_output=True, text=True, timeout=120)
            self.assertEqual(cli.returncode, 0, cli.stderr + server.server_log())
            ids = [token.get("id", 0) for line in cli.stdout.splitlines()
                   for token in json.loads(line).get("tokens", [])]
            self.assertEqual(ids, fla_tokens)
            info = subprocess.run([CLI_BIN, f"--target={server.grpc}", f"--token={TOKEN}",
                                   "detokenize", "5"], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(info.returncode, 0)
            self.assertIn("no tokenizer", info.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--server-bin", required=True)
    parser.add_argument("--cli-bin", required=True)
    known, rest = parser.parse_known_args()
    SERVER_BIN, CLI_BIN = known.server_bin, known.cli_bin
    unittest.main(argv=[sys.argv[0]] + rest)
