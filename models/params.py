"""Flat parameter buffers: one contiguous array per model, named views into it per layer.

Communication sends one array and optimizers update one array in place, so a model keeps all its
weights in a single buffer and every layer reads its own slices of it. The gradient has the same
layout, so ``grad[i]`` is the derivative with respect to ``params[i]``.

Examples
--------
>>> layout = Layout([("dense1.W", (3, 2)), ("dense1.b", (2,))])
>>> layout.size, layout.offsets["dense1.b"]
(8, 6)
>>> buffer = np.arange(8, dtype=np.float32)
>>> views = layout.views(buffer)
>>> views["dense1.b"]
array([6., 7.], dtype=float32)
>>> views["dense1.W"][0, 0] = 100.0    # a view: writes land in the buffer
>>> float(buffer[0])
100.0
"""

import math

import numpy as np


class Layout:
    """Names, shapes and offsets of the arrays packed into one flat buffer, in order.

    Parameters
    ----------
    entries : iterable of (str, tuple of int)
        ``(name, shape)`` pairs in packing order; names must be unique.

    Attributes
    ----------
    names : list of str
        The names in packing order.
    shapes : dict of str to tuple of int
    offsets : dict of str to int
        Index of each array's first element in the buffer.
    size : int
        Total number of elements (the buffer's length).

    Raises
    ------
    ValueError
        If a name repeats or a shape has a negative dimension.
    """

    def __init__(self, entries):
        self.names, self.shapes, self.offsets = [], {}, {}
        size = 0
        for name, shape in entries:
            shape = tuple(int(d) for d in shape)
            if name in self.shapes:
                raise ValueError(f"parameter name {name!r} appears twice in the layout")
            if any(d < 0 for d in shape):
                raise ValueError(f"parameter {name!r} has a negative dimension: {shape}")
            self.names.append(name)
            self.shapes[name], self.offsets[name] = shape, size
            size += math.prod(shape)
        self.size = size

    def __len__(self):
        return len(self.names)

    def __repr__(self):
        return f"Layout({[(name, self.shapes[name]) for name in self.names]})"

    def views(self, buffer):
        """Named views into ``buffer`` (dict in packing order).

        Parameters
        ----------
        buffer : (size,) ndarray, C-contiguous
            The flat array to slice; the views share its memory.

        Returns
        -------
        dict of str to ndarray
            ``name -> buffer[offset:offset + n].reshape(shape)``, each a view (never a copy).

        Raises
        ------
        ValueError
            If ``buffer`` is not one-dimensional of length ``size`` or not C-contiguous.
        """
        if buffer.ndim != 1 or buffer.shape[0] != self.size:
            raise ValueError(f"buffer must have shape ({self.size},), got {buffer.shape}")
        if not buffer.flags.c_contiguous:
            raise ValueError("buffer must be C-contiguous so that its slices are views")
        return {name: self._view(buffer, name) for name in self.names}

    def _view(self, buffer, name):
        start, shape = self.offsets[name], self.shapes[name]
        view = buffer[start : start + math.prod(shape)].reshape(shape)
        return view


class Workspace:
    """Scratch arrays reused across calls, for the ``keep`` most recent shapes of each key.

    A layer asks for the same scratch arrays on every call; they are allocated once per shape and
    handed back afterwards. Training (one batch size) and evaluation (another) alternate without
    reallocating as long as ``keep >= 2``.

    Parameters
    ----------
    dtype : numpy dtype
        The dtype of every array handed out.
    keep : int, default 2
        How many shapes to remember per key; the least recently used one is dropped beyond that.
    """

    def __init__(self, dtype, keep=2):
        self.dtype, self.keep = np.dtype(dtype), keep
        self._arrays = {}  # key -> {shape: array}, most recently used last

    def get(self, key, shape, fill=None, dtype=None):
        """The scratch array ``key`` of ``shape``: uninitialised, or filled with ``fill`` when made.

        ``fill`` applies only at allocation: a caller that needs a constant border (zero padding, a
        column of ones) writes just the rest on every call.
        """
        shape = tuple(shape)
        shapes = self._arrays.setdefault(key, {})
        array = shapes.pop(shape, None)
        if array is None:
            array = np.empty(shape, dtype=self.dtype if dtype is None else dtype)
            if fill is not None:
                array.fill(fill)
            if len(shapes) >= self.keep:
                del shapes[next(iter(shapes))]
        shapes[shape] = array  # re-insert: most recently used last
        return array

    def nbytes(self):
        """Bytes held by all scratch arrays."""
        return sum(a.nbytes for shapes in self._arrays.values() for a in shapes.values())
