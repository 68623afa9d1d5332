# Compiles one case of a compile test and checks the outcome:
#   cmake -DCC=<compiler> -DSRC=<file> -DINC=<include dir> -DCASE=<n> -DEXPECT=ok|fail
#         [-DDIAG=<regex>] -P expect.cmake
# EXPECT=ok: the case must compile. EXPECT=fail: it must not, and the
# compiler's message must match DIAG (so that a failure for another reason,
# a missing header or a typo, does not count as a pass).
execute_process(
  COMMAND ${CC} -std=c17 -fsyntax-only -Wall -Wextra -Werror -I${INC} -DCASE=${CASE} ${SRC}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(EXPECT STREQUAL "ok")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "case ${CASE} should compile but does not:\n${out}")
  endif()
else()
  if(rc EQUAL 0)
    message(FATAL_ERROR "case ${CASE} compiles but must not")
  endif()
  if(DEFINED DIAG AND NOT out MATCHES "${DIAG}")
    message(FATAL_ERROR "case ${CASE} fails, but not with /${DIAG}/:\n${out}")
  endif()
  message(STATUS "case ${CASE} refused as expected")
endif()
