#!/usr/bin/env bash
# Measures a real `nymph relay` process on 10,000 idle FIFO pairs: time and
# CPU to have every pair pumped, idle CPU over 10 s, RSS, open fds.
#   go build -o /tmp/nymph ./cmd/nymph && relay/testdata/idle10k.sh /tmp/nymph
set -euo pipefail
nymph=${1:?usage: idle10k.sh PATH-TO-NYMPH [PAIRS]}
pairs=${2:-10000}
port=${PORT:-18099}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/pipes"
printf 'idle-bench-token\n' > "$work/token"
chmod 600 "$work/token"
(cd "$work/pipes" && seq -f 'm%05g' 0 $((pairs - 1)) | xargs mkdir &&
	seq -f 'm%05g' 0 $((pairs - 1)) | sed 's|.*|&/req.fifo &/resp.fifo|' | xargs mkfifo -m 600)
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
start=$(date +%s.%N)
"$nymph" relay --prefix "$work/pipes" --upstream http://127.0.0.1:9 --token-file "$work/token" \
	--status-listen "127.0.0.1:$port" --log-level warn &
pid=$!
until curl -sf "127.0.0.1:$port/status" 2>/dev/null | grep -q "\"pumps\": $pairs"; do sleep 0.02; done
end=$(date +%s.%N)
echo "discovery_s=$(echo "$end - $start" | bc) discovery_cpu_s=$(echo "scale=2; $(cpu $pid) / $tick" | bc)"
sleep 1
c0=$(cpu $pid)
sleep 10
echo "idle_cpu_percent=$(echo "scale=3; ($(cpu $pid) - $c0) * 100 / $tick / 10" | bc)"
grep -E 'VmRSS|Threads' "/proc/$pid/status" | tr -s ' \t' ' '
echo "fds=$(ls "/proc/$pid/fd" | wc -l)"
kill -TERM $pid
wait $pid && echo "exit=0"
