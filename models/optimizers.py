"""Update rules on flat buffers: SGD, momentum (heavy ball) and Adam, in place, without allocating.

Each optimizer owns its state (velocity, moments) and one scratch array, all of ``n_params``
elements allocated once, so ``step`` runs only in-place ufuncs. The conventions are PyTorch's
(``torch.optim.SGD`` with and without momentum, ``torch.optim.Adam``), without weight decay.

Examples
--------
>>> params = np.array([1.0, 2.0], np.float32)
>>> opt = make_optimizer("sgd", 2, lr=0.5)
>>> opt.step(params, np.array([1.0, -2.0], np.float32))
>>> params
array([0.5, 3. ], dtype=float32)
"""

import math

import numpy as np

OPTIMIZERS = ("sgd", "momentum", "adam")


class SGD:
    """Plain gradient descent: ``w -= lr * g``.

    Parameters
    ----------
    n_params : int
        Length of the flat parameter and gradient buffers.
    lr : float
        Learning rate, > 0.
    dtype : numpy dtype, default float32
        dtype of the buffers ``step`` will be given (and of the state).

    Attributes
    ----------
    schedule : callable or None
        ``schedule(t)`` -> factor of ``lr`` at step t = 1, 2, ... (see `cosine_schedule`); None
        keeps ``lr`` constant. ``lr_now`` is the rate of the latest step.
    """

    name = "sgd"

    def __init__(self, n_params, lr, dtype=np.float32):
        self.n_params, self.lr, self.dtype = int(n_params), float(lr), np.dtype(dtype)
        self.t = 0  # steps taken
        self.schedule, self.lr_now = None, self.lr
        self._scratch = np.empty(self.n_params, dtype=self.dtype)

    def step(self, params, grad):
        """Update ``params`` ((n_params,) array of dtype) in place from ``grad`` (same shape)."""
        self._check(params, grad)
        self.t += 1
        if self.schedule is not None:
            self.lr_now = self.lr * self.schedule(self.t)
        self._update(params, grad)

    def _update(self, params, grad):
        np.multiply(grad, self.lr_now, out=self._scratch)
        params -= self._scratch

    def _check(self, params, grad):
        for name, a in (("params", params), ("grad", grad)):
            if a.shape != (self.n_params,) or a.dtype != self.dtype:
                raise ValueError(
                    f"{name} must be a ({self.n_params},) {self.dtype} array, "
                    f"got {a.dtype} {a.shape}"
                )

    def state_dict(self):
        """Hyper-parameters, step count and copies of the state arrays."""
        return {"name": self.name, "lr": self.lr, "t": self.t}


class Momentum(SGD):
    """Heavy-ball momentum, PyTorch's convention: ``v = mu * v + g``; ``w -= lr * v``.

    (``torch.optim.SGD(momentum=mu)`` with dampening 0 and no Nesterov; v starts at 0, so the first
    step is ``v = g`` as in PyTorch.)

    Parameters
    ----------
    n_params : int
    lr : float
        > 0.
    momentum : float, default 0.9
        mu, in [0, 1).
    dtype : numpy dtype, default float32
    """

    name = "momentum"

    def __init__(self, n_params, lr, momentum=0.9, dtype=np.float32):
        super().__init__(n_params, lr, dtype)
        self.momentum = float(momentum)
        self.velocity = np.zeros(self.n_params, dtype=self.dtype)

    def _update(self, params, grad):
        v = self.velocity
        v *= self.momentum
        v += grad
        np.multiply(v, self.lr_now, out=self._scratch)
        params -= self._scratch

    def state_dict(self):
        return {**super().state_dict(), "momentum": self.momentum, "velocity": self.velocity.copy()}


