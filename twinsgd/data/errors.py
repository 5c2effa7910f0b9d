"""The one exception type of ``data/``: a file that is missing, truncated, corrupt or malformed."""


class DataError(ValueError):
    """A dataset file is missing, truncated, corrupt or not in the expected format.

    The message is one line that names the path and what is wrong, for example
    ``/data/mnist/train-images-idx3-ubyte.gz: truncated gzip (...)``. The command-line front ends
    turn it into exit status 2. Line breaks in the text given are replaced by spaces, so the
    one-line rule holds even when a message quotes a multi-line error from a library.

    Examples
    --------
    >>> str(DataError("x.gz: bad IDX magic number 0x08030000\\n(expected two zero bytes)"))
    'x.gz: bad IDX magic number 0x08030000 (expected two zero bytes)'
    """

    def __init__(self, message):
        super().__init__(" ".join(str(message).splitlines()))
