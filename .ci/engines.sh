#!/usr/bin/env bash
# Real engines for the engine tests: a single-node SLURM cluster (munge,
# slurmctld, slurmd; ClusterName=nymphtest) and a private docker engine
# with a local busybox image `bb:latest`, plus gVisor's runsc registered as a
# docker runtime when Debian ships it and it actually runs here.
#
#   bash .ci/engines.sh start   install what is missing, start, wait until ready
#   bash .ci/engines.sh env     print the test environment, for `eval`
#   bash .ci/engines.sh stop    stop what `start` started (by PID), nothing else
#
# `start` is idempotent: a daemon already running is left alone, and only
# what this script started is recorded in $NYMPH_ENGINES_DIR/pids and
# stopped by `stop`. The directory is short on purpose: a unix socket path
# must stay under 108 bytes.
set -euo pipefail

D=${NYMPH_ENGINES_DIR:-/tmp/nyeng}
PIDS=$D/pids
ENVFILE=$D/env
SLURM_CONF_PATH=/etc/slurm/slurm.conf
CONF_MARK='# written by .ci/engines.sh'
READY_TIMEOUT_S=${NYMPH_ENGINES_READY_TIMEOUT_S:-120}

log() { printf 'engines: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# --- install -----------------------------------------------------------------

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# candidate PKG: prints the version apt would install, empty for none.
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}' | grep -v '(none)' || true; }

apt_install() {
  # Package scripts must not start services: this script starts its own
  # daemons, by PID. policy-rc.d is removed again only if we created it.
  local made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "$@" || rc=$?
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  return "$rc"
}

install_packages() {
  local want=(slurm-wlm slurmctld slurmd slurm-client munge docker.io busybox-static)
  local missing=() p
  for p in "${want[@]}"; do installed "$p" || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    apt-get update -q -o DPkg::Lock::Timeout=600
  fi
  # runsc is optional: installed only when this Debian has a candidate.
  if ! installed runsc; then
    if [ -n "$(candidate runsc)" ]; then
      missing+=(runsc)
    else
      log "runsc: no candidate in apt (apt-cache policy runsc); gvisor tests will skip"
    fi
  fi
  [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
}

# --- process bookkeeping -------------------------------------------------------

# alive PIDFILE NAME: the pid in PIDFILE runs and its command name is NAME.
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(tr -dc 0-9 <"$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}

# record NAME PIDFILE: remember that this script started NAME.
record() { mkdir -p "$PIDS"; tr -dc 0-9 <"$2" >"$PIDS/$1.pid"; }

# wait_until DESC CMD...: poll CMD (0.2 s apart) until it succeeds.
wait_until() {
  local desc=$1 deadline=$((SECONDS + READY_TIMEOUT_S))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${READY_TIMEOUT_S}s waiting for $desc"
    sleep 0.2
  done
}

# --- munge ---------------------------------------------------------------------

start_munge() {
  local pidfile=/run/munge/munged.pid
  if alive "$pidfile" munged; then log "munged already running"; return; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  if [ ! -s /etc/munge/munge.key ]; then
    # munge's postinst normally creates the key; a bare install may not.
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  fi
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock "$pidfile"
  runuser -u munge -- /usr/sbin/munged
  wait_until "munged pid file" test -s "$pidfile"
  record munged "$pidfile"
  wait_until "munge credentials" sh -c 'munge -n | unmunge'
  log "munged started (pid $(cat "$PIDS/munged.pid"))"
}

# --- slurm ---------------------------------------------------------------------

slurm_conf() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  # A node announcing more memory than slurmd finds is drained; stay below.
  mem=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  cat <<EOF
$CONF_MARK
ClusterName=nymphtest
SlurmctldHost=$host
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

write_slurm_conf() {
  if [ -e "$SLURM_CONF_PATH" ] && ! grep -qxF "$CONF_MARK" "$SLURM_CONF_PATH"; then
    log "keeping the existing $SLURM_CONF_PATH (not written by this script)"
    return
  fi
  mkdir -p "$(dirname "$SLURM_CONF_PATH")"
  local want
  want=$(slurm_conf)
  if [ "$(cat "$SLURM_CONF_PATH" 2>/dev/null)" != "$want" ]; then
    printf '%s\n' "$want" >"$SLURM_CONF_PATH"
    CONF_CHANGED=1
  fi
}
CONF_CHANGED=0

node_state() { sinfo -h -N -o %t 2>/dev/null | head -n1; }

# slurm_node_up: the node answers and takes jobs (idle, or mix/alloc when a
# job of an earlier run is still on it).
slurm_node_up() {
  case "$(node_state)" in
    idle | mix | alloc | comp) return 0 ;;
  esac
  return 1
}

start_slurm() {
  mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  chown slurm:slurm /var/spool/slurmctld /var/log/slurm
  write_slurm_conf
  if alive /run/slurmctld.pid slurmctld; then
    log "slurmctld already running"
  else
    rm -f /run/slurmctld.pid
    /usr/sbin/slurmctld
    wait_until "slurmctld pid file" test -s /run/slurmctld.pid
    record slurmctld /run/slurmctld.pid
    log "slurmctld started (pid $(cat "$PIDS/slurmctld.pid"))"
  fi
  if alive /run/slurmd.pid slurmd; then
    log "slurmd already running"
  else
    rm -f /run/slurmd.pid
    /usr/sbin/slurmd
    wait_until "slurmd pid file" test -s /run/slurmd.pid
    record slurmd /run/slurmd.pid
    log "slurmd started (pid $(cat "$PIDS/slurmd.pid"))"
  fi
  wait_until "slurmctld to answer (/var/log/slurm/slurmctld.log)" sinfo -h
  if [ "$CONF_CHANGED" = 1 ]; then
    # Daemons that were already running read the new file on reconfigure.
    scontrol reconfigure || true
  fi
  # A node left down or drained by an earlier run comes back on request.
  case "$(node_state)" in
    down* | drain* | drng* | fail*) scontrol update nodename="$(hostname -s)" state=resume || true ;;
  esac
  wait_until "the SLURM node to be up (sinfo; /var/log/slurm/slurmd.log)" slurm_node_up
  log "slurm ready: $(sinfo -h -o '%P %a %D %t %N')"
}

