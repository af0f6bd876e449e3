#!/usr/bin/env bash
# Run a real single-node Apache Kafka broker (KRaft, combined broker + controller) from Maven Central jars
# with the machine's Java (>= 17), bound to 127.0.0.1 only. Used by tests, the demo and CI.
#
#   scripts/kafka.sh fetch                  resolve the broker jars and record a class-data archive once into
#                                           the cache (quick when cached)
#   scripts/kafka.sh start DATA_DIR [PORT]  format DATA_DIR on first use, start the broker in the background,
#                                           wait until it serves; last stdout line: 127.0.0.1:PORT
#   scripts/kafka.sh stop DATA_DIR          SIGTERM, wait, SIGKILL after a timeout
#   scripts/kafka.sh status DATA_DIR        exit 0 and print the bootstrap address if running, else exit 3
#
# Files in DATA_DIR: ports.env (chosen ports, reused on restart), server.properties, log4j2.properties,
# kraft-logs/ (metadata + topic data), broker.log (appended across restarts), broker.pid.
#
# Environment:
#   GISTRANK_CACHE                      cache root (default ~/.cache/gistrank); jars in kafka/<version>/libs
#   GISTRANK_KAFKA_NUM_PARTITIONS       default partition count for new topics (default 1)
#   GISTRANK_KAFKA_AUTO_CREATE_TOPICS   auto.create.topics.enable (default false: the project creates its
#                                       topics explicitly, as in production, so a mistyped topic name fails
#                                       instead of silently creating a new topic)
#   GISTRANK_KAFKA_HEAP_OPTS            JVM heap options (default "-Xms128m -Xmx512m")
#   GISTRANK_KAFKA_START_TIMEOUT        seconds to wait for the broker to serve (default 60)
#   GISTRANK_KAFKA_STOP_TIMEOUT         seconds to wait after SIGTERM before SIGKILL (default 30)
#   GISTRANK_KAFKA_SASL_USERS           "user:password,..." (first = the broker's own, a super user): clients
#                                       authenticate (SASL/PLAIN) and ACLs decide what each may do (KRaft's
#                                       StandardAuthorizer; nothing without an ACL). Unset: PLAINTEXT, open.
# num.partitions, auto-create and the users are written on first start only; delete DATA_DIR to change them.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/kafka/pom.xml"
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")"
LIBS="${GISTRANK_CACHE:-$HOME/.cache/gistrank}/kafka/$KAFKA_VERSION/libs"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
# Class-data-sharing archive of the classes a broker loads, recorded by `fetch` (see record_class_archive).
CLASS_ARCHIVE="$LIBS/kafka.jsa"
# Emitted by kafka.server.KafkaRaftServer once broker and controller have finished starting up.
READY_MESSAGE="Kafka Server started"

die() {
  echo "kafka.sh: $*" >&2
  exit 1
}

usage() {
  echo "usage: $0 fetch | start DATA_DIR [PORT] | stop DATA_DIR | status DATA_DIR" >&2
  exit 2
}

require() {
  command -v "$1" >/dev/null || die "'$1' not found on PATH ($2)"
}

# The pom's checksum is recorded next to the jars so that editing the pom invalidates the cache.
pom_sum() {
  sha256sum "$POM" | cut -d' ' -f1
}

cmd_fetch() {
  fetch_jars
  if [[ ! -f "$CLASS_ARCHIVE" ]]; then
    record_class_archive
  fi
}

fetch_jars() {
  if [[ -f "$LIBS/.complete" && "$(cat "$LIBS/.complete")" == "$(pom_sum)" ]]; then
    return 0
  fi
  require mvn "install Maven 3"
  local tmp
  mkdir -p "$(dirname "$LIBS")"
  tmp="$(mktemp -d "$LIBS.tmp.XXXXXX")"
  echo "kafka.sh: resolving Apache Kafka $KAFKA_VERSION jars into $LIBS" >&2
  # Maven's output is kept for failures only (Debian's Maven 3.8 prints colour codes even with -q -B).
  if ! mvn -q -B -f "$POM" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
    >"$tmp/.mvn.log" 2>&1; then
    cat "$tmp/.mvn.log" >&2
    rm -rf "$tmp"
    die "mvn could not resolve the Kafka jars (is Maven Central reachable?)"
  fi
  rm "$tmp/.mvn.log"
  pom_sum >"$tmp/.complete"
  if [[ -f "$LIBS/.complete" && "$(cat "$LIBS/.complete")" == "$(pom_sum)" ]]; then
    rm -rf "$tmp" # a concurrent fetch finished first
    return 0
  fi
  rm -rf "$LIBS" # stale (the pom changed) or left half-written by an interrupted fetch
  # The rename is atomic: a reader sees either no folder or a complete one.
  mv -T "$tmp" "$LIBS" 2>/dev/null || { rm -rf "$tmp"; [[ -f "$LIBS/.complete" ]] || die "could not create $LIBS"; }
}

