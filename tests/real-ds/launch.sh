#!/usr/bin/env bash
# Launcher for a REAL DolphinScheduler cluster assembled from Maven Central (issue 19).
# Separate JVMs (masters, workers, API server) against the local ZooKeeper and
# MariaDB/PostgreSQL of deploy/dev/services.sh, everything on 127.0.0.1.
#
#   launch.sh resolve V [--offline]           jars -> $DS_CACHE/V/lib/{master,worker,api}
#   DS_GIT=<git dir> launch.sh build-from-source V   for a V not on Maven Central: build DS's tag V
#                                             into the cache's Maven repository, then resolve V
#   launch.sh schema V mysql|postgres DBNAME  (re)create DBNAME with DS's own SQL (from V's dao jar)
#   launch.sh start V [--db mysql|postgres] [--dbname N] [--name RUN] [--masters N] [--workers M]
#                     [--no-api] [--heap 448m] [--namespace dolphinscheduler] [--port-base 25000]
#                     [--ds-defaults]         (keep DS's load/memory protection thresholds)
#   launch.sh restart RUN SERVER              start one server (master-1, worker-2, api) again
#   launch.sh wait-registered RUN [--timeout S]   ZK nodes + API port; prints seconds to register
#   launch.sh status [RUN]                    servers, pids, RSS, ZK nodes
#   launch.sh zk RUN ls|get|stat|dump [PATH]  zkCli inside the run's namespace (PATH relative, e.g. /nodes/worker)
#   launch.sh heartbeats RUN                  every /nodes/master|worker node's data
#   launch.sh tasks RUN                       live task processes of the run's workers (pid, ppid, cwd, cmd)
#   launch.sh sql RUN [SQL]                   client on the run's database (stdin if no SQL)
#   launch.sh observe RUN [SECONDS]           print every change of task/workflow/command rows, ZK
#                                             nodes and task processes, once a second (UTC times)
#   launch.sh stop RUN SERVER [--signal TERM|KILL|STOP|CONT]
#   launch.sh stop-all [RUN] [--keep-tasks]   TERM (then KILL) every server; also kills leftover task
#                                             processes whose cwd lies in the run's worker data dirs
# Env: DS_CACHE (default /var/tmp/ds-reaper-services/ds), DS_RUNS (default
#      /var/tmp/ds-reaper-services/ds-run), ZK (127.0.0.1:2181), MY_URL/PG_URL parts below,
#      JAVA (java), ZKCLI (/usr/share/zookeeper/bin/zkCli.sh).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DS_CACHE=${DS_CACHE:-/var/tmp/ds-reaper-services/ds}
DS_RUNS=${DS_RUNS:-/var/tmp/ds-reaper-services/ds-run}
M2=${DS_M2:-$DS_CACHE/m2}
DS_SRC_ROOT=${DS_SRC_ROOT:-$(dirname "$DS_CACHE")/ds-src}
ZK=${ZK:-127.0.0.1:2181}
JAVA=${JAVA:-java}
ZKCLI=${ZKCLI:-/usr/share/zookeeper/bin/zkCli.sh}
MY_HOST=${MY_HOST:-127.0.0.1} MY_PORT=${MY_PORT:-3306} MY_USER=${MY_USER:-ds} MY_PASS=${MY_PASS:-ds}
PG_HOST=${PG_HOST:-127.0.0.1} PG_PORT=${PG_PORT:-5432} PG_USER=${PG_USER:-postgres} PG_PASS=${PG_PASS:-postgres}

log() { echo "[real-ds] $*" >&2; }
die() { echo "[real-ds] ERROR: $*" >&2; exit 1; }
now_ms() { date +%s%3N; }

