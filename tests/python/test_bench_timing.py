#!/usr/bin/env python3
"""scripts/bench_timing.py: the prefill benchmark's interleaved bursts and its `bench_gpu --serve`
client, without a GPU.

    python3 tests/python/test_bench_timing.py

The bursts run against a model of a GPU whose clock drops under sustained load (as an H200's
does, by up to about a fifth), with random true speeds per side; the client runs against a
stand-in for the `bench_gpu` example that speaks its `--serve` protocol.
"""
import os
import random
import stat
import statistics
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.dont_write_bytecode = True
import bench_timing as bt  # noqa: E402


class DriftingGpu:
    """Burst timers of sides with true seconds per call `base[side]` on a GPU whose clock slows
    from 1x to `1 + drop` over its first `ramp` seconds of load, and by `1 + heat[side]` more in
    a burst right after one of `side`'s: each call takes its side's base time times the slowdown
    at that moment. Records which side ran each burst."""

    def __init__(self, base, drop, ramp, heat=None):
        self.base, self.drop, self.ramp = base, drop, ramp
        self.heat = heat or {}
        self.now = 0.0
        self.order = []

    def slowdown(self):
        after = self.heat.get(self.order[-2], 0.0) if len(self.order) > 1 else 0.0
        return (1.0 + self.drop * min(self.now / self.ramp, 1.0)) * (1.0 + after)

    def timer(self, side):
        def burst(n):
            self.order.append(side)
            elapsed = 0.0
            for _ in range(n):
                call = self.base[side] * self.slowdown()
                self.now += call
                elapsed += call
            return elapsed / n
        return burst


def one_after_another(gpu, reps):
    """What timing each side for a stretch of its own gives: the same bursts, side after side."""
    out = {}
    for side in gpu.base:
        burst = gpu.timer(side)
        size = bt.burst_size(burst)
        out[side] = statistics.median(burst(size) for _ in range(reps))
    return out


