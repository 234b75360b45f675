"""Robot state: vision-language-action policies (PI0) fed a robot state, camera images and a
noisy action chunk.

PI0's ``forward`` has no token-only path: the prefix (camera images and the prompt) goes through
its VLM to fill the cache its action expert (the DiT) attends to, and the expert's sequence is the
robot ``state`` (one token) then the ``chunk_size`` noisy actions at the flow-matching ``timestep``
(``PI0ForConditionalGeneration.forward``: ``embed_action_time(state, noise, timestep)``). A class
whose forward takes ``state`` and ``noise`` gets a ``robot`` attempt:

1. layout 0: batch 2, one camera, left padding on the first prompt;
2. layout 1: batch 1, a longer prompt, two cameras (the second padded out by
   ``pixel_attention_mask``);
3. sample 1 with another robot state (the influence check's varied sample): the chain must give
   eager's new actions too.

The images and prompt are the VLM's own sample (``patcher.samples.images``' builder for
``vlm_config.model_type``), cameras stacked as ``(batch, cameras, C, H, W)``; ``noise`` and
``timestep`` are drawn as the forward would draw them (it draws them itself when not given, which
eager and the chain would each do differently), so both are inputs of the sample.
"""

from __future__ import annotations

import inspect

import torch

from ..declaration import Modality

#: The forward arguments that make a class a policy fed a robot state.
ROBOT_INPUTS = ("state", "noise")
#: The text attempt's stage when eager fails on text alone but runs on the robot sample.
NEEDS_ROBOT = "needs robot state"


def takes_robot_state(cls, config) -> bool:
    try:
        parameters = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False
    return all(name in parameters for name in ROBOT_INPUTS) and getattr(config, "vlm_config", None) is not None


def robot_sample(config, *, batch_size: int, seq_len: int, left_padding: int = 0, cameras: int = 1,
                 seed: int = 0) -> dict:
    """One sample of a PI0-style policy (see the module docstring); ``cameras - 1`` padded cameras
    follow each row's real one."""
    from ..sweep import coverage_multimodal_sample

    generator = torch.Generator().manual_seed(seed + 31337)
    prefix = coverage_multimodal_sample(config.vlm_config, batch_size=batch_size, seq_len=seq_len,
                                        left_padding=left_padding, seed=seed)
    pixels = prefix["pixel_values"]
    if pixels.shape[0] != batch_size:
        raise ValueError(f"the {config.vlm_config.model_type} sample has {pixels.shape[0]} images for {batch_size} "
                         "rows: a policy's prompt takes one camera image per row "
                         "(patcher/samples/robot/modality.py: robot_sample)")
    padding = torch.zeros((batch_size, cameras - 1, *pixels.shape[1:]), dtype=pixels.dtype)
    camera_mask = torch.zeros(batch_size, cameras, dtype=torch.bool)
    camera_mask[:, 0] = True
    return {
        "input_ids": prefix["input_ids"],
        "attention_mask": prefix["attention_mask"],
        "pixel_values": torch.cat([pixels[:, None], padding], dim=1),
        "pixel_attention_mask": camera_mask,
        "state": torch.randn(batch_size, config.max_state_dim, generator=generator),
        "noise": torch.randn(batch_size, config.chunk_size, config.max_action_dim, generator=generator),
        # the forward's own range: Beta(1.5, 1) scaled by 0.999 and offset by 0.001
        "timestep": torch.rand(batch_size, generator=generator) * config.time_sampling_scale
        + config.time_sampling_offset,
    }


def robot_samples(config, model, seed: int) -> list[dict]:
    return [robot_sample(config, batch_size=2, seq_len=8, left_padding=1, seed=seed),
            robot_sample(config, batch_size=1, seq_len=13, cameras=2, seed=seed + 1)]


def with_other_state(sample: dict, seed: int, config=None) -> dict:
    """The sample with only the robot state redrawn."""
    generator = torch.Generator().manual_seed(seed + 7919)
    state = sample["state"]
    return {**sample, "state": torch.randn(state.shape, generator=generator).to(state.dtype)}


def _sample_location(config) -> str:
    return f"patcher/samples/robot/modality.py:{inspect.getsourcelines(robot_sample)[1]}"


ROBOT = Modality(
    label="robot", noun="robot state", attempt="robot", given="with a robot state", varied="the robot state",
    hint="check that the sample's state is max_state_dim wide and that the action expert attends to its token",
    text_alone=NEEDS_ROBOT,
    text_alone_summary="need robot state",
    takes=takes_robot_state,
    samples=robot_samples,
    vary=with_other_state,
    chain_runs_varied=True,
    sample_location=_sample_location,
    # the camera images go through the VLM's tower into the cache the expert attends to
    carries_images=True,
    order=3,
    input_name="state",
)

#: what :mod:`patcher.samples.modalities` finds
MODALITY = ROBOT