# On 2 busy cores a broker spends most of its startup loading and verifying ~4000 classes; an AppCDS archive
# of them, dumped by the JVM when a throwaway broker exits, cuts a start from ~6 s to ~3.5 s. Java 17 has no
# -XX:+AutoCreateSharedArchive, hence the explicit training run. If the JVM later changes, the archive is
# rejected with a warning in broker.log and the broker starts without it (delete the file to re-record).
record_class_archive() {
  local tmp_dir dump="$CLASS_ARCHIVE.tmp.$$"
  tmp_dir="$(mktemp -d "${TMPDIR:-/tmp}/kafka-cds.XXXXXX")"
  echo "kafka.sh: recording a class-data archive with a throwaway broker in $tmp_dir" >&2
  ARCHIVE_DUMP="$dump" cmd_start "$tmp_dir" >/dev/null
  cmd_stop "$tmp_dir"
  # A truncated archive (broker killed mid-dump, full disk) makes every later JVM die with SIGBUS, so it is
  # only installed once a JVM has loaded it with -Xshare:on (which fails instead of ignoring a bad archive).
  if ! "$JAVA" -Xshare:on -XX:SharedArchiveFile="$dump" -XX:ErrorFile="$tmp_dir/hs_err_pid%p.log" \
    -cp "$LIBS/*" kafka.tools.StorageTool random-uuid >/dev/null 2>&1; then
    rm -f "$dump"
    die "the recorded class-data archive is unusable; see $tmp_dir/broker.log"
  fi
  mv -f "$dump" "$CLASS_ARCHIVE" # same folder: an atomic rename, never a half-written archive
  rm -rf "$tmp_dir"
}

# Kafka's Uuid.randomUuid() format: 16 random bytes, URL-safe base64 without padding. One JVM start fewer
# than `kafka-storage random-uuid`; a leading '-' would be read as an option, so draw again.
new_cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
    if [[ "$id" != -* ]]; then
      echo "$id"
      return 0
    fi
  done
}

# JVM options for every java run: C1 only (a dev broker's load never repays C2's compile time on 2 cores,
# and C1 alone roughly halves startup), plus the class-data archive when there is one. Only the broker
# (argument "broker") dumps the archive during a training run.
jvm_opts() {
  echo "-XX:TieredStopAtLevel=1"
  if [[ -n "${ARCHIVE_DUMP:-}" && "${1:-}" == broker ]]; then
    echo "-XX:ArchiveClassesAtExit=$ARCHIVE_DUMP"
  elif [[ -f "$CLASS_ARCHIVE" ]]; then
    echo "-XX:SharedArchiveFile=$CLASS_ARCHIVE"
  fi
}

# Ports outside the kernel's ephemeral range (32768-60999 here) so that outgoing connections do not
# grab them between restarts; "free" means nothing accepts connections on it now.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pick_free_port() {
  local port tries
  for tries in $(seq 1 200); do
    port=$((20000 + RANDOM % 12000))
    if [[ "$port" != "${1:-}" ]] && ! port_in_use "$port"; then
      echo "$port"
      return 0
    fi
  done
  die "no free port found on 127.0.0.1 after $tries tries"
}

