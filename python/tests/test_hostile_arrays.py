"""Arrays that stand for far more pixels than they hold (broadcast, zero-stride views) are
measured by their logical size and refused with a ValueError before anything is copied: the
interpreter is never killed by an allocation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import imgseq

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "vqgan"


@pytest.fixture(scope="module")
def tiny():
    return imgseq.VQTokenizer(
        FIXTURES / "tiny.safetensors", FIXTURES / "tiny_config.json", size=32, precision="f32"
    )


def test_encode_refuses_a_broadcast_array_of_10_billion_pixels(tiny):
    pixel = np.zeros((1, 1, 1, 3), np.uint8)
    huge = np.broadcast_to(pixel, (1, 100_000, 100_000, 3))
    assert huge.strides[1] == 0
    with pytest.raises(ValueError, match=r"30000000000 elements.*IMGSEQ_MAX_MEMORY_GB"):
        tiny.encode(huge)


def test_decode_refuses_a_broadcast_token_array_of_10_billion_tokens(tiny):
    one = np.zeros((1, 1, 1), np.int64)
    huge = np.broadcast_to(one, (1_000_000, 100, 100))
    with pytest.raises(ValueError, match="elements"):
        tiny.decode(huge)


def test_small_broadcast_arrays_still_encode(tiny):
    img = np.broadcast_to(np.full((1, 1, 1, 3), 128, np.uint8), (2, 32, 32, 3))
    tokens = tiny.encode(img)
    assert tokens.shape == (2, 16, 16)
    np.testing.assert_array_equal(tokens[0], tokens[1])
