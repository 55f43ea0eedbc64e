"""A tiny random-weight Llama that vLLM on CPU can load, for tests that need a real engine.

Shapes are the smallest vLLM's CPU attention accepts (head_dim 64). The tokenizer is a real
byte-level BPE trained on a few paragraphs, so prompts tokenize like a real model's and the
answer strings the tasks score (" A", " Yes", ...) are single tokens.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from evalsuite.core.errors import EvalsuiteError

MARKER = "evalsuite-tiny.json"
RECIPE_VERSION = 1  # bump when the model or tokenizer recipe changes, to rebuild caches
VOCAB_SIZE = 768
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Words the tasks score on; repeated in training so that each becomes one token.
ANSWER_STRINGS = [" A", " B", " C", " D", " Yes", " No", "Answer:"]

_CORPUS = """\
The quick brown fox jumps over the lazy dog. A contract is an agreement between two or more
parties that the law will enforce. The parties agree that this agreement shall be governed by
the laws of the State of New York. Either party may terminate this agreement upon thirty days
written notice to the other party. The licensee shall not assign its rights under this license
without the prior written consent of the licensor. All notices shall be in writing.
Question: Which of the following is a prime number?
A. 4
B. 6
C. 7
D. 9
Answer: C
Question: Does the clause limit the liability of either party?
Answer: Yes
Question: Does the clause grant an exclusive license?
Answer: No
The best way to get startup ideas is not to try to think of startup ideas. It is to look for
problems, preferably problems you have yourself. When you read an essay you learn what the
writer thinks, and when you write one you learn what you think. History, physics, chemistry,
biology, mathematics, economics, law, medicine, philosophy and computer science are subjects
of the test. The answer is the letter of the correct choice. What is the capital of France?
The capital of France is Paris. In the year 1492 the ship sailed west across the ocean.
"""


def _corpus() -> list[str]:
    lines = _CORPUS.splitlines()
    # Repetition makes the answer strings the most frequent pairs, so BPE merges them first.
    return lines * 4 + [f"Answer:{s}" for s in ANSWER_STRINGS] * 50


def train_tokenizer(vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE tokenizer (transformers' PreTrainedTokenizerFast) with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    # Like Llama: a BOS in front of every encoded text unless add_special_tokens=False.
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )


def build_tiny_llama(out_dir: Path, seed: int = 0) -> Path:
    """Write (once) a 2-layer bf16 LlamaForCausalLM with random weights and a trained tokenizer.

    Deterministic for a seed. If `out_dir` already holds a build of this seed and recipe it is
    returned untouched; a build of another seed or recipe is replaced. The folder is written
    elsewhere and renamed, so it is never seen half-built.
    """
    out_dir = Path(out_dir)
    marker = out_dir / MARKER
    stamp = {"seed": seed, "recipe": RECIPE_VERSION}
    if marker.is_file() and json.loads(marker.read_text()) == stamp:
        return out_dir
    if out_dir.exists() and not marker.is_file() and any(out_dir.iterdir()):
        raise EvalsuiteError(f"{out_dir} exists and is not a tiny model build; not replacing it")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}-") as tmp:
        staged = Path(tmp) / "model"
        _write_tiny_llama(staged, seed)
        (staged / MARKER).write_text(json.dumps(stamp) + "\n")
        if out_dir.exists():  # an older build (seed or recipe) or an empty folder
            shutil.rmtree(out_dir)
        try:
            staged.rename(out_dir)
        except OSError:
            if not marker.is_file():  # another process finished first; anything else is real
                raise
    return out_dir


def _write_tiny_llama(folder: Path, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    # fork_rng keeps the caller's global RNG state as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
