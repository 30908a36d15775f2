"""Trained watermark schemes (HiDDeN, guidance, MOLM) saved to a folder and loaded back for a run.

``genimage watermark train`` trains a scheme once and writes it with :func:`save_scheme`; ``embed`` and ``detect``
(``--scheme-dir``) rebuild it with :func:`load_scheme` in another process, bit-identical to the one saved: the same
images from the same noise, the same scores and p-values on the same images. A scheme folder holds

- ``scheme.json``: ``{"format": "genimage.watermark-scheme", "version": 1, "scheme", "message"`` (0/1 string),
  ``"seed", "options"`` (the training options), ``"null": {"mu", "sd"}`` (the Gaussian null of the detection
  score), ``"run"`` (the run folder it was trained for), ``"run_fingerprint"`` (``tensor_fingerprint`` of that run's
  network weights, VAE included, taken before any marker is attached) and the scheme's own ``"weights"`` entry};
- ``hidden/`` (hidden, guidance): the HiDDeN encoder and decoder, :meth:`HiddenModel.save_pretrained`;
- ``extractor.safetensors`` and ``markers.safetensors`` (molm): the extractor's weights, and every marker
  layer's adapters ``A``, ``B`` and routing buffers ``bit_index``, ``bit_weight`` under ``<layer>.<name>``, which
  :func:`load_scheme` attaches again to the freshly loaded run network (the base weights are the run's own).

The folder is written into a temporary sibling and renamed into place, so a killed ``train`` leaves nothing
half-written; an existing non-empty folder is refused. A scheme is loaded only for a run whose weights have the
recorded fingerprint (a copy of the run folder elsewhere is fine, another run is refused).
"""

from __future__ import annotations

import math
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch

from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import ensure_dir, load_tensors, read_json, require_fields, save_tensors, tensor_fingerprint, write_json

__all__ = [
    "SCHEME_FILE",
    "SCHEME_FORMAT",
    "SCHEME_VERSION",
    "TRAINED_SCHEMES",
    "load_scheme",
    "run_fingerprint",
    "save_scheme",
]

SCHEME_FORMAT = "genimage.watermark-scheme"
SCHEME_VERSION = 1
SCHEME_FILE = "scheme.json"
TRAINED_SCHEMES = ("hidden", "guidance", "molm")
_HIDDEN_DIR, _EXTRACTOR, _MARKERS = "hidden", "extractor.safetensors", "markers.safetensors"
_BUFFERS = ("bit_index", "bit_weight")


def run_fingerprint(gen) -> str:
    """SHA-256 of the weights of ``gen``'s run (network, and VAE of a latent run), names included; of the mean and
    std of an analytic ``gaussian:`` flow. Taken before MOLM markers are attached (they rename the layers)."""
    run = getattr(gen, "run", None)
    if run is None:
        return tensor_fingerprint(gen.mean, gen.std, header="gaussian-flow")
    state = {f"model.{k}": v for k, v in run.model.state_dict().items()}
    if run.vae is not None:
        state.update({f"vae.{k}": v for k, v in run.vae.state_dict().items()})
    names = sorted(state)
    return tensor_fingerprint(*(state[k] for k in names), header="\n".join(names))


def _bits(message: torch.Tensor) -> str:
    return "".join(str(int(b)) for b in message.flatten())


