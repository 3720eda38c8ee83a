"""imgseq: images to transformer-ready sequences, and back (Rust, CPU).

* :class:`VQTokenizer` — a VQGAN: RGB images → discrete token grids (int64) → images.
* :class:`ViT` — a Vision Transformer: images → continuous token embeddings, class labels.
* :func:`read_latent_shards` — reads the latent shards (float16) that ``imgseq vae tokenize``
  writes, either format
* :func:`read_feature_shards` — reads the feature shards (a vision tower's embeddings,
  float16) that ``imgseq tokenize --model TOWER`` writes, either format
* :func:`read_token_shards` — reads the WebDataset shards that ``imgseq vq tokenize`` writes
  (pure Python: ``tarfile`` + ``numpy``; works without the compiled extension).

Arrays are NumPy arrays in and out; the model work runs with the GIL released, so threads
calling the same model run in parallel. Errors carry the library's one-line messages:
``FileNotFoundError``/``OSError`` for files, ``ValueError`` for bad input or bad file content,
``TypeError`` for an array of the wrong dtype.

The shipped default models (``weights=None``) are inside the package, under
``imgseq/weights/``; ``$IMGSEQ_WEIGHTS_DIR`` (a folder holding ``vqgan/`` and
``vit-fashion-mnist/``) overrides them, as it does for the ``imgseq`` command.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = [
    "Tokenizer",
    "VQTokenizer",
    "LFQTokenizer",
    "ViT",
    "read_token_shards",
    "read_latent_shards",
    "read_feature_shards",
    "models",
    "default_weights_dir",
    "DEFAULT_VQGAN",
    "DEFAULT_VIT",
]

#: The shipped default models' folder names (as in the repository's ``weights/``).
def __dir__() -> List[str]:
    """The API only (``__all__``), not the modules this one imports."""
    return sorted(__all__)


DEFAULT_VQGAN = "vqgan"
DEFAULT_VIT = "vit-fashion-mnist"

PathLike = Union[str, "os.PathLike[str]"]


def models() -> List[Dict[str, Any]]:
    """The released tokenizers by short name (the command line's ``imgseq models``): each
    entry's ``name`` (usable as ``Tokenizer.from_pretrained(name)``), Hub ``source``,
    ``family``, ``tokens``, ``licence``, ``gated``, ``published`` figures and where they come
    from (``figures_from``). Files are fetched into the Hugging Face cache that
    ``huggingface_hub`` uses (``HF_HUB_CACHE``)."""
    return json.loads(_ext().catalogue_json())


def default_weights_dir() -> Path:
    """The folder of the shipped default models: ``$IMGSEQ_WEIGHTS_DIR`` when set, else the
    copy inside this package."""
    env = os.environ.get("IMGSEQ_WEIGHTS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent / "weights"


def _default_file(model: str, name: str) -> Path:
    path = default_weights_dir() / model / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: the default {model} model is not installed (the wheel ships it under "
            f"imgseq/weights/; set IMGSEQ_WEIGHTS_DIR or pass weights=)"
        )
    return path


try:
    from . import _imgseq
except ImportError as _e:  # pragma: no cover - only without the compiled extension
    _imgseq = None  # type: ignore[assignment]
    _import_error: Optional[ImportError] = _e
else:
    _import_error = None
    __version__ = _imgseq.__version__


def _ext() -> Any:
    if _imgseq is None:
        raise ImportError(
            "the compiled part of imgseq (imgseq._imgseq) is not installed; build it with "
            f"`pip install ./python` ({_import_error})"
        )
    return _imgseq


class ViT:
    """A Vision Transformer classifier (Hugging Face ViT layout) on the CPU.

    Args:
        weights: a checkpoint folder (``model.safetensors`` + ``config.json``, optionally the
            run's ``training.json`` with the input preparation) or a ``.safetensors`` file with
            ``config.json`` beside it; ``None``: the shipped Fashion-MNIST model.
        precision: ``"f32"``, ``"bf16"`` or ``"auto"`` (the default), as the CLI's
            ``--precision`` (bf16: the patch projection and linear layers; ``auto`` takes it
            where the CPU runs AVX512-BF16 faster than f32 and the predictions on built-in check
            pictures equal f32's). Use ``"f32"`` for embeddings that match HF's to 1e-4.
    """

    def __init__(self, weights: Optional[PathLike] = None, precision: str = "auto") -> None:
        if weights is None:
            weights = _default_file(DEFAULT_VIT, "model.safetensors").parent
        self._m = _ext().ViT(os.fspath(weights), str(precision))

    @property
    def labels(self) -> List[str]:
        """Class names by label index."""
        return list(self._m.labels)

    @property
    def image_size(self) -> int:
        """The model's input side (32 for the shipped model)."""
        return self._m.image_size

    @property
    def num_channels(self) -> int:
        """Channels the model takes (1: gray)."""
        return self._m.num_channels

    @property
    def hidden_size(self) -> int:
        """Width of one token embedding (48 for the shipped model)."""
        return self._m.hidden_size

    @property
    def weights(self) -> str:
        """The checkpoint the model was loaded from."""
        return os.fspath(self._m.weights)

    def embed(
        self,
        images: np.ndarray,
        size: Optional[int] = None,
        invert: bool = False,
        batch_size: int = 64,
    ) -> np.ndarray:
        """Token embeddings (patch embeddings with CLS first, positions added) as
        ``imgseq vit embed --npy`` writes them.

        Args:
            images: uint8 (n, h, w) gray or (n, h, w, 3) RGB (converted to the model's
                channels; letterboxed and centred as in training).
            size: input side (a multiple of the patch size, positions interpolated);
                default the model's ``image_size``.
            invert: invert gray levels first (Fashion-MNIST is a light object on black).

        Returns:
            float32 (n, 1 + patches, hidden): (n, 65, 48) for the shipped model.
        """
        return self._m.embed(images, size, invert, batch_size)

    def classify(
        self, images: np.ndarray, k: int = 1, invert: bool = False, batch_size: int = 64
    ) -> List[List[Tuple[str, float]]]:
        """The ``k`` most probable labels of each image, best first, as (label, probability)."""
        return [[(str(l), float(p)) for l, p in row] for row in self._m.classify(images, k, invert, batch_size)]

    def probabilities(self, images: np.ndarray, invert: bool = False) -> np.ndarray:
        """Class probabilities, float32 (n, len(labels))."""
        return self._m.probabilities(images, invert)

    def __repr__(self) -> str:
        return repr(self._m)


_TOKENS = ".tokens.npy"
_JSON = ".json"
#: Largest shard member read (as the Rust reader).
_MAX_MEMBER_BYTES = 64 << 20


def _npy_header(shard: Path, name: str, raw: bytes):
    """A ``.npy`` member's (shape, fortran order, dtype) and a reader positioned at its data;
    ``ValueError`` naming the shard and member when the header does not parse."""
    f = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except (ValueError, EOFError, SyntaxError) as e:
        raise ValueError(f"{shard}: {name} is not a .npy array ({e})") from None
    return shape, fortran, dtype, f


def _tokens_npy(shard: Path, name: str, raw: bytes) -> np.ndarray:
    """The (h, w) integer token grid of a ``.tokens.npy`` member, its header checked against its
    bytes before anything is allocated; ``ValueError`` otherwise."""
    shape, fortran, dtype, f = _npy_header(shard, name, raw)
    if dtype.kind not in "iu" or dtype.hasobject:
        raise ValueError(f"{shard}: {name} holds {dtype} values, not integer tokens")
    if len(shape) != 2:
        raise ValueError(f"{shard}: {name} has shape {shape}, expected (h, w)")
    count = 1
    for d in shape:
        count *= int(d)
    if count * dtype.itemsize != len(raw) - f.tell():
        raise ValueError(
            f"{shard}: {name} declares shape {shape} of {dtype} but holds "
            f"{len(raw) - f.tell()} bytes of data"
        )
    if count == 0:
        raise ValueError(f"{shard}: {name} is an empty {shape} grid")
    tokens = np.frombuffer(raw, dtype=dtype, offset=f.tell()).reshape(
        shape, order="F" if fortran else "C"
    )
    # The one token dtype rule: int64 at every API (shards store the smallest type).
    return np.ascontiguousarray(tokens, dtype=np.int64)


def _shard_files(source: Union[PathLike, Sequence[PathLike]]) -> List[Path]:
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if p.is_dir():
            files = sorted(f for f in p.glob("*.tar") if not f.name.startswith("."))
            if not files:
                raise FileNotFoundError(f"{p}: no .tar token shards in this folder")
            return files
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or folder")
        return [p]
    return [Path(s) for s in source]


def read_token_shards(
    source: Union[PathLike, Sequence[PathLike]],
) -> Iterator[Dict[str, Any]]:
    """Samples of the WebDataset token shards that ``imgseq vq tokenize`` writes.

    Pure Python (``tarfile`` + ``numpy``): needs neither the compiled extension nor imgseq.

    Args:
        source: an output folder of ``imgseq vq tokenize`` (its ``*.tar`` shards, in name
            order; unfinished hidden temporaries are ignored), one ``.tar`` shard, or a list
            of shards.

    Yields:
        ``{"key": str, "tokens": ndarray (h, w) int64 (shards store uint16, int32 past 65,536 codes),
        "json": dict, "shard": str}`` in shard order.

    Raises:
        FileNotFoundError: no shard at ``source``.
        ValueError: a shard member is not what the format says.
    """
    for shard in _shard_files(source):
        # A FIFO or device would block or never end: regular files only.
        if not shard.is_file():
            if not shard.exists():
                raise FileNotFoundError(f"{shard}: no such file")
            raise OSError(f"{shard}: not a regular file")
        try:
            tar = tarfile.open(shard, "r:")
        except tarfile.TarError as e:
            raise ValueError(f"{shard}: not a readable tar ({e})") from None
        with tar:
            sample: Optional[Dict[str, Any]] = None
            for member in tar:
                if not member.isfile():
                    continue
                name = member.name
                if member.size > _MAX_MEMBER_BYTES:
                    raise ValueError(
                        f"{shard}: {name} has {member.size} bytes, more than {_MAX_MEMBER_BYTES}"
                    )
                data = tar.extractfile(member)
                assert data is not None
                raw = data.read()
                if name.endswith(_TOKENS):
                    if sample is not None:
                        yield sample
                    key = name[: -len(_TOKENS)]
                    tokens = _tokens_npy(shard, name, raw)
                    sample = {"key": key, "tokens": tokens, "json": {}, "shard": str(shard)}
                elif name.endswith(_JSON):
                    key = name[: -len(_JSON)]
                    if sample is None or sample["key"] != key:
                        raise ValueError(f"{shard}: {name} does not follow its {key}{_TOKENS}")
                    sample["json"] = json.loads(raw.decode("utf-8"))
            if sample is not None:
                yield sample


_LATENT = ".latent.npy"
_FEATURES = ".features.npy"
#: Most bytes of one float member: 2^26 two-byte values (the writer's bound) and a header.
_MAX_FLOAT_MEMBER_BYTES = (2 << 26) + 4096
#: The Parquet footer key of a float shard's storage type (absent: float16).
_DTYPE_KEY = b"imgseq.dtype"


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) → their float32 values (exact)."""
    return (bits.astype("<u4") << 16).view("<f4")


def _float_npy(shard: Path, name: str, raw: bytes) -> np.ndarray:
    """The array of a ``.latent.npy`` / ``.features.npy`` member (header checked against its
    bytes): float16 as stored, bfloat16 (``<u2`` bit patterns) widened to float32."""
    shape, fortran, dtype, f = _npy_header(shard, name, raw)
    if dtype not in (np.dtype("<f2"), np.dtype("<u2")) or fortran:
        raise ValueError(f"{shard}: {name} holds {dtype} values, not float16 or bfloat16")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if count == 0 or count * 2 != len(raw) - f.tell():
        raise ValueError(f"{shard}: {name} declares shape {shape} but holds "
                         f"{len(raw) - f.tell()} bytes of data")
    a = np.frombuffer(raw, dtype=dtype, offset=f.tell()).reshape(shape)
    return _bf16_to_f32(a) if dtype == np.dtype("<u2") else a.copy()


def _latent_npy(shard: Path, name: str, raw: bytes) -> np.ndarray:
    """The float16 array of a ``.latent.npy`` member (header checked against its bytes)."""
    return _float_npy(shard, name, raw)


def _float_shards(
    source: Union[PathLike, Sequence[PathLike]], fmt: str, member: str, column: str,
) -> Iterator[Dict[str, Any]]:
    """Samples of float shards (latents or features) of the manifest format ``fmt``: the tar
    ``member`` extension / Parquet ``column`` holds each sample's array."""
    what = "latent" if column == "latent" else "feature"
    if isinstance(source, (str, os.PathLike)) and Path(source).is_dir():
        d = Path(source)
        manifest = json.loads((d / "manifest.json").read_text())
        if manifest.get("format") != fmt:
            raise ValueError(f"{d}: format {manifest.get('format')!r}, not a {what} shard set")
        shards = [d / s["name"] for s in manifest["shards"]]
    elif isinstance(source, (str, os.PathLike)):
        shards = [Path(source)]
    else:
        shards = [Path(s) for s in source]
    for shard in shards:
        if not shard.is_file():
            raise FileNotFoundError(f"{shard}: no such file")
        if shard.suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(shard)
            if column not in table.column_names:
                raise ValueError(f"{shard}: no {column} column: not an imgseq {what} shard")
            stored = (table.schema.metadata or {}).get(_DTYPE_KEY, b"float16")
            if stored not in (b"float16", b"bfloat16"):
                raise ValueError(f"{shard}: values stored as {stored.decode(errors='replace')}")
            for row in table.to_pylist():
                shape = tuple(row["shape"])
                a = np.frombuffer(row[column], dtype="<f2" if stored == b"float16" else "<u2")
                if a.size == 0 or a.size != int(np.prod(shape, dtype=np.int64)):
                    raise ValueError(f"{shard}: {row['key']} holds {a.size} values, "
                                     f"not shape {shape}")
                a = a.reshape(shape)
                a = a.copy() if stored == b"float16" else _bf16_to_f32(a)
                yield {"key": row["key"], column: a,
                       "json": json.loads(row["metadata"]), "shard": str(shard)}
            continue
        with tarfile.open(shard, "r:") as tar:
            sample: Optional[Dict[str, Any]] = None
            for m in tar:
                if not m.isfile():
                    continue
                name = m.name
                if m.size > _MAX_FLOAT_MEMBER_BYTES:
                    raise ValueError(
                        f"{shard}: {name} has {m.size} bytes, more than {_MAX_FLOAT_MEMBER_BYTES}"
                    )
                data = tar.extractfile(m)
                assert data is not None
                raw = data.read()
                if name.endswith(member):
                    if sample is not None:
                        yield sample
                    sample = {"key": name[: -len(member)], column: _float_npy(shard, name, raw),
                              "json": {}, "shard": str(shard)}
                elif name.endswith(_JSON):
                    key = name[: -len(_JSON)]
                    if sample is None or sample["key"] != key:
                        raise ValueError(f"{shard}: {name} does not follow its {key}{member}")
                    sample["json"] = json.loads(raw.decode("utf-8"))
            if sample is not None:
                yield sample


def read_latent_shards(
    source: Union[PathLike, Sequence[PathLike]],
) -> Iterator[Dict[str, Any]]:
    """Samples of the latent shards that ``imgseq vae tokenize`` writes, either format.

    Pure Python: ``tarfile`` + ``numpy`` for ``.tar`` shards, ``pyarrow`` for ``.parquet``
    ones (only imported when one is read).

    Args:
        source: an output folder of ``imgseq vae tokenize`` (its shards in ``manifest.json``'s
            order), one shard, or a list of shards.

    Yields:
        ``{"key": str, "latent": ndarray — (C, h, w), or (N, p²·C) with --patch, float16
        (``--dtype bfloat16`` shards: float32, the bfloat16 values exactly), "json": dict,
        "shard": str}`` in shard order.
    """
    return _float_shards(source, "imgseq-latents/1", _LATENT, "latent")


def read_feature_shards(
    source: Union[PathLike, Sequence[PathLike]],
) -> Iterator[Dict[str, Any]]:
    """Samples of the feature shards that ``imgseq tokenize --model TOWER`` writes (a vision
    tower's embeddings per image), either format.

    Pure Python: ``tarfile`` + ``numpy`` for ``.tar`` shards, ``pyarrow`` for ``.parquet``
    ones (only imported when one is read).

    Args:
        source: an output folder of ``imgseq tokenize`` (its shards in ``manifest.json``'s
            order), one shard, or a list of shards.

    Yields:
        ``{"key": str, "features": ndarray (N, D) float16 (``--dtype bfloat16`` shards:
        float32, the bfloat16 values exactly), "json": dict, "shard": str}`` in shard order.
        The manifest's ``tokenizer.features`` says which layer (``output``) and whether the
        class token was dropped (``patches_only``).
    """
    return _float_shards(source, "imgseq-features/1", _FEATURES, "features")


class Tokenizer:
    """Any tokenizer family imgseq reads, told by its weights: ``Tokenizer.from_pretrained``."""

    def __init__(self, inner: Any) -> None:
        self._m = inner

    @classmethod
    def from_pretrained(
        cls,
        path: PathLike,
        config: Optional[PathLike] = None,
        preset: Optional[str] = None,
        size: Optional[int] = None,
        patch: Optional[int] = None,
        sample_seed: Optional[int] = None,
        tile: Optional[int] = None,
        raw: bool = False,
        precision: str = "auto",
        bf16_encoder: bool = False,
        layer: Optional[int] = None,
        patches_only: bool = False,
        pooled: bool = False,
    ) -> "Tokenizer":
        """``path`` is a local file or folder, a Hugging Face Hub model
        (``"hf:ORG/NAME[@REVISION][/PATH]"``, or ``"ORG/NAME"`` where no such local path
        exists; fetched into the cache ``huggingface_hub`` uses, offline with
        ``HF_HUB_OFFLINE=1``) or a name of :func:`models` (``"llamagen-vq16"``).

        Opens a VQ model (taming, LlamaGen, diffusers ``VQModel``, Janus, IBQ), an
        Open-MAGVIT2 (LFQ) ``.ckpt`` (EMA weights; ``raw=True``: the raw ones) or an
        ``AutoencoderKL`` (a diffusers ``vae/`` folder, or a single file with ``preset``
        ``sd``, ``sdxl``, ``sd3``, ``flux``) through the same loader as the command line, so
        the defaults are the CLI's: ``size`` 384 for colour VQ models and the training
        resolution for gray ones, the yaml's test size or 256 (LFQ), 256 (KL); ``precision``
        ``auto`` (the decoder in bf16 where the CPU runs it faster; tokens stay f32's);
        ``bf16_encoder``: the encoder in bf16 too (some tokens differ); ``patch``: KL latents
        as (n, N, p²·C) sequences; ``sample_seed``: a posterior draw instead of its mean.

        Vision towers (a transformers vision model folder) give float32 (n, tokens, dim)
        embeddings, ``kind`` ``"embeddings"``: ``layer`` picks transformers'
        ``hidden_states[layer]`` (-2: what LLaVA reads; default: ``last_hidden_state``),
        ``patches_only`` drops the tokens in front of the patches (class token, registers),
        ``pooled`` gives the pooled output (one token) — as the CLI's ``--layer``,
        ``--patches-only``, ``--pooled``."""
        return cls(_ext().Tokenizer.from_pretrained(
            os.fspath(path), None if config is None else os.fspath(config), preset, size, patch,
            sample_seed, tile, raw, precision, bf16_encoder, layer, patches_only, pooled))

    @property
    def description(self) -> dict:
        """What the tokenizer is, as manifests, ``imgseq serve``'s ``/v1/models`` and
        ``imgseq inspect`` print it: family, config, weights (source and SHA-256),
        preprocessing (size, crop rule, channels, range), output (kind, shape, codebook
        size), precision."""
        return json.loads(self._m.description_json)

    @property
    def family(self) -> str:
        return self._m.family

    @property
    def kind(self) -> str:
        """``"tokens"`` (integer codes), ``"latents"`` (float32) or ``"embeddings"`` (float32
        (tokens, dim) of a vision tower)."""
        return self._m.kind

    @property
    def size(self) -> int:
        return self._m.size

    @property
    def n_codes(self) -> Optional[int]:
        """The codebook size of a discrete tokenizer; ``None`` for an AutoencoderKL."""
        return self._m.n_codes

    @property
    def weights(self) -> str:
        """The weights' source as given (a file or a folder)."""
        return os.fspath(self._m.weights)

    def encode(self, images: np.ndarray, upscale: bool = False, batch_size: int = 8) -> np.ndarray:
        """uint8 images (n, h, w, 3) RGB or (n, h, w, 1) gray (or one (h, w, 3)) → codes
        (n, gh, gw), or float32 latents (n, C, h, w) / sequences (n, N, p²·C) — equal to
        ``imgseq encode`` / ``imgseq vae encode``. Images whose shorter side is below ``size``
        need ``upscale=True``; ``batch_size`` images per forward pass.

        Codes are int64, as at every API of imgseq (the CLI's ``.npy``, the service) and as
        PyTorch's embeddings take them; only shards store a smaller type."""
        return self._m.encode(images, upscale, batch_size)

    def decode(self, tokens: np.ndarray, batch_size: int = 8) -> np.ndarray:
        """What ``encode`` gives (integer codes of any integer dtype, every one in
        ``0..n_codes``, or AutoencoderKL latents) → uint8 images (n, H, W, 3)."""
        return self._m.decode(tokens, batch_size)

    def __repr__(self) -> str:
        return repr(self._m)




class VQTokenizer(Tokenizer):
    """A VQ tokenizer with the shipped VQGAN as default: ``Tokenizer.from_pretrained`` under
    the name earlier releases used, with the properties they had.

    Args:
        weights: any file or folder ``Tokenizer.from_pretrained`` opens; ``None``: the shipped
            default VQGAN (``imgseq/weights/vqgan/model.safetensors``).
        config: the model's ``config.json`` or taming ``model.yaml``; ``None``: the one beside
            the weights.
        size: the square input side (the family's crop: imgseq's shorter-side resize and
            centre crop, LlamaGen's ADM centre crop, Janus's pad to square); ``None``: 384 for
            colour models, the training resolution for gray ones — as ``imgseq encode``.
        precision: ``"f32"``, ``"bf16"`` or ``"auto"`` (the default), as the CLI's
            ``--precision``: bf16 runs the decoder on bf16 weights; the encoder stays f32, so
            tokens are f32's. ``auto``: bf16 where the CPU runs it faster and the model's check
            agrees.
        bf16_encoder: the encoder's convs in bf16 too (``--bf16-encoder``): faster on AMX or
            AVX512-BF16, but some tokens differ from the f32 encoder's.

    Raises:
        FileNotFoundError / OSError: a file cannot be read.
        ValueError: the weights or config are not a valid model, or ``size`` does not suit it.
    """

    def __init__(
        self,
        weights: Optional[PathLike] = None,
        config: Optional[PathLike] = None,
        size: Optional[int] = None,
        precision: str = "auto",
        bf16_encoder: bool = False,
    ) -> None:
        if weights is None:
            weights = _default_file(DEFAULT_VQGAN, "model.safetensors")
            if config is None:
                config = _default_file(DEFAULT_VQGAN, "config.json")
        super().__init__(_ext().Tokenizer.from_pretrained(
            os.fspath(weights), None if config is None else os.fspath(config), None,
            None if size is None else int(size), None, None, None, False, str(precision),
            bool(bf16_encoder)))

    @property
    def precision(self) -> str:
        """The arithmetic of the decoding convs: ``"f32"`` or ``"bf16"``."""
        d = self.description
        return d.get("decoder_precision") or d["precision"]

    @property
    def encoder_precision(self) -> str:
        """The arithmetic of the encoding convs: ``"f32"`` unless ``bf16_encoder=True``."""
        return self.description["precision"].split(",")[0]

    @property
    def downsample_factor(self) -> int:
        """Pixels per token side (16 for the released models)."""
        d = self.description
        return d["input"]["size"] // d["output"]["shape"][0]

    @property
    def channels(self) -> int:
        """Channels the model reads (1: gray, the luma of RGB images; 3: RGB)."""
        return self.description["input"]["channels"]

    @property
    def crop(self) -> str:
        """How images become the square input: ``"shorter_side"`` (imgseq's),
        ``"adm_center_crop"`` (LlamaGen, the VAEs), ``"pad_to_square"`` (Janus),
        ``"letterbox"`` (the shipped ViT), ``"shortest_edge_crop"`` (CLIP, DINOv2: their image
        processors' shortest-edge resize and centre crop) or ``"resize_square"`` (SigLIP); the
        description's ``input`` holds the resize side and filter of the last two."""
        return self.description["input"]["crop"]

    def grid(self, size: Optional[int] = None) -> Tuple[int, int]:
        """The token grid (rows, columns) of a ``size``×``size`` input (default: ``self.size``);
        384 → (24, 24). ``ValueError`` when ``size`` is not a positive multiple of the
        downsampling factor."""
        s = self.size if size is None else int(size)
        f = self.downsample_factor
        if s <= 0 or s % f:
            raise ValueError(f"size {s} must be a positive multiple of {f}")
        return (s // f, s // f)

    def encode(self, images: np.ndarray, batch_size: int = 8, upscale: bool = False) -> np.ndarray:
        """Tokens of images: uint8 (n, h, w, 3) RGB or (n, h, w, 1) gray → int64 (n, gh, gw),
        equal to ``imgseq encode`` of the same images."""
        return self._m.encode(images, upscale, batch_size)

    def __repr__(self) -> str:
        return f"VQTokenizer(weights={self.weights!r}, size={self.size}, n_codes={self.n_codes})"


class LFQTokenizer(Tokenizer):
    """An Open-MAGVIT2 (LFQ) tokenizer: ``Tokenizer.from_pretrained`` of its Lightning
    ``.ckpt`` (EMA weights by default; ``raw=True`` for the raw ones) and optional training
    yaml, under the name earlier releases used. Tokens equal ``imgseq encode``'s."""

    def __init__(self, weights: PathLike, config: Optional[PathLike] = None, raw: bool = False,
                 size: Optional[int] = None) -> None:
        super().__init__(_ext().Tokenizer.from_pretrained(
            os.fspath(weights), None if config is None else os.fspath(config), None, size, None,
            None, None, bool(raw), "auto", False))

    @property
    def bits(self) -> int:
        """Bits per token (log2 of the codebook size)."""
        return int(self.n_codes).bit_length() - 1

    @property
    def ema(self) -> bool:
        """Whether the EMA copies of the weights run."""
        return "EMA" in self.description["precision"]

    @property
    def downsample_factor(self) -> int:
        d = self.description
        return d["input"]["size"] // d["output"]["shape"][0]

    def encode(self, images: np.ndarray, batch_size: int = 8, upscale: bool = False) -> np.ndarray:
        return self._m.encode(images, upscale, batch_size)

    def __repr__(self) -> str:
        return f"LFQTokenizer(weights={self.weights!r}, size={self.size}, n_codes={self.n_codes})"
