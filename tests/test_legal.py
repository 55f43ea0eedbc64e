"""`type: legal`: LegalBench's CUAD tasks as tasks/legalbench_cuad.yaml defines them,
under the name `legal`: LegalBench's own prompts, label-stratified subsets, Yes/No scoring."""

import functools
from pathlib import Path

import pytest

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import Completion, Score
from evalsuite.data.tables import label_quotas, read_records, stratified_subset
from evalsuite.tasks import sources
from evalsuite.tasks.base import TaskContext
from evalsuite.tasks.spec import ChoiceConfig, Renderer, load_definition

LegalConfig = functools.partial(ChoiceConfig, type="legal")  # as a run config's `- type: legal` block
SPEC = load_definition("legal")

CUAD = Path(__file__).resolve().parents[1] / "tasks/data/legalbench-cuad"  # shipped in the repository


def _ctx(tmp_path, **kw):
    return TaskContext(base_dir=tmp_path, cache_dir=tmp_path / "cache", **kw)


def test_base_prompt_with_text_substituted(tmp_path):
    task = LegalConfig(data_dir=str(CUAD), tasks=["anti_assignment"]).build(_ctx(tmp_path))
    samples = task.samples()
    test = read_records(CUAD / "anti_assignment/test.tsv")
    base = (CUAD / "anti_assignment/base_prompt.txt").read_text()
    assert len(samples) == len(test)
    s = samples[3]
    assert s.request.prompt == base.replace("{{text}}", test[3]["text"])
    assert s.request.prompt.endswith("\nLabel:") and s.target == test[3]["label"]
    assert s.id == "anti_assignment/test/3" and s.group == "anti_assignment" and s.choices == ["Yes", "No"]


def test_definition_rebuilds_every_base_prompt():
    """Why the definition is faithful: its instruction and every train.tsv example give each base prompt exactly."""
    render = Renderer(SPEC)
    folders = sorted(p for p in CUAD.iterdir() if p.is_dir())
    assert [f.name for f in folders] == SPEC.groups
    for folder in folders:
        base = (folder / "base_prompt.txt").read_text()
        assert render.build(folder.name, {"text": "{{text}}"}, read_records(folder / "train.tsv")) == base, folder.name


def test_fewer_shots_keep_the_instruction(tmp_path):
    task = LegalConfig(data_dir=str(CUAD), tasks=["governing_law"], num_fewshot=2, limit_per_task=1).build(_ctx(tmp_path))
    prompt = task.samples()[0].request.prompt
    instruction = SPEC.instructions["governing_law"]
    assert prompt.startswith(instruction + "\n\nClause: ") and prompt.count("Clause: ") == 3
    zero = LegalConfig(data_dir=str(CUAD), tasks=["governing_law"], num_fewshot=0, limit_per_task=1).build(_ctx(tmp_path))
    assert zero.samples()[0].request.prompt.count("Clause: ") == 1


def test_limit_per_task_is_seeded_and_deterministic(tmp_path):
    def ids(seed, tasks=None):
        cfg = LegalConfig(data_dir=str(CUAD), tasks=tasks, limit_per_task=5)
        return [s.id for s in cfg.build(_ctx(tmp_path, seed=seed)).samples()]

    first = ids(0)
    assert first == ids(0) and ids(3) != first
    assert len(first) == 5 * len([p for p in CUAD.iterdir() if p.is_dir()])
    assert ids(0, ["exclusivity"]) == [i for i in first if i.startswith("exclusivity/")]


def test_limit_per_task_keeps_both_labels_in_every_cuad_task(tmp_path):
    samples = LegalConfig(data_dir=str(CUAD), limit_per_task=4).build(_ctx(tmp_path)).samples()
    by_task = {}
    for s in samples:
        by_task.setdefault(s.group, []).append(s.target)
    assert all(sorted(t) == ["No", "No", "Yes", "Yes"] for t in by_task.values())


@pytest.mark.parametrize("counts, limit, want", [
    ({"Yes": 50, "No": 50}, 5, {"No": 2, "Yes": 3}),  # the odd item: larger label, then later name
    ({"Yes": 50, "No": 60}, 5, {"Yes": 2, "No": 3}),
    ({"Yes": 3, "No": 100}, 10, {"Yes": 3, "No": 7}),  # a short label gives its rest to the other
    ({"Yes": 9}, 4, {"Yes": 4}),
    ({"Yes": 1, "No": 1}, 1, {"No": 0, "Yes": 1}),
])
def test_label_quotas(counts, limit, want):
    assert label_quotas(counts, limit) == want


