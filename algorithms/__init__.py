"""Operations, node programs, the run configuration and the run-folder writer of both backends.

`PROGRAMS` maps each ``--algorithm`` name to its node program (a generator function of one `Node`).
"""

from algorithms.serial import serial_sgd

PROGRAMS = {"serial": serial_sgd}
