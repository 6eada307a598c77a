#!/bin/bash
# ctest cli.help_every_command: every command `ctrainer --help` lists (and every command those list in
# turn, such as data convert) answers --help with exit code 0 and a usage line naming itself on
# stdout. The list comes from the program, so a new command is checked as soon as it is listed.
#
#   test_help.sh path/to/ctrainer
set -u
[ $# -eq 1 ] || { echo "usage: $0 CTRAINER" >&2; exit 2; }
CT=$1
failures=0 checked=0

# The commands a help text lists: lines "  name  description" after a line "commands:".
listed() {
    awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1; next } on && !/^  / { on = 0 }'
}

# check CMD...: `ctrainer CMD... --help` exits 0 and prints "usage: ctrainer CMD..."; recurses into
# the commands it lists.
check() {
    local out rc
    out=$("$CT" "$@" --help 2>/dev/null)
    rc=$?
    checked=$((checked + 1))
    if [ $rc -ne 0 ]; then
        echo "FAIL: ctrainer $* --help exits $rc"
        failures=$((failures + 1))
    elif ! grep -q "^usage: ctrainer $* " <<<"$out" && ! grep -qx "usage: ctrainer $*" <<<"$out"; then
        echo "FAIL: ctrainer $* --help prints no 'usage: ctrainer $* ...' line on stdout"
        failures=$((failures + 1))
    else
        echo "ok: ctrainer $* --help"
    fi
    local sub
    for sub in $(listed <<<"$out"); do
        check "$@" "$sub"
    done
}

top=$("$CT" --help) || { echo "FAIL: ctrainer --help exits non-zero"; exit 1; }
commands=$(listed <<<"$top")
[ -n "$commands" ] || { echo "FAIL: ctrainer --help lists no commands"; exit 1; }
for cmd in $commands; do
    check "$cmd"
done
echo "$checked commands checked, $failures failed"
[ $failures -eq 0 ]
