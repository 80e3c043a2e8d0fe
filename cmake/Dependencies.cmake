# Every external dependency, found once. tests/run.sh installs the Debian packages that provide them.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark QUIET)
find_package(nlohmann_json 3.10 QUIET)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(YAMLCPP REQUIRED IMPORTED_TARGET yaml-cpp)  # placement rules (model/placement)
find_package(OpenSSL REQUIRED)
find_package(Boost 1.74 REQUIRED)          # header-only parts: Asio, Beast
find_package(msgpack-cxx QUIET)
if(NOT TARGET msgpack-cxx)
  add_library(msgpack-cxx INTERFACE IMPORTED)  # header-only msgpack-c (C++), /usr/include
endif()
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
endif()
# cppzmq is header-only (zmq.hpp); wrap it with libzmq.
add_library(tessera_zmq INTERFACE)
target_link_libraries(tessera_zmq INTERFACE PkgConfig::ZMQ)
target_compile_definitions(tessera_zmq INTERFACE ZMQ_BUILD_DRAFT_API=0)
