# Warnings on for our targets (not for third-party code): call tessera_warnings(target).
function(tessera_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
      -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough
      # STYLE.md asks for designated initializers that name only what differs from the defaults.
      -Wno-missing-field-initializers>)
endfunction()