def save_scheme(
    directory: str | os.PathLike,
    scheme,
    *,
    fingerprint: str,
    seed: int,
    options: dict[str, Any],
    run: str | os.PathLike | None = None,
) -> Path:
    """Write trained ``scheme`` (:class:`~genimage.watermark.image_schemes.HiddenScheme`, ``GuidanceScheme`` or
    :class:`~genimage.watermark.molm.MOLMScheme`) into the new folder ``directory``, atomically.

    ``fingerprint``: :func:`run_fingerprint` of the generator it was trained on, taken *before* training (MOLM
    attaches its markers to the run's network); ``seed`` and ``options`` (JSON values): how it was trained;
    ``run``: the run folder (recorded as an absolute path).
    """
    if scheme.name not in TRAINED_SCHEMES:
        raise ConfigError(f"only the trained schemes ({', '.join(TRAINED_SCHEMES)}) are saved, got {scheme.name!r}.")
    target = Path(directory)
    _refuse_existing(target)
    record: dict[str, Any] = {
        "format": SCHEME_FORMAT,
        "version": SCHEME_VERSION,
        "scheme": scheme.name,
        "message": _bits(scheme.message),
        "seed": int(seed),
        "options": dict(options),
        "null": {"mu": scheme.null.mu, "sd": scheme.null.sd},
        "run": None if run is None else str(Path(run).resolve()) if Path(run).exists() else str(run),
        "run_fingerprint": fingerprint,
    }
    ensure_dir(target.parent)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    try:
        try:
            tmp.mkdir()
        except OSError as exc:
            raise StorageError(f"cannot write the scheme folder {str(target)!r}: {exc.strerror or exc}.") from None
        if scheme.name == "molm":
            record["weights"] = _save_molm(tmp, scheme)
        else:
            scheme.model.save_pretrained(tmp / _HIDDEN_DIR)
            record["weights"] = {"hidden": _HIDDEN_DIR}
            if scheme.name == "guidance":
                record["guidance"] = {"scale": scheme.scale, "seed": scheme.seed}
        write_json(tmp / SCHEME_FILE, record)
        _refuse_existing(target)  # made while training ran
        try:
            os.replace(tmp, target)  # an empty folder is replaced; a non-empty one raises
        except OSError as exc:
            raise StorageError(f"cannot write the scheme folder {str(target)!r}: {exc.strerror or exc}.") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _refuse_existing(target: Path) -> None:
    if target.exists() and not (target.is_dir() and not any(target.iterdir())):
        raise StorageError(
            f"{str(target)!r} already exists and is not an empty folder; a trained scheme is never overwritten, so "
            "name a new --out."
        )


def _save_molm(folder: Path, scheme) -> dict[str, Any]:
    from genimage.watermark.molm import RoutedLoRALinear

    markers = dict(scheme.model.named_modules())
    names = [n for n, m in markers.items() if isinstance(m, RoutedLoRALinear)]
    if not names:
        raise ConfigError("the MOLM scheme's network carries no markers to save.")
    first = markers[names[0]]
    tensors = {}
    for name in names:
        m = markers[name]
        tensors.update({f"{name}.A": m.A, f"{name}.B": m.B})
        tensors.update({f"{name}.{b}": getattr(m, b) for b in _BUFFERS})
    save_tensors(folder / _MARKERS, tensors)
    save_tensors(folder / _EXTRACTOR, scheme.extractor.state_dict())
    linear = scheme.extractor.net[-1]
    conv = scheme.extractor.net[0][0]
    routing = getattr(scheme, "routing", None)
    if routing is None:  # a scheme built by hand: bit routing gives every layer one group per message bit
        bits = scheme.message.numel()
        one_per_bit = all(tuple(markers[n].bit_index.shape) == (bits, 1) for n in names)
        routing = "bit" if one_per_bit and (bits > 1 or len(names) > 1) else "segment"
    return {
        "routing": routing,
        "extractor": _EXTRACTOR,
        "extractor_config": {
            "channels": conv.in_channels,
            "hidden": conv.out_channels,
            "message_bits": linear.out_features,
        },
        "markers": _MARKERS,
        "layers": names,
        "rank": first.rank,
        "alpha": first.alpha,
    }


def _fail(where: str, what: str) -> StorageError:
    return StorageError(f"{where}: {what}")


