#!/usr/bin/env bash
# Runs the emulator suite's trials (scripts/hip-emu-tests.sh builds the binary and the stand-in):
# every `arch::class` trial of the amd_emulator test binary BIN whose arch is in ARCHS (comma
# separated) and whose name contains FILTER, each in its own process with `HIP_STANDIN_DEVICES` =
# its arch (an emulated access that faults kills its process; the others still run). Writes one
# log per trial and the table (OUT/table.md), and prints the table.
#
#   scripts/hip-emu-trials.sh BIN OUT ARCHS [FILTER]
#
# Exits 1 when a trial failed or crashed, or when no trial matched ARCHS and FILTER; skipped
# trials (a class the build has no kernels for) are listed with their reason and do not fail.
set -u
bin=$1 out=$2 archs=$3 filter=${4:-}
mkdir -p "$out"
printf '| trial | result | seconds | variants launched |\n|---|---|---|---|\n' >"$out/table.md"
matched=0 bad=0
for trial in $("$bin" --list 2>/dev/null | sed -n 's/: test$//p'); do
  arch=${trial%%::*}
  case ",$archs," in *",$arch,"*) ;; *) continue ;; esac
  [ -n "$filter" ] && case "$trial" in *$filter*) ;; *) continue ;; esac
  matched=$((matched + 1))
  log="$out/${trial//::/.}.log"
  t0=$(date +%s)
  case "$trial" in *::ck_*) kernels=ck ;; *) kernels=triton ;; esac
  HIP_STANDIN_DEVICES=$arch FLASH_ATTN_ROCM_KERNELS=$kernels "$bin" --exact "$trial" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  # libtest's summary line of a run of one test.
  if [ $rc -eq 0 ] && grep -q '^test result: ok\. 1 passed' "$log"; then result="ran, matched"
  elif [ $rc -eq 0 ] && grep -q '^test result: ok\. 0 passed; 0 failed; 1 ignored' "$log"; then
    result="skipped: $(grep -o -m1 "$trial: skipped: .*\|^$arch: skipped: .*" "$log" | head -1 | sed 's/.*skipped: //')"
  elif [ $rc -gt 128 ]; then
    bad=$((bad + 1))
    result="crashed (signal $((rc - 128))); last call that matched: $(grep -o 'emu-diff.*' "$log" | tail -1 | sed 's/.*lse [^ ]* //')"
  else
    bad=$((bad + 1))
    result="failed (exit $rc): $(grep -m1 -A1 'panicked at' "$log" | tail -1 | cut -c1-180)"
  fi
  variants=$(grep -ho 'emu-launched [^:]*: .*' "$log" | sed 's/^emu-launched [^:]*: //')
  printf '| %s | %s | %s | %s |\n' "$trial" "$result" "$secs" "$variants" | tee -a "$out/table.md"
done
if [ $matched -eq 0 ]; then
  echo "hip-emu-trials: no trial of $bin matches archs '$archs' and filter '$filter'" >&2
  exit 1
fi
if [ $bad -gt 0 ]; then
  echo "hip-emu-trials: $bad of $matched trials failed or crashed (logs in $out)" >&2
  exit 1
fi
