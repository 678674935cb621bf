#!/usr/bin/env bash
# A real YARN ResourceManager (MiniYARNCluster) for ds-reaper's tests.
#   tests/yarn/launch.sh prepare   resolve the jars (Maven Central, cached outside the
#                                  repository) and compile the launcher
#   tests/yarn/launch.sh run       prepare, then run the launcher (stdin/stdout protocol:
#                                  see src/YarnLauncher.java)
#   tests/yarn/launch.sh run ha <rm-id> <conf file>
#                                  one ResourceManager of an HA pair (see the same)
# YARN_CACHE (default /var/tmp/ds-reaper-services/yarn), HADOOP_VERSION (default 3.3.6).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${YARN_CACHE:-/var/tmp/ds-reaper-services/yarn}"
version="${HADOOP_VERSION:-3.3.6}"
lib="$cache/unshaded-$version/lib"
classes="$cache/unshaded-$version/classes"

prepare() {
  if [ ! -f "$lib/hadoop-yarn-server-tests-$version-tests.jar" ] || [ ! -f "$lib/jaxb-impl-2.2.3-1.jar" ]; then
    mvn -q -B -f "$here/pom.xml" -Dhadoop.version="$version" \
      -Dmaven.repo.local="$cache/m2" \
      dependency:copy-dependencies -DoutputDirectory="$lib" >&2
  fi
  if [ ! -f "$classes/YarnLauncher.class" ] || [ "$here/src/YarnLauncher.java" -nt "$classes/YarnLauncher.class" ]; then
    mkdir -p "$classes"
    javac -nowarn -d "$classes" -cp "$lib/*" "$here/src/YarnLauncher.java" >&2
  fi
}

case "${1:-run}" in
  prepare) prepare ;;
  run)
    prepare
    work="$(mktemp -d "${TMPDIR:-/tmp}/ds-reaper-yarn-XXXXXX")"
    cd "$work"
    # JDK 17: the web app's Guice/cglib needs these opened
    opens=""
    for p in java.lang java.lang.reflect java.util java.util.concurrent java.io java.net java.nio sun.nio.ch; do
      opens="$opens --add-opens=java.base/$p=ALL-UNNAMED"
    done
    # shellcheck disable=SC2086
    exec java -Xmx768m -Djava.net.preferIPv4Stack=true $opens \
      -Dhadoop.tmp.dir="$work" -Djava.io.tmpdir="$work" \
      -cp "$classes:$lib/*" YarnLauncher "${@:2}" ;;
  *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
