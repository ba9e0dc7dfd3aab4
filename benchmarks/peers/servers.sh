# The other lock services of benchmarks/compare, each on free loopback ports with a temp dir,
# started from Debian's packages and stopped by PID. Source it after scripts/lib.sh.
#   start_redis LABEL [redis-server flags]  sets REDIS_ADDR[LABEL], remembers the PID
#   start_zk                                sets ZK_ADDR
#   start_pg                                sets PG_DSN
#   stop_peers                              stops every server started here, by PID
# For the one-server-down row:
#   start_etcd_cluster                      three etcd members; sets ETCD3_ENDPOINTS, ETCD3_PIDS
#   etcd_leader                             prints the index (0-2) of the etcd leader
#   start_zk_ensemble                       three ZooKeeper servers; sets ZK3_ADDR, ZK3_PIDS
#   zk_leader                               prints the index (0-2) of the ZooKeeper leader
#   crash_restart_redis LABEL SECONDS       SIGKILLs that Redis, starts it again after SECONDS
#   crash_restart_pg SECONDS                the same for PostgreSQL (every backend with it)
# A start_* that cannot start its server says why and returns 1; the caller skips that peer.

PEER_PIDS=()
PEER_DIRS=()
declare -A REDIS_ADDR=() REDIS_PID=() REDIS_CMD=()
ZK_ADDR=""
PG_DSN=""
PG_PID=""
PG_CMD=""
ETCD3_ENDPOINTS=""
ETCD3_PIDS=()
ZK3_ADDR=""
ZK3_PIDS=()

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
  REDIS_CMD[$label]=$(printf '%q ' redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --maxclients 4096 \
    --logfile "$dir/redis.log" "$@")
  eval "${REDIS_CMD[$label]} &"
  REDIS_PID[$label]=$!
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
  PG_CMD=$(printf '%q ' "${as[@]}" "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" \
    -c listen_addresses=127.0.0.1 -c max_connections=1100)
  eval "$PG_CMD >>'$dir/postgres.log' 2>&1 &"
  PG_PID=$!
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

# --- the one-server-down row -------------------------------------------------------------------

