"""2-D convolution of NHWC activations by im2col and GEMM, forward and backward side by side.

The layer protocol (``bind``, ``forward``, ``backward``, scratch from a `Workspace`) is the one
described in `models.layers`.
"""

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from models.layers import Layer, _uniform_fan_in


class Conv2D(Layer):
    """2-D convolution (cross-correlation, as in PyTorch) of NHWC inputs, by im2col and GEMM.

    Parameters
    ----------
    cin, cout : int
        Input and output channels.
    kernel_size : int
        kh = kw = kernel_size.
    stride : int, default 1
    padding : int, default 0
        Zero padding on each side of H and W.

    Notes
    -----
    ``W`` is (kh, kw, cin, cout) and ``b`` (cout,), stored back to back, so the layer's parameter
    block reshaped to ``(kh*kw*cin + 1, cout)`` is the GEMM's right operand ``[W; b]``: row
    ``(i*kw + j)*cin + c`` multiplies padded-input pixel ``(s*ho + i, s*wo + j)``, channel c, and
    the last row is the bias::

        y[n, ho, wo, :] = b + sum_{i, j, c} xpad[n, s*ho + i, s*wo + j, c] * W[i, j, c, :]

    Output size ``Ho = (H + 2p - kh) // s + 1`` (likewise Wo).

    Forward: im2col copies the strided window view of the padded input (``as_strided``, no Python
    loop over pixels) into ``cols``, rows ``(kh*kw*cin + 1)`` long whose last entry is 1, and
    ``y = cols @ [W; b]`` (n*Ho*Wo*kh*kw*cin multiply-adds). Backward: ``[dW; db] = cols.T @ dy``,
    and the input gradient is the transposed convolution of dy, again by im2col and GEMM
    (`_input_gradient`).

    The batch is processed a few samples at a time (``_CHUNK_BYTES`` of cols), so that each block
    of cols is still in cache when the GEMM reads it. When the copy is cheap (``kw*cin >= 32``
    floats per contiguous piece) the backward pass recomputes cols instead of keeping them.

    ``pool_order`` (set by `Model` when a `MaxPool2D` follows): the output pixels of each sample
    come in phase order, ``(n, 2, 2, Ho/2, Wo/2, cout)`` with ``[n, a, b, h, w]`` the pixel
    ``(2h + a, 2w + b)``, so that the pooling compares four contiguous images instead of
    interleaved pixels; the GEMMs are the same, only the order of the im2col rows changes.
    """

    kind = "conv"
    # NOTE: performance: a few MB of cols per GEMM keeps them in cache between the copy and the
    # GEMM (conv2 of the cnn: 5.8 -> 3.8 ms forward for a batch of 100 on the development machine).
    _CHUNK_BYTES = 4 << 20

    def __init__(self, cin, cout, kernel_size, stride=1, padding=0):
        for name, value, low in (
            ("cin", cin, 1),
            ("cout", cout, 1),
            ("kernel_size", kernel_size, 1),
            ("stride", stride, 1),
            ("padding", padding, 0),
        ):
            if int(value) != value or value < low:
                raise ValueError(f"Conv2D {name} must be an integer >= {low}, got {value}")
        self.cin, self.cout, self.k = int(cin), int(cout), int(kernel_size)
        self.stride, self.padding = int(stride), int(padding)
        self.param_shapes = (("W", (self.k, self.k, self.cin, self.cout)), ("b", (self.cout,)))
        self._keep_cols = self.k * self.cin < 32  # short copies: keep cols rather than redo them
        self.pool_order = False

    def init_params(self, rng):
        k, cin, cout = self.k, self.cin, self.cout
        return _uniform_fan_in(rng, k * k * cin, (k, k, cin, cout), (cout,))

    def output_shape(self, input_shape):
        H, W, C = input_shape
        if self.cin != C:
            raise ValueError(f"{self.describe()} needs {self.cin} input channels, got {C}")
        p, s, k = self.padding, self.stride, self.k
        if H + 2 * p < k or W + 2 * p < k:
            raise ValueError(f"{self.describe()} does not fit an input of {H}x{W} pixels")
        return ((H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1, self.cout)

    def macs(self, input_shape):
        Ho, Wo, cout = self.output_shape(input_shape)
        return Ho * Wo * cout * self.k * self.k * self.cin

    def describe(self):
        return (
            f"Conv2D({self.k}x{self.k}, {self.cin} -> {self.cout}, stride {self.stride}, "
            f"padding {self.padding})"
        )

    def forward(self, x, train=True):
        n, (Ho, Wo, cout) = x.shape[0], self.output_shape(x.shape[1:])
        if self.pool_order and (Ho % 2 or Wo % 2):
            raise ValueError(f"{self.describe()} in pool order needs an even output, got {Ho}x{Wo}")
        xp = self._pad(x)
        self._win, self._xshape, self._xpshape = self._windows(xp, Ho, Wo), x.shape, xp.shape
        self._kept = train and self._keep_cols
        pixels = (2, 2, Ho // 2, Wo // 2) if self.pool_order else (Ho, Wo)
        y = self.ws.get("y", (n, *pixels, cout))
        y2, Wb = y.reshape(-1, cout), self.block.reshape(-1, cout)
        for rows, cols in self._cols_chunks(keep=self._kept, fill=True):
            np.matmul(cols, Wb, out=y2[rows])
        return y

    def _pad(self, x):
        """x itself, or x copied into the interior of a zero-bordered scratch array."""
        p = self.padding
        if p == 0:
            return x
        n, H, W, C = x.shape
        xp = self.ws.get("xpad", (n, H + 2 * p, W + 2 * p, C), fill=0.0)  # border stays zero
        xp[:, p : p + H, p : p + W, :] = x
        return xp

    def _windows(self, xp, Ho, Wo):
        """Read-only view (n, Ho, Wo, kh, kw, cin) of every receptive field of xp.

        In pool order: (n, 2, 2, Ho/2, Wo/2, kh, kw, cin), the same windows in phase order.
        """
        sn, sh, sw, sc = xp.strides
        s, k = self.stride, self.k
        if self.pool_order:
            return as_strided(
                xp,
                shape=(xp.shape[0], 2, 2, Ho // 2, Wo // 2, k, k, self.cin),
                strides=(sn, s * sh, s * sw, 2 * s * sh, 2 * s * sw, sh, sw, sc),
                writeable=False,
            )
        return as_strided(
            xp,
            shape=(xp.shape[0], Ho, Wo, k, k, self.cin),
            strides=(sn, s * sh, s * sw, sh, sw, sc),
            writeable=False,
        )

    def _cols_chunks(self, keep, fill):
        """Yield ``(rows, cols)`` per block of samples: a slice of output rows, and its im2col.

        ``keep``: blocks of one whole-batch array that backward reuses (else one small scratch
        block, overwritten chunk by chunk). ``fill``: copy the windows in (False: reuse kept ones).
        """
        n, k, cin = self._win.shape[0], self.k, self.cin
        hw, kc = math.prod(self._win.shape[1:-3]), k * k * cin
        per = max(1, self._CHUNK_BYTES // (hw * (kc + 1) * self.ws.dtype.itemsize))
        if keep:
            whole = self.ws.get("cols", (n * hw, kc + 1), fill=1.0)  # last column stays 1
        else:
            block = self.ws.get("cols_block", (min(per, n) * hw, kc + 1), fill=1.0)
        for start in range(0, n, per):
            stop = min(n, start + per)
            rows = slice(start * hw, stop * hw)
            cols = whole[rows] if keep else block[: (stop - start) * hw]
            if fill:
                np.copyto(
                    np.reshape(cols[:, :kc], (stop - start, *self._win.shape[1:]), copy=False),
                    self._win[start:stop],
                )
            yield rows, cols

    def backward(self, dy, grad, need_dx=True):
        cout, kc = self.cout, self.k * self.k * self.cin
        dy2 = dy.reshape(-1, cout)
        dWb = grad.reshape(kc + 1, cout)  # [dW; db] = cols.T @ dy, summed over blocks
        # NOTE: performance: for long rows OpenBLAS computes the transposed product about 20%
        # faster (cols of 76 and 401 columns); for short ones (26) it is slower.
        transposed = kc + 1 >= 64
        total = self.ws.get("dWbT", (cout, kc + 1)) if transposed else dWb
        part = self.ws.get("dWb_part", total.shape)
        chunks = self._cols_chunks(keep=self._kept, fill=not self._kept)
        for i, (rows, cols) in enumerate(chunks):
            out = total if i == 0 else part
            if transposed:
                np.matmul(dy2[rows].T, cols, out=out)
            else:
                np.matmul(cols.T, dy2[rows], out=out)
            if i > 0:
                total += part
        if transposed:
            np.copyto(dWb, total.T)
        if not need_dx:
            return None
        return self._input_gradient(dy)

    def _input_gradient(self, dy):
        """dx as a transposed convolution: im2col of the dilated, padded dy times flipped W.

        ``dxpad[r, q] = sum_{i, j} dy_dilated[r - i, q - j] @ W[i, j].T``: dy is placed at rows
        ``k - 1 + s*ho`` (columns likewise) of a zero array, and every input pixel's gradient is
        one row of ``windows(k x k) @ Wflip`` with ``Wflip[i, j, co, c] = W[k-1-i, k-1-j, c, co]``.
        Only the unpadded pixels are computed. For stride s > 1, 1 - 1/s**2 of the dilated array is
        zeros that the GEMM multiplies anyway (the cnn uses stride 1).

        NOTE: performance: a scatter (``dy @ W.T``, then col2im) reads its result in cin-float
        pieces, one numpy inner loop each, and was 1.2-2x slower than this gather, which copies
        k*cout-float pieces into cache-sized blocks and runs one GEMM per block.
        """
        k, s, p, cin, cout = self.k, self.stride, self.padding, self.cin, self.cout
        n, H, W, _ = self._xshape
        Hp, Wp = self._xpshape[1:3]
        dyp = self.ws.get("dy_dilated", (n, Hp + k - 1, Wp + k - 1, cout), fill=0.0)
        Ho, Wo = self.output_shape(self._xshape[1:])[:2]
        inner = dyp[
            :, k - 1 : k - 1 + s * Ho : s, k - 1 : k - 1 + s * Wo : s
        ]  # zeros elsewhere, forever
        if self.pool_order:  # back to pixel order, (n, a, b, h, w) -> (n, h, a, w, b)
            np.copyto(
                np.reshape(inner, (n, Ho // 2, 2, Wo // 2, 2, cout), copy=False),
                dy.transpose(0, 3, 1, 4, 2, 5),
            )
        else:
            np.copyto(inner, dy)
        flipped = self.ws.get("W_flipped", (k, k, cout, cin))
        np.copyto(flipped, self.params[0][::-1, ::-1].transpose(0, 1, 3, 2))
        sn, sh, sw, sc = dyp.strides
        windows = as_strided(
            dyp[:, p:, p:],
            shape=(n, H, W, k, k, cout),
            strides=(sn, sh, sw, sh, sw, sc),
            writeable=False,
        )
        dx = self.ws.get("dx", (n, H, W, cin))
        dx2, Wf, kc = dx.reshape(-1, cin), flipped.reshape(-1, cin), k * k * cout
        per = max(1, self._CHUNK_BYTES // (H * W * kc * self.ws.dtype.itemsize))
        block = self.ws.get("dy_cols", (min(per, n) * H * W, kc))
        for start in range(0, n, per):
            stop = min(n, start + per)
            cols = block[: (stop - start) * H * W]
            np.copyto(cols.reshape(stop - start, H, W, k, k, cout), windows[start:stop])
            np.matmul(cols, Wf, out=dx2[start * H * W : stop * H * W])
        return dx
