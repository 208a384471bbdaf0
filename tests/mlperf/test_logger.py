"""The MLPerf result log never loses a line quietly."""

import errno

import pytest

from trainperf.mlperf.logger import MLPerfLog


def test_a_write_error_reaches_the_caller(tmp_path):
    log = MLPerfLog(tmp_path / "result_0.txt")
    log.event("submission_benchmark", "tiny")
    # a full disk from here on: /dev/full fails every write with ENOSPC
    log._handler.stream.close()
    log._handler.stream = open("/dev/full", "w", encoding="utf-8")
    with pytest.raises(OSError) as e:
        log.event("submission_org", "x")
    assert e.value.errno == errno.ENOSPC
    log._handler.stream = open(tmp_path / "other.txt", "w", encoding="utf-8")
    log.close()
