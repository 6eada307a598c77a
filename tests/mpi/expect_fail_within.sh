#!/usr/bin/env bash
# expect_fail_within.sh SECONDS COMMAND...: runs COMMAND and passes only if it exits non-zero within
# SECONDS (a job with a failed rank must end, and end with an error, not hang). Prints the exit code
# and the wall time.
limit=$1
shift
start=$(date +%s.%N)
timeout --kill-after=10 "$limit" "$@"
rc=$?
took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "still running after $limit s (killed after $took s): a failed rank left the others hanging"
    echo "0 passed, 1 failed"
    exit 1
fi
if [ "$rc" -eq 0 ]; then
    echo "exited 0 after $took s, expected a failure"
    echo "0 passed, 1 failed"
    exit 1
fi
echo "exited with code $rc after $took s (limit $limit s)"
echo "1 passed, 0 failed"
