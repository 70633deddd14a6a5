"""Write docs/parity.md from the committed paper-profile results: per row the paper's number, clbench's, the verdict
by one rule (clbench._tools.parity.RULE) and, for a row outside it, its named cause; the conventions each profile
uses; the wall time of each tree. ``--check`` exits 1 when the page differs from what the results give (CI).

    python scripts/parity_page.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "parity.md"
TREES = {  # profile -> the committed tree of its cells
    "paper-der": ROOT / "results" / "paper-der" / "buffer-200",
    "paper-der-500": ROOT / "results" / "paper-der" / "buffer-500",
    "paper-der-5120": ROOT / "results" / "paper-der" / "buffer-5120",
    "paper-der-cifar": ROOT / "results" / "paper-der-cifar" / "buffer-200",
    "paper-der-cifar-500": ROOT / "results" / "paper-der-cifar" / "buffer-500",
    "paper-der-cifar-5120": ROOT / "results" / "paper-der-cifar" / "buffer-5120",
    "paper-prompt-vit": ROOT / "results" / "paper-prompt-vit",
    "paper-lps": ROOT / "results" / "paper-lps",
    "paper-lps-tenth": ROOT / "results" / "paper-lps-tenth",
}
# one setting at a time changed from the profile's: tree under results/paper-der/conventions -> (what it changes,
# the profile and the streams it departs from)
CONVENTIONS = {
    "head-masked": (
        "train.head=masked (the growing head) instead of the paper's fixed full head",
        "paper-der",
        ("seq-mnist",),
    ),
    "fisher-probability": (
        "ewc.fisher_weight=probability (the paper's code's Fisher: each example's squared gradient "
        "times the model's probability of its label) instead of the empirical Fisher",
        "paper-der",
        ("seq-mnist", "seq-mnist-til", "perm-mnist", "rot-mnist"),
    ),
}

# Why a row is outside the rule, by (profile, stream, method). A cause names a convention (with the setting that
# closes it; its number is generated below from the conventions' trees), a departure of the paper's code from the
# paper, or an open question. Rows inside the rule need none.
_ICARL = (
    "the paper's code departs from the paper: its 2020 iCaRL casts the stored MNIST exemplars (floats in [0, 1]) to "
    "uint8 without ×255 before mixing them into the training set (Mammoth models/icarl.py at neurips2020; the 2022 "
    "rewrite, 0d727a7, multiplies first), so its replayed exemplars are near-black images; read from the code, not "
    "run. clbench's iCaRL replays its exemplars as stored; the code's other forms (exemplars mixed into the task's "
    "training set, unnormalised features, its cast) are not settings yet: open"
)
CAUSES: dict[tuple[str, str, str], str] = {
    **{(p, "seq-mnist", "icarl"): _ICARL for p in TREES},
    ("paper-der", "seq-mnist", "agem"): (
        "not separated with 5 seeds: the interval crosses τ (the paper's A-GEM spread is the table's largest). Known "
        "differences: clbench keeps the first 40 of a shuffle of each finished task (Mammoth: a random 40), and its "
        "reference gradient is on 128 of them as the code's; open"
    ),
    ("paper-der", "seq-mnist", "si"): (
        "not separated with 5 seeds (the paper gives no sd: τ is from clbench's spread). Known difference: Mammoth's "
        "SI adds lr·g² of the clipped total gradient to ω each step, clbench the path integral −g·Δθ of the task "
        "loss's gradient (the paper's eq. 3); under SGD without clipping they agree. Both are the class-incremental "
        "floor of one task's two digits; open"
    ),
    ("paper-der", "seq-mnist-til", "seqft"): (
        "not separated with 5 seeds (the interval crosses τ). How far a later task's training moves an earlier "
        "task's two logits apart is what this row measures, and it is the most seed-dependent row of the column; open"
    ),
    ("paper-der", "seq-mnist-til", "lwf"): (
        "a difference of the paper's code from clbench's LwF: before each task Mammoth's LwF trains the classifier "
        "alone on the new classes for an epoch (features frozen), then records the old model's logits once, in eval "
        "mode; clbench's LwF has no warm-up and distils from the previous model's logits of each batch. Which of "
        "them moves the Task-IL number is open (the Class-IL row, where both collapse, reproduces)"
    ),
    ("paper-der", "perm-mnist", "ewc"): (
        "not resolved with 5 seeds: the interval lies under the paper's number and crosses −τ. A known difference is "
        "now a setting and is not the cause: Mammoth's oEWC weights each example's squared gradient in its Fisher by "
        "the model's probability of the example's label (models/ewc_on.py at neurips2020, exp_cond_prob; "
        "`ewc.fisher_weight=probability`), clbench's default takes the unweighted empirical Fisher (the same "
        "per-example squares and mean, penalty 2·e_lambda/2 and decay γ). Under the code's form the row comes out "
        "further below (*One setting changed*, below): the weighting shrinks the penalty. Open"
    ),
    **{
        (p, "rot-mnist", m): (
            ("above" if m in ("seqft", "si") else "not resolved with 5 seeds: the interval crosses τ") + ". Known "
            "difference: clbench draws the 20 angles once, the same for every seed (a fixed generator per task); "
            "Mammoth's Rotation draws them anew each run (numpy's unseeded generator), so the paper's mean averages over "
            "draws and clbench's is one draw's. How close the last tasks' angles lie to the earlier ones sets how much "
            "a method forgets; drawing the angles from the seed is not a setting yet: open"
        )
        for p, methods in (
            ("paper-der", ("seqft", "si", "ewc", "agem")),
            ("paper-der-500", ("gem", "agem")),
            ("paper-der-5120", ("agem",)),
        )
        for m in methods
    },
    **{
        (p, "perm-mnist", "agem"): (
            f"not resolved with 5 seeds: the interval reaches past {side}τ. Known differences: clbench keeps the "
            f"first {n} of a shuffle of each finished task ({buffer} over 20 tasks; Mammoth: a random {n}) and draws "
            "the reference gradient's 128 from them as the code does; its permutations are drawn once for every "
            "seed, Mammoth's anew each run (as R-MNIST's angles); open"
        )
        for p, side, n, buffer in (("paper-der-500", "+", 25, 500), ("paper-der-5120", "−", 256, 5120))
    },
    **{
        ("paper-lps", "permuted-mnist", m): (
            "one cell: the profile runs one seed, as the paper reports one run without a spread, and the rule needs two "
            "cells for an interval; `--seeds 0,1,2` would let it act. Known differences: clbench trains on 54,000 "
            "images a task (the stream's 10 % validation hold-out) and runs each baseline at clbench's defaults, where "
            'the paper used "the original authors\' implementation" with their recommended settings (§V-A), not named'
        )
        for m in ("sm", "ewc", "si", "lwf", "gem", "packnet", "lps")
    },
    **{
        ("paper-lps-tenth", "permuted-mnist", m): (
            "one cell (the profile runs one seed, as paper-lps), and not the paper's setting: a tenth of its epochs "
            f"a phase ({epochs}), the largest scale that fits a session of two CPU cores; what the other nine tenths "
            "add is open until `paper-lps` runs the column. paper-lps's known differences apply too (54,000 training "
            "images a task; PackNet's epochs are LPS's warm-up and final ones, the paper names none for it)"
        )
        for m, epochs in (
            ("packnet", "train 3 and retrain 3 of 30 and 30"),
            ("lps", "warm-up 3, ADMM 9, final 3 of 30, 90, 30"),
        )
    },
    ("paper-lps", "permuted-mnist", "dgr"): (
        "one cell, so not resolved; but far below the paper and below SeqFT's own cell: its replay does harm, not only "
        "fails to help. The paper names no DGR setting (§V-A: the original authors' implementation), and "
        "clbench's DGR ran on its defaults (no preset for the profile: a VAE of one hidden layer of 400 and a 32-wide "
        "latent, trained beside the classifier for its steps of each task, replay weighted 1 − 1/tasks seen). Its "
        "matrix (`results/paper-lps/permuted-mnist/dgr`) shows each task learnt, then the earlier tasks at chance "
        "within a few tasks: the generated replay, labelled by the previous classifier, overwrites what SeqFT keeps. "
        "Open: the generator's size and training length that the DGR and LPS papers used"
    ),
    ("paper-der", "seq-mnist", "derpp"): (
        "not separated with 5 seeds: the interval reaches past −τ. Known difference: while the buffer holds fewer "
        "than the 128 examples drawn (the first 13 steps), clbench draws with replacement, Mammoth draws every "
        "stored example once; open"
    ),
}


def _results(tree: Path) -> list[Any]:
    from clbench._core.results import iter_results

    return list(iter_results(tree)) if tree.is_dir() else []


def _wall(tree: Path) -> str:
    path = tree / "wall-time.json"
    if not path.is_file():
        return "not recorded"
    w = json.loads(path.read_text(encoding="utf-8"))
    return (
        f"{w['wall_s'] / 60:.1f} min wall for {w['cells']} cells with `{w['command']}` ({w['cpus']} × {w['cpu']}, "
        f"{w['date']})"
    )


def _extensions(regs: Any, profile: str) -> list[str]:
    """The profiles of this page that extend ``profile`` (the same table at another scale)."""
    return [p for p in TREES if p in regs.profiles.items and regs.profiles.items[p].extends == profile]


def _grouped(pairs: list[tuple[str, str]], by_method: bool = False) -> str:
    """(stream, method) pairs in one line: per stream its methods, or (``by_method``) per method its streams."""
    if not pairs:
        return "none"
    groups: dict[str, list[str]] = {}
    for stream, method in pairs:
        key, item = (method, stream) if by_method else (stream, method)
        groups.setdefault(key, [])
        if item not in groups[key]:
            groups[key].append(item)
    return "; ".join(f"{k} ({', '.join(v)})" if by_method else f"{k}: {', '.join(v)}" for k, v in groups.items())


def _ci(row: Any) -> str:
    from clbench._tools.parity import LEVEL
    from clbench.verdicts import t_interval

    ci = t_interval(list(row.values), LEVEL)
    return f"({ci[0]:.2f}, {ci[1]:.2f})" if ci else ""


def _convention_lines(regs: Any) -> list[str]:
    from clbench._tools.parity import _num, parity

    lines = []
    for name, (what, profile, streams) in CONVENTIONS.items():
        tree = ROOT / "results" / "paper-der" / "conventions" / name
        spec = regs.profiles.items[profile].targets
        for stream in streams:
            rows = [r for r in parity(_results(tree), spec) if r.values and r.target.stream == stream]
            if not rows:
                continue
            own = {r.target.method: r for r in parity(_results(TREES[profile]), spec) if r.target.stream == stream}
            lines.append(
                f"Under {what} (`results/paper-der/conventions/{name}`, {profile}, {stream}; {_wall(tree)}):\n"
            )
            lines += [
                f"- {r.target.method}: {r.mean:.2f} {_ci(r)} over {len(r.values)} cells, {r.verdict} by the "
                f"rule (the profile's own form: {_num(own[r.target.method].mean)}; paper {r.target.mean:.2f})"
                for r in rows
            ]
            lines.append("")
    return lines


def render() -> str:
    from clbench._exec.local import harness_registry
    from clbench._tools.parity import RULE, counts, parity, table

    regs = harness_registry()
    out = [
        "# Paper parity",
        "",
        "Generated by `python scripts/parity_page.py` from the committed results under `results/paper-der/`, "
        "`results/paper-der-cifar/`, `results/paper-prompt-vit/`, `results/paper-lps/` and `results/paper-lps-tenth/`; do not edit by hand. How "
        "each published number was read, and what the paper's code does where it departs from the paper: the targets "
        "file of each profile (`plugins/der_paper/PROFILE.targets.json`, `plugins/seq_vision/PROFILE.targets.json`, "
        "`plugins/lps_paper/paper-lps.targets.json`) and the presets beside them (`presets.py`).",
        "",
        "## The rule",
        "",
        RULE,
        "",
        "## The conventions a table depends on, as settings",
        "",
        "| convention | setting | forms | paper-der uses |",
        "|---|---|---|---|",
        "| class-incremental head | `train.head` | `masked` (grows with the classes), `full` (fixed over every "
        "class from the first task) | `full`; `masked` for LwF and iCaRL, whose loss reads the seen classes alone "
        "in the paper's code |",
        "| task-incremental scoring of a class-incremental model | `train.scoring` | `stream`, `task` (each task "
        "among its own classes, the other logits of the same model masked) | `task` on `seq-mnist-til` |",
        "| initialisation | `train.init` | `model` (the plugin's), `xavier` (uniform, biases 0) | `xavier` |",
        "| validation hold-out | `stream.val_fraction` | > 0 carves one; 0 trains on every image | 0 |",
        "| replay minibatch apart from the batch | `replay/der/derpp.replay_batch_size`, `agem.sample_size` | "
        "0: the batch size | each row's `minibatch_size` |",
        "| ER's buffer and loss | `replay.fill`, `replay.loss` | `task_end`/`during`, `separate`/`combined` | "
        "`during`, `combined` |",
        "| memory per task or in total | GEM/A-GEM `memory_per_task` | a count per task | buffer ÷ tasks |",
        "| JOINT | `joint.schedule` | `cumulative`, `final` (once after the last task) | `final` |",
        "| single pass | `train.epochs`, `train.batch_size` | — | 1 epoch; batch 10 (Seq-MNIST), 128 (P-, R-MNIST) |",
        "| training augmentation (CIFAR, TinyImageNet) | `stream.augment` | `true` (random crop, padding 4, and "
        "horizontal flip of each training batch), `false` | `true`, as Mammoth's `TRANSFORM` |",
        "| what a replay buffer stores | — | clbench's replay methods store the batch as trained on (augmented, on "
        "the image streams) or indices of the stream's images, and replay them unaugmented; Mammoth stores the "
        "unaugmented images and augments each replayed sample | not a setting yet: a batch carries its unaugmented "
        "inputs (`Batch.raw`) and the stream its augmentation (`Stream.augment`), the replay methods read neither "
        "yet; open for `paper-der-cifar` |",
        "",
        "Every result records each of these in its `config`; a table's caption in the leaderboard names the profile "
        "whose rows set them.",
        "",
    ]
    for profile, tree in TREES.items():
        if profile not in regs.profiles.items:
            continue
        spec = regs.profiles.items[profile].targets
        rows = parity(_results(tree), spec)
        ran = [r for r in rows if r.values]
        tally = counts(ran)
        if not ran:
            out += [
                f"## `{profile}`: {spec['paper']}, {spec['table']}",
                "",
                f"Not run yet (`clbench run --profile {profile} --data-dir DIR --out "
                f"results/{tree.relative_to(ROOT / 'results').as_posix()}`).",
                "",
            ]
            continue
        out += [
            f"## `{profile}`: {spec['paper']}, {spec['table']}",
            "",
            f"`results/{tree.relative_to(ROOT / 'results').as_posix()}`: {_wall(tree)}. Rows run: {len(ran)} of "
            f"{len(rows)}; " + ", ".join(f"{k}: {v}" for k, v in sorted(tally.items())) + ".",
            "",
            table(ran, {(s, m): c for (p, s, m), c in CAUSES.items() if p == profile}),
            f"Rows of the table not run here: {_grouped([(r.target.stream, r.target.method) for r in rows if not r.values])}. "
            "Rows of the paper clbench does not implement: "
            f"{_grouped([(n['stream'], n['method']) for n in spec.get('not_implemented', ())], by_method=True)}."
            + "".join(f" Rows run at another scale: `{p}` (its section)." for p in _extensions(regs, profile)),
            "",
        ]
    conventions = _convention_lines(regs)
    if conventions:
        out += ["## One setting changed", "", *conventions]
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/parity.md is not what the results give")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text:
            print(
                f"stale: {PAGE} differs from what the results give; run python scripts/parity_page.py", file=sys.stderr
            )
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
