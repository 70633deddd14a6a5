"""The ViT of plugins/vit against transformers' ViT (the same weights under their names), its checkpoint loading,
and the two ways prompt methods reach into it (prompt tokens, attention prefixes) against attention by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from clbench_plugins.vit.model import ViTConfig, _resample_pos_embed, build, load_weights
from safetensors.torch import save_file

from clbench.errors import ConfigError
from clbench.model import StreamInfo, TaskInfo

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ViTConfig(weights="", img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3)
LABELS = tuple(str(i) for i in range(6))
INFO = StreamInfo("s", (TaskInfo("0-2", LABELS, classes=LABELS[:3]), TaskInfo("3-5", LABELS, classes=LABELS[3:])),
                  "image", (3, 32, 32), False)


def _model(config: ViTConfig = TINY, seed: int = 0):
    torch.manual_seed(seed)
    return build(config, INFO)


def _hf_twin(model):
    """transformers' ViTModel with the same weights, renamed from timm's (its q, k, v are separate Linears; the names
    are transformers 5's)."""
    from transformers import ViTConfig as HFConfig
    from transformers import ViTModel as HFViT

    c = model.config
    hf = HFViT(HFConfig(hidden_size=c.embed_dim, num_hidden_layers=c.depth, num_attention_heads=c.num_heads,
                        intermediate_size=int(c.embed_dim * c.mlp_ratio), image_size=c.img_size,
                        patch_size=c.patch_size, layer_norm_eps=1e-6, hidden_act="gelu", qkv_bias=True),
               add_pooling_layer=False).eval()
    vit, d = model.backbone.vit, c.embed_dim
    state = {"embeddings.cls_token": vit.cls_token, "embeddings.position_embeddings": vit.pos_embed,
             "embeddings.patch_embeddings.projection.weight": vit.patch_embed.proj.weight,
             "embeddings.patch_embeddings.projection.bias": vit.patch_embed.proj.bias,
             "layernorm.weight": vit.norm.weight, "layernorm.bias": vit.norm.bias}
    for i, b in enumerate(vit.blocks):
        p = f"layers.{i}."
        for j, name in enumerate(("q", "k", "v")):
            state[p + f"attention.{name}_proj.weight"] = b.attn.qkv.weight[j * d : (j + 1) * d]
            state[p + f"attention.{name}_proj.bias"] = b.attn.qkv.bias[j * d : (j + 1) * d]
        state |= {p + "attention.o_proj.weight": b.attn.proj.weight, p + "attention.o_proj.bias": b.attn.proj.bias,
                  p + "layernorm_before.weight": b.norm1.weight, p + "layernorm_before.bias": b.norm1.bias,
                  p + "layernorm_after.weight": b.norm2.weight, p + "layernorm_after.bias": b.norm2.bias,
                  p + "mlp.fc1.weight": b.mlp.fc1.weight, p + "mlp.fc1.bias": b.mlp.fc1.bias,
                  p + "mlp.fc2.weight": b.mlp.fc2.weight, p + "mlp.fc2.bias": b.mlp.fc2.bias}
    missing, unexpected = hf.load_state_dict({k: v.detach() for k, v in state.items()}, strict=False)
    assert not missing and not unexpected
    return hf


def test_the_encoder_is_transformers_vit_with_the_same_weights():
    model = _model()
    x = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        theirs = _hf_twin(model)(pixel_values=x).last_hidden_state
        ours = model.backbone.vit(x)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.query_features(x), theirs[:, 0])


def test_images_are_resized_and_normalised_before_the_encoder():
    model = _model(ViTConfig(**{**TINY.__dict__, "mean": (0.5, 0.4, 0.3), "std": (0.2, 0.25, 0.5)}))
    small = torch.rand(2, 3, 16, 16)
    by_hand = F.interpolate(small, size=(32, 32), mode="bilinear", align_corners=False)
    by_hand = (by_hand - torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)) / torch.tensor([0.2, 0.25, 0.5]).view(1, 3,
                                                                                                             1, 1)
    with torch.no_grad():
        torch.testing.assert_close(model.features(small), model.backbone.vit(by_hand)[:, 0])


