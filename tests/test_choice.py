import math

import pytest

from evalsuite.errors import ConfigError
from evalsuite.tasks.choice import (
    LETTERS,
    argmax_first,
    chat_prompt_ids,
    choice_logprobs,
    choice_request,
    fit_request,
    score_choice,
)
from evalsuite.types import Completion, Sample


def _sample(target="B", choices=None):
    return Sample(id="s/test/0", task="t", request=choice_request(prompt="Q"), target=target,
                  choices=choices or list(LETTERS), group="s")


def test_request_is_one_token_with_top_logprobs():
    req = choice_request(prompt="Q")
    assert (req.max_tokens, req.logprobs, req.temperature) == (1, 20, 0.0)


def test_space_and_bare_variants_take_the_larger():
    lps = choice_logprobs({" A": -3.0, "A": -1.0, " B": -0.5, "B": -4.0, "\n": -0.1}, LETTERS)
    assert lps["A"] == -1.0 and lps["B"] == -0.5
    assert lps["C"] == -math.inf and lps["D"] == -math.inf


def test_other_tokens_do_not_count_as_letters():
    lps = choice_logprobs({"Answer": -0.1, " a": -0.2, "AB": -0.3}, LETTERS)
    assert all(v == -math.inf for v in lps.values())


def test_ties_go_to_the_first_choice():
    assert argmax_first({"A": -1.0, "B": -0.5, "C": -0.5, "D": -2.0}, LETTERS) == "B"
    assert argmax_first({c: -math.inf for c in LETTERS}, LETTERS) == "A"


def test_score_records_the_distribution_and_missing_letters():
    comp = Completion(text=" B", top_logprobs=[{" B": -0.2, " C": -1.9, "B": -3.0}])
    sc = score_choice("t", _sample("B"), comp)
    assert (sc.pred, sc.value, sc.target, sc.group) == ("B", 1.0, "B", "s")
    assert sc.extra["logprobs"] == {"A": None, "B": -0.2, "C": -1.9, "D": None}
    assert sc.extra["found"] == 2


def test_score_with_no_logprobs_is_wrong_unless_first():
    sc = score_choice("t", _sample("C"), Completion(text=""))
    assert sc.pred == "A" and sc.value == 0.0 and sc.extra["found"] == 0


def test_case_folding_normalizer_for_yes_no():
    comp = Completion(text="yes", top_logprobs=[{"yes": -0.3, " No": -1.2, " Yes": -2.0}])
    sc = score_choice("t", _sample("Yes", ["Yes", "No"]), comp, normalize=lambda t: t.strip().lower())
    assert sc.pred == "Yes" and sc.extra["logprobs"] == {"Yes": -0.3, "No": -1.2}


class _ByteTokenizer:
    """One token per byte, plus a BOS: enough to check the truncation arithmetic."""

    def __call__(self, text):
        return {"input_ids": [0] + list(text.encode())}


def test_fit_request_leaves_short_prompts_alone():
    req = choice_request(prompt="x" * 10)
    assert fit_request(req, _ByteTokenizer(), 64) == (req, False)
    assert fit_request(req, None, 4) == (req, False)


def test_fit_request_truncates_from_the_left():
    req = choice_request(prompt="abcdefghij")
    fitted, truncated = fit_request(req, _ByteTokenizer(), 6)
    assert truncated and fitted.prompt is None
    assert fitted.prompt_token_ids == list(b"fghij")  # max_model_len - 1: room for the answer token
    assert fitted.max_tokens == 1


def test_fit_request_on_token_ids():
    fitted, truncated = fit_request(choice_request(prompt_token_ids=list(range(10))), _ByteTokenizer(), 8)
    assert truncated and fitted.prompt_token_ids == list(range(3, 10))


class _Tok:
    chat_template = "x"

    def __init__(self, refuse_system=False):
        self.refuse_system, self.seen = refuse_system, None

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize and add_generation_prompt
        if self.refuse_system and messages[0]["role"] == "system":
            raise ValueError("System role not supported")
        self.seen = messages
        return {"input_ids": [1, 2, 3]}


def test_chat_ids_and_system_fold():
    tok = _Tok()
    msgs = [{"role": "system", "content": "S\n\n"}, {"role": "user", "content": "U"}]
    assert chat_prompt_ids(tok, msgs, "k") == [1, 2, 3] and tok.seen == msgs
    tok = _Tok(refuse_system=True)
    chat_prompt_ids(tok, msgs, "k")
    assert tok.seen == [{"role": "user", "content": "S\n\nU"}]


def test_chat_without_template_is_a_config_error():
    with pytest.raises(ConfigError, match="tasks.mmlu.chat"):
        chat_prompt_ids(None, [{"role": "user", "content": "U"}], "tasks.mmlu.chat")
