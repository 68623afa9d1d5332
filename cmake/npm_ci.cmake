# cmake -DNPM=npm -DSRC=dir-with-package-lock -DDEST=prefix -DSTAMP=file -P npm_ci.cmake
# Runs `npm ci` for SRC's package.json and package-lock.json in DEST. Install
# scripts are not run (swagger-ui-dist's dependency @scarf/scarf would phone
# home). When npm fails (no network) the build goes on with a warning and no
# stamp, so the next build tries again.
file(MAKE_DIRECTORY ${DEST})
file(COPY ${SRC}/package.json ${SRC}/package-lock.json DESTINATION ${DEST})
execute_process(COMMAND ${NPM} ci --ignore-scripts --no-audit --no-fund --loglevel=error
  WORKING_DIRECTORY ${DEST} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out
  TIMEOUT 600)
if(rc EQUAL 0)
  file(TOUCH ${STAMP})
else()
  file(REMOVE ${STAMP})
  message(WARNING "npm ci in ${DEST} failed (${rc}): ${out}\n"
    "flare_swagger_ui will answer 503 until a build installs it")
endif()
