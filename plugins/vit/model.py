"""A pretrained ViT-B/16 (Dosovitskiy et al. 2021), frozen or not, with one shared head (or one per task) and the two
ways the prompt methods reach into it: prompt tokens in front of the patches (L2P) and key/value prefixes in the
attention of chosen blocks (DualPrompt, CODA-Prompt).

The network is written here, with timm's parameter names, and loads timm's checkpoints as they are (``model.weights``:
a hub repository such as ``timm/vit_base_patch16_224.augreg_in21k_ft_in1k``, which holds ``model.safetensors``, or a
local ``.safetensors`` file). Why not timm itself: timm imports torchvision, whose wheels are built against one torch
build (with the CPU torch wheel clbench's CI pins, torchvision's operators fail to register at import), and the
prompt methods need the inside of the attention, which timm's blocks do not expose. What is here is the standard
pre-norm encoder: a 16×16 patch embedding, a class token, learned position embeddings, 12 blocks of multi-head
self-attention and a GELU MLP (LayerNorm ε 1e-6), and a final LayerNorm.

The prompt interface (capabilities ``soft-prompt`` and ``prefix``; a method sets the callables):

* ``model.soft_prompt``: None, or a callable from the batch's images to ``(B, P, d)`` tokens, put after the class
  token with its position embedding ([CLS, prompts, patches]: L2P's PyTorch code and Mammoth; the official JAX code
  puts them before [CLS] without one). With prompt tokens the head reads the mean of their outputs (L2P's
  ``head_type="prompt"``), else the class token's;
* ``model.prefix``: None, or a callable from the images to ``{block: (B, 2, L, d)}``, L key and L value vectors
  prepended to that block's keys and values;
* ``model.query_features(images)``: ``(B, d)``, the class token's output after the final norm, without prompt or
  prefix, the model in eval mode: the query every prompt method matches its keys against.

Images arrive as the stream gives them (``stream.normalise=false``: in [0, 1]); the model normalises with
``model.mean``/``model.std`` (the prompt papers' code: none, 0 and 1) and resizes them to ``model.img_size``
(bilinear; the papers' code resizes with PIL before cropping).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from clbench import hub
from clbench.config import bounded, setting
from clbench.errors import ConfigError
from clbench.model import HeadedModel, StreamInfo

Prefixes = dict[int, Tensor]


@dataclass(frozen=True)
class ViTConfig:
    weights: str = setting("timm/vit_base_patch16_224.augreg_in21k_ft_in1k", help=(
        "timm's checkpoint: a hub repository holding model.safetensors, or a local .safetensors file (timm's "
        "parameter names; its head is not read); \"\": random weights (tests, training from scratch). The default "
        "is the ImageNet-21k weights fine-tuned on ImageNet-1k that Mammoth's prompt methods load; L2P's and "
        "DualPrompt's official code loads ImageNet-21k only (timm/vit_base_patch16_224.augreg_in21k)"))
    img_size: int = bounded(224, ge=1, help="images are resized to this (bilinear)")
    patch_size: int = bounded(16, ge=1)
    embed_dim: int = bounded(768, ge=1)
    depth: int = bounded(12, ge=1)
    num_heads: int = bounded(12, ge=1)
    mlp_ratio: float = bounded(4.0, gt=0)
    freeze: bool = setting(True, help="the encoder frozen (the prompt methods'); the head always trains")
    mean: tuple[float, ...] = setting((0.0, 0.0, 0.0), help="per-channel mean subtracted from the images")
    std: tuple[float, ...] = setting((1.0, 1.0, 1.0), help="per-channel sd the images are divided by")
    multi_head: bool | None = None

    def __post_init__(self) -> None:
        if self.num_heads < 1 or self.patch_size < 1:
            return  # out of range: named by the range check
        if self.embed_dim % self.num_heads:
            raise ConfigError(f"model.embed_dim={self.embed_dim} is not a multiple of model.num_heads={self.num_heads}")
        if self.img_size % self.patch_size:
            raise ConfigError(f"model.img_size={self.img_size} is not a multiple of model.patch_size={self.patch_size}")


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, prefix: Tensor | None = None) -> Tensor:
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        if prefix is not None:  # (B, 2, L, C): L keys and L values in front of the tokens' own
            pk, pv = (prefix[:, i].reshape(B, -1, self.heads, C // self.heads).transpose(1, 2).to(q.dtype)
                      for i in (0, 1))
            k, v = torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: Tensor, prefix: Tensor | None = None) -> Tensor:
        x = x + self.attn(self.norm1(x), prefix)
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, patch: int, channels: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(channels, dim, patch, stride=patch)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class VisionTransformer(nn.Module):
    """The encoder, timm's names: ``patch_embed``, ``cls_token``, ``pos_embed``, ``blocks``, ``norm``."""

    def __init__(self, c: ViTConfig, channels: int) -> None:
        super().__init__()
        grid = c.img_size // c.patch_size
        self.patch_embed = PatchEmbed(c.patch_size, channels, c.embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, grid * grid + 1, c.embed_dim) * 0.02)
        self.blocks = nn.ModuleList(Block(c.embed_dim, c.num_heads, c.mlp_ratio) for _ in range(c.depth))
        self.norm = nn.LayerNorm(c.embed_dim, eps=1e-6)
        nn.init.normal_(self.cls_token, std=1e-6)

    def tokens(self, x: Tensor, prompt: Tensor | None = None) -> Tensor:
        """[CLS, prompt, patches] with their position embeddings (the prompt takes the class token's)."""
        patches = self.patch_embed(x) + self.pos_embed[:, 1:]
        cls = (self.cls_token + self.pos_embed[:, :1]).expand(len(x), -1, -1)
        parts = [cls, patches] if prompt is None else [cls, prompt.to(patches.dtype) + self.pos_embed[:, :1], patches]
        return torch.cat(parts, dim=1)

    def forward(self, x: Tensor, prompt: Tensor | None = None, prefixes: Prefixes | None = None) -> Tensor:
        h = self.tokens(x, prompt)
        for i, block in enumerate(self.blocks):
            h = block(h, None if prefixes is None else prefixes.get(i))
        return self.norm(h)


