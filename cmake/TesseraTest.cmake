# tessera_add_test(NAME name SOURCES a.cpp ... LIBS lib ... [LABELS unit|integration] [TIMEOUT s])
# One GoogleTest executable = one CTest test. Tests find ../shared through TESSERA_SHARED_DIR
# and built binaries through TESSERA_BIN_DIR.
function(tessera_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} tessera_testing GTest::gtest GTest::gtest_main)
  tessera_warnings(${T_NAME})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
    ENVIRONMENT "TESSERA_SHARED_DIR=${TESSERA_SHARED_DIR};TESSERA_BIN_DIR=${CMAKE_BINARY_DIR}/bin;TESSERA_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()
