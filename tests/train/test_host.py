"""The training process's own settings."""

import ctypes
import sys

import pytest

from trainperf.train import host


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_raises_glibcs_thresholds(monkeypatch):
    """Both thresholds are set (mmap first, so a large block is not mapped afresh), and a C library
    without mallopt (musl) is left as it is."""
    calls = []

    class Libc:
        class mallopt:  # noqa: N801 - stands for the C function
            argtypes = None

            def __new__(cls, param, value):
                calls.append((param, value))
                return 1

    monkeypatch.setattr(host.ctypes, "CDLL", lambda name: Libc)
    assert host.keep_freed_memory()
    assert calls == [(host.M_MMAP_THRESHOLD, 1 << 30), (host.M_TRIM_THRESHOLD, 2**31 - 1)]

    monkeypatch.setattr(host.ctypes, "CDLL", lambda name: type("Musl", (), {})())
    assert not host.keep_freed_memory()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_is_accepted_by_this_c_library():
    try:
        ctypes.CDLL(None).mallopt
    except AttributeError:
        pytest.skip("no mallopt (not glibc)")
    assert host.keep_freed_memory()
