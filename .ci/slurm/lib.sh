# shellcheck shell=bash
# Shared by start.sh and stop.sh (sourced, not run).

# First line of every config start.sh writes, followed by its state dir: stop.sh removes
# /etc/slurm/slurm.conf only when it carries this line for its own dir.
# shellcheck disable=SC2034  # used by start.sh and stop.sh
MARKER='# slurm-ci: written by .ci/slurm/start.sh for'

# alive PID [COMM]: the process exists, is not a zombie and (if given) is named COMM.
# PID 1 on the CI machines reaps orphans lazily, so an exited daemon lingers as state Z for
# seconds; it counts as dead. COMM guards against a stale pid file naming a reused pid.
alive() {
  local pid=$1 stat rest state
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  rest=${stat##*) }          # field 2 is "(comm)" and may hold spaces; the state follows it
  state=${rest%% *}
  [ "$state" != Z ] && [ "$state" != X ] || return 1
  [ -z "${2:-}" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

# alive_pidfile FILE COMM: the pid in FILE is alive and named COMM.
alive_pidfile() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  alive "$pid" "$2"
}
