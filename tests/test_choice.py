import math

import pytest

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import Completion, Sample, Score
from evalsuite.tasks.choice import (
    LETTERS,
    argmax_first,
    chat_prompt_ids,
    choice_flags,
    choice_logprobs,
    choice_rates,
    choice_request,
    fit_request,
    score_choice,
    target_delimiter,
)


def _sample(target="B", choices=None):
    return Sample(id="s/test/0", task="t", request=choice_request(prompt="Q"), target=target,
                  choices=choices or list(LETTERS), group="s")


def test_request_is_one_token_with_top_logprobs():
    req = choice_request(prompt="Q")
    assert (req.max_tokens, req.logprobs, req.temperature) == (1, 20, 0.0)


def test_lm_eval_convention_reads_only_the_space_token():
    """lm-eval scores the continuation " A": the bare "A" is another token and does not count."""
    top = {" A": -3.0, "A": -1.0, " B": -0.5, "B": -4.0, "\n": -0.1}
    lps = choice_logprobs(top, LETTERS)
    assert lps == {"A": -3.0, "B": -0.5, "C": -math.inf, "D": -math.inf}
    # chat mode: lm-eval drops the delimiter, so the bare letter is the one read
    assert choice_logprobs(top, LETTERS, delimiter="") == {"A": -1.0, "B": -4.0, "C": -math.inf, "D": -math.inf}
    assert target_delimiter(chat=False) == " " and target_delimiter(chat=True) == ""


def test_fold_takes_the_larger_of_space_and_bare():
    lps = choice_logprobs({" A": -3.0, "A": -1.0, " B": -0.5, "B": -4.0, "\n": -0.1}, LETTERS, tokens="fold")
    assert lps["A"] == -1.0 and lps["B"] == -0.5
    assert lps["C"] == -math.inf and lps["D"] == -math.inf


def test_convention_decides_the_answer():
    """Known answer: mass on the bare "A", less on " B": lm-eval's convention says B, folding says A."""
    comp = Completion(text="A", top_logprobs=[{"A": -0.3, " B": -1.5, " A": -2.0}])
    assert score_choice("t", _sample("B"), comp).pred == "B"
    assert score_choice("t", _sample("B"), comp, tokens="fold").pred == "A"


def test_other_tokens_do_not_count_as_letters():
    for tokens in ("lm_eval", "fold"):
        lps = choice_logprobs({"Answer": -0.1, " a": -0.2, "AB": -0.3, " AB": -0.4}, LETTERS, tokens=tokens)
        assert all(v == -math.inf for v in lps.values())


def test_ties_go_to_the_first_choice():
    assert argmax_first({"A": -1.0, "B": -0.5, "C": -0.5, "D": -2.0}, LETTERS) == "B"
    assert argmax_first({c: -math.inf for c in LETTERS}, LETTERS) == "A"


def test_score_records_the_distribution_and_missing_letters():
    comp = Completion(text=" B", top_logprobs=[{" B": -0.2, " C": -1.9, "B": -3.0}])
    sc = score_choice("t", _sample("B"), comp)
    assert (sc.pred, sc.value, sc.target, sc.group) == ("B", 1.0, "B", "s")
    assert sc.extra["logprobs"] == {"A": None, "B": -0.2, "C": -1.9, "D": None}
    assert sc.extra["found"] == 2 and sc.extra["no_choice"] is False and sc.extra["tie"] is False


def test_exact_tie_goes_to_the_first_choice_and_is_flagged():
    """bf16 logits of a small model: " B" and " C" get the same log-probability to the bit."""
    lp = -0.6931471805599453
    comp = Completion(text=" B", top_logprobs=[{" C": lp, " B": lp, " A": -3.0}])
    sc = score_choice("t", _sample("C"), comp)
    assert sc.pred == "B" and sc.value == 0.0 and sc.extra["tie"] is True and sc.extra["no_choice"] is False
    assert score_choice("t", _sample("B"), comp).value == 1.0
    # a tie below the best is no tie of the best two
    below = Completion(text=" A", top_logprobs=[{" A": -0.1, " B": -2.0, " C": -2.0}])
    assert score_choice("t", _sample("A"), below).extra["tie"] is False


def test_no_choice_in_the_top_k_is_wrong_even_for_the_first_choice():
    for comp in (Completion(text=""), Completion(text="The", top_logprobs=[{"The": -0.1, "A": -0.5}])):
        sc = score_choice("t", _sample("A"), comp)
        assert sc.pred == "" and sc.value == 0.0 and sc.extra["found"] == 0
        assert sc.extra["no_choice"] is True and sc.extra["tie"] is False
    # folding finds the bare "A" in the second case
    bare = Completion(text="A", top_logprobs=[{"The": -0.1, "A": -0.5}])
    folded = score_choice("t", _sample("A"), bare, tokens="fold")
    assert folded.pred == "A" and folded.value == 1.0


def _logprob_score(lps, pred="A", value=0.0, **extra):
    return Score(sample_id="x", task="t", value=value, pred=pred, target="A", extra={"logprobs": lps, **extra})


def test_choice_rates_known_counts():
    none = {"A": None, "B": None, "C": None, "D": None}
    tied = {"A": -1.0, "B": -1.0, "C": None, "D": -4.0}
    clear = {"A": -0.1, "B": -2.0, "C": None, "D": None}
    scores = [_logprob_score(none), _logprob_score(tied), _logprob_score(clear), _logprob_score(clear),
              Score(sample_id="y", task="t", value=1.0, pred="A", target="A")]  # no log-probs: not counted
    m = {x.name: x for x in choice_rates(scores, "mmlu")}
    assert m["mmlu/no_choice_rate"].value == 0.25 and m["mmlu/no_choice_rate"].n == 4
    assert m["mmlu/tie_rate"].value == 0.25
    # sample sd of (1, 0, 0, 0) is 0.5; / sqrt(4)
    assert m["mmlu/no_choice_rate"].stderr == pytest.approx(0.25) and m["mmlu/tie_rate"].stderr == pytest.approx(0.25)
    assert choice_rates([scores[-1]], "mmlu") == []


def test_rates_count_records_written_before_the_flags():
    """A recorded score from before: no-choice items were predicted "A" with no flags stored."""
    old = _logprob_score({"A": None, "B": None, "C": None, "D": None}, pred="A", value=1.0, found=0)
    assert choice_flags(old) == (True, False)
    assert choice_flags(Score.model_validate(old.model_dump(mode="json"))) == (True, False)


def test_case_folding_for_yes_no():
    comp = Completion(text="yes", top_logprobs=[{"yes": -0.3, " No": -1.2, " Yes": -2.0}])
    sample = _sample("Yes", ["Yes", "No"])
    folded = score_choice("t", sample, comp, tokens="fold", casefold=True)
    assert folded.pred == "Yes" and folded.extra["logprobs"] == {"Yes": -0.3, "No": -1.2}
    spaced = score_choice("t", sample, comp, casefold=True)
    assert spaced.pred == "No" and spaced.extra["logprobs"] == {"Yes": -2.0, "No": -1.2}


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
