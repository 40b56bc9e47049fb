#!/usr/bin/env bash
# Debian packages the budget service builds and tests with. Idempotent.
#   munge, libmunge-dev: MUNGE credentials (the CLI encodes, the service
#     decodes); the tests start their own munged on a private socket, so no
#     system munged needs to run.
#   chromium: the dashboard test loads the page in headless Chromium.
#   util-linux: `setpriv`, used to mint a credential as user `nobody`.
# SQLite is compiled in (rusqlite `bundled`), so no libsqlite3-dev is needed.
set -euo pipefail

exec "$(dirname "$0")/install-deps.sh" munge libmunge-dev chromium util-linux
