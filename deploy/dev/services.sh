#!/usr/bin/env bash
# Idempotent install + start of ZooKeeper, MariaDB, PostgreSQL and etcd on loopback,
# without systemd or docker (Debian 12, run as root). Connection details for
# tests live in deploy/dev/env.sh, the one place they are defined.
#   deploy/dev/services.sh [start|stop|status]      (default: start)
#   deploy/dev/services.sh [start-etcd|stop-etcd]   (etcd alone)
# Env: SVC_DIR (state dir, default /tmp/ds-services), SVC_TIMEOUT (s, default 60),
#      ZK_PORT=2181 MY_PORT=3306 PG_PORT=5432 ETCD_PORT=2379 (peer port ETCD_PORT+1)
# Result: ZooKeeper 127.0.0.1:$ZK_PORT
#         mysql://ds:ds@127.0.0.1:$MY_PORT/ds
#         postgres://postgres:postgres@127.0.0.1:$PG_PORT/ds
#         etcd http://127.0.0.1:$ETCD_PORT (v3 API)
# Also installs protobuf-compiler and libprotobuf-dev: the etcd-client crate's build
# runs protoc on etcd's protos, which import google/protobuf/descriptor.proto.
set -euo pipefail

SVC_DIR=${SVC_DIR:-/var/tmp/ds-reaper-services}
TIMEOUT=${SVC_TIMEOUT:-60}
ZK_PORT=${ZK_PORT:-2181}
MY_PORT=${MY_PORT:-3306}
PG_PORT=${PG_PORT:-5432}
ETCD_PORT=${ETCD_PORT:-2379}
ZK_DIR=$SVC_DIR/zookeeper
MY_DIR=$SVC_DIR/mariadb
PG_DIR=$SVC_DIR/postgres
ETCD_DIR=$SVC_DIR/etcd
MY_SOCK=$MY_DIR/mysqld.sock

log() { echo "[services] $*" >&2; }
die() { echo "[services] ERROR: $*" >&2; exit 1; }

# wait_for NAME PID CMD...: poll CMD every 0.2 s until it succeeds, PID dies
# (PID "-" = don't check) or $TIMEOUT passes
wait_for() {
  local name=$1 pid=$2; shift 2
  local t0=$SECONDS ms0; ms0=$(date +%s%3N)
  until "$@" >/dev/null 2>&1; do
    if [[ $pid != - ]] && ! kill -0 "$pid" 2>/dev/null; then log "$name process $pid exited"; return 1; fi
    (( SECONDS - t0 >= TIMEOUT )) && return 1
    sleep 0.2
  done
  log "$name ready after $(( $(date +%s%3N) - ms0 )) ms"
}

# ---------------------------------------------------------------- install
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1; }

