"""Build a local word-level tokenizer for the reference clients (no model hub).

Executed with the reference environment's interpreter (it needs ``tokenizers`` and
``transformers``, which the project's own environment does not have)::

    .refclients/sglang/bin/python tests/protocol/make_tokenizer.py OUT_DIR WORDS_JSON

``WORDS_JSON`` is a JSON list of words that must each be exactly one token: the
filler words the simulator emits, one per generated token (``" word"``). The vocabulary
is ``<unk>``, ``<s>``, ``</s>``, those words, then ``tok<N>`` fillers up to
``--vocab-size`` entries, so random prompt ids span a realistic range. Text is split
on whitespace only (``WhitespaceSplit``), so ``" the model"`` is two tokens: a
client that re-tokenizes the generated text counts what the server counted.
``OUT_DIR`` gets ``tokenizer.json`` and ``tokenizer_config.json``, loadable with
``transformers.AutoTokenizer.from_pretrained(OUT_DIR)`` offline.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = ("<unk>", "<s>", "</s>")


def build(out_dir: Path, words: list[str], vocab_size: int) -> None:
    vocab: dict[str, int] = {}
    for token in (*SPECIALS, *words):
        vocab.setdefault(token, len(vocab))
    filler = 0
    while len(vocab) < vocab_size:
        vocab.setdefault(f"tok{filler}", len(vocab))
        filler += 1
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with single spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out_dir", type=Path)
    p.add_argument("words_json", help="JSON list of words, each to be one token")
    p.add_argument("--vocab-size", type=int, default=32000)
    args = p.parse_args()
    words = json.loads(args.words_json)
    if not isinstance(words, list) or not all(
        isinstance(w, str) and w.split() == [w] for w in words
    ):
        raise SystemExit("WORDS_JSON must be a list of words without whitespace")
    build(args.out_dir, words, args.vocab_size)


if __name__ == "__main__":
    main()
