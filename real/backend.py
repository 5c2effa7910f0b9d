"""The real backend: carry out a node program's operations in this process, timed on the wall clock.

Theory of operation: the driver loop sends each reply into the program and gets its next operation
back (``op = program.send(reply)``), the SimPy way. Every second of the process falls into exactly
one bucket: inside an operation (its kind decides: Compute is compute, Evaluate is evaluation, and
the MPI operations of the next issue are comm or wait), or inside the program's own code between two
yields (its local math, e.g. the optimizer update: compute). Step boundaries arrive through the
node's ``on_step_end`` hook, called from inside the program, so time is charged to the step it
belongs to. The training clock is wall time since the start minus evaluation time, so the seconds
charged to the steps add up to the training clock exactly.
"""

from time import perf_counter

from algorithms.ops import Compute, Evaluate


def run_program(program, node, log, on_step=None):
    """Drive ``program`` (a started-or-not node-program generator) to its end; return its value.

    Parameters
    ----------
    program : generator
        Yields operations of `algorithms.ops`, gets their results back.
    node : algorithms.node.Node
        The node the program runs on; its ``on_step_end`` hook is installed here.
    log : algorithms.runlog.RunLog
        Receives seconds per step (compute, comm, wait), metrics rows and evaluations.
    on_step : callable or None
        Called with each finished `Step` (the progress bar).
    """
    start = perf_counter()
    eval_s = 0.0
    mark = start  # end of the last interval charged; every second after it is still to be charged

    def end_step(step, loss):
        nonlocal mark
        now = perf_counter()
        log.charge("compute", now - mark)  # the program's own math since the last operation
        mark = now
        log.end_step(node.rank, step.epoch, step.iteration, now - start - eval_s, loss)
        if on_step is not None:
            on_step(step)

    node.on_step_end = end_step
    reply = None
    while True:
        try:
            op = program.send(reply)
        except StopIteration as stop:
            return stop.value
        t0 = perf_counter()
        log.charge("compute", t0 - mark)
        if isinstance(op, Compute):
            reply = op.fn(*op.args)
            mark = perf_counter()
            log.charge("compute", mark - t0)
        elif isinstance(op, Evaluate):
            test_loss, test_accuracy = reply = op.fn()
            log.evaluation(op.epoch, op.iteration, t0 - start - eval_s, op.train_loss,
                           test_loss, test_accuracy, perf_counter() - t0)
            mark = perf_counter()
            eval_s += mark - t0  # evaluation and its bookkeeping stay off the training clock
        else:
            raise TypeError(f"real backend: no handler for operation {type(op).__name__}")
