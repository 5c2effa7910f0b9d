"""Calibration fits: piecewise alpha-beta cost models fitted to measured messages (`costfit`) and
the step times of a real run (`steptimes`), shared by ``real.calibrate``, which measures, and
``sim/``, which charges them."""
