#!/usr/bin/env bash
# check_bad_inputs_doc.sh SOURCE_DIR: keeps docs/bad_inputs.md true to the tests. Fails when
#  - a bad-input CLI test (a ct_cli_test line of tests/CMakeLists.txt expecting exit 1 or 2, or a case
#    of tests/cli/bad_input.sh) is missing from the table, or
#  - the table names a test that does not exist (cli.*, unit.test_*, oracle.test_*, mpi.*).
src=$1
doc=$src/docs/bad_inputs.md
lists=$src/tests/CMakeLists.txt
fail=0
[ -f "$doc" ] || { echo "no $doc"; echo "0 passed, 1 failed"; exit 1; }

# Every CLI test: ct_cli_test(NAME CODE ...), the bad_input.sh cases and this check.
all_cli=$(sed -nE 's/^ *ct_cli_test\(([a-z0-9_]+) +([0-9]+).*/\1 \2/p' "$lists")
bad=$(awk '$2 != 0 {print "cli." $1}' <<<"$all_cli")
bad+=$'\n'$("$src/tests/cli/bad_input.sh" --list | sed 's/^/cli.bad_input./')
known=$(awk '{print "cli." $1}' <<<"$all_cli")$'\n'"$bad"$'\ncli.bad_inputs_doc'

mentioned=$(grep -oE '`(cli|unit|oracle|mpi|example|soak|install)\.[A-Za-z0-9_.]+`' "$doc" | tr -d '`' | sort -u)
for t in $bad; do
  grep -qxF "$t" <<<"$mentioned" || { echo "docs/bad_inputs.md lacks $t"; fail=1; }
done
for t in $mentioned; do
  case $t in
    cli.*) grep -qxF "$t" <<<"$known" || { echo "docs/bad_inputs.md names $t, which is not a test"; fail=1; } ;;
    unit.*) [ -f "$src/tests/unit/${t#unit.}.c" ] || { echo "docs/bad_inputs.md names $t: no tests/unit/${t#unit.}.c"; fail=1; } ;;
    oracle.*) [ -f "$src/tests/oracle/${t#oracle.}.py" ] || { echo "docs/bad_inputs.md names $t: no tests/oracle/${t#oracle.}.py"; fail=1; } ;;
    *) # mpi.NAME[_npN], example.NAME, soak.NAME: the name (without a world size) is in tests/CMakeLists.txt
      base=${t#*.}
      base=${base%_np[0-9]}
      grep -qE "(^|[^a-z0-9_])$base([^a-z0-9_]|\$)" "$lists" || { echo "docs/bad_inputs.md names $t, not in tests/CMakeLists.txt"; fail=1; } ;;
  esac
done
n=$(wc -w <<<"$bad")
if [ "$fail" -eq 0 ]; then
  echo "docs/bad_inputs.md names all $n bad-input CLI tests, and only tests that exist"
  echo "1 passed, 0 failed"
  exit 0
fi
echo "0 passed, 1 failed"
exit 1
