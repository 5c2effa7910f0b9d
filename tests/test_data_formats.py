"""File formats on small files the tests write: IDX, CIFAR binary, checksum verification."""

import gzip
import io
import re
import struct
import tarfile

import numpy as np
import pytest

from twinsgd.data.cifar import LAYOUTS, decode_records, encode_records, read_cifar
from twinsgd.data.errors import DataError
from twinsgd.data.idx import parse_idx, read_idx, write_idx
from twinsgd.data.sources import FileSpec, md5_hex, read_verified, verify, verify_archive


def one_line(err):
    message = str(err.value)
    assert "\n" not in message
    return message


# ---- IDX -------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".gz", ""])
def test_idx_round_trip_mnist_shapes(tmp_path, suffix):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    labels = np.array([5, 0, 4, 1, 9], dtype=np.uint8)
    images_path = write_idx(tmp_path / f"images{suffix}", images)
    labels_path = write_idx(tmp_path / f"labels{suffix}", labels)

    got_images, got_labels = read_idx(images_path), read_idx(labels_path)

    assert got_images.dtype == np.uint8 and got_images.shape == (5, 28, 28)
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, [5, 0, 4, 1, 9])
    assert (images_path.read_bytes()[:2] == b"\x1f\x8b") == (suffix == ".gz")


def test_idx_header_bytes_are_the_published_layout(tmp_path):
    # MNIST's label file starts 00 00 08 01 <n as big-endian uint32>
    path = write_idx(tmp_path / "labels", np.array([7, 2, 1], dtype=np.uint8))
    assert path.read_bytes() == bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 2, 1])


def test_idx_gzip_is_detected_by_magic_not_by_name(tmp_path):
    raw = bytes([0, 0, 8, 1, 0, 0, 0, 2, 3, 4])
    (tmp_path / "labels.raw").write_bytes(gzip.compress(raw))  # gzip without .gz
    (tmp_path / "labels.gz").write_bytes(raw)  # raw with .gz
    np.testing.assert_array_equal(read_idx(tmp_path / "labels.raw"), [3, 4])
    np.testing.assert_array_equal(read_idx(tmp_path / "labels.gz"), [3, 4])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_multibyte_types_are_big_endian_on_disk(tmp_path, dtype):
    values = np.array([[1, -2, 3], [4, 5, -6]], dtype=dtype)
    path = write_idx(tmp_path / "x", values)
    raw = path.read_bytes()
    assert struct.unpack(">2I", raw[4:12]) == (2, 3)
    assert raw[12:] == values.astype(values.dtype.newbyteorder(">")).tobytes()
    got = read_idx(path)
    assert got.dtype == dtype and got.dtype.isnative
    np.testing.assert_array_equal(got, values)


def test_idx_bad_magic_names_the_path(tmp_path):
    path = tmp_path / "bad.idx"
    path.write_bytes(bytes([8, 3, 0, 1, 0, 0, 0, 1, 9]))
    with pytest.raises(DataError, match="bad IDX magic number 0x08030001") as err:
        read_idx(path)
    assert str(path) in one_line(err)


def test_idx_unknown_dtype_code(tmp_path):
    path = tmp_path / "bad.idx"
    path.write_bytes(bytes([0, 0, 0x0A, 1, 0, 0, 0, 1, 9]))
    with pytest.raises(DataError, match=r"bad IDX dtype code 0x0a"):
        read_idx(path)


@pytest.mark.parametrize("extra", [-1, 1, 784])
def test_idx_wrong_payload_size(tmp_path, extra):
    raw = bytes([0, 0, 8, 3]) + struct.pack(">3I", 2, 28, 28) + bytes(2 * 784 + extra)
    path = tmp_path / "images.gz"
    path.write_bytes(gzip.compress(raw))
    with pytest.raises(
        DataError,
        match=f"wrong size: the IDX header says 2 x 28 x 28 uint8 = 1568 "
        f"payload bytes, the file has {1568 + extra}",
    ) as err:
        read_idx(path)
    assert one_line(err).startswith(f"{path}: ")


def test_idx_truncated_header():
    with pytest.raises(DataError, match="3 dimensions need 16 header bytes, the file has 8"):
        parse_idx(bytes([0, 0, 8, 3, 0, 0, 0, 1]), "x")
    with pytest.raises(DataError, match="bad IDX header: 2 bytes"):
        parse_idx(b"\x00\x00", "x")