class Adam(SGD):
    """Adam (Kingma & Ba 2015, Algorithm 1) with bias correction, computed as torch.optim.Adam does.

    ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g**2``, then at step t::

        w -= (lr / (1 - b1**t)) * m / (sqrt(v) / sqrt(1 - b2**t) + eps)

    which is the paper's ``lr * m_hat / (sqrt(v_hat) + eps)``, with eps added after the bias
    correction of v, as PyTorch does.

    Parameters
    ----------
    n_params : int
    lr : float
        > 0 (PyTorch's default 1e-3).
    betas : (float, float), default (0.9, 0.999)
        b1, b2, each in [0, 1).
    eps : float, default 1e-8
        > 0.
    dtype : numpy dtype, default float32
    """

    name = "adam"

    def __init__(self, n_params, lr, betas=(0.9, 0.999), eps=1e-8, dtype=np.float32):
        super().__init__(n_params, lr, dtype)
        self.betas, self.eps = (float(betas[0]), float(betas[1])), float(eps)
        self.m = np.zeros(self.n_params, dtype=self.dtype)
        self.v = np.zeros(self.n_params, dtype=self.dtype)

    def _update(self, params, grad):
        (b1, b2), m, v, s = self.betas, self.m, self.v, self._scratch
        m *= b1
        np.multiply(grad, 1.0 - b1, out=s)
        m += s
        v *= b2
        np.multiply(grad, grad, out=s)
        s *= 1.0 - b2
        v += s
        # w -= m / (denom / step) with denom = sqrt(v) / sqrt(1 - b2**t) + eps and
        # step = lr / (1 - b1**t): the step folded into the denominator saves one pass.
        step = self.lr_now / (1.0 - b1**self.t)
        np.sqrt(v, out=s)
        s *= 1.0 / (math.sqrt(1.0 - b2**self.t) * step)  # Python floats keep the array's dtype
        s += self.eps / step
        np.divide(m, s, out=s)
        params -= s

    def state_dict(self):
        return {
            **super().state_dict(),
            "betas": self.betas,
            "eps": self.eps,
            "m": self.m.copy(),
            "v": self.v.copy(),
        }


def cosine_schedule(total_steps):
    """Cosine annealing (Loshchilov & Hutter 2017) from ``lr`` towards 0 over ``total_steps``.

    The factor at step t is ``(1 + cos(pi * (t - 1) / total_steps)) / 2``: 1 at the first step, as
    PyTorch's ``CosineAnnealingLR(T_max=total_steps)`` stepped once per update; steps past the end
    keep the last factor.

    Examples
    --------
    >>> f = cosine_schedule(4)
    >>> [round(f(t), 4) for t in (1, 2, 3, 4, 5)]
    [1.0, 0.8536, 0.5, 0.1464, 0.1464]
    """
    if int(total_steps) != total_steps or total_steps < 1:
        raise ValueError(f"total_steps must be an integer >= 1, got {total_steps}")

    def factor(t):
        return 0.5 * (1.0 + math.cos(math.pi * (min(t, total_steps) - 1) / total_steps))

    return factor


def make_optimizer(
    name, n_params, lr, dtype=np.float32, momentum=0.9, betas=(0.9, 0.999), eps=1e-8, schedule=None
):
    """Build the named optimizer for flat buffers of ``n_params`` elements.

    Parameters
    ----------
    name : {"sgd", "momentum", "adam"}
    n_params : int
        > 0.
    lr : float
        Learning rate, > 0.
    dtype : numpy dtype, default float32
        dtype of the parameter and gradient buffers.
    momentum : float, default 0.9
        mu of ``momentum``, in [0, 1); the other rules ignore it, so a caller may always pass it.
    betas : (float, float), default (0.9, 0.999)
        Adam's moment decay rates, each in [0, 1); ignored by the others.
    eps : float, default 1e-8
        Adam's denominator term, > 0; ignored by the others.
    schedule : callable or None
        ``schedule(t)`` -> factor of ``lr`` at step t (e.g. `cosine_schedule`); None: constant.

    Returns
    -------
    SGD, Momentum or Adam
        With ``step(params, grad)`` (in place) and ``state_dict()``.

    Raises
    ------
    ValueError
        Unknown name, or a hyper-parameter outside its range.

    Examples
    --------
    >>> make_optimizer("adam", 10, lr=1e-3).betas
    (0.9, 0.999)
    >>> make_optimizer("rmsprop", 10, lr=1e-3)
    Traceback (most recent call last):
    ...
    ValueError: optimizer must be one of sgd, momentum, adam, got 'rmsprop'
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")
    if int(n_params) != n_params or n_params < 1:
        raise ValueError(f"n_params must be an integer >= 1, got {n_params}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {np.dtype(dtype)}")
    optimizer = _build(name, n_params, lr, dtype, momentum, betas, eps)
    optimizer.schedule = schedule
    return optimizer


def _build(name, n_params, lr, dtype, momentum, betas, eps):
    if name == "sgd":
        return SGD(n_params, lr, dtype)
    if name == "momentum":
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        return Momentum(n_params, lr, momentum, dtype)
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"betas must be two numbers in [0, 1), got {betas}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    return Adam(n_params, lr, betas, eps, dtype)
