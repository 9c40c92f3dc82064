#!/bin/sh
# npm test's pretest step (and .ci/run's): test/pgbouncer.test.ts runs picket through a real
# PgBouncer, which npm cannot install. Nothing happens when PgBouncer is already there; otherwise it
# is installed with apt-get when that is possible (root, or passwordless sudo), else this fails
# saying what to run. The tests start PgBouncer themselves, on ports and config of their own: a
# pgbouncer service the package may start (port 6432) is neither used nor needed.
set -eu

if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
  exit 0
fi

fail() {
  echo "picket tests: PgBouncer is not installed, and $1." >&2
  echo "  Install it, then run the tests again: apt-get install -y pgbouncer (Debian/Ubuntu, as root or with sudo)," >&2
  echo "  or your platform's package (e.g. brew install pgbouncer) with pgbouncer on PATH." >&2
  exit 1
}

command -v apt-get >/dev/null 2>&1 || fail "there is no apt-get here to install it with"
if [ "$(id -u)" -eq 0 ]; then
  as_root=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  as_root="sudo -n"
else
  fail "installing it needs root (this user is not root and has no passwordless sudo)"
fi

echo "picket tests: installing PgBouncer (apt-get install -y pgbouncer)..." >&2
$as_root apt-get update -q >&2 || fail "apt-get update failed"
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >&2 || fail "apt-get install -y pgbouncer failed"
if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
  exit 0
fi
fail "apt-get installed a package without /usr/sbin/pgbouncer"
