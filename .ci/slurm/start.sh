#!/usr/bin/env bash
# Start a real Slurm cluster on 127.0.0.1 for tests and CI: Debian's slurmctld, one slurmd per
# emulated node (Debian builds slurmd with --enable-multiple-slurmd) and munged, without systemd
# or cgroups. Follows the measured recipe in SLURM-NOTES.md; stop.sh undoes exactly this.
#
# Knobs (environment):
#   SLURM_CI_DIR        state, logs, pids, slurm.conf            (/tmp/slurm-ci)
#   SLURM_CI_NODES      emulated nodes node1..nodeN              (4)
#   SLURM_CI_CPUS       CPUs per node (config_overrides)         (16)
#   SLURM_CI_MEM        RealMemory per node, MB                  (4000)
#   SLURM_CI_INSTALL    apt-get install the packages if missing  (1)
#   SLURM_CI_ETC        put the config at /etc/slurm/slurm.conf  (1)
#   SLURM_CI_TIMEOUT    seconds to wait for all nodes idle       (60)
#   SLURM_CI_CTLD_PORT  slurmctld port                           (16817)
#   SLURM_CI_NODE_PORT  port of node1; nodeK uses PORT+K-1       (17001)
#   SLURM_CI_SCHED      SchedulerParameters (heterogeneous jobs need a short bf_interval)
#                                              (batch_sched_delay=0,bf_interval=1)
# A second cluster can run beside the first with its own SLURM_CI_DIR, ports and SLURM_CI_ETC=0;
# its clients then need SLURM_CONF=$SLURM_CI_DIR/slurm.conf.
# Idempotent: when every daemon of this state dir is alive and the nodes answer, it does nothing.
set -euo pipefail

DIR=${SLURM_CI_DIR:-/tmp/slurm-ci}
NODES=${SLURM_CI_NODES:-4}
CPUS=${SLURM_CI_CPUS:-16}
MEM=${SLURM_CI_MEM:-4000}
INSTALL=${SLURM_CI_INSTALL:-1}
ETC=${SLURM_CI_ETC:-1}
TIMEOUT=${SLURM_CI_TIMEOUT:-60}
CTLD_PORT=${SLURM_CI_CTLD_PORT:-16817}
NODE_PORT=${SLURM_CI_NODE_PORT:-17001}
SCHED=${SLURM_CI_SCHED:-batch_sched_delay=0,bf_interval=1}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"

die() { echo "slurm-ci: $*" >&2; exit 1; }
say() { echo "slurm-ci: $*" >&2; }

