"""Samples for the coverage check: text tokens that avoid every special token of the config."""

from __future__ import annotations

from typing import Any

import torch

from .config_tokens import special_tokens
from . import multimodal_sample, text_sample


def _vocab_size(config) -> int:
    try:
        return int(config.get_text_config(decoder=True).vocab_size)
    except Exception:  # noqa: BLE001
        return int(config.vocab_size)


def coverage_text_sample(config, *, batch_size: int, seq_len: int, left_padding: int = 0,
                         seed: int = 0) -> dict[str, Any]:
    """``text_sample`` with special tokens replaced by ordinary ones (an image token in a text-only
    sample asks for image features); encoder-decoder models also get ``decoder_input_ids``."""
    generator = torch.Generator().manual_seed(seed)
    sample = text_sample(config, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                         generator=generator)
    vocab = _vocab_size(config)
    allowed = torch.ones(vocab, dtype=torch.bool)
    special = [token for token in special_tokens(config) if 0 <= token < vocab]
    if special:
        allowed[special] = False
    pool = allowed.nonzero().flatten()

    def draw(shape):
        return pool[torch.randint(len(pool), shape, generator=generator)]

    sample["input_ids"] = draw(sample["input_ids"].shape)
    if getattr(config, "is_encoder_decoder", False):
        sample["decoder_input_ids"] = draw((batch_size, max(2, seq_len // 2)))
    _codebook_layout(config, sample, draw, pool)
    return sample


def _sub(config, name: str):
    sub = getattr(config, name, None)
    return sub if hasattr(sub, "to_dict") else None


def _codebook_layout(config, sample: dict, draw, pool) -> None:
    """Token ids that carry audio codebooks, laid out as the model's ``forward`` takes them (no
    config field names the layout: one entry per family, from each model's forward docstring):

    - MusicGen (and Melody) decoders: ``(batch * num_codebooks, seq)`` codes, ``input_ids`` of the
      decoder-only head, ``decoder_input_ids`` of the text-conditioned model;
    - Dia: ``decoder_input_ids`` ``(batch, seq, num_channels)`` (its 2-D form, ``(batch * channels,
      seq)``, is transposed into a view the decoder cannot ``view``);
    - Kyutai speech-to-text: ``input_ids`` ``(batch, seq, 1 + num_codebooks)``, the text token
      first, then one code per codebook;
    - Moshi: the two audio streams ``moshi_audio_codes`` and ``user_audio_codes``, each
      ``(batch, num_codebooks, seq)``, next to the text ``input_ids``.
    """
    model_type = getattr(config, "model_type", None)
    ids = sample["input_ids"]
    batch, seq = ids.shape[0], ids.shape[-1]
    if model_type in ("musicgen_decoder", "musicgen_melody_decoder"):
        sample["input_ids"] = draw((batch * config.num_codebooks, seq))
    elif model_type in ("musicgen", "musicgen_melody") and "decoder_input_ids" in sample:
        decoder = sample["decoder_input_ids"]
        sample["decoder_input_ids"] = draw((batch * config.decoder.num_codebooks, decoder.shape[-1]))
    elif model_type == "dia" and "decoder_input_ids" in sample:
        decoder = sample["decoder_input_ids"]
        sample["decoder_input_ids"] = draw((batch, decoder.shape[-1], config.decoder_config.num_channels))
    elif model_type == "kyutai_speech_to_text":
        codes = pool[pool < config.codebook_vocab_size]
        audio = codes[torch.randint(len(codes), (batch, seq, config.num_codebooks),
                                    generator=torch.Generator().manual_seed(int(ids.sum())))]
        sample["input_ids"] = torch.cat([ids.unsqueeze(-1), audio], dim=-1)
    elif model_type == "moshi":
        codes = pool[pool < config.audio_vocab_size]
        generator = torch.Generator().manual_seed(int(ids.sum()))
        for name in ("moshi_audio_codes", "user_audio_codes"):
            sample[name] = codes[torch.randint(len(codes), (batch, config.num_codebooks, seq), generator=generator)]


#: Classes whose encoder takes only embeddings, never token ids (the config cannot tell: the same
#: config builds the full model, which takes ids): SeamlessM4T's text-to-unit model reads the text
#: decoder's hidden states ("You cannot pass input_ids to the encoder of the text_to_units model").
EMBEDS_ONLY = {"SeamlessM4TTextToUnitForConditionalGeneration"}


def with_encoder_embeds(model, sample: dict[str, Any], seed: int) -> dict[str, Any]:
    """``sample`` with ``input_ids`` replaced by ``inputs_embeds`` (seeded, unit scale, the model's
    hidden width) for a class of :data:`EMBEDS_ONLY`; other classes' samples unchanged."""
    if model is None or type(model).__name__ not in EMBEDS_ONLY or "input_ids" not in sample:
        return sample
    ids = sample.pop("input_ids")
    generator = torch.Generator().manual_seed(seed + 104729)
    sample["inputs_embeds"] = torch.randn(*ids.shape, model.config.hidden_size, generator=generator)
    return sample


def coverage_multimodal_sample(config, *, batch_size: int, seq_len: int, left_padding: int = 0,
                               seed: int = 0, **layout) -> dict[str, Any]:
    """``multimodal_sample`` with a seeded generator; ``layout``: ``num_images``, ``image_size``,
    ``model`` (counts image tokens with the model's own vision path where the builder takes it)."""
    generator = torch.Generator().manual_seed(seed)
    return multimodal_sample(config, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                             generator=generator, **layout)


def has_multimodal_builder(config) -> bool:
    from . import multimodal_builder

    return multimodal_builder(config.model_type) is not None
