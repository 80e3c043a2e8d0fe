# The layering check (docs/architecture.md "Modules"): which of our libraries each process may
# link, read from the build's own link lines, and which shared libraries it may load, read with
# ldd. Run by CTest as `cmake -DBUILD_DIR=... -DBIN_DIR=... -P check_layering.cmake`.
#
# Each rule (fields split by |, lists by commas): a binary; the tessera libraries it may link
# (any other libtessera_*.a on its link line fails); the shared libraries it must not load.
set(rules
  "tessera-scheduler|tessera_scheduler,tessera_scheduler_service,tessera_scheduler_options,tessera_metrics_http,tessera_common|hiredis,pcre2,zstd,cudart,cublas,nccl"
  "tessera-frontend|tessera_frontend,tessera_common,tessera_tokenizer,tessera_jinja,tessera_grammar,tessera_loaders,tessera_kvstore_client,tessera_http|hiredis,cudart,cublas,nccl"
  "tessera-kvstore|tessera_kvstore,tessera_kvstore_client,tessera_metrics_http,tessera_common|pcre2,cudart,cublas,nccl"
  # The C++ client library (clients/cpp): its own objects and common's wire codec, no archive of
  # ours, and neither OpenSSL, hiredis, PCRE2, zstd nor CUDA (a "lib:" rule: a shared library).
  "lib:tessera_client|tessera_client_objects,tessera_protocol|hiredis,pcre2,zstd,crypto,ssl,cudart,cublas,nccl"
  "tessera-worker|tessera_worker_options,tessera_worker,tessera_worker_cuda,tessera_worker_tp,tessera_kernels,tessera_kernels_cuda,tessera_loaders,tessera_tokenizer,tessera_grammar,tessera_preference,tessera_kvstore_client,tessera_metrics_http,tessera_common,tessera_placement|hiredis"
)

if(NOT BUILD_DIR OR NOT BIN_DIR)
  message(FATAL_ERROR "usage: cmake -DBUILD_DIR=<build> -DBIN_DIR=<build>/bin -P check_layering.cmake")
endif()

# The link line of an executable target: Ninja's build.ninja block, or Makefiles' link.txt.
function(link_line target out)
  set(line "")
  set(head "bin/${target}:")
  if(target MATCHES "^lib:(.*)$")  # a shared library: lib/lib<name>.so.<version>
    set(head "lib/lib${CMAKE_MATCH_1}\\.so[.0-9]*:")
    set(target "${CMAKE_MATCH_1}")
  endif()
  if(EXISTS "${BUILD_DIR}/build.ninja")
    file(STRINGS "${BUILD_DIR}/build.ninja" lines REGEX "^build ${head}|^  LINK_LIBRARIES = ")
    set(in_block FALSE)
    foreach(l IN LISTS lines)
      if(l MATCHES "^build ${head}")
        set(in_block TRUE)
        string(APPEND line "${l} ")
      elseif(in_block)
        string(APPEND line "${l}")
        break()
      endif()
    endforeach()
  else()
    file(GLOB_RECURSE txt "${BUILD_DIR}/*/CMakeFiles/${target}.dir/link.txt")
    if(txt)
      list(GET txt 0 f)
      file(READ "${f}" line)
    endif()
  endif()
  if(line STREQUAL "")
    message(FATAL_ERROR "layering: no link line found for ${target} in ${BUILD_DIR} (is it built?)")
  endif()
  set(${out} "${line}" PARENT_SCOPE)
endfunction()

set(failures 0)
foreach(rule IN LISTS rules)
  string(REPLACE "|" ";" parts "${rule}")
  list(GET parts 0 target)
  list(GET parts 1 allowed)
  list(GET parts 2 banned_so)
  string(REPLACE "," ";" allowed "${allowed}")
  string(REPLACE "," ";" banned_so "${banned_so}")
  link_line(${target} line)
  set(binary "${BIN_DIR}/${target}")
  if(target MATCHES "^lib:(.*)$")
    set(binary "${BUILD_DIR}/lib/lib${CMAKE_MATCH_1}.so")
    # A shared library is made of object files: each must come from an allowed library.
    string(REGEX MATCHALL "CMakeFiles/[A-Za-z0-9_]+\\.dir/" dirs "${line}")
    list(REMOVE_DUPLICATES dirs)
    foreach(d IN LISTS dirs)
      string(REGEX REPLACE "^CMakeFiles/(.*)\\.dir/$" "\\1" name "${d}")
      list(FIND allowed ${name} idx)
      if(idx EQUAL -1)
        message(SEND_ERROR "layering: ${target} contains objects of ${name}, which it must not (allowed: ${allowed})")
        math(EXPR failures "${failures} + 1")
      endif()
    endforeach()
  endif()
  string(REGEX MATCHALL "libtessera_[A-Za-z0-9_]+\\.a" libs "${line}")
  list(REMOVE_DUPLICATES libs)
  set(linked "")
  foreach(lib IN LISTS libs)
    string(REGEX REPLACE "^lib(.*)\\.a$" "\\1" name "${lib}")
    list(APPEND linked ${name})
    list(FIND allowed ${name} idx)
    if(idx EQUAL -1)
      message(SEND_ERROR "layering: ${target} links ${name}, which it must not (allowed: ${allowed})")
      math(EXPR failures "${failures} + 1")
    endif()
  endforeach()
  message(STATUS "${target} links: ${linked}")

  execute_process(COMMAND ldd "${binary}" OUTPUT_VARIABLE ldd_out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(SEND_ERROR "layering: ldd ${binary} failed (${rc})")
    math(EXPR failures "${failures} + 1")
  endif()
  string(REPLACE "\n" ";" ldd_lines "${ldd_out}")
  foreach(so IN LISTS banned_so)
    foreach(l IN LISTS ldd_lines)
      if(l MATCHES "lib${so}[.-]")
        string(STRIP "${l}" l)
        message(SEND_ERROR "layering: ${target} loads ${l} (no lib${so} allowed)")
        math(EXPR failures "${failures} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()

if(failures GREATER 0)
  message(FATAL_ERROR "layering: ${failures} violation(s)")
endif()
message(STATUS "layering: every rule holds")