# crash_restart_redis LABEL SECONDS: SIGKILL, then the same command again on the same port and
# directory after SECONDS (a supervisor's restart; systemd's default RestartSec is 100 ms).
crash_restart_redis() {
  local label=$1 port=${REDIS_ADDR[$1]##*:}
  kill -KILL "${REDIS_PID[$label]}" 2>/dev/null || true
  wait "${REDIS_PID[$label]}" 2>/dev/null || true
  sleep "$2"
  eval "${REDIS_CMD[$label]} &"
  REDIS_PID[$label]=$!
  PEER_PIDS+=($!)
  wait_for 20 answers "$port" 'PING\r\n' +PONG
}

# crash_restart_pg SECONDS: the postmaster and every backend SIGKILLed at once (as when the host
# dies: nobody is told), then the server started again on the same data (crash recovery).
crash_restart_pg() {
  local port
  port=$(sed -E 's/.*port=([0-9]+).*/\1/' <<<"$PG_DSN")
  pkill -KILL -P "$PG_PID" 2>/dev/null || true
  kill -KILL "$PG_PID" 2>/dev/null || true
  wait "$PG_PID" 2>/dev/null || true
  sleep "$1"
  eval "$PG_CMD >/dev/null 2>&1 &"
  PG_PID=$!
  PEER_PIDS+=($!)
  wait_for 60 pg_isready -q -h 127.0.0.1 -p "$port"
}

# start_etcd_cluster: three etcd members on loopback (etcd's defaults: 100 ms heartbeat, 1 s
# election timeout); ETCD3_ENDPOINTS is their client addresses, comma-separated.
start_etcd_cluster() {
  local dir i initial="" cport=() pport=() eps=()
  dir=$(mktemp -d -t coetcd-etcd3-XXXXXX)
  PEER_DIRS+=("$dir")
  for i in 0 1 2; do
    cport[i]=$(free_port)
    pport[i]=$(free_port)
    initial+="${initial:+,}m$i=http://127.0.0.1:${pport[i]}"
    eps+=("127.0.0.1:${cport[i]}")
  done
  ETCD3_PIDS=()
  for i in 0 1 2; do
    "${COETCD_ETCD:-/usr/bin/etcd}" --name "m$i" --data-dir "$dir/m$i" \
      --listen-client-urls "http://127.0.0.1:${cport[i]}" --advertise-client-urls "http://127.0.0.1:${cport[i]}" \
      --listen-peer-urls "http://127.0.0.1:${pport[i]}" --initial-advertise-peer-urls "http://127.0.0.1:${pport[i]}" \
      --initial-cluster "$initial" --initial-cluster-state new --logger zap --log-level warn \
      >"$dir/m$i.log" 2>&1 &
    ETCD3_PIDS+=($!)
    PEER_PIDS+=($!)
  done
  ETCD3_ENDPOINTS=$(IFS=,; echo "${eps[*]}")
  if ! wait_for 30 etcd_leader; then
    log "etcd cluster did not elect a leader; the members' last words:"
    tail -n 3 "$dir"/m*.log >&2 || true
    return 1
  fi
}

# etcd_leader: the index (0-2) in ETCD3_ENDPOINTS of the member that leads.
etcd_leader() {
  ETCDCTL_API=3 "${COETCD_ETCDCTL:-/usr/bin/etcdctl}" --endpoints="$ETCD3_ENDPOINTS" --dial-timeout=1s --command-timeout=2s \
    endpoint status -w json 2>/dev/null | python3 -c '
import json, sys
eps = sys.argv[1].split(",")
for s in json.load(sys.stdin):
    st = s["Status"]
    if st["leader"] == st["header"]["member_id"]:
        print(eps.index(s["Endpoint"].replace("http://", "")))
        sys.exit(0)
sys.exit(1)' "$ETCD3_ENDPOINTS"
}

# start_zk_ensemble: three ZooKeeper servers (the settings of start_zk, plus the ensemble's
# initLimit/syncLimit of ZooKeeper's sample config); ZK3_ADDR lists their client addresses.
start_zk_ensemble() {
  local jars=/usr/share/java
  if [ ! -f "$jars/zookeeper.jar" ] || ! command -v java >/dev/null; then
    log "zk skipped: ZooKeeper (package zookeeper) or java is not installed"
    return 1
  fi
  local dir i servers="" cport=() addrs=() q e
  dir=$(mktemp -d -t coetcd-zk3-XXXXXX)
  PEER_DIRS+=("$dir")
  for i in 1 2 3; do
    cport[i]=$(free_port)
    q=$(free_port)
    e=$(free_port)
    servers+="server.$i=127.0.0.1:$q:$e"$'\n'
    addrs+=("127.0.0.1:${cport[i]}")
  done
  ZK3_PIDS=()
  for i in 1 2 3; do
    mkdir -p "$dir/zk$i/data"
    echo "$i" >"$dir/zk$i/data/myid"
    cat >"$dir/zk$i/zoo.cfg" <<EOF
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/zk$i/data
clientPort=${cport[i]}
clientPortAddress=127.0.0.1
admin.enableServer=false
maxClientCnxns=0
4lw.commands.whitelist=ruok,srvr
$servers
EOF
    java -Xmx512m -cp "$jars/zookeeper.jar" \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zk$i/zoo.cfg" >"$dir/zk$i/zk.log" 2>&1 &
    ZK3_PIDS+=($!)
    PEER_PIDS+=($!)
  done
  ZK3_ADDR=$(IFS=,; echo "${addrs[*]}")
  if ! wait_for 90 zk_leader; then
    log "zk ensemble did not elect a leader (see $dir/zk*/zk.log)"
    return 1
  fi
}

# zk_leader: the index (0-2) in ZK3_ADDR of the member whose srvr says "Mode: leader", once
# the other two follow it.
zk_leader() {
  local i port mode leader="" followers=0 addrs
  IFS=, read -r -a addrs <<<"$ZK3_ADDR"
  for i in 0 1 2; do
    port=${addrs[i]##*:}
    mode=$( (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf srvr >&3 && timeout 2 cat <&3) 2>/dev/null |
      sed -n 's/^Mode: //p')
    case $mode in
      leader) leader=$i ;;
      follower) followers=$((followers + 1)) ;;
    esac
  done
  [ -n "$leader" ] && [ $followers -eq 2 ] && echo "$leader"
}