# ------------------------------------------------------------------ resolve
# DS artifacts that Maven Central (as reachable from here) lacks although other modules
# name them as <parent>: we install our own stand-ins (tests/real-ds/stubs) first.
install_stubs() {
  local v=$1 s f
  for f in "$HERE"/stubs/*.pom.xml; do
    s=$(basename "$f" .pom.xml)
    [[ -f $M2/org/apache/dolphinscheduler/$s/$v/$s-$v.pom ]] && continue
    mkdir -p "$DS_CACHE/stubs"
    sed "s/@DS_VERSION@/$v/" "$f" >"$DS_CACHE/stubs/$s-$v.pom"
    mvn -B -q -o -Dmaven.repo.local="$M2" install:install-file -Dfile="$DS_CACHE/stubs/$s-$v.pom" \
      -DpomFile="$DS_CACHE/stubs/$s-$v.pom" -Dpackaging=pom >/dev/null 2>&1 ||
      mvn -B -q -Dmaven.repo.local="$M2" install:install-file -Dfile="$DS_CACHE/stubs/$s-$v.pom" \
        -DpomFile="$DS_CACHE/stubs/$s-$v.pom" -Dpackaging=pom >/dev/null ||
      die "cannot install stub $s $v"
  done
}

cmd_resolve() {
  local v=${1:?version} off=() s
  shift
  [[ ${1:-} == --offline ]] && off=(-o)
  mkdir -p "$M2"
  install_stubs "$v"
  for s in master worker api; do
    local out=$DS_CACHE/$v/lib/$s
    if [[ -f $out/.complete ]]; then log "$v $s: cached ($(ls "$out" | wc -l) jars)"; continue; fi
    rm -rf "$out"; mkdir -p "$out"
    log "$v $s: resolving into $out"
    local t0; t0=$(now_ms)
    if ! mvn -B "${off[@]}" -Dmaven.repo.local="$M2" -f "$HERE/pom.xml" -Dds.version="$v" -Dds.server="$s" \
      dependency:copy-dependencies -DoutputDirectory="$out" >"$DS_CACHE/$v/resolve-$s.log" 2>&1; then
      grep -E 'ERROR' "$DS_CACHE/$v/resolve-$s.log" | head -5 >&2
      die "$v $s did not resolve (log $DS_CACHE/$v/resolve-$s.log)"
    fi
    touch "$out/.complete"
    log "$v $s: $(ls "$out" | wc -l) jars, $(du -sh "$out" | cut -f1), $(( ($(now_ms) - t0) / 1000 )) s"
  done
  # DS's published jars leave out their resources' yaml and sql/ (maven-jar-plugin excludes in
  # DS's poms): the -sources jars on Maven Central carry them. dao: the schema SQL; master,
  # worker, api: application.yaml, logback-spring.xml (api: task-type-config.yaml), which DS's
  # dist copies into each server's conf/
  # A version built from DS's source (build-from-source) has no -sources jars: the same files
  # are zipped from its tree's src/main/resources instead.
  local m tree=$DS_SRC_ROOT/$v
  mkdir -p "$DS_CACHE/$v/src"
  for m in dao master worker api; do
    local sj=$DS_CACHE/$v/src/dolphinscheduler-$m-$v-sources.jar
    [[ -f $sj ]] && continue
    if [[ -d $tree/dolphinscheduler-$m/src/main/resources ]]; then
      (cd "$tree/dolphinscheduler-$m/src/main/resources" && python3 -c 'import sys, os, zipfile
z = zipfile.ZipFile(sys.argv[1], "w")
[z.write(os.path.join(d, f)) for d, _, fs in os.walk(".") for f in fs]' "$sj")
      continue
    fi
    mvn -B -q "${off[@]}" -Dmaven.repo.local="$M2" -f "$HERE/pom.xml" dependency:copy \
      -Dartifact="org.apache.dolphinscheduler:dolphinscheduler-$m:$v:jar:sources" -DoutputDirectory="$DS_CACHE/$v/src" \
      >"$DS_CACHE/$v/resolve-src-$m.log" 2>&1 || die "no dolphinscheduler-$m:$v:sources (log $DS_CACHE/$v/resolve-src-$m.log)"
  done
  log "$v sources jars (schema SQL, server configs): $DS_CACHE/$v/src"
}

# build-from-source V: for versions Maven Central (as reachable) lacks. Exports tag V of DS's git
# repository ($DS_GIT, a clone or bare mirror) into $DS_SRC_ROOT/V and installs the master, worker
# and API modules with their DS dependencies into the cache's local repository ($M2); `resolve V`
# then works as for a published version. Nothing lands in this repository. UI assets are not
# built (DS builds them only in its `release` profile): the REST API works, the web UI is empty.
cmd_build_from_source() {
  local v=${1:?version} tree=$DS_SRC_ROOT/${1}
  [[ -n ${DS_GIT:-} ]] || die "set DS_GIT to a git directory of apache/dolphinscheduler"
  if [[ ! -f $tree/pom.xml ]]; then
    mkdir -p "$tree"
    git -C "$DS_GIT" archive "$v" | tar -x -C "$tree" || die "no tag $v in $DS_GIT"
  fi
  log "building DS $v from $tree (log $DS_SRC_ROOT/build-$v.log)"
  local t0=$SECONDS
  (cd "$tree" && nice -n 10 mvn -B -T 1 -Dmaven.repo.local="$M2" -Dmaven.test.skip=true -Dspotless.skip=true \
    -Dspotless.check.skip=true -Dcheckstyle.skip=true -Dmaven.javadoc.skip=true -Drat.skip=true -Djacoco.skip=true \
    -Dmaven.source.skip=true -pl dolphinscheduler-bom,dolphinscheduler-master,dolphinscheduler-worker,dolphinscheduler-api -am install) \
    >"$DS_SRC_ROOT/build-$v.log" 2>&1 || { grep ERROR "$DS_SRC_ROOT/build-$v.log" | head -5 >&2; die "build of $v failed"; }
  log "built $v in $((SECONDS - t0)) s"
}

ver_ge() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) == "$2" ]]; }
lib_dir() { local d=$DS_CACHE/$1/lib/$2; [[ -f $d/.complete ]] || die "run: launch.sh resolve $1"; echo "$d"; }
jar_of() { ls "$(lib_dir "$1" "$2")"/dolphinscheduler-"$3"-"$1".jar 2>/dev/null || die "no $3 jar for $1"; }

# ------------------------------------------------------------------ databases
my() { mariadb --no-defaults -h"$MY_HOST" -P"$MY_PORT" -u"$MY_USER" -p"$MY_PASS" "$@"; }
pg() { PGOPTIONS="-c client_min_messages=warning" PGPASSWORD=$PG_PASS psql -X -q -v ON_ERROR_STOP=1 -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" "$@"; }

cmd_schema() {
  local v=${1:?version} kind=${2:?mysql|postgres} db=${3:?dbname}
  [[ $db =~ ^[a-z][a-z0-9_]*$ ]] || die "dbname must be [a-z][a-z0-9_]*"
  [[ $db == ds ]] && die "refusing to drop the shared test database 'ds'; pick another name"
  local dao=$DS_CACHE/$v/src/dolphinscheduler-dao-$v-sources.jar
  [[ -f $dao ]] || die "run: launch.sh resolve $v"
  local t0; t0=$(now_ms)
  case $kind in
  mysql)
    my -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;"
    unzip -p "$dao" sql/dolphinscheduler_mysql.sql | my "$db"
    log "schema $v on mariadb $db: $(my -N -e "select count(*) from information_schema.tables where table_schema='$db'") tables, $(( $(now_ms) - t0 )) ms" ;;
  postgres | postgresql)
    pg -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
    unzip -p "$dao" sql/dolphinscheduler_postgresql.sql | pg -d "$db" >/dev/null
    log "schema $v on postgres $db: $(pg -d "$db" -tAc "select count(*) from information_schema.tables where table_schema='public'") tables, $(( $(now_ms) - t0 )) ms" ;;
  *) die "db kind: mysql|postgres" ;;
  esac
}

# ------------------------------------------------------------------ run layout
run_dir() { echo "$DS_RUNS/${1:?run name}"; }
load_run() {
  local d; d=$(run_dir "$1")
  [[ -f $d/run.env ]] || die "no run $1 ($d/run.env)"
  # shellcheck disable=SC1091
  source "$d/run.env"
  RUN_DIR=$d
}
main_class() {
  case $1 in
  master) echo org.apache.dolphinscheduler.server.master.MasterServer ;;
  worker) echo org.apache.dolphinscheduler.server.worker.WorkerServer ;;
  api) echo org.apache.dolphinscheduler.api.ApiApplicationServer ;;
  esac
}
# ports of server KIND-IDX: master i -> PB+10i (rpc) / +1 (http); worker i -> PB+100+10i / +1; api PB+200
rpc_port() { case $1 in master) echo $((PORT_BASE + 10 * $2)) ;; worker) echo $((PORT_BASE + 100 + 10 * $2)) ;; api) echo 0 ;; esac; }
http_port() { case $1 in master | worker) echo $(($(rpc_port "$1" "$2") + 1)) ;; api) echo $((PORT_BASE + 200)) ;; esac; }
servers_of_run() {
  local i
  for ((i = 1; i <= MASTERS; i++)); do echo master-$i; done
  for ((i = 1; i <= WORKERS; i++)); do echo worker-$i; done
  [[ $API == 1 ]] && echo api
  return 0
}
pid_of() { cat "$RUN_DIR/$1/pid" 2>/dev/null || true; }
alive() { local p; p=$(pid_of "$1"); [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }

cmd_start() {
  local v=${1:?version}; shift
  local db=mysql dbname="" name="" masters=1 workers=2 api=1 heap=448m ns=dolphinscheduler pb=25000 relaxed=1
  while (($#)); do
    case $1 in
    --db) db=$2; shift ;;
    --dbname) dbname=$2; shift ;;
    --name) name=$2; shift ;;
    --masters) masters=$2; shift ;;
    --workers) workers=$2; shift ;;
    --no-api) api=0 ;;
    --heap) heap=$2; shift ;;
    --namespace) ns=$2; shift ;;
    --port-base) pb=$2; shift ;;
    --ds-defaults) relaxed=0 ;;
    *) die "start: unknown option $1" ;;
    esac
    shift
  done
  [[ $db == postgresql ]] && db=postgres
  [[ -n $dbname ]] || dbname=dsreal_${v//./}_$db
  [[ -n $name ]] || name=ds-${v//./}-$db
  lib_dir "$v" master >/dev/null
  local d; d=$(run_dir "$name")
  if [[ -f $d/run.env ]]; then
    load_run "$name"
    local s
    for s in $(servers_of_run); do alive "$s" && die "run $name is still running ($s); stop-all $name first"; done
  fi
  mkdir -p "$d"
  cat >"$d/run.env" <<EOF
DS_VERSION=$v
DB_KIND=$db
DB_NAME=$dbname
MASTERS=$masters
WORKERS=$workers
API=$api
HEAP=$heap
NAMESPACE=$ns
PORT_BASE=$pb
RELAXED=$relaxed
EOF
  load_run "$name"
  log "run $name: DS $v on $db/$dbname, $masters master(s), $workers worker(s), api=$api, heap $heap, zk $ZK/$ns, dir $d"
  local s
  for s in $(servers_of_run); do start_server "$s"; done
  echo "$name"
}

cmd_restart() { load_run "${1:?run}"; alive "${2:?server}" && die "$2 is running (pid $(pid_of "$2"))"; start_server "$2"; }

start_server() {
  local s=$1 kind=${1%%-*} idx=${1#*-}
  [[ $kind == api ]] && idx=0
  local sd=$RUN_DIR/$s lib; lib=$(lib_dir "$DS_VERSION" "$kind")
  mkdir -p "$sd/conf" "$sd/logs"
  # the server's own application.yaml / logback-spring.xml first on the classpath, as in DS's
  # dist (conf/ before libs/*): a master's libs also hold the worker jar and its application.yaml
  local own=$DS_CACHE/$DS_VERSION/src/dolphinscheduler-$kind-$DS_VERSION-sources.jar
  [[ -f $own ]] || die "no $own: launch.sh resolve $DS_VERSION"
  # as DS's dist assembly: every top-level *.yaml and *.xml of the server's resources into conf/
  # (api: task-type-config.yaml, 3.2+ also dynamic-task-type-config.yaml)
  (cd "$sd/conf" && unzip -o -q "$own" '*.yaml' '*.xml' -x '*/*' 2>/dev/null; [[ $? -le 11 ]]) || die "no yaml in $own"
  [[ -f $sd/conf/application.yaml ]] || die "no application.yaml in $own"
  # our own (empty) task environment file; DS's dist ships conf/dolphinscheduler_env.sh
  [[ -f $sd/conf/dolphinscheduler_env.sh ]] || printf '# task environment of ds-reaper real-ds run\nexport PATH=/usr/local/bin:/usr/bin:/bin\n' >"$sd/conf/dolphinscheduler_env.sh"

  local url driver user pass profile
  case $DB_KIND in
  mysql) url="jdbc:mysql://$MY_HOST:$MY_PORT/$DB_NAME?useUnicode=true&characterEncoding=UTF-8&useSSL=false&allowPublicKeyRetrieval=true"
    driver=com.mysql.cj.jdbc.Driver user=$MY_USER pass=$MY_PASS profile=mysql ;;
  postgres) url="jdbc:postgresql://$PG_HOST:$PG_PORT/$DB_NAME?stringtype=unspecified"
    driver=org.postgresql.Driver user=$PG_USER pass=$PG_PASS profile=postgresql ;;
  esac
  local rpc http; rpc=$(rpc_port "$kind" "$idx") http=$(http_port "$kind" "$idx")
  local -a opts=(-server -Xms64m "-Xmx$HEAP" -Xss512k -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
    -XX:+ExitOnOutOfMemoryError -Duser.timezone=UTC -Dfile.encoding=UTF-8
    # JDK 17: 3.1's AbstractCommandExecutor.getProcessId reads java.lang.ProcessImpl.pid by
    # reflection; without this it logs InaccessibleObjectException and records pid 0
    --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED
    --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
    "-Dspring.profiles.active=$profile"
    "-Dspring.datasource.driver-class-name=$driver" "-Dspring.datasource.url=$url"
    "-Dspring.datasource.username=$user" "-Dspring.datasource.password=$pass"
    -Dspring.datasource.hikari.maximum-pool-size=8 -Dspring.datasource.hikari.minimum-idle=1
    -Dregistry.type=zookeeper "-Dregistry.zookeeper.connect-string=$ZK" "-Dregistry.zookeeper.namespace=$NAMESPACE"
    # NetUtils skips loopback interfaces; an unknown strategy makes it fall back to
    # InetAddress.getLocalHost() (127.0.0.1 here), which it rejects too -> "127.0.0.1"
    -Ddolphin.scheduler.network.priority.strategy=loopback-only
    -Dserver.address=127.0.0.1 "-Dserver.port=$http"
    "-Ddolphinscheduler.env.path=$sd/conf/dolphinscheduler_env.sh"
    -Dspring.quartz.properties.org.quartz.threadPool.threadCount=4)
  # 3.2+ servers need the metrics beans (WorkerRegistryClient -> MetricsProvider)
  ver_ge "$DS_VERSION" 3.2 || opts+=(-Dmetrics.enabled=false)
  case $kind in
  master) opts+=("-Dmaster.listen-port=$rpc" -Dmaster.exec-threads=16 -Dmaster.pre-exec-threads=4) ;;
  worker) mkdir -p "$sd/data"
    opts+=("-Dworker.listen-port=$rpc" -Dworker.exec-threads=8 "-Ddata.basedir.path=$sd/data"
      -Dsudo.enable=false -Dworker.alert-listen-host=127.0.0.1) ;;
  api) opts+=(-Dpython-gateway.enabled=false -Dpython-gateway.gateway-server-address=127.0.0.1) ;;
  esac
  if [[ $RELAXED == 1 ]]; then
    # a busy shared 2-core build machine would otherwise make servers report BUSY and stop dispatching
    case $kind in master | worker)
      if ver_ge "$DS_VERSION" 3.2; then opts+=("-D$kind.server-load-protection.enabled=false")
      else opts+=("-D$kind.max-cpu-load-avg=100" "-D$kind.reserved-memory=0.01"); fi ;;
    esac
  fi
  # 3.2+: the tenant must be an OS user unless auto-created (needs sudo); we run tasks as root
  [[ $kind == worker ]] && ver_ge "$DS_VERSION" 3.2 && opts+=(-Dworker.tenant-config.auto-create-tenant-enabled=false)
  local cp="$sd/conf:$lib/*"
  printf '%q ' "$JAVA" "${opts[@]}" -cp "$cp" "$(main_class "$kind")" >"$sd/cmdline"
  echo >>"$sd/cmdline"
  [[ -f $sd/stdout.log ]] && mv "$sd/stdout.log" "$sd/stdout.log.$(date +%s)"
  now_ms >"$sd/start.ms"
  rm -f "$sd/pid"
  # the JVM writes nothing itself: the inner bash records its own pid, then execs java (same pid);
  # setsid may fork, so $! would not be the JVM
  (cd "$sd" && exec setsid bash -c 'echo $$ >pid; exec "$@"' ds-"$s" "$JAVA" "${opts[@]}" -cp "$cp" "$(main_class "$kind")") \
    >"$sd/stdout.log" 2>&1 </dev/null &
  local i
  for ((i = 0; i < 50; i++)); do [[ -s $sd/pid ]] && break; sleep 0.1; done
  [[ -s $sd/pid ]] || die "$s: no pid file"
  cat "$sd/pid" >>"$sd/sessions" # every incarnation's session, for task processes it left behind
  log "$s started: pid $(pid_of "$s"), rpc ${rpc/#0/-} http $http, log $sd/logs"
}

