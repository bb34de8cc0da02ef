#!/usr/bin/env bash
# Runs our AMD code objects on tinygrad's AMD ISA emulator through the crate's launch path
# (tests/amd_emulator/, docs/testing.md): first the instruction checks of our emulator
# corrections, then every arch x kernel class trial, each in its own process (an emulated
# access that faults kills the process; the other trials still run), and prints the table.
#
#   FLASH_ATTN_ROCM_TINYGRAD=/path/to/tinygrad scripts/amd-emulator-tests.sh [archs] [class filter]
#
# archs: comma-separated (default gfx942,gfx1100,gfx1201); they are built with every head-dim
# tile and both dtypes (FLASH_ATTN_ROCM_ARCHS and friends; the Triton build is cached).
# Logs: $OUT (default target/amd-emulator), one per trial.
set -u
: "${FLASH_ATTN_ROCM_TINYGRAD:?set FLASH_ATTN_ROCM_TINYGRAD to a tinygrad checkout}"
archs=${1:-gfx942,gfx1100,gfx1201}
filter=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/target/amd-emulator}
mkdir -p "$out"
export FLASH_ATTN_ROCM_ARCHS=$archs
export FLASH_ATTN_ROCM_TRITON_DIMS=${FLASH_ATTN_ROCM_TRITON_DIMS:-32,64,128,256}
export FLASH_ATTN_ROCM_DTYPES=${FLASH_ATTN_ROCM_DTYPES:-fp16,bf16}
cd "$root" || exit 1
started=$(date +%s)

echo "== instruction checks of the emulator corrections"
python3 tools/amd_emulator/checks.py | tee "$out/checks.log"

echo "== building (cargo test --features amd-emulator --test amd_emulator --no-run)"
cargo test --features amd-emulator --test amd_emulator --no-run >"$out/build.log" 2>&1 || {
  tail -30 "$out/build.log"; exit 1; }
bin=$(cargo test --features amd-emulator --test amd_emulator --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "amd_emulator" and m.get("executable"): print(m["executable"])')

echo "== trials (one process each)"
printf '| trial | result | seconds | variants launched |\n|---|---|---|---|\n' >"$out/table.md"
for trial in $("$bin" --list 2>/dev/null | sed -n 's/: test$//p'); do
  arch=${trial%%::*}
  case ",$archs," in *",$arch,"*) ;; *) continue ;; esac
  [ -n "$filter" ] && case "$trial" in *$filter*) ;; *) continue ;; esac
  log="$out/${trial//::/.}.log"
  t0=$(date +%s)
  "$bin" --exact "$trial" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  if grep -q "1 passed" "$log"; then result="ran, matched"
  elif grep -q "1 ignored" "$log"; then result="skipped: $(grep -m1 "^$arch: skipped:" "$log" | sed 's/.*skipped: //')"
  elif [ $rc -gt 128 ]; then result="crashed (signal $((rc - 128))); last call that matched: $(grep -o 'emu-diff.*' "$log" | tail -1 | sed 's/.*lse [^ ]* //')"
  else result="failed: $(grep -m1 -A1 'panicked at' "$log" | tail -1 | cut -c1-180)"
  fi
  variants=$(grep -ho 'emu-launched [^:]*: .*' "$log" | sed 's/^emu-launched [^:]*: //')
  printf '| %s | %s | %s | %s |\n' "$trial" "$result" "$secs" "$variants" | tee -a "$out/table.md"
done
echo "== done in $(( $(date +%s) - started )) s; table: $out/table.md; tinygrad $(git -C "$FLASH_ATTN_ROCM_TINYGRAD" rev-parse HEAD 2>/dev/null || cat "$FLASH_ATTN_ROCM_TINYGRAD/SNAPSHOT" 2>/dev/null || echo "(unknown snapshot)")"
