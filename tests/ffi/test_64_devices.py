"""64 simulated devices (a subprocess: the test process has 16)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=64"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import sys
    sys.path[:0] = [{tests!r}, {support!r}]
    import numpy as np
    import test_collectives as C
    C.test_ring_ping_pong_in_fori_loop(64)
    C.test_all_to_all_remote_dma(64, "on_wait")
    C.test_all_to_all_remote_dma(64, "eager")
    import test_failing_launches as E
    E.test_error_on_one_device_ends_every_wait_with_the_root_cause(64)
    print("OK64")
""")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rings_dmas_and_failures_on_64_devices():
    here = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(tests=here, support=os.path.join(os.path.dirname(here), "support"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0 and "OK64" in proc.stdout, proc.stderr[-4000:]
