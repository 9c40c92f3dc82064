#!/bin/sh
# npm test's pretest step (and .ci/run's): the two programs the tests drive that npm cannot
# install (three with --compat, below). test/pgbouncer.test.ts runs picket through a real
# PgBouncer; test/dashboard.test.ts drives the dashboard in a real headless Chromium. Nothing
# happens when they are there; otherwise the missing ones are installed with apt-get when that is
# possible (root, or passwordless sudo), else this fails saying what to run. The tests start
# PgBouncer themselves, on ports and config of their own: a pgbouncer service the package may
# start (port 6432) is neither used nor needed.
#
# With --compat it also wants Debian's postgresql-15 package, the second server version that
# scripts/compat-postgres15.sh (npm run test:compat) runs a subset of the suite against; plain
# npm test does not need it. That script starts its own server from /usr/lib/postgresql/15/bin,
# in a folder and on a port of its own: the cluster the package may create (15/main, port 5432)
# is neither used nor needed.
set -eu

PG15_BIN=/usr/lib/postgresql/15/bin
compat=false
case "${1:-}" in
  "") ;;
  --compat) compat=true ;;
  *) echo "scripts/ensure-test-tools.sh: unknown argument \"$1\" (the only one is --compat)." >&2; exit 2 ;;
esac

has_pgbouncer() { command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; }
has_chromium() { [ -n "${CHROMIUM_PATH:-}" ] || command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; }
has_postgresql_15() { [ -x "$PG15_BIN/postgres" ] && [ -x "$PG15_BIN/initdb" ] && [ -x "$PG15_BIN/pg_ctl" ]; }

missing=""
has_pgbouncer || missing="$missing pgbouncer"
has_chromium || missing="$missing chromium"
if $compat; then has_postgresql_15 || missing="$missing postgresql-15"; fi
[ -z "$missing" ] && exit 0

fail() {
  echo "picket tests: not installed:$missing, and $1." >&2
  echo "  Install them, then run the tests again: apt-get install -y$missing (Debian/Ubuntu, as root or with sudo)," >&2
  echo "  or your platform's packages (e.g. brew install pgbouncer) on PATH; CHROMIUM_PATH may name a Chromium or Chrome binary." >&2
  case "$missing" in *postgresql-15*)
    echo "  postgresql-15 is Debian bookworm's package (on other releases, apt.postgresql.org has it); npm run test:compat runs $PG15_BIN/postgres." >&2 ;;
  esac
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
if $compat; then has_postgresql_15 || fail "apt-get installed a package without $PG15_BIN/postgres, initdb and pg_ctl"; fi
