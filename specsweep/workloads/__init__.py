"""What the load generator sends: the bundled real prompts, users' prompt files, and
how a text prompt is brought to a shape's input length.

    tokens      estimate_tokens: the token estimate of a text (no tokenizer)
    vocab       RANDOM_WORDS: the vocabulary of random-word prompts
    records     PromptRecord, Workload (and its label in result rows)
    bundled     load_builtin: builtin/prompts.jsonl (chat, code, reasoning, summarisation)
    loaders     load_file (JSONL, ShareGPT, replay), resolve_workload, workload_label,
                DatasetError
    categories  category_of: which category a request's text is (the simulator asks)
    fitting     fit_prompt; check_workload, before any server is launched

tokens, vocab, records, bundled and categories import nothing of the engine, so the
simulator may use them.
"""

from specsweep.workloads.bundled import load_builtin
from specsweep.workloads.categories import CATEGORIES, category_of
from specsweep.workloads.fitting import check_workload, fit_prompt
from specsweep.workloads.loaders import (
    DatasetError,
    load_file,
    resolve_workload,
    workload_label,
)
from specsweep.workloads.records import PromptRecord, Workload
from specsweep.workloads.tokens import estimate_tokens
from specsweep.workloads.vocab import RANDOM_WORDS

__all__ = [
    "CATEGORIES",
    "RANDOM_WORDS",
    "DatasetError",
    "PromptRecord",
    "Workload",
    "category_of",
    "check_workload",
    "estimate_tokens",
    "fit_prompt",
    "load_builtin",
    "load_file",
    "resolve_workload",
    "workload_label",
]
