"""The training process's own settings."""

import ctypes
import sys
import time

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


def test_threads_beside_other_work_leave_each_busy_core_to_it():
    """One thread fewer per core other work holds, from three quarters of one; never none."""
    assert [host.threads_beside(2, b) for b in (0.0, 0.6, 0.8, 1.0, 1.7, 2.0)] == [2, 2, 1, 1, 1, 1]
    assert [host.threads_beside(8, b) for b in (0.7, 0.8, 3.0, 7.9, 12.0)] == [8, 7, 5, 1, 1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat")
def test_busy_cores_elsewhere_sees_another_process_and_not_this_one():
    """A busy child process shows as about a core; this process's own busy loop does not count."""
    import subprocess
    import time

    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert host.busy_cores_elsewhere(0.5) > 0.5
    finally:
        child.kill()
        child.wait()

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    import threading

    before = host.busy_cores_elsewhere(0.5)  # whatever else this machine is doing meanwhile
    t = threading.Thread(target=spin, args=(0.6,))
    t.start()
    try:
        own = host.busy_cores_elsewhere(0.5)
    finally:
        t.join()
    assert own is not None and own < before + 0.5


def test_a_run_takes_one_thread_per_free_core_unless_threads_were_chosen(monkeypatch, capsys):
    """A single process whose threads nobody chose trains beside other work on the cores left, and
    says so; OMP_NUM_THREADS, several processes and smoke models keep their own rule."""
    from types import SimpleNamespace

    from trainperf.parallel.env import DistEnv
    from trainperf.train import benchmark

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(benchmark, "busy_cores_elsewhere", lambda: 1.0)
    r = SimpleNamespace(smoke=SimpleNamespace(enabled=False))
    assert benchmark.run_threads(r, DistEnv(), 2) == 1
    assert "other work keeps 1.0 of 2 cores busy: training on 1 thread" in capsys.readouterr().out
    assert benchmark.run_threads(r, DistEnv(rank=0, world_size=2), 2) == 2
    monkeypatch.setattr(benchmark, "busy_cores_elsewhere", lambda: pytest.fail("one thread: nothing to look at"))
    assert benchmark.run_threads(r, DistEnv(), 1) == 1
    monkeypatch.setattr(benchmark, "busy_cores_elsewhere", lambda: 1.0)
    monkeypatch.setattr(benchmark, "busy_cores_elsewhere", lambda: None)
    assert benchmark.run_threads(r, DistEnv(), 2) == 2
    monkeypatch.setattr(benchmark, "busy_cores_elsewhere", lambda: 1.0)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert benchmark.run_threads(r, DistEnv(), 2) == 2
    assert benchmark.run_threads(SimpleNamespace(smoke=SimpleNamespace(enabled=True)), DistEnv(), 2) == 1
    assert capsys.readouterr().out == ""


def test_busy_cores_elsewhere_counts_only_the_cpus_this_process_may_use(monkeypatch):
    """In a container pinned to some CPUs, the host's other CPUs' work does not count; stolen time
    does. Fake /proc/stat: cpu1 busy for a whole second, cpu0 idle then half stolen."""
    import io

    hz = 100
    reads = iter([
        "cpu  0 0 0 0 0 0 0 0\ncpu0 0 0 0 100 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0\nintr 1\n",
        "cpu  0 0 0 0 0 0 0 0\ncpu0 0 0 0 150 0 0 0 50\ncpu1 100 0 0 100 0 0 0 0\nintr 2\n",
    ])
    clock = iter([0.0, 1.0])
    monkeypatch.setattr(host, "open", lambda *a, **k: io.StringIO(next(reads)), raising=False)
    monkeypatch.setattr(host.time, "sleep", lambda s: None)
    monkeypatch.setattr(host.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(host.os, "sysconf", lambda name: hz)
    monkeypatch.setattr(host.os, "times", lambda: type("T", (), {"user": 0.0, "system": 0.0})())
    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert host.busy_cores_elsewhere() == pytest.approx(0.5)  # cpu0's stolen half; cpu1 is not ours


class _FakeIsa:
    """Stands for one of inductor's VecISA objects: its check (`bool`) takes `seconds` and is recorded."""

    def __init__(self, name: str, seconds: float, log: list):
        self.name, self.seconds, self.log = name, seconds, log

    def __str__(self) -> str:
        return self.name

    def __bool__(self) -> bool:
        start = time.monotonic()
        time.sleep(self.seconds)
        self.log.append((self.name, start, time.monotonic()))
        return True


def test_vector_isa_checks_run_side_by_side_for_the_sets_this_cpu_has(monkeypatch):
    from torch._inductor import cpu_vec_isa

    log: list = []
    isas = [_FakeIsa(n, 0.5, log) for n in ("avx512 avx512_vnni amx_tile", "avx512 avx512_vnni", "avx512", "avx2", "asimd")]
    monkeypatch.setattr(cpu_vec_isa, "supported_vec_isa_list", isas)
    monkeypatch.setattr(cpu_vec_isa, "x86_isa_checker", lambda: ["avx2", "avx512", "avx512_vnni"])
    threads = host.check_vector_isas()
    assert threads
    for t in threads:
        t.join(timeout=10)
    assert sorted(name for name, _, _ in log) == ["avx2", "avx512", "avx512 avx512_vnni"]  # not AMX, not ARM's
    # side by side: every check started before the first one ended
    assert max(start for _, start, _ in log) < min(end for _, _, end in log)


def test_vector_isa_checks_start_nothing_where_the_cpu_has_none_of_the_sets(monkeypatch):
    from torch._inductor import cpu_vec_isa

    log: list = []
    monkeypatch.setattr(cpu_vec_isa, "supported_vec_isa_list", [_FakeIsa("avx2", 0.0, log)])
    monkeypatch.setattr(cpu_vec_isa, "x86_isa_checker", lambda: [])
    assert host.check_vector_isas() == [] and log == []