def test_truncated_gzip_names_the_path(tmp_path):
    raw = bytes([0, 0, 8, 1]) + struct.pack(">I", 5000) + bytes(range(256)) * 19 + bytes(136)
    data = gzip.compress(raw)
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="truncated gzip") as err:
        read_idx(path)
    assert one_line(err).startswith(f"{path}: truncated gzip")


def test_corrupt_gzip_crc(tmp_path):
    data = bytearray(gzip.compress(bytes([0, 0, 8, 1, 0, 0, 0, 1, 7])))
    data[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    path = tmp_path / "x.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="corrupt gzip"):
        read_idx(path)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="missing file") as err:
        read_idx(tmp_path / "nope.gz")
    assert str(tmp_path / "nope.gz") in one_line(err)


# ---- checksums -------------------------------------------------------------------------------


def idx_spec(tmp_path, values=(1, 2, 3)):
    """A published-file spec for a small label file, and its gzip and raw copies on disk."""
    raw = bytes([0, 0, 8, 1]) + struct.pack(">I", len(values)) + bytes(values)
    published = gzip.compress(raw, mtime=0)
    spec = FileSpec("labels-idx1-ubyte.gz", md5_hex(published), md5_hex(raw))
    (tmp_path / "published.gz").write_bytes(published)
    (tmp_path / "regzipped.gz").write_bytes(gzip.compress(raw, compresslevel=1, mtime=12345))
    (tmp_path / "raw").write_bytes(raw)
    return spec, raw


def test_read_verified_accepts_published_regzipped_and_raw(tmp_path):
    spec, raw = idx_spec(tmp_path)
    assert (tmp_path / "regzipped.gz").read_bytes() != (tmp_path / "published.gz").read_bytes()
    for name in ("published.gz", "regzipped.gz", "raw"):
        assert read_verified(tmp_path / name, spec) == raw
        assert verify(tmp_path / name, spec) == tmp_path / name


def test_read_verified_rejects_changed_content(tmp_path):
    spec, raw = idx_spec(tmp_path)
    changed = raw[:-1] + b"\x04"  # still a valid IDX file, other content
    path = tmp_path / "changed.gz"
    path.write_bytes(gzip.compress(changed))
    with pytest.raises(DataError, match="checksum mismatch") as err:
        read_verified(path, spec)
    message = one_line(err)
    assert message.startswith(f"{path}: ") and md5_hex(changed) in message and spec.md5 in message
    assert parse_idx(changed).tolist() == [1, 2, 4]


def test_verify_archive(tmp_path):
    path = tmp_path / "a.tar.gz"
    path.write_bytes(b"some bytes")
    verify_archive(path, FileSpec("a.tar.gz", md5_hex(b"some bytes")))
    with pytest.raises(DataError, match=f"{path}: checksum mismatch: MD5 {md5_hex(b'some bytes')}"):
        verify_archive(path, FileSpec("a.tar.gz", "0" * 32))


def test_published_md5_of_a_known_string():
    assert md5_hex(b"") == "d41d8cd98f00b204e9800998ecf8427e"


# ---- CIFAR -----------------------------------------------------------------------------------


def cifar_arrays(name, n, seed):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, LAYOUTS[name].n_classes, size=n)
    coarse = rng.integers(0, 20, size=n)
    return images, labels, coarse


