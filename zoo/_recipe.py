"""A zoo recipe, declared: what the generator, the tests and the tracer read about one entry.

Each ``zoo/<entry>/recipe.py`` ends with ``RECIPE = Recipe(...)``; its functions (the tiny config,
the sample builder, ...) stay module-level so they can be documented and imported on their own.
``load_recipe`` imports the module and validates the declaration, so that a mistake is reported
with the recipe's file and the field, when the zoo is imported rather than deep inside a trace.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import keyword
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


class RecipeError(ValueError):
    """A recipe that does not declare what the zoo needs; the message names its file and field."""

    def __init__(self, path: str | Path, field_name: str, problem: str):
        self.path, self.field_name, self.problem = str(path), field_name, problem
        super().__init__(f"{path}: {field_name}: {problem}")


@dataclass(frozen=True, eq=False)  # one object per recipe: compared and hashed by identity
class Recipe:
    """One zoo entry: how its traceable module is generated, traced by default, and tested."""

    # -- identity ------------------------------------------------------------------------------
    #: ``config.model_type`` the entry serves (its sample builder is registered for it).
    model_type: str
    #: The transformers class the entry makes traceable, e.g. ``"LlavaForConditionalGeneration"``.
    model_class: str

    # -- generation: what the patcher is given beyond its defaults -----------------------------
    #: The modeling module the entry is generated from.
    source_module: str
    #: zoo export name -> class of the generated module (same name as the original class).
    exports: Mapping[str, str]
    #: Module classes the patcher must never hide inside wrapped code.
    patch_targets: Sequence[str]

    # -- tracing defaults ------------------------------------------------------------------------
    #: Sequential targets: one subgraph per instance.
    default_targets: Sequence[str]
    #: Additions to ``patcher.DEFAULT_IGNORE`` when the default targets are used.
    default_ignore: Sequence[str]

    # -- test models and samples -----------------------------------------------------------------
    #: ``tiny_config(**overrides)``: a tiny config of the real classes.
    tiny_config: Callable
    #: ``tiny_model(seed=0, dtype=torch.float32, model_class=None, **overrides)``.
    tiny_model: Callable
    #: ``build_sample(config, *, batch_size, seq_len, num_images, image_size, left_padding, device,
    #: generator, multimodal, dtype)``: processor-free model inputs.
    build_sample: Callable
    #: ``example_image_sizes(config)``: the image sizes tests and sweeps draw from.
    example_image_sizes: Callable

    #: Extra functions or methods to wrap in source, beyond the patcher's defaults.
    patch_ignore: Sequence[str] = ()
    #: Targets when images are given, if they differ (Mllama's cross-attention layers only run then).
    multimodal_targets: Sequence[str] = ()
    #: Opt-in: the vision tower's block classes as sequential targets too (``--vision-blocks``).
    vision_targets: Sequence[str] = ()
    #: Additions to ``patcher.DEFAULT_IGNORE`` with ``vision_targets`` (they replace
    #: ``default_ignore``, whose entries keep the tower opaque).
    vision_ignore: Sequence[str] = ()
    #: The recipe file, set by ``load_recipe``.
    path: str = ""

    def targets(self, multimodal: bool) -> tuple[str, ...]:
        """The sequential targets for a text-only or a multimodal sample."""
        return tuple(self.multimodal_targets or self.default_targets) if multimodal else tuple(self.default_targets)

    @property
    def source_stem(self) -> str:
        """Generated files are named after the modeling module they come from."""
        return self.source_module.rsplit(".", 1)[-1]


_NAME_LISTS = ("patch_targets", "patch_ignore", "default_targets", "default_ignore", "multimodal_targets",
               "vision_targets", "vision_ignore")
_CALLABLES = ("tiny_config", "tiny_model", "build_sample", "example_image_sizes")


def _is_identifier(text) -> bool:
    return isinstance(text, str) and text.isidentifier() and not keyword.iskeyword(text)


def validate(recipe, path: str | Path) -> Recipe:
    """``recipe`` checked field by field, with its tuple fields frozen and ``path`` set."""
    if not isinstance(recipe, Recipe):
        raise RecipeError(path, "RECIPE", f"must be a zoo._recipe.Recipe, got {type(recipe).__name__}")
    for name in ("model_type", "model_class", "source_module"):
        value = getattr(recipe, name)
        if not isinstance(value, str) or not value:
            raise RecipeError(path, name, f"must be a non-empty string, got {value!r}")
    if not _is_identifier(recipe.model_class):
        raise RecipeError(path, "model_class", f"{recipe.model_class!r} is not a class name")
    if not all(_is_identifier(part) for part in recipe.source_module.split(".")):
        raise RecipeError(path, "source_module", f"{recipe.source_module!r} is not a dotted module name")
    if not isinstance(recipe.exports, Mapping) or not recipe.exports:
        raise RecipeError(path, "exports", f"must be a non-empty dict of export name -> class name, "
                                           f"got {recipe.exports!r}")
    for export, class_name in recipe.exports.items():
        if not (_is_identifier(export) and _is_identifier(class_name)):
            raise RecipeError(path, "exports", f"{export!r}: {class_name!r} is not export name: class name")
    if recipe.model_class not in recipe.exports.values():
        raise RecipeError(path, "exports", f"exports no {recipe.model_class!r} (model_class)")
    frozen = {}
    for name in _NAME_LISTS:
        value = getattr(recipe, name)
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise RecipeError(path, name, f"must be a list of names, got {value!r}")
        bad = [item for item in value if not isinstance(item, str) or not item]
        if bad:
            raise RecipeError(path, name, f"entries must be non-empty strings, got {bad!r}")
        frozen[name] = tuple(value)
    if not frozen["default_targets"]:
        raise RecipeError(path, "default_targets", "is empty: name the module classes to cut at")
    for name in _CALLABLES:
        if not callable(getattr(recipe, name)):
            raise RecipeError(path, name, f"must be callable, got {getattr(recipe, name)!r}")
    return dataclasses.replace(recipe, exports=dict(recipe.exports), path=str(path), **frozen)


def load_recipe(module_name: str) -> Recipe:
    """Import the recipe module ``module_name`` and return its validated ``RECIPE``."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin:
        raise ImportError(f"no recipe module {module_name!r}")
    try:
        module = importlib.import_module(module_name)
    except TypeError as exc:  # Recipe(...) with a field missing or misspelt
        names = re.findall(r"'(\w+)'", str(exc)) if "Recipe.__init__" in str(exc) else []
        if not names:
            raise
        raise RecipeError(spec.origin, ", ".join(names), str(exc).replace("Recipe.__init__()", "Recipe()")) from None
    path = Path(spec.origin)
    if not hasattr(module, "RECIPE"):
        raise RecipeError(path, "RECIPE", "not defined: end the recipe with RECIPE = Recipe(...)")
    return validate(module.RECIPE, path)
