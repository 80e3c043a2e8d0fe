# TESSERA_SANITIZE="address;undefined" or "thread": instruments every C/C++ target we build.
# add_compile_options here is directory-wide and runs before any add_subdirectory, so every
# library, binary and test inherits it (docs/building.md, "Sanitizer builds"). UBSan is fatal
# (-fno-sanitize-recover=undefined): a report aborts the process, so the test fails.
if(TESSERA_SANITIZE)
  string(REPLACE ";" "," _san "${TESSERA_SANITIZE}")
  if(NOT _san MATCHES "^(address|undefined|address,undefined|undefined,address|thread)$")
    message(FATAL_ERROR "TESSERA_SANITIZE='${TESSERA_SANITIZE}': use 'address;undefined', 'address', 'undefined' or 'thread'")
  endif()
  message(STATUS "tessera: sanitizers ${_san}")
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${_san};-fno-omit-frame-pointer>")
  if(_san MATCHES "undefined")
    add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>")
  endif()
  add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fsanitize=${_san}>")
endif()

# TESSERA_FUZZ=ON (clang): every library of the fuzz build carries libFuzzer's coverage
# instrumentation plus ASan+UBSan, so the fuzz targets (fuzz/) see the branches of the parsers
# they link; only the fuzz targets themselves link libFuzzer's main (-fsanitize=fuzzer).
if(TESSERA_FUZZ)
  if(TESSERA_SANITIZE)
    message(FATAL_ERROR "TESSERA_FUZZ=ON brings its own sanitizers: leave TESSERA_SANITIZE empty")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link,address,undefined;-fno-sanitize-recover=undefined;-fno-omit-frame-pointer>")
  add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fsanitize=address,undefined>")
endif()
