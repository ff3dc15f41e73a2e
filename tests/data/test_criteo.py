"""criteo.py: TSV and .npz readers, conversions, and errors naming file and line."""

import gzip

import numpy as np
import pytest

from mpiec.data.criteo import load_criteo_npz, load_criteo_tsv, map_categorical
from mpiec.errors import DataError

CARDS = [1000 + t for t in range(26)]


def _line(label="1", dense=None, cats=None):
    dense = dense if dense is not None else [str(j) for j in range(13)]
    cats = cats if cats is not None else [f"{0x68fd1e64 + t:08x}" for t in range(26)]
    return "\t".join([label, *dense, *cats]) + "\n"


def _write(tmp_path, lines, name="day.tsv"):
    p = tmp_path / name
    p.write_text("".join(lines))
    return p


def test_well_formed_file(tmp_path):
    dense2 = ["", "-3", "7", *["0"] * 10]
    cats2 = ["", *["ABCDEF01"] * 25]
    p = _write(tmp_path, [_line(), _line("0", dense2, cats2)])
    b = load_criteo_tsv(p, CARDS)
    assert b.dense.dtype == np.float32 and b.ids.dtype == np.int64
    np.testing.assert_array_equal(b.labels, [1, 0])
    np.testing.assert_allclose(b.dense[0], np.log1p(np.arange(13)), rtol=1e-6)
    np.testing.assert_allclose(b.dense[1, :3], [0.0, 0.0, np.log(8.0)], rtol=1e-6)
    np.testing.assert_array_equal(b.ids[0], [(0x68FD1E64 + t) % CARDS[t] for t in range(26)])
    assert b.ids[1, 0] == 0  # missing -> raw 0
    assert b.ids[1, 1] == 0xABCDEF01 % CARDS[1]
    h = load_criteo_tsv(p, CARDS, cat_mapping="hash")
    assert ((h.ids >= 0) & (h.ids < np.array(CARDS))).all()
    assert not np.array_equal(h.ids, b.ids)
    np.testing.assert_array_equal(load_criteo_tsv(p, CARDS, max_lines=1).ids, b.ids[:1])


def test_gzip_and_crlf(tmp_path):
    p = tmp_path / "d.tsv.gz"
    with gzip.open(p, "wt") as f:
        f.write(_line().replace("\n", "\r\n") * 3)
    b = load_criteo_tsv(p, CARDS)
    assert len(b) == 3 and b.ids[0, 25] == (0x68FD1E64 + 25) % CARDS[25]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("1\t2\t3\n", "expected 40 tab-separated fields, found 3"),
        (_line(label="2"), "label must be 0 or 1"),
        (_line(dense=["1.5", *["0"] * 12]), "dense feature I1 is not an integer"),
        (_line(dense=[*["0"] * 12, "x7"]), "dense feature I13 is not an integer"),
        (_line(cats=[*["0a"] * 5, "zz12", *["0a"] * 20]), "categorical feature C6 is not hex"),
        ("\n", "blank line (only blank lines at the end of the file are allowed)"),
        (" \r\n", "blank line"),
        (_line(dense=["1" * 19, *["0"] * 12]), "dense feature I1 has 19 digits, more than the 18"),
        (_line(dense=[*["0"] * 12, "-" + "9" * 25]), "dense feature I13 has 25 digits"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad, message):
    p = _write(tmp_path, [_line(), _line("0"), bad, _line()])
    with pytest.raises(DataError) as e:
        load_criteo_tsv(p, CARDS)
    assert str(e.value).startswith(f"{p}:3: ")
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_file_and_bad_mapping(tmp_path):
    with pytest.raises(DataError, match="cannot open"):
        load_criteo_tsv(tmp_path / "nope.tsv", CARDS)
    with pytest.raises(ValueError):
        load_criteo_tsv(_write(tmp_path, [_line()]), CARDS, cat_mapping="modulo")
    with pytest.raises(ValueError):
        load_criteo_tsv(_write(tmp_path, [_line()]), CARDS[:3])


def test_npz_raw_counts_and_transformed(tmp_path):
    rng = np.random.default_rng(0)
    n = 50
    x_int = rng.integers(-2, 100, (n, 13)).astype(np.int32)
    x_cat = rng.integers(0, 10**7, (n, 26)).astype(np.int32)
    y = rng.integers(0, 2, n).astype(np.int32)
    p = tmp_path / "k.npz"
    np.savez(p, X_int=x_int, X_cat=x_cat, y=y)
    b = load_criteo_npz(p, CARDS)
    np.testing.assert_allclose(b.dense, np.log1p(np.maximum(x_int, 0)), rtol=1e-6)
    np.testing.assert_array_equal(b.ids, x_cat % np.array(CARDS))
    np.testing.assert_array_equal(b.labels, y)
    np.testing.assert_array_equal(
        load_criteo_npz(p, CARDS, "hash").ids, map_categorical(x_cat, CARDS, "hash")
    )
    q = tmp_path / "f.npz"
    np.savez(q, X_int=np.full((n, 13), 0.5, np.float32), X_cat=x_cat, y=y)
    assert (load_criteo_npz(q, CARDS).dense == 0.5).all()


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"X_int": np.zeros((4, 13)), "y": np.zeros(4)}, "key 'X_cat' is missing"),
        (
            {"X_int": np.zeros((4, 12)), "X_cat": np.zeros((4, 26), int), "y": np.zeros(4)},
            "key 'X_int' has shape (4, 12)",
        ),
        (
            {"X_int": np.zeros((4, 13)), "X_cat": np.zeros((3, 26), int), "y": np.zeros(4)},
            "key 'X_cat' has shape (3, 26)",
        ),
        (
            {"X_int": np.zeros((4, 13)), "X_cat": np.zeros((4, 26), int), "y": np.full(4, 2)},
            "key 'y' must hold only 0 and 1",
        ),
    ],
)
def test_npz_errors_name_file_and_key(tmp_path, arrays, message):
    p = tmp_path / "bad.npz"
    np.savez(p, **arrays)
    with pytest.raises(DataError) as e:
        load_criteo_npz(p, CARDS)
    assert str(e.value).startswith(f"{p}: ") and message in str(e.value)


