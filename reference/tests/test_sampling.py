"""The sampler mirror: std::mt19937_64 bit for bit, and model/backend/sampler.h's algorithm."""

import contextlib
import io
import math
import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import generate  # noqa: E402
from linserve_ref import export  # noqa: E402
from linserve_ref.model import LinearTransformer  # noqa: E402
from linserve_ref.sampling import MT19937_64, Sampler, SamplingParams  # noqa: E402
from linserve_ref.text_tokenizer import ByteTokenizer  # noqa: E402


class MT19937_64Test(unittest.TestCase):
    def test_matches_libstdcxx(self):
        # Printed by a C++ program: std::mt19937_64 r(seed); outputs 1, 2, 3 and 1000.
        expected = {
            0: ([2947667278772165694, 18301848765998365067, 729919693006235833],
                13588344625309223635),
            42: ([13930160852258120406, 11788048577503494824, 13874630024467741450],
                 3828873268105487008),
            2 ** 64 - 1: ([478026398904862820, 13243134898385798468, 709236020254955927],
                          10740104408641833802),
        }
        for seed, (first, thousandth) in expected.items():
            rng = MT19937_64(seed)
            self.assertEqual([rng(), rng(), rng()], first)
            for _ in range(996):
                rng()
            self.assertEqual(rng(), thousandth)

    def test_standard_check_value(self):
        # C++11 [rand.predef]: the 10000th output of a default-constructed mt19937_64.
        rng = MT19937_64()
        for _ in range(9999):
            rng()
        self.assertEqual(rng(), 9981545732273789042)


def sampler(**kwargs):
    return Sampler(SamplingParams(**kwargs))


