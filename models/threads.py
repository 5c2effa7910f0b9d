"""One BLAS thread per process, set by the programs themselves.

MPI ranks share a machine's cores: a rank whose BLAS starts a thread per core competes with the
other ranks and with itself, and its compute, comm and wait times all distort (a serial run of
200 steps took 8.5 s instead of 1.2 s on a busy machine). ``OPENBLAS_NUM_THREADS=1`` in the
environment does it only where someone set it; these functions do it from inside the process,
through threadpoolctl, for every BLAS and OpenMP runtime numpy and scipy loaded.
"""

from threadpoolctl import threadpool_info, threadpool_limits


def one_blas_thread():
    """Limit BLAS and OpenMP to one thread for the rest of this process; return `blas_threads`
    (what config.json records)."""
    threadpool_limits(limits=1)
    return blas_threads()


def blas_threads():
    """The thread pools of this process: ``[{"library": "openblas", "threads": 1}, ...]``."""
    return [
        {"library": pool["internal_api"], "threads": pool["num_threads"]}
        for pool in threadpool_info()
    ]