def test_stratified_subset_is_balanced_seeded_and_ordered():
    labels = ["No"] * 90 + ["Yes"] * 10  # a 10% label, that a plain 10-of-100 draw loses a third of the time
    pick = stratified_subset(labels, 10, seed=0, stratum="t")
    assert pick == sorted(pick) and len(set(pick)) == 10
    assert sorted(labels[i] for i in pick) == ["No"] * 5 + ["Yes"] * 5
    assert stratified_subset(labels, 10, seed=0, stratum="t") == pick
    assert stratified_subset(labels, 10, seed=1, stratum="t") != pick
    assert stratified_subset(labels, 10, seed=0, stratum="u") != pick
    assert stratified_subset(labels, None, 0, "t") == stratified_subset(labels, 100, 0, "t") == list(range(100))
    for seed in range(50):
        for limit in (2, 3, 7):
            assert {labels[i] for i in stratified_subset(labels, limit, seed, "t")} == {"No", "Yes"}


def _write_task(root, name, labels):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "train.tsv").write_text("answer\ttext\nYes\tA clause.\nNo\tAnother.\n")
    rows = "".join(f"{i}\t{a}\tClause {i}.\n" for i, a in enumerate(labels))
    (folder / "test.tsv").write_text("index\tanswer\ttext\n" + rows)


def test_limit_per_task_draws_label_stratified(tmp_path):
    _write_task(tmp_path / "data", "exclusivity", ["Yes"] * 3 + ["No"] * 27)
    _write_task(tmp_path / "data", "governing_law", ["Yes", "No"] * 10)

    def targets(seed, tasks=None):
        samples = LegalConfig(data_dir="data", limit_per_task=6, tasks=tasks).build(_ctx(tmp_path, seed=seed)).samples()
        return [(s.id, s.target) for s in samples]

    first = targets(0)
    assert sorted(t for i, t in first if i.startswith("exclusivity/")) == ["No"] * 3 + ["Yes"] * 3
    assert sorted(t for i, t in first if i.startswith("governing_law/")) == ["No"] * 3 + ["Yes"] * 3
    assert targets(0) == first and targets(1) != first
    assert targets(0, ["exclusivity"]) == [x for x in first if x[0].startswith("exclusivity/")]


def test_bad_label_is_a_config_error(tmp_path):
    _write_task(tmp_path / "data", "exclusivity", ["Yes", "Maybe"])
    with pytest.raises(ConfigError, match=r"tasks\.legal: .*data: exclusivity/test/1: target .* \['Yes', 'No'\]"):
        LegalConfig(data_dir="data").build(_ctx(tmp_path)).samples()


def test_a_folder_without_the_definitions_tasks_is_a_config_error(tmp_path):
    _write_task(tmp_path / "data", "my_clause", ["Yes", "No"])
    with pytest.raises(ConfigError, match=r"tasks\.legal\.groups: not in .*data: affiliate_license_licensee"):
        LegalConfig(data_dir="data").build(_ctx(tmp_path)).samples()


def test_unknown_task_is_refused_with_the_key_given(tmp_path):
    with pytest.raises(ValueError, match=r"tasks\n.*'governing_lawz'.*did you mean 'governing_law'.*allowed:"):
        LegalConfig(tasks=["governing_lawz"])
    # with a data_dir its folders are the groups: the same hint, when the task is read (validate and run)
    with pytest.raises(ConfigError, match=r"tasks\.legal\.groups: not in .*: governing_lawz \(did you mean "
                                          r"'governing_law'\?\); allowed: affiliate_license_licensee"):
        LegalConfig(data_dir=str(CUAD), tasks=["governing_lawz"]).build(_ctx(tmp_path)).samples()


def test_legalbench_spelling_names_the_same_task(tmp_path):
    task = LegalConfig(data_dir=str(CUAD), tasks=["cuad_anti-assignment"], limit_per_task=2).build(_ctx(tmp_path))
    assert {s.group for s in task.samples()} == {"anti_assignment"}


def test_answer_column_in_any_case(tmp_path):
    """The hub's copy names the label `answer`; LegalBench's files write it in any case."""
    folder = tmp_path / "data" / "governing_law"
    folder.mkdir(parents=True)
    (folder / "train.tsv").write_text("answer\ttext\nyes\tA clause.\nNo\tAnother.\n")
    (folder / "test.tsv").write_text("index\tanswer\ttext\n0\tNo\tNone\n1\tYes\tIt says {{x}}.\n")
    samples = LegalConfig(data_dir="data").build(_ctx(tmp_path)).samples()
    assert [s.target for s in samples] == ["No", "Yes"]
    assert samples[0].request.prompt == (
        SPEC.instructions["governing_law"] + "\n\n"
        "Clause: A clause.\nLabel: Yes\n\nClause: Another.\nLabel: No\n\nClause: None\nLabel:")
    assert samples[1].request.prompt.endswith("Clause: It says {{x}}.\nLabel:")