class ViTBody(nn.Module):
    """Images as the stream gives them to the feature the head reads: resized, normalised, encoded; the class token's
    output, or with prompt tokens the mean of theirs. Called on images alone (iCaRL's features), no prompt."""

    def __init__(self, config: ViTConfig, channels: int) -> None:
        super().__init__()
        self.vit = VisionTransformer(config, channels)
        self.size = config.img_size
        self.register_buffer("mean", torch.tensor(config.mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(config.std).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: Tensor, prompt: Tensor | None = None, prefixes: Prefixes | None = None) -> Tensor:
        if x.shape[-2:] != (self.size, self.size):
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)
        out = self.vit((x - self.mean) / self.std, prompt, prefixes)
        return out[:, 1 : 1 + prompt.shape[1]].mean(1) if prompt is not None else out[:, 0]


class ViTModel(HeadedModel):
    """The encoder, then the head; the prompt methods' callables asked on every forward."""

    backbone: ViTBody

    def __init__(self, config: ViTConfig, info: StreamInfo) -> None:
        super().__init__(ViTBody(config, info.input_shape[0]), config.embed_dim, info)
        self.config = config
        self.soft_prompt: Callable[[Tensor], Tensor | None] | None = None
        self.prefix: Callable[[Tensor], Prefixes | None] | None = None

    @property
    def embedding_dim(self) -> int:
        return self.config.embed_dim

    @property
    def num_blocks(self) -> int:
        return self.config.depth

    def features(self, x: Tensor) -> Tensor:
        prompt = self.soft_prompt(x) if self.soft_prompt is not None else None
        prefixes = self.prefix(x) if self.prefix is not None else None
        return self.backbone(x, prompt, prefixes)

    @torch.no_grad()
    def query_features(self, x: Tensor) -> Tensor:
        """``(B, d)`` float32: the class token's output without prompt or prefix, in eval mode (the prompt methods'
        query: the same for an image in training and in test)."""
        was = self.backbone.training
        self.backbone.eval()
        try:
            return self.backbone(x).float()
        finally:
            self.backbone.train(was)


def _resample_pos_embed(pos: Tensor, grid: int) -> Tensor:
    """A checkpoint's (1, 1 + g², d) position embeddings on another grid: the patches' bicubically resized (timm's
    ``resample_abs_pos_embed``), the class token's as it is."""
    old = int(math.isqrt(pos.shape[1] - 1))
    if old == grid:
        return pos
    patches = pos[:, 1:].reshape(1, old, old, -1).permute(0, 3, 1, 2)
    patches = F.interpolate(patches.float(), size=(grid, grid), mode="bicubic", align_corners=False)
    return torch.cat([pos[:, :1], patches.permute(0, 2, 3, 1).reshape(1, grid * grid, -1).to(pos.dtype)], dim=1)


def checkpoint_file(weights: str) -> Path:
    """The local ``.safetensors`` file of ``model.weights``: a file, a folder holding ``model.safetensors``, or a
    hub repository (downloaded, or read from the hub cache offline)."""
    path = Path(weights).expanduser()
    if path.is_dir():
        path = path / "model.safetensors"
    if path.is_file():
        return path
    if not hub.looks_like_hub_id(weights):
        raise ConfigError(f"model.weights={weights!r}: no such file, and not a hub repository name")
    hub.require(weights, "model.weights", "give a local .safetensors file (model.weights=PATH)")
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(weights, "model.safetensors"))


def load_weights(model: ViTModel, weights: str) -> None:
    """timm's checkpoint into the encoder (its head, pre-logits and any other key outside the encoder unread)."""
    from safetensors.torch import load_file

    file = checkpoint_file(weights)
    state = load_file(str(file))
    own = model.backbone.vit.state_dict()
    if "pos_embed" in state:
        state["pos_embed"] = _resample_pos_embed(state["pos_embed"], model.config.img_size // model.config.patch_size)
    missing = sorted(set(own) - set(state))
    wrong = sorted(k for k in own if k in state and state[k].shape != own[k].shape)
    if missing or wrong:
        detail = ", ".join([*(f"{k} missing" for k in missing[:3]),
                            *(f"{k} {tuple(state[k].shape)} ≠ {tuple(own[k].shape)}" for k in wrong[:3])])
        raise ConfigError(f"model.weights={weights!r} ({file}): not a checkpoint of this ViT ({detail}); check "
                          "model.embed_dim, depth, num_heads and patch_size against the checkpoint")
    model.backbone.vit.load_state_dict({k: state[k] for k in own})


def build(config: ViTConfig, info: StreamInfo) -> ViTModel:
    if len(info.input_shape) != 3:
        raise ConfigError(f"model vit-b16 takes images (C, H, W); stream {info.name!r} gives {info.input_shape}")
    if len(config.mean) != info.input_shape[0] or len(config.std) != info.input_shape[0]:
        raise ConfigError(f"model.mean and model.std need one value per channel ({info.input_shape[0]})")
    model = ViTModel(config, info)
    if config.weights:
        load_weights(model, config.weights)
    if config.freeze:
        model.backbone.requires_grad_(False)
    return model