def _attention_by_hand(block, h, prefix):
    """One block's attention with L key and L value vectors in front of the tokens' own, head by head."""
    heads = block.attn.heads
    x = block.norm1(h)
    B, N, C = x.shape
    q, k, v = block.attn.qkv(x).split(C, dim=-1)
    k, v = torch.cat([prefix[:, 0], k], 1), torch.cat([prefix[:, 1], v], 1)
    out = []
    for i in range(heads):
        s = slice(i * C // heads, (i + 1) * C // heads)
        w = (q[..., s] @ k[..., s].transpose(1, 2) / math.sqrt(C // heads)).softmax(-1)
        out.append(w @ v[..., s])
    return block.attn.proj(torch.cat(out, -1))


def test_a_prefix_joins_the_keys_and_values_of_its_block_alone():
    model = _model()
    vit = model.backbone.vit
    x = torch.rand(3, 3, 32, 32)
    prefix = torch.randn(3, 2, 4, 48)
    model.prefix = lambda images: {1: prefix}
    with torch.no_grad():
        h = vit.blocks[0](vit.tokens(x))  # block 0: no prefix
        h = h + _attention_by_hand(vit.blocks[1], h, prefix)
        h = h + vit.blocks[1].mlp(vit.blocks[1].norm2(h))
        torch.testing.assert_close(model.features(x), vit.norm(h)[:, 0], rtol=1e-4, atol=1e-5)
        model.prefix = None
        assert not torch.allclose(model.features(x), vit.norm(h)[:, 0], atol=1e-3)


def test_prompt_tokens_follow_the_class_token_and_the_head_reads_their_mean():
    model = _model()
    vit = model.backbone.vit
    x = torch.rand(2, 3, 32, 32)
    prompt = torch.randn(2, 5, 48)
    model.soft_prompt = lambda images: prompt
    with torch.no_grad():
        patches = vit.patch_embed.proj(x).flatten(2).transpose(1, 2) + vit.pos_embed[:, 1:]
        cls = vit.cls_token + vit.pos_embed[:, :1]
        h = torch.cat([cls.expand(2, -1, -1), prompt + vit.pos_embed[:, :1], patches], 1)
        for block in vit.blocks:
            h = block(h)
        torch.testing.assert_close(model.features(x), vit.norm(h)[:, 1:6].mean(1))
        torch.testing.assert_close(model.query_features(x), vit.norm(h)[:, 0] * 0 + model.backbone(x))  # no prompt


def test_timm_checkpoints_load_by_their_names_and_others_are_refused(tmp_path):
    source = _model(ViTConfig(**{**TINY.__dict__, "img_size": 16}), seed=1)  # a 2×2 grid: resampled to 4×4
    state = {k: v.contiguous() for k, v in source.backbone.vit.state_dict().items()}
    save_file({**state, "head.weight": torch.zeros(1000, 48), "head.bias": torch.zeros(1000)}, tmp_path / "m.safetensors")
    model = _model()
    load_weights(model, str(tmp_path / "m.safetensors"))
    vit = model.backbone.vit
    assert torch.equal(vit.blocks[1].attn.qkv.weight, source.backbone.vit.blocks[1].attn.qkv.weight)
    assert torch.equal(vit.pos_embed, _resample_pos_embed(state["pos_embed"], 4))
    assert torch.equal(vit.pos_embed[:, :1], state["pos_embed"][:, :1]) and vit.pos_embed.shape == (1, 17, 48)
    grid = state["pos_embed"][:, 1:].reshape(1, 2, 2, 48).permute(0, 3, 1, 2)
    by_hand = F.interpolate(grid, size=(4, 4), mode="bicubic", align_corners=False).permute(0, 2, 3, 1)
    torch.testing.assert_close(vit.pos_embed[:, 1:], by_hand.reshape(1, 16, 48))
    frozen = build(ViTConfig(**{**TINY.__dict__, "weights": str(tmp_path / "m.safetensors")}), INFO)
    assert not any(p.requires_grad for p in frozen.backbone.parameters())
    assert all(p.requires_grad for p in frozen.heads.parameters())
    wide = {k: v for k, v in state.items() if k != "norm.bias"}
    save_file(wide, tmp_path / "bad.safetensors")
    with pytest.raises(ConfigError, match="norm.bias missing"):
        load_weights(model, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ConfigError, match="no such file"):
        build(ViTConfig(**{**TINY.__dict__, "weights": "./nowhere.safetensors"}), INFO)


def test_vit_trains_a_class_incremental_cell_on_stand_in_cifar(tmp_path):
    """seqft on the stand-in Seq-CIFAR-10 (pixels in [0, 1]) with a tiny random ViT, its encoder trained too."""
    from clbench_plugins.seq_vision import standin

    from clbench import testing

    standin.write_cifar(tmp_path / "data", "cifar10", train=4, test=2)
    sets = {"model.weights": [""], "model.img_size": [32], "model.patch_size": [8],
            "model.embed_dim": [24], "model.depth": [1], "model.num_heads": [2], "model.freeze": [False],
            "stream.data_dir": [str(tmp_path / "data")], "stream.normalise": [False], "train.epochs": [1],
            "train.batch_size": [4], "train.head": ["task"]}
    results = testing.run(testing.registry(), tmp_path / "runs", "seqft", "seq-cifar10", sets=sets, model="vit-b16",
                          orders=["1"])
    assert [r.status for r in results] == ["complete"]
    result = results[0]
    assert [len(row) for row in result.accuracy_matrix] == [5] * 5
    assert all(0 <= a <= 100 for row in result.accuracy_matrix for a in row if a is not None)
