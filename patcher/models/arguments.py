"""The model options every model command takes (``trace``, ``repair``, ``graph``, ``plan``).

Its own module, below the command modules that use it, so that no command module imports another.
"""

from __future__ import annotations

from pathlib import Path


def declared_modality_names() -> list[str]:
    """The folders with a ``patcher/samples/<name>/modality.py`` declaration, found as
    :mod:`patcher.samples.modalities` finds them but without importing them (``--help`` imports
    no torch); :func:`patcher.samples.modalities.named` loads the one chosen."""
    samples = Path(__file__).resolve().parents[1] / "samples"
    return sorted(path.parent.name for path in samples.glob("*/modality.py"))


def add_model_arguments(parser) -> None:
    """MODEL_CLASS MODEL_ID [--multimodal | --modality NAME] [--targets] [--ignore] [--no-default-ignore]:
    shared by commands."""
    parser.add_argument("model_class", metavar="MODEL_CLASS",
                        help="e.g. LlamaForCausalLM, package.module.Class, FILE.py:Class (a patched file) or "
                        "FOLDER:Class (a 'patcher patch -o FOLDER' output)")
    parser.add_argument("model_id", metavar="MODEL_ID", help="bundled config name, directory, config file or hub id")
    sample = parser.add_mutually_exclusive_group()
    sample.add_argument("--multimodal", action="store_true",
                        help="trace with the model's multimodal sample (images; the same as --modality images)")
    names = declared_modality_names()
    sample.add_argument("--modality", choices=names, metavar="NAME",
                        help=f"trace with a sample of this declared modality ({', '.join(names)}; "
                        "patcher/samples/NAME/modality.py), e.g. --modality video")
    parser.add_argument("--targets", nargs="+", metavar="T", help="sequential targets (default: decoder layers)")
    parser.add_argument("--vision-blocks", dest="towers", action="append_const", const="vision", default=[],
                        help="also cut at every block of the vision tower, before the targets (with --multimodal)")
    parser.add_argument("--audio-blocks", dest="towers", action="append_const", const="audio",
                        help="also cut at every block of the audio tower, before the targets")
    parser.add_argument("--ignore", nargs="+", metavar="I", default=[],
                        help="modules/functions to keep opaque, added to the default list")
    parser.add_argument("--no-default-ignore", action="store_true",
                        help="do not keep transformers' mask builders etc. opaque (patcher.DEFAULT_IGNORE)")
    parser.add_argument("--unused-input", nargs="+", metavar="NAME", default=[], dest="unused_inputs",
                        help="sample inputs the model does not read (eager ignores them too); any other input "
                        "that does not reach the graph's output is an error, never dropped silently")


def prepare_from_arguments(args):
    """The :class:`patcher.models.attempt.TraceSetup` that ``add_model_arguments``' options ask for."""
    from . import check_model_id

    check_model_id(args.model_id)  # before torch and the model's module are imported (seconds)
    from .attempt import prepare_trace

    return prepare_trace(args.model_class, args.model_id, multimodal_data=args.multimodal,
                         sequential_targets=args.targets, ignore=[] if args.no_default_ignore else None,
                         extra_ignore=args.ignore, towers=args.towers, modality=args.modality)
