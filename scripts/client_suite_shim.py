"""pytest plugin for suite harnesses that describe the simulated chip in
the environment (``-p client_suite_shim``, scripts/ on sys.path; used by
scripts/jax_tpu_suite.py): ``CLIENT_SUITE_CHIP`` (v5e, v6e, v7x, ...),
``CLIENT_SUITE_BACKEND`` (stock or mosaic_rt) and ``CLIENT_SUITE_PARAMS``
(a JSON object of InterpretParams fields) become mosaic_rt's own switch --
``MOSAIC_RT_CHIP``, ``MOSAIC_RT_INTERPRETER``, ``MOSAIC_RT_PARAMS``, the
environment spelling of ``pytest --mosaic-rt`` (docs/pytest-flag.md) -- when
pytest loads this plugin, before mosaic_rt's plugin reads them.

Everything the simulated chip does (its gates, kernels routed to the chosen
TPU interpret mode whatever ``interpret=`` they pass, each test inside
``mosaic_rt.native_errors``) is the product's; scripts/client_suite.py
passes the flag itself.
"""

from __future__ import annotations

import json
import os

import pytest

_ENV = (("CLIENT_SUITE_CHIP", "MOSAIC_RT_CHIP"), ("CLIENT_SUITE_BACKEND", "MOSAIC_RT_INTERPRETER"))


def _params_text(text: str) -> str:
    params = json.loads(text)
    if not isinstance(params, dict):
        raise pytest.UsageError(f"CLIENT_SUITE_PARAMS={text!r}: expected a JSON object")
    return " ".join(f"{key}={json.dumps(value)}" for key, value in params.items())


for _ours, _product in _ENV:
    if os.environ.get(_ours):
        os.environ[_product] = os.environ[_ours]
if os.environ.get("CLIENT_SUITE_PARAMS"):
    os.environ["MOSAIC_RT_PARAMS"] = _params_text(os.environ["CLIENT_SUITE_PARAMS"])
