# Swagger UI for flare_swagger_ui (docs/openapi.md): the npm package
# swagger-ui-dist, pinned by web/swagger-ui/package-lock.json, installed at
# build time into the build directory (never committed). Without npm the
# build still succeeds and the docs routes answer 503 saying so.
option(FLARE_SWAGGER_UI "Install Swagger UI's files with npm at build time" ON)
set(FLARE_SWAGGER_UI_PREFIX ${PROJECT_BINARY_DIR}/npm/swagger-ui)
set(FLARE_SWAGGER_UI_DIR ${FLARE_SWAGGER_UI_PREFIX}/node_modules/swagger-ui-dist)
find_program(FLARE_NPM npm)
if(FLARE_SWAGGER_UI AND FLARE_NPM)
  set(stamp ${FLARE_SWAGGER_UI_PREFIX}/installed.stamp)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DNPM=${FLARE_NPM} -DSRC=${PROJECT_SOURCE_DIR}/web/swagger-ui
      -DDEST=${FLARE_SWAGGER_UI_PREFIX} -DSTAMP=${stamp} -P ${PROJECT_SOURCE_DIR}/cmake/npm_ci.cmake
    DEPENDS ${PROJECT_SOURCE_DIR}/web/swagger-ui/package.json
      ${PROJECT_SOURCE_DIR}/web/swagger-ui/package-lock.json ${PROJECT_SOURCE_DIR}/cmake/npm_ci.cmake
    COMMENT "npm ci: swagger-ui-dist for flare_swagger_ui"
    VERBATIM)
  add_custom_target(flare_swagger_ui_files ALL DEPENDS ${stamp})
elseif(FLARE_SWAGGER_UI)
  unset(FLARE_NPM CACHE) # look again on the next configure, after the install
  message(WARNING "npm not found: flare_swagger_ui (/docs) will answer 503 'Swagger UI is not "
    "installed' (tools/deps.sh test installs npm)")
endif()
# Where the library looks at run time unless told otherwise (opts.dir, then
# the FLARE_SWAGGER_UI_DIR environment variable).
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/web/swagger.c PROPERTIES
  COMPILE_DEFINITIONS "FLARE_SWAGGER_UI_BUILD_DIR=\"${FLARE_SWAGGER_UI_DIR}\"")
