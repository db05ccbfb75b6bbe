"""gate.judge.buckets: every edge of the length buckets."""

from __future__ import annotations

import pytest

from gate.judge.buckets import BUCKETS, bucket_counts, length_bucket


@pytest.mark.parametrize(
    ("n", "bucket"),
    [
        (0, "XS"),
        (128, "XS"),
        (129, "S"),
        (256, "S"),
        (257, "M"),
        (512, "M"),
        (513, "L"),
        (1024, "L"),
        (1025, "XL"),
        (2048, "XL"),
        (2049, "XXL"),
        (4096, "XXL"),
        (4097, "XXL+"),
        (10**6, "XXL+"),
    ],
)
def test_edges(n: int, bucket: str) -> None:
    assert length_bucket(n) == bucket


def test_negative_length_is_an_error() -> None:
    with pytest.raises(ValueError, match="negative"):
        length_bucket(-1)


def test_counts_cover_every_bucket_in_order() -> None:
    counts = bucket_counts([0, 5, 200, 300, 5000])
    assert list(counts) == list(BUCKETS)
    assert counts == {"XS": 2, "S": 1, "M": 1, "L": 0, "XL": 0, "XXL": 0, "XXL+": 1}
