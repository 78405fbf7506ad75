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
