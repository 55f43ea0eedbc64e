"""The lm-eval LM adapter over evalsuite's Engine (imported only when an lm_eval task runs).

Log-likelihoods come from vLLM's prompt log-probabilities (Request.prompt_logprobs): the
continuation's tokens' log-probabilities summed, greedy when each ranks first, as lm-eval's own
`vllm` backend computes them. Tokenization is lm-eval's (TemplateLM), so context/continuation
splits match its other backends.
"""

from __future__ import annotations

import math

from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from evalsuite.core.types import Completion, Request

PROMPT_LOGPROBS = 1  # vLLM returns the prompt token's own entry (with its rank) beside the top-1
DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's default for generate_until


class EngineLM(TemplateLM):
    """lm-eval's LM interface over an evalsuite Engine: its requests become engine requests."""

    def __init__(self, engine, tokenizer, max_length: int, batch_size: int):
        super().__init__()
        self.engine, self.tokenizer, self.max_length, self.batch_size = engine, tokenizer, max_length, batch_size

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.eot_token_id

    @property
    def tokenizer_name(self) -> str:
        return getattr(self.tokenizer, "name_or_path", "evalsuite")

    def apply_chat_template(self, chat_history, add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        if not string:
            return []
        bos = self.tokenizer.bos_token
        if add_special_tokens is None and bos and string.startswith(bos):
            add_special_tokens = False  # a chat template wrote its BOS as text: no second one
        special = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        return list(self.tokenizer(string, **special)["input_ids"])

    def _run(self, requests: list[Request]) -> list[Completion]:
        out: list[Completion] = []
        for i in range(0, len(requests), self.batch_size):
            out += self.engine.generate(requests[i : i + self.batch_size])
        return out

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        limit = self.max_length - 1  # vLLM needs room for one generated token
        inputs, ctxlens = [], []
        for _, context, continuation in requests:
            whole = (context + continuation)[-limit:]
            inputs.append(whole)
            ctxlens.append(len(whole) - len(continuation))
        reqs = [Request(prompt_token_ids=ids, max_tokens=1, prompt_logprobs=PROMPT_LOGPROBS) for ids in inputs]
        out = []
        for done, ctxlen in zip(self._run(reqs), ctxlens, strict=True):
            lps, ranks = done.prompt_logprobs[ctxlen:], done.prompt_ranks[ctxlen:]
            out.append((sum(lp if lp is not None else -math.inf for lp in lps), all(r == 1 for r in ranks)))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owners = [], []
        for i, (string,) in enumerate(r.args for r in requests):
            tokens = self.tok_encode(string)
            for w in map(make_disjoint_window, get_rolling_token_windows(
                    token_list=tokens, prefix_token=self.prefix_token_id, max_seq_len=self.max_length - 2,
                    context_len=1)):
                windows.append((None, *w))
                owners.append(i)
        totals = [0.0] * len(requests)
        for owner, (lp, _) in zip(owners, self._loglikelihood_tokens(windows), strict=True):
            totals[owner] += lp
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        reqs, stops = [], []
        for context, kwargs in (r.args for r in requests):
            kwargs = dict(kwargs or {})
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_gen = int(kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
            ids = self.tok_encode(context)[-(self.max_length - max_gen):]
            temperature = float(kwargs.get("temperature", 0.0)) if kwargs.get("do_sample", False) else 0.0
            reqs.append(Request(prompt_token_ids=ids, max_tokens=max_gen, stop=until, temperature=temperature))
            stops.append(until)
        texts = []
        for done, until in zip(self._run(reqs), stops, strict=True):
            text = done.text
            for stop in until:  # a stop string the engine matched inside a longer token
                text = text.split(stop)[0]
            texts.append(text)
        return texts
