#!/usr/bin/env python3
"""scripts/hip-emu-trials.sh: the emulator suite's trial runner, against a stand-in for the
amd_emulator test binary (no emulator, no GPU).

    python3 tests/python/test_hip_emu_trials.py

The stand-in lists trials as libtest does and answers `--exact TRIAL` with the outcome each
test draws at random: a pass, a skip, a failed assertion or a crash by signal. The runner must
run exactly the trials of the archs and filter asked for, each in its own process with its arch
in HIP_STANDIN_DEVICES, write their rows, and exit 1 when any failed or crashed or none matched.
"""
import os
import random
import stat
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.join(REPO, "scripts", "hip-emu-trials.sh")
ARCHS = ["gfx942", "gfx1100", "gfx1201"]
CLASSES = ["prefill", "paged_decode", "split_head_dims", "ck_batch"]

STANDIN = """#!/usr/bin/env bash
# Outcomes: one line "TRIAL OUTCOME" each in $OUTCOMES; every run is logged to $RUNS.
if [ "$1" = --list ]; then
  cut -d' ' -f1 "$OUTCOMES" | sed 's/$/: test/'
  echo
  echo "{count} tests, 0 benchmarks"
  exit 0
fi
trial=$2
echo "$trial $HIP_STANDIN_DEVICES $FLASH_ATTN_ROCM_KERNELS" >>"$RUNS"
outcome=$(grep "^$trial " "$OUTCOMES" | cut -d' ' -f2)
echo "running 1 test"
case $outcome in
  pass) echo "emu-launched $trial: fwd_f16_d64"; echo "test $trial ... ok"
        echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 11 filtered out; finished in 0.10s" ;;
  skip) echo "$trial: skipped: no kernels of this class in the build"; echo "test $trial ... ignored"
        echo "test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 11 filtered out; finished in 0.00s" ;;
  fail) echo "thread '$trial' panicked at tests/amd_emulator/main.rs:1:1:"; echo "emulator and CPU differ by 0.5"
        echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 11 filtered out; finished in 0.10s"
        exit 101 ;;
  crash) echo "emu-diff fwd_f16_d64 out 1e-4 lse 1e-6 case 3"; kill -SEGV $$ ;;
esac
"""


class TrialRunnerTest(unittest.TestCase):
    def run_suite(self, outcomes, archs, filt=""):
        with tempfile.TemporaryDirectory() as tmp:
            listing = os.path.join(tmp, "outcomes")
            with open(listing, "w") as f:
                f.writelines(f"{trial} {outcome}\n" for trial, outcome in outcomes.items())
            binary = os.path.join(tmp, "amd_emulator-standin")
            with open(binary, "w") as f:
                f.write(STANDIN.replace("{count}", str(len(outcomes))))
            os.chmod(binary, os.stat(binary).st_mode | stat.S_IXUSR)
            runs = os.path.join(tmp, "runs")
            open(runs, "w").close()
            out = os.path.join(tmp, "out")
            env = dict(os.environ, OUTCOMES=listing, RUNS=runs)
            proc = subprocess.run(["bash", RUNNER, binary, out, ",".join(archs), filt], env=env,
                                  capture_output=True, text=True)
            with open(runs) as f:
                ran = [line.split() for line in f]
            with open(os.path.join(out, "table.md")) as f:
                table = f.read().splitlines()[2:]
        return proc, ran, table

    def random_suite(self, rng, weights):
        outcomes = {}
        for arch in ARCHS:
            for cls in CLASSES:
                outcomes[f"{arch}::{cls}"] = rng.choices(list(weights), weights=list(weights.values()))[0]
        return outcomes

    def check(self, outcomes, archs, filt):
        proc, ran, table = self.run_suite(outcomes, archs, filt)
        chosen = [t for t in outcomes if t.split("::")[0] in archs and filt in t]
        self.assertEqual([r[0] for r in ran], chosen, "each chosen trial once, in the binary's order")
        for trial, arch, kernels in ran:
            self.assertEqual(arch, trial.split("::")[0])
            self.assertEqual(kernels, "ck" if "::ck_" in trial else "triton")
        self.assertEqual(len(table), len(chosen))
        expected_result = {"pass": "ran, matched", "skip": "skipped: no kernels", "fail": "failed (exit 101)",
                           "crash": "crashed (signal 11)"}
        for row, trial in zip(table, chosen):
            self.assertTrue(row.startswith(f"| {trial} | {expected_result[outcomes[trial]]}"), row)
        bad = [t for t in chosen if outcomes[t] in ("fail", "crash")]
        self.assertEqual(proc.returncode, 1 if bad or not chosen else 0, proc.stderr)
        return bad

    def test_exit_status_follows_the_trials(self):
        seed = int(os.environ.get("FLASH_ATTN_TEST_SEED", random.randrange(1 << 32)))
        print(f"seed {seed}", file=sys.stderr)
        rng = random.Random(seed)
        seen_bad = seen_good = 0
        for _ in range(12):
            outcomes = self.random_suite(rng, {"pass": 6, "skip": 1, "fail": 1, "crash": 1})
            archs = rng.sample(ARCHS, rng.randint(1, len(ARCHS)))
            filt = rng.choice(["", "split", "ck_", "paged"])
            if self.check(outcomes, archs, filt):
                seen_bad += 1
            else:
                seen_good += 1
        # Both kinds of run, whatever the draws: one all-pass suite and one with a single failure.
        all_pass = {t: "pass" for t in self.random_suite(rng, {"pass": 1})}
        self.assertEqual(self.check(all_pass, ARCHS, ""), [])
        one_fail = dict(all_pass)
        one_fail[rng.choice(list(one_fail))] = rng.choice(["fail", "crash"])
        self.assertEqual(len(self.check(one_fail, ARCHS, "")), 1)

    def test_no_matching_trial_fails(self):
        outcomes = {t: "pass" for t in self.random_suite(random.Random(0), {"pass": 1})}
        proc, ran, table = self.run_suite(outcomes, ["gfx1030"])
        self.assertEqual((proc.returncode, ran, table), (1, [], []))
        self.assertIn("no trial", proc.stderr)
        proc, ran, _ = self.run_suite(outcomes, ARCHS, "no_such_class")
        self.assertEqual((proc.returncode, ran), (1, []))


if __name__ == "__main__":
    unittest.main()
