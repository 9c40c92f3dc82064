#!/bin/sh
# npm test's pretest step (and .ci/run's): the two programs the tests drive that npm cannot
# install. test/pgbouncer.test.ts runs picket through a real PgBouncer; test/dashboard.test.ts
# drives the dashboard in a real headless Chromium. Nothing happens when both are there;
# otherwise the missing ones are installed with apt-get when that is possible (root, or
# passwordless sudo), else this fails saying what to run. The tests start PgBouncer themselves, on
# ports and config of their own: a pgbouncer service the package may start (port 6432) is neither
# used nor needed.
set -eu

has_pgbouncer() { command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; }
has_chromium() { [ -n "${CHROMIUM_PATH:-}" ] || command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; }

missing=""
has_pgbouncer || missing="$missing pgbouncer"
has_chromium || missing="$missing chromium"
[ -z "$missing" ] && exit 0

fail() {
  echo "picket tests: not installed:$missing, and $1." >&2
  echo "  Install them, then run the tests again: apt-get install -y$missing (Debian/Ubuntu, as root or with sudo)," >&2
  echo "  or your platform's packages (e.g. brew install pgbouncer) on PATH; CHROMIUM_PATH may name a Chromium or Chrome binary." >&2
  exit 1
}

command -v apt-get >/dev/null 2>&1 || fail "there is no apt-get here to install them with"
if [ "$(id -u)" -eq 0 ]; then
  as_root=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  as_root="sudo -n"
else
  fail "installing them needs root (this user is not root and has no passwordless sudo)"
fi

echo "picket tests: installing$missing (apt-get install -y$missing)..." >&2
$as_root apt-get update -q >&2 || fail "apt-get update failed"
# shellcheck disable=SC2086
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >&2 || fail "apt-get install -y$missing failed"
has_pgbouncer || fail "apt-get installed a package without /usr/sbin/pgbouncer"
has_chromium || fail "apt-get installed a package without /usr/bin/chromium"
