"""Multiple-choice scoring from one generated token's top log-probabilities.

One request per item (max_tokens=1, logprobs=TOP_K) instead of one log-likelihood request
per choice: the prompt is shared, so the prefix cache serves it, and vLLM skips that cache
for prompt_logprobs requests. The price: a choice outside the top-k counts as -inf, which
only matters when the model puts almost no mass on any of the choices.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from evalsuite.errors import ConfigError
from evalsuite.types import Completion, Request, Sample, Score

TOP_K = 20
LETTERS = ("A", "B", "C", "D")


def choice_request(prompt: str | None = None, prompt_token_ids: list[int] | None = None) -> Request:
    return Request(prompt=prompt, prompt_token_ids=prompt_token_ids, max_tokens=1, logprobs=TOP_K, temperature=0.0)


def choice_logprobs(top: dict[str, float], choices: Sequence[str],
                    normalize: Callable[[str], str] = str.strip) -> dict[str, float]:
    """Each choice's best log-probability over the token texts that normalize to it.

    Tokenizers have both " A" and "A"; the model may split its mass between them, so the
    larger one stands for the choice (-inf if neither is in the top-k).
    """
    out = {c: -math.inf for c in choices}
    wanted = {normalize(c): c for c in choices}
    for text, lp in top.items():
        c = wanted.get(normalize(text))
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


def score_choice(task: str, sample: Sample, completion: Completion,
                 normalize: Callable[[str], str] = str.strip) -> Score:
    choices = sample.choices or list(LETTERS)
    top = completion.top_logprobs[0] if completion.top_logprobs else {}
    lps = choice_logprobs(top, choices, normalize)
    pred = argmax_first(lps, choices)
    # None, not -inf, for choices outside the top-k: records are JSON, which has no infinity
    shown = {c: (None if math.isinf(v) else v) for c, v in lps.items()}
    extra = {"logprobs": shown, "found": sum(v is not None for v in shown.values())}
    return Score(sample_id=sample.id, task=task, value=float(pred == sample.target), pred=pred,
                 target=sample.target, group=sample.group, extra=extra)


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