# PID of the broker for DATA_DIR if it is running; checks the command line so that a recycled PID
# (or a zombie left by a non-reaping init) is never mistaken for our broker.
running_pid() {
  local data_dir="$1" pid state
  [[ -f "$data_dir/broker.pid" ]] || return 1
  pid="$(cat "$data_dir/broker.pid")"
  [[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/stat" ]] || return 1
  state="$(sed 's/^.*) \(.\).*$/\1/' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [[ "$state" != Z ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -F "kafka.Kafka $data_dir/server.properties" >/dev/null || return 1
  echo "$pid"
}

# The security part of server.properties: PLAINTEXT, or SASL/PLAIN with ACLs for GISTRANK_KAFKA_SASL_USERS.
write_security_properties() {
  if [[ -z "${GISTRANK_KAFKA_SASL_USERS:-}" ]]; then
    cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
    return
  fi
  local entry user password broker_user="" broker_password="" jaas_users=""
  local -a entries
  IFS=, read -ra entries <<<"$GISTRANK_KAFKA_SASL_USERS"
  for entry in "${entries[@]}"; do
    user="${entry%%:*}" password="${entry#*:}"
    [[ "$user" =~ ^[A-Za-z0-9_.-]+$ && -n "$password" && "$password" != *'"'* ]] \
      || die "GISTRANK_KAFKA_SASL_USERS: bad entry for user '$user' (want user:password, no quotes)"
    [[ -n "$broker_user" ]] || broker_user="$user" broker_password="$password"
    jaas_users+=" user_$user=\"$password\""
  done
  cat <<EOF
listeners=SASL_PLAINTEXT://127.0.0.1:$BROKER_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$BROKER_PORT
inter.broker.listener.name=SASL_PLAINTEXT
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="$broker_user" password="$broker_password"$jaas_users;
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
# ANONYMOUS: the controller listener (PLAINTEXT, 127.0.0.1 only) through which the node talks to itself
super.users=User:$broker_user;User:ANONYMOUS
EOF
}

write_server_properties() {
  local data_dir="$1"
  cat >"$data_dir/server.properties" <<EOF
# Written by scripts/kafka.sh on first start; ports are reused on restart (see ports.env).
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
controller.listener.names=CONTROLLER
$(write_security_properties)
log.dirs=$data_dir/kraft-logs
num.partitions=${GISTRANK_KAFKA_NUM_PARTITIONS:-1}
auto.create.topics.enable=${GISTRANK_KAFKA_AUTO_CREATE_TOPICS:-false}
# Single node: internal topics cannot have more than one replica; one partition keeps startup quick.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# After a crash (SIGKILL) the restarted broker cannot register until the old registration's session expires
# (default 9 s); 5 s at 1 s heartbeats keeps crash tests quick yet tolerates a 4 s stall of a busy machine.
broker.session.timeout.ms=5000
broker.heartbeat.interval.ms=1000
# Tests join consumer groups constantly; the default 3 s wait for more members only slows them down.
group.initial.rebalance.delay.ms=0
EOF
  chmod 600 "$data_dir/server.properties"  # it may hold SASL passwords
}

write_log4j_config() {
  cat >"$1/log4j2.properties" <<'EOF'
status = warn
# Kafka logs its own shutdown; log4j's hook would stop logging half-way through it.
shutdownHook = disable
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
}

fail_start() {
  local data_dir="$1" msg="$2"
  echo "kafka.sh: $msg; last lines of $data_dir/broker.log:" >&2
  tail -n 40 "$data_dir/broker.log" >&2 || true
  exit 1
}

cmd_start() {
  local data_dir="$1" requested_port="${2:-}" pid port log_offset deadline
  [[ -z "$requested_port" || "$requested_port" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$requested_port'"
  mkdir -p "$data_dir"
  data_dir="$(cd "$data_dir" && pwd)"

  if [[ -f "$data_dir/ports.env" ]]; then
    # shellcheck source=/dev/null
    source "$data_dir/ports.env"
    if [[ -n "$requested_port" && "$requested_port" != "$BROKER_PORT" ]]; then
      die "$data_dir was set up for port $BROKER_PORT, not $requested_port (delete it to start over)"
    fi
  else
    BROKER_PORT="${requested_port:-$(pick_free_port)}"
    CONTROLLER_PORT="$(pick_free_port "$BROKER_PORT")"
    printf 'BROKER_PORT=%s\nCONTROLLER_PORT=%s\n' "$BROKER_PORT" "$CONTROLLER_PORT" >"$data_dir/ports.env"
  fi

  if pid="$(running_pid "$data_dir")"; then
    echo "kafka.sh: broker already running (pid $pid)" >&2
    echo "127.0.0.1:$BROKER_PORT"
    return 0
  fi
  rm -f "$data_dir/broker.pid"

  if [[ -z "${ARCHIVE_DUMP:-}" ]]; then
    cmd_fetch
  fi
  require "$JAVA" "install Java 17 or newer, or set JAVA_HOME"
  local -a tool_opts broker_opts
  mapfile -t tool_opts < <(jvm_opts)
  mapfile -t broker_opts < <(jvm_opts broker)
  for port in "$BROKER_PORT" "$CONTROLLER_PORT"; do
    if port_in_use "$port"; then
      die "port $port on 127.0.0.1 is taken by another process"
    fi
  done

  if [[ ! -f "$data_dir/kraft-logs/meta.properties" ]]; then
    write_server_properties "$data_dir"
    "$JAVA" "${tool_opts[@]}" -cp "$LIBS/*" kafka.tools.StorageTool format \
      --config "$data_dir/server.properties" --cluster-id "$(new_cluster_id)" >>"$data_dir/broker.log" 2>&1 \
      || fail_start "$data_dir" "formatting the storage failed"
  fi
  write_log4j_config "$data_dir"

  touch "$data_dir/broker.log"
  log_offset="$(stat -c %s "$data_dir/broker.log")"
  # shellcheck disable=SC2086  # GISTRANK_KAFKA_HEAP_OPTS holds several JVM options
  setsid "$JAVA" ${GISTRANK_KAFKA_HEAP_OPTS:--Xms128m -Xmx512m} "${broker_opts[@]}" \
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -XX:ErrorFile="$data_dir/hs_err_pid%p.log" \
    -Dlog4j2.configurationFile="$data_dir/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$data_dir/server.properties" \
    </dev/null >>"$data_dir/broker.log" 2>&1 &
  pid=$!
  echo "$pid" >"$data_dir/broker.pid"

  deadline=$((SECONDS + ${GISTRANK_KAFKA_START_TIMEOUT:-60}))
  until tail -c "+$((log_offset + 1))" "$data_dir/broker.log" | grep -F "$READY_MESSAGE" >/dev/null \
    && port_in_use "$BROKER_PORT"; do
    if ! running_pid "$data_dir" >/dev/null; then
      rm -f "$data_dir/broker.pid"
      fail_start "$data_dir" "broker exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      kill -KILL "$pid" 2>/dev/null || true
      rm -f "$data_dir/broker.pid"
      fail_start "$data_dir" "broker did not start within ${GISTRANK_KAFKA_START_TIMEOUT:-60} s (killed it)"
    fi
    sleep 0.5
  done
  echo "127.0.0.1:$BROKER_PORT"
}

cmd_stop() {
  local data_dir pid
  data_dir="$(cd "$1" 2>/dev/null && pwd)" || data_dir="$1"
  if ! pid="$(running_pid "$data_dir")"; then
    rm -f "$data_dir/broker.pid"
    echo "kafka.sh: broker not running" >&2
    return 0
  fi
  kill -TERM "$pid"
  if ! wait_for_exit "$data_dir" "${GISTRANK_KAFKA_STOP_TIMEOUT:-30}"; then
    echo "kafka.sh: broker (pid $pid) ignored SIGTERM for ${GISTRANK_KAFKA_STOP_TIMEOUT:-30} s; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait_for_exit "$data_dir" 10 || die "broker (pid $pid) survived SIGKILL"
  fi
  rm -f "$data_dir/broker.pid"
}

# Waits until DATA_DIR's broker is gone; fails after $2 seconds.
wait_for_exit() {
  local deadline=$((SECONDS + $2))
  while running_pid "$1" >/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

cmd_status() {
  local data_dir pid
  data_dir="$(cd "$1" 2>/dev/null && pwd)" || data_dir="$1"
  if pid="$(running_pid "$data_dir")"; then
    # shellcheck source=/dev/null
    source "$data_dir/ports.env"
    echo "running pid=$pid bootstrap=127.0.0.1:$BROKER_PORT"
    return 0
  fi
  echo "stopped"
  return 3
}

[[ $# -ge 1 ]] || usage
case "$1" in
  fetch) [[ $# -eq 1 ]] || usage; cmd_fetch ;;
  start) [[ $# -eq 2 || $# -eq 3 ]] || usage; cmd_start "$2" "${3:-}" ;;
  stop) [[ $# -eq 2 ]] || usage; cmd_stop "$2" ;;
  status) [[ $# -eq 2 ]] || usage; cmd_status "$2" ;;
  *) usage ;;
esac
