"""Type stubs of imgseq: VQGAN and ViT tokenizers on NumPy arrays, and the token-shard reader."""

import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str
__all__: List[str]

DEFAULT_VQGAN: str
DEFAULT_VIT: str

PathLike = Union[str, os.PathLike[str]]

def models() -> List[Dict[str, Any]]: ...
def default_weights_dir() -> Path:
    """The folder of the shipped default models (``$IMGSEQ_WEIGHTS_DIR`` when set)."""

class ViT:
    """A ViT classifier: images → (n, 65, 48) float32 token embeddings, labels.

    ``weights=None``: the shipped Fashion-MNIST model (inside the package).
    """

    def __init__(self, weights: Optional[PathLike] = None, precision: str = "auto") -> None: ...
    @property
    def labels(self) -> List[str]:
        """Class names by label index."""
    @property
    def image_size(self) -> int:
        """The model's input side (32)."""
    @property
    def num_channels(self) -> int:
        """Channels the model takes (1: gray)."""
    @property
    def hidden_size(self) -> int:
        """Width of one token embedding (48)."""
    @property
    def weights(self) -> str:
        """The checkpoint loaded."""
    def embed(
        self,
        images: npt.NDArray[np.uint8],
        size: Optional[int] = None,
        invert: bool = False,
        batch_size: int = 64,
    ) -> npt.NDArray[np.float32]:
        """uint8 (n, h, w) gray or (n, h, w, 3) → float32 (n, 1 + patches, hidden) token
        embeddings, CLS first, positions added (as ``imgseq vit embed --npy``)."""
    def classify(
        self,
        images: npt.NDArray[np.uint8],
        k: int = 1,
        invert: bool = False,
        batch_size: int = 64,
    ) -> List[List[Tuple[str, float]]]:
        """The k most probable (label, probability) of each image, best first."""
    def probabilities(
        self, images: npt.NDArray[np.uint8], invert: bool = False
    ) -> npt.NDArray[np.float32]:
        """Class probabilities (n, len(labels))."""

def read_token_shards(
    source: Union[PathLike, Sequence[PathLike]],
) -> Iterator[Dict[str, Any]]:
    """Samples ``{"key", "tokens" (h, w) int64, "json", "shard"}`` of the WebDataset shards
    of ``imgseq vq tokenize`` (a folder, one .tar, or a list). Pure Python."""

def read_latent_shards(
    source: Union[PathLike, Sequence[PathLike]],
) -> Iterator[Dict[str, Any]]:
    """Samples ``{"key", "latent" float16 (C, h, w) or (N, p²·C), "json", "shard"}`` of the
    latent shards of ``imgseq vae tokenize`` (a folder, one .tar/.parquet, or a list)."""

def read_feature_shards(
    source: Union[PathLike, Sequence[PathLike]],
) -> Iterator[Dict[str, Any]]:
    """Samples ``{"key", "features" float16 (N, D), "json", "shard"}`` of the feature shards
    of ``imgseq tokenize --model TOWER`` (a folder, one .tar/.parquet, or a list); bfloat16
    shards give float32."""

class Tokenizer:
    """Any tokenizer family imgseq reads (VQ families, LFQ, AutoencoderKL), opened by the
    same loader as the command line. Codes are int64 (shards store uint16, int32 past 65,536)."""

    def __init__(self, inner: Any) -> None:
        """Internal: open tokenizers with ``from_pretrained``."""
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
    ) -> "Tokenizer": ...
    @property
    def description(self) -> Dict[str, Any]:
        """Family, config, weights (source, SHA-256), input, output, precision."""
    @property
    def family(self) -> str: ...
    @property
    def kind(self) -> str:
        """``"tokens"`` or ``"latents"``."""
    @property
    def size(self) -> int: ...
    @property
    def n_codes(self) -> Optional[int]: ...
    @property
    def weights(self) -> str: ...
    def encode(
        self, images: npt.NDArray[np.uint8], upscale: bool = False, batch_size: int = 8
    ) -> np.ndarray:
        """uint8 (n, h, w, 3) / (n, h, w, 1) / (h, w, 3) → codes (n, gh, gw) or float32 latents."""
    def decode(self, tokens: np.ndarray, batch_size: int = 8) -> npt.NDArray[np.uint8]:
        """Codes or latents → uint8 (n, H, W, 3); ``ValueError`` for a token outside the codebook."""

class VQTokenizer(Tokenizer):
    """``Tokenizer.from_pretrained`` with the shipped VQGAN as default (``weights=None``)."""

    def __init__(
        self,
        weights: Optional[PathLike] = None,
        config: Optional[PathLike] = None,
        size: Optional[int] = None,
        precision: str = "auto",
        bf16_encoder: bool = False,
    ) -> None: ...
    @property
    def precision(self) -> str:
        """Arithmetic of the decoding convs ("f32" or "bf16")."""
    @property
    def encoder_precision(self) -> str:
        """Arithmetic of the encoding convs ("f32" unless bf16_encoder=True)."""
    @property
    def downsample_factor(self) -> int:
        """Pixels per token side (16)."""
    @property
    def channels(self) -> int: ...
    @property
    def crop(self) -> str: ...
    def grid(self, size: Optional[int] = None) -> Tuple[int, int]:
        """Token grid (rows, columns) of a size×size input: 384 → (24, 24)."""
    def encode(  # type: ignore[override]
        self, images: npt.NDArray[np.uint8], batch_size: int = 8, upscale: bool = False
    ) -> np.ndarray: ...

class LFQTokenizer(Tokenizer):
    """``Tokenizer.from_pretrained`` of an Open-MAGVIT2 ``.ckpt`` (EMA weights unless raw)."""

    def __init__(
        self,
        weights: PathLike,
        config: Optional[PathLike] = None,
        raw: bool = False,
        size: Optional[int] = None,
    ) -> None: ...
    @property
    def bits(self) -> int: ...
    @property
    def ema(self) -> bool: ...
    @property
    def downsample_factor(self) -> int: ...
    def encode(  # type: ignore[override]
        self, images: npt.NDArray[np.uint8], batch_size: int = 8, upscale: bool = False
    ) -> np.ndarray: ...
