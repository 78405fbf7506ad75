"""The vocabulary of random-word prompts (what the text endpoints get for random prompts)."""

from __future__ import annotations

# Short, common English words: one token each (with the leading space) in the
# vocabularies of Llama, Qwen, Mistral and GPT tokenizers.
_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program "
    "question work government number night point home water room mother area money "
    "story fact month lot right study book eye job word business issue side kind head "
    "house service friend father power hour game line end member law car city name "
    "president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason "
    "research girl guy moment air teacher force education good new first last long "
    "great little own other old big high different small large next early young "
    "important few public bad same able red blue green black white open run walk talk"
)
RANDOM_WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())
RANDOM_WORD_SET: frozenset[str] = frozenset(RANDOM_WORDS)
