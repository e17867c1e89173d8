#!/usr/bin/env bash
# A real SLURM cluster of N nodes on this one machine, for development and CI (run as root).
#
#   slurm/cluster.sh install            apt packages: slurm-wlm, munge, slurmdbd, mariadb-server
#   slurm/cluster.sh start [FLAVOUR]    a cluster of that flavour (slurm/flavours.tsv; default: the first)
#   slurm/cluster.sh flavours           each flavour's name and pytest marker, in the table's order
#   slurm/cluster.sh flavour            the flavour running now (exit 1 if none)
#   slurm/cluster.sh status             sinfo and the flavour; exit 0 only when every node is idle
#   slurm/cluster.sh logs               the tail of every daemon's log (for failing tests)
#   slurm/cluster.sh stop               stop every daemon this script started and forget the state
#
# One slurmctld, one `slurmd -N nodeK` per node (each on its own port, all on 127.0.0.1), and
# slurmdbd on a local MariaDB so that sacct works (submitit asks it how jobs ended).
# Nodes declare more CPUs than the host has (SlurmdParameters=config_overrides), and GPUs
# without device files, so `--nodes 4 --gpus 8` schedules here; tasks then run on the CPU.
# Flavours (slurm/flavours.tsv) make it like clusters configured otherwise: without GPU gres
# (a CPU partition, where asking for GPUs is refused) and without slurmdbd
# (AccountingStorageType=accounting_storage/none: sacct answers nothing).
# `start` is idempotent: a running cluster of the same shape and flavour is left alone.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # the daemons live there; a non-login root shell may lack it

CLUSTER=profiling-test
NAME_PREFIX=node
STATE=/var/spool/slurm-$CLUSTER
RUN=/run/slurm-$CLUSTER
LOGS=${SLURM_TEST_LOGS:-/var/log/slurm-$CLUSTER}
CONF_DIR=/etc/slurm
MARK="# managed by slurm/cluster.sh ($CLUSTER)"
DB_PASS=profiling-test-only
DB_NAME=slurm_acct_db_profiling_test  # slurmdbd does not quote it: no dashes
SLURMD_PORT_BASE=17000
FLAVOURS="$(dirname "$0")/flavours.tsv"