def test_bundled_copy_is_the_default(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "hub_reachable", lambda: pytest.fail("the hub was asked"))
    task = LegalConfig(tasks=["governing_law"], limit_per_task=2).build(_ctx(tmp_path))
    samples = task.samples()
    assert task.source == str(CUAD) and [s.group for s in samples] == ["governing_law"] * 2


def test_bundled_copy_is_complete_and_attributed():
    tasks = sorted(p.name for p in CUAD.iterdir() if (p / "test.tsv").is_file())
    assert len(tasks) == 30
    for t in tasks:
        assert {p.name for p in (CUAD / t).iterdir()} == {"base_prompt.txt", "train.tsv", "test.tsv"}, t
    assert "Attribution 4.0 International" in (CUAD / "LICENSE").read_text()
    assert "The Atticus Project" in (CUAD / "ATTRIBUTION").read_text()


def test_data_dir_that_is_no_folder(tmp_path):
    with pytest.raises(ConfigError, match=r"tasks\.legal\.data_dir: .*absent is not a folder"):
        LegalConfig(data_dir="absent").build(_ctx(tmp_path)).samples()


def test_chat_needs_a_template(tmp_path):
    with pytest.raises(ConfigError, match=r"tasks\.legal\.chat"):
        LegalConfig(chat=True).build(_ctx(tmp_path))


def test_scoring_reads_yes_no_in_any_case(tmp_path):
    task = LegalConfig(data_dir="x", scoring="argmax").build(_ctx(tmp_path))
    from evalsuite.core.types import Sample
    from evalsuite.tasks.choice import choice_request

    s = Sample(id="t/test/0", task="legal", request=choice_request(prompt="p"), target="No", choices=["Yes", "No"], group="t")
    sc = task.score(s, Completion(text=" no", top_logprobs=[{" no": -0.4, " Yes": -1.1, "No": -2.0}]))
    assert sc.pred == "No" and sc.value == 1.0 and sc.extra["logprobs"] == {"Yes": -1.1, "No": -0.4}
    # the bare "No" is not the token after "Label:" unless folded
    bare = Completion(text="No", top_logprobs=[{"No": -0.1, "yes": -0.2, " Yes": -1.5}])
    assert task.score(s, bare).pred == "Yes"
    fold = LegalConfig(data_dir="x", choice_tokens="fold", scoring="argmax").build(_ctx(tmp_path))
    assert fold.score(s, bare).pred == "No"
    nothing = task.score(s, Completion(text="The", top_logprobs=[{"The": -0.1}]))
    assert nothing.pred == "" and nothing.value == 0.0 and nothing.extra["no_choice"]
    m = {x.name: x for x in task.metrics([sc, nothing])}
    assert m["legal/no_choice_rate"].value == 0.5 and m["legal/tie_rate"].value == 0.0


def _s(task, target, pred):
    return Score(sample_id=f"{task}/{target}{pred}", task="legal", value=float(target == pred), pred=pred,
                 target=target, group=task)


def test_balanced_accuracy_per_task_and_mean(tmp_path):
    task = LegalConfig(data_dir="x").build(_ctx(tmp_path))
    # t1: 3 Yes (2 right), 1 No (right) -> (2/3 + 1) / 2; plain accuracy would say 3/4
    t1 = [_s("t1", "Yes", "Yes"), _s("t1", "Yes", "Yes"), _s("t1", "Yes", "No"), _s("t1", "No", "No")]
    # t2: always "Yes" -> 0.5 balanced whatever the class mix
    t2 = [_s("t2", "Yes", "Yes"), _s("t2", "No", "Yes"), _s("t2", "No", "Yes")]
    m = {x.name: x for x in task.metrics(t1 + t2)}
    b1, b2 = (2 / 3 + 1) / 2, 0.5
    assert m["legal/balanced_acc/t1"].value == pytest.approx(b1) and m["legal/balanced_acc/t1"].n == 4
    assert m["legal/balanced_acc/t2"].value == pytest.approx(b2) and m["legal/balanced_acc/t2"].n == 3
    assert m["legal/balanced_acc"].value == pytest.approx((b1 + b2) / 2) and m["legal/balanced_acc"].n == 7
    assert m["legal/acc"].value == pytest.approx(4 / 7)
    assert task.primary_metric == "legal/balanced_acc"