# --- docker --------------------------------------------------------------------

DOCKER_SOCK=$D/docker.sock
export DOCKER_HOST=unix://$DOCKER_SOCK

# RUNSC_ARGS is the runsc runtimeArgs dockerd is configured with; runsc_try
# changes it when a container does not start. The Debian runsc (2022-12)
# already defaults to ptrace; it is spelled out so a newer default cannot
# change it. --network=host is runsc's own flag: the sandbox uses the network
# namespace docker gives the container (host or bridge) instead of gVisor's
# netstack; see runsc_try for why.
RUNSC_CANDIDATES=('["--platform=ptrace", "--network=host"]' '["--platform=ptrace"]')
RUNSC_ARGS=${RUNSC_CANDIDATES[0]}

write_daemon_json() {
  local runtimes='{}'
  if [ -x /usr/bin/runsc ]; then
    runtimes="{\"runsc\": {\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": $RUNSC_ARGS}}"
  fi
  printf '{\n  "runtimes": %s\n}\n' "$runtimes" >"$D/daemon.json.tmp"
  mv "$D/daemon.json.tmp" "$D/daemon.json"
}

# runsc_registered: dockerd's live runtimes carry the current RUNSC_ARGS.
runsc_registered() {
  docker info --format '{{json .Runtimes}}' | tr -d ' ' | grep -qF "\"runtimeArgs\":$(printf '%s' "$RUNSC_ARGS" | tr -d ' ')"
}

start_dockerd() {
  mkdir -p "$D/data" "$D/exec"
  write_daemon_json
  if alive "$D/dockerd.pid" dockerd; then
    log "dockerd already running"
  else
    rm -f "$D/dockerd.pid" "$DOCKER_SOCK"
    # setsid: dockerd must not die with the shell that started it.
    setsid /usr/sbin/dockerd --config-file "$D/daemon.json" \
      --data-root "$D/data" --exec-root "$D/exec" --pidfile "$D/dockerd.pid" \
      --shutdown-timeout 5 -H "$DOCKER_HOST" \
      </dev/null >>"$D/dockerd.log" 2>&1 &
    wait_until "dockerd pid file" test -s "$D/dockerd.pid"
    record dockerd "$D/dockerd.pid"
    log "dockerd started (pid $(cat "$PIDS/dockerd.pid")), log $D/dockerd.log"
  fi
  wait_until "dockerd to answer docker info ($D/dockerd.log)" docker info
}

import_busybox() {
  if docker image inspect bb:latest >/dev/null 2>&1; then return; fi
  local rootfs=$D/rootfs t
  rm -rf "$rootfs"
  mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/workspace"
  chmod 1777 "$rootfs/tmp"
  cp /bin/busybox "$rootfs/bin/busybox"
  for t in sh cat echo ls sleep id uname hostname true false env pwd mkdir touch kill ps; do
    ln -s busybox "$rootfs/bin/$t"
  done
  tar -C "$rootfs" -cf "$D/busybox.tar" .
  docker import "$D/busybox.tar" bb:latest >/dev/null
  rm -rf "$rootfs" "$D/busybox.tar"
  log "imported bb:latest"
}