class InterleavedTest(unittest.TestCase):
    def test_ratios_survive_a_clock_that_drops_under_load(self):
        rng = random.Random()
        for _ in range(20):
            base = {side: rng.uniform(50e-6, 400e-6) for side in ("cudnn", "flash", "ours")}
            reps = 21
            ramp = len(base) * reps * bt.BURST_SECONDS
            gpu = DriftingGpu(base, 0.2, ramp)
            times = bt.interleaved({side: gpu.timer(side) for side in base}, reps)
            for side in base:
                measured = times[side] / times["cudnn"]
                true = base[side] / base["cudnn"]
                self.assertAlmostEqual(measured / true, 1.0, delta=0.01, msg=f"{side}: {base}")
            # The model is one where timing the sides apart is biased: the side timed last runs
            # on the slowest clock.
            apart = one_after_another(DriftingGpu(base, 0.2, ramp), reps)
            self.assertGreater(apart["ours"] / apart["cudnn"] / (base["ours"] / base["cudnn"]), 1.1)

    def test_ratios_survive_bursts_that_run_slower_after_a_hotter_one(self):
        rng = random.Random()
        for sides in (2, 3, 4, 5):
            base = {f"side{i}": rng.uniform(50e-6, 400e-6) for i in range(sides)}
            heat = {side: rng.uniform(0.0, 0.05) for side in base}
            gpu = DriftingGpu(base, 0.0, 1.0, heat)
            times = bt.interleaved({side: gpu.timer(side) for side in base}, 21)
            first = next(iter(base))
            for side in base:
                measured = times[side] / times[first]
                true = base[side] / base[first]
                self.assertAlmostEqual(measured / true, 1.0, delta=1e-9, msg=f"{base} {heat}")

    def test_every_side_follows_every_side_as_often(self):
        for sides in range(1, 7):
            names = [f"s{i}" for i in range(sides)]
            gpu = DriftingGpu({name: 1e-4 for name in names}, 0.0, 1.0)
            reps = random.randint(1, 25)
            times = bt.interleaved({name: gpu.timer(name) for name in names}, reps)
            self.assertEqual(sorted(times), names)
            # One sizing burst per side, a warm-up burst, then the timed ones.
            self.assertEqual(gpu.order[:sides], names)
            runs = gpu.order[sides:]
            cycles = 2 * -(-reps // (2 * sides))
            self.assertEqual(len(runs), cycles * sides * sides + 1)
            pairs = sorted(zip(runs, runs[1:]))
            self.assertEqual(pairs, sorted((a, b) for a in names for b in names for _ in range(cycles)))
            self.assertEqual(runs[0], runs[-1])

    def test_mirrored_processes_cancel_an_effect_of_start_order(self):
        # One build in both places, on a GPU where a process runs faster the later it was started
        # (by `step` per process started before it): in effect what an H100 showed for the
        # `--baseline` build, started second. Pooled over mirrored starts, both places read alike.
        rng = random.Random()
        for _ in range(10):
            per_call, step = rng.uniform(50e-6, 400e-6), rng.uniform(0.01, 0.03)
            gpu = DriftingGpu({"cudnn": rng.uniform(50e-6, 400e-6), "ours": per_call, "baseline": per_call}, 0.0, 1.0)
            started = []

            def start(name):
                faster = 1.0 - step * len(started)
                started.append(name)
                burst = gpu.timer(name)
                return lambda n: burst(n) * faster

            one_each = bt.interleaved({"cudnn": gpu.timer("cudnn"), "ours": start("ours"), "baseline": start("baseline")}, 21)
            self.assertGreater(one_each["ours"] / one_each["baseline"], 1 + step / 2)
            started.clear()
            sides = bt.mirrored(start, ["ours", "baseline"])
            self.assertEqual(started, ["ours", "baseline", "baseline", "ours"])
            times = bt.interleaved({"cudnn": gpu.timer("cudnn"), **sides}, 21)
            self.assertAlmostEqual(times["ours"] / times["baseline"], 1.0, delta=0.002)

    def test_bursts_are_sized_to_the_burst_length(self):
        for per_call in (3e-6, 70e-6, 1.3e-3, 0.05):
            gpu = DriftingGpu({"x": per_call}, 0.0, 1.0)
            bt.interleaved({"x": gpu.timer("x")}, 1)
            # After the one-call sizing burst: the warm-up and the timed bursts, of one size.
            seconds = (gpu.now - per_call) / (len(gpu.order) - 1)
            expected = min(max(bt.BURST_SECONDS, per_call), 1000 * per_call)
            self.assertLess(abs(seconds - expected), per_call + 1e-12, (per_call, seconds))


STAND_IN = """\
#!{python}
# Stands in for `bench_gpu ... --serve`: answers a burst of n launches with {per_call} s per
# launch, after `ready`; {fail}
import sys
if "--serve" not in sys.argv:
    sys.exit("not serving")
with open({log!r}, "w") as log:
    log.write(" ".join(sys.argv[1:]))
fail = {fail!r}
if fail == "at start":
    sys.exit("bench_gpu: no kernel serves this call")
print("ready", flush=True)
for line in sys.stdin:
    if fail == "in a burst":
        sys.exit("bench_gpu: CUDA_ERROR_ILLEGAL_ADDRESS")
    n = int(line)
    print({per_call}, flush=True)
"""


class ServedTest(unittest.TestCase):
    def stand_in(self, folder, per_call, fail):
        path = os.path.join(folder, "bench_gpu")
        log = os.path.join(folder, "argv")
        with open(path, "w") as f:
            f.write(STAND_IN.format(python=sys.executable, per_call=per_call, fail=fail, log=log))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return path, log

    def test_bursts_answer_with_the_binarys_seconds_per_launch(self):
        per_call = random.uniform(1e-5, 1e-3)
        with tempfile.TemporaryDirectory() as folder:
            binary, log = self.stand_in(folder, per_call, "never")
            served = bt.Served(binary, ("prefill", "f16", 32, 512, 16, 128, 1))
            self.assertEqual(served(1), per_call)
            self.assertEqual(served(157), per_call)
            served.close()
            with open(log) as f:
                self.assertEqual(f.read(), "prefill f16 32 512 16 128 1 --serve")

    def test_a_binary_that_fails_stops_the_run_with_its_message(self):
        with tempfile.TemporaryDirectory() as folder:
            binary, _ = self.stand_in(folder, 1e-4, "at start")
            with self.assertRaises(SystemExit) as stop:
                bt.Served(binary, ("prefill", "f16", 1, 256, 16, 128, 0))
            self.assertIn("no kernel serves this call", str(stop.exception))
            binary, _ = self.stand_in(folder, 1e-4, "in a burst")
            served = bt.Served(binary, ("prefill", "f16", 1, 256, 16, 128, 0))
            with self.assertRaises(SystemExit) as stop:
                served(10)
            self.assertIn("CUDA_ERROR_ILLEGAL_ADDRESS", str(stop.exception))


if __name__ == "__main__":
    unittest.main()
