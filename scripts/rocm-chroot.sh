#!/usr/bin/env bash
# A Debian sid chroot with Debian's ROCm (HIP 6.4, LLVM 21) for building and inspecting the
# `rocm` feature on machines without ROCm. Cached outside the repository.
#
#   scripts/rocm-chroot.sh create          make the chroot, or reuse it when already complete
#   scripts/rocm-chroot.sh run -- CMD...   run CMD inside, with the repo, ~/.cargo, ~/.rustup and
#                                          FLASH_ATTN_ROCM_CHROOT_BINDS (colon-separated dirs)
#                                          bind-mounted at their host paths, cwd kept
#   scripts/rocm-chroot.sh path            print the chroot directory
#
# FLASH_ATTN_ROCM_CHROOT overrides the location. Needs root (debootstrap, mount, chroot).
set -euo pipefail

CHROOT_DIR="${FLASH_ATTN_ROCM_CHROOT:-$HOME/.cache/flash-attn-rocm/chroot-sid}"
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# What debootstrap installs: the HIP compiler and runtime, device libraries and build tools.
BOOTSTRAP_PACKAGES="hipcc,libamdhip64-dev,rocm-device-libs-21,cmake,python3,make,ninja-build"
# Installed afterwards: TLS roots, pip and venv (the build creates a venv for its pinned triton
# and installs it from pip's index), a C/C++ toolchain for rustc's linker and libstdc++, and
# LLVM 21's tools to inspect code objects (llvm-objcopy/readelf/objdump in llvm-21,
# clang-offload-bundler in clang-tools-21).
EXTRA_PACKAGES="ca-certificates python3-pip python3-venv g++ llvm-21 clang-tools-21"
# Written last; its content records the package set, so a changed list re-runs the install.
MARKER="$CHROOT_DIR/.flash-attn-rocm-chroot-complete"
MARKER_CONTENT="$BOOTSTRAP_PACKAGES $EXTRA_PACKAGES"
BOOTSTRAP_MARKER="$CHROOT_DIR/.flash-attn-rocm-debootstrap-done"

log() { echo "rocm-chroot: $*" >&2; }

need_root() {
    if [ "$(id -u)" != 0 ]; then
        log "must run as root (debootstrap, mount and chroot need it)"
        exit 1
    fi
}

ensure_debootstrap() {
    command -v debootstrap >/dev/null && return
    log "installing debootstrap on the host"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}

# DNS inside the chroot follows the host's, refreshed on every entry.
copy_host_network_files() {
    cp -L /etc/resolv.conf "$CHROOT_DIR/etc/resolv.conf" 2>/dev/null || true
    cp -L /etc/hosts "$CHROOT_DIR/etc/hosts" 2>/dev/null || true
}

# Local CAs the host trusts (a TLS-intercepting proxy, for one) must be trusted inside too, or
# downloads from the build (the CK sdist) fail certificate checks. Re-synced on every entry.
sync_host_ca_certificates() {
    local src=/usr/local/share/ca-certificates dst="$CHROOT_DIR/usr/local/share/ca-certificates"
    [ -d "$src" ] && [ -x "$CHROOT_DIR/usr/sbin/update-ca-certificates" ] || return 0
    diff -rq "$src" "$dst" >/dev/null 2>&1 && return 0
    rm -rf "$dst"
    cp -rL "$src" "$dst"
    chroot "$CHROOT_DIR" update-ca-certificates >/dev/null 2>&1 ||
        log "warning: update-ca-certificates failed inside the chroot"
}

