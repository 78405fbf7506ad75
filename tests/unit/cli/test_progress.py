from specsweep.progress import progress_sink, reporter, throttled


def test_sinks_receive_level_progress_only_while_active():
    seen = []
    report = reporter("eagle3-s2-k1-d3", 8)
    with progress_sink(lambda *a: seen.append(a)):
        report(1, 4)
    report(2, 4)
    assert seen == [("eagle3-s2-k1-d3", 8, 1, 4)]


def test_throttle_always_delivers_the_final_update():
    calls = []
    fn = throttled(lambda d, t: calls.append(d), min_interval_s=3600)
    for done in range(1, 11):
        fn(done, 10)
    assert calls == [1, 10]


def test_off_the_loop_never_blocks_the_caller_and_delivers_the_last_value():
    """A sink that blocks (a Prefect API call) must not stall the measuring event loop."""
    import threading

    from specsweep.progress import OffTheLoop

    release, seen = threading.Event(), []

    def slow(done, total):
        seen.append(done)
        release.wait()  # blocked until the test says so

    with OffTheLoop(slow) as report:
        report(1, 10)  # the thread takes it and blocks in slow()
        while not seen:
            threading.Event().wait(0.001)
        for done in range(2, 11):
            report(done, 10)  # returns at once although slow() is still blocked
        assert seen == [1]
        release.set()
    assert seen[0] == 1 and seen[-1] == 10 and len(seen) <= 3  # coalesced, last one kept


def test_off_the_loop_survives_a_failing_sink():
    from specsweep.progress import OffTheLoop

    calls = []

    def broken(done, total):
        calls.append(done)
        raise RuntimeError("API down")

    with OffTheLoop(broken) as report:
        report(1, 2)
    assert calls == [1]
