"""Text <-> token ids as a model directory's config names them (byte or SentencePiece).

Mirrors the C++ tokenizers (model/tokenizer/tokenizer.h): Encode adds no BOS/EOS; byte ids 0..255 are the
bytes and ids >= 256 specials (decoded as nothing).
"""

import os

from linserve_ref.config import BYTE_VOCAB


class ByteTokenizer:
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def encode(self, text):
        return list(text.encode("utf-8"))

    def token_bytes(self, token_id):
        return bytes([token_id]) if token_id < BYTE_VOCAB else b""

    def decode(self, ids):
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")


class SentencePieceTokenizer:
    def __init__(self, model_path):
        import sentencepiece  # only SentencePiece models need the module

        self.processor = sentencepiece.SentencePieceProcessor(model_file=model_path)
        self.vocab_size = self.processor.get_piece_size()

    def encode(self, text):
        return self.processor.encode(text)

    def token_bytes(self, token_id):
        p = self.processor
        if p.is_control(token_id):
            return b""
        if p.is_unknown(token_id):  # its unk_surface (" ⁇ "), as linserve's decoder renders it
            return p.decode([token_id]).encode("utf-8")
        piece = p.id_to_piece(token_id)
        if p.is_byte(token_id):
            return bytes([int(piece[3:5], 16)])  # "<0xAB>"
        return piece.replace("\u2581", " ").encode("utf-8")

    def decode(self, ids):
        return self.processor.decode(list(ids))


def load_tokenizer(config, model_dir=None, tokenizer_model=None):
    """The tokenizer `config` names; SentencePiece reads tokenizer_model or model_dir's file."""
    if config["tokenizer"] == "byte":
        return ByteTokenizer(config["vocab_size"])
    if config["tokenizer"] == "none":
        raise ValueError("the model has no tokenizer (tokenizer \"none\"): its ids stand for no "
                         "text")
    path = tokenizer_model or os.path.join(model_dir, "tokenizer.model")
    tok = SentencePieceTokenizer(path)
    if tok.vocab_size != config["vocab_size"]:
        raise ValueError(f"{path} has {tok.vocab_size} pieces; config vocab_size is "
                         f"{config['vocab_size']}")
    return tok
