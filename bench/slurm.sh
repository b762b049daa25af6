#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/slurm.sh [BUILD_DIR] [-- BENCH ARGS...] — `strata bench allreduce` under Slurm's PMIx launch,
# on a one-node Slurm this script starts and stops.
#
# It starts munged, slurmctld and slurmd (Debian's munge and slurm-wlm: scripts/deps.sh bench) as
# root, each with its configuration, key, sockets, state and logs in one temporary directory and
# on loopback ports only (nothing in /etc is read or written), then runs
#     srun --mpi=pmix -n 8 strata bench allreduce ...
# with no STRATA_* variable in the ranks' environment: the ranks find their world and rank 0's
# store through slurmd's PMIx server (src/boot/pmix.c), and STRATA_LOG=info has each say so. The
# node declares 8 CPUs whatever this host has (SlurmdParameters=config_overrides), so 8 ranks run on
# a small machine. Every daemon is stopped and the directory removed on exit, however it exits.
# The table goes to stdout, the logs to bench/results/slurm/.
#   RANKS=8 (srun -n), BYTES="-b 8 -e 64M -f 4" (the sweep), KEEP=1 keeps the temporary directory,
#   NODES=2 runs that many slurmd here, each one node to Slurm and PMIx: the job then spans nodes and
#   rank 0 serves the store on an address other hosts could reach (not loopback).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
strata=$(cd "$build" && pwd)/strata
ranks=${RANKS:-8}
nodes=${NODES:-1}
read -r -a sweep <<<"${BYTES:--b 8 -e 64M -f 4}"
[ $# -gt 0 ] && sweep=("$@")
[ -x "$strata" ] || { echo "slurm.sh: $strata not built" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "slurm.sh: slurmd must run as root" >&2; exit 2; }
for tool in munged slurmctld slurmd srun sinfo; do
  command -v "$tool" >/dev/null || { echo "slurm.sh: no $tool (scripts/deps.sh bench)" >&2; exit 2; }
done

tmp=$(mktemp -d -t strata-slurm.XXXXXX)
chmod 755 "$tmp"
results=$root/bench/results/slurm
mkdir -p "$results" "$tmp/state" "$tmp/spool" "$tmp/munge"
pids=()
stop() {
  # the step's slurmstepd ends with its job: let the job leave the queue before slurmd goes
  for _ in $(seq 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  cp "$tmp"/*.log "$results/" 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] && echo "slurm.sh: kept $tmp" >&2 || rm -rf "$tmp"
}
trap stop EXIT
trap 'exit 130' INT TERM

free_port() { # a TCP port nothing listens on
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# munge: a fresh key, its own socket
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 700 "$tmp/munge"; chmod 400 "$tmp/munge/munge.key"
socket=$tmp/munge/munge.socket
munged --force --key-file="$tmp/munge/munge.key" --socket="$socket" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munged.log" --seed-file="$tmp/munge/seed" \
  --foreground &
pids+=($!)
for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || { echo "slurm.sh: munged did not start: $(tail -3 "$tmp/munged.log")" >&2; exit 1; }

host=$(hostname -s)
ctld_port=$(free_port)
conf=$tmp/slurm.conf
# NODES > 1: that many slurmd on this host, each a node of its own to Slurm and PMIx (NodeHostname
# is this host, ports differ), so the job spans nodes as on a cluster
if [ "$nodes" = 1 ]; then
  names=$host
  node_lines="NodeName=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$ranks State=UNKNOWN"
else
  names=strata[1-$nodes]
  node_lines=""
  for i in $(seq "$nodes"); do
    node_lines+="NodeName=strata$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) "
    node_lines+="CPUs=$(( (ranks + nodes - 1) / nodes )) State=UNKNOWN"$'\n'
  done
fi
cat >"$conf" <<EOF
ClusterName=strata
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool/%n
TmpFS=$tmp/tmpfs/%n
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd-%n.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
$node_lines
PartitionName=local Nodes=$names Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$conf
slurmctld -D -i -f "$conf" >>"$tmp/slurmctld.log" 2>&1 &
pids+=($!)
for name in $(scontrol show hostnames "$names"); do
  mkdir -p "$tmp/spool/$name" "$tmp/tmpfs/$name" # each slurmd's own: its PMIx server's files too
  slurmd -D -N "$name" -f "$conf" >>"$tmp/slurmd-$name.log" 2>&1 &
  pids+=($!)
done
idle() { [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | wc -l)" = "$nodes" ]; }
for _ in $(seq 100); do idle && break; sleep 0.2; done
idle || { echo "slurm.sh: not all $nodes nodes came up idle: $(sinfo -N 2>&1 | tail -3)" >&2; exit 1; }

# the ranks' environment: no STRATA_* variable but the log level
for name in $(compgen -e | grep '^STRATA_'); do unset "$name"; done
echo "# srun --mpi=list: $(srun --mpi=list 2>&1 | tr -s '\n ' ' ')" >&2
echo "# $(srun --version), $nodes node(s) on $host, srun --mpi=pmix -N $nodes -n $ranks" >&2
status=0
STRATA_LOG=info timeout 600 srun --mpi=pmix -N "$nodes" -n "$ranks" "$strata" bench allreduce "${sweep[@]}" \
  >"$tmp/bench.out" 2>"$tmp/ranks.log" || status=$?
cat "$tmp/bench.out"
cp "$tmp/bench.out" "$results/bench.out"
found=$(grep -c "PMIx: rank .* of $ranks .* served by rank 0, found through PMIx" "$tmp/ranks.log" || true)
echo "# $found of $ranks ranks found the store through PMIx" \
  "($(grep -m1 -o 'namespace [^)]*' "$tmp/ranks.log" || echo 'no namespace'))"
fetched=$(grep -o 'PMIx: [0-9]* peer addresses fetched through PMIx, [0-9]* read from the store' \
  "$tmp/ranks.log" | awk '{f += $2; s += $9} END {printf "%d through PMIx, %d from the store", f, s}')
echo "# peer addresses: $fetched"
if [ "$status" != 0 ] || [ "$found" != "$ranks" ]; then
  echo "slurm.sh: srun exit $status: $(tail -5 "$tmp/ranks.log")" >&2
  exit 1
fi
