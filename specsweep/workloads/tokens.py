"""The one token estimate for text without a tokenizer (load generator and simulator)."""

from __future__ import annotations


def estimate_tokens(text: str) -> int:
    """About how many tokens `text` is: words, or characters / 4 when words are long.

    English prose comes to about 4 characters a token in the tokenizers of Llama,
    Qwen and Mistral; code and numbers, with their short "words", to about one a word.
    The server's own count is what gets recorded; this only sizes prompts beforehand.
    """
    return max(1, len(text.split()), round(len(text) / 4))