def load_scheme(directory: str | os.PathLike, gen):
    """The scheme saved in ``directory`` by :func:`save_scheme`, rebuilt for generator ``gen`` (on its device).

    Raises :class:`StorageError` (one sentence naming the file) for a missing folder or file, a corrupt or unknown
    ``scheme.json``, weights that do not fit, or a run whose weights are not the ones the scheme was trained for.
    MOLM attaches its saved markers to ``gen``'s network (which must carry none yet).
    """
    from genimage.watermark.guidance import GaussianNull

    d = Path(directory)
    if not d.is_dir():
        state = "is a file, not a folder" if d.exists() else "does not exist"
        raise StorageError(f"scheme folder {str(d)!r} {state} (write one with `genimage watermark train`).")
    where = repr(str(d / SCHEME_FILE))
    record = read_json(d / SCHEME_FILE)
    if not isinstance(record, dict) or record.get("format") != SCHEME_FORMAT:
        raise _fail(where, f'not a trained watermark scheme (expected "format": "{SCHEME_FORMAT}").')
    if record.get("version") != SCHEME_VERSION:
        raise _fail(where, f"version {record.get('version')!r} is not one this genimage reads ({SCHEME_VERSION}).")
    fields = ("scheme", "message", "seed", "options", "null", "run_fingerprint", "weights")
    require_fields(record, fields, where)
    name, message, null = record["scheme"], record["message"], record["null"]
    if name not in TRAINED_SCHEMES:
        raise _fail(where, f"field 'scheme' must be one of {', '.join(TRAINED_SCHEMES)}, got {name!r}.")
    if not isinstance(message, str) or not message or set(message) - {"0", "1"}:
        raise _fail(where, f"field 'message' must be a non-empty string of 0/1 bits, got {message!r}.")
    if not (isinstance(null, dict) and all(_finite(null.get(k)) for k in ("mu", "sd")) and null["sd"] > 0):
        raise _fail(where, f"field 'null' must hold a finite 'mu' and an 'sd' > 0, got {null!r}.")
    if not isinstance(record["weights"], dict):
        raise _fail(where, f"field 'weights' must be a mapping, got {record['weights']!r}.")
    if name == "molm":
        _check_bare_network(gen)
    if run_fingerprint(gen) != record["run_fingerprint"]:
        raise _foreign(d, record)
    bits = torch.tensor([int(c) for c in message])
    null_dist = GaussianNull.from_params(float(null["mu"]), float(null["sd"]))
    if name == "molm":
        return _load_molm(d, record, gen, bits, null_dist, where)
    from genimage.watermark.hidden import HiddenModel
    from genimage.watermark.image_schemes import GuidanceScheme, HiddenScheme

    model = HiddenModel.from_pretrained(d / _HIDDEN_DIR, device=gen.device)
    model.eval()
    if model.config.message_bits != bits.numel():
        raise _fail(
            where, f"the message has {bits.numel()} bits but the saved HiDDeN reads {model.config.message_bits}."
        )
    if model.config.channels != gen.image_shape[0]:
        raise _fail(where, f"the saved HiDDeN reads {model.config.channels}-channel images, the run makes "
                    f"{gen.image_shape[0]}-channel ones.")  # fmt: skip
    if name == "hidden":
        return HiddenScheme(model, bits, None, null=null_dist)
    guidance = record.get("guidance")
    if not (isinstance(guidance, dict) and _finite(guidance.get("scale")) and _integer(guidance.get("seed"))):
        raise _fail(where, f"field 'guidance' must hold a finite 'scale' and an integer 'seed', got {guidance!r}.")
    return GuidanceScheme(model, bits, None, scale=float(guidance["scale"]), seed=guidance["seed"], null=null_dist)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _foreign(d: Path, record: dict) -> StorageError:
    return StorageError(
        f"the scheme in {str(d)!r} was trained for the run {record.get('run')!r}, whose network weights differ from "
        "the given --run's (fingerprint mismatch); give that run or train a scheme for this one."
    )


def _check_bare_network(gen) -> None:
    from genimage.watermark.molm import _markers

    if getattr(gen, "run", None) is None:
        raise ConfigError("a MOLM scheme needs its `genimage train` run as --run, not an analytic flow.")
    if _markers(gen.run.model):
        raise ConfigError("the run's network already carries MOLM markers; load the scheme into a freshly loaded run.")


