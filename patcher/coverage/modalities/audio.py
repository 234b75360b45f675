"""Audio: speech encoder-decoders and audio-text models fed a clip.

A class whose ``forward`` takes an audio clip (``input_features``, ``input_values``) gets an
``audio`` attempt: samples from :mod:`patcher.audio`, all traced once and run through the same
chain of subgraphs, each compared with eager:

1. clip layout 0 (batch 2, left padding on an audio-text model's first row);
2. clip layout 1 (another clip length, or fewer valid frames on a fixed-length Whisper-style tower;
   another batch size and text length);
3. sample 1 with other clip values (the influence check's varied sample): the chain must give
   eager's new output too.

A model that takes a clip is built with unit-gain convolutions (:func:`unit_gain_convolutions`).

A speech model that cannot run on text alone (Whisper: the encoder needs a clip) keeps its text
attempt's eager failure, marked :data:`AUDIO_ONLY` so the report does not list it as the row's
blocker when the audio attempt ran.
"""

from __future__ import annotations

import torch

from .base import Modality

#: The stage of a text attempt that failed only because the model needs a clip.
AUDIO_ONLY = "audio only"


def unit_gain_convolutions(model, seed: int) -> None:
    """Redraw every convolution weight of ``model`` with std ``1 / sqrt(fan_in)``, so that each
    convolution carries its input on at about its own scale, as trained audio front-ends do.

    The init every transformers model uses (std ``initializer_range`` = 0.02) is calibrated for
    fan-ins in the thousands; a convolution's fan-in is its kernel times its input channels per
    group, 9 for a depthwise 3x3. The FastConformer subsampling (Parakeet, Canary, Cohere ASR)
    stacks three such convolutions with no residual and no norm: each scales the clip by ~0.06, so
    ~1e-5 of it is left next to the biases (woken to 0.02 so no path is dead), and the logits move by
    ~1e-6 when only the clip changes. Trained, these towers are driven by the clip; a tiny model whose
    audio is drowned out would hide a graph that drops the clip."""
    generator = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
                weight = module.weight
                fan_in = weight[0].numel()
                value = torch.randn(weight.shape, generator=generator) / fan_in ** 0.5
                weight.copy_(value.to(weight.dtype))


def audio_samples(config, model, seed: int) -> list[dict]:
    """Clip layouts 0 and 1 (see the module docstring)."""
    from ...audio import build_audio_sample

    first = build_audio_sample(model, batch_size=2, seq_len=8, left_padding=1, layout=0,
                               generator=torch.Generator().manual_seed(seed))
    second = build_audio_sample(model, batch_size=1, seq_len=13, layout=1,
                                generator=torch.Generator().manual_seed(seed + 1))
    return [first, second]


def _with_other_audio(sample: dict, seed: int, config) -> dict:
    from ... import audio

    return audio.with_other_audio(sample, seed)


def _has_audio_path(cls, config) -> bool:
    from ...audio import has_audio_path

    return has_audio_path(cls, config)


AUDIO = Modality(
    label="audio", noun="audio", attempt="audio", given="with an audio input", varied="the clip",
    hint="check the sample's audio tokens and clip shape, and that the tiny audio tower carries its input on",
    text_alone=AUDIO_ONLY,
    takes=_has_audio_path,
    samples=audio_samples,
    vary=_with_other_audio,
    chain_runs_varied=True,
)
