# Helpers that start one server each on a free loopback port, its files under a directory,
# for the benchmark scripts (sourced: `. scripts/servers.sh`). Each appends what to stop to
# "$work/pids" (the caller's temporary directory); `stop_servers` stops them all. As root:
# PostgreSQL runs as the postgres user. Facts behind the settings: /work/shared/servers.md.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_redis PORT DIR [ARGS...]: one redis-server without persistence, ready when it answers.
start_redis() {
  local p=$1 d=$2; shift 2
  mkdir -p "$d"
  redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$d" \
    --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log" "$@"
  for _ in $(seq 200); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.05; done
  redis-cli -p "$p" ping >/dev/null || { echo "redis-server on port $p did not start" >&2; return 1; }
  cat "$d/redis.pid" >>"$work/pids"
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

# stop_servers: everything the helpers started (a stopped one is continued first).
stop_servers() {
  local what
  [ -f "$work/pids" ] || return 0
  while read -r what; do
    case $what in
      pg:*) runuser -u postgres -- "$pg_bin/pg_ctl" -D "${what#pg:}" -m immediate stop >/dev/null 2>&1 ;;
      *) kill -CONT "$what" 2>/dev/null; kill "$what" 2>/dev/null ;;
    esac
  done <"$work/pids"
}