class SamplerTest(unittest.TestCase):
    LOGITS = [0.5, 2.0, 2.0, -1.0, 1.5, 0.0]

    def test_greedy_takes_the_lowest_id_of_ties_and_draws_nothing(self):
        s = sampler(temperature=0, seed=3)
        self.assertEqual(s.sample(self.LOGITS), 1)
        self.assertEqual(s.rng(), MT19937_64(3)())  # the stream was not advanced

    def test_penalties(self):
        s = sampler(temperature=0, repetition_penalty=2.0)
        s.observe([1, 2])  # 2.0 -> 1.0; now 4 (1.5) is the maximum
        self.assertEqual(s.sample(self.LOGITS), 4)
        s = sampler(temperature=0, presence_penalty=1.0, frequency_penalty=0.3)
        s.observe([1, 1, 2])  # 1: 2 - 1 - 0.6 = 0.4; 2: 2 - 1 - 0.3 = 0.7; 4 wins
        self.assertEqual(s.sample(self.LOGITS), 4)
        s = sampler(temperature=0, repetition_penalty=0.5)
        s.observe([3])  # negative logits are multiplied: -1 * 0.5 = -0.5
        self.assertEqual(s.sample([-1.0, -2.0, -3.0, -1.0]), 3)
        # The sampled token counts as seen.
        s = sampler(temperature=0, presence_penalty=2.0)
        self.assertEqual([s.sample([1.0, 0.0]) for _ in range(2)], [0, 1])

    def test_draw_walks_ids_in_ascending_order(self):
        seed = 11
        u = (MT19937_64(seed)() >> 11) * 2.0 ** -53
        probs = [math.exp(x) for x in self.LOGITS]
        total = sum(probs)
        cumulative, expected = 0.0, None
        for i, p in enumerate(probs):
            cumulative += p / total
            if cumulative > u:
                expected = i
                break
        self.assertEqual(sampler(seed=seed).sample(self.LOGITS), expected)

    def test_top_k_one_is_greedy(self):
        for seed in range(20):
            self.assertEqual(sampler(top_k=1, seed=seed).sample(self.LOGITS), 1)

    def test_top_p_and_min_p_restrict_the_survivors(self):
        got = {sampler(top_p=0.5, seed=seed).sample(self.LOGITS) for seed in range(200)}
        self.assertEqual(got, {1, 2})  # p(1) = p(2) ~ 0.34: the two together reach 0.5
        got = {sampler(min_p=0.5, seed=seed).sample(self.LOGITS) for seed in range(200)}
        self.assertEqual(got, {1, 2, 4})  # e^1.5 / e^2 = 0.61 >= 0.5; e^0.5 / e^2 < 0.5

    def test_frequencies_follow_the_distribution(self):
        s = sampler(temperature=0.7, seed=5)
        counts = [0] * len(self.LOGITS)
        for _ in range(3000):
            counts[s.sample(self.LOGITS)] += 1
            s.seen_counts.clear()
        weights = [math.exp(x / 0.7) for x in self.LOGITS]
        for c, w in zip(counts, weights):
            self.assertAlmostEqual(c / 3000, w / sum(weights), delta=0.03)

    @staticmethod
    def mask(*allowed, vocab=len(LOGITS)):
        words = [0] * ((vocab + 31) // 32)
        for t in allowed:
            words[t // 32] |= 1 << (t % 32)
        return words

    def test_mask_restricts_greedy_and_draws_to_the_allowed_tokens(self):
        self.assertEqual(sampler(temperature=0).sample(self.LOGITS, self.mask(0, 3, 5)), 0)
        # top_k = 1 keeps the best allowed token; one allowed token is always picked.
        for seed in range(30):
            self.assertEqual(sampler(top_k=1, seed=seed).sample(self.LOGITS, self.mask(3, 4)), 4)
            self.assertEqual(sampler(seed=seed, top_p=0.3).sample(self.LOGITS, self.mask(3)), 3)
        got = {sampler(seed=seed).sample(self.LOGITS, self.mask(0, 3, 5)) for seed in range(300)}
        self.assertEqual(got, {0, 3, 5})

    def test_masked_draw_walks_the_renormalised_allowed_distribution(self):
        allowed = [0, 3, 4]
        for seed in range(50):
            u = (MT19937_64(seed)() >> 11) * 2.0 ** -53
            weights = [math.exp(self.LOGITS[t] - 1.5) for t in allowed]
            cumulative, expected = 0.0, allowed[-1]
            for t, w in zip(allowed, weights):
                cumulative += w / sum(weights)
                if cumulative > u:
                    expected = t
                    break
            self.assertEqual(sampler(seed=seed).sample(self.LOGITS, self.mask(*allowed)),
                             expected)

    def test_mask_bits_past_the_vocabulary_are_ignored(self):
        dirty = self.mask(1, 4)
        dirty[0] |= 0xFFFFFFC0  # tokens 6..31
        for seed in range(30):
            self.assertEqual(sampler(seed=seed).sample(self.LOGITS, dirty),
                             sampler(seed=seed).sample(self.LOGITS, self.mask(1, 4)))

    def test_parameters_are_float32(self):
        self.assertEqual(SamplingParams(top_p=0.9).top_p, 0.8999999761581421)

    def test_validation_names_the_field(self):
        for kwargs, message in [(dict(temperature=-1), "temperature = -1.0 is outside"),
                                (dict(top_p=0), r"top_p = 0.0 is outside \(0, 1\]"),
                                (dict(min_p=1.5), "min_p"), (dict(top_k=-1), "top_k"),
                                (dict(repetition_penalty=0), "repetition_penalty"),
                                (dict(presence_penalty=3), "presence_penalty"),
                                (dict(frequency_penalty=-3), "frequency_penalty")]:
            with self.assertRaisesRegex(ValueError, message):
                sampler(**kwargs)


class GenerateTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.dir = tempfile.TemporaryDirectory()
        model = LinearTransformer(dict(vocab_size=258, d_model=16, n_layers=1, n_heads=2,
                                       head_dim=8, d_ff=32, bos_token_id=256, eos_token_id=257))
        with torch.no_grad():
            model.embed.weight.mul_(50)  # peaky distributions: a few likely tokens
        export.save_model_dir(model, self.dir.name)
        self.model = export.load_model_dir(self.dir.name)
        self.tokenizer = ByteTokenizer(258)

    def tearDown(self):
        self.dir.cleanup()

    def run_cli(self, *args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            generate.main(["--model", self.dir.name, *args])
        return out.getvalue()

    def test_same_seed_same_text_and_mirrors_manual_loop(self):
        params = SamplingParams(temperature=0.8, top_k=40, seed=9)
        ids, text = generate.generate(self.model, self.tokenizer, "To be", params,
                                      max_new_tokens=30, stop_at_eos=False)
        self.assertEqual(len(ids), 30)
        self.assertEqual(self.run_cli("--prompt", "To be", "--seed", "9", "--temperature", "0.8",
                                      "--top_k", "40", "--max-new-tokens", "30",
                                      "--stop_at_eos", "false"), text)
        # By hand: BOS + prompt, one chunked forward, then steps, the same Sampler.
        s = Sampler(params)
        prompt = [256] + list(b"To be")
        s.observe(prompt)
        with torch.no_grad():
            logits, state = self.model(torch.tensor([prompt]))
            logits = logits[0, -1]
            manual = []
            for _ in range(30):
                manual.append(s.sample(logits.tolist()))
                logits, state = self.model.step(torch.tensor([manual[-1]]), state)
                logits = logits[0]
        self.assertEqual(ids, manual)
        other, _ = generate.generate(self.model, self.tokenizer, "To be",
                                     SamplingParams(temperature=0.8, top_k=40, seed=10),
                                     max_new_tokens=30, stop_at_eos=False)
        self.assertNotEqual(ids, other)

    def test_stops_at_eos(self):
        with torch.no_grad():  # make EOS the only likely token
            self.model.embed.weight[257].mul_(0).add_(self.model.final_norm.bias)
            self.model.final_norm.weight.zero_()
            self.model.final_norm.bias.fill_(1.0)
            self.model.embed.weight[257].fill_(100.0)
        ids, text = generate.generate(self.model, self.tokenizer, "a",
                                      SamplingParams(temperature=0), max_new_tokens=5)
        self.assertEqual((ids, text), ([], ""))

    def test_bad_flags_exit_with_a_message(self):
        for args, message in [(["--top-p", "0"], "top_p"),
                              (["--max-new-tokens", "-1"], "max_new_tokens"),
                              (["--seed", "-1"], "seed")]:
            with self.subTest(args=args):
                err = io.StringIO()
                with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
                    generate.main(["--model", self.dir.name, "--prompt", "x", *args])
                self.assertNotEqual(cm.exception.code, 0)
                self.assertIn(message, err.getvalue())
        with self.assertRaisesRegex(SystemExit, "config.json"):
            generate.main(["--model", os.path.join(self.dir.name, "missing"), "--prompt", "x"])


if __name__ == "__main__":
    unittest.main()
