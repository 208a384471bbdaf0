#!/bin/bash
# A one-node Slurm cluster on this machine, to try train.sbatch without a real cluster.
#   sudo apt-get install slurm-wlm munge            # Debian / Ubuntu
#   sudo examples/slurm/local_cluster.sh start       # prints the SLURM_CONF to export
#   export SLURM_CONF=/tmp/trainperf-slurm/slurm.conf
#   BENCH=tiny GPUS_PER_NODE=2 sbatch --nodes=1 --gpus-per-node=0 --cpus-per-task=2 --no-requeue \
#       examples/slurm/train.sbatch
#   sudo examples/slurm/local_cluster.sh stop
# It writes a minimal slurm.conf for this host (its CPUs and memory from `slurmd -C`) into
# $SLURM_LOCAL_DIR (default /tmp/trainperf-slurm; /etc/slurm is left alone), starts munged (with the
# key the munge package made), slurmctld and slurmd, and waits until the node is idle. Process
# tracking is proctrack/linuxproc and task/none, so nothing needs cgroups (containers often have no
# writable cgroup tree); no accounting database. Run as root: slurmd starts jobs as their user.
set -euo pipefail

DIR=${SLURM_LOCAL_DIR:-/tmp/trainperf-slurm}
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF

stop() {
    for pid in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munged.pid"; do
        if [ -s "$pid" ] && kill "$(cat "$pid")" 2>/dev/null; then
            echo "stopped $(basename "$pid" .pid)"
        fi
        rm -f "$pid"
    done
}

write_conf() {
    mkdir -p "$DIR/ctld" "$DIR/d"
    local node
    node=$(slurmd -C | head -n 1)                 # NodeName=<host> CPUs=.. RealMemory=..
    cat > "$CONF.tmp" <<EOF
# written by examples/slurm/local_cluster.sh: one node, no cgroups, no accounting
ClusterName=trainperf
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/d
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$CONF.tmp" "$CONF"
}

start_munge() {
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create
    if ! munge -n >/dev/null 2>&1; then
        runuser -u munge -- munged --pid-file=/run/munge/munged.pid
        cp /run/munge/munged.pid "$DIR/munged.pid"
    fi
    munge -n | unmunge >/dev/null
}

start() {
    [ "$(id -u)" = 0 ] || { echo "local_cluster.sh: run as root (slurmd starts jobs as their user)" >&2; exit 2; }
    command -v slurmctld >/dev/null || { echo "local_cluster.sh: install slurm-wlm and munge first" >&2; exit 2; }
    stop >/dev/null
    write_conf
    start_munge
    slurmctld -f "$CONF"
    slurmd -f "$CONF"
    for _ in $(seq 60); do
        if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
            echo "slurm is up: export SLURM_CONF=$CONF"
            return 0
        fi
        sleep 1
    done
    echo "local_cluster.sh: the node did not become idle in 60 s; logs in $DIR" >&2
    sinfo -N -l >&2 || true
    exit 1
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: local_cluster.sh [start|stop]" >&2; exit 2 ;;
esac
