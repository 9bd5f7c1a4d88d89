"""Multi-query associative recall (MQAR), the recall task of the Zoology and Based papers
(Arora, Eyuboglu et al., "Zoology: measuring and improving recall in efficient language models",
2023; "Simple linear attention language models balance the recall-throughput tradeoff", 2024).

An example of seq_len tokens over a vocabulary of V ids: first num_kv_pairs key-value pairs
k1 v1 k2 v2 … (keys distinct, drawn from [1, V/2); values distinct, drawn from [V/2, V)), then
the query region, where every key appears once more as a query, at an even offset 2·gap from the
region's start. The gaps are distinct and drawn with P(gap = g) ∝ (g + 1)^(a − 1), a = power_a
(0.01 in the papers: most queries come soon after the pairs, a few far later). The other tokens
of the query region are random ids of [0, V) (the papers' random_non_queries). The target at a
query's position is its key's value (the model, having read the query, must predict it); every
other target is IGNORE. Accuracy counts the query positions whose arg-max prediction is the
value.
"""

import torch

IGNORE = -100


def power_law(space, power_a):
    """P(gap = g) for g in [0, space): (g + 1)^(a − 1), normalised, in float64."""
    p = torch.arange(1, space + 1, dtype=torch.float64) ** (power_a - 1.0)
    return p / p.sum()


def generate(num_examples, seq_len, num_kv_pairs, vocab_size, generator, power_a=0.01):
    """(inputs [N, seq_len], targets [N, seq_len]) int64, reproducible from `generator`."""
    if seq_len % 2:
        raise ValueError(f"seq_len = {seq_len} must be even")
    if num_kv_pairs < 1 or 4 * num_kv_pairs > seq_len:
        raise ValueError(f"num_kv_pairs = {num_kv_pairs} must be in [1, seq_len / 4 = "
                         f"{seq_len // 4}] (the pairs and as many query slots)")
    if num_kv_pairs > vocab_size // 2 - 1:
        raise ValueError(f"vocab_size = {vocab_size} has fewer than num_kv_pairs = "
                         f"{num_kv_pairs} keys in [1, {vocab_size // 2})")
    if not 0.0 < power_a <= 1.0:
        raise ValueError(f"power_a = {power_a} is outside (0, 1]")
    n, half = num_kv_pairs, vocab_size // 2
    context = 2 * n
    keys = torch.stack([torch.randperm(half - 1, generator=generator)[:n] + 1
                        for _ in range(num_examples)])
    values = torch.stack([torch.randperm(vocab_size - half, generator=generator)[:n] + half
                          for _ in range(num_examples)])
    space = (seq_len - context) // 2
    gaps = torch.multinomial(power_law(space, power_a).expand(num_examples, space), n,
                             replacement=False, generator=generator)
    inputs = torch.randint(0, vocab_size, (num_examples, seq_len), generator=generator)
    inputs[:, 0:context:2] = keys
    inputs[:, 1:context:2] = values
    query_positions = context + 2 * gaps
    inputs.scatter_(1, query_positions, keys)
    targets = torch.full_like(inputs, IGNORE)
    targets.scatter_(1, query_positions, values)
    return inputs, targets


def key_distances(inputs, targets, num_kv_pairs):
    """For every query position (target != IGNORE), in row-major order: how many tokens back its
    key's first occurrence lies (query position − key position), int64 [Q]."""
    rows, cols = (targets != IGNORE).nonzero(as_tuple=True)
    pair_keys = inputs[rows, :2 * num_kv_pairs:2]                  # [Q, n]
    pair = (pair_keys == inputs[rows, cols].unsqueeze(1)).int().argmax(dim=1)
    return cols - 2 * pair


def correct(logits, targets):
    """Per query position (target != IGNORE), row-major: whether the arg-max is the target."""
    mask = targets != IGNORE
    return logits.argmax(dim=-1)[mask] == targets[mask]
