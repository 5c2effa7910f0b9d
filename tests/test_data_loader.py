"""load_dataset's resolution order, fallback to the bundled subset, verified atomic downloads
(from a local HTTP server started on 127.0.0.1, or file:// URLs), python -m
twinsgd.data.download."""

import dataclasses
import gzip
import http.server
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from twinsgd.data import DataError, load_dataset, locations, sources
from twinsgd.data.cifar import LAYOUTS, encode_records
from twinsgd.data.download import main as download_main
from twinsgd.data.fetch import fetch_dataset, fetch_file
from twinsgd.data.idx import write_idx
from twinsgd.data.sources import FileSpec, md5_hex

NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
N_TRAIN, N_TEST = 12, 5


def closed_port_url():
    """An http URL on 127.0.0.1 where nothing listens: connecting fails at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


@pytest.fixture
def fake_mnist(monkeypatch, tmp_path):
    """Small MNIST-format files standing in for the published ones: SOURCES["mnist"] is patched to
    their checksums and to a dead mirror, the cache and system folders point into tmp_path, and
    TWINSGD_DATA is unset. Returns the published file bytes by name and the arrays."""
    rng = np.random.default_rng(3)
    arrays = [
        rng.integers(0, 256, (N_TRAIN, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, N_TRAIN, dtype=np.uint8),
        rng.integers(0, 256, (N_TEST, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, N_TEST, dtype=np.uint8),
    ]
    published, specs = {}, []
    for name, array in zip(NAMES, arrays, strict=True):
        raw_path = write_idx(tmp_path / name, array)
        raw = raw_path.read_bytes()
        raw_path.unlink()
        published[f"{name}.gz"] = gzip.compress(raw, mtime=0)
        specs.append(FileSpec(f"{name}.gz", md5_hex(published[f"{name}.gz"]), md5_hex(raw)))
    source = dataclasses.replace(
        sources.SOURCES["mnist"], files=tuple(specs), mirrors=(closed_port_url(),)
    )
    monkeypatch.setitem(sources.SOURCES, "mnist", source)
    for name in ("fashion-mnist", "cifar10", "cifar100"):  # never the real network
        monkeypatch.setitem(
            sources.SOURCES,
            name,
            dataclasses.replace(sources.SOURCES[name], mirrors=(closed_port_url(),)),
        )
    monkeypatch.delenv("TWINSGD_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(locations, "SYSTEM_DIRS", (tmp_path / "system",))
    return published, arrays


def put(folder, published, compressed=True):
    """Write the published files into ``folder`` (gzip as published, or uncompressed)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in published.items():
        if compressed:
            (folder / name).write_bytes(data)
        else:
            (folder / name.removesuffix(".gz")).write_bytes(gzip.decompress(data))
    return folder


def folders_of(ds):
    return {Path(f).parent for f in ds.files}


class Server:
    """A local HTTP server: ``routes[path] = (status, body, declared_length or None)``."""

    def __init__(self):
        self.routes = {}
        self.hits = []
        self.during = None  # called in the handler after half of a body has been sent
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.hits.append(self.path)
                status, body, length = outer.routes.get(self.path, (404, b"not here", None))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body) if length is None else length))
                self.end_headers()
                half = len(body) // 2
                self.wfile.write(body[:half])
                self.wfile.flush()
                if outer.during is not None:
                    outer.during()
                self.wfile.write(body[half:])

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, daemon=True, kwargs={"poll_interval": 0.05}
        )
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def use_mirrors(monkeypatch, name, *mirrors):
    monkeypatch.setitem(
        sources.SOURCES, name, dataclasses.replace(sources.SOURCES[name], mirrors=tuple(mirrors))
    )


# ---- resolution order ------------------------------------------------------------------------


