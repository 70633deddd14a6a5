"""The kit's tiny plugin: synthetic streams and a text model that test plumbing, never accuracy claims.

:class:`TinyPlugin` registers the streams ``tiny-vector``, ``tiny-cil``, ``tiny-image`` and ``tiny-text``, the model
``tiny-text`` and the ``test`` profile (:data:`clbench.cell.TEST_PROFILE`) the kit plans its cells in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from clbench.cell import TEST_PROFILE
from clbench.data import Split, Stream, TaskData, TaskInfo
from clbench.hookspecs import hookimpl
from clbench.model import CLModel, StreamInfo
from clbench.specs import EmptyConfig, ModelSpec, ProfileSpec, StreamSpec

_WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta")


class TinyVectorStream(Stream):
    """Two (or more) tasks of 2-class Gaussian blobs in 8 dimensions; each task has its own means."""

    def __init__(self, config: Any = None, tasks: int = 2, n: int = 64) -> None:
        names = [f"t{i}" for i in range(tasks)]
        super().__init__(
            "tiny-vector",
            [TaskInfo(t, ("a", "b")) for t in names],
            {"1": names, "2": names[::-1]},
            modality="vector",
            input_shape=(8,),
            multi_head=True,
        )
        self.n = n

    def load(self, info: TaskInfo) -> TaskData:
        g = torch.Generator().manual_seed(1000 + int(info.name[1:]))
        means = torch.randn(2, 8, generator=g) * 2

        def split(n: int) -> Split:
            y = torch.arange(n) % 2
            return Split(means[y] + torch.randn(n, 8, generator=g), y)

        return TaskData(info, split(self.n), split(self.n // 2), split(self.n // 4))


class TinyClassIncrementalStream(TinyVectorStream):
    """tiny-vector as a class-incremental stream: task t0 holds classes a, b and t1 c, d; one head over the four."""

    def __init__(self, config: Any = None, n: int = 64) -> None:
        labels = ("a", "b", "c", "d")
        Stream.__init__(
            self,
            "tiny-cil",
            [TaskInfo("t0", labels, classes=("a", "b")), TaskInfo("t1", labels, classes=("c", "d"))],
            {"1": ["t0", "t1"], "2": ["t1", "t0"]},
            modality="vector",
            input_shape=(8,),
            multi_head=False,
            scenario="class-incremental",
        )
        self.n = n

    def load(self, info: TaskInfo) -> TaskData:
        data = super().load(info)
        assert data.val is not None  # TinyVectorStream.load makes all three splits
        first = 2 * int(info.name[1:])  # t0: a, b (0, 1); t1: c, d (2, 3)
        return TaskData(info, *(Split(s.x, s.y + first) for s in (data.train, data.test, data.val)))


class TinyImageStream(Stream):
    """Two class-incremental tasks of 3×8×8 images, two classes each (a, b; c, d): each class an image of its own
    plus noise, one head over the four (the prompt methods' test bed, on a tiny ViT)."""

    def __init__(self, config: Any = None, n: int = 32) -> None:
        labels = ("a", "b", "c", "d")
        super().__init__(
            "tiny-image",
            [TaskInfo("t0", labels, classes=("a", "b")), TaskInfo("t1", labels, classes=("c", "d"))],
            {"1": ["t0", "t1"], "2": ["t1", "t0"]},
            modality="image",
            input_shape=(3, 8, 8),
            multi_head=False,
            scenario="class-incremental",
        )
        self.n = n

    def load(self, info: TaskInfo) -> TaskData:
        first = 2 * int(info.name[1:])
        g = torch.Generator().manual_seed(2000 + first)
        means = torch.rand(2, 3, 8, 8, generator=g)

        def split(n: int) -> Split:
            y = torch.arange(n) % 2
            x = (means[y] + 0.1 * torch.randn(n, 3, 8, 8, generator=g)).clamp(0, 1)
            return Split(x, y + first)

        return TaskData(info, split(self.n), split(self.n // 2), split(self.n // 4))


class TinyTextStream(Stream):
    """Two tasks over short word strings: the label is which of two marker words the text contains."""

    def __init__(self, config: Any = None, tasks: int = 2, n: int = 32) -> None:
        names = [f"w{i}" for i in range(tasks)]
        super().__init__(
            "tiny-text",
            [TaskInfo(t, (_WORDS[2 * i], _WORDS[2 * i + 1]), group="TC") for i, t in enumerate(names)],
            {"1": names, "2": names[::-1]},
            modality="text",
            multi_head=False,
        )
        self.n = n

    def load(self, info: TaskInfo) -> TaskData:
        g = torch.Generator().manual_seed(2000 + int(info.name[1:]))

        def split(n: int) -> Split:
            y = torch.randint(0, 2, (n,), generator=g)
            fillers = torch.randint(0, len(_WORDS), (n, 3), generator=g).tolist()
            texts = [
                " ".join([_WORDS[f] for f in fill] + [info.labels[int(c)]]) for fill, c in zip(fillers, y, strict=True)
            ]
            return Split(texts, y)

        return TaskData(info, split(self.n), split(self.n // 2), split(self.n // 4))


class TinyTextModel(CLModel):
    """A bag-of-words text model with attention-like ``q``/``v`` Linear layers for LoRA plumbing tests.

    Logits are the similarity of the pooled text feature with each label word's feature, as the
    ``encoder`` plugin does with a real sentence encoder. It provides ``lora_targets``, takes a soft prompt
    (``soft_prompt``, :mod:`clbench_plugins._shared.soft_prompt`'s contract: the prompt's vectors are pooled with
    the words' embeddings) and stands in for a generative model (``sample``, ``generation_loss``).
    """

    def __init__(self, info: StreamInfo, dim: int = 16) -> None:
        super().__init__()
        self.info = info
        self.vocab = {w: i for i, w in enumerate(_WORDS)}
        self.embed = nn.EmbeddingBag(len(_WORDS) + 1, dim, mode="mean")
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"q": nn.Linear(dim, dim), "v": nn.Linear(dim, dim)}) for _ in range(2)
        )
        self.lora_targets = [f"blocks.{i}.{n}" for i in range(2) for n in ("q", "v")]
        self.soft_prompt: Callable[[Tensor, Tensor], Tensor | None] | None = None
        self.embedding_dim = dim
        for p in self.parameters():
            p.requires_grad_(False)

    def vocabulary_ids(self) -> Tensor:
        return torch.arange(len(_WORDS))

    def token_embeddings(self, ids: Tensor) -> Tensor:
        return self.embed.weight[ids]

    def _ids(self, texts: list[str]) -> tuple[Tensor, Tensor]:
        """Right-padded word ids (an unknown word: the last row) and their mask."""
        rows = [[self.vocab.get(w, len(_WORDS)) for w in t.split()] or [len(_WORDS)] for t in texts]
        width = max(len(r) for r in rows)
        device = self.embed.weight.device
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows], device=device)
        return ids, torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)

    def _encode(self, texts: list[str], prompted: bool = False) -> Tensor:
        ids, mask = self._ids(texts)
        prompt = self.soft_prompt(ids, mask) if prompted and self.soft_prompt is not None else None
        if prompt is None:
            flat = ids[mask.bool()]  # the words alone, averaged by the bag
            offsets = torch.cat([mask.new_zeros(1), mask.sum(1)[:-1]]).cumsum(0)
            h = self.embed(flat, offsets)
        else:
            m = mask.unsqueeze(-1).to(self.embed.weight.dtype)
            h = ((self.embed.weight[ids] * m).sum(1) + prompt.sum(1)) / (m.sum(1) + prompt.shape[1])
        for block in cast("Iterable[nn.ModuleDict]", self.blocks):
            h = h + torch.tanh(block["v"](h) * torch.sigmoid(block["q"](h)))
        return h

    @torch.no_grad()
    def query_features(self, input_ids: Tensor, attention: Tensor) -> Tensor:
        words = [
            " ".join(_WORDS[i] if i < len(_WORDS) else "?" for i, on in zip(r, a, strict=True) if on)
            for r, a in zip(input_ids.tolist(), attention.tolist(), strict=True)
        ]
        return self._encode(words)

    @torch.no_grad()
    def sample(self, prompts: list[str], max_new_tokens: int, top_k: int, repetition_penalty: float) -> list[str]:
        """Capability ``generation``: words drawn from torch's RNG, then ``__ans__`` and one more word (a stand-in
        for an LM's pseudo samples: some name a task's label, some do not)."""
        words = torch.randint(len(_WORDS), (len(prompts), max(1, min(max_new_tokens, 4)) + 1)).tolist()
        return [" ".join(_WORDS[w] for w in row[:-1]) + " __ans__ " + _WORDS[row[-1]] for row in words]

    def generation_loss(self, prompts: list[str], targets: list[str]) -> Tensor:
        """A bag-of-words LM: each known word of a target scored against the vocabulary from the prompt's
        feature (soft prompt included); the mean cross-entropy."""
        h = self._encode(list(prompts), prompted=True)
        logits = h @ self.embed.weight[: len(_WORDS)].T
        rows = [(b, self.vocab[w]) for b, t in enumerate(targets) for w in t.split() if w in self.vocab]
        if not rows:
            return logits.sum() * 0
        b, w = zip(*rows, strict=True)
        return nn.functional.cross_entropy(logits[list(b)], torch.tensor(w, device=logits.device))

    def forward(self, x: list[str], task: str) -> Tensor:
        labels = list(self.info.tasks[[t.name for t in self.info.tasks].index(task)].labels)
        if self.training:
            self.tokens_seen += sum(len(s.split()) for s in x)
        return (
            4.0
            * nn.functional.normalize(self._encode(list(x), prompted=True), dim=-1)
            @ nn.functional.normalize(self._encode(labels), dim=-1).T
        )


