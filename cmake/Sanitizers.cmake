# TESSERA_SANITIZE="address;undefined" or "thread": applies to everything we build.
if(TESSERA_SANITIZE)
  string(REPLACE ";" "," _san "${TESSERA_SANITIZE}")
  message(STATUS "tessera: sanitizers ${_san}")
  add_compile_options(-fsanitize=${_san} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=${_san})
endif()
