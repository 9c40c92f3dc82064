#!/bin/sh
# npm run test:compat (and .ci/run, after npm test): the compatibility subset of the suite
# against a second server version, Debian's PostgreSQL 15, beside the embedded 18 that npm test
# uses. It proves DATABASE_URL can point the suite at a server it did not start, with the kind
# of URL such a server is often reached by: a superuser without a password, loopback trusted.
#
# The subset is what depends most on the server: migrations, claiming (SKIP LOCKED, the claim's
# CTEs), fenced writes, the sweep, flows (their trigger, its plans), workflows (the apply, the hold, their trigger), and picket through PgBouncer (whose support must log in to a
# server that asks for no password). Extra arguments go to vitest (e.g. a reporter).
#
# The server is throwaway: its own temporary folder, trust authentication, listening on 127.0.0.1
# only, on a free port, no Unix socket, durability off. PostgreSQL refuses to run as root, so as
# root it runs as the `postgres` user. It is stopped by its pid, and its folder removed, however
# this script ends (tests failed, interrupted, or the server did not start).
set -eu
cd "$(dirname "$0")/.."

FILES="test/migrate.test.ts test/claim.test.ts test/fence.test.ts test/sweep.test.ts test/pgbouncer.test.ts test/faults-scheduling.test.ts test/flows.test.ts test/workflows.test.ts"
BIN=/usr/lib/postgresql/15/bin
RUN_AS=postgres

say() { echo "picket compat: $*" >&2; }
fail() { say "$*"; exit 1; }

# Installs PgBouncer and postgresql-15 when missing, as npm test's pretest step does for the rest.
sh scripts/ensure-test-tools.sh --compat

dir=$(mktemp -d "${TMPDIR:-/tmp}/picket-pg15-XXXXXX")
pid=""

stop_server() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    # SIGINT is PostgreSQL's fast shutdown: sessions are ended, nothing waits for clients.
    kill -INT "$pid" 2>/dev/null || true
    waited=0
    while kill -0 "$pid" 2>/dev/null; do
      if [ "$waited" -ge 300 ]; then
        say "PostgreSQL 15 (pid $pid) did not stop within 30 s of SIGINT: killing it."
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.1
      waited=$((waited + 1))
    done
  fi
  rm -rf "$dir"
}
trap stop_server EXIT
# An interrupt still goes through the EXIT trap (a plain signal death would skip it).
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$(id -u)" -eq 0 ]; then
  id "$RUN_AS" >/dev/null 2>&1 || fail "running as root, PostgreSQL must run as another user, and there is no \"$RUN_AS\" user (useradd $RUN_AS)."
  chown "$RUN_AS" "$dir"
  as_server() { runuser -u "$RUN_AS" -- "$@"; }
else
  as_server() { "$@"; }
fi

as_server "$BIN/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 ||
  fail "initdb failed. Its output:
$(cat "$dir/initdb.log")"
# Appended as whoever runs this: the file keeps its owner, the server's user.
cat >>"$dir/data/postgresql.conf" <<'EOF'
# picket compat: trust on loopback only, no socket, as many connections as the embedded server.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 300
# Throwaway data: the tests never survive a server crash.
fsync = off
synchronous_commit = off
full_page_writes = off
EOF

# A port found free may be taken before the server binds it: then it exits, and another is tried.
attempt=1
while :; do
  port=$(node -e 'const s = require("node:net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')
  : >"$dir/server.log"
  [ "$(id -u)" -eq 0 ] && chown "$RUN_AS" "$dir/server.log"
  started=true
  as_server "$BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "-p $port" -w -t 60 start >/dev/null 2>&1 || started=false
  # Whatever pg_ctl said, a server that wrote its pid is stopped by it at exit.
  [ -f "$dir/data/postmaster.pid" ] && pid=$(head -n 1 "$dir/data/postmaster.pid")
  $started && break
  if [ "$attempt" -lt 3 ] && grep -qi "address already in use" "$dir/server.log"; then
    attempt=$((attempt + 1))
    continue
  fi
  fail "PostgreSQL 15 did not start on 127.0.0.1:$port. Its log:
$(cat "$dir/server.log")"
done

say "$("$BIN/postgres" --version) on 127.0.0.1:$port (pid $pid), trust on loopback; running $FILES"
status=0
# shellcheck disable=SC2086
DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres" node_modules/.bin/vitest run $FILES "$@" || status=$?
[ "$status" -eq 0 ] || say "the compatibility subset failed against PostgreSQL 15 (vitest exited with $status)."
exit "$status"