@dataclass(frozen=True)
class TinyTextConfig:
    dim: int = 16
    multi_head: bool | None = None


class TinyPlugin:
    """Registers the tiny streams, the tiny text model and the ``test`` profile."""

    @hookimpl
    def clbench_add_streams(self) -> list[StreamSpec]:
        preset = {"orders": ["1"], "train.epochs": 2, "train.batch_size": 16, "train.lr": 0.05}
        return [
            StreamSpec(
                "tiny-vector",
                TinyVectorStream,
                EmptyConfig,
                "synthetic 2-task blobs (tests only)",
                presets={TEST_PROFILE: {**preset, "model": "mlp", "model.hidden": [16]}},
            ),
            StreamSpec(
                "tiny-text",
                TinyTextStream,
                EmptyConfig,
                "synthetic 2-task word strings (tests only)",
                presets={TEST_PROFILE: {**preset, "model": "tiny-text"}},
            ),
            StreamSpec(
                "tiny-image",
                TinyImageStream,
                EmptyConfig,
                "synthetic 2-task images, class-incremental (tests only)",
                # a tiny random ViT, wide enough for coda-prompt's 100 orthogonal components, deep enough for
                # dualprompt's blocks 0-4
                presets={
                    TEST_PROFILE: {
                        **preset,
                        "model": "vit-b16",
                        "model.weights": "",
                        "model.img_size": 8,
                        "model.patch_size": 4,
                        "model.embed_dim": 100,
                        "model.depth": 5,
                        "model.num_heads": 2,
                        "model.mlp_ratio": 1.0,
                        "train.optimizer": "adam",
                        "train.lr": 0.01,
                        "train.head": "task",
                    }
                },
            ),
            StreamSpec(
                "tiny-cil",
                TinyClassIncrementalStream,
                EmptyConfig,
                "synthetic 2-task blobs, class-incremental (tests only)",
                presets={TEST_PROFILE: {**preset, "model": "mlp", "model.hidden": [16]}},
            ),
        ]

    @hookimpl
    def clbench_add_models(self) -> list[ModelSpec]:
        return [
            ModelSpec(
                "tiny-text",
                lambda cfg, info: TinyTextModel(info, cfg.dim),
                TinyTextConfig,
                "bag-of-words model with q/v layers (tests only)",
                modalities=frozenset({"text"}),
                provides=frozenset({"lora", "soft-prompt", "generation"}),
            )
        ]

    @hookimpl
    def clbench_add_profiles(self) -> list[ProfileSpec]:
        # a checkpoint after every task: the resume checks kill a cell after its first task
        return [
            ProfileSpec(
                TEST_PROFILE,
                "tiny synthetic streams for plugin tests",
                seeds=(0,),
                streams=("tiny-vector", "tiny-text"),
                sets={"train.checkpoint_every_s": 0},
            )
        ]
