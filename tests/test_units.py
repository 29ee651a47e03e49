"""Unit tests for knoblab.units: sizes as my.cnf writes them."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knoblab.errors import UserError
from knoblab.units import format_size, parse_duration, parse_size

K, M, G, T = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("8200", 8200),
        ("131072", 131072),
        ("128K", 128 * K),
        ("128k", 128 * K),
        ("32M", 32 * M),
        ("32m", 32 * M),
        ("1G", G),
        ("1g", G),
        ("2T", 2 * T),
        ("2t", 2 * T),
        ("128KB", 128 * K),
        ("128kb", 128 * K),
        ("1GB", G),
        (" 32M ", 32 * M),
        ("\t64K\n", 64 * K),
        ("007", 7),
    ],
)
def test_parse_size_text(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("value", [0, 1, 8200, 131072, 2**64 - 1])
def test_parse_size_int_is_bytes(value):
    result = parse_size(value)
    assert result == value
    assert type(result) is int


@pytest.mark.parametrize("value", [True, False])
def test_parse_size_rejects_bool(value):
    with pytest.raises(UserError) as info:
        parse_size(value, "[dataset] size")
    message = str(info.value)
    assert message.startswith("[dataset] size")
    assert repr(value) in message
    assert "128K" in message  # says what a size looks like


def test_parse_size_rejects_negative_int():
    with pytest.raises(UserError, match="negative") as info:
        parse_size(-5, "[dataset] size")
    assert "-5" in str(info.value)
    assert str(info.value).startswith("[dataset] size")


@pytest.mark.parametrize(
    "text", ["12Q", "", "   ", "-1", "-128K", "1.5M", "K", "KB", "12KK", "12 Q", "1e6", "0x10",
             "128 KiB", "12M3", "many"],
)
def test_parse_size_rejects_non_sizes(text):
    with pytest.raises(UserError) as info:
        parse_size(text, "read_buffer_size")
    message = str(info.value)
    assert message.startswith("read_buffer_size: ")
    assert repr(text) in message  # names the bad value
    assert "K, M, G or T" in message  # and says how to write a size
    assert "\n" not in message


@pytest.mark.parametrize("value", [1.5, 131072.0, None, [1], {"a": 1}])
def test_parse_size_rejects_other_types(value):
    with pytest.raises(UserError, match="not a size"):
        parse_size(value)


def test_parse_size_default_subject():
    with pytest.raises(UserError) as info:
        parse_size("12Q")
    assert str(info.value).startswith("value: ")


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0"),
        (1, "1"),
        (8200, "8200"),
        (1023, "1023"),
        (K, "1K"),
        (128 * K, "128K"),
        (1536 * K, "1536K"),  # 1.5M is not a whole number of M
        (32 * M, "32M"),
        (1024 * M, "1G"),
        (3 * G, "3G"),
        (T, "1T"),
        (2048 * T, "2048T"),  # no suffix above T
        (G + 1, str(G + 1)),
        (2147483647, "2147483647"),
    ],
)
def test_format_size(n, expected):
    assert format_size(n) == expected


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_format_then_parse_round_trips(n):
    text = format_size(n)
    assert parse_size(text) == n
    # The form is the shortest exact one: no larger suffix would also be exact.
    if text[-1] in "KMG":
        bigger = {"K": M, "M": G, "G": T}[text[-1]]
        assert n % bigger != 0


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["", "K", "M", "G", "T"]),
       st.booleans(), st.booleans())
def test_parse_then_format_round_trips(number, suffix, lower, with_b):
    text = f"{number}{suffix.lower() if lower else suffix}{'B' if with_b and suffix else ''}"
    n = parse_size(text)
    assert n == number * {"": 1, "K": K, "M": M, "G": G, "T": T}[suffix]
    assert parse_size(format_size(n)) == n


@pytest.mark.parametrize("value", [2**64, "16777216T", "99999999999999999999999T",
                                   pytest.param(10**400, id="10**400")])
def test_parse_size_refuses_more_than_any_setting_holds(value):
    with pytest.raises(UserError, match=r"\[server\] memory_budget: .* larger than any server"):
        parse_size(value, "[server] memory_budget")


@pytest.mark.parametrize("value", [math.inf, 1e300, pytest.param(10**400, id="10**400"),
                                   "99999999999999999999h",
                                   "9000000h", 366 * 86400 + 1])
def test_parse_duration_refuses_infinite_and_absurd_durations(value):
    with pytest.raises(UserError, match=r"\[tune\] budget: .* longer than knoblab takes"):
        parse_duration(value, "[tune] budget")


@pytest.mark.parametrize("value", [math.nan, -math.inf, 0, "inf", "nan"])
def test_parse_duration_refuses_what_is_not_a_duration(value):
    with pytest.raises(UserError, match=r"is not a duration"):
        parse_duration(value, "--budget")


@pytest.mark.parametrize(("value", "seconds"), [(90, 90.0), ("15m", 900.0), ("1h30m", 5400.0),
                                                (366 * 86400, 366 * 86400.0)])
def test_parse_duration_takes_ordinary_durations(value, seconds):
    assert parse_duration(value, "--budget") == seconds
