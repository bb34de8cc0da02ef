"""The prefill benchmark's timing (scripts/bench_gpu.py), without PyTorch: `bench_gpu --serve`
processes and bursts that take turns with PyTorch's.

Under sustained load an H200's SM clock moves between about 1,650 and 1,980 MHz depending on
what ran before (NVML, 0.6 s of back-to-back calls: ours at d = 128 causal 32 x 512 settled at
1,785-1,800 MHz, cuDNN at 1,635-1,650), so two sides timed one after the other, each for a
stretch of bursts, compare different clocks: the same row measured 0.90 and 0.82 of cuDNN in two
runs that way. Here the sides take turns burst by burst, each as often right after each
(`turn_order`), symmetrically about the run's middle, so every side sees the same clocks.
"""
import random
import statistics
import subprocess

# Seconds of one burst: long enough that launch gaps do not count, short against the clock's drift.
BURST_SECONDS = 0.02


class Served:
    """A `bench_gpu ... --serve` process: one call's buffers set up once, bursts timed on request."""

    def __init__(self, binary, args):
        self.proc = subprocess.Popen([binary, *map(str, args), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"{binary} {args}: {self.proc.communicate()[1].strip()}")

    def __call__(self, n):
        """Seconds per launch of a burst of n."""
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench_gpu --serve: {self.proc.communicate()[1].strip()}")
        return float(line)

    def close(self):
        _, err = self.proc.communicate()
        if self.proc.returncode != 0:
            raise SystemExit(f"bench_gpu --serve: {err.strip()}")


def burst_size(burst):
    """Calls in a burst of about BURST_SECONDS (1 to 1000), from a burst of one."""
    return max(1, min(1000, int(BURST_SECONDS / burst(1)) + 1))


def turn_order(n, cycles, rng):
    """An order of bursts of sides 0 .. n - 1 in which, after the first (a warm-up), every side
    runs right after every side (itself included) exactly `cycles` times: an Eulerian circuit of
    the complete directed graph with loops on the sides, each edge `cycles` times, its edges taken
    in `rng`'s order (Hierholzer's algorithm), so that no side holds the same places in every
    stretch of the run. A burst runs a little slower right after a hotter one (two processes of
    the same binary differed by up to 3.3% on an H200 when one always ran right after the other), so
    every side must see the same predecessors. n * n * cycles + 1 bursts; the first is the last."""
    unused = {a: [b for b in range(n) for _ in range(cycles)] for a in range(n)}
    for edges in unused.values():
        rng.shuffle(edges)
    stack, circuit = [0], []
    while stack:
        if unused[stack[-1]]:
            stack.append(unused[stack[-1]].pop())
        else:
            circuit.append(stack.pop())
    return circuit[::-1]


def mirrored(start, names):
    """{name: [two timers]} from `start(name)` (which starts one timer, e.g. a `Served` process of
    that name's binary), started in mirrored order (a b ... b a) so that start order and place in
    the turn order are the same for every name. Two builds compared this way, one process each,
    favoured whichever was started second (the `--baseline` one) by up to 6% on an H100, with
    the same binary in both places; the cause is outside what the bursts can see, so each side
    is given both places instead."""
    timers = {name: [] for name in names}
    for name in [*names, *reversed(names)]:
        timers[name].append(start(name))
    return timers


def interleaved(bursts, reps):
    """{side: median seconds per call} over at least `reps` bursts per side (a multiple of twice
    the number of sides). `bursts` maps each side to a burst timer (a count n in, seconds per call of
    a burst of n out), or to a list of timers whose bursts are pooled into the side's median
    (`mirrored`); each timer's burst is sized to about BURST_SECONDS, and the timers take turns
    burst by burst in `turn_order` (a fixed seed: the same order for every row)."""
    units = [(name, timer) for name, timers in bursts.items()
             for timer in (timers if isinstance(timers, list) else [timers])]
    sizes = [burst_size(timer) for _, timer in units]
    # The order, then the same order backwards (the walk back uses every edge the other way:
    # still every pair as often), so that each timer's bursts sit symmetrically about the run's
    # middle, where a clock drifting through the run puts every side's median.
    half = turn_order(len(units), -(-reps // (2 * len(units))), random.Random(0))
    order = half + half[-2::-1]
    times = {name: [] for name in bursts}
    for i, unit in enumerate(order):
        name, timer = units[unit]
        seconds = timer(sizes[unit])
        if i > 0:
            times[name].append(seconds)
    return {name: statistics.median(t) for name, t in times.items()}
