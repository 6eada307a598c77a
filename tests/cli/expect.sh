#!/usr/bin/env bash
# expect.sh CODE PATTERN COMMAND...: runs COMMAND and passes only if it exits with CODE and its
# output (stdout and stderr) matches the extended regular expression PATTERN.
code=$1 pattern=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne "$code" ]; then echo "expected exit code $code, got $rc"; echo "0 passed, 1 failed"; exit 1; fi
if ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then echo "output does not match: $pattern"; echo "0 passed, 1 failed"; exit 1; fi
echo "1 passed, 0 failed"