# ------------------------------------------------------------------ zookeeper
zkcli() { "$ZKCLI" -server "$ZK" "$@" 2>/dev/null | sed -n '/^WATCHER::/,$p' | sed '1,/^WatchedEvent/d' | grep -v '^$' || true; }
zk_children() { zkcli ls "/$NAMESPACE$1" | grep '^\[.*\]$' | tail -n1 | tr -d '[] ' | tr ',' '\n' | grep -v '^$' || true; }

cmd_zk() {
  load_run "${1:?run}"
  local op=${2:-ls} p=${3:-}
  case $op in
  dump) exec 3<>"/dev/tcp/${ZK%:*}/${ZK#*:}"; printf dump >&3; timeout 2 cat <&3; exec 3<&- ;;
  ls | get | stat) p="/$NAMESPACE$p"; zkcli "$op" "${p%/}" ;;
  *) die "zk ops: ls get stat dump" ;;
  esac
}

cmd_heartbeats() {
  load_run "${1:?run}"
  local k n
  for k in master worker; do
    for n in $(zk_children /nodes/$k); do
      echo "/$NAMESPACE/nodes/$k/$n"
      zkcli get "/$NAMESPACE/nodes/$k/$n" | tail -n1
    done
  done
}

cmd_wait_registered() {
  load_run "${1:?run}"; shift
  local timeout=300
  [[ ${1:-} == --timeout ]] && timeout=$2
  local t0=$SECONDS s pending
  declare -A done_at=()
  while :; do
    local masters workers
    masters=$(zk_children /nodes/master) workers=$(zk_children /nodes/worker)
    pending=0
    for s in $(servers_of_run); do
      [[ -n ${done_at[$s]:-} ]] && continue
      local kind=${s%%-*} idx=${s#*-} ok=0
      alive "$s" || die "$s (pid $(pid_of "$s")) died; see $RUN_DIR/$s/stdout.log and logs/"
      case $kind in
      master) grep -qx "127.0.0.1:$(rpc_port master "$idx")" <<<"$masters" && ok=1 ;;
      worker) grep -qx "127.0.0.1:$(rpc_port worker "$idx")" <<<"$workers" && ok=1 ;;
      api) curl -fs -o /dev/null "http://127.0.0.1:$(http_port api 0)/dolphinscheduler/actuator/health" && ok=1 ;;
      esac
      if ((ok)); then
        done_at[$s]=$(now_ms)
        local st; st=$(cat "$RUN_DIR/$s/start.ms")
        printf '%-9s registered %6.1f s after start  (rss %s MB)\n' "$s" "$(bc -l <<<"(${done_at[$s]} - $st) / 1000")" \
          "$(($(awk '/VmRSS/{print $2}' "/proc/$(pid_of "$s")/status") / 1024))"
      else pending=$((pending + 1)); fi
    done
    ((pending == 0)) && break
    ((SECONDS - t0 > timeout)) && die "still $pending server(s) unregistered after ${timeout}s"
    sleep 2
  done
  echo "zk /$NAMESPACE/nodes/master: $(echo $masters)"
  echo "zk /$NAMESPACE/nodes/worker: $(echo $workers)"
}

