"""Multiple-choice scoring from one generated token's top log-probabilities.

One request per item (max_tokens=1, logprobs=TOP_K) instead of one log-likelihood request per
choice: the prompt is shared, so the prefix cache serves it, and vLLM skips that cache for
prompt_logprobs requests. The price: a choice outside the top-k counts as -inf, which only matters
when the model puts almost no mass on any of the choices.

`choice_tokens: lm_eval` (the default) reads the continuation lm-eval 0.4.13 scores: " A" after
"Answer:", "A" in chat mode (lm-eval drops the target delimiter there). In byte-level BPE vocabularies
(Llama 3, Qwen, SmolLM) " A" is one token, so its next-token log-probability is exactly lm-eval's
log-likelihood; vLLM reports a SentencePiece "▁A" as " A" too. `fold` takes the best of " A" and "A".
Exact ties go to the first choice (lm-eval's argmax; `<task>/tie_rate`). An item with no choice in the
top-k predicts nothing and is wrong (`<task>/no_choice_rate`): counting it as the first choice would
credit chance for an answer the model never gave. docs/tasks.md and tasks/README.md say more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from evalsuite.core.errors import ConfigError
from evalsuite.stats.strata import mean_stderr
from evalsuite.core.types import Completion, Metric, MetricKind, Request, Sample, Score

TOP_K = 20
LETTERS = ("A", "B", "C", "D")
TARGET_DELIMITER = " "  # lm-eval's default target_delimiter, which its mmlu task keeps
ChoiceTokens = Literal["lm_eval", "fold"]


def choice_request(prompt: str | None = None, prompt_token_ids: list[int] | None = None) -> Request:
    return Request(prompt=prompt, prompt_token_ids=prompt_token_ids, max_tokens=1, logprobs=TOP_K, temperature=0.0)


def target_delimiter(chat: bool) -> str:
    """What lm-eval puts between prompt and choice: nothing after a chat template's assistant turn."""
    return "" if chat else TARGET_DELIMITER


def choice_logprobs(top: dict[str, float], choices: Sequence[str], tokens: ChoiceTokens = "lm_eval",
                    casefold: bool = False, delimiter: str = TARGET_DELIMITER) -> dict[str, float]:
    """Each choice's log-probability as the next token (-inf if its token is not in the top-k).

    `lm_eval` reads the token `delimiter + choice`; `fold` the larger of all tokens that strip
    to the choice. `casefold` also matches " a" to "A" (LegalBench lower-cases generations).
    """
    def key(text: str) -> str:
        text = text if tokens == "lm_eval" else text.strip()
        return text.lower() if casefold else text

    prefix = delimiter if tokens == "lm_eval" else ""
    wanted = {key(prefix + c): c for c in choices}
    out = {c: -math.inf for c in choices}
    for text, lp in top.items():
        c = wanted.get(key(text))
        if c is not None and lp > out[c]:
            out[c] = lp
    return out


def argmax_first(lps: dict[str, float], choices: Sequence[str]) -> str:
    """The best choice; ties go to the earliest, as lm-eval's argmax does."""
    best = choices[0]
    for c in choices[1:]:
        if lps[c] > lps[best]:
            best = c
    return best


def pick(lps: dict[str, float], choices: Sequence[str]) -> tuple[str | None, bool]:
    """(the predicted choice or None when no choice is in the top-k, whether the best two tie)."""
    best = argmax_first(lps, choices)
    if math.isinf(lps[best]):
        return None, False
    return best, sum(lps[c] == lps[best] for c in choices) > 1


def score_choice(task: str, sample: Sample, completion: Completion, tokens: ChoiceTokens = "lm_eval",
                 casefold: bool = False, delimiter: str = TARGET_DELIMITER) -> Score:
    choices = sample.choices or list(LETTERS)
    top = completion.top_logprobs[0] if completion.top_logprobs else {}
    lps = choice_logprobs(top, choices, tokens, casefold, delimiter)
    pred, tie = pick(lps, choices)
    # None, not -inf, for choices outside the top-k: records are JSON, which has no infinity
    shown = {c: (None if math.isinf(v) else v) for c, v in lps.items()}
    extra = {"logprobs": shown, "found": sum(v is not None for v in shown.values()),
             "no_choice": pred is None, "tie": tie}
    return Score(sample_id=sample.id, task=task, value=float(pred is not None and pred == sample.target),
                 pred=pred or "", target=sample.target, group=sample.group, extra=extra)


def choice_flags(score: Score) -> tuple[bool, bool]:
    """(no choice in the top-k, the best two tied), from the recorded per-choice log-probabilities,
    so that scores recorded before these flags existed count too."""
    lps = [v for v in (score.extra.get("logprobs") or {}).values() if v is not None]
    if not lps:
        return True, False
    best = max(lps)
    return False, lps.count(best) > 1


def choice_rates(scores: Sequence[Score], prefix: str) -> list[Metric]:
    """`{prefix}/no_choice_rate` and `{prefix}/tie_rate`: shares of the items scored from
    log-probabilities, with standard errors."""
    flags = [choice_flags(s) for s in scores if "logprobs" in s.extra]
    if not flags:
        return []
    out = []
    for i, what in enumerate(("no_choice_rate", "tie_rate")):
        mean, se = mean_stderr([float(f[i]) for f in flags])
        out.append(Metric(name=f"{prefix}/{what}", value=mean, stderr=se, n=len(flags), kind=MetricKind.quantity,
                          direction="lower"))
    return out


def chat_prompt_ids(tokenizer, messages: list[dict[str, str]], key: str) -> list[int]:
    """The chat-formatted prompt as token ids, generation prompt added.

    Token ids rather than text: a template that writes its BOS as text would get a second
    BOS when the engine tokenizes the text with special tokens on.
    """
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"{key}: chat mode needs a tokenizer with a chat template; this model has none")
    try:
        ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - templates that refuse a system turn (Gemma): fold it in
        if messages[0]["role"] != "system":
            raise
        merged = [{"role": "user", "content": messages[0]["content"] + messages[1]["content"]}] + messages[2:]
        ids = tokenizer.apply_chat_template(merged, tokenize=True, add_generation_prompt=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


def fit_request(req: Request, tokenizer, max_model_len: int | None) -> tuple[Request, bool]:
    """Left-truncates a prompt that would not leave room for one token, as lm-eval does.

    Every token spans at least one byte, so a prompt shorter in bytes than the limit cannot
    overflow; only the rare long ones are tokenized here.
    """
    if tokenizer is None or not max_model_len:
        return req, False
    limit = max_model_len - 1
    if req.prompt_token_ids is None:
        if len(req.prompt.encode()) < limit - 1:  # - 1: room for a BOS the engine may add
            return req, False
        ids = tokenizer(req.prompt)["input_ids"]
    else:
        ids = req.prompt_token_ids
    if len(ids) <= limit:
        return req, False
    return req.model_copy(update={"prompt": None, "prompt_token_ids": list(ids[-limit:])}), True
