#!/usr/bin/env bash
# Stop the test cluster start.sh started in SLURM_CI_DIR (/tmp/slurm-ci): cancel its jobs, then
# end exactly the daemons named in its pid files (slurmd per node, slurmctld, and munged only if
# start.sh started it). Nothing is killed by name. Idempotent: with nothing running it does nothing.
#   --restart   leave munged and /etc/slurm/slurm.conf alone (start.sh restarting the cluster)
set -uo pipefail

DIR=${SLURM_CI_DIR:-/tmp/slurm-ci}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"
RESTART=0
[ "${1:-}" = --restart ] && RESTART=1
say() { echo "slurm-ci: $*" >&2; }
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF

# 1. Cancel every job while the controller is up, so slurmstepd and the tasks exit on their own.
if [ -f "$CONF" ] && alive_pidfile "$DIR/slurmctld.pid" slurmctld; then
  # A heterogeneous job shows one row per component ("57+0", "57+1"): cancel it by its base id.
  jobs=$(timeout 5 squeue -h -o '%i' 2>/dev/null | sed 's/+.*//' | sort -u)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    timeout 10 scancel $jobs 2>/dev/null
    left=
    for _ in $(seq 100); do
      left=$(timeout 5 squeue -h -o '%i' 2>/dev/null)
      [ -z "$left" ] && break
      sleep 0.1
    done
    say "cancelled $(wc -l <<<"$jobs") job(s): $(tr '\n' ' ' <<<"$jobs")"
    [ -z "$left" ] || say "jobs still listed after 10 s (their daemons are stopped next): $(tr '\n' ' ' <<<"$left")"
  fi
fi

# 2. TERM the daemons we started (nodes first, then the controller, then munged), wait up to
#    10 s, KILL what is still alive.
pids=()
for f in "$DIR"/slurmd.*.pid; do
  [ -f "$f" ] && alive_pidfile "$f" slurmd && pids+=("$(cat "$f")")
done
alive_pidfile "$DIR/slurmctld.pid" slurmctld && pids+=("$(cat "$DIR/slurmctld.pid")")
if [ "$RESTART" = 0 ] && alive_pidfile "$DIR/munged.pid.ours" munged; then
  pids+=("$(cat "$DIR/munged.pid.ours")")
fi
if [ "${#pids[@]}" -gt 0 ]; then
  kill -TERM "${pids[@]}" 2>/dev/null
  for _ in $(seq 200); do
    left=()
    for p in "${pids[@]}"; do alive "$p" && left+=("$p"); done
    [ "${#left[@]}" = 0 ] && break
    sleep 0.05
  done
  if [ "${#left[@]}" -gt 0 ]; then
    say "still alive after 10 s, sending SIGKILL: ${left[*]}"
    kill -KILL "${left[@]}" 2>/dev/null
  fi
fi
rm -f "$DIR"/slurmd.*.pid "$DIR/slurmctld.pid"
[ "$RESTART" = 0 ] && rm -f "$DIR/munged.pid.ours"

# 3. The /etc copy goes only if start.sh wrote it for this state dir.
if [ "$RESTART" = 0 ] && [ -f /etc/slurm/slurm.conf ] \
   && [ "$(head -n1 /etc/slurm/slurm.conf)" = "$MARKER $DIR" ]; then
  rm -f /etc/slurm/slurm.conf
fi
[ "${#pids[@]}" -gt 0 ] && say "stopped ${#pids[@]} daemon(s) of $DIR"
exit 0
