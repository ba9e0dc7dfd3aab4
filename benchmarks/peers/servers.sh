# The other lock services of benchmarks/compare, each on free loopback ports with a temp dir,
# started from Debian's packages and stopped by PID. Source it after scripts/lib.sh.
#   start_redis LABEL [redis-server flags]  sets REDIS_ADDR[LABEL], remembers the PID
#   start_zk                                sets ZK_ADDR
#   start_pg                                sets PG_DSN
#   stop_peers                              stops every server started here, by PID
# A start_* that cannot start its server says why and returns 1; the caller skips that peer.

PEER_PIDS=()
PEER_DIRS=()
declare -A REDIS_ADDR=()
ZK_ADDR=""
PG_DSN=""

# wait_for SECONDS COMMAND...: retries COMMAND every 0.1 s.
wait_for() {
  local limit=$1
  shift
  local until=$((SECONDS + limit))
  while ! "$@" >/dev/null 2>&1; do
    [ $SECONDS -ge $until ] && return 1
    sleep 0.1
  done
}

# answers PORT REQUEST REPLY: sends REQUEST to 127.0.0.1:PORT; true when the first line of the
# answer (without its CR) is REPLY. Redis answers "PING" with "+PONG"; ZooKeeper answers "ruok" with
# "imok" (the command is allowed in zoo.cfg below).
answers() {
  local reply
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf '%b' "$2" >&3
  read -r -t 2 reply <&3
  exec 3>&-
  [ "${reply%$'\r'}" = "$3" ]
}

start_redis() {
  local label=$1
  shift
  command -v redis-server >/dev/null || { log "$label skipped: redis-server is not installed"; return 1; }
  local dir port
  dir=$(mktemp -d -t coetcd-redis-XXXXXX)
  port=$(free_port)
  # No config file: Redis's built-in defaults (RDB snapshots, no append-only file) plus the flags.
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --maxclients 4096 --logfile "$dir/redis.log" "$@" &
  PEER_PIDS+=($!)
  PEER_DIRS+=("$dir")
  if ! wait_for 20 answers "$port" 'PING\r\n' +PONG; then
    log "$label skipped: redis-server did not answer (see $dir/redis.log)"
    return 1
  fi
  REDIS_ADDR[$label]="127.0.0.1:$port"
}


start_zk() {
  local jars=/usr/share/java
  if [ ! -f "$jars/zookeeper.jar" ] || ! command -v java >/dev/null; then
    log "zk skipped: ZooKeeper (package zookeeper) or java is not installed"
    return 1
  fi
  local dir port
  dir=$(mktemp -d -t coetcd-zk-XXXXXX)
  port=$(free_port)
  # Standalone, ZooKeeper's defaults (2 s tick, a transaction log fsynced before each reply),
  # without the admin web server, with no cap on connections from one address (1000 workers).
  cat >"$dir/zoo.cfg" <<EOF
tickTime=2000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
maxClientCnxns=0
4lw.commands.whitelist=ruok
EOF
  # Debian's zookeeper.jar names the jars it needs in its manifest, but no SLF4J back end, so
  # ZooKeeper logs nothing (Debian's maven3-slf4j-provider would need Maven's jars); what the JVM
  # prints on a failed start still lands in zk.log.
  java -Xmx1g -cp "$jars/zookeeper.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" >"$dir/zk.log" 2>&1 &
  PEER_PIDS+=($!)
  PEER_DIRS+=("$dir")
  if ! wait_for 60 answers "$port" ruok imok; then
    log "zk skipped: ZooKeeper did not answer (see $dir/zk.log)"
    return 1
  fi
  ZK_ADDR="127.0.0.1:$port"
}

start_pg() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -z "$bin" ] || [ ! -x "$bin/postgres" ]; then
    log "pg skipped: PostgreSQL (package postgresql) is not installed"
    return 1
  fi
  local dir port as=()
  dir=$(mktemp -d -t coetcd-pg-XXXXXX)
  port=$(free_port)
  # initdb and postgres refuse to run as root: run them as the postgres user the package made.
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$dir"
    as=(setpriv --reuid=postgres --regid=postgres --init-groups --)
  fi
  if ! "${as[@]}" "$bin/initdb" -D "$dir/data" -A trust -U postgres >"$dir/initdb.log" 2>&1; then
    log "pg skipped: initdb failed (see $dir/initdb.log)"
    PEER_DIRS+=("$dir")
    return 1
  fi
  # PostgreSQL's defaults but the connection cap: one backend per worker, up to 1000.
  "${as[@]}" "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
    -c max_connections=1100 >"$dir/postgres.log" 2>&1 &
  PEER_PIDS+=($!)
  PEER_DIRS+=("$dir")
  if ! wait_for 30 pg_isready -q -h 127.0.0.1 -p "$port"; then
    log "pg skipped: postgres did not answer (see $dir/postgres.log)"
    return 1
  fi
  PG_DSN="host=127.0.0.1 port=$port user=postgres dbname=postgres sslmode=disable"
}

stop_peers() {
  local pid dir
  for pid in "${PEER_PIDS[@]}"; do
    # SIGTERM: Redis and the JVM end on it (a background job ignores SIGINT, so the JVM would
    # not), PostgreSQL after its clients have gone (ours have).
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  for dir in "${PEER_DIRS[@]}"; do rm -rf "$dir"; done
  PEER_PIDS=()
  PEER_DIRS=()
}
