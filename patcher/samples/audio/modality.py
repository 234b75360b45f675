"""Audio: speech encoder-decoders and audio-text models fed a clip.

A class whose ``forward`` takes an audio clip (``input_features``, ``input_values``) gets an
``audio`` attempt: samples from :mod:`patcher.samples.audio`, all traced once and run through the same
chain of subgraphs, each compared with eager:

1. clip layout 0 (batch 2, left padding on an audio-text model's first row);
2. clip layout 1 (another clip length, or fewer valid frames on a fixed-length Whisper-style tower;
   another batch size and text length);
3. sample 1 with other clip values (the influence check's varied sample): the chain must give
   eager's new output too.

A model that takes a clip is built with unit-gain convolutions (:func:`unit_gain_convolutions`);
its codec codebooks are drawn from the first clip's frames (:func:`codebooks_from_first_clip`).

A speech model that cannot run on text alone (Whisper: the encoder needs a clip) keeps its text
attempt's eager failure, marked :data:`AUDIO_ONLY` so the report does not list it as the row's
blocker when the audio attempt ran.
"""

from __future__ import annotations

import torch

from ..declaration import Modality

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


#: buffers holding a codec's vector-quantizer codebook, one code per row, that transformers
#: initializes to zeros (training fills them by k-means from the first batch): EnCodec's ``embed``
#: (EncodecEuclideanCodebook), Mimi's ``embed_sum`` (MimiEuclideanCodebook, over its cluster usage)
CODEBOOK_BUFFERS = ("embed", "embed_sum")


def codebooks_from_first_clip(model, seed: int) -> None:
    """Make every all-zero codebook (:data:`CODEBOOK_BUFFERS`) of ``model`` fill itself, on its first
    ``encode``, with rows drawn from the frames it is given, as a codec's k-means init does from its
    first batch. With every code zero, each frame of any clip quantizes to code 0, so a model that
    turns its clip into codes (MusicGen's audio prompt through EnCodec, Csm's Mimi) makes the same
    ids of every clip and no clip reaches the logits. Codes drawn at random would not do either: a
    tiny codec's frames share one large bias-driven direction, so every frame lands on the code
    nearest to that; codes drawn from real frames tell frames apart by what the clip changed. The
    first clip is the sample builder's (seeded), so the codebook is the same on every run."""
    generator = torch.Generator().manual_seed(seed + 3)
    for module in model.modules():
        buffers = dict(module.named_buffers(recurse=False))
        name = next((name for name in CODEBOOK_BUFFERS if name in buffers), None)
        encode = getattr(module, "encode", None)
        if name is None or not callable(encode) or buffers[name].dim() != 2 or buffers[name].any():
            continue
        module.encode = _encode_filling_codebook(module, name, encode, generator)


def _encode_filling_codebook(module, name: str, encode, generator):
    def first_encode(hidden_states, *args, **kwargs):
        codebook = getattr(module, name)
        frames = hidden_states.detach().reshape(-1, hidden_states.shape[-1])
        rows = torch.randint(len(frames), (codebook.shape[0],), generator=generator)
        with torch.no_grad():
            codebook.copy_(frames[rows].to(codebook.dtype))
        if hasattr(module, "_embed"):  # Mimi caches embed_sum over cluster usage
            module._embed = None
        del module.encode  # the class's own encode from now on
        return encode(hidden_states, *args, **kwargs)

    return first_encode


def audio_samples(config, model, seed: int) -> list[dict]:
    """Clip layouts 0 and 1 (see the module docstring). Each is given the text attempt's sample of
    its shape, token ids in the model's codebook layout, for a clip that sits beside a text encoder
    (MusicGen)."""
    from . import build_audio_sample
    from ..sweep import coverage_text_sample

    # here, on the model eager runs, not at build: the traceable copy loads this model's state once
    # the samples are built, codebooks filled; built with the hook too, it would refill them from
    # its own first clip, inside the trace
    codebooks_from_first_clip(model, seed)
    samples = []
    for layout, (batch_size, seq_len, left_padding) in enumerate(((2, 8, 1), (1, 13, 0))):
        # only an encoder-decoder's encoder can be the text encoder a clip sits beside
        text = (coverage_text_sample(config, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                                     seed=seed + layout)
                if getattr(config, "is_encoder_decoder", False) else None)
        samples.append(build_audio_sample(model, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                                          layout=layout, generator=torch.Generator().manual_seed(seed + layout),
                                          text=text))
    return samples


def _with_other_audio(sample: dict, seed: int, config) -> dict:
    from .. import audio

    return audio.with_other_audio(sample, seed)


def _has_audio_path(cls, config) -> bool:
    from . import has_audio_path

    return has_audio_path(cls, config)


def command_sample(config, model, **options) -> tuple[dict, None]:
    """``--modality audio``: one clip per row, its audio tokens counted by the model's own audio path
    on the meta device (a model whose forward must run whole to place them may not run there: the
    error says so)."""
    from . import build_audio_sample
    from ...models.attempt import sample_on_meta

    return sample_on_meta(lambda: build_audio_sample(model, **options), "audio"), None


def _fill_audio_ids(config, cls) -> None:
    from . import fill_audio_ids

    fill_audio_ids(config, cls)


def _unit_gain_where_audio(cls, config, model, seed: int) -> None:
    if _has_audio_path(cls, config):
        unit_gain_convolutions(model, seed)


AUDIO = Modality(
    label="audio", noun="audio", attempt="audio", given="with an audio input", varied="the clip",
    hint="check the sample's audio tokens and clip shape, and that the tiny audio tower carries its input on",
    text_alone=AUDIO_ONLY,
    takes=_has_audio_path,
    samples=audio_samples,
    vary=_with_other_audio,
    chain_runs_varied=True,
    order=2,
    input_name="input_features",
    prepare_config=_fill_audio_ids,
    prepare_model=_unit_gain_where_audio,
    # every convolution of the model first: a timm tower's (images' redraw) wins inside the tower
    prepare_order=0,
    command_sample=command_sample,
)

#: what :mod:`patcher.samples.modalities` finds
MODALITY = AUDIO