install_missing() {
  local pkgs=()
  [[ -f /usr/share/java/zookeeper.jar ]] || pkgs+=(zookeeper)
  # the real-DS tier (tests/real-ds): DS's servers on a JDK 17, their jars resolved with Maven,
  # DS's SQL and yaml read out of its -sources jars with unzip
  command -v java >/dev/null || pkgs+=(openjdk-17-jdk-headless)
  command -v mvn >/dev/null || pkgs+=(maven)
  command -v unzip >/dev/null || pkgs+=(unzip)
  command -v pkill >/dev/null && command -v pgrep >/dev/null || pkgs+=(procps)
  command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null || pkgs+=(mariadb-server)
  command -v mariadb >/dev/null || pkgs+=(mariadb-client)
  [[ -n "$(pg_bin)" && -x "$(pg_bin)/initdb" ]] || pkgs+=(postgresql)
  command -v psql >/dev/null || pkgs+=(postgresql-client)
  # promtool and a real Prometheus for the alert-rule tests
  command -v promtool >/dev/null && command -v prometheus >/dev/null || pkgs+=(prometheus)
  # scripts/check-deploy.py reads the YAML manifests (python3 itself comes with Debian)
  command -v python3 >/dev/null && python3 -c 'import yaml' 2>/dev/null || pkgs+=(python3 python3-yaml)
  # headless Chromium for the status page's browser test (tests/tests/e2e/page.rs)
  command -v chromium >/dev/null || pkgs+=(chromium)
  # a CJK font, so the Chinese status page's screenshot shows characters, not boxes
  [[ -e /usr/share/fonts/truetype/wqy/wqy-zenhei.ttc ]] || pkgs+=(fonts-wqy-zenhei)
  # systemd-analyze verify of the units and systemd-sysusers in the .deb's postinst (scripts/check-package.sh)
  command -v systemd-analyze >/dev/null && command -v systemd-sysusers >/dev/null || pkgs+=(systemd)
  # DS's etcd registry (reaper-etcd, ds-sim), and protoc for the etcd-client crate's build
  command -v etcd >/dev/null || pkgs+=(etcd-server)
  command -v etcdctl >/dev/null || pkgs+=(etcd-client)
  command -v protoc >/dev/null || pkgs+=(protobuf-compiler)
  # protoc's well-known types (google/protobuf/descriptor.proto, imported by etcd's protos)
  [[ -f /usr/include/google/protobuf/descriptor.proto ]] || pkgs+=(libprotobuf-dev)
  if ((${#pkgs[@]} == 0)); then log "packages already installed"; return; fi
  [[ $(id -u) -eq 0 ]] || die "need root to apt-get install ${pkgs[*]}"
  log "installing: ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null || die "apt-get update failed"
  # policy-rc.d / no init system: postinst does not start the services; we start them below.
  apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null \
    || die "apt-get install ${pkgs[*]} failed"
}

# ---------------------------------------------------------------- zookeeper
zk_4lw() { # zk_4lw CMD -> prints reply (bash /dev/tcp, no netcat needed)
  local cmd=$1 reply
  exec 3<>"/dev/tcp/127.0.0.1/$ZK_PORT" || return 1
  printf '%s' "$cmd" >&3
  reply=$(timeout 1 cat <&3) || true
  exec 3<&- 3>&-
  printf '%s' "$reply"
}
zk_ok() { [[ "$(zk_4lw ruok 2>/dev/null)" == imok ]]; }

start_zk() {
  if zk_ok; then log "zookeeper already running on 127.0.0.1:$ZK_PORT"; return; fi
  mkdir -p "$ZK_DIR/data"
  cat >"$ZK_DIR/zoo.cfg" <<EOF
tickTime=2000
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
# the embedded Jetty admin server would otherwise grab 0.0.0.0:8080
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,cons,wchs,wchc,wchp,dump
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
EOF
  # zookeeper.jar's manifest Class-Path pulls in netty, jute, slf4j-api ...;
  # slf4j-simple is the logger binding (else logs are silently dropped).
  setsid nohup java -Xmx256m -XX:+UseSerialGC \
    -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZK_DIR/zoo.cfg" \
    >"$ZK_DIR/zookeeper.log" 2>&1 </dev/null &
  echo $! >"$ZK_DIR/zookeeper.pid"
  wait_for zookeeper "$(cat "$ZK_DIR/zookeeper.pid")" zk_ok || { tail -n 30 "$ZK_DIR/zookeeper.log" >&2; die "zookeeper failed to start or did not answer ruok within ${TIMEOUT}s (port $ZK_PORT taken? log: $ZK_DIR/zookeeper.log)"; }
}

stop_zk() {
  local pid
  pid=$(cat "$ZK_DIR/zookeeper.pid" 2>/dev/null) || { log "zookeeper: no pid file"; return; }
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    log "zookeeper stopped"
  fi
  rm -f "$ZK_DIR/zookeeper.pid"
}

# ---------------------------------------------------------------- mariadb
my_root() { mariadb --no-defaults --socket="$MY_SOCK" -uroot "$@"; }
my_ok() { mariadb-admin --no-defaults --socket="$MY_SOCK" -uroot --connect-timeout=1 ping; }

start_mariadb() {
  if my_ok >/dev/null 2>&1; then
    log "mariadb already running on 127.0.0.1:$MY_PORT"
  else
    if [[ ! -d "$MY_DIR/data/mysql" ]]; then
      mkdir -p "$MY_DIR"
      mariadb-install-db --no-defaults --user=root --datadir="$MY_DIR/data" \
        --auth-root-authentication-method=socket --skip-test-db >"$MY_DIR/install-db.log" 2>&1 \
        || { tail -n 20 "$MY_DIR/install-db.log" >&2; die "mariadb-install-db failed"; }
    fi
    setsid nohup mariadbd --no-defaults --user=root --datadir="$MY_DIR/data" \
      --socket="$MY_SOCK" --pid-file="$MY_DIR/mysqld.pid" --port="$MY_PORT" \
      --bind-address=127.0.0.1 --skip-name-resolve --log-error="$MY_DIR/error.log" \
      --innodb-buffer-pool-size=64M --character-set-server=utf8mb4 \
      --collation-server=utf8mb4_general_ci >/dev/null 2>&1 </dev/null &
    wait_for mariadb $! my_ok || { tail -n 30 "$MY_DIR/error.log" >&2; die "mariadb failed to start or not ready within ${TIMEOUT}s (port $MY_PORT taken? log: $MY_DIR/error.log)"; }
  fi
  my_root -e "CREATE DATABASE IF NOT EXISTS ds;
    CREATE USER IF NOT EXISTS 'ds'@'127.0.0.1' IDENTIFIED BY 'ds';
    CREATE USER IF NOT EXISTS 'ds'@'localhost' IDENTIFIED BY 'ds';
    GRANT ALL ON *.* TO 'ds'@'127.0.0.1'; GRANT ALL ON *.* TO 'ds'@'localhost';" \
    || die "mariadb: creating database/user failed"
  mariadb --no-defaults -h127.0.0.1 -P"$MY_PORT" -uds -pds ds -e 'select 1' >/dev/null \
    || die "mariadb: TCP login ds@127.0.0.1:$MY_PORT failed (port taken by another server?)"
}

stop_mariadb() {
  if my_ok >/dev/null 2>&1; then
    mariadb-admin --no-defaults --socket="$MY_SOCK" -uroot shutdown && log "mariadb stopped"
  else log "mariadb not running"; fi
}

# ---------------------------------------------------------------- postgres
pg_ok() { PGCONNECT_TIMEOUT=1 psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -tAc 'select 1' 2>/dev/null | grep -qx 1; }
as_pg() { runuser -u postgres -- "$@"; }

start_pg() {
  local bin; bin=$(pg_bin)
  if pg_ok; then
    log "postgres already running on 127.0.0.1:$PG_PORT"
  else
    mkdir -p "$PG_DIR"; chmod 755 "$SVC_DIR"; chown postgres:postgres "$PG_DIR"
    if [[ ! -f "$PG_DIR/data/PG_VERSION" ]]; then
      # initdb refuses to run as root -> run as the postgres user from the package
      as_pg "$bin/initdb" -D "$PG_DIR/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        >"$PG_DIR/initdb.log" 2>&1 || { tail -n 20 "$PG_DIR/initdb.log" >&2; die "initdb failed"; }
    fi
    as_pg "$bin/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/postgres.log" -w -t "$TIMEOUT" \
      -o "-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories=$PG_DIR -c fsync=off" \
      start >/dev/null || { tail -n 30 "$PG_DIR/postgres.log" >&2; die "pg_ctl start failed (port $PG_PORT taken? log: $PG_DIR/postgres.log)"; }
    wait_for postgres - pg_ok || die "postgres not accepting logins on 127.0.0.1:$PG_PORT"
  fi
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "ALTER USER postgres PASSWORD 'postgres'" >/dev/null
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "select 1 from pg_database where datname='ds'" | grep -q 1 \
    || psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE DATABASE ds" || die "postgres: CREATE DATABASE ds failed"
}

stop_pg() {
  if [[ -f "$PG_DIR/data/postmaster.pid" ]]; then
    as_pg "$(pg_bin)/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null && log "postgres stopped"
  else log "postgres not running"; fi
}

# ---------------------------------------------------------------- etcd
etcd_ok() { ETCDCTL_API=3 timeout 2 etcdctl --endpoints="127.0.0.1:$ETCD_PORT" endpoint health >/dev/null 2>&1; }

start_etcd() {
  if etcd_ok; then log "etcd already running on 127.0.0.1:$ETCD_PORT"; return; fi
  mkdir -p "$ETCD_DIR"
  # the Debian package's own service is not used (no init system); one member, loopback only
  setsid nohup etcd --name ds-dev --data-dir "$ETCD_DIR/data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "ds-dev=http://127.0.0.1:$((ETCD_PORT + 1))" \
    >"$ETCD_DIR/etcd.log" 2>&1 </dev/null &
  echo $! >"$ETCD_DIR/etcd.pid"
  wait_for etcd "$(cat "$ETCD_DIR/etcd.pid")" etcd_ok || { tail -n 30 "$ETCD_DIR/etcd.log" >&2; die "etcd failed to start or is not healthy within ${TIMEOUT}s (port $ETCD_PORT taken? log: $ETCD_DIR/etcd.log)"; }
}

stop_etcd() {
  local pid
  pid=$(cat "$ETCD_DIR/etcd.pid" 2>/dev/null) || { log "etcd: no pid file"; return; }
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    log "etcd stopped"
  fi
  rm -f "$ETCD_DIR/etcd.pid"
}

# ---------------------------------------------------------------- main
case "${1:-start}" in
  start)
    mkdir -p "$SVC_DIR"
    install_missing
    start_zk; start_mariadb; start_pg; start_etcd
    log "all up: zk=127.0.0.1:$ZK_PORT mysql://ds:ds@127.0.0.1:$MY_PORT/ds postgres://postgres:postgres@127.0.0.1:$PG_PORT/ds etcd=http://127.0.0.1:$ETCD_PORT"
    ;;
  start-etcd) mkdir -p "$SVC_DIR"; install_missing; start_etcd ;;
  stop) stop_zk; stop_mariadb; stop_pg; stop_etcd ;;
  stop-etcd) stop_etcd ;;
  status)
    zk_ok && echo "zookeeper: up ($(zk_4lw srvr | grep Mode))" || echo "zookeeper: down"
    my_ok >/dev/null 2>&1 && echo "mariadb: up" || echo "mariadb: down"
    pg_ok && echo "postgres: up" || echo "postgres: down"
    etcd_ok && echo "etcd: up" || echo "etcd: down" ;;
  *) die "usage: $0 [start|stop|status|start-etcd|stop-etcd]" ;;
esac
