"""Under real.cluster run: a busy loop of SECONDS (default 1) wall time; prints the host name and
the CPU time it got per second of wall time (1.0 is a whole core)."""

import socket
import sys
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
start_s, cpu_start_s = time.perf_counter(), time.process_time()
while time.perf_counter() - start_s < seconds:
    pass
ratio = (time.process_time() - cpu_start_s) / (time.perf_counter() - start_s)
# one write of the whole line: print() writes the text and its newline apart, and the two ranks'
# lines, forwarded by mpiexec, once came out interleaved ("h0 0.5000h1 0.2500")
sys.stdout.write(f"{socket.gethostname()} {ratio:.4f}\n")
sys.stdout.flush()
