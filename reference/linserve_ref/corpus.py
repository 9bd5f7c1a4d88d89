"""The training corpus and its fixed train/validation split (issue 3).

data/tinyshakespeare.txt (Shakespeare, public domain; 1,115,394 ASCII characters) is split by
characters: the first floor(0.9 · N) characters are the training split, the rest (from character
1,003,854 on) the validation split. Nothing is shuffled, so the split is the same everywhere.
"""

import os

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_CORPUS = os.path.join(REPO_ROOT, "data", "tinyshakespeare.txt")

TRAIN_NUMERATOR, TRAIN_DENOMINATOR = 9, 10


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def split_index(text):
    """Index of the first validation character: floor(0.9 · len(text))."""
    return len(text) * TRAIN_NUMERATOR // TRAIN_DENOMINATOR


def split(text):
    """(train, validation) strings."""
    i = split_index(text)
    return text[:i], text[i:]