def _load_molm(d: Path, record: dict, gen, bits: torch.Tensor, null, where: str):
    from genimage.watermark.hidden import HiddenConfig, HiddenDecoder
    from genimage.watermark.molm import ROUTINGS, MOLMScheme, attach_markers

    run = gen.run
    w = record["weights"]
    routing = w.get("routing")
    layers, cfg = w.get("layers"), w.get("extractor_config")
    ok = (
        routing in ROUTINGS
        and isinstance(layers, list)
        and layers
        and all(isinstance(n, str) for n in layers)
        and _integer(w.get("rank"))
        and w["rank"] >= 1
        and _finite(w.get("alpha"))
        and isinstance(cfg, dict)
        and all(_integer(cfg.get(k)) and cfg[k] >= 1 for k in ("channels", "hidden", "message_bits"))
    )
    if not ok:
        raise _fail(where, "the MOLM entries ('weights.routing', 'layers', 'rank', 'alpha', "
                    "'extractor_config') are missing or malformed.")  # fmt: skip
    if cfg["message_bits"] != bits.numel():
        raise _fail(where, f"the message has {bits.numel()} bits but the saved extractor reads {cfg['message_bits']}.")
    markers = load_tensors(d / _MARKERS)
    extractor_state = load_tensors(d / _EXTRACTOR)
    try:
        extractor = HiddenDecoder(HiddenConfig(**cfg))
        extractor.load_state_dict(extractor_state)
    except (RuntimeError, ValueError, TypeError):
        raise StorageError(
            f"the weights in {str(d / _EXTRACTOR)!r} do not fit the extractor scheme.json describes."
        ) from None
    names = attach_markers(
        run.model, bits.numel(), routing=routing, rank=w["rank"], alpha=float(w["alpha"]),
        generator=torch.Generator().manual_seed(0),  # drawn only to be overwritten by the saved adapters
    )  # fmt: skip
    modules = dict(run.model.named_modules())
    try:
        if names != layers:
            raise StorageError(
                f"{where}: the scheme's marker layers {layers} are not the ones the run's network offers ({names})."
            )
        expected = {f"{n}.{k}" for n in names for k in ("A", "B", *_BUFFERS)}
        if set(markers) != expected:
            raise StorageError(f"{str(d / _MARKERS)!r} does not hold the adapters of the layers scheme.json lists.")
        with torch.no_grad():
            for n in names:
                m = modules[n]
                for k in ("A", "B", *_BUFFERS):
                    dst, src = getattr(m, k), markers[f"{n}.{k}"]
                    if dst.shape != src.shape or dst.dtype != src.dtype:
                        raise StorageError(
                            f"{str(d / _MARKERS)!r}: {n}.{k} has shape {tuple(src.shape)} ({src.dtype}), the run's "
                            f"layer needs {tuple(dst.shape)} ({dst.dtype})."
                        )
                    dst.copy_(src)
    except BaseException:
        _detach(run.model, names)
        raise
    extractor = extractor.to(gen.device).eval()
    extractor.requires_grad_(False)
    return MOLMScheme(run.model, extractor, bits, None, null=null)


def _detach(model: torch.nn.Module, names: list[str]) -> None:
    """Put the base layers back in place of markers (a load that failed halfway leaves the network as it was)."""
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, getattr(parent, child).base)


def check_new_folder(path: str | os.PathLike) -> Path:
    """Refuse (before any training) an ``--out`` that exists and is not an empty folder."""
    target = Path(path)
    _refuse_existing(target)
    return target


def parse_scheme_message(text: str | None, bits: int | None) -> tuple[int, ...] | None:
    """``--message`` (0/1 string or 0x-hex, sized by ``bits`` when given) as bits, or None."""
    from genimage.watermark.keys import parse_message

    if text is None:
        return None
    try:
        return parse_message(text, bits)
    except InputError as exc:
        raise ConfigError(f"--message: {exc}") from None