# runsc_works: whether a container really runs under runsc here.
runsc_works() {
  [ -x /usr/bin/runsc ] || return 1
  timeout 120 docker run --rm --runtime=runsc bb:latest true >"$D/runsc-check.log" 2>&1
}

# runsc_try: register runsc with each candidate runtimeArgs in turn (dockerd
# re-reads runtimes on SIGHUP) until a container runs. --network=host comes
# first: without it runsc 2022-12 refuses to start on these machines ("cannot
# run with network enabled in root network namespace", whatever docker's
# --network is), and each refused start leaves a sandbox process behind.
runsc_try() {
  [ -x /usr/bin/runsc ] || return 1
  local args
  for args in "${RUNSC_CANDIDATES[@]}"; do
    RUNSC_ARGS=$args
    write_daemon_json
    if ! runsc_registered; then
      kill -HUP "$(cat "$D/dockerd.pid")"
      wait_until "dockerd to reload runsc $args" runsc_registered
    fi
    if runsc_works; then
      log "runsc works with runtimeArgs $args"
      return 0
    fi
    log "runsc with runtimeArgs $args: $(grep -m1 -i error "$D/runsc-check.log" || true)"
  done
  return 1
}

# --- env -----------------------------------------------------------------------

write_env() {
  local runsc=0
  if runsc_try; then
    runsc=1
  else
    log "runsc does not run here; see $D/runsc-check.log and $D/dockerd.log"
  fi
  {
    printf 'export NYMPH_TEST_SLURM=1\n'
    printf 'export DOCKER_HOST=%q\n' "$DOCKER_HOST"
    printf 'export NYMPH_TEST_DOCKER_IMAGE=bb:latest\n'
    if [ "$runsc" = 1 ]; then
      printf 'export NYMPH_TEST_RUNSC=1\n'
    else
      printf 'unset NYMPH_TEST_RUNSC\n'
    fi
    if [ "$SLURM_CONF_PATH" != /etc/slurm/slurm.conf ]; then
      printf 'export SLURM_CONF=%q\n' "$SLURM_CONF_PATH"
    fi
  } >"$ENVFILE.tmp"
  mv "$ENVFILE.tmp" "$ENVFILE"
}

# --- stop ----------------------------------------------------------------------

# stop_one NAME: SIGTERM the recorded pid if it still is NAME, wait for it
# to exit, SIGKILL after 30 s.
stop_one() {
  local name=$1 f=$PIDS/$1.pid pid deadline
  [ -e "$f" ] || return 0
  pid=$(tr -dc 0-9 <"$f")
  if alive "$f" "$name"; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 30))
    while [ -d "/proc/$pid" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    if [ -d "/proc/$pid" ]; then
      log "$name (pid $pid) ignored SIGTERM; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$f"
}

# stop_leftovers: containerd shims and runsc sandboxes detach from dockerd
# and outlive it (a refused runsc start leaves one). They are found by the
# private exec root in their argv, so nothing outside $D is touched.
stop_leftovers() {
  local p pids=() pid
  ! alive "$D/dockerd.pid" dockerd || return 0
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" != $$ ] || continue
    if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "$D/exec/"; then
      pids+=("$pid")
    fi
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  log "stopping ${#pids[@]} leftover shim/sandbox processes of $D/exec: ${pids[*]}"
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

# --- main ----------------------------------------------------------------------

cmd_start() {
  [ "$(id -u)" = 0 ] || die "start needs root (it installs packages and starts daemons)"
  mkdir -p "$D" "$PIDS"
  chmod 755 "$D"
  local t0=$SECONDS
  install_packages
  start_munge
  start_slurm
  start_dockerd
  import_busybox
  write_env
  log "ready in $((SECONDS - t0))s; eval \"\$(bash $0 env)\""
}

cmd_stop() {
  # Reverse order of start: jobs and containers go with their daemons.
  stop_one dockerd
  stop_leftovers
  stop_one slurmd
  stop_one slurmctld
  stop_one munged
  rm -f "$ENVFILE"
}

cmd_env() {
  [ -s "$ENVFILE" ] || die "no $ENVFILE: run 'bash $0 start' first"
  cat "$ENVFILE"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cmd_env ;;
  *) die "usage: $0 start|stop|env" ;;
esac
