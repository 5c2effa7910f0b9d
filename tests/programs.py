"""Small node programs and fault schedules the tests share."""

import numpy as np

from twinsgd.programs.ops import Recv, Send
from twinsgd.run.runlog import Charges


def ping_pong(nbytes):
    """The program of a blocking ping-pong of ``nbytes`` (float32 zeros) between ranks 0 and 1:
    a function of the rank that returns its generator."""

    def program(rank):
        buf = np.zeros(nbytes // 4, np.float32)
        if rank == 0:
            yield Send(dest=1, payload=buf)
            yield Recv(source=1, buf=buf)
        else:
            yield Recv(source=0, buf=buf)
            yield Send(dest=0, payload=buf)

    return program


def faults_file(tmp_path, *faults):
    """A ``--faults`` TOML file in ``tmp_path`` of the given ``[[fault]]`` tables (dicts); its
    path as a string. Both backends' fault tests read the same schedules."""
    path = tmp_path / "faults.toml"
    path.write_text(
        "".join(
            "[[fault]]\n"
            + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in fault.items())
            + "\n"
            for fault in faults
        )
    )
    return str(path)


class ChargeLog(Charges):
    """A run log that only adds up the seconds charged to each kind (compute, comm, wait): what
    a Simulator's logs need in a test that looks at the split alone."""

    def __init__(self):
        self.seconds = {}

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        self.seconds[kind] = self.seconds.get(kind, 0.0) + seconds

    def __getattr__(self, name):
        return lambda *args, **kwargs: None
