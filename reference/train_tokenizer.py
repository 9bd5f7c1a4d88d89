#!/usr/bin/env python3
"""Trains the SentencePiece tokenizer of the bundled model on the corpus's training split.

    train_tokenizer.py [--corpus data/tinyshakespeare.txt] --out tokenizer.model [--vocab-size 2048]

BPE with byte fallback, so every UTF-8 text encodes and decodes exactly. The text is kept as is
(identity normalisation, spaces and newlines preserved; "\\n" is a piece of its own), because the
model must reproduce the play's layout. Deterministic: one thread, no sampling of the input; the
same corpus gives the same model bytes. Ids: 0 <unk>, 1 <s> (BOS), 2 </s> (EOS).
"""

import argparse
import io
import os
import sys

import sentencepiece

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from linserve_ref import corpus  # noqa: E402

UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
MIN_VOCAB, MAX_VOCAB = 1000, 4000


def train(text, vocab_size):
    """Returns the serialised SentencePiece model trained on `text`."""
    if not MIN_VOCAB <= vocab_size <= MAX_VOCAB:
        raise ValueError(f"--vocab-size {vocab_size} is outside [{MIN_VOCAB}, {MAX_VOCAB}]")
    # Paragraphs (speeches) as training sentences: SentencePiece never merges across them.
    paragraphs = [p + "\n\n" for p in text.split("\n\n") if p]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(paragraphs), model_writer=model, vocab_size=vocab_size,
        model_type="bpe", byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, user_defined_symbols=["\n"], split_by_whitespace=True,
        max_sentence_length=1 << 20, input_sentence_size=0, shuffle_input_sentence=False,
        num_threads=1, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=-1, minloglevel=2)
    return model.getvalue()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=corpus.DEFAULT_CORPUS)
    parser.add_argument("--out", required=True, help="path of the .model file to write")
    parser.add_argument("--vocab-size", type=int, default=2048,
                        help=f"pieces, in [{MIN_VOCAB}, {MAX_VOCAB}] (default 2048)")
    args = parser.parse_args(argv)
    train_text, _ = corpus.split(corpus.read_text(args.corpus))
    data = train(train_text, args.vocab_size)
    with open(args.out, "wb") as f:
        f.write(data)
    print(f"wrote {args.out}: {args.vocab_size} pieces, trained on {len(train_text)} characters")


if __name__ == "__main__":
    main()
