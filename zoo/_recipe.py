"""A zoo recipe, declared: what the generator, the tests and the tracer read about one entry.

Each ``zoo/<entry>/recipe.py`` ends with ``RECIPE = entry_recipe(globals(), ...)``, a ``Recipe`` of the
names every recipe module defines (:data:`MODULE_NAMES`) and of what is its own; its functions (the
tiny config, the sample builder, ...) stay module-level so they can be documented and imported on
their own. ``RECIPE = Recipe(...)`` with every field spelt out works as well.
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


#: The pixel layouts of the zoo's samples (``SampleLayout.pixels``); the tests check each one's
#: tensors: ``"patch_grid"``: flattened patches ``(sum(t*h*w), C*temporal*patch*patch)`` with
#: ``image_grid_thw`` (Qwen VL); ``"tiles"``: ``(B, num_images, max_num_tiles, C, tile, tile)``
#: with aspect ratio ids, masks and a cross-attention mask (Mllama); ``"fixed_size"``: ``(B *
#: num_images, C, S, S)`` with ``S = vision_config.image_size`` (CLIP, SigLIP towers).
PIXEL_LAYOUTS = ("patch_grid", "tiles", "fixed_size")

#: The sample whose tensor shapes ``RealConfig.sample_shapes`` states:
#: ``multimodal_sample(config, **REAL_SAMPLE)`` on the real config (the default image size).
REAL_SAMPLE = dict(batch_size=2, seq_len=8, num_images=2, left_padding=3)


@dataclass(frozen=True)
class SampleLayout:
    """How one image sits in the entry's multimodal sample: what ``build_sample`` produces and the
    tests check it against (the conventions every builder shares are ``zoo._recipe_helpers``')."""

    #: Config field holding the image token id (``"image_token_id"``, ``"image_token_index"``).
    image_token: str
    #: ``image_token_count(config, image_size)``: image tokens of one image, markers excluded.
    image_token_count: Callable
    #: How ``pixel_values`` and its companion tensors are laid out: one of :data:`PIXEL_LAYOUTS`.
    pixels: str
    #: Config fields of the token ids just before and just after each image's tokens, if any
    #: (Qwen VL's ``vision_start`` / ``vision_end``, Gemma3's ``boi`` / ``eoi``).
    markers: tuple[str, str] | None = None
    #: Sample key that is 1 exactly on image tokens, if the model takes one
    #: (``mm_token_type_ids``, ``token_type_ids``).
    token_type_key: str | None = None
    #: Whether text *before* an image's first token depends on the image too. Mllama's does: its
    #: text cross-attends to the image, and transformers' row mask only zeroes the gated MLP.
    image_reaches_earlier_text: bool = False

    def image_token_id(self, config) -> int:
        return getattr(config, self.image_token)

    def marker_ids(self, config) -> tuple[int, ...]:
        """The ids before and after each image's tokens, or ``()``."""
        return tuple(getattr(config, name) for name in self.markers or ())

    def span_ids(self, config, image_size) -> list[int]:
        """The tokens one image adds to ``input_ids``: its markers around its image tokens."""
        markers = self.marker_ids(config)
        tokens = [self.image_token_id(config)] * self.image_token_count(config, image_size)
        return [markers[0], *tokens, markers[1]] if markers else tokens

    def span(self, config, image_size) -> int:
        """How many tokens one image adds to ``input_ids``."""
        return self.image_token_count(config, image_size) + len(self.marker_ids(config))


@dataclass(frozen=True)
class RealConfig:
    """A bundled real config (``patcher/models/configs/<name>.json``) the entry is traced on at full size
    (on ``meta``), and what that gives. The numbers are measured once and kept here so that a
    change in the model, the recipe or the tracer shows up as a different count."""

    #: The bundled config's name: the MODEL_ID commands and tests take (``"llava-1.5-7b-hf"``).
    name: str
    #: Subgraphs ``patcher trace TraceableX NAME`` gives (the recipe's text targets: decoder layers + 1).
    text_subgraphs: int
    #: Subgraphs ``patcher trace TraceableX NAME --multimodal`` gives (``Recipe.targets(True)``).
    multimodal_subgraphs: int
    #: Module class -> how many the model built from the config has: every class of the default
    #: targets (the decoder layers), and the vision blocks worth knowing.
    layers: Mapping[str, int]
    #: Tokens one image of the default size adds to ``input_ids`` (markers included).
    image_span: int
    #: Shapes of the image tensors of ``multimodal_sample(config, **REAL_SAMPLE)``.
    sample_shapes: Mapping[str, tuple[int, ...]]


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
    #: generator, multimodal, dtype)``: processor-free model inputs, following the conventions in
    #: ``zoo._recipe_helpers``' docstring.
    build_sample: Callable
    #: ``example_image_sizes(config)``: the image sizes tests and sweeps draw from.
    example_image_sizes: Callable
    #: How one image sits in ``build_sample``'s output.
    sample_layout: SampleLayout
    #: The bundled real configs the entry is traced on (at least one).
    real_configs: Sequence[RealConfig]

    #: Extra functions or methods to wrap in source, beyond the patcher's defaults.
    patch_ignore: Sequence[str] = ()
    #: Targets when images are given, if they differ (Mllama's cross-attention layers only run then).
    multimodal_targets: Sequence[str] = ()
    #: Opt-in: the vision tower's block classes as sequential targets too (``--vision-blocks``).
    vision_targets: Sequence[str] = ()
    #: Additions to ``patcher.DEFAULT_IGNORE`` with ``vision_targets`` (they replace
    #: ``default_ignore``, whose entries keep the tower opaque).
    vision_ignore: Sequence[str] = ()
    #: Why the *original* class traces too, if it does (the zoo class must then trace the same
    #: way); empty: the original fails to trace, which the tests expect.
    original_traces: str = ""
    #: The recipe file, set by ``load_recipe``.
    path: str = ""

    def targets(self, multimodal: bool) -> tuple[str, ...]:
        """The sequential targets for a text-only or a multimodal sample."""
        return tuple(self.multimodal_targets or self.default_targets) if multimodal else tuple(self.default_targets)

    @property
    def traceable_class(self) -> str:
        """The export name of the traceable ``model_class`` (``TraceableLlavaForConditionalGeneration``)."""
        return next(name for name, class_name in self.exports.items() if class_name == self.model_class)

    @property
    def source_stem(self) -> str:
        """Generated files are named after the modeling module they come from."""
        return self.source_module.rsplit(".", 1)[-1]


#: Names every recipe module defines, and the ``Recipe`` field each one is: :func:`entry_recipe`
#: reads them from the module, so a recipe spells out only what is its own.
MODULE_NAMES = {"MODEL_TYPE": "model_type", "MODEL_CLASS": "model_class", "VISION_TARGETS": "vision_targets",
                "VISION_IGNORE": "vision_ignore", "SAMPLE_LAYOUT": "sample_layout", "tiny_config": "tiny_config",
                "tiny_model": "tiny_model", "build_sample": "build_sample",
                "example_image_sizes": "example_image_sizes"}


def entry_recipe(namespace: Mapping[str, object], *, exports: Sequence[str], **fields) -> Recipe:
    """The ``Recipe`` of the recipe module whose ``globals()`` is ``namespace``: the fields of
    :data:`MODULE_NAMES` are the module's names of that spelling, and

    - ``exports`` lists the classes of the generated module to export, each as ``Traceable<class>``
      (``model_class`` among them);
    - ``source_module`` is transformers' ``models.<model_type>.modeling_<model_type>`` unless given;
    - ``patch_targets`` are the default and multimodal targets unless given;
    - ``fields`` are the rest of :class:`Recipe`'s (the targets, ignore entries, real configs, ...).

    A module name missing raises :class:`RecipeError` naming the recipe file and the name."""
    path = namespace.get("__file__", namespace.get("__name__", "<recipe>"))
    for name, field_name in MODULE_NAMES.items():
        if field_name in fields:
            continue
        if name not in namespace:
            raise RecipeError(path, name, f"not defined: a recipe module defines {name} (Recipe.{field_name}) "
                                          "before RECIPE = entry_recipe(globals(), ...)")
        fields[field_name] = namespace[name]
    if isinstance(exports, str):
        raise RecipeError(path, "exports", f"must be a list of class names, got {exports!r}")
    fields["exports"] = {f"Traceable{class_name}": class_name for class_name in exports}
    model_type = fields["model_type"]
    fields.setdefault("source_module", f"transformers.models.{model_type}.modeling_{model_type}")
    fields.setdefault("patch_targets", list(dict.fromkeys([*fields.get("default_targets", ()),
                                                           *fields.get("multimodal_targets", ())])))
    return Recipe(**fields)


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
    _validate_layout(recipe.sample_layout, path)
    real_configs = _validate_real_configs(recipe.real_configs, frozen["default_targets"], path)
    if not isinstance(recipe.original_traces, str):
        raise RecipeError(path, "original_traces", f"must be a string (why), got {recipe.original_traces!r}")
    return dataclasses.replace(recipe, exports=dict(recipe.exports), real_configs=real_configs, path=str(path),
                               **frozen)


def _validate_layout(layout, path) -> None:
    if not isinstance(layout, SampleLayout):
        raise RecipeError(path, "sample_layout", f"must be a zoo._recipe.SampleLayout, got {layout!r}")
    if not _is_identifier(layout.image_token):
        raise RecipeError(path, "sample_layout.image_token", f"{layout.image_token!r} is not a config field name")
    if not callable(layout.image_token_count):
        raise RecipeError(path, "sample_layout.image_token_count", f"must be callable, got {layout.image_token_count!r}")
    if layout.pixels not in PIXEL_LAYOUTS:
        raise RecipeError(path, "sample_layout.pixels", f"{layout.pixels!r} is not one of {PIXEL_LAYOUTS}")
    if layout.markers is not None and (len(layout.markers) != 2 or not all(map(_is_identifier, layout.markers))):
        raise RecipeError(path, "sample_layout.markers", f"must be two config field names, got {layout.markers!r}")


def _validate_real_configs(real_configs, default_targets, path) -> tuple[RealConfig, ...]:
    if isinstance(real_configs, RealConfig) or not isinstance(real_configs, Sequence) or not real_configs:
        raise RecipeError(path, "real_configs", f"must be a non-empty list of RealConfig, got {real_configs!r}")
    frozen = []
    for real in real_configs:
        if not isinstance(real, RealConfig):
            raise RecipeError(path, "real_configs", f"entries must be zoo._recipe.RealConfig, got {real!r}")
        where = f"real_configs[{real.name!r}]"
        if not isinstance(real.name, str) or not real.name:
            raise RecipeError(path, "real_configs", f"a RealConfig needs the bundled config's name, got {real.name!r}")
        counts = {"text_subgraphs": real.text_subgraphs, "multimodal_subgraphs": real.multimodal_subgraphs,
                  "image_span": real.image_span, **{f"layers[{k!r}]": v for k, v in dict(real.layers).items()}}
        bad = {field: value for field, value in counts.items() if not isinstance(value, int) or value <= 0}
        if bad:
            raise RecipeError(path, where, f"counts must be positive ints, got {bad}")
        missing = [target for target in default_targets if target not in real.layers]
        if missing:
            raise RecipeError(path, f"{where}.layers", f"gives no count for the default target(s) {missing}")
        frozen.append(dataclasses.replace(real, layers=dict(real.layers),
                                          sample_shapes={k: tuple(v) for k, v in dict(real.sample_shapes).items()}))
    return tuple(frozen)


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
        raise RecipeError(path, "RECIPE", "not defined: end the recipe with RECIPE = entry_recipe(globals(), ...) "
                                         "(or RECIPE = Recipe(...) with every field)")
    return validate(module.RECIPE, path)
