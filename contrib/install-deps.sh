#!/usr/bin/env bash
# Installs the Debian packages compass builds with, plus any packages named
# as arguments (the other install scripts call it that way). Idempotent: does
# nothing when everything is present. Needs root on Debian 12.
set -euo pipefail

PKGS=(build-essential pkg-config ca-certificates fonts-dejavu-core "$@")

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $EUID -ne 0 ]]; then
        echo "install-deps: need root to install: ${missing[*]}" >&2
        exit 1
    fi
    echo "install-deps: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    for c in "$HOME/.cargo/bin/cargo" /root/.cargo/bin/cargo /usr/local/cargo/bin/cargo; do
        [[ -x $c ]] && { echo "install-deps: cargo found at $c; add $(dirname "$c") to PATH" >&2; break; }
    done
    echo "install-deps: a Rust toolchain (cargo, rustc >= 1.88) is required; Debian 12's rustc is too old" >&2
    exit 1
fi