log() { echo "cluster.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

require_root() { [ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons)"; }

install() {
    require_root
    if command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null \
        && command -v munged >/dev/null; then
        log "packages already installed"
        return
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends \
        slurm-wlm slurmdbd munge mariadb-server mariadb-client procps >/dev/null
    log "installed $(slurmctld -V)"
}

our_config() { [ -f "$CONF_DIR/slurm.conf" ] && grep -qF "$MARK" "$CONF_DIR/slurm.conf"; }

write_config() {
    local name=$1 nodes=$2 cpus=$3 gpus=$4 accounting=$5 host
    host=$(hostname)
    mkdir -p "$CONF_DIR" "$STATE" "$RUN" "$LOGS"
    if [ -f "$CONF_DIR/slurm.conf" ] && ! our_config; then
        die "$CONF_DIR/slurm.conf exists and is not ours; refusing to overwrite a real cluster's config"
    fi
    cat >"$CONF_DIR/slurm.conf" <<EOF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire also sets how long a requeued job waits before it may start again (default
# 120 s): preempted test jobs come back within seconds instead of minutes.
AuthInfo=cred_expire=10
# A state folder of its own: slurmctld refuses state saved under another ClusterName.
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd-%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups on this machine: track processes by parent, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
$([ "$gpus" = yes ] && echo "GresTypes=gpu")
# Small, fast test cluster: schedule often, forget finished jobs quickly, kill stragglers fast.
SchedulerParameters=sched_interval=2,bf_interval=2
MessageTimeout=20
KillWait=5
InactiveLimit=0
MinJobAge=60
$(if [ "$accounting" = yes ]; then
    printf '%s\n' JobAcctGatherType=jobacct_gather/linux JobAcctGatherFrequency=30 \
        AccountingStorageType=accounting_storage/slurmdbd AccountingStorageHost=127.0.0.1 \
        AccountingStoreFlags=job_comment
else
    printf '%s\n' JobAcctGatherType=jobacct_gather/none AccountingStorageType=accounting_storage/none
fi)
JobRequeue=1
NodeName=${NAME_PREFIX}[1-$nodes] NodeHostname=$host NodeAddr=127.0.0.1 Port=[$((SLURMD_PORT_BASE + 1))-$((SLURMD_PORT_BASE + nodes))] CPUs=$cpus $([ "$gpus" = yes ] && echo "Gres=gpu:$cpus ")State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    # GPUs need device files; character devices behaving like /dev/null stand in for them.
    local gpu
    if [ "$gpus" = yes ]; then
        mkdir -p "$STATE/fake-gpus"
        for gpu in $(seq 0 $((cpus - 1))); do
            [ -c "$STATE/fake-gpus/gpu$gpu" ] || mknod "$STATE/fake-gpus/gpu$gpu" c 1 3
        done
        cat >"$CONF_DIR/gres.conf" <<EOF
$MARK
AutoDetect=off
NodeName=${NAME_PREFIX}[1-$nodes] Name=gpu File=$STATE/fake-gpus/gpu[0-$((cpus - 1))]
EOF
    else
        rm -f "$CONF_DIR/gres.conf"
    fi
    echo "$name" >"$STATE/flavour"
    # No cgroup.conf: with linuxproc and task/none nothing asks for cgroups.
    ! { [ -f "$CONF_DIR/cgroup.conf" ] && grep -qF "$MARK" "$CONF_DIR/cgroup.conf"; } || rm -f "$CONF_DIR/cgroup.conf"
    cat >"$CONF_DIR/slurmdbd.conf" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
LogFile=$LOGS/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
EOF
    chmod 600 "$CONF_DIR/slurmdbd.conf"
    # Node names must resolve: MASTER_ADDR is the first node's name.
    local i
    for i in $(seq 1 "$nodes"); do
        grep -qE "^127\.0\.0\.1[[:space:]].*\b$NAME_PREFIX$i\b" /etc/hosts || echo "127.0.0.1 $NAME_PREFIX$i" >>/etc/hosts
    done
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { logs; die "timed out after ${seconds}s waiting for $what"; }
        sleep 0.5
    done
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
    if pgrep -x munged >/dev/null; then return; fi
    [ -f /etc/munge/munge.key ] || { mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null || \
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; }
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- /usr/sbin/munged
    wait_for 20 munged sh -c 'munge -n | unmunge'
}

start_database() {
    if ! mysqladmin ping >/dev/null 2>&1; then
        mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
        [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >/dev/null
        (setsid mariadbd-safe --skip-networking=0 --bind-address=127.0.0.1 >"$LOGS/mariadb.out" 2>&1 &)
        wait_for 60 mariadb mysqladmin ping
    fi
    # Fresh accounting for a fresh cluster: job ids restart at 1, and sacct must not mix them
    # with an earlier cluster's jobs of the same ids.
    mysql -e "DROP DATABASE IF EXISTS \`$DB_NAME\`;
              CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
              GRANT ALL ON \`$DB_NAME\`.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
}

start_slurmdbd() {
    running "$RUN/slurmdbd.pid" || slurmdbd
    wait_for 60 slurmdbd sacctmgr -n list cluster
    sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
}

all_idle() {
    local nodes=$1 idle
    idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle" {n++} END {print n + 0}')
    [ "$idle" -ge "$nodes" ]
}

flavours() { awk -F '\t' '!/^#/ && NF { print $1 "\t" $6 }' "$FLAVOURS"; }

start() {
    require_root
    [ $# -le 1 ] || die "usage: cluster.sh start [FLAVOUR], one of: $(flavours | cut -f1 | paste -sd ' ')"
    local name=${1:-$(flavours | head -n 1 | cut -f1)} row nodes cpus gpus accounting
    row=$(awk -F '\t' -v name="$name" '!/^#/ && $1 == name' "$FLAVOURS")
    [ -n "$row" ] || die "no flavour '$name' in $FLAVOURS; one of: $(flavours | cut -f1 | paste -sd ' ')"
    IFS=$'\t' read -r _ nodes cpus gpus accounting _ <<<"$row"
    install
    local flavour="$name: $nodes nodes x $cpus cpus, gpus=$gpus accounting=$accounting"
    if our_config && running "$RUN/slurmctld.pid" && [ "$(cat "$STATE/flavour" 2>/dev/null)" = "$name" ] \
        && all_idle "$nodes"; then
        log "already running: $flavour"
        return
    fi
    stop_daemons
    write_config "$name" "$nodes" "$cpus" "$gpus" "$accounting"
    rm -rf "$STATE/ctld"
    start_munge
    if [ "$accounting" = yes ]; then
        start_database
        start_slurmdbd
    fi
    slurmctld
    wait_for 60 slurmctld scontrol ping
    for i in $(seq 1 "$nodes"); do
        mkdir -p "$STATE/slurmd-$NAME_PREFIX$i"
        slurmd -N "$NAME_PREFIX$i" || { logs; die "slurmd -N $NAME_PREFIX$i did not start"; }
    done
    wait_for 90 "$nodes idle nodes" all_idle "$nodes"
    log "up: $flavour (logs in $LOGS)"
    sinfo -N
}

flavour() {  # the running flavour, by the state start wrote, if slurmctld runs
    running "$RUN/slurmctld.pid" && [ -f "$STATE/flavour" ] && cat "$STATE/flavour"
}

status() {
    sinfo -N || return 1
    [ -f "$STATE/flavour" ] && echo "flavour: $(cat "$STATE/flavour")"
    local nodes
    nodes=$(sinfo -h -N -o '%N' | wc -l)
    all_idle "$nodes"
}

logs() {
    local file
    for file in "$LOGS"/*.log; do
        [ -f "$file" ] || continue
        echo "===== $file"
        tail -n 40 "$file"
    done
}

slurm_processes() {
    local name
    for name in slurmd slurmctld slurmdbd slurmstepd; do pgrep -x "$name" >/dev/null && return 0; done
    return 1
}

stop_daemons() {
    local pid_file
    scancel --full --quiet --user=root 2>/dev/null || true
    for pid_file in "$RUN"/slurmd-*.pid "$RUN/slurmctld.pid" "$RUN/slurmdbd.pid"; do
        running "$pid_file" && kill "$(cat "$pid_file")" 2>/dev/null || true
    done
    local deadline=$((SECONDS + 20))
    while slurm_processes && [ $SECONDS -lt $deadline ]; do sleep 0.3; done
    local name
    for name in slurmd slurmctld slurmdbd slurmstepd; do pkill -9 -x "$name" 2>/dev/null || true; done
    rm -f "$RUN"/*.pid
}

stop() {
    require_root
    stop_daemons
    if mysqladmin ping >/dev/null 2>&1; then
        mysql -e "DROP DATABASE IF EXISTS \`$DB_NAME\`;" 2>/dev/null || true
        mysqladmin shutdown 2>/dev/null || true
    fi
    rm -rf "$STATE"
    log "stopped"
}

case "${1:-}" in
    install) install ;;
    start) shift; start "$@" ;;
    flavours) flavours ;;
    flavour) flavour ;;
    status) status ;;
    logs) logs ;;
    stop) stop ;;
    *) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