def test_data_dir_beats_cache_beats_system(fake_mnist, tmp_path):
    published, arrays = fake_mnist
    cache = put(tmp_path / "cache" / "twinsgd" / "mnist", published)
    system = put(tmp_path / "system" / "mnist", published, compressed=False)
    given = put(tmp_path / "given" / "mnist", published)

    ds = load_dataset("mnist", tmp_path / "given", allow_download=False)
    assert folders_of(ds) == {given} and ds.name == "mnist" and ds.note is None
    assert ds.files == [str(given / f"{n}.gz") for n in NAMES]

    ds = load_dataset("mnist", allow_download=False)
    assert folders_of(ds) == {cache}

    for f in cache.iterdir():
        f.unlink()
    ds = load_dataset("mnist", allow_download=False)
    assert ds.files == [str(system / n) for n in NAMES]  # the uncompressed copies

    assert (ds.n_train, ds.n_test, ds.n_classes) == (N_TRAIN, N_TEST, 10)
    assert ds.input_shape == (28, 28, 1)
    X, y = ds.train_batch([0, 11])
    expected = (arrays[0][[0, 11]] / 255.0 - ds.mean[0]) / ds.std[0]
    np.testing.assert_allclose(X[..., 0], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(y, arrays[1][[0, 11]])


def test_environment_variable_is_the_data_dir_when_no_argument(fake_mnist, tmp_path, monkeypatch):
    published, _ = fake_mnist
    put(tmp_path / "cache" / "twinsgd" / "mnist", published)
    flat = put(tmp_path / "flat", published)  # files directly in <dir>
    monkeypatch.setenv("TWINSGD_DATA", str(flat))
    assert folders_of(load_dataset("mnist")) == {flat}
    other = put(tmp_path / "other" / "mnist", published)
    assert folders_of(load_dataset("mnist", tmp_path / "other")) == {other}  # argument wins


def test_explicit_data_dir_without_the_files_is_an_error_not_a_fallback(fake_mnist, tmp_path):
    published, _ = fake_mnist
    put(tmp_path / "cache" / "twinsgd" / "mnist", published)  # would be found without --data-dir
    (tmp_path / "given" / "mnist").mkdir(parents=True)
    (tmp_path / "given" / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(
        published["train-images-idx3-ubyte.gz"]
    )
    with pytest.raises(DataError) as err:
        load_dataset("mnist", tmp_path / "given")
    message = str(err.value)
    missing = tmp_path / "given" / "mnist" / "train-labels-idx1-ubyte.gz"
    assert message.startswith(f"{missing}: missing file") and "\n" not in message
    assert f"python -m twinsgd.data.download mnist --dir {tmp_path / 'given'}" in message

    with pytest.raises(DataError, match="data directory does not exist"):
        load_dataset("mnist", tmp_path / "nowhere")


def test_corrupt_file_in_data_dir_is_named(fake_mnist, tmp_path):
    published, _ = fake_mnist
    given = put(tmp_path / "given" / "mnist", published)
    data = bytearray(gzip.decompress(published["t10k-images-idx3-ubyte.gz"]))
    data[-1] ^= 1  # one pixel changed
    (given / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(bytes(data)))
    with pytest.raises(DataError, match="checksum mismatch") as err:
        load_dataset("mnist", tmp_path / "given")
    assert str(err.value).startswith(f"{given / 't10k-images-idx3-ubyte.gz'}: ")

    (given / "t10k-images-idx3-ubyte.gz").write_bytes(published["t10k-images-idx3-ubyte.gz"][:-100])
    with pytest.raises(DataError, match="truncated gzip"):
        load_dataset("mnist", tmp_path / "given")


def test_labels_that_do_not_match_the_images(fake_mnist, tmp_path, monkeypatch):
    published, arrays = fake_mnist
    given = put(tmp_path / "given" / "mnist", published)
    short = write_idx(given / "train-labels-idx1-ubyte.gz", arrays[1][:-1])
    spec = FileSpec("train-labels-idx1-ubyte.gz", md5_hex(short.read_bytes()))
    files = list(sources.SOURCES["mnist"].files)
    files[1] = spec
    monkeypatch.setitem(
        sources.SOURCES, "mnist", dataclasses.replace(sources.SOURCES["mnist"], files=tuple(files))
    )
    with pytest.raises(DataError, match=re.escape(f"{short}: wrong size: expected ({N_TRAIN},)")):
        load_dataset("mnist", tmp_path / "given")


def test_corrupt_file_in_the_cache_says_how_to_repair_it(fake_mnist, tmp_path):
    published, _ = fake_mnist
    cache = put(tmp_path / "cache" / "twinsgd" / "mnist", published)
    (cache / "train-labels-idx1-ubyte.gz").write_bytes(published["t10k-labels-idx1-ubyte.gz"])
    with pytest.raises(DataError) as err:
        load_dataset("mnist")
    message = str(err.value)
    assert message.startswith(f"{cache / 'train-labels-idx1-ubyte.gz'}: checksum mismatch")
    assert message.endswith("; python -m twinsgd.data.download mnist replaces it")


# ---- the bundled subset as the fallback ------------------------------------------------------


def test_nothing_found_downloads_off_gives_the_subset(fake_mnist, tmp_path):
    ds = load_dataset("mnist", allow_download=False)
    assert ds.name == "mnist-subset" and ds.files == ["<bundled>"]
    assert (ds.n_train, ds.n_test) == (10000, 2000)
    assert ds.note.startswith(f"mnist: full MNIST not found in {tmp_path / 'cache' / 'twinsgd'}")
    assert ds.note.endswith(
        "downloads are off; using the bundled class-balanced subset "
        "(10,000 train / 2,000 test images)"
    )


def test_nothing_found_download_fails_gives_the_subset(fake_mnist, tmp_path):
    ds = load_dataset("mnist", timeout_s=5)
    assert ds.name == "mnist-subset"
    assert "the download failed: could not fetch train-images-idx3-ubyte.gz" in ds.note
    assert "\n" not in ds.note
    assert not any((tmp_path / "cache" / "twinsgd" / "mnist").iterdir())  # nothing half-made


def test_other_data_sets_do_not_fall_back(fake_mnist):
    with pytest.raises(DataError, match=r"cifar10: not found in .*downloads are off"):
        load_dataset("cifar10", allow_download=False)
    with pytest.raises(
        DataError,
        match=r"cifar10: not found in .*could not fetch "
        r"cifar-10-binary\.tar\.gz from any mirror",
    ):
        load_dataset("cifar10", timeout_s=5)


def test_unknown_name():
    message = (
        "dataset must be one of mnist, fashion-mnist, cifar10, cifar100, synthetic, "
        "mnist-subset, got 'imagenet'"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        load_dataset("imagenet")


# ---- downloads -------------------------------------------------------------------------------


def test_download_into_the_cache_then_found_there(fake_mnist, server, tmp_path, monkeypatch):
    published, arrays = fake_mnist
    for name, data in published.items():
        server.routes[f"/mirror/{name}"] = (200, data, None)
    use_mirrors(monkeypatch, "mnist", closed_port_url(), server.url + "/mirror/")

    ds = load_dataset("mnist", timeout_s=5)

    cache = tmp_path / "cache" / "twinsgd" / "mnist"
    assert ds.name == "mnist" and folders_of(ds) == {cache}
    assert sorted(p.name for p in cache.iterdir()) == sorted(published)  # no .part left
    np.testing.assert_array_equal(ds.test_arrays()[1], arrays[3])
    hits = len(server.hits)
    assert folders_of(load_dataset("mnist")) == {cache} and len(server.hits) == hits


@pytest.mark.parametrize("fault", ["wrong body", "short body", "404"])
def test_a_bad_download_leaves_no_file(fault, fake_mnist, server, tmp_path):
    published, _ = fake_mnist
    name = "train-labels-idx1-ubyte.gz"
    body = published[name]
    server.routes["/m/" + name] = {
        "wrong body": (200, gzip.compress(gzip.decompress(body)[:-1] + b"\x07"), None),
        "short body": (200, body[:-10], len(body)),  # connection closes early
        "404": (404, b"gone", None),
    }[fault]
    spec = sources.SOURCES["mnist"].files[1]
    folder = tmp_path / "dest"
    folder.mkdir()
    with pytest.raises(DataError, match=f"^could not fetch {name} from any mirror: ") as err:
        fetch_file(spec, [server.url + "/m/" + name], folder / name, timeout_s=5)
    assert list(folder.iterdir()) == []
    reason = {
        "wrong body": "checksum mismatch",
        "short body": "truncated download",
        "404": "HTTP Error 404",
    }[fault]
    assert reason in str(err.value) and "\n" not in str(err.value)
    assert ".part" not in str(err.value)


def test_partial_download_never_has_the_final_name(fake_mnist, server, tmp_path):
    published, _ = fake_mnist
    name = "train-images-idx3-ubyte.gz"
    server.routes["/" + name] = (200, published[name], None)
    folder = tmp_path / "dest"
    folder.mkdir()
    seen = []
    server.during = lambda: seen.append(sorted(p.name for p in folder.iterdir()))
    fetch_file(sources.SOURCES["mnist"].files[0], [server.url + "/" + name], folder / name)
    assert len(seen) == 1 and len(seen[0]) == 1
    assert seen[0][0].startswith(f".{name}.") and seen[0][0].endswith(".part")
    assert [p.name for p in folder.iterdir()] == [name]
    assert (folder / name).read_bytes() == published[name]


def test_next_mirror_after_a_failure_and_file_urls(fake_mnist, server, tmp_path):
    published, _ = fake_mnist
    local = put(tmp_path / "local-mirror", published)
    server.routes = {f"/{n}": (200, b"garbage", None) for n in published}
    got = fetch_dataset(
        "mnist",
        tmp_path / "dest",
        mirrors=[closed_port_url(), server.url, local.as_uri()],
        timeout_s=5,
    )
    assert [(p.name, fetched) for p, fetched in got] == [(n, True) for n in published]
    assert len(server.hits) == 4  # each file tried there first
    for name, data in published.items():
        assert (tmp_path / "dest" / name).read_bytes() == data
    again = fetch_dataset("mnist", tmp_path / "dest", mirrors=[], timeout_s=5)
    assert [fetched for _, fetched in again] == [False] * 4  # present and verified


def test_a_corrupt_file_is_fetched_again(fake_mnist, tmp_path):
    published, _ = fake_mnist
    local = put(tmp_path / "local-mirror", published)
    dest = put(tmp_path / "dest", published)
    (dest / "t10k-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b broken")
    got = fetch_dataset("mnist", dest, mirrors=[local.as_uri()])
    assert [fetched for _, fetched in got] == [False, False, False, True]
    name = "t10k-labels-idx1-ubyte.gz"
    assert (dest / name).read_bytes() == published[name]


def test_cifar_download_and_load(fake_mnist, server, tmp_path, monkeypatch):
    import io
    import tarfile

    buffer = io.BytesIO()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for i, member in enumerate(LAYOUTS["cifar10"].train + LAYOUTS["cifar10"].test):
            data = encode_records(images, [i, 1, 2], "cifar10")
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{member}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    body = buffer.getvalue()
    server.routes["/kriz/cifar-10-binary.tar.gz"] = (200, body, None)
    monkeypatch.setitem(
        sources.SOURCES,
        "cifar10",
        dataclasses.replace(
            sources.SOURCES["cifar10"],
            files=(FileSpec("cifar-10-binary.tar.gz", md5_hex(body)),),
            mirrors=(server.url + "/kriz/",),
        ),
    )

    ds = load_dataset("cifar10", timeout_s=5)

    assert ds.name == "cifar10" and (ds.n_train, ds.n_test, ds.input_shape) == (15, 3, (32, 32, 3))
    assert ds.files == [str(tmp_path / "cache" / "twinsgd" / "cifar10" / "cifar-10-binary.tar.gz")]
    X, y = ds.train_batch([3, 4, 5])  # the second batch file
    assert y.tolist() == [1, 1, 2]
    assert ds.train_batch([0, 3, 6, 9, 12])[1].tolist() == [0, 1, 2, 3, 4]  # first of each file
    assert ds.test_arrays()[1].tolist() == [5, 1, 2]
    np.testing.assert_allclose(X, (images / 255.0 - ds.mean) / ds.std, rtol=1e-5, atol=1e-5)


def test_extracted_cifar_folder_is_checked_by_record_counts(fake_mnist, tmp_path, monkeypatch):
    folder = tmp_path / "given" / "cifar100" / "cifar-100-binary"
    folder.mkdir(parents=True)
    images = np.zeros((4, 32, 32, 3), dtype=np.uint8)
    (folder / "train.bin").write_bytes(encode_records(images, [0, 1, 2, 99], "cifar100"))
    (folder / "test.bin").write_bytes(encode_records(images[:2], [5, 6], "cifar100"))
    with pytest.raises(
        DataError, match="wrong size: 4 train records, the published cifar100 has 50000"
    ):
        load_dataset("cifar100", tmp_path / "given")
    monkeypatch.setitem(
        sources.SOURCES,
        "cifar100",
        dataclasses.replace(sources.SOURCES["cifar100"], n_train=4, n_test=2),
    )
    ds = load_dataset("cifar100", tmp_path / "given")
    assert ds.n_classes == 100 and ds.train_batch([3])[1].tolist() == [99]
    assert ds.files == [str(folder)]


# ---- python -m twinsgd.data.download ---------------------------------------------------------


def test_download_cli(fake_mnist, server, tmp_path, monkeypatch, capsys):
    published, _ = fake_mnist
    for name, data in published.items():
        server.routes[f"/{name}"] = (200, data, None)
    use_mirrors(monkeypatch, "mnist")  # only the --mirror given

    assert download_main(["mnist", "--dir", str(tmp_path / "D"), "--mirror", server.url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{tmp_path / 'D' / 'mnist' / n}: fetched and verified" for n in published]
    ds = load_dataset("mnist", tmp_path / "D")  # the layout --data-dir reads
    assert ds.name == "mnist"

    assert download_main(["mnist", "--dir", str(tmp_path / "D")]) == 0
    assert capsys.readouterr().out.count("already there, verified") == 4


def test_download_cli_failure_is_one_line_and_status_2(fake_mnist, tmp_path, monkeypatch, capsys):
    use_mirrors(monkeypatch, "mnist")
    with pytest.raises(SystemExit) as exit_:
        download_main(
            ["mnist", "--dir", str(tmp_path / "D"), "--mirror", closed_port_url(), "--timeout", "5"]
        )
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        "twinsgd.data.download: could not fetch train-images-idx3-ubyte.gz "
        "from any mirror: http://127.0.0.1:"
    )
    assert list((tmp_path / "D" / "mnist").iterdir()) == []


def test_download_module_rejects_an_unknown_name():
    done = subprocess.run(
        [sys.executable, "-m", "twinsgd.data.download", "imagenet", "--dir", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 2 and "invalid choice: 'imagenet'" in done.stderr