class _ChatTok:
    chat_template = "x"

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        self.calls.append(messages)
        return [len(self.calls)]


def test_chat_turns_and_the_bare_labels(tmp_path):
    """As lm-eval's --apply_chat_template: the instruction is the system turn, the examples and the
    clause one user turn; after the assistant turn opens, the answer is the bare "Yes" or "No"."""
    tok = _ChatTok()
    task = LegalConfig(tasks=["governing_law"], limit_per_task=1, chat=True).build(_ctx(tmp_path, tokenizer=tok))
    (s,) = task.samples()
    assert s.request.prompt is None and s.request.prompt_token_ids
    system, user = tok.calls[-1]
    assert system == {"role": "system", "content": SPEC.instructions["governing_law"] + "\n\n"}
    assert user["role"] == "user" and user["content"].startswith("Clause: ") and user["content"].endswith("\nLabel:")
    task.thresholds = {"governing_law": 0.0}
    assert task.score(s, Completion(text="No", top_logprobs=[{"No": -0.1, " Yes": -0.2}])).pred == "No"


def _legalbench_folder(root: Path) -> Path:
    """A LegalBench-format CUAD folder as its repository lays it out (`cuad_<task>`, hyphens kept): one
    task evalsuite ships and one it does not (`audit_rights`, one of LegalBench's 38)."""
    import shutil

    shutil.copytree(CUAD / "anti_assignment", root / "cuad_anti-assignment")
    audit = root / "cuad_audit_rights"
    audit.mkdir(parents=True)
    (audit / "train.tsv").write_text("answer\ttext\nYes\tLicensee may audit the books once a year.\n"
                                     "No\tThis Agreement is governed by Delaware law.\n")
    (audit / "test.tsv").write_text("index\tanswer\ttext\n0\tYes\tThe Company shall keep records open to "
                                    "inspection.\n1\tNo\tNotices go by mail.\n")
    instruction = "Does the clause give a party the right to audit the books, records, or physical locations?"
    (audit / "base_prompt.txt").write_text(
        f"{instruction}\n\nClause: Licensee may audit the books once a year.\nLabel: Yes\n\n"
        "Clause: This Agreement is governed by Delaware law.\nLabel: No\n\nClause: {{text}}\nLabel:")
    return root


def test_a_legalbench_folder_runs_its_own_tasks_with_their_own_instructions(tmp_path):
    """Every task of the folder runs, shipped or not; an unshipped one is asked with its own
    base_prompt.txt's instruction and train examples, rebuilding its base prompt exactly."""
    data = _legalbench_folder(tmp_path / "legalbench")
    task = LegalConfig(data_dir=str(data)).build(_ctx(tmp_path))
    samples = task.samples()
    assert {s.group for s in samples} == {"anti_assignment", "audit_rights"}
    audit = [s for s in samples if s.group == "audit_rights"]
    base = (data / "cuad_audit_rights" / "base_prompt.txt").read_text()
    assert [s.request.prompt for s in audit] == [base.replace("{{text}}", t) for t in
                                                 ("The Company shall keep records open to inspection.", "Notices go by mail.")]
    assert [s.target for s in audit] == ["Yes", "No"]
    named = LegalConfig(data_dir=str(data), tasks=["cuad_audit_rights"]).build(_ctx(tmp_path)).samples()
    assert {s.group for s in named} == {"audit_rights"}


def test_validate_and_run_refuse_the_same_folder_in_the_same_line(tmp_path):
    from typer.testing import CliRunner

    from evalsuite.cli.main import app

    data = _legalbench_folder(tmp_path / "legalbench")
    config = tmp_path / "c.yaml"
    body = f"model: {{path: {tmp_path}}}\nengine: {{mode: fake}}\nvariants: {{a: {{}}}}\noutput_dir: {tmp_path / 'runs'}\n"
    config.write_text(body + f"tasks: [{{type: legal, data_dir: {data}, tasks: [audit_rights]}}]\n")
    assert CliRunner().invoke(app, ["validate", str(config)]).exit_code == 0
    config.write_text(body + f"tasks: [{{type: legal, data_dir: {data}, tasks: [audit_right, change_of_control]}}]\n")
    said = []
    for command in (["validate", str(config)], ["run", str(config), "--no-progress"]):
        res = CliRunner().invoke(app, command)
        assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
        said.append(res.output)
    assert said[0] == said[1] and "not in " in said[0] and "audit_right, change_of_control (did you mean 'audit_rights'?)" in said[0]
    assert not (tmp_path / "runs").exists()
