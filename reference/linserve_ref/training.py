"""Pieces of train.py that tests exercise directly: schedule, batches and the validation loss."""

import math

import torch
import torch.nn.functional as F


def learning_rate(step, total_steps, warmup_steps, peak, min_ratio):
    """Linear warm-up to `peak` over warmup_steps, then cosine decay to peak·min_ratio at the end.

    `step` counts from 0; the rate returned is the one used for update number step + 1.
    """
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


class BatchSampler:
    """Random training windows, reproducible from the generator's state.

    Each row is `context` + 1 consecutive tokens w: inputs w[:-1], targets w[1:]. A fraction of
    rows (bos_fraction) has its first input replaced by BOS, so the model learns both to start
    a text after BOS and to pick up mid-text. Each row starts at a random position index:
    0 with probability zero_start_fraction, else uniform in [0, max_start_position), so that
    position embeddings far beyond the training context are trained too.
    """

    def __init__(self, tokens, context, batch_size, generator, bos_id, bos_fraction,
                 max_start_position, zero_start_fraction):
        if tokens.numel() <= context + 1:
            raise ValueError(f"training text has {tokens.numel()} tokens; --context {context} "
                             f"needs more than {context + 1}")
        if bos_fraction > 0 and bos_id < 0:
            raise ValueError("bos_fraction > 0 needs a tokenizer with a BOS token")
        self.tokens = tokens
        self.context = context
        self.batch_size = batch_size
        self.generator = generator
        self.bos_id = bos_id
        self.bos_fraction = bos_fraction
        self.max_start_position = max_start_position
        self.zero_start_fraction = zero_start_fraction

    def next(self):
        """(inputs [B, T], targets [B, T], start positions [B]) on the CPU."""
        g, b, t = self.generator, self.batch_size, self.context
        starts = torch.randint(0, self.tokens.numel() - t, (b,), generator=g)
        rows = torch.stack([self.tokens[s:s + t + 1] for s in starts.tolist()])
        inputs, targets = rows[:, :-1].clone(), rows[:, 1:]
        with_bos = torch.rand(b, generator=g) < self.bos_fraction
        inputs[with_bos, 0] = self.bos_id
        positions = torch.randint(0, max(1, self.max_start_position), (b,), generator=g)
        positions[torch.rand(b, generator=g) < self.zero_start_fraction] = 0
        return inputs, targets, positions


def window_losses(model, tokens, window, bos_id, start_position=0, chunk_size=64, batch_size=8):
    """Negative log-likelihood (nats) of every token of `tokens`, as [N] float64.

    The tokens are cut into consecutive windows of `window` tokens (the last may be shorter);
    each window is read from a fresh state starting at `start_position`, after a BOS token, so
    every token is predicted exactly once, by a model that has seen at most `window` - 1 tokens
    of its window before it.
    """
    if bos_id < 0:
        raise ValueError("the validation loss needs a tokenizer with a BOS token")
    device = next(model.parameters()).device
    windows = [tokens[i:i + window] for i in range(0, tokens.numel(), window)]
    out = []
    with torch.no_grad():
        for i in range(0, len(windows), batch_size):
            group = windows[i:i + batch_size]
            if len(group) > 1 and group[-1].numel() != group[0].numel():
                group, tail = group[:-1], group[-1:]
            else:
                tail = []
            for g in (group, tail):
                if not g:
                    continue
                targets = torch.stack(g).to(device)
                inputs = torch.cat([torch.full_like(targets[:, :1], bos_id), targets[:, :-1]], 1)
                state = model.init_state(len(g), position=start_position)
                logits, _ = model(inputs, state=state, chunk_size=chunk_size)
                nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(),
                                      reduction="none")
                out.append(nll.double().cpu())
    return torch.cat(out)


def nats_per_char(model, tokenizer, text, window, bos_id, start_position=0, chunk_size=64,
                  batch_size=8):
    """Validation loss of `text` in nats per character (comparable across tokenizers).

    Σ NLL of every token of encode(text) (see window_losses) / len(text). Also returns the
    per-token losses and the token count.
    """
    ids = tokenizer.encode(text)
    if tokenizer.decode(ids) != text:
        raise ValueError("the tokenizer does not round-trip the validation text")
    losses = window_losses(model, torch.tensor(ids, dtype=torch.int64), window, bos_id,
                           start_position, chunk_size, batch_size)
    return losses.sum().item() / len(text), losses
