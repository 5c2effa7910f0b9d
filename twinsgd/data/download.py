"""Fetch data sets ahead of time, e.g. for cluster nodes without internet access.

    python -m twinsgd.data.download mnist fashion-mnist --dir /shared/datasets
    python -m twinsgd.data.download cifar10                  # into the user cache ~/.cache/twinsgd

Each data set goes to ``<dir>/<name>/`` under its published file names, which is the layout
``--data-dir <dir>`` (or ``TWINSGD_DATA=<dir>``) reads. Files already there and verified are kept;
missing or corrupt ones are downloaded (official mirrors, after any ``--mirror`` given), verified
against the published checksums and renamed into place atomically. Exit status 0 when every data set
is complete, 2 with one line on stderr otherwise.
"""

import sys

from twinsgd.cli import OneLineParser

from .errors import DataError
from .fetch import DEFAULT_TIMEOUT_S, fetch_dataset
from .locations import cache_root
from .sources import SOURCES


def _parser():
    parser = OneLineParser(
        prog="python -m twinsgd.data.download",
        description="Download data sets into DIR/<name>/, verifying checksums.",
    )
    parser.add_argument(
        "names",
        nargs="+",
        choices=list(SOURCES),
        metavar="NAME",
        help=f"data set: {' | '.join(SOURCES)}",
    )
    parser.add_argument(
        "--dir",
        default=None,
        metavar="DIR",
        help="destination root (default: ${XDG_CACHE_HOME:-~/.cache}/twinsgd)",
    )
    parser.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="URL",
        help="base URL to try before the official mirrors (repeatable)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"per connect/read timeout in seconds (default {DEFAULT_TIMEOUT_S:g})",
    )
    return parser


def main(argv=None):
    """Run the command line; returns 0, or exits with status 2 and one line on stderr."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error(f"--timeout must be > 0, got {args.timeout}")
    root = cache_root() if args.dir is None else args.dir
    for name in args.names:
        mirrors = (*args.mirror, *SOURCES[name].mirrors)
        try:
            files = fetch_dataset(name, f"{root}/{name}", mirrors=mirrors, timeout_s=args.timeout)
        except DataError as err:
            parser.exit(2, f"twinsgd.data.download: {err}\n")
        for path, fetched in files:
            print(f"{path}: {'fetched and verified' if fetched else 'already there, verified'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
