#!/usr/bin/env bash
# Debian packages the budget service builds and tests with. Idempotent.
#   munge, libmunge-dev: MUNGE credentials (the CLI encodes, the service
#     decodes); the tests start their own munged on a private socket, so no
#     system munged needs to run.
#   chromium: the dashboard test loads the page in headless Chromium.
#   util-linux: `setpriv`, used to mint a credential as user `nobody`.
# SQLite is compiled in (rusqlite `bundled`), so no libsqlite3-dev is needed.
set -euo pipefail

PKGS=(munge libmunge-dev chromium util-linux)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $EUID -ne 0 ]]; then
        echo "install-budget-deps: need root to install: ${missing[*]}" >&2
        exit 1
    fi
    echo "install-budget-deps: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
