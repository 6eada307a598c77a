# Writes the man page ctrainer.1 from the CLI's own help: `ctrainer --help`, then `<command> --help` for
# every command it lists, and one level deeper where a command lists commands of its own (data
# convert, data tokenize). So the page never disagrees with the program. Writes OUT.stamp when done.
#
#   cmake -DCTRAINER=path/to/ctrainer -DOUT=ctrainer.1 -DVERSION=0.1.0 -P CtrainerManPage.cmake
foreach(v CTRAINER OUT VERSION)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "CtrainerManPage.cmake: -D${v}=... is required")
  endif()
endforeach()

# The commands a help text lists: the lines "  name  description" after "commands:".
function(ct_listed_commands text out)
  string(REPLACE "\n" ";" lines "${text}")
  set(in_list FALSE)
  set(names)
  foreach(line IN LISTS lines)
    if(line MATCHES "^commands:")
      set(in_list TRUE)
    elseif(in_list AND line MATCHES "^  ([a-z][a-z0-9_-]*)  ")
      list(APPEND names "${CMAKE_MATCH_1}")
    elseif(in_list AND NOT line MATCHES "^  ")
      set(in_list FALSE)
    endif()
  endforeach()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

# Help text as roff that prints as it is: no-fill, backslashes escaped, no line read as a request.
function(ct_roff_verbatim text out)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  string(REGEX REPLACE "\n+$" "" text "${text}")
  set(${out} ".nf\n${text}\n.fi\n" PARENT_SCOPE)
endfunction()

function(ct_help out)
  execute_process(COMMAND ${CTRAINER} ${ARGN} --help OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(APPEND text "${err}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# A program that cannot run here (a library it loads is found only through an environment the build
# does not have) costs the man page, not the build: warn, leave no page, and write the stamp.
ct_help(top)
ct_listed_commands("${top}" commands)
if(NOT commands)
  message(WARNING "ctrainer.1 not written: `${CTRAINER} --help` did not run or listed no commands:\n${top}")
  file(REMOVE "${OUT}")
  file(WRITE "${OUT}.stamp" "")
  return()
endif()
ct_roff_verbatim("${top}" top_roff)
set(page ".\\\" Generated from the --help texts of ctrainer ${VERSION} by cmake/CtrainerManPage.cmake.\n")
string(APPEND page ".TH CTRAINER 1 \"\" \"ctrainer ${VERSION}\" \"User Commands\"\n"
                   ".SH NAME\nctrainer \\- train, evaluate and run models with a training framework in C\n"
                   ".SH SYNOPSIS\n.B ctrainer\n.I command\n[options]\n.SH DESCRIPTION\n${top_roff}"
                   ".SH COMMANDS\n")
foreach(cmd IN LISTS commands)
  ct_help(text ${cmd})
  ct_roff_verbatim("${text}" roff)
  string(APPEND page ".SS ctrainer ${cmd}\n${roff}")
  ct_listed_commands("${text}" subcommands)
  foreach(sub IN LISTS subcommands)
    ct_help(subtext ${cmd} ${sub})
    ct_roff_verbatim("${subtext}" roff)
    string(APPEND page ".SS ctrainer ${cmd} ${sub}\n${roff}")
  endforeach()
endforeach()
string(APPEND page ".SH EXIT STATUS\n0 success, 1 a failure while running, 2 a usage or configuration error.\n"
                   ".SH SEE ALSO\nThe README and docs/ of the ctrainer sources: docs/config.md (run configs and "
                   "every training argument), docs/ARCHITECTURE.md.\n")
file(WRITE "${OUT}.tmp" "${page}")
file(RENAME "${OUT}.tmp" "${OUT}")
file(WRITE "${OUT}.stamp" "")
