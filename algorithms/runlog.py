"""Time accounting and results of a run, written into its run folder as the run goes.

Backends charge seconds and bytes to the step in progress (`charge`), close steps (`end_step`) and
report evaluations (`evaluation`); they own the clock (wall or simulated) and pass times in, so this
module is the same for real and simulated runs. Training time excludes evaluation time, which is
recorded apart (DESIGN.md, "Time accounting").
"""

from algorithms.runfolder import METRICS_COLUMNS, STEPS_COLUMNS

KINDS = ("compute", "comm", "wait")


class RunLog:
    """Accumulates steps, metrics and the summary of one run inside a `RunFolder`.

    Parameters
    ----------
    folder : algorithms.runfolder.RunFolder
    header : dict
        The config.json document (resolved configuration, versions, clock, ...); its ``status`` is
        kept up to date here.
    target_accuracy : float or None
        Test accuracy whose first crossing time goes into the summary.
    steps_per_epoch : int
        For the summary's seconds per epoch.
    """

    def __init__(self, folder, header, target_accuracy=None, steps_per_epoch=1):
        self.folder, self.header = folder, dict(header, status="running")
        self.target_accuracy, self.steps_per_epoch = target_accuracy, steps_per_epoch
        folder.write_json("config.json", self.header)
        self.metrics = folder.log("metrics.csv", METRICS_COLUMNS)
        self.steps = folder.log("steps.csv", STEPS_COLUMNS)
        self.totals = dict.fromkeys(("compute_s", "comm_s", "wait_s", "eval_s"), 0.0)
        self.bytes_sent = self.iterations = 0
        self.time_s = 0.0
        self.last_eval = None
        self.time_to_target_s = None
        self._current = _new_step()

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        """Add ``seconds`` of ``kind`` (compute, comm or wait) and bytes to the step in progress."""
        step = self._current
        step[f"{kind}_s"] += seconds
        step["bytes_sent"] += bytes_sent
        step["bytes_recv"] += bytes_recv

    def end_step(self, rank, epoch, iteration, time_s, loss, staleness=0):
        """Write the step in progress as one steps.csv row; ``time_s`` is the training clock now."""
        row = self._current
        row.update(rank=rank, epoch=epoch, iteration=iteration, time_s=time_s, loss=float(loss),
                   staleness=staleness)
        self.steps.write_rows([row])
        for kind in KINDS:
            self.totals[f"{kind}_s"] += row[f"{kind}_s"]
        self.bytes_sent += row["bytes_sent"]
        self.iterations, self.time_s = max(self.iterations, iteration), time_s
        self._current = _new_step()

    def evaluation(self, epoch, iteration, time_s, train_loss, test_loss, test_accuracy, eval_s):
        """Write one metrics.csv row and refresh summary.json (so a killed run keeps it)."""
        row = {"epoch": epoch, "iteration": iteration, "time_s": time_s, "train_loss": train_loss,
               "test_loss": test_loss, "test_accuracy": test_accuracy, "bytes": self.bytes_sent,
               "eval_s": eval_s}
        self.metrics.write_rows([row])
        self.totals["eval_s"] += eval_s
        self.last_eval = row
        target = self.target_accuracy
        if target is not None and self.time_to_target_s is None and test_accuracy >= target:
            self.time_to_target_s = time_s
        self.folder.write_json("summary.json", self.summary())

    def summary(self):
        """Totals and means of the run so far (summary.json)."""
        t, n = self.time_s, self.iterations
        last = self.last_eval or {}
        return {
            "status": self.header["status"],
            "dataset": self.header.get("dataset"),
            "algorithm": self.header.get("config", {}).get("algorithm"),
            "nodes": self.header.get("nodes", 1),
            "iterations": n,
            "epochs": n / self.steps_per_epoch,
            "time_s": t,
            **self.totals,
            "seconds_per_epoch": t / n * self.steps_per_epoch if n else None,
            "iterations_per_s": n / t if t > 0 else None,
            "bytes_per_iteration": self.bytes_sent / n if n else None,
            "final_train_loss": last.get("train_loss"),
            "final_test_loss": last.get("test_loss"),
            "final_test_accuracy": last.get("test_accuracy"),
            "target_accuracy": self.target_accuracy,
            "time_to_target_s": self.time_to_target_s,
        }

    def finish(self, status, arrays=None):
        """Close the logs, save the weights (if given) and mark the run ``status`` everywhere."""
        self.metrics.close()
        self.steps.close()
        if arrays is not None:
            self.folder.save_arrays("model.npz", arrays)
        self.header["status"] = status
        self.folder.write_json("summary.json", self.summary())
        self.folder.write_json("config.json", self.header)


def _new_step():
    return {"compute_s": 0.0, "comm_s": 0.0, "wait_s": 0.0, "bytes_sent": 0, "bytes_recv": 0}
