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

def default_weights_dir() -> Path:
    """The folder of the shipped default models (``$IMGSEQ_WEIGHTS_DIR`` when set)."""

class VQTokenizer:
    """A VQGAN tokenizer: RGB images → token grids → images (CPU, GIL released).

    ``weights=None``: the shipped default VQGAN (inside the package). ``size``: images are
    resized shorter-side to ``size`` and centre-cropped, as ``imgseq vq encode --size``.
    Raises ``FileNotFoundError``/``OSError`` for unreadable files, ``ValueError`` for a bad
    model or size.
    """

    def __init__(
        self,
        weights: Optional[PathLike] = None,
        config: Optional[PathLike] = None,
        size: int = 384,
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
    def n_codes(self) -> int:
        """Codebook entries (0 ≤ token < n_codes)."""
    @property
    def size(self) -> int:
        """Square input side."""
    @property
    def downsample_factor(self) -> int:
        """Pixels per token side (16)."""
    @property
    def weights(self) -> str:
        """The weights file loaded."""
    def grid(self, size: Optional[int] = None) -> Tuple[int, int]:
        """Token grid (rows, columns) of a size×size input: 384 → (24, 24)."""
    def encode(
        self,
        images: npt.NDArray[np.uint8],
        batch_size: int = 8,
        upscale: bool = False,
    ) -> npt.NDArray[np.uint16]:
        """uint8 (n, h, w, 3) or (h, w, 3) → uint16 (n, gh, gw) token grids.

        ``TypeError`` for another dtype, ``ValueError`` for another shape or an image smaller
        than ``size`` (without ``upscale``).
        """
    def decode(
        self, tokens: npt.NDArray[np.integer[Any]], batch_size: int = 8
    ) -> npt.NDArray[np.uint8]:
        """Integer (n, gh, gw) or (gh, gw) → uint8 (n, gh·16, gw·16, 3) images.

        ``ValueError`` naming the first token outside the codebook.
        """

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
    """Samples ``{"key", "tokens" (h, w) uint16, "json", "shard"}`` of the WebDataset shards
    of ``imgseq vq tokenize`` (a folder, one .tar, or a list). Pure Python."""

def read_latent_shards(
    source: Union[PathLike, Sequence[PathLike]],
) -> Iterator[Dict[str, Any]]:
    """Samples ``{"key", "latent" float16 (C, h, w) or (N, p²·C), "json", "shard"}`` of the
    latent shards of ``imgseq vae tokenize`` (a folder, one .tar/.parquet, or a list)."""

class Tokenizer:
    """Any tokenizer family imgseq reads (VQ families, LFQ, AutoencoderKL), told by its
    weights. Codes are uint16, int32 past 65,536 codes."""

    @classmethod
    def from_pretrained(
        cls,
        path: PathLike,
        config: Optional[PathLike] = ...,
        preset: Optional[str] = ...,
        size: Optional[int] = ...,
        patch: Optional[int] = ...,
        sample_seed: Optional[int] = ...,
        tile: Optional[int] = ...,
        raw: bool = ...,
        precision: str = ...,
        bf16_encoder: bool = ...,
    ) -> "Tokenizer": ...
    @property
    def description(self) -> dict: ...
    @property
    def family(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def n_codes(self) -> Optional[int]: ...
    def encode(self, images: np.ndarray, upscale: bool = ...) -> np.ndarray: ...
    def decode(self, tokens: np.ndarray) -> np.ndarray: ...