is_complete() {
    [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$MARKER_CONTENT" ]
}

create() {
    need_root
    if is_complete; then
        log "reusing $CHROOT_DIR"
        return
    fi
    local start=$SECONDS
    ensure_debootstrap
    if [ ! -f "$BOOTSTRAP_MARKER" ]; then
        # A half-made directory from an interrupted run cannot be resumed by debootstrap.
        rm -rf "$CHROOT_DIR"
        mkdir -p "$(dirname "$CHROOT_DIR")"
        log "debootstrap sid into $CHROOT_DIR"
        debootstrap --variant=minbase --include="$BOOTSTRAP_PACKAGES" sid "$CHROOT_DIR" \
            >"$CHROOT_DIR.debootstrap.log" 2>&1 || {
            tail -30 "$CHROOT_DIR.debootstrap.log" >&2
            log "debootstrap failed (full log: $CHROOT_DIR.debootstrap.log)"
            exit 1
        }
        touch "$BOOTSTRAP_MARKER"
    fi
    log "installing $EXTRA_PACKAGES"
    # The mirror reachable here may serve a frozen sid whose Release file is past Valid-Until.
    local apt="apt-get -o Acquire::Check-Valid-Until=false"
    run_inside sh -c "$apt update -qq && DEBIAN_FRONTEND=noninteractive \
        $apt install -y -qq --no-install-recommends $EXTRA_PACKAGES >/dev/null && apt-get clean"
    echo "$MARKER_CONTENT" >"$MARKER"
    log "chroot ready in $((SECONDS - start)) s"
}

# Mounts live in a private mount namespace: they vanish when the command ends, even on a kill,
# and concurrent runs never unmount each other's /proc. The trap unmounts in order on a normal exit.
run_inside() {
    copy_host_network_files
    sync_host_ca_certificates
    local binds=("$REPO_DIR")
    local dir
    # FLASH_ATTN_ROCM_CHROOT_BINDS: more host directories to bind, colon-separated.
    local extra=()
    IFS=: read -r -a extra <<<"${FLASH_ATTN_ROCM_CHROOT_BINDS:-}"
    for dir in "$HOME/.cargo" "$HOME/.rustup" "${extra[@]}"; do
        [ -d "$dir" ] && binds+=("$dir")
    done
    unshare --mount --propagation private -- bash -euo pipefail -c "$INNER_SCRIPT" inner \
        "$CHROOT_DIR" "$PWD" "$HOME" "${#binds[@]}" "${binds[@]}" "$@"
}

# Runs in the private namespace: $1 chroot, $2 cwd, $3 home, $4 count of bind dirs, the dirs, CMD.
INNER_SCRIPT=$(cat <<'INNER'
root="$1"; cwd="$2"; home="$3"; nbinds="$4"; shift 4
binds=("${@:1:$nbinds}"); shift "$nbinds"
mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -l "${mounted[$i]}" 2>/dev/null || true
    done
}
trap cleanup EXIT
mount -t proc proc "$root/proc"; mounted+=("$root/proc")
mount --rbind /dev "$root/dev"; mounted+=("$root/dev")
mount --rbind /sys "$root/sys"; mounted+=("$root/sys")
for dir in "${binds[@]}"; do
    mkdir -p "$root$dir"
    mount --bind "$dir" "$root$dir"; mounted+=("$root$dir")
done
# The host PATH may name tools (pyenv shims...) absent inside; keep cargo's bin first.
export PATH="$home/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export HOME="$home"
case "$cwd" in
    "${binds[0]}"*) workdir="$cwd" ;;
    *) workdir="${binds[0]}" ;;
esac
status=0
chroot "$root" /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$workdir" "$@" || status=$?
exit "$status"
INNER
)

run() {
    need_root
    if ! is_complete; then
        log "chroot missing or incomplete at $CHROOT_DIR: run '$0 create' first"
        exit 1
    fi
    [ "${1:-}" = "--" ] && shift
    if [ $# -eq 0 ]; then
        log "usage: $0 run -- CMD..."
        exit 2
    fi
    run_inside "$@"
}

case "${1:-}" in
    create) create ;;
    run) shift; run "$@" ;;
    path) echo "$CHROOT_DIR" ;;
    *)
        echo "usage: $0 create | run -- CMD... | path" >&2
        exit 2
        ;;
esac
