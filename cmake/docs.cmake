# docs.cmake — the API reference: `cmake --build build --target docs` runs
# Doxygen over the public headers (include/) into build/docs/html, and the
# test api_docs fails on any Doxygen warning (an undocumented function,
# struct field or enum value included). Both exist when doxygen is found.
find_package(Doxygen QUIET)
if(DOXYGEN_FOUND)
  configure_file(docs/Doxyfile.in ${PROJECT_BINARY_DIR}/docs/Doxyfile @ONLY)
  add_custom_target(docs
    COMMAND ${DOXYGEN_EXECUTABLE} ${PROJECT_BINARY_DIR}/docs/Doxyfile
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    COMMENT "API reference (Doxygen): ${PROJECT_BINARY_DIR}/docs/html/index.html"
    VERBATIM)
  if(BUILD_TESTING)
    add_test(NAME api_docs COMMAND ${DOXYGEN_EXECUTABLE} ${PROJECT_BINARY_DIR}/docs/Doxyfile
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(api_docs PROPERTIES FAIL_REGULAR_EXPRESSION "warning:|error:")
  endif()
else()
  message(STATUS "mixprec: doxygen not found: no `docs` target (API reference)")
endif()
