"""RULER's synthetic items from lm-eval 0.4.13's own generators, offline (imported only when a ruler task builds).

lm-eval's RULER code (lm_eval/tasks/ruler) has three online steps; each is replaced at its seam, and
everything else (needle templates, haystack sizing, depths, chains, word lists, answers) is lm-eval's:
the essay haystack (the Paul Graham essays the suite ships, split into words as get_haystack does),
nltk's `punkt_tab` model (not fetched: nltk's Punkt with default parameters, which needs no data and
differs from the English model only at abbreviations, so a needle may rarely sit after "Mr."), and
the tokenizer lm-eval loads by hub name (the model under test's own, passed in).
The task functions (niah_utils.niah_single_1 ...) hard-wire 500 items per length and draw from the
process-wide `random` and `numpy.random` states, so the same parameters are passed here to the
generators they call, with `num_samples` = the items wanted, under a seed of this (task, length):
the first n items are those lm-eval's function yields after the same seeding (tests/test_ruler.py
checks this item for item), and adding a task or a length does not change another's items.
docs/tasks-ruler.md ("How it runs offline") has the rest.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# (haystack, key kind, value kind, needles: keys, values, queries), as lm_eval/tasks/ruler/niah_utils.py sets them
NIAH = {
    "niah_single_1": ("repeat", "words", "numbers", {}),
    "niah_single_2": ("essay", "words", "numbers", {}),
    "niah_single_3": ("essay", "words", "uuids", {}),
    "niah_multikey_1": ("essay", "words", "numbers", {"num_needle_k": 4}),
    "niah_multikey_2": ("needle", "words", "numbers", {}),
    "niah_multikey_3": ("needle", "uuids", "uuids", {}),
    "niah_multivalue": ("essay", "words", "numbers", {"num_needle_v": 4}),
    "niah_multiquery": ("essay", "words", "numbers", {"num_needle_q": 4}),
}
# The tasks whose items expect one string, so that an item scores 0 or 1 (the others expect several
# values, queries, variables or words, and score the share found)
ONE_ANSWER = tuple(t for t, (*_, needles) in NIAH.items() if not {"num_needle_v", "num_needle_q"} & needles.keys())
VERSION = "lm-eval-0.4.13/1"  # of the items made here: part of their cache key
OTHERS = ("vt", "cwe", "fwe")  # variable tracking, common- and frequent-words extraction
TASKS = (*NIAH, *OTHERS)
# lm-eval's generation_kwargs.max_gen_toks per task (niah_single_1.yaml, vt.yaml, cwe.yaml, fwe.yaml)
MAX_GEN_TOKS = {**{t: 128 for t in NIAH}, "vt": 30, "cwe": 120, "fwe": 50}
# lm-eval's target_delimiter: what joins the prompt and its gen_prefix when no chat template is used
DELIMITER = {**{t: " " for t in TASKS}, "cwe": "\n\n"}


def item_seed(seed: int, task: str, length: int) -> int:
    """One seed per (run seed, task, length), stable across Python processes (str hashing is not)."""
    return int.from_bytes(hashlib.sha256(f"ruler:{seed}:{task}:{length}".encode()).digest()[:4], "big")


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """The process-wide random and numpy states lm-eval's generators draw from, seeded, then restored."""
    import numpy as np

    saved = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])


@functools.cache
def modules() -> dict[str, Any]:
    """lm-eval's RULER modules, imported without the punkt_tab download prepare_niah starts at import."""
    import nltk

    download, nltk.download = nltk.download, lambda *a, **k: False
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its "Downloaded punkt_tab" line
            from lm_eval.tasks.ruler import cwe_utils, fwe_utils, prepare_niah, vt_utils
    finally:
        nltk.download = download
    return {"niah": prepare_niah, "vt": vt_utils, "cwe": cwe_utils, "fwe": fwe_utils}


@functools.lru_cache(maxsize=1024)
def split_sentences(text: str) -> list[str]:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer().tokenize(text)


def essay_words(folder: Path) -> list[str]:
    """get_haystack("essay")'s word list, from the essays in `folder` (sorted by file name). Twice
    over, so that 128K of a verbose tokenizer still finds words: a length that fits the first copy
    (every length of a common tokenizer) uses the same words as one copy would."""
    text = " ".join(p.read_text(encoding="utf-8") for p in sorted(Path(folder).rglob("*.txt")))
    words = re.sub(r"\s+", " ", text).split(" ")
    return words + words


@contextlib.contextmanager
def offline(essays: list[str]) -> Iterator[dict[str, Any]]:
    """lm-eval's RULER modules with the essay haystack and sentence splitter swapped in (see the module
    docstring), their progress prints and bars kept off the console; restored afterwards."""
    mods = modules()
    niah, saved = mods["niah"], (mods["niah"].get_haystack, mods["niah"].cached_sent_tokenize)
    lm_eval_haystack = niah.get_haystack

    def get_haystack(type_haystack: str):
        return essays if type_haystack == "essay" else lm_eval_haystack(type_haystack)

    niah.get_haystack, niah.cached_sent_tokenize = get_haystack, split_sentences
    # lm-eval imports get_haystack by name into niah_utils: patched there too, for the reference check
    import lm_eval.tasks.ruler.niah_utils as niah_utils

    saved_utils = niah_utils.get_haystack
    niah_utils.get_haystack = get_haystack
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield mods
    finally:
        niah.get_haystack, niah.cached_sent_tokenize = saved
        niah_utils.get_haystack = saved_utils


