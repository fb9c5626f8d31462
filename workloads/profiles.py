"""Per-layer gradient sizes of large published models, for the gradient-profile mode (no downloads).

Each table is built from the published architecture, one entry per parameter tensor in the order a
forward pass meets them (backward produces their gradients in the reverse order):

- ResNet-50 (He et al. 2016; torchvision's layout): 25,557,032 parameters.
- VGG-16 (Simonyan & Zisserman 2015, configuration D, no batch norm): 138,357,544 parameters.
- BERT-base (Devlin et al. 2019: 12 layers, hidden 768, 12 heads, FFN 3072, vocabulary 30,522,
  512 positions, with the pooler): 109,482,240 parameters.

`scaled(name, factor)` shrinks every layer by the same factor (at least one element each) so a run's
bytes per iteration fit the emulated link rates while the layer mix stays the model's.
"""

from __future__ import annotations

import difflib

from pcnlab.errors import UsageError

Layer = tuple[str, int]  # (parameter name, number of elements)


def _bn(name: str, channels: int) -> list[Layer]:
    return [(f"{name}.weight", channels), (f"{name}.bias", channels)]


def resnet50() -> list[Layer]:
    layers: list[Layer] = [("conv1.weight", 64 * 3 * 7 * 7), *_bn("bn1", 64)]
    inplanes = 64
    for stage, (planes, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=1):
        for block in range(blocks):
            p = f"layer{stage}.{block}"
            layers += [(f"{p}.conv1.weight", inplanes * planes), *_bn(f"{p}.bn1", planes),
                       (f"{p}.conv2.weight", planes * planes * 9), *_bn(f"{p}.bn2", planes),
                       (f"{p}.conv3.weight", planes * planes * 4), *_bn(f"{p}.bn3", planes * 4)]
            if block == 0:
                layers += [(f"{p}.downsample.0.weight", inplanes * planes * 4),
                           *_bn(f"{p}.downsample.1", planes * 4)]
            inplanes = planes * 4
    layers += [("fc.weight", 2048 * 1000), ("fc.bias", 1000)]
    return layers


def vgg16() -> list[Layer]:
    layers: list[Layer] = []
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    cin, index = 3, 0
    for item in cfg:
        if item != "M":
            layers += [(f"features.{index}.weight", item * cin * 9), (f"features.{index}.bias", item)]
            cin = item
            index += 2  # conv, relu
        else:
            index += 1
    for i, (fan_in, fan_out) in zip((0, 3, 6), [(512 * 7 * 7, 4096), (4096, 4096), (4096, 1000)]):
        layers += [(f"classifier.{i}.weight", fan_in * fan_out), (f"classifier.{i}.bias", fan_out)]
    return layers


def bert_base() -> list[Layer]:
    h, ffn, vocab, positions, types, n_layers = 768, 3072, 30522, 512, 2, 12
    layers: list[Layer] = [("embeddings.word_embeddings.weight", vocab * h),
                           ("embeddings.position_embeddings.weight", positions * h),
                           ("embeddings.token_type_embeddings.weight", types * h),
                           ("embeddings.LayerNorm.weight", h), ("embeddings.LayerNorm.bias", h)]
    for i in range(n_layers):
        p = f"encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            layers += [(f"{p}.attention.self.{proj}.weight", h * h), (f"{p}.attention.self.{proj}.bias", h)]
        layers += [(f"{p}.attention.output.dense.weight", h * h), (f"{p}.attention.output.dense.bias", h),
                   (f"{p}.attention.output.LayerNorm.weight", h), (f"{p}.attention.output.LayerNorm.bias", h),
                   (f"{p}.intermediate.dense.weight", h * ffn), (f"{p}.intermediate.dense.bias", ffn),
                   (f"{p}.output.dense.weight", ffn * h), (f"{p}.output.dense.bias", h),
                   (f"{p}.output.LayerNorm.weight", h), (f"{p}.output.LayerNorm.bias", h)]
    layers += [("pooler.dense.weight", h * h), ("pooler.dense.bias", h)]
    return layers


PROFILES = {"resnet50": resnet50, "vgg16": vgg16, "bert-base": bert_base}


def profile(name: str) -> list[Layer]:
    maker = PROFILES.get(name)
    if maker is None:
        close = difflib.get_close_matches(name, PROFILES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"unknown gradient profile {name!r}{hint}; choose one of {', '.join(PROFILES)}")
    return maker()


def scaled(name: str, factor: float) -> list[Layer]:
    if not 0 < factor <= 1:
        raise UsageError(f"profile_scale must be in (0, 1], got {factor}")
    return [(n, max(1, round(size * factor))) for n, size in profile(name)]


def total_params(layers: list[Layer]) -> int:
    return sum(size for _, size in layers)
