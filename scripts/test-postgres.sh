#!/usr/bin/env bash
# A throwaway PostgreSQL + pgvector for tests, CI and benchmarks on this team's Debian machines.
#
#   scripts/test-postgres.sh install   install pgvector for the local PostgreSQL server (idempotent)
#   scripts/test-postgres.sh start     install, start a private cluster, print `export PGMEM_TEST_DSN=...`
#   scripts/test-postgres.sh stop      stop the private cluster
#
# Debian 12 has no pgvector package: build 0.8.0 from Debian 13's signed source package, with
# the server headers pinned to the installed server version (an unpinned install upgrades the
# server). Debian 13 installs its packaged postgresql-NN-pgvector instead.
# Settings: PGMEM_PG_DIR (cluster directory, default /tmp/pgmem-test-pg), PGMEM_PG_PORT (54329).
set -euo pipefail

PG_DIR=${PGMEM_PG_DIR:-/tmp/pgmem-test-pg}
PG_PORT=${PGMEM_PG_PORT:-54329}
PGVECTOR_VERSION=0.8.0

log() { printf 'test-postgres: %s\n' "$*" >&2; }

pg_major() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1) \
    || { log "no PostgreSQL server binaries under /usr/lib/postgresql"; exit 1; }
  [ -n "$bin" ] || { log "no PostgreSQL server binaries under /usr/lib/postgresql (apt-get install postgresql)"; exit 1; }
  basename "$(dirname "$bin")"
}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() { as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2; }

install_pgvector() {
  local major codename
  major=$(pg_major)
  if [ -f "/usr/share/postgresql/$major/extension/vector.control" ]; then
    log "pgvector already installed for PostgreSQL $major"
    return
  fi
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  if [ "$codename" != bookworm ]; then
    as_root apt-get update -qq >&2
    apt_install "postgresql-$major-pgvector"
    return
  fi
  build_pgvector_from_trixie_source "$major"
}

build_pgvector_from_trixie_source() {
  local major=$1 work server_version apt_opts
  work=$(mktemp -d)
  chmod 755 "$work"  # apt downloads as _apt where it can
  server_version=$(dpkg-query -W -f='${Version}' "postgresql-$major")
  log "building pgvector $PGVECTOR_VERSION for PostgreSQL $major ($server_version) from Debian 13 sources"
  as_root apt-get update -qq >&2
  apt_install --no-upgrade build-essential dpkg-dev
  apt_install "postgresql-server-dev-$major=$server_version"

  # A private apt configuration: trixie's source index only, signatures checked by the
  # system keyring, nothing added to the machine's own sources.
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
  echo "deb-src http://deb.debian.org/debian trixie main" > "$work/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache")
  apt-get "${apt_opts[@]}" update -qq >&2
  (cd "$work/src" && apt-get "${apt_opts[@]}" source -q pgvector >&2)
  [ -d "$work/src/pgvector-$PGVECTOR_VERSION" ] \
    || { log "Debian 13 no longer has pgvector $PGVECTOR_VERSION: $(ls "$work/src")"; exit 1; }
  make -C "$work/src/pgvector-$PGVECTOR_VERSION" -s -j"$(nproc)" \
    PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" >&2
  as_root make -C "$work/src/pgvector-$PGVECTOR_VERSION" -s install \
    PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" >&2
  rm -rf "$work"
}

run_as_postgres() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

start_cluster() {
  local major bin
  major=$(pg_major)
  bin="/usr/lib/postgresql/$major/bin"
  if [ -f "$PG_DIR/data/postmaster.pid" ] && run_as_postgres "$bin/pg_ctl" -D "$PG_DIR/data" status >/dev/null 2>&1; then
    log "cluster already running in $PG_DIR"
  else
    rm -rf "$PG_DIR"
    mkdir -p "$PG_DIR"
    [ "$(id -u)" = 0 ] && chown postgres: "$PG_DIR"
    run_as_postgres "$bin/initdb" -D "$PG_DIR/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    cat >> "$PG_DIR/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_DIR'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
shared_buffers = 512MB
maintenance_work_mem = 512MB
# tests/replica_support.py streams a replica from this server (pg_basebackup -R; initdb's
# pg_hba.conf trusts replication connections from 127.0.0.1). These are PostgreSQL's defaults,
# written out so that a changed default cannot turn the read replica tests off.
wal_level = replica
max_wal_senders = 10
CONF
    run_as_postgres "$bin/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w start >/dev/null
  fi
  echo "export PGMEM_TEST_DSN='postgresql://postgres@127.0.0.1:$PG_PORT/postgres'"
}

stop_cluster() {
  local major
  major=$(pg_major)
  if [ -d "$PG_DIR/data" ]; then
    run_as_postgres "/usr/lib/postgresql/$major/bin/pg_ctl" -D "$PG_DIR/data" -m fast stop >/dev/null 2>&1 || true
    log "stopped the cluster in $PG_DIR"
  fi
}

case "${1:-}" in
  install) install_pgvector ;;
  start) install_pgvector; start_cluster ;;
  stop) stop_cluster ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