case "$DIR" in /*) ;; *) die "SLURM_CI_DIR must be an absolute path (got '$DIR')." ;; esac
for knob in NODES CPUS MEM TIMEOUT CTLD_PORT NODE_PORT; do
  [[ ${!knob} =~ ^[0-9]+$ && ${!knob} -gt 0 ]] || die "SLURM_CI_$knob must be a positive integer."
done
# Accounting (slurmdbd + MariaDB, SLURM-NOTES section 6) is left out: nothing here calls sacct.
[ "${SLURM_CI_ACCOUNTING:-0}" = 0 ] || die "SLURM_CI_ACCOUNTING=1 is not supported by this start.sh (no slurmdbd); unset it."
[ "$(id -u)" = 0 ] || die "start.sh must run as root (it starts munged as user munge and slurmd as root)."

# --- 1. packages ------------------------------------------------------------------------------
PKGS=(slurmctld slurmd slurm-client munge)
missing() { for b in slurmctld slurmd srun sinfo munged; do command -v "$b" >/dev/null || return 0; done; return 1; }
if missing; then
  [ "$INSTALL" = 1 ] || die "Slurm is not installed and SLURM_CI_INSTALL=0; install: apt-get install ${PKGS[*]}."
  say "installing ${PKGS[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get install -y -q --no-install-recommends "${PKGS[@]}" </dev/null >"$1" 2>&1; }
  mkdir -p "$DIR/log"
  if ! apt_install "$DIR/log/apt-install.log"; then
    # Stale package lists are the usual cause; refresh them once and retry.
    apt-get update -q </dev/null >"$DIR/log/apt-update.log" 2>&1 \
      || die "apt-get update failed; see $DIR/log/apt-update.log."
    apt_install "$DIR/log/apt-install.log" \
      || die "apt-get install ${PKGS[*]} failed; see $DIR/log/apt-install.log."
  fi
  missing && die "apt-get install finished but a Slurm or munge program is still missing."
fi
help=$(slurmd -h 2>&1 || true)   # captured first: grep -q on a pipe would SIGPIPE under pipefail
if [ "$NODES" -gt 1 ] && ! grep -q -- '-N node' <<<"$help"; then
  die "this slurmd is built without multiple-slurmd support; run with SLURM_CI_NODES=1."
fi

# --- 2. already up? ---------------------------------------------------------------------------
mkdir -p "$DIR"/{log,spool,state}
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF
all_alive() {
  [ -f "$CONF" ] || return 1
  alive_pidfile "$DIR/slurmctld.pid" slurmctld || return 1
  local k
  for ((k = 1; k <= NODES; k++)); do alive_pidfile "$DIR/slurmd.node$k.pid" slurmd || return 1; done
  munge_ok
}
munge_ok() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }
# count_nodes REGEX: how many nodes sinfo reports in a state matching REGEX (empty if no answer).
count_nodes() {
  local out
  # -N lists a node once per partition: count distinct nodes.
  out=$(timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | sort -u) || return 0
  grep -cE " ($1)\$" <<<"$out" || true
}
nodes_idle() { [ "$(count_nodes idle)" = "$NODES" ]; }
nodes_up() { [ "$(count_nodes 'idle|alloc|mix|comp')" = "$NODES" ]; }
etc_ok() { [ "$ETC" != 1 ] || cmp -s "$CONF" /etc/slurm/slurm.conf; }
if all_alive && grep -qxF "$MARKER $DIR" "$CONF" && etc_ok && nodes_up; then
  say "already running (state in $DIR)"
  exit 0
fi
# A partial cluster (one daemon died) is stopped and started again from scratch.
if [ -f "$DIR/slurmctld.pid" ] || ls "$DIR"/slurmd.*.pid >/dev/null 2>&1; then
  SLURM_CI_DIR=$DIR bash "$HERE/stop.sh" --keep-munge
fi

# --- 3. configuration -------------------------------------------------------------------------
LAST_PORT=$((NODE_PORT + NODES - 1))
tmp=$(mktemp "$DIR/slurm.conf.XXXXXX")
cat >"$tmp" <<EOF
$MARKER $DIR
# Generated by .ci/slurm/start.sh; removed by stop.sh. A ${NODES}-node x ${CPUS}-CPU test cluster on 127.0.0.1.
ClusterName=ci
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
# No cgroups on the CI machines: track processes by parent pid, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The emulated nodes claim more CPUs than the hardware has.
SlurmdParameters=config_overrides
ReturnToService=2
# Impossible requests fail at once instead of pending forever.
EnforcePartLimits=ALL
# Heterogeneous jobs (csrun_wse) start only in the backfill pass: run it every second.
SchedulerParameters=$SCHED
MailProg=/bin/true
StateSaveLocation=$DIR/state
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdSpoolDir=$DIR/spool/slurmd.%n
SlurmdPidFile=$DIR/slurmd.%n.pid
SlurmdLogFile=$DIR/log/slurmd.%n.log
NodeName=node[1-$NODES] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$NODE_PORT-$LAST_PORT] CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=excl Nodes=ALL OverSubscribe=EXCLUSIVE MaxTime=INFINITE State=UP
EOF
[ "$NODES" = 1 ] && sed -i "s/^NodeName=.*/NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$NODE_PORT CPUs=$CPUS RealMemory=$MEM State=UNKNOWN/" "$tmp"
mv -f "$tmp" "$CONF"
chmod 644 "$CONF"

if [ "$ETC" = 1 ]; then
  # Plain srun/sinfo need /etc/slurm/slurm.conf; never overwrite a config we did not write.
  if [ -e /etc/slurm/slurm.conf ] && ! grep -q "^$MARKER" /etc/slurm/slurm.conf; then
    die "/etc/slurm/slurm.conf exists and was not written by start.sh; move it away or set SLURM_CI_ETC=0 and use SLURM_CONF=$CONF."
  fi
  mkdir -p /etc/slurm
  cp "$CONF" /etc/slurm/slurm.conf.ci-tmp && mv -f /etc/slurm/slurm.conf.ci-tmp /etc/slurm/slurm.conf
fi

# --- 4. daemons -------------------------------------------------------------------------------
if ! munge_ok; then
  install -d -o munge -g munge -m 0755 /run/munge
  [ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing; reinstall munge (apt-get install --reinstall munge)."
  runuser -u munge -- /usr/sbin/munged
  cp /run/munge/munged.pid "$DIR/munged.pid.ours"
  for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
  munge_ok || die "munged did not answer; see /var/log/munge/munged.log."
fi

# -c: start from a clean job state, so every run gets the same fresh cluster.
slurmctld -c -f "$CONF" || die "slurmctld did not start; see $DIR/log/slurmctld.log."
for ((k = 1; k <= NODES; k++)); do
  slurmd -f "$CONF" -N "node$k" || die "slurmd for node$k did not start; see $DIR/log/slurmd.node$k.log."
done

deadline=$((SECONDS + TIMEOUT))
until nodes_idle; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    sinfo -N 2>&1 | sed 's/^/slurm-ci:   /' >&2 || true
    die "the $NODES nodes were not idle within ${TIMEOUT}s; see $DIR/log/."
  fi
  sleep 0.05
done
say "cluster up: $NODES nodes x $CPUS CPUs, partitions debug and excl (state in $DIR)"