def test_npz_not_an_archive(tmp_path):
    p = tmp_path / "x.npz"
    p.write_text("hello")
    with pytest.raises(DataError, match="not a readable .npz"):
        load_criteo_npz(p, CARDS)


def test_small_blocks_no_trailing_newline_and_line_numbers(tmp_path, monkeypatch):
    from mpiec.data import criteo

    lines = [_line(str(i % 2), [str(i), *["1"] * 12]) for i in range(30)]
    p = _write(tmp_path, [*lines[:-1], lines[-1].rstrip("\n")])
    whole = load_criteo_tsv(p, CARDS)
    monkeypatch.setattr(criteo, "_CHUNK_BYTES", 97)  # lines straddle blocks
    b = load_criteo_tsv(p, CARDS)
    assert len(b) == 30
    np.testing.assert_array_equal(b.dense, whole.dense)
    np.testing.assert_array_equal(b.ids, whole.ids)
    np.testing.assert_allclose(b.dense[:, 0], np.log1p(np.arange(30)), rtol=1e-6)
    assert len(load_criteo_tsv(p, CARDS, max_lines=17)) == 17
    bad = _write(tmp_path, [*lines[:25], _line(cats=["0"] * 25 + ["1" * 17]), *lines[25:]], "b.tsv")
    with pytest.raises(DataError, match=r"b\.tsv:26: categorical feature C26 is not hex"):
        load_criteo_tsv(bad, CARDS)
    extra = _write(tmp_path, [*lines[:3], _line().rstrip("\n") + "\textra\n"], "e.tsv")
    with pytest.raises(DataError, match=r"e\.tsv:4: expected 40 tab-separated fields, found 41"):
        load_criteo_tsv(extra, CARDS)


def test_trailing_blank_lines_are_accepted(tmp_path, monkeypatch):
    from mpiec.data import criteo

    lines = [_line(str(i % 2), [str(i), *["1"] * 12]) for i in range(12)]
    for tail in ["\n", "\n\n\n", " \r\n\t\n", "\n  "]:
        p = _write(tmp_path, [*lines, tail], "t.tsv")
        assert len(load_criteo_tsv(p, CARDS)) == 12, repr(tail)
    gz = tmp_path / "t.tsv.gz"
    with gzip.open(gz, "wt") as f:
        f.write("".join(lines) + "\n\n")
    assert len(load_criteo_tsv(gz, CARDS)) == 12
    monkeypatch.setattr(criteo, "_CHUNK_BYTES", 97)  # blank lines straddle blocks
    p = _write(tmp_path, [*lines, "\n" * 150], "s.tsv")
    assert len(load_criteo_tsv(p, CARDS)) == 12
    mid = _write(tmp_path, [*lines[:5], "\n" * 100, *lines[5:]], "m.tsv")
    with pytest.raises(DataError, match=r"m\.tsv:6: blank line"):
        load_criteo_tsv(mid, CARDS)
    with pytest.raises(DataError, match="no samples"):
        load_criteo_tsv(_write(tmp_path, ["\n\n"], "empty.tsv"), CARDS)


def test_dense_values_up_to_the_limit_are_read(tmp_path):
    b = load_criteo_tsv(_write(tmp_path, [_line(dense=["9" * 18, *["0"] * 12])]), CARDS)
    np.testing.assert_allclose(b.dense[0, 0], np.log1p(1e18 - 1), rtol=1e-6)


def test_truncated_and_corrupt_gzip_name_the_file(tmp_path):
    whole = tmp_path / "whole.tsv.gz"
    with gzip.open(whole, "wt") as f:
        f.write(_line() * 2000)
    data = whole.read_bytes()
    cut = tmp_path / "cut.tsv.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"cut\.tsv\.gz: the compressed file is truncated"):
        load_criteo_tsv(cut, CARDS)
    junk = tmp_path / "junk.tsv.gz"
    junk.write_bytes(b"this is not gzip at all\n" * 10)
    with pytest.raises(DataError, match=r"junk\.tsv\.gz: cannot be read \(Not a gzipped file"):
        load_criteo_tsv(junk, CARDS)
    flipped = bytearray(data)
    for i in range(20, 60):
        flipped[i] ^= 0x5A
    bad = tmp_path / "bad.tsv.gz"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(DataError) as e:
        load_criteo_tsv(bad, CARDS)
    assert str(e.value).startswith(f"{bad}: ") and "\n" not in str(e.value)


def test_a_directory_is_named_as_one(tmp_path):
    with pytest.raises(DataError, match="is a directory"):
        load_criteo_npz(tmp_path, CARDS)
    with pytest.raises(DataError, match="Is a directory"):
        load_criteo_tsv(tmp_path, CARDS)
