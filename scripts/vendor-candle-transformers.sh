#!/usr/bin/env bash
# Writes candle-transformers 0.11.1 to DIR (default: vendor/candle-transformers) with two edits,
# for a `[patch.crates-io]` entry of a crate that uses its models with our kernels:
#   1. its `flash-attn` feature without "cuda" (upstream it turns candle's CUDA on, which needs
#      nvcc to build whatever candle-flash-attn is patched to);
#   2. its requirements on candle-core, candle-nn and candle-flash-attn at "0.11" instead of
#      "0.11.1", which candle PR #3801 (the ROCm device, versioned 0.11.0) meets.
# Nothing else changes. The crate comes from cargo's registry (`cargo fetch`).
#
#   scripts/vendor-candle-transformers.sh [DIR]
set -euo pipefail
dest=${1:-vendor/candle-transformers}
version=0.11.1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src"
touch "$tmp/src/lib.rs"
cat >"$tmp/Cargo.toml" <<EOF
[package]
name = "fetch-candle-transformers"
version = "0.0.0"
edition = "2021"

[dependencies]
candle-transformers = "=$version"

[workspace]
EOF
cargo fetch --quiet --manifest-path "$tmp/Cargo.toml"
manifest=$(cargo metadata --format-version 1 --manifest-path "$tmp/Cargo.toml" | python3 -c '
import json, sys
print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "candle-transformers"))')

rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
cp -r "$(dirname "$manifest")" "$dest"
chmod -R u+w "$dest"
toml="$dest/Cargo.toml"
sed -i '/^flash-attn = \[/,/^\]/{/"cuda",/d}' "$toml"
sed -i '/^\[dependencies\.candle/,/^$/s/^version = "0\.11\.1"$/version = "0.11"/' "$toml"

# Both edits must have happened: cargo's normalized manifest could change its layout.
if sed -n '/^flash-attn = \[/,/^\]/p' "$toml" | grep -q '"cuda"'; then
  echo "vendor-candle-transformers: $toml: the flash-attn feature still turns on cuda" >&2
  exit 1
fi
relaxed=$(sed -n '/^\[dependencies\.candle/,/^$/p' "$toml" | grep -c '^version = "0.11"$' || true)
if [ "$relaxed" != 3 ]; then
  echo "vendor-candle-transformers: $toml: $relaxed of 3 candle requirements relaxed to \"0.11\"" >&2
  exit 1
fi
echo "vendor-candle-transformers: candle-transformers $version in $dest (flash-attn without cuda; candle-core, candle-nn, candle-flash-attn at \"0.11\")"
