"""Reading the project's TOML files (run configurations, fault schedules) with one kind of error."""

import tomllib


def read_toml(path, where):
    """The document in TOML file ``path`` (a dict); ValueError ``{where}: cannot read (...)`` or
    ``{where}: not valid TOML (...)``, ``where`` naming the flag and the file."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as err:
        raise ValueError(f"{where}: cannot read ({err.strerror})") from err
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{where}: not valid TOML ({err})") from err
