"""A broker starved of request handlers: the steps a broker accepts, the load's topic, the
exporter page it is read from, when it counts as starved, and a ground truth that takes
only its own handler stages."""

from __future__ import annotations

import pytest

from matrix.mechanisms.starved_handlers import (HANDLER_IDLE, QUEUE_SIZE, StarvedRequestHandlers,
                                                led_by, metric_value, starved, thread_steps)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("current, target, steps", [
    (8, 1, [4, 2, 1]), (1, 8, [2, 4, 8]), (3, 1, [1]), (1, 3, [2, 3]), (8, 8, []),
    (5, 1, [2, 1]), (8, 3, [4, 3])])
def test_thread_steps_halve_or_double_at_most(current, target, steps):
    assert thread_steps(current, target) == steps
    before = current
    for n in steps:     # what DynamicThreadPool accepts (Java's int division)
        assert n >= before // 2 and n <= before * 2 and n >= 1
        before = n


def test_thread_steps_refuse_zero():
    with pytest.raises(ValueError):
        thread_steps(8, 0)


def test_led_by_puts_the_broker_first_with_rotating_followers():
    assert led_by(1, [1, 2, 3, 4, 5], 4, 3) == [[1, 2, 3], [1, 3, 4], [1, 4, 5], [1, 5, 2]]
    assert led_by(2, [1, 2], 2, 3) == [[2, 1], [2, 1]]


def test_metric_value_reads_the_named_sample_only():
    page = "\n".join([
        f"# HELP {QUEUE_SIZE} queue", f"{QUEUE_SIZE} 17.0",
        f"{HANDLER_IDLE}_other 0.5", f"{HANDLER_IDLE} 0.02"])
    assert metric_value(page, QUEUE_SIZE) == 17.0
    assert metric_value(page, HANDLER_IDLE) == 0.02
    assert metric_value(page, "missing") is None
    assert metric_value('x{a="1"} 3.5', "x") == 3.5


def test_starved_when_requests_wait_for_a_handler_in_most_samples():
    assert starved({"samples": 30, "queued_samples": 15})
    assert not starved({"samples": 30, "queued_samples": 14})
    assert not starved({})                                   # never sampled: not known
    # the idle share's one-minute average lags: it does not decide
    assert starved({"samples": 10, "queued_samples": 9, "handler_idle_min": 0.42})


def test_only_the_brokers_own_handler_stages_are_the_right_cause():
    fault = StarvedRequestHandlers(broker=1)
    assert fault.runs_until_detected and fault.targets() == {"num.io.threads": 1}
    [e] = fault.expect()
    own = {"type": "slow_broker", "entity": "broker:1", "cause": "request_handlers_saturated",
           "severity": "high"}
    assert e.matches(own)
    assert e.matches({**own, "cause": "local_disk_or_page_cache"})   # the work holding it
    assert not e.matches({**own, "cause": "slow_follower"})
    assert not e.matches({**own, "cause": "slow_unattributed"})
    assert not e.matches({**own, "cause": "network_threads_saturated"})
    both = StarvedRequestHandlers(broker=1, network_threads=1)
    assert both.targets() == {"num.io.threads": 1, "num.network.threads": 1}
    assert both.expect()[0].matches({**own, "cause": "network_threads_saturated"})
    victim, _, _ = fault.explained()
    assert victim.matches({"type": "slow_broker", "entity": "broker:2",
                           "cause": "remote_produce_slow_follower"})
    assert not victim.names({"type": "slow_broker", "entity": "broker:1"})


def test_the_load_is_varied_text_the_topic_recompresses():
    import zlib

    from demo.workload import VariedValues, text_corpus
    from matrix.mechanisms.starved_handlers import TOPIC_CONFIG

    fault = StarvedRequestHandlers(broker=1)
    assert all(p.varied_values and p.acks == "all" for p in fault.load)
    # the producers send uncompressed: a topic codec they do not use is recompressed
    assert TOPIC_CONFIG["compression.type"] == "gzip" and "compression.gzip.level" in TOPIC_CONFIG
    assert text_corpus(1000, seed=3) == text_corpus(1000, seed=3) != text_corpus(1000, seed=4)
    values = VariedValues(8000)
    batch = [values() for _ in range(20)]
    assert {len(v) for v in batch} == {8000} and len(set(batch)) == 20
    ratio = len(b"".join(batch)) / len(zlib.compress(b"".join(batch), 9))
    assert 2 < ratio < 5, ratio     # compressible like event payloads, not one byte repeated