cmd_status() {
  local runs=("$@") r s
  ((${#runs[@]})) || mapfile -t runs < <(ls "$DS_RUNS" 2>/dev/null)
  for r in "${runs[@]}"; do
    [[ -f $DS_RUNS/$r/run.env ]] || continue
    load_run "$r"
    echo "run $r: DS $DS_VERSION $DB_KIND/$DB_NAME zk /$NAMESPACE"
    for s in $(servers_of_run); do
      local p; p=$(pid_of "$s")
      if alive "$s"; then
        printf '  %-9s pid %-7s %-2s rss %5s MB\n' "$s" "$p" "$(awk '{print $3}' /proc/"$p"/stat)" "$(($(awk '/VmRSS/{print $2}' /proc/"$p"/status) / 1024))"
      else printf '  %-9s down (last pid %s)\n' "$s" "${p:--}"; fi
    done
  done
}

# task processes of the run's workers: every process in a worker JVM's session (each JVM is
# started by setsid, so its pid is its session id, and task processes and their children keep
# it after the JVM dies) other than the JVM itself, and anything whose cwd is inside a worker's
# data dir (a user's script may cd elsewhere, its session stays)
task_pids() {
  local p cwd sid s
  local -A sids=() jvms=()
  for s in $(servers_of_run | grep worker); do
    local w; w=$(pid_of "$s")
    [[ -n $w ]] && jvms[$w]=1
    for w in $(cat "$RUN_DIR/$s/sessions" 2>/dev/null) $w; do sids[$w]=1; done
  done
  # a recorded session counts only while one of its processes runs a command file of this run
  # (a pid, hence a session id, may be reused by someone else's process)
  local -A live=()
  for p in /proc/[0-9]*; do
    grep -qF "$RUN_DIR/worker-" "$p/cmdline" 2>/dev/null || continue
    sid=$(awk '{print $6}' "$p/stat" 2>/dev/null) || continue
    [[ -n ${sids[$sid]:-} ]] && live[$sid]=1
  done
  sids=()
  for sid in "${!live[@]}"; do sids[$sid]=1; done
  for p in /proc/[0-9]*; do
    local n=${p#/proc/}
    [[ -n ${jvms[$n]:-} ]] && continue
    sid=$(awk '{print $6}' "$p/stat" 2>/dev/null) || continue
    cwd=$(readlink "$p/cwd" 2>/dev/null) || cwd=
    if [[ -n ${sids[$sid]:-} || $cwd == "$RUN_DIR"/worker-*/data/* ]]; then echo "$n"; fi
  done
  return 0
}
cmd_tasks() {
  load_run "${1:?run}"
  local p
  for p in $(task_pids); do
    printf 'pid %s ppid %s sid %s cwd %s\n  cmd %s\n' "$p" "$(awk '{print $4}' /proc/"$p"/stat)" "$(awk '{print $6}' /proc/"$p"/stat)" "$(readlink /proc/"$p"/cwd)" \
      "$(tr '\0' ' ' </proc/"$p"/cmdline)"
  done
}

# observe RUN SECONDS: once a second, print what changed (UTC ms timestamps): task rows, workflow
# rows, commands, ZK server nodes, live task processes
cmd_observe() {
  load_run "${1:?run}"
  local secs=${2:-120} t0=$SECONDS prev_t="" prev_w="" prev_c="" prev_z="" prev_p=""
  local tq wq cq
  case $DB_KIND in
  mysql) tq="select id,name,state,host,pid,flag,submit_time,start_time,end_time,execute_path from t_ds_task_instance order by id"
    wq="select id,state,host,command_type,recovery,run_times from t_ds_process_instance order by id"
    cq="select id,command_type,process_instance_id,command_param from t_ds_command order by id" ;;
  postgres) tq="select id,name,state,host,pid,flag,submit_time,start_time,end_time,execute_path from t_ds_task_instance order by id"
    wq="select id,state,host,command_type,recovery,run_times from t_ds_process_instance order by id"
    cq="select id,command_type,process_instance_id,command_param from t_ds_command order by id" ;;
  esac
  q() { case $DB_KIND in mysql) my -N -B "$DB_NAME" -e "$1" 2>/dev/null ;; postgres) pg -d "$DB_NAME" -tA -F $'\t' -c "$1" 2>/dev/null ;; esac; }
  while ((SECONDS - t0 < secs)); do
    local ts; ts=$(date -u +%H:%M:%S.%3N)
    local t w c z pr
    t=$(q "$tq") w=$(q "$wq") c=$(q "$cq")
    z="master: $(zk_children /nodes/master | tr '\n' ' ')| worker: $(zk_children /nodes/worker | tr '\n' ' ')"
    pr=$(for p in $(task_pids); do echo "$p sid=$(awk '{print $6}' /proc/$p/stat 2>/dev/null) $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-80)"; done)
    [[ $t != "$prev_t" ]] && { echo "$ts task_instance:"; sed 's/^/    /' <<<"$t"; prev_t=$t; }
    [[ $w != "$prev_w" ]] && { echo "$ts process_instance:"; sed 's/^/    /' <<<"$w"; prev_w=$w; }
    [[ $c != "$prev_c" ]] && { echo "$ts command:"; sed 's/^/    /' <<<"$c"; prev_c=$c; }
    [[ $z != "$prev_z" ]] && { echo "$ts zk $z"; prev_z=$z; }
    [[ $pr != "$prev_p" ]] && { echo "$ts task processes:"; sed 's/^/    /' <<<"$pr"; prev_p=$pr; }
    sleep 1
  done
}

cmd_sql() {
  load_run "${1:?run}"; shift
  case $DB_KIND in
  mysql) if (($#)); then my "$DB_NAME" -e "$*"; else my "$DB_NAME"; fi ;;
  postgres) if (($#)); then pg -d "$DB_NAME" -c "$*"; else pg -d "$DB_NAME"; fi ;;
  esac
}

cmd_stop() {
  load_run "${1:?run}"
  local s=${2:?server} sig=TERM
  [[ ${3:-} == --signal ]] && sig=${4:?signal}
  local p; p=$(pid_of "$s")
  alive "$s" || { log "$s not running"; return 0; }
  kill -s "$sig" "$p"
  log "$s (pid $p): sent SIG$sig at $(date -u +%H:%M:%S.%3N)"
  if [[ $sig == TERM ]]; then
    local i
    for ((i = 0; i < 150; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$p" 2>/dev/null && { log "$s still alive after 30 s, SIGKILL"; kill -9 "$p"; }
  fi
  return 0
}

cmd_stop_all() {
  local runs=() keep=0 r s
  while (($#)); do case $1 in --keep-tasks) keep=1 ;; *) runs+=("$1") ;; esac; shift; done
  ((${#runs[@]})) || mapfile -t runs < <(ls "$DS_RUNS" 2>/dev/null)
  for r in "${runs[@]}"; do
    [[ -f $DS_RUNS/$r/run.env ]] || continue
    load_run "$r"
    # workers first (DS's own advice, #7918), then masters, then the API
    for s in $(servers_of_run | grep worker) $(servers_of_run | grep -v worker); do
      alive "$s" && kill -CONT "$(pid_of "$s")" 2>/dev/null && kill -TERM "$(pid_of "$s")"
    done
    local i
    for ((i = 0; i < 150; i++)); do
      local up=0
      for s in $(servers_of_run); do alive "$s" && up=1; done
      ((up)) || break
      sleep 0.2
    done
    for s in $(servers_of_run); do alive "$s" && { log "$r $s: SIGKILL"; kill -9 "$(pid_of "$s")"; }; done
    if ((!keep)); then
      local p
      for p in $(task_pids); do log "$r: killing leftover task process $p ($(tr '\0' ' ' </proc/"$p"/cmdline))"; kill -9 "$p" 2>/dev/null || true; done
    fi
    log "run $r stopped"
  done
}

cmd=${1:-}
shift || true
case $cmd in
resolve) cmd_resolve "$@" ;;
build-from-source) cmd_build_from_source "$@" ;;
schema) cmd_schema "$@" ;;
start) cmd_start "$@" ;;
restart) cmd_restart "$@" ;;
wait-registered) cmd_wait_registered "$@" ;;
status) cmd_status "$@" ;;
zk) cmd_zk "$@" ;;
heartbeats) cmd_heartbeats "$@" ;;
tasks) cmd_tasks "$@" ;;
sql) cmd_sql "$@" ;;
observe) cmd_observe "$@" ;;
stop) cmd_stop "$@" ;;
stop-all) cmd_stop_all "$@" ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