def reset_cwe_rng(cwe_utils) -> None:
    """cwe_utils shuffles every word list with one module-level Random(42), which advances with each
    item: set back to its state after import (Random(42) after shuffling the word list), so that an
    item does not depend on how many came before it in this process."""
    rng = random.Random(42)
    rng.shuffle(list(range(len(cwe_utils.WORDS))))
    cwe_utils.RNG.setstate(rng.getstate())


def generate(task: str, length: int, n: int, tokenizer, essays: list[str], seed: int) -> list[dict[str, Any]]:
    """The first `n` items lm-eval's RULER function for `task` yields at `length` after seeding with `seed`:
    dicts with input, outputs (the answers), gen_prefix, length and max_length, as lm-eval's docs."""
    with offline(essays) as mods, seeded(seed):
        if task in NIAH:
            return needles_in_haystack(mods["niah"], task, length, n, tokenizer)
        if task == "vt":
            return variable_tracking(mods["vt"], length, n, tokenizer)
        if task == "cwe":
            return common_words(mods["cwe"], length, n, tokenizer)
        if task == "fwe":
            return mods["fwe"].sys_kwext(tokenizer=tokenizer, max_seq_length=length, num_samples=n)
    raise ValueError(f"unknown RULER task {task!r}")


def needles_in_haystack(niah, task: str, length: int, n: int, tokenizer) -> list[dict[str, Any]]:
    """prepare_niah.generate_samples for one NIAH task; no items (the caller names the task and length)
    where lm-eval finds no room at `length` for its template, needles and answer budget."""
    kind, key, value, needles = NIAH[task]
    try:
        return niah.generate_samples(niah.get_haystack(type_haystack=kind), max_seq_length=length,
                                     template=niah_template(), type_haystack=kind, type_needle_k=key,
                                     type_needle_v=value, num_samples=n, TOKENIZER=tokenizer, **needles)
    except ValueError as e:
        if str(e).startswith("Could not generate any sample"):
            return []
        raise


def common_words(cwe, length: int, n: int, tokenizer) -> list[dict[str, Any]]:
    """cwe_utils.sys_word_pair_random, or no items where its smallest word list does not fit `length`.

    It retries an item that does not fit forever (a bare `except:` around it, which no signal gets
    through), which it does when even its first step, `incremental` (10) words with the worked example
    and the answer budget, does not fit: checked first, sized as it sizes it, under a seed of its own;
    the module's word-list RNG is reset afterwards, so the items are lm-eval's."""
    with seeded(0):
        example, text, answer = cwe.generate_input_output(10, length)
    listed = " ".join(f"{i + 1}. {word}" for i, word in enumerate(answer))
    if len(tokenizer(example + "\n" + text + " " + listed).input_ids) + MAX_GEN_TOKS["cwe"] > length:
        return []
    reset_cwe_rng(cwe)
    return cwe.sys_word_pair_random(num_samples=n, max_seq_length=length, tokenizer=tokenizer)


def variable_tracking(vt, length: int, n: int, tokenizer) -> list[dict[str, Any]]:
    """vt_utils.get_dataset: a one-item ICL example of up to 500 tokens, then the items with it.

    vt_utils retries an item that does not fit forever (`while True`), which it does when even its
    smallest chain text (one step of noise) does not fit: checked first. A tokenizer too verbose for
    the example in 500 tokens (a test model's) gets the first multiple of 250 that holds it; 500 holds
    it for common tokenizers, so their items are lm-eval's."""
    budget = next((b for b in range(500, 4001, 250) if vt_fits(vt, tokenizer, b, 0, icl=True, step=5)), None)
    if budget is None:
        raise ValueError("vt: this tokenizer needs more than 4,000 tokens for vt's one-step example")
    icl = vt.sys_vartrack_w_noise_random(tokenizer=tokenizer, num_samples=1, max_seq_length=budget, incremental=5)[0]
    example = len(tokenizer(icl["input"] + " " + " ".join(icl["outputs"]) + "\n\n").input_ids)
    if not vt_fits(vt, tokenizer, length, example, icl=False, step=10):
        return []
    return vt.sys_vartrack_w_noise_random(tokenizer=tokenizer, num_samples=n, max_seq_length=length, icl_example=icl)


def vt_fits(vt, tokenizer, length: int, example_tokens: int, icl: bool, step: int) -> bool:
    """Whether vt's smallest text (`step` noise lines), its example and answer budget fit `length`;
    drawn under a seed of its own, so the items' draws are untouched."""
    with seeded(0):
        text, answer = vt.generate_input_output(step, 1, 4, is_icl=icl)
    return len(tokenizer(text + f" {answer}").input_ids) + 30 + example_tokens <= length


def niah_template() -> str:
    from lm_eval.tasks.ruler.niah_utils import TEMPLATE

    return TEMPLATE


def string_match_all(prediction: str, answers: list[str]) -> float:
    """lm-eval's RULER score of one answer: the share of expected strings it contains, case-blind,
    after its postprocess_pred (common_utils.process_results)."""
    from lm_eval.tasks.ruler.common_utils import postprocess_pred
    from lm_eval.tasks.ruler.common_utils import string_match_all as match

    return match(postprocess_pred([prediction]), [answers])