def write_cifar_tar(path, name, counts, seed=0, skip=()):
    """A CIFAR binary tar.gz with ``counts[member]`` records per member; returns the arrays."""
    layout = LAYOUTS[name]
    arrays = {}
    with tarfile.open(path, "w:gz") as archive:
        for i, member in enumerate(layout.train + layout.test):
            arrays[member] = cifar_arrays(name, counts.get(member, 2), seed + i)
            if member in skip:
                continue
            images, labels, coarse = arrays[member]
            data = encode_records(images, labels, name, coarse_labels=coarse)
            info = tarfile.TarInfo(f"{layout.folder}/{member}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return arrays


def test_cifar10_record_layout_by_hand():
    # one record: label 7, then the red plane, the green plane, the blue plane (row-major)
    image = np.zeros((32, 32, 3), dtype=np.uint8)
    image[0, 1] = (10, 20, 30)  # row 0, column 1: R, G, B
    image[31, 0, 2] = 99  # last row, first column, blue
    raw = encode_records(image[None], [7], "cifar10")
    assert len(raw) == 3073 and raw[0] == 7
    assert (raw[1 + 1], raw[1 + 1024 + 1], raw[1 + 2048 + 1]) == (10, 20, 30)
    assert raw[1 + 2048 + 31 * 32] == 99
    images, labels = decode_records(raw, "x", LAYOUTS["cifar10"])
    np.testing.assert_array_equal(images[0], image)
    assert labels.tolist() == [7] and labels.dtype == np.int64


def test_cifar100_uses_the_fine_label():
    image = np.zeros((1, 32, 32, 3), dtype=np.uint8)
    raw = encode_records(image, [93], "cifar100", coarse_labels=[17])
    assert raw[:2] == bytes([17, 93]) and len(raw) == 3074
    assert decode_records(raw, "x", LAYOUTS["cifar100"])[1].tolist() == [93]


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_tar_gz_read_back_exactly(tmp_path, name):
    layout = LAYOUTS[name]
    counts = {member: 2 + i for i, member in enumerate(layout.train + layout.test)}
    arrays = write_cifar_tar(tmp_path / "c.tar.gz", name, counts)

    splits = read_cifar(tmp_path / "c.tar.gz", name)

    for split, members in (("train", layout.train), ("test", layout.test)):
        images, labels = splits[split]
        want_images = np.concatenate([arrays[m][0] for m in members])
        want_labels = np.concatenate([arrays[m][1] for m in members])
        assert images.shape == (sum(counts[m] for m in members), 32, 32, 3)
        assert images.dtype == np.uint8 and labels.dtype == np.int64
        np.testing.assert_array_equal(images, want_images)
        np.testing.assert_array_equal(labels, want_labels)


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_extracted_folder_equals_archive(tmp_path, name):
    write_cifar_tar(tmp_path / "c.tar.gz", name, {})
    with tarfile.open(tmp_path / "c.tar.gz") as archive:
        archive.extractall(tmp_path / "out", filter="data")
    from_archive = read_cifar(tmp_path / "c.tar.gz", name)
    for folder in (tmp_path / "out", tmp_path / "out" / LAYOUTS[name].folder):
        from_folder = read_cifar(folder, name)
        for split in ("train", "test"):
            for a, b in zip(from_folder[split], from_archive[split], strict=True):
                np.testing.assert_array_equal(a, b)


def test_cifar_missing_member(tmp_path):
    write_cifar_tar(tmp_path / "c.tar.gz", "cifar10", {}, skip=("data_batch_3.bin",))
    message = re.escape("missing member cifar-10-batches-bin/data_batch_3.bin")
    with pytest.raises(DataError, match=message):
        read_cifar(tmp_path / "c.tar.gz", "cifar10")


def test_cifar_truncated_archive(tmp_path):
    write_cifar_tar(tmp_path / "c.tar.gz", "cifar100", {"train.bin": 20})
    data = (tmp_path / "c.tar.gz").read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"truncated or corrupt tar\.gz") as err:
        read_cifar(tmp_path / "cut.tar.gz", "cifar100")
    assert one_line(err).startswith(f"{tmp_path / 'cut.tar.gz'}: ")


def test_cifar_wrong_record_size_and_label_range(tmp_path):
    layout = LAYOUTS["cifar10"]
    with pytest.raises(
        DataError,
        match="x: wrong size: 3074 bytes is not a whole, nonzero number of 3073-byte records",
    ):
        decode_records(bytes(3074), "x", layout)
    with pytest.raises(DataError, match="wrong size: 0 bytes"):
        decode_records(b"", "x", layout)
    raw = bytearray(bytes(3073 * 3))
    raw[3073] = 10  # record 1 says class 10
    with pytest.raises(DataError, match=re.escape("x: label 10 of record 1 is out of range 0..9")):
        decode_records(bytes(raw), "x", layout)


def test_cifar_unknown_name(tmp_path):
    with pytest.raises(ValueError, match="name must be one of cifar10, cifar100, got 'cifar"):
        read_cifar(tmp_path, "cifar1000")
