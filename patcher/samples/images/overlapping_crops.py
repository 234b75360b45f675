"""Overlapping crops pooled by index (Molmo2): each image is a low-resolution view of the whole image
plus the overlapping square crops of a canvas, every crop the tower's ``image_size`` (``S``), cut
into patches: ``pixel_values (sum of crops, (S / patch)**2, patch * patch * C)``. The adapter pools
patch features into image tokens by index: ``image_token_pooling (tokens, pool_h * pool_w)``
(int32) lists, per token, the patches it pools (numbered across all crops of all images; -1 pads
windows at the edges), ``image_grids (N, 4)`` the pooled rows and columns of the low- and the
high-resolution view, ``image_num_crops (N,)`` the crops per image.

An image size here is the processor's canvas: ``tiles * window + margins`` pixels a side, where a
crop overlaps its neighbours by the margins (``S / patch - margins`` patches of window); any number
of tiles a side. The pooling window (2 x 2) and the margins (4 patches each side; none in a crop
too small for them) are the image processor's defaults (the config names neither).

The processor frames the low- and high-resolution runs with ``<low_res_im_start>`` / ``<im_start>``
... ``<im_end>``, ends each row with ``<im_col>`` (a token the config does not name) and marks all
of them image tokens in ``mm_token_type_ids``; the model places features by the placeholder id
alone: here each image is one run of placeholders, the only tokens marked."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .layout import ImageLayout, num_channels, register_layout, side, vision_config

#: the image processor's defaults (Molmo2ImageProcessor.pooling_size, .overlap_margins)
POOLING = (2, 2)
OVERLAP_MARGINS = (4, 4)


def _patch(config) -> int:
    return side(vision_config(config).patch_size)


def _crop(config) -> int:
    return side(vision_config(config).image_size)


def _margins(config) -> tuple[int, int]:
    """Overlap margins in patches: the processor's where a crop has room for them and a window of
    at least a patch between, none in a crop too small for them (a tower shrunk to a few patches)."""
    return OVERLAP_MARGINS if _crop(config) // _patch(config) > sum(OVERLAP_MARGINS) else (0, 0)


def _window(config) -> int:
    """Pixels a crop advances by: its size less the overlap margins."""
    return _crop(config) - sum(_margins(config)) * _patch(config)


def _canvas(config, tiles: tuple[int, int]) -> tuple[int, int]:
    margin = sum(_margins(config)) * _patch(config)
    return tiles[0] * _window(config) + margin, tiles[1] * _window(config) + margin


def default_size(config) -> tuple[int, int]:
    return _canvas(config, (1, 1))  # one crop: the canvas is the crop


def other_size(config) -> tuple[int, int]:
    return _canvas(config, (1, 2))  # two crops side by side: another crop and token count


def tiling(config, size) -> tuple[int, int]:
    """Crops per side of a canvas of ``size`` pixels."""
    margin, window = sum(_margins(config)) * _patch(config), _window(config)
    rows, columns = ((length - margin) // window for length in size)
    if rows < 1 or columns < 1 or _canvas(config, (rows, columns)) != tuple(size):
        raise ValueError(f"{config.model_type} image size {size} must be a canvas of whole overlapping crops: "
                         f"tiles * {window} + {margin} pixels a side (the processor resizes images to such sizes)")
    return rows, columns


def _pool(index_grid: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """The patch indices each token pools: the grid cut into ``POOLING`` windows, padded with -1 evenly
    at both ends; and the pooled rows and columns."""
    pool_h, pool_w = POOLING
    pad_h, pad_w = (-length % pool for length, pool in zip(index_grid.shape, POOLING))
    grid = F.pad(index_grid, (pad_w // 2, (pad_w + 1) // 2, pad_h // 2, (pad_h + 1) // 2), value=-1)
    rows, columns = grid.shape[0] // pool_h, grid.shape[1] // pool_w
    return grid.reshape(rows, pool_h, columns, pool_w).permute(0, 2, 1, 3).reshape(-1, pool_h * pool_w), rows, columns


def _high_resolution_grid(config, tiles: tuple[int, int]) -> torch.Tensor:
    """The canvas's patch indices: every crop's patches numbered crop after crop, the overlap margins
    between crops dropped (each canvas patch is taken from one crop)."""
    per_side = _crop(config) // _patch(config)
    left, right = _margins(config)
    grid = torch.arange(tiles[0] * tiles[1] * per_side**2, dtype=torch.int32).reshape(*tiles, per_side, per_side)
    if left:
        grid[1:, :, :left, :] = -1
        grid[:, 1:, :, :left] = -1
    if right:
        grid[:-1, :, -right:, :] = -1
        grid[:, :-1, :, -right:] = -1
    canvas = _canvas(config, tiles)
    kept = grid.permute(0, 2, 1, 3).reshape(-1)
    return kept[kept >= 0].reshape(canvas[0] // _patch(config), canvas[1] // _patch(config))


def _image(config, size) -> tuple[torch.Tensor, list[int], int]:
    """One image's pooling indices (its crops' patches numbered from 0, the low-resolution view
    first), its ``image_grids`` row and its crop count."""
    tiles = tiling(config, size)
    per_side = _crop(config) // _patch(config)
    low, low_rows, low_columns = _pool(torch.arange(per_side**2, dtype=torch.int32).reshape(per_side, per_side))
    high, high_rows, high_columns = _pool(_high_resolution_grid(config, tiles))
    high = torch.where(high >= 0, high + per_side**2, -1)  # after the low-resolution view's patches
    return torch.cat([low, high]), [low_rows, low_columns, high_rows, high_columns], 1 + tiles[0] * tiles[1]


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    patch, per_side = _patch(config), _crop(config) // _patch(config)
    pooling, grids, crops = [], [], []
    for size in sizes:
        indices, grid, count = _image(config, size)
        offset = sum(crops) * per_side**2  # patches of the images before
        pooling.append(torch.where(indices >= 0, indices + offset, -1))
        grids.append(grid)
        crops.append(count)
    dim = patch * patch * num_channels(vision_config(config))
    return {"pixel_values": torch.randn(sum(crops), per_side**2, dim, generator=generator).to(dtype),
            "image_token_pooling": torch.cat(pooling), "image_grids": torch.tensor(grids, dtype=torch.long),
            "image_num_crops": torch.tensor(crops, dtype=torch.long)}


def config_count(config, size) -> int:
    _, (low_rows, low_columns, high_rows, high_columns), _ = _image(config, size)
    return low_rows * low_columns + high_rows * high_columns


LAYOUT = register_layout(ImageLayout(
    name="overlapping_crops",
    model_types=("molmo2",),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count,
))
