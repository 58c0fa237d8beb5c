#!/usr/bin/env bash
# Measures a real `nymph relay` process on 10,000 FIFO pairs: time and CPU
# to have every pair pumped, idle CPU (IDLE_S, default 20 s, after SETTLE_S,
# default 6 s), RSS, open fds. With BUSY=1, every pair first carries one
# frame to a real upstream in its own process (relay/testdata/pairdriver,
# 100 daemons at a time), so what is measured is pairs that have carried
# traffic, then gone idle.
#   go build -o /tmp/nymph ./cmd/nymph && relay/testdata/idle10k.sh /tmp/nymph
#   BUSY=1 relay/testdata/idle10k.sh /tmp/nymph
set -euo pipefail
nymph=${1:?usage: [BUSY=1] idle10k.sh PATH-TO-NYMPH [PAIRS]}
pairs=${2:-10000}
port=${PORT:-18099}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/pipes"
printf 'idle-bench-token\n' > "$work/token"
chmod 600 "$work/token"
(cd "$work/pipes" && seq -f 'm%05g' 0 $((pairs - 1)) | xargs mkdir &&
	seq -f 'm%05g' 0 $((pairs - 1)) | sed 's|.*|&/req.fifo &/resp.fifo|' | xargs mkfifo -m 600)
upstream=http://127.0.0.1:9
if [ -n "${BUSY:-}" ]; then
	here=$(cd "$(dirname "$0")" && pwd)
	(cd "$here/../.." && go build -o "$work/pairdriver" ./relay/testdata/pairdriver)
	"$work/pairdriver" upstream > "$work/upstream.url" &
	pids+=($!)
	until [ -s "$work/upstream.url" ]; do sleep 0.02; done
	upstream=$(cat "$work/upstream.url")
fi
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
start=$(date +%s.%N)
"$nymph" relay --prefix "$work/pipes" --upstream "$upstream" --token-file "$work/token" \
	--status-listen "127.0.0.1:$port" --log-level warn &
pid=$!
pids+=($pid)
until curl -sf "127.0.0.1:$port/status" 2>/dev/null | grep -q "\"pumps\": $pairs"; do sleep 0.02; done
end=$(date +%s.%N)
echo "discovery_s=$(echo "$end - $start" | bc) discovery_cpu_s=$(echo "scale=2; $(cpu $pid) / $tick" | bc)"
if [ -n "${BUSY:-}" ]; then
	c0=$(cpu $pid)
	"$work/pairdriver" drive "$work/pipes"
	echo "drive_cpu_s=$(echo "scale=2; ($(cpu $pid) - $c0) / $tick" | bc)"
	grep -E 'VmRSS|VmHWM' "/proc/$pid/status" | tr -s ' \t' ' ' | sed 's/^/after drive: /'
fi
# Idle is measured after the first rescan for other hosts' directories
# (5 s after start); the next one comes 3 ms per machine later (30 s at
# 10,000), so the default window shows the steady state between rescans.
settle=${SETTLE_S:-6}
idle=${IDLE_S:-20}
sleep "$settle"
c0=$(cpu $pid)
sleep "$idle"
echo "idle_cpu_percent=$(echo "scale=3; ($(cpu $pid) - $c0) * 100 / $tick / $idle" | bc) over ${idle}s"
grep -E 'VmRSS|VmHWM|Threads' "/proc/$pid/status" | tr -s ' \t' ' '
echo "fds=$(ls "/proc/$pid/fd" | wc -l)"
curl -sf "127.0.0.1:$port/status" | grep -E '"(pumps|unheld_reply_pipes|replies)"' | tr -d ' \n'; echo
kill -TERM $pid
wait $pid && echo "exit=0"
